//! Damage to a data directory's WAL on the real disk, as a failing disk
//! would do it: the tests of members rebuilt from their group after it.

use std::path::Path;

use uuidmap_engine::store::OsIo;
use uuidmap_engine::store::wal::WalCursor;

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
