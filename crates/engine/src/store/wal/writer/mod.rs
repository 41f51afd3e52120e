//! `WalWriter`: appends records to the WAL in groups, owned by the writer
//! thread (single-threaded, `&mut self` everywhere).
//!
//! # Protocol
//!
//! The writer thread `append`s the batches of one group (each encoded into a
//! pending buffer under the next LSN), then `commit`s the group: one
//! `write_all` of the whole buffer, then one fsync if the group must be
//! durable. Only after `commit` returns `Ok` may the batches be applied and
//! acknowledged.
//!
//! # Invariants
//!
//! - **The file holds only whole committed groups, as far as this process
//!   knows.** A failed write (a full disk) rolls the file back to its length
//!   before the group (`set_len` + fsync) and forgets the group's records
//!   and LSNs: the next `append` reuses them. If the rollback's `set_len`
//!   fails too, every later `commit` and `sync` first retries the rollback
//!   and fails until it succeeds, so nothing is ever written after a partial
//!   group, and writes resume by themselves once the disk has room again.
//! - **A failed fsync is fatal.** Linux may drop the dirty pages of a failed
//!   fsync and mark them clean, so a later fsync that succeeds proves
//!   nothing. After one, the writer is *failed* for good: every later call
//!   returns [`WalWriteError::Failed`], nothing more is acknowledged, and
//!   the process must restart and recover from what is really on disk.
//! - **The header vouches for the synced end.** Before each fsync the
//!   writer records, in one of the header's two synced-end slots
//!   (alternately, so a torn slot write leaves the other), the end of the
//!   log as of the *previous* fsync, which is durable already; the fsync
//!   then makes the slot durable with the new records. (Vouching for the
//!   records of the same fsync would be wrong: after a power loss in its
//!   middle, the slot could land without them.) [`WalWriter::vouch`]
//!   catches the slot up with a fsync of its own when the writer is idle.
//!   Recovery refuses a file that lost anything the header vouches for.
//! - **Never append to a file of an earlier run.** `create` starts a new
//!   file at the next LSN; replay has already cut the old files' tails.
//! - **A new file is used only once durable**: written as `….log.tmp` (or
//!   the zero-filled spare, see `spare`), header fsynced, renamed into
//!   place, directory fsynced; so a file with a WAL name always has its
//!   whole header. Before the switch the previous file is fsynced, so a
//!   later `sync` of the new file covers everything written before it.
//! - **Records go at `end`, which may be short of the file's length**: a
//!   file made from a spare is zeros past its records (readers take zeros
//!   after the last record as the end of the log, `reader`). Before the
//!   writer leaves a file it cuts the zeros off (`set_len` + fsync), so
//!   only the newest file ever has them; recovery cuts them from that one.
//!   A rollback is a cut too, zeros and all.
//! - A file not made from a spare (the first one in a new directory, or
//!   when no spare was ready) is left for one that is as soon as a spare
//!   is ready, whatever its size.
//! - **At most one fsync is in flight, and it vouches like any other.**
//!   Under load the pipeline overlaps the fsync of one group with writing
//!   the next: [`WalWriter::start_sync`] writes the synced-end slot and
//!   notes what the fsync will cover (the log's end as of that moment),
//!   a sync thread runs it, and [`WalWriter::finish_sync`] records its
//!   result exactly as an inline fsync would. While it runs the writer may
//!   only write records (`commit(false)`): whatever would fsync or cut the
//!   file (a rotation, a rollback, `sync`, `vouch`) waits until it is
//!   finished.
//! - Rotation happens after a commit that brings the file to
//!   `segment_bytes`. If it fails, the commit still succeeded (its records
//!   are in the old file); the next commit retries the rotation before
//!   writing, and fails (writing nothing) if it fails again.

use std::path::{Path, PathBuf};
use std::sync::Arc;

mod raft_log;

use super::record::{
    EntryHead, HEADER_LEN, RECORD_OVERHEAD, SyncedEnd, WalFormat, check_header, decode_record,
    empty_synced_end, encode_entry, encode_header, encode_record, encode_synced_end,
};
use super::spare::{Preallocate, Spares, all_zero};
use super::wal_files::wal_file_name;
use crate::store::{FileError, FileSync, Io, IoFile, Op, WalWriteError};

