//! Reading the WAL: a read-only cursor over the records of the retained
//! files, and recovery (`replay`), which applies them and repairs the tail.
//!
//! # What a reader checks
//!
//! Every file's header (magic, version, checksum, first LSN equal to the
//! name's); every record's length (within bounds and the file) and
//! checksums; the op tags and keys of every record it returns (the records
//! before the LSN wanted are skipped undecoded); that the records of a file
//! have consecutive LSNs from the file's first; that a file does not start
//! before the previous one ends (overlap), nor after the first LSN still
//! wanted (gap).
//!
//! # Torn tails and corruption
//!
//! Every file but the last was fsynced whole before the writer left it, and
//! every file has its whole header (files are renamed into place), so any
//! bad record or header there is **corruption**.
//!
//! In the last file, the header's synced-end slots vouch for a prefix of
//! the records (up to an LSN and a byte offset) that was fsynced. A record
//! that fails its checks is **corruption** if it starts inside that prefix,
//! if its checksums match (it was written so: an unknown tag, a reserved
//! key, a wrong LSN), or if the file is shorter than the prefix (truncated).
//! Otherwise it is a **torn tail**: bytes written after the last fsync the
//! header knows of, which a power loss can leave torn, zeroed or landed out
//! of order (so valid records after a bad one there prove nothing). The log
//! ends before it; those bytes were never acknowledged as durable except,
//! under `always`, the last group, which the header learns of at the next
//! fsync (or the writer's idle fsync): a synced last group that is damaged
//! later is the one loss this cannot see.
//!
//! # Zeros after the last record
//!
//! A WAL file made from a spare (`spare`) is zeros past its records. In the
//! last file, a record that would be a torn tail but starts a run of zeros
//! to the end of the file is the **end of the log**, not a tear
//! ([`TornTail::zeros`]): recovery cuts the zeros off quietly. Inside the
//! vouched prefix zeros are corruption like any bad record; in any other
//! file too, since the writer cuts a file's zeros before leaving it.
//!
//! Corruption stops reading with [`WalReadError::Corrupt`], which names
//! the file and offset.

use std::path::{Path, PathBuf};

use super::record::{
    BadRecord, EntryHead, HEADER_LEN, SyncedEnd, WalFormat, check_header, decode_record_from,
    read_synced_end,
};
use super::spare::{all_zero, records_end};
use super::wal_files::{WalFile, list_wal_files};
use crate::store::{FileError, Io, Op, WalCorrupt, WalReadError};

/// A record read from the WAL. The ops borrow the cursor's buffer.
#[derive(Debug)]
pub struct WalRecord<'a> {
    /// Its LSN.
    pub lsn: u64,
    /// Its ops, in order (none for a blank or membership entry).
    pub ops: &'a [Op],
    /// Its term, kind and proposal number (zeros and
    /// [`super::EntryKind::Normal`] in a single node's log).
    pub head: EntryHead,
    /// Its body as stored: the ops' bytes (`op_bytes`), or a membership's.
    pub body: &'a [u8],
    /// The file it is in.
    pub path: &'a Path,
    /// Its byte offset in that file.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// Where a torn tail begins (the log ends there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// The last WAL file.
    pub path: PathBuf,
    /// Byte offset of the torn record (0: the header itself is torn).
    pub offset: u64,
    /// The file's length; `len - offset` bytes are torn.
    pub file_len: u64,
    /// Records before the torn one in this file.
    pub records_before: u64,
    /// The bytes from `offset` on are all zeros: the unwritten rest of a
    /// preallocated file, a clean end rather than a torn write.
    pub zeros: bool,
}

/// A read-only cursor over the records of the WAL files, in LSN order,
/// from a given LSN on. It never changes a file.
///
/// Each file is read whole when the cursor reaches it, so a file the writer
/// is still appending to is seen as it was then: a record being written at
/// that moment looks like a torn tail and ends the cursor.
pub struct WalCursor<'io> {
    /// The file system.
    io: &'io dyn Io,
    /// The data directory.
    dir: PathBuf,
    /// The WAL files, sorted, as listed when the cursor was opened.
    files: Vec<WalFile>,
    /// Index in `files` of the file in `data`; `files.len()` once done.
    file: usize,
    /// Whether `data` holds file `file` (false before the first read).
    loaded: bool,
    /// The bytes of the current file (for the last file, up to where its
    /// trailing zeros begin, as far as `records_end` can tell).
    data: Vec<u8>,
    /// The current file's length.
    file_len: u64,
    /// Offset in `data` of the next record.
    offset: usize,
    /// The LSN the next record of the current file must have.
    expect_lsn: u64,
    /// The record format of the current file.
    format: WalFormat,
    /// Records read so far from the current file.
    file_records: u64,
    /// What the current file's header vouches for as synced (the whole
    /// file for every file but the last).
    vouched: SyncedEnd,
    /// The first LSN not yet returned (records before it are skipped).
    next_wanted: u64,
    /// The highest LSN seen in the log so far, returned or skipped.
    last_lsn_seen: Option<u64>,
    /// Set when the cursor stopped at a torn tail.
    torn: Option<TornTail>,
    /// Records up to this LSN are known to have been synced (a snapshot
    /// with this LSN exists, and the WAL was fsynced through it first): a
    /// bad one is corruption, never a torn tail.
    synced_through: u64,
    /// Decoded ops of the last record; reused across records.
    ops: Vec<Op>,
}

