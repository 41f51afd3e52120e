//! Snapshot files: what is written reads back as the same map, a snapshot
//! taken while the writer runs is exact once the log after its capture LSNs
//! is replayed, damage is reported (never a panic), and the file protocol
//! keeps the newest two snapshots and never leaves a broken file behind.
#![cfg(not(uuidmap_loom))]

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_engine::store::snapshot::{Load, OpenOptions, Restored, RestoredIndex};
use uuidmap_engine::store::{
    Io, IoFile, MappedFile, Op, OsIo, SnapshotCorrupt, SnapshotLoadError, list_snapshots,
    open_snapshot, write_snapshot,
};
use uuidmap_index::Key;
use uuidmap_index::{Index, IndexWriter};

use uuidmap_testkit_io::data::mix;

fn key(i: u64) -> Uuid {
    Uuid::from_u128(((mix(i) as u128) << 64) | mix(i ^ 0xabc) as u128 | 1)
}

fn value(i: u64) -> Uuid {
    Uuid::from_u128(mix(i ^ 0x5555) as u128)
}

/// A deterministic stream of pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 += 1;
        mix(self.0) % n
    }
}

fn verify(on: bool) -> OpenOptions {
    OpenOptions {
        verify: on,
        ..OpenOptions::default()
    }
}

fn verify_loading(on: bool, load: Load) -> OpenOptions {
    OpenOptions {
        verify: on,
        load,
        ..OpenOptions::default()
    }
}

fn restore(path: &Path, options: &OpenOptions) -> Result<RestoredIndex, SnapshotLoadError> {
    open_snapshot(&OsIo, path, options)?.into_index()
}

/// An index with `n` entries (every third then removed), every write
/// stamped with a distinct LSN; returns the writer, a reader, and the last
/// LSN.
fn filled(segments: usize, n: u64) -> (IndexWriter, Index, u64) {
    let (mut writer, index) = Index::builder().segments(segments).build().unwrap();
    let mut lsn = 0;
    for i in 0..n {
        lsn += 1;
        writer.set_stamp(lsn);
        writer.insert(key(i), value(i)).unwrap();
    }
    for i in (0..n).step_by(3) {
        lsn += 1;
        writer.set_stamp(lsn);
        writer.remove(&key(i));
    }
    (writer, index, lsn)
}

#[test]
fn a_restored_snapshot_holds_every_entry_and_later_writes_never_reach_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (_writer, index, lsn) = filled(8, 30_000);
    let info = write_snapshot(&OsIo, dir.path(), &index, &|| lsn, &|_| Ok(())).unwrap();
    assert_eq!(info.lsn, lsn);
    assert_eq!(info.entries, index.len() as u64);
    assert_eq!(info.segments, 8);
    assert_eq!(
        info.min_capture_lsn, lsn,
        "no writes ran during the snapshot"
    );
    assert_eq!(
        info.path,
        dir.path().join(format!("snapshot-{lsn:020}.snap"))
    );
    assert_eq!(std::fs::metadata(&info.path).unwrap().len(), info.bytes);
    let file_crc = || uuidmap_engine::store::crc32c(&std::fs::read(&info.path).unwrap());
    let before = file_crc();

    // Mapped, and read whole (whose tags the tables use where they lie).
    for (check, load) in [
        (true, Load::Map),
        (false, Load::Map),
        (true, Load::Read),
        (false, Load::Read),
    ] {
        let restored = restore(&info.path, &verify_loading(check, load)).unwrap();
        assert_eq!(restored.how, Restored::ZeroCopy);
        assert_eq!(restored.lsn, lsn);
        assert_eq!(restored.capture_lsns, vec![lsn; 8]);
        let RestoredIndex {
            writer: mut w2,
            index: restored,
            ..
        } = restored;
        assert_eq!(restored.len(), index.len());
        for i in 0..30_000u64 {
            assert_eq!(restored.get(&key(i)), index.get(&key(i)), "key {i}");
        }
        // Overwrite and remove (the restored tables' slots and tags
        // change in place), snapshot that, and restore it again: the same
        // answers.
        for i in 0..30_000u64 {
            if i % 2 == 0 {
                w2.insert(key(i), value(i + 1)).unwrap();
            } else {
                w2.remove(&key(i));
            }
        }
        let changed = |i: u64| i.is_multiple_of(2).then(|| value(i + 1));
        let again_dir = tempfile::tempdir().unwrap();
        let again =
            write_snapshot(&OsIo, again_dir.path(), &restored, &|| lsn + 1, &|_| Ok(())).unwrap();
        let reopened = restore(&again.path, &verify_loading(true, load)).unwrap();
        assert_eq!(reopened.index.len(), restored.len());
        for i in 0..30_000u64 {
            assert_eq!(
                reopened.index.get(&key(i)),
                changed(i),
                "key {i}, re-restored"
            );
        }
        drop(reopened);
        // Grow well past the restored tables.
        for i in 30_000..120_000u64 {
            w2.insert(key(i), value(i)).unwrap();
        }
        for i in 0..120_000u64 {
            let want = match i {
                i if i >= 30_000 => Some(value(i)),
                i if i % 2 == 0 => Some(value(i + 1)),
                _ => None,
            };
            assert_eq!(
                restored.get(&key(i)),
                want,
                "key {i} after writes, {load:?}"
            );
        }
        drop((w2, restored));
        assert_eq!(
            file_crc(),
            before,
            "writes to the restored index changed the file"
        );
    }
}

