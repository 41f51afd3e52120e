//! The durable store: the write-ahead log, snapshots, and recovery of an
//! index from them. All file access goes through [`io::Io`].
//!
//! - [`io`]: the file-system trait, the real implementation, and mappings.
//! - [`op`]: the blind writes the log records.
//! - `error`: the layer's error type, `StoreError`.
//! - [`snapshot`]: snapshot files: written while the writer goes on, mapped
//!   back in place on restart.

pub mod error;
pub mod io;
pub mod op;
// Snapshots restore tables from lent memory, which the loom build of the
// index leaves out.
#[cfg(not(uuidmap_loom))]
pub mod snapshot;

pub use error::StoreError;
pub use io::{Io, IoFile, MappedFile, OsIo};
pub use op::Op;
#[cfg(not(uuidmap_loom))]
pub use snapshot::{
    OpenedSnapshot, RestoredIndex, SnapshotInfo, list_snapshots, open_snapshot, write_snapshot,
};
