//! Changing who is in a replica group, on its leader: add a member as a
//! learner (it receives the log, and votes on nothing), promote learners
//! to voters, remove members. openraft makes each change through a joint
//! membership, so the group keeps a majority through it; a change is
//! refused while another is under way. The errors are typed
//! ([`MembershipError`]) and turned into gRPC statuses in the server.
//!
//! A member that lost its data (a wiped directory) must be removed before
//! it is added again: its vote is gone, and a member that forgot its vote
//! may vote twice in a term.

use std::collections::BTreeSet;

use openraft::ChangeMembers;
use openraft::errors::{ClientWriteError, ForwardToLeader, RaftError};
use openraft::storage::RaftStateMachine;
use uuidmap_engine::writer::LeaderHint;

use crate::{ClusterNode, UuidmapRaft};

/// Why a membership change was not made.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// This member does not lead; changes are made on the leader.
    #[error(
        "this server does not lead its replica group{}; membership changes are made on the \
         leader",
        match .leader {
            Some(LeaderHint { id, url: Some(url) }) => format!(" (the leader is node {id}, at {url})"),
            Some(LeaderHint { id, url: None }) => format!(" (the leader is node {id})"),
            None => " (no leader is known yet)".to_string(),
        }
    )]
    NotLeader {
        /// The leader, when known.
        leader: Option<LeaderHint>,
    },
    /// The change is not possible now or at all: another is under way, a
    /// node to promote is not a learner, or nothing would be left.
    #[error("the membership change was refused: {0}")]
    Refused(String),
    /// The leader lost its leadership with the change logged: it may or
    /// may not take effect.
    #[error(
        "the leader lost its leadership with the change logged; it may or may not take effect \
         (look with `uuidmap cluster status`): {0}"
    )]
    Unknown(String),
    /// Raft has stopped on this member.
    #[error("Raft has stopped on this member: {0}")]
    Stopped(String),
}

fn hint(f: &ForwardToLeader<UuidmapRaft>) -> Option<LeaderHint> {
    f.leader_id.map(|id| LeaderHint {
        id,
        url: f.leader_node.as_ref().map(|n| n.api_url.clone()),
    })
}

fn error(e: RaftError<UuidmapRaft, ClientWriteError<UuidmapRaft>>) -> MembershipError {
    match e {
        RaftError::Fatal(f) => MembershipError::Stopped(f.to_string()),
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            MembershipError::NotLeader { leader: hint(&f) }
        }
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(f)) => {
            MembershipError::Unknown(f.to_string())
        }
        RaftError::APIError(other) => MembershipError::Refused(other.to_string()),
    }
}

/// The voters and learners once a change took effect, and the log index
/// of the change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipChanged {
    /// The log index (LSN) of the membership entry.
    pub lsn: u64,
    /// The voters now.
    pub voters: Vec<u64>,
    /// The learners now.
    pub learners: Vec<u64>,
}

fn changed(
    r: openraft::raft::ClientWriteResponse<UuidmapRaft>,
) -> Result<MembershipChanged, MembershipError> {
    let lsn = r.log_id.index;
    let m = r
        .membership
        .ok_or_else(|| MembershipError::Refused("the entry holds no membership".into()))?;
    Ok(MembershipChanged {
        lsn,
        voters: m.voter_ids().collect(),
        learners: m.learner_ids().collect(),
    })
}

/// Adds node `id` at `node` as a learner, and returns once the leader
/// believes it has caught up with the log.
pub async fn add_learner<SM>(
    raft: &openraft::Raft<UuidmapRaft, SM>,
    id: u64,
    node: ClusterNode,
) -> Result<MembershipChanged, MembershipError>
where
    SM: RaftStateMachine<UuidmapRaft>,
{
    changed(raft.add_learner(id, node, true).await.map_err(error)?)
}

/// Makes the learners `ids` voters.
pub async fn promote<SM>(
    raft: &openraft::Raft<UuidmapRaft, SM>,
    ids: BTreeSet<u64>,
) -> Result<MembershipChanged, MembershipError>
where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let change: ChangeMembers<u64, ClusterNode> = ChangeMembers::AddVoterIds(ids);
    changed(raft.change_membership(change, false).await.map_err(error)?)
}

/// Removes the members `ids`, voters or learners.
pub async fn remove<SM>(
    raft: &openraft::Raft<UuidmapRaft, SM>,
    ids: BTreeSet<u64>,
) -> Result<MembershipChanged, MembershipError>
where
    SM: RaftStateMachine<UuidmapRaft>,
{
    // Voters first (not kept as learners), then whatever is left of them
    // as a node.
    let voters: BTreeSet<u64> = {
        let status = crate::cluster_status::status_of(raft);
        ids.iter()
            .copied()
            .filter(|id| status.voters.contains(id))
            .collect()
    };
    if !voters.is_empty() {
        raft.change_membership(ChangeMembers::RemoveVoters(voters), false)
            .await
            .map_err(error)?;
    }
    let change: ChangeMembers<u64, ClusterNode> = ChangeMembers::RemoveNodes(ids);
    changed(raft.change_membership(change, false).await.map_err(error)?)
}
