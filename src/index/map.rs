//! The public read handle [`Index`], its builder, and the state it shares with
//! the one [`IndexWriter`].
//!
//! A lookup hashes the key, takes the segment from the high hash bits, pins the
//! epoch, and does one seqlock-validated probe of that segment's table. It
//! never blocks, never takes a lock and never allocates.

use std::sync::Arc;

use crossbeam_epoch as epoch;
use crossbeam_utils::CachePadded;
use uuid::Uuid;

use super::atomic::{AtomicUsize, Ordering};
use super::error::BuildError;
use super::growth;
use super::hasher::{HashSeeds, KeyHasher, hash_fingerprint};
use super::segment::Segment;
use super::slot::{EMPTY_KEY, from_words, to_words};
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

/// How many keys ahead `get_many` hashes and prefetches (a power of two).
const PREFETCH_DISTANCE: usize = 16;

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

/// The read handle: cheap to clone, shareable across threads, never blocks.
///
/// Made together with the one [`IndexWriter`] by [`Index::with_capacity`] or
/// [`IndexBuilder::build`].
#[derive(Clone)]
pub struct Index {
    pub(crate) shared: Arc<Shared>,
}

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

    /// The value stored for `key`, or `None`. Never blocks or allocates.
    #[inline]
    pub fn get(&self, key: &Uuid) -> Option<Uuid> {
        let key = to_words(key);
        if key == EMPTY_KEY {
            // Empty slots hold the nil key; it is never stored.
            return None;
        }
        let hasher = &self.shared.hasher;
        let hash = hasher.hash(key);
        let rest = hasher.rest(hash);
        let guard = epoch::pin();
        self.shared.segments[hasher.segment(hash)]
            .read(&guard, |t| t.find(key, rest, hasher))
            .map(from_words)
    }

    /// Looks up every key of `keys`, writing the answers to the matching
    /// positions of `out`. Pins the epoch once and prefetches the keys' home
    /// slots ahead of probing them, so a batch overlaps its cache misses.
    /// Never allocates.
    ///
    /// Answers `min(keys.len(), out.len())` keys; the rest of `out` is left
    /// as it was.
    pub fn get_many(&self, keys: &[Uuid], out: &mut [Option<Uuid>]) {
        let hasher = &self.shared.hasher;
        let segments = &self.shared.segments;
        let guard = epoch::pin();
        let n = keys.len().min(out.len());
        // A software pipeline: key `i` is hashed and its home cache lines
        // prefetched `PREFETCH_DISTANCE` keys before it is probed, so about
        // that many cache misses are in flight at once.
        let mut ring = [(EMPTY_KEY, 0u64, 0usize); PREFETCH_DISTANCE];
        let drain = std::iter::repeat_n(None, PREFETCH_DISTANCE);
        for (i, next) in keys[..n].iter().map(Some).chain(drain).enumerate() {
            let slot = i % PREFETCH_DISTANCE;
            if let Some(j) = i.checked_sub(PREFETCH_DISTANCE) {
                let (key, rest, segment) = ring[slot];
                out[j] = if key == EMPTY_KEY {
                    // Empty slots hold the nil key; it is never stored.
                    None
                } else {
                    segments[segment]
                        .read(&guard, |t| t.find(key, rest, hasher))
                        .map(from_words)
                };
            }
            if let Some(next) = next {
                let key = to_words(next);
                let hash = hasher.hash(key);
                let (segment, rest) = (hasher.segment(hash), hasher.rest(hash));
                let home = segments[segment].load(&guard).home_ptr(rest);
                prefetch(home);
                // A probe often runs into the next line (two slots a line).
                prefetch(home.wrapping_add(64));
                ring[slot] = (key, rest, segment);
            }
        }
    }

    /// Entries in the index (as of the writer's last completed operation).
    pub fn len(&self) -> usize {
        self.shared.len.load(Ordering::Relaxed)
    }

    /// Whether the index holds no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of segments (fixed for the index's life).
    pub fn segment_count(&self) -> usize {
        self.shared.segments.len()
    }

    /// The segment `key` belongs to (fixed for the index's life).
    pub fn segment_of(&self, key: &Uuid) -> usize {
        let hasher = &self.shared.hasher;
        hasher.segment(hasher.hash(to_words(key)))
    }

    /// Bytes of slot memory held by the current tables.
    pub fn table_bytes(&self) -> usize {
        self.shared.table_bytes.load(Ordering::Relaxed)
    }

    /// The hash seeds, to store with a snapshot.
    pub fn seeds(&self) -> HashSeeds {
        self.shared.hasher.seeds()
    }

    /// The fingerprint of this build's hash function (see [`hash_fingerprint`]).
    pub fn hash_fingerprint(&self) -> u64 {
        hash_fingerprint()
    }
}

/// Bytes of physical memory of this machine, if the OS says.
pub fn physical_memory() -> Option<usize> {
    #[cfg(all(unix, not(uuidmap_loom)))]
    {
        // SAFETY: sysconf has no preconditions; it returns -1 for unknown names.
        let (pages, page) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && page > 0 {
            return (pages as usize).checked_mul(page as usize);
        }
    }
    None
}

/// Asks the CPU to start loading the cache line at `p`.
#[inline(always)]
pub(super) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults or reads memory observably,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
