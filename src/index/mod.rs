//! The in-memory index: a fixed power-of-two number of segments, each an
//! open-addressing table of 32-byte slots behind its own seqlock, with one
//! writer and any number of lock-free readers.
//!
//! This layer is a pure data structure: no I/O, no async, no logging.
//!
//! - [`slot`]: the 32-byte slot and the reserved keys.
//! - [`hasher`]: seeded ahash, fingerprint, segment/slot split.
//! - `seqlock`: the version protocol readers validate against.
//! - `slot_array`: slot memory, accessed only through atomics.
//! - `table`: Robin Hood probing, insertion, backward-shift deletion.
//! - `growth`: staggered table sizes.
//! - `segment`: the table pointer, growth by swap, epoch retirement.
//! - `map`: the read handle [`Index`] and [`IndexBuilder`].
//! - `writer`: the single [`IndexWriter`].
//! - `partition`: the writer split over disjoint segments (recovery).
//! - [`scan`]: cursors, filters and consistent segment copies.
//! - `image`: whole-segment copies for snapshots; restore from lent memory.

mod atomic;
mod error;
mod growth;
pub mod hasher;
#[cfg(not(uuidmap_loom))]
mod image;
#[cfg(all(test, uuidmap_loom))]
mod loom_models;
mod map;
#[cfg(not(uuidmap_loom))]
mod partition;
pub mod scan;
mod segment;
mod seqlock;
pub mod slot;
mod slot_array;
mod table;
mod writer;

pub use error::{BuildError, CasError, KeyError, ScanError};
pub use hasher::{HashSeeds, hash_fingerprint};
#[cfg(not(uuidmap_loom))]
pub use image::{RestoredSegment, SegmentImage};
pub use map::{Index, IndexBuilder, MAX_CAPACITY, MAX_SEGMENTS, physical_memory};
#[cfg(not(uuidmap_loom))]
pub use partition::{PartWriter, PreparedWrite};
pub use scan::{ScanCursor, Scanner, ValueFilter};
pub use slot::Slot;
#[cfg(not(uuidmap_loom))]
pub use slot_array::ExternalSlots;
pub use writer::IndexWriter;
