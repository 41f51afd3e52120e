//! Bearer tokens end to end: the real server with a tokens file, called
//! through the generated client with and without `authorization` metadata.

use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request};
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_admin_client::UuidMapAdminClient;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap::server::{ServeError, serve_on};
use uuidmap_testkit::server::{RPCS, TestServer, b, config, raw_call, u};

const READ_TOKEN: &str = "r3ad-only-token-7f1c2a9e";
const WRITE_TOKEN: &str = "wr1te-token-5b8d0e4c6a";
const ADMIN_TOKEN: &str = "adm1n-token-93c0d7e2b4";

async fn server_with_tokens(dir: &std::path::Path) -> TestServer {
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        format!("# uuidmap tokens\nread  {READ_TOKEN}\nwrite {WRITE_TOKEN}\nadmin {ADMIN_TOKEN}\n"),
    )
    .unwrap();
    let mut c = config(&dir.join("data"));
    c.tokens_file = Some(tokens);
    TestServer::start_with(c).await
}

/// Which `authorization` a call carries.
#[derive(Clone, Copy, Debug)]
enum Caller {
    NoToken,
    BadToken,
    Read,
    Write,
    Admin,
}

impl Caller {
    fn request<T>(self, message: T) -> Request<T> {
        let mut r = Request::new(message);
        let token = match self {
            Caller::NoToken => return r,
            Caller::BadToken => "not-a-configured-token-123",
            Caller::Read => READ_TOKEN,
            Caller::Write => WRITE_TOKEN,
            Caller::Admin => ADMIN_TOKEN,
        };
        let value: MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
        r.metadata_mut().insert("authorization", value);
        r
    }
}

fn code<T>(r: Result<tonic::Response<T>, tonic::Status>) -> Code {
    match r {
        Ok(_) => Code::Ok,
        Err(s) => s.code(),
    }
}

async fn call_get(
    ch: &Channel,
    who: Caller,
) -> Result<tonic::Response<pb::GetResponse>, tonic::Status> {
    UuidMapClient::new(ch.clone())
        .get(who.request(pb::GetRequest {
            key: b(u(1)),
            min_lsn: 0,
            ..Default::default()
        }))
        .await
}

async fn call_put(
    ch: &Channel,
    who: Caller,
) -> Result<tonic::Response<pb::PutResponse>, tonic::Status> {
    UuidMapClient::new(ch.clone())
        .put(who.request(pb::PutRequest {
            key: b(u(1)),
            value: b(u(2)),
        }))
        .await
}

