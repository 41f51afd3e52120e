//! Lock-free, resumable, splittable scans.
//!
//! # Contract
//!
//! An entry present for the whole scan is returned exactly once; no entry is
//! ever returned twice; entries inserted or removed during the scan may or may
//! not appear.
//!
//! # How
//!
//! A scan walks a range of segments in order. Each segment is copied whole
//! under its seqlock (so the copy is one consistent state of that segment) and
//! the copy is filtered and emitted. A key always lives in the same segment
//! (the segment count and hash are fixed), so walking segments once visits every
//! key once. When a page's `limit` ends in the middle of a segment, the entries
//! not yet emitted are the ones with a key greater than the last emitted key
//! (the copy is sorted by key in that case only); the cursor records that key,
//! and the next page re-copies the segment and emits only greater keys. An entry
//! present throughout is in both copies and falls on exactly one side of the
//! recorded key. (While the segment's version has not changed, the next page
//! continues from the sorted remainder of the previous copy instead: it is
//! exactly what a new copy would give.)
//!
//! A paged scan finishes a segment only if its pages outpace keys inserted
//! ahead of the cursor in that segment; with any realistic page size they do.
//!
//! # Bounded copies under a write stream
//!
//! A copy of a large segment can be spoiled by a write again and again. After
//! [`HANDOFF_AFTER_FAILURES`] spoiled copies the scanner asks the writer for a
//! *hand-off*: before its next write to that table, the writer waits (at most
//! 2 ms plus 100 ns per slot, enough for a whole copy) until the scanner has
//! finished its copy. So a scanner needs at most a
//! few retries plus one short pause of the writer, and the writer is never held
//! longer than that.

use std::collections::HashSet;

use crossbeam_epoch as epoch;
use uuid::Uuid;

use super::index_error::ScanError;
use super::map::Index;
use super::slot::{SLOT_WORDS, from_words, to_words};
use super::table::Table;

pub use super::segment::HANDOFF_AFTER_FAILURES;

/// Length of [`ScanCursor::to_bytes`].
pub const CURSOR_BYTES: usize = 1 + 4 + 4 + 4 + 8 + 1 + 16;

/// Format tag of the cursor encoding.
const CURSOR_FORMAT: u8 = 1;

/// Where a scan stands: the segments still to visit and, inside the current
/// segment, the last key already returned. Resumable across calls and
/// processes (see [`ScanCursor::to_bytes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanCursor {
    /// The segment the scan continues in.
    next_segment: u32,
    /// One past the last segment of this scan's split.
    end_segment: u32,
    /// In `next_segment`, keys up to and including this one were returned.
    after: Option<Uuid>,
    /// Segment count of the index the cursor was made for.
    segments: u32,
    /// Hash layout tag of that index.
    layout_tag: u64,
}

impl ScanCursor {
    /// Whether the scan has visited every segment of its split.
    pub fn is_done(&self) -> bool {
        self.next_segment >= self.end_segment
    }

    /// A fixed-size encoding, to hand to a client and take back later.
    pub fn to_bytes(&self) -> [u8; CURSOR_BYTES] {
        let mut b = [0u8; CURSOR_BYTES];
        b[0] = CURSOR_FORMAT;
        b[1..5].copy_from_slice(&self.next_segment.to_le_bytes());
        b[5..9].copy_from_slice(&self.end_segment.to_le_bytes());
        b[9..13].copy_from_slice(&self.segments.to_le_bytes());
        b[13..21].copy_from_slice(&self.layout_tag.to_le_bytes());
        if let Some(k) = self.after {
            b[21] = 1;
            b[22..38].copy_from_slice(k.as_bytes());
        }
        b
    }

    /// The cursor that resumes this one's segment after `key`.
    ///
    /// For a caller that takes a segment's remaining entries at this cursor
    /// in one piece ([`Scanner::next_segment`]) and hands them on in
    /// several, in key order, with a cursor after each: a scan resumed from
    /// `resume_after(k)` copies the segment again and returns only keys
    /// greater than `k`. An entry present throughout has the same key in
    /// both copies, so it falls on exactly one side of `k`. `key` must be
    /// greater than the key this cursor already resumes after (every key of
    /// the remainder is).
    pub fn resume_after(&self, key: Uuid) -> ScanCursor {
        debug_assert!(!self.is_done(), "a finished scan has no segment to resume");
        debug_assert!(
            self.after.is_none_or(|a| key > a),
            "cursors only move forward"
        );
        ScanCursor {
            after: Some(key),
            ..self.clone()
        }
    }

