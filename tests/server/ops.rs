//! Operations end to end: Prometheus `/metrics` scraped over plain HTTP,
//! gRPC health (Check, and Watch across a graceful stop), reflection v1
//! and v1alpha, and both open to callers without a token.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use uuidmap::Key;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_admin_client::UuidMapAdminClient;
use uuidmap_testkit::server::{TestServer, b, config, http_get, sample, scrape, u};

const SERVICES: [&str; 3] = ["", "uuidmap.v1.UuidMap", "uuidmap.v1.UuidMapAdmin"];

fn count(text: &str, rpc: &str, code: &str) -> f64 {
    sample(
        text,
        "uuidmap_rpc_requests_total",
        &[("rpc", rpc), ("code", code)],
    )
    .unwrap_or(0.0)
}

async fn metrics_server(dir: &std::path::Path) -> TestServer {
    let mut c = config(dir);
    c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    TestServer::start_with(c).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_each_call_by_rpc_and_status_and_report_the_index_state() {
    let dir = tempfile::tempdir().unwrap();
    let server = metrics_server(dir.path()).await;
    let before = scrape(&server).await;
    let mut client = server.client().await;

    for n in 1..=3 {
        client
            .put(pb::PutRequest {
                key: b(u(n)),
                value: b(u(100 + n)),
            })
            .await
            .unwrap();
    }
    for n in 1..=4 {
        // Key 4 is absent: still OK, with no value.
        let got = client
            .get(pb::GetRequest {
                key: b(u(n)),
                min_lsn: 0,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(got.get_ref().value.is_some(), n <= 3);
    }
    let nil_key = client
        .put(pb::PutRequest {
            key: b(u(0)),
            value: b(u(1)),
        })
        .await
        .unwrap_err();
    assert_eq!(nil_key.code(), Code::InvalidArgument);
    // A stream is recorded when it ends.
    let mut scan = client
        .scan(pb::ScanRequest::default())
        .await
        .unwrap()
        .into_inner();
    while scan.next().await.transpose().unwrap().is_some() {}

    let after = scrape(&server).await;
    let delta = |rpc, code| count(&after, rpc, code) - count(&before, rpc, code);
    assert_eq!(delta("Put", "OK"), 3.0, "{after}");
    assert_eq!(delta("Get", "OK"), 4.0, "{after}");
    assert_eq!(delta("Put", "INVALID_ARGUMENT"), 1.0, "{after}");
    assert_eq!(delta("Scan", "OK"), 1.0, "{after}");
    assert_eq!(delta("Get", "NOT_FOUND"), 0.0);
    // A real histogram: buckets from 25 µs to 10 s, and +Inf holds them all.
    let get = |le| {
        sample(
            &after,
            "uuidmap_rpc_duration_seconds_bucket",
            &[("rpc", "Get"), ("le", le)],
        )
    };
    assert!(get("0.000025").is_some(), "{after}");
    assert!(get("10").is_some(), "{after}");
    assert!(get("+Inf").unwrap() >= 4.0, "{after}");
    let get_count = sample(
        &after,
        "uuidmap_rpc_duration_seconds_count",
        &[("rpc", "Get")],
    );
    assert_eq!(get_count, get("+Inf"));
    assert!(
        sample(
            &after,
            "uuidmap_rpc_duration_seconds_sum",
            &[("rpc", "Get")]
        )
        .unwrap()
            > 0.0
    );

    // The state of this server's index.
    assert_eq!(sample(&after, "uuidmap_entries", &[]), Some(3.0));
    assert_eq!(sample(&after, "uuidmap_applied_lsn", &[]), Some(3.0));
    assert!(sample(&after, "uuidmap_wal_bytes", &[]).unwrap() > 0.0);
    assert!(sample(&after, "uuidmap_jemalloc_allocated_bytes", &[]).is_some());
    assert!(sample(&after, "uuidmap_jemalloc_resident_bytes", &[]).is_some());
    // No snapshot written by this server yet: no age to report.
    assert_eq!(sample(&after, "uuidmap_snapshot_age_seconds", &[]), None);
    let mut admin = UuidMapAdminClient::new(server.channel().await);
    admin.snapshot(pb::SnapshotRequest {}).await.unwrap();
    let snapped = scrape(&server).await;
    let age = sample(&snapped, "uuidmap_snapshot_age_seconds", &[]).unwrap();
    assert!((0.0..60.0).contains(&age), "{snapped}");
    assert!(sample(&snapped, "uuidmap_snapshot_duration_seconds", &[]).unwrap() > 0.0);
    assert_eq!(count(&snapped, "Snapshot", "OK"), 1.0);

    // Anything but /metrics is refused.
    let (status, _) = http_get(server.metrics_addr.unwrap(), "/").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reports_its_recovery_phase_by_phase_in_stats_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    // 2,000 puts left in the WAL with no snapshot, as a kill leaves them.
    {
        let mut store = uuidmap::writer::DurableConfig::new(dir.path());
        store.snapshot_on_shutdown = false;
        let durable = uuidmap::writer::DurableIndex::open(store).unwrap();
        for batch in 0..2u128 {
            let ops = (0..1000)
                .map(|i| uuidmap::writer::WriteOp::Put {
                    key: Key::new(u(1 + batch * 1000 + i)).unwrap(),
                    value: u(7),
                })
                .collect();
            durable.writes().write(ops).await.unwrap();
        }
    }
    let server = metrics_server(dir.path()).await;
    let mut client = server.client().await;
    let stats = client
        .stats(pb::StatsRequest {})
        .await
        .unwrap()
        .into_inner();
    let restart = stats.restart.unwrap();
    assert!(!restart.snapshot_used);
    assert!(!restart.snapshot_read, "no snapshot: nothing read");
    assert_eq!((restart.records_replayed, restart.ops_replayed), (2, 2000));
    assert!(restart.bytes_replayed > 2000 * 33);
    assert!(restart.replay_us > 0 && restart.presized_for >= 2000);
    assert!(!restart.workers.is_empty());
    assert_eq!(restart.workers.iter().map(|w| w.ops).sum::<u64>(), 2000);
    assert_eq!(
        restart.workers.iter().map(|w| w.segments).sum::<u32>(),
        64,
        "the workers own every segment once"
    );
    assert_eq!(restart.max_replay_ms, 500);
    assert!(restart.replay_bytes_per_sec > 0);
    assert!(restart.snapshot_trigger_bytes > 0);

    let text = scrape(&server).await;
    let phase = |p| sample(&text, "uuidmap_recovery_phase_seconds", &[("phase", p)]);
    for p in ["map", "verify", "restore", "estimate", "presize", "replay"] {
        assert!(phase(p).is_some(), "phase {p}: {text}");
    }
    assert!(phase("replay").unwrap() > 0.0);
    assert_eq!(
        sample(&text, "uuidmap_recovery_replayed_ops", &[]),
        Some(2000.0)
    );
    let worker_ops: f64 = (0..restart.workers.len())
        .map(|i| {
            sample(
                &text,
                "uuidmap_recovery_worker_ops",
                &[("worker", &i.to_string())],
            )
            .unwrap()
        })
        .sum();
    assert_eq!(worker_ops, 2000.0);
    assert!(
        sample(
            &text,
            "uuidmap_recovery_worker_seconds",
            &[("worker", "0"), ("part", "apply")]
        )
        .is_some()
    );
    assert_eq!(
        sample(&text, "uuidmap_replay_budget_seconds", &[]),
        Some(0.5)
    );
    assert_eq!(
        sample(&text, "uuidmap_snapshot_trigger_wal_bytes", &[]),
        Some(restart.snapshot_trigger_bytes as f64)
    );
    server.stop().await.unwrap();
}

/// Sends `raw` bytes on a fresh connection to `addr` and reads the answer
/// until the server closes it, within `within`.
async fn raw_http(addr: std::net::SocketAddr, raw: &[u8], within: Duration) -> String {
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(raw).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(within, socket.read_to_end(&mut response))
        .await
        .expect("the metrics endpoint answered and closed in time")
        .unwrap();
    String::from_utf8_lossy(&response).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_answers_garbage_and_wrong_methods_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = metrics_server(dir.path()).await;
    let addr = server.metrics_addr.unwrap();
    // Well under the 5 s header timeout: garbage is refused when it is read,
    // not when the server gives up waiting for a request.
    let prompt = Duration::from_secs(2);

    let garbage = raw_http(addr, b"\x16\x03\x01 not http at all\r\n\r\n", prompt).await;
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage:?}");

    let post = raw_http(
        addr,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        prompt,
    )
    .await;
    assert!(post.starts_with("HTTP/1.1 405"), "{post:?}");
    assert!(
        post.to_ascii_lowercase().contains("allow: get, head"),
        "{post:?}"
    );

    let head = raw_http(
        addr,
        b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        prompt,
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head:?}");
    assert!(
        !head.contains("uuidmap_entries"),
        "HEAD carries no body: {head:?}"
    );

    // A query string is still the metrics path.
    let (status, body) = http_get(addr, "/metrics?x=1").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("uuidmap_entries"), "{body}");

    // The endpoint is still up for the next scrape.
    scrape(&server).await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_port_closes_when_the_server_stops() {
    let dir = tempfile::tempdir().unwrap();
    let server = metrics_server(dir.path()).await;
    let addr = server.metrics_addr.unwrap();
    scrape(&server).await;
    server.stop().await.unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_serving_for_the_server_and_both_services_and_unknown_names_are_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut health = HealthClient::new(server.channel().await);
    for service in SERVICES {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap();
        assert_eq!(r.get_ref().status(), ServingStatus::Serving, "{service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "uuidmap.v1.Nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_watch_sees_not_serving_and_ends_so_it_does_not_hold_the_graceful_stop() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut health = HealthClient::new(server.channel().await);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: "uuidmap.v1.UuidMap".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.next().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);

    let stopped = tokio::spawn(server.stop());
    let last = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("the watch sees the stop")
        .unwrap()
        .unwrap();
    assert_eq!(last.status(), ServingStatus::NotServing);
    let end = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("the watch ends");
    assert!(end.is_none(), "the watch ends cleanly: {end:?}");
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("the server stops while a health watch was open")
        .unwrap()
        .unwrap();
}

/// The services listed by reflection, and the file that declares
/// `uuidmap.v1.UuidMap`, over one reflection stream of API `$api`.
macro_rules! reflect {
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
            request(MessageRequest::ListServices(String::new())),
            request(MessageRequest::FileContainingSymbol(
                "uuidmap.v1.UuidMap".into(),
            )),
        ];
        let mut answers = ServerReflectionClient::new($channel)
            .server_reflection_info(tokio_stream::iter(requests))
            .await
            .unwrap()
            .into_inner();
        let services = match answers.next().await.unwrap().unwrap().message_response {
            Some(MessageResponse::ListServicesResponse(l)) => {
                l.service.into_iter().map(|s| s.name).collect::<Vec<_>>()
            }
            other => panic!("not a service list: {other:?}"),
        };
        let files = match answers.next().await.unwrap().unwrap().message_response {
            Some(MessageResponse::FileDescriptorResponse(f)) => f.file_descriptor_proto.len(),
            other => panic!("not a file descriptor: {other:?}"),
        };
        (services, files)
    }};
}

