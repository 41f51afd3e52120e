//! The single-writer pipeline: one thread owns the [`IndexWriter`] and the
//! [`WalWriter`]; every write reaches it through a bounded queue.
//!
//! # A group, step by step
//!
//! The thread runs the writers' one loop (`writer_loop`, shared with a
//! member's writer): it blocks for the first request, then drains whatever
//! else is queued (up to a group limit) into one *group*, and at the
//! turn's end, for the group:
//!
//! 1. **decides** each batch in queue order: checks its compare-and-sets
//!    against the index as changed by the batches before it in the group (an
//!    overlay map), and turns it into blind writes (`Op`s). A refused batch
//!    takes no LSN; an accepted one takes the next LSN;
//! 2. **appends** the accepted batches to the WAL, one record each, with one
//!    `write` call for the group;
//! 3. **syncs** according to the [`FsyncPolicy`];
//! 4. **applies** the batches to the index in LSN order, stamping each
//!    change with its batch's LSN (see `IndexWriter::set_stamp`);
//! 5. **publishes** the group's last LSN on the [`LsnWatermark`];
//! 6. **completes** the callers, through one-shot channels: completing only
//!    wakes the caller's task or thread, so no caller code runs here.
//!
//! # Overlapping fsyncs
//!
//! When asked (`PipelineConfig::overlap_syncs`, off by default), under
//! `always`, when writes keep coming (the group holds several
//! batches, or more wait in the queue), step 3 runs on the sync thread
//! (`sync_thread`) instead: the group's records are written, and while
//! its fsync runs the thread decides and writes the *next* group. When
//! that one is written, the thread waits for the first group's fsync,
//! starts the second group's, and only then applies and completes the
//! first. So the disk goes from one fsync to the next without waiting for
//! the thread, and at most one group is *in flight* (written, its fsync
//! running, not applied).
//!
//! A batch decided while a group is in flight checks its compare-and-sets
//! against the index plus the in-flight group's writes plus the earlier
//! batches of its own group: the overlay covers every write that is
//! decided but not applied. Nothing else changes: a group is applied and
//! answered only after its own fsync (and every earlier one) succeeded, in
//! LSN order, and a failed fsync fails the group in flight and the group
//! written after it. A lone writer never waits for a second thread: with
//! one batch and an empty queue the group is synced inline.
//!
//! So batches become visible strictly in LSN order, a batch is visible
//! only once it is as durable as the policy promises, and a caller that
//! gets its LSN can read its own write at once.
//!
//! If the WAL write fails (full disk), the WAL rolls the file back to the
//! group's start, the group's LSNs are reused, nothing is applied, and every
//! caller of the group gets [`WriteError::Wal`]. Reads are not affected,
//! and the next group tries the disk again.
//!
//! If a WAL **fsync** fails, the WAL is failed for good (a failed fsync may
//! have dropped the data silently; see `wal::writer`): the group's callers
//! and every later caller get [`WriteError::WalFailed`], nothing more is
//! applied, and [`PipelineFailure`] tells the owner, which should stop the
//! process so that a restart recovers from what is really on disk.
//!
//! When the queue has been empty for [`VOUCH_AFTER_IDLE`] (under `always`
//! and `interval`), the thread asks the WAL to vouch for its synced end
//! (one fsync), so that a quiet log is fully covered by its header's
//! synced-end mark. [`Message::Sync`] makes the WAL durable through an LSN
//! (for snapshots: the WAL before the snapshot). At stop the WAL is synced
//! and vouched for under every policy.
//!
//! **Architecture Invariant:** only this thread mutates the index, and it
//! applies a batch only after its WAL record is written (and synced, under
//! `always`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot, watch};

use super::core::WriterCore;
use super::handle::{Message, PipelineExit, Request, SyncReply, WriteHandle, add_elapsed};
use super::policy::FsyncPolicy;
use super::request::{WriteError, WriteOutcome};
use super::running::RunningWriter;
use super::sync_thread::SyncThread;
use super::writer_loop::{self, TurnEnd, Wake, WriterLog};
use crate::store::wal::WalWriter;
use crate::store::{FileError, Op, WalWriteError};
use uuidmap_index::IndexWriter;
use uuidmap_index::sync::LsnWatermark;

