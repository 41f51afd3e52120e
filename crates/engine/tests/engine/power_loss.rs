//! Power loss, crashes during recovery, and failed fsyncs, on the simulated
//! disk (`SimIo`).
//!
//! The property behind every test here: after any of these faults the data
//! directory restarts, and what it serves is *exactly* the state after some
//! prefix of the acknowledged batches, at that prefix's LSN, each batch all
//! or nothing; under fsync policy `always` that prefix holds every
//! acknowledged batch. A state that never existed, a batch cut in half, an
//! LSN that does not match the state, or (under `always`) a lost
//! acknowledged batch fails the test.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use uuid::Uuid;
use uuidmap_engine::store::Io;
use uuidmap_engine::store::wal::Preallocate;
use uuidmap_engine::writer::{DurableConfig, DurableIndex, FsyncPolicy, WriteError, WriteOp};
use uuidmap_index::Key;
use uuidmap_testkit_io::SimIo;
use uuidmap_testkit_io::batch_model::{self, Model, apply};

/// Keys the batches touch (a few hundred, so big batches spread over many
/// index segments and make WAL records larger than a WAL file).
const KEYS: u64 = 300;
const DIR: &str = "/data";

fn key(k: u64) -> Uuid {
    Uuid::from_u128(0x9011_0000_0000_0000_0000_0000_0000_0000 | (k as u128 + 1))
}

fn value(v: u64) -> Uuid {
    Uuid::from_u128(0x7a1e_0000_0000_0000_0000_0000_0000_0000 | (v as u128 + 1))
}

/// The acknowledged history: `(lsn, state after it)`, starting with the
/// state the run started from.
type History = Vec<(u64, Model)>;

/// One step of a run.
#[derive(Clone, Debug)]
enum Step {
    /// `(kind, key, value)`: 0 put, 1 delete, 2 CAS to a value, 3 CAS to
    /// absent.
    Batch(Vec<(u8, u64, u64)>),
    Snapshot,
}

fn step() -> impl Strategy<Value = Step> {
    let op = (0u8..4, 0..KEYS, 0u64..1_000_000);
    prop_oneof![
        10 => prop::collection::vec(op.clone(), 1..6).prop_map(Step::Batch),
        // Batches of many keys: one record larger than a small WAL file,
        // touching most index segments.
        2 => prop::collection::vec(op, 100..400).prop_map(Step::Batch),
        1 => Just(Step::Snapshot),
    ]
}

/// The batch as the store gets it: a compare-and-set expects what the
/// model holds, or (one time in four) a wrong value, so refusals happen.
fn ops(spec: &[(u8, u64, u64)], model: &Model) -> Vec<WriteOp> {
    batch_model::ops(spec, model, key, value, value(u64::MAX - 1))
}

fn config(io: &SimIo, policy: FsyncPolicy, wal_bytes: u64, snapshot_bytes: u64) -> DurableConfig {
    let mut c = DurableConfig::new(PathBuf::from(DIR));
    c.io = Arc::new(io.clone());
    c.snapshot_every = None;
    c.snapshot_on_shutdown = false;
    c.pipeline.policy = policy;
    c.pipeline.snapshot_every_bytes = snapshot_bytes;
    c.wal_segment_bytes = wal_bytes;
    c.wal_preallocate = Preallocate::Inline;
    c
}

/// Everything the index holds (every key a batch can touch, plus the count
/// so that nothing else hides in it).
fn state(d: &DurableIndex) -> Model {
    let found: Model = (0..KEYS + 8)
        .filter_map(|k| d.index().get(&key(k)).map(|v| (key(k), v)))
        .collect();
    assert_eq!(
        d.index().len(),
        found.len(),
        "entries outside the test keys"
    );
    found
}

/// Runs the steps, appending each acknowledged batch to `history`. Checks
/// that the store accepts exactly the batches the model accepts.
fn run(d: &DurableIndex, steps: &[Step], history: &mut History) -> Result<(), TestCaseError> {
    for step in steps {
        match step {
            Step::Snapshot => {
                // Snapshots must work on a healthy disk.
                if let Err(e) = d.snapshot_now_blocking() {
                    return Err(TestCaseError::fail(format!("snapshot failed: {e}")));
                }
            }
            Step::Batch(spec) => {
                let (last_lsn, last) = history.last().unwrap();
                let ops = ops(spec, last);
                let mut after = last.clone();
                let applies = apply(&mut after, &ops);
                match d.writes().write_blocking(ops) {
                    Ok(outcome) => {
                        prop_assert!(applies, "a batch the model refuses was accepted");
                        prop_assert_eq!(outcome.lsn, last_lsn + 1, "LSNs are consecutive");
                        history.push((outcome.lsn, after));
                    }
                    Err(WriteError::CasMismatch { .. }) => {
                        prop_assert!(!applies, "a batch the model accepts was refused");
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("write failed: {e}"))),
                }
            }
        }
    }
    Ok(())
}

