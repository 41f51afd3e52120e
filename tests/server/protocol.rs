//! The protocol's edges, as other gRPC stacks meet them: oversized
//! requests, the server's own timeouts, reflection errors, unknown methods,
//! gzip, and empty batches. Each answer must match the README's error
//! table.

use prost::bytes::{BufMut, Bytes, BytesMut};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::codec::CompressionEncoding::Gzip;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_admin_client::UuidMapAdminClient;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap_testkit::server::*;

/// A server with the default limits (the shared test config lowers them).
async fn default_limits_server(dir: &std::path::Path) -> TestServer {
    let mut c = config(dir);
    c.limits = uuidmap::server::config::Limits::default();
    TestServer::start_with(c).await
}

fn keys(n: usize) -> Bytes {
    let mut out = BytesMut::with_capacity(n * 16);
    for i in 0..n {
        out.put_slice(u(i as u128 + 1).as_bytes());
    }
    out.freeze()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_are_invalid_argument_and_name_the_limit_they_passed() {
    let dir = tempfile::tempdir().unwrap();
    let server = default_limits_server(dir.path()).await;
    let channel = server.channel().await;
    let mut c = UuidMapClient::new(channel.clone())
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20);
    let limits = uuidmap::server::config::Limits::default();

    // Past the decoder's limit (tonic's own check) and past ours alone.
    for n in [500_000, limits.max_batch_keys + 1] {
        let e = c
            .batch_get(pb::BatchGetRequest {
                keys: keys(n),
                min_lsn: 0,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{n} keys: {e:?}");
        assert!(
            e.message().contains("`max_batch_keys`")
                && e.message().contains(&limits.max_batch_keys.to_string()),
            "{n} keys: {}",
            e.message()
        );
    }
    for n in [200_000, limits.max_write_ops + 1] {
        let ops = (0..n)
            .map(|i| put_op(u(i as u128 + 1), u(7)))
            .collect::<Vec<_>>();
        let e = c.write(pb::WriteRequest { ops }).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{n} ops: {e:?}");
        assert!(
            e.message().contains("`max_write_ops`"),
            "{n} ops: {}",
            e.message()
        );
    }
    for n in [500_000, limits.max_filter_values + 1] {
        let e = match c
            .scan(pb::ScanRequest {
                values: keys(n),
                ..Default::default()
            })
            .await
        {
            Err(e) => e,
            Ok(stream) => stream.into_inner().next().await.unwrap().unwrap_err(),
        };
        assert_eq!(e.code(), Code::InvalidArgument, "{n} values: {e:?}");
        assert!(
            e.message().contains("`max_filter_values`"),
            "{n} values: {}",
            e.message()
        );
    }
    // A batch at the limit decodes and is answered.
    let full = c
        .batch_get(pb::BatchGetRequest {
            keys: keys(limits.max_batch_keys),
            min_lsn: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(full.values.len(), limits.max_batch_keys * 16);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_still_running_at_its_deadline_is_deadline_exceeded_never_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.fsync = uuidmap::writer::FsyncPolicy::Always;
    let server = TestServer::start_with(c).await;

    // A Put whose request message never comes: its handler waits until the
    // deadline. tonic's own timer would answer CANCELLED "Timeout expired".
    let (code, message) = raw_status(&server, "/uuidmap.v1.UuidMap/Put", "200m", None).await;
    assert_eq!(code, Code::DeadlineExceeded, "{message}");
    assert!(
        message.contains("may or may not have been applied"),
        "{message}"
    );
    let (code, message) = raw_status(&server, "/uuidmap.v1.UuidMap/Get", "50m", None).await;
    assert_eq!(code, Code::DeadlineExceeded, "{message}");
    assert!(message.contains("nothing was changed"), "{message}");

    // Writes and snapshots at deadlines shorter than an fsync: each is
    // answered OK or DEADLINE_EXCEEDED, never CANCELLED; and each Put
    // answered OK is there.
    let mut acknowledged = Vec::new();
    for (i, timeout) in ["1n", "100u", "1m", "2m", "5m"]
        .iter()
        .cycle()
        .take(40)
        .enumerate()
    {
        let key = u(i as u128 + 1);
        let put = framed(&pb::PutRequest {
            key: b(key),
            value: b(u(9)),
        });
        let (code, message) =
            raw_status(&server, "/uuidmap.v1.UuidMap/Put", timeout, Some(put)).await;
        match code {
            Code::Ok => acknowledged.push(key),
            Code::DeadlineExceeded => assert!(
                message.contains("may or may not have been applied"),
                "{message}"
            ),
            other => panic!("a Put at {timeout} was answered {other:?}: {message}"),
        }
    }
    for timeout in ["1m", "20m"] {
        let (code, message) = raw_status(
            &server,
            "/uuidmap.v1.UuidMapAdmin/Snapshot",
            timeout,
            Some(framed(&pb::SnapshotRequest {})),
        )
        .await;
        assert!(
            matches!(code, Code::Ok | Code::DeadlineExceeded),
            "a Snapshot at {timeout} was answered {code:?}: {message}"
        );
    }
    let mut client = server.client().await;
    for key in acknowledged {
        let got = client
            .get(pb::GetRequest {
                key: b(key),
                min_lsn: 0,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.value, Some(b(u(9))));
    }
    server.stop().await.unwrap();
}

/// One reflection stream of API `$api`: an unknown symbol, an unknown
/// file, then a service list. The first two are answered in the stream
/// with NOT_FOUND, and the stream goes on to answer the third.
macro_rules! reflect_unknown_then_list {
    ($api:ident, $channel:expr) => {{
        use tonic_reflection::pb::$api::ServerReflectionRequest;
        use tonic_reflection::pb::$api::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::$api::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::$api::server_reflection_response::MessageResponse;
        let request = |m| ServerReflectionRequest {
            host: String::new(),
            message_request: Some(m),
        };
        let requests = vec![
            request(MessageRequest::FileContainingSymbol(
                "no.such.Symbol".into(),
            )),
            request(MessageRequest::FileByFilename("no/such.proto".into())),
            request(MessageRequest::ListServices(String::new())),
        ];
        let mut answers = ServerReflectionClient::new($channel)
            .server_reflection_info(tokio_stream::iter(requests))
            .await
            .unwrap()
            .into_inner();
        for asked in ["no.such.Symbol", "no/such.proto"] {
            match answers.next().await.unwrap().unwrap().message_response {
                Some(MessageResponse::ErrorResponse(e)) => {
                    assert_eq!(e.error_code, Code::NotFound as i32);
                    assert!(e.error_message.contains(asked), "{}", e.error_message);
                }
                other => panic!("{asked}: not an error response: {other:?}"),
            }
        }
        match answers.next().await.unwrap().unwrap().message_response {
            Some(MessageResponse::ListServicesResponse(l)) => {
                assert!(l.service.iter().any(|s| s.name == "uuidmap.v1.UuidMap"))
            }
            other => panic!("not a service list: {other:?}"),
        }
        assert!(answers.next().await.is_none(), "the stream ends cleanly");
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_answers_an_unknown_symbol_in_the_stream_and_keeps_it_open() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    reflect_unknown_then_list!(v1, server.channel().await);
    reflect_unknown_then_list!(v1alpha, server.channel().await);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_method_is_unimplemented_and_names_it_and_the_services() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let channel = server.channel().await;
    let request = || tonic::Request::new(Vec::new());
    let e = raw_call(&channel, "/uuidmap.v1.UuidMap/Frobnicate", request())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(
        e.message().contains("Frobnicate") && e.message().contains("BatchGet"),
        "{}",
        e.message()
    );
    let e = raw_call(&channel, "/acme.Inventory/List", request())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(
        e.message().contains("acme.Inventory")
            && e.message().contains("uuidmap.v1.UuidMap")
            && e.message().contains("uuidmap.v1.UuidMapAdmin"),
        "{}",
        e.message()
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_requests_are_accepted_and_answers_compressed_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let channel = server.channel().await;
    let mut c = UuidMapClient::new(channel.clone())
        .send_compressed(Gzip)
        .accept_compressed(Gzip);
    c.write(pb::WriteRequest {
        ops: (1..=MAX_WRITE_OPS as u128)
            .map(|i| put_op(u(i), u(i + 100)))
            .collect(),
    })
    .await
    .unwrap();
    let answer = c
        .batch_get(pb::BatchGetRequest {
            keys: keys(MAX_WRITE_OPS),
            min_lsn: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        answer
            .metadata()
            .get("grpc-encoding")
            .map(|v| v.to_str().unwrap()),
        Some("gzip"),
        "the answer is compressed when the client accepts gzip"
    );
    let answer = answer.into_inner();
    assert_eq!(&answer.values[16..32], u(102).as_bytes());
    // A client that does not ask gets plain answers.
    let plain = UuidMapClient::new(channel.clone())
        .batch_get(pb::BatchGetRequest {
            keys: keys(1),
            min_lsn: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(plain.metadata().get("grpc-encoding").is_none());
    let mut admin = UuidMapAdminClient::new(channel)
        .send_compressed(Gzip)
        .accept_compressed(Gzip);
    admin.snapshot(pb::SnapshotRequest {}).await.unwrap();
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_batch_get_has_an_empty_answer() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let answer = c
        .batch_get(pb::BatchGetRequest {
            keys: Bytes::new(),
            min_lsn: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(answer.values.is_empty() && answer.found.is_empty());
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_gzip_body_is_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(format!("http://{}/uuidmap.v1.UuidMap/Get", server.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-encoding", "gzip")
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    let mut body = BytesMut::new();
    body.put_u8(1); // compressed
    body.put_u32(8);
    body.put_slice(b"not gzip");
    send.send_data(body.freeze(), true).unwrap();
    let response = response.await.unwrap();
    let (head, mut rest) = response.into_parts();
    let headers = match head.headers.get("grpc-status") {
        Some(_) => head.headers,
        None => {
            while let Some(chunk) = rest.data().await {
                let _ = chunk;
            }
            rest.trailers().await.unwrap().unwrap()
        }
    };
    assert_eq!(
        headers.get("grpc-status").unwrap(),
        &(Code::InvalidArgument as i32).to_string()
    );
    server.stop().await.unwrap();
}
