//! The writer pipeline as callers see it: LSN order, read-your-writes,
//! compare-and-set decided by the writer, refusals that change nothing,
//! shutdown that drains, and callers woken on their own threads.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;
use uuidmap_engine::store::wal::Preallocate;
use uuidmap_engine::writer::{DurableConfig, DurableIndex, FsyncPolicy, WriteError, WriteOp};
use uuidmap_index::Key;
use uuidmap_testkit_io::SimIo;

fn key(i: u64) -> Uuid {
    Uuid::from_u128(0xabcd_0000_0000_0000_0000_0000_0000_0000 | (i as u128 + 1))
}

fn open(io: &SimIo, policy: FsyncPolicy) -> DurableIndex {
    let mut c = DurableConfig::new("/data");
    c.io = Arc::new(io.clone());
    c.snapshot_every = None;
    c.pipeline.policy = policy;
    c.pipeline.max_batch_ops = 100;
    // 64 MiB spares on the simulated disk would only slow these down.
    c.wal_preallocate = Preallocate::Off;
    DurableIndex::open(c).unwrap()
}

fn put(k: u64, v: u64) -> WriteOp {
    WriteOp::Put {
        key: Key::new(key(k)).unwrap(),
        value: key(v),
    }
}

#[test]
fn concurrent_batches_get_distinct_lsns_and_are_visible_when_acknowledged() {
    let d = Arc::new(open(&SimIo::new(), FsyncPolicy::Always));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                let mut lsns = Vec::new();
                for i in 0..200u64 {
                    let k = t * 1000 + i;
                    let lsn = d
                        .writes()
                        .write_blocking(vec![put(k, k + 1), put(k + 500, k)])
                        .unwrap()
                        .lsn;
                    // Read-your-writes: acknowledged means applied and published.
                    assert_eq!(d.index().get(&key(k)), Some(key(k + 1)));
                    assert!(d.watermark().current() >= lsn);
                    lsns.push(lsn);
                }
                lsns
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort();
    assert_eq!(
        all,
        (1..=1600).collect::<Vec<_>>(),
        "every batch took one LSN, none skipped"
    );
}

#[test]
fn concurrent_durable_writers_share_fsyncs() {
    // A real disk: while one group's fsync runs, the other writers queue,
    // and the next group takes them all.
    let dir = tempfile::tempdir().unwrap();
    let mut c = DurableConfig::new(dir.path());
    c.snapshot_every = None;
    c.pipeline.policy = FsyncPolicy::Always;
    let d = Arc::new(DurableIndex::open(c).unwrap());
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..50u64 {
                    let k = t * 1000 + i;
                    d.writes().write_blocking(vec![put(k, k + 1)]).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let groups = d
        .writes()
        .stats()
        .groups
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        groups < 400,
        "400 batches from 8 writers took {groups} groups: no group commit"
    );
}

#[test]
fn compare_and_set_is_decided_in_batch_order_and_a_mismatch_changes_nothing() {
    let d = open(&SimIo::new(), FsyncPolicy::Always);
    let w = d.writes();
    let lsn = w.write_blocking(vec![put(1, 10)]).unwrap().lsn;
    // Expected value seen through an earlier op of the same batch.
    let ok = w.write_blocking(vec![
        put(2, 20),
        WriteOp::CompareAndSet {
            key: Key::new(key(2)).unwrap(),
            expected: Some(key(20)),
            new: Some(key(21)),
        },
        WriteOp::CompareAndSet {
            key: Key::new(key(1)).unwrap(),
            expected: Some(key(10)),
            new: None,
        },
    ]);
    assert_eq!(ok.unwrap().lsn, lsn + 1);
    assert_eq!(d.index().get(&key(2)), Some(key(21)));
    assert_eq!(d.index().get(&key(1)), None);
    // A mismatch: the error carries the current value; the puts before it
    // in the batch are not applied, and no LSN is used.
    let err = w
        .write_blocking(vec![
            put(3, 30),
            WriteOp::CompareAndSet {
                key: Key::new(key(2)).unwrap(),
                expected: Some(key(99)),
                new: Some(key(1)),
            },
        ])
        .unwrap_err();
    match &err {
        WriteError::CasMismatch { index, current, .. } => {
            assert_eq!((*index, *current), (1, Some(key(21))));
        }
        other => panic!("expected a CAS mismatch, got {other}"),
    }
    assert!(err.to_string().contains("compare-and-set failed"), "{err}");
    assert_eq!(d.index().get(&key(3)), None);
    assert_eq!(w.write_blocking(vec![put(4, 40)]).unwrap().lsn, lsn + 2);
    // Insert-if-absent.
    let absent = WriteOp::CompareAndSet {
        key: Key::new(key(5)).unwrap(),
        expected: None,
        new: Some(key(50)),
    };
    w.write_blocking(vec![absent]).unwrap();
    assert!(matches!(
        w.write_blocking(vec![absent]),
        Err(WriteError::CasMismatch { .. })
    ));
}

