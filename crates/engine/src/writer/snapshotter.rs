//! The snapshot thread: takes fuzzy snapshots while the writer goes on, when
//! asked (every N WAL bytes, every T seconds, on demand, at shutdown, after
//! a recovery that replayed more than the restart budget), and then deletes
//! the WAL files no retained snapshot needs.
//!
//! The WAL-bytes trigger is the smaller of `--snapshot-wal-bytes` and the
//! restart budget ([`ReplayBudget`]): the WAL a restart would replay in
//! `--max-replay-ms` at the measured replay rate.
//!
//! Two snapshots are retained (see `store::snapshot`): the newest, and the
//! previous one as a fallback should the newest be damaged. So the WAL is
//! cut only up to the *previous* snapshot's smallest capture LSN: the
//! fallback plus the longer WAL still gives the whole state.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;

use super::TakeSnapshotError;
use crate::store::snapshot::{SnapshotInfo, write_snapshot};
use crate::store::wal::remove_covered;
use crate::store::{Io, WalWriteError};
use uuidmap_index::Index;
use uuidmap_index::sync::LsnWatermark;

/// A snapshot's outcome as callers receive it.
pub type SnapshotResult = Result<SnapshotInfo, Arc<TakeSnapshotError>>;

/// WAL bytes per second that a replay is assumed to manage when no
/// recovery has measured it (one that replayed at least
/// `MIN_MEASURED_BYTES`): about 3M puts/s, above the replay before
/// issue 11 (2.6M/s) and a fifth of the parallel replay measured on 2
/// shared cores (BENCHMARKS.md), so that a slower or busier machine still
/// restarts within the budget.
pub const DEFAULT_REPLAY_BYTES_PER_SEC: f64 = 100e6;

/// A recovery that replayed fewer WAL bytes than this does not measure the
/// replay rate (fixed costs dominate).
pub(super) const MIN_MEASURED_BYTES: u64 = 16 << 20;

/// The smallest WAL-bytes trigger the budget sets: every snapshot writes
/// the whole index, so not every few writes (as `--snapshot-wal-bytes`).
pub const MIN_BUDGET_TRIGGER_BYTES: u64 = 1 << 20;

/// The share of the budget the WAL may reach before a snapshot is asked
/// for: the rest covers the writes that go on while the snapshot is taken
/// (a restart replays from the snapshot's start).
const BUDGET_TRIGGER_SHARE: f64 = 0.75;

/// The restart budget, as the WAL bytes a replay gets through within it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplayBudget {
    /// The longest replay a restart may take (`--max-replay-ms`).
    pub max_replay: Duration,
    /// WAL bytes replayed per second (measured, or the default).
    pub bytes_per_sec: f64,
    /// Whether `bytes_per_sec` was measured by this process's recovery.
    pub measured: bool,
}

impl ReplayBudget {
    /// The budget `max_replay` at `rate` (bytes/s), or at the rate the
    /// recovery measured when it replayed enough to tell, else at
    /// [`DEFAULT_REPLAY_BYTES_PER_SEC`].
    pub fn new(
        max_replay: Duration,
        rate: Option<f64>,
        recovered: Option<(u64, Duration)>,
    ) -> Self {
        let measured = recovered
            .filter(|&(bytes, took)| bytes >= MIN_MEASURED_BYTES && !took.is_zero())
            .map(|(bytes, took)| bytes as f64 / took.as_secs_f64());
        ReplayBudget {
            max_replay,
            bytes_per_sec: rate.or(measured).unwrap_or(DEFAULT_REPLAY_BYTES_PER_SEC),
            measured: rate.is_none() && measured.is_some(),
        }
    }

    /// WAL bytes after which a snapshot is asked for, so that a restart's
    /// replay stays within the budget (module docs).
    pub fn trigger_bytes(&self) -> u64 {
        let bytes = self.max_replay.as_secs_f64() * self.bytes_per_sec * BUDGET_TRIGGER_SHARE;
        (bytes as u64).max(MIN_BUDGET_TRIGGER_BYTES)
    }
}

/// What the snapshot thread is asked to do.
pub(crate) enum Trigger {
    /// The WAL grew by the configured amount (sent by the writer).
    WalBytes,
    /// Recovery replayed more than the restart budget: take one so that the
    /// next restart does not replay it again (sent once, at open).
    AfterLongReplay,
    /// Take one now and say how it went.
    Now(oneshot::Sender<SnapshotResult>),
    /// Take a last one (if `final_snapshot` is there to hear how it went)
    /// and stop.
    Stop {
        final_snapshot: Option<oneshot::Sender<SnapshotResult>>,
    },
}

/// Figures about snapshots, for `Stats` and metrics.
#[derive(Debug, Default)]
pub struct SnapshotStats {
    /// Snapshots written since start.
    pub taken: AtomicU64,
    /// Snapshots that failed.
    pub failed: AtomicU64,
    /// Unix time (ms) at which the newest snapshot finished (0: none yet).
    pub last_unix_ms: AtomicU64,
    /// How long the newest snapshot took (µs).
    pub last_duration_us: AtomicU64,
    /// LSN of the newest snapshot.
    pub last_lsn: AtomicU64,
    /// Bytes of the newest snapshot.
    pub last_bytes: AtomicU64,
}

/// The retained snapshots, oldest first: (LSN, smallest capture LSN).
type Retained = Vec<(u64, u64)>;

/// The running snapshot thread.
pub(crate) struct Snapshotter {
    tx: mpsc::Sender<Trigger>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<SnapshotStats>,
}