impl<'io> WalCursor<'io> {
    /// A cursor over the WAL in `dir` returning the records with LSN
    /// `>= from_lsn`.
    pub fn open(io: &'io dyn Io, dir: &Path, from_lsn: u64) -> Result<Self, FileError> {
        let files = list_wal_files(io, dir)?;
        // Files wholly before `from_lsn` (the next file starts at or before
        // it) are not read at all: damage in a file no one needs any more
        // must not stop a restart.
        let first = files
            .iter()
            .rposition(|f| f.first_lsn <= from_lsn)
            .unwrap_or(0);
        let skipped_end = (first > 0).then(|| files[first].first_lsn - 1);
        Ok(WalCursor {
            io,
            dir: dir.to_path_buf(),
            files,
            file: first,
            loaded: false,
            data: Vec::new(),
            file_len: 0,
            offset: 0,
            expect_lsn: 0,
            format: WalFormat::Single,
            file_records: 0,
            vouched: SyncedEnd { lsn: 0, offset: 0 },
            next_wanted: from_lsn,
            // The files skipped end where the first one read begins (file
            // `i` covers LSNs up to `first_{i+1} - 1`).
            last_lsn_seen: skipped_end,
            torn: None,
            synced_through: 0,
            ops: Vec::new(),
        })
    }

    /// Treats the records up to `lsn` as synced, whatever the file headers
    /// say (recovery passes the snapshot's LSN: the WAL was fsynced through
    /// it before the snapshot was published). 0 says nothing: a Raft log's
    /// record 0 is never taken as synced this way (a snapshot holds more).
    pub fn synced_through(mut self, lsn: u64) -> Self {
        self.synced_through = lsn;
        self
    }

