//! Recovery from the WAL: apply the records after a snapshot's LSN, in
//! order, and leave a log the writer can continue.
//!
//! Replay reads through [`WalCursor`] (the checks and the torn-tail rule are
//! documented there), then repairs the end of the log:
//!
//! - a **torn tail** is cut off (`Io::truncate`, durable), with a warning
//!   naming the file, the offset and the bytes dropped;
//! - **corruption** stops recovery with [`WalReadError::Corrupt`], unless
//!   the operator asked for `truncate_corrupt`: then the log is cut at the
//!   bad record, every later WAL file is removed, an error-level line says
//!   what was discarded, and replay ends there;
//! - a last file that is left holding no record is removed, so that the
//!   writer can create the file it needs (its name is the next LSN, which is
//!   often the same name).
//!
//! Afterwards the files hold consecutive records up to
//! [`ReplayOutcome::next_lsn`]` - 1` (or fewer, if a snapshot covers the
//! rest), and a writer may start at `next_lsn`.

use std::path::Path;

use super::reader::WalCursor;
use super::record::{HEADER_LEN, SyncedEnd, check_header, decode_record, encode_synced_end};
use super::wal_files::WalFile;
use crate::store::{FileError, Io, Op, WalCorrupt, WalReadError};

/// How replay treats corruption.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Cut the log at a corrupt record, or at the end of a file that lost
    /// its last records (losing everything after it), instead of refusing
    /// to start (the repair).
    pub truncate_corrupt: bool,
    /// Change no file: report the torn tail or the cut that would be made
    /// (the outcome says so) and replay up to it.
    pub read_only: bool,
    /// Records up to this LSN are known synced (a snapshot's LSN): damage to
    /// one is corruption, never a torn tail. 0 says nothing.
    pub synced_through: u64,
}

/// What replay found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// The first LSN applied, if any.
    pub first_lsn_seen: Option<u64>,
    /// The last LSN applied, if any.
    pub last_lsn: Option<u64>,
    /// The last LSN left in the log, applied or skipped (`None` when the log
    /// holds no record at all).
    pub log_end: Option<u64>,
    /// Records applied.
    pub records: u64,
    /// Bytes of the records applied.
    pub bytes: u64,
    /// The LSN a writer continues at: one past the larger of `after_lsn` and
    /// the last LSN left in the log.
    pub next_lsn: u64,
    /// Bytes cut off as a torn tail.
    pub torn_bytes: u64,
    /// Bytes discarded because of corruption (`truncate_corrupt`).
    pub discarded_bytes: u64,
    /// The cut made (or, read-only, that would be made) because of
    /// corruption or a gap: where, why, and what was lost.
    pub cut: Option<WalCut>,
}

/// A cut of the log at damage (`truncate_corrupt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalCut {
    /// The file cut (or, for a gap, the first file removed).
    pub path: std::path::PathBuf,
    /// The byte offset of the cut in it.
    pub offset: u64,
    /// What was wrong there.
    pub reason: String,
    /// The first LSN lost.
    pub first_lsn_lost: u64,
    /// Bytes removed.
    pub bytes: u64,
    /// Whole records that could still be read after the damage (in the
    /// later files), all lost: acknowledged batches the cut discards.
    pub readable_records_lost: u64,
    /// The highest LSN among them.
    pub last_readable_lsn: Option<u64>,
}