/// The model: the map after applying `batches[..upto]`.
fn model(batches: &[Vec<Op>]) -> HashMap<Uuid, Uuid> {
    let mut m = HashMap::new();
    for batch in batches {
        for op in batch {
            match *op {
                Op::Put { key, value } => m.insert(key.uuid(), value),
                Op::Delete { key } => m.remove(key.as_uuid()),
            };
        }
    }
    m
}

fn apply(writer: &mut IndexWriter, op: &Op) {
    match *op {
        Op::Put { key, value } => {
            writer.insert(key.uuid(), value).unwrap();
        }
        Op::Delete { key } => {
            writer.remove(key.as_uuid());
        }
    }
}

/// Which segment each key lives in, for an index of `segments` segments
/// hashed with `seeds`: found by inserting them all into such an index and
/// copying its segments.
fn segment_of_keys(index: &Index, keys: &[Uuid]) -> HashMap<Uuid, usize> {
    let (mut w, probe) = Index::builder()
        .seeds(index.seeds())
        .segments(index.segment_count())
        .build()
        .unwrap();
    for &k in keys {
        w.insert(k, k).unwrap();
    }
    let mut out = HashMap::new();
    let mut words = Vec::new();
    for s in 0..probe.segment_count() {
        let image = probe.copy_segment_raw(s, &mut words);
        let slots: &[uuidmap_index::Slot] = bytemuck::cast_slice(&words[..image.capacity * 4]);
        for slot in slots.iter().filter(|s| !s.is_empty()) {
            out.insert(slot.key(), s);
        }
    }
    assert_eq!(out.len(), keys.len());
    out
}

