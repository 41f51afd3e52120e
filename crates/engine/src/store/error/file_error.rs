//! [`FileError`]: an operating-system call on a file failed. Every
//! narrower error of the store that touches files carries it as its `Io`
//! variant, as redb's narrow errors carry its `StorageError`.

use std::io;
use std::path::PathBuf;

/// An operating-system call on a file failed: what was being done, to
/// which file, and the OS error. Its message names a full disk.
#[derive(Debug, thiserror::Error)]
#[error("{action} {path}: {source}{hint}", hint = io_hint(source))]
pub struct FileError {
    /// What was being done ("writing", "fsyncing", ...).
    pub action: &'static str,
    /// The file or directory.
    pub path: PathBuf,
    /// The OS error.
    pub source: io::Error,
}

impl FileError {
    /// Wraps an OS error with what was being done and to which file.
    pub fn new(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        FileError {
            action,
            path: path.into(),
            source,
        }
    }

    /// Whether this is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        is_disk_full(&self.source)
    }

    /// An owned copy (`io::Error` is not `Clone`): the same message, and
    /// the same kind where that matters to callers (a full disk stays a
    /// full disk).
    pub fn duplicate(&self) -> FileError {
        FileError {
            action: self.action,
            path: self.path.clone(),
            source: match self.source.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(self.source.kind(), self.source.to_string()),
            },
        }
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
