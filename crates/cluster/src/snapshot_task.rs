//! The snapshot task of a member: decides when to take a snapshot, takes
//! it ([`SnapshotStore::take`], on a blocking thread), and tells openraft,
//! which then purges the log behind it (the state machine's module docs).
//!
//! A snapshot is due once `entries` log entries were applied since the
//! last one, or `every` passed with any applied. A failed snapshot (a
//! full disk) is logged and tried again 10 s later: the log is meanwhile
//! not purged, and nothing else is affected.

use std::time::{Duration, Instant};

use crate::replica::IndexRaft;
use crate::state_machine::SnapshotStore;

/// When a member takes a snapshot (module docs).
#[derive(Clone, Copy, Debug)]
pub struct SnapshotPolicy {
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

/// Runs until the member stops (module docs).
pub async fn take_snapshots(raft: IndexRaft, snapshots: SnapshotStore, policy: SnapshotPolicy) {
    let mut last_lsn = match snapshots.newest() {
        Ok(Some(s)) => s.meta.last_log_id.map_or(0, |l| l.index),
        _ => 0,
    };
    let mut last_at = Instant::now();
    let mut failed_at: Option<Instant> = None;
    let mut ticks = tokio::time::interval(CHECK_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let applied = snapshots.point().log_id.map_or(0, |l| l.index);
        let since = applied.saturating_sub(last_lsn);
        let by_entries = policy.entries > 0 && since >= policy.entries;
        let by_time = since > 0 && policy.every.is_some_and(|every| last_at.elapsed() >= every);
        let waiting = failed_at.is_some_and(|t| t.elapsed() < RETRY_AFTER);
        if !(by_entries || by_time) || waiting {
            continue;
        }
        let store = snapshots.clone();
        let started = Instant::now();
        match tokio::task::spawn_blocking(move || store.take()).await {
            Ok(Ok(Some(taken))) => {
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
                if let Err(e) = raft.trigger().snapshot().await {
                    tracing::warn!(error = %e, "Raft did not take the snapshot");
                    return;
                }
            }
            // Nothing applied, or catching up after a load.
            Ok(Ok(None)) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "could not take a snapshot; the log is kept until one succeeds");
                failed_at = Some(Instant::now());
            }
            Err(e) => {
                tracing::error!(error = %e, "the snapshot task failed");
                return;
            }
        }
    }
}
