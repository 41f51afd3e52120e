//! A model of the map as acknowledged batches leave it, and the batches the
//! crash and damage tests write into both the store and the model: the
//! proptest steps' batches of puts, deletes and compare-and-sets (with
//! refusals), and the deterministic batches of puts and deletes drawn from
//! splitmix64.

use std::collections::BTreeMap;

use uuid::Uuid;
use uuidmap_engine::writer::{Key, WriteOp};

use crate::data::mix;

/// What the map holds: key to value.
pub type Model = BTreeMap<Uuid, Uuid>;

/// The batch `spec` as the store gets it, given the model: `(kind, key,
/// value)` numbers, kind 0 a put, 1 a delete, 2 a compare-and-set to a
/// value, 3 a compare-and-set to absent. A compare-and-set expects what the
/// model holds, or `wrong` when the value number is a multiple of 4, so that
/// refusals happen too. `key` and `value` turn the numbers into UUIDs.
pub fn ops(
    spec: &[(u8, u64, u64)],
    model: &Model,
    key: impl Fn(u64) -> Uuid,
    value: impl Fn(u64) -> Uuid,
    wrong: Uuid,
) -> Vec<WriteOp> {
    let mut local = model.clone();
    spec.iter()
        .map(|&(kind, k, v)| {
            let key = key(k);
            let op = match kind {
                0 => WriteOp::Put {
                    key: Key::new(key).unwrap(),
                    value: value(v),
                },
                1 => WriteOp::Delete {
                    key: Key::new(key).unwrap(),
                },
                _ => WriteOp::CompareAndSet {
                    key: Key::new(key).unwrap(),
                    expected: if v % 4 == 0 {
                        Some(wrong)
                    } else {
                        local.get(&key).copied()
                    },
                    new: (kind == 2).then(|| value(v)),
                },
            };
            apply(&mut local, &[op]);
            op
        })
        .collect()
}

/// Applies a batch to a model, all or nothing: false if a compare-and-set
/// fails (the model is then unchanged).
pub fn apply(model: &mut Model, ops: &[WriteOp]) -> bool {
    let mut next = model.clone();
    for op in ops {
        match *op {
            WriteOp::Put { key, value } => {
                next.insert(key.uuid(), value);
            }
            WriteOp::Delete { key } => {
                next.remove(key.as_uuid());
            }
            WriteOp::CompareAndSet { key, expected, new } => {
                if next.get(key.as_uuid()).copied() != expected {
                    return false;
                }
                match new {
                    Some(v) => next.insert(key.uuid(), v),
                    None => next.remove(key.as_uuid()),
                };
            }
        }
    }
    *model = next;
    true
}

/// Batch `b` of the run seeded with `seed`, applied to `model` as well:
/// 1 to `max_ops` writes, each to the key `key(r)` of a splitmix64 number
/// `r`, a delete when `r` is a multiple of 5 and otherwise a put of a value
/// that names the batch and the write.
pub fn mixed_batch(
    model: &mut Model,
    seed: u64,
    b: u64,
    max_ops: u64,
    key: impl Fn(u64) -> Uuid,
) -> Vec<WriteOp> {
    (0..1 + mix(seed ^ b) % max_ops)
        .map(|i| {
            let r = mix(seed ^ (b * 7 + i));
            let k = key(r);
            if r.is_multiple_of(5) {
                model.remove(&k);
                WriteOp::Delete {
                    key: Key::new(k).unwrap(),
                }
            } else {
                let v = Uuid::from_u128((b as u128) << 32 | i as u128 | 1 << 100);
                model.insert(k, v);
                WriteOp::Put {
                    key: Key::new(k).unwrap(),
                    value: v,
                }
            }
        })
        .collect()
}
