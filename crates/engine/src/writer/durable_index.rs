//! [`DurableIndex`]: an index recovered from its data directory, with the
//! writer pipeline and the snapshot thread running over it. This is what
//! the server (and the crash tests' child process) open.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use super::TakeSnapshotError;
use super::changes::ChangeReader;
use super::handle::{PipelineStats, WriteHandle};
use super::pipeline::{Pipeline, PipelineConfig, PipelineFailure};
use super::proposal_chain::ProposalChain;
use super::read_lease::{ReadLease, ReadRefused};
use super::replica_pipeline::{Proposer, ReplicaControl, ReplicaIndex, ReplicaPipeline};
use super::snapshotter::{
    ReplayBudget, SnapshotResult, SnapshotStats, Snapshotter, SnapshotterConfig, Trigger,
};
use crate::store::raft_state::RAFT_STATE_FILE;
use crate::store::recovery::{RecoveryOptions, RecoveryReport, recover};
use crate::store::wal::{Preallocate, WalFollower, WalOptions, WalWriter};
use crate::store::{
    DirLock, FileError, Io, OsIo, StoreError, WalFollowError, WalWriteError, lock_data_dir,
};
use arc_swap::ArcSwap;
use uuidmap_index::Index;
use uuidmap_index::sync::LsnWatermark;

/// The default restart budget (`--max-replay-ms`).
pub const DEFAULT_MAX_REPLAY: Duration = Duration::from_millis(500);

/// Everything [`DurableIndex::open`] needs.
#[derive(Clone)]
pub struct DurableConfig {
    /// The data directory (created if missing).
    pub dir: PathBuf,
    /// The file system (the real one by default).
    pub io: Arc<dyn Io>,
    /// Writer pipeline limits and the fsync policy.
    pub pipeline: PipelineConfig,
    /// WAL file rotation size.
    pub wal_segment_bytes: u64,
    /// Whether new WAL files are made from a zero-filled spare, so that an
    /// fsync is a data-only flush (`store::wal` `spare`; default: prepared on
    /// a background thread).
    pub wal_preallocate: Preallocate,
    /// Take a snapshot this often (`None`: only on the other triggers).
    pub snapshot_every: Option<Duration>,
    /// Take a final snapshot when shutting down.
    pub snapshot_on_shutdown: bool,
    /// Recovery options (checksums, corrupt WAL handling, presize, replay
    /// workers).
    pub recovery: RecoveryOptions,
    /// The restart budget: take a snapshot before the WAL a restart would
    /// replay takes longer than this to replay, and after a recovery whose
    /// replay took longer (`None`: off; the WAL-bytes and time triggers
    /// remain).
    pub max_replay: Option<Duration>,
    /// The replay rate (WAL bytes/s) that sizes the budget; `None`: the
    /// rate this recovery measured if it replayed enough to tell, else
    /// `snapshotter::DEFAULT_REPLAY_BYTES_PER_SEC`.
    pub replay_bytes_per_sec: Option<f64>,
}

impl DurableConfig {
    /// Defaults for `dir`: fsync `always`, snapshots every 256 MiB of WAL,
    /// before a restart would replay for more than 500 ms, every 10 minutes
    /// and at shutdown, 64 MiB WAL files.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DurableConfig {
            dir: dir.into(),
            io: Arc::new(OsIo),
            pipeline: PipelineConfig::default(),
            wal_segment_bytes: 64 << 20,
            wal_preallocate: Preallocate::default(),
            snapshot_every: Some(Duration::from_secs(600)),
            snapshot_on_shutdown: true,
            recovery: RecoveryOptions::default(),
            max_replay: Some(DEFAULT_MAX_REPLAY),
            replay_bytes_per_sec: None,
        }
    }
}

/// Where a replica group member's index starts
/// ([`DurableIndex::open_replica`]): a snapshot file of its directory,
/// opened and checked.
pub struct ReplicaStart {
    /// The snapshot, as an index mapped in place.
    pub restored: crate::store::RestoredIndex,
    /// The last log entry wholly in it: the applied LSN to start from.
    pub lsn: u64,
    /// The proposal chain at `lsn`.
    pub chain: ProposalChain,
    /// The snapshot file (for the recovery report).
    pub path: std::path::PathBuf,
}