#[test]
fn malformed_batches_are_refused_with_clear_errors() {
    let d = open(&SimIo::new(), FsyncPolicy::Always);
    let w = d.writes();
    let e = w.write_blocking(vec![]).unwrap_err();
    assert!(e.to_string().contains("at least one operation"), "{e}");
    let e = w
        .write_blocking((0..101).map(|i| put(i, i)).collect())
        .unwrap_err();
    assert!(e.to_string().contains("at most 100 operations"), "{e}");
    // (A reserved key cannot reach the pipeline: `WriteOp` holds a `Key`.)
    for reserved in [Uuid::nil(), Uuid::max()] {
        assert!(Key::new(reserved).is_err());
    }
    assert_eq!(d.index().len(), 0, "nothing of a refused batch is applied");
    assert_eq!(d.watermark().current(), 0, "no LSN was used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_callers_resume_on_their_own_threads_and_wait_for_lsns() {
    let d = Arc::new(open(&SimIo::new(), FsyncPolicy::Always));
    let waiter = {
        let d = d.clone();
        tokio::spawn(async move { d.watermark().wait_for(3, None).await })
    };
    for i in 0..3 {
        let out = d.writes().write(vec![put(i, i)]).await.unwrap();
        let here = std::thread::current().name().map(str::to_owned);
        assert_ne!(
            here.as_deref(),
            Some("uuidmap-writer"),
            "caller code ran on the writer thread"
        );
        assert_eq!(out.lsn, i + 1);
    }
    assert!(waiter.await.unwrap().unwrap() >= 3);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(30);
    assert!(
        d.watermark().wait_for(100, Some(deadline)).await.is_err(),
        "times out"
    );
}

/// `n` threads, each writing one-put batches to `d` (keys `base | t << 32
/// | i`) until a write is refused as shutting down; each returns the keys
/// acknowledged. Any other answer fails the test.
fn write_until_shutdown(
    d: &DurableIndex,
    n: u64,
    base: u64,
) -> Vec<std::thread::JoinHandle<Vec<u64>>> {
    (0..n)
        .map(|t| {
            let w = d.writes().clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0..u64::MAX {
                    let k = base | t << 32 | i;
                    match w.write_blocking(vec![put(k, i)]) {
                        Ok(_) => acked.push(k),
                        Err(WriteError::ShuttingDown) => break,
                        Err(e) => panic!("a write was answered: {e}"),
                    }
                }
                acked
            })
        })
        .collect()
}

#[test]
fn shutdown_finishes_queued_writes_then_refuses_new_ones() {
    let io = SimIo::new();
    let d = Arc::new(open(&io, FsyncPolicy::Interval(Duration::from_millis(5))));
    let writers = write_until_shutdown(&d, 4, 0);
    // Shut down while they write: once 200 of their writes are applied (a
    // fixed sleep was too short on a loaded machine).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while d.index().len() < 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the writers made no progress"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let d = Arc::try_unwrap(d)
        .ok()
        .expect("the writers hold only write handles");
    let handle = d.writes().clone();
    d.shutdown();
    assert!(matches!(
        handle.write_blocking(vec![put(9999, 1)]),
        Err(WriteError::ShuttingDown)
    ));
    let acked: Vec<u64> = writers
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    // Everything acknowledged is durable after the drain, even under
    // `interval`: shutdown syncs the WAL and takes a final snapshot.
    let reopened = open(&io.restart(3), FsyncPolicy::Always);
    for k in &acked {
        assert!(
            reopened.index().get(&key(*k)).is_some(),
            "acknowledged key {k} lost"
        );
    }
    assert_eq!(reopened.index().len(), acked.len());
    assert!(
        acked.len() >= 200,
        "the writers' writes applied before the shutdown were acknowledged"
    );
    assert!(
        reopened.recovery_report().snapshot.is_some(),
        "a final snapshot was taken"
    );
}

#[test]
fn a_write_racing_the_stop_is_answered_applied_or_shutting_down_never_unanswered() {
    // Callers that found the handle open may still be putting their batch
    // in the queue when the stop's last turn ends (a queue of 2 makes them
    // wait for room, holding their send). Each must be answered: applied,
    // or ShuttingDown (nothing applied), never "may or may not have been
    // applied". The race is narrow: run it many times.
    for round in 0..40u64 {
        let io = SimIo::new();
        let mut c = DurableConfig::new("/data");
        c.io = Arc::new(io.clone());
        c.snapshot_every = None;
        c.pipeline.policy = FsyncPolicy::Never;
        c.pipeline.queue_depth = 2;
        c.wal_preallocate = Preallocate::Off;
        let d = DurableIndex::open(c).unwrap();
        let writers = write_until_shutdown(&d, 6, round << 40);
        while d.index().len() < 50 {
            std::thread::yield_now();
        }
        d.shutdown();
        let acked: Vec<u64> = writers
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        let reopened = open(&io.restart(round + 1), FsyncPolicy::Always);
        assert_eq!(reopened.index().len(), acked.len(), "round {round}");
        for k in &acked {
            assert!(reopened.index().get(&key(*k)).is_some(), "key {k} lost");
        }
    }
}

