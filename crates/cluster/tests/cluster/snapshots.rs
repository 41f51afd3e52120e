//! Snapshots of a replica group (docs/replication.md, section 4), with
//! members over the real index in one process: a member takes snapshots
//! and purges its log behind them, restarts from its snapshot, and a
//! member whose log the leader no longer holds (wiped, or far behind) is
//! sent the leader's snapshot file and installs it, ending with the same
//! contents as the others, deletes included. A member whose newest
//! snapshot rotted starts from the older one; with none usable and its
//! log purged, it refuses to start and says how to replace it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use tokio::net::TcpListener;
use uuid::Uuid;
use uuidmap_cluster::membership;
use uuidmap_cluster::replica::{Replica, ReplicaConfig};
use uuidmap_engine::store::OsIo;
use uuidmap_engine::store::snapshot::{OpenOptions, list_snapshots, open_snapshot};
use uuidmap_engine::store::wal::list_wal_files;
use uuidmap_engine::writer::WriteOp;
use uuidmap_index::Key;
use uuidmap_testkit::cluster::{ReplicaNode, writable_leader, write_batches};

/// Snapshots every 40 entries, 10 kept behind, 8 KiB WAL files: a short
/// test purges, and removes files.
fn small_snapshots(config: &mut ReplicaConfig) {
    config.snapshot_entries = 40;
    config.logs_to_keep = 10;
    config.wal.segment_bytes = 8 << 10;
}

async fn group(n: u64) -> Vec<ReplicaNode> {
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    ReplicaNode::group_configured(listeners, HashMap::new(), small_snapshots).await
}

async fn restart(id: u64, dir: tempfile::TempDir, addr: &str) -> ReplicaNode {
    ReplicaNode::start_at(id, dir, addr, small_snapshots).await
}

fn key(k: u128) -> Key {
    Key::new(Uuid::from_u128(k)).unwrap()
}

/// Batch `b` of a write load: puts of ten keys, and (from batch 10 on) a
/// delete of a key put nine batches earlier.
fn batch(b: u128) -> Vec<WriteOp> {
    let mut ops: Vec<WriteOp> = (0..10)
        .map(|i| WriteOp::Put {
            key: key(b * 10 + i + 1),
            value: Uuid::from_u128(b << 64 | i),
        })
        .collect();
    if b >= 10 {
        ops.push(WriteOp::Delete {
            key: key((b - 9) * 10 + 1),
        });
    }
    ops
}

/// Writes batches `range` through the leader in two halves, each followed
/// by a snapshot on every member (the log is purged behind the older of a
/// member's two snapshots); returns the last LSN.
async fn load_and_snapshot(nodes: &[ReplicaNode], range: std::ops::Range<u128>) -> u64 {
    let middle = range.start + (range.end - range.start) / 2;
    let mut last = 0;
    for half in [range.start..middle, middle..range.end] {
        last = load(nodes, half).await;
        for n in nodes {
            n.applied(last).await;
            n.replica
                .durable()
                .snapshot_now()
                .await
                .unwrap_or_else(|e| panic!("member {}'s snapshot: {e}", n.id()));
        }
    }
    last
}

/// Writes batches `range` through the leader; returns the last LSN.
async fn load(nodes: &[ReplicaNode], range: std::ops::Range<u128>) -> u64 {
    write_batches(nodes, range, batch).await
}

/// Writes batches `range` through the leader, checks that every member
/// applies them and holds the leader's contents, and stops the members.
async fn write_agree_and_stop(nodes: Vec<ReplicaNode>, range: std::ops::Range<u128>) {
    let last = load(&nodes, range).await;
    let l = writable_leader(&nodes).await;
    nodes[l].applied(last).await;
    let expected = nodes[l].contents();
    for n in &nodes {
        n.applied(last).await;
        assert_eq!(n.contents(), expected, "member {}", n.id());
    }
    for n in nodes {
        n.stop().await;
    }
}

