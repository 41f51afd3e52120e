//! Segment images: whole-array copies of a segment for a snapshot, and an
//! index rebuilt around slot memory that already holds its tables (a restored
//! snapshot), without copying or rehashing.
//!
//! An image is the segment's slot array exactly as it is in memory, empty
//! slots included, then its tag words, plus what is needed to use them
//! again: its capacity, entry count, growth generation, the bound on
//! displacements the tags are scanned to (`max_disp`), and the *stamp* of
//! the latest write it contains (the store stamps every write with its
//! batch's LSN; see [`IndexWriter::set_stamp`]). The copy is taken under the
//! segment's seqlock, so slots, tags, count and stamp are one consistent
//! state.
//!
//! A restored table takes its tags from the image ([`StoredTags`]) when it
//! has them, and otherwise rebuilds them by hashing every resident (a
//! snapshot from before tags were stored).

use std::sync::Arc;

use crossbeam_epoch as epoch;
use crossbeam_utils::CachePadded;

use super::atomic::AtomicUsize;
use super::hasher::{HashSeeds, KeyHasher};
use super::index_builder::{IndexBuilder, MAX_SEGMENTS};
use super::index_error::BuildError;
use super::map::Index;
use super::segment::Segment;
use super::shared::Shared;
use super::slot_array::{ExternalSlots, SlotArray};
use super::table::Table;
use super::tag_array::{ExternalTags, TagArray};
use super::writer::IndexWriter;

/// What goes with a copied slot array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentImage {
    /// Slots in the array (the copy holds `capacity * 32` bytes of slots,
    /// then the tags).
    pub capacity: usize,
    /// Entries in it.
    pub len: usize,
    /// Growth generation of the table copied.
    pub generation: u32,
    /// Stamp of the latest write contained in the copy (0: none since the
    /// table was created empty, or the stamp it was restored with).
    pub stamp: u64,
    /// Words of tags after the slots: `ceil(capacity / 8)`, eight one-byte
    /// tags to a little-endian `u64`, slot `8w + j`'s in byte `j` of word `w`.
    pub tag_words: usize,
    /// At least the largest displacement of any resident from its home:
    /// how far a lookup scans the tags.
    pub max_disp: usize,
}

/// A segment's tags as an image carried them, for [`RestoredSegment::tags`].
pub struct StoredTags {
    tags: TagArray,
    max_disp: usize,
}

impl StoredTags {
    /// The tags of a table of `capacity` slots from the little-endian bytes
    /// of its image's tag words, and the image's `max_disp`. `None` if
    /// `bytes` is not `ceil(capacity / 8) * 8` long.
    ///
    /// Tags that do not belong to the slots they are restored with (a
    /// damaged file read without its checksum) give wrong answers, never
    /// unsafety: lookups are bounded by the capacity, and `max_disp` is
    /// capped at it.
    pub fn from_le_bytes(capacity: usize, bytes: &[u8], max_disp: u64) -> Option<StoredTags> {
        if !bytes.len().is_multiple_of(8) {
            return None;
        }
        let words = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8")));
        Some(Self::capped(
            TagArray::from_words(capacity, words)?,
            capacity,
            max_disp,
        ))
    }

    /// The tags of a table from its image's tag words where they lie
    /// ([`ExternalTags`]: no copy), and the image's `max_disp`. The same
    /// bounds hold as for [`StoredTags::from_le_bytes`].
    pub fn lent(tags: ExternalTags, max_disp: u64) -> StoredTags {
        let capacity = tags.capacity();
        Self::capped(TagArray::from(tags), capacity, max_disp)
    }

    /// `tags` with the image's `max_disp`, capped at the `capacity`.
    fn capped(tags: TagArray, capacity: usize, max_disp: u64) -> StoredTags {
        StoredTags {
            tags,
            max_disp: usize::try_from(max_disp)
                .unwrap_or(usize::MAX)
                .min(capacity),
        }
    }
}

/// One segment's table for [`IndexBuilder::restore`].
pub struct RestoredSegment {
    /// The slot memory, holding the table in its in-memory layout.
    pub slots: ExternalSlots,
    /// Entries in it.
    pub len: usize,
    /// Its growth generation.
    pub generation: u32,
    /// The stamp to report for it until the next write.
    pub stamp: u64,
    /// Its tags, or `None` to rebuild them by hashing every resident.
    pub tags: Option<StoredTags>,
}

