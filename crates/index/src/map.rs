//! The public read handle [`Index`]: lookups, one or many at a time.
//!
//! A lookup hashes the key, takes the segment from the high hash bits, pins the
//! epoch, and does one seqlock-validated probe of that segment's table. It
//! never blocks, never takes a lock and never allocates. A [`ReadSession`]
//! pins once for many lookups and re-pins every [`SESSION_REPIN_EVERY`].

use std::sync::Arc;

use crossbeam_epoch as epoch;
use uuid::Uuid;

use super::atomic::Ordering;
use super::hasher::{HashSeeds, hash_fingerprint};
use super::shared::Shared;
use super::slot::{EMPTY_KEY, from_words, to_words};

/// How many keys ahead `get_many` hashes and prefetches (a power of two).
const PREFETCH_DISTANCE: usize = 16;

/// The read handle: cheap to clone, shareable across threads, never blocks.
///
/// Made together with the one [`IndexWriter`](crate::IndexWriter) by
/// [`Index::with_capacity`] or [`IndexBuilder::build`](crate::IndexBuilder::build).
#[derive(Clone)]
pub struct Index {
    pub(crate) shared: Arc<Shared>,
}

impl Index {
    /// The value stored for `key`, or `None`. Never blocks or allocates.
    ///
    /// Each call pins the epoch (a locked instruction on x86); a caller with
    /// many lookups to make pins once for all of them with
    /// [`Index::session`].
    #[inline]
    pub fn get(&self, key: &Uuid) -> Option<Uuid> {
        self.get_pinned(&epoch::pin(), key)
    }

    /// A read session: the epoch pinned once for many lookups (see
    /// [`ReadSession`]).
    pub fn session(&self) -> ReadSession<'_> {
        ReadSession {
            index: self,
            guard: epoch::pin(),
            since_pin: 0,
        }
    }

    /// [`Index::get`] under a pin the caller holds.
    #[inline]
    fn get_pinned(&self, guard: &epoch::Guard, key: &Uuid) -> Option<Uuid> {
        let key = to_words(key);
        if key == EMPTY_KEY {
            // Empty slots hold the nil key; it is never stored.
            return None;
        }
        let hasher = &self.shared.hasher;
        let hash = hasher.hash(key);
        let rest = hasher.rest(hash);
        self.shared.segments[hasher.segment(hash)]
            .read(guard, |t| {
                // The first three slot lines from home, fetched while the
                // tags are read: most keys sit within six slots of home
                // (about five on average at 95 % load), so the misses
                // overlap instead of following one another (measured in
                // BENCHMARKS.md: one line made a lone get 23 % slower).
                let home = t.home_ptr(rest);
                prefetch(home);
                prefetch(home.wrapping_add(64));
                prefetch(home.wrapping_add(128));
                t.find(key, rest, hasher)
            })
            .map(from_words)
    }

    /// Looks up every key of `keys`, writing the answers to the matching
    /// positions of `out`. Pins the epoch once and prefetches the keys' home
    /// slots ahead of probing them, so a batch overlaps its cache misses.
    /// Never allocates.
    ///
    /// Answers `min(keys.len(), out.len())` keys; the rest of `out` is left
    /// as it was.
    pub fn get_many(&self, keys: &[Uuid], out: &mut [Option<Uuid>]) {
        self.get_many_pinned(&epoch::pin(), keys, out);
    }

    /// [`Index::get_many`] under a pin the caller holds.
    fn get_many_pinned(&self, guard: &epoch::Guard, keys: &[Uuid], out: &mut [Option<Uuid>]) {
        let hasher = &self.shared.hasher;
        let segments = &self.shared.segments;
        let n = keys.len().min(out.len());
        // A software pipeline: key `i` is hashed, and the tag word of its
        // home and the first two slot lines from home prefetched,
        // `PREFETCH_DISTANCE` keys before it is probed, so about that many
        // cache misses are in flight at once. (Reading the tags half-way
        // and prefetching only the slot they point to was slower: the read
        // waits for the tag line; measured in BENCHMARKS.md.)
        let mut ring = [(EMPTY_KEY, 0u64, 0usize); PREFETCH_DISTANCE];
        let drain = std::iter::repeat_n(None, PREFETCH_DISTANCE);
        for (i, next) in keys[..n].iter().map(Some).chain(drain).enumerate() {
            let slot = i % PREFETCH_DISTANCE;
            if let Some(j) = i.checked_sub(PREFETCH_DISTANCE) {
                let (key, rest, segment) = ring[slot];
                out[j] = if key == EMPTY_KEY {
                    // Empty slots hold the nil key; it is never stored.
                    None
                } else {
                    segments[segment]
                        .read(guard, |t| t.find(key, rest, hasher))
                        .map(from_words)
                };
            }
            if let Some(next) = next {
                let key = to_words(next);
                let hash = hasher.hash(key);
                let (segment, rest) = (hasher.segment(hash), hasher.rest(hash));
                let table = segments[segment].load(guard);
                let home = table.home_ptr(rest);
                prefetch(table.home_tags_ptr(rest));
                prefetch(home);
                prefetch(home.wrapping_add(64));
                ring[slot] = (key, rest, segment);
            }
        }
    }

    /// Entries in the index (as of the writer's last completed operation).
    pub fn len(&self) -> usize {
        self.shared.len.load(Ordering::Relaxed)
    }

    /// Whether the index holds no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of segments (fixed for the index's life).
    pub fn segment_count(&self) -> usize {
        self.shared.segments.len()
    }

    /// The segment `key` belongs to (fixed for the index's life).
    pub fn segment_of(&self, key: &Uuid) -> usize {
        let hasher = &self.shared.hasher;
        hasher.segment(hasher.hash(to_words(key)))
    }

    /// Bytes of slot memory held by the current tables.
    pub fn table_bytes(&self) -> usize {
        self.shared.table_bytes.load(Ordering::Relaxed)
    }

    /// The hash seeds, to store with a snapshot.
    pub fn seeds(&self) -> HashSeeds {
        self.shared.hasher.seeds()
    }

    /// The fingerprint of this build's hash function (see [`hash_fingerprint`]).
    pub fn hash_fingerprint(&self) -> u64 {
        hash_fingerprint()
    }
}