async fn call_snapshot(
    ch: &Channel,
    who: Caller,
) -> Result<tonic::Response<pb::SnapshotResponse>, tonic::Status> {
    UuidMapAdminClient::new(ch.clone())
        .snapshot(who.request(pb::SnapshotRequest {}))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_matrix_answers_the_documented_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_tokens(dir.path()).await;
    let ch = server.channel().await;
    use Code::{Ok as OK, PermissionDenied as DENIED, Unauthenticated as UNAUTH};
    // caller, then Get (read), Put (write), admin Snapshot.
    let matrix = [
        (Caller::NoToken, [UNAUTH, UNAUTH, UNAUTH]),
        (Caller::BadToken, [UNAUTH, UNAUTH, UNAUTH]),
        (Caller::Read, [OK, DENIED, DENIED]),
        (Caller::Write, [OK, OK, OK]),
    ];
    for (who, [get, put, snapshot]) in matrix {
        assert_eq!(code(call_get(&ch, who).await), get, "{who:?} Get");
        assert_eq!(code(call_put(&ch, who).await), put, "{who:?} Put");
        assert_eq!(
            code(call_snapshot(&ch, who).await),
            snapshot,
            "{who:?} Snapshot"
        );
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_say_what_is_wrong_without_repeating_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_tokens(dir.path()).await;
    let ch = server.channel().await;

    let missing = call_get(&ch, Caller::NoToken).await.unwrap_err();
    assert!(
        missing.message().contains("authorization: Bearer <token>"),
        "{}",
        missing.message()
    );
    let bad = call_get(&ch, Caller::BadToken).await.unwrap_err();
    assert_eq!(
        bad.message(),
        "the bearer token is not valid on this server"
    );
    let denied = call_put(&ch, Caller::Read).await.unwrap_err();
    assert_eq!(
        denied.message(),
        "uuidmap.v1.UuidMap/Put needs a token with the write role; this token has the read role"
    );
    for s in [&missing, &bad, &denied] {
        assert!(!s.message().contains(READ_TOKEN) && !s.message().contains("not-a-configured"));
    }

    // Another scheme than Bearer.
    let mut r = Request::new(pb::PingRequest {});
    r.metadata_mut().insert(
        "authorization",
        format!("Basic {READ_TOKEN}").parse().unwrap(),
    );
    let s = UuidMapClient::new(ch.clone()).ping(r).await.unwrap_err();
    assert_eq!(s.code(), Code::Unauthenticated);
    assert!(s.message().contains("Bearer <token>"), "{}", s.message());
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_rpc_takes_a_read_token_and_every_write_rpc_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_tokens(dir.path()).await;
    let ch = server.channel().await;
    let mut c = UuidMapClient::new(ch.clone());
    let r = Caller::Read;
    let not_auth = |code: Code| code != Code::Unauthenticated && code != Code::PermissionDenied;

    // Reads (Scan and Watch may not be served yet: any answer but an auth
    // refusal shows the token was accepted).
    assert_eq!(code(c.ping(r.request(pb::PingRequest {})).await), Code::Ok);
    assert_eq!(
        code(c.stats(r.request(pb::StatsRequest {})).await),
        Code::Ok
    );
    let keys: Vec<u8> = u(1).as_bytes().to_vec();
    let batch = c
        .batch_get(r.request(pb::BatchGetRequest {
            keys: keys.into(),
            min_lsn: 0,
            ..Default::default()
        }))
        .await;
    assert_eq!(code(batch), Code::Ok);
    let wait = c.wait_for(r.request(pb::WaitForRequest { lsn: 0 })).await;
    assert_eq!(code(wait), Code::Ok);
    let scan = c.scan(r.request(pb::ScanRequest::default())).await;
    assert!(not_auth(code(scan)));
    let watch = c.watch(r.request(pb::WatchRequest::default())).await;
    assert!(not_auth(code(watch)));

    // Writes.
    let del = c
        .delete(r.request(pb::DeleteRequest { key: b(u(1)) }))
        .await;
    assert_eq!(code(del), Code::PermissionDenied);
    let cas = c
        .compare_and_set(r.request(pb::CompareAndSetRequest {
            key: b(u(1)),
            expected: None,
            new_value: Some(b(u(3))),
        }))
        .await;
    assert_eq!(code(cas), Code::PermissionDenied);
    let write = c
        .write(r.request(pb::WriteRequest {
            ops: vec![uuidmap_testkit::server::put_op(u(1), u(3))],
        }))
        .await;
    assert_eq!(code(write), Code::PermissionDenied);
    server.stop().await.unwrap();
}

/// `grpc.health.v1.HealthCheckRequest`, declared here so the test does not
/// depend on the health crate.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_needs_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_tokens(dir.path()).await;
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    grpc.ready().await.unwrap();
    let answer: Result<tonic::Response<HealthCheckResponse>, _> = grpc
        .unary(
            Request::new(HealthCheckRequest::default()),
            http::uri::PathAndQuery::from_static("/grpc.health.v1.Health/Check"),
            tonic_prost::ProstCodec::default(),
        )
        .await;
    match answer {
        // Served: SERVING (1).
        Ok(r) => assert_eq!(r.into_inner().status, 1),
        // Not wired into this build: the router's answer, not auth's.
        Err(s) => assert_eq!(s.code(), Code::Unimplemented, "{s:?}"),
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_bad_tokens_file_stops_the_start_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "read 0123456789abcdef\nsuperuser 0123456789abcdeg\n",
    )
    .unwrap();
    let mut c = config(&dir.path().join("data"));
    c.tokens_file = Some(tokens);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = serve_on(listener, c.clone(), async {}).await.unwrap_err();
    assert!(matches!(e, ServeError::Tokens(_)), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("tokens, line 2") && msg.contains("read, write or admin"),
        "{msg}"
    );
    assert!(!msg.contains("0123456789abcdeg"), "{msg}");

    c.tokens_file = Some(dir.path().join("missing-tokens"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = serve_on(listener, c, async {}).await.unwrap_err();
    assert!(e.to_string().contains("missing-tokens"), "{e}");
    // Refused before the data directory was created.
    assert!(!dir.path().join("data").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_refuses_a_missing_or_unknown_token_and_every_write_rpc_a_read_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_tokens(dir.path()).await;
    let ch = server.channel().await;
    for path in RPCS {
        for who in [Caller::NoToken, Caller::BadToken] {
            let status = raw_call(&ch, path, who.request(Vec::new()))
                .await
                .expect_err(path);
            assert_eq!(
                status.code(),
                Code::Unauthenticated,
                "{who:?} {path}: {status:?}"
            );
        }
        let method = path.rsplit('/').next().unwrap();
        if ["Put", "Delete", "CompareAndSet", "Write", "Snapshot"].contains(&method) {
            let status = raw_call(&ch, path, Caller::Read.request(Vec::new()))
                .await
                .expect_err(path);
            assert_eq!(status.code(), Code::PermissionDenied, "{path}: {status:?}");
        }
    }
    server.stop().await.unwrap();
}

/// The membership-changing methods of the cluster service, and one it may
/// gain (a method the table lacks falls to the service's default: admin).
const MEMBERSHIP: [&str; 4] = [
    "/uuidmap.v1.UuidMapCluster/AddLearner",
    "/uuidmap.v1.UuidMapCluster/Promote",
    "/uuidmap.v1.UuidMapCluster/Remove",
    "/uuidmap.v1.UuidMapCluster/TransferLeader",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_need_an_admin_token_and_a_write_token_is_not_enough() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_tokens(dir.path()).await;
    let ch = server.channel().await;
    for path in MEMBERSHIP {
        for who in [Caller::Read, Caller::Write] {
            let status = raw_call(&ch, path, who.request(Vec::new()))
                .await
                .expect_err(path);
            assert_eq!(status.code(), Code::PermissionDenied, "{who:?} {path}");
            assert!(status.message().contains("admin role"), "{status:?}");
        }
        // Past auth: a single node answers that it is in no group (or
        // that it lacks the method).
        let status = raw_call(&ch, path, Caller::Admin.request(Vec::new()))
            .await
            .expect_err(path);
        assert!(
            matches!(
                status.code(),
                Code::FailedPrecondition | Code::Unimplemented
            ),
            "{path}: {status:?}"
        );
    }
    // The admin token does everything the write token does.
    let mut c = UuidMapClient::new(ch.clone());
    c.put(Caller::Admin.request(pb::PutRequest {
        key: b(u(1)),
        value: b(u(2)),
    }))
    .await
    .expect("admin implies write");
    let status = raw_call(
        &ch,
        "/uuidmap.v1.UuidMapCluster/Status",
        Caller::Read.request(Vec::new()),
    )
    .await
    .expect_err("a single node is in no group");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    server.stop().await.unwrap();
}
