//! [`WriterCore`]: what every writer thread does to the index, written
//! once for both logs.
//!
//! A write takes one path through the core, whichever log keeps it:
//!
//! 1. **decide** ([`WriterCore::decide`]): a caller's batch is checked
//!    against the index as every decided write leaves it (this batch's
//!    earlier writes, then the [`Overlay`] of decided and not yet applied
//!    batches, then the index) and turned into blind writes ([`Op`]s), or
//!    refused at its first failing compare-and-set;
//! 2. the log takes the blind writes: the WAL group commit gives them the
//!    next LSN and appends them to its group (`pipeline`), a leader's
//!    proposer logs them through Raft (`replica_pipeline`). The core
//!    records them in the overlay under the log's tag (the LSN, or the
//!    proposal number);
//! 3. **apply** ([`WriterCore::apply`]): once the log says they are
//!    durable (and, in a group, committed), in log order, with their LSN
//!    as the index's stamp, retiring them from the overlay;
//! 4. **publish** ([`WriterCore::publish`]): the applied LSN goes on the
//!    watermark, which readers and waiters follow.
//!
//! What differs between the logs stays in their modules: when a batch is
//! durable, how a refusal is answered (a group's refusals in order with
//! the group; a leader's only once the log confirms it still led), and
//! what else arrives (fsync deadlines; leadership changes and committed
//! entries).
//!
//! **Invariant:** the core is the only code that mutates the index.

use std::collections::HashMap;
use std::sync::Arc;

use uuid::Uuid;

use super::handle::PipelineStats;
use super::overlay::Overlay;
use super::request::{WriteError, WriteOp};
use crate::store::Op;
use uuidmap_index::sync::LsnWatermark;
use uuidmap_index::{IndexWriter, Key};

/// The index's one writer, the decided writes not yet applied, and the
/// applied LSN (module docs).
pub(super) struct WriterCore {
    pub(super) writer: IndexWriter,
    pub(super) watermark: Arc<LsnWatermark>,
    pub(super) stats: Arc<PipelineStats>,
    overlay: Overlay,
    /// The batch being decided: its writes folded so far, for its own
    /// later compare-and-sets (built only when one asks).
    batch: HashMap<Key, Option<Uuid>, ahash::RandomState>,
}

impl WriterCore {
    pub(super) fn new(
        writer: IndexWriter,
        watermark: Arc<LsnWatermark>,
        stats: Arc<PipelineStats>,
    ) -> WriterCore {
        WriterCore {
            writer,
            watermark,
            stats,
            overlay: Overlay::default(),
            batch: HashMap::default(),
        }
    }

    /// Step 1: appends `ops`' blind writes to `out`, or refuses the batch
    /// at its first compare-and-set that does not hold, leaving `out` as it
    /// was. Records nothing: the log does, once it takes the batch
    /// ([`WriterCore::record`]).
    pub(super) fn decide(&mut self, ops: &[WriteOp], out: &mut Vec<Op>) -> Result<(), WriteError> {
        let start = out.len();
        // How many of this batch's writes `batch` has folded in.
        let mut folded = start;
        self.batch.clear();
        for (index, op) in ops.iter().enumerate() {
            let op = match *op {
                WriteOp::Put { key, value } => Op::Put { key, value },
                WriteOp::Delete { key } => Op::Delete { key },
                WriteOp::CompareAndSet { key, expected, new } => {
                    for earlier in &out[folded..] {
                        self.batch.insert(earlier.key(), earlier.value());
                    }
                    folded = out.len();
                    let current = match self.batch.get(&key) {
                        Some(value) => *value,
                        None => match self.overlay.get(key) {
                            Some(value) => value,
                            None => self.writer.get(key.as_uuid()),
                        },
                    };
                    if current != expected {
                        out.truncate(start);
                        return Err(WriteError::CasMismatch {
                            index,
                            key,
                            expected,
                            current,
                        });
                    }
                    match new {
                        Some(value) => Op::Put { key, value },
                        None => Op::Delete { key },
                    }
                }
            };
            out.push(op);
        }
        Ok(())
    }

