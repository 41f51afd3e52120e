//! The store layer's errors: every one names the file it is about and says
//! what an operator can do.

use std::io;
use std::path::PathBuf;

use crate::index::BuildError;

/// Whatever can go wrong reading or writing the data directory.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An operating-system call on a file failed.
    #[error("{action} {path}: {source}{hint}", hint = io_hint(source))]
    Io {
        /// What was being done ("writing", "fsyncing", ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A WAL record before the end of the log fails its checks.
    #[error(
        "WAL file {path} is corrupt at byte offset {offset}: {reason}. Refusing to start, \
         because the records after it cannot be trusted. To cut the log there (losing every \
         record from that offset on), restart with --wal-truncate-corrupt"
    )]
    WalCorrupt {
        /// The WAL file.
        path: PathBuf,
        /// Byte offset of the bad record in that file.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The WAL does not continue where the state before it ends.
    #[error(
        "the WAL in {dir} is missing records: expected LSN {expected} next, but the log \
         continues at LSN {found}"
    )]
    WalGap {
        /// The data directory.
        dir: PathBuf,
        /// The LSN that should come next.
        expected: u64,
        /// The LSN found instead.
        found: u64,
    },
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
    WalNotRetained {
        /// The data directory.
        dir: PathBuf,
        /// The LSN wanted.
        wanted: u64,
        /// The first LSN of the oldest WAL file left, if any.
        oldest: Option<u64>,
    },
    /// A snapshot file fails its checks.
    #[error("snapshot {path} is damaged: {reason}")]
    SnapshotCorrupt {
        /// The snapshot file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Nothing in the data directory gives a state that is known to be right.
    #[error("cannot recover the data in {dir}: {reason}")]
    NoValidState {
        /// The data directory.
        dir: PathBuf,
        /// Why each candidate was rejected.
        reason: String,
    },
    /// Another process (or another open store of this one) holds the data
    /// directory's lock (see `dir_lock`).
    #[error("data directory {dir} is {}", in_use_by(*.pid))]
    DirInUse {
        /// The data directory.
        dir: PathBuf,
        /// The holder's PID, when it recorded one.
        pid: Option<u32>,
    },
    /// The index could not be built (memory, bad segment count).
    #[error("building the index: {0}")]
    Build(#[from] BuildError),
}

impl StoreError {
    /// Wraps an OS error with what was being done and to which file.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        StoreError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// Whether this is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StoreError::Io { source, .. } if is_disk_full(source))
    }
}

/// Whether an OS error means the disk (or quota) is full.
pub fn is_disk_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull
        || e.kind() == io::ErrorKind::QuotaExceeded
        || e.raw_os_error() == Some(libc::ENOSPC)
        || e.raw_os_error() == Some(libc::EDQUOT)
}

/// Names a full disk in every message. What follows from it (writes
/// resume by themselves, or start again, or nothing is lost) depends on
/// who reports it, so each reporter adds its own words.
fn io_hint(e: &io::Error) -> &'static str {
    if is_disk_full(e) {
        " (the disk is full)"
    } else {
        ""
    }
}

/// Who holds a data directory's lock, and what to do about it.
fn in_use_by(pid: Option<u32>) -> String {
    match pid {
        Some(pid) if pid == std::process::id() => {
            format!("already open in this process (PID {pid}); close it first")
        }
        Some(pid) => format!("in use by another uuidmap process (PID {pid}); stop it first"),
        None => "in use by another uuidmap process; stop it first".to_string(),
    }
}
