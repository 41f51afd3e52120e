//! WAL replay on every core gives exactly the serial result.
//!
//! - A proptest: a random base state (what a fuzzy snapshot restored),
//!   random records (puts and deletes over a small key pool, so keys are
//!   overwritten, deleted and put again, within a record and across
//!   records), and a random capture LSN per segment; the records are
//!   applied serially and with 2, 3 and one-per-core workers. Every run
//!   must match a model of the fuzzy-capture rule (a key ends with its last
//!   write above its segment's capture, or keeps its base value) and the
//!   serial run table by table, down to the slot layout and stamps.
//! - A large WAL with a snapshot taken while the writes go on, then a stop
//!   that leaves the WAL behind it (as a kill would): recovered serially
//!   and in parallel, both give the acknowledged state. (The same after a
//!   `uuidmap serve` killed with SIGKILL: the root package's
//!   `tests/server/replay_process.rs`.)

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use uuid::Uuid;
use uuidmap_engine::store::Op;
use uuidmap_engine::store::recovery::{RecoveryOptions, recover};
use uuidmap_engine::store::replay_apply::{ReplayWorkers, apply_replay};
use uuidmap_engine::store::snapshot::Load;
use uuidmap_engine::store::{Io, IoFile, MappedFile, OsIo};
use uuidmap_engine::writer::{DurableConfig, DurableIndex, FsyncPolicy, WriteOp};
use uuidmap_index::HashSeeds;
use uuidmap_index::Key;
use uuidmap_index::{Index, IndexWriter};
use uuidmap_testkit_io::replay_data::{assert_same_tables, key, value};

const SEEDS: HashSeeds = HashSeeds([11, 22, 33, 44]);
const SEGMENTS: usize = 8;
const POOL: u64 = 48;

/// A fresh index with the base entries, stamped 0.
fn base_index(base: &[(u64, u64)]) -> (IndexWriter, Index) {
    let (mut w, index) = Index::builder()
        .seeds(SEEDS)
        .segments(SEGMENTS)
        .build()
        .unwrap();
    for &(k, v) in base {
        w.insert(key(k), value(v)).unwrap();
    }
    (w, index)
}

/// `(key, Some(value))` is a put, `(key, None)` a delete.
type Records = Vec<Vec<(u64, Option<u64>)>>;

fn ops_of(record: &[(u64, Option<u64>)]) -> Vec<Op> {
    record
        .iter()
        .map(|&(k, v)| match v {
            Some(v) => Op::Put {
                key: Key::new(key(k)).unwrap(),
                value: value(v),
            },
            None => Op::Delete {
                key: Key::new(key(k)).unwrap(),
            },
        })
        .collect()
}

/// Applies `records` (LSN 1, 2, ...) above `captures` with `workers`.
fn replayed(
    base: &[(u64, u64)],
    records: &Records,
    captures: &[u64],
    workers: ReplayWorkers,
) -> Index {
    let (mut w, index) = base_index(base);
    let ((), report) = apply_replay(&mut w, &index, captures, workers, 16, |sink| {
        for (i, record) in records.iter().enumerate() {
            sink(i as u64 + 1, &ops_of(record));
        }
    });
    let total: usize = records.iter().map(Vec::len).sum();
    assert_eq!((report.ops_applied + report.ops_skipped) as usize, total);
    assert_eq!(
        report.workers.iter().map(|w| w.ops).sum::<u64>(),
        report.ops_applied
    );
    assert_eq!(w.len(), index.len());
    index
}

/// The fuzzy-capture rule, directly: each key's last write above its
/// segment's capture, else its base value.
fn model(
    index: &Index,
    base: &[(u64, u64)],
    records: &Records,
    captures: &[u64],
) -> HashMap<u64, u64> {
    let mut m: HashMap<u64, u64> = base.iter().copied().collect();
    for (i, record) in records.iter().enumerate() {
        let lsn = i as u64 + 1;
        for &(k, v) in record {
            if lsn <= captures[index.segment_of(&key(k))] {
                continue;
            }
            match v {
                Some(v) => m.insert(k, v),
                None => m.remove(&k),
            };
        }
    }
    m
}

