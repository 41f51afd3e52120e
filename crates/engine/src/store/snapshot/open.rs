//! Opening a snapshot on restart: map the file privately, check it, and make
//! the live index out of it — in place (the mapped slot arrays become the
//! tables) when this build hashes like the one that wrote it, by rebuilding
//! otherwise.

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use uuid::Uuid;

use super::format::{
    FORMAT_VERSION, Header, OLDEST_READABLE_VERSION, SLOT_BYTES, SegmentEntry, Unreadable,
};
use crate::store::{FileError, Io, MappedFile, SnapshotCorrupt, SnapshotLoadError};
use uuidmap_index::{
    ExternalSlots, ExternalTags, HashSeeds, Index, IndexBuilder, IndexWriter, LentMemory,
    RestoredSegment, Slot, StoredTags, hash_fingerprint,
};

/// How to open a snapshot.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Check every segment's checksum (reads the whole file, in parallel).
    /// Without it the slot arrays are trusted as they are: a damaged byte
    /// in them goes unnoticed (the header and the layout are always
    /// checked, so the index never reaches outside the file).
    pub verify: bool,
    /// How the file's bytes come into memory.
    pub load: Load,
    /// The hash fingerprint to expect instead of this build's (tests of the
    /// rebuild path).
    #[doc(hidden)]
    pub expected_fingerprint: Option<u64>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            verify: true,
            load: Load::Map,
            expected_fingerprint: None,
        }
    }
}

/// How a snapshot's bytes come into memory. Either way the tables are the
/// file's bytes, used in place; only who copies them differs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Load {
    /// Mapped privately ([`Io::map_private`]): nothing is read until it is
    /// touched, and a page is copied at its first write, by a copy-on-write
    /// fault. Best when few pages will be written before the next snapshot.
    #[default]
    Map,
    /// Read whole into anonymous memory first ([`Io::read_private`], on
    /// every core): each page is copied once, in bulk, and a write costs no
    /// fault. Best when the WAL tail to replay writes to most pages.
    Read,
}

impl Load {
    /// The cheaper way to load a snapshot of `file_bytes` holding
    /// `entries`, that about `tail_puts` replayed writes will change
    /// (random keys).
    ///
    /// Measured at 100M entries (BENCHMARKS.md, issue 38): reading a page
    /// in bulk costs about 1.9 µs of CPU (the 4 GB file in 0.92–0.98 s on
    /// 2 threads). A copy-on-write fault on a page nothing mapped before
    /// costs about 2 µs (1M writes at random offsets: 624K faults in 0.64 s
    /// on 2 threads), but the replay reads each slot before it writes it,
    /// so its faults replace a mapped page and must flush the other cores'
    /// TLBs: about 18 µs each (5.8 s for 640K on 2 quiet cores). `n`
    /// random writes over `p` pages touch `p·(1 − e^(−n/p))` of them, so
    /// reading pays from a touched share of about a tenth (replay faults)
    /// to nearly all (bare faults); this reads from `n ≥ p/2`, a share of
    /// 39 %, between the two. Not when the replay presizes (a tail of more
    /// than `entries / 8` puts, see `recovery`): the presize copies the
    /// grown segments out anyway.
    /// (The tail is what the WAL files can hold, an estimate from their
    /// sizes; a tail of deletes or repeated keys touches fewer pages, and
    /// then the choice reads more than it needed.)
    pub fn for_tail(file_bytes: u64, entries: u64, tail_puts: u64) -> Load {
        let pages = file_bytes / 4096;
        if tail_puts > 0 && tail_puts.saturating_mul(2) >= pages && tail_puts <= entries / 8 {
            Load::Read
        } else {
            Load::Map
        }
    }
}

/// A snapshot file mapped and checked, ready to become an index.
pub struct OpenedSnapshot {
    /// The file.
    pub path: PathBuf,
    /// Its LSN (see [`super::SnapshotInfo::lsn`]).
    pub lsn: u64,
    /// The hash seeds of the index it holds.
    pub seeds: HashSeeds,
    /// The hash fingerprint of the build that wrote it.
    pub fingerprint: u64,
    /// When it was written, in milliseconds since the Unix epoch.
    pub created_unix_millis: u64,
    /// Entries in it.
    pub entries: u64,
    /// The segment directory, in segment order.
    pub segments: Vec<SegmentEntry>,
    /// The fingerprint the tables must have been hashed with to be used in
    /// place.
    expected_fingerprint: u64,
    /// Every segment's checksum was checked as the file was read.
    verified: bool,
    /// `map` is the file read whole into this process's memory
    /// ([`Load::Read`]), not a mapping of it.
    read: bool,
    /// The whole file, mapped privately or read.
    map: MappedFile,
}

