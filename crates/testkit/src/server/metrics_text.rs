//! Reading `/metrics`: one plain HTTP/1.1 GET, and one sample out of the
//! Prometheus text.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::TestServer;

/// `GET path` over a fresh connection: (status line, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The server's `/metrics` text; panics unless it answers 200.
pub async fn scrape(server: &TestServer) -> String {
    let (status, body) = http_get(server.metrics_addr.unwrap(), "/metrics").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    body
}

/// The value of the sample `name{labels}` (labels in any order), if any.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
            let mut found: Vec<(&str, &str)> = rest
                .trim_end_matches('}')
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap();
                    (k, v.trim_matches('"'))
                })
                .collect();
            found.sort();
            let mut wanted = labels.to_vec();
            wanted.sort();
            (n == name && found == wanted).then(|| value.parse().unwrap())
        })
}
