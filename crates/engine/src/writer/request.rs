//! What callers ask the writer to do, and what they get back.

use uuid::Uuid;

use crate::store::WalWriteError;
use uuidmap_index::Key;

/// One operation of a write batch, as a caller states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOp {
    /// Set `key` to `value`.
    Put {
        /// The key to set.
        key: Key,
        /// The value to give it.
        value: Uuid,
    },
    /// Remove `key` (succeeds whether or not it was present).
    Delete {
        /// The key to remove.
        key: Key,
    },
    /// Set `key` to `new` only if its value is `expected` at this point of
    /// the batch (`None` = absent on either side: `new: None` removes).
    CompareAndSet {
        /// The key to compare and set.
        key: Key,
        /// The value it must have (`None`: absent).
        expected: Option<Uuid>,
        /// The value to give it (`None`: remove it).
        new: Option<Uuid>,
    },
}

impl WriteOp {
    /// The key this operation is about.
    pub fn key(&self) -> Key {
        match *self {
            WriteOp::Put { key, .. }
            | WriteOp::Delete { key }
            | WriteOp::CompareAndSet { key, .. } => key,
        }
    }
}

/// An accepted batch: it became visible, whole, at this LSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOutcome {
    /// The batch's log sequence number.
    pub lsn: u64,
}

/// Why a batch was not applied. Nothing of a refused batch is logged or
/// applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The batch has no operations.
    #[error("a write batch needs at least one operation")]
    Empty,
    /// The batch has more operations than the configured limit.
    #[error("a write batch may hold at most {max} operations; this one holds {len}")]
    TooLarge {
        /// The operations in the batch.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// A compare-and-set found another value; the batch was not applied.
    #[error(
        "compare-and-set failed at operation {index} of the batch: key {key} is {}, not {}",
        describe(*current), describe(*expected)
    )]
    CasMismatch {
        /// Position of the compare-and-set in the batch.
        index: usize,
        /// The key compared.
        key: Key,
        /// The value the caller expected (`None`: absent).
        expected: Option<Uuid>,
        /// The value found (as of the batch's turn, earlier operations of the
        /// batch included).
        current: Option<Uuid>,
    },
    /// The write-ahead log could not be written or synced (a full or failing
    /// disk). The batch was not applied; retry once the disk is fixed.
    #[error(
        "the write-ahead log is unavailable, the batch was not applied: {0}{hint}",
        hint = resume_hint(.0)
    )]
    Wal(#[source] std::sync::Arc<WalWriteError>),
    /// A WAL fsync failed: this process accepts no more writes (see
    /// `wal::writer`). The batches of the failing group were written to the
    /// log but not made durable: whether they survive the restart is
    /// unknown. Later batches are refused without being logged.
    #[error(
        "the write-ahead log failed and this server accepts no more writes; a batch in \
         flight when it failed may or may not survive the restart (read the key after it to \
         find out): {0}"
    )]
    WalFailed(#[source] std::sync::Arc<WalWriteError>),
    /// The writer is shutting down or has stopped; the batch was refused
    /// before it was queued.
    #[error("the server is shutting down and accepts no more writes")]
    ShuttingDown,
    /// This member of a replica group does not lead it, so it takes no
    /// writes; nothing was logged, and the batch may be sent to the leader
    /// as it is.
    #[error("this server does not lead its replica group{}; nothing was applied: send the write to the leader", describe_leader(.leader))]
    NotLeader {
        /// The leader, when this member knows it.
        leader: Option<LeaderHint>,
    },
    /// The batch was logged by a leader that lost its leadership before the
    /// batch committed: the next leader may commit it or drop it, so its
    /// outcome is unknown.
    #[error(
        "the leader lost its leadership after logging this batch, which may or may not be \
         applied (read the keys to find out){}",
        describe_leader(.leader)
    )]
    LeadershipLost {
        /// The new leader, when this member knows it.
        leader: Option<LeaderHint>,
    },
    /// The batch was logged by a leader that then heard from no majority
    /// for longer than its lease (it may be cut off from the others): it
    /// commits only if this leader is heard again before another is
    /// elected, so its outcome is unknown, and waiting longer would only
    /// keep the caller from trying another member.
    #[error(
        "this member led the replica group, but no majority has answered it for longer than its \
         lease with this batch logged and not committed: it may or may not be applied (read the \
         keys to find out, from the group's leader)"
    )]
    QuorumLost,
    /// A leader has as many batches proposed and not yet committed as its
    /// bound allows (the group commits slower than writes come): this
    /// one was refused before it was decided, nothing was logged.
    #[error(
        "this leader already has {bound} write batches waiting for its replica group to commit \
         them, its limit; this batch was not applied: retry after a short backoff, or send \
         fewer writes at a time"
    )]
    ProposalsFull {
        /// The bound.
        bound: usize,
    },
    /// The batch was queued, but the writer ended without answering it (it
    /// stopped abnormally): it may or may not have been logged.
    #[error(
        "the writer stopped before answering this batch, which may or may not have been applied \
         (read the keys once the server is back to find out)"
    )]
    Unanswered,
}

/// True of a running writer only: each group tries the disk again (see
/// `pipeline`), so a full disk needs no restart once it has room.
fn resume_hint(e: &WalWriteError) -> &'static str {
    if e.is_disk_full() {
        "; free space on the data disk and writes resume by themselves, without a restart"
    } else {
        ""
    }
}

/// The leader of a replica group, as a member knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderHint {
    /// Its node id.
    pub id: u64,
    /// The URL its clients use, when the membership records it.
    pub url: Option<String>,
}

fn describe_leader(leader: &Option<LeaderHint>) -> String {
    match leader {
        Some(LeaderHint { id, url: Some(url) }) => format!(" (the leader is node {id}, at {url})"),
        Some(LeaderHint { id, url: None }) => format!(" (the leader is node {id})"),
        None => " (no leader is known yet)".to_string(),
    }
}

fn describe(v: Option<Uuid>) -> String {
    match v {
        Some(v) => v.to_string(),
        None => "absent".to_string(),
    }
}
