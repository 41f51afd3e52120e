//! The memory of one table: `capacity` slots of four `u64` words, accessed only
//! through atomics.
//!
//! The bytes are exactly a `[Slot]` array (see [`super::slot`]), so a snapshot
//! can write them as they are. Readers load words with `Relaxed` atomic loads
//! under the table's seqlock; the writer stores them with `Relaxed` atomic
//! stores inside a write section. There are no plain reads of shared words.
//!
//! The memory is either the array's own heap allocation or lent by its
//! creator ([`ExternalSlots`]: a restored snapshot's private file mapping);
//! the access rules are the same.
//!
//! Large arrays are aligned to 2 MiB and advised as transparent huge pages
//! (when enabled): a lookup touches one random slot, and with 4 KiB pages
//! almost every lookup in a large index also misses the TLB.

#[cfg(not(uuidmap_loom))]
use std::sync::Arc;

use super::atomic::{AtomicU64, Ordering};
#[cfg(not(uuidmap_loom))]
use super::lent_memory::LentMemory;
use super::slot::{KeyWords, SLOT_WORDS};

/// Arrays at least this large are aligned for, and advised as, huge pages.
#[cfg(not(uuidmap_loom))]
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Owned, zero-initialised slot memory.
pub(crate) struct SlotArray {
    /// The words: `capacity * SLOT_WORDS` atomics, owned by this array.
    #[cfg(not(uuidmap_loom))]
    words: std::ptr::NonNull<AtomicU64>,
    /// Under loom, atomics are model objects and live in a boxed slice.
    #[cfg(uuidmap_loom)]
    words: Box<[AtomicU64]>,
    /// Number of slots.
    capacity: usize,
    /// Who owns the memory behind `words`.
    #[cfg(not(uuidmap_loom))]
    backing: Backing,
}

/// The owner of a slot array's memory.
#[cfg(not(uuidmap_loom))]
enum Backing {
    /// Allocated by `SlotArray::zeroed`, freed on drop.
    Heap,
    /// Lent by an [`ExternalSlots`]; the handle keeps it alive.
    External(#[allow(dead_code)] Arc<dyn Send + Sync>),
}

/// Slot memory that already holds a table, lent to the index (a snapshot's
/// private mapping, restored without copying).
#[cfg(not(uuidmap_loom))]
pub struct ExternalSlots {
    /// The slots' words.
    memory: LentMemory,
    /// Number of slots.
    capacity: usize,
}

#[cfg(not(uuidmap_loom))]
impl ExternalSlots {
    /// The `capacity` slots of a table in `memory`, which must be exactly
    /// their words (`capacity * 4`); `None` if it is not, or for a capacity
    /// of 0.
    pub fn new(memory: LentMemory, capacity: usize) -> Option<Self> {
        (capacity >= 1 && capacity.checked_mul(SLOT_WORDS) == Some(memory.len))
            .then_some(ExternalSlots { memory, capacity })
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(not(uuidmap_loom))]
impl From<ExternalSlots> for SlotArray {
    fn from(e: ExternalSlots) -> Self {
        SlotArray {
            words: e.memory.words,
            capacity: e.capacity,
            backing: Backing::External(e.memory.keepalive),
        }
    }
}

// SAFETY: the array owns its memory exclusively (its own allocation, or memory
// lent to it alone by `ExternalSlots`, whose keepalive is `Send + Sync`) and all
// access to the words is through atomics, so sharing references across
// threads is sound.
#[cfg(not(uuidmap_loom))]
unsafe impl Send for SlotArray {}
// SAFETY: as above; `&SlotArray` only hands out `&AtomicU64`.
#[cfg(not(uuidmap_loom))]
unsafe impl Sync for SlotArray {}

impl SlotArray {
    /// Allocates `capacity` empty slots, or `None` if the allocator refuses.
    #[cfg(not(uuidmap_loom))]
    pub(crate) fn zeroed(capacity: usize, huge_pages: bool) -> Option<Self> {
        let layout = Self::layout(capacity)?;
        // SAFETY: the layout has a non-zero size (capacity >= 1 is enforced by
        // `layout`) and a valid power-of-two alignment.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let words = std::ptr::NonNull::new(ptr.cast::<AtomicU64>())?;
        if huge_pages && layout.size() >= HUGE_PAGE {
            // SAFETY: the range is exactly the allocation we own; madvise only
            // changes how the kernel backs it, never its contents. Failure (THP
            // disabled) is harmless and ignored.
            unsafe {
                libc::madvise(ptr.cast(), layout.size(), libc::MADV_HUGEPAGE);
            }
        }
        let array = SlotArray {
            words,
            capacity,
            backing: Backing::Heap,
        };
        array.prefault();
        Some(array)
    }

    /// Writes one word of every page, so the kernel backs the whole array with
    /// private pages now. Otherwise the writer's first *read* of a fresh page
    /// (a probe) maps the shared zero page, and its first write then replaces
    /// it with a copy-on-write fault that flushes the TLB on every CPU running
    /// this process: an interrupt of several microseconds in the middle of
    /// concurrent readers' lookups (measured: p99 `get` latency 3 µs instead
    /// of 0.55 µs while segments grow).
    #[cfg(not(uuidmap_loom))]
    fn prefault(&self) {
        const WORDS_PER_PAGE: usize = 4096 / 8;
        for word in self.words().iter().step_by(WORDS_PER_PAGE) {
            word.store(0, Ordering::Relaxed);
        }
    }

