//! [`WriteHandle`]: how callers reach a writer thread, the same for both
//! logs. A caller's batch goes into a bounded queue with a one-shot channel
//! for its answer; the writer thread (`pipeline` on a single node,
//! `replica_pipeline` on a group member) answers it once the batch is
//! applied, or refused.
//! [`PipelineStats`] are the counters both threads keep.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use super::request::{WriteError, WriteOp, WriteOutcome};
use crate::store::{FileError, WalWriteError};
use uuidmap_index::IndexWriter;

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
    Sync(u64, SyncReply),
    /// Finish what is queued, sync, and stop.
    Stop,
}

/// Where the answer to a [`Message::Sync`] goes.
pub(super) type SyncReply = oneshot::Sender<Result<(), Arc<WalWriteError>>>;

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

impl WriteHandle {
    /// A handle and the receiving end its writer thread reads.
    /// `queue_depth` batches may wait; a batch holds at most
    /// `max_batch_ops` operations.
    pub(super) fn new(
        queue_depth: usize,
        max_batch_ops: usize,
    ) -> (WriteHandle, mpsc::Receiver<Message>) {
        let (tx, rx) = mpsc::channel(queue_depth.max(1));
        let handle = WriteHandle {
            tx,
            closed: Arc::new(AtomicBool::new(false)),
            max_batch_ops,
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
    pub fn make_durable_blocking(&self, lsn: u64) -> Result<(), Arc<WalWriteError>> {
        if self.stats.synced_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let (reply, answer) = oneshot::channel();
        let not_durable = || {
            Arc::new(WalWriteError::from(FileError::new(
                "making the WAL durable for a snapshot",
                "the WAL",
                std::io::Error::other(format!("the writer stopped before LSN {lsn} was durable")),
            )))
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

#[cfg(test)]
impl WriteHandle {
    /// The queue's sending side and a request for `ops`, for tests that
    /// send it themselves (holding a permit across a stop).
    #[allow(clippy::type_complexity)]
    pub(super) fn raw_request(
        &self,
        ops: Vec<WriteOp>,
    ) -> (
        mpsc::Sender<Message>,
        Request,
        oneshot::Receiver<Result<WriteOutcome, WriteError>>,
    ) {
        let (request, answer) = self.request(ops).expect("a valid batch on an open handle");
        (self.tx.clone(), request, answer)
    }
}

/// Adds the time since `since` to `counter`.
pub(super) fn add_elapsed(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}