/// Checks a recovered store against the history: its state and applied LSN
/// are those of one prefix (which it returns the length of). `all`: the
/// prefix must be the whole history.
fn check_prefix(d: &DurableIndex, history: &History, all: bool) -> Result<usize, TestCaseError> {
    let lsn = d.stats().applied_lsn;
    let found = state(d);
    let Some(at) = history.iter().position(|(l, _)| *l == lsn) else {
        return Err(TestCaseError::fail(format!(
            "recovered LSN {lsn}, which no acknowledged prefix ends at (history {}..={})",
            history[0].0,
            history.last().unwrap().0
        )));
    };
    prop_assert!(
        found == history[at].1,
        "recovered LSN {} but not the state after it ({} entries vs {})",
        lsn,
        found.len(),
        history[at].1.len()
    );
    if all {
        prop_assert_eq!(
            at,
            history.len() - 1,
            "acknowledged batches lost under `always`"
        );
    }
    Ok(at + 1)
}

fn policy_strategy() -> impl Strategy<Value = FsyncPolicy> {
    prop_oneof![
        Just(FsyncPolicy::Always),
        Just(FsyncPolicy::Never),
        (1u64..20).prop_map(|ms| FsyncPolicy::Interval(Duration::from_millis(ms))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Writes, snapshots (on demand and by WAL bytes), WAL rotation, then a
    /// power loss at a random point; the directory recovers to an
    /// acknowledged prefix (all of it under `always`), takes more writes,
    /// and survives a second stop or power loss the same way.
    #[test]
    fn power_loss_leaves_an_acknowledged_prefix_under_every_policy(
        policy in policy_strategy(),
        steps in prop::collection::vec(step(), 1..40),
        more in prop::collection::vec(step(), 0..15),
        wal_kib in 4u64..64,
        snapshot_kib in prop_oneof![Just(0u64), 4u64..32],
        seeds in (any::<u64>(), any::<u64>()),
        second_is_clean_stop in any::<bool>(),
    ) {
        let always = policy == FsyncPolicy::Always;
        let conf = |io: &SimIo| config(io, policy, wal_kib << 10, snapshot_kib << 10);
        let io = SimIo::new();
        let durable = DurableIndex::open(conf(&io)).expect("opening an empty store");
        let mut history: History = vec![(0, Model::new())];
        run(&durable, &steps, &mut history)?;
        // The power loss: the disk as it is now, minus what was not synced.
        // (The old process's threads go on against the old disk; that is
        // invisible to the new one.)
        let disk = io.restart(seeds.0);
        drop(durable);
        let reopened = DurableIndex::open(conf(&disk))
            .map_err(|e| TestCaseError::fail(format!("recovery after power loss failed: {e}")))?;
        let kept = check_prefix(&reopened, &history, always)?;
        // Go on from the recovered prefix: the lost batches never happened.
        history.truncate(kept);
        run(&reopened, &more, &mut history)?;
        let disk = if second_is_clean_stop {
            reopened.shutdown();
            disk.restart(seeds.1)
        } else {
            let d = disk.restart(seeds.1);
            drop(reopened);
            d
        };
        let again = DurableIndex::open(conf(&disk))
            .map_err(|e| TestCaseError::fail(format!("second recovery failed: {e}")))?;
        // A clean stop syncs the WAL under every policy: nothing may be lost.
        check_prefix(&again, &history, always || second_is_clean_stop)?;
    }
}

/// Copies a fully synced disk (a restarted one): a power loss of a disk
/// with nothing pending keeps everything.
fn copy(disk: &SimIo) -> SimIo {
    disk.restart(0)
}

fn files(io: &SimIo) -> Vec<String> {
    let mut names = io.list(Path::new(DIR)).unwrap();
    names.sort();
    names
}

/// Replaces a file's contents durably.
fn rewrite(io: &SimIo, name: &str, bytes: &[u8]) {
    let path = Path::new(DIR).join(name);
    if io.file_len(&path).is_ok() {
        io.remove(&path).unwrap();
    }
    let mut f = io.create(&path).unwrap();
    f.write_all(bytes).unwrap();
    f.sync().unwrap();
    io.sync_dir(Path::new(DIR)).unwrap();
}

/// A directory written under `always` with two snapshots and a rotated
/// WAL, whose last batch was in flight when the process died in the
/// middle of its WAL write: after the power loss, the last WAL file ends
/// in a torn record (or a whole one; the seed decides).
fn directory_with_torn_tail(seed: u64) -> SimIo {
    let io = SimIo::new();
    let d = DurableIndex::open(config(&io, FsyncPolicy::Always, 2048, 0)).unwrap();
    for b in 0..120u64 {
        let ops: Vec<WriteOp> = (0..1 + b % 7)
            .map(|i| WriteOp::Put {
                key: Key::new(key((b * 13 + i * 7) % KEYS)).unwrap(),
                value: value(b * 100 + i),
            })
            .collect();
        d.writes().write_blocking(ops).unwrap();
        if b == 40 || b == 80 {
            d.snapshot_now_blocking().unwrap();
        }
    }
    // The next mutating call (the batch's WAL write) crashes; its bytes
    // land unsynced, so the power loss keeps a random prefix of them.
    io.set_crash_after(Some(0));
    let big: Vec<WriteOp> = (0..200)
        .map(|k| WriteOp::Put {
            key: Key::new(key(k)).unwrap(),
            value: value(7_000_000 + k),
        })
        .collect();
    assert!(d.writes().write_blocking(big).is_err());
    assert!(io.crashed());
    drop(d);
    io.restart(seed)
}

/// Damages the newest snapshot's last byte (inside its data, so only the
/// checksums can tell): recovery must fall back to the older snapshot.
fn damage_newest_snapshot(disk: &SimIo) {
    let newest = files(disk)
        .into_iter()
        .filter(|n| n.ends_with(".snap"))
        .max()
        .expect("a snapshot");
    let mut bytes = disk.read(&Path::new(DIR).join(&newest)).unwrap();
    let at = bytes.len() - 1;
    bytes[at] ^= 0x40;
    rewrite(disk, &newest, &bytes);
}

/// Leaves a `.tmp` of the WAL file the next start creates, as a rotation
/// that died before its rename would.
fn leave_wal_tmp(disk: &SimIo, next_lsn: u64) {
    let name = format!(
        "{}.tmp",
        uuidmap_engine::store::wal::wal_file_name(next_lsn)
    );
    rewrite(disk, &name, b"UUIDMAPW-not-a-whole-header");
}

/// The damaged directories of the crash-during-recovery test.
#[derive(Clone, Copy, Debug)]
enum Damage {
    TornTail,
    DamagedNewestSnapshot,
    LeftoverWalTmp,
}

/// Opens a copy of `base` with a crash planned after `k` mutating calls,
/// for every `k` until an open gets through without crashing. After each
/// crash, a power loss, then an open without faults: it must find the
/// state the undamaged first recovery found, at the same LSN, every time,
/// accept a write, and restart with it.
fn crash_at_every_step_of_recovery(damage: Damage, seed: u64) {
    let conf = |io: &SimIo| config(io, FsyncPolicy::Always, 2048, 0);
    let base = directory_with_torn_tail(seed);
    match damage {
        Damage::TornTail => {}
        Damage::DamagedNewestSnapshot => damage_newest_snapshot(&base),
        Damage::LeftoverWalTmp => {
            // Where the next start's WAL file begins: one past the
            // recovered end.
            let probe = DurableIndex::open(conf(&copy(&base))).unwrap();
            leave_wal_tmp(&base, probe.stats().applied_lsn + 1);
        }
    }
    let reference =
        DurableIndex::open(conf(&copy(&base))).expect("recovering the damaged directory");
    if matches!(damage, Damage::DamagedNewestSnapshot) {
        assert!(
            !reference.recovery_report().rejected.is_empty(),
            "the damaged snapshot was not noticed: the test damaged nothing"
        );
    }
    let expected = state(&reference);
    let expected_lsn = reference.stats().applied_lsn;
    assert!(expected_lsn >= 120, "the acknowledged batches are there");
    drop(reference);
    let mut any_crash = false;
    for k in 0..500u64 {
        let disk = copy(&base);
        disk.set_crash_after(Some(k));
        let opened = DurableIndex::open(conf(&disk));
        let crashed = disk.crashed();
        match opened {
            Ok(d) => drop(d),
            Err(e) => {
                assert!(
                    crashed,
                    "{damage:?}, crash after {k}: recovery failed without a crash: {e}"
                );
                assert!(
                    e.to_string().contains("simulated crash"),
                    "{damage:?}, k {k}: {e}"
                );
            }
        }
        let after = disk.restart(seed ^ k);
        let d = DurableIndex::open(conf(&after)).unwrap_or_else(|e| {
            panic!("{damage:?}: recovery after a crash at step {k} of the previous one failed: {e}")
        });
        assert_eq!(
            d.stats().applied_lsn,
            expected_lsn,
            "{damage:?}, crash at step {k}"
        );
        assert!(
            state(&d) == expected,
            "{damage:?}, crash at step {k}: another state"
        );
        let probe = WriteOp::Put {
            key: Key::new(key(KEYS + 1)).unwrap(),
            value: value(k),
        };
        d.writes().write_blocking(vec![probe]).unwrap();
        d.shutdown();
        let again = DurableIndex::open(conf(&after.restart(k))).unwrap_or_else(|e| {
            panic!("{damage:?}, crash at step {k}: the restart after a write failed: {e}")
        });
        assert_eq!(again.index().get(&key(KEYS + 1)), Some(value(k)));
        assert_eq!(again.stats().applied_lsn, expected_lsn + 1);
        if !crashed {
            // Recovery and the start got through with k calls to spare.
            assert!(
                any_crash,
                "{damage:?}: recovery made no mutating call at all"
            );
            return;
        }
        any_crash = true;
    }
    panic!("{damage:?}: recovery still crashed after 500 steps");
}

#[test]
fn a_crash_at_any_step_of_recovering_a_torn_tail_recovers_the_same_state() {
    for seed in 1..4 {
        crash_at_every_step_of_recovery(Damage::TornTail, seed);
    }
}

#[test]
fn a_crash_at_any_step_of_recovering_past_a_damaged_snapshot_recovers_the_same_state() {
    for seed in 1..4 {
        crash_at_every_step_of_recovery(Damage::DamagedNewestSnapshot, seed);
    }
}

#[test]
fn a_crash_at_any_step_of_recovering_with_a_leftover_wal_tmp_recovers_the_same_state() {
    for seed in 1..4 {
        crash_at_every_step_of_recovery(Damage::LeftoverWalTmp, seed);
    }
}

/// Waits for `DurableIndex::wal_failed` to resolve (a bounded wait: it
/// must resolve by itself).
fn wal_failed_resolves(d: &DurableIndex) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), d.wal_failed()).await })
        .is_ok()
}

