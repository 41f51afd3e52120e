//! Failover, the retry budget, and deadlines.

use std::time::{Duration, Instant};

use uuidmap_client::{ClientError, RetryBudgetConfig, RetryClass};
use uuidmap_testkit::proxy::FaultProxy;
use uuidmap_testkit::server::TestServer;

use super::{dead_addr, key, quick, url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_of_two_endpoints_dead_every_call_succeeds_and_the_dead_one_costs_one_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let client = quick([url(dead_addr()), url(server.addr)]).build().unwrap();
    client.put(key(1), key(2)).await.unwrap();
    for _ in 0..200 {
        assert_eq!(client.get_unary(key(1)).await.unwrap(), Some(key(2)));
    }
    for _ in 0..50 {
        assert_eq!(client.get(key(1)).await.unwrap(), Some(key(2)));
    }
    let c = client.counters();
    assert!(client.is_pessimized(0), "the dead endpoint is pessimized");
    assert!(!client.is_pessimized(1));
    // One call (at most one per batching lane) found the dead endpoint;
    // every other went straight to the live one.
    assert!(
        c.attempts <= c.calls + 1 + 4,
        "{} attempts for {} calls",
        c.attempts,
        c.calls
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_endpoint_dead_the_budget_caps_retries_per_second() {
    let budget = RetryBudgetConfig {
        burst: 5,
        per_second: 10.0,
        per_call: 0.0,
    };
    let client = quick([url(dead_addr()), url(dead_addr())])
        .retry_budget(budget)
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let start = Instant::now();
    let callers: Vec<_> = (0..16)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                while start.elapsed() < Duration::from_secs(2) {
                    // Refused at once, or (waiting for the budget) at the
                    // deadline, naming the refusal.
                    let e = client.get_unary(super::key(1)).await.unwrap_err();
                    assert_ne!(e.retry_class(), RetryClass::Final, "{e}");
                    assert!(e.to_string().contains("connect"), "{e}");
                }
            })
        })
        .collect();
    for c in callers {
        c.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let c = client.counters();
    let retries = c.attempts - c.calls;
    let cap = 5.0 + 10.0 * elapsed + 2.0;
    assert!(
        (retries as f64) <= cap,
        "{retries} retries in {elapsed:.2} s (cap {cap:.0}); {} calls",
        c.calls
    );
    assert!(c.budget_refusals > 0, "the budget refused some: {c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_server_that_never_answers_returns_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let proxy = FaultProxy::start(server.addr).await;
    proxy.blackhole(true);
    // Margins are wide: test binaries share two cores with each other.
    let timeout = Duration::from_millis(1000);
    let client = quick([proxy.url()]).timeout(timeout).build().unwrap();
    for call in ["get", "get_unary", "put", "stats"] {
        let start = Instant::now();
        let e = match call {
            "get" => client.get(key(1)).await.map(|_| ()),
            "get_unary" => client.get_unary(key(1)).await.map(|_| ()),
            "put" => client.put(key(1), key(2)).await.map(|_| ()),
            _ => client.stats().await.map(|_| ()),
        }
        .unwrap_err();
        let took = start.elapsed();
        assert!(
            took >= timeout - Duration::from_millis(5)
                && took < timeout + Duration::from_millis(500),
            "{call} returned after {took:?}"
        );
        assert_eq!(e.retry_class(), RetryClass::Conditional, "{call}: {e}");
        assert!(
            e.to_string().contains("deadline of 1s"),
            "{call}: the call's own deadline is named: {e}"
        );
    }
    // A shorter deadline for one call.
    let start = Instant::now();
    let _ = client
        .with_timeout(Duration::from_millis(50))
        .stats()
        .await
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    drop(proxy);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_error_is_not_retried_and_says_what_was_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let client = quick([url(server.addr)]).build().unwrap();
    let e = client.put(uuid::Uuid::nil(), key(1)).await.unwrap_err();
    assert_eq!(e.retry_class(), RetryClass::Final);
    assert!(
        matches!(&e, ClientError::Status { status, .. } if status.code() == tonic::Code::InvalidArgument),
        "{e}"
    );
    let c = client.counters();
    assert_eq!(c.attempts, c.calls, "no retry of a final error");
    assert_eq!(c.retries, 0);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_overload_the_slow_backoff_gets_every_read_through_within_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = uuidmap_testkit::server::config(dir.path());
    // One read at a time and one waiting: 32 callers overload it.
    config.admission.read_permits = 1;
    config.admission.read_queue = 1;
    let server = TestServer::start_with(config).await;
    let client = uuidmap_client::Client::builder()
        .endpoints([url(server.addr)])
        .timeout(Duration::from_secs(20))
        .retry(uuidmap_client::RetryPolicy {
            max_attempts: 1000,
            ..Default::default()
        })
        .build()
        .unwrap();
    client.put(key(1), key(2)).await.unwrap();
    let callers: Vec<_> = (0..32)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    assert_eq!(client.get_unary(key(1)).await.unwrap(), Some(key(2)));
                }
            })
        })
        .collect();
    for c in callers {
        c.await.unwrap();
    }
    let c = client.counters();
    // Some calls were shed and retried; none failed.
    assert!(c.attempts > c.calls, "the server shed nothing: {c:?}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_limit_queues_callers_and_refuses_past_its_queue() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    // One call at a time: 32 callers all get through, waiting their turn.
    let one = quick([url(server.addr)])
        .max_in_flight(1, 64)
        .build()
        .unwrap();
    one.put(key(1), key(2)).await.unwrap();
    let callers: Vec<_> = (0..32)
        .map(|_| {
            let c = one.clone();
            tokio::spawn(async move { c.get_unary(key(1)).await.unwrap() })
        })
        .collect();
    for c in callers {
        assert_eq!(c.await.unwrap(), Some(key(2)));
    }

    // Against a server that never answers: 2 in flight, 2 waiting, and the
    // other 6 of 10 callers are refused at once.
    let proxy = FaultProxy::start(server.addr).await;
    proxy.blackhole(true);
    let stuck = quick([proxy.url()])
        .max_in_flight(2, 2)
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let start = Instant::now();
    let callers: Vec<_> = (0..10)
        .map(|_| {
            let c = stuck.clone();
            tokio::spawn(async move {
                let e = c.stats().await.unwrap_err();
                (e, start.elapsed())
            })
        })
        .collect();
    let mut refused = 0;
    let mut timed_out = 0;
    for c in callers {
        let (e, took) = c.await.unwrap();
        match e {
            ClientError::Overloaded { in_flight: 2, .. } => {
                assert!(took < Duration::from_millis(400), "refused after {took:?}");
                refused += 1;
            }
            ClientError::DeadlineExceeded { .. } => timed_out += 1,
            other => panic!("{other}"),
        }
    }
    assert_eq!((refused, timed_out), (6, 4));
    drop(proxy);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_grow_with_load_and_the_idle_ones_close() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let proxy = FaultProxy::start(server.addr).await;
    let client = quick([proxy.url()])
        .connections(uuidmap_client::PoolConfig {
            connections: 3,
            streams: 2,
            idle_timeout: Duration::from_millis(200),
        })
        .health_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    client.ping().await.unwrap();
    assert_eq!(client.open_connections(0), 1);
    // Six long calls at once (waits for an LSN that never comes, until
    // their deadline): two on each of the three connections.
    let applied = client.stats().await.unwrap().applied_lsn;
    let waits: Vec<_> = (0..6)
        .map(|_| {
            let c = client.with_timeout(Duration::from_millis(300));
            tokio::spawn(async move { c.wait_for(applied + 1_000).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(client.open_connections(0), 3);
    for w in waits {
        assert!(w.await.unwrap().is_err());
    }
    let made = proxy.connections();
    assert_eq!(made, 3);
    // One call at a time: always the top connection; the other two go idle
    // and are closed.
    let start = Instant::now();
    while client.open_connections(0) > 1 {
        client.ping().await.unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "idle connections never closed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        proxy.connections(),
        made,
        "no new connection for calls one at a time"
    );
    server.stop().await.unwrap();
}

/// The URLs a client should make of `name:port`: one per address the
/// system resolves the name to.
fn addresses_of(name: &str, port: u16) -> Vec<String> {
    use std::net::ToSocketAddrs;
    let mut addrs: Vec<std::net::SocketAddr> = (name, port).to_socket_addrs().unwrap().collect();
    addrs.sort();
    addrs.dedup();
    addrs.into_iter().map(url).collect()
}

/// A server given by DNS name is one endpoint per address of the name,
/// found by `connect` at once and by the prober soon after `build`. Where
/// `localhost` is also ::1, nothing listens there: that endpoint alone is
/// pessimized and every call still succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_name_is_one_endpoint_per_address_and_a_dead_address_costs_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let port = server.addr.port();
    let name = format!("http://localhost:{port}");
    let expected = addresses_of("localhost", port);
    assert!(expected.contains(&url(server.addr)), "{expected:?}");

    let client = quick([name.clone()]).connect().await.unwrap();
    assert_eq!(client.endpoint_urls(), expected);
    client.put(key(1), key(2)).await.unwrap();
    for _ in 0..100 {
        assert_eq!(client.get_unary(key(1)).await.unwrap(), Some(key(2)));
    }
    for (i, u) in expected.iter().enumerate() {
        if *u != url(server.addr) {
            assert!(
                client.is_pessimized(i),
                "{u} has no server but is not pessimized"
            );
        }
    }

    // `build` does not block on DNS: the name is one endpoint until the
    // prober has resolved it, right away.
    let lazy = quick([name]).build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while lazy.endpoint_urls() != expected {
        assert!(
            Instant::now() < deadline,
            "never resolved: {:?}",
            lazy.endpoint_urls()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lazy.get(key(1)).await.unwrap(), Some(key(2)));
    server.stop().await.unwrap();
}
