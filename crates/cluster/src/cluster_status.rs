//! [`ClusterStatus`]: what a member knows of its group, read from
//! openraft's metrics at one moment, in plain types for `Stats`,
//! `/metrics` and `uuidmap cluster status`.

use openraft::ServerState;
use openraft::async_runtime::WatchReceiver;
use openraft::storage::RaftStateMachine;

use crate::UuidmapRaft;
use crate::counters::RaftCounts;

/// A member's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// It leads: it takes writes.
    Leader,
    /// It follows a leader, and votes.
    Follower,
    /// It asks for votes.
    Candidate,
    /// openraft still says it leads, but it is handing its leadership
    /// over (asked to, or its lease lapsed): it takes no writes and
    /// answers no read as the leader.
    SteppingDown,
    /// It follows without a vote.
    Learner,
    /// Raft has stopped on it.
    Stopped,
}

impl Role {
    /// Its name in lower case (`leader`, `follower`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::SteppingDown => "stepping-down",
            Role::Learner => "learner",
            Role::Stopped => "stopped",
        }
    }
}

/// How far a member's log is replicated from the leader (on the leader
/// only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowerProgress {
    /// Its node id.
    pub id: u64,
    /// The last log index known to match the leader's (`None`: none yet).
    pub matched: Option<u64>,
    /// Entries it lacks of the leader's log.
    pub lag: u64,
}

/// A member's view of its group (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterStatus {
    /// This member's node id.
    pub node_id: u64,
    /// Its role.
    pub role: Role,
    /// Its current term.
    pub term: u64,
    /// The leader it knows of.
    pub leader_id: Option<u64>,
    /// The leader's client URL, from the membership.
    pub leader_url: Option<String>,
    /// The last log index this member knows committed (it may lag the
    /// group's by a heartbeat).
    pub commit_index: Option<u64>,
    /// The last log index applied to its index.
    pub applied_index: Option<u64>,
    /// The last index in its log.
    pub last_log_index: Option<u64>,
    /// The voters of the membership in force.
    pub voters: Vec<u64>,
    /// The learners (members without a vote).
    pub learners: Vec<u64>,
    /// Every member (voters and learners) and its client URL, from the
    /// membership in force.
    pub member_urls: Vec<(u64, String)>,
    /// The members whose Redis-protocol address the membership records,
    /// and that address (`host:port`).
    pub member_resp_addrs: Vec<(u64, String)>,
    /// Each other member's progress, when this member leads.
    pub followers: Vec<FollowerProgress>,
    /// Read-index rounds this member began (`crate::read_index`); 0 where
    /// the caller does not know them.
    pub read_index_rounds: u64,
    /// What happened to its Raft since it started (zeros when read from
    /// openraft alone, [`status_of`]).
    pub counts: RaftCounts,
}

/// The status of a whole member: [`status_of`], with its own view of
/// leading (a leader that handed over is `SteppingDown`) and its
/// counters.
pub fn member_status<SM>(
    raft: &openraft::Raft<UuidmapRaft, SM>,
    shared: &crate::leadership::LeadershipShared,
) -> ClusterStatus
where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let mut status = status_of(raft);
    if status.role == Role::Leader && shared.handed_over_to(status.term).is_some() {
        status.role = Role::SteppingDown;
    }
    status.counts = shared.counters.counts();
    status
}

/// The status of the member whose openraft is `raft`.
pub fn status_of<SM>(raft: &openraft::Raft<UuidmapRaft, SM>) -> ClusterStatus
where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let metrics = raft.metrics();
    let m = metrics.borrow_watched();
    let role = match (&m.running_state, m.state) {
        (Err(_), _) | (_, ServerState::Shutdown) => Role::Stopped,
        (_, ServerState::Leader) => Role::Leader,
        (_, ServerState::Candidate) => Role::Candidate,
        (_, ServerState::Learner) => Role::Learner,
        (_, ServerState::Follower) => Role::Follower,
    };
    let membership = m.membership_config.membership();
    let leader_url = m
        .current_leader
        .and_then(|id| membership.get_node(&id))
        .map(|n| n.api_url.clone());
    let last = m.last_log_index.unwrap_or(0);
    let followers = m
        .replication
        .as_ref()
        .map(|r| {
            r.iter()
                .filter(|(id, _)| **id != m.id)
                .map(|(id, matched)| {
                    let matched = matched.as_ref().map(|l| l.index);
                    FollowerProgress {
                        id: *id,
                        matched,
                        lag: last.saturating_sub(matched.unwrap_or(0)),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    ClusterStatus {
        node_id: m.id,
        role,
        term: m.current_term,
        leader_id: m.current_leader,
        leader_url,
        commit_index: m.local_committed.as_ref().map(|l| l.index),
        applied_index: m.last_applied.as_ref().map(|l| l.index),
        last_log_index: m.last_log_index,
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
        member_urls: membership
            .nodes()
            .map(|(id, node)| (*id, node.api_url.clone()))
            .collect(),
        member_resp_addrs: membership
            .nodes()
            .filter(|(_, node)| !node.resp_addr.is_empty())
            .map(|(id, node)| (*id, node.resp_addr.clone()))
            .collect(),
        followers,
        counts: RaftCounts::default(),
        read_index_rounds: 0,
    }
}
