//! The store layer's errors: every one names the file it is about and says
//! what an operator can do.

use std::io;
use std::path::PathBuf;

use uuidmap_index::BuildError;

/// Whatever can go wrong reading or writing the data directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// A WAL record that was written whole (or that the file's header
    /// vouches for as synced) fails its checks, or synced records are gone.
    #[error(
        "WAL file {path} is damaged at byte offset {offset}: {reason}. Refusing to start: \
         acknowledged writes from there on would be lost or wrong. A repair can cut the log \
         back to the last good record (losing what follows)"
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
    WalGap {
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
    /// A failed fsync ended the WAL writer (see `wal::writer`).
    #[error(
        "the WAL can no longer be written: {cause}. A failed fsync may have dropped written \
         data without a trace, so this process accepts no more writes; restart it to recover \
         from what is on disk"
    )]
    WalFailed {
        /// The WAL file.
        path: PathBuf,
        /// The failure, in words.
        cause: String,
    },
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
    /// A member has nothing to snapshot now.
    #[error("this member has nothing to snapshot now: {0}")]
    NothingToSnapshot(&'static str),
    /// Something a member of a replica group does not do yet.
    #[error("a member of a replica group does not {0} yet (docs/replication.md says when it will)")]
    NotInGroupYet(&'static str),
    /// A snapshot file fails its checks.
    #[error("snapshot {path} is damaged: {reason}")]
    SnapshotCorrupt {
        /// The snapshot file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Neither slot of the Raft state file holds a valid state (see
    /// `raft_state`).
    #[error(
        "Raft state file {path} is damaged: {reason}. Refusing to start: the file holds this \
         node's vote, and a node that forgot its vote could vote twice in one term. Restore the \
         file from a backup of this node, or remove the node from its replica group, empty its \
         data directory and add it back"
    )]
    RaftStateCorrupt {
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
    RaftStateVersion {
        /// The `raft-state` file.
        path: PathBuf,
        /// The slot (0 or 1).
        slot: usize,
        /// The version it has.
        version: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// A failed write or fsync ended the Raft state file (see `raft_state`).
    #[error(
        "the Raft state file {path} can no longer be written: {cause}. A failed write or fsync \
         may have lost the state without a trace, so this process writes no more Raft state; \
         restart it to recover from what is on disk"
    )]
    RaftStateFailed {
        /// The `raft-state` file.
        path: PathBuf,
        /// The failure, in words.
        cause: String,
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

    /// An owned error standing for a shared one (its message, and its kind
    /// where that matters to callers: a full disk stays a full disk).
    pub fn clone_shared(e: &std::sync::Arc<StoreError>) -> StoreError {
        match &**e {
            StoreError::Io {
                action,
                path,
                source,
            } => StoreError::Io {
                action,
                path: path.clone(),
                source: match source.raw_os_error() {
                    Some(code) => io::Error::from_raw_os_error(code),
                    None => io::Error::new(source.kind(), source.to_string()),
                },
            },
            StoreError::WalFailed { path, cause } => StoreError::WalFailed {
                path: path.clone(),
                cause: cause.clone(),
            },
            other => StoreError::io(
                "making the WAL durable",
                PathBuf::new(),
                io::Error::other(other.to_string()),
            ),
        }
    }

    /// Whether a repair (`uuidmap repair`) can get past this error, by
    /// cutting the log or setting a snapshot aside.
    pub fn repairable(&self) -> bool {
        matches!(
            self,
            StoreError::WalCorrupt { .. }
                | StoreError::WalGap {
                    ends_early: Some(_),
                    ..
                }
                | StoreError::WalBehindSnapshot { .. }
        )
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