/// Tuning of the WAL writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalOptions {
    /// Start a new file once the current one reaches this many bytes
    /// (default 64 MiB). A group is never split, so files can exceed it.
    pub segment_bytes: u64,
    /// Whether new files come from a zero-filled spare (`spare`).
    pub preallocate: Preallocate,
    /// The record format of the files it writes: a single node's (the
    /// default) or a replica group's Raft log.
    pub format: WalFormat,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_bytes: 64 << 20,
            preallocate: Preallocate::default(),
            format: WalFormat::default(),
        }
    }
}

/// What a fsync run by another thread covers ([`WalWriter::start_sync`]).
#[derive(Clone, Copy, Debug)]
struct InFlightSync {
    /// The log's end when it started: durable once it succeeds.
    target: SyncedEnd,
    /// Whether it carries a newly written synced-end slot.
    wrote_slot: bool,
}

/// The appending end of the WAL.
pub struct WalWriter {
    /// The file system.
    io: Arc<dyn Io>,
    /// The data directory.
    dir: PathBuf,
    /// Tuning.
    options: WalOptions,
    /// The file being appended to.
    file: Box<dyn IoFile>,
    /// Its path.
    path: PathBuf,
    /// Where the next group goes in `file`: the end of its records.
    end: u64,
    /// Whether `file` was made from a spare (zero-filled ahead).
    preallocated: bool,
    /// The zero-filled file the next WAL file is made from.
    spares: Spares,
    /// Encoded records appended but not yet committed.
    pending: Vec<u8>,
    /// The LSN after the last committed record: the first pending record's.
    committed_next: u64,
    /// The LSN the next `append` must use.
    next_lsn: u64,
    /// Bytes committed by this writer (headers included).
    total_bytes: u64,
    /// Whether the file has bytes written since its last fsync.
    unsynced: bool,
    /// Broken: the length the file must be rolled back to before anything
    /// else is written.
    rollback_to: Option<u64>,
    /// A rotation failed after a commit; retry it before the next write.
    rotate_pending: bool,
    /// The end of the log in `file` as of its last successful fsync.
    synced: SyncedEnd,
    /// What `file`'s header vouches for (once its next fsync lands).
    vouched: SyncedEnd,
    /// The header slot the next vouch goes to (0 or 1).
    next_slot: usize,
    /// Set by a failed fsync: why the writer accepts nothing more.
    failed: Option<String>,
    /// The fsync started by `start_sync` and not yet finished.
    in_flight: Option<InFlightSync>,
    /// A sync-only handle on `file`, made on first use.
    syncer: Option<Arc<dyn FileSync>>,
    /// Time spent in record writes and in fsyncs (slot writes included),
    /// nanoseconds since creation.
    write_ns: u64,
    sync_ns: u64,
}

impl WalWriter {
    /// Starts a new file `wal-{next_lsn}.log` in `dir` (created, header
    /// written and fsynced, directory fsynced). Never appends to an old
    /// file; an existing file of that name is replaced only if it holds no
    /// record (left by a failed rotation or an empty tail).
    pub fn create(
        io: Arc<dyn Io>,
        dir: &Path,
        next_lsn: u64,
        options: WalOptions,
    ) -> Result<WalWriter, WalWriteError> {
        let mut spares = Spares::new(io.clone(), dir, options.segment_bytes, options.preallocate);
        let (file, path, preallocated) =
            start_file(&*io, dir, next_lsn, options.format, spares.take())?;
        spares.replenish();
        let empty = empty_synced_end(next_lsn);
        Ok(WalWriter {
            io,
            dir: dir.to_path_buf(),
            options,
            file,
            path,
            end: HEADER_LEN as u64,
            preallocated,
            spares,
            pending: Vec::new(),
            committed_next: next_lsn,
            next_lsn,
            total_bytes: HEADER_LEN as u64,
            unsynced: false,
            rollback_to: None,
            rotate_pending: false,
            synced: empty,
            vouched: empty,
            next_slot: 0,
            failed: None,
            in_flight: None,
            syncer: None,
            write_ns: 0,
            sync_ns: 0,
        })
    }

