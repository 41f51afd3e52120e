//! What one Raft log entry of ours carries: a client batch the leader has
//! decided, as blind writes.
//!
//! A compare-and-set is decided once, by the leader's single writer when it
//! proposes the batch (docs/replication.md, section 3); the entry carries
//! the puts and deletes that resulted, so every replica applies the same
//! blind writes and replay over a fuzzy snapshot stays exact, as in single-
//! node mode.
//!
//! The ops are kept as the bytes a WAL record's body holds
//! (`uuidmap_engine::store::op_bytes`): a follower writes what it received
//! to its WAL as it came, and decodes only to apply. The bytes are checked
//! once, when a batch is made from them, so a batch in hand always decodes.

use std::fmt;

use bytes::Bytes;
use uuidmap_engine::store::Op;
use uuidmap_engine::store::op_bytes::{count_ops, decode_ops, encode_ops};
use uuidmap_engine::store::wal::MAX_OPS_LEN;

use crate::wire_error::WireError;

/// A decided client batch: the leader's proposal number and the blind ops.
#[derive(Clone, PartialEq, Eq)]
pub struct RaftBatch {
    seq: u64,
    count: u32,
    ops: Bytes,
}

impl RaftBatch {
    /// The batch of `ops`, proposed as the leader's `seq`-th.
    ///
    /// # Panics
    /// If the ops take more than the WAL's limit of
    /// [`MAX_OPS_LEN`] bytes (the writer refuses larger batches before it
    /// decides them).
    pub fn new(seq: u64, ops: &[Op]) -> Self {
        let mut buf = Vec::new();
        encode_ops(&mut buf, ops);
        assert!(
            buf.len() <= MAX_OPS_LEN as usize,
            "a batch of {} bytes exceeds the WAL's limit of {MAX_OPS_LEN}",
            buf.len()
        );
        RaftBatch {
            seq,
            count: ops.len() as u32,
            ops: buf.into(),
        }
    }

    /// The batch whose ops are spelled by `ops`, checked: every op whole,
    /// every tag known, no reserved key, at most [`MAX_OPS_LEN`] bytes.
    pub fn from_bytes(seq: u64, ops: Bytes) -> Result<Self, WireError> {
        if ops.len() > MAX_OPS_LEN as usize {
            return Err(WireError::Batch(format!(
                "its ops take {} bytes, over the limit of {MAX_OPS_LEN}",
                ops.len()
            )));
        }
        let count = count_ops(&ops).map_err(WireError::Batch)?;
        Ok(RaftBatch {
            seq,
            count: count as u32,
            ops,
        })
    }

    /// The leader's proposal number. It is compared only within the term
    /// that proposed it; followers keep it and ignore it.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// How many ops it holds.
    pub fn op_count(&self) -> usize {
        self.count as usize
    }

    /// The ops as a WAL record's body spells them.
    pub fn ops_bytes(&self) -> &Bytes {
        &self.ops
    }

    /// Appends the ops to `out`.
    pub fn decode_into(&self, out: &mut Vec<Op>) {
        decode_ops(&self.ops, self.op_count(), out)
            .expect("a RaftBatch's bytes were checked when it was made");
    }
}

impl fmt::Debug for RaftBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaftBatch")
            .field("seq", &self.seq)
            .field("ops", &self.count)
            .finish()
    }
}

impl fmt::Display for RaftBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch #{} of {} ops", self.seq, self.count)
    }
}

/// What applying an entry answers its proposer: the LSN it was applied at
/// (the entry's log index), and whether it was void (it broke its
/// leader's chain of proposals, so it changed nothing: see
/// `uuidmap_engine::writer::ProposalChain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The batch's LSN.
    pub lsn: u64,
    /// It took its LSN and changed nothing.
    pub void: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;
    use uuidmap_index::Key;

    fn ops() -> Vec<Op> {
        vec![
            Op::Put {
                key: Key::new(Uuid::from_u128(1)).unwrap(),
                value: Uuid::from_u128(2),
            },
            Op::Delete {
                key: Key::new(Uuid::from_u128(3)).unwrap(),
            },
        ]
    }

    #[test]
    fn a_batch_made_from_its_own_bytes_is_the_same_batch() {
        let batch = RaftBatch::new(9, &ops());
        let again = RaftBatch::from_bytes(9, batch.ops_bytes().clone()).unwrap();
        assert_eq!(again, batch);
        assert_eq!(again.op_count(), 2);
        let mut out = Vec::new();
        again.decode_into(&mut out);
        assert_eq!(out, ops());
        assert_eq!(batch.to_string(), "batch #9 of 2 ops");
    }

    #[test]
    fn malformed_ops_are_refused_in_words() {
        let good = RaftBatch::new(1, &ops());
        let mut cut = good.ops_bytes().to_vec();
        cut.pop();
        let err = RaftBatch::from_bytes(1, cut.into()).unwrap_err();
        assert!(err.to_string().contains("runs past the end"), "{err}");
        let err = RaftBatch::from_bytes(1, Bytes::from_static(&[9])).unwrap_err();
        assert!(err.to_string().contains("unknown tag 9"), "{err}");
        let huge = Bytes::from(vec![2u8; MAX_OPS_LEN as usize + 1]);
        let err = RaftBatch::from_bytes(1, huge).unwrap_err();
        assert!(err.to_string().contains("over the limit"), "{err}");
    }
}
