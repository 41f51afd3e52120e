//! The log thread: the one owner of a member's WAL writer and `raft-state`
//! file. openraft's calls reach it as [`Command`]s, in the order they were
//! made, so the I/O ordering openraft asks for (appends, vote saves and
//! truncations serialized) holds by construction.
//!
//! Appends are group-committed: the thread takes every command already
//! queued, writes the appended entries as one group, commits it once (one
//! fsync under the `always` policy), and only then reports each append
//! flushed. Any other command first commits what is pending, so a vote is
//! never durable ahead of an append issued before it. After
//! `VOUCH_AFTER_IDLE` without a command, and at stop, the WAL header is
//! made to vouch for everything synced (the single node's rule).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};

use openraft::storage::IOFlushed;
use std::path::PathBuf;
use tokio::sync::oneshot;

use uuidmap_engine::store::raft_state::{RaftHardState, RaftStateFile};
use uuidmap_engine::store::wal::WalWriter;
use uuidmap_engine::store::wal::remove_covered;
use uuidmap_engine::store::{Io, StoreError};
use uuidmap_engine::writer::{MemberLogSteps, VOUCH_AFTER_IDLE};

use super::records::entry_record;
use super::tail::Tail;
use crate::types::{Entry, UuidmapRaft};

/// What openraft asked of the log, in order.
pub(crate) enum Command {
    /// Write these entries; report through `flushed` once durable.
    Append {
        entries: Vec<Entry>,
        flushed: IOFlushed<UuidmapRaft>,
    },
    /// Remove every entry from index `from` on.
    Truncate {
        from: u64,
        done: oneshot::Sender<std::io::Result<()>>,
    },
    /// Remove the WAL files that hold only entries up to `upto`, once the
    /// purge that covers them is durable in `state`.
    Purge { state: RaftHardState, upto: u64 },
    /// Write the vote, committed and purged log ids; fsync if `sync`.
    SaveState {
        state: RaftHardState,
        sync: bool,
        done: Option<oneshot::Sender<std::io::Result<()>>>,
    },
}

pub(crate) struct LogThread {
    pub(crate) wal: WalWriter,
    pub(crate) state: RaftStateFile,
    pub(crate) tail: Arc<Mutex<Tail>>,
    /// Fsync each group (the `always` policy).
    pub(crate) sync: bool,
    pub(crate) stats: Arc<LogStats>,
    /// The directory and file system, to remove purged files.
    pub(crate) io: Arc<dyn Io>,
    pub(crate) dir: PathBuf,
    /// The first LSN not in the files yet: every entry before it is
    /// written (and synced, under `always`).
    pub(crate) written: tokio::sync::watch::Sender<u64>,
}

/// What the log thread has done, for benches and metrics.
#[derive(Debug, Default)]
pub struct LogStats {
    /// `append` calls.
    pub appends: AtomicU64,
    /// Entries appended.
    pub entries: AtomicU64,
    /// Groups committed (one write, and one fsync under `always`).
    pub groups: AtomicU64,
    /// WAL bytes written since the store opened (headers included).
    pub bytes: Arc<AtomicU64>,
    /// The time its writes and fsyncs took, and the leader's replication
    /// (the member's per-step figures).
    pub steps: Arc<MemberLogSteps>,
}