    /// Encodes one batch into the pending group under `lsn`, which must be
    /// [`WalWriter::next_lsn`].
    ///
    /// # Panics
    /// If `ops` has more than [`super::MAX_BATCH_OPS`] ops.
    /// In a Raft log ([`WalFormat::Raft`]) it is a normal entry of term 0,
    /// which only tests write: members use [`WalWriter::append_entry`].
    pub fn append(&mut self, lsn: u64, ops: &[Op]) {
        debug_assert_eq!(lsn, self.next_lsn, "WAL records must have consecutive LSNs");
        match self.options.format {
            WalFormat::Single => encode_record(&mut self.pending, lsn, ops),
            WalFormat::Raft => {
                let mut body = Vec::new();
                crate::store::op_bytes::encode_ops(&mut body, ops);
                encode_entry(
                    &mut self.pending,
                    lsn,
                    EntryHead::default(),
                    ops.len() as u32,
                    &body,
                );
            }
        }
        self.next_lsn += 1;
    }

    /// Writes the pending group with one `write_all`, then fsyncs if `sync`
    /// (also making earlier unsynced groups durable). Rotates to a new file
    /// if this one reached `segment_bytes`.
    ///
    /// On error the file is rolled back to its length before the group, the
    /// group's records and LSNs are forgotten (the next `append` reuses
    /// them), and the error names the file. See the module docs for a
    /// failed rollback.
    pub fn commit(&mut self, sync: bool) -> Result<(), WalWriteError> {
        if let Err(e) = self.recover() {
            self.forget_pending();
            return Err(e);
        }
        if self.pending.is_empty() {
            return if sync { self.sync() } else { Ok(()) };
        }
        let start = self.end;
        let writing = std::time::Instant::now();
        let written = self.file.write_at(start, &self.pending);
        self.write_ns += writing.elapsed().as_nanos() as u64;
        if let Err(e) = written {
            let e: WalWriteError = FileError::new("writing the WAL file", &self.path, e).into();
            self.forget_pending();
            if self.in_flight.is_some() {
                // The cut would fsync: it waits for the fsync in flight
                // (`recover`, before anything else is written or synced).
                self.rollback_to = Some(start);
                return Err(e);
            }
            if let Err(rollback) = self.roll_back(start) {
                tracing::warn!(
                    file = %self.path.display(),
                    offset = start,
                    error = %rollback,
                    "could not roll the WAL back after a failed write; writes fail until it can"
                );
                if self.failed.is_none() {
                    self.rollback_to = Some(start);
                }
            }
            return Err(e);
        }
        self.total_bytes += self.pending.len() as u64;
        self.end += self.pending.len() as u64;
        self.pending.clear();
        self.committed_next = self.next_lsn;
        self.unsynced = true;
        if sync {
            self.fsync()?;
        }
        // A file not made from a spare (the first in a new directory) is
        // left as soon as a spare is ready.
        let full =
            self.end >= self.options.segment_bytes || (!self.preallocated && self.spares.ready());
        if full && self.in_flight.is_some() {
            // A rotation fsyncs and switches files: after the fsync in
            // flight (`recover`).
            self.rotate_pending = true;
        } else if full && let Err(e) = self.rotate() {
            if self.failed.is_some() {
                return Err(e);
            }
            tracing::warn!(
                file = %self.path.display(),
                error = %e,
                "could not start the next WAL file; retrying before the next write"
            );
            self.rotate_pending = true;
        }
        Ok(())
    }

    /// Fsyncs the current file without writing (the `interval` sync
    /// policy, and before a snapshot is published). Earlier files were
    /// fsynced when the writer left them.
    pub fn sync(&mut self) -> Result<(), WalWriteError> {
        self.check_failed()?;
        self.check_no_sync_in_flight()?;
        if let Some(len) = self.rollback_to {
            self.roll_back(len)?;
        }
        if !self.unsynced {
            return Ok(());
        }
        self.fsync()
    }

    /// Makes the header vouch for everything synced so far (one fsync, only
    /// if it does not already): the writer calls it when idle, so that a
    /// quiet log is vouched for to its end.
    pub fn vouch(&mut self) -> Result<(), WalWriteError> {
        self.sync()?;
        if self.vouched == self.synced {
            return Ok(());
        }
        self.fsync()
    }