/// Limits and policy of the pipeline.
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// When to fsync the WAL.
    pub policy: FsyncPolicy,
    /// Batches that may wait in the queue; a full queue makes callers wait.
    pub queue_depth: usize,
    /// Most operations in one batch.
    pub max_batch_ops: usize,
    /// Most operations in one group (one WAL write and sync).
    pub max_group_ops: usize,
    /// Ask for a snapshot each time this many WAL bytes were written
    /// (0: never).
    pub snapshot_every_bytes: u64,
    /// Under `always`, overlap one group's fsync with writing the next
    /// (module docs); `false` (the default) syncs every group inline. Off
    /// by default because on the 2-core machine we measure on it cost
    /// throughput: the writer waits for the sync thread's wake-up before
    /// it answers a group, and the extra thread competes for the cores
    /// (BENCHMARKS.md, "Overlapping fsyncs").
    pub overlap_syncs: bool,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            policy: FsyncPolicy::Always,
            queue_depth: 4096,
            max_batch_ops: 100_000,
            max_group_ops: 1 << 16,
            snapshot_every_bytes: 256 << 20,
            overlap_syncs: false,
        }
    }
}

/// How long the queue must be empty before the thread has the WAL vouch
/// for its synced end (module docs).
pub const VOUCH_AFTER_IDLE: Duration = Duration::from_millis(10);

/// Whether the WAL failed (`Some`), watched by the pipeline's owner.
pub type PipelineFailure = watch::Receiver<Option<Arc<WalWriteError>>>;

/// Answers every batch of `group` with the WAL's failure (after a failed
/// fsync: the outcome of each is unknown).
fn answer_failed(group: &mut Vec<Pending>, failed: &Arc<WalWriteError>) {
    for pending in group.drain(..) {
        let _ = pending
            .reply
            .send(Err(WriteError::WalFailed(failed.clone())));
    }
}

/// The running pipeline thread.
pub struct Pipeline {
    running: RunningWriter,
    failure: PipelineFailure,
}

impl Pipeline {
    /// Starts the writer thread. The first accepted batch takes the WAL
    /// writer's next LSN.
    /// `ask_for_snapshot` is called each time `snapshot_every_bytes` more WAL
    /// bytes were written.
    pub fn start(
        config: PipelineConfig,
        writer: IndexWriter,
        wal: WalWriter,
        watermark: Arc<LsnWatermark>,
        ask_for_snapshot: Option<Box<dyn FnMut() + Send>>,
    ) -> std::io::Result<Pipeline> {
        let (handle, rx) = WriteHandle::new(config.queue_depth, config.max_batch_ops);
        let stats = handle.stats_arc();
        stats.synced_lsn.store(wal.synced_lsn(), Ordering::Relaxed);
        let (failed_tx, failure) = watch::channel(None);
        let next_lsn = wal.next_lsn();
        let sync_thread = if config.overlap_syncs && config.policy == FsyncPolicy::Always {
            Some(SyncThread::spawn()?)
        } else {
            None
        };
        let state = GroupCommit {
            core: WriterCore::new(writer, watermark, stats.clone()),
            wal,
            policy: config.policy,
            max_group_ops: config.max_group_ops,
            snapshot_every_bytes: config.snapshot_every_bytes,
            ask_for_snapshot,
            next_lsn,
            group: Vec::new(),
            ops: Vec::new(),
            sync_thread,
            in_flight: None,
            unsynced_since: None,
            wal_bytes_at_nudge: 0,
            failed: None,
            failed_tx,
            idle_since: None,
        };
        let running = RunningWriter::spawn("uuidmap-writer", handle, move || {
            writer_loop::run(state, rx)
        })?;
        Ok(Pipeline { running, failure })
    }

    /// Watches for a failure of the WAL (see the module docs).
    pub fn failure(&self) -> PipelineFailure {
        self.failure.clone()
    }

    /// A handle for submitting writes.
    pub fn handle(&self) -> WriteHandle {
        self.running.handle().clone()
    }

    /// Stops accepting writes, finishes every batch already queued, syncs
    /// the WAL, and returns the writer. Later writes get
    /// [`WriteError::ShuttingDown`].
    pub fn stop(mut self) -> Option<PipelineExit> {
        self.running.stop()
    }
}

/// A batch of the current group.
struct Pending {
    reply: oneshot::Sender<Result<WriteOutcome, WriteError>>,
    /// The LSN and the range of `WriterThread::ops` holding its blind
    /// writes, or why it was refused.
    decided: Result<(u64, std::ops::Range<usize>), WriteError>,
}

