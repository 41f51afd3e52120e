//! One open-addressing table: a slot array, its seqlock, and the Robin Hood
//! linear-probing algorithm over it.
//!
//! # Layout and probing
//!
//! A key's *home* is `home_slot(rest, capacity)`. Entries sit at or after their
//! home (wrapping at the end), and the *Robin Hood* invariant keeps every run
//! of occupied slots ordered by home: walking forward, an entry's displacement
//! (distance from its home) grows by at most one per slot. So a lookup stops at
//! the first empty slot *or* at the first resident that is closer to its home
//! than the probe is to the key's home — a miss costs about as much as a hit,
//! even at 90 % load. Deletion shifts the rest of the run back by one slot
//! (no tombstones), so the table never degrades under churn.
//!
//! The capacity is any number of slots (not a power of two) so that segments
//! can grow by 1.15× and sit at staggered sizes; see [`super::growth`].
//!
//! # Lookups read tags, not keys
//!
//! Beside the slots, a [`TagArray`] holds one byte of each resident's hash.
//! A reader ([`Table::find_slot`]) scans tags from the key's home, eight at
//! a time, and compares keys only where a tag matches; it stops at the first
//! empty tag, or once it has scanned past `max_disp`, the largest
//! displacement of any resident (kept by the writer: an upper bound, since
//! deletions only lower displacements). So a hit reads about one slot and a
//! miss almost none, whatever the load: one tag line and one slot line per
//! lookup. The writer's own probe ([`Table::probe`]) still walks keys, with
//! the Robin Hood rule, because it needs the exact insertion point.
//!
//! # Who touches what
//!
//! **Architecture Invariant:** only the index writer calls the `&self` methods
//! documented "writer only"; the `IndexWriter` type guarantees it. Readers only
//! call `find`/`try_copy_entries` inside a seqlock read and discard the result
//! unless it validates.

use super::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, yield_thread};
use super::hasher::{KeyHasher, home_slot};
use super::seqlock::{SeqLock, WriteSection};
use super::slot::{EMPTY_KEY, KeyWords, SLOT_WORDS};
use super::slot_array::SlotArray;
use super::tag_array::{EMPTY_TAG, TAGS_PER_WORD, TagArray, bytes_equal, tag_of, zero_bytes};

/// How long the writer defers to a scanner that asked for a hand-off (a
/// scanner whose copy was spoiled by writes several times in a row): a fixed
/// part, plus a part per slot so that the pause always covers one whole copy
/// of the table (a copy runs at a few ns per slot; 100 ns leaves room for a
/// slow or preempted scanner). The bound keeps a stalled scanner from holding
/// the writer up for longer.
#[cfg(not(uuidmap_loom))]
const HANDOFF_BASE: std::time::Duration = std::time::Duration::from_millis(2);
#[cfg(not(uuidmap_loom))]
const HANDOFF_PER_SLOT_NS: u64 = 100;

/// One table of a segment.
#[repr(align(64))]
pub(crate) struct Table {
    /// Seqlock over `slots` and `len`; odd while the writer changes them, odd
    /// forever once this table has been replaced by a larger one.
    seqlock: SeqLock,
    /// Scanners currently asking the writer to hold off (see
    /// [`Table::request_handoff`]). Scanners increment and decrement it.
    scan_handoff: AtomicU32,
    /// Number of slots. Fixed for the table's life.
    capacity: usize,
    /// Most entries this table takes before the writer replaces it with a
    /// larger one. Fixed.
    max_len: usize,
    /// Growth step of this table (see `growth`). Fixed.
    generation: u32,
    /// Entries stored. Written by the writer only.
    len: AtomicUsize,
    /// The writer's stamp (the store's LSN) of the latest write to this
    /// table, stored inside that write's section, so a consistent copy
    /// carries the stamp that goes with its slots. Carried over by growth.
    stamp: AtomicU64,
    /// Largest displacement of any resident, or more (deletions do not
    /// lower it). Written by the writer inside write sections.
    max_disp: AtomicUsize,
    /// One tag byte per slot (see the module doc).
    tags: TagArray,
    /// The slots.
    slots: SlotArray,
}

/// What goes with a raw copy of a table ([`Table::try_copy_raw`]).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(uuidmap_loom, allow(dead_code))]
pub(crate) struct RawCopy {
    pub(crate) stamp: u64,
    pub(crate) len: usize,
    pub(crate) max_disp: usize,
}