    /// Decodes [`ScanCursor::to_bytes`]. The result is checked against an
    /// index when a scan resumes from it.
    pub fn from_bytes(b: &[u8]) -> Result<Self, ScanError> {
        if b.len() != CURSOR_BYTES {
            return Err(ScanError::Malformed("wrong length"));
        }
        if b[0] != CURSOR_FORMAT {
            return Err(ScanError::Malformed("unknown cursor format"));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let after = match b[21] {
            0 if b[22..].iter().all(|&x| x == 0) => None,
            1 => Some(Uuid::from_bytes(b[22..38].try_into().expect("16 bytes"))),
            _ => return Err(ScanError::Malformed("bad resume-key flag")),
        };
        let c = ScanCursor {
            next_segment: u32_at(1),
            end_segment: u32_at(5),
            segments: u32_at(9),
            layout_tag: u64::from_le_bytes(b[13..21].try_into().expect("8 bytes")),
            after,
        };
        if c.end_segment > c.segments || c.next_segment > c.end_segment {
            return Err(ScanError::Malformed("segment position out of range"));
        }
        Ok(c)
    }
}

/// "The value is one of these": lets a rebalancer enumerate only the entries
/// on one shard.
#[derive(Clone, Debug)]
pub struct ValueFilter {
    /// The values, as in-memory words; searched linearly when there are few.
    values: Vec<[u64; 2]>,
    /// The same values hashed, when there are many.
    set: Option<HashSet<[u64; 2], ahash::RandomState>>,
}

/// Above this many values the filter hashes instead of comparing each.
const LINEAR_FILTER_MAX: usize = 8;

impl ValueFilter {
    /// Matches entries whose value is one of `values`.
    pub fn new(values: impl IntoIterator<Item = Uuid>) -> Self {
        let mut values: Vec<[u64; 2]> = values.into_iter().map(|v| to_words(&v)).collect();
        values.sort_unstable();
        values.dedup();
        let set = (values.len() > LINEAR_FILTER_MAX).then(|| values.iter().copied().collect());
        ValueFilter { values, set }
    }

    /// Whether `value` passes.
    #[inline]
    pub fn matches(&self, value: &Uuid) -> bool {
        self.matches_words(to_words(value))
    }

    #[inline]
    fn matches_words(&self, value: [u64; 2]) -> bool {
        match &self.set {
            Some(set) => set.contains(&value),
            None => self.values.contains(&value),
        }
    }
}

impl Index {
    /// A cursor for split `split` of `splits`: split `i` covers segments
    /// `[i·S/n, (i+1)·S/n)`, so the splits together cover the index once.
    /// With more splits than segments, some splits are empty.
    pub fn scan_cursor(&self, split: u32, splits: u32) -> Result<ScanCursor, ScanError> {
        if splits == 0 || split >= splits {
            return Err(ScanError::BadSplit { split, splits });
        }
        let s = self.segment_count() as u64;
        let bound = |i: u32| (i as u64 * s / splits as u64) as u32;
        Ok(ScanCursor {
            next_segment: bound(split),
            end_segment: bound(split + 1),
            after: None,
            segments: s as u32,
            layout_tag: self.shared.hasher.layout_tag(),
        })
    }

    /// A scan of the whole index, as an iterator of `(key, value)`.
    pub fn scan(&self) -> Scanner {
        let cursor = self.scan_cursor(0, 1).expect("split 0 of 1 is valid");
        Scanner::new(self.clone(), cursor, None).expect("own cursor fits")
    }
}

/// A scan in progress: pages of entries from a cursor, or an iterator.
pub struct Scanner {
    /// The index being scanned.
    index: Index,
    /// Where the scan stands; advanced as pages are returned.
    cursor: ScanCursor,
    /// Only entries whose value passes are returned.
    filter: Option<ValueFilter>,
    /// The last consistent copy of a segment (reused between segments).
    copy: Vec<[u64; SLOT_WORDS]>,
    /// Entries of the current segment's copy that pass the filter and come
    /// after the cursor; `matching[matching_pos..]` are not yet returned.
    matching: Vec<(Uuid, Uuid)>,
    matching_pos: usize,
    /// Whether `matching[matching_pos..]` is sorted by key (needed only when
    /// a page ends inside the segment).
    rest_sorted: bool,
    /// The table and version `matching` was copied from. While the segment
    /// still has that table at that version, the next page continues from
    /// `matching` instead of copying the segment again. Only compared, never
    /// dereferenced. (Should a freed table's address be reused by a new table
    /// at the same version, the remainder is merely stale: every entry present
    /// throughout the scan is still in it, so the contract holds.) Kept as an
    /// address, not a pointer, so that a `Scanner` is `Send`: the server
    /// moves a scan between threads.
    rest_of: Option<(usize, u64)>,
    /// Buffered page for the iterator interface, and the position in it.
    page: Vec<(Uuid, Uuid)>,
    page_pos: usize,
    /// Hand-offs this scanner asked the writer for (diagnostics, tests).
    handoffs: u64,
    /// Entries of the consistent segment copies this scanner took, before
    /// the filter and the cursor's key were applied (the server's metric of
    /// the work a filtered scan does).
    examined: u64,
}

impl Scanner {
    /// Resumes a scan of `index` at `cursor`, returning only entries whose
    /// value passes `filter`.
    pub fn new(
        index: Index,
        cursor: ScanCursor,
        filter: Option<ValueFilter>,
    ) -> Result<Self, ScanError> {
        let segments = index.segment_count() as u32;
        let tag = index.shared.hasher.layout_tag();
        if cursor.segments != segments || cursor.layout_tag != tag {
            return Err(ScanError::ForeignCursor {
                cursor_segments: cursor.segments,
                cursor_tag: cursor.layout_tag,
                index_segments: segments,
                index_tag: tag,
            });
        }
        Ok(Scanner {
            index,
            cursor,
            filter,
            copy: Vec::new(),
            matching: Vec::new(),
            matching_pos: 0,
            rest_sorted: false,
            rest_of: None,
            page: Vec::new(),
            page_pos: 0,
            handoffs: 0,
            examined: 0,
        })
    }