/// What the snapshot thread works with.
pub(crate) struct SnapshotterConfig {
    pub io: Arc<dyn Io>,
    pub dir: PathBuf,
    pub index: Index,
    pub watermark: Arc<LsnWatermark>,
    /// Take a snapshot this often (`None`: only on other triggers).
    pub every: Option<Duration>,
    /// The snapshot the store was recovered from: (LSN, smallest capture).
    pub recovered_from: Option<(u64, u64)>,
    /// Makes the WAL durable through an LSN, before a snapshot is published
    /// (see `store::snapshot`'s write module: the WAL before the snapshot).
    pub make_log_durable: Box<dyn Fn(u64) -> Result<(), Arc<WalWriteError>> + Send>,
}

impl Snapshotter {
    /// A channel for [`Snapshotter::start`]: its sender may be handed out
    /// (to the writer's nudge) before the thread starts.
    pub(crate) fn channel() -> (mpsc::Sender<Trigger>, mpsc::Receiver<Trigger>) {
        mpsc::channel()
    }

    /// Starts the thread on a channel made by [`Snapshotter::channel`].
    pub(crate) fn start(
        config: SnapshotterConfig,
        (tx, rx): (mpsc::Sender<Trigger>, mpsc::Receiver<Trigger>),
    ) -> std::io::Result<Snapshotter> {
        let stats = Arc::new(SnapshotStats::default());
        let thread_stats = stats.clone();
        let thread = std::thread::Builder::new()
            .name("uuidmap-snapshot".into())
            .spawn(move || run(config, rx, &thread_stats))?;
        Ok(Snapshotter {
            tx,
            thread: Some(thread),
            stats,
        })
    }

    pub(crate) fn stats(&self) -> &Arc<SnapshotStats> {
        &self.stats
    }

    /// Stops the thread, after a final snapshot if asked; returns that
    /// snapshot's outcome (`None`: not asked, or the thread had stopped).
    pub(crate) fn stop(&mut self, final_snapshot: bool) -> Option<SnapshotResult> {
        let thread = self.thread.take()?;
        let (reply, outcome) = match final_snapshot {
            true => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        let _ = self.tx.send(Trigger::Stop {
            final_snapshot: reply,
        });
        if let Err(panic) = thread.join() {
            std::panic::resume_unwind(panic);
        }
        // The thread has ended, so the outcome is there (or never will be).
        outcome.and_then(|mut rx| rx.try_recv().ok())
    }
}

impl Drop for Snapshotter {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = self.stop(false);
        }
    }
}

fn run(config: SnapshotterConfig, rx: mpsc::Receiver<Trigger>, stats: &SnapshotStats) {
    let mut retained: Retained = config.recovered_from.into_iter().collect();
    let mut next_timed = config.every.map(|d| Instant::now() + d);
    loop {
        let trigger = match next_timed {
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(t) => t,
                Err(RecvTimeoutError::Timeout) => Trigger::WalBytes,
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match rx.recv() {
                Ok(t) => t,
                Err(_) => return,
            },
        };
        let result = match &trigger {
            Trigger::Stop {
                final_snapshot: None,
            } => return,
            _ => take(&config, &mut retained, stats),
        };
        next_timed = config.every.map(|d| Instant::now() + d);
        match trigger {
            Trigger::Now(reply) => {
                let _ = reply.send(result);
            }
            Trigger::Stop { final_snapshot } => {
                if let Some(reply) = final_snapshot {
                    let _ = reply.send(result);
                }
                return;
            }
            Trigger::WalBytes | Trigger::AfterLongReplay => {}
        }
    }
}

/// Takes one snapshot, then cuts the WAL that no retained snapshot needs.
fn take(
    config: &SnapshotterConfig,
    retained: &mut Retained,
    stats: &SnapshotStats,
) -> SnapshotResult {
    let started = Instant::now();
    let applied = || config.watermark.current();
    let make_log_durable =
        |lsn| (config.make_log_durable)(lsn).map_err(|e| WalWriteError::clone_shared(&e));
    match write_snapshot(
        config.io.as_ref(),
        &config.dir,
        &config.index,
        &applied,
        &make_log_durable,
    ) {
        Ok(info) => {
            stats.taken.fetch_add(1, Ordering::Relaxed);
            stats
                .last_duration_us
                .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            stats.last_unix_ms.store(unix_ms(), Ordering::Relaxed);
            stats.last_lsn.store(info.lsn, Ordering::Relaxed);
            stats.last_bytes.store(info.bytes, Ordering::Relaxed);
            tracing::info!(
                lsn = info.lsn,
                entries = info.entries,
                bytes = info.bytes,
                ms = started.elapsed().as_millis() as u64,
                "snapshot written to {}",
                info.path.display()
            );
            if retained.last().map(|r| r.0) != Some(info.lsn) {
                retained.push((info.lsn, info.min_capture_lsn));
            }
            let keep_from = retained.len().saturating_sub(2);
            retained.drain(..keep_from);
            if retained.len() == 2 {
                // The previous snapshot's smallest capture: everything at or
                // below it is in both retained snapshots.
                let upto = retained[0].1;
                if let Err(e) = remove_covered(config.io.as_ref(), &config.dir, upto) {
                    tracing::warn!("could not remove WAL files up to LSN {upto}: {e}");
                }
            }
            Ok(info)
        }
        Err(e) => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            let hint = if e.is_disk_full() {
                "; free space on the data disk: the next snapshot tries again"
            } else {
                ""
            };
            tracing::error!("snapshot failed (the previous snapshots are kept): {e}{hint}");
            Err(Arc::new(e.into()))
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
