//! Writing a snapshot while the writer goes on: one segment at a time, each
//! copied consistently into a reused buffer, checksummed and appended; the
//! header last; then sync, make the WAL durable through the snapshot's LSN,
//! rename into place, sync the directory.
//!
//! **The WAL before the snapshot.** The copies may hold writes of batches
//! whose WAL records were written but not yet fsynced (under `never` and
//! `interval`, or the group being synced under `always`). Were the snapshot
//! durable and those records lost in a power cut, recovery could not roll
//! the snapshot back: some segments would hold a batch and others not. So
//! before the rename, the caller's `make_log_durable(lsn)` must fsync the
//! WAL through the snapshot's LSN, which is at least the LSN of every write
//! in any copy (the segments' stamps). Recovery then requires the log to
//! reach that LSN, and refuses a log that does not.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::format::{FORMAT_VERSION, Header, PAGE, PROLOGUE_LEN, SegmentEntry, prologue, trailer};
use super::snapshot_files::{list_snapshots, prune, snapshot_name, temp_name};
use crate::store::{
    FileError, Io, IoFile, SnapshotCorrupt, SnapshotLoadError, SnapshotWriteError, WalWriteError,
};
use uuidmap_index::Index;

/// How many snapshots [`write_snapshot`] keeps: the new one and the one
/// before it (a fallback should the newest turn out damaged).
const KEEP: usize = 2;

/// What [`write_snapshot`] wrote (or found already written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The snapshot file.
    pub path: std::path::PathBuf,
    /// Its LSN (in its name): the state it holds, once the log after
    /// `min_capture_lsn` is replayed, is at least the state at this LSN.
    pub lsn: u64,
    /// Log records after this LSN are needed to recover from it.
    pub min_capture_lsn: u64,
    /// Segments in it.
    pub segments: usize,
    /// Entries in it.
    pub entries: u64,
    /// File size in bytes.
    pub bytes: u64,
    /// Time taken (for an existing snapshot: to find and read its header).
    pub duration: Duration,
}

/// Writes a snapshot of `index` into the existing directory `dir` while the
/// index's writer goes on, and returns what was written. `applied_lsn`
/// returns the watermark of fully applied batches (loaded with `Acquire`);
/// the index's writer must stamp every write with its batch's LSN
/// ([`uuidmap_index::IndexWriter::set_stamp`]). See the module docs of `snapshot`
/// for why the result is exact.
///
/// The file is written as a `.tmp` file, synced, `make_log_durable(lsn)` is
/// called (it must fsync the WAL through the snapshot's LSN; see the module
/// docs), then the file is renamed into place and the directory synced:
/// once this returns `Ok`, the snapshot is durable. Then
/// every snapshot but the two newest (and the one just written, should an
/// older state be snapshotted into a directory holding newer ones), and every
/// leftover `.tmp` file, is removed (best effort).
///
/// If a snapshot with the LSN currently applied already exists, nothing
/// changed since it was written: no new file is written, and its info is
/// returned.
///
/// On an error the temporary file is removed (best effort) and every other
/// file is left as it was; the error names the file (and says so when the
/// disk is full). Only one snapshot may be written into a directory at a
/// time.
pub fn write_snapshot(
    io: &dyn Io,
    dir: &Path,
    index: &Index,
    applied_lsn: &dyn Fn() -> u64,
    make_log_durable: &dyn Fn(u64) -> Result<(), WalWriteError>,
) -> Result<SnapshotInfo, SnapshotWriteError> {
    let started = Instant::now();
    let existing = list_snapshots(io, dir)?;
    let applied = applied_lsn();
    if let Some((_, path)) = existing.iter().find(|&&(lsn, _)| lsn == applied) {
        // A damaged file of that name is simply replaced below.
        if let Ok(info) = existing_info(io, path, started) {
            prune(io, dir, KEEP, path);
            return Ok(info);
        }
    }
    let temp = dir.join(temp_name(applied));
    if io.file_len(&temp).is_ok() {
        // Debris of an interrupted write with the same name.
        io.remove(&temp)
            .map_err(|e| FileError::new("removing the leftover", &temp, e))?;
    }
    let (header, bytes) = match write_temp(io, &temp, index, applied_lsn) {
        Ok(written) => written,
        Err(e) => {
            let _ = io.remove(&temp);
            return Err(e.into());
        }
    };
    let path = dir.join(snapshot_name(header.lsn));
    if io.file_len(&path).is_ok() {
        // The same LSN was already written (the watermark did not move
        // between an earlier snapshot and this one): keep the existing file,
        // unless it is damaged, in which case the rename replaces it.
        if let Ok(info) = existing_info(io, &path, started) {
            let _ = io.remove(&temp);
            return Ok(info);
        }
    }
    if let Err(e) = make_log_durable(header.lsn) {
        let _ = io.remove(&temp);
        return Err(e.into());
    }
    if let Err(e) = io.rename(&temp, &path) {
        let _ = io.remove(&temp);
        return Err(FileError::new("renaming into place the snapshot", &path, e).into());
    }
    io.sync_dir(dir)
        .map_err(|e| FileError::new("syncing the directory of the new snapshot", dir, e))?;
    prune(io, dir, KEEP, &path);
    Ok(SnapshotInfo {
        path,
        lsn: header.lsn,
        min_capture_lsn: header.min_capture_lsn,
        segments: header.segments.len(),
        entries: header.entries,
        bytes,
        duration: started.elapsed(),
    })
}