/// Where a probe for a key ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// The key is in this slot.
    Found(usize),
    /// The key is absent; this is where it would be inserted.
    Vacant(usize),
}

/// A scanner's request for the writer to hold off; withdrawn on drop.
pub(crate) struct HandoffRequest<'a>(&'a Table);

impl Drop for HandoffRequest<'_> {
    fn drop(&mut self) {
        self.0.scan_handoff.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Table {
    /// An empty table, or `None` if the memory cannot be had.
    pub(crate) fn new(
        capacity: usize,
        max_len: usize,
        generation: u32,
        huge_pages: bool,
    ) -> Option<Table> {
        debug_assert!(max_len < capacity, "a table must keep a free slot");
        Some(Table {
            seqlock: SeqLock::new(),
            scan_handoff: AtomicU32::new(0),
            capacity,
            max_len,
            generation,
            len: AtomicUsize::new(0),
            stamp: AtomicU64::new(0),
            max_disp: AtomicUsize::new(0),
            tags: TagArray::empty(capacity),
            slots: SlotArray::zeroed(capacity, huge_pages)?,
        })
    }

    /// A table over slot memory that already holds entries (a restored
    /// snapshot). The caller vouches that `slots` holds `len` entries placed
    /// by this hasher's Robin Hood order, and that `tags`, if given, are
    /// theirs with a `max_disp` at least their largest displacement; a
    /// table that breaks it gives wrong answers, never unsafety (probes are
    /// bounded by the capacity). Without `tags` they are rebuilt here, by
    /// hashing every resident.
    #[cfg_attr(uuidmap_loom, allow(dead_code))]
    pub(crate) fn restored(
        slots: SlotArray,
        len: usize,
        generation: u32,
        stamp: u64,
        tags: Option<(TagArray, usize)>,
        hasher: &KeyHasher,
    ) -> Table {
        let capacity = slots.capacity();
        let (tags, max_disp) = match tags {
            Some((tags, max_disp)) => (tags, max_disp.min(capacity)),
            None => Self::rebuilt_tags(&slots, hasher),
        };
        Table {
            seqlock: SeqLock::new(),
            scan_handoff: AtomicU32::new(0),
            capacity,
            max_len: super::growth::max_len(capacity).max(len),
            generation,
            len: AtomicUsize::new(len),
            stamp: AtomicU64::new(stamp),
            max_disp: AtomicUsize::new(max_disp),
            tags,
            slots,
        }
    }

    /// The tags of `slots`' residents, and their largest displacement.
    #[cfg_attr(uuidmap_loom, allow(dead_code))]
    fn rebuilt_tags(slots: &SlotArray, hasher: &KeyHasher) -> (TagArray, usize) {
        let capacity = slots.capacity();
        let tags = TagArray::empty(capacity);
        let mut max_disp = 0;
        for i in 0..capacity {
            let k = slots.key(i);
            if k != EMPTY_KEY {
                let rest = hasher.rest(hasher.hash(k));
                tags.set(i, tag_of(hasher.unplaced(rest)));
                let home = home_slot(rest, capacity);
                let d = if i >= home {
                    i - home
                } else {
                    i + capacity - home
                };
                max_disp = max_disp.max(d);
            }
        }
        (tags, max_disp)
    }

    /// Number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn seqlock(&self) -> &SeqLock {
        &self.seqlock
    }

    pub(crate) fn max_len(&self) -> usize {
        self.max_len
    }

    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    /// Entries stored (exact for the writer; a recent value for readers).
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Bytes of slot and tag memory.
    pub(crate) fn bytes(&self) -> usize {
        self.slots.bytes() + self.tags.bytes()
    }

    /// Address of a key's home slot, where the writer's probe starts and
    /// where a reader most likely finds the key, for software prefetch.
    #[inline(always)]
    pub(crate) fn home_ptr(&self, rest: u64) -> *const u8 {
        self.slots.slot_ptr(home_slot(rest, self.capacity))
    }

    /// Address of the tag word of a key's home, for software prefetch.
    #[inline(always)]
    pub(crate) fn home_tags_ptr(&self, rest: u64) -> *const u8 {
        self.tags.word_ptr(home_slot(rest, self.capacity))
    }

    #[inline(always)]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.capacity { 0 } else { i + 1 }
    }

    /// Distance from `home` forward to slot `i`.
    #[inline(always)]
    fn displacement(&self, i: usize, home: usize) -> usize {
        if i >= home {
            i - home
        } else {
            i + self.capacity - home
        }
    }

    #[inline(always)]
    fn home_of(&self, key: KeyWords, hasher: &KeyHasher) -> usize {
        home_slot(hasher.rest(hasher.hash(key)), self.capacity)
    }

    /// Where `key` is, or where it would go. Readers must validate the
    /// result under the seqlock; torn slots can only make it wrong, never loop
    /// or fault.
    #[inline(always)]
    pub(crate) fn probe(&self, key: KeyWords, rest: u64, hasher: &KeyHasher) -> Probe {
        let mut i = home_slot(rest, self.capacity);
        let mut probe = 0;
        loop {
            let k = self.slots.key(i);
            if k == key {
                return Probe::Found(i);
            }
            if k == EMPTY_KEY {
                return Probe::Vacant(i);
            }
            // A resident nearer its home than we are to ours means the key
            // would have been placed before it: it is absent, and belongs
            // here. At distance 0 nothing can be nearer, so the first step
            // needs no hash.
            if probe > 0 && self.displacement(i, self.home_of(k, hasher)) < probe {
                return Probe::Vacant(i);
            }
            probe += 1;
            if probe >= self.capacity {
                // Only a torn read can get here; the reader will retry.
                return Probe::Vacant(i);
            }
            i = self.next(i);
        }
    }

    /// The slot holding `key`, if any (reader: validate before trusting).
    ///
    /// Scans tags, a word at a time, from the key's home; compares the key
    /// in each slot whose tag matches, before the first empty tag; stops at
    /// an empty tag or past `max_disp`. Torn reads can only make the answer
    /// wrong, never loop: the scan is bounded by the capacity.
    #[inline(always)]
    pub(crate) fn find_slot(&self, key: KeyWords, rest: u64, hasher: &KeyHasher) -> Option<usize> {
        let home = home_slot(rest, self.capacity);
        let tag = tag_of(hasher.unplaced(rest));
        let max_disp = self.max_disp.load(Ordering::Relaxed).min(self.capacity);
        let mut word = home / TAGS_PER_WORD;
        let mut skip = home % TAGS_PER_WORD;
        let mut scanned = 0;
        loop {
            let w = self.tags.word(word);
            let after = !0u64 << (8 * skip);
            let empty = zero_bytes(w) & after;
            // Only the matches before the first empty tag count.
            let before_empty = if empty == 0 {
                !0
            } else {
                (empty & empty.wrapping_neg()) - 1
            };
            let mut matches = bytes_equal(w, tag) & after & before_empty;
            while matches != 0 {
                let i = word * TAGS_PER_WORD + (matches.trailing_zeros() / 8) as usize;
                if i < self.capacity && self.slots.key(i) == key {
                    return Some(i);
                }
                matches &= matches - 1;
            }
            // Slots covered so far (the padding past the last slot is none).
            let first = word * TAGS_PER_WORD + skip;
            scanned += ((word + 1) * TAGS_PER_WORD).min(self.capacity) - first;
            if empty != 0 || scanned > max_disp {
                return None;
            }
            word += 1;
            if word == self.tags.word_count() {
                word = 0;
            }
            skip = 0;
        }
    }

    /// The value stored for `key` (reader: validate before trusting).
    #[inline(always)]
    pub(crate) fn find(&self, key: KeyWords, rest: u64, hasher: &KeyHasher) -> Option<[u64; 2]> {
        self.find_slot(key, rest, hasher)
            .map(|i| self.slots.value(i))
    }

    /// Value words of slot `i`.
    #[inline(always)]
    pub(crate) fn value_at(&self, i: usize) -> [u64; 2] {
        self.slots.value(i)
    }

    /// Writer only: overwrite the value in slot `i`.
    pub(crate) fn set_value(&self, i: usize, value: [u64; 2], stamp: u64) {
        let _w = self.write_section(stamp);
        self.slots.store_value(i, value);
    }

    /// Writer only: puts an absent key at `at`, the position [`Table::probe`]
    /// returned for it. The caller ensures `len() < max_len()`.
    ///
    /// A run of occupied slots is ordered by home, and the key's home is
    /// after every resident's before `at` and before every resident's from
    /// `at` on; so the Robin Hood insertion is: shift the residents from `at`
    /// up to the next empty slot forward by one, and store the key at `at`.
    /// No resident needs rehashing.
    pub(crate) fn insert_at(
        &self,
        at: usize,
        key: KeyWords,
        rest: u64,
        value: [u64; 2],
        hasher: &KeyHasher,
        stamp: u64,
    ) {
        // Find the end of the run, and the new largest displacement, before
        // opening the write section: at high load the run can span many
        // cache lines, and readers of this table retry for as long as the
        // section is open.
        let empty = self.run_end(at);
        let max_disp = self.max_disp_after_insert(at, empty, rest, hasher);
        let tag = tag_of(hasher.unplaced(rest));
        let _w = self.write_section(stamp);
        self.shift_in(
            at,
            empty,
            [key[0], key[1], value[0], value[1]],
            tag,
            max_disp,
        );
    }

    /// The first empty slot at or after `at` (one always exists).
    fn run_end(&self, at: usize) -> usize {
        let mut empty = at;
        while self.slots.key(empty) != EMPTY_KEY {
            empty = self.next(empty);
        }
        empty
    }

    /// `max_disp` once the key of `rest` is inserted at `at` and the residents from
    /// `at` up to the empty slot `empty` have moved forward by one.
    ///
    /// The key's displacement is `d = at − home`. The resident at `at` was
    /// nearer its home than `d` (that is why the key goes there), and
    /// walking forward a run's displacements grow by at most one a slot. So
    /// a bound on each moved resident's displacement follows from the one
    /// before it, and a resident is hashed for its exact displacement only
    /// when its bound, once moved, would raise the maximum; the exact value
    /// then anchors the bounds after it. Most inserts hash no resident.
    fn max_disp_after_insert(
        &self,
        at: usize,
        empty: usize,
        rest: u64,
        hasher: &KeyHasher,
    ) -> usize {
        let d = self.displacement(at, home_slot(rest, self.capacity));
        let mut max = self.max_disp.load(Ordering::Relaxed).max(d);
        // An upper bound on the displacement (before the move) of the
        // resident at `i`.
        let mut bound = d.saturating_sub(1);
        let mut i = at;
        while i != empty {
            if bound + 1 > max {
                let exact = self.displacement(i, self.home_of(self.slots.key(i), hasher));
                bound = exact;
                max = max.max(exact + 1);
            }
            bound += 1;
            i = self.next(i);
        }
        max
    }

    /// The shift of [`Table::insert_at`], without a write section: for
    /// callers that open one, or tables no reader can see yet. `empty` is
    /// [`Table::run_end`] of `at`, `max_disp` is
    /// [`Table::max_disp_after_insert`].
    fn shift_in(
        &self,
        at: usize,
        mut empty: usize,
        slot: [u64; SLOT_WORDS],
        tag: u8,
        max_disp: usize,
    ) {
        debug_assert!(self.len() < self.max_len);
        while empty != at {
            let prev = if empty == 0 {
                self.capacity - 1
            } else {
                empty - 1
            };
            self.slots.store(empty, self.slots.load(prev));
            self.tags.set(empty, self.tags.get(prev));
            empty = prev;
        }
        self.slots.store(at, slot);
        self.tags.set(at, tag);
        self.max_disp.store(max_disp, Ordering::Relaxed);
        self.len.store(self.len() + 1, Ordering::Relaxed);
    }

    /// Writer only: remove the entry in slot `i`, shifting the rest of its run
    /// back so that no tombstone is needed.
    pub(crate) fn remove_at(&self, i: usize, hasher: &KeyHasher, stamp: u64) {
        let _w = self.write_section(stamp);
        let mut hole = i;
        loop {
            let n = self.next(hole);
            let s = self.slots.load(n);
            let k = [s[0], s[1]];
            if k == EMPTY_KEY || self.displacement(n, self.home_of(k, hasher)) == 0 {
                self.slots.store(hole, [0; SLOT_WORDS]);
                self.tags.set(hole, EMPTY_TAG);
                break;
            }
            self.slots.store(hole, s);
            self.tags.set(hole, self.tags.get(n));
            hole = n;
        }
        self.len.store(self.len() - 1, Ordering::Relaxed);
    }

    /// Writer only: a new, unpublished table of `capacity` slots holding every
    /// entry of this one, or `None` if the memory cannot be had.
    pub(crate) fn grown(
        &self,
        capacity: usize,
        max_len: usize,
        generation: u32,
        hasher: &KeyHasher,
        huge_pages: bool,
    ) -> Option<Table> {
        let t = Table::new(capacity, max_len, generation, huge_pages)?;
        t.stamp.store(self.stamp(), Ordering::Relaxed);
        for i in 0..self.capacity {
            let s = self.slots.load(i);
            let k = [s[0], s[1]];
            if k != EMPTY_KEY {
                // `t` is not published yet: no write sections needed.
                let rest = hasher.rest(hasher.hash(k));
                if let Probe::Vacant(at) = t.probe(k, rest, hasher) {
                    let empty = t.run_end(at);
                    let max_disp = t.max_disp_after_insert(at, empty, rest, hasher);
                    let tag = tag_of(hasher.unplaced(rest));
                    t.shift_in(at, empty, s, tag, max_disp);
                }
            }
        }
        Some(t)
    }

    /// Reader: copies every entry into `out` (cleared first) as of one
    /// version, and returns that version. Returns `None` if a write overlapped
    /// (the copy is then garbage and the caller retries, reloading the
    /// segment's table).
    pub(crate) fn try_copy_entries(&self, out: &mut Vec<[u64; SLOT_WORDS]>) -> Option<u64> {
        out.clear();
        let version = self.seqlock.read_begin()?;
        for i in 0..self.capacity {
            let s = self.slots.load(i);
            if [s[0], s[1]] != EMPTY_KEY {
                out.push(s);
            }
        }
        self.seqlock.read_validate(version).then_some(version)
    }

    /// Reader: copies the whole slot array, empty slots included, in its
    /// memory layout, then its tags, into `out` (resized to `capacity *
    /// SLOT_WORDS` words plus the tags' [`Table::tag_words`]), as of one
    /// version. Returns the version and the stamp, entry count and
    /// `max_disp` that go with the copy, or `None` if a write overlapped.
    pub(crate) fn try_copy_raw(&self, out: &mut Vec<u64>) -> Option<(u64, RawCopy)> {
        let slot_words = self.capacity * SLOT_WORDS;
        out.resize(slot_words + self.tags.word_count(), 0);
        let version = self.seqlock.read_begin()?;
        let copy = RawCopy {
            stamp: self.stamp.load(Ordering::Relaxed),
            len: self.len.load(Ordering::Relaxed),
            max_disp: self.max_disp.load(Ordering::Relaxed),
        };
        let (slots, tags) = out.split_at_mut(slot_words);
        self.slots.copy_words_to(slots);
        self.tags.copy_to(tags);
        self.seqlock
            .read_validate(version)
            .then_some((version, copy))
    }

    /// Words of tags: `ceil(capacity / 8)`.
    #[cfg_attr(uuidmap_loom, allow(dead_code))]
    pub(crate) fn tag_words(&self) -> usize {
        self.tags.word_count()
    }

    /// The stamp of the latest write (exact for the writer).
    pub(crate) fn stamp(&self) -> u64 {
        self.stamp.load(Ordering::Relaxed)
    }

    /// Reader: asks the writer to hold off writes to this table for a short,
    /// bounded time so that a scanner spoiled by writes can finish its copy.
    pub(crate) fn request_handoff(&self) -> HandoffRequest<'_> {
        self.scan_handoff.fetch_add(1, Ordering::SeqCst);
        HandoffRequest(self)
    }

    /// Writer only: marks this table as replaced (see [`SeqLock::retire`]).
    pub(crate) fn retire(&self) {
        self.seqlock.retire();
    }

    /// Opens a write section stamped `stamp`, first deferring (boundedly) to a scanner that
    /// asked for a hand-off.
    fn write_section(&self, stamp: u64) -> WriteSection<'_> {
        if self.scan_handoff.load(Ordering::SeqCst) != 0 {
            self.wait_for_handoff();
        }
        let section = self.seqlock.write();
        self.stamp.store(stamp, Ordering::Relaxed);
        section
    }

    #[cold]
    fn wait_for_handoff(&self) {
        #[cfg(not(uuidmap_loom))]
        {
            let limit = HANDOFF_BASE
                + std::time::Duration::from_nanos(self.capacity as u64 * HANDOFF_PER_SLOT_NS);
            let start = std::time::Instant::now();
            while self.scan_handoff.load(Ordering::SeqCst) != 0 && start.elapsed() < limit {
                yield_thread();
            }
        }
        #[cfg(uuidmap_loom)]
        for _ in 0..2 {
            if self.scan_handoff.load(Ordering::SeqCst) == 0 {
                break;
            }
            yield_thread();
        }
    }
}

