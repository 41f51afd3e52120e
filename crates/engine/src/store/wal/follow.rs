//! [`WalFollower`]: reads the records of a live WAL, in LSN order, as the
//! writer commits them (for change streams). Read-only.
//!
//! # Protocol
//!
//! The caller asks for the records up to an LSN `upto` that it knows is
//! committed (in the server: applied, so at most the watermark). The writer
//! writes a group to its file before applying it, so every record up to
//! `upto` is whole in some file by then. The follower reads only what is new
//! in its file (from its byte offset on), decodes records up to `upto`, and
//! moves to the next file when its file holds nothing more.
//!
//! # Invariants
//!
//! - Bytes read past the records up to `upto` (known at the time of the
//!   read) are never trusted later: a group the writer failed to commit is
//!   rolled back and its LSNs reused, so bytes once seen there may be
//!   replaced. A record is returned only from a read made after its LSN
//!   was known committed.
//! - Reads are bounded ([`READ_CHUNK`], or a whole record when one is
//!   larger): the newest file may be preallocated, tens of MiB of zeros
//!   past its records. Zeros where a record should be mean the same as the
//!   end of the file: nothing more is written here yet.
//! - An LSN the WAL no longer holds (its file removed after a snapshot, or
//!   never logged because a snapshot held it) is
//!   [`WalFollowError::NotRetained`], never skipped: a follower returns every
//!   LSN from its start, consecutively, or fails.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::record::{EntryHead, HEADER_LEN, WalFormat, check_header, claimed_len, decode_record};
use super::spare::all_zero;
use super::wal_files::{WalFile, list_wal_files};
use crate::store::{FileError, Io, Op, WalCorrupt, WalFollowError};

/// Bytes a follower reads at a time (more when one record is larger).
pub(super) const READ_CHUNK: usize = 256 << 10;

/// A reader that follows the WAL from an LSN on.
pub struct WalFollower {
    /// The file system.
    io: Arc<dyn Io>,
    /// The data directory.
    dir: PathBuf,
    /// The file being read (`None` until the first record is wanted).
    file: Option<WalFile>,
    /// Bytes of `file` from byte `buf_start` on, as read last.
    buf: Vec<u8>,
    /// Offset in the file of `buf[0]`.
    buf_start: u64,
    /// Whether the read that filled `buf` stopped at its size limit (the
    /// file may go on past it).
    capped: bool,
    /// Offset in `buf` of the next record of the file.
    pos: usize,
    /// The LSN the record at `pos` has (records of a file are consecutive).
    file_next: u64,
    /// The record format of `file`.
    format: WalFormat,
    /// Records of `buf` up to this LSN are trusted (see module docs).
    trusted_upto: u64,
    /// The next LSN to return.
    next_lsn: u64,
    /// Decoded ops of the last record; reused.
    ops: Vec<Op>,
    /// The term, kind and proposal number of the last record (a Raft
    /// log's; the default for a single node's).
    head: EntryHead,
}

impl WalFollower {
    /// A follower that returns the records from `from_lsn` on. Fails with
    /// [`WalFollowError::NotRetained`] if the oldest WAL file starts after
    /// `from_lsn` (the records before it are gone).
    pub fn open(io: Arc<dyn Io>, dir: &Path, from_lsn: u64) -> Result<Self, WalFollowError> {
        let files = list_wal_files(io.as_ref(), dir)?;
        if let Some(oldest) = files.first()
            && oldest.first_lsn > from_lsn
        {
            return Err(WalFollowError::NotRetained {
                dir: dir.to_path_buf(),
                wanted: from_lsn,
                oldest: Some(oldest.first_lsn),
            });
        }
        Ok(WalFollower {
            io,
            dir: dir.to_path_buf(),
            file: None,
            buf: Vec::new(),
            buf_start: 0,
            capped: false,
            pos: 0,
            file_next: 0,
            format: WalFormat::Single,
            trusted_upto: 0,
            next_lsn: from_lsn,
            ops: Vec::new(),
            head: EntryHead::default(),
        })
    }

    /// The LSN the next record returned will have.
    pub fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// The term, kind and proposal number of the record returned last (a
    /// Raft log's; the default in a single node's WAL).
    pub fn last_head(&self) -> EntryHead {
        self.head
    }

    /// The ops of the record returned last.
    pub fn last_ops(&self) -> &[Op] {
        &self.ops
    }

