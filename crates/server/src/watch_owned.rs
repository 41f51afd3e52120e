//! `Watch` with `owned_only`, on a member of a partitioned cluster: only
//! the changes its group owned when they were made (docs/partitions.md,
//! "A cluster-wide watch").
//!
//! The group's log also holds a partition move's writes: the copy, at the
//! target before the flip, and the drop of the moved entries, at the
//! source after it. The table's handoffs ([`Handoffs::tenure`]) tell them
//! apart by LSN. The decision uses this member's table, which may be
//! older than etcd's; it is never too old for the changes it decides:
//!
//! - a partition the table shows owned and not moving, at the owner: no
//!   flip away from the group can have happened (every member of a source
//!   fences the move before its flip, and a member's table never goes
//!   back), so no drop exists yet;
//! - a partition it shows being copied to the group (`~`): no flip can
//!   have happened either (every target member fences before it), so its
//!   changes here are copies;
//! - a partition it shows fenced (`>`), at its owner or its target: the
//!   flip may have happened. The batch waits until the table moves on
//!   ([`Filter::Hold`]), at most the move's blocked time.
//!
//! A member with no table yet holds too.

use uuidmap_partition::{Ownership, Tenure, partition_of};
use uuidmap_proto::v1 as pb;

/// What to do with the batches read.
pub(crate) enum Filter {
    /// Send these (the group's own changes; batches left empty dropped).
    Keep(Vec<pb::WatchBatch>),
    /// Wait for a newer table, then decide again.
    Hold,
    /// The history that would decide was forgotten: the watch ends.
    Forgotten(String),
}

/// The filter of one watch.
#[derive(Clone)]
pub(crate) struct OwnedFilter {
    pub(crate) ownership: Ownership,
}

impl OwnedFilter {
    /// Decides `batches` by the member's current table (module docs).
    pub(crate) fn filter(&self, batches: &[pb::WatchBatch]) -> Filter {
        let view = self.ownership.cache().view();
        let Some(table) = &view.table else {
            return Filter::Hold;
        };
        let group = self.ownership.group();
        let mut kept = Vec::with_capacity(batches.len());
        for b in batches {
            let mut changes = Vec::with_capacity(b.changes.len());
            for c in &b.changes {
                // The server made these keys: always 16 bytes.
                let Ok(key) = <[u8; 16]>::try_from(&c.key[..]) else {
                    continue;
                };
                let p = partition_of(&key);
                let a = table.get(p);
                if a.fenced && (a.owner == *group || a.moving_to.as_ref() == Some(group)) {
                    return Filter::Hold;
                }
                match table.handoffs().tenure(p, group, b.lsn, &a.owner) {
                    Tenure::Owned { .. } => changes.push(c.clone()),
                    Tenure::NotOwned => {}
                    Tenure::Unknown => {
                        return Filter::Forgotten(format!(
                            "the partition table no longer keeps which partitions group {group} \
                             owned at LSN {} (its history of moves is bounded, and forgets at or \
                             below LSN {}): rescan, then watch from the scan's applied_lsn",
                            b.lsn,
                            table.handoffs().horizon(group)
                        ));
                    }
                }
            }
            if !changes.is_empty() {
                kept.push(pb::WatchBatch {
                    lsn: b.lsn,
                    changes,
                });
            }
        }
        Filter::Keep(kept)
    }
}