fn records_strategy() -> impl Strategy<Value = Records> {
    let op = (0..POOL, prop::option::weighted(0.75, 0..1000u64));
    prop::collection::vec(prop::collection::vec(op, 0..6), 0..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn parallel_replay_equals_serial_for_every_op_order_and_capture_pattern(
        base in prop::collection::hash_map(0..POOL, 0..1000u64, 0..32),
        records in records_strategy(),
        capture_picks in prop::collection::vec(0..=1000u64, SEGMENTS),
    ) {
        let base: Vec<(u64, u64)> = base.into_iter().collect();
        let n = records.len() as u64;
        // Every capture LSN from 0 (nothing captured) to past the end.
        let captures: Vec<u64> = capture_picks.iter().map(|c| c % (n + 2)).collect();
        let serial = replayed(&base, &records, &captures, ReplayWorkers::Serial);
        let expected = model(&serial, &base, &records, &captures);
        prop_assert_eq!(serial.len(), expected.len());
        for k in 0..POOL {
            prop_assert_eq!(serial.get(&key(k)), expected.get(&k).map(|&v| value(v)));
        }
        for workers in [
            ReplayWorkers::Threads(1),
            ReplayWorkers::Threads(2),
            ReplayWorkers::Threads(3),
            ReplayWorkers::PerCore,
        ] {
            let parallel = replayed(&base, &records, &captures, workers);
            assert_same_tables(&serial, &parallel, &format!("{workers:?}"));
        }
    }
}

#[test]
fn an_empty_capture_list_applies_every_op() {
    let records: Records = vec![vec![(1, Some(5)), (2, Some(6))], vec![(1, None)]];
    let index = replayed(&[], &records, &[], ReplayWorkers::Threads(2));
    assert_eq!(index.len(), 1);
    assert_eq!(index.get(&key(2)), Some(value(6)));
}

/// Keys of the large test: a pool smaller than the writes, so that most
/// writes overwrite and some delete.
const LARGE_KEYS: u64 = 150_000;

#[test]
fn a_large_wal_after_a_fuzzy_snapshot_recovers_alike_serially_and_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = DurableConfig::new(dir.path());
    config.pipeline.policy = FsyncPolicy::Never;
    config.pipeline.snapshot_every_bytes = 0;
    config.snapshot_every = None;
    config.snapshot_on_shutdown = false;
    config.wal_segment_bytes = 4 << 20;
    let durable = DurableIndex::open(config).unwrap();
    let mut model: HashMap<Uuid, Uuid> = HashMap::new();
    let mut x = 0x1234_5678u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut batch = |durable: &DurableIndex| {
        let mut ops = Vec::with_capacity(1000);
        for _ in 0..1000 {
            let r = next();
            let k = key(r % LARGE_KEYS);
            if r % 10 == 0 {
                ops.push(WriteOp::Delete {
                    key: Key::new(k).unwrap(),
                });
                model.remove(&k);
            } else {
                let v = value(r);
                ops.push(WriteOp::Put {
                    key: Key::new(k).unwrap(),
                    value: v,
                });
                model.insert(k, v);
            }
        }
        durable.writes().write_blocking(ops).unwrap();
    };
    for _ in 0..150 {
        batch(&durable);
    }
    std::thread::scope(|s| {
        // A fuzzy snapshot, taken while the batches go on.
        let d = &durable;
        let snapshot = s.spawn(move || d.snapshot_now_blocking());
        for _ in 0..150 {
            batch(&durable);
        }
        snapshot.join().unwrap().unwrap();
    });
    for _ in 0..100 {
        batch(&durable);
    }
    // Leave as a kill would: no final snapshot, the WAL holds the rest.
    drop(durable);
    std::thread::sleep(Duration::from_millis(10));

    let mut results = Vec::new();
    // A tail this long (250K puts over 135K entries) is presized for, so
    // the snapshot is mapped by default; read into memory, forced, the
    // state is the same.
    for (workers, load) in [
        (ReplayWorkers::Serial, None),
        (ReplayWorkers::Threads(2), None),
        (ReplayWorkers::Threads(5), Some(Load::Read)),
        (ReplayWorkers::PerCore, None),
        (ReplayWorkers::PerCore, Some(Load::Read)),
    ] {
        let options = RecoveryOptions {
            read_only: true,
            replay_workers: workers,
            snapshot_load: load,
            ..RecoveryOptions::default()
        };
        let r = recover(&OsIo, dir.path(), &options).unwrap();
        assert_eq!(r.report.phases.load, load.unwrap_or(Load::Map));
        assert!(r.report.snapshot.is_some(), "the snapshot was used");
        assert!(
            r.report.records_replayed >= 100,
            "{workers:?}: the WAL after it was replayed"
        );
        assert_eq!(r.index.len(), model.len(), "{workers:?}");
        for (k, v) in &model {
            assert_eq!(r.index.get(k), Some(*v), "{workers:?}");
        }
        assert!(r.report.phases.presized_for >= r.report.ops_replayed / 2);
        results.push(((workers, load), r));
    }
    for (how, r) in &results[1..] {
        assert_same_tables(&results[0].1.index, &r.index, &format!("{how:?}"));
    }
}

