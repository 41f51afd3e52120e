//! Crash safety through the simulated disk (`SimIo`): a store runs batches
//! (puts, deletes, compare-and-sets) and snapshots with fsync policy
//! `always`, the disk "crashes" after k operations — losing every byte and
//! directory change that was not synced, and keeping a random prefix of
//! unsynced appends — and the store is reopened from what survived.
//!
//! Checked after every crash:
//! - every acknowledged batch is present, with its values;
//! - the one batch in flight at the crash is all there or not at all;
//! - the store opens, and accepts writes again.

use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use uuid::Uuid;
use uuidmap_engine::store::wal::Preallocate;
use uuidmap_engine::writer::{DurableConfig, DurableIndex, WriteOp};
use uuidmap_index::Key;
use uuidmap_testkit_io::SimIo;
use uuidmap_testkit_io::batch_model::{self, Model, apply};

const KEYS: u64 = 24;

fn key(k: u64) -> Uuid {
    Uuid::from_u128(0xfeed_0000_0000_0000_0000_0000_0000_0000 | (k as u128 + 1))
}

fn value(v: u64) -> Uuid {
    Uuid::from_u128(0xbeef_0000_0000_0000_0000_0000_0000_0000 | (v as u128 + 1))
}

/// One step of a run: a batch, or a snapshot.
#[derive(Clone, Debug)]
enum Step {
    Batch(Vec<(u8, u64, u64)>),
    Snapshot,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => prop::collection::vec((0u8..4, 0..KEYS, 0u64..1000), 1..5).prop_map(Step::Batch),
        1 => Just(Step::Snapshot),
    ]
}

/// The batch's operations as the store gets them, given the model (a
/// compare-and-set expects what the model holds, or a wrong value one time
/// in four so that refusals happen too).
fn ops(spec: &[(u8, u64, u64)], model: &Model) -> Vec<WriteOp> {
    batch_model::ops(spec, model, key, value, value(9999))
}

fn config(io: &SimIo, wal_bytes: u64) -> DurableConfig {
    let mut c = DurableConfig::new(PathBuf::from("/data"));
    c.io = Arc::new(io.clone());
    c.snapshot_every = None;
    c.snapshot_on_shutdown = false;
    c.pipeline.snapshot_every_bytes = 0;
    c.wal_segment_bytes = wal_bytes;
    c.wal_preallocate = Preallocate::Inline;
    c
}

fn state(d: &DurableIndex) -> Model {
    (0..KEYS)
        .filter_map(|k| d.index().get(&key(k)).map(|v| (key(k), v)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_crash_after_any_operation_keeps_every_acknowledged_batch(
        steps in prop::collection::vec(step(), 1..40),
        crash_after in 0u64..120,
        tear_seed in any::<u64>(),
        small_wal in any::<bool>(),
    ) {
        let wal_bytes = if small_wal { 300 } else { 64 << 20 };
        let io = SimIo::new();
        let durable = DurableIndex::open(config(&io, wal_bytes)).expect("opening an empty store");
        io.set_crash_after(Some(crash_after));
        let mut acked = Model::new();
        let mut in_flight: Option<Model> = None;
        for step in &steps {
            match step {
                Step::Snapshot => {
                    // A snapshot may fail only because the process died.
                    if let Err(e) = durable.snapshot_now_blocking() {
                        prop_assert!(io.crashed(), "a snapshot failed without a crash: {}", e);
                    }
                }
                Step::Batch(spec) => {
                    let ops = ops(spec, &acked);
                    let mut after = acked.clone();
                    let applies = apply(&mut after, &ops);
                    match durable.writes().write_blocking(ops) {
                        Ok(_) => {
                            prop_assert!(applies, "a batch the model refuses was accepted");
                            acked = after;
                        }
                        Err(_) if io.crashed() => {
                            if applies {
                                in_flight = Some(after);
                            }
                            break;
                        }
                        Err(e) => {
                            prop_assert!(!applies, "a batch the model accepts was refused: {}", e);
                        }
                    }
                }
            }
            if io.crashed() {
                break;
            }
        }
        drop(durable);
        let disk = io.restart(tear_seed);
        let reopened = DurableIndex::open(config(&disk, wal_bytes));
        let reopened = match reopened {
            Ok(d) => d,
            Err(e) => return Err(TestCaseError::fail(format!("reopening failed: {e}"))),
        };
        let found = state(&reopened);
        prop_assert!(
            found == acked || Some(&found) == in_flight.as_ref(),
            "recovered {:?}\nacknowledged {:?}\nin flight {:?}", found, acked, in_flight
        );
        prop_assert_eq!(reopened.index().len(), found.len());
        // The recovered store takes writes again, and they last.
        let probe = WriteOp::Put { key: Key::new(key(KEYS + 1)).unwrap(), value: value(1) };
        prop_assert!(reopened.writes().write_blocking(vec![probe]).is_ok());
        drop(reopened);
        let again = DurableIndex::open(config(&disk.restart(1), wal_bytes)).expect("third open");
        prop_assert_eq!(again.index().get(&key(KEYS + 1)), Some(value(1)));
        let mut found_again = state(&again);
        found_again.remove(&key(KEYS + 1));
        prop_assert_eq!(found_again, found);
    }
}
