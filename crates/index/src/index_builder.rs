//! [`IndexBuilder`]: a new index, as its one writer and a first read handle
//! (also `Index::builder` and `Index::with_capacity`). It sits above both
//! handles, so that neither imports the other.

use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::atomic::AtomicUsize;
use super::growth;
use super::hasher::{HashSeeds, KeyHasher};
use super::index_error::BuildError;
use super::map::{Index, physical_memory};
use super::segment::Segment;
use super::shared::Shared;
use super::table::Table;
use super::writer::IndexWriter;

/// Largest capacity hint accepted (about 2.4 TB of slots).
pub const MAX_CAPACITY: usize = 1 << 36;

/// Largest segment count.
pub const MAX_SEGMENTS: usize = 1 << 16;

/// Fewest segments chosen by default: enough that the staggered sizes average
/// out (see `growth`).
const MIN_DEFAULT_SEGMENTS: usize = 64;

/// Entries per segment that the default segment count aims for. Large enough
/// that a segment's slot array (about 10 MiB) is mostly backed by 2 MiB huge
/// pages, which measured 10-15 % faster for batched lookups at 10M entries
/// than 1 MiB arrays; small enough that a growth or a consistent copy (scan,
/// snapshot) handles one array of a few MiB at a time.
const TARGET_SEGMENT_ENTRIES: usize = 256 * 1024;

/// Options for a new index.
#[derive(Clone, Debug)]
pub struct IndexBuilder {
    pub(super) capacity: usize,
    pub(super) segments: Option<usize>,
    pub(super) seeds: Option<HashSeeds>,
    pub(super) huge_pages: bool,
}

impl Default for IndexBuilder {
    fn default() -> Self {
        IndexBuilder {
            capacity: 0,
            segments: None,
            seeds: None,
            huge_pages: true,
        }
    }
}

impl IndexBuilder {
    /// Presize for `entries` entries (the index still grows past it).
    pub fn capacity(mut self, entries: usize) -> Self {
        self.capacity = entries;
        self
    }

    /// Override the segment count (a power of two, 1 to [`MAX_SEGMENTS`]).
    /// By default it follows the capacity: about 256 Ki entries per segment,
    /// and at least 64 segments.
    pub fn segments(mut self, segments: usize) -> Self {
        self.segments = Some(segments);
        self
    }

    /// Use these hash seeds instead of random ones (restoring a snapshot,
    /// reproducible tests).
    pub fn seeds(mut self, seeds: HashSeeds) -> Self {
        self.seeds = Some(seeds);
        self
    }

    /// Whether large slot arrays are advised as transparent huge pages
    /// (default: yes).
    pub fn huge_pages(mut self, on: bool) -> Self {
        self.huge_pages = on;
        self
    }

    /// The segment count chosen for an index presized for `entries`
    /// entries: about 256 Ki entries per segment, and at least 64.
    pub fn default_segments(entries: usize) -> usize {
        (entries / TARGET_SEGMENT_ENTRIES)
            .next_power_of_two()
            .clamp(MIN_DEFAULT_SEGMENTS, MAX_SEGMENTS)
    }

    /// Builds the index: the one writer and a read handle.
    pub fn build(self) -> Result<(IndexWriter, Index), BuildError> {
        if self.capacity > MAX_CAPACITY {
            return Err(BuildError::CapacityTooLarge {
                requested: self.capacity,
                max: MAX_CAPACITY,
            });
        }
        let segments = match self.segments {
            Some(s) if s == 0 || s > MAX_SEGMENTS || !s.is_power_of_two() => {
                return Err(BuildError::BadSegmentCount {
                    requested: s,
                    max: MAX_SEGMENTS,
                });
            }
            Some(s) => s,
            None => IndexBuilder::default_segments(self.capacity),
        };
        let per_segment = growth::presize_per_segment(self.capacity, segments);
        let capacities: Vec<(u32, usize)> = (0..segments)
            .map(|i| {
                let generation = growth::generation_for(i, segments, per_segment);
                (generation, growth::capacity(i, segments, generation))
            })
            .collect();
        // Slot arrays are written once per page when allocated, so a presize
        // larger than the machine's memory would not fail politely later: it
        // would bring in the out-of-memory killer now.
        let needed: usize = capacities.iter().map(|&(_, c)| c.saturating_mul(32)).sum();
        if let Some(physical) = physical_memory().filter(|&p| needed > p) {
            return Err(BuildError::MoreThanMemory {
                bytes: needed,
                physical,
            });
        }
        let mut tables = Vec::with_capacity(segments);
        let mut bytes = 0usize;
        for (generation, capacity) in capacities {
            let table = Table::new(
                capacity,
                growth::max_len(capacity),
                generation,
                self.huge_pages,
            )
            .ok_or(BuildError::OutOfMemory {
                bytes: capacity * 32,
            })?;
            bytes += table.bytes();
            tables.push(Segment::new(table));
        }
        let shared = Arc::new(Shared {
            segments: tables.into_boxed_slice(),
            hasher: KeyHasher::new(
                self.seeds.unwrap_or_else(HashSeeds::random),
                segments.trailing_zeros(),
            ),
            len: CachePadded::new(AtomicUsize::new(0)),
            table_bytes: AtomicUsize::new(bytes),
            huge_pages: self.huge_pages,
        });
        Ok((IndexWriter::new(shared.clone()), Index { shared }))
    }
}

impl Index {
    /// Options for a new index.
    pub fn builder() -> IndexBuilder {
        IndexBuilder::default()
    }

    /// A new index presized for `capacity` entries: the one writer and a read
    /// handle.
    ///
    /// The capacity is a hint. One larger than [`MAX_CAPACITY`], one whose
    /// tables would not fit in this machine's memory, or one whose memory the
    /// allocator refuses, is dropped in favour of a small index that grows as
    /// needed; use [`Index::builder`] to get an error instead.
    pub fn with_capacity(capacity: usize) -> (IndexWriter, Index) {
        Index::builder()
            .capacity(capacity)
            .build()
            .or_else(|_| Index::builder().build())
            .expect("allocating an empty index")
    }
}
