//! The durable store: the write-ahead log, snapshots, and recovery of an
//! index from them. All file access goes through [`io::Io`].
//!
//! - [`io`]: the file-system trait, the real implementation, and mappings.
//! - [`crc32c`]: the one checksum of every file the store writes.
//! - [`dir_lock`]: the data directory's exclusive lock. Whatever writes a
//!   data directory takes it first, through [`lock_data_dir`], and holds
//!   the [`DirLock`] while it writes; a second taker is refused with
//!   [`DirLockError::InUse`], which names the holder's PID.
//! - [`op`]: the blind writes the log records.
//! - [`op_bytes`]: how a sequence of ops is spelled in bytes, in a WAL
//!   record and on a replica group's wire.
//! - [`error`]: the layer's errors: one per surface (the lock, reading,
//!   writing and following the WAL, loading and writing snapshots, the
//!   `raft-state` file, a failed file call), each converting into
//!   [`StoreError`], the error of opening a data directory.
//! - [`wal`]: the write-ahead log: record format, the group-committing
//!   writer, and replay.
//! - [`snapshot`]: snapshot files: written while the writer goes on, mapped
//!   back in place on restart.
//! - [`raft_state`]: the `raft-state` file of a replica group's member
//!   (vote, committed and purged log ids) in two checksummed slots.
//! - [`recovery`]: from a data directory to a live index.
//! - [`replay_apply`]: the replayed records applied on every core.

mod checksum;
pub mod dir_lock;
pub mod error;
pub mod io;
mod le;
pub mod op;
pub mod op_bytes;
pub mod raft_state;
pub mod recovery;
pub mod replay_apply;
pub mod snapshot;
pub mod wal;

pub use checksum::crc32c;
pub use dir_lock::DirLock;
pub use error::{
    DirLockError, FileError, RaftStateFailed, RaftStateOpenError, SnapshotCorrupt,
    SnapshotLoadError, SnapshotWriteError, StoreError, WalCorrupt, WalFollowError, WalReadError,
    WalWriteError,
};
pub use io::{FileSync, Io, IoFile, MappedFile, OsIo, lock_data_dir};
pub use op::Op;
pub use snapshot::{
    OpenedSnapshot, RestoredIndex, SnapshotInfo, list_snapshots, open_snapshot, write_snapshot,
};
