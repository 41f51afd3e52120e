//! The tag bytes of one table: one byte per slot, eight to a `u64` word, in an
//! array of their own beside the slots.
//!
//! A slot's tag is [`EMPTY_TAG`] while the slot is empty, and otherwise a byte
//! of its key's hash that the home position does not use ([`tag_of`]). A
//! lookup scans the tags from the key's home, eight at a time, and compares
//! keys only in the slots whose tag matches: about one slot per hit and
//! almost none per miss, so a lookup reads one tag line and one slot line,
//! where scanning keys read two to four slot lines at the loads the index
//! runs at (`benches/probing.rs`, BENCHMARKS.md "The index at the memory
//! line"). The tags are 1/32 of the slots' size (about 11 MB for 10M
//! entries), so far more of them stay in cache than of the slots.
//!
//! The tags are part of the table's state under its seqlock, exactly like
//! the slots: readers load words with `Relaxed` atomic loads and trust
//! nothing until the read validates; the writer stores them with `Relaxed`
//! stores inside a write section. A tag and its slot always change in the
//! same section.
//!
//! Bytes of the last word past the table's capacity hold [`PAD_TAG`], which
//! never matches and never ends a probe, so a scan can load whole words and
//! wrap from the last word to the first.
//!
//! The words are either the array's own heap allocation or lent by its
//! creator ([`ExternalTags`]: the tags of a snapshot read whole into the
//! process's memory, used where they lie instead of copied out); the access
//! rules are the same.

#[cfg(not(uuidmap_loom))]
use std::sync::Arc;

use super::atomic::{AtomicU64, Ordering};
#[cfg(not(uuidmap_loom))]
use super::lent_memory::LentMemory;

/// The tag of an empty slot. Zero, so [`zero_bytes`] finds empty slots.
pub(crate) const EMPTY_TAG: u8 = 0;

/// The tag of the bytes past the last slot.
pub(crate) const PAD_TAG: u8 = 1;

/// Every byte of a word set to 1.
const ONES: u64 = 0x0101_0101_0101_0101;

/// Every byte of a word set to 0x7f.
const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// Tags per word.
pub(crate) const TAGS_PER_WORD: usize = 8;

/// The tag of a key whose hash, without its segment bits, is `unplaced`: its
/// low byte. The home comes from the high bits, so tag and home are
/// independent; the two reserved values are folded onto others.
#[inline(always)]
pub(crate) fn tag_of(unplaced: u64) -> u8 {
    let t = unplaced as u8;
    if t <= PAD_TAG { t + 2 } else { t }
}

