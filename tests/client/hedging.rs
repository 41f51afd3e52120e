//! A member that accepts connections and never answers, and one that
//! answers slowly: reads' attempt timeouts and hedges (README.md, "Client
//! SDK").
//!
//! Three fault proxies stand for three members in front of one server, so
//! that every member has the same data and only the network differs.

use std::time::{Duration, Instant};

use uuidmap_client::{Client, RetryBudgetConfig};
use uuidmap_testkit::proxy::FaultProxy;
use uuidmap_testkit::server::TestServer;

use super::{key, url};

/// Puts key(0..n) -> key(i + 1) straight to the server.
async fn load(server: &TestServer, n: u64) {
    let direct = Client::builder()
        .endpoints([url(server.addr)])
        .build()
        .unwrap();
    for i in 0..n {
        direct.put(key(i), key(i + 1)).await.unwrap();
    }
}

fn p99(mut took: Vec<Duration>) -> Duration {
    took.sort();
    took[(took.len() * 99).div_ceil(100) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_member_costs_a_read_at_most_one_attempt_timeout_and_is_pessimized() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    load(&server, 16).await;
    let mut proxies = Vec::new();
    for _ in 0..3 {
        proxies.push(FaultProxy::start(server.addr).await);
    }
    proxies[1].blackhole(true);
    const ATTEMPT: Duration = Duration::from_millis(400);
    let client = Client::builder()
        .endpoints(proxies.iter().map(|p| p.url()))
        .timeout(Duration::from_secs(10))
        .attempt_timeout(ATTEMPT)
        .hedging(false)
        .build()
        .unwrap();

    // Unary and batched reads, a few at a time.
    let mut took = Vec::new();
    for round in 0..25u64 {
        let calls: Vec<_> = (0..8u64)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    let k = (round * 8 + i) % 16;
                    let started = Instant::now();
                    let v = if i % 2 == 0 {
                        client.get_unary(key(k)).await
                    } else {
                        client.get(key(k)).await
                    };
                    assert_eq!(v.unwrap(), Some(key(k + 1)));
                    started.elapsed()
                })
            })
            .collect();
        for c in calls {
            took.push(c.await.unwrap());
        }
    }
    let slowest = *took.iter().max().unwrap();
    assert!(
        slowest >= ATTEMPT,
        "no read met the silent member ({slowest:?}): the test does not discriminate"
    );
    let p99 = p99(took);
    eprintln!("reads with one member of three silent: p99 {p99:?}, slowest {slowest:?}");
    assert!(
        p99 <= 2 * ATTEMPT,
        "p99 of reads {p99:?} with one member of three silent: over 2 attempt timeouts"
    );
    assert!(client.is_pessimized(1), "the silent member is pessimized");
    assert!(!client.is_pessimized(0) && !client.is_pessimized(2));
    drop(proxies);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_read_is_hedged_on_another_member_until_the_budget_is_spent() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    load(&server, 1).await;
    let (a, b) = (
        FaultProxy::start(server.addr).await,
        FaultProxy::start(server.addr).await,
    );
    const BUDGET: u32 = 3;
    let client = Client::builder()
        .endpoints([a.url(), b.url()])
        .timeout(Duration::from_secs(10))
        .attempt_timeout_fraction(1.0)
        // Tokens for hedges only: none earned by calls or time.
        .retry_budget(RetryBudgetConfig {
            burst: BUDGET,
            per_second: 0.0,
            per_call: 0.0,
        })
        .build()
        .unwrap();
    // Both members answer quickly: each learns its usual time. Reads go
    // to the two in turn, and no read is hedged before its member has 32
    // answers to judge by, so these 64 spend no token.
    for _ in 0..64 {
        client.get_unary(key(0)).await.unwrap();
    }
    assert_eq!(client.counters().hedges, 0, "no hedge before 32 answers");

    // Member a turns slow: its reads wait past its usual time and are
    // hedged on b, until the budget's tokens are spent.
    const SLOW: Duration = Duration::from_millis(300);
    a.delay(Duration::ZERO, SLOW);
    let mut took = Vec::new();
    for _ in 0..16 {
        let started = Instant::now();
        assert_eq!(client.get_unary(key(0)).await.unwrap(), Some(key(1)));
        took.push(started.elapsed());
    }
    let c = client.counters();
    assert_eq!(c.hedges, u64::from(BUDGET), "one hedge per token, no more");
    assert_eq!(c.attempts, c.calls + c.hedges, "no retry: nothing failed");
    let fast = took.iter().filter(|t| **t < SLOW).count();
    let slow = took.len() - fast;
    // Reads go to a and b in turn (a hedge does not move the turn): a
    // hedged read on a was answered by b at once; once the tokens were
    // spent, the rest waited for a. (A read on b may take a token too,
    // when it is slower than b's own 95 %.)
    assert!(
        slow >= 8 - BUDGET as usize && fast > 8,
        "{fast} fast and {slow} slow reads: {took:?}"
    );
    drop((a, b));
    server.stop().await.unwrap();
}
