//! The snapshot task of a member: decides when to take a snapshot, takes
//! it ([`SnapshotStore::take`], on a blocking thread), and tells openraft,
//! which then purges the log behind it (the state machine's module docs).
//!
//! After each snapshot the log is purged up to the older retained
//! snapshot's point, and never closer than `keep` entries to the new
//! one: a restart can fall back on the older snapshot should the newer be
//! damaged, and a change stream can start from either (`ChangeReader`
//! needs a point whose proposal chain is known). openraft removes nothing
//! on its own (`timing::raft_config`), and purges nothing a replication
//! to a follower still reads.
//!
//! A snapshot is due once `entries` log entries were applied since the
//! last one, or `every` passed with any applied. A failed snapshot (a
//! full disk) is logged and tried again 10 s later: the log is meanwhile
//! not purged, and nothing else is affected.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use uuidmap_engine::writer::{SnapshotResult, TakeSnapshotError};

use crate::state_machine::IndexRaft;
use crate::state_machine::SnapshotStore;

/// When a member takes a snapshot, and how much log it keeps (module
/// docs).
#[derive(Clone, Copy, Debug)]
pub struct SnapshotPolicy {
    /// Log entries kept behind the newest snapshot, at least.
    pub keep: u64,
    /// Entries applied since the last snapshot (0: not a trigger).
    pub entries: u64,
    /// Time since the last snapshot, with something applied (`None`: not
    /// a trigger).
    pub every: Option<Duration>,
}

/// How often the task looks at the applied LSN.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// How long the task waits after a failed snapshot.
const RETRY_AFTER: Duration = Duration::from_secs(10);

/// Runs until the member stops (module docs). A request on `requests`
/// (an operator's `Snapshot`) takes one at once and is answered.
pub async fn take_snapshots(
    raft: IndexRaft,
    snapshots: SnapshotStore,
    policy: SnapshotPolicy,
    mut requests: mpsc::UnboundedReceiver<oneshot::Sender<SnapshotResult>>,
) {
    let mut last_lsn = match snapshots.newest() {
        Ok(Some(s)) => s.meta.last_log_id.map_or(0, |l| l.index),
        _ => 0,
    };
    let mut last_at = Instant::now();
    let mut failed_at: Option<Instant> = None;
    let mut ticks = tokio::time::interval(CHECK_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let asked = tokio::select! {
            _ = ticks.tick() => None,
            Some(reply) = requests.recv() => Some(reply),
        };
        let applied = snapshots.point().log_id.map_or(0, |l| l.index);
        let since = applied.saturating_sub(last_lsn);
        let by_entries = policy.entries > 0 && since >= policy.entries;
        let by_time = since > 0 && policy.every.is_some_and(|every| last_at.elapsed() >= every);
        let waiting = failed_at.is_some_and(|t| t.elapsed() < RETRY_AFTER);
        if asked.is_none() && (!(by_entries || by_time) || waiting) {
            continue;
        }
        let store = snapshots.clone();
        let started = Instant::now();
        match tokio::task::spawn_blocking(move || store.take()).await {
            Ok(Ok(Some((taken, info)))) => {
                failed_at = None;
                last_lsn = taken.meta.last_log_id.map_or(0, |l| l.index);
                last_at = Instant::now();
                tracing::info!(
                    point = last_lsn,
                    file_lsn = taken.file.snapshot_lsn,
                    took_ms = started.elapsed().as_millis() as u64,
                    "took a snapshot"
                );
                // openraft's builder hands back the file just written, and
                // the log behind it is purged.
                let told = raft.trigger().snapshot().await;
                if told.is_ok() {
                    purge(&raft, &snapshots, last_lsn, policy.keep).await;
                }
                if let Some(reply) = asked {
                    let _ = reply.send(Ok(info));
                }
                if let Err(e) = told {
                    tracing::warn!(error = %e, "Raft did not take the snapshot");
                    return;
                }
            }
            Ok(Ok(None)) => {
                if let Some(reply) = asked {
                    let _ = reply.send(Err(Arc::new(TakeSnapshotError::NothingToSnapshot(
                        "no entry is applied yet, or it is catching up after loading a snapshot",
                    ))));
                }
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "could not take a snapshot; the log is kept until one succeeds");
                failed_at = Some(Instant::now());
                if let Some(reply) = asked {
                    let _ = reply.send(Err(Arc::new(e)));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "the snapshot task failed");
                return;
            }
        }
    }
}

/// Purges the log behind the snapshot at `point` (module docs).
async fn purge(raft: &IndexRaft, snapshots: &SnapshotStore, point: u64, keep: u64) {
    let store = snapshots.clone();
    let older = tokio::task::spawn_blocking(move || store.usable())
        .await
        .ok()
        .and_then(Result::ok)
        .and_then(|usable| {
            usable
                .iter()
                .map(|s| s.meta.last_log_id.map_or(0, |l| l.index))
                .find(|&p| p < point)
        });
    let Some(older) = older else {
        return;
    };
    let upto = older.min(point.saturating_sub(keep));
    if upto == 0 {
        return;
    }
    if let Err(e) = raft.trigger().purge_log(upto).await {
        tracing::warn!(error = %e, upto, "Raft did not purge the log");
    }
}
