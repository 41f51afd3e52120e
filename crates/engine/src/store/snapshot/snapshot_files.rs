//! Snapshot file names, listing, and retention.
//!
//! A snapshot is `snapshot-{lsn:020}.snap` (the LSN zero-padded to 20 digits,
//! so names sort like LSNs). It is written as `snapshot-{n:020}.snap.tmp`
//! (`n`: the applied LSN when writing began) and renamed into place once
//! complete and synced, so a name without `.tmp` always refers to a complete
//! file. Leftover `.tmp` files are debris of an interrupted write.

use std::path::{Path, PathBuf};

use crate::store::{FileError, Io};

const PREFIX: &str = "snapshot-";
const SUFFIX: &str = ".snap";
const TEMP_SUFFIX: &str = ".snap.tmp";
const DIGITS: usize = 20;

/// The name of the snapshot with LSN `lsn`.
pub(super) fn snapshot_name(lsn: u64) -> String {
    format!("{PREFIX}{lsn:020}{SUFFIX}")
}

/// Where the snapshot with LSN `lsn` lives in `dir`.
pub fn snapshot_path(dir: &Path, lsn: u64) -> PathBuf {
    dir.join(snapshot_name(lsn))
}

/// The name of the temporary file a snapshot is written to.
pub(super) fn temp_name(lsn: u64) -> String {
    format!("{PREFIX}{lsn:020}{TEMP_SUFFIX}")
}

/// The LSN in a snapshot's name, or `None` if `name` is not one (temporary
/// files included).
fn parse_snapshot_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    if digits.len() != DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `name` is a temporary snapshot file.
fn is_temp_name(name: &str) -> bool {
    name.starts_with(PREFIX) && name.ends_with(TEMP_SUFFIX)
}

/// Renames a snapshot proven damaged to `{name}.damaged`: kept for
/// inspection, no longer listed, never used again. The rename is not
/// synced: should a power cut undo it, the next start finds the file
/// damaged again.
pub fn set_aside_damaged(io: &dyn Io, path: &Path) -> std::io::Result<()> {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".damaged");
    io.rename(path, Path::new(&aside))?;
    tracing::error!(
        "set damaged snapshot {} aside as {}; it can be removed once inspected",
        path.display(),
        Path::new(&aside).display()
    );
    Ok(())
}

/// The snapshots in `dir` as `(lsn, path)`, newest (highest LSN) first.
/// Temporary files and other files are ignored.
pub fn list_snapshots(io: &dyn Io, dir: &Path) -> Result<Vec<(u64, PathBuf)>, FileError> {
    let names = io
        .list(dir)
        .map_err(|e| FileError::new("listing the snapshots in", dir, e))?;
    let mut found: Vec<(u64, PathBuf)> = names
        .iter()
        .filter_map(|n| parse_snapshot_name(n).map(|lsn| (lsn, dir.join(n))))
        .collect();
    found.sort_unstable_by_key(|&(lsn, _)| std::cmp::Reverse(lsn));
    Ok(found)
}

/// Removes every snapshot but the newest `keep` and `current`, and every
/// temporary snapshot file. Best effort: what cannot be removed is logged
/// and left (an extra old file costs disk space, never correctness).
pub(super) fn prune(io: &dyn Io, dir: &Path, keep: usize, current: &Path) {
    let names = match io.list(dir) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot list snapshots to remove old ones");
            return;
        }
    };
    let mut snapshots: Vec<(u64, &String)> = names
        .iter()
        .filter_map(|n| parse_snapshot_name(n).map(|lsn| (lsn, n)))
        .collect();
    snapshots.sort_unstable_by_key(|&(lsn, _)| std::cmp::Reverse(lsn));
    let old = snapshots.iter().skip(keep).map(|&(_, n)| n);
    let temps = names.iter().filter(|n| is_temp_name(n));
    for name in old.chain(temps) {
        let path = dir.join(name);
        if path == current {
            continue;
        }
        if let Err(e) = io.remove(&path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove an old snapshot file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort_like_lsns() {
        for lsn in [0, 1, 99, u64::MAX] {
            assert_eq!(parse_snapshot_name(&snapshot_name(lsn)), Some(lsn));
            assert_eq!(parse_snapshot_name(&temp_name(lsn)), None);
            assert!(is_temp_name(&temp_name(lsn)));
        }
        assert!(snapshot_name(9) < snapshot_name(10));
        for bad in [
            "snapshot-1.snap",
            "snapshot-0000000000000000000x.snap",
            "x.snap",
            "",
        ] {
            assert_eq!(parse_snapshot_name(bad), None, "{bad}");
        }
    }
}
