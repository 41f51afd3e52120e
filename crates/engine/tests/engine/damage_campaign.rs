//! Damage campaign: a directory written under fsync policy `always` (WAL
//! rotation, a snapshot or two), stopped cleanly or by a crash, gets ONE
//! random mutation in ONE random file (a WAL file or a snapshot, headers
//! included): a flipped byte, a zeroed range, or a cut. Then plain recovery
//! (no repair).
//!
//! The outcome must be one of:
//! - exactly the state the undamaged directory recovers (which holds every
//!   acknowledged batch; e.g. by falling back to an older snapshot), or,
//!   after a crash, exactly the acknowledged state (the batch in flight at
//!   the crash was never acknowledged, so it may go);
//! - an error naming the damaged file (for WAL damage, also a byte offset
//!   or the gap the damage left).
//!
//! Never `Ok` with another state: that is silent loss of acknowledged
//! writes. One exception, encoded in `allowed_cut`: after a *crash* (not a
//! clean stop), damage lying entirely inside the last group committed
//! before the crash may be cut as a torn tail. That group's fsync is the
//! one that made it durable, and the header's synced-end mark written with
//! that fsync vouches only for the groups before it (vouching for the group
//! itself could claim bytes a power loss mid-fsync did not keep), so
//! nothing on disk tells damage in it from a torn write. A clean stop
//! vouches for the whole log, so there is no such exception after one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use uuid::Uuid;
use uuidmap_engine::store::recovery::{RecoveryOptions, recover};
use uuidmap_engine::store::wal::HEADER_LEN;
use uuidmap_engine::store::wal::Preallocate;
use uuidmap_engine::store::{Io, StoreError, WalReadError};
use uuidmap_engine::writer::{DurableConfig, DurableIndex, FsyncPolicy};
use uuidmap_testkit_io::SimIo;
use uuidmap_testkit_io::batch_model::{Model, mixed_batch};

const KEYS: u64 = 64;
const DIR: &str = "/data";

fn key(k: u64) -> Uuid {
    Uuid::from_u128(0xda3a_0000_0000_0000_0000_0000_0000_0000 | (k as u128 + 1))
}

/// How the writing process ended.
#[derive(Clone, Copy, Debug)]
enum End {
    CleanStop,
    /// Died at its k-th mutating call after the writes began, then a power
    /// loss with this seed.
    Crash(u64, u64),
}

/// What the undamaged directory holds.
struct Built {
    disk: SimIo,
    /// State after each acknowledged batch, by LSN (index 0: empty).
    states: Vec<Model>,
    /// The batch in flight when the process died (never acknowledged).
    in_flight: Option<Model>,
    crashed: bool,
}

fn build(batches: u64, snapshots: &[u64], end: End, seed: u64) -> Built {
    let io = SimIo::new();
    let mut c = DurableConfig::new(PathBuf::from(DIR));
    c.io = Arc::new(io.clone());
    c.snapshot_every = None;
    c.snapshot_on_shutdown = false;
    c.pipeline.snapshot_every_bytes = 0;
    c.pipeline.policy = FsyncPolicy::Always;
    c.wal_segment_bytes = 1024;
    c.wal_preallocate = Preallocate::Inline;
    let d = DurableIndex::open(c).unwrap();
    if let End::Crash(k, _) = end {
        io.set_crash_after(Some(k));
    }
    let mut states = vec![Model::new()];
    let mut in_flight = None;
    for b in 1..=batches {
        let mut model = states.last().unwrap().clone();
        let ops = mixed_batch(&mut model, seed, b, 4, |r| key(r % KEYS));
        match d.writes().write_blocking(ops) {
            Ok(o) => {
                assert_eq!(o.lsn, b);
                states.push(model);
            }
            Err(e) => {
                assert!(io.crashed(), "a write failed without a crash: {e}");
                in_flight = Some(model);
                break;
            }
        }
        if snapshots.contains(&b) && d.snapshot_now_blocking().is_err() {
            assert!(io.crashed(), "a snapshot failed without a crash");
        }
        if io.crashed() {
            break;
        }
    }
    let crashed = io.crashed();
    let disk = match end {
        End::CleanStop => {
            d.shutdown();
            // Everything is synced: this power loss keeps it all.
            io.restart(seed)
        }
        End::Crash(_, power) => {
            drop(d);
            io.restart(power)
        }
    };
    Built {
        disk,
        states,
        in_flight,
        crashed,
    }
}

fn state_of(r: &uuidmap_engine::store::recovery::Recovered) -> Model {
    let s: Model = (0..KEYS)
        .filter_map(|k| r.index.get(&key(k)).map(|v| (key(k), v)))
        .collect();
    assert_eq!(r.index.len(), s.len());
    s
}

/// One mutation of one file.
#[derive(Clone, Copy, Debug)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Zero { at: usize, len: usize },
    Cut { at: usize },
}