/// Fsyncgate: a failed fsync may drop the written pages and mark them
/// clean, so a later fsync that succeeds proves nothing. The store must
/// not retry as if nothing happened: the failing write and every write
/// after it are refused, nothing more is acknowledged, the owner is told,
/// and after a power loss every batch acknowledged before the failure is
/// there and none refused after it.
#[test]
fn a_failed_fsync_fails_the_wal_for_good_and_loses_no_acknowledged_batch() {
    // `after`: successful fsyncs before the failing one, once the first
    // batches are in (0: the very next one; more: a later one, possibly a
    // snapshot's or an idle vouch's).
    for after in [0u64, 1, 2, 5] {
        for seed in 0..4u64 {
            let io = SimIo::new();
            let d = DurableIndex::open(config(&io, FsyncPolicy::Always, 4096, 0)).unwrap();
            let mut acked = Model::new();
            for b in 0..50u64 {
                let op = WriteOp::Put {
                    key: Key::new(key(b % 40)).unwrap(),
                    value: value(b),
                };
                d.writes().write_blocking(vec![op]).unwrap();
                apply(&mut acked, &[op]);
                if b == 25 {
                    d.snapshot_now_blocking().unwrap();
                }
            }
            io.set_sync_failure_after(Some(after));
            // Writes until one fails; those acknowledged before it count.
            let mut failed_batch = None;
            for b in 0..200u64 {
                let op = WriteOp::Put {
                    key: Key::new(key(100 + b % 50)).unwrap(),
                    value: value(1000 + b),
                };
                match d.writes().write_blocking(vec![op]) {
                    Ok(_) => {
                        apply(&mut acked, &[op]);
                    }
                    Err(WriteError::WalFailed(_)) => {
                        failed_batch = Some(op);
                        break;
                    }
                    Err(e) => panic!("after {after}: the failed fsync gave another error: {e}"),
                }
            }
            let failed_batch = failed_batch.expect("the planned fsync failure never came");
            // Every later write is refused too, even though the disk works
            // again: nothing is acknowledged after a failed fsync.
            for b in 0..5u64 {
                let op = WriteOp::Put {
                    key: Key::new(key(200 + b)).unwrap(),
                    value: value(b),
                };
                match d.writes().write_blocking(vec![op]) {
                    Err(WriteError::WalFailed(_)) => {}
                    other => panic!("after {after}: a write after the failure gave {other:?}"),
                }
            }
            assert!(d.wal_failure().is_some(), "the failure is not reported");
            assert!(wal_failed_resolves(&d), "wal_failed() never resolved");
            drop(d);
            let disk = io.restart(seed);
            let r = DurableIndex::open(config(&disk, FsyncPolicy::Always, 4096, 0))
                .unwrap_or_else(|e| panic!("after {after}, seed {seed}: recovery failed: {e}"));
            let found = state(&r);
            // The batch whose fsync failed was written but not made durable:
            // it may survive or not (documented on WriteError::WalFailed).
            let mut with_failed = acked.clone();
            apply(&mut with_failed, &[failed_batch]);
            assert!(
                found == acked || found == with_failed,
                "after {after}, seed {seed}: acknowledged batches lost, or refused ones present \
                 ({} entries, {} acknowledged)",
                found.len(),
                acked.len()
            );
            for b in 0..5u64 {
                assert_eq!(
                    r.index().get(&key(200 + b)),
                    None,
                    "a refused batch survived"
                );
            }
        }
    }
}