/// Lookups a [`ReadSession`] makes under one pin before it re-pins.
///
/// Why 1024: a re-pin is cheap (crossbeam re-reads the global epoch and
/// stores it only when it moved: no locked instruction), so the bound is set
/// by how long a session may hold reclamation back: 1024 lookups take tens
/// to hundreds of microseconds, while the writer frees a grown segment's old
/// table only after every pin older than the swap is gone.
pub const SESSION_REPIN_EVERY: u32 = 1024;

/// A read handle that pins the epoch once for many lookups.
///
/// [`Index::get`] pins and unpins the epoch on every call; the pin is a
/// locked instruction, which also stops the CPU from overlapping one
/// lookup's cache miss with the next one's. A session pins when it is made,
/// re-pins every [`SESSION_REPIN_EVERY`] lookups, and unpins when dropped.
///
/// While a session lives, tables retired by growth after its last (re-)pin
/// cannot be freed, so hold one for a burst of lookups (a batch, a scan
/// page, the keys of one request), never across a wait for I/O. It is
/// neither `Send` nor `Sync`: a pin belongs to its thread.
pub struct ReadSession<'a> {
    index: &'a Index,
    guard: epoch::Guard,
    since_pin: u32,
}

impl ReadSession<'_> {
    /// The value stored for `key`, or `None`, as [`Index::get`] answers.
    #[inline]
    pub fn get(&mut self, key: &Uuid) -> Option<Uuid> {
        self.count(1);
        self.index.get_pinned(&self.guard, key)
    }

    /// [`Index::get_many`] under this session's pin.
    pub fn get_many(&mut self, keys: &[Uuid], out: &mut [Option<Uuid>]) {
        self.count(keys.len().min(out.len()));
        self.index.get_many_pinned(&self.guard, keys, out);
    }

    /// Lets reclamation pass this session now (the next lookup sees the
    /// index as of this call or later).
    pub fn repin(&mut self) {
        self.guard.repin();
        self.since_pin = 0;
    }

    /// Counts `lookups` against the re-pin bound, re-pinning first when the
    /// bound was reached.
    #[inline]
    fn count(&mut self, lookups: usize) {
        if self.since_pin >= SESSION_REPIN_EVERY {
            self.repin();
        }
        self.since_pin = self
            .since_pin
            .saturating_add(u32::try_from(lookups).unwrap_or(u32::MAX));
    }
}