#[test]
fn a_clean_stop_leaves_a_log_that_is_not_behind_its_snapshot() {
    // A clean stop takes a final snapshot at the last LSN; the next start
    // must neither warn that the WAL is behind nor take another snapshot.
    let io = SimIo::new();
    let d = open(&io, FsyncPolicy::Always);
    for i in 0..50 {
        d.writes().write_blocking(vec![put(i, i)]).unwrap();
    }
    d.shutdown();
    let io = io.restart(1);
    let d = open(&io, FsyncPolicy::Always);
    let report = d.recovery_report().clone();
    assert!(report.snapshot.is_some());
    assert_eq!(report.last_lsn, 50);
    assert!(report.rejected.is_empty(), "{report:?}");
    // A snapshot on demand then a stop with no write in between: both
    // snapshots hold everything, so every WAL file is covered and removed.
    d.snapshot_now_blocking().unwrap();
    d.shutdown();
    let io = io.restart(2);
    let d = open(&io, FsyncPolicy::Always);
    let report = d.recovery_report().clone();
    assert_eq!(report.last_lsn, 50);
    assert!(report.rejected.is_empty(), "{report:?}");
    assert_eq!(d.index().len(), 50);
    // Writes continue at the next LSN and survive another restart.
    let lsn = d.writes().write_blocking(vec![put(99, 1)]).unwrap().lsn;
    assert_eq!(lsn, 51);
    d.shutdown();
    let d = open(&io.restart(3), FsyncPolicy::Always);
    assert_eq!(d.index().len(), 51);
    assert!(d.recovery_report().rejected.is_empty());
}

/// Compare-and-set increments of a few shared counters by many writers on
/// a real disk, so that groups overlap: a batch decided while the group
/// before it is still being fsynced must see that group's writes (the
/// overlay spans both), or two increments would pass on one value and one
/// would be lost, or a correct one refused forever.
#[test]
fn compare_and_set_sees_the_writes_of_the_group_whose_fsync_is_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = DurableConfig::new(dir.path());
    c.snapshot_every = None;
    c.pipeline.policy = FsyncPolicy::Always;
    c.pipeline.overlap_syncs = true;
    let d = Arc::new(DurableIndex::open(c).unwrap());
    const COUNTERS: u64 = 3;
    const WRITERS: u64 = 8;
    const INCREMENTS: u64 = 60;
    let threads: Vec<_> = (0..WRITERS)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..INCREMENTS {
                    let counter = Key::new(key((t + i) % COUNTERS)).unwrap();
                    let mut seen = d.index().get(counter.as_uuid());
                    loop {
                        let next = seen.map_or(1, |v| v.as_u128() + 1);
                        let cas = WriteOp::CompareAndSet {
                            key: counter,
                            expected: seen,
                            new: Some(Uuid::from_u128(next)),
                        };
                        match d.writes().write_blocking(vec![cas]) {
                            Ok(_) => break,
                            Err(WriteError::CasMismatch { current, .. }) => seen = current,
                            Err(e) => panic!("increment failed: {e}"),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let total: u128 = (0..COUNTERS)
        .map(|k| d.index().get(&key(k)).map_or(0, |v| v.as_u128()))
        .sum();
    assert_eq!(
        total,
        (WRITERS * INCREMENTS) as u128,
        "increments lost or doubled"
    );
    let overlapped = d.stats().overlapped_groups;
    assert!(overlapped > 0, "no group's fsync overlapped the next group");
}

/// A snapshot asks the writer to make the WAL durable through its LSN
/// while groups overlap: the request may come while a group's fsync is in
/// flight and more writes wait. The writer must finish that group first
/// (its LSN may be the one asked for, and the WAL takes one fsync at a
/// time), never fail the snapshot nor trip over its own invariant.
#[test]
fn snapshots_taken_while_groups_overlap_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = DurableConfig::new(dir.path());
    c.snapshot_every = None;
    c.pipeline.policy = FsyncPolicy::Always;
    c.pipeline.overlap_syncs = true;
    let d = Arc::new(DurableIndex::open(c).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..8u64)
        .map(|t| {
            let (d, stop) = (d.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    d.writes()
                        .write_blocking(vec![put(t * 1_000_000 + i, i)])
                        .expect("a durable write");
                    i += 1;
                }
            })
        })
        .collect();
    let started = std::time::Instant::now();
    let mut snapshots = 0;
    while started.elapsed() < Duration::from_secs(2) {
        d.snapshot_now_blocking()
            .expect("a snapshot while groups overlap");
        snapshots += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert!(snapshots > 5, "only {snapshots} snapshots");
    assert!(d.stats().overlapped_groups > 0, "no group overlapped");
}
