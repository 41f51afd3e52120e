//! [`TakeSnapshotError`]: why a snapshot asked of a running index was not
//! taken ([`SnapshotResult`](super::SnapshotResult)).

use crate::store::{FileError, SnapshotCorrupt, SnapshotWriteError};

/// Why a snapshot asked for ([`DurableIndex::snapshot_now`], the final
/// snapshot of [`DurableIndex::shutdown`], a member's snapshot task) was
/// not taken. The previous snapshots are kept.
///
/// [`DurableIndex::snapshot_now`]: super::DurableIndex::snapshot_now
/// [`DurableIndex::shutdown`]: super::DurableIndex::shutdown
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TakeSnapshotError {
    /// The snapshot file could not be written.
    #[error(transparent)]
    Write(#[from] SnapshotWriteError),
    /// The snapshot thread has stopped, or a member's meta file could not
    /// be written or its snapshots listed.
    #[error(transparent)]
    Io(#[from] FileError),
    /// A member's snapshot captured less than the applied point read
    /// before it.
    #[error(transparent)]
    Corrupt(#[from] SnapshotCorrupt),
    /// A member has nothing to snapshot now.
    #[error("this member has nothing to snapshot now: {0}")]
    NothingToSnapshot(&'static str),
    /// Something a member of a replica group does not do yet.
    #[error("a member of a replica group does not {0} yet (docs/replication.md says when it will)")]
    NotInGroupYet(&'static str),
}

impl TakeSnapshotError {
    /// Whether this is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        match self {
            TakeSnapshotError::Write(e) => e.is_disk_full(),
            TakeSnapshotError::Io(e) => e.is_disk_full(),
            TakeSnapshotError::Corrupt(_)
            | TakeSnapshotError::NothingToSnapshot(_)
            | TakeSnapshotError::NotInGroupYet(_) => false,
        }
    }
}
