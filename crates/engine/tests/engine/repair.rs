//! A WAL that lost records a snapshot already holds (the state a damaged
//! disk, or before format 2 a power cut under `never`, leaves), and the
//! repair that gets a directory past damage.
//!
//! - Recovery never serves a mix of the snapshot and a shorter log: it
//!   refuses, naming the snapshot and the WAL file.
//! - The repair (`truncate_corrupt_wal`) sets such a snapshot aside and
//!   recovers an exact prefix from the older one; the result accepts writes
//!   and restarts after them (any state that accepts a write restarts).
//! - The same through the binary (`uuidmap check`, `uuidmap repair
//!   --dry-run`, `uuidmap repair`): the root package's
//!   `tests/server/repair_command.rs`.
//!
//! The directory every test starts from: `uuidmap_testkit_io::grouped_writes`.

use std::path::PathBuf;
use std::sync::Arc;

use uuidmap_engine::store::recovery::{RecoveryOptions, recover};
use uuidmap_engine::store::wal::WalCursor;
use uuidmap_engine::store::{Io, StoreError, WalCorrupt, WalReadError};
use uuidmap_engine::writer::WriteOp;
use uuidmap_index::Key;
use uuidmap_testkit_io::SimIo;
use uuidmap_testkit_io::grouped_writes::{build, groups_of, key, open, value};
use uuidmap_testkit_io::wal_damage::cut_wal_after;

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