/// Bytes of physical memory of this machine, if the OS says.
pub fn physical_memory() -> Option<usize> {
    #[cfg(all(unix, not(uuidmap_loom)))]
    {
        // SAFETY: sysconf has no preconditions; it returns -1 for unknown names.
        let (pages, page) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && page > 0 {
            return (pages as usize).checked_mul(page as usize);
        }
    }
    None
}

/// Asks the CPU to start loading the cache line at `p`.
#[inline(always)]
pub(super) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults or reads memory observably,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(all(test, not(uuidmap_loom)))]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;

    fn key(i: u64) -> Uuid {
        Uuid::from_u64_pair(i.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1, i)
    }

    #[test]
    fn a_session_answers_as_get_does_and_re_pins_on_its_own() {
        let (mut writer, index) = Index::with_capacity(0);
        for i in 0..5_000 {
            writer.insert(key(i), key(i + 1)).unwrap();
        }
        let mut session = index.session();
        for round in 0..3 {
            for i in 0..6_000 {
                assert_eq!(session.get(&key(i)), index.get(&key(i)), "{round} {i}");
            }
        }
        assert!(session.since_pin <= SESSION_REPIN_EVERY);
        let keys: Vec<Uuid> = (0..3_000).map(key).collect();
        let mut out = vec![None; keys.len()];
        session.get_many(&keys, &mut out);
        assert!(out.iter().zip(0..).all(|(v, i)| *v == Some(key(i + 1))));
        assert_eq!(session.get(&Uuid::nil()), None);
    }

    /// What a session is for and what it costs: while it holds its pin,
    /// tables retired by growth after the pin are not freed; once it
    /// re-pins (or drops), they are.
    #[test]
    fn a_held_session_holds_back_reclamation_until_it_re_pins() {
        let (mut writer, index) = Index::builder()
            .segments(1)
            .huge_pages(false)
            .build()
            .unwrap();
        writer.insert(key(0), key(0)).unwrap();
        let (pinned_tx, pinned) = mpsc::channel();
        let (repin_tx, repin) = mpsc::channel::<()>();
        let (done_tx, done) = mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let mut session = index.session();
            assert_eq!(session.get(&key(0)), Some(key(0)));
            pinned_tx.send(()).unwrap();
            repin.recv().unwrap();
            // A live session that keeps re-pinning (as every
            // `SESSION_REPIN_EVERY` lookups do) lets the epoch move on.
            while done.try_recv().is_err() {
                session.repin();
                assert_eq!(session.get(&key(0)), Some(key(0)));
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        pinned.recv().unwrap();
        // Growth after the session pinned: every old table is retired.
        for i in 1..20_000 {
            writer.insert(key(i), key(i)).unwrap();
        }
        let mut freed = 0;
        for _ in 0..200 {
            epoch::pin().flush();
            freed += writer.reclaim();
        }
        assert_eq!(freed, 0, "a table was freed under a live session's pin");
        repin_tx.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while freed == 0 && Instant::now() < deadline {
            epoch::pin().flush();
            freed += writer.reclaim();
            std::thread::yield_now();
        }
        done_tx.send(()).unwrap();
        reader.join().unwrap();
        assert!(
            freed > 0,
            "the re-pinned session still held reclamation back"
        );
    }
}
