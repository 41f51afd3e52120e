//! Damage to a data directory's WAL, as a failing disk would do it: a bit
//! flipped on the real disk (the tests of members rebuilt from their group
//! after it), and records cut off with nothing in the file to show the loss
//! (the repair tests).

use std::path::{Path, PathBuf};

use uuidmap_engine::store::wal::{WalCursor, list_wal_files};
use uuidmap_engine::store::{Io, OsIo};

/// Flips one bit in the middle of the record of `lsn` in the WAL of
/// `dir` (a directory no process has open). Panics if the record is not
/// there.
pub fn flip_bit_in_record(dir: &Path, lsn: u64) {
    let (path, offset, len) = {
        let mut cursor = WalCursor::open(&OsIo, dir, lsn).unwrap();
        let rec = cursor
            .next_record()
            .unwrap()
            .expect("the record is in the log");
        assert_eq!(rec.lsn, lsn);
        (rec.path.to_path_buf(), rec.offset, rec.len)
    };
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(offset + len / 2) as usize] ^= 0x08;
    std::fs::write(&path, bytes).unwrap();
}

/// Cuts the WAL right after the record of `lsn`, and rewrites the file
/// header's synced-end slots to vouch for exactly what is left (otherwise
/// they report the cut as damage to synced records first): the log as a
/// damaged disk could leave it with nothing in the file itself to show the
/// loss (`docs/format.md` has the slot layout).
pub fn cut_wal_after(io: &dyn Io, dir: &Path, lsn: u64) -> PathBuf {
    let mut cursor = WalCursor::open(io, dir, lsn).unwrap();
    let rec = cursor.next_record().unwrap().unwrap();
    assert_eq!(rec.lsn, lsn);
    let (path, end) = (rec.path.to_path_buf(), rec.offset + rec.len);
    let mut data = io.read(&path).unwrap();
    data.truncate(end as usize);
    for slot in [24, 44] {
        data[slot..slot + 8].copy_from_slice(&lsn.to_le_bytes());
        data[slot + 8..slot + 16].copy_from_slice(&end.to_le_bytes());
        let crc = uuidmap_engine::store::crc32c(&data[slot..slot + 16]);
        data[slot + 16..slot + 20].copy_from_slice(&crc.to_le_bytes());
    }
    io.remove(&path).unwrap();
    let mut file = io.create(&path).unwrap();
    file.write_all(&data).unwrap();
    file.sync().unwrap();
    io.sync_dir(dir).unwrap();
    for later in list_wal_files(io, dir).unwrap() {
        if later.path > path {
            io.remove(&later.path).unwrap();
        }
    }
    path
}