    /// The next record, if its LSN is at most `upto`, which the caller
    /// guarantees is committed (module docs).
    ///
    /// Errors: [`WalFollowError::NotRetained`] if the record's file is gone;
    /// [`WalFollowError::Corrupt`] if a committed record is damaged or
    /// missing; [`WalFollowError::Io`].
    pub fn next_record(&mut self, upto: u64) -> Result<Option<(u64, &[Op])>, WalFollowError> {
        if self.next_lsn > upto {
            return Ok(None);
        }
        let mut refilled = false;
        loop {
            if self.file.is_none() {
                self.enter(self.locate()?, upto)?;
                refilled = true;
            }
            let rest = &self.buf[self.pos..];
            // What a read from `pos` must hold for the record there to be
            // whole: at least its header (a read can end inside one), and
            // what the header says, once it is whole.
            let overhead = self.format.record_overhead();
            let mut need = overhead;
            let unwritten = rest.len() >= overhead && all_zero(&rest[..overhead]);
            if self.file_next <= self.trusted_upto && rest.len() >= overhead && !unwritten {
                match decode_record(rest, self.format, &mut self.ops) {
                    Ok(rec) => {
                        if rec.lsn != self.file_next {
                            return Err(self.corrupt(format!(
                                "the record has LSN {}, expected {}",
                                rec.lsn, self.file_next
                            )));
                        }
                        self.pos += rec.len as usize;
                        self.file_next += 1;
                        if rec.lsn < self.next_lsn {
                            continue;
                        }
                        self.next_lsn += 1;
                        self.head = rec.head;
                        return Ok(Some((rec.lsn, &self.ops)));
                    }
                    // Cut off (or not yet whole): more of it may have been
                    // written since, or read; re-read before calling it
                    // damage.
                    Err(bad) if !bad.written_so => {
                        need = claimed_len(rest, self.format).unwrap_or(need)
                    }
                    Err(bad) => return Err(self.corrupt(bad.reason)),
                }
            }
            if !refilled || (self.capped && need > self.buf.len() - self.pos) {
                self.refill(upto, need)?;
                refilled = true;
                continue;
            }
            // Read after `upto` was committed, and still not there: the
            // record is in the next file.
            if !all_zero(&self.buf[self.pos..]) {
                return Err(self.corrupt(format!(
                    "LSN {} is committed, but its record here is cut off",
                    self.file_next
                )));
            }
            let next = self.next_file()?;
            self.enter(next, upto)?;
        }
    }

    /// The file that holds `next_lsn`: the newest one starting at or
    /// before it.
    fn locate(&self) -> Result<WalFile, WalFollowError> {
        let files = list_wal_files(self.io.as_ref(), &self.dir)?;
        files
            .iter()
            .rev()
            .find(|f| f.first_lsn <= self.next_lsn)
            .cloned()
            .ok_or_else(|| self.not_retained(files.first()))
    }

    /// The file after the current one, which must continue it.
    fn next_file(&self) -> Result<WalFile, WalFollowError> {
        let current = self.file.as_ref().expect("a file is being read");
        let files = list_wal_files(self.io.as_ref(), &self.dir)?;
        let Some(next) = files.iter().find(|f| f.first_lsn > current.first_lsn) else {
            return Err(self.corrupt(format!(
                "LSN {} is committed, but the log ends before it",
                self.file_next
            )));
        };
        if next.first_lsn > self.next_lsn {
            // A hole a snapshot covers: those LSNs were never logged here.
            return Err(self.not_retained(Some(next)));
        }
        if next.first_lsn < self.file_next {
            return Err(self.corrupt(format!(
                "the next file starts at LSN {}, but this one already holds LSN {}",
                next.first_lsn,
                self.file_next - 1
            )));
        }
        Ok(next.clone())
    }

    /// Starts reading `file` from its beginning.
    fn enter(&mut self, file: WalFile, upto: u64) -> Result<(), WalFollowError> {
        self.buf = self.read(&file.path, 0, READ_CHUNK)?;
        self.capped = self.buf.len() == READ_CHUNK;
        self.trusted_upto = upto;
        match check_header(&self.buf, file.first_lsn) {
            Ok(format) => self.format = format,
            Err(bad) => {
                return Err(WalCorrupt {
                    path: file.path,
                    offset: 0,
                    reason: bad.reason,
                }
                .into());
            }
        }
        self.buf_start = 0;
        self.pos = HEADER_LEN;
        self.file_next = file.first_lsn;
        self.file = Some(file);
        Ok(())
    }

