//! A WAL that lost records a snapshot already holds (the state a damaged
//! disk, or before format 2 a power cut under `never`, leaves), and the
//! repair that gets a directory past damage.
//!
//! - Recovery never serves a mix of the snapshot and a shorter log: it
//!   refuses, naming the snapshot and the WAL file.
//! - The repair (`truncate_corrupt_wal`) sets such a snapshot aside and
//!   recovers an exact prefix from the older one; the result accepts writes
//!   and restarts after them (any state that accepts a write restarts).
//! - `uuidmap check` changes nothing and names the repair command;
//!   `uuidmap repair --dry-run` reports what a repair would cut and changes
//!   nothing; `uuidmap repair` does it, and the server's state then starts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use uuid::Uuid;
use uuidmap::Key;
use uuidmap::store::recovery::{RecoveryOptions, recover};
use uuidmap::store::wal::Preallocate;
use uuidmap::store::wal::{WalCursor, list_wal_files};
use uuidmap::store::{Io, OsIo, StoreError, WalCorrupt, WalReadError};
use uuidmap::writer::{DurableConfig, DurableIndex, FsyncPolicy, WriteOp};
use uuidmap_testkit::SimIo;

fn key(group: u64, i: u64) -> Uuid {
    Uuid::from_u128(((group as u128 + 1) << 64) | (i as u128 + 1))
}

fn value(batch: u64) -> Uuid {
    Uuid::from_u128(0xfeed_0000_0000_0000_0000_0000_0000_0000 | batch as u128)
}

fn open(io: Arc<dyn Io>, dir: &Path) -> Result<DurableIndex, StoreError> {
    let mut c = DurableConfig::new(dir);
    c.io = io;
    c.snapshot_every = None;
    c.pipeline.policy = FsyncPolicy::Never;
    c.wal_segment_bytes = 1 << 20;
    c.wal_preallocate = Preallocate::Inline;
    DurableIndex::open(c)
}

/// Ten groups of 200 keys, each group rewritten whole by one batch: a mix
/// of two batches is visible as a group holding two values. Two snapshots
/// (after batches 10 and 30). Returns the value of every group after each
/// batch (index 0: before any).
fn build(io: Arc<dyn Io>, dir: &Path) -> Vec<Vec<Option<u64>>> {
    let d = open(io, dir).unwrap();
    let mut states = vec![vec![None; 10]];
    for batch in 1..=40u64 {
        let group = batch % 10;
        let ops = (0..200)
            .map(|i| WriteOp::Put {
                key: Key::new(key(group, i)).unwrap(),
                value: value(batch),
            })
            .collect();
        assert_eq!(d.writes().write_blocking(ops).unwrap().lsn, batch);
        let mut state = states.last().unwrap().clone();
        state[group as usize] = Some(batch);
        states.push(state);
        if batch == 10 || batch == 30 {
            d.snapshot_now_blocking().unwrap();
        }
    }
    drop(d); // no final snapshot: the newest stays at LSN 30
    states
}

/// Each group's value, failing on a group that holds two (a mix).
fn groups_of(index: &uuidmap::Index) -> Vec<Option<u64>> {
    (0..10)
        .map(|g| {
            let values: BTreeMap<Option<Uuid>, u64> = (0..200).fold(BTreeMap::new(), |mut m, i| {
                *m.entry(index.get(&key(g, i))).or_default() += 1;
                m
            });
            assert_eq!(values.len(), 1, "group {g} mixes batches: {values:?}");
            values
                .keys()
                .next()
                .unwrap()
                .map(|v| (v.as_u128() & 0xffff_ffff) as u64)
        })
        .collect()
}

/// Cuts the WAL right after the record of `lsn`, and rewrites the file
/// header's synced-end slots to vouch for exactly what is left (otherwise
/// they report the cut as damage to synced records first): the log as a
/// damaged disk could leave it with nothing in the file itself to show the
/// loss (`docs/format.md` has the slot layout).
fn cut_wal_after(io: &dyn Io, dir: &Path, lsn: u64) -> PathBuf {
    let mut cursor = WalCursor::open(io, dir, lsn).unwrap();
    let rec = cursor.next_record().unwrap().unwrap();
    assert_eq!(rec.lsn, lsn);
    let (path, end) = (rec.path.to_path_buf(), rec.offset + rec.len);
    let mut data = io.read(&path).unwrap();
    data.truncate(end as usize);
    for slot in [24, 44] {
        data[slot..slot + 8].copy_from_slice(&lsn.to_le_bytes());
        data[slot + 8..slot + 16].copy_from_slice(&end.to_le_bytes());
        let crc = crc32c::crc32c(&data[slot..slot + 16]);
        data[slot + 16..slot + 20].copy_from_slice(&crc.to_le_bytes());
    }
    io.remove(&path).unwrap();
    let mut file = io.create(&path).unwrap();
    file.write_all(&data).unwrap();
    file.sync().unwrap();
    io.sync_dir(dir).unwrap();
    for later in list_wal_files(io, dir).unwrap() {
        if later.path > path {
            io.remove(&later.path).unwrap();
        }
    }
    path
}

