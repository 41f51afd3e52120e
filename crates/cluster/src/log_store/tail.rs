//! What the log store shares between openraft's callers and the log
//! thread: the newest entries in memory, and the vote, committed and purged
//! log ids as last saved.
//!
//! # Invariants
//!
//! - `entries` are consecutive from index `first`. Every entry the log
//!   holds from `first` on is in `entries` the moment `append` returns
//!   (before its flush), as openraft requires of a reader.
//! - Entries below `first` are in the WAL files, flushed. `first` only
//!   moves up past entries that are flushed and below the committed index
//!   ([`Tail::trim`]), so an entry a truncation may remove (above the
//!   committed index) is always in memory, and the entry at the committed
//!   index too (its log id is what is left when a truncation empties the
//!   tail).
//! - `last` is the log id of the last entry, or the purged log id when the
//!   log holds none.

use std::collections::VecDeque;
use std::ops::Range;

use crate::types::{Entry, LogId, Vote};

/// How many entries stay in memory at least before flushed, committed ones
/// are read back from the files instead (the default of
/// `LogStoreConfig::tail_entries`).
pub const TAIL_ENTRIES: usize = 64 * 1024;

#[derive(Debug, Default)]
pub(crate) struct Tail {
    pub(crate) entries: VecDeque<Entry>,
    /// The index of `entries[0]` (where the next entry goes if empty).
    pub(crate) first: u64,
    /// The index of the first entry the log holds, in the files or here:
    /// a log may start after index 0 without a purge (its first entry
    /// came after a snapshot), and nothing before it is asked for.
    pub(crate) oldest: u64,
    pub(crate) last: Option<LogId>,
    pub(crate) purged: Option<LogId>,
    pub(crate) vote: Option<Vote>,
    pub(crate) committed: Option<LogId>,
    /// The highest index the log thread has written (and synced, under
    /// the node's policy).
    pub(crate) flushed: Option<u64>,
    /// How many entries [`Tail::trim`] keeps at least.
    pub(crate) keep: usize,
}

impl Tail {
    /// The index the next appended entry must have.
    pub(crate) fn next_index(&self) -> u64 {
        self.first + self.entries.len() as u64
    }

    /// Adds `entries`, which continue the log, or start it again after a
    /// purge past its end (a snapshot installed).
    pub(crate) fn push(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        let Some(head) = entries.first() else {
            return Ok(());
        };
        let at = head.log_id.index;
        if at != self.next_index() {
            if !self.entries.is_empty() || at < self.first {
                return Err(std::io::Error::other(format!(
                    "an append at index {at} does not continue the log, which ends before index {}",
                    self.next_index()
                )));
            }
            // An empty log starts over at `at`: nothing older is in the
            // files that a reader may ask for (the log was empty here).
            self.first = at;
            self.oldest = at;
        }
        for (i, e) in entries.iter().enumerate() {
            if e.log_id.index != at + i as u64 {
                return Err(std::io::Error::other(format!(
                    "the entries of an append are not consecutive at index {}",
                    e.log_id.index
                )));
            }
        }
        self.entries.extend(entries.iter().cloned());
        self.last = Some(entries[entries.len() - 1].log_id);
        Ok(())
    }

    /// Drops the entries from index `from` on (a suffix never committed).
    /// Entries below `first` are committed: cutting one is refused.
    pub(crate) fn truncate(&mut self, from: u64) -> std::io::Result<()> {
        if from >= self.next_index() {
            return Ok(());
        }
        if from < self.first {
            return Err(std::io::Error::other(format!(
                "cannot cut the log from index {from}: the entries up to {} are committed",
                self.first - 1
            )));
        }
        self.entries.truncate((from - self.first) as usize);
        self.last = self.entries.back().map(|e| e.log_id).or(self.purged);
        Ok(())
    }

    /// Forgets the entries up to `upto` (purged: openraft never reads them
    /// again).
    pub(crate) fn purge(&mut self, upto: LogId) {
        let drop = (upto.index + 1).saturating_sub(self.first) as usize;
        self.entries.drain(..drop.min(self.entries.len()));
        self.first = self.first.max(upto.index + 1);
        self.oldest = self.oldest.max(upto.index + 1);
        self.purged = Some(upto);
        if self.last.is_none_or(|l| l.index < upto.index) {
            self.last = Some(upto);
        }
    }

    /// Keeps memory bounded: entries that are flushed and below the
    /// committed index are dropped from memory (they stay in the files),
    /// oldest first, once more than `keep` are held.
    pub(crate) fn trim(&mut self) {
        let (Some(flushed), Some(committed)) = (self.flushed, self.committed) else {
            return;
        };
        while self.entries.len() > self.keep.max(1)
            && self.first < committed.index
            && self.first <= flushed
        {
            self.entries.pop_front();
            self.first += 1;
        }
    }

    /// The entries of `range` held in memory, and the part of the range
    /// below them, which must be read from the files.
    pub(crate) fn read(&self, range: Range<u64>) -> (Vec<Entry>, Range<u64>) {
        let start = range.start.max(self.oldest);
        let from_files = start..range.end.min(self.first).max(start);
        let start = start.max(self.first);
        let end = range.end.min(self.next_index());
        let held = if start < end {
            let a = (start - self.first) as usize;
            let b = (end - self.first) as usize;
            self.entries.range(a..b).cloned().collect()
        } else {
            Vec::new()
        };
        (held, from_files)
    }
}
