//! Auto-batching: concurrent gets share Lookup requests, each caller gets
//! its own answer, and a lone get is not held back.

use std::time::{Duration, Instant};

use uuidmap_client::ClientError;
use uuidmap_server::config::ServeConfig;
use uuidmap_testkit::server::{TestServer, config, sample, scrape, stalled_call};

use super::{key, quick, url};

fn with_metrics(dir: &std::path::Path) -> ServeConfig {
    let mut c = config(dir);
    c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_gets_share_lookup_requests_and_each_gets_its_own_value() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(with_metrics(dir.path())).await;
    let client = quick([url(server.addr)]).build().unwrap();
    for i in 0..500 {
        client.put(key(i), key(i + 1000)).await.unwrap();
    }
    let before = scrape(&server).await;
    let requests = |text: &str| {
        sample(text, "uuidmap_lookup_requests_total", &[("code", "OK")]).unwrap_or(0.0)
    };
    let keys = |text: &str| sample(text, "uuidmap_lookup_keys_total", &[]).unwrap_or(0.0);
    let tasks: Vec<_> = (0..64)
        .map(|t| {
            let client = client.clone();
            tokio::spawn(async move {
                for round in 0..50u64 {
                    let i = (t * 50 + round) % 600;
                    let want = (i < 500).then(|| key(i + 1000));
                    assert_eq!(client.get(key(i)).await.unwrap(), want, "key {i}");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let after = scrape(&server).await;
    let sent = requests(&after) - requests(&before);
    let looked_up = keys(&after) - keys(&before);
    assert_eq!(looked_up, 64.0 * 50.0, "every get was looked up once");
    assert!(
        sent < looked_up / 2.0,
        "{sent} Lookup requests for {looked_up} gets: barely batched"
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_get_is_not_held_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let client = quick([url(server.addr)]).build().unwrap();
    client.put(key(1), key(2)).await.unwrap();
    // Warm the lanes' streams.
    for _ in 0..8 {
        client.get(key(1)).await.unwrap();
    }
    let start = Instant::now();
    for _ in 0..100 {
        client.get(key(1)).await.unwrap();
    }
    // No timer: 100 lone gets take 100 round trips (about 10 ms here). The
    // bound is loose because the machine is shared; a batching window of
    // 10 ms would still cross it.
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_of_many_keys_share_requests_up_to_the_cap_and_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    // 2 lanes of at most 100 keys: lookups of 30-70 keys must be split
    // across requests whole (a caller's keys never straddle two).
    let client = quick([url(server.addr)]).batching(2, 100).build().unwrap();
    for i in 0..300 {
        client.put(key(i), key(i + 5000)).await.unwrap();
    }
    let tasks: Vec<_> = (0..16u64)
        .map(|t| {
            let client = client.clone();
            tokio::spawn(async move {
                for round in 0..20u64 {
                    let n = 30 + (t * 7 + round * 3) % 41;
                    let keys: Vec<_> = (0..n)
                        .map(|j| key((t * 31 + round * 17 + j * 5) % 400))
                        .collect();
                    let values = client.lookup(&keys).await.unwrap();
                    assert_eq!(values.len(), keys.len());
                    for (k, v) in keys.iter().zip(values) {
                        let i = (k.as_u128() & 0xffff_ffff) as u64 - 1;
                        assert_eq!(v, (i < 300).then(|| key(i + 5000)), "key {i}");
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(client.lookup(&[]).await.unwrap(), Vec::new());
    server.stop().await.unwrap();
}

/// A batched get whose caller's deadline is far shorter than the client's
/// default (10 s) ends at its caller's deadline, as `DeadlineExceeded`; its
/// request carried that deadline, so the server gave up on it then too
/// (answered DEADLINE_EXCEEDED, instead of leaving it queued for a read
/// permit until its maximum wait of 10 s), and the endpoint, which
/// answered, is not pessimized. A get with time to spare is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_get_ends_at_its_callers_deadline_and_the_server_drops_its_request_then() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = with_metrics(dir.path());
    cfg.admission.read_permits = 1;
    cfg.admission.read_queue = 64;
    cfg.limits.max_wait = Duration::from_secs(10);
    let server = TestServer::start_with(cfg).await;
    let client = quick([url(server.addr)])
        .timeout(Duration::from_secs(10))
        .attempt_timeout_fraction(1.0)
        .hedging(false)
        .build()
        .unwrap();
    client.put(key(1), key(2)).await.unwrap();
    assert_eq!(client.get(key(1)).await.unwrap(), Some(key(2)));

    // A Get stalled on its body holds the one read permit: until it does,
    // a Ping (admitted as a read) with a short deadline gets through.
    let stalled = stalled_call(server.addr, "Get").await;
    let mut tries = 0;
    while client
        .with_timeout(Duration::from_millis(50))
        .ping()
        .await
        .is_ok()
    {
        tries += 1;
        assert!(tries < 100, "the stalled Get never held the read permit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let timed_out = |text: &str| {
        sample(
            text,
            "uuidmap_lookup_requests_total",
            &[("code", "DEADLINE_EXCEEDED")],
        )
        .unwrap_or(0.0)
    };
    let before = timed_out(&scrape(&server).await);

    const DEADLINE: Duration = Duration::from_millis(300);
    let started = Instant::now();
    let e = client
        .with_timeout(DEADLINE)
        .get(key(1))
        .await
        .expect_err("no read permit: no answer");
    let took = started.elapsed();
    assert!(
        matches!(e, ClientError::DeadlineExceeded { .. }),
        "{e} after {took:?}"
    );
    assert!(
        took >= DEADLINE * 8 / 10 && took < DEADLINE + Duration::from_millis(200),
        "{took:?}: not the caller's deadline of {DEADLINE:?}"
    );
    let after = timed_out(&scrape(&server).await);
    assert_eq!(
        after - before,
        1.0,
        "the server gave up on the request at its deadline"
    );
    assert!(!client.is_pessimized(0), "the endpoint answered in time");

    drop(stalled);
    let answer = client
        .with_timeout(Duration::from_secs(5))
        .get(key(1))
        .await;
    assert_eq!(answer.unwrap(), Some(key(2)));
    server.stop().await.unwrap();
}
