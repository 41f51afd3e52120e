//! The single-writer pipeline: one thread owns the [`IndexWriter`] and the
//! [`WalWriter`]; every write reaches it through a bounded queue.
//!
//! # A group, step by step
//!
//! The thread blocks for the first request, then drains whatever else is
//! queued (up to a group limit) into one *group*, and for the group:
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

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use uuid::Uuid;

use super::policy::FsyncPolicy;
use super::request::{WriteError, WriteOp, WriteOutcome};
use super::sync_thread::SyncThread;
use crate::store::wal::WalWriter;
use crate::store::{Op, StoreError};
use uuidmap_index::sync::LsnWatermark;
use uuidmap_index::{IndexWriter, Key};

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
pub type PipelineFailure = watch::Receiver<Option<Arc<StoreError>>>;

/// Counters the pipeline keeps for metrics and snapshot triggers.
#[derive(Debug, Default)]
pub struct PipelineStats {
    /// WAL bytes written since the pipeline started.
    pub wal_bytes: AtomicU64,
    /// Groups committed.
    pub groups: AtomicU64,
    /// Batches applied.
    pub batches: AtomicU64,
    /// Groups whose fsync ran on the sync thread while the next group was
    /// decided and written (module docs, "Overlapping fsyncs").
    pub overlapped_groups: AtomicU64,
    /// Groups that failed because the WAL could not be written or synced.
    pub wal_failures: AtomicU64,
    /// Batches waiting in the queue (approximate).
    pub queued: AtomicU64,
    /// Every batch up to this LSN is durable in the WAL.
    pub synced_lsn: AtomicU64,
    /// Where a write's time goes, step by step.
    pub steps: WriteSteps,
}

/// Where a write's time goes, summed since the pipeline started, in
/// nanoseconds (`/metrics`: `uuidmap_write_step_seconds_total`). Divided by
/// `batches` (or by `groups` for the per-group steps) it gives the cost of
/// each step of a write; `call` minus the writer's steps is what the
/// hand-offs cost (the caller's wake-up above all).
#[derive(Debug, Default)]
pub struct WriteSteps {
    /// From a caller's submit to the writer taking the batch from the queue
    /// (per batch: the queue and the writer's wake-up).
    pub queue_ns: AtomicU64,
    /// Deciding batches: compare-and-sets, encoding the WAL record (per
    /// batch).
    pub decide_ns: AtomicU64,
    /// The WAL `write` of a group (per group).
    pub wal_write_ns: AtomicU64,
    /// The WAL fsync of a group, the synced-end slot's write included (per
    /// group; 0 unless the policy syncs each group).
    pub wal_sync_ns: AtomicU64,
    /// Applying a group to the index and publishing its LSN (per group).
    pub apply_ns: AtomicU64,
    /// Sending the group's answers, which wakes the callers (per group).
    pub complete_ns: AtomicU64,
    /// Whole `write` calls, from submit to the answer in the caller's hands.
    pub call_ns: AtomicU64,
    /// `write` calls that got an answer.
    pub calls: AtomicU64,
}

/// Answers every batch of `group` with the WAL's failure (after a failed
/// fsync: the outcome of each is unknown).
fn answer_failed(group: &mut Vec<Pending>, failed: &Arc<StoreError>) {
    for pending in group.drain(..) {
        let _ = pending
            .reply
            .send(Err(WriteError::WalFailed(failed.clone())));
    }
}

/// Folds `ops` into `overlay`, later writes over earlier ones.
fn fold_into(overlay: &mut HashMap<Key, Option<Uuid>, ahash::RandomState>, ops: &[Op]) {
    for op in ops {
        match *op {
            Op::Put { key, value } => overlay.insert(key, Some(value)),
            Op::Delete { key } => overlay.insert(key, None),
        };
    }
}