/// A durable, running index.
pub struct DurableIndex {
    index: IndexSlot,
    watermark: Arc<LsnWatermark>,
    /// The threads and the directory's lock, until [`DurableIndex::shutdown`]
    /// takes them (`None` after). Touched only by shutdown and drop: writes go
    /// through `writes`, and the snapshot figures through `snapshot_stats`.
    running: Mutex<Option<Running>>,
    writes: WriteHandle,
    /// Set when the WAL failed for good (a failed fsync).
    failure: PipelineFailure,
    snapshot_stats: Arc<SnapshotStats>,
    report: RecoveryReport,
    config: DurableConfig,
    /// Which log keeps the writes: fixed when the index is opened.
    mode: Mode,
}

/// Which log keeps a [`DurableIndex`]'s writes, and what goes with it.
enum Mode {
    /// A single node ([`DurableIndex::open`]): its own WAL, group-committed
    /// by the pipeline, and its own snapshot thread.
    Single {
        snapshot_tx: std::sync::mpsc::Sender<Trigger>,
        /// The restart budget in force (`None`: off).
        budget: Option<ReplayBudget>,
        /// The WAL-bytes snapshot trigger in force: the smaller of the
        /// configured one and the budget's (0: none).
        snapshot_trigger_bytes: u64,
    },
    /// A replica group member ([`DurableIndex::open_replica`]): the Raft
    /// log keeps the writes, and takes the snapshots.
    Member {
        /// Whether the member may answer a read as the leader.
        lease: Arc<ReadLease>,
        log: MemberLog,
    },
}

/// What a member's index asks of the replicated log that keeps it, given
/// when it is opened ([`DurableIndex::open_replica`]).
pub struct MemberLog {
    /// Where its snapshots on demand are asked for: the log's snapshot
    /// task reads them and answers each.
    pub snapshots: SnapshotRequests,
    /// Where its change streams start reading the log.
    pub follow: MemberFollowStart,
    /// The bytes the log store has written (the figures' `wal_bytes`).
    pub written_bytes: Arc<std::sync::atomic::AtomicU64>,
    /// Where a replicated write's time goes in the log (the figures'
    /// `write_step_ns`).
    pub steps: Arc<MemberLogSteps>,
}

/// Where a member's replicated writes spend their time in the log, in
/// nanoseconds summed since the start (`/metrics`:
/// `uuidmap_write_step_seconds_total`, the steps `wal_write`, `wal_sync`
/// and `replicate`).
#[derive(Debug, Default)]
pub struct MemberLogSteps {
    /// The log store's WAL writes (per log group).
    pub log_write_ns: std::sync::atomic::AtomicU64,
    /// The log store's fsyncs (per log group).
    pub log_sync_ns: std::sync::atomic::AtomicU64,
    /// From a proposal handed to openraft to its answer: the leader's
    /// append, the replication to a majority, the commit and the apply
    /// (per proposal, on the leader).
    pub replicate_ns: std::sync::atomic::AtomicU64,
}

/// Where a member's change streams start reading its log: given the LSN
/// a stream starts after, a point at or before it whose proposal chain is
/// known, and that chain (a snapshot's point, or 0 and the empty chain
/// when the log starts at its first entry).
pub type MemberFollowStart =
    Box<dyn Fn(u64) -> Result<(u64, ProposalChain), FileError> + Send + Sync>;

/// Where a durable index's read handle lives.
enum IndexSlot {
    /// A single node's: one index for the process's life.
    Fixed(Index),
    /// A member's: replaced when a snapshot is installed.
    Swappable(Arc<ArcSwap<Index>>),
}

/// A read handle of a [`DurableIndex`] ([`DurableIndex::index`]): derefs
/// to the [`Index`].
pub enum IndexRef<'a> {
    /// A single node's index.
    Fixed(&'a Index),
    /// A member's index as it was when loaded.
    Swapped(arc_swap::Guard<Arc<Index>>),
}

