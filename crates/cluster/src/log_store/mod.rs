//! [`WalLogStore`]: openraft's log storage on our WAL (format version 3)
//! and `raft-state` file (docs/replication.md, section 2).
//!
//! # Protocol
//!
//! - openraft's calls come in on its tasks; the store puts appended
//!   entries in the shared in-memory `tail` at once (a reader must see
//!   them before they are flushed) and hands every write to the **log
//!   thread** (`thread`), which owns the `WalWriter` and the
//!   `RaftStateFile` and does the I/O in call order, group-committing
//!   appends.
//! - An append is reported flushed (`IOFlushed::io_completed`) once its
//!   group is written and, under the `always` policy, fsynced: "committed
//!   on a majority, under each node's fsync policy".
//! - `save_vote` waits until the vote is fsynced; `save_committed` and
//!   `purge` write the `raft-state` file without a fsync (the next synced
//!   write makes them durable; openraft calls the committed id optional,
//!   and a purge that is lost only leaves more log than needed).
//! - `truncate_after` cuts the tail in memory, then the WAL durably
//!   (`WalWriter::truncate_from`), and returns when the cut is durable.
//! - `purge` records the purged log id and drops the entries from memory
//!   at once; the log thread then makes the purge durable and removes the
//!   WAL files that hold only purged entries (openraft purges only behind
//!   a snapshot it knows of).
//! - Reads take entries from the tail, and older ones (dropped from
//!   memory once flushed and committed, beyond
//!   [`LogStoreConfig::tail_entries`]) from the WAL files on the blocking
//!   pool.
//!
//! # Opening
//!
//! [`WalLogStore::open`] takes the data directory's lock (a second store
//! on the directory, in this process or another, is refused with
//! `DirLockError::InUse`), reads `raft-state`, repairs the WAL's end as a
//! restart does (a torn tail is cut), reads the retained entries after the
//! purged log id into the tail, and starts a new WAL file after the last.

mod records;
mod tail;
mod thread;

use std::fmt::Debug;
use std::ops::{Bound, Range, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use tokio::sync::oneshot;
use uuidmap_engine::store::raft_state::{RaftHardState, RaftStateFile};
use uuidmap_engine::store::wal::{
    self, ReplayOptions, WalCursor, WalFormat, WalOptions, WalWriter,
};
use uuidmap_engine::store::{DirLock, Io, StoreError, WalReadError, lock_data_dir};

use self::records::{log_id_of, log_pos, record_entry, vote_of, vote_state};
use self::tail::Tail;
use self::thread::{Command, LogThread};
use crate::rejoin::VoteTrust;
use crate::types::{Entry, LogId, UuidmapRaft, Vote};

/// Where a member's log lives and how it is written.
#[derive(Clone)]
pub struct LogStoreConfig {
    /// The file system.
    pub io: Arc<dyn Io>,
    /// The data directory (WAL files and `raft-state`).
    pub dir: PathBuf,
    /// WAL tuning; the format is always [`WalFormat::Raft`].
    pub wal: WalOptions,
    /// Fsync every group of appends before reporting it flushed (the
    /// `always` policy); without it an append is flushed once written.
    pub sync: bool,
    /// How many of the newest entries stay in memory at least
    /// ([`TAIL_ENTRIES`] by default); older ones, once flushed and
    /// committed, are read from the files when asked for.
    pub tail_entries: usize,
}

pub use self::tail::TAIL_ENTRIES;
pub use self::thread::LogStats;

struct Shared {
    tail: Arc<Mutex<Tail>>,
    io: Arc<dyn Io>,
    dir: PathBuf,
}

impl Shared {
    fn tail(&self) -> std::sync::MutexGuard<'_, Tail> {
        self.tail.lock().expect("the tail lock is never poisoned")
    }
}