#[test]
fn a_snapshot_taken_under_writes_plus_the_log_after_each_capture_is_the_final_state() {
    const KEYS: u64 = 3_000;
    const BATCHES: usize = 12_000;
    let keys: Vec<Uuid> = (0..KEYS).map(key).collect();
    // Multi-op batches of puts, overwrites and deletes, often several keys
    // of one segment in one batch (so a copy can catch half a batch).
    let mut rng = Rng(7);
    let batches: Vec<Vec<Op>> = (0..BATCHES)
        .map(|b| {
            (0..1 + rng.below(8))
                .map(|_| {
                    let key = keys[rng.below(KEYS) as usize];
                    if rng.below(4) == 0 {
                        Op::Delete {
                            key: Key::new(key).unwrap(),
                        }
                    } else {
                        Op::Put {
                            key: Key::new(key).unwrap(),
                            value: value(b as u64 * 16 + rng.below(16)),
                        }
                    }
                })
                .collect()
        })
        .collect();
    let batches = Arc::new(batches);

    let dir = tempfile::tempdir().unwrap();
    let (mut writer, index) = Index::builder().segments(16).build().unwrap();
    let applied = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let snapshots_taken = Arc::new(AtomicU64::new(0));

    let writer_thread = {
        let (batches, applied, done, taken) = (
            batches.clone(),
            applied.clone(),
            done.clone(),
            snapshots_taken.clone(),
        );
        std::thread::spawn(move || {
            let mut rng = Rng(99);
            let mut seen = 0;
            for (i, batch) in batches.iter().enumerate() {
                let lsn = i as u64 + 1;
                writer.set_stamp(lsn);
                for op in batch {
                    apply(&mut writer, op);
                }
                // The watermark is published after groups of 1 to 3
                // batches, as the writer pipeline does.
                if rng.below(3) == 0 || lsn == batches.len() as u64 {
                    applied.store(lsn, Ordering::Release);
                }
                // Let a snapshot run now and then, so that many overlap
                // the writes (bounded, should the snapshot thread stop).
                if lsn.is_multiple_of(400) {
                    let t = Instant::now();
                    while taken.load(Ordering::Acquire) == seen
                        && t.elapsed() < Duration::from_secs(2)
                    {
                        std::thread::yield_now();
                    }
                    seen = taken.load(Ordering::Acquire);
                }
            }
            done.store(true, Ordering::Release);
            writer
        })
    };

    let mut restored = Vec::new();
    while !done.load(Ordering::Acquire) {
        // The pause before reading the watermark widens the window in which
        // the writer moves on: a snapshot that read the watermark after its
        // copy instead of before would be caught claiming batches it lacks.
        let watermark = || {
            let t = Instant::now();
            while t.elapsed() < Duration::from_micros(20) {
                std::hint::spin_loop();
            }
            applied.load(Ordering::Acquire)
        };
        let info = write_snapshot(&OsIo, dir.path(), &index, &watermark, &|_| Ok(())).unwrap();
        // Open at once: the file is removed by a later snapshot, the mapping
        // stays.
        let opened = open_snapshot(&OsIo, &info.path, &verify(true)).unwrap();
        assert!(opened.capture_lsns().iter().all(|&c| c <= info.lsn));
        restored.push((
            info.lsn,
            opened.min_capture_lsn(),
            opened.into_index().unwrap(),
        ));
        snapshots_taken.fetch_add(1, Ordering::Release);
    }
    let _writer = writer_thread.join().unwrap();
    assert!(restored.len() >= 10, "only {} snapshots", restored.len());
    let fuzzy = restored.iter().filter(|(lsn, min, _)| min < lsn).count();
    assert!(fuzzy > 0, "no snapshot overlapped a write");

    let expected = model(&batches);
    let segment_of = segment_of_keys(&index, &keys);
    for (lsn, _, mut r) in restored {
        // Replay, for each key, the batches after its segment's capture.
        for (i, batch) in batches.iter().enumerate().skip(r.replay_after() as usize) {
            for op in batch {
                if i as u64 + 1 > r.capture_lsns[segment_of[op.key().as_uuid()]] {
                    apply(&mut r.writer, op);
                }
            }
        }
        assert_eq!(r.index.len(), expected.len(), "snapshot {lsn}");
        for k in &keys {
            assert_eq!(
                r.index.get(k),
                expected.get(k).copied(),
                "snapshot {lsn}, key {k}"
            );
        }
    }
}

/// A small snapshot's bytes, and where its header starts.
fn small_snapshot(dir: &Path) -> (PathBuf, Vec<u8>, usize) {
    let (_w, index, lsn) = filled(4, 2_000);
    let info = write_snapshot(&OsIo, dir, &index, &|| lsn, &|_| Ok(())).unwrap();
    let bytes = std::fs::read(&info.path).unwrap();
    let end = bytes.len() - 16;
    let header_at = u64::from_le_bytes(bytes[end..end + 8].try_into().unwrap()) as usize;
    (info.path, bytes, header_at)
}

fn assert_corrupt(result: Result<RestoredIndex, SnapshotLoadError>, path: &Path, what: &str) {
    match result {
        Err(SnapshotLoadError::Corrupt(SnapshotCorrupt { path: p, reason })) => {
            assert_eq!(p, path, "{what}");
            assert!(!reason.is_empty());
        }
        Err(e) => panic!("{what}: expected SnapshotCorrupt, got {e}"),
        Ok(_) => panic!("{what}: damage went unnoticed"),
    }
}