/// The live index made from a snapshot, and where log replay must start.
pub struct RestoredIndex {
    /// The index's one writer.
    pub writer: IndexWriter,
    /// A read handle.
    pub index: Index,
    /// The snapshot's LSN: the log must reach at least this far.
    pub lsn: u64,
    /// Per segment of `index`: every logged batch with a higher LSN must be
    /// replayed for that segment's keys (lower ones are in it already).
    /// Replaying every batch after the smallest of them, for every key, is
    /// also correct, merely slower.
    pub capture_lsns: Vec<u64>,
    /// How the tables were made.
    pub how: Restored,
}

/// How [`OpenedSnapshot::into_index`] made the tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restored {
    /// The mapped slot arrays are the tables (no copy).
    ZeroCopy,
    /// This build hashes differently from the one that wrote the snapshot:
    /// every entry was inserted into fresh tables. Entries may have moved
    /// between segments, so every segment's capture LSN is the snapshot's
    /// smallest one.
    Rebuilt {
        /// The fingerprint in the file.
        file_fingerprint: u64,
        /// This build's.
        build_fingerprint: u64,
    },
}

impl RestoredIndex {
    /// The smallest capture LSN: replaying every batch after it restores
    /// the state (see `capture_lsns`).
    pub fn replay_after(&self) -> u64 {
        self.capture_lsns.iter().copied().min().unwrap_or(0)
    }
}

/// Maps the snapshot at `path` and checks it: always its header and layout;
/// with `options.verify`, also every segment's checksum.
pub fn open_snapshot(
    io: &dyn Io,
    path: &Path,
    options: &OpenOptions,
) -> Result<OpenedSnapshot, SnapshotLoadError> {
    let corrupt = |reason: String| SnapshotCorrupt {
        path: path.to_path_buf(),
        reason,
    };
    let map = io
        .map_private(path)
        .map_err(|e| FileError::new("opening the snapshot", path, e))?;
    let header = Header::parse_file(map.as_slice()).map_err(|e| match e {
        Unreadable::Newer(version) => SnapshotLoadError::NewerFormat {
            path: path.to_path_buf(),
            version,
            oldest: OLDEST_READABLE_VERSION,
            newest: FORMAT_VERSION,
        },
        Unreadable::Damaged(reason) => corrupt(reason).into(),
    })?;
    let mut opened = OpenedSnapshot {
        path: path.to_path_buf(),
        lsn: header.lsn,
        seeds: header.seeds,
        fingerprint: header.fingerprint,
        created_unix_millis: header.created_unix_millis,
        entries: header.entries,
        segments: header.segments,
        expected_fingerprint: options
            .expected_fingerprint
            .unwrap_or_else(hash_fingerprint),
        verified: false,
        read: false,
        map,
    };
    match options.load {
        Load::Read => opened.read_whole(io, options.verify)?,
        Load::Map if options.verify => opened.verify()?,
        Load::Map => {}
    }
    Ok(opened)
}

/// The error for a segment of the snapshot at `path` whose bytes fail their
/// checksum.
fn bad_checksum(path: &Path, segment: usize) -> SnapshotLoadError {
    SnapshotCorrupt {
        path: path.to_path_buf(),
        reason: format!("segment {segment}'s checksum does not match: the file is damaged"),
    }
    .into()
}

/// The lowest-numbered segment whose bytes fail their checksum, checking
/// segments on every available CPU (threads take the next unchecked segment
/// from a shared counter, so one large segment does not idle the others).
fn first_bad_segment(file: &[u8], segments: &[SegmentEntry]) -> Option<usize> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(segments.len());
    let next = AtomicUsize::new(0);
    let first_bad = AtomicUsize::new(usize::MAX);
    let check = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(s) = segments.get(i) else { break };
            let bytes = &file[s.offset as usize..(s.offset + s.bytes()) as usize];
            if crate::store::crc32c(bytes) != s.crc {
                first_bad.fetch_min(i, Ordering::Relaxed);
            }
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(check);
        }
        check();
    });
    Some(first_bad.into_inner()).filter(|&i| i != usize::MAX)
}

impl OpenedSnapshot {
    /// Checks every segment's checksum (what [`open_snapshot`] does with
    /// `verify`; recovery calls it apart to time it).
    /// Nothing to do when the open read the file and checked it then.
    pub fn verify(&self) -> Result<(), SnapshotLoadError> {
        if self.verified {
            return Ok(());
        }
        self.map.will_need();
        match first_bad_segment(self.map.as_slice(), &self.segments) {
            Some(segment) => Err(bad_checksum(&self.path, segment)),
            None => Ok(()),
        }
    }