impl std::ops::Deref for IndexRef<'_> {
    type Target = Index;

    fn deref(&self) -> &Index {
        match self {
            IndexRef::Fixed(index) => index,
            IndexRef::Swapped(guard) => guard,
        }
    }
}

/// Where a member's snapshots on demand are asked for: each request is
/// the sender its result goes to.
pub type SnapshotRequests = tokio::sync::mpsc::UnboundedSender<oneshot::Sender<SnapshotResult>>;

/// What a running index owns until it stops.
enum Running {
    /// A single node. The fields drop in order: the writer thread stops,
    /// then the snapshot thread, and only then is the directory's lock
    /// released, so that no other process may write the directory while
    /// either thread still can.
    Single {
        pipeline: Pipeline,
        snapshotter: Snapshotter,
        _lock: DirLock,
    },
    /// A member of a replica group: the writer thread only. The log, and
    /// the directory's lock, are the replicated log store's.
    Replica(ReplicaPipeline),
}

/// A point-in-time summary for `Stats` and metrics.
#[derive(Clone, Debug)]
pub struct DurableStats {
    /// Entries in the index.
    pub entries: u64,
    /// Bytes of the index's tables.
    pub table_bytes: u64,
    /// The LSN up to which every batch is applied and visible.
    pub applied_lsn: u64,
    /// Bytes of WAL on disk.
    pub wal_bytes: u64,
    /// Snapshots this process wrote.
    pub snapshots_taken: u64,
    /// Snapshots this process attempted and failed to write.
    pub snapshots_failed: u64,
    /// The LSN the newest snapshot covers (0: none).
    pub last_snapshot_lsn: u64,
    /// Unix ms of the newest snapshot written by this process (0: none).
    pub last_snapshot_unix_ms: u64,
    /// How long the newest snapshot took to write, in µs.
    pub last_snapshot_duration_us: u64,
    /// WAL writes or syncs that failed since start.
    pub wal_failures: u64,
    /// Batches waiting for the writer thread.
    pub queued_batches: u64,
    /// The WAL-bytes snapshot trigger in force (0: none).
    pub snapshot_trigger_bytes: u64,
    /// The replay rate the budget assumes (WAL bytes/s; 0: budget off).
    pub replay_bytes_per_sec: u64,
    /// The restart budget in ms (0: off).
    pub max_replay_ms: u64,
    /// Groups the writer committed, and batches in them.
    pub groups: u64,
    /// Batches in the committed groups.
    pub batches: u64,
    /// Groups whose fsync overlapped writing the next group.
    pub overlapped_groups: u64,
    /// Where writes' time went since start: (step, nanoseconds), see
    /// `pipeline::WriteSteps`; `call` is whole write calls. On a member,
    /// `wal_write` and `wal_sync` are its Raft log's, and `replicate` is
    /// [`MemberLogSteps::replicate_ns`] (0 on a single node).
    pub write_step_ns: [(&'static str, u64); 8],
    /// Write calls answered.
    pub write_calls: u64,
}

impl DurableIndex {
    /// Locks the data directory (refusing with
    /// [`DirLockError::InUse`](crate::store::DirLockError::InUse) if another
    /// process holds it), recovers it and starts the writer and
    /// snapshot threads. The lock is held until [`DurableIndex::shutdown`]
    /// or the drop.
    pub fn open(config: DurableConfig) -> Result<DurableIndex, StoreError> {
        let io = config.io.clone();
        io.create_dir_all(&config.dir)
            .map_err(|e| StoreError::io("creating the data directory", &config.dir, e))?;
        // Before recovery, which may repair files (cut a torn WAL tail).
        let lock = lock_data_dir(io.as_ref(), &config.dir)?;
        // A member's `raft-state` file marks its directory.
        let names = io
            .list(&config.dir)
            .map_err(|e| StoreError::io("listing the data directory", &config.dir, e))?;
        if names.iter().any(|n| n == RAFT_STATE_FILE) {
            return Err(StoreError::WrongMode {
                dir: config.dir.clone(),
                found: "the log of a replica group member (its `raft-state` file)",
                wanted: "a single node's data",
                hint: "start it with --node-id, as the member it is",
            });
        }
        let recovered = recover(io.as_ref(), &config.dir, &config.recovery)?;
        let report = recovered.report;
        report.log_phases();
        tracing::info!(
            snapshot = ?report.snapshot,
            rejected = report.rejected.len(),
            replayed = report.records_replayed,
            last_lsn = report.last_lsn,
            open_ms = report.open_time.as_millis() as u64,
            replay_ms = report.replay_time.as_millis() as u64,
            "recovered {} entries from {}",
            recovered.index.len(),
            config.dir.display()
        );
        let budget = config.max_replay.map(|max| {
            ReplayBudget::new(
                max,
                config.replay_bytes_per_sec,
                Some((report.bytes_replayed, report.phases.replay)),
            )
        });
        let mut pipeline_config = config.pipeline.clone();
        if let Some(b) = &budget {
            let configured = pipeline_config.snapshot_every_bytes;
            let trigger = b.trigger_bytes();
            if configured == 0 || trigger < configured {
                pipeline_config.snapshot_every_bytes = trigger;
            }
            tracing::info!(
                max_replay_ms = b.max_replay.as_millis() as u64,
                replay_bytes_per_sec = b.bytes_per_sec as u64,
                measured = b.measured,
                snapshot_wal_bytes = pipeline_config.snapshot_every_bytes,
                "restart budget: a snapshot every {} bytes of WAL",
                pipeline_config.snapshot_every_bytes
            );
        }
        // A replay over the budget would be paid again by the next crash:
        // snapshot once the server serves. So would one that used a
        // quarter of the trigger's bytes: the writer counts the trigger's
        // bytes from this start, so the next restart could replay both
        // (with a quarter, both stay within the budget).
        let long_replay = budget.filter(|b| {
            report.phases.replay > b.max_replay
                || (pipeline_config.snapshot_every_bytes > 0
                    && report.bytes_replayed >= pipeline_config.snapshot_every_bytes / 4)
        });
        let watermark = Arc::new(LsnWatermark::new(report.last_lsn));
        let wal = WalWriter::create(
            io.clone(),
            &config.dir,
            recovered.next_lsn,
            WalOptions {
                segment_bytes: config.wal_segment_bytes,
                preallocate: config.wal_preallocate,
                ..WalOptions::default()
            },
        )?;
        let channel = Snapshotter::channel();
        let snapshot_tx = channel.0.clone();
        let nudge = snapshot_tx.clone();
        let snapshot_trigger_bytes = pipeline_config.snapshot_every_bytes;
        let pipeline = Pipeline::start(
            pipeline_config,
            recovered.writer,
            wal,
            watermark.clone(),
            Some(Box::new(move || {
                let _ = nudge.send(Trigger::WalBytes);
            })),
        )
        .map_err(|e| StoreError::io("starting the writer thread", &config.dir, e))?;
        let writes = pipeline.handle();
        let log = writes.clone();
        let snapshotter = Snapshotter::start(
            SnapshotterConfig {
                io: io.clone(),
                dir: config.dir.clone(),
                index: recovered.index.clone(),
                watermark: watermark.clone(),
                every: config.snapshot_every,
                recovered_from: report
                    .snapshot
                    .as_ref()
                    .map(|_| (report.snapshot_lsn, report.min_capture_lsn)),
                make_log_durable: Box::new(move |lsn| log.make_durable_blocking(lsn)),
            },
            channel,
        )
        .map_err(|e| StoreError::io("starting the snapshot thread", &config.dir, e))?;
        if let Some(b) = long_replay {
            tracing::info!(
                replay_ms = report.phases.replay.as_millis() as u64,
                replayed_bytes = report.bytes_replayed,
                max_replay_ms = b.max_replay.as_millis() as u64,
                "the recovery replayed more WAL than the restart budget allows; taking a \
                 snapshot in the background"
            );
            let _ = snapshot_tx.send(Trigger::AfterLongReplay);
        }
        let durable = DurableIndex {
            index: IndexSlot::Fixed(recovered.index),
            watermark,
            failure: pipeline.failure(),
            writes,
            snapshot_stats: snapshotter.stats().clone(),
            running: Mutex::new(Some(Running::Single {
                pipeline,
                snapshotter,
                _lock: lock,
            })),
            report,
            config,
            mode: Mode::Single {
                snapshot_tx,
                budget,
                snapshot_trigger_bytes,
            },
        };
        Ok(durable)
    }

    /// The index of a replica group member, with the writer thread in
    /// replica mode (`writer::replica`), and no WAL, recovery or
    /// snapshot thread of its own: the replicated log is kept by the
    /// caller, which drives the writer through the [`ReplicaControl`]
    /// returned, takes the member's snapshots, and holds the directory's
    /// lock. `config`'s directory, file system and queue limits apply.
    ///
    /// The index starts empty, or, given `start`, from that snapshot file
    /// mapped in place as a restart does; its applied LSN is then
    /// `start.lsn`, and reads wait until the log is applied up to the
    /// file's own LSN (see [`ReplicaControl::load`]), which also puts
    /// another index in place of this one. `log` is how the index reaches
    /// the replicated log for snapshots, change streams and figures.
    pub fn open_replica(
        config: DurableConfig,
        capacity: usize,
        start: Option<ReplicaStart>,
        proposer: Box<dyn Proposer>,
        on_stall: Box<dyn Fn() + Send>,
        log: MemberLog,
    ) -> Result<(DurableIndex, ReplicaControl), StoreError> {
        let lease = Arc::new(ReadLease::default());
        let mut report = RecoveryReport::default();
        let (writer, index, applied, chain) = match start {
            None => {
                let (writer, index) = Index::with_capacity(capacity);
                (writer, index, 0, ProposalChain::default())
            }
            Some(start) => {
                let restored = start.restored;
                lease.set_consistent_from(restored.lsn.max(start.lsn));
                report.snapshot = Some(start.path);
                report.snapshot_lsn = restored.lsn;
                report.min_capture_lsn = restored.capture_lsns.iter().copied().min().unwrap_or(0);
                report.rebuilt = restored.how != crate::store::snapshot::Restored::ZeroCopy;
                report.last_lsn = start.lsn;
                (restored.writer, restored.index, start.lsn, start.chain)
            }
        };
        let watermark = Arc::new(LsnWatermark::new(applied));
        let slot = Arc::new(ArcSwap::from_pointee(index));
        let pipeline = ReplicaPipeline::start(
            &config.pipeline,
            ReplicaIndex {
                writer,
                slot: slot.clone(),
                watermark: watermark.clone(),
                chain,
            },
            proposer,
            on_stall,
            lease.clone(),
        )
        .map_err(|e| StoreError::io("starting the writer thread", &config.dir, e))?;
        let control = pipeline.control();
        // Nothing fails the replicated log's WAL from here: the log store
        // reports its own failures.
        let (_, failure) = tokio::sync::watch::channel(None);
        let durable = DurableIndex {
            index: IndexSlot::Swappable(slot),
            watermark,
            writes: pipeline.handle(),
            failure,
            snapshot_stats: Arc::default(),
            running: Mutex::new(Some(Running::Replica(pipeline))),
            report,
            config,
            mode: Mode::Member { lease, log },
        };
        Ok((durable, control))
    }

    /// Resolves once the WAL has failed for good (a failed fsync; see
    /// `writer::pipeline`), with the error: the process should then stop, so
    /// that a restart recovers from what is on disk. Never resolves while
    /// the WAL works.
    pub async fn wal_failed(&self) -> Arc<WalWriteError> {
        let mut failure = self.failure.clone();
        loop {
            if let Some(e) = failure.borrow_and_update().clone() {
                return e;
            }
            if failure.changed().await.is_err() {
                // The pipeline is gone without failing: never resolve.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The WAL's failure, if it failed for good.
    pub fn wal_failure(&self) -> Option<Arc<WalWriteError>> {
        self.failure.borrow().clone()
    }

    /// Whether a read may be answered from this index now: always on a
    /// single node; on a member, see [`ReadLease`].
    pub fn admit_read(&self) -> Result<(), ReadRefused> {
        match &self.mode {
            Mode::Single { .. } => Ok(()),
            Mode::Member { lease, .. } => lease.admit(self.watermark.current()),
        }
    }

    /// Whether the index as applied up to `applied` may be read without
    /// the lease (a stale read, or a linearizable one once its read index
    /// is applied): always on a single node; on a member, unless it is
    /// catching up after loading a snapshot ([`ReadLease::admit_applied`]).
    pub fn admit_applied(&self, applied: u64) -> Result<(), ReadRefused> {
        match &self.mode {
            Mode::Single { .. } => Ok(()),
            Mode::Member { lease, .. } => lease.admit_applied(applied),
        }
    }

    /// A member's read lease, for the replicated log to keep up to date.
    pub fn read_lease(&self) -> Option<&Arc<ReadLease>> {
        match &self.mode {
            Mode::Single { .. } => None,
            Mode::Member { lease, .. } => Some(lease),
        }
    }

    /// The read handle. On a member, the index a snapshot install put
    /// in place of the old one (`ReplicaControl::load`); a caller that
    /// reads over a long time (a scan page) holds the one it got.
    pub fn index(&self) -> IndexRef<'_> {
        match &self.index {
            IndexSlot::Fixed(index) => IndexRef::Fixed(index),
            IndexSlot::Swappable(slot) => IndexRef::Swapped(slot.load()),
        }
    }

    /// Submits writes.
    pub fn writes(&self) -> &WriteHandle {
        &self.writes
    }

    /// The applied-LSN watermark (read-your-writes, long polls).
    pub fn watermark(&self) -> &Arc<LsnWatermark> {
        &self.watermark
    }

    /// The figures about snapshots: a member's snapshot task records its
    /// own here.
    pub fn snapshot_stats(&self) -> &Arc<SnapshotStats> {
        &self.snapshot_stats
    }

    /// What recovery found.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// Takes a snapshot now and waits for it. On a member, the replicated
    /// log's snapshot task takes it ([`MemberLog::snapshots`]).
    pub async fn snapshot_now(&self) -> SnapshotResult {
        let (tx, rx) = oneshot::channel();
        let sent = match &self.mode {
            Mode::Single { snapshot_tx, .. } => snapshot_tx.send(Trigger::Now(tx)).is_ok(),
            Mode::Member { log, .. } => log.snapshots.send(tx).is_ok(),
        };
        if !sent {
            return Err(Arc::new(stopped(&self.config.dir)));
        }
        rx.await.map_err(|_| Arc::new(stopped(&self.config.dir)))?
    }

    /// [`DurableIndex::snapshot_now`] for threads outside an async runtime.
    pub fn snapshot_now_blocking(&self) -> SnapshotResult {
        let Mode::Single { snapshot_tx, .. } = &self.mode else {
            return Err(Arc::new(TakeSnapshotError::NotInGroupYet("take snapshots")));
        };
        let (tx, rx) = oneshot::channel();
        snapshot_tx
            .send(Trigger::Now(tx))
            .map_err(|_| Arc::new(stopped(&self.config.dir)))?;
        rx.blocking_recv()
            .map_err(|_| Arc::new(stopped(&self.config.dir)))?
    }

    /// Current figures.
    pub fn stats(&self) -> DurableStats {
        let p: &PipelineStats = self.writes.stats();
        let s: &SnapshotStats = &self.snapshot_stats;
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let t = &p.steps;
        let (wal_bytes, budget, snapshot_trigger_bytes, wal_write, wal_sync, replicate) =
            match &self.mode {
                Mode::Single {
                    budget,
                    snapshot_trigger_bytes,
                    ..
                } => (
                    &p.wal_bytes,
                    *budget,
                    *snapshot_trigger_bytes,
                    get(&t.wal_write_ns),
                    get(&t.wal_sync_ns),
                    0,
                ),
                Mode::Member { log, .. } => (
                    &*log.written_bytes,
                    None,
                    0,
                    get(&log.steps.log_write_ns),
                    get(&log.steps.log_sync_ns),
                    get(&log.steps.replicate_ns),
                ),
            };
        DurableStats {
            entries: self.index().len() as u64,
            table_bytes: self.index().table_bytes() as u64,
            applied_lsn: self.watermark.current(),
            wal_bytes: wal_bytes.load(Ordering::Relaxed),
            snapshots_taken: s.taken.load(Ordering::Relaxed),
            snapshots_failed: s.failed.load(Ordering::Relaxed),
            last_snapshot_lsn: s.last_lsn.load(Ordering::Relaxed),
            last_snapshot_unix_ms: s.last_unix_ms.load(Ordering::Relaxed),
            last_snapshot_duration_us: s.last_duration_us.load(Ordering::Relaxed),
            wal_failures: p.wal_failures.load(Ordering::Relaxed),
            queued_batches: p.queued.load(Ordering::Relaxed),
            snapshot_trigger_bytes,
            replay_bytes_per_sec: budget.map_or(0, |b| b.bytes_per_sec as u64),
            max_replay_ms: budget.map_or(0, |b| b.max_replay.as_millis() as u64),
            groups: p.groups.load(Ordering::Relaxed),
            batches: p.batches.load(Ordering::Relaxed),
            overlapped_groups: p.overlapped_groups.load(Ordering::Relaxed),
            write_step_ns: [
                ("queue", get(&t.queue_ns)),
                ("decide", get(&t.decide_ns)),
                ("wal_write", wal_write),
                ("wal_sync", wal_sync),
                ("replicate", replicate),
                ("apply", get(&t.apply_ns)),
                ("complete", get(&t.complete_ns)),
                ("call", get(&t.call_ns)),
            ],
            write_calls: p.steps.calls.load(Ordering::Relaxed),
        }
    }

    /// Graceful stop: refuses new writes, finishes the queued ones, syncs the
    /// WAL, takes a final snapshot (if configured), stops the threads and
    /// releases the directory's lock. Returns the final snapshot's outcome
    /// (`None`: not configured, or stopped already). When it failed,
    /// nothing acknowledged is lost: the WAL holds it, and the next open
    /// replays it.
    ///
    /// Idempotent, and it takes `&self`: a server calls it while
    /// connections it has stopped serving may still hold their clones of
    /// the `Arc`. A second call waits for the first to finish and returns
    /// `None`. Blocking: call it from a blocking thread. Afterwards reads
    /// still answer (from the final state), writes are refused
    /// ([`WriteError::ShuttingDown`](super::WriteError::ShuttingDown)) and
    /// snapshots fail.
    pub fn shutdown(&self) -> Option<SnapshotResult> {
        // A panic in an earlier shutdown leaves nothing to stop twice.
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let (pipeline, mut snapshotter, _lock) = match running.take()? {
            Running::Single {
                pipeline,
                snapshotter,
                _lock,
            } => (pipeline, snapshotter, _lock),
            Running::Replica(pipeline) => {
                pipeline.stop();
                return None;
            }
        };
        pipeline.stop();
        let outcome = snapshotter.stop(self.config.snapshot_on_shutdown);
        drop(snapshotter);
        drop(_lock);
        outcome
    }

    /// Opens a reader of the applied batches after `after_lsn`, from the
    /// WAL (for change streams; see [`ChangeReader`]). Fails with
    /// [`WalFollowError::NotRetained`] when the WAL no longer holds the
    /// batch after it (a snapshot covered it and its file was removed).
    /// Blocking (it opens and reads WAL files). On a member, the reader
    /// starts where [`MemberLog::follow`] says.
    pub fn follow(&self, after_lsn: u64) -> Result<ChangeReader, WalFollowError> {
        let io = self.config.io.clone();
        let dir = &self.config.dir;
        let Mode::Member { log, .. } = &self.mode else {
            let follower = WalFollower::open(io, dir, after_lsn.saturating_add(1))?;
            return Ok(ChangeReader::single(follower));
        };
        let (point, chain) = (log.follow)(after_lsn)?;
        let follower = WalFollower::open(io, dir, point.saturating_add(1))?;
        Ok(ChangeReader::member(follower, chain, after_lsn))
    }
}

fn stopped(dir: &std::path::Path) -> TakeSnapshotError {
    TakeSnapshotError::from(FileError::new(
        "taking a snapshot in",
        dir,
        std::io::Error::other("the snapshot thread has stopped"),
    ))
}