    /// Starts a fsync of everything committed so far, to be run by another
    /// thread on the returned handle while this writer goes on writing
    /// records; [`WalWriter::finish_sync`] takes its result. Writes the
    /// synced-end slot first, as an inline fsync does. `None` when nothing
    /// is unsynced (a rollback still pending is done here, inline, and its
    /// fsync covers everything).
    pub fn start_sync(&mut self) -> Result<Option<Arc<dyn FileSync>>, WalWriteError> {
        self.check_failed()?;
        self.check_no_sync_in_flight()?;
        if let Some(len) = self.rollback_to {
            self.roll_back(len)?;
        }
        if !self.unsynced {
            return Ok(None);
        }
        let syncer = match &self.syncer {
            Some(s) => s.clone(),
            None => {
                let made = self.file.syncer().map_err(|e| {
                    FileError::new("opening the WAL file for syncing", &self.path, e)
                })?;
                self.syncer.insert(made).clone()
            }
        };
        let vouch = self.synced;
        let wrote_slot = vouch != self.vouched;
        if wrote_slot {
            let (at, bytes) = encode_synced_end(self.next_slot, vouch);
            if let Err(e) = self.file.write_at(at, &bytes) {
                return Err(self.fail("writing the synced end into the WAL file's header", e));
            }
        }
        self.in_flight = Some(InFlightSync {
            target: SyncedEnd {
                lsn: self.committed_next.saturating_sub(1),
                offset: self.end,
            },
            wrote_slot,
        });
        self.unsynced = false;
        Ok(Some(syncer))
    }

    /// Records the result of the fsync [`WalWriter::start_sync`] started,
    /// which took `nanos`: on success what it covered is synced (and the
    /// slot it carried vouched for); a failure fails the writer for good.
    pub fn finish_sync(
        &mut self,
        result: std::io::Result<()>,
        nanos: u64,
    ) -> Result<(), WalWriteError> {
        let Some(done) = self.in_flight.take() else {
            debug_assert!(false, "finish_sync without a sync in flight");
            return Ok(());
        };
        self.sync_ns += nanos;
        if let Err(e) = result {
            self.unsynced = true;
            return Err(self.fail("fsyncing the WAL file", e));
        }
        if done.wrote_slot {
            self.vouched = self.synced;
            self.next_slot ^= 1;
        }
        self.synced = done.target;
        self.unsynced = self.end != done.target.offset;
        Ok(())
    }

    /// Whether a fsync started by [`WalWriter::start_sync`] is unfinished.
    pub fn sync_in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Refuses what would fsync or cut the file while a fsync runs
    /// elsewhere (a caller's bug, reported rather than risked).
    fn check_no_sync_in_flight(&self) -> Result<(), WalWriteError> {
        if self.in_flight.is_none() {
            return Ok(());
        }
        debug_assert!(false, "an inline WAL sync while another is in flight");
        Err(FileError::new(
            "syncing the WAL file",
            &self.path,
            std::io::Error::other("another fsync of it is still in flight"),
        )
        .into())
    }

    /// The LSN up to which every committed record is durable.
    pub fn synced_lsn(&self) -> u64 {
        self.synced.lsn
    }

    /// Whether a failed fsync ended this writer (see the module docs).
    pub fn is_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Time spent writing records and syncing (slot writes included),
    /// nanoseconds since creation: the pipeline's per-step figures.
    pub fn io_nanos(&self) -> (u64, u64) {
        (self.write_ns, self.sync_ns)
    }

    /// Writes the header slot for the previous synced end (if it moved),
    /// then fsyncs. Any failure fails the writer for good.
    fn fsync(&mut self) -> Result<(), WalWriteError> {
        self.check_failed()?;
        self.check_no_sync_in_flight()?;
        let syncing = std::time::Instant::now();
        let synced = self.write_slot_and_sync();
        self.sync_ns += syncing.elapsed().as_nanos() as u64;
        synced
    }