    /// Where the scan stands (after the entries returned so far).
    pub fn cursor(&self) -> &ScanCursor {
        &self.cursor
    }

    /// Hand-offs this scanner asked the writer for.
    pub fn handoffs(&self) -> u64 {
        self.handoffs
    }

    /// Entries this scanner has examined so far: every entry of each
    /// consistent segment copy it took, whether or not the filter or the
    /// cursor's key kept it. A segment copied again (a page that resumes
    /// inside it after it changed, or a scanner started from a cursor inside
    /// it) counts again; a page served from the previous copy does not, and
    /// neither does a copy spoiled by a write.
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// Appends up to `limit` further entries to `out` and advances the
    /// cursor past them. Returns how many were appended; 0 with a non-zero
    /// limit means the scan is done.
    pub fn next_page(&mut self, limit: usize, out: &mut Vec<(Uuid, Uuid)>) -> usize {
        let mut added = 0;
        while added < limit && !self.cursor.is_done() {
            if !self.rest_is_current() {
                self.load_segment();
            }
            let rest = &mut self.matching[self.matching_pos..];
            let room = limit - added;
            if rest.len() <= room {
                out.extend_from_slice(rest);
                added += rest.len();
                self.finish_segment();
            } else {
                if !self.rest_sorted {
                    rest.sort_unstable_by_key(|&(k, _)| k);
                    self.rest_sorted = true;
                }
                out.extend_from_slice(&rest[..room]);
                added += room;
                self.matching_pos += room;
                self.cursor.after = Some(self.matching[self.matching_pos - 1].0);
            }
        }
        added
    }

    /// Appends the rest of the current segment to `out` (everything the
    /// cursor has not returned yet) and moves to the next segment. Returns
    /// how many were appended; `None` when the scan is done. One consistent
    /// copy per segment, no sorting: the cheapest way through a whole index.
    pub fn next_segment(&mut self, out: &mut Vec<(Uuid, Uuid)>) -> Option<usize> {
        if self.cursor.is_done() {
            return None;
        }
        if !self.rest_is_current() {
            self.load_segment();
        }
        let rest = &self.matching[self.matching_pos..];
        out.extend_from_slice(rest);
        let n = rest.len();
        self.finish_segment();
        Some(n)
    }

    /// Whether `matching[matching_pos..]` is still exactly what a fresh copy
    /// of the current segment would give: same table, same version.
    fn rest_is_current(&self) -> bool {
        let Some((table, version)) = self.rest_of else {
            return false;
        };
        let guard = epoch::pin();
        let current = self.index.shared.segments[self.cursor.next_segment as usize].load(&guard);
        std::ptr::from_ref(current) as usize == table
            && current.seqlock().read_begin() == Some(version)
    }

    /// Copies the current segment and keeps the entries that pass the filter
    /// and come after the cursor.
    fn load_segment(&mut self) {
        let (table, version) = self.copy_segment(self.cursor.next_segment as usize);
        self.examined += self.copy.len() as u64;
        let after = self.cursor.after;
        self.matching.clear();
        for s in &self.copy {
            let value = [s[2], s[3]];
            if self
                .filter
                .as_ref()
                .is_some_and(|f| !f.matches_words(value))
            {
                continue;
            }
            let key = from_words([s[0], s[1]]);
            if after.is_some_and(|a| key <= a) {
                continue;
            }
            self.matching.push((key, from_words(value)));
        }
        self.matching_pos = 0;
        self.rest_sorted = false;
        self.rest_of = Some((table as usize, version));
    }

    fn finish_segment(&mut self) {
        self.cursor.next_segment += 1;
        self.cursor.after = None;
        self.matching.clear();
        self.matching_pos = 0;
        self.rest_of = None;
    }

    /// Copies segment `segment` into `self.copy`, consistently; returns the
    /// table copied and its version.
    fn copy_segment(&mut self, segment: usize) -> (*const Table, u64) {
        let guard = epoch::pin();
        let copy = &mut self.copy;
        let (table, version) =
            self.index.shared.segments[segment]
                .copy_consistent(&guard, &mut self.handoffs, |t| t.try_copy_entries(copy));
        (table, version)
    }
}

impl Iterator for Scanner {
    type Item = (Uuid, Uuid);

    /// Walks whole segments (one copy each, see [`Scanner::next_segment`]).
    fn next(&mut self) -> Option<(Uuid, Uuid)> {
        while self.page_pos == self.page.len() {
            let mut page = std::mem::take(&mut self.page);
            page.clear();
            self.page_pos = 0;
            let more = self.next_segment(&mut page);
            self.page = page;
            more?;
        }
        let e = self.page[self.page_pos];
        self.page_pos += 1;
        Some(e)
    }
}
