//! What a partitioned member does by itself when the partition table
//! changes (docs/partitions.md, "Moves"):
//!
//! - **Fence** (`fence_on_change`): at each new table version it drains
//!   the writes checked under older tables (`Ownership::drain_writes`),
//!   reads its log's last index meanwhile, and on a replica group member
//!   waits until its applied LSN reaches that index (or the log was cut
//!   below it): an entry logged before, whose writer was answered "outcome
//!   unknown" when its leader changed, may still commit, and must be
//!   applied before the fence counts. Then it reports the version as
//!   fenced, in `Stats`. A move waits for that report from every member of
//!   both groups.
//! - **Drop what left** (`drop_foreign_on_change`): when a partition stops
//!   being held by its group (moved away, or a copy to it called off), the
//!   leader deletes that partition's entries from its index, in batches
//!   through the writer, once the scans planned under an older table (which
//!   may include them) have ended. Scans and reads never return them
//!   otherwise (they are filtered by the table). Each batch is checked again, under the
//!   write fence, against the table at that moment: a partition that came
//!   back is left alone. On a follower the writes are refused and the pass
//!   ends quietly: the leader's pass does it, and the log brings it here.

use std::sync::Arc;
use std::time::Duration;

use uuidmap_engine::writer::{DurableIndex, WriteOp};
use uuidmap_index::{Key, Scanner};
use uuidmap_partition::{Ownership, PartitionId, PartitionSet};

/// Entries deleted per write batch.
const DROP_BATCH: usize = 1000;

/// A member's last log index (`None`: a single node, whose log is its
/// WAL: nothing in it waits to be applied).
pub(crate) type LogTail = Option<Arc<dyn Fn() -> Option<u64> + Send + Sync>>;

/// Fences each new table version as it arrives; ends when the map's cache
/// is dropped.
pub(crate) async fn fence_on_change(
    ownership: Ownership,
    durable: Arc<DurableIndex>,
    log_tail: LogTail,
) {
    let mut changes = ownership.cache().subscribe();
    let applied = || durable.watermark().current();
    loop {
        let version = ownership.cache().view().version;
        let tail = ownership
            .drain_writes(|| log_tail.as_ref().and_then(|t| t()))
            .await;
        if let Some(tail) = tail {
            let last = || log_tail.as_ref().and_then(|t| t());
            while !log_applied(tail, applied(), last()) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        ownership.record_fence(version, applied());
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// Whether what a log held up to index `tail` is applied: the applied LSN
/// reached it, or the log was cut below it (entries never committed,
/// replaced by the leader's).
fn log_applied(tail: u64, applied: u64, last: Option<u64>) -> bool {
    applied >= tail || last.is_some_and(|l| l < tail)
}

/// The partitions of the current table that the group does not hold
/// (`None`: no table yet).
fn foreign_now(ownership: &Ownership) -> Option<PartitionSet> {
    let view = ownership.cache().view();
    let table = view.table.as_ref()?;
    Some(
        PartitionId::all()
            .filter(|p| !table.get(*p).held_by(ownership.group()))
            .collect(),
    )
}

/// After each table change that took a partition from the group (and once
/// at start), deletes the entries of partitions it no longer holds.
pub(crate) async fn drop_foreign_on_change(ownership: Ownership, durable: Arc<DurableIndex>) {
    let mut changes = ownership.cache().subscribe();
    let mut last: Option<PartitionSet> = None;
    loop {
        if let Some(now) = foreign_now(&ownership) {
            let grew = last
                .as_ref()
                .is_none_or(|before| now.iter().any(|p| !before.contains(p)));
            if grew {
                drop_pass(&ownership, &durable, &now).await;
            }
            last = Some(now);
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// One pass: find the entries of `foreign` partitions, delete them.
async fn drop_pass(ownership: &Ownership, durable: &Arc<DurableIndex>, foreign: &PartitionSet) {
    if foreign.is_empty() {
        return;
    }
    // A scan planned before the partitions left may still be returning
    // them: it keeps them whole.
    let version = ownership.cache().view().version;
    ownership.wait_for_scans_before(version).await;
    let index = durable.index().clone();
    let set = foreign.clone();
    let keys = tokio::task::spawn_blocking(move || {
        let mut keys = Vec::new();
        let Ok(cursor) = index.scan_cursor(0, 1) else {
            return keys;
        };
        let Ok(mut scanner) = Scanner::new(index, cursor, None) else {
            return keys;
        };
        let mut stage = Vec::new();
        while scanner.next_segment(&mut stage).is_some() {
            keys.extend(
                stage
                    .drain(..)
                    .filter(|(k, _)| set.contains_key(k.as_bytes()))
                    .map(|(k, _)| k),
            );
        }
        keys
    })
    .await
    .unwrap_or_default();
    if keys.is_empty() {
        return;
    }
    let mut dropped = 0;
    for chunk in keys.chunks(DROP_BATCH) {
        let _permit = ownership.write_permit().await;
        // Still not held, under the fence: a partition that came back
        // (a move to this group began) keeps its entries.
        let Some(now) = foreign_now(ownership) else {
            return;
        };
        let ops: Vec<WriteOp> = chunk
            .iter()
            .filter(|k| now.contains_key(k.as_bytes()))
            .filter_map(|k| Key::new(*k).ok())
            .map(|key| WriteOp::Delete { key })
            .collect();
        if ops.is_empty() {
            continue;
        }
        let n = ops.len();
        match durable.writes().write(ops).await {
            Ok(_) => dropped += n,
            Err(e) => {
                tracing::debug!(error = %e, "not dropping moved partitions here (the leader does)");
                return;
            }
        }
    }
    tracing::info!(
        entries = dropped,
        partitions = foreign.len(),
        "dropped the entries of partitions this group no longer holds"
    );
}

#[cfg(test)]
mod tests {
    use super::log_applied;

    #[test]
    fn a_fence_waits_for_the_log_it_saw_to_be_applied_or_cut() {
        // Entries up to 10 in the log, 8 applied: not yet.
        assert!(!log_applied(10, 8, Some(10)));
        assert!(
            !log_applied(10, 8, Some(12)),
            "more logged since: still 9 and 10 to apply"
        );
        assert!(log_applied(10, 10, Some(12)));
        // The leader cut 9 and 10 (never committed): nothing left to wait for.
        assert!(log_applied(10, 8, Some(8)));
    }
}