#[test]
fn damage_anywhere_is_reported_as_a_corrupt_snapshot_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (_, good, header_at) = small_snapshot(dir.path());
    let damaged = dir.path().join("damaged.snap");
    let mut rng = Rng(3);
    // Mapped, and read into memory (where the checksums are taken as the
    // bytes arrive): the same verdicts.
    let check = |bytes: &[u8], what: &str, caught_without_verify: bool| {
        std::fs::write(&damaged, bytes).unwrap();
        for load in [Load::Map, Load::Read] {
            let what = &format!("{what}, {load:?}");
            assert_corrupt(
                restore(&damaged, &verify_loading(true, load)),
                &damaged,
                what,
            );
            let unverified = restore(&damaged, &verify_loading(false, load));
            if caught_without_verify {
                assert_corrupt(unverified, &damaged, what);
            } else {
                // verify = false trusts the slot arrays: documented.
                assert!(unverified.is_ok(), "{what}");
            }
        }
    };
    for _ in 0..40 {
        // Header fields and directory (and the header checksum).
        let at = header_at + rng.below((good.len() - 16 - header_at) as u64) as usize;
        let mut bad = good.clone();
        bad[at] ^= 1 << rng.below(8);
        check(&bad, &format!("header byte {at}"), true);
        // Inside the first segment's slot array (segment 0 starts at 4096
        // and is at least 64 slots).
        let at = 4096 + rng.below(64 * 32) as usize;
        let mut bad = good.clone();
        bad[at] ^= 1 << rng.below(8);
        check(&bad, &format!("segment byte {at}"), false);
        // Truncation anywhere.
        let len = rng.below(good.len() as u64) as usize;
        check(&good[..len], &format!("truncated to {len}"), true);
    }
    for at in [0, 7, 8, 11, good.len() - 1, good.len() - 16] {
        let mut bad = good.clone();
        bad[at] ^= 0x80;
        check(&bad, &format!("magic/version/trailer byte {at}"), true);
    }
    check(&[], "empty file", true);
    // The message a user sees names the segment.
    let mut bad = good.clone();
    bad[4096 + 40] ^= 4;
    std::fs::write(&damaged, &bad).unwrap();
    for load in [Load::Map, Load::Read] {
        let err = restore(&damaged, &verify_loading(true, load))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("segment 0's checksum does not match"), "{err}");
        assert!(err.contains("damaged.snap"), "{err}");
    }
}

#[test]
fn a_build_that_hashes_differently_rebuilds_the_same_map_and_replays_uniformly() {
    let dir = tempfile::tempdir().unwrap();
    let (_w, index, lsn) = filled(8, 10_000);
    let info = write_snapshot(&OsIo, dir.path(), &index, &|| lsn, &|_| Ok(())).unwrap();
    let opened = open_snapshot(&OsIo, &info.path, &verify(true)).unwrap();
    let options = OpenOptions {
        verify: true,
        expected_fingerprint: Some(opened.fingerprint ^ 1),
        ..OpenOptions::default()
    };
    let r = restore(&info.path, &options).unwrap();
    assert!(matches!(r.how, Restored::Rebuilt { .. }), "{:?}", r.how);
    assert_eq!(r.capture_lsns, vec![info.min_capture_lsn; 8]);
    assert_eq!(r.index.segment_count(), 8);
    assert_eq!(r.index.seeds(), index.seeds());
    assert_eq!(r.index.len(), index.len());
    for i in 0..10_000u64 {
        assert_eq!(r.index.get(&key(i)), index.get(&key(i)), "key {i}");
    }
}

#[test]
fn writing_keeps_the_two_newest_snapshots_and_removes_leftover_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, index) = Index::builder().segments(2).build().unwrap();
    let debris = dir.path().join("snapshot-00000000000000000001.snap.tmp");
    let unrelated = dir.path().join("notes.txt");
    std::fs::write(&unrelated, b"keep me").unwrap();
    let mut written = Vec::new();
    for lsn in 1..=4u64 {
        writer.set_stamp(lsn);
        writer.insert(key(lsn), value(lsn)).unwrap();
        std::fs::write(&debris, b"half a snapshot").unwrap();
        let info = write_snapshot(&OsIo, dir.path(), &index, &|| lsn, &|_| Ok(())).unwrap();
        written.push(info.path.clone());
        let listed = list_snapshots(&OsIo, dir.path()).unwrap();
        let want: Vec<(u64, PathBuf)> = (lsn.saturating_sub(1).max(1)..=lsn)
            .rev()
            .map(|l| (l, written[l as usize - 1].clone()))
            .collect();
        assert_eq!(listed, want, "after snapshot {lsn}");
        assert!(
            !debris.exists(),
            "leftover temp file survived snapshot {lsn}"
        );
    }
    assert!(unrelated.exists());
    // Nothing changed since LSN 4: the existing file is returned, untouched.
    let modified = std::fs::metadata(&written[3]).unwrap().modified().unwrap();
    let again = write_snapshot(&OsIo, dir.path(), &index, &|| 4, &|_| Ok(())).unwrap();
    assert_eq!(again.path, written[3]);
    assert_eq!(again.entries, 4);
    assert_eq!(
        std::fs::metadata(&written[3]).unwrap().modified().unwrap(),
        modified
    );
}

