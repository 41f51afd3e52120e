//! [`PartWriter`]: the one writer split into several, each the only writer
//! of a disjoint set of segments, so that a burst of writes (recovery's WAL
//! replay) is applied on every core.
//!
//! [`IndexWriter::split`] borrows the writer mutably and hands out `parts`
//! part writers; part `k` owns the segments `s` with `s % parts == k`. While
//! they live, the `IndexWriter` cannot be used (the borrow), so each table
//! still has exactly one writer: the part that owns its segment.
//!
//! # Why this is sound
//!
//! - **No data races.** Every shared word a writer touches is an atomic: slot
//!   words (`SlotArray`), the seqlock, a table's stamp and length, the table
//!   pointer, and the index's `len` and `table_bytes`. Two parts therefore
//!   never race in the memory model's sense, whatever they write; no new
//!   `unsafe` is needed.
//! - **One writer per table.** The seqlock protocol and Robin Hood shifting
//!   assume that one thread writes a table. A part writes only segments it
//!   owns ([`PartWriter::apply`] and [`PartWriter::reserve`] assert it), and
//!   ownership is a partition of the segment numbers, fixed for the split.
//! - **Growth.** A part may grow a segment it owns (its tables are swapped
//!   and retired exactly as the writer does it). The retired table reaches
//!   the `IndexWriter`'s channel and is freed only by
//!   [`IndexWriter::reclaim`], which cannot run while a part lives, so
//!   `Segment::writer_table` (an unprotected load) never sees a freed table.
//!   A reader pinned meanwhile is protected by the epoch, as always.
//! - **The entry count.** `Shared::len` is written by the single writer with
//!   a plain load and store. Parts keep their own difference and add it
//!   with an atomic read-modify-write when they are dropped; until then a
//!   reader's `len()` lags, which it may (it reads a relaxed counter anyway).
//!
//! Applied per segment in the order given, writes leave each table exactly
//! as the single writer would: same entries, same layout, same stamps.

use std::marker::PhantomData;
use std::sync::mpsc::Sender;

use uuid::Uuid;

use super::atomic::Ordering;
use super::growth;
use super::key::Key;
use super::map::{Index, prefetch};
use super::shared::Shared;
use super::slot::{KeyWords, to_words};
use super::table::Table;
use super::writer::{IndexWriter, delete_hashed, put_hashed, reserve_segment};

/// How many writes ahead [`PartWriter::apply`] prefetches a write's home
/// slot (as `get_many` does for lookups).
const PREFETCH_DISTANCE: usize = 16;

/// A blind write, hashed once by whoever routes it to the part that owns its
/// segment ([`Index::prepare_put`], [`Index::prepare_delete`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreparedWrite {
    /// The key's words.
    key: KeyWords,
    /// The value's words (unused for a delete).
    value: [u64; 2],
    /// The key's hash under the index's seeds.
    hash: u64,
    /// The stamp to record with the change (the batch's LSN).
    stamp: u64,
    /// The segment the hash picks.
    segment: u32,
    /// A delete rather than a put.
    delete: bool,
}

impl PreparedWrite {
    /// The segment this write changes.
    #[inline]
    pub fn segment(&self) -> usize {
        self.segment as usize
    }

    /// The stamp it records (the batch's LSN).
    #[inline]
    pub fn stamp(&self) -> u64 {
        self.stamp
    }
}

impl Index {
    /// A put of `key` to `value` stamped `stamp`, hashed for
    /// [`PartWriter::apply`].
    #[inline]
    pub fn prepare_put(&self, key: Key, value: &Uuid, stamp: u64) -> PreparedWrite {
        self.prepare(key, Some(value), stamp)
    }

    /// A delete of `key` stamped `stamp`, hashed for [`PartWriter::apply`].
    #[inline]
    pub fn prepare_delete(&self, key: Key, stamp: u64) -> PreparedWrite {
        self.prepare(key, None, stamp)
    }

