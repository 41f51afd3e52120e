//! The durable store: the write-ahead log, snapshots, and recovery of an
//! index from them. All file access goes through [`io::Io`].
//!
//! - [`io`]: the file-system trait, the real implementation, and mappings.
//! - [`op`]: the blind writes the log records.
//! - `error`: the layer's error type, `StoreError`.
//! - [`sim_io`]: a simulated disk that crashes, tears writes and fills up,
//!   for crash tests.
//! - [`wal`]: the write-ahead log: record format, the group-committing
//!   writer, and replay.

pub mod error;
pub mod io;
pub mod op;
pub mod sim_io;
pub mod wal;

pub use error::StoreError;
pub use io::{Io, IoFile, MappedFile, OsIo};
pub use op::Op;
pub use sim_io::SimIo;
