//! uuidmap's index: a lock-free in-memory map from 16-byte UUIDs to 16-byte
//! UUIDs, with one writer and any number of readers that never lock, and the
//! concurrency primitives the layers above build on ([`sync`]: the LSN
//! watermark and the LIFO admission semaphore). This crate is the bottom
//! layer of the workspace: a pure data structure with no I/O, no logging and
//! no async runtime (the optional `tokio` feature only adds deadline timers
//! to the `sync` waits), and the only crate the loom models are built for.
//!
//! ```
//! use uuid::Uuid;
//! let (mut writer, index) = uuidmap_index::Index::with_capacity(1000);
//! let file = Uuid::from_u128(1);
//! let shard = Uuid::from_u128(0xa);
//! writer.insert(file, shard).unwrap();
//! assert_eq!(index.get(&file), Some(shard));
//! // Move the file only if it is still on shard 0xa.
//! writer.compare_and_set(file, Some(shard), Some(Uuid::from_u128(0xb))).unwrap();
//! ```
//!
//! # The index
//!
//! A fixed power-of-two number of segments, each an
//! open-addressing table of 32-byte slots behind its own seqlock, with one
//! writer and any number of lock-free readers.
//!
//! This layer is a pure data structure: no I/O, no async, no logging.
//!
//! - [`slot`]: the 32-byte slot and the reserved keys.
//! - `key`: [`Key`], a UUID checked once to be storable.
//! - [`hasher`]: seeded ahash, fingerprint, segment/slot split.
//! - `seqlock`: the version protocol readers validate against.
//! - `slot_array`: slot memory, accessed only through atomics.
//! - `table`: Robin Hood probing, insertion, backward-shift deletion.
//! - `tag_array`: one hash byte per slot, which lookups scan instead of keys.
//! - `growth`: staggered table sizes.
//! - `segment`: the table pointer, growth by swap, epoch retirement.
//! - `shared`: the state both handles point to.
//! - `map`: the read handle [`Index`] and its [`ReadSession`].
//! - `index_builder`: [`IndexBuilder`], which makes the writer and a reader.
//! - `writer`: the single [`IndexWriter`].
//! - `partition`: the writer split over disjoint segments (recovery).
//! - [`scan`]: cursors, filters and consistent segment copies.
//! - `image`: whole-segment copies for snapshots; restore from lent memory.
//! - `lent_memory`: memory a restored snapshot lends to the tables.

#![warn(missing_docs, unreachable_pub)]

mod atomic;
mod growth;
pub mod hasher;
#[cfg(not(uuidmap_loom))]
mod image;
mod index_builder;
mod index_error;
#[cfg(all(test, uuidmap_loom))]
mod index_loom_models;
mod key;
#[cfg(not(uuidmap_loom))]
mod lent_memory;
mod map;
#[cfg(not(uuidmap_loom))]
mod partition;
pub mod scan;
mod segment;
mod seqlock;
mod shared;
pub mod slot;
mod slot_array;
mod table;
mod tag_array;
mod writer;

pub mod sync;

pub use hasher::{HashSeeds, hash_fingerprint};
#[cfg(not(uuidmap_loom))]
pub use image::{RestoredSegment, SegmentImage, StoredTags};
pub use index_builder::{IndexBuilder, MAX_CAPACITY, MAX_SEGMENTS};
pub use index_error::{BuildError, CasError, KeyError, ScanError};
pub use key::Key;
#[cfg(not(uuidmap_loom))]
pub use lent_memory::LentMemory;
pub use map::{Index, ReadSession, SESSION_REPIN_EVERY, physical_memory};
#[cfg(not(uuidmap_loom))]
pub use partition::{PartWriter, PreparedWrite};
pub use scan::{ScanCursor, Scanner, ValueFilter};
pub use slot::Slot;
#[cfg(not(uuidmap_loom))]
pub use slot_array::ExternalSlots;
#[cfg(not(uuidmap_loom))]
pub use tag_array::ExternalTags;
pub use writer::IndexWriter;