/// Calls `apply(lsn, ops)` for every record with LSN `> after_lsn`, in
/// order, across all WAL files in `dir`, then repairs the end of the log
/// (module docs).
///
/// Errors: [`WalReadError::Gap`] if the log does not continue at
/// `after_lsn + 1` (or has a hole between files after it);
/// [`WalReadError::Corrupt`] for corruption without `truncate_corrupt`;
/// [`WalReadError::Io`].
pub fn replay(
    io: &dyn Io,
    dir: &Path,
    after_lsn: u64,
    options: &ReplayOptions,
    mut apply: impl FnMut(u64, &[Op]),
) -> Result<ReplayOutcome, WalReadError> {
    let mut cursor =
        WalCursor::open(io, dir, after_lsn + 1)?.synced_through(options.synced_through);
    let mut outcome = ReplayOutcome::default();
    // For a gap: the first LSN missing (no record before it may have been
    // read, when the file before the gap lost all of its records).
    let mut gap_from = None;
    let damage = loop {
        match cursor.next_record() {
            Ok(Some(rec)) => {
                apply(rec.lsn, rec.ops);
                outcome.first_lsn_seen.get_or_insert(rec.lsn);
                outcome.last_lsn = Some(rec.lsn);
                outcome.records += 1;
                outcome.bytes += rec.len;
            }
            Ok(None) => break None,
            Err(WalReadError::Corrupt(WalCorrupt {
                path,
                offset,
                reason,
            })) if options.truncate_corrupt => break Some((path, offset, reason)),
            Err(WalReadError::Gap {
                expected,
                found,
                ends_early: Some(early),
                next_file,
                ..
            }) if options.truncate_corrupt => {
                let reason = format!(
                    "{} ends before LSN {expected}, and {} starts at LSN {found}",
                    early.display(),
                    next_file.display()
                );
                gap_from = Some(expected);
                break Some((next_file, 0, reason));
            }
            Err(e) => return Err(e),
        }
    };
    let files = cursor.files().to_vec();
    outcome.log_end = cursor.last_lsn_seen();
    outcome.next_lsn = after_lsn.max(outcome.log_end.unwrap_or(0)) + 1;

    let zeros = cursor.unwritten_tail().cloned();
    if let Some(torn) = cursor.torn_tail() {
        outcome.torn_bytes = torn.file_len - torn.offset;
        tracing::warn!(
            file = %torn.path.display(),
            offset = torn.offset,
            bytes_dropped = outcome.torn_bytes,
            "the WAL ends in a torn write (bytes written after the last fsync, never \
             acknowledged as durable); {}",
            if options.read_only { "a start will cut them off" } else { "cutting them off" }
        );
        if !options.read_only {
            cut(io, dir, &torn.path, torn.offset)?;
        }
    } else if let Some((path, offset, reason)) = damage {
        let at = files
            .iter()
            .position(|f| f.path == path)
            .expect("the damaged file is one of the listed files");
        let first_lost = gap_from.unwrap_or_else(|| {
            cursor
                .last_lsn_seen()
                .map_or(files[at].first_lsn, |l| l + 1)
        });
        let wal_cut = discard_from(io, dir, &files, at, offset, first_lost, reason, options)?;
        outcome.discarded_bytes = wal_cut.bytes;
        outcome.cut = Some(wal_cut);
    } else if let Some(last) = files.last()
        && cursor.position().1 == 0
        && !options.read_only
    {
        // The newest file holds no record (the process stopped right after
        // creating it): remove it so the writer can create it again.
        remove(io, last)?;
        sync_dir(io, dir)?;
    } else if let Some(zeros) = zeros
        && !options.read_only
    {
        // The unwritten rest of a preallocated file: only the newest file
        // may end in zeros, and this one is about to stop being it.
        tracing::debug!(
            file = %zeros.path.display(),
            offset = zeros.offset,
            "cutting the unwritten, zero-filled rest of the last WAL file"
        );
        cut(io, dir, &zeros.path, zeros.offset)?;
    }
    Ok(outcome)
}

/// Bytes of one put in a record (tag, key, value: `record.rs`). Only puts
/// add entries, so WAL bytes divided by this bound the entries a replay
/// adds.
const PUT_BYTES: u64 = 1 + 16 + 16;

/// The most entries that replaying the WAL after `after_lsn` can add, from
/// the files' sizes (nothing is read but a few pages of the newest file, to
/// find where its records end if it is preallocated, and the header of the
/// first file needed): every byte past a header counted as part of a put.
/// Files wholly at or below `after_lsn` (the next file starts at or before
/// `after_lsn + 1`) are left out; in the first file needed, the records its
/// header vouches for are left out too when they are all at or below
/// `after_lsn` (a clean stop vouches for the whole file); otherwise it is
/// counted whole, so the bound may exceed the truth by one file.
/// A file whose size cannot be read counts as empty (replay reports the
/// error).
pub fn estimate_puts(io: &dyn Io, dir: &Path, after_lsn: u64) -> Result<u64, FileError> {
    let files = super::wal_files::list_wal_files(io, dir)?;
    let mut bytes = 0u64;
    for (i, file) in files.iter().enumerate() {
        if files
            .get(i + 1)
            .is_some_and(|next| next.first_lsn <= after_lsn + 1)
        {
            continue;
        }
        let mut len = io.file_len(&file.path).unwrap_or(0);
        if i + 1 == files.len() {
            // The newest file may be preallocated: count its records only.
            len = super::spare::records_end(io, &file.path, len).unwrap_or(len);
        }
        // The first file needed may start with records the snapshot holds
        // (after a clean stop, all of them): its header says where the
        // records it vouches for end, and if they are all at or below
        // `after_lsn` they add nothing. Otherwise it counts whole.
        let mut start = HEADER_LEN as u64;
        if file.first_lsn <= after_lsn
            && let Ok(header) = io.read_at(&file.path, 0, HEADER_LEN)
            && let Ok(vouched) = super::record::read_synced_end(&header)
            && vouched.lsn <= after_lsn
        {
            start = start.max(vouched.offset);
        }
        bytes += len.saturating_sub(start);
    }
    Ok(bytes / PUT_BYTES)
}

/// Cuts `path` at `offset`, durably; removes it instead if no record would
/// remain.
fn cut(io: &dyn Io, dir: &Path, path: &Path, offset: u64) -> Result<(), FileError> {
    if offset <= HEADER_LEN as u64 {
        // No record would remain (or, for a gap, the whole file goes).
        io.remove(path)
            .map_err(|e| FileError::new("removing the WAL file", path, e))?;
        sync_dir(io, dir)
    } else {
        io.truncate(path, offset)
            .map_err(|e| FileError::new("truncating the WAL file", path, e))
    }
}