    #[inline]
    fn prepare(&self, key: Key, value: Option<&Uuid>, stamp: u64) -> PreparedWrite {
        let words = to_words(key.as_uuid());
        let hasher = &self.shared.hasher;
        let hash = hasher.hash(words);
        PreparedWrite {
            key: words,
            value: value.map_or([0, 0], to_words),
            hash,
            stamp,
            segment: hasher.segment(hash) as u32,
            delete: value.is_none(),
        }
    }
}

impl IndexWriter {
    /// Splits the writer into `parts` (at least 1) part writers over
    /// disjoint sets of segments (module docs). They may be moved to other
    /// threads; the writer is usable again once all are dropped.
    pub fn split(&mut self, parts: usize) -> Vec<PartWriter<'_>> {
        let parts = parts.clamp(1, self.shared.segments.len());
        let shared: &Shared = &self.shared;
        (0..parts)
            .map(|part| PartWriter {
                shared,
                retired: self.retired_tx.clone(),
                part,
                parts,
                len_delta: 0,
                _writer: PhantomData,
            })
            .collect()
    }
}

/// The only writer of the segments `s` with `s % parts == part`, for the
/// life of an [`IndexWriter::split`].
pub struct PartWriter<'w> {
    /// The index's shared state (borrowed from the split writer).
    shared: &'w Shared,
    /// Where tables replaced by this part's growth go (the writer frees
    /// them after the split).
    retired: Sender<Box<Table>>,
    /// This part's number.
    part: usize,
    /// How many parts the writer was split into.
    parts: usize,
    /// Entries this part added minus entries it removed; folded into
    /// `Shared::len` on drop.
    len_delta: isize,
    /// The split holds the writer's exclusive borrow.
    _writer: PhantomData<&'w mut IndexWriter>,
}

impl PartWriter<'_> {
    /// The part that owns `segment` when the writer is split into `parts`
    /// (the one rule of ownership: whoever routes writes uses it too).
    #[inline]
    pub fn part_of(segment: usize, parts: usize) -> usize {
        segment % parts
    }

    /// Whether this part owns (is the only writer of) `segment`.
    #[inline]
    pub fn owns(&self, segment: usize) -> bool {
        PartWriter::part_of(segment, self.parts) == self.part
    }

    /// The segments this part owns.
    pub fn segments(&self) -> impl Iterator<Item = usize> + '_ {
        (self.part..self.shared.segments.len()).step_by(self.parts)
    }

    /// Entries in `segment` now (a segment this part owns).
    pub fn segment_len(&self, segment: usize) -> usize {
        assert!(self.owns(segment), "segment {segment} is not this part's");
        self.shared.segments[segment].writer_table().len()
    }

    /// Grows `segment` (which this part owns), once, so that it takes
    /// `entries` entries in all without growing.
    pub fn reserve(&mut self, segment: usize, entries: usize) {
        assert!(self.owns(segment), "segment {segment} is not this part's");
        reserve_segment(self.shared, &self.retired, segment, entries);
    }

    /// Grows each segment this part owns, once, so that it takes its share
    /// of `extra` more entries spread by the hash (the mean plus one
    /// deviation, as a presized index) without growing.
    pub fn reserve_share(&mut self, extra: usize) {
        let per_segment = growth::presize_per_segment(extra, self.shared.segments.len());
        for segment in (self.part..self.shared.segments.len()).step_by(self.parts) {
            let len = self.shared.segments[segment].writer_table().len();
            reserve_segment(self.shared, &self.retired, segment, len + per_segment);
        }
    }

    /// Applies `writes` in order, prefetching each write's home slot
    /// `PREFETCH_DISTANCE` writes ahead.
    ///
    /// # Panics
    ///
    /// If a write is for a segment this part does not own (before applying
    /// any of them).
    pub fn apply(&mut self, writes: &[PreparedWrite]) {
        if let Some(w) = writes.iter().find(|w| !self.owns(w.segment())) {
            panic!(
                "a write for segment {} reached part {} of {}",
                w.segment, self.part, self.parts
            );
        }
        for w in writes.iter().take(PREFETCH_DISTANCE) {
            prefetch_home(self.shared, w);
        }
        for (i, w) in writes.iter().enumerate() {
            if let Some(ahead) = writes.get(i + PREFETCH_DISTANCE) {
                // A table that grows before `ahead` is applied makes this a
                // wasted hint, nothing worse.
                prefetch_home(self.shared, ahead);
            }
            let segment = w.segment();
            if w.delete {
                if delete_hashed(self.shared, segment, w.key, w.hash, w.stamp).is_some() {
                    self.len_delta -= 1;
                }
            } else if put_hashed(
                self.shared,
                &self.retired,
                segment,
                w.key,
                w.hash,
                w.value,
                w.stamp,
            )
            .is_none()
            {
                self.len_delta += 1;
            }
        }
    }
}

