//! The RESP front end end to end: a real server (gRPC and RESP over one
//! index) in the test's runtime, spoken to over TCP with RESP bytes. One
//! test binary, a module per concern.

mod auth;
mod bad_input;
mod commands;
mod group;
mod pipelining;
mod tls;

use std::net::SocketAddr;

use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use uuidmap_resp::RespFrontEnd;
use uuidmap_server::{ServeConfig, ServeError, ServerParts};

/// A server with the RESP port on: where each protocol answers, and how to
/// stop it.
pub struct RespServer {
    /// The RESP port.
    pub addr: SocketAddr,
    /// The gRPC port.
    pub grpc: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl RespServer {
    /// A server over `dir` with the test kit's configuration, changed by
    /// `f`.
    pub async fn start(dir: &std::path::Path, f: impl FnOnce(&mut ServeConfig)) -> RespServer {
        let mut config = uuidmap_testkit::server::config(dir);
        f(&mut config);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc = listener.local_addr().unwrap();
        let resp =
            RespFrontEnd::on(TcpListener::bind("127.0.0.1:0").await.unwrap(), &config).unwrap();
        let addr = resp.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let parts = ServerParts::new(listener, config).front_end(Box::new(resp));
        let task = tokio::spawn(parts.serve(async {
            let _ = stopped.await;
        }));
        RespServer {
            addr,
            grpc,
            stop,
            task,
        }
    }

    /// Graceful stop; the server's result.
    pub async fn stop(self) -> Result<(), ServeError> {
        let _ = self.stop.send(());
        self.task.await.unwrap()
    }

    /// A new connection.
    pub async fn connect(&self) -> Conn {
        Conn::connect(self.addr).await
    }
}

/// A data directory and a server over it.
pub async fn server() -> (TempDir, RespServer) {
    let dir = tempfile::tempdir().unwrap();
    let server = RespServer::start(dir.path(), |_| {}).await;
    (dir, server)
}

/// A RESP2 answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+text`.
    Simple(String),
    /// `-text`.
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$n` and bytes, or `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*n` and answers, or `*-1`.
    Array(Option<Vec<Reply>>),
    /// RESP3's `_`.
    Null,
    /// RESP3's `%n` and its keys and values, in order.
    Map(Vec<Reply>),
}

impl Reply {
    /// A bulk string's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Reply::Bulk(Some(b)) => b,
            other => panic!("not a bulk string: {other:?}"),
        }
    }

    /// An array's answers.
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(a)) => a,
            other => panic!("not an array: {other:?}"),
        }
    }

    /// An error's text.
    pub fn error(&self) -> &str {
        match self {
            Reply::Error(e) => e,
            other => panic!("not an error: {other:?}"),
        }
    }
}

/// A bulk string answer.
pub fn bulk(b: &[u8]) -> Reply {
    Reply::Bulk(Some(b.to_vec()))
}

/// `+OK`.
pub fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// The answer at the start of `buf` and its length; `None`: incomplete.
fn parse(buf: &[u8]) -> Option<(Reply, usize)> {
    let cr = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[1..cr]).unwrap();
    let next = cr + 2;
    match buf[0] {
        b'+' => Some((Reply::Simple(line.into()), next)),
        b'-' => Some((Reply::Error(line.into()), next)),
        b':' => Some((Reply::Int(line.parse().unwrap()), next)),
        b'$' => {
            let n: i64 = line.parse().unwrap();
            if n < 0 {
                return Some((Reply::Bulk(None), next));
            }
            let end = next + n as usize;
            (buf.len() >= end + 2).then(|| (bulk(&buf[next..end]), end + 2))
        }
        b'*' | b'%' => {
            let n: i64 = line.parse().unwrap();
            if n < 0 {
                return Some((Reply::Array(None), next));
            }
            let n = if buf[0] == b'%' { 2 * n } else { n };
            let mut at = next;
            let mut items = Vec::new();
            for _ in 0..n {
                let (r, len) = parse(&buf[at..])?;
                items.push(r);
                at += len;
            }
            match buf[0] {
                b'%' => Some((Reply::Map(items), at)),
                _ => Some((Reply::Array(Some(items)), at)),
            }
        }
        b'_' => Some((Reply::Null, next)),
        other => panic!("not RESP: {:?}", char::from(other)),
    }
}

/// One client connection, speaking RESP2.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> Conn {
        Conn {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    /// The bytes of a command.
    pub fn encode(args: &[&[u8]]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// Sends raw bytes.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Sends one command.
    pub async fn send(&mut self, args: &[&[u8]]) {
        self.send_raw(&Conn::encode(args)).await;
    }

    /// The next answer; `None` when the server closed the connection.
    pub async fn read(&mut self) -> Option<Reply> {
        loop {
            if let Some((r, n)) = (!self.buf.is_empty()).then(|| parse(&self.buf)).flatten() {
                self.buf.drain(..n);
                return Some(r);
            }
            let mut chunk = [0u8; 64 << 10];
            let n = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                self.stream.read(&mut chunk),
            )
            .await
            .expect("an answer within 10 s")
            .unwrap_or(0);
            if n == 0 {
                assert!(
                    self.buf.is_empty(),
                    "closed inside an answer: {:?}",
                    self.buf
                );
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends `args` and reads the answer.
    pub async fn call(&mut self, args: &[&[u8]]) -> Reply {
        self.send(args).await;
        self.read()
            .await
            .expect("an answer, not a closed connection")
    }
}