/// Cuts `path` at `offset` like [`cut`], and makes its header vouch for
/// exactly what is left (records up to `last_lsn`): the slots may vouch for
/// more, written when the file held more, and would make the next start
/// refuse the repaired file. Rewritten as a new file renamed into place, so
/// a crash leaves the old file or the new one.
pub(super) fn cut_and_vouch(
    io: &dyn Io,
    dir: &Path,
    path: &Path,
    offset: u64,
    last_lsn: u64,
) -> Result<(), FileError> {
    if offset <= HEADER_LEN as u64 {
        return cut(io, dir, path, offset);
    }
    let mut data = io
        .read(path)
        .map_err(|e| FileError::new("reading the WAL file", path, e))?;
    data.truncate(offset as usize);
    let end = SyncedEnd {
        lsn: last_lsn,
        offset,
    };
    for slot in 0..2 {
        let (at, bytes) = encode_synced_end(slot, end);
        data[at as usize..at as usize + bytes.len()].copy_from_slice(&bytes);
    }
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = std::path::PathBuf::from(temp);
    if io.file_len(&temp).is_ok() {
        io.remove(&temp)
            .map_err(|e| FileError::new("removing the leftover", &temp, e))?;
    }
    let mut file = io
        .create(&temp)
        .map_err(|e| FileError::new("creating the repaired WAL file", &temp, e))?;
    file.write_all(&data)
        .and_then(|()| file.sync())
        .map_err(|e| FileError::new("writing the repaired WAL file", &temp, e))?;
    io.rename(&temp, path)
        .map_err(|e| FileError::new("renaming into place the repaired WAL file", path, e))?;
    sync_dir(io, dir)
}

/// The `truncate_corrupt` repair: removes the files after `files[at]`
/// (newest first, so an interruption leaves a contiguous log), cuts
/// `files[at]` at `offset`, and logs what was lost. Read-only, it only
/// reports what it would do.
#[allow(clippy::too_many_arguments)]
fn discard_from(
    io: &dyn Io,
    dir: &Path,
    files: &[WalFile],
    at: usize,
    offset: u64,
    first_lost: u64,
    reason: String,
    options: &ReplayOptions,
) -> Result<WalCut, FileError> {
    let file = &files[at];
    let len = io
        .file_len(&file.path)
        .map_err(|e| FileError::new("reading the WAL file", &file.path, e))?;
    let mut bytes = len.saturating_sub(offset);
    let mut readable = 0;
    let mut last_readable = None;
    for later in files[at + 1..].iter().rev() {
        let data = io
            .read(&later.path)
            .map_err(|e| FileError::new("reading the WAL file", &later.path, e))?;
        bytes += data.len() as u64;
        let (n, last) = count_readable(&data, later.first_lsn);
        readable += n;
        last_readable = last_readable.max(last);
        if !options.read_only {
            remove(io, later)?;
        }
    }
    if !options.read_only {
        if at + 1 < files.len() {
            sync_dir(io, dir)?;
        }
        // A Raft log starts at LSN 0: a damaged first record leaves no
        // good one to vouch for, and is cut with the header alone.
        cut_and_vouch(io, dir, &file.path, offset, first_lost.saturating_sub(1))?;
        tracing::error!(
            file = %file.path.display(),
            offset,
            reason,
            bytes_discarded = bytes,
            first_lsn_lost = first_lost,
            later_files_removed = files.len() - at - 1,
            readable_records_in_removed_files = readable,
            "repair: the WAL is damaged; cut the log there: every record from LSN \
             {first_lost} on is lost ({bytes} bytes, including {readable} readable records in \
             the later files)"
        );
    }
    Ok(WalCut {
        path: file.path.clone(),
        offset,
        reason,
        first_lsn_lost: first_lost,
        bytes,
        readable_records_lost: readable,
        last_readable_lsn: last_readable,
    })
}

/// How many records at the start of a file's bytes decode cleanly, and the
/// last one's LSN (for the report of what `truncate_corrupt` discards).
fn count_readable(data: &[u8], first_lsn: u64) -> (u64, Option<u64>) {
    let Ok(format) = check_header(data, first_lsn) else {
        return (0, None);
    };
    let mut ops = Vec::new();
    let (mut offset, mut n, mut last) = (HEADER_LEN, 0, None);
    while offset < data.len() {
        match decode_record(&data[offset..], format, &mut ops) {
            Ok(rec) => {
                offset += rec.len as usize;
                n += 1;
                last = Some(rec.lsn);
            }
            Err(_) => break,
        }
    }
    (n, last)
}

fn remove(io: &dyn Io, file: &WalFile) -> Result<(), FileError> {
    io.remove(&file.path)
        .map_err(|e| FileError::new("removing the WAL file", &file.path, e))
}

fn sync_dir(io: &dyn Io, dir: &Path) -> Result<(), FileError> {
    io.sync_dir(dir)
        .map_err(|e| FileError::new("syncing the data directory", dir, e))
}