fn assert_lists_our_services(services: &[String]) {
    for s in [
        "uuidmap.v1.UuidMap",
        "uuidmap.v1.UuidMapAdmin",
        "grpc.health.v1.Health",
    ] {
        assert!(services.iter().any(|n| n == s), "{s} in {services:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_v1_and_v1alpha_list_our_services_and_describe_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let (v1, v1_files) = reflect!(v1, server.channel().await);
    assert_lists_our_services(&v1);
    assert!(v1_files >= 1);
    let (v1alpha, v1alpha_files) = reflect!(v1alpha, server.channel().await);
    assert_lists_our_services(&v1alpha);
    assert!(v1alpha_files >= 1);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_answer_without_a_token_where_our_services_require_one() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "read r3ad-only-token-7f1c2a9e\n").unwrap();
    let mut c = config(&dir.path().join("data"));
    c.tokens_file = Some(tokens);
    let server = TestServer::start_with(c).await;
    let channel: Channel = server.channel().await;

    // The data service does require a token here.
    let refused = server
        .client()
        .await
        .ping(pb::PingRequest {})
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);

    let mut health = HealthClient::new(channel.clone());
    for service in SERVICES {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap();
        assert_eq!(r.get_ref().status(), ServingStatus::Serving);
    }
    let (v1, _) = reflect!(v1, channel.clone());
    assert_lists_our_services(&v1);
    let (v1alpha, _) = reflect!(v1alpha, channel);
    assert_lists_our_services(&v1alpha);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reflection_stream_left_open_ends_with_unavailable_so_the_stop_completes() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let (requests, rx) = tokio::sync::mpsc::channel(1);
    let mut client = ServerReflectionClient::new(server.channel().await);
    requests
        .send(ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        })
        .await
        .unwrap();
    // `requests` stays open: the client never half-closes.
    let mut answers = client
        .server_reflection_info(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    assert!(answers.next().await.unwrap().is_ok());

    let stopped = tokio::spawn(server.stop());
    let end = tokio::time::timeout(Duration::from_secs(5), answers.next())
        .await
        .expect("the stream ends when the stop begins");
    assert_eq!(end.unwrap().unwrap_err().code(), Code::Unavailable);
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("the server stops while a reflection stream was open")
        .unwrap()
        .unwrap();
    drop(requests);
}