/// The real file system, except that files written through it hold at
/// most `budget` bytes: then writes fail as on a full disk.
struct FullDisk {
    budget: u64,
}

struct FullFile {
    inner: Box<dyn IoFile>,
    budget: u64,
}

impl Io for FullDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        OsIo.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        OsIo.list(dir)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        Ok(Box::new(FullFile {
            inner: OsIo.create(path)?,
            budget: self.budget,
        }))
    }
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        Ok(Box::new(FullFile {
            inner: OsIo.open_write(path)?,
            budget: self.budget,
        }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        OsIo.read(path)
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        OsIo.file_len(path)
    }
    fn map_private(&self, path: &Path) -> io::Result<MappedFile> {
        OsIo.map_private(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsIo.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        OsIo.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        OsIo.sync_dir(dir)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        OsIo.truncate(path, len)
    }
}

impl IoFile for FullFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.inner.len() + buf.len() as u64 > self.budget {
            let room = self.budget.saturating_sub(self.inner.len()) as usize;
            self.inner.write_all(&buf[..room])?;
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.inner.write_all(buf)
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.inner.sync()
    }
    fn syncer(&self) -> io::Result<std::sync::Arc<dyn uuidmap_engine::store::FileSync>> {
        self.inner.syncer()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

#[test]
fn a_failed_write_leaves_no_temp_file_and_the_previous_snapshots_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, index, lsn) = filled(4, 3_000);
    let first = write_snapshot(&OsIo, dir.path(), &index, &|| lsn, &|_| Ok(())).unwrap();
    writer.set_stamp(lsn + 1);
    writer.insert(key(1), value(2)).unwrap();
    let second = write_snapshot(&OsIo, dir.path(), &index, &|| lsn + 1, &|_| Ok(())).unwrap();
    let names = || {
        let mut n: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        n.sort();
        n
    };
    let before = names();
    writer.set_stamp(lsn + 2);
    writer.insert(key(2), value(3)).unwrap();
    for budget in [0, 100, 5_000, first.bytes - 10] {
        let err = write_snapshot(
            &FullDisk { budget },
            dir.path(),
            &index,
            &|| lsn + 2,
            &|_| Ok(()),
        )
        .expect_err("the disk is full");
        assert!(err.is_disk_full(), "{err}");
        let message = err.to_string();
        assert!(message.contains("disk is full"), "{message}");
        assert!(message.contains(".snap.tmp"), "{message}");
        assert_eq!(names(), before, "budget {budget}");
    }
    for info in [&first, &second] {
        restore(&info.path, &verify(true)).unwrap();
    }
    // A directory that does not exist: an error naming it, nothing created.
    let missing = dir.path().join("missing");
    let err = write_snapshot(&OsIo, &missing, &index, &|| lsn + 2, &|_| Ok(()))
        .err()
        .unwrap();
    assert!(err.to_string().contains("missing"), "{err}");
    assert!(!missing.exists());
}

#[test]
fn a_damaged_snapshot_of_the_same_lsn_is_replaced_and_an_older_state_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (_w, index, lsn) = filled(2, 500);
    let info = write_snapshot(&OsIo, dir.path(), &index, &|| lsn, &|_| Ok(())).unwrap();
    let mut bytes = std::fs::read(&info.path).unwrap();
    let end = bytes.len() - 1;
    bytes[end] ^= 1;
    std::fs::write(&info.path, &bytes).unwrap();
    assert!(open_snapshot(&OsIo, &info.path, &verify(true)).is_err());
    let again = write_snapshot(&OsIo, dir.path(), &index, &|| lsn, &|_| Ok(())).unwrap();
    assert_eq!(again.path, info.path);
    restore(&again.path, &verify(true)).unwrap();
    // Two newer snapshots exist; a snapshot of an older state is still kept.
    for newer in [lsn + 10, lsn + 20] {
        write_snapshot(&OsIo, dir.path(), &index, &|| newer, &|_| Ok(())).unwrap();
    }
    let older = write_snapshot(&OsIo, dir.path(), &index, &|| lsn + 5, &|_| Ok(())).unwrap();
    assert!(older.path.exists());
    restore(&older.path, &verify(true)).unwrap();
}
