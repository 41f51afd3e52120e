//! A data directory whose every state is known, for the repair tests (the
//! engine's, and the root package's through `uuidmap check` and `uuidmap
//! repair`): ten groups of 200 keys, each group rewritten whole by one batch,
//! so that a mix of two batches is visible as a group holding two values.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use uuid::Uuid;
use uuidmap_engine::store::wal::Preallocate;
use uuidmap_engine::store::{Io, StoreError};
use uuidmap_engine::writer::{DurableConfig, DurableIndex, FsyncPolicy, Key, WriteOp};
use uuidmap_index::Index;

/// Key `i` of group `group`.
pub fn key(group: u64, i: u64) -> Uuid {
    Uuid::from_u128(((group as u128 + 1) << 64) | (i as u128 + 1))
}

/// The value batch `batch` writes.
pub fn value(batch: u64) -> Uuid {
    Uuid::from_u128(0xfeed_0000_0000_0000_0000_0000_0000_0000 | batch as u128)
}

/// A durable index in `dir` on `io`: no timed snapshot, fsync `never`,
/// 1 MiB WAL files made inline.
pub fn open(io: Arc<dyn Io>, dir: &Path) -> Result<DurableIndex, StoreError> {
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
pub fn build(io: Arc<dyn Io>, dir: &Path) -> Vec<Vec<Option<u64>>> {
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
pub fn groups_of(index: &Index) -> Vec<Option<u64>> {
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
