//! `ClusterView`: the partition table and the groups' members, as read from
//! etcd at one revision.

use std::collections::BTreeMap;

use crate::{GroupName, PartitionId, PartitionTable, partition_of};

/// One read of the cluster's map.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    /// The table's version: the etcd revision at which it was last
    /// written (its key's `mod_revision`); 0 when there is no table.
    /// Versions only grow, so of two views the higher one is newer.
    pub version: i64,
    /// The partition table (`None`: not made yet).
    pub table: Option<PartitionTable>,
    /// Each group's registered members: member name → client URL. Only
    /// members whose etcd lease is alive are here.
    pub groups: BTreeMap<GroupName, BTreeMap<String, String>>,
    /// The etcd revision this view was read at.
    pub revision: i64,
}

impl ClusterView {
    /// The group that owns `key`, if there is a table.
    pub fn owner_of(&self, key: &[u8; 16]) -> Option<&GroupName> {
        self.table.as_ref().map(|t| &t.get(partition_of(key)).owner)
    }

    /// The group that owns partition `p`, if there is a table.
    pub fn owner(&self, p: PartitionId) -> Option<&GroupName> {
        self.table.as_ref().map(|t| &t.get(p).owner)
    }

    /// The client URLs of `group`'s registered members, in member order,
    /// without a copy.
    pub fn members(&self, group: &GroupName) -> impl Iterator<Item = &String> {
        self.groups.get(group).into_iter().flat_map(|m| m.values())
    }

    /// The client URLs of `group`'s registered members, in member order.
    pub fn member_urls(&self, group: &GroupName) -> Vec<String> {
        self.groups
            .get(group)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }
}
