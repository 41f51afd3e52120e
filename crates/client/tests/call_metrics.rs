//! Every call's latency reaches the application's `metrics` recorder, by
//! RPC and outcome (README.md, "Client SDK", observability). Its own test
//! binary: it installs the process's global recorder.

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use uuid::Uuid;
use uuidmap_client::{Client, RetryPolicy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_get_is_timed_by_rpc_and_outcome() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this binary");

    // Nothing listens on port 1 of loopback: the call fails at once.
    let client = Client::builder()
        .endpoints(["http://127.0.0.1:1"])
        .retry(RetryPolicy::NEVER)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    client.get_unary(Uuid::from_u128(1)).await.unwrap_err();
    client.get_unary(Uuid::from_u128(2)).await.unwrap_err();

    let text = handle.render();
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in:\n{text}"))
            .to_string()
    };
    assert!(
        line(r#"uuidmap_client_calls_total{rpc="Get"}"#).ends_with(" 2"),
        "{text}"
    );
    assert!(
        line(r#"uuidmap_client_call_seconds_count{rpc="Get",outcome="error"}"#).ends_with(" 2"),
        "{text}"
    );
}
