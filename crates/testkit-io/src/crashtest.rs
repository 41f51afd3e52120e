//! Deterministic write batches shared by the crash-test child process
//! (`crates/testkit-io/src/bin/crash-child.rs`) and the tests that check what survived a
//! kill. Not part of the product's API.
//!
//! Writer `w` only touches its own keys, so the state of those keys after
//! its batches `0..=m` is a function of `m` alone, whatever the other
//! writers did.

use uuid::Uuid;

use crate::data::mix;

use uuidmap_engine::writer::{Key, WriteOp};

/// Keys per writer: few, so batches overwrite and delete each other's work.
pub const KEYS_PER_WRITER: u64 = 48;

/// Key `k` of writer `w`.
pub fn key(w: u32, k: u64) -> Uuid {
    Uuid::from_u128(
        0x1000_0000_0000_0000_0000_0000_0000_0000 | ((w as u128) << 64) | (k as u128 + 1),
    )
}

/// Batch `seq` of writer `w` in run `seed`: 1 to 4 operations (puts,
/// deletes, and compare-and-sets whose expected value `current` reads),
/// on distinct keys of `w`.
pub fn batch(
    seed: u64,
    w: u32,
    seq: u64,
    mut current: impl FnMut(Uuid) -> Option<Uuid>,
) -> Vec<WriteOp> {
    let mut r = mix(seed ^ mix((w as u64) << 40 ^ seq));
    let n = 1 + (r % 4) as usize;
    let mut ops = Vec::with_capacity(n);
    let first = mix(r) % KEYS_PER_WRITER;
    for i in 0..n as u64 {
        r = mix(r);
        let k = Key::new(key(w, (first + i * 7) % KEYS_PER_WRITER))
            .expect("a writer's keys are never nil or max");
        let value =
            Uuid::from_u128(((seed as u128) << 64) | ((seq as u128) << 8) | i as u128 | 1 << 127);
        ops.push(match r % 8 {
            0 => WriteOp::Delete { key: k },
            1 => WriteOp::CompareAndSet {
                key: k,
                expected: current(k.uuid()),
                new: Some(value),
            },
            2 => WriteOp::CompareAndSet {
                key: k,
                expected: current(k.uuid()),
                new: None,
            },
            _ => WriteOp::Put { key: k, value },
        });
    }
    ops
}

/// Applies a batch's effect to a model of writer `w`'s keys (the
/// compare-and-sets always match: `w` is the only writer of its keys).
pub fn apply(model: &mut std::collections::HashMap<Uuid, Uuid>, ops: &[WriteOp]) {
    for op in ops {
        match *op {
            WriteOp::Put { key, value } => {
                model.insert(key.uuid(), value);
            }
            WriteOp::Delete { key } => {
                model.remove(key.as_uuid());
            }
            WriteOp::CompareAndSet { key, new, .. } => match new {
                Some(v) => {
                    model.insert(key.uuid(), v);
                }
                None => {
                    model.remove(key.as_uuid());
                }
            },
        }
    }
}
