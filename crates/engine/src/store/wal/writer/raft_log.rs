//! The Raft log's side of [`WalWriter`]: its entries, the durable cut of
//! a suffix never committed, and a log that starts at a given LSN (after a
//! snapshot installed). A child of `writer` so that it works on the
//! writer's own state, under the same invariants (`writer`'s docs).

use std::path::Path;

use super::{WalWriter, record_offset};
use crate::store::wal::record::{EntryHead, HEADER_LEN, WalFormat, encode_entry};
use crate::store::wal::replay::cut_and_vouch;
use crate::store::wal::wal_files::list_wal_files;
use crate::store::{FileError, WalWriteError};

impl WalWriter {
    /// Encodes one Raft log entry into the pending group under `lsn`, which
    /// must be [`WalWriter::next_lsn`]: `body` is a normal entry's `count`
    /// ops as `op_bytes` spells them (as they came over the wire), nothing
    /// for a blank entry, a membership's bytes otherwise.
    ///
    /// # Panics
    /// If this writer does not write a Raft log, if the body is over
    /// [`MAX_OPS_LEN`](crate::store::wal::MAX_OPS_LEN), or if a blank or membership entry claims ops.
    pub fn append_entry(&mut self, lsn: u64, head: EntryHead, count: u32, body: &[u8]) {
        assert_eq!(
            self.options.format,
            WalFormat::Raft,
            "entries go to a Raft log only"
        );
        debug_assert_eq!(lsn, self.next_lsn, "WAL records must have consecutive LSNs");
        encode_entry(&mut self.pending, lsn, head, count, body);
        self.next_lsn += 1;
    }

    /// Removes every record from LSN `first_cut` on, durably, and goes on
    /// writing at `first_cut` in a new file: a Raft follower's log that
    /// conflicts with a new leader's loses the suffix that was never
    /// committed (docs/replication.md, 2.4). Pending records are forgotten.
    ///
    /// Each step is durable before the next, so a crash leaves the old log
    /// cut somewhere at or after `first_cut`, never a hole: later files
    /// are removed newest first (the directory fsynced after each), the file
    /// holding `first_cut` is rewritten without it and with its header
    /// vouching for exactly what is left (a copy renamed into place), then
    /// a new file starts at `first_cut`. Records before `first_cut` are not
    /// touched. A Raft member never acknowledges anything on the cut
    /// suffix, so getting it back after a crash is as if the cut had not
    /// been asked for yet.
    ///
    /// Errors: the writer's own (failed, a fsync in flight); the file-system
    /// errors of each step, after which the writer is failed for good (the
    /// log on disk is some cut of the old one, which a restart reads).
    pub fn truncate_from(&mut self, first_cut: u64) -> Result<(), WalWriteError> {
        self.check_failed()?;
        self.check_no_sync_in_flight()?;
        self.forget_pending();
        if first_cut >= self.committed_next {
            return Ok(());
        }
        match self.cut_files(first_cut) {
            Ok(()) => Ok(()),
            Err(e) => {
                let cause = e.to_string();
                tracing::error!(
                    dir = %self.dir.display(),
                    "{cause}: could not cut the WAL from LSN {first_cut} on; it accepts no \
                     more writes; restart to recover from what is on disk"
                );
                self.failed = Some(cause);
                Err(e)
            }
        }
    }

    /// Goes on writing at `lsn`, past the records the log holds: a new
    /// file starts there, and the LSNs between are a hole that a snapshot
    /// covers (a Raft member that installed a leader's snapshot continues
    /// its log after it). The current file is synced first, or removed if
    /// it holds no record. Pending records are forgotten.
    ///
    /// Errors: `lsn` below [`WalWriter::next_lsn`] (that would reuse
    /// LSNs: cut with [`WalWriter::truncate_from`] first); the writer's
    /// own; the file system's, as for a rotation.
    pub fn start_at(&mut self, lsn: u64) -> Result<(), WalWriteError> {
        self.check_failed()?;
        self.check_no_sync_in_flight()?;
        self.forget_pending();
        if lsn < self.committed_next {
            return Err(FileError::new(
                "starting the WAL at a later LSN",
                &self.path,
                std::io::Error::other(format!(
                    "LSN {lsn} is below the next LSN {}, which would reuse LSNs",
                    self.committed_next
                )),
            )
            .into());
        }
        if lsn == self.committed_next {
            return Ok(());
        }
        if let Some(len) = self.rollback_to {
            self.roll_back(len)?;
        }
        let empty = (self.end == HEADER_LEN as u64).then(|| self.path.clone());
        self.committed_next = lsn;
        self.next_lsn = lsn;
        self.rotate()?;
        if let Some(empty) = empty {
            self.io
                .remove(&empty)
                .map_err(|e| FileError::new("removing the empty WAL file", &empty, e))?;
            self.io
                .sync_dir(&self.dir)
                .map_err(|e| FileError::new("syncing the data directory", &self.dir, e))?;
        }
        Ok(())
    }

    fn cut_files(&mut self, first_cut: u64) -> Result<(), WalWriteError> {
        let io = self.io.clone();
        let files = list_wal_files(&*io, &self.dir)?;
        let sync_dir = |dir: &Path| {
            io.sync_dir(dir)
                .map_err(|e| FileError::new("syncing the data directory", dir, e))
        };
        // Newest first, each removal durable before the next: a crash
        // leaves a shorter log, never one with a hole.
        for file in files.iter().rev() {
            if file.first_lsn < first_cut {
                break;
            }
            io.remove(&file.path)
                .map_err(|e| FileError::new("removing the WAL file", &file.path, e))?;
            sync_dir(&self.dir)?;
        }
        if let Some(holding) = files.iter().rev().find(|f| f.first_lsn < first_cut) {
            let data = io
                .read(&holding.path)
                .map_err(|e| FileError::new("reading the WAL file", &holding.path, e))?;
            if let Some(offset) = record_offset(&data, holding.first_lsn, first_cut) {
                cut_and_vouch(&*io, &self.dir, &holding.path, offset, first_cut - 1)?;
            }
        }
        self.rollback_to = None;
        self.unsynced = false;
        self.committed_next = first_cut;
        self.next_lsn = first_cut;
        self.start_next_file()
    }
}