    fn write_slot_and_sync(&mut self) -> Result<(), WalWriteError> {
        let vouch = self.synced;
        if vouch != self.vouched {
            let (at, bytes) = encode_synced_end(self.next_slot, vouch);
            if let Err(e) = self.file.write_at(at, &bytes) {
                return Err(self.fail("writing the synced end into the WAL file's header", e));
            }
        }
        if let Err(e) = self.file.sync() {
            return Err(self.fail("fsyncing the WAL file", e));
        }
        if vouch != self.vouched {
            self.vouched = vouch;
            self.next_slot ^= 1;
        }
        self.synced = SyncedEnd {
            lsn: self.committed_next.saturating_sub(1),
            offset: self.end,
        };
        self.unsynced = false;
        Ok(())
    }

    /// Fails the writer for good (module docs) and returns the error.
    fn fail(&mut self, action: &'static str, e: std::io::Error) -> WalWriteError {
        let cause = FileError::new(action, &self.path, e).to_string();
        tracing::error!(
            file = %self.path.display(),
            "{cause}: the WAL accepts no more writes (a failed fsync may have dropped them \
             silently); restart to recover from what is on disk"
        );
        self.failed = Some(cause);
        self.check_failed().expect_err("just failed")
    }

    fn check_failed(&self) -> Result<(), WalWriteError> {
        match &self.failed {
            None => Ok(()),
            Some(cause) => Err(WalWriteError::Failed {
                path: self.path.clone(),
                cause: cause.clone(),
            }),
        }
    }

    /// The LSN the next `append` must use.
    pub fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// Bytes committed by this writer since it was created, file headers
    /// included (for snapshot triggers and metrics).
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// The file being appended to.
    pub fn current_path(&self) -> &Path {
        &self.path
    }

    /// Finishes what an earlier failure left to do before anything is
    /// written: the rollback, then the rotation.
    fn recover(&mut self) -> Result<(), WalWriteError> {
        self.check_failed()?;
        if self.in_flight.is_some() {
            // The cut and the switch fsync: they wait for the fsync in
            // flight, and nothing is written after an uncut failed group.
            return match self.rollback_to {
                Some(_) => Err(FileError::new(
                    "writing the WAL file",
                    &self.path,
                    std::io::Error::other("a failed write is not yet rolled back"),
                )
                .into()),
                None => Ok(()),
            };
        }
        if let Some(len) = self.rollback_to {
            self.roll_back(len)?;
        }
        if self.rotate_pending {
            self.rotate()?;
        }
        Ok(())
    }

    /// Cuts the file back to `len` bytes, durably; clears the broken state.
    fn roll_back(&mut self, len: u64) -> Result<(), WalWriteError> {
        self.file
            .set_len(len)
            .map_err(|e| FileError::new("rolling back the WAL file", &self.path, e))?;
        self.end = len;
        self.rollback_to = None;
        // Under `never`, earlier groups may be unsynced too: this fsync
        // covers them, and a failure here is as fatal as any.
        self.unsynced = true;
        self.fsync()
    }

    /// Fsyncs the current file and switches to a new one starting at the
    /// first uncommitted LSN.
    fn rotate(&mut self) -> Result<(), WalWriteError> {
        self.check_failed()?;
        if self.unsynced {
            self.fsync()?;
        }
        if self.file.len() > self.end {
            // Only the newest file may end in zeros (module docs).
            self.file
                .set_len(self.end)
                .map_err(|e| FileError::new("cutting the zeros off the WAL file", &self.path, e))?;
            if let Err(e) = self.file.sync() {
                return Err(self.fail("fsyncing the WAL file", e));
            }
        }
        self.start_next_file()
    }

    /// Switches to a new file starting at `committed_next` (the previous
    /// one synced and left as the callers require).
    fn start_next_file(&mut self) -> Result<(), WalWriteError> {
        let (file, path, preallocated) = start_file(
            &*self.io,
            &self.dir,
            self.committed_next,
            self.options.format,
            self.spares.take(),
        )?;
        self.spares.replenish();
        self.file = file;
        self.syncer = None;
        self.path = path;
        self.preallocated = preallocated;
        self.end = HEADER_LEN as u64;
        self.total_bytes += HEADER_LEN as u64;
        self.rotate_pending = false;
        self.synced = empty_synced_end(self.committed_next);
        self.vouched = self.synced;
        self.next_slot = 0;
        Ok(())
    }

    fn forget_pending(&mut self) {
        self.pending.clear();
        self.next_lsn = self.committed_next;
    }
}