/// A group written to the WAL whose fsync runs on the sync thread: applied
/// and answered once it succeeded.
struct InFlight {
    group: Vec<Pending>,
    ops: Vec<Op>,
}

/// The state of the writer thread: the core, over the WAL's group commit.
struct GroupCommit {
    core: WriterCore,
    wal: WalWriter,
    policy: FsyncPolicy,
    max_group_ops: usize,
    snapshot_every_bytes: u64,
    ask_for_snapshot: Option<Box<dyn FnMut() + Send>>,
    /// The LSN the next accepted batch takes.
    next_lsn: u64,
    /// Runs a group's fsync while the next is written (`None`: every
    /// group is synced inline).
    sync_thread: Option<SyncThread>,
    /// The group written whose fsync runs on `sync_thread`.
    in_flight: Option<InFlight>,
    /// The group being processed.
    group: Vec<Pending>,
    /// The blind writes of the group's accepted batches.
    ops: Vec<Op>,
    /// Under `interval`: when the oldest unsynced write was made.
    unsynced_since: Option<Instant>,
    wal_bytes_at_nudge: u64,
    /// Set once a WAL fsync failed: every later batch gets it.
    failed: Option<Arc<WalWriteError>>,
    /// Tells the owner about `failed`.
    failed_tx: watch::Sender<Option<Arc<WalWriteError>>>,
    /// When the queue became empty after the last group (for the idle vouch).
    idle_since: Option<Instant>,
}

impl WriterLog for GroupCommit {
    /// A deadline passed: the `interval` fsync's, or the idle vouch's.
    type Input = ();

    fn core(&mut self) -> &mut WriterCore {
        &mut self.core
    }

    fn wait(&mut self, runtime: &Runtime, queue: &mut mpsc::Receiver<Message>) -> Wake<()> {
        if self.in_flight.is_some() && queue.is_empty() {
            // Nothing to overlap with: finish the group in flight.
            self.settle();
            self.idle_since = Some(Instant::now());
        }
        let Some(deadline) = self.wake_deadline() else {
            return Wake::Message(runtime.block_on(queue.recv()));
        };
        let wait = deadline.saturating_duration_since(Instant::now());
        match runtime.block_on(async { tokio::time::timeout(wait, queue.recv()).await }) {
            Ok(message) => Wake::Message(message),
            Err(_elapsed) => Wake::Log(()),
        }
    }

    fn on_input(&mut self, (): ()) -> bool {
        self.on_deadline();
        // Nothing was taken: no group to end, and still idle.
        false
    }

    fn take(&mut self, request: Request) {
        self.decide(request);
    }

    fn sync_through(&mut self, lsn: u64, reply: SyncReply) {
        // The group so far first: the LSN may be one of its. And a group
        // may still be in flight: the WAL takes no second fsync meanwhile.
        if !self.group.is_empty() {
            self.commit_group(false);
        }
        self.settle();
        self.sync_now(lsn, reply);
    }

    fn room(&self, ops: usize) -> bool {
        ops < self.max_group_ops
    }

    fn end_turn(&mut self, end: TurnEnd) {
        if !self.group.is_empty() {
            self.commit_group(!end.queue_empty);
        }
        self.idle_since = Some(Instant::now());
    }

    fn finish(mut self) -> PipelineExit {
        self.settle();
        // Whatever the policy, a stop leaves the log synced and vouched for.
        if self.failed.is_none() {
            match self.wal.vouch() {
                Ok(()) => self.note_synced(),
                Err(e) => tracing::error!("the final WAL fsync failed: {e}"),
            }
        }
        PipelineExit {
            writer: self.core.writer,
            next_lsn: self.next_lsn,
        }
    }
}