    /// Replaces the mapping by the whole file read into memory of this
    /// process's own ([`Load::Read`]; the header and layout were read from
    /// the mapping, a few pages), and with `verify` checks each segment's
    /// checksum as its bytes arrive, while they are in the cache.
    pub fn read_whole(&mut self, io: &dyn Io, verify: bool) -> Result<(), SnapshotLoadError> {
        let corrupt = |reason: String| SnapshotCorrupt {
            path: self.path.clone(),
            reason,
        };
        let ranges: Vec<_> = self
            .segments
            .iter()
            .map(|s| s.offset as usize..(s.offset + s.bytes()) as usize)
            .collect();
        let first_bad = AtomicUsize::new(usize::MAX);
        let check = |i: usize, bytes: &[u8]| {
            if verify && crate::store::crc32c(bytes) != self.segments[i].crc {
                first_bad.fetch_min(i, Ordering::Relaxed);
            }
        };
        let copy = io
            .read_private(&self.path, &ranges, &check)
            .map_err(|e| FileError::new("reading the snapshot", &self.path, e))?;
        // Snapshot files never change once in place (the disk
        // assumptions), but the copy is what will be served: its own
        // header must be the one checked.
        let header = Header::parse_file(copy.as_slice()).map_err(|e| corrupt(e.to_string()))?;
        if header.lsn != self.lsn || header.segments != self.segments {
            return Err(corrupt("the file changed while it was read".into()).into());
        }
        if let Some(segment) = Some(first_bad.into_inner()).filter(|&i| i != usize::MAX) {
            return Err(bad_checksum(&self.path, segment));
        }
        self.map = copy;
        self.verified = verify;
        self.read = true;
        Ok(())
    }

    /// Capture LSN of each segment (index = segment number).
    pub fn capture_lsns(&self) -> Vec<u64> {
        self.segments.iter().map(|s| s.capture_lsn).collect()
    }