/// A tail of updates to half as many keys as the snapshot has pages, and
/// fewer than an eighth of its entries: the snapshot is read into memory
/// (its checksums checked as it arrives), and the state is the mapped
/// one's, key for key.
#[test]
fn a_tail_that_would_write_most_pages_reads_the_snapshot_and_recovers_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    // The tail's estimate counts the WAL file that holds the snapshot's LSN
    // whole, puts from before the snapshot included, so the files are kept
    // small (128 KiB, about 4 batches): the estimate is then the tail's
    // 5,000 puts and at most 4,000 more, under an eighth of the entries.
    // (With 64 MiB files it depended on when the first file was left for a
    // spare, a matter of timing.)
    let mut config = budget_config(dir.path(), None);
    config.wal_segment_bytes = 128 << 10;
    let durable = DurableIndex::open(config).unwrap();
    write_puts(&durable, 0, 100); // 100K keys: a snapshot of ~1,000 pages
    durable.snapshot_now_blocking().unwrap();
    let updates: Vec<WriteOp> = (0..5_000u64)
        .map(|i| WriteOp::Put {
            key: Key::new(key((i * 7_919) % 100_000)).unwrap(),
            value: value(1_000_000 + i),
        })
        .collect();
    for chunk in updates.chunks(500) {
        durable.writes().write_blocking(chunk.to_vec()).unwrap();
    }
    drop(durable);
    let recovered = |load| {
        let options = RecoveryOptions {
            read_only: true,
            snapshot_load: load,
            ..RecoveryOptions::default()
        };
        recover(&OsIo, dir.path(), &options).unwrap()
    };
    let read = recovered(None);
    assert_eq!(read.report.phases.load, Load::Read);
    // Without memory for the copy, the snapshot is mapped instead, not
    // set aside: the same state.
    let options = RecoveryOptions {
        read_only: true,
        ..RecoveryOptions::default()
    };
    let no_room = recover(&NoRoomForCopies, dir.path(), &options).unwrap();
    assert_eq!(no_room.report.phases.load, Load::Map);
    assert!(no_room.report.snapshot.is_some() && no_room.report.rejected.is_empty());
    assert_same_tables(
        &read.index,
        &no_room.index,
        "read and mapped for want of room",
    );
    drop(no_room);
    assert_eq!(read.report.ops_replayed, 5_000);
    assert_eq!(
        read.report.phases.verify,
        Duration::ZERO,
        "checked as it was read"
    );
    let mapped = recovered(Some(Load::Map));
    assert_eq!(mapped.report.phases.load, Load::Map);
    assert_eq!(read.index.len(), 100_000);
    for i in 0..5_000u64 {
        let k = key((i * 7_919) % 100_000);
        assert_eq!(read.index.get(&k), mapped.index.get(&k), "key {k}");
    }
    assert_same_tables(&read.index, &mapped.index, "read and mapped");
    let updated: Vec<_> = (0..5_000u64)
        .map(|i| {
            // 7,919 is prime to 100,000: each key is updated once.
            let k = key((i * 7_919) % 100_000);
            assert_eq!(mapped.index.get(&k), Some(value(1_000_000 + i)), "key {k}");
            (k, Some(value(1_000_000 + i)))
        })
        .collect();
    // A mapped index shows the file's bytes: let it go before the file is
    // damaged below.
    drop((read, mapped));

    // A damaged byte in a segment is caught as the snapshot is read: the
    // snapshot is rejected, and the WAL (whole since LSN 1 here) gives the
    // same state.
    let snap = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "snap"))
        .unwrap();
    let mut bytes = std::fs::read(&snap).unwrap();
    bytes[4096 + 40] ^= 4;
    let damaged = dir.path().join("damaged.tmp");
    std::fs::write(&damaged, &bytes).unwrap();
    std::fs::rename(&damaged, &snap).unwrap();
    let from_wal = recovered(None);
    assert_eq!(from_wal.report.snapshot, None);
    assert!(
        from_wal.report.rejected[0].contains("checksum does not match"),
        "{:?}",
        from_wal.report.rejected
    );
    assert_eq!(from_wal.index.len(), 100_000);
    for (k, v) in updated {
        assert_eq!(from_wal.index.get(&k), v, "key {k}");
    }
}

/// The real file system, except that no memory can be had for a whole
/// file's copy: `read_private` fails as the allocation would.
struct NoRoomForCopies;

