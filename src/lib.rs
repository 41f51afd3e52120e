//! uuidmap: a lock-free in-memory index from 16-byte UUIDs to 16-byte UUIDs.
//!
//! One writer, many readers that never lock. See `ARCHITECTURE.md` for the
//! layers and their invariants.
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

#[cfg(not(uuidmap_loom))]
pub mod client;
#[cfg(not(uuidmap_loom))]
#[doc(hidden)]
pub mod crashtest;
pub mod error_chain;
pub mod index;
#[cfg(not(uuidmap_loom))]
pub mod server;
pub mod store;
pub mod sync;
#[cfg(not(uuidmap_loom))]
pub mod writer;

pub use index::{CasError, Index, IndexBuilder, IndexWriter, KeyError};

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