#[test]
fn a_cut_the_file_header_vouches_against_is_refused_naming_file_and_offset() {
    let sim = SimIo::new();
    let dir = PathBuf::from("/data");
    build(Arc::new(sim.clone()), &dir);
    let mut cursor = WalCursor::open(&sim, &dir, 27).unwrap();
    let rec = cursor.next_record().unwrap().unwrap();
    let (path, end) = (rec.path.to_path_buf(), rec.offset + rec.len);
    sim.truncate(&path, end).unwrap();
    match open(Arc::new(sim.clone()), &dir).err().expect("refused") {
        StoreError::WalRead(WalReadError::Corrupt(WalCorrupt {
            path: p,
            offset,
            reason,
        })) => {
            assert_eq!((p, offset), (path, end));
            assert!(reason.contains("cut short"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other}"),
    }
}

#[test]
fn a_log_that_ends_before_its_snapshot_is_refused_never_served_as_a_mix() {
    let sim = SimIo::new();
    let dir = PathBuf::from("/data");
    build(Arc::new(sim.clone()), &dir);
    let wal = cut_wal_after(&sim, &dir, 27);
    let err = open(Arc::new(sim.clone()), &dir).err().expect("refused");
    match &err {
        StoreError::WalBehindSnapshot {
            snapshot,
            snapshot_lsn,
            log_end,
            last_file,
        } => {
            assert!(snapshot.ends_with("snapshot-00000000000000000030.snap"));
            assert_eq!((*snapshot_lsn, *log_end), (30, 27));
            assert_eq!(last_file.as_deref(), Some(wal.as_path()));
        }
        other => panic!("expected WalBehindSnapshot, got {other}"),
    }
    assert!(err.repairable());
    let message = err.to_string();
    assert!(
        message.contains("snapshot-00000000000000000030.snap"),
        "{message}"
    );
    assert!(message.contains(&wal.display().to_string()), "{message}");
}

#[test]
fn the_repair_sets_the_snapshot_aside_and_the_directory_then_accepts_writes_and_restarts() {
    let sim = SimIo::new();
    let dir = PathBuf::from("/data");
    let states = build(Arc::new(sim.clone()), &dir);
    cut_wal_after(&sim, &dir, 27);

    // The dry run changes nothing and says what it would do.
    let before: Vec<String> = {
        let mut l = sim.list(&dir).unwrap();
        l.sort();
        l
    };
    let dry = RecoveryOptions {
        truncate_corrupt_wal: true,
        read_only: true,
        ..RecoveryOptions::default()
    };
    let planned = recover(&sim, &dir, &dry).unwrap();
    assert_eq!(planned.report.last_lsn, 27);
    assert_eq!(planned.report.set_aside.len(), 1);
    let mut after = sim.list(&dir).unwrap();
    after.sort();
    assert_eq!(after, before, "a dry run changes no file");

    let repair = RecoveryOptions {
        truncate_corrupt_wal: true,
        ..RecoveryOptions::default()
    };
    let repaired = recover(&sim, &dir, &repair).unwrap();
    assert_eq!(repaired.report.last_lsn, 27);
    assert_eq!(groups_of(&repaired.index), states[27], "exactly the prefix");
    drop(repaired);
    assert!(
        sim.list(&dir)
            .unwrap()
            .iter()
            .any(|n| n.ends_with(".snap.beyond-log")),
        "set aside, kept for inspection"
    );

    // A plain start now works, writes continue at LSN 28 (reusing the
    // LSNs the set-aside snapshot held, which is why it had to go), and
    // the directory restarts after them, also after a power loss.
    let d = open(Arc::new(sim.clone()), &dir).unwrap();
    assert_eq!(groups_of(&d.index()), states[27]);
    let lsn = d
        .writes()
        .write_blocking(vec![WriteOp::Put {
            key: Key::new(key(3, 0)).unwrap(),
            value: value(99),
        }])
        .unwrap()
        .lsn;
    assert_eq!(lsn, 28);
    d.snapshot_now_blocking().unwrap();
    drop(d);
    for seed in 0..4 {
        let d = open(Arc::new(sim.restart(seed)), &dir).unwrap();
        assert_eq!(d.index().get(&key(3, 0)), Some(value(99)));
        assert_eq!(d.watermark().current(), 28);
    }
}

fn uuidmap(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_uuidmap"))
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

#[test]
fn check_names_the_repair_command_and_repair_dry_run_then_repair_get_the_directory_going() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let states = build(Arc::new(OsIo), dir);
    cut_wal_after(&OsIo, dir, 27);
    let d = dir.to_str().unwrap();

    let check = uuidmap(&["check", "--data-dir", d]);
    assert_eq!(check.status.code(), Some(1));
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(
        err.contains(&format!("uuidmap repair --data-dir {d} --dry-run")),
        "{err}"
    );

    let listing = || {
        let mut l: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        l.sort();
        l
    };
    let before = listing();
    let dry = uuidmap(&["repair", "--data-dir", d, "--dry-run"]);
    assert_eq!(dry.status.code(), Some(0), "{dry:?}");
    let out = String::from_utf8_lossy(&dry.stdout);
    assert!(out.contains("would be renamed *.beyond-log"), "{out}");
    assert!(out.contains("acknowledged writes lost"), "{out}");
    assert!(out.contains("LSN 28..=30"), "{out}");
    assert_eq!(listing(), before, "the dry run changed nothing");

    let repair = uuidmap(&["repair", "--data-dir", d]);
    assert_eq!(repair.status.code(), Some(0), "{repair:?}");
    let check = uuidmap(&["check", "--data-dir", d]);
    assert_eq!(check.status.code(), Some(0), "{check:?}");
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(out.contains("last LSN          27"), "{out}");
    let again = uuidmap(&["repair", "--data-dir", d, "--dry-run"]);
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("nothing to repair"),
        "{again:?}"
    );
    let d = open(Arc::new(OsIo), dir).unwrap();
    assert_eq!(groups_of(&d.index()), states[27]);
}
