//! Calls the generated client cannot make: raw bytes as the request
//! message (so that the server sees bytes that are no protobuf at all), and
//! bare HTTP/2, which unlike tonic's client does not enforce `grpc-timeout`
//! itself, so the deadline answer is the server's.

use prost::Message;
use prost::bytes::{BufMut, Bytes, BytesMut};
use tonic::Code;
use tonic::transport::Channel;

use super::TestServer;

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
    let answer = RawConnection::open(server.addr)
        .await
        .call(path, timeout, body)
        .await;
    (answer.code, answer.status_message)
}

/// A bare HTTP/2 connection to the server, for gRPC calls whose deadline
/// only the server keeps: tonic's client starts its own `grpc-timeout`
/// timer when a call is made, and on two loaded cores it can fire before
/// the server's answer arrives. Clones share the connection; calls on it
/// open their streams in the order they are made.
#[derive(Clone)]
pub struct RawConnection {
    addr: std::net::SocketAddr,
    send: h2::client::SendRequest<Bytes>,
}

/// A call's answer over a [`RawConnection`].
#[derive(Debug)]
pub struct RawAnswer {
    /// The status code (OK when the call succeeded).
    pub code: Code,
    /// The status message, decoded.
    pub status_message: String,
    /// The first response message's bytes (gRPC framing removed), if any.
    pub message: Option<Bytes>,
}

impl RawConnection {
    /// Connects to `addr`.
    pub async fn open(addr: std::net::SocketAddr) -> RawConnection {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, connection) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(connection);
        RawConnection { addr, send }
    }

    /// Calls `path` with `grpc-timeout: timeout` (empty: no deadline) and
    /// the gRPC-framed `body` (`None`: none is sent, and the call waits for
    /// it).
    pub async fn call(&self, path: &str, timeout: &str, body: Option<Bytes>) -> RawAnswer {
        let mut client = self.send.clone().ready().await.unwrap();
        let mut request = http::Request::post(format!("http://{}{path}", self.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if !timeout.is_empty() {
            request = request.header("grpc-timeout", timeout);
        }
        let (response, mut send) = client
            .send_request(request.body(()).unwrap(), false)
            .unwrap();
        if let Some(body) = body {
            // The server may answer before the body is sent (a deadline of
            // a nanosecond is past on arrival) and then reset the stream;
            // the body is then refused as sent on a closed stream, and the
            // answer below is what counts.
            let _ = send.send_data(body, true);
        }
        let response = response.await.unwrap();
        let (head, mut body) = response.into_parts();
        if let Some((code, status_message)) = status_of(&head.headers) {
            return RawAnswer {
                code,
                status_message,
                message: None,
            };
        }
        let mut data = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await.unwrap().expect("trailers");
        drop(send);
        let (code, status_message) = status_of(&trailers).expect("a grpc-status in the trailers");
        // The first message: a compression flag, a 4-byte length, the bytes.
        let message = (data.len() >= 5).then(|| {
            let len = u32::from_be_bytes(data[1..5].try_into().unwrap()) as usize;
            data.freeze().slice(5..5 + len)
        });
        RawAnswer {
            code,
            status_message,
            message,
        }
    }
}

/// The gRPC status in `headers` (the response head of a trailers-only
/// answer, or the trailers), if one is there.
fn status_of(headers: &http::HeaderMap) -> Option<(Code, String)> {
    headers.get("grpc-status").map(|s| {
        let code = Code::from(s.to_str().unwrap().parse::<i32>().unwrap());
        let message = headers
            .get("grpc-message")
            .map(|m| percent_decode(m.to_str().unwrap()))
            .unwrap_or_default();
        (code, message)
    })
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

/// [`RawCodec`]'s encoder.
pub struct RawEncoder;
/// [`RawCodec`]'s decoder.
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

/// A call to `method` admitted on its headers and then stalled: the body
/// never comes, so the handler waits (holding the call's permit) until the
/// returned stream is dropped.
pub async fn stalled_call(addr: std::net::SocketAddr, method: &str) -> Stalled {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(format!("http://{addr}/uuidmap.v1.UuidMap/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, body) = client.send_request(request, false).unwrap();
    // Keep the connection's client alive as long as the stream.
    tokio::spawn(async move {
        let _client = client;
        let _ = response.await;
    });
    Stalled(body)
}

/// A stalled call; dropping it cancels the call (RST_STREAM), as a client
/// that gives up does.
pub struct Stalled(h2::SendStream<Bytes>);

impl Drop for Stalled {
    fn drop(&mut self) {
        self.0.send_reset(h2::Reason::CANCEL);
    }
}
