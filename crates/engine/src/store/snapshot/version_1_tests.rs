//! Snapshots of format version 1 (slots only, before tags were stored)
//! still load: a version-2 file is rewritten as version 1 here, the way
//! the builds before 2026-11-27 wrote it, and restored both ways.

use std::path::Path;

use uuid::Uuid;

use super::format::{Header, PAGE, PROLOGUE_LEN, prologue, trailer};
use super::open::{Load, OpenOptions, Restored, open_snapshot};
use super::write::write_snapshot;
use crate::store::OsIo;
use uuidmap_index::Index;

fn key(i: u64) -> Uuid {
    let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    Uuid::from_u64_pair(x, x.rotate_left(17))
}

/// The bytes of `v2` (a version-2 snapshot) as version 1 writes them: each
/// array's slots without its tags, a directory without `max_disp`, every
/// checksum taken again.
fn as_version_1(v2: &[u8]) -> Vec<u8> {
    let header = Header::parse_file(v2).unwrap();
    assert_eq!(header.version, 2);
    let mut file = prologue(1);
    let mut segments = Vec::new();
    for s in &header.segments {
        let slots = &v2[s.offset as usize..(s.offset + s.slot_bytes()) as usize];
        let offset = (file.len() as u64).next_multiple_of(PAGE);
        file.resize(offset as usize, 0);
        file.extend_from_slice(slots);
        let mut entry = *s;
        entry.offset = offset;
        entry.crc = crate::store::crc32c(slots);
        entry.max_disp = None;
        segments.push(entry);
    }
    assert!(segments[0].offset >= PROLOGUE_LEN);
    let v1 = Header {
        version: 1,
        segments,
        ..header
    };
    let at = file.len() as u64;
    file.extend_from_slice(&v1.encode());
    file.extend_from_slice(&trailer(at));
    file
}

fn write_v2(dir: &Path, index: &Index) -> std::path::PathBuf {
    let info = write_snapshot(&OsIo, dir, index, &|| 5, &|_| Ok(())).unwrap();
    info.path
}

#[test]
fn a_version_1_snapshot_restores_every_entry_mapped_or_read() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, index) = Index::builder().segments(8).build().unwrap();
    for i in 0..20_000u64 {
        writer.set_stamp(1 + i % 5);
        writer.insert(key(i), key(i + 1)).unwrap();
    }
    let v2 = std::fs::read(write_v2(dir.path(), &index)).unwrap();
    let v1_path = dir.path().join("v1.snap");
    std::fs::write(&v1_path, as_version_1(&v2)).unwrap();
    assert!(std::fs::metadata(&v1_path).unwrap().len() < v2.len() as u64);
    for load in [Load::Map, Load::Read] {
        let options = OpenOptions {
            load,
            ..OpenOptions::default()
        };
        let opened = open_snapshot(&OsIo, &v1_path, &options).unwrap();
        assert!(opened.segments.iter().all(|s| s.max_disp.is_none()));
        let mut restored = opened.into_index().unwrap();
        assert_eq!(restored.how, Restored::ZeroCopy);
        assert_eq!(restored.index.len(), 20_000);
        for i in 0..25_000u64 {
            let want = (i < 20_000).then(|| key(i + 1));
            assert_eq!(restored.index.get(&key(i)), want, "{load:?}: key {i}");
        }
        // And it takes writes, growing out of the file's arrays.
        for i in 20_000..40_000u64 {
            restored.writer.insert(key(i), key(i)).unwrap();
        }
        assert_eq!(restored.index.get(&key(39_999)), Some(key(39_999)));
        assert_eq!(restored.index.get(&key(7)), Some(key(8)));
    }
}

#[test]
fn a_version_2_snapshot_carries_the_tables_tags() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, index) = Index::builder().segments(4).build().unwrap();
    for i in 0..10_000u64 {
        writer.insert(key(i), key(i)).unwrap();
    }
    let path = write_v2(dir.path(), &index);
    let opened = open_snapshot(&OsIo, &path, &OpenOptions::default()).unwrap();
    assert!(opened.segments.iter().all(|s| s.max_disp.is_some()));
    let restored = opened.into_index().unwrap();
    // The tags came from the file: the restored tables, slots and tags,
    // are the live ones byte for byte.
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for s in 0..index.segment_count() {
        let live = index.copy_segment_raw(s, &mut a);
        let back = restored.index.copy_segment_raw(s, &mut b);
        assert!(a == b, "segment {s}");
        assert_eq!(live.max_disp, back.max_disp, "segment {s}");
    }
}
