//! Reads from a replica group of three with one member silent: the bench
//! row for issue 34's target "p99 of `get` with one of three members silent
//! ≤ 2× the attempt timeout" (the end-to-end test
//! `tests/client/hedging.rs` asserts the same on one server behind three
//! proxies; this runs a real group, more reads, and reports the figures).
//!
//! The workload: a group of three in this process (`TestGroup`), 1,000
//! entries written through its leader; a fault proxy in front of each
//! member's client port, and the proxy of one follower blackholed (it
//! accepts connections and never answers: the member is alive for Raft,
//! silent to clients). For each round and each kind of read (`get`,
//! auto-batched on the `Lookup` streams, and `get_unary`), a fresh client
//! of the three proxies, with the SDK's defaults except the attempt
//! timeout, reads random loaded keys from `TASKS` tasks until `READS`
//! reads are done. Every answer is checked; a failed or wrong read fails
//! the bench (exit code 1). Latency is per read, from the call to its
//! answer, retries and hedges included, in an HdrHistogram.
//!
//! A fresh client per row, so each row pays the discovery of the silent
//! member again: the reads that meet it before it is pessimized cost one
//! attempt timeout each and are the tail; the rest never go there.
//!
//! Run: `cargo bench --bench silent_member` (about 10 s). Knobs:
//! `UUIDMAP_BENCH_ROUNDS` (3), `UUIDMAP_BENCH_READS` (20000),
//! `UUIDMAP_BENCH_TASKS` (16), `UUIDMAP_BENCH_ATTEMPT_MS` (200). Prints a
//! markdown table.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap::client::Client;
use uuidmap_testkit::proxy::FaultProxy;
use uuidmap_testkit::server::TestGroup;

#[path = "common/histogram.rs"]
mod histogram;
use histogram::Latencies;

/// Entries written before the reads.
const ENTRIES: u64 = 1_000;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        })
        .unwrap_or(default)
}

fn key(i: u64) -> Uuid {
    Uuid::from_u128(0x5e_0000_0000_0000_0000_0000_0000_0000 | u128::from(i + 1))
}

fn value(i: u64) -> Uuid {
    Uuid::from_u128(0x7a_0000_0000_0000_0000_0000_0000_0000 | u128::from(i + 1))
}

/// The kinds of read measured.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `Client::get`: auto-batched on the `Lookup` streams.
    Get,
    /// `Client::get_unary`: one `Get` call each.
    GetUnary,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Get => "get (batched)",
            Kind::GetUnary => "get_unary",
        }
    }
}

/// One row: the latencies of `reads` reads, and what the client did.
struct Row {
    latencies: Latencies,
    /// Reads that took at least the attempt timeout.
    slow: u64,
    failures: u64,
    silent_pessimized: bool,
    attempts: u64,
    hedges: u64,
}

/// What a row runs: `reads` reads of `kind` from `tasks` tasks through a
/// fresh client of `urls`, with `attempt` as its attempt timeout; the
/// member at `silent` does not answer.
#[derive(Clone, Copy)]
struct Setup<'a> {
    urls: &'a [String],
    silent: usize,
    reads: u64,
    tasks: u64,
    attempt: Duration,
}

async fn measure(s: Setup<'_>, kind: Kind) -> Row {
    let Setup {
        urls,
        silent,
        reads,
        tasks,
        attempt,
    } = s;
    let client = Client::builder()
        .endpoints(urls.iter().cloned())
        .timeout(Duration::from_secs(10))
        .attempt_timeout(attempt)
        .build()
        .expect("a client of the three proxies");
    let next = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let slow = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (client, next) = (client.clone(), next.clone());
            let (failures, slow) = (failures.clone(), slow.clone());
            tokio::spawn(async move {
                let mut latencies = Latencies::new();
                // A task's own sequence of keys: a cheap LCG, seeded by task.
                let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                while next.fetch_add(1, Relaxed) < reads {
                    x = x
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let i = (x >> 33) % ENTRIES;
                    let started = Instant::now();
                    let answer = match kind {
                        Kind::Get => client.get(key(i)).await,
                        Kind::GetUnary => client.get_unary(key(i)).await,
                    };
                    match answer {
                        Ok(Some(v)) if v == value(i) => {
                            let took = started.elapsed();
                            latencies.record_duration(took);
                            if took >= attempt {
                                slow.fetch_add(1, Relaxed);
                            }
                        }
                        other => {
                            eprintln!("read of key {i}: {other:?}");
                            failures.fetch_add(1, Relaxed);
                        }
                    }
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Latencies::new();
    for h in handles {
        latencies.add(&h.await.expect("a reading task"));
    }
    let counters = client.counters();
    Row {
        latencies,
        slow: slow.load(Relaxed),
        failures: failures.load(Relaxed),
        silent_pessimized: client.is_pessimized(silent),
        attempts: counters.attempts,
        hedges: counters.hedges,
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = knob("UUIDMAP_BENCH_ROUNDS", 3);
    let reads = knob("UUIDMAP_BENCH_READS", 20_000);
    let tasks = knob("UUIDMAP_BENCH_TASKS", 16);
    let attempt = Duration::from_millis(knob("UUIDMAP_BENCH_ATTEMPT_MS", 200));

    let group = TestGroup::start(3).await;
    let leader = group.leader().await;
    // A follower goes silent to clients (its Raft port still works): the
    // reads' latency is the subject, not an election.
    let silent = (leader + 1) % 3;
    let direct = Client::builder()
        .endpoints(group.urls())
        .build()
        .expect("a client of the group");
    for i in 0..ENTRIES {
        direct.put(key(i), value(i)).await.expect("a put");
    }
    let mut proxies = Vec::new();
    for i in 0..3 {
        let member = group.member(i).expect("every member runs");
        proxies.push(FaultProxy::start(member.addr).await);
    }
    proxies[silent].blackhole(true);
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let setup = Setup {
        urls: &urls,
        silent,
        reads,
        tasks,
        attempt,
    };

    println!(
        "Reads with member {silent} of 3 silent (connections accepted, never answered); \
         attempt timeout {attempt:?}, {reads} reads per row from {tasks} tasks, \
         a fresh client per row, leader: member {leader}.\n"
    );
    println!(
        "| read | round | p50 ms | p99 ms | p99 / attempt timeout | p99.9 ms | max ms | \
         reads ≥ attempt timeout | attempts | hedges | silent member pessimized |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    let mut failed = false;
    let mut worst: f64 = 0.0;
    for round in 1..=rounds {
        for kind in [Kind::Get, Kind::GetUnary] {
            let row = measure(setup, kind).await;
            let l = &row.latencies;
            let p99 = l.quantile(0.99);
            let ratio = p99 as f64 / attempt.as_nanos() as f64;
            worst = worst.max(ratio);
            println!(
                "| {} | {round} | {:.2} | {:.2} | {ratio:.2}× | {:.1} | {:.1} | {} | {} | {} | {} |",
                kind.name(),
                ms(l.quantile(0.5)),
                ms(p99),
                ms(l.quantile(0.999)),
                ms(l.max()),
                row.slow,
                row.attempts,
                row.hedges,
                if row.silent_pessimized { "yes" } else { "no" },
            );
            if row.failures > 0 {
                eprintln!(
                    "{}: {} reads failed or were wrong",
                    kind.name(),
                    row.failures
                );
                failed = true;
            }
        }
    }
    println!(
        "\nworst p99 / attempt timeout: {worst:.2}× (target ≤ 2×: {})",
        if worst <= 2.0 { "met" } else { "missed" }
    );
    drop(proxies);
    group.stop().await;
    if failed {
        std::process::exit(1);
    }
}
