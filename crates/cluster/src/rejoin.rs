//! A member whose vote is not trusted, and how its group takes it back
//! without an operator.
//!
//! A vote is a promise: a member that voted for a candidate in a term must
//! never vote for another in that term, nor take entries from a leader of
//! an older term. The vote lives in `raft-state`, two checksummed slots
//! (`uuidmap_engine::store::raft_state`). When one slot is found damaged,
//! the other may hold an *older* vote: falling back to it could make this
//! member vote twice in one term, or acknowledge a deposed leader's
//! entries, and so help two leaders commit different entries at one
//! index. So the state read is marked `vote_distrusted`, and the member:
//!
//! 1. **votes for no one and starts no election** (the Raft service
//!    refuses `Vote`, `PreVote` and `TransferLeader`; openraft's elections
//!    are switched off);
//! 2. **takes no entries** (`AppendEntries`, `InstallSnapshot` refused):
//!    while it is a voter its acknowledgement counts towards a commit, and
//!    a deposed leader it no longer knows to be deposed could count it;
//! 3. **asks the leader to rejoin it** (the Raft service's `Rejoin`,
//!    tried on every member it knows, every [`ASK_EVERY`]): the leader
//!    takes it out of the membership (a joint change, committed by a
//!    majority of the old voters and of the new ones without it) and adds
//!    it back as a learner, and answers the log index of that membership.
//!    From then on its acknowledgements count for nothing, so it takes
//!    entries and catches up (out and back in rather than only demoted: the
//!    leader must forget how much of the node's log it had matched, since
//!    the node may have cut its log at damage);
//! 4. the leader **promotes it again** once it has caught up with the log
//!    as it was when the promotion was first wanted ([`promote_when_caught_up`]);
//! 5. the member, seeing itself a voter in a membership after the one that
//!    made it a learner, **trusts its vote again**: by then its vote is the
//!    current leader's, saved when it took that leader's entries. The mark
//!    is cleared in `raft-state` with the next write, and elections are
//!    switched back on.
//!
//! A member that is the only voter of its group clears the mark at once:
//! there is no other voter to promise anything to. Each step is
//! idempotent: a restart midway finds the mark again (it is cleared only
//! after step 5) and asks again; a leader asked by a member that is
//! already a learner only makes sure a promotion is under way; a new
//! leader, asked again, takes over.
//!
//! What it costs: while the member is distrusted the group has one voter
//! fewer (three members tolerate no other failure meanwhile); the
//! membership changes twice. Docs: docs/replication.md, section 8.5.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use openraft::ChangeMembers;
use openraft::async_runtime::WatchReceiver;
use openraft::storage::RaftStateMachine;
use tokio::sync::Mutex;
use uuidmap_proto::raft::v1 as pb;
use uuidmap_proto::raft::v1::raft_client::RaftClient;

use crate::UuidmapRaft;
use crate::identity::MemberIdentity;
use crate::raft_tls::RaftTls;

/// How often a distrusted member asks to be rejoined.
pub const ASK_EVERY: Duration = Duration::from_millis(500);

/// Whether this member's vote is trusted (module docs). Shared by the log
/// store (which writes the mark into every `raft-state` write), the Raft
/// service (which refuses what a distrusted member may not do) and the
/// task that asks for the rejoin.
#[derive(Debug, Default)]
pub struct VoteTrust {
    /// The vote may be older than one this member gave (persisted as
    /// `vote_distrusted`); cleared once promoted back (step 5).
    distrusted: AtomicBool,
    /// The log index of the membership in which the leader made this
    /// member a learner (0: not yet): from then on it may take entries.
    learner_at: AtomicU64,
}

impl VoteTrust {
    /// `distrusted` as read from `raft-state`.
    pub fn new(distrusted: bool) -> Arc<VoteTrust> {
        Arc::new(VoteTrust {
            distrusted: AtomicBool::new(distrusted),
            learner_at: AtomicU64::new(0),
        })
    }

    /// Whether the vote is not trusted (yet).
    pub fn distrusted(&self) -> bool {
        self.distrusted.load(SeqCst)
    }