/// Adds the time since `since` to `counter`.
fn add_elapsed(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// A caller's batch and where to send its answer.
pub(super) struct Request {
    pub(super) ops: Vec<WriteOp>,
    pub(super) reply: oneshot::Sender<Result<WriteOutcome, WriteError>>,
    /// When the caller submitted it.
    pub(super) submitted: Instant,
}

/// What a [`WriteHandle`] sends its writer thread.
pub(super) enum Message {
    Write(Request),
    /// Make the WAL durable through this LSN (which must be committed).
    Sync(u64, oneshot::Sender<Result<(), Arc<StoreError>>>),
    /// Finish what is queued, sync, and stop.
    Stop,
}

/// The cloneable sending side: submit batches, wait for their LSN.
#[derive(Clone)]
pub struct WriteHandle {
    tx: mpsc::Sender<Message>,
    closed: Arc<AtomicBool>,
    max_batch_ops: usize,
    stats: Arc<PipelineStats>,
}

/// What the thread hands back when it stops.
pub struct PipelineExit {
    /// The index writer, for a caller that goes on in-process.
    pub writer: IndexWriter,
    /// The LSN the next batch would have taken.
    pub next_lsn: u64,
}

/// The running pipeline thread.
pub struct Pipeline {
    handle: WriteHandle,
    thread: Option<JoinHandle<PipelineExit>>,
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
        let (handle, rx) = WriteHandle::new(&config);
        let stats = handle.stats.clone();
        stats.synced_lsn.store(wal.synced_lsn(), Ordering::Relaxed);
        let (failed_tx, failure) = watch::channel(None);
        let next_lsn = wal.next_lsn();
        let sync_thread = if config.overlap_syncs && config.policy == FsyncPolicy::Always {
            Some(SyncThread::spawn()?)
        } else {
            None
        };
        let state = WriterThread {
            writer,
            wal,
            watermark,
            policy: config.policy,
            max_group_ops: config.max_group_ops,
            snapshot_every_bytes: config.snapshot_every_bytes,
            ask_for_snapshot,
            next_lsn,
            overlay: HashMap::default(),
            overlay_upto: 0,
            overlay_has_in_flight: false,
            group: Vec::new(),
            ops: Vec::new(),
            sync_thread,
            in_flight: None,
            unsynced_since: None,
            wal_bytes_at_nudge: 0,
            stats,
            failed: None,
            failed_tx,
            idle_since: None,
        };
        let thread = std::thread::Builder::new()
            .name("uuidmap-writer".into())
            .spawn(move || state.run(rx))?;
        Ok(Pipeline {
            handle,
            thread: Some(thread),
            failure,
        })
    }

    /// Watches for a failure of the WAL (see the module docs).
    pub fn failure(&self) -> PipelineFailure {
        self.failure.clone()
    }

    /// A handle for submitting writes.
    pub fn handle(&self) -> WriteHandle {
        self.handle.clone()
    }

    /// Stops accepting writes, finishes every batch already queued, syncs
    /// the WAL, and returns the writer. Later writes get
    /// [`WriteError::ShuttingDown`].
    pub fn stop(mut self) -> Option<PipelineExit> {
        self.stop_thread()
    }

    fn stop_thread(&mut self) -> Option<PipelineExit> {
        let thread = self.thread.take()?;
        Some(self.handle.stop_and_join(thread))
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.stop_thread();
        }
    }
}

impl WriteHandle {
    /// A handle and the receiving end its writer thread reads.
    pub(super) fn new(config: &PipelineConfig) -> (WriteHandle, mpsc::Receiver<Message>) {
        let (tx, rx) = mpsc::channel(config.queue_depth.max(1));
        let handle = WriteHandle {
            tx,
            closed: Arc::new(AtomicBool::new(false)),
            max_batch_ops: config.max_batch_ops,
            stats: Arc::new(PipelineStats::default()),
        };
        (handle, rx)
    }

