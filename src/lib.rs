//! uuidmap: a lock-free in-memory index from 16-byte UUIDs to 16-byte UUIDs,
//! served over gRPC, durable through a write-ahead log and mmap'd snapshots.
//!
//! This package is the binary (`uuidmap serve` and the CLI) and its
//! end-to-end tests. Its library re-exports the workspace's layers under one
//! name, for users who want a single dependency; a user who needs only the
//! map depends on `uuidmap-index` and compiles no network code. See
//! `ARCHITECTURE.md` for the crates and what each may import.
//!
//! ```
//! use uuid::Uuid;
//! let (mut writer, index) = uuidmap::Index::with_capacity(1000);
//! let file = Uuid::from_u128(1);
//! let shard = Uuid::from_u128(0xa);
//! writer.insert(file, shard).unwrap();
//! assert_eq!(index.get(&file), Some(shard));
//! // Move the file only if it is still on shard 0xa.
//! writer.compare_and_set(file, Some(shard), Some(Uuid::from_u128(0xb))).unwrap();
//! ```

pub use uuidmap_client as client;
pub use uuidmap_engine::{store, writer};
pub use uuidmap_index as index;
pub use uuidmap_index::sync;
pub use uuidmap_proto::error_chain;
pub use uuidmap_resp as resp;
pub use uuidmap_server as server;

pub use index::{CasError, Index, IndexBuilder, IndexWriter, Key, KeyError};

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The workspace keeps no circle of files (a test).
#[cfg(test)]
mod file_circles;