    /// Whether entries must be refused: distrusted, and not yet a learner.
    pub fn refuses_entries(&self) -> bool {
        self.distrusted() && self.learner_at.load(SeqCst) == 0
    }

    /// The leader made this member a learner in the membership at `at`.
    fn made_learner(&self, at: u64) {
        self.learner_at.fetch_max(at.max(1), SeqCst);
    }

    /// The vote is trusted again (written with the next `raft-state` write).
    fn clear(&self) {
        self.distrusted.store(false, SeqCst);
    }
}

/// Why the leader did not rejoin a member.
#[derive(Debug, thiserror::Error)]
pub enum RejoinError {
    /// This member does not lead.
    #[error("this member does not lead its group{}; ask the leader", .leader.map(|l| format!(" (node {l} does)")).unwrap_or_default())]
    NotLeader {
        /// The leader, if known.
        leader: Option<u64>,
    },
    /// The node is not in the membership, or its directory was replaced.
    #[error("{0}")]
    Refused(String),
    /// The membership change failed (another is under way, or the leader
    /// lost its leadership); the member asks again.
    #[error("making node {node} a learner failed: {reason}; it asks again")]
    ChangeFailed {
        /// The node.
        node: u64,
        /// openraft's words.
        reason: String,
    },
}

/// The nodes a leader is promoting back (so that a member that asks twice
/// gets one promotion task).
#[derive(Debug, Default)]
pub struct Promotions {
    under_way: Mutex<BTreeSet<u64>>,
}

/// On the leader: takes `node` (whose directory has `incarnation`) out of
/// the membership and adds it back as a learner, makes sure it is promoted
/// again once caught up, and returns the log index of the membership in
/// which it is a learner.
///
/// Out and back in, not only demoted: the leader forgets how much of its
/// log the node held. The node may have cut its log at damage, and
/// openraft's leader refuses to see a follower's log go backwards (it
/// stops); a node added anew is probed from scratch.
pub async fn rejoin<SM>(
    raft: &openraft::Raft<UuidmapRaft, SM>,
    promotions: &Arc<Promotions>,
    node: u64,
    incarnation: u64,
) -> Result<u64, RejoinError>
where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let me = *raft.node_id();
    let (leader, membership) = {
        let m = raft.metrics().borrow_watched().clone();
        (m.current_leader, m.membership_config)
    };
    if leader != Some(me) {
        return Err(RejoinError::NotLeader { leader });
    }
    let Some(record) = membership.membership().get_node(&node).cloned() else {
        return Err(RejoinError::Refused(format!(
            "node {node} is not a member of this group; add it with `uuidmap cluster add`"
        )));
    };
    if record.incarnation != 0 && record.incarnation != incarnation {
        return Err(RejoinError::Refused(format!(
            "node {node}'s data directory is not the one the group knows (incarnation \
             {incarnation}, the membership records {}): remove it and add it again",
            record.incarnation
        )));
    }
    let mut under_way = promotions.under_way.lock().await;
    let is_learner = membership.membership().learner_ids().any(|l| l == node);
    if is_learner && under_way.contains(&node) {
        // Asked again while being taken back: the answer it missed.
        return Ok(membership.log_id().as_ref().map_or(0, |l| l.index));
    }
    let failed = |reason: String| RejoinError::ChangeFailed { node, reason };
    crate::membership::remove(raft, BTreeSet::from([node]))
        .await
        .map_err(|e| failed(e.to_string()))?;
    let added = raft
        .add_learner(node, record, false)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let learner_at = added.log_id.index;
    tracing::warn!(
        node,
        at = learner_at,
        "a member whose vote is not trusted was taken out and added back as a learner; it is \
         promoted again once it has caught up"
    );
    under_way.insert(node);
    drop(under_way);
    let (raft, promotions) = (raft.clone(), promotions.clone());
    tokio::spawn(async move {
        promote_when_caught_up(&raft, node).await;
        promotions.under_way.lock().await.remove(&node);
    });
    Ok(learner_at)
}

