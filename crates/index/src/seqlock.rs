//! The per-table sequence lock: one writer, any number of readers that never
//! block the writer and never take a lock.
//!
//! # Protocol
//!
//! The version counter is even while the table is stable and odd while the
//! writer is changing it (the "writing" flag).
//!
//! Writer ([`SeqLock::write`]):
//! 1. store `v + 1` (odd) with `Relaxed`, then `fence(Release)`;
//! 2. change the protected words with `Relaxed` atomic stores;
//! 3. store `v + 2` (even) with `Release`.
//!
//! Reader ([`SeqLock::read_begin`] / [`SeqLock::read_validate`]):
//! 1. load the version with `Acquire`; if it is odd, retry;
//! 2. load the protected words with `Relaxed` atomic loads (the values may be
//!    torn or stale, so nothing may be trusted or dereferenced yet);
//! 3. `fence(Acquire)`, then load the version again with `Relaxed`; if it
//!    changed, discard what was read and retry.
//!
//! Why it holds: if a reader's relaxed load in step 2 saw a store that the writer
//! made after its release fence, then that fence synchronizes with the reader's
//! acquire fence, so the reader's second version load sees at least the odd
//! version and the read is discarded. If it saw no such store, every word it
//! read was written before the version it first loaded was published (step 1
//! acquires that store), so the words form the state as of that version. All
//! shared accesses are atomic, so there is no data race under the Rust memory
//! model; torn reads are possible but are always detected and discarded.
//!
//! A *retired* table (replaced by a larger copy) has its version left odd for
//! good: readers that still hold it see "writing" forever and go back to the
//! segment pointer, which now names the new table.

use super::atomic::{AtomicU64, Ordering, fence};

/// A version counter whose odd values mean "being written".
pub(crate) struct SeqLock {
    /// Even: stable. Odd: the writer is inside a write section (or the table
    /// is retired). Only the single writer stores to it.
    version: AtomicU64,
}

/// Proof that a write section is open; closing it publishes the new version.
pub(crate) struct WriteSection<'a> {
    /// The lock whose version is odd while this section lives.
    lock: &'a SeqLock,
    /// The odd version stored when the section opened.
    odd: u64,
}

impl SeqLock {
    pub(crate) fn new() -> Self {
        SeqLock {
            version: AtomicU64::new(0),
        }
    }

    /// Starts a read: the version to validate against, or `None` while the
    /// writer is active (the caller retries).
    #[inline(always)]
    pub(crate) fn read_begin(&self) -> Option<u64> {
        let v = self.version.load(Ordering::Acquire);
        (v & 1 == 0).then_some(v)
    }

    /// Ends a read: true when nothing was written since `read_begin` returned
    /// `version`, so everything loaded in between is a consistent state.
    #[inline(always)]
    pub(crate) fn read_validate(&self, version: u64) -> bool {
        fence(Ordering::Acquire);
        self.version.load(Ordering::Relaxed) == version
    }

    /// Opens a write section. Only the single writer may call this.
    #[inline]
    pub(crate) fn write(&self) -> WriteSection<'_> {
        // Only the writer stores the version, so this load sees its own last store.
        let v = self.version.load(Ordering::Relaxed);
        debug_assert!(v & 1 == 0, "nested or retired write section");
        let odd = v + 1;
        self.version.store(odd, Ordering::Relaxed);
        fence(Ordering::Release);
        WriteSection { lock: self, odd }
    }

    /// Marks the table as replaced: the version stays odd forever, so every
    /// reader still holding it retries against the new table.
    pub(crate) fn retire(&self) {
        std::mem::forget(self.write());
    }

    /// The current version (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }
}

impl Drop for WriteSection<'_> {
    #[inline]
    fn drop(&mut self) {
        self.lock.version.store(self.odd + 1, Ordering::Release);
    }
}

#[cfg(all(test, not(uuidmap_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_write_section_invalidates_reads_that_overlap_it() {
        let l = SeqLock::new();
        let v = l.read_begin().expect("stable");
        {
            let _w = l.write();
            assert_eq!(l.read_begin(), None, "readers must see the writing flag");
        }
        assert!(
            !l.read_validate(v),
            "a read overlapping a write is discarded"
        );
        let v2 = l.read_begin().expect("stable again");
        assert!(l.read_validate(v2));
        assert_eq!(l.version(), 2);
    }

    #[test]
    fn a_retired_lock_never_validates_again() {
        let l = SeqLock::new();
        l.retire();
        assert_eq!(l.read_begin(), None);
        assert_eq!(l.version() & 1, 1);
    }
}