/// Writers of the overlap tests, and the keys each writes in turn.
const OVERLAP_WRITERS: u64 = 6;

fn writer_key(t: u64, i: u64) -> Key {
    Key::new(key(1_000 + t * 1_000_000 + i)).unwrap()
}

/// `OVERLAP_WRITERS` threads on one store, each putting its keys 0, 1, 2,
/// … one batch at a time until stopped or a write fails, counting its
/// acknowledged writes.
struct Writers {
    d: Arc<DurableIndex>,
    acked: Arc<Vec<AtomicU64>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Writers {
    /// Opens a store on `io` (fsyncs overlapping) and starts the writers.
    fn start(io: &SimIo) -> Writers {
        let d = Arc::new(DurableIndex::open(overlapping(io)).unwrap());
        let acked: Arc<Vec<AtomicU64>> =
            Arc::new((0..OVERLAP_WRITERS).map(|_| AtomicU64::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..OVERLAP_WRITERS)
            .map(|t| {
                let (d, acked, stop) = (d.clone(), acked.clone(), stop.clone());
                std::thread::spawn(move || {
                    for i in 0.. {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let op = WriteOp::Put {
                            key: writer_key(t, i),
                            value: value(i),
                        };
                        if d.writes().write_blocking(vec![op]).is_err() {
                            return;
                        }
                        acked[t as usize].store(i + 1, Ordering::Release);
                    }
                })
            })
            .collect();
        Writers {
            d,
            acked,
            stop,
            threads,
        }
    }

    /// Each writer's acknowledged writes so far.
    fn acked(&self) -> Vec<u64> {
        self.acked
            .iter()
            .map(|a| a.load(Ordering::Acquire))
            .collect()
    }

    /// Waits until `total` writes were acknowledged (a bounded wait).
    fn wait_for(&self, total: u64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.acked().iter().sum::<u64>() < total {
            assert!(
                std::time::Instant::now() < deadline,
                "{total} writes were never acknowledged"
            );
            std::thread::yield_now();
        }
    }

    /// Stops the writers (if they have not stopped by themselves) and
    /// returns the store, the groups it overlapped and each writer's
    /// acknowledged writes.
    fn join(self, stop: bool) -> (Arc<DurableIndex>, u64, Vec<u64>) {
        if stop {
            self.stop.store(true, Ordering::Relaxed);
        }
        let acked = self.acked.clone();
        for t in self.threads {
            t.join().unwrap();
        }
        let overlapped = self.d.stats().overlapped_groups;
        let acked = acked.iter().map(|a| a.load(Ordering::Acquire)).collect();
        (self.d, overlapped, acked)
    }
}

/// Checks a recovered store against the writers: each writer's writes are
/// there as a prefix (they took increasing LSNs), at least `acked[t]` long.
fn check_writers(d: &DurableIndex, acked: &[u64], context: &str) {
    for (t, &acked) in acked.iter().enumerate() {
        let t = t as u64;
        let kept = (0..)
            .take_while(|&i| d.index().get(writer_key(t, i).as_uuid()).is_some())
            .count() as u64;
        assert!(
            kept >= acked,
            "{context}: writer {t} had {acked} writes acknowledged, {kept} survived"
        );
        for i in 0..kept {
            assert_eq!(
                d.index().get(writer_key(t, i).as_uuid()),
                Some(value(i)),
                "{context}: writer {t}'s write {i} has the wrong value"
            );
        }
        for i in kept + 1..kept + 8 {
            assert_eq!(
                d.index().get(writer_key(t, i).as_uuid()),
                None,
                "{context}: writer {t}'s write {i} survived without write {kept}"
            );
        }
    }
}

/// `always`, fsyncs overlapping, WAL files of 16 KiB.
fn overlapping(io: &SimIo) -> DurableConfig {
    let mut c = config(io, FsyncPolicy::Always, 16 << 10, 0);
    c.pipeline.overlap_syncs = true;
    c
}

/// Many writers under `always`, so that one group's fsync overlaps writing
/// the next (`pipeline`, "Overlapping fsyncs"), with small WAL files so
/// that rotations wait for fsyncs in flight, then a power loss at a random
/// moment: every write acknowledged before it survives, and each writer's
/// writes survive as a prefix.
#[test]
fn a_power_loss_while_fsyncs_overlap_keeps_every_acknowledged_write() {
    let mut overlaps = 0;
    for seed in 0..16u64 {
        let io = SimIo::new();
        let writers = Writers::start(&io);
        writers.wait_for(100 + seed * 97);
        // What was acknowledged before the power loss must survive it.
        let before = writers.acked();
        let disk = io.restart(seed);
        let (d, overlapped, _) = writers.join(true);
        overlaps += overlapped;
        drop(d);
        let r = DurableIndex::open(overlapping(&disk))
            .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e}"));
        check_writers(&r, &before, &format!("seed {seed}"));
    }
    assert!(overlaps > 0, "no fsync overlapped: the test proves nothing");
}

/// A failed fsync while fsyncs overlap: the group in flight and the group
/// written after it are refused with the WAL's failure, nothing is
/// acknowledged after it, and every write acknowledged before it survives a
/// power loss.
#[test]
fn a_failed_fsync_while_fsyncs_overlap_loses_no_acknowledged_write() {
    let mut overlaps = 0;
    for seed in 0..16u64 {
        let io = SimIo::new();
        let writers = Writers::start(&io);
        writers.wait_for(50);
        io.set_sync_failure_after(Some(seed * 3));
        // The one failure planned may land on the fsync of a spare or of a
        // new file's header, which is not fatal (the WAL goes on, rightly);
        // plan another until a WAL fsync has failed.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while writers.d.wal_failure().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "seed {seed}: no WAL fsync failed"
            );
            std::thread::sleep(Duration::from_millis(1));
            if !io.sync_failure_planned() && writers.d.wal_failure().is_none() {
                io.set_sync_failure_after(Some(0));
            }
        }
        // Every writer stops at its first refused write.
        let (d, overlapped, acked) = writers.join(false);
        overlaps += overlapped;
        assert!(
            d.wal_failure().is_some(),
            "seed {seed}: the failure is not reported"
        );
        let refused = d.writes().write_blocking(vec![WriteOp::Put {
            key: writer_key(99, 0),
            value: value(0),
        }]);
        assert!(
            matches!(refused, Err(WriteError::WalFailed(_))),
            "seed {seed}: a write after the failure gave {refused:?}"
        );
        drop(d);
        let disk = io.restart(seed);
        let r = DurableIndex::open(overlapping(&disk))
            .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e}"));
        check_writers(&r, &acked, &format!("seed {seed}"));
    }
    assert!(overlaps > 0, "no fsync overlapped: the test proves nothing");
}