    /// Asks `thread` (this handle's writer thread) to stop and waits for
    /// it; a panic on it is resumed here.
    pub(super) fn stop_and_join(&self, thread: JoinHandle<PipelineExit>) -> PipelineExit {
        // If the thread is gone already, the send fails and join says why.
        self.send_stop();
        match thread.join() {
            Ok(exit) => exit,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Refuses later writes and asks the thread to stop (retrying while
    /// the queue is full). Not `blocking_send`: an owner may stop from
    /// inside its async runtime, where that panics.
    pub(super) fn send_stop(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let mut stop = Message::Stop;
        while let Err(mpsc::error::TrySendError::Full(back)) = self.tx.try_send(stop) {
            stop = back;
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Submits a batch and waits until it is applied (and durable as the
    /// policy says). A full queue makes this wait for room.
    pub async fn write(&self, ops: Vec<WriteOp>) -> Result<WriteOutcome, WriteError> {
        let (request, answer) = self.request(ops)?;
        let submitted = request.submitted;
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        let sent = self.tx.send(Message::Write(request)).await;
        if sent.is_err() {
            self.stats.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(WriteError::ShuttingDown);
        }
        let outcome = answer.await.unwrap_or(Err(WriteError::Unanswered));
        self.count_call(submitted);
        outcome
    }

    fn count_call(&self, submitted: Instant) {
        add_elapsed(&self.stats.steps.call_ns, submitted);
        self.stats.steps.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// [`WriteHandle::write`] for threads outside an async runtime.
    pub fn write_blocking(&self, ops: Vec<WriteOp>) -> Result<WriteOutcome, WriteError> {
        let (request, answer) = self.request(ops)?;
        let submitted = request.submitted;
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        if self.tx.blocking_send(Message::Write(request)).is_err() {
            self.stats.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(WriteError::ShuttingDown);
        }
        let outcome = answer
            .blocking_recv()
            .unwrap_or(Err(WriteError::Unanswered));
        self.count_call(submitted);
        outcome
    }

    /// Makes the WAL durable through `lsn`, which must be committed (for
    /// snapshots; blocking, from a thread outside the async runtime). Fast
    /// when it already is. After the pipeline stopped, only what its final
    /// sync covered is durable.
    pub fn make_durable_blocking(&self, lsn: u64) -> Result<(), Arc<StoreError>> {
        if self.stats.synced_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let (reply, answer) = oneshot::channel();
        let not_durable = || {
            Arc::new(StoreError::io(
                "making the WAL durable for a snapshot",
                "the WAL",
                std::io::Error::other(format!("the writer stopped before LSN {lsn} was durable")),
            ))
        };
        if self.tx.blocking_send(Message::Sync(lsn, reply)).is_err() {
            // Stopped: its final sync is all there is.
            return if self.stats.synced_lsn.load(Ordering::Acquire) >= lsn {
                Ok(())
            } else {
                Err(not_durable())
            };
        }
        answer
            .blocking_recv()
            .unwrap_or_else(|_| Err(not_durable()))
    }

    /// The pipeline's counters.
    pub fn stats(&self) -> &PipelineStats {
        &self.stats
    }

    /// The pipeline's counters, shared with its writer thread.
    pub(super) fn stats_arc(&self) -> Arc<PipelineStats> {
        self.stats.clone()
    }

    /// Checks what can be checked without the index, and makes the request.
    #[allow(clippy::type_complexity)]
    fn request(
        &self,
        ops: Vec<WriteOp>,
    ) -> Result<(Request, oneshot::Receiver<Result<WriteOutcome, WriteError>>), WriteError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(WriteError::ShuttingDown);
        }
        if ops.is_empty() {
            return Err(WriteError::Empty);
        }
        if ops.len() > self.max_batch_ops {
            return Err(WriteError::TooLarge {
                len: ops.len(),
                max: self.max_batch_ops,
            });
        }
        let (reply, answer) = oneshot::channel();
        let submitted = Instant::now();
        Ok((
            Request {
                ops,
                reply,
                submitted,
            },
            answer,
        ))
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

/// The state of the writer thread.
struct WriterThread {
    writer: IndexWriter,
    wal: WalWriter,
    watermark: Arc<LsnWatermark>,
    policy: FsyncPolicy,
    max_group_ops: usize,
    snapshot_every_bytes: u64,
    ask_for_snapshot: Option<Box<dyn FnMut() + Send>>,
    /// The LSN the next accepted batch takes.
    next_lsn: u64,
    /// Values as the in-flight group's writes (once
    /// `overlay_has_in_flight`) and then `ops[..overlay_upto]` left them
    /// (`None`: removed).
    overlay: HashMap<Key, Option<Uuid>, ahash::RandomState>,
    /// How many of `ops` the overlay has folded in.
    overlay_upto: usize,
    /// Whether the overlay has folded in the in-flight group's writes.
    overlay_has_in_flight: bool,
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
    stats: Arc<PipelineStats>,
    /// Set once a WAL fsync failed: every later batch gets it.
    failed: Option<Arc<StoreError>>,
    /// Tells the owner about `failed`.
    failed_tx: watch::Sender<Option<Arc<StoreError>>>,
    /// When the queue became empty after the last group (for the idle vouch).
    idle_since: Option<Instant>,
}

impl WriterThread {
    fn run(mut self, mut rx: mpsc::Receiver<Message>) -> PipelineExit {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("building the writer thread's timer runtime");
        let mut stopping = false;
        while !stopping {
            if self.in_flight.is_some() && rx.is_empty() {
                // Nothing to overlap with: finish the group in flight.
                self.settle();
                self.idle_since = Some(Instant::now());
                continue;
            }
            let first = match self.wake_deadline() {
                None => runtime.block_on(rx.recv()),
                Some(deadline) => {
                    let wait = deadline.saturating_duration_since(Instant::now());
                    let next =
                        runtime.block_on(async { tokio::time::timeout(wait, rx.recv()).await });
                    match next {
                        Ok(m) => m,
                        Err(_elapsed) => {
                            self.on_deadline();
                            continue;
                        }
                    }
                }
            };
            let mut group_ops = 0;
            match first {
                None | Some(Message::Stop) => stopping = true,
                Some(Message::Write(r)) => {
                    group_ops += r.ops.len();
                    self.decide(r);
                }
                Some(Message::Sync(lsn, reply)) => {
                    // A group may still be in flight (the queue was not
                    // empty when this turn began): the LSN may be one of
                    // its, and the WAL takes no second fsync meanwhile.
                    self.settle();
                    self.sync_through(lsn, reply);
                }
            }
            // Drain what else is queued into the same group. After `Stop`,
            // keep draining: those batches were accepted before it.
            while stopping || group_ops < self.max_group_ops {
                match rx.try_recv() {
                    Ok(Message::Write(r)) => {
                        group_ops += r.ops.len();
                        self.decide(r);
                    }
                    Ok(Message::Sync(lsn, reply)) => {
                        // After the group: the LSN may be one of its.
                        if !self.group.is_empty() {
                            self.commit_group(false);
                        }
                        self.settle();
                        self.sync_through(lsn, reply);
                    }
                    Ok(Message::Stop) => stopping = true,
                    Err(_) => break,
                }
            }
            if !self.group.is_empty() {
                self.commit_group(!rx.is_empty());
            }
            self.idle_since = Some(Instant::now());
        }
        self.settle();
        // Whatever the policy, a stop leaves the log synced and vouched for.
        if self.failed.is_none() {
            match self.wal.vouch() {
                Ok(()) => self.note_synced(),
                Err(e) => tracing::error!("the final WAL fsync failed: {e}"),
            }
        }
        PipelineExit {
            writer: self.writer,
            next_lsn: self.next_lsn,
        }
    }

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

    /// Answers a [`Message::Sync`].
    fn sync_through(&mut self, lsn: u64, reply: oneshot::Sender<Result<(), Arc<StoreError>>>) {
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
                    None => Err(Arc::new(StoreError::io(
                        "making the WAL durable for a snapshot",
                        self.wal.current_path(),
                        std::io::Error::other(format!(
                            "LSN {lsn} is not in the log (the snapshot is ahead of the writer)"
                        )),
                    ))),
                }
            }
        };
        let _ = reply.send(result);
    }

    /// After a sync: publish the synced LSN, or note that the WAL failed.
    fn after_sync(&mut self, result: Result<(), StoreError>, what: &str) {
        match result {
            Ok(()) => self.note_synced(),
            Err(e) => {
                tracing::error!("{what}: {e}");
                self.check_wal_failed();
            }
        }
    }

    fn note_synced(&self) {
        self.stats
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
        self.stats.queued.fetch_sub(1, Ordering::Relaxed);
        let taken = Instant::now();
        self.stats.steps.queue_ns.fetch_add(
            taken.duration_since(request.submitted).as_nanos() as u64,
            Ordering::Relaxed,
        );
        let start = self.ops.len();
        let mut refused = None;
        for (index, op) in request.ops.iter().enumerate() {
            match *op {
                WriteOp::Put { key, value } => self.ops.push(Op::Put { key, value }),
                WriteOp::Delete { key } => self.ops.push(Op::Delete { key }),
                WriteOp::CompareAndSet { key, expected, new } => {
                    let current = self.current(key);
                    if current != expected {
                        refused = Some(WriteError::CasMismatch {
                            index,
                            key,
                            expected,
                            current,
                        });
                        break;
                    }
                    self.ops.push(match new {
                        Some(value) => Op::Put { key, value },
                        None => Op::Delete { key },
                    });
                }
            }
        }
        let decided = match refused {
            Some(e) => {
                self.ops.truncate(start);
                if self.overlay_upto > start {
                    // The overlay saw some of the refused batch's writes:
                    // rebuild it from the accepted ones when next needed.
                    self.clear_overlay();
                }
                Err(e)
            }
            None => {
                let lsn = self.next_lsn;
                self.next_lsn += 1;
                self.wal.append(lsn, &self.ops[start..]);
                Ok((lsn, start..self.ops.len()))
            }
        };
        self.group.push(Pending {
            reply: request.reply,
            decided,
        });
        add_elapsed(&self.stats.steps.decide_ns, taken);
    }

    /// The value of `key` as the writes decided so far (the group in
    /// flight's, the current batch's included) leave it. The overlay is only built once a group holds a
    /// compare-and-set, so plain writes do not pay for it.
    fn current(&mut self, key: Key) -> Option<Uuid> {
        if !self.overlay_has_in_flight {
            debug_assert!(
                self.in_flight.is_none() || self.overlay_upto == 0,
                "the in-flight group's writes come first"
            );
            if let Some(in_flight) = &self.in_flight {
                fold_into(&mut self.overlay, &in_flight.ops);
            }
            self.overlay_has_in_flight = true;
        }
        fold_into(&mut self.overlay, &self.ops[self.overlay_upto..]);
        self.overlay_upto = self.ops.len();
        match self.overlay.get(&key) {
            Some(v) => *v,
            None => self.writer.get(key.as_uuid()),
        }
    }

    /// Forgets the overlay: the next compare-and-set rebuilds it from the
    /// writes decided and not applied.
    fn clear_overlay(&mut self) {
        self.overlay.clear();
        self.overlay_upto = 0;
        self.overlay_has_in_flight = false;
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
        self.clear_overlay();
        self.writer.reclaim();
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
    fn write_group(&mut self, sync: bool) -> Result<(), StoreError> {
        let before = self.wal.total_bytes();
        let (write_ns, sync_ns) = self.wal.io_nanos();
        let committed = self.wal.commit(sync);
        let (write_after, sync_after) = self.wal.io_nanos();
        let steps = &self.stats.steps;
        steps
            .wal_write_ns
            .fetch_add(write_after - write_ns, Ordering::Relaxed);
        steps
            .wal_sync_ns
            .fetch_add(sync_after - sync_ns, Ordering::Relaxed);
        committed?;
        let written = self.wal.total_bytes() - before;
        self.stats.wal_bytes.fetch_add(written, Ordering::Relaxed);
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
                self.stats.overlapped_groups.fetch_add(1, Ordering::Relaxed);
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
        self.stats
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
        }
        self.clear_overlay();
        self.writer.reclaim();
    }

    /// The current group was written but the fsync before its own failed:
    /// its callers learn that the WAL failed.
    fn fail_written_group(&mut self) {
        self.stats.wal_failures.fetch_add(1, Ordering::Relaxed);
        let failed = self.failed.clone().expect("a failed fsync fails the WAL");
        self.next_lsn = self.wal.next_lsn();
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
            self.writer.set_stamp(*lsn);
            for op in &ops[range.clone()] {
                match *op {
                    Op::Put { key, value } => {
                        self.writer.insert_key(key, value);
                    }
                    Op::Delete { key } => {
                        self.writer.remove_key(key);
                    }
                }
            }
            last = Some(*lsn);
            batches += 1;
        }
        if let Some(lsn) = last {
            self.watermark.publish(lsn);
            self.stats.groups.fetch_add(1, Ordering::Relaxed);
            self.stats.batches.fetch_add(batches, Ordering::Relaxed);
            add_elapsed(&self.stats.steps.apply_ns, applying);
        }
        let completing = Instant::now();
        for pending in group.drain(..) {
            // A caller that went away does not mind.
            let _ = pending
                .reply
                .send(pending.decided.map(|(lsn, _)| WriteOutcome { lsn }));
        }
        add_elapsed(&self.stats.steps.complete_ns, completing);
    }

    /// The WAL refused the group: nothing is applied, the LSNs are reused,
    /// every caller learns why.
    fn fail_group(&mut self, first_lsn: u64, error: StoreError) {
        self.stats.wal_failures.fetch_add(1, Ordering::Relaxed);
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
        self.clear_overlay();
        self.ops.clear();
        for pending in self.group.drain(..) {
            let _ = pending.reply.send(Err(make_error()));
        }
    }

    fn maybe_ask_for_snapshot(&mut self) {
        let Some(ask) = &mut self.ask_for_snapshot else {
            return;
        };
        let total = self.stats.wal_bytes.load(Ordering::Relaxed);
        if self.snapshot_every_bytes > 0
            && total - self.wal_bytes_at_nudge >= self.snapshot_every_bytes
        {
            self.wal_bytes_at_nudge = total;
            ask();
        }
    }
}