impl Index {
    /// Copies segment `segment`'s whole slot array, then its tags, into
    /// `out` (resized to `capacity * 4 + tag_words` words: the in-memory
    /// layout, byte for byte), as one consistent state of the segment,
    /// while the writer goes on writing. Bounded under a write stream like
    /// a scan's copy (see `scan`).
    ///
    /// # Panics
    ///
    /// If `segment >= self.segment_count()`.
    pub fn copy_segment_raw(&self, segment: usize, out: &mut Vec<u64>) -> SegmentImage {
        let guard = epoch::pin();
        let mut handoffs = 0;
        let (table, (_version, copy)) =
            self.shared.segments[segment]
                .copy_consistent(&guard, &mut handoffs, |t| t.try_copy_raw(out));
        SegmentImage {
            capacity: table.capacity(),
            len: copy.len,
            generation: table.generation(),
            stamp: copy.stamp,
            tag_words: table.tag_words(),
            max_disp: copy.max_disp,
        }
    }
}

impl IndexBuilder {
    /// Builds an index whose segments are the given tables, in order, using
    /// their memory as it is (no copy, no rehash). The seeds must be the ones
    /// the tables were built with ([`IndexBuilder::seeds`]); the segment
    /// count is `segments.len()`. The capacity and segment options are
    /// ignored.
    ///
    /// Errors if no seeds were given, or if the count is not a power of two
    /// up to [`MAX_SEGMENTS`], or a table has no free slot.
    pub fn restore(
        self,
        segments: Vec<RestoredSegment>,
    ) -> Result<(IndexWriter, Index), BuildError> {
        let count = segments.len();
        if count == 0 || count > MAX_SEGMENTS || !count.is_power_of_two() {
            return Err(BuildError::BadSegmentCount {
                requested: count,
                max: MAX_SEGMENTS,
            });
        }
        let seeds: HashSeeds = self.seeds.ok_or(BuildError::SeedsRequired)?;
        let hasher = KeyHasher::new(seeds, count.trailing_zeros());
        for (i, s) in segments.iter().enumerate() {
            let capacity = s.slots.capacity();
            if s.len >= capacity {
                return Err(BuildError::FullTable {
                    segment: i,
                    len: s.len,
                    capacity,
                });
            }
        }
        let tables = restore_tables(segments, &hasher);
        let bytes = tables.iter().map(Table::bytes).sum();
        let entries = tables.iter().map(Table::len).sum();
        let tables: Vec<Segment> = tables.into_iter().map(Segment::new).collect();
        let shared = Arc::new(Shared {
            segments: tables.into_boxed_slice(),
            hasher,
            len: CachePadded::new(AtomicUsize::new(entries)),
            table_bytes: AtomicUsize::new(bytes),
            huge_pages: self.huge_pages,
        });
        Ok((IndexWriter::new(shared.clone()), Index { shared }))
    }
}

/// The tables around the restored segments' memory, in order. A table
/// without stored tags has them rebuilt by hashing its residents (one hash
/// and one read of each slot), so the segments are spread over the
/// machine's cores.
fn restore_tables(segments: Vec<RestoredSegment>, hasher: &KeyHasher) -> Vec<Table> {
    type Part = (SlotArray, usize, u32, u64, Option<(TagArray, usize)>);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(segments.len())
        .max(1);
    let per_thread = segments.len().div_ceil(threads);
    // `SlotArray` is `Send`; the lent memory's handle is not.
    let parts = segments.into_iter().map(|s| {
        let tags = s.tags.map(|t| (t.tags, t.max_disp));
        (SlotArray::from(s.slots), s.len, s.generation, s.stamp, tags)
    });
    let mut chunks: Vec<Vec<_>> = Vec::with_capacity(threads);
    let mut rest = parts;
    loop {
        let chunk: Vec<_> = rest.by_ref().take(per_thread).collect();
        if chunk.is_empty() {
            break;
        }
        chunks.push(chunk);
    }
    let restore = |chunk: Vec<Part>| -> Vec<Table> {
        chunk
            .into_iter()
            .map(|(slots, len, generation, stamp, tags)| {
                Table::restored(slots, len, generation, stamp, tags, hasher)
            })
            .collect()
    };
    if chunks.len() <= 1 {
        return chunks.into_iter().flat_map(restore).collect();
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| scope.spawn(move || restore(chunk)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("restoring a table does not panic"))
            .collect()
    })
}