/// On the leader: waits until learner `node` has the log up to where it
/// ended when the wait began, then makes it a voter. Gives up when this
/// member stops leading or the node is no longer a learner (the member
/// asks the next leader).
pub async fn promote_when_caught_up<SM>(raft: &openraft::Raft<UuidmapRaft, SM>, node: u64)
where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let me = *raft.node_id();
    let target = raft.metrics().borrow_watched().last_log_index.unwrap_or(0);
    loop {
        let (leads, learner, matched) = {
            let m = raft.metrics().borrow_watched().clone();
            let learner = m
                .membership_config
                .membership()
                .learner_ids()
                .any(|l| l == node);
            let matched = m
                .replication
                .as_ref()
                .and_then(|r| r.get(&node).cloned().flatten())
                .map_or(0, |l| l.index);
            (m.current_leader == Some(me), learner, matched)
        };
        if !leads || !learner {
            return;
        }
        if matched >= target {
            match raft
                .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([node])), false)
                .await
            {
                Ok(changed) => {
                    tracing::info!(
                        node,
                        at = changed.log_id.index,
                        "promoted a rejoined member back to voter"
                    );
                    return;
                }
                Err(e) => {
                    tracing::warn!(node, error = %e, "promoting a rejoined member failed; retrying")
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// On the distrusted member: asks its group to rejoin it until it is a
/// voter again after being a learner, then trusts its vote and allows
/// elections again. Returns at once if the vote is trusted.
pub async fn ask_to_rejoin<SM>(
    raft: openraft::Raft<UuidmapRaft, SM>,
    trust: Arc<VoteTrust>,
    identity: MemberIdentity,
    dial: Arc<std::collections::HashMap<u64, String>>,
    tls: Option<Arc<RaftTls>>,
) where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let me = identity.node_id;
    while trust.distrusted() {
        let membership = raft.metrics().borrow_watched().membership_config.clone();
        let voters: BTreeSet<u64> = membership.membership().voter_ids().collect();
        let at = membership.log_id().as_ref().map_or(0, |l| l.index);
        let learner_at = trust.learner_at.load(SeqCst);
        let alone = voters.len() == 1 && voters.contains(&me);
        let promoted_back = learner_at != 0 && at > learner_at && voters.contains(&me);
        if alone || promoted_back {
            trust.clear();
            raft.runtime_config().elect(true);
            tracing::info!(
                node = me,
                "this member's vote is trusted again ({})",
                if alone {
                    "it is its group's only voter"
                } else {
                    "its group made it a learner and promoted it back"
                }
            );
            return;
        }
        if learner_at == 0 {
            for (id, node) in membership.membership().nodes() {
                if *id == me {
                    continue;
                }
                let addr = dial
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| node.raft_addr.clone());
                match ask(&addr, *id, tls.as_deref(), identity).await {
                    Ok(at) => {
                        trust.made_learner(at);
                        tracing::info!(
                            node = me,
                            leader = id,
                            at,
                            "the group made this member a learner; catching up"
                        );
                        break;
                    }
                    Err(e) => tracing::debug!(node = me, peer = id, "rejoin not granted: {e}"),
                }
            }
        }
        tokio::time::sleep(ASK_EVERY).await;
    }
}

/// Asks member `target`, whose Raft service is at `raft_addr`, to rejoin
/// this one (over the Raft port's TLS, when set).
async fn ask(
    raft_addr: &str,
    target: u64,
    tls: Option<&RaftTls>,
    identity: MemberIdentity,
) -> Result<u64, String> {
    let endpoint = crate::network::endpoint(raft_addr, target, tls)
        .map_err(|e| format!("the Raft address {raft_addr:?} is not usable: {e}"))?
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(10));
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("cannot reach {raft_addr}: {e}"))?;
    let answer = RaftClient::new(channel)
        .rejoin(pb::RejoinRequest {
            node_id: identity.node_id,
            incarnation: identity.incarnation,
        })
        .await
        .map_err(|s| format!("{raft_addr} answered {:?}: {}", s.code(), s.message()))?;
    Ok(answer.into_inner().learner_at)
}