#[cfg(all(test, not(uuidmap_loom)))]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::growth;
    use crate::hasher::HashSeeds;
    use crate::slot::to_words;

    const CAPACITY: usize = 16;

    fn rest(h: &KeyHasher, key: KeyWords) -> u64 {
        h.rest(h.hash(key))
    }

    /// The first `count` keys (from `from`) whose home is `home`.
    fn keys_with_home(h: &KeyHasher, home: usize, from: u128, count: usize) -> Vec<KeyWords> {
        (from..)
            .map(|n| to_words(&Uuid::from_u128(n)))
            .filter(|&k| home_slot(rest(h, k), CAPACITY) == home)
            .take(count)
            .collect()
    }

    fn insert(t: &Table, h: &KeyHasher, key: KeyWords, n: u64) {
        match t.probe(key, rest(h, key), h) {
            Probe::Vacant(at) => t.insert_at(at, key, rest(h, key), [n, !n], h, 1),
            Probe::Found(_) => panic!("insert of a present key"),
        }
    }

    /// The lookup compares the first `FAST_SLOTS` slots from home at once
    /// and probes one by one after them: keys on either side of that line,
    /// in a run that wraps past the table's end, are found, and absent keys
    /// are not, whether their run ends inside the first slots or after.
    #[test]
    fn lookups_find_every_key_of_a_run_that_wraps_and_crosses_the_fast_slots() {
        let h = KeyHasher::new(HashSeeds([5, 6, 7, 8]), 0);
        let t = Table::new(CAPACITY, growth::max_len(CAPACITY), 0, false).unwrap();
        // A run of 8 keys from slot 13: 13, 14, 15, 0, 1, ..., 4.
        let run = keys_with_home(&h, 13, 1, 8);
        for (n, &k) in run.iter().enumerate() {
            insert(&t, &h, k, n as u64);
        }
        // A key whose home is inside the run lands after it.
        let late = keys_with_home(&h, 1, 1, 1)[0];
        insert(&t, &h, late, 100);
        for (n, &k) in run.iter().enumerate() {
            let at = t.find_slot(k, rest(&h, k), &h);
            assert_eq!(at, Some((13 + n) % CAPACITY), "key {n} of the run");
            assert_eq!(t.find(k, rest(&h, k), &h), Some([n as u64, !(n as u64)]));
        }
        assert_eq!(t.find_slot(late, rest(&h, late), &h), Some(5));
        // Absent keys: home 13 (the run is longer than the fast slots),
        // home 15 (inside it), home 6 (an empty slot right away).
        for home in [13, 15, 1, 6, 9] {
            for k in keys_with_home(&h, home, 1 << 64, 3) {
                assert_eq!(t.find_slot(k, rest(&h, k), &h), None, "home {home}");
            }
        }
    }

    /// A table whose capacity is not a multiple of 8 has padding tags after
    /// its last slot; a lookup whose scan wraps over them counts only real
    /// slots against `max_disp` (it once counted the padding, and missed a
    /// key displaced past the table's end). Also: `max_disp` is never below
    /// the largest displacement, through inserts and removals.
    #[test]
    fn lookups_that_wrap_over_the_padding_find_every_key_and_max_disp_bounds_all() {
        for (seed, capacity) in (0..200u64).zip([13usize, 21, 100].into_iter().cycle()) {
            let h = KeyHasher::new(HashSeeds([seed, 2, 3, 4]), 1);
            let t = Table::new(capacity, growth::max_len(capacity), 0, false).unwrap();
            let keys: Vec<KeyWords> = (1..=t.max_len() as u128)
                .map(|n| to_words(&Uuid::from_u128(n << 64 | u128::from(seed))))
                .collect();
            for (n, &k) in keys.iter().enumerate() {
                insert(&t, &h, k, n as u64);
            }
            for &k in keys.iter().step_by(3) {
                let i = t.find_slot(k, rest(&h, k), &h).expect("present");
                t.remove_at(i, &h, 2);
            }
            let mut exact = 0;
            for i in 0..capacity {
                let k = t.slots.key(i);
                if k != EMPTY_KEY {
                    exact = exact.max(t.displacement(i, t.home_of(k, &h)));
                }
            }
            assert!(t.max_disp.load(Ordering::Relaxed) >= exact, "seed {seed}");
            for (n, &k) in keys.iter().enumerate() {
                let want = (n % 3 != 0).then_some([n as u64, !(n as u64)]);
                assert_eq!(t.find(k, rest(&h, k), &h), want, "seed {seed} key {n}");
            }
        }
    }
}
