//! [`IndexWriter`]: the only handle that changes the index.
//!
//! There is exactly one per index and it is not `Clone`; every mutating method
//! takes `&mut self`. So "one writer" is a property of the types, and the
//! tables need no writer-side synchronisation beyond the seqlock that tells
//! readers when to retry.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use uuid::Uuid;

use super::atomic::Ordering;
use super::growth;
use super::index_error::{CasError, KeyError};
use super::key::Key;
use super::map::{Index, prefetch};
use super::shared::Shared;
use super::slot::{KeyWords, from_words, to_words};
use super::table::{Probe, Table};

/// The index's single writer.
pub struct IndexWriter {
    /// The state shared with the readers.
    pub(super) shared: Arc<Shared>,
    /// Where replaced tables arrive once no reader can hold them.
    pub(super) retired_tx: Sender<Box<Table>>,
    /// The writer drains it and frees the tables on its own thread.
    retired_rx: Receiver<Box<Table>>,
    /// Stamped on every table this writer changes (see [`IndexWriter::set_stamp`]).
    stamp: u64,
}

impl IndexWriter {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let (retired_tx, retired_rx) = channel();
        IndexWriter {
            shared,
            retired_tx,
            retired_rx,
            stamp: 0,
        }
    }

    /// Sets the stamp recorded with every following change: the store
    /// passes the LSN of the batch it is about to apply. A segment copy
    /// ([`Index::copy_segment_raw`]) reports the stamp of the latest change
    /// it contains, so the store knows which logged batches the copy holds.
    pub fn set_stamp(&mut self, stamp: u64) {
        self.stamp = stamp;
    }

    /// A read handle on the same index.
    pub fn reader(&self) -> Index {
        Index {
            shared: self.shared.clone(),
        }
    }

    /// Sets `key` to `value`, returning the previous value; a reserved key
    /// (nil or max) is refused.
    pub fn insert(&mut self, key: Uuid, value: Uuid) -> Result<Option<Uuid>, KeyError> {
        Ok(self.insert_key(Key::new(key)?, value))
    }

    /// [`IndexWriter::insert`] of a key already checked.
    pub fn insert_key(&mut self, key: Key, value: Uuid) -> Option<Uuid> {
        let key = to_words(key.as_uuid());
        let hash = self.shared.hasher.hash(key);
        let segment = self.shared.hasher.segment(hash);
        let current = self.shared.segments[segment].writer_table();
        if current.len() >= current.max_len() {
            // Free what earlier growth retired before allocating more.
            self.reclaim();
        }
        let old = put_hashed(
            &self.shared,
            &self.retired_tx,
            segment,
            key,
            hash,
            to_words(&value),
            self.stamp,
        );
        if old.is_none() {
            // Only the writer changes `len`: a plain store, no
            // read-modify-write (a locked instruction would serialise the
            // writer's cache misses).
            let len = &self.shared.len;
            len.store(len.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        old.map(from_words)
    }

    /// Removes `key`, returning its value if it was present (a reserved key
    /// never is).
    pub fn remove(&mut self, key: &Uuid) -> Option<Uuid> {
        self.remove_key(Key::new(*key).ok()?)
    }

    /// [`IndexWriter::remove`] of a key already checked.
    pub fn remove_key(&mut self, key: Key) -> Option<Uuid> {
        let key = to_words(key.as_uuid());
        let hash = self.shared.hasher.hash(key);
        let segment = self.shared.hasher.segment(hash);
        let old = delete_hashed(&self.shared, segment, key, hash, self.stamp)?;
        let len = &self.shared.len;
        len.store(len.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        Some(from_words(old))
    }

    /// Sets `key` to `new` only if its current value is `expected`. `None`
    /// means absent on both sides: `expected = None` inserts only if absent,
    /// `new = None` removes. On a mismatch nothing changes and the error
    /// carries the current value.
    pub fn compare_and_set(
        &mut self,
        key: Uuid,
        expected: Option<Uuid>,
        new: Option<Uuid>,
    ) -> Result<(), CasError> {
        self.compare_and_set_key(Key::new(key)?, expected, new)
    }

    /// [`IndexWriter::compare_and_set`] of a key already checked.
    pub fn compare_and_set_key(
        &mut self,
        key: Key,
        expected: Option<Uuid>,
        new: Option<Uuid>,
    ) -> Result<(), CasError> {
        let current = self.get(key.as_uuid());
        if current != expected {
            return Err(CasError::Mismatch { current });
        }
        match new {
            Some(v) => {
                self.insert_key(key, v);
            }
            None => {
                self.remove_key(key);
            }
        }
        Ok(())
    }

    /// The writer's own view of `key` (no retries: nothing else writes).
    pub fn get(&self, key: &Uuid) -> Option<Uuid> {
        let key = to_words(Key::new(*key).ok()?.as_uuid());
        let hasher = &self.shared.hasher;
        let hash = hasher.hash(key);
        let table = self.shared.segments[hasher.segment(hash)].writer_table();
        table.find(key, hasher.rest(hash), hasher).map(from_words)
    }

    /// Frees the tables replaced by growth that no reader can hold any more,
    /// on this (the writer's) thread; returns how many. Growth calls it;
    /// call it after a burst of growth to return memory sooner.
    pub fn reclaim(&mut self) -> usize {
        self.retired_rx.try_iter().count()
    }

    /// Grows every segment that could not take its share of `extra` more
    /// entries (spread by the hash: the mean plus one deviation) without
    /// growing, straight to the size that can. Presizing before a burst of
    /// inserts (recovery's replay) replaces many growth steps by one.
    #[cfg(not(uuidmap_loom))]
    pub fn reserve(&mut self, extra: usize) {
        self.reclaim();
        self.split(1)[0].reserve_share(extra);
    }

    /// Entries in the index.
    pub fn len(&self) -> usize {
        self.shared.len.load(Ordering::Relaxed)
    }

    /// Whether the index holds no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The one writer of `segment`'s table (the [`IndexWriter`], or the
/// [`PartWriter`](super::partition::PartWriter) that owns the segment): sets
/// `key` (hashed to `hash`, which picks `segment`) to `value`, growing the
/// table first if it is full; returns the previous value. The caller
/// accounts for `Shared::len`.
#[inline(always)]
pub(super) fn put_hashed(
    shared: &Shared,
    retired: &Sender<Box<Table>>,
    segment: usize,
    key: KeyWords,
    hash: u64,
    value: [u64; 2],
    stamp: u64,
) -> Option<[u64; 2]> {
    // Grow before probing, so that one probe serves both the update and
    // the insertion (a full table grows one operation early when the key
    // turns out to be present: harmless).
    let current = shared.segments[segment].writer_table();
    if current.len() >= current.max_len() {
        grow(shared, segment, current.generation() + 1, retired);
    }
    let hasher = &shared.hasher;
    let table = shared.segments[segment].writer_table();
    let rest = hasher.rest(hash);
    // The tag line is needed only once the probe is done: fetch it meanwhile.
    prefetch(table.home_tags_ptr(rest));
    match table.probe(key, rest, hasher) {
        Probe::Found(i) => {
            let old = table.value_at(i);
            if old != value {
                table.set_value(i, value, stamp);
            }
            Some(old)
        }
        Probe::Vacant(at) => {
            table.insert_at(at, key, rest, value, hasher, stamp);
            None
        }
    }
}

/// The one writer of `segment`'s table: removes `key` (hashed to `hash`),
/// returning its value if it was present. The caller accounts for
/// `Shared::len`.
#[inline(always)]
pub(super) fn delete_hashed(
    shared: &Shared,
    segment: usize,
    key: KeyWords,
    hash: u64,
    stamp: u64,
) -> Option<[u64; 2]> {
    let hasher = &shared.hasher;
    let table = shared.segments[segment].writer_table();
    let i = table.find_slot(key, hasher.rest(hash), hasher)?;
    let old = table.value_at(i);
    table.remove_at(i, hasher, stamp);
    Some(old)
}

/// The one writer of `segment`'s table: grows it once, straight to the
/// size at which it holds `entries` without growing, if it is smaller.
#[cfg(not(uuidmap_loom))]
pub(super) fn reserve_segment(
    shared: &Shared,
    retired: &Sender<Box<Table>>,
    segment: usize,
    entries: usize,
) {
    let current = shared.segments[segment].writer_table();
    if current.max_len() < entries {
        let generation = growth::generation_for(segment, shared.segments.len(), entries);
        grow(
            shared,
            segment,
            generation.max(current.generation() + 1),
            retired,
        );
    }
}

/// Replaces `segment`'s table with a larger one, of growth step
/// `generation` (its one writer only).
fn grow(shared: &Shared, segment: usize, generation: u32, retired: &Sender<Box<Table>>) {
    let segments = shared.segments.len();
    let seg = &shared.segments[segment];
    let old = seg.writer_table();
    // A table restored from a snapshot may come from another growth
    // schedule (before 2026-11-27 tables grew by 1.25× up to 90 % full), so
    // its generation + 1 can name a smaller table than it is: never grow
    // into one that cannot take what it holds and one more.
    let generation = generation
        .max(growth::generation_for(segment, segments, old.len() + 1))
        .min(growth::MAX_GENERATION);
    let capacity = growth::capacity(segment, segments, generation);
    let larger = old
        .grown(
            capacity,
            growth::max_len(capacity),
            generation,
            &shared.hasher,
            shared.huge_pages,
        )
        .unwrap_or_else(|| {
            std::alloc::handle_alloc_error(
                std::alloc::Layout::array::<[u8; 32]>(capacity)
                    .unwrap_or(std::alloc::Layout::new::<u8>()),
            )
        });
    let (old_bytes, new_bytes) = (old.bytes(), larger.bytes());
    seg.replace(larger, retired);
    shared.table_bytes.fetch_add(new_bytes, Ordering::Relaxed);
    shared.table_bytes.fetch_sub(old_bytes, Ordering::Relaxed);
}
