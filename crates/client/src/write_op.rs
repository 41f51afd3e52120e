//! [`WriteOp`]: one operation of a [`Client::write`](crate::Client::write),
//! and its protobuf form.

use uuid::Uuid;
use uuidmap_proto::v1 as pb;

use crate::call::bytes_of;

/// One operation of a [`Client::write`](crate::Client::write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOp {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: Uuid,
        /// Its new value.
        value: Uuid,
    },
    /// Removes `key` (whether or not present).
    Delete {
        /// The key.
        key: Uuid,
    },
    /// Sets `key` to `new` (`None`: removes it) only if it is `expected`
    /// (`None`: no entry); sees the effect of the earlier operations.
    CompareAndSet {
        /// The key.
        key: Uuid,
        /// The value it must have.
        expected: Option<Uuid>,
        /// The value to set.
        new: Option<Uuid>,
    },
}

impl WriteOp {
    /// The key the operation writes.
    pub fn key(&self) -> Uuid {
        match *self {
            WriteOp::Put { key, .. }
            | WriteOp::Delete { key }
            | WriteOp::CompareAndSet { key, .. } => key,
        }
    }
}

/// What a [`Client::compare_and_set`](crate::Client::compare_and_set)
/// did, when the server answered: a mismatch is an answer, not an error
/// (as tikv-client's `(previous, swapped)` and etcd's `Txn::succeeded`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a compare-and-set may have changed nothing"]
pub enum CasOutcome {
    /// The entry was `expected` and is now the new value, at this LSN.
    Applied {
        /// The change's LSN.
        lsn: u64,
    },
    /// The entry was not `expected`: nothing changed.
    Mismatch {
        /// Its value when the compare-and-set was decided (`None`: no
        /// entry).
        current: Option<Uuid>,
    },
}

impl CasOutcome {
    /// Whether the new value was set.
    pub fn applied(&self) -> bool {
        matches!(self, CasOutcome::Applied { .. })
    }

    /// The change's LSN, if it was applied.
    pub fn lsn(&self) -> Option<u64> {
        match self {
            CasOutcome::Applied { lsn } => Some(*lsn),
            CasOutcome::Mismatch { .. } => None,
        }
    }
}

impl WriteOp {
    pub(crate) fn to_proto(self) -> pb::WriteOp {
        use pb::write_op::Op;
        let op = match self {
            WriteOp::Put { key, value } => Op::Put(pb::PutOp {
                key: bytes_of(key),
                value: bytes_of(value),
            }),
            WriteOp::Delete { key } => Op::Delete(pb::DeleteOp { key: bytes_of(key) }),
            WriteOp::CompareAndSet { key, expected, new } => {
                Op::CompareAndSet(pb::CompareAndSetOp {
                    key: bytes_of(key),
                    expected: expected.map(bytes_of),
                    new_value: new.map(bytes_of),
                })
            }
        };
        pb::WriteOp { op: Some(op) }
    }
}