    /// Reads what the current file holds from the next record on: a chunk,
    /// or `need` bytes if more.
    fn refill(&mut self, upto: u64, need: usize) -> Result<(), WalFollowError> {
        let offset = self.buf_start + self.pos as u64;
        let path = self
            .file
            .as_ref()
            .expect("a file is being read")
            .path
            .clone();
        let want = need.max(READ_CHUNK);
        self.buf = self.read(&path, offset, want)?;
        self.capped = self.buf.len() == want;
        self.buf_start = offset;
        self.pos = 0;
        self.trusted_upto = upto;
        Ok(())
    }

    /// Reads at most `len` bytes of `path` from `offset`; a file that is
    /// gone is not retained.
    fn read(&self, path: &Path, offset: u64, len: usize) -> Result<Vec<u8>, WalFollowError> {
        match self.io.read_at(path, offset, len) {
            Ok(data) => Ok(data),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let files = list_wal_files(self.io.as_ref(), &self.dir)?;
                Err(self.not_retained(files.first()))
            }
            Err(e) => Err(FileError::new("reading the WAL file", path, e).into()),
        }
    }

    fn not_retained(&self, oldest: Option<&WalFile>) -> WalFollowError {
        WalFollowError::NotRetained {
            dir: self.dir.clone(),
            wanted: self.next_lsn,
            oldest: oldest.map(|f| f.first_lsn),
        }
    }

    fn corrupt(&self, reason: String) -> WalFollowError {
        let file = self.file.as_ref().expect("a file is being read");
        WalCorrupt {
            path: file.path.clone(),
            offset: self.buf_start + self.pos as u64,
            reason,
        }
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::OsIo;
    use crate::store::wal::{WalOptions, WalWriter, remove_covered};
    use uuid::Uuid;

    fn put(k: u128) -> Op {
        Op::Put {
            key: uuidmap_index::Key::new(Uuid::from_u128(k)).unwrap(),
            value: Uuid::from_u128(k + 1000),
        }
    }

    /// A WAL in a fresh temporary directory (removed with the returned
    /// guard).
    fn setup(segment_bytes: u64) -> (Arc<dyn Io>, PathBuf, WalWriter, tempfile::TempDir) {
        let io: Arc<dyn Io> = Arc::new(OsIo);
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().to_path_buf();
        let w = WalWriter::create(
            io.clone(),
            &dir,
            1,
            WalOptions {
                segment_bytes,
                preallocate: crate::store::wal::Preallocate::Inline,
                ..Default::default()
            },
        )
        .unwrap();
        (io, dir, w, temp)
    }

    fn commit(w: &mut WalWriter, lsns: std::ops::RangeInclusive<u64>) {
        for lsn in lsns {
            w.append(lsn, &[put(lsn as u128)]);
        }
        w.commit(false).unwrap();
    }

    fn read_all(f: &mut WalFollower, upto: u64) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some((lsn, ops)) = f.next_record(upto).unwrap() {
            assert_eq!(ops, &[put(lsn as u128)]);
            out.push(lsn);
        }
        out
    }

    #[test]
    fn follows_new_records_across_file_rotations_and_stops_at_upto() {
        // Small files: a rotation every few records.
        let (io, dir, mut w, _temp) = setup(200);
        let mut f = WalFollower::open(io.clone(), &dir, 1).unwrap();
        assert_eq!(read_all(&mut f, 0), Vec::<u64>::new());
        commit(&mut w, 1..=3);
        assert_eq!(read_all(&mut f, 2), vec![1, 2], "never past upto");
        assert_eq!(read_all(&mut f, 3), vec![3]);
        for group in 0..10 {
            let first = 4 + group * 3;
            commit(&mut w, first..=first + 2);
        }
        assert!(list_wal_files(io.as_ref(), &dir).unwrap().len() > 3);
        assert_eq!(read_all(&mut f, 33), (4..=33).collect::<Vec<_>>());
        // A follower started in the middle skips what is before it.
        let mut g = WalFollower::open(io, &dir, 20).unwrap();
        assert_eq!(read_all(&mut g, 33), (20..=33).collect::<Vec<_>>());
    }

    #[test]
    fn an_lsn_whose_file_was_removed_is_not_retained_never_skipped() {
        let (io, dir, mut w, _temp) = setup(200);
        for group in 0..10 {
            let first = 1 + group * 3;
            commit(&mut w, first..=first + 2);
        }
        let mut slow = WalFollower::open(io.clone(), &dir, 1).unwrap();
        assert_eq!(read_all(&mut slow, 2), vec![1, 2]);
        remove_covered(io.as_ref(), &dir, 20).unwrap();
        let oldest = list_wal_files(io.as_ref(), &dir).unwrap()[0].first_lsn;
        assert!(oldest > 3 && oldest <= 21);
        match slow.next_record(30) {
            Err(WalFollowError::NotRetained {
                wanted: 3,
                oldest: Some(o),
                ..
            }) => assert_eq!(o, oldest),
            other => panic!("expected NotRetained, got {other:?}"),
        }
        match WalFollower::open(io.clone(), &dir, 1) {
            Err(WalFollowError::NotRetained { wanted: 1, .. }) => {}
            other => panic!("expected NotRetained, got {:?}", other.err()),
        }
        let mut fresh = WalFollower::open(io, &dir, oldest).unwrap();
        assert_eq!(read_all(&mut fresh, 30), (oldest..=30).collect::<Vec<_>>());
    }

    #[test]
    fn follows_a_preallocated_file_with_records_larger_than_a_read() {
        // A file made from a spare: megabytes of zeros after the records;
        // one record alone is larger than a read.
        let (io, dir, mut w, _temp) = setup(4 << 20);
        let mut f = WalFollower::open(io.clone(), &dir, 1).unwrap();
        commit(&mut w, 1..=2);
        assert_eq!(read_all(&mut f, 2), vec![1, 2]);
        let big: Vec<Op> = (1..=10_000).map(put).collect();
        assert!(big.len() * 33 > READ_CHUNK);
        w.append(3, &big);
        w.commit(false).unwrap();
        commit(&mut w, 4..=5);
        let newest = list_wal_files(io.as_ref(), &dir).unwrap().pop().unwrap();
        assert!(
            io.file_len(&newest.path).unwrap() >= 4 << 20,
            "preallocated"
        );
        let (lsn, ops) = f.next_record(5).unwrap().unwrap();
        assert_eq!((lsn, ops.len()), (3, big.len()));
        assert_eq!(ops, &big[..]);
        assert_eq!(read_all(&mut f, 5), vec![4, 5]);
        // Zeros where the next record would be: nothing more yet.
        assert!(f.next_record(5).unwrap().is_none());
        commit(&mut w, 6..=6);
        assert_eq!(read_all(&mut f, 6), vec![6]);
    }

    #[test]
    fn a_read_that_ends_inside_a_record_header_reads_on() {
        // Records of 57 bytes after one of 24 + 33 * p: for some p a read
        // of READ_CHUNK bytes ends inside a record's 24-byte header.
        for p in 0..20u64 {
            let (io, dir, mut w, _temp) = setup(1 << 20);
            // The first commit moves the log onto a preallocated file.
            commit(&mut w, 1..=1);
            let first: Vec<Op> = (1..=p as u128).map(put).collect();
            w.append(2, &first);
            w.commit(false).unwrap();
            let n = (READ_CHUNK as u64 / 57) + 10;
            for lsn in 3..=n {
                w.append(lsn, &[put(lsn as u128)]);
            }
            w.commit(false).unwrap();
            let newest = list_wal_files(io.as_ref(), &dir).unwrap().pop().unwrap();
            assert_eq!(newest.first_lsn, 2, "one file holds LSN 2 on");
            // Each follower skips records up to its start within one call,
            // so it meets the end of a read inside a header in that call too.
            let mut f = WalFollower::open(io.clone(), &dir, 3).unwrap();
            assert_eq!(read_all(&mut f, n), (3..=n).collect::<Vec<_>>(), "p = {p}");
            let mut late = WalFollower::open(io.clone(), &dir, n - 3).unwrap();
            assert_eq!(
                read_all(&mut late, n),
                (n - 3..=n).collect::<Vec<_>>(),
                "p = {p}"
            );
        }
    }

    #[test]
    fn bytes_read_past_upto_are_not_trusted_later() {
        let (io, dir, mut w, _temp) = setup(1 << 20);
        commit(&mut w, 1..=2);
        drop(w);
        let mut f = WalFollower::open(io.clone(), &dir, 1).unwrap();
        // The follower reads LSN 1 while LSN 2 is in the file but (as far
        // as it knows) not committed: then LSN 2's bytes change, as when a
        // failed group is rolled back and its LSN reused.
        assert_eq!(read_all(&mut f, 1), vec![1]);
        let path = list_wal_files(io.as_ref(), &dir).unwrap()[0].path.clone();
        let mut data = io.read(&path).unwrap();
        data.truncate(data.len() - 57); // record 2: 24 + 33 bytes
        super::super::record::encode_record(&mut data, 2, &[put(77)]);
        io.remove(&path).unwrap();
        io.create(&path).unwrap().write_all(&data).unwrap();
        let (lsn, ops) = f.next_record(2).unwrap().unwrap();
        assert_eq!((lsn, ops), (2, &[put(77)][..]), "the record as it is now");
    }
}
