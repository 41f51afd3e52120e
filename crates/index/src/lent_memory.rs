//! Memory lent to the index by its creator: a restored snapshot's tables (a
//! private mapping of the file, or the file read whole into the process's
//! memory), used where they lie instead of copied.
//!
//! One unsafe constructor vouches for the memory; the tables' parts that
//! take it ([`ExternalSlots`](crate::ExternalSlots),
//! [`ExternalTags`](crate::ExternalTags)) check that it is exactly the size
//! of what they hold. The memory is accessed only through atomics, under
//! the rules of the array that takes it.

use std::ptr::NonNull;
use std::sync::Arc;

use super::atomic::AtomicU64;

/// Words of memory lent to the index, and the handle that keeps them alive
/// (dropped when the last table using them is freed).
pub struct LentMemory {
    /// The first word.
    pub(crate) words: NonNull<AtomicU64>,
    /// Number of words.
    pub(crate) len: usize,
    /// Keeps the memory alive.
    pub(crate) keepalive: Arc<dyn Send + Sync>,
}

impl LentMemory {
    /// Lends the `words` 8-byte words at `ptr` to the index.
    ///
    /// # Safety
    ///
    /// - `ptr` is 8-byte aligned and valid for reads and writes of
    ///   `words * 8` bytes for as long as `keepalive` (or any clone of it)
    ///   lives;
    /// - nothing else reads or writes those bytes from now on, except
    ///   through the index.
    // SAFETY: unsafe to call, not to run: the caller vouches for the memory
    // (the `# Safety` list above), and every use of it relies on that.
    pub unsafe fn new(ptr: NonNull<u8>, words: usize, keepalive: Arc<dyn Send + Sync>) -> Self {
        debug_assert!((ptr.as_ptr() as usize).is_multiple_of(8));
        LentMemory {
            words: ptr.cast(),
            len: words,
            keepalive,
        }
    }

    /// Number of words lent.
    pub fn words(&self) -> usize {
        self.len
    }
}