/// 0x80 in each byte of `x` that is zero, and 0 in every other byte. Exact:
/// no carry crosses a byte, so a zero byte never marks its neighbour.
#[inline(always)]
pub(crate) fn zero_bytes(x: u64) -> u64 {
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// 0x80 in each byte of `word` equal to `tag`.
#[inline(always)]
pub(crate) fn bytes_equal(word: u64, tag: u8) -> u64 {
    zero_bytes(word ^ (u64::from(tag) * ONES))
}

/// The tags of one table.
pub(crate) struct TagArray {
    /// `ceil(capacity / 8)` words; byte `j` (little-endian order) of word
    /// `w` is the tag of slot `8w + j`.
    #[cfg(not(uuidmap_loom))]
    words: std::ptr::NonNull<AtomicU64>,
    /// Number of words behind `words`.
    #[cfg(not(uuidmap_loom))]
    len: usize,
    /// Who owns the memory behind `words`.
    #[cfg(not(uuidmap_loom))]
    backing: Backing,
    /// Under loom, atomics are model objects and live in a boxed slice.
    #[cfg(uuidmap_loom)]
    words: Box<[AtomicU64]>,
}

/// The owner of a tag array's memory.
#[cfg(not(uuidmap_loom))]
enum Backing {
    /// A boxed slice of `len` words, leaked into `words` and freed on drop.
    Heap,
    /// Lent by an [`ExternalTags`]; the handle keeps it alive.
    External(#[allow(dead_code)] Arc<dyn Send + Sync>),
}

/// Tag memory that already holds a table's tag words, lent to the index
/// (a snapshot read whole into this process's memory, whose tags are used
/// where they lie instead of copied out).
#[cfg(not(uuidmap_loom))]
pub struct ExternalTags {
    /// The tag words: `ceil(capacity / 8)`, eight one-byte tags each, slot
    /// `8w + j`'s in byte `j` of word `w` in memory order.
    memory: LentMemory,
    /// Slots the tags are for.
    capacity: usize,
}

#[cfg(not(uuidmap_loom))]
impl ExternalTags {
    /// The tags of a table of `capacity` slots in `memory`, which must be
    /// exactly their words (`ceil(capacity / 8)`); `None` if it is not, or
    /// for a capacity of 0. The padding past the last slot is set anew
    /// when the table takes them.
    pub fn new(memory: LentMemory, capacity: usize) -> Option<Self> {
        (capacity >= 1 && capacity.div_ceil(TAGS_PER_WORD) == memory.len)
            .then_some(ExternalTags { memory, capacity })
    }

    /// Number of slots the tags are for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(not(uuidmap_loom))]
impl From<ExternalTags> for TagArray {
    /// The lent words as a table's tags, the padding past the last slot
    /// set anew, whatever the words said.
    fn from(e: ExternalTags) -> Self {
        let tags = TagArray {
            words: e.memory.words,
            len: e.memory.len,
            backing: Backing::External(e.memory.keepalive),
        };
        tags.pad(e.capacity);
        tags
    }
}

// SAFETY: the array owns its memory exclusively (its own allocation, or memory
// lent to it alone by `ExternalTags`, whose keepalive is `Send + Sync`) and all
// access to the words is through atomics, so sharing references across
// threads is sound.
#[cfg(not(uuidmap_loom))]
unsafe impl Send for TagArray {}
// SAFETY: as above; `&TagArray` only hands out `&AtomicU64`.
#[cfg(not(uuidmap_loom))]
unsafe impl Sync for TagArray {}

impl TagArray {
    /// Tags for `capacity` empty slots.
    pub(crate) fn empty(capacity: usize) -> Self {
        let count = capacity.div_ceil(TAGS_PER_WORD);
        let tags = Self::owned((0..count).map(|_| AtomicU64::new(0)).collect());
        tags.pad(capacity);
        tags
    }

    /// An array owning `words`.
    fn owned(words: Box<[AtomicU64]>) -> Self {
        #[cfg(not(uuidmap_loom))]
        {
            let len = words.len();
            // A boxed slice is never at address 0, even when empty.
            let words = std::ptr::NonNull::new(Box::into_raw(words).cast::<AtomicU64>())
                .expect("a box is never null");
            TagArray {
                words,
                len,
                backing: Backing::Heap,
            }
        }
        #[cfg(uuidmap_loom)]
        TagArray { words }
    }

    /// Sets the bytes past slot `capacity - 1` to [`PAD_TAG`].
    fn pad(&self, capacity: usize) {
        for i in capacity..self.word_count() * TAGS_PER_WORD {
            self.set(i, PAD_TAG);
        }
    }

    /// All words, as atomics.
    #[inline(always)]
    fn words(&self) -> &[AtomicU64] {
        #[cfg(not(uuidmap_loom))]
        // SAFETY: `words` points to `len` initialised `AtomicU64`s (our own
        // leaked box, or lent initialised by `ExternalTags`) that live as
        // long as `self`; any bit pattern is a valid `AtomicU64`.
        unsafe {
            std::slice::from_raw_parts(self.words.as_ptr(), self.len)
        }
        #[cfg(uuidmap_loom)]
        &self.words
    }

    /// Tags for `capacity` slots from `words`, the layout [`TagArray::copy_to`]
    /// copies out (a snapshot's), or `None` if there are not exactly
    /// `ceil(capacity / 8)` of them. The padding past the last slot is set
    /// anew, whatever the words say.
    #[cfg_attr(uuidmap_loom, allow(dead_code))]
    pub(crate) fn from_words(
        capacity: usize,
        words: impl ExactSizeIterator<Item = u64>,
    ) -> Option<Self> {
        if words.len() != capacity.div_ceil(TAGS_PER_WORD) {
            return None;
        }
        let tags = Self::owned(words.map(AtomicU64::new).collect());
        tags.pad(capacity);
        Some(tags)
    }

    /// Copies every word into `out`, which must be [`TagArray::word_count`]
    /// long (relaxed loads; validate before trusting).
    #[cfg_attr(uuidmap_loom, allow(dead_code))]
    pub(crate) fn copy_to(&self, out: &mut [u64]) {
        for (o, w) in out.iter_mut().zip(self.words()) {
            *o = w.load(Ordering::Relaxed);
        }
    }

    /// Number of words.
    #[inline(always)]
    pub(crate) fn word_count(&self) -> usize {
        self.words().len()
    }

    /// Loads word `w` (relaxed; validate before trusting).
    #[inline(always)]
    pub(crate) fn word(&self, w: usize) -> u64 {
        self.words()[w].load(Ordering::Relaxed)
    }

    /// The address of the word holding slot `i`'s tag, for software prefetch.
    #[inline(always)]
    pub(crate) fn word_ptr(&self, i: usize) -> *const u8 {
        let words = self.words();
        let w = (i / TAGS_PER_WORD).min(words.len() - 1);
        std::ptr::from_ref(&words[w]).cast()
    }

    /// Slot `i`'s tag (relaxed; validate before trusting).
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> u8 {
        (self.word(i / TAGS_PER_WORD) >> ((i % TAGS_PER_WORD) * 8)) as u8
    }

    /// Sets slot `i`'s tag. Writer only, inside a write section (or before
    /// the table is published).
    #[inline(always)]
    pub(crate) fn set(&self, i: usize, tag: u8) {
        let (w, shift) = (i / TAGS_PER_WORD, (i % TAGS_PER_WORD) * 8);
        // Only the writer stores tags, so this load sees its own last store.
        let word = &self.words()[w];
        let old = word.load(Ordering::Relaxed);
        let new = (old & !(0xff << shift)) | (u64::from(tag) << shift);
        word.store(new, Ordering::Relaxed);
    }

    /// Bytes of memory the tags occupy.
    pub(crate) fn bytes(&self) -> usize {
        self.word_count() * 8
    }
}

#[cfg(not(uuidmap_loom))]
impl Drop for TagArray {
    fn drop(&mut self) {
        if let Backing::External(_) = self.backing {
            // The keepalive handle drops with `self`; the memory is not ours.
            return;
        }
        let words = std::ptr::slice_from_raw_parts_mut(self.words.as_ptr(), self.len);
        // SAFETY: `words` and `len` came from `Box::into_raw` of a boxed
        // slice of `len` words (`owned`), freed only here, once; nothing can
        // reference it once `self` is dropped.
        drop(unsafe { Box::from_raw(words) });
    }
}

#[cfg(all(test, not(uuidmap_loom)))]
mod tests {
    use super::*;

    #[test]
    fn zero_bytes_marks_exactly_the_zero_bytes() {
        let cases: [(u64, u64); 5] = [
            (0, 0x8080_8080_8080_8080),
            (u64::MAX, 0),
            // A zero byte next to 0x01 and 0x80 bytes: no borrow leaks.
            (0x0100_8000_0001_0080, 0x0080_0080_8000_8000),
            (0x0000_0000_0000_0100, 0x8080_8080_8080_0080),
            (0x7f00_ff00_0100_0001, 0x0080_0080_0080_8000),
        ];
        for (x, want) in cases {
            assert_eq!(zero_bytes(x), want, "{x:#018x}");
        }
    }

    #[test]
    fn tags_are_set_and_read_per_slot_and_padding_never_matches() {
        let t = TagArray::empty(13);
        assert_eq!(t.word_count(), 2);
        for i in 0..13 {
            assert_eq!(t.get(i), EMPTY_TAG);
        }
        for i in 13..16 {
            assert_eq!(t.get(i), PAD_TAG, "padding byte {i}");
        }
        t.set(3, 0xab);
        t.set(12, 0xab);
        assert_eq!(t.get(3), 0xab);
        assert_eq!(t.get(2), EMPTY_TAG);
        assert_eq!(bytes_equal(t.word(0), 0xab), 0x80 << 24);
        assert_eq!(bytes_equal(t.word(1), 0xab), 0x80 << 32);
        // No tag a key can have is a reserved one.
        for b in 0..=255u64 {
            let tag = tag_of(b);
            assert!(tag != EMPTY_TAG && tag != PAD_TAG);
        }
    }
}