/// Waits until `node`'s directory holds a snapshot with its meta file,
/// openraft has purged the log behind it, and no WAL file starts at LSN 1
/// any more (the purged files are removed).
async fn snapshot_and_purge(node: &ReplicaNode) -> u64 {
    let dir = node.dir();
    for _ in 0..200 {
        let purged = node.replica.raft().metrics().borrow_watched().purged;
        let snaps = list_snapshots(&OsIo, dir).unwrap();
        let wals = list_wal_files(&OsIo, dir).unwrap();
        let with_meta = snaps
            .iter()
            .find(|(_, p)| p.with_extension("raft").exists());
        if let (Some(&(lsn, _)), Some(first), Some(_)) = (with_meta, wals.first(), purged)
            && first.first_lsn > 1
        {
            return lsn;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{} holds no snapshot with a purged log behind it: {:?}",
        dir.display(),
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect::<Vec<_>>()
    );
}

/// [`load_and_snapshot`], then waits until every member applied the last
/// LSN and purged its log behind a snapshot; returns that LSN and the
/// contents.
async fn load_snapshot_and_purge(
    nodes: &[ReplicaNode],
    range: std::ops::Range<u128>,
) -> (u64, BTreeMap<Uuid, Uuid>) {
    let last = load_and_snapshot(nodes, range).await;
    for n in nodes {
        n.applied(last).await;
        snapshot_and_purge(n).await;
    }
    (last, nodes[0].contents())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_snapshot_purge_their_logs_and_restart_from_the_snapshot() {
    let mut nodes = group(3).await;
    let (last, expected) = load_snapshot_and_purge(&nodes, 0..200).await;
    assert_eq!(expected.len(), 200 * 10 - 190, "puts less deletes");

    // A follower restarts: its log no longer reaches LSN 1, so the index
    // can only come from its snapshot plus the log after it.
    let l = writable_leader(&nodes).await;
    let f = (l + 1) % nodes.len();
    let (id, dir, addr) = nodes.remove(f).stop().await;
    let back = restart(id, dir, &addr).await;
    back.applied(last).await;
    assert_eq!(back.contents(), expected);
    nodes.push(back);

    // And the group goes on writing, the restarted member included.
    write_agree_and_stop(nodes, 200..220).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_member_added_again_is_sent_the_snapshot_and_installs_it() {
    let mut nodes = group(3).await;
    let l = writable_leader(&nodes).await;
    let f = (l + 1) % nodes.len();
    let (id, _old_dir, addr) = nodes.remove(f).stop().await;
    // Its disk is lost: it is removed from the group (a member that
    // comes back with an empty log under its old place would be a voter
    // that forgot what it acknowledged), and the group writes on, purging
    // its log behind a snapshot: it can only catch up by the snapshot.
    let l = writable_leader(&nodes).await;
    membership::remove(nodes[l].replica.raft(), BTreeSet::from([id]))
        .await
        .expect("the dead member is removed");
    let (last, expected) = load_snapshot_and_purge(&nodes, 0..200).await;

    let wiped = restart(id, tempfile::tempdir().unwrap(), &addr).await;
    let l = writable_leader(&nodes).await;
    let raft = nodes[l].replica.raft();
    membership::add_learner(raft, id, wiped.node.clone())
        .await
        .expect("added as a learner, and caught up");
    membership::promote(raft, BTreeSet::from([id]))
        .await
        .expect("promoted");
    wiped.applied(last).await;
    assert_eq!(wiped.contents(), expected);
    let installed = list_snapshots(&OsIo, wiped.dir()).unwrap();
    assert!(
        !installed.is_empty() && installed[0].1.with_extension("raft").exists(),
        "the installed snapshot and its meta file are in the member's directory"
    );
    // Restarted, it starts from the installed snapshot and the log after.
    let (id, dir, addr) = wiped.stop().await;
    let back = restart(id, dir, &addr).await;
    nodes.push(back);
    write_agree_and_stop(nodes, 200..210).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_far_behind_installs_the_snapshot_over_its_old_contents() {
    let mut nodes = group(3).await;
    let first = load(&nodes, 0..30).await;
    for n in &nodes {
        n.applied(first).await;
    }
    let l = writable_leader(&nodes).await;
    let f = (l + 1) % nodes.len();
    let (id, dir, addr) = nodes.remove(f).stop().await;
    // Meanwhile every key it holds is deleted or overwritten, and the
    // log behind the leader's snapshot purged.
    let l = writable_leader(&nodes).await;
    let deletes: Vec<WriteOp> = (1..=300u128)
        .map(|k| WriteOp::Delete { key: key(k) })
        .collect();
    nodes[l].write(deletes).await.expect("the leader takes it");
    let (last, expected) = load_snapshot_and_purge(&nodes, 100..300).await;
    assert!(expected.keys().all(|k| k.as_u128() > 1000));

    let back = restart(id, dir, &addr).await;
    back.applied(last).await;
    assert_eq!(back.contents(), expected, "none of its old keys is left");
    nodes.push(back);
    for n in nodes {
        n.stop().await;
    }
}

/// Flips one byte in the middle of snapshot `path` (a bit rot in the
/// slots), and checks that the snapshot no longer opens.
fn damage(path: &std::path::Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
    let opened = open_snapshot(&OsIo, path, &OpenOptions::default()).and_then(|o| o.into_index());
    assert!(
        opened.is_err(),
        "{} still opens after a flipped byte",
        path.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_newest_snapshot_rotted_starts_from_the_older_and_with_none_left_refuses() {
    let mut nodes = group(3).await;
    let (last, expected) = load_snapshot_and_purge(&nodes, 0..200).await;
    let l = writable_leader(&nodes).await;
    let f = (l + 1) % nodes.len();
    let (id, dir, addr) = nodes.remove(f).stop().await;

    // Its newest snapshot rots on disk: it starts from the older one (the
    // log is kept behind it for this) and replays the log after it.
    let snapshots = list_snapshots(&OsIo, dir.path()).unwrap();
    assert!(
        snapshots.len() >= 2,
        "two snapshots retained: {snapshots:?}"
    );
    damage(&snapshots[0].1);
    let back = restart(id, dir, &addr).await;
    assert_eq!(
        back.replica.durable().recovery_report().snapshot_lsn,
        snapshots[1].0,
        "started from the older snapshot"
    );
    back.applied(last).await;
    assert_eq!(back.contents(), expected);

    // Both rot: the log no longer reaches LSN 1, so the member cannot be
    // rebuilt from its directory, and it refuses to start, saying how to
    // replace it, rather than serve an index with a hole.
    let (id, dir, addr) = back.stop().await;
    for (_, path) in list_snapshots(&OsIo, dir.path()).unwrap() {
        if open_snapshot(&OsIo, &path, &OpenOptions::default())
            .and_then(|o| o.into_index())
            .is_ok()
        {
            damage(&path);
        }
    }
    let mut config = ReplicaConfig::new(id, dir.path());
    small_snapshots(&mut config);
    let refused = match Replica::start(config).await {
        Ok(_) => panic!("a member without a usable snapshot and a purged log started"),
        Err(e) => e.to_string(),
    };
    assert!(
        refused.contains("no usable snapshot") && refused.contains("uuidmap cluster remove"),
        "{refused}"
    );

    // Replaced as the message says, it catches up by snapshot.
    let l = writable_leader(&nodes).await;
    membership::remove(nodes[l].replica.raft(), BTreeSet::from([id]))
        .await
        .expect("removed");
    let fresh = restart(id, tempfile::tempdir().unwrap(), &addr).await;
    let raft = nodes[l].replica.raft();
    membership::add_learner(raft, id, fresh.node.clone())
        .await
        .expect("added again as a learner");
    membership::promote(raft, BTreeSet::from([id]))
        .await
        .expect("promoted");
    fresh.applied(last).await;
    assert_eq!(fresh.contents(), expected);
    nodes.push(fresh);
    write_agree_and_stop(nodes, 200..210).await;
}

/// The names and sizes of the files in `dir`.
fn files(dir: &std::path::Path) -> Vec<(std::ffi::OsString, u64)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name(), e.metadata().unwrap().len())
        })
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_stopped_while_it_takes_a_snapshot_writes_nothing_after_its_stop() {
    let mut nodes = group(1).await;
    writable_leader(&nodes).await;
    // Enough entries that a snapshot takes a while to write.
    let mut last = 0;
    for b in 0..40u128 {
        let ops = (0..5_000)
            .map(|i| WriteOp::Put {
                key: key(b * 5_000 + i + 1),
                value: Uuid::from_u128(i),
            })
            .collect();
        last = nodes[0]
            .write(ops)
            .await
            .expect("the sole member takes it")
            .lsn;
    }
    nodes[0].applied(last).await;
    let node = nodes.remove(0);
    let durable = node.replica.durable().clone();
    let asked = tokio::spawn(async move { durable.snapshot_now().await });
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (_, dir, _) = node.stop().await;
    let at_stop = files(dir.path());
    // Whatever the snapshot's fate (finished before the stop, or refused
    // by it), the directory is left alone once the member has stopped.
    let _ = asked.await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(files(dir.path()), at_stop);
}