fn io_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl LogThread {
    pub(crate) fn run(mut self, commands: Receiver<Command>) {
        let mut waiting: Vec<IOFlushed<UuidmapRaft>> = Vec::new();
        // Set after a group under `always`: once the log has been idle for
        // `VOUCH_AFTER_IDLE`, the header is made to vouch for it.
        let mut vouch_due = false;
        loop {
            let first = if vouch_due {
                match commands.recv_timeout(VOUCH_AFTER_IDLE) {
                    Ok(c) => c,
                    Err(RecvTimeoutError::Timeout) => {
                        self.vouch();
                        vouch_due = false;
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match commands.recv() {
                    Ok(c) => c,
                    Err(_) => break,
                }
            };
            let mut next = Some(first);
            while let Some(command) = next.take() {
                self.execute(command, &mut waiting);
                // Empty or disconnected: the group ends here.
                next = commands.try_recv().ok();
            }
            self.flush(&mut waiting);
            vouch_due = self.sync;
        }
        self.flush(&mut waiting);
        // Whatever the policy, a stop leaves the log synced and vouched for.
        self.vouch();
    }

    /// Makes the newest file's header vouch for every synced record (one
    /// fsync, if it does not already), as the single node's writer does
    /// when idle: a record a header vouches for that is damaged later is
    /// refused as corruption, not cut as a torn tail. A failure fails the
    /// WAL for good, and the next append reports it.
    fn vouch(&mut self) {
        if let Err(e) = self.wal.vouch() {
            tracing::error!(error = %e, "could not vouch for the Raft log's synced end");
        }
    }

    fn execute(&mut self, command: Command, waiting: &mut Vec<IOFlushed<UuidmapRaft>>) {
        match command {
            Command::Append { entries, flushed } => {
                self.stats.appends.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .entries
                    .fetch_add(entries.len() as u64, Ordering::Relaxed);
                match self.append(&entries) {
                    Ok(()) => waiting.push(flushed),
                    Err(e) => {
                        self.flush(waiting);
                        flushed.io_completed(Err(e));
                    }
                }
            }
            Command::Truncate { from, done } => {
                self.flush(waiting);
                let cut = self.wal.truncate_from(from).map_err(io_error);
                self.written.send_if_modified(|next| {
                    let cut_back = *next > from;
                    *next = (*next).min(from);
                    cut_back
                });
                let _ = done.send(cut);
            }
            Command::Purge { state, upto } => {
                self.flush(waiting);
                // Durable first: a restart must never find files missing
                // that its recorded purge does not explain.
                let removed = self
                    .state
                    .write(state, true)
                    .map_err(StoreError::from)
                    .and_then(|()| Ok(remove_covered(&*self.io, &self.dir, upto)?));
                if let Err(e) = removed {
                    // More log than needed is left: never wrong.
                    tracing::warn!(error = %e, "could not remove the purged Raft log files");
                }
            }
            Command::SaveState { state, sync, done } => {
                self.flush(waiting);
                let result = self.state.write(state, sync).map_err(io_error);
                if let Some(done) = done {
                    let _ = done.send(result);
                } else if let Err(e) = result {
                    tracing::error!(error = %e, "could not save the Raft state");
                }
            }
        }
    }

    /// Encodes `entries` into the pending group. An entry past the log's
    /// end (after a snapshot installed, or the first entry of a new log)
    /// starts a new WAL file there, after committing what is pending.
    fn append(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        for entry in entries {
            let index = entry.log_id.index;
            if index != self.wal.next_lsn() {
                self.commit()?;
                // A jump follows a purge past the log's end (a snapshot
                // installed): the purge, written without a fsync, must be
                // durable before the hole is, or a restart would find a
                // hole it cannot explain.
                self.state.sync().map_err(io_error)?;
                self.wal.start_at(index).map_err(io_error)?;
                // Every entry before the jump is purged (durably, above):
                // the files that hold only those go, now that a newer
                // file follows them.
                if let Err(e) = remove_covered(&*self.io, &self.dir, index - 1) {
                    tracing::warn!(error = %e, "could not remove the purged Raft log files");
                }
            }
            let (head, count, body) = entry_record(entry);
            self.wal.append_entry(index, head, count, &body);
        }
        Ok(())
    }

    fn commit(&mut self) -> std::io::Result<()> {
        let steps = &self.stats.steps;
        self.wal
            .commit_timed(self.sync, &steps.log_write_ns, &steps.log_sync_ns)
            .map_err(io_error)?;
        self.stats.groups.fetch_add(1, Ordering::Relaxed);
        self.stats
            .bytes
            .store(self.wal.total_bytes(), Ordering::Relaxed);
        let next = self.wal.next_lsn();
        let mut tail = self.tail.lock().expect("the tail lock is never poisoned");
        tail.flushed = next.checked_sub(1);
        tail.trim();
        drop(tail);
        self.written
            .send_if_modified(|w| std::mem::replace(w, next) != next);
        Ok(())
    }

    /// Commits the pending group and reports every append in it.
    fn flush(&mut self, waiting: &mut Vec<IOFlushed<UuidmapRaft>>) {
        if waiting.is_empty() {
            return;
        }
        let result = self.commit();
        for flushed in waiting.drain(..) {
            flushed.io_completed(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
            });
        }
    }
}
