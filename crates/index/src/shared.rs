//! [`Shared`]: the state the read handles ([`Index`](crate::Index)) and the
//! one writer ([`IndexWriter`](crate::IndexWriter)) point to. Its own module,
//! so that the two handles depend on it and not on each other.

use crossbeam_utils::CachePadded;

use super::atomic::AtomicUsize;
use super::hasher::KeyHasher;
use super::segment::Segment;

/// State shared by the read handles and the writer.
pub(crate) struct Shared {
    /// The segments; their number is fixed for the index's life.
    pub(crate) segments: Box<[Segment]>,
    /// Seeded hash and the segment/slot split.
    pub(crate) hasher: KeyHasher,
    /// Entries in the index. Written by the writer only.
    pub(crate) len: CachePadded<AtomicUsize>,
    /// Bytes of all current tables. Written by the writer only.
    pub(crate) table_bytes: AtomicUsize,
    /// Whether large slot arrays are advised as transparent huge pages.
    pub(crate) huge_pages: bool,
}