/// Creates `wal-{first_lsn}.log` durably: written as `….log.tmp` (or made
/// from `spare`), header fsynced, renamed into place, directory fsynced, so
/// that a file with a WAL name always has its whole header. An existing
/// file of that name is replaced only if it holds no record. On failure,
/// removes what it created (best effort: a leftover `.tmp` is replaced by
/// the next attempt and ignored by readers). Also returns whether the file
/// was made from the spare.
fn start_file(
    io: &dyn Io,
    dir: &Path,
    first_lsn: u64,
    format: WalFormat,
    spare: Option<PathBuf>,
) -> Result<(Box<dyn IoFile>, PathBuf, bool), FileError> {
    let path = dir.join(wal_file_name(first_lsn));
    if let Ok(len) = io.file_len(&path)
        && len > HEADER_LEN as u64
        && !io
            .read_at(&path, HEADER_LEN as u64, RECORD_OVERHEAD)
            .is_ok_and(|first| all_zero(&first))
    {
        // A record in it would be an LSN we are about to reuse.
        return Err(FileError::new(
            "creating the WAL file (one of that name already holds records)",
            &path,
            std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        ));
    }
    if let Some(spare) = spare {
        match from_spare(io, dir, &spare, &path, first_lsn, format) {
            Ok(file) => return Ok((file, path, true)),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "could not make the next WAL file from the spare; creating one instead"
                );
                let _ = io.remove(&spare);
            }
        }
    }
    let mut temp = path.clone().into_os_string();
    temp.push(".tmp");
    let temp = PathBuf::from(temp);
    if io.file_len(&temp).is_ok() {
        io.remove(&temp)
            .map_err(|e| FileError::new("removing the leftover", &temp, e))?;
    }
    let mut file = io
        .create(&temp)
        .map_err(|e| FileError::new("creating the WAL file", &temp, e))?;
    let made = file
        .write_all(&encode_header(first_lsn, format))
        .map_err(|e| FileError::new("writing the WAL file header", &temp, e))
        .and_then(|()| {
            file.sync()
                .map_err(|e| FileError::new("fsyncing the WAL file", &temp, e))
        })
        .and_then(|()| {
            io.rename(&temp, &path)
                .map_err(|e| FileError::new("renaming into place the WAL file", &path, e))
        })
        .and_then(|()| {
            io.sync_dir(dir)
                .map_err(|e| FileError::new("syncing the data directory", dir, e))
        });
    match made {
        Ok(()) => Ok((file, path, false)),
        Err(e) => {
            let _ = io.remove(&temp);
            Err(e)
        }
    }
}

/// Makes the zero-filled `spare` the WAL file `path`: header written over
/// its first bytes and fsynced, renamed, directory fsynced.
fn from_spare(
    io: &dyn Io,
    dir: &Path,
    spare: &Path,
    path: &Path,
    first_lsn: u64,
    format: WalFormat,
) -> Result<Box<dyn IoFile>, FileError> {
    let mut file = io
        .open_write(spare)
        .map_err(|e| FileError::new("opening the spare WAL file", spare, e))?;
    file.write_at(0, &encode_header(first_lsn, format))
        .map_err(|e| FileError::new("writing the WAL file header", spare, e))?;
    file.sync()
        .map_err(|e| FileError::new("fsyncing the WAL file", spare, e))?;
    io.rename(spare, path)
        .map_err(|e| FileError::new("renaming into place the WAL file", path, e))?;
    io.sync_dir(dir)
        .map_err(|e| FileError::new("syncing the data directory", dir, e))?;
    Ok(file)
}

/// The byte offset of record `lsn` in a WAL file's bytes, if the file's
/// records reach it (read as far as they decode cleanly).
fn record_offset(data: &[u8], first_lsn: u64, lsn: u64) -> Option<u64> {
    let format = check_header(data, first_lsn).ok()?;
    let mut ops = Vec::new();
    let (mut offset, mut at_lsn) = (HEADER_LEN, first_lsn);
    while offset < data.len() {
        if at_lsn == lsn {
            return Some(offset as u64);
        }
        let rec = decode_record(&data[offset..], format, &mut ops).ok()?;
        offset += rec.len as usize;
        at_lsn += 1;
    }
    None
}
