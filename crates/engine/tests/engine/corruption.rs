//! Damaged files: bytes flipped in, or files cut short at, random offsets of
//! every snapshot and WAL file. Each case must end in one of:
//!
//! - the full, right state (the damage was detected and recovery fell back
//!   to the previous snapshot and the longer WAL, or the damaged file was
//!   not needed);
//! - an error that names the damaged file.
//!
//! The store was stopped cleanly, and a clean stop leaves the whole log
//! vouched for by its files' headers (synced-end marks): so damage to any
//! WAL file, the last one included, is never a torn tail that may be cut.
//! Recovering fewer batches than were acknowledged would be silent loss.
//!
//! Never a panic, never a state that did not exist.

use std::path::{Path, PathBuf};

use uuid::Uuid;
use uuidmap_engine::store::OsIo;
use uuidmap_engine::store::recovery::{RecoveryOptions, recover};
use uuidmap_engine::writer::{DurableConfig, DurableIndex};
use uuidmap_testkit_io::batch_model::{Model, mixed_batch};
use uuidmap_testkit_io::data::mix;

const KEYS: u64 = 40;

fn key(k: u64) -> Uuid {
    Uuid::from_u128(0xc0de_0000_0000_0000_0000_0000_0000_0000 | (k as u128 + 1))
}

/// Writes 300 batches with two snapshots in between; returns the state
/// after every batch (index 0: empty).
fn build(dir: &Path) -> Vec<Model> {
    let mut config = DurableConfig::new(dir);
    config.snapshot_every = None;
    config.snapshot_on_shutdown = false;
    config.pipeline.snapshot_every_bytes = 0;
    config.wal_segment_bytes = 2048;
    let durable = DurableIndex::open(config).unwrap();
    let mut states = vec![Model::new()];
    for b in 1..=300u64 {
        let mut model = states.last().unwrap().clone();
        let ops = mixed_batch(&mut model, 0, b, 3, |r| key(r % KEYS));
        durable.writes().write_blocking(ops).unwrap();
        states.push(model);
        if b == 100 || b == 200 {
            durable.snapshot_now_blocking().unwrap();
        }
    }
    drop(durable);
    states
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

fn copy_dir(from: &Path, to: &Path) {
    for f in files(from) {
        std::fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
    }
}

#[test]
fn damaged_snapshots_and_wal_files_are_detected_and_never_give_wrong_answers() {
    let template = tempfile::tempdir().unwrap();
    let states = build(template.path());
    let full = states.last().unwrap();
    let names = files(template.path());
    let snapshots: Vec<_> = names
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "snap"))
        .collect();
    let wals: Vec<_> = names
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    assert_eq!(snapshots.len(), 2, "two snapshots are retained: {names:?}");
    assert!(wals.len() >= 3, "the WAL rotated: {names:?}");
    let (mut fell_back, mut refused) = (0, 0);
    for case in 0..300u64 {
        let r = mix(case ^ 0x5eed);
        let target = &names[(r % names.len() as u64) as usize];
        let name = target.file_name().unwrap().to_owned();
        let dir = tempfile::tempdir().unwrap();
        copy_dir(template.path(), dir.path());
        let path = dir.path().join(&name);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = (mix(r) % bytes.len() as u64) as usize;
        let what = if r.is_multiple_of(3) {
            bytes.truncate(at);
            format!("{} cut to {at} bytes", name.to_string_lossy())
        } else {
            bytes[at] ^= 1 << (mix(r + 1) % 8);
            format!("{} with a bit flipped at byte {at}", name.to_string_lossy())
        };
        std::fs::write(&path, &bytes).unwrap();
        let outcome =
            std::panic::catch_unwind(|| recover(&OsIo, dir.path(), &RecoveryOptions::default()));
        let outcome = outcome.unwrap_or_else(|_| panic!("recovery panicked on {what}"));
        match outcome {
            Ok(recovered) => {
                let state: Model = (0..KEYS)
                    .filter_map(|k| recovered.index.get(&key(k)).map(|v| (key(k), v)))
                    .collect();
                assert_eq!(recovered.index.len(), state.len(), "{what}");
                // Nothing of a cleanly stopped log may be cut: the exact
                // acknowledged state, at its LSN, or a refusal.
                assert!(
                    &state == full,
                    "{what}: recovered {} entries at LSN {}, not the acknowledged state \
                     ({} entries at LSN 300){}",
                    state.len(),
                    recovered.report.last_lsn,
                    full.len(),
                    if states.contains(&state) {
                        " but an earlier one: silent loss"
                    } else {
                        ": a state that never existed"
                    }
                );
                assert_eq!(recovered.report.last_lsn, 300, "{what}");
                if !recovered.report.rejected.is_empty() {
                    fell_back += 1;
                }
            }
            Err(e) => {
                let message = e.to_string();
                assert!(
                    message.contains(&*name.to_string_lossy()),
                    "{what}: the error does not name the damaged file: {message}"
                );
                refused += 1;
            }
        }
    }
    eprintln!(
        "300 damaged copies: {fell_back} fell back to the previous snapshot, {refused} refused"
    );
    assert!(
        fell_back > 0 && refused > 0,
        "both fallback and refusal happen"
    );
}

/// A snapshot in a format version newer than this build reads (a newer
/// build wrote it, before this one was started on its directory) is not
/// damage: a start passes over it to the older snapshot and the longer WAL,
/// gives the whole state, says why, and leaves the file where it is, so
/// that the newer build finds it again.
#[test]
fn a_snapshot_from_a_newer_build_is_passed_over_and_left_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let states = build(dir.path());
    let newest = files(dir.path())
        .into_iter()
        .rfind(|p| p.extension().is_some_and(|e| e == "snap"))
        .unwrap();
    // What a newer build's file looks like through the framing every
    // version keeps: the version in the prologue and in the header, whose
    // checksum holds (docs/format.md, "Snapshot").
    let mut bytes = std::fs::read(&newest).unwrap();
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    let n = bytes.len();
    let at = u64::from_le_bytes(bytes[n - 16..n - 8].try_into().unwrap()) as usize;
    for v in [8, at + 8] {
        bytes[v..v + 4].copy_from_slice(&(version + 1).to_le_bytes());
    }
    let crc = uuidmap_engine::store::crc32c(&bytes[at..n - 20]);
    bytes[n - 20..n - 16].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&newest, &bytes).unwrap();
    let recovered = recover(&OsIo, dir.path(), &RecoveryOptions::default()).unwrap();
    let state: Model = (0..KEYS)
        .filter_map(|k| recovered.index.get(&key(k)).map(|v| (key(k), v)))
        .collect();
    assert!(&state == states.last().unwrap(), "the whole state");
    assert_eq!(recovered.report.last_lsn, 300);
    let why = recovered.report.rejected.join("; ");
    assert!(
        why.contains(&format!("format version {}", version + 1)) && why.contains("newer build"),
        "{why}"
    );
    assert!(newest.exists(), "left in place, not set aside");
    assert_eq!(std::fs::read(&newest).unwrap(), bytes, "and unchanged");
}