impl Io for NoRoomForCopies {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        OsIo.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        OsIo.list(dir)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        OsIo.create(path)
    }
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        OsIo.open_write(path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        OsIo.read(path)
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        OsIo.file_len(path)
    }
    fn map_private(&self, path: &Path) -> io::Result<MappedFile> {
        OsIo.map_private(path)
    }
    fn read_private(
        &self,
        _: &Path,
        _: &[std::ops::Range<usize>],
        _: &(dyn Fn(usize, &[u8]) + Sync),
    ) -> io::Result<MappedFile> {
        Err(io::Error::from_raw_os_error(libc::ENOMEM))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsIo.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        OsIo.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        OsIo.sync_dir(dir)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        OsIo.truncate(path, len)
    }
}

/// A durable index in `dir` for the budget tests: no fsync, no timed or
/// final snapshot, the WAL-bytes trigger at 256 MiB unless the budget is
/// smaller.
fn budget_config(dir: &std::path::Path, max_replay: Option<Duration>) -> DurableConfig {
    let mut config = DurableConfig::new(dir);
    config.pipeline.policy = FsyncPolicy::Never;
    config.pipeline.snapshot_every_bytes = 256 << 20;
    config.snapshot_every = None;
    config.snapshot_on_shutdown = false;
    config.max_replay = max_replay;
    config
}

/// Writes `batches` batches of 1,000 new keys (about 33 KB of WAL each).
fn write_puts(durable: &DurableIndex, from: u64, batches: u64) {
    for b in from..from + batches {
        let ops = (0..1000)
            .map(|i| WriteOp::Put {
                key: Key::new(key(b * 1000 + i)).unwrap(),
                value: value(b),
            })
            .collect();
        durable.writes().write_blocking(ops).unwrap();
    }
}

fn wait_for_snapshots(durable: &DurableIndex, n: u64) -> bool {
    for _ in 0..500 {
        if durable.stats().snapshots_taken >= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn the_replay_budget_triggers_a_snapshot_before_the_wal_would_take_longer_to_replay() {
    // 100 ms at 20 MB/s: 2 MB of WAL, of which three quarters (1.5 MB) may
    // accumulate before a snapshot is asked for.
    let dir = tempfile::tempdir().unwrap();
    let mut config = budget_config(dir.path(), Some(Duration::from_millis(100)));
    config.replay_bytes_per_sec = Some(20e6);
    let durable = DurableIndex::open(config).unwrap();
    assert_eq!(durable.stats().snapshot_trigger_bytes, 1_500_000);
    assert_eq!(durable.stats().replay_bytes_per_sec, 20_000_000);
    write_puts(&durable, 0, 40); // 1.3 MB: under the trigger
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(durable.stats().snapshots_taken, 0, "too early");
    write_puts(&durable, 40, 20); // 2 MB in all
    assert!(
        wait_for_snapshots(&durable, 1),
        "the budget's trigger fired"
    );
    drop(durable);

    // Without a budget, the byte trigger (256 MiB) alone: no snapshot.
    let dir = tempfile::tempdir().unwrap();
    let durable = DurableIndex::open(budget_config(dir.path(), None)).unwrap();
    assert_eq!(durable.stats().snapshot_trigger_bytes, 256 << 20);
    write_puts(&durable, 0, 60);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(durable.stats().snapshots_taken, 0);
}

#[test]
fn a_restart_that_replayed_past_the_budget_snapshots_in_the_background_and_the_next_replays_nothing()
 {
    let dir = tempfile::tempdir().unwrap();
    // A long WAL and no snapshot, left as a kill leaves it.
    let durable = DurableIndex::open(budget_config(dir.path(), None)).unwrap();
    write_puts(&durable, 0, 100);
    drop(durable);

    let durable =
        DurableIndex::open(budget_config(dir.path(), Some(Duration::from_millis(1)))).unwrap();
    let report = durable.recovery_report();
    assert!(report.snapshot.is_none());
    assert_eq!(report.ops_replayed, 100_000);
    assert!(
        report.phases.replay > Duration::from_millis(1),
        "the replay took longer than the budget"
    );
    assert!(
        wait_for_snapshots(&durable, 1),
        "a snapshot followed the restart"
    );
    drop(durable);

    let durable = DurableIndex::open(budget_config(dir.path(), None)).unwrap();
    let report = durable.recovery_report();
    assert!(
        report.snapshot.is_some(),
        "the next restart maps the snapshot"
    );
    assert_eq!(report.ops_replayed, 0, "and replays nothing");
    assert_eq!(durable.index().len(), 100_000);
}
