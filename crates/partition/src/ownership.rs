//! `Ownership`: what a member of a partitioned cluster may serve.
//!
//! Every request that names keys is checked against the member's cached
//! view before it touches the index: a key of a partition its group does
//! not own is refused ([`Refusal::NotOwned`], naming the owner and the
//! table's version), and a write to a partition that is moving away is
//! refused as retryable ([`Refusal::Moving`]) until the move flips it.
//! A request with several keys is refused whole if any key is refused.
//!
//! Why a member can go on while etcd is down: the table changes only by a
//! move, and a move first marks the partition moving in etcd and waits for
//! the source group to have seen the mark before it flips the owner
//! (docs/partitions.md, "Moves"). A member cut off from etcd therefore
//! cannot have lost a partition without having seen it marked moving, and
//! refuses writes to a moving partition from then on.

use std::sync::Arc;

use crate::{GroupName, MapCache, PartitionId, partition_of};

/// Why a member refuses a key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Another group owns the key's partition.
    #[error(
        "partition {partition} (of key {key}) is owned by group {owner}, not by this group \
         {ours} (partition table version {version}); send it to {owner}"
    )]
    NotOwned {
        /// The key's partition.
        partition: PartitionId,
        /// The key, as text.
        key: String,
        /// The group that owns it.
        owner: GroupName,
        /// This member's group.
        ours: GroupName,
        /// The table version this member decided with.
        version: i64,
    },
    /// A write to a partition moving to another group.
    #[error(
        "partition {partition} (of key {key}) is moving to group {to} (partition table version \
         {version}); writes to it resume within seconds, at the new owner"
    )]
    Moving {
        /// The key's partition.
        partition: PartitionId,
        /// The key, as text.
        key: String,
        /// Where it is moving.
        to: GroupName,
        /// The table version this member decided with.
        version: i64,
    },
    /// The member has not read the table yet.
    #[error("this member has not read the partition table from etcd yet: {why}")]
    NoTable {
        /// Why (etcd's error, or that there is no table yet).
        why: String,
    },
}

/// A member's ownership check over its cluster's cached map.
#[derive(Clone, Debug)]
pub struct Ownership {
    cache: Arc<MapCache>,
    group: GroupName,
}

impl Ownership {
    /// The check for a member of `group`.
    pub fn new(cache: Arc<MapCache>, group: GroupName) -> Ownership {
        Ownership { cache, group }
    }

    /// This member's group.
    pub fn group(&self) -> &GroupName {
        &self.group
    }

    /// The map this check reads.
    pub fn cache(&self) -> &Arc<MapCache> {
        &self.cache
    }

    /// Refuses the first of `keys` this member may not read.
    pub fn check_reads(&self, keys: impl IntoIterator<Item = [u8; 16]>) -> Result<(), Refusal> {
        self.check(keys, false)
    }

    /// Refuses the first of `keys` this member may not write.
    pub fn check_writes(&self, keys: impl IntoIterator<Item = [u8; 16]>) -> Result<(), Refusal> {
        self.check(keys, true)
    }

    fn check(&self, keys: impl IntoIterator<Item = [u8; 16]>, write: bool) -> Result<(), Refusal> {
        let view = self.cache.view();
        let Some(table) = &view.table else {
            return Err(Refusal::NoTable {
                why: self
                    .cache
                    .etcd_error()
                    .unwrap_or_else(|| "the cluster has no partition table yet".into()),
            });
        };
        for key in keys {
            let partition = partition_of(&key);
            let a = table.get(partition);
            if a.owner != self.group {
                return Err(Refusal::NotOwned {
                    partition,
                    key: key_text(&key),
                    owner: a.owner.clone(),
                    ours: self.group.clone(),
                    version: view.version,
                });
            }
            if write && let Some(to) = &a.moving_to {
                return Err(Refusal::Moving {
                    partition,
                    key: key_text(&key),
                    to: to.clone(),
                    version: view.version,
                });
            }
        }
        Ok(())
    }
}

/// A key as a UUID's text.
fn key_text(k: &[u8; 16]) -> String {
    let h: String = k.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}