/// Prefetches the two cache lines where `w`'s probe starts, and its tag
/// line (its segment
/// is owned by the caller, so its table pointer is stable under it).
#[inline(always)]
fn prefetch_home(shared: &Shared, w: &PreparedWrite) {
    let table = shared.segments[w.segment()].writer_table();
    let rest = shared.hasher.rest(w.hash);
    let home = table.home_ptr(rest);
    prefetch(table.home_tags_ptr(rest));
    prefetch(home);
    // A probe often runs into the next line (two slots a line).
    prefetch(home.wrapping_add(64));
}

impl Drop for PartWriter<'_> {
    fn drop(&mut self) {
        // Parts drop on their own threads, possibly at once: an atomic
        // read-modify-write, unlike the single writer's plain store.
        let len = &self.shared.len;
        if self.len_delta >= 0 {
            len.fetch_add(self.len_delta as usize, Ordering::Relaxed);
        } else {
            len.fetch_sub(self.len_delta.unsigned_abs(), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> Uuid {
        Uuid::from_u64_pair(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1, i)
    }

    #[test]
    fn parts_partition_the_segments() {
        let (mut w, index) = Index::builder().segments(16).build().unwrap();
        let parts = w.split(3);
        let mut seen: Vec<usize> = parts.iter().flat_map(|p| p.segments()).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..index.segment_count()).collect::<Vec<_>>());
    }

    #[test]
    fn split_writes_on_threads_equal_the_single_writer() {
        let seeds = crate::HashSeeds([7, 8, 9, 10]);
        let (mut serial, a) = Index::builder().seeds(seeds).build().unwrap();
        let (mut split, b) = Index::builder().seeds(seeds).build().unwrap();
        let mut writes = Vec::new();
        for i in 0..20_000u64 {
            let k = key(i % 7_000);
            if i % 5 == 4 {
                serial.set_stamp(i);
                serial.remove(&k);
                writes.push(b.prepare_delete(Key::new(k).unwrap(), i));
            } else {
                serial.set_stamp(i);
                serial.insert(k, key(i)).unwrap();
                writes.push(b.prepare_put(Key::new(k).unwrap(), &key(i), i));
            }
        }
        std::thread::scope(|s| {
            for mut part in split.split(4) {
                let mine: Vec<_> = writes
                    .iter()
                    .copied()
                    .filter(|w| part.owns(w.segment()))
                    .collect();
                s.spawn(move || part.apply(&mine));
            }
        });
        assert_eq!(a.len(), b.len());
        for i in 0..7_000 {
            assert_eq!(a.get(&key(i)), b.get(&key(i)));
        }
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for s in 0..a.segment_count() {
            assert_eq!(a.copy_segment_raw(s, &mut x), b.copy_segment_raw(s, &mut y));
            assert_eq!(x, y, "segment {s} differs in layout");
        }
        assert_eq!(b.len(), split.len());
    }

    #[test]
    #[should_panic(expected = "is not this part's")]
    fn a_part_refuses_a_segment_it_does_not_own() {
        let (mut w, _index) = Index::builder().segments(4).build().unwrap();
        let mut parts = w.split(2);
        parts[0].reserve(1, 100);
    }

    #[test]
    fn reserve_grows_once_to_fit() {
        let (mut w, index) = Index::builder().segments(4).build().unwrap();
        let before = index.table_bytes();
        w.reserve(100_000);
        assert!(index.table_bytes() > before);
        let after = index.table_bytes();
        for i in 0..90_000 {
            w.insert(key(i), key(i)).unwrap();
        }
        assert_eq!(index.table_bytes(), after, "no growth after the reserve");
    }
}
