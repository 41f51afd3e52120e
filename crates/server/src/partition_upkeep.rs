//! What a partitioned member does by itself when the partition table
//! changes (docs/partitions.md, "Moves"):
//!
//! - **Fence** (`fence_on_change`): at each new table version it takes the
//!   write fence (`Ownership::fence`), so that it can report, in `Stats`,
//!   that no write it accepted under an older table is still to be
//!   applied. A move waits for that report from every member of both
//!   groups.
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

use uuidmap_engine::writer::{DurableIndex, WriteOp};
use uuidmap_index::{Key, Scanner};
use uuidmap_partition::{Ownership, PartitionId, PartitionSet};

/// Entries deleted per write batch.
const DROP_BATCH: usize = 1000;

/// Fences each new table version as it arrives; ends when the map's cache
/// is dropped.
pub(crate) async fn fence_on_change(ownership: Ownership, durable: Arc<DurableIndex>) {
    let mut changes = ownership.cache().subscribe();
    loop {
        let version = ownership.cache().view().version;
        ownership
            .fence(version, || durable.watermark().current())
            .await;
        if changes.changed().await.is_err() {
            return;
        }
    }
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
