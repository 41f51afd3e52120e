//! The WAL's errors, one per way of using it: reading it from an LSN on
//! ([`WalReadError`]: a cursor, replay and its repair), writing it
//! ([`WalWriteError`]: the writer), and following the live log
//! ([`WalFollowError`]: change streams). [`WalCorrupt`] is the damage
//! both readers report.

use std::path::PathBuf;
use std::sync::Arc;

use super::FileError;

/// A WAL record that was written whole (or that the file's header vouches
/// for as synced) fails its checks, or synced records are gone.
#[derive(Debug, thiserror::Error)]
#[error(
    "WAL file {path} is damaged at byte offset {offset}: {reason}. Refusing to start: \
     acknowledged writes from there on would be lost or wrong. A repair can cut the log \
     back to the last good record (losing what follows)"
)]
pub struct WalCorrupt {
    /// The WAL file.
    pub path: PathBuf,
    /// Byte offset of the bad record in that file.
    pub offset: u64,
    /// What is wrong with it.
    pub reason: String,
}

/// Why the WAL could not be read from an LSN on ([`WalCursor`],
/// [`replay`]).
///
/// [`WalCursor`]: crate::store::wal::WalCursor
/// [`replay`]: crate::store::wal::replay
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalReadError {
    /// A record is damaged (see `wal::reader`).
    #[error(transparent)]
    Corrupt(#[from] WalCorrupt),
    /// The WAL does not continue where the state before it ends.
    #[error(
        "the WAL in {dir} is missing records: LSN {expected} is needed next, but {where_}",
        where_ = match .ends_early {
            Some(file) => format!(
                "WAL file {} ends before it and the next file, {}, starts at LSN {found} \
                 (the file lost its last records). A repair can cut the log back to the end \
                 of {} (losing what follows)",
                file.display(), next_file.display(), file.display()
            ),
            None => format!(
                "the oldest WAL file, {}, starts at LSN {found}",
                next_file.display()
            ),
        }
    )]
    Gap {
        /// The data directory.
        dir: PathBuf,
        /// The LSN that should come next.
        expected: u64,
        /// The LSN found instead.
        found: u64,
        /// The WAL file that should have held `expected` but ends before
        /// it (`None`: the log starts after it).
        ends_early: Option<PathBuf>,
        /// The file that starts at `found`.
        next_file: PathBuf,
    },
    /// A WAL file could not be listed, read or cut.
    #[error(transparent)]
    Io(#[from] FileError),
}

impl WalReadError {
    /// Whether a repair (`uuidmap repair`) can get past this error by
    /// cutting the log.
    pub fn repairable(&self) -> bool {
        matches!(
            self,
            WalReadError::Corrupt(_)
                | WalReadError::Gap {
                    ends_early: Some(_),
                    ..
                }
        )
    }

    /// Whether this is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, WalReadError::Io(e) if e.is_disk_full())
    }
}

/// Why the WAL writer did not write or sync ([`WalWriter`]).
///
/// [`WalWriter`]: crate::store::wal::WalWriter
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalWriteError {
    /// A failed fsync ended the WAL writer (see `wal::writer`).
    #[error(
        "the WAL can no longer be written: {cause}. A failed fsync may have dropped written \
         data without a trace, so this process accepts no more writes; restart it to recover \
         from what is on disk"
    )]
    Failed {
        /// The WAL file.
        path: PathBuf,
        /// The failure, in words.
        cause: String,
    },
    /// A write, a rollback, a rotation or a file's creation failed; the
    /// writer goes on (a full disk, say).
    #[error(transparent)]
    Io(#[from] FileError),
}

impl WalWriteError {
    /// An owned error standing for a shared one (its message, and its kind
    /// where that matters to callers: a full disk stays a full disk).
    pub fn clone_shared(e: &Arc<WalWriteError>) -> WalWriteError {
        match &**e {
            WalWriteError::Io(file) => WalWriteError::Io(file.duplicate()),
            WalWriteError::Failed { path, cause } => WalWriteError::Failed {
                path: path.clone(),
                cause: cause.clone(),
            },
        }
    }

    /// Whether this is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, WalWriteError::Io(e) if e.is_disk_full())
    }
}

/// Why a follower of the live log stopped ([`WalFollower`]).
///
/// [`WalFollower`]: crate::store::wal::WalFollower
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalFollowError {
    /// A reader of the WAL wants an LSN the WAL no longer holds: a
    /// snapshot covers it and its file was removed (or it was never logged
    /// because a snapshot already held it).
    #[error(
        "the WAL in {dir} no longer holds LSN {wanted}{oldest}",
        oldest = match .oldest {
            Some(o) => format!(" (the oldest LSN it still holds is {o})"),
            None => String::new(),
        }
    )]
    NotRetained {
        /// The data directory.
        dir: PathBuf,
        /// The LSN wanted.
        wanted: u64,
        /// The first LSN of the oldest WAL file left, if any.
        oldest: Option<u64>,
    },
    /// A committed record is damaged or missing.
    #[error(transparent)]
    Corrupt(#[from] WalCorrupt),
    /// A WAL file could not be listed or read.
    #[error(transparent)]
    Io(#[from] FileError),
}

impl WalFollowError {
    /// Whether this is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, WalFollowError::Io(e) if e.is_disk_full())
    }
}
