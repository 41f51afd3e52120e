//! Handing a group's leadership to another voter, on its leader
//! (`uuidmap cluster transfer-leader N`), without breaking the read lease
//! (docs/replication.md, section 6.3).
//!
//! openraft's transfer tells every voter that the leader hands over, and
//! they then vote for the named member at once, before their lease of the
//! old leader ends. So the old leader must stop serving as the leader
//! *before* it asks: in order,
//! 1. it checks the target (a voter, not itself), and that it leads;
//! 2. it hands over ([`LeadershipShared::hand_over`]): its read lease
//!    answers no read as the leader in this term, and its writer is told
//!    to follow the target (it decides nothing more); it waits, bounded,
//!    until the writer has left the leading role;
//! 3. it asks openraft (`trigger().transfer_leader`), which stops its
//!    proposals and heartbeats and sends the voters `TransferLeader`;
//! 4. it waits, bounded, until the target leads, and answers who leads.
//!
//! A transfer that does not complete within the wait leaves the old
//! leader handed over for that term: it sends no heartbeats, so the group
//! elects a leader within an election timeout anyway.

use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use uuidmap_engine::writer::LeaderHint;

use crate::leadership::LeadershipShared;
use crate::state_machine::IndexRaft;

/// Why a leader transfer was not made.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// This member does not lead; a transfer is asked of the leader.
    #[error(
        "this server does not lead its replica group{}; ask the leader to transfer its \
         leadership",
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
    /// The target is this member.
    #[error("node {id} already leads its replica group: name another voter")]
    ToItself {
        /// This member's id.
        id: u64,
    },
    /// The target is not a voter of the group.
    #[error(
        "node {id} is not a voter of this replica group (voters: {voters:?}); only a voter can \
         lead (promote a learner first with `uuidmap cluster add`)"
    )]
    NotAVoter {
        /// The target.
        id: u64,
        /// The voters now.
        voters: Vec<u64>,
    },
    /// The transfer was asked, but the target did not lead within the
    /// wait; this member leads no more in its term.
    #[error(
        "node {to} did not take the leadership within {waited_ms} ms{}; this member has stopped \
         leading, and the group elects a leader by itself (look with `uuidmap cluster status`)",
        match .leader {
            Some(id) => format!(" (node {id} leads now)"),
            None => " (no leader is known yet)".to_string(),
        }
    )]
    NotTaken {
        /// The target.
        to: u64,
        /// How long it was waited for.
        waited_ms: u64,
        /// The leader this member knows of now.
        leader: Option<u64>,
    },
    /// Raft has stopped on this member.
    #[error("Raft has stopped on this member: {0}")]
    Stopped(String),
}

/// Who leads after a transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transferred {
    /// The new leader's node id.
    pub leader: u64,
    /// Its client URL, from the membership.
    pub url: Option<String>,
    /// Its term.
    pub term: u64,
}

/// How long the old leader waits for its writer to leave the leading role.
const WRITER_STEPS_BACK: Duration = Duration::from_secs(1);

/// A member's leader transfer (module docs); cheap to clone.
#[derive(Clone)]
pub struct LeaderTransfer {
    pub(crate) raft: IndexRaft,
    pub(crate) shared: LeadershipShared,
}

impl LeaderTransfer {
    /// Hands this member's leadership to voter `to`, waiting up to `wait`
    /// for it to lead (module docs).
    pub async fn to(&self, to: u64, wait: Duration) -> Result<Transferred, TransferError> {
        let id = *self.raft.node_id();
        let term = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow_watched();
            let membership = m.membership_config.membership();
            let leads = m.state == openraft::ServerState::Leader && m.current_leader == Some(id);
            if !leads || self.shared.handed_over_to(m.current_term).is_some() {
                let leader = m.current_leader.filter(|l| *l != id).map(|l| LeaderHint {
                    id: l,
                    url: membership.get_node(&l).map(|n| n.api_url.clone()),
                });
                return Err(TransferError::NotLeader { leader });
            }
            if to == id {
                return Err(TransferError::ToItself { id });
            }
            let voters: Vec<u64> = membership.voter_ids().collect();
            if !voters.contains(&to) {
                return Err(TransferError::NotAVoter { id: to, voters });
            }
            m.current_term
        };
        tracing::info!(term, to, "handing the leadership over");
        self.shared.hand_over(term, to);
        let until = Instant::now() + WRITER_STEPS_BACK;
        while self.shared.lease.ready_term() == term && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.raft
            .trigger()
            .transfer_leader(to)
            .await
            .map_err(|e| TransferError::Stopped(e.to_string()))?;
        let started = Instant::now();
        let taken = self
            .raft
            .wait(Some(wait))
            .metrics(
                |m| m.current_leader == Some(to) && m.current_term > term,
                "the target leads",
            )
            .await;
        match taken {
            Ok(m) => Ok(Transferred {
                leader: to,
                url: m
                    .membership_config
                    .membership()
                    .get_node(&to)
                    .map(|n| n.api_url.clone()),
                term: m.current_term,
            }),
            Err(openraft::metrics::WaitError::Timeout(..)) => Err(TransferError::NotTaken {
                to,
                waited_ms: started.elapsed().as_millis() as u64,
                leader: self.raft.metrics().borrow_watched().current_leader,
            }),
            Err(e) => Err(TransferError::Stopped(e.to_string())),
        }
    }
}
