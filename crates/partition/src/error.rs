//! `PartitionError`: everything the partition layer refuses or fails at,
//! in words for the operator.

use crate::{GroupName, PartitionId};

/// An error of the partition layer.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    /// A group name with characters a path segment cannot hold.
    #[error("{0:?} is not a group name: use 1 to 32 of a-z, 0-9 and '-', not starting with '-'")]
    BadGroupName(String),
    /// A cluster name with characters a path segment cannot hold.
    #[error("{0:?} is not a cluster name: use 1 to 32 of a-z, 0-9 and '-', not starting with '-'")]
    BadClusterName(String),
    /// The partition table's text in etcd is not one this build reads.
    #[error("the partition table in etcd is damaged at line {line}: {why}")]
    BadTable {
        /// The line (1 is the header).
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A table with no group.
    #[error("a partition table needs at least one group")]
    NoGroups,
    /// A group named twice.
    #[error("group {0} is named twice")]
    DuplicateGroup(GroupName),
    /// The table exists already.
    #[error(
        "cluster {cluster:?} already has a partition table (version {version}); `uuidmap cluster \
         partitions` shows it"
    )]
    AlreadyInitialized {
        /// The cluster.
        cluster: String,
        /// The table's version.
        version: i64,
    },
    /// No table yet.
    #[error(
        "cluster {0:?} has no partition table in etcd yet: make one with `uuidmap cluster \
         partitions init --groups G1,G2,...`"
    )]
    NoTable(String),
    /// A move of a partition to the group that owns it.
    #[error("partition {0} is owned by {1} already")]
    MoveToOwner(PartitionId, GroupName),
    /// A second move of a partition.
    #[error("partition {0} is moving to {1} already")]
    AlreadyMoving(PartitionId, GroupName),
    /// The end of a move that is not under way.
    #[error("partition {0} is not moving")]
    NotMoving(PartitionId),
    /// The table changed between a read and a write of it.
    #[error("the partition table changed meanwhile (version {0}); read it again and retry")]
    TableChanged(i64),
    /// Another server registered under this member's name.
    #[error(
        "{key} is registered by another server, at {url}; give each member of a group its own \
         --node-id, or stop the other server (its registration ends with its etcd lease)"
    )]
    MemberTaken {
        /// The etcd key.
        key: String,
        /// The URL registered there.
        url: String,
    },
    /// etcd could not be reached or refused a call.
    #[error("etcd ({endpoints}): {source}")]
    Etcd {
        /// The endpoints tried.
        endpoints: String,
        /// etcd-client's error.
        #[source]
        source: etcd_client::Error,
    },
    /// A value in etcd under the cluster's prefix that is not ours.
    #[error("etcd key {key}: {why}")]
    BadValue {
        /// The key.
        key: String,
        /// What is wrong.
        why: String,
    },
}