impl Mutation {
    /// The byte range it changes (a cut: from the cut to the old end).
    fn range(&self, len: usize) -> (usize, usize) {
        match *self {
            Mutation::Flip { at, .. } => (at, at + 1),
            Mutation::Zero { at, len: n } => (at, (at + n).min(len)),
            Mutation::Cut { at } => (at, len),
        }
    }
}

/// Byte offsets where each record of a WAL file starts, by LSN.
fn record_starts(bytes: &[u8]) -> BTreeMap<u64, usize> {
    let mut starts = BTreeMap::new();
    let mut at = HEADER_LEN;
    while at + 24 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let lsn = u64::from_le_bytes(bytes[at + 4..at + 12].try_into().unwrap());
        if at + 24 + len > bytes.len() {
            break;
        }
        starts.insert(lsn, at);
        at += 24 + len;
    }
    starts
}

/// The one loss the test lets through (module docs): after a crash, damage
/// entirely inside the last group committed before the crash (the last
/// acknowledged batch: one writer thread waits for every acknowledgement,
/// so each batch is its own group) in the last WAL file may be cut, leaving
/// the state before that batch. Damage inside the in-flight batch's record
/// (which was never committed, so may be torn) may drop just that batch.
/// Returns the states (with their LSNs) such a cut may leave.
fn allowed_cuts(
    built: &Built,
    file: &str,
    last_wal: &str,
    original: &[u8],
    damaged: (usize, usize),
) -> Vec<(u64, Model)> {
    if !built.crashed || file != last_wal {
        return Vec::new();
    }
    let starts = record_starts(original);
    let acked_lsn = built.states.len() as u64 - 1;
    let mut allowed = Vec::new();
    if let Some(&start) = starts.get(&acked_lsn)
        && damaged.0 >= start
    {
        allowed.push((acked_lsn - 1, built.states[acked_lsn as usize - 1].clone()));
    }
    if let Some(&start) = starts.get(&(acked_lsn + 1))
        && damaged.0 >= start
    {
        allowed.push((acked_lsn, built.states[acked_lsn as usize].clone()));
    }
    allowed
}

fn files(io: &SimIo) -> Vec<String> {
    let mut names = io.list(Path::new(DIR)).unwrap();
    names.retain(|n| n.ends_with(".log") || n.ends_with(".snap"));
    names.sort();
    names
}

/// Outcome counts of a campaign (to show that each kind happens).
#[derive(Default, Debug)]
struct Tally {
    same: u32,
    refused: u32,
    cut: u32,
}

fn trial(
    end: End,
    seed: u64,
    file_pick: u64,
    kind: u8,
    at_pick: u64,
    len_pick: u64,
    tally: &mut Tally,
) -> Result<(), TestCaseError> {
    let built = build(60, &[20, 40], end, seed);
    let reference = recover(
        &built.disk.restart(0),
        Path::new(DIR),
        &RecoveryOptions::default(),
    )
    .map_err(|e| TestCaseError::fail(format!("the undamaged directory fails: {e}")))?;
    let full = state_of(&reference);
    let reference_lsn = reference.report.last_lsn;
    let acked = built.states.last().unwrap();
    prop_assert!(
        &full == acked || Some(&full) == built.in_flight.as_ref(),
        "the undamaged directory lost acknowledged batches"
    );
    drop(reference);
    let names = files(&built.disk);
    let last_wal = names
        .iter()
        .filter(|n| n.ends_with(".log"))
        .max()
        .unwrap()
        .clone();
    let name = &names[(file_pick % names.len() as u64) as usize];
    let disk = built.disk.restart(0);
    let path = Path::new(DIR).join(name);
    let original = disk.read(&path).unwrap();
    if original.is_empty() {
        return Ok(());
    }
    let at = (at_pick % original.len() as u64) as usize;
    let mutation = match kind {
        0 => Mutation::Flip {
            at,
            bit: (len_pick % 8) as u8,
        },
        1 => Mutation::Zero {
            at,
            len: 1 + (len_pick % 64) as usize,
        },
        _ => Mutation::Cut { at },
    };
    let mut bytes = original.clone();
    match mutation {
        Mutation::Flip { at, bit } => bytes[at] ^= 1 << bit,
        Mutation::Zero { .. } => {
            let (a, b) = mutation.range(bytes.len());
            bytes[a..b].fill(0);
        }
        Mutation::Cut { at } => bytes.truncate(at),
    }
    if bytes == original {
        // Zeroing zeros: nothing was damaged.
        return Ok(());
    }
    disk.remove(&path).unwrap();
    let mut f = disk.create(&path).unwrap();
    f.write_all(&bytes).unwrap();
    f.sync().unwrap();
    disk.sync_dir(Path::new(DIR)).unwrap();
    let what = format!("{end:?}: {name} ({} bytes) {mutation:?}", original.len());
    let outcome = std::panic::catch_unwind(|| {
        recover(&disk, Path::new(DIR), &RecoveryOptions::default())
            .map(|r| (state_of(&r), r.report.last_lsn))
    })
    .map_err(|_| TestCaseError::fail(format!("recovery panicked on {what}")))?;
    match outcome {
        // (A state equal to the reference at another LSN is judged below:
        // a cut batch may have changed nothing.)
        Ok((found, lsn)) if found == full && lsn == reference_lsn => {
            tally.same += 1;
        }
        // The batch in flight at a crash was never acknowledged: the exact
        // acknowledged state without it is as good as the reference.
        Ok((found, lsn)) if &found == acked && lsn == built.states.len() as u64 - 1 => {
            tally.same += 1;
        }
        Ok((found, lsn)) => {
            // Judge by the bytes that really changed: zeros written over
            // zeros damage nothing.
            let (a, b) = mutation.range(original.len());
            let first_changed = (a..b.min(bytes.len()))
                .find(|&i| bytes[i] != original[i])
                .unwrap_or(a);
            let allowed = allowed_cuts(&built, name, &last_wal, &original, (first_changed, b));
            prop_assert!(
                allowed.contains(&(lsn, found.clone())),
                "{}: SILENT LOSS: recovered {} entries at LSN {} instead of {} at LSN {} \
                 (crashed: {})",
                what,
                found.len(),
                lsn,
                full.len(),
                reference_lsn,
                built.crashed
            );
            tally.cut += 1;
        }
        Err(e) => {
            let message = e.to_string();
            prop_assert!(
                message.contains(name.as_str()),
                "{}: the error does not name the damaged file: {}",
                what,
                message
            );
            if name.ends_with(".log") {
                let located = match &e {
                    StoreError::WalRead(WalReadError::Corrupt(_)) => {
                        message.contains("byte offset")
                    }
                    // A file that lost its end: the error says which LSN is
                    // missing and where the log goes on.
                    StoreError::WalRead(WalReadError::Gap { .. })
                    | StoreError::WalBehindSnapshot { .. } => true,
                    _ => false,
                };
                prop_assert!(
                    located,
                    "{}: WAL damage reported without a place: {}",
                    what,
                    message
                );
            }
            tally.refused += 1;
        }
    }
    Ok(())
}

