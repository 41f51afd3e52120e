//! The data directory's lock: one process at a time writes a data directory.
//!
//! Two servers over one directory would both append to the WAL from the
//! same LSN on, each unaware of the other's records; the next start keeps
//! one history and drops the other's acknowledged writes. So whatever
//! writes a data directory first takes its lock, as LevelDB and RocksDB do
//! with their `LOCK` file:
//!
//! - [`DirLock`] is the proof of holding it; dropping it releases it.
//!   `DurableIndex::open` takes it before recovery reads (and may repair)
//!   anything, and keeps it for the life of the `DurableIndex`. Any other
//!   command that writes the directory takes it through [`lock_data_dir`](super::lock_data_dir)
//!   and holds the returned guard while it works; a second taker gets
//!   [`DirLockError::InUse`], naming the directory and, when recorded, the
//!   holder's PID.
//! - Read-only inspection does not take it and may run beside a server.
//! - On the real file system the lock is `flock(LOCK_EX | LOCK_NB)` on
//!   `<dir>/LOCK` (through `File::try_lock`). The kernel drops it when the
//!   holder's last descriptor closes, also when the holder is killed with
//!   SIGKILL, so a crash never leaves a stale lock. The file itself stays
//!   (holding the last holder's PID, meaningless without the lock). `flock`
//!   locks belong to the open file, so a second open in the same process is
//!   refused too. (Over NFS, `flock` may be local to one client: keep the
//!   data directory on a local disk.)
//! - The simulated disk (`SimIo`) keeps an in-memory lock table instead, so
//!   that tests never create real files.

use std::any::Any;
use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::error::{DirLockError, FileError};

/// The name of the lock file in a data directory.
pub const LOCK_FILE: &str = "LOCK";

/// Holds a data directory's exclusive lock; dropping it releases the lock.
pub struct DirLock {
    /// The locked directory, as the taker named it.
    dir: PathBuf,
    /// What keeps the lock (the open `LOCK` file, or a simulated disk's
    /// table entry): releasing the lock is dropping it.
    _held: Box<dyn Any + Send + Sync>,
}

impl DirLock {
    /// A guard for `dir` whose lock lasts as long as `held` lives (for
    /// [`Io`](super::Io) implementations).
    pub fn new(dir: impl Into<PathBuf>, held: impl Any + Send + Sync) -> DirLock {
        DirLock {
            dir: dir.into(),
            _held: Box::new(held),
        }
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl fmt::Debug for DirLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirLock").field("dir", &self.dir).finish()
    }
}

/// The lock on the real file system: `flock` on `<dir>/LOCK`, then this
/// process's PID written into the file.
pub(crate) fn lock_os_dir(dir: &Path) -> Result<DirLock, DirLockError> {
    let path = dir.join(LOCK_FILE);
    // Never truncated on open: the holder's PID must stay readable by the
    // process that is refused.
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| FileError::new("opening the lock file", &path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            return Err(DirLockError::InUse {
                dir: dir.to_path_buf(),
                pid: holder_pid(&mut file),
            });
        }
        Err(TryLockError::Error(e)) => return Err(FileError::new("locking", &path, e).into()),
    }
    // The PID only names the holder in the refusal; the lock does not
    // depend on it, so failing to write it (a full disk) is no reason to
    // refuse to start. Not synced: after a crash the lock is gone anyway.
    if let Err(e) = record_pid(&file) {
        tracing::warn!(
            "holding the lock on {}, but cannot write this process's PID into it: {e}",
            path.display()
        );
    }
    Ok(DirLock::new(dir, file))
}

fn record_pid(mut file: &File) -> std::io::Result<()> {
    file.set_len(0)?;
    // The descriptor's offset is still 0: nothing was read or written.
    file.write_all(format!("{}\n", std::process::id()).as_bytes())
}

/// The PID the holder wrote, if it did (it may not have yet).
fn holder_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}
