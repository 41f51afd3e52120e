//! The test server and small helpers shared by the modules of this test
//! binary.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use prost::bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::Code;
use tonic::transport::Channel;
use uuid::Uuid;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap::server::{ServeConfig, ServeError, ServerParts};
use uuidmap::store::Io;
use uuidmap::writer::FsyncPolicy;

pub struct TestServer {
    pub addr: SocketAddr,
    /// Where `GET /metrics` answers, when the config turned metrics on.
    pub metrics_addr: Option<SocketAddr>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

pub const MAX_BATCH_KEYS: usize = 100;
pub const MAX_WRITE_OPS: usize = 10;
pub const MAX_FILTER_VALUES: usize = 64;

pub fn config(dir: &Path) -> ServeConfig {
    let mut c = ServeConfig::new(dir);
    c.fsync = FsyncPolicy::Never;
    c.limits.max_batch_keys = MAX_BATCH_KEYS;
    c.limits.max_write_ops = MAX_WRITE_OPS;
    c.limits.max_wait = Duration::from_millis(300);
    c.limits.max_filter_values = MAX_FILTER_VALUES;
    c
}

impl TestServer {
    pub async fn start(dir: &Path) -> TestServer {
        TestServer::start_with(config(dir)).await
    }

    /// A server with its own configuration (its `listen` is ignored; its
    /// `metrics_listen`, e.g. `127.0.0.1:0`, is bound here).
    pub async fn start_with(config: ServeConfig) -> TestServer {
        TestServer::start_on(config, None).await
    }

    /// [`TestServer::start_with`], with the data directory on `io` (a
    /// simulated disk) when given.
    pub async fn start_on(config: ServeConfig, io: Option<Arc<dyn Io>>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = match config.metrics_listen {
            Some(a) => Some(TcpListener::bind(a).await.unwrap()),
            None => None,
        };
        let metrics_addr = metrics.as_ref().map(|m| m.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let mut parts = ServerParts::new(listener, config).metrics(metrics);
        if let Some(io) = io {
            parts = parts.io(io);
        }
        let task = tokio::spawn(parts.serve(async {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            metrics_addr,
            stop,
            task,
        }
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    pub async fn client(&self) -> UuidMapClient<Channel> {
        UuidMapClient::new(self.channel().await)
    }

    /// Graceful stop; the server's result.
    pub async fn stop(self) -> Result<(), ServeError> {
        let _ = self.stop.send(());
        self.task.await.unwrap()
    }
}

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

/// The gRPC status of a call made over a bare HTTP/2 connection, which
/// (unlike tonic's client) does not enforce `grpc-timeout` itself: the
/// answer is the server's. `body`: the gRPC-framed request, or `None` to
/// send none (the call then waits for it).
pub async fn raw_status(
    server: &TestServer,
    path: &str,
    timeout: &str,
    body: Option<Bytes>,
) -> (Code, String) {
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(format!("http://{}{path}", server.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", timeout)
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    if let Some(body) = body {
        send.send_data(body, true).unwrap();
    }
    let response = response.await.unwrap();
    let (head, mut body) = response.into_parts();
    let status_of = |h: &http::HeaderMap| {
        h.get("grpc-status").map(|s| {
            let code = Code::from(s.to_str().unwrap().parse::<i32>().unwrap());
            let message = h
                .get("grpc-message")
                .map(|m| percent_decode(m.to_str().unwrap()))
                .unwrap_or_default();
            (code, message)
        })
    };
    if let Some(s) = status_of(&head.headers) {
        return s;
    }
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    drop(send);
    status_of(&trailers).expect("a grpc-status in the trailers")
}

/// A `grpc-message` value as text (gRPC percent-encodes it).
pub fn percent_decode(s: &str) -> String {
    let mut out = Vec::new();
    let mut bytes = s.bytes();
    while let Some(c) = bytes.next() {
        if c == b'%' {
            let hex: String = bytes.by_ref().take(2).map(char::from).collect();
            out.push(u8::from_str_radix(&hex, 16).unwrap());
        } else {
            out.push(c);
        }
    }
    String::from_utf8(out).unwrap()
}

/// `message` in gRPC's length-prefixed framing, uncompressed.
pub fn framed(message: &impl Message) -> Bytes {
    let mut out = BytesMut::new();
    out.put_u8(0);
    out.put_u32(message.encoded_len() as u32);
    message.encode(&mut out).unwrap();
    out.freeze()
}

pub fn b(u: Uuid) -> Bytes {
    Bytes::copy_from_slice(u.as_bytes())
}

pub fn u(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

pub fn put_op(k: Uuid, v: Uuid) -> pb::WriteOp {
    pb::WriteOp {
        op: Some(pb::write_op::Op::Put(pb::PutOp {
            key: b(k),
            value: b(v),
        })),
    }
}

/// The path of every RPC of both services.
pub const RPCS: [&str; 12] = [
    "/uuidmap.v1.UuidMap/Get",
    "/uuidmap.v1.UuidMap/BatchGet",
    "/uuidmap.v1.UuidMap/Put",
    "/uuidmap.v1.UuidMap/Delete",
    "/uuidmap.v1.UuidMap/CompareAndSet",
    "/uuidmap.v1.UuidMap/Write",
    "/uuidmap.v1.UuidMap/Scan",
    "/uuidmap.v1.UuidMap/WaitFor",
    "/uuidmap.v1.UuidMap/Watch",
    "/uuidmap.v1.UuidMap/Stats",
    "/uuidmap.v1.UuidMap/Ping",
    "/uuidmap.v1.UuidMapAdmin/Snapshot",
];

/// Calls `path` with `request`'s bytes as the request message (empty bytes
/// are the default message of every request type); the first response
/// message's bytes. A streaming RPC is called the same way: its status
/// ends the call as for a unary one.
pub async fn raw_call(
    channel: &Channel,
    path: &'static str,
    request: tonic::Request<Vec<u8>>,
) -> Result<Vec<u8>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    grpc.unary::<Vec<u8>, Vec<u8>, _>(
        request,
        tonic::codegen::http::uri::PathAndQuery::from_static(path),
        RawCodec,
    )
    .await
    .map(|r| r.into_inner())
}

/// Sends raw bytes as the request message, so that the server sees bytes
/// that are not a protobuf encoding at all.
#[derive(Clone, Default)]
pub struct RawCodec;

pub struct RawEncoder;
pub struct RawDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        prost::bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let n = prost::bytes::Buf::remaining(src);
        Ok(Some(prost::bytes::Buf::copy_to_bytes(src, n).to_vec()))
    }
}
