//! The snapshot files' errors: loading one ([`SnapshotLoadError`]) and
//! writing one ([`SnapshotWriteError`]). [`SnapshotCorrupt`] is a file
//! that fails its checks, wherever that is found.

use std::path::PathBuf;

use uuidmap_index::BuildError;

use super::{FileError, WalWriteError};

/// A snapshot file fails its checks.
#[derive(Debug, thiserror::Error)]
#[error("snapshot {path} is damaged: {reason}")]
pub struct SnapshotCorrupt {
    /// The snapshot file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

/// Why a snapshot could not be loaded ([`open_snapshot`],
/// [`OpenedSnapshot::verify`], [`OpenedSnapshot::into_index`]).
///
/// [`open_snapshot`]: crate::store::snapshot::open_snapshot
/// [`OpenedSnapshot::verify`]: crate::store::snapshot::OpenedSnapshot::verify
/// [`OpenedSnapshot::into_index`]: crate::store::snapshot::OpenedSnapshot::into_index
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotLoadError {
    /// The file is damaged: a start passes over it for an older one.
    #[error(transparent)]
    Corrupt(#[from] SnapshotCorrupt),
    /// The index it holds could not be rebuilt (memory, bad segment
    /// count), when this build hashes differently from the writer's.
    #[error("building the index: {0}")]
    Build(#[from] BuildError),
    /// The file could not be mapped. Not proven damaged.
    #[error(transparent)]
    Io(#[from] FileError),
    /// The file is in a format version newer than this build reads: a
    /// newer build wrote it, and it is not damaged. A start passes over it
    /// for an older one and leaves it in place.
    #[error(
        "snapshot {path} is in format version {version}, written by a newer build \
         (this build reads versions {oldest} to {newest}); it is left as it is"
    )]
    NewerFormat {
        /// The snapshot file.
        path: PathBuf,
        /// Its format version.
        version: u32,
        /// The oldest version this build reads.
        oldest: u32,
        /// The newest version this build reads (and writes).
        newest: u32,
    },
}

impl SnapshotLoadError {
    /// Whether this is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, SnapshotLoadError::Io(e) if e.is_disk_full())
    }
}

/// Why a snapshot was not written ([`write_snapshot`]). The temporary file
/// is removed and the previous snapshots are kept.
///
/// [`write_snapshot`]: crate::store::snapshot::write_snapshot
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotWriteError {
    /// Listing, writing, syncing or renaming a file failed.
    #[error(transparent)]
    Io(#[from] FileError),
    /// The log could not be made durable through the snapshot's LSN.
    #[error(transparent)]
    Log(#[from] WalWriteError),
}

impl SnapshotWriteError {
    /// Whether this is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        match self {
            SnapshotWriteError::Io(e) => e.is_disk_full(),
            SnapshotWriteError::Log(e) => e.is_disk_full(),
        }
    }
}
