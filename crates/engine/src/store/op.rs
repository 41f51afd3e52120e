//! The operations the write-ahead log records: blind writes only.
//!
//! A compare-and-set is decided by the writer before it is logged, and what
//! reaches the log is the write that resulted (a `Put` or a `Delete`), so
//! replaying the log never decides anything again.

use uuid::Uuid;
use uuidmap_index::Key;

/// One logged change to the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Set `key` to `value`.
    Put {
        /// The key.
        key: Key,
        /// Its new value.
        value: Uuid,
    },
    /// Remove `key` (a no-op if it is absent).
    Delete {
        /// The key.
        key: Key,
    },
}

impl Op {
    /// The key this operation changes.
    pub fn key(&self) -> Key {
        match *self {
            Op::Put { key, .. } | Op::Delete { key } => key,
        }
    }

    /// The value it leaves its key with (`None`: absent).
    pub fn value(&self) -> Option<uuid::Uuid> {
        match *self {
            Op::Put { value, .. } => Some(value),
            Op::Delete { .. } => None,
        }
    }
}