    /// Step 2: the log took `ops` (decided after every write recorded so
    /// far) under `tag`; later decisions see them until they are applied.
    pub(super) fn record(&mut self, ops: &[Op], tag: u64) {
        self.overlay.record(ops, tag);
    }

    /// Forgets the recorded writes: the log dropped them (a failed group,
    /// a leadership lost).
    pub(super) fn forget_decided(&mut self) {
        self.overlay.clear();
    }

    /// Step 3: applies one batch's blind writes with `lsn` as their stamp.
    /// If it was recorded (`tag`), it leaves the overlay.
    pub(super) fn apply(&mut self, lsn: u64, ops: &[Op], tag: Option<u64>) {
        self.writer.set_stamp(lsn);
        for op in ops {
            match *op {
                Op::Put { key, value } => {
                    self.writer.insert_key(key, value);
                }
                Op::Delete { key } => {
                    self.writer.remove_key(key);
                }
            }
        }
        if let Some(tag) = tag {
            self.overlay.retire(ops, tag);
        }
    }

    /// Step 4: every batch up to `lsn` is applied; readers may see it.
    /// Frees the tables growth retired, once no reader holds them.
    pub(super) fn publish(&mut self, lsn: u64) {
        self.watermark.publish(lsn);
        self.writer.reclaim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuidmap_index::Index;

    fn key(n: u8) -> Key {
        Key::new(Uuid::from_bytes([n; 16])).unwrap()
    }

    fn v(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn core() -> WriterCore {
        let (writer, _index) = Index::with_capacity(16);
        WriterCore::new(
            writer,
            Arc::new(LsnWatermark::new(0)),
            Arc::new(PipelineStats::default()),
        )
    }

    fn cas(k: u8, expected: Option<u8>, new: Option<u8>) -> WriteOp {
        WriteOp::CompareAndSet {
            key: key(k),
            expected: expected.map(v),
            new: new.map(v),
        }
    }

    #[test]
    fn a_compare_and_set_sees_its_batch_then_the_decided_writes_then_the_index() {
        let mut c = core();
        c.writer.insert_key(key(1), v(1));
        let mut out = Vec::new();
        // The index.
        c.decide(&[cas(1, Some(1), Some(2))], &mut out).unwrap();
        c.record(&out, 7);
        // The decided, unapplied batch 7, then this batch's own put.
        let mut next = Vec::new();
        let batch = [
            cas(1, Some(2), Some(3)),
            WriteOp::Put {
                key: key(2),
                value: v(9),
            },
            cas(2, Some(9), None),
        ];
        c.decide(&batch, &mut next).unwrap();
        assert_eq!(next.len(), 3);
        assert_eq!(next[2], Op::Delete { key: key(2) });
        // Applying batch 7 leaves the index as the overlay said.
        c.apply(7, &out, Some(7));
        c.publish(7);
        assert_eq!(c.writer.get(key(1).as_uuid()), Some(v(2)));
        assert_eq!(c.watermark.current(), 7);
    }

    #[test]
    fn a_refused_batch_leaves_nothing_behind_and_names_the_failing_op() {
        let mut c = core();
        let mut out = vec![Op::Delete { key: key(5) }];
        let batch = [
            WriteOp::Put {
                key: key(1),
                value: v(1),
            },
            cas(1, Some(2), Some(3)),
        ];
        match c.decide(&batch, &mut out) {
            Err(WriteError::CasMismatch {
                index,
                key: k,
                expected,
                current,
            }) => {
                assert_eq!(
                    (index, k, expected, current),
                    (1, key(1), Some(v(2)), Some(v(1)))
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(out, vec![Op::Delete { key: key(5) }]);
        // Nothing recorded: the next decision reads the index.
        c.decide(&[cas(1, None, Some(1))], &mut out).unwrap();
    }
}