    /// The next record with LSN `>= from_lsn`, `None` at the end of the log
    /// (clean, or a torn tail: see [`WalCursor::torn_tail`]).
    ///
    /// Errors: [`WalReadError::Corrupt`] for corruption (module docs),
    /// [`WalReadError::Gap`] if the log skips LSNs from `from_lsn` on,
    /// [`WalReadError::Io`] if a file cannot be read.
    pub fn next_record(&mut self) -> Result<Option<WalRecord<'_>>, WalReadError> {
        loop {
            if self.file >= self.files.len() || self.torn.is_some() {
                return Ok(None);
            }
            if !self.loaded {
                self.load_file()?;
                if self.torn.is_some() {
                    return Ok(None);
                }
            }
            if self.offset == self.data.len() {
                self.check_vouched_reached()?;
                self.file += 1;
                self.loaded = false;
                continue;
            }
            let start = self.offset;
            let (data, format) = (&self.data[start..], self.format);
            let rec = match decode_record_from(data, format, &mut self.ops, self.next_wanted) {
                Ok(rec) => rec,
                Err(bad) => {
                    self.bad_record(start, bad)?;
                    return Ok(None);
                }
            };
            if rec.lsn != self.expect_lsn {
                // A record with a good checksum but the wrong LSN was written
                // as such: never a torn write.
                return Err(self.corrupt(
                    start,
                    format!(
                        "the record has LSN {}, expected {}",
                        rec.lsn, self.expect_lsn
                    ),
                ));
            }
            self.offset += rec.len as usize;
            self.expect_lsn += 1;
            self.file_records += 1;
            self.last_lsn_seen = Some(rec.lsn);
            if rec.lsn < self.next_wanted {
                continue;
            }
            self.next_wanted = rec.lsn + 1;
            return Ok(Some(WalRecord {
                lsn: rec.lsn,
                ops: &self.ops,
                head: rec.head,
                body: &self.data[start + rec.body_at..start + rec.len as usize],
                path: &self.files[self.file].path,
                offset: start as u64,
                len: rec.len,
            }));
        }
    }

    /// Where the log ended in a torn tail, if it did (after `next_record`
    /// returned `None`).
    pub fn torn_tail(&self) -> Option<&TornTail> {
        self.torn.as_ref().filter(|t| !t.zeros)
    }

    /// Where the log ended in the zeros of a preallocated file (a clean
    /// end; recovery cuts them off), if it did.
    pub fn unwritten_tail(&self) -> Option<&TornTail> {
        self.torn.as_ref().filter(|t| t.zeros)
    }

    /// The highest LSN read from the log so far (returned or skipped).
    pub fn last_lsn_seen(&self) -> Option<u64> {
        self.last_lsn_seen
    }

    /// The LSN the first record not yet returned must have.
    pub fn next_wanted(&self) -> u64 {
        self.next_wanted
    }

    /// The WAL files the cursor reads, sorted.
    pub fn files(&self) -> &[WalFile] {
        &self.files
    }

    /// Index in [`WalCursor::files`] of the file being read, and how many
    /// records of it were read.
    pub fn position(&self) -> (usize, u64) {
        (self.file, self.file_records)
    }

    /// Reads file `self.file` and checks its header and its place in the
    /// LSN sequence.
    fn load_file(&mut self) -> Result<(), WalReadError> {
        let file = &self.files[self.file];
        if file.first_lsn > self.next_wanted {
            return Err(WalReadError::Gap {
                dir: self.dir.clone(),
                expected: self.next_wanted,
                found: file.first_lsn,
                // The file before was read (the cursor starts at a file
                // that begins at or before the LSN wanted): it ended early,
                // even if it held no record at all.
                ends_early: self
                    .file
                    .checked_sub(1)
                    .map(|before| self.files[before].path.clone()),
                next_file: file.path.clone(),
            });
        }
        if let Some(last) = self.last_lsn_seen
            && file.first_lsn <= last
        {
            return Err(self.corrupt_in(
                self.file,
                0,
                format!(
                    "the file starts at LSN {}, but the file before it already holds LSN {last}",
                    file.first_lsn
                ),
            ));
        }
        let last = self.file + 1 == self.files.len();
        let read_err = |e| FileError::new("reading the WAL file", &file.path, e);
        self.file_len = self.io.file_len(&file.path).map_err(read_err)?;
        self.data = if last {
            // A preallocated file: read its records, not its zeros (but a
            // page of them, so that the end shows as zeros, not as a cut).
            let end = records_end(self.io, &file.path, self.file_len)?;
            self.io
                .read_at(&file.path, 0, (end + 4096) as usize)
                .map_err(read_err)?
        } else {
            self.io.read(&file.path).map_err(read_err)?
        };
        self.file_len = self.file_len.max(self.data.len() as u64);
        self.loaded = true;
        self.offset = HEADER_LEN;
        self.expect_lsn = file.first_lsn;
        self.file_records = 0;
        match check_header(&self.data, file.first_lsn) {
            Ok(format) => self.format = format,
            // Files are renamed into place with their whole header.
            Err(bad) => return Err(self.corrupt(0, bad.reason)),
        }
        self.vouched = if last {
            // A damaged slot may have vouched for records the other does
            // not: without it nothing tells a tear from lost synced records.
            read_synced_end(&self.data).map_err(|reason| self.corrupt(0, reason))?
        } else {
            SyncedEnd {
                lsn: u64::MAX,
                offset: self.data.len() as u64,
            }
        };
        // A file shorter than what its header vouches for is refused at the
        // end of its good records (`check_vouched_reached`), so that a
        // repair knows where they end.
        Ok(())
    }

    /// At the end of a file's good records: they must reach what the
    /// header vouches for.
    fn check_vouched_reached(&self) -> Result<(), WalReadError> {
        if (self.offset as u64) < self.vouched.offset {
            let short = if self.offset == self.data.len() {
                format!(
                    "the file is {} bytes long: it was cut short; ",
                    self.data.len()
                )
            } else {
                String::new()
            };
            return Err(self.corrupt(
                self.offset,
                format!(
                    "{short}the records end here, but the file's header says records up to \
                     LSN {} ending at byte {} were synced",
                    self.vouched.lsn, self.vouched.offset
                ),
            ));
        }
        Ok(())
    }

    /// Classifies a bad record at `offset`: a torn tail (recorded, Ok) or
    /// corruption (Err). See the module docs.
    fn bad_record(&mut self, offset: usize, bad: BadRecord) -> Result<(), WalReadError> {
        let last = self.file + 1 == self.files.len();
        if !last || bad.written_so {
            return Err(self.corrupt(offset, bad.reason));
        }
        if self.synced_through > 0 && self.expect_lsn <= self.synced_through {
            return Err(self.corrupt(
                offset,
                format!(
                    "{} (the record of LSN {}, which a snapshot's LSN shows was synced)",
                    bad.reason, self.expect_lsn
                ),
            ));
        }
        if (offset as u64) < self.vouched.offset {
            return Err(self.corrupt(
                offset,
                format!(
                    "{}, in a record the file's header says was synced (records up to LSN {} \
                     ending at byte {})",
                    bad.reason, self.vouched.lsn, self.vouched.offset
                ),
            ));
        }
        self.torn = Some(TornTail {
            path: self.files[self.file].path.clone(),
            offset: offset as u64,
            file_len: self.file_len,
            records_before: self.file_records,
            zeros: all_zero(&self.data[offset..]),
        });
        Ok(())
    }

    fn corrupt(&self, offset: usize, reason: String) -> WalReadError {
        self.corrupt_in(self.file, offset, reason)
    }

    fn corrupt_in(&self, file: usize, offset: usize, reason: String) -> WalReadError {
        WalReadError::Corrupt(WalCorrupt {
            path: self.files[file].path.clone(),
            offset: offset as u64,
            reason,
        })
    }
}
