//! The store layer's errors: every one names the file it is about and says
//! what an operator can do.
//!
//! One error per surface, each promising only the failures its functions
//! can produce, each converting into [`StoreError`] (so `?` carries it up
//! to a function that can fail in many ways), as redb's narrow errors
//! convert into its `Error`:
//!
//! | error | returned by |
//! | --- | --- |
//! | [`FileError`] (`file_error.rs`) | the calls that only touch files: WAL and snapshot listing, WAL removal, the spare WAL file, a member's meta and identity files |
//! | [`DirLockError`] (`dir_lock_error.rs`) | [`lock_data_dir`](super::lock_data_dir), [`Io::lock_dir`](super::Io::lock_dir) |
//! | [`WalReadError`] (`wal_error.rs`) | [`WalCursor`](super::wal::WalCursor), [`replay`](super::wal::replay) |
//! | [`WalWriteError`] | [`WalWriter`](super::wal::WalWriter) (and a single node's write pipeline, which reports it) |
//! | [`WalFollowError`] | [`WalFollower`](super::wal::WalFollower), a change stream's reader |
//! | [`SnapshotLoadError`] (`snapshot_error.rs`) | [`open_snapshot`](super::open_snapshot) and what follows it |
//! | [`SnapshotWriteError`] | [`write_snapshot`](super::write_snapshot) |
//! | [`RaftStateOpenError`] (`raft_state_error.rs`) | [`RaftStateFile::open`](super::raft_state::RaftStateFile::open) |
//! | [`RaftStateFailed`] | [`RaftStateFile::write`](super::raft_state::RaftStateFile::write) and `sync` |
//! | [`StoreError`] | opening a data directory: recovery, `DurableIndex::open`, a member's log store |
//!
//! [`WalCorrupt`] and [`SnapshotCorrupt`] are the damage the WAL's and
//! the snapshots' errors share. [`StoreError`] keeps directly the failures
//! only opening a data directory has: a log behind its snapshot, no valid
//! state, the other mode's directory.

mod dir_lock_error;
mod file_error;
mod raft_state_error;
mod snapshot_error;
mod wal_error;

use std::io;
use std::path::PathBuf;

use uuidmap_index::BuildError;

pub use dir_lock_error::DirLockError;
pub use file_error::{FileError, is_disk_full};
pub use raft_state_error::{RaftStateFailed, RaftStateOpenError};
pub use snapshot_error::{SnapshotCorrupt, SnapshotLoadError, SnapshotWriteError};
pub use wal_error::{WalCorrupt, WalFollowError, WalReadError, WalWriteError};

/// Whatever can go wrong opening, reading or writing the data directory:
/// every narrower error of the store converts into it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An operating-system call on a file failed.
    #[error(transparent)]
    Io(#[from] FileError),
    /// The data directory's lock was not taken.
    #[error(transparent)]
    DirLock(#[from] DirLockError),
    /// The WAL could not be read (damaged, missing records, or I/O).
    #[error(transparent)]
    WalRead(#[from] WalReadError),
    /// The WAL could not be written.
    #[error(transparent)]
    WalWrite(#[from] WalWriteError),
    /// A follower of the live log stopped.
    #[error(transparent)]
    WalFollow(#[from] WalFollowError),
    /// A snapshot could not be loaded.
    #[error(transparent)]
    SnapshotLoad(#[from] SnapshotLoadError),
    /// A snapshot could not be written.
    #[error(transparent)]
    SnapshotWrite(#[from] SnapshotWriteError),
    /// The Raft state file could not be opened.
    #[error(transparent)]
    RaftStateOpen(#[from] RaftStateOpenError),
    /// The Raft state file can no longer be written.
    #[error(transparent)]
    RaftStateFailed(#[from] RaftStateFailed),
    /// The newest snapshot holds writes the WAL no longer has.
    #[error(
        "snapshot {snapshot} holds writes up to LSN {snapshot_lsn}, but the WAL ends at LSN \
         {log_end}{in_file}: records that were synced before the snapshot was written are gone. \
         Refusing to start, because the snapshot cannot be rolled back to the log's end. A \
         repair can set the snapshot aside and recover from an older one plus the log (losing \
         the writes after LSN {log_end})",
        in_file = match .last_file {
            Some(f) => format!(" (in {})", f.display()),
            None => String::new(),
        }
    )]
    WalBehindSnapshot {
        /// The snapshot.
        snapshot: PathBuf,
        /// Its LSN.
        snapshot_lsn: u64,
        /// The last LSN in the log.
        log_end: u64,
        /// The last WAL file.
        last_file: Option<PathBuf>,
    },
    /// A data directory written in one mode (a single node, or a member
    /// of a replica group) was opened in the other: their logs differ, and
    /// neither may read the other's as its own.
    #[error("{dir} holds {found}, and cannot be opened as {wanted}: {hint}")]
    WrongMode {
        /// The data directory.
        dir: PathBuf,
        /// What the directory holds.
        found: &'static str,
        /// What it was opened as.
        wanted: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// Nothing in the data directory gives a state that is known to be right.
    #[error("cannot recover the data in {dir}: {reason}")]
    NoValidState {
        /// The data directory.
        dir: PathBuf,
        /// Why each candidate was rejected.
        reason: String,
    },
    /// The index could not be built (memory, bad segment count).
    #[error("building the index: {0}")]
    Build(#[from] BuildError),
}

impl StoreError {
    /// Wraps an OS error with what was being done and to which file.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        StoreError::Io(FileError::new(action, path, source))
    }

    /// Whether a repair (`uuidmap repair`) can get past this error, by
    /// cutting the log or setting a snapshot aside.
    pub fn repairable(&self) -> bool {
        match self {
            StoreError::WalRead(e) => e.repairable(),
            StoreError::WalBehindSnapshot { .. } => true,
            _ => false,
        }
    }

    /// Whether this is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::Io(e) => e.is_disk_full(),
            StoreError::DirLock(e) => e.is_disk_full(),
            StoreError::WalRead(e) => e.is_disk_full(),
            StoreError::WalWrite(e) => e.is_disk_full(),
            StoreError::WalFollow(e) => e.is_disk_full(),
            StoreError::SnapshotLoad(e) => e.is_disk_full(),
            StoreError::SnapshotWrite(e) => e.is_disk_full(),
            StoreError::RaftStateOpen(e) => e.is_disk_full(),
            StoreError::RaftStateFailed(_)
            | StoreError::WalBehindSnapshot { .. }
            | StoreError::WrongMode { .. }
            | StoreError::NoValidState { .. }
            | StoreError::Build(_) => false,
        }
    }
}