impl GroupCommit {
    /// When the thread must wake without a message: the `interval` sync,
    /// or the idle vouch.
    fn wake_deadline(&self) -> Option<Instant> {
        if self.failed.is_some() || self.in_flight.is_some() {
            return None;
        }
        let vouch = match self.policy {
            FsyncPolicy::Never => None,
            _ => self.idle_since.map(|t| t + VOUCH_AFTER_IDLE),
        };
        match (self.sync_deadline(), vouch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn on_deadline(&mut self) {
        if self.sync_deadline().is_some_and(|d| d <= Instant::now()) {
            self.interval_sync();
        }
        if self
            .idle_since
            .is_some_and(|t| t + VOUCH_AFTER_IDLE <= Instant::now())
        {
            self.idle_since = None;
            if self.failed.is_none() {
                let vouched = self.wal.vouch();
                self.after_sync(vouched, "the idle WAL fsync failed");
            }
        }
    }

    /// Answers a [`Message::Sync`], no group in flight.
    fn sync_now(&mut self, lsn: u64, reply: SyncReply) {
        debug_assert!(self.in_flight.is_none(), "settled before");
        let result = match &self.failed {
            Some(e) => Err(e.clone()),
            None if self.wal.synced_lsn() >= lsn => Ok(()),
            None => {
                let synced = self.wal.sync();
                self.after_sync(synced, "the WAL fsync before a snapshot failed");
                match &self.failed {
                    Some(e) => Err(e.clone()),
                    None if self.wal.synced_lsn() >= lsn => Ok(()),
                    None => Err(Arc::new(
                        FileError::new(
                            "making the WAL durable for a snapshot",
                            self.wal.current_path(),
                            std::io::Error::other(format!(
                                "LSN {lsn} is not in the log (the snapshot is ahead of the writer)"
                            )),
                        )
                        .into(),
                    )),
                }
            }
        };
        let _ = reply.send(result);
    }

    /// After a sync: publish the synced LSN, or note that the WAL failed.
    fn after_sync(&mut self, result: Result<(), WalWriteError>, what: &str) {
        match result {
            Ok(()) => self.note_synced(),
            Err(e) => {
                tracing::error!("{what}: {e}");
                self.check_wal_failed();
            }
        }
    }

    fn note_synced(&self) {
        self.core
            .stats
            .synced_lsn
            .store(self.wal.synced_lsn(), Ordering::Release);
    }

    /// If the WAL is failed for good, remembers it and tells the owner.
    fn check_wal_failed(&mut self) {
        if self.failed.is_some() || !self.wal.is_failed() {
            return;
        }
        let error = Arc::new(
            self.wal
                .sync()
                .expect_err("a failed WAL refuses every call"),
        );
        self.failed = Some(error.clone());
        let _ = self.failed_tx.send(Some(error));
    }

    /// Under `interval`, when the unsynced writes must be synced.
    fn sync_deadline(&self) -> Option<Instant> {
        match self.policy {
            FsyncPolicy::Interval(d) => self.unsynced_since.map(|t| t + d),
            _ => None,
        }
    }

    fn interval_sync(&mut self) {
        let synced = self.wal.sync();
        let failed = synced.is_err();
        self.after_sync(synced, "the periodic WAL fsync failed");
        if failed && self.failed.is_none() {
            // Not an fsync failure (a rollback still pending): retried at
            // the next deadline.
            self.unsynced_since = Some(Instant::now());
        } else {
            self.unsynced_since = None;
        }
    }

    /// Step 1: checks a batch's compare-and-sets, turns it into blind
    /// writes and gives it an LSN, or refuses it.
    fn decide(&mut self, request: Request) {
        let taken = Instant::now();
        let start = self.ops.len();
        let decided = match self.core.decide(&request.ops, &mut self.ops) {
            Err(e) => Err(e),
            Ok(()) => {
                let lsn = self.next_lsn;
                self.next_lsn += 1;
                let ops = &self.ops[start..];
                self.wal.append(lsn, ops);
                self.core.record(ops, lsn);
                Ok((lsn, start..self.ops.len()))
            }
        };
        self.group.push(Pending {
            reply: request.reply,
            decided,
        });
        add_elapsed(&self.core.stats.steps.decide_ns, taken);
    }

    /// Steps 2 to 6 for the decided group: inline, or with its fsync on the
    /// sync thread when writes keep coming (`more_waiting`: the queue is
    /// not empty; module docs, "Overlapping fsyncs").
    fn commit_group(&mut self, more_waiting: bool) {
        let overlap = self.sync_thread.is_some()
            && self.failed.is_none()
            && (self.in_flight.is_some() || more_waiting || self.group.len() > 1);
        if overlap {
            self.commit_overlapped();
        } else {
            self.commit_inline();
        }
    }

    /// The LSN of the group's first accepted batch, if any.
    fn first_lsn(&self) -> Option<u64> {
        self.group
            .iter()
            .find_map(|p| p.decided.as_ref().ok().map(|d| d.0))
    }

    /// Writes the group and fsyncs it (under `always`) on this thread.
    fn commit_inline(&mut self) {
        if let Some(first_lsn) = self.first_lsn() {
            let sync = self.policy == FsyncPolicy::Always;
            let written = self.write_group(sync);
            if let Err(e) = written {
                self.fail_group(first_lsn, e);
                return;
            }
            if sync {
                self.note_synced();
            }
            if let FsyncPolicy::Interval(_) = self.policy {
                self.unsynced_since.get_or_insert_with(Instant::now);
            }
        }
        let mut group = std::mem::take(&mut self.group);
        let mut ops = std::mem::take(&mut self.ops);
        self.apply_and_complete(&mut group, &ops);
        ops.clear();
        (self.group, self.ops) = (group, ops);
    }

    /// Steps 2 and 3 inline: one WAL write of the group's records, then a
    /// fsync if `sync`, counted in the per-step figures.
    fn write_group(&mut self, sync: bool) -> Result<(), WalWriteError> {
        let before = self.wal.total_bytes();
        let steps = &self.core.stats.steps;
        self.wal
            .commit_timed(sync, &steps.wal_write_ns, &steps.wal_sync_ns)?;
        let written = self.wal.total_bytes() - before;
        self.core
            .stats
            .wal_bytes
            .fetch_add(written, Ordering::Relaxed);
        self.maybe_ask_for_snapshot();
        Ok(())
    }

    /// Writes the group without a fsync, waits for the group in flight,
    /// starts this group's fsync on the sync thread, then applies and
    /// answers the group that was in flight (module docs).
    fn commit_overlapped(&mut self) {
        let first_lsn = self.first_lsn();
        if let Some(first_lsn) = first_lsn
            && let Err(e) = self.write_group(false)
        {
            // Not applied: the group before it may still be.
            self.settle();
            self.fail_group(first_lsn, e);
            return;
        }
        let previous = self.in_flight.take();
        let previous_synced = self.finish_sync();
        if let Some(e) = self.failed.clone().filter(|_| !previous_synced) {
            if let Some(mut previous) = previous {
                answer_failed(&mut previous.group, &e);
            }
            self.fail_written_group();
            return;
        }
        let mut group = std::mem::take(&mut self.group);
        let ops = std::mem::take(&mut self.ops);
        let started = match self.wal.start_sync() {
            Ok(file) => Ok(file),
            Err(e) if !self.wal.is_failed() => {
                // Nothing was changed (no handle to sync with): sync
                // inline instead.
                tracing::warn!(
                    "could not start the WAL fsync on the sync thread ({e}); syncing inline"
                );
                let synced = self.wal.sync();
                self.after_sync(synced, "the WAL fsync failed");
                if self.failed.is_none() {
                    Ok(None)
                } else {
                    Err(())
                }
            }
            Err(e) => {
                tracing::error!("{e}");
                self.check_wal_failed();
                Err(())
            }
        };
        match started {
            Ok(Some(file)) => {
                if let Some(thread) = &mut self.sync_thread {
                    thread.start(file);
                }
                self.core
                    .stats
                    .overlapped_groups
                    .fetch_add(1, Ordering::Relaxed);
                self.in_flight = Some(InFlight { group, ops });
            }
            Ok(None) => {
                // Synced already (or only refused batches): answered after
                // the group before it, in order.
                if let Some(mut previous) = previous {
                    self.apply_and_complete(&mut previous.group, &previous.ops);
                }
                let mut ops = ops;
                self.apply_and_complete(&mut group, &ops);
                ops.clear();
                (self.group, self.ops) = (group, ops);
                return;
            }
            Err(()) => {
                if let Some(mut previous) = previous {
                    self.apply_and_complete(&mut previous.group, &previous.ops);
                }
                (self.group, self.ops) = (group, ops);
                self.fail_written_group();
                return;
            }
        }
        if let Some(mut previous) = previous {
            self.apply_and_complete(&mut previous.group, &previous.ops);
        }
    }

    /// Waits for the fsync on the sync thread, if one runs, and records its
    /// result. Returns whether it succeeded (or none ran).
    fn finish_sync(&mut self) -> bool {
        let Some(thread) = &mut self.sync_thread else {
            return true;
        };
        if !self.wal.sync_in_flight() {
            return true;
        }
        let (result, nanos) = thread.finish();
        self.core
            .stats
            .steps
            .wal_sync_ns
            .fetch_add(nanos, Ordering::Relaxed);
        match self.wal.finish_sync(result, nanos) {
            Ok(()) => {
                self.note_synced();
                true
            }
            Err(e) => {
                tracing::error!("the WAL fsync failed: {e}");
                self.check_wal_failed();
                false
            }
        }
    }

    /// Finishes the group in flight, if any: waits for its fsync, then
    /// applies and answers it, or fails it.
    fn settle(&mut self) {
        let Some(mut in_flight) = self.in_flight.take() else {
            return;
        };
        if self.finish_sync() {
            self.apply_and_complete(&mut in_flight.group, &in_flight.ops);
        } else {
            let failed = self.failed.clone().expect("a failed fsync fails the WAL");
            answer_failed(&mut in_flight.group, &failed);
            self.next_lsn = self.wal.next_lsn();
            // Nothing after a failed fsync is applied.
            self.core.forget_decided();
        }
    }

    /// The current group was written but the fsync before its own failed:
    /// its callers learn that the WAL failed.
    fn fail_written_group(&mut self) {
        self.core.stats.wal_failures.fetch_add(1, Ordering::Relaxed);
        let failed = self.failed.clone().expect("a failed fsync fails the WAL");
        self.next_lsn = self.wal.next_lsn();
        self.core.forget_decided();
        self.ops.clear();
        answer_failed(&mut self.group, &failed);
    }

    /// Steps 4 to 6 for a synced group: apply in LSN order, publish,
    /// answer.
    fn apply_and_complete(&mut self, group: &mut Vec<Pending>, ops: &[Op]) {
        let applying = Instant::now();
        let mut last = None;
        let mut batches = 0;
        for pending in group.iter() {
            let Ok((lsn, range)) = &pending.decided else {
                continue;
            };
            self.core.apply(*lsn, &ops[range.clone()], Some(*lsn));
            last = Some(*lsn);
            batches += 1;
        }
        if let Some(lsn) = last {
            self.core.publish(lsn);
            self.core.stats.groups.fetch_add(1, Ordering::Relaxed);
            self.core
                .stats
                .batches
                .fetch_add(batches, Ordering::Relaxed);
            add_elapsed(&self.core.stats.steps.apply_ns, applying);
        }
        let completing = Instant::now();
        for pending in group.drain(..) {
            // A caller that went away does not mind.
            let _ = pending
                .reply
                .send(pending.decided.map(|(lsn, _)| WriteOutcome { lsn }));
        }
        add_elapsed(&self.core.stats.steps.complete_ns, completing);
    }

    /// The WAL refused the group: nothing is applied, the LSNs are reused,
    /// every caller learns why.
    fn fail_group(&mut self, first_lsn: u64, error: WalWriteError) {
        self.core.stats.wal_failures.fetch_add(1, Ordering::Relaxed);
        self.check_wal_failed();
        let make_error: Box<dyn Fn() -> WriteError> = match &self.failed {
            Some(failed) => {
                // The WAL is gone for good; its LSNs stay where they are (a
                // failed group may be on disk, and nothing follows it).
                self.next_lsn = self.wal.next_lsn();
                let failed = failed.clone();
                Box::new(move || WriteError::WalFailed(failed.clone()))
            }
            None => {
                let resume = if error.is_disk_full() {
                    "; writes resume by themselves once the data disk has room"
                } else {
                    "; later writes are tried again"
                };
                tracing::error!("a write group failed and was not applied: {error}{resume}");
                self.next_lsn = first_lsn;
                debug_assert_eq!(self.wal.next_lsn(), first_lsn);
                let error = Arc::new(error);
                Box::new(move || WriteError::Wal(error.clone()))
            }
        };
        self.core.forget_decided();
        self.ops.clear();
        for pending in self.group.drain(..) {
            let _ = pending.reply.send(Err(make_error()));
        }
    }

    fn maybe_ask_for_snapshot(&mut self) {
        let Some(ask) = &mut self.ask_for_snapshot else {
            return;
        };
        let total = self.core.stats.wal_bytes.load(Ordering::Relaxed);
        if self.snapshot_every_bytes > 0
            && total - self.wal_bytes_at_nudge >= self.snapshot_every_bytes
        {
            self.wal_bytes_at_nudge = total;
            ask();
        }
    }
}
