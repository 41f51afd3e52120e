//! How long a new replica of a large group takes to serve (issue 15: "a
//! new replica of a 10M-entry group is serving in ≤ 3 s, snapshot shipping
//! plus install, from an idle leader").
//!
//! One leader (a group of one, `uuidmap-cluster`'s `Replica` over the real
//! index, fsync `always`) is loaded with `UUIDMAP_BENCH_ENTRIES` entries
//! (default 10M) in batches of 100,000 puts, takes two snapshots (the
//! admin call's path; one write between them) behind which it purges its
//! log, and goes idle. Then a new
//! member on an empty directory is started and added as a learner, timed
//! from its start until it **serves**: it has installed the leader's
//! snapshot (sent over the Raft service in checksummed chunks, checked,
//! renamed into place, mapped, loaded by its writer) and applied the log
//! after it, so its reads are admitted, and a full scan of it matches the
//! leader's count. The phases are printed too. Both members share this
//! process and the machine's cores, as three processes on one 2-core
//! machine would.
//!
//! Everything is written under the system temp dir and removed.
//!
//! ```sh
//! cargo bench --bench new_replica                              # 10M
//! UUIDMAP_BENCH_ENTRIES=1000000 cargo bench --bench new_replica
//! ```

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use uuid::Uuid;
use uuidmap::Key;
use uuidmap::writer::WriteOp;
use uuidmap_cluster::membership;
use uuidmap_testkit::cluster::{ReplicaNode, writable_leader};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const BATCH: u64 = 100_000;

fn configure(config: &mut uuidmap_cluster::replica::ReplicaConfig) {
    // Only the snapshot asked for below; a short log behind it.
    config.snapshot_entries = 0;
    config.durable.snapshot_every = None;
    config.logs_to_keep = 10;
}

async fn run(entries: u64) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut nodes = ReplicaNode::group_configured(vec![listener], HashMap::new(), configure).await;
    let l = writable_leader(&nodes).await;
    let loading = Instant::now();
    let mut written = 0u64;
    let mut last = 0;
    while written < entries {
        let n = BATCH.min(entries - written);
        let ops = (written..written + n)
            .map(|i| WriteOp::Put {
                key: Key::new(Uuid::from_u128(u128::from(i + 1) * 0x9e37_79b9_7f4a_7c15)).unwrap(),
                value: Uuid::from_u128(u128::from(i)),
            })
            .collect();
        last = nodes[l].write(ops).await.expect("the leader takes it").lsn;
        written += n;
    }
    nodes[l].applied(last).await;
    eprintln!(
        "new replica bench: loaded {entries} entries in {:.1} s",
        loading.elapsed().as_secs_f64()
    );
    // Two snapshots, a write between them: the log is purged behind the
    // older one's point, so the new member can only catch up by the
    // snapshot.
    let durable = nodes[l].replica.durable().clone();
    durable
        .snapshot_now()
        .await
        .expect("the leader's first snapshot");
    let probe = WriteOp::Delete {
        key: Key::new(Uuid::from_u128(u128::MAX - 1)).unwrap(),
    };
    last = nodes[l].write(vec![probe]).await.expect("taken").lsn;
    let snap = Instant::now();
    let taken = durable.snapshot_now().await.expect("the leader's snapshot");
    eprintln!(
        "new replica bench: leader's snapshot: {} entries, {} MB, {:.2} s",
        taken.entries,
        taken.bytes >> 20,
        snap.elapsed().as_secs_f64()
    );
    // Let the purge happen and the leader go idle.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let started = Instant::now();
    let new = ReplicaNode::start_configured(
        2,
        tempfile::tempdir().unwrap(),
        listener,
        HashMap::new(),
        configure,
    )
    .await;
    let up = started.elapsed();
    membership::add_learner(nodes[l].replica.raft(), 2, new.node.clone())
        .await
        .expect("added, and caught up");
    let added = started.elapsed();
    new.applied(last).await;
    let durable = new.replica.durable().clone();
    while durable.admit_read().is_err() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let serving = started.elapsed();
    let count = new.replica.index().len();
    assert_eq!(count as u64, entries, "the new replica holds every entry");
    println!("| entries | snapshot | new member up | learner added | serving |");
    println!("| --- | --- | --- | --- | --- |");
    println!(
        "| {entries} | {} MB | {:.3} s | {:.3} s | **{:.3} s** |",
        taken.bytes >> 20,
        up.as_secs_f64(),
        added.as_secs_f64(),
        serving.as_secs_f64()
    );
    let _ = membership::remove(nodes[l].replica.raft(), BTreeSet::from([2])).await;
    new.stop().await;
    for n in nodes.drain(..) {
        n.stop().await;
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let entries = env("UUIDMAP_BENCH_ENTRIES", 10_000_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(entries));
}