    /// The smallest capture LSN: the log after it is needed for recovery.
    pub fn min_capture_lsn(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.capture_lsn)
            .min()
            .unwrap_or(0)
    }

    /// Builds the live index.
    ///
    /// If the file was written by a build that hashes like this one (equal
    /// fingerprints), the mapped slot arrays become the tables as they are
    /// (no copy; pages are read on first touch and copied only when
    /// written). Each table is stamped `capture_lsn`, so a later snapshot
    /// that copies it before any write computes
    /// `max(applied, capture_lsn - 1) = applied` (recovery starts the
    /// watermark at the log's end, which is at least every capture): still
    /// exact, and the stamp never claims an LSN the log may not hold.
    ///
    /// Otherwise (another CPU or ahash version) the map is rebuilt by
    /// inserting every entry into fresh tables with the same seeds and
    /// segment count, and a warning is logged; see [`Restored::Rebuilt`].
    pub fn into_index(self) -> Result<RestoredIndex, SnapshotLoadError> {
        if self.fingerprint != self.expected_fingerprint {
            return self.rebuild();
        }
        let capture_lsns = self.capture_lsns();
        let OpenedSnapshot {
            path,
            lsn,
            seeds,
            segments,
            mut map,
            read,
            ..
        } = self;
        // Version 2 stores each table's tags after its slots. A file read
        // whole is this process's own memory: its tag words are used where
        // they lie (the file's little-endian words are the memory's on a
        // little-endian machine). A mapped file's tags are copied out, here
        // (1/32 of the slots' bytes), before the slots are lent: used in
        // place, every tag page a replayed write touched would be a
        // copy-on-write fault, at 18 µs each (`Load::for_tail`), where the
        // copy costs about 0.5 µs a page.
        let in_place = read && cfg!(target_endian = "little");
        let base = map.as_mut_ptr();
        let tags_at = |s: &SegmentEntry| (s.offset + s.slot_bytes()) as usize;
        let mut tags: Vec<Option<StoredTags>> = Vec::with_capacity(segments.len());
        if !in_place {
            let file = map.as_slice();
            for (i, s) in segments.iter().enumerate() {
                let Some(max_disp) = s.max_disp else {
                    tags.push(None);
                    continue;
                };
                let bytes = &file[tags_at(s)..tags_at(s) + s.tag_bytes() as usize];
                let stored = StoredTags::from_le_bytes(s.capacity as usize, bytes, max_disp)
                    .ok_or_else(|| SnapshotCorrupt {
                        path: path.clone(),
                        reason: format!("segment {i}'s tags are not one byte per slot"),
                    })?;
                tags.push(Some(stored));
            }
        }
        let keepalive: Arc<dyn Send + Sync> = Arc::new(map);
        // Lends `bytes` of the file from byte `at` to the index.
        let lend = |at: u64, bytes: u64| {
            // SAFETY: each range lent below is one that `parse_file` checked
            // to lie inside the file, apart from every other segment's bytes:
            // a segment's slots, or its tags right after them. Each starts
            // 8-aligned (a segment's offset is a multiple of 4096, its
            // slots' bytes a multiple of 32) in a page-aligned mapping or
            // copy.
            let ptr = unsafe { base.add(at as usize) };
            let ptr = NonNull::new(ptr).expect("a mapping is never at address 0");
            // SAFETY: the range is valid for reads and writes (a private
            // mapping, or the file read into this process's memory) while
            // `keepalive` lives, which every table holds; nothing else
            // touches it once `self` is consumed.
            unsafe { LentMemory::new(ptr, (bytes / 8) as usize, keepalive.clone()) }
        };
        let corrupt = |i: usize, what: &str| SnapshotCorrupt {
            path: path.clone(),
            reason: format!("segment {i}'s {what}"),
        };
        if in_place {
            for (i, s) in segments.iter().enumerate() {
                let Some(max_disp) = s.max_disp else {
                    tags.push(None);
                    continue;
                };
                let lent =
                    ExternalTags::new(lend(tags_at(s) as u64, s.tag_bytes()), s.capacity as usize)
                        .ok_or_else(|| corrupt(i, "tags are not one byte per slot"))?;
                tags.push(Some(StoredTags::lent(lent, max_disp)));
            }
        }
        let mut tables = Vec::with_capacity(segments.len());
        for ((i, s), tags) in segments.iter().enumerate().zip(tags) {
            // `parse_file` checked `capacity > len >= 0`: at least 1 slot.
            let slots = ExternalSlots::new(lend(s.offset, s.slot_bytes()), s.capacity as usize)
                .ok_or_else(|| corrupt(i, "slots are not 32 bytes each"))?;
            tables.push(RestoredSegment {
                slots,
                len: s.len as usize,
                generation: s.generation,
                stamp: s.capture_lsn,
                tags,
            });
        }
        let (writer, index) = IndexBuilder::default()
            .seeds(seeds)
            .restore(tables)
            .map_err(|e| SnapshotCorrupt {
                path,
                reason: e.to_string(),
            })?;
        Ok(RestoredIndex {
            writer,
            index,
            lsn,
            capture_lsns,
            how: Restored::ZeroCopy,
        })
    }

    /// Inserts every entry into a fresh index with the same seeds and
    /// segment count.
    fn rebuild(self) -> Result<RestoredIndex, SnapshotLoadError> {
        tracing::warn!(
            path = %self.path.display(),
            file_fingerprint = self.fingerprint,
            build_fingerprint = self.expected_fingerprint,
            "this build hashes keys differently from the one that wrote the snapshot; \
             rebuilding the index from its entries (slower than mapping it in place)"
        );
        let min_capture = self.min_capture_lsn();
        let (mut writer, index) = IndexBuilder::default()
            .seeds(self.seeds)
            .segments(self.segments.len())
            .capacity(self.entries as usize)
            .build()?;
        // Later copies of a table nothing has touched since then must not
        // claim more than the uniform capture (see `into_index`).
        writer.set_stamp(min_capture);
        let file = self.map.as_slice();
        for (i, s) in self.segments.iter().enumerate() {
            let bytes = &file[s.offset as usize..(s.offset + s.capacity * SLOT_BYTES) as usize];
            let slots: &[Slot] = bytemuck::cast_slice(bytes);
            for (at, slot) in slots.iter().enumerate().filter(|(_, s)| !s.is_empty()) {
                let key = Uuid::from_bytes(slot.key);
                writer
                    .insert(key, Uuid::from_bytes(slot.value))
                    .map_err(|e| SnapshotCorrupt {
                        path: self.path.clone(),
                        reason: format!("segment {i}, slot {at}: {e}"),
                    })?;
            }
        }
        Ok(RestoredIndex {
            writer,
            index,
            lsn: self.lsn,
            capture_lsns: vec![min_capture; self.segments.len()],
            how: Restored::Rebuilt {
                file_fingerprint: self.fingerprint,
                build_fingerprint: self.expected_fingerprint,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Load;

    #[test]
    fn a_tail_of_half_as_many_writes_as_pages_reads_the_snapshot_in_bulk() {
        let gib4 = 4 << 30; // 1,048,576 pages
        let entries = 100_000_000;
        assert_eq!(Load::for_tail(gib4, entries, 0), Load::Map);
        assert_eq!(Load::for_tail(gib4, entries, 200_000), Load::Map);
        assert_eq!(Load::for_tail(gib4, entries, 524_288), Load::Read);
        assert_eq!(Load::for_tail(gib4, entries, 1_000_000), Load::Read);
        // A tail the replay presizes for: the presize copies anyway.
        assert_eq!(Load::for_tail(gib4, entries, 12_500_001), Load::Map);
        // An empty file, or an empty snapshot, is mapped.
        assert_eq!(Load::for_tail(0, 0, 0), Load::Map);
        assert_eq!(Load::for_tail(4096, 0, 1), Load::Map);
    }
}
