//! Replicated durable writes against the single node's, in one run
//! (issue 15, an early figure: the state machine is the testkit's small
//! one, not the index; the server and the client are not in the path).
//!
//! Three set-ups, each driven by `UUIDMAP_BENCH_WRITERS` (default 64)
//! tokio tasks on one runtime (2 worker threads) writing single-`Put`
//! batches back to back for `UUIDMAP_BENCH_SECS` seconds (default 5):
//!
//! - **single node**: a `DurableIndex` (fsync `always`), `WriteHandle::write`;
//! - **group of 1**: one Raft member (`uuidmap-cluster`'s `WalLogStore`,
//!   fsync on every flush, and the Raft service), `Raft::client_write`;
//! - **group of 3**: three members in this process on loopback, writes to
//!   the leader; a write is answered once a majority flushed it.
//!
//! Each set-up runs `UUIDMAP_BENCH_ROUNDS` (default 3) times, the order
//! rotated from round to round; the table gives medians with min–max.
//! Everything is written under the system temp dir and removed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap::Key;
use uuidmap::writer::{DurableConfig, DurableIndex, PipelineConfig, WriteOp};
use uuidmap_cluster::RaftBatch;
use uuidmap_engine::store::Op;
use uuidmap_testkit::cluster::{Member, leader};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn key(writer: u64, i: u64) -> Uuid {
    Uuid::from_u128((u128::from(writer) << 64) | u128::from(i + 1))
}

/// Runs `writers` tasks calling `write(writer, i)` until `window` passes;
/// returns writes per second.
async fn drive<F, Fut>(writers: u64, window: Duration, write: F) -> f64
where
    F: Fn(u64, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (done, count, write) = (done.clone(), count.clone(), write.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while !done.load(Ordering::Relaxed) {
                write(w, i).await;
                i += 1;
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(window).await;
    done.store(true, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    for t in tasks {
        t.await.expect("a writer task");
    }
    n as f64 / elapsed.as_secs_f64()
}

async fn single_node(writers: u64, window: Duration) -> f64 {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut config = DurableConfig::new(dir.path());
    config.snapshot_every = None;
    config.snapshot_on_shutdown = false;
    config.pipeline = PipelineConfig {
        snapshot_every_bytes: 0,
        ..PipelineConfig::default()
    };
    let durable = Arc::new(DurableIndex::open(config).expect("a durable index"));
    let handle = durable.writes().clone();
    let rate = drive(writers, window, move |w, i| {
        let handle = handle.clone();
        async move {
            let k = key(w, i);
            handle
                .write(vec![WriteOp::Put {
                    key: Key::new(k).expect("bench keys are never reserved"),
                    value: k,
                }])
                .await
                .expect("a durable write");
        }
    })
    .await;
    drop(durable);
    rate
}

async fn group(n: u64, writers: u64, window: Duration) -> f64 {
    let mut members = Member::group(n).await;
    let all: Vec<&Member> = members.iter().collect();
    let id = leader(&all).await;
    let lead = members.iter().find(|m| m.id == id).expect("the leader");
    let raft = lead.raft.clone();
    let log = lead.log.clone();
    let counts = || {
        (
            log.appends.load(Ordering::Relaxed),
            log.entries.load(Ordering::Relaxed),
            log.groups.load(Ordering::Relaxed),
        )
    };
    let before = counts();
    let rate = drive(writers, window, move |w, i| {
        let raft = raft.clone();
        async move {
            let k = key(w, i);
            let op = Op::Put {
                key: Key::new(k).expect("bench keys are never reserved"),
                value: k,
            };
            raft.client_write(RaftBatch::new(i, &[op]))
                .await
                .expect("a replicated write");
        }
    })
    .await;
    let after = counts();
    let (appends, entries, groups) = (
        after.0 - before.0,
        after.1 - before.1,
        (after.2 - before.2).max(1),
    );
    eprintln!(
        "raft bench: group of {n}: the leader's log took {:.1} entries per append, \
         {:.1} per group (fsync)",
        entries as f64 / appends.max(1) as f64,
        entries as f64 / groups as f64
    );
    for m in members.iter_mut() {
        m.stop().await;
    }
    rate
}

fn median_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let writers = env("UUIDMAP_BENCH_WRITERS", 64);
    let window = Duration::from_secs(env("UUIDMAP_BENCH_SECS", 5));
    let rounds = env("UUIDMAP_BENCH_ROUNDS", 3) as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let names = ["single node", "group of 1", "group of 3"];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); 3];
    for round in 0..rounds {
        for k in 0..3 {
            let which = (round + k) % 3;
            let rate = runtime.block_on(async {
                match which {
                    0 => single_node(writers, window).await,
                    1 => group(1, writers, window).await,
                    _ => group(3, writers, window).await,
                }
            });
            eprintln!(
                "raft bench: round {round}: {}: {rate:.0} writes/s",
                names[which]
            );
            rates[which].push(rate);
        }
    }
    let single = median_range(rates[0].clone()).0;
    println!("| set-up ({writers} writers) | writes/s, median (min–max) | vs single node |");
    println!("| --- | --- | --- |");
    for (name, r) in names.iter().zip(rates) {
        let (m, lo, hi) = median_range(r);
        println!("| {name} | {m:.0} ({lo:.0}–{hi:.0}) | {:.2}× |", m / single);
    }
}
