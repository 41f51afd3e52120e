//! [`DirLockError`]: why the data directory's lock was not taken (see
//! `dir_lock`).

use std::path::PathBuf;

use super::FileError;

/// Why the data directory's lock was not taken ([`lock_data_dir`],
/// [`Io::lock_dir`]).
///
/// [`lock_data_dir`]: crate::store::lock_data_dir
/// [`Io::lock_dir`]: crate::store::Io::lock_dir
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirLockError {
    /// Another process (or another open store of this one) holds the data
    /// directory's lock.
    #[error("data directory {dir} is {}", in_use_by(*.pid))]
    InUse {
        /// The data directory.
        dir: PathBuf,
        /// The holder's PID, when it recorded one.
        pid: Option<u32>,
    },
    /// The lock file could not be opened or locked.
    #[error(transparent)]
    Io(#[from] FileError),
}

impl DirLockError {
    /// Whether this is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, DirLockError::Io(e) if e.is_disk_full())
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
