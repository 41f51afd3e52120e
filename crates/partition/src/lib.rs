//! uuidmap's partitions (issue 37): many replica groups behind one map in
//! etcd.
//!
//! The keyspace is split into [`PARTITIONS`] partitions by a fixed,
//! unseeded hash of the key ([`partition_of`]); each partition is owned by
//! one replica group, as the [`PartitionTable`] in etcd says. Members read
//! the table once and keep it current with a watch ([`MapCache`]), register
//! their client URL under an etcd lease ([`Registration`]) and refuse keys
//! their group does not own ([`Ownership`]); clients route each key to its
//! owner's members from the same cache. No request of the data path calls
//! etcd.
//!
//! - `partition_id`: [`partition_of`], [`PartitionId`] (the hash is a
//!   format: it never changes);
//! - `group_name`: [`GroupName`];
//! - `partition_table`: [`PartitionTable`] and its text in etcd;
//! - `partition_set`: [`PartitionSet`], a scan's filter;
//! - `cluster_view`: [`ClusterView`], one read of the map;
//! - `etcd_map`: [`EtcdMap`], the keys in etcd and the calls on them;
//! - `map_cache`: [`MapCache`], the view kept current;
//! - `registration`: [`Registration`], a member's lease;
//! - `ownership`: [`Ownership`] and [`Refusal`], a member's check;
//! - `error`: [`PartitionError`].
//!
//! Layering: depends on no crate of ours, so both the server and the
//! client take it.

#![warn(missing_docs, unreachable_pub)]

mod cluster_view;
mod error;
mod etcd_map;
mod group_name;
mod handoff;
mod map_cache;
mod ownership;
mod partition_id;
mod partition_set;
mod partition_table;
mod registration;

pub use cluster_view::ClusterView;
pub use error::PartitionError;
pub use etcd_map::EtcdMap;
pub use group_name::{GroupName, MAX_GROUP_NAME};
pub use handoff::{Handoff, Handoffs, MAX_HANDOFFS, Tenure};
pub use map_cache::MapCache;
pub use ownership::{Ownership, OwnershipStats, Refusal, ScanGuard, ScanPartitions};
pub use partition_id::{PARTITIONS, PartitionId, partition_of};
pub use partition_set::PartitionSet;
pub use partition_table::{Assignment, PartitionTable};
pub use registration::Registration;
