//! WAL file names, listing, and the removal of files a snapshot covers.
//!
//! A WAL file is named `wal-{first_lsn:020}.log` (20 digits, so names sort
//! as numbers do) and holds consecutive records starting at `first_lsn`.
//! File `i` of the sorted list therefore covers LSNs `first_i ..
//! first_{i+1} - 1`; the newest file's range is open.

use std::path::{Path, PathBuf};

use crate::store::{FileError, Io};

/// One WAL file of the data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalFile {
    /// Its path (the data directory joined with its name).
    pub path: PathBuf,
    /// The LSN of its first record (from its name).
    pub first_lsn: u64,
}

/// The name of the WAL file starting at `first_lsn`.
pub fn wal_file_name(first_lsn: u64) -> String {
    format!("wal-{first_lsn:020}.log")
}

/// The first LSN a WAL file name gives, or `None` if `name` is not one.
pub fn parse_wal_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The WAL files in `dir`, sorted by first LSN. Other names are ignored.
pub fn list_wal_files(io: &dyn Io, dir: &Path) -> Result<Vec<WalFile>, FileError> {
    let names = io
        .list(dir)
        .map_err(|e| FileError::new("listing the data directory", dir, e))?;
    let mut files: Vec<WalFile> = names
        .iter()
        .filter_map(|name| {
            Some(WalFile {
                first_lsn: parse_wal_file_name(name)?,
                path: dir.join(name),
            })
        })
        .collect();
    files.sort_by_key(|f| f.first_lsn);
    Ok(files)
}

/// Removes the WAL files all of whose records have LSNs `<= upto_lsn` (the
/// state up to `upto_lsn` is durable elsewhere, in a snapshot), oldest
/// first, then syncs the directory. The newest file is never removed: its
/// range is open, and the writer appends to it. Returns how many files were
/// removed.
///
/// Removing oldest first keeps the remaining files a contiguous run if this
/// is interrupted.
pub fn remove_covered(io: &dyn Io, dir: &Path, upto_lsn: u64) -> Result<usize, FileError> {
    let files = list_wal_files(io, dir)?;
    let mut removed = 0;
    for pair in files.windows(2) {
        let (file, next) = (&pair[0], &pair[1]);
        // `file` covers first .. next.first_lsn - 1.
        if next.first_lsn.saturating_sub(1) > upto_lsn {
            break;
        }
        io.remove(&file.path)
            .map_err(|e| FileError::new("removing the WAL file", &file.path, e))?;
        removed += 1;
    }
    if removed > 0 {
        io.sync_dir(dir)
            .map_err(|e| FileError::new("syncing the data directory", dir, e))?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort_numerically() {
        assert_eq!(wal_file_name(42), "wal-00000000000000000042.log");
        assert_eq!(
            parse_wal_file_name(&wal_file_name(u64::MAX)),
            Some(u64::MAX)
        );
        assert!(wal_file_name(9) < wal_file_name(10));
    }

    #[test]
    fn other_names_are_not_wal_files() {
        for name in [
            "wal-42.log",
            "wal-0000000000000000004x.log",
            "wal-00000000000000000042.log.tmp",
            "snapshot-00000000000000000042.snap",
            "wal-+0000000000000000042.log",
        ] {
            assert_eq!(parse_wal_file_name(name), None, "{name}");
        }
    }
}