    #[cfg(uuidmap_loom)]
    pub(crate) fn zeroed(capacity: usize, _huge_pages: bool) -> Option<Self> {
        let words = (0..capacity * SLOT_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect();
        Some(SlotArray { words, capacity })
    }

    #[cfg(not(uuidmap_loom))]
    fn layout(capacity: usize) -> Option<std::alloc::Layout> {
        let bytes = capacity.max(1).checked_mul(SLOT_WORDS * 8)?;
        let align = if bytes >= HUGE_PAGE { HUGE_PAGE } else { 64 };
        std::alloc::Layout::from_size_align(bytes, align).ok()
    }

    /// Number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Copies every word, in order, into `out[..capacity * SLOT_WORDS]`
    /// (relaxed loads: validate before trusting).
    pub(crate) fn copy_words_to(&self, out: &mut [u64]) {
        for (o, w) in out.iter_mut().zip(self.words()) {
            *o = w.load(Ordering::Relaxed);
        }
    }

    /// Bytes of memory this array occupies.
    pub(crate) fn bytes(&self) -> usize {
        self.capacity * SLOT_WORDS * 8
    }

    /// All words, as atomics.
    #[inline(always)]
    fn words(&self) -> &[AtomicU64] {
        #[cfg(not(uuidmap_loom))]
        // SAFETY: `words` points to `capacity * SLOT_WORDS` initialised
        // `AtomicU64`s (zeroed by us, or lent initialised by `ExternalSlots`)
        // that live as long as `self`; any bit pattern is a valid `AtomicU64`.
        unsafe {
            std::slice::from_raw_parts(self.words.as_ptr(), self.capacity * SLOT_WORDS)
        }
        #[cfg(uuidmap_loom)]
        &self.words
    }

    /// The address of slot `i`, for software prefetch.
    #[inline(always)]
    pub(crate) fn slot_ptr(&self, i: usize) -> *const u8 {
        self.words()[i * SLOT_WORDS..].as_ptr().cast()
    }

    /// Loads the key words of slot `i` (relaxed; validate before trusting).
    #[inline(always)]
    pub(crate) fn key(&self, i: usize) -> KeyWords {
        let w = &self.words()[i * SLOT_WORDS..i * SLOT_WORDS + 2];
        [w[0].load(Ordering::Relaxed), w[1].load(Ordering::Relaxed)]
    }

    /// Loads the value words of slot `i` (relaxed; validate before trusting).
    #[inline(always)]
    pub(crate) fn value(&self, i: usize) -> [u64; 2] {
        let w = &self.words()[i * SLOT_WORDS + 2..i * SLOT_WORDS + 4];
        [w[0].load(Ordering::Relaxed), w[1].load(Ordering::Relaxed)]
    }

    /// Loads all four words of slot `i` (relaxed; validate before trusting).
    #[inline(always)]
    pub(crate) fn load(&self, i: usize) -> [u64; SLOT_WORDS] {
        let w = &self.words()[i * SLOT_WORDS..(i + 1) * SLOT_WORDS];
        [
            w[0].load(Ordering::Relaxed),
            w[1].load(Ordering::Relaxed),
            w[2].load(Ordering::Relaxed),
            w[3].load(Ordering::Relaxed),
        ]
    }

    /// Stores all four words of slot `i`. Writer only, inside a write section
    /// (or before the table is published).
    #[inline(always)]
    pub(crate) fn store(&self, i: usize, slot: [u64; SLOT_WORDS]) {
        let w = &self.words()[i * SLOT_WORDS..(i + 1) * SLOT_WORDS];
        for (word, v) in w.iter().zip(slot) {
            word.store(v, Ordering::Relaxed);
        }
    }

    /// Stores the value words of slot `i`. Writer only, inside a write section.
    #[inline(always)]
    pub(crate) fn store_value(&self, i: usize, value: [u64; 2]) {
        let w = &self.words()[i * SLOT_WORDS + 2..i * SLOT_WORDS + 4];
        w[0].store(value[0], Ordering::Relaxed);
        w[1].store(value[1], Ordering::Relaxed);
    }
}

#[cfg(not(uuidmap_loom))]
impl Drop for SlotArray {
    fn drop(&mut self) {
        if let Backing::External(_) = self.backing {
            // The keepalive handle drops with `self`; the memory is not ours.
            return;
        }
        let layout = Self::layout(self.capacity).expect("layout was valid at allocation");
        // SAFETY: `words` was allocated by `alloc_zeroed` with this same layout
        // (same capacity), and nothing can reference it once `self` is dropped.
        unsafe { std::alloc::dealloc(self.words.as_ptr().cast(), layout) }
    }
}

#[cfg(uuidmap_loom)]
impl Drop for SlotArray {
    fn drop(&mut self) {
        // Tell loom the words are gone: an unsynchronised access (`with_mut`)
        // panics unless every load and store of the word happened before it,
        // so a table freed while a reader may still use it is reported.
        for word in self.words.iter_mut() {
            word.with_mut(|_| ());
        }
    }
}