/// openraft's log storage for one member: the WAL and `raft-state` in its
/// data directory (module docs).
pub struct WalLogStore {
    shared: Arc<Shared>,
    /// The first LSN not in the files yet (see [`WalLogStore::written`]).
    written: tokio::sync::watch::Sender<u64>,
    commands: Option<Sender<Command>>,
    thread: Option<JoinHandle<()>>,
    /// The state last handed to the log thread.
    hard: RaftHardState,
    /// Whether the vote is trusted: read from `raft-state`, written into
    /// each later state (`crate::rejoin`).
    trust: Arc<VoteTrust>,
    stats: Arc<LogStats>,
    /// The data directory's lock, held for the store's life (released
    /// after the log thread has stopped: fields drop after `drop`).
    _lock: DirLock,
}

/// A reader of a [`WalLogStore`]'s log, for openraft's replication tasks.
#[derive(Clone)]
pub struct WalLogReader {
    shared: Arc<Shared>,
}

fn io_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl WalLogStore {
    /// Opens the log in `config.dir` (module docs), creating an empty one
    /// if there is none.
    pub fn open(config: LogStoreConfig) -> Result<WalLogStore, StoreError> {
        let LogStoreConfig {
            io,
            dir,
            wal,
            sync,
            tail_entries,
        } = config;
        io.create_dir_all(&dir)
            .map_err(|e| StoreError::io("creating the data directory", &dir, e))?;
        // One writer per directory: a second store (or process) is refused
        // with the holder's PID before it reads or cuts anything.
        let lock = lock_data_dir(&*io, &dir)?;
        let mut state = RaftStateFile::open(io.clone(), &dir)?;
        let mut hard = *state.state();
        let purged = hard.purged.as_ref().map(log_id_of);
        let files = wal::list_wal_files(&*io, &dir)?;
        let mut tail = Tail {
            vote: hard.vote.as_ref().map(vote_of),
            committed: hard.committed.as_ref().map(log_id_of),
            purged,
            last: purged,
            first: purged.map_or(0, |p| p.index + 1),
            oldest: purged.map_or(0, |p| p.index + 1),
            keep: tail_entries,
            // Everything in the files is flushed: trim as entries are read,
            // so opening a long log does not hold it all in memory.
            flushed: Some(u64::MAX),
            ..Tail::default()
        };
        if let Some(oldest) = files.first() {
            // Where the log this member holds begins: after the purged
            // entry (the files before a snapshot's hole hold only purged
            // ones), or at the oldest file.
            let from = tail.first.max(oldest.first_lsn);
            // The same repair as a restart's: a torn tail is cut.
            let after = from.saturating_sub(1);
            match wal::replay(&*io, &dir, after, &ReplayOptions::default(), |_, _| {}) {
                Ok(_) => {}
                Err(damage) if damage.repairable() => {
                    hard = cut_damaged_log(&*io, &dir, &mut state, hard, after, &damage)?;
                }
                Err(e) => return Err(e.into()),
            }
            let mut cursor = WalCursor::open(&*io, &dir, from)?;
            let mut first = true;
            while let Some(rec) = cursor.next_record()? {
                let entry = record_entry(&rec)
                    .map_err(|e| StoreError::io("reading the Raft log", rec.path, e))?;
                if first {
                    tail.first = entry.log_id.index;
                    tail.oldest = entry.log_id.index;
                    first = false;
                }
                tail.push(std::slice::from_ref(&entry))
                    .map_err(|e| StoreError::io("reading the Raft log", &dir, e))?;
                tail.trim();
            }
        }
        tail.flushed = tail.next_index().checked_sub(1);
        // A log cut short (its damage cut above, or a torn tail under a
        // policy without fsync) may end before the committed id saved:
        // openraft would look for the missing entries. The leader tells
        // this member again what is committed.
        if tail.committed.map(|c| c.index) > tail.last.map(|l| l.index) {
            tail.committed = tail.last;
            hard.committed = tail.last.as_ref().map(log_pos);
        }
        let next_lsn = tail.next_index();
        let wal = WalWriter::create(
            io.clone(),
            &dir,
            next_lsn,
            WalOptions {
                format: WalFormat::Raft,
                ..wal
            },
        )?;
        let tail = Arc::new(Mutex::new(tail));
        let shared = Arc::new(Shared {
            tail: tail.clone(),
            io,
            dir,
        });
        let (commands, receiver) = mpsc::channel();
        let stats = Arc::new(LogStats::default());
        let (written, _) = tokio::sync::watch::channel(next_lsn);
        let log_thread = LogThread {
            wal,
            state,
            tail,
            sync,
            stats: stats.clone(),
            io: shared.io.clone(),
            dir: shared.dir.clone(),
            written: written.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("raft-log".into())
            .spawn(move || log_thread.run(receiver))
            .map_err(|e| StoreError::io("starting the Raft log thread", &shared.dir, e))?;
        Ok(WalLogStore {
            shared,
            written,
            commands: Some(commands),
            thread: Some(thread),
            hard,
            trust: VoteTrust::new(hard.vote_distrusted),
            stats,
            _lock: lock,
        })
    }

    /// Whether this member's vote is trusted (`crate::rejoin`): not when
    /// `raft-state` was found damaged, until the group has taken the
    /// member back. Clearing it here writes it clear with the next state.
    pub fn vote_trust(&self) -> Arc<VoteTrust> {
        self.trust.clone()
    }

    /// The first LSN not written to the log's files yet, as it moves: the
    /// entries before it are there (synced, under `always`). A state
    /// machine that applies an entry only once it is written here keeps
    /// "applied means in this member's log" (change streams read the
    /// applied entries back from the files).
    pub fn written(&self) -> tokio::sync::watch::Receiver<u64> {
        self.written.subscribe()
    }

    /// The index of the last purged entry, if any: the log holds none up
    /// to it.
    pub fn purged_index(&self) -> Option<u64> {
        self.shared.tail().purged.map(|p| p.index)
    }

    /// What the log thread has done so far.
    pub fn stats(&self) -> Arc<LogStats> {
        self.stats.clone()
    }

    /// Hands `command` to the log thread.
    fn send(&self, command: Command) -> std::io::Result<()> {
        self.commands
            .as_ref()
            .and_then(|c| c.send(command).ok())
            .ok_or_else(|| std::io::Error::other("the Raft log thread has stopped"))
    }

    /// Writes the hard state; waits for it (fsynced) if `sync`.
    async fn save_state(&mut self, sync: bool) -> std::io::Result<()> {
        self.hard.vote_distrusted = self.trust.distrusted();
        if !sync {
            return self.send(Command::SaveState {
                state: self.hard,
                sync,
                done: None,
            });
        }
        let (done, wait) = oneshot::channel();
        self.send(Command::SaveState {
            state: self.hard,
            sync,
            done: Some(done),
        })?;
        wait.await
            .map_err(|_| std::io::Error::other("the Raft log thread has stopped"))?
    }
}

impl Drop for WalLogStore {
    /// Stops the log thread once it has done what was asked, so the files
    /// are closed when the store is gone.
    fn drop(&mut self) {
        self.commands = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A member's log damaged inside what was synced: a single node refuses to
/// start, but a member's group holds the log, so the member cuts its own at
/// the damage and is rebuilt from its leader. What it cut may include
/// entries it acknowledged, so first, durably, its vote is marked
/// distrusted (`crate::rejoin`): it votes for no one and is counted in no
/// quorum until its group has made it a learner, it has caught up, and it
/// is promoted back (docs/replication.md, 8.5). Returns the state written.
fn cut_damaged_log(
    io: &dyn Io,
    dir: &Path,
    state: &mut RaftStateFile,
    hard: RaftHardState,
    after: u64,
    damage: &WalReadError,
) -> Result<RaftHardState, StoreError> {
    let hard = RaftHardState {
        vote_distrusted: true,
        ..hard
    };
    // Before the cut: a crash between the two must not leave a cut log
    // with a trusted vote.
    state.write(hard, true)?;
    let options = ReplayOptions {
        truncate_corrupt: true,
        ..ReplayOptions::default()
    };
    let outcome = wal::replay(io, dir, after, &options, |_, _| {})?;
    let cut = outcome.cut.as_ref();
    tracing::error!(
        dir = %dir.display(),
        %damage,
        first_lsn_lost = cut.map(|c| c.first_lsn_lost),
        readable_records_lost = cut.map(|c| c.readable_records_lost),
        "this member's Raft log is damaged: cut back to the last good entry; the member votes \
         for no one until its group has made it a learner and promoted it back (it catches up \
         from the leader meanwhile)"
    );
    Ok(hard)
}

/// `range` as `start..end` (end exclusive).
fn bounds(range: &impl RangeBounds<u64>) -> Range<u64> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => u64::MAX,
    };
    start..end.max(start)
}

/// The entries of `range` from the WAL files (those no longer in memory).
fn read_files(io: &dyn Io, dir: &Path, range: Range<u64>) -> std::io::Result<Vec<Entry>> {
    let mut cursor = WalCursor::open(io, dir, range.start).map_err(io_error)?;
    let mut entries = Vec::new();
    while let Some(rec) = cursor.next_record().map_err(io_error)? {
        if rec.lsn >= range.end {
            break;
        }
        entries.push(record_entry(&rec)?);
    }
    if entries.len() as u64 != range.end - range.start {
        return Err(std::io::Error::other(format!(
            "the WAL in {} holds {} of the entries {}..{} it should",
            dir.display(),
            entries.len(),
            range.start,
            range.end
        )));
    }
    Ok(entries)
}

impl WalLogReader {
    async fn entries(&self, range: Range<u64>) -> std::io::Result<Vec<Entry>> {
        let (held, from_files) = self.shared.tail().read(range);
        if from_files.is_empty() {
            return Ok(held);
        }
        let shared = self.shared.clone();
        let mut entries =
            tokio::task::spawn_blocking(move || read_files(&*shared.io, &shared.dir, from_files))
                .await
                .map_err(std::io::Error::other)??;
        entries.extend(held);
        Ok(entries)
    }
}

impl RaftLogReader<UuidmapRaft> for WalLogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, std::io::Error> {
        self.entries(bounds(&range)).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, std::io::Error> {
        Ok(self.shared.tail().vote)
    }
}

impl RaftLogReader<UuidmapRaft> for WalLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, std::io::Error> {
        WalLogReader {
            shared: self.shared.clone(),
        }
        .entries(bounds(&range))
        .await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, std::io::Error> {
        Ok(self.shared.tail().vote)
    }
}

impl RaftLogStorage<UuidmapRaft> for WalLogStore {
    type LogReader = WalLogReader;

    async fn get_log_state(&mut self) -> Result<LogState<UuidmapRaft>, std::io::Error> {
        let tail = self.shared.tail();
        Ok(LogState {
            last_purged_log_id: tail.purged,
            last_log_id: tail.last,
        })
    }

    async fn get_log_reader(&mut self) -> WalLogReader {
        WalLogReader {
            shared: self.shared.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), std::io::Error> {
        self.hard.vote = Some(vote_state(vote));
        self.save_state(true).await?;
        self.shared.tail().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), std::io::Error> {
        self.hard.committed = committed.as_ref().map(log_pos);
        self.shared.tail().committed = committed;
        self.save_state(false).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, std::io::Error> {
        Ok(self.shared.tail().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<UuidmapRaft>,
    ) -> Result<(), std::io::Error>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        self.shared.tail().push(&entries)?;
        self.send(Command::Append {
            entries,
            flushed: callback,
        })
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), std::io::Error> {
        let from = last.map_or(0, |l| l.index + 1);
        self.shared.tail().truncate(from)?;
        let (done, wait) = oneshot::channel();
        self.send(Command::Truncate { from, done })?;
        wait.await
            .map_err(|_| std::io::Error::other("the Raft log thread has stopped"))?
    }

    async fn purge(&mut self, upto: LogId) -> Result<(), std::io::Error> {
        self.hard.purged = Some(log_pos(&upto));
        self.hard.vote_distrusted = self.trust.distrusted();
        self.shared.tail().purge(upto);
        self.send(Command::Purge {
            state: self.hard,
            upto: upto.index,
        })
    }
}