/// The info of a snapshot already in place (its header only is checked).
fn existing_info(
    io: &dyn Io,
    path: &Path,
    started: Instant,
) -> Result<SnapshotInfo, SnapshotLoadError> {
    let map = io
        .map_private(path)
        .map_err(|e| FileError::new("opening the snapshot", path, e))?;
    let header = Header::parse_file(map.as_slice()).map_err(|e| SnapshotCorrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(SnapshotInfo {
        path: path.to_path_buf(),
        lsn: header.lsn,
        min_capture_lsn: header.min_capture_lsn,
        segments: header.segments.len(),
        entries: header.entries,
        bytes: map.len() as u64,
        duration: started.elapsed(),
    })
}

/// Writes and syncs the complete file at `temp`; returns its header and size.
fn write_temp(
    io: &dyn Io,
    temp: &Path,
    index: &Index,
    applied_lsn: &dyn Fn() -> u64,
) -> Result<(Header, u64), FileError> {
    let writing = |e| FileError::new("writing the snapshot", temp, e);
    let mut file = io
        .create(temp)
        .map_err(|e| FileError::new("creating the snapshot", temp, e))?;
    file.write_all(&prologue(FORMAT_VERSION)).map_err(writing)?;
    let count = index.segment_count();
    let mut segments = Vec::with_capacity(count);
    // One buffer for every segment: sized by the largest copy so far.
    let mut words: Vec<u64> = Vec::new();
    let mut offset = PROLOGUE_LEN;
    let mut entries = 0u64;
    let mut max_stamp = 0u64;
    for segment in 0..count {
        // Read the watermark BEFORE copying: every batch it covers was fully
        // applied before the copy began (see the module docs).
        let applied = applied_lsn();
        let image = index.copy_segment_raw(segment, &mut words);
        let capture_lsn = applied.max(image.stamp.saturating_sub(1));
        max_stamp = max_stamp.max(image.stamp);
        let bytes: &[u8] = bytemuck::cast_slice(&words);
        let aligned = offset.next_multiple_of(PAGE);
        write_zeros(&mut *file, aligned - offset).map_err(writing)?;
        file.write_all(bytes).map_err(writing)?;
        // The copy is the slots, then the tags: the array as version 2
        // stores it.
        let entry = SegmentEntry {
            offset: aligned,
            capacity: image.capacity as u64,
            len: image.len as u64,
            capture_lsn,
            generation: image.generation,
            crc: crate::store::crc32c(bytes),
            max_disp: Some(image.max_disp as u64),
        };
        debug_assert_eq!(entry.bytes(), bytes.len() as u64);
        segments.push(entry);
        offset = aligned + bytes.len() as u64;
        entries += image.len as u64;
    }
    let min_capture_lsn = segments.iter().map(|s| s.capture_lsn).min().unwrap_or(0);
    let max_capture_lsn = segments.iter().map(|s| s.capture_lsn).max().unwrap_or(0);
    let header = Header {
        version: FORMAT_VERSION,
        seeds: index.seeds(),
        fingerprint: index.hash_fingerprint(),
        // A copy can hold writes past the watermark (batches applied but
        // not yet published): the name covers every write in the file, so
        // that the WAL is made durable through it (module docs).
        lsn: applied_lsn().max(max_capture_lsn).max(max_stamp),
        min_capture_lsn,
        max_capture_lsn,
        created_unix_millis: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        entries,
        segments,
    };
    file.write_all(&header.encode()).map_err(writing)?;
    file.write_all(&trailer(offset)).map_err(writing)?;
    file.sync()
        .map_err(|e| FileError::new("syncing the snapshot", temp, e))?;
    Ok((header, file.len()))
}

/// Appends `n` (< one page) zero bytes.
fn write_zeros(file: &mut dyn IoFile, n: u64) -> std::io::Result<()> {
    static ZEROS: [u8; PAGE as usize] = [0; PAGE as usize];
    file.write_all(&ZEROS[..n as usize])
}
