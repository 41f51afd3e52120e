//! A segment: the pointer to its current table, swapped when it grows.
//!
//! # Growth and reclamation
//!
//! The writer grows a segment by building a larger copy of its table (readers
//! keep using the old one, which does not change meanwhile), publishing the copy
//! with one `Release` pointer swap, *retiring* the old table (its seqlock stays
//! odd, so a reader still holding it retries and reloads the pointer), and
//! handing the old table to crossbeam-epoch, which frees it once no reader that
//! could have loaded the old pointer is still pinned.
//!
//! **Architecture Invariant:** a reader dereferences a table only while pinned,
//! and trusts nothing it read from it until the table's seqlock validates.
//! **Architecture Invariant:** only the writer swaps or frees tables.

use std::sync::mpsc::Sender;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use super::atomic::{Ordering, spin_pause, yield_thread};
use super::table::{HandoffRequest, Table};

/// Spoiled copies of one segment after which a copier (scan, snapshot) asks
/// the writer for a hand-off (see `Table::request_handoff`).
pub const HANDOFF_AFTER_FAILURES: u32 = 4;

/// One segment of the index.
pub(crate) struct Segment {
    /// The current table. Swapped by the writer on growth; never null.
    table: Atomic<Table>,
}

impl Segment {
    pub(crate) fn new(table: Table) -> Self {
        Segment {
            table: Atomic::new(table),
        }
    }

    /// The current table, for a pinned reader.
    #[inline(always)]
    pub(crate) fn load<'g>(&self, guard: &'g Guard) -> &'g Table {
        let p = self.table.load(Ordering::Acquire, guard);
        // SAFETY: the pointer is never null (set at construction, only ever
        // swapped for another valid table), and a table is destroyed only
        // through `defer_destroy` after being unlinked, which waits for every
        // guard pinned before the unlink, such as `guard`.
        unsafe { p.deref() }
    }

    /// Runs `read` against a consistent state of the current table: retries
    /// until a seqlock read validates, reloading the table each time (the
    /// writer may have replaced it).
    #[inline(always)]
    pub(crate) fn read<R>(&self, guard: &Guard, read: impl Fn(&Table) -> R) -> R {
        loop {
            let table = self.load(guard);
            if let Some(version) = table.seqlock().read_begin() {
                let r = read(table);
                if table.seqlock().read_validate(version) {
                    return r;
                }
            }
            spin_pause();
        }
    }

    /// Copies the current table consistently: calls `try_copy` (which must
    /// validate its copy under the table's seqlock and return `None` when a
    /// write spoiled it) until it succeeds, reloading the table each time.
    /// After [`HANDOFF_AFTER_FAILURES`] spoiled copies it asks the writer to
    /// hold off for one copy's time, so a copy of a hammered segment is
    /// bounded; `handoffs` counts such requests.
    pub(crate) fn copy_consistent<'g, R>(
        &self,
        guard: &'g Guard,
        handoffs: &mut u64,
        mut try_copy: impl FnMut(&Table) -> Option<R>,
    ) -> (&'g Table, R) {
        let mut failures = 0u32;
        let mut handoff: Option<(*const Table, HandoffRequest<'g>)> = None;
        loop {
            let table = self.load(guard);
            if let Some(r) = try_copy(table) {
                return (table, r);
            }
            failures += 1;
            let asked_this_table = handoff
                .as_ref()
                .is_some_and(|(t, _)| std::ptr::eq(*t, table));
            if failures >= HANDOFF_AFTER_FAILURES && !asked_this_table {
                handoff = Some((table, table.request_handoff()));
                *handoffs += 1;
            }
            if failures > HANDOFF_AFTER_FAILURES {
                yield_thread();
            } else {
                spin_pause();
            }
        }
    }

    /// The current table, for the writer.
    #[inline(always)]
    pub(crate) fn writer_table(&self) -> &Table {
        // SAFETY: only the writer replaces or frees tables, and callers hold
        // the writer (`&self`/`&mut self` of the one `IndexWriter`, the
        // `PartWriter` that owns this segment during a split, or the index's
        // exclusive drop), so the table outlives this borrow: a table replaced
        // by a part is freed only by `IndexWriter::reclaim`, which cannot run
        // until every part is gone. No guard is needed for memory the caller
        // itself controls.
        unsafe {
            self.table
                .load(Ordering::Relaxed, epoch::unprotected())
                .deref()
        }
    }

    /// Writer only: publishes `larger` in place of the current table, retires
    /// the old one, and schedules it to be handed to `retired` once no reader
    /// can hold it.
    ///
    /// The epoch's deferred functions run on whichever thread collects, often
    /// a reader inside `pin()`; freeing a large table there (an allocator
    /// call that can take microseconds and contend with the writer's
    /// allocations) showed up as lookup latency spikes during growth. So the
    /// deferred function only moves the table into a channel, and the writer
    /// frees it (see `IndexWriter::reclaim`). If the writer is gone, the send
    /// fails and the table is dropped where it is.
    pub(crate) fn replace(&self, larger: Table, retired: &Sender<Box<Table>>) {
        let guard = epoch::pin();
        let old = self
            .table
            .swap(Owned::new(larger), Ordering::AcqRel, &guard);
        // SAFETY: `old` was the current table until the swap; only the writer
        // frees tables, so it is still alive here.
        unsafe { old.deref() }.retire();
        let retired = retired.clone();
        // SAFETY: `old` is unlinked (no new reader can load it), and the
        // closure takes ownership of it only after every guard that might
        // have loaded it is gone; nothing else frees it.
        unsafe {
            guard.defer_unchecked(move || {
                let table = old.into_owned().into_box();
                // A failed send returns the table, which is then dropped here.
                let _ = retired.send(table);
            });
        }
        guard.flush();
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: dropping the segment means the index is being dropped, so no
        // reader or writer handle exists and nobody else can see the table.
        unsafe {
            drop(
                self.table
                    .load(Ordering::Relaxed, epoch::unprotected())
                    .into_owned(),
            );
        }
    }
}
