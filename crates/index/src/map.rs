//! The public read handle [`Index`]: lookups, one or many at a time.
//!
//! A lookup hashes the key, takes the segment from the high hash bits, pins the
//! epoch, and does one seqlock-validated probe of that segment's table. It
//! never blocks, never takes a lock and never allocates.

use std::sync::Arc;

use crossbeam_epoch as epoch;
use uuid::Uuid;

use super::atomic::Ordering;
use super::hasher::{HashSeeds, hash_fingerprint};
use super::shared::Shared;
use super::slot::{EMPTY_KEY, from_words, to_words};

/// How many keys ahead `get_many` hashes and prefetches (a power of two).
const PREFETCH_DISTANCE: usize = 16;

/// The read handle: cheap to clone, shareable across threads, never blocks.
///
/// Made together with the one [`IndexWriter`](crate::IndexWriter) by
/// [`Index::with_capacity`] or [`IndexBuilder::build`](crate::IndexBuilder::build).
#[derive(Clone)]
pub struct Index {
    pub(crate) shared: Arc<Shared>,
}

impl Index {
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