fn campaign(cases: u32) {
    let mut tally = Tally::default();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let end = prop_oneof![
        Just(End::CleanStop),
        (0u64..400, any::<u64>()).prop_map(|(k, s)| End::Crash(k, s)),
    ];
    let tally_ref = std::cell::RefCell::new(&mut tally);
    runner
        .run(
            &(
                end,
                any::<u64>(),
                any::<u64>(),
                0u8..3,
                any::<u64>(),
                any::<u64>(),
            ),
            |(end, seed, file, kind, at, len)| {
                trial(end, seed, file, kind, at, len, &mut tally_ref.borrow_mut())
            },
        )
        .unwrap();
    eprintln!("{cases} damaged directories: {tally:?}");
    assert!(
        tally.same > 0 && tally.refused > 0,
        "both fallback and refusal happen: {tally:?}"
    );
}

#[test]
fn one_random_mutation_of_any_file_never_silently_loses_acknowledged_writes() {
    campaign(96);
}

#[test]
#[ignore = "long run: 1000 damaged directories"]
fn one_random_mutation_long_campaign() {
    campaign(1000);
}

/// The case the long campaign found (kept as a plain test so it reproduces
/// without proptest): a cleanly stopped directory; one zeroed range over
/// both synced-end slots of the last WAL file's header and the first byte
/// of its first record. With neither slot valid, recovery takes the file
/// for one whose header vouches for nothing (as a new file's), reads the
/// damaged record as a torn tail, and cuts the file's every record: it
/// starts with LSN 54 of 60 and says nothing but a torn-tail log line.
#[test]
fn zeroing_both_synced_end_slots_and_a_record_of_the_last_wal_file_is_refused() {
    let mut tally = Tally::default();
    trial(
        End::CleanStop,
        10005620780168811029,
        13552082727511204820,
        1,
        7438325751945130134,
        4430709849636114216,
        &mut tally,
    )
    .unwrap();
}

/// Another case the long campaign found: a crash, then a cut of the first
/// WAL file back to its header, which left it with no record while the
/// next file starts after it. Recovery refused with a gap, but named only
/// the next file ("the oldest WAL file starts at LSN 2"), not the file that
/// lost its records: the gap error names the file before the gap whenever
/// there is one, even if none of its records could be read.
#[test]
fn a_wal_file_cut_to_its_header_before_the_next_one_is_named_in_the_refusal() {
    let mut tally = Tally::default();
    trial(
        End::Crash(7, 0),
        5014408095770687474,
        3923751964492399128,
        2,
        6664764747366855901,
        0,
        &mut tally,
    )
    .unwrap();
}
