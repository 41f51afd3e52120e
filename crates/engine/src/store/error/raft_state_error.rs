//! The `raft-state` file's errors: opening it ([`RaftStateOpenError`])
//! and writing it once it failed ([`RaftStateFailed`]; see `raft_state`).

use std::path::PathBuf;

use super::FileError;

/// Why the Raft state file could not be opened ([`RaftStateFile::open`]).
///
/// [`RaftStateFile::open`]: crate::store::raft_state::RaftStateFile::open
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RaftStateOpenError {
    /// Neither slot of the Raft state file holds a valid state.
    #[error(
        "Raft state file {path} is damaged: {reason}. Refusing to start: the file holds this \
         node's vote, and a node that forgot its vote could vote twice in one term. Restore the \
         file from a backup of this node, or remove the node from its replica group, empty its \
         data directory and add it back"
    )]
    Corrupt {
        /// The `raft-state` file.
        path: PathBuf,
        /// What is wrong with each slot.
        reason: String,
    },
    /// A slot of the Raft state file was written in a format version this
    /// build does not read.
    #[error(
        "Raft state file {path} was written by another release of uuidmap (slot {slot} has \
         format version {version}; this release reads version {expected}). Refusing to start, \
         because that slot may hold the node's newest vote: start the release that wrote it"
    )]
    Version {
        /// The `raft-state` file.
        path: PathBuf,
        /// The slot (0 or 1).
        slot: usize,
        /// The version it has.
        version: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// The file could not be read, created or opened for writing.
    #[error(transparent)]
    Io(#[from] FileError),
}

impl RaftStateOpenError {
    /// Whether this is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, RaftStateOpenError::Io(e) if e.is_disk_full())
    }
}

/// A failed write or fsync ended the Raft state file: every write and sync
/// after it returns this ([`RaftStateFile::write`], [`RaftStateFile::sync`]).
///
/// [`RaftStateFile::write`]: crate::store::raft_state::RaftStateFile::write
/// [`RaftStateFile::sync`]: crate::store::raft_state::RaftStateFile::sync
#[derive(Debug, thiserror::Error)]
#[error(
    "the Raft state file {path} can no longer be written: {cause}. A failed write or fsync \
     may have lost the state without a trace, so this process writes no more Raft state; \
     restart it to recover from what is on disk"
)]
pub struct RaftStateFailed {
    /// The `raft-state` file.
    pub path: PathBuf,
    /// The failure, in words.
    pub cause: String,
}
