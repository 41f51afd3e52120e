//! openraft's type configuration for uuidmap, and short names for the types
//! it makes.
//!
//! - One leader per term (`leader_id_std`), so a log id is `(term, index)`
//!   and a WAL record carries a single `u64` term.
//! - The log index **is** the LSN: the same number on every replica, so
//!   `min_lsn`, WaitFor and Watch keep their meaning in a group.
//! - Node ids are `u64`, chosen by the operator (`--node-id`).

use crate::node::ClusterNode;
use crate::raft_batch::{Applied, RaftBatch};

openraft::declare_raft_types!(
    /// The type configuration of a uuidmap replica group.
    pub UuidmapRaft:
        D = RaftBatch,
        R = Applied,
        NodeId = u64,
        Node = ClusterNode,
        Term = u64,
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
        Vote = openraft::impls::Vote<Self::LeaderId>,
        Payload = openraft::EntryPayload<Self::D, Self::NodeId, Self::Node>,
        Entry = openraft::Entry<
            <Self::LeaderId as openraft::vote::RaftLeaderId>::Committed,
            Self::Payload,
        >,
);

/// A leader id: a term and the node elected in it.
pub type LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>;
/// The part of a leader id a log id keeps: the term.
pub type CommittedLeaderId = <LeaderId as openraft::vote::RaftLeaderId>::Committed;
/// A log position: `(term, index)`; the index is the LSN.
pub type LogId = openraft::LogId<CommittedLeaderId>;
/// A node's vote.
pub type Vote = openraft::impls::Vote<LeaderId>;
/// Who votes, and every member's addresses.
pub type Membership = openraft::Membership<u64, ClusterNode>;
/// A membership and the log entry that set it.
pub type StoredMembership = openraft::StoredMembership<CommittedLeaderId, u64, ClusterNode>;
/// What a log entry carries.
pub type EntryPayload = openraft::EntryPayload<RaftBatch, u64, ClusterNode>;
/// A log entry.
pub type Entry = openraft::Entry<CommittedLeaderId, EntryPayload>;
/// A snapshot's description: the last entry it holds and its membership.
pub type SnapshotMeta = openraft::SnapshotMeta<CommittedLeaderId, u64, ClusterNode>;
/// A vote request (and a pre-vote request).
pub type VoteRequest = openraft::raft::VoteRequest<UuidmapRaft>;
/// The answer to a vote request.
pub type VoteResponse = openraft::raft::VoteResponse<UuidmapRaft>;
/// Entries from the leader, or a heartbeat.
pub type AppendEntriesRequest = openraft::raft::AppendEntriesRequest<UuidmapRaft>;
/// The answer to an [`AppendEntriesRequest`].
pub type AppendEntriesResponse = openraft::raft::AppendEntriesResponse<UuidmapRaft>;
/// The answer to a snapshot.
pub type SnapshotResponse = openraft::raft::SnapshotResponse<UuidmapRaft>;
/// The leader handing its leadership to a node.
pub type TransferLeaderRequest = openraft::raft::TransferLeaderRequest<UuidmapRaft>;
/// Why a node refused the leadership.
pub type TransferLeaderError = openraft::raft::TransferLeaderError<UuidmapRaft>;

/// The log id `(term, index)`.
pub fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term), index)
}
