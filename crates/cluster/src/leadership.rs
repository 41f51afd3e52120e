//! The leader's side of the replica writer: the proposals it hands to
//! openraft, and the leadership changes it must hear of
//! (docs/replication.md, section 3.2).
//!
//! - [`RaftProposer`] is the writer's [`Proposer`]: it queues each decided
//!   batch for the *proposal task*, which hands them to openraft one by
//!   one, in decision order, each only for the term it was decided in
//!   (`Raft::write(..).with_leader(term)`), and answers each caller when
//!   its entry is applied:
//!   - applied: its LSN;
//!   - refused before it was logged (`ForwardToLeader`), or void (it broke
//!     its chain): [`WriteError::NotLeader`], nothing was applied, a retry
//!     is safe. The writer is told (`refused`): it stalls, and the
//!     leadership task has it lead again (a new epoch);
//!   - logged and then discarded when the leadership changed
//!     (`LogEntryDiscarded`): [`WriteError::LeadershipLost`], whose outcome
//!     is unknown;
//!   - still waiting when the leader's lease has lapsed for a while (no
//!     majority answers it: it may be cut off, and would wait until it
//!     hears of a new leader): [`WriteError::QuorumLost`], whose outcome is
//!     unknown, so that the caller can turn to another member at once.
//! - The *leadership task* watches openraft's metrics. When this member
//!   leads a new term, or its writer stalled while it leads, it tells the
//!   writer to lead (the writer then proposes its gate, through this same
//!   proposal queue, so that the gate is logged behind every earlier
//!   proposal). When the member stops leading, it tells the writer to
//!   follow, and who leads.
//! - The *lease task* keeps the member's [`ReadLease`] up to date from
//!   openraft's metrics: whether it leads, in which term, and until when
//!   a majority's last acknowledgement lets it answer reads alone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use openraft::Raft;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ClientWriteError, ForwardToLeader};
use openraft::impls::ProgressResponder;
use openraft::storage::RaftStateMachine;
use tokio::sync::{Notify, mpsc};
use uuidmap_engine::writer::{
    DecidedBatch, LeaderHint, Proposer, ReadLease, ReplicaControl, WriteError, WriteOutcome,
    WriteReply,
};

use crate::types::CommittedLeaderId;
use crate::{RaftBatch, UuidmapRaft};

/// The writer's [`Proposer`] (module docs).
pub struct RaftProposer {
    tx: mpsc::UnboundedSender<(DecidedBatch, WriteReply)>,
}

impl Proposer for RaftProposer {
    fn propose(&mut self, batch: DecidedBatch, reply: WriteReply) {
        if let Err(mpsc::error::SendError((_, reply))) = self.tx.send((batch, reply)) {
            // The proposal task is gone: this member is shutting down.
            let _ = reply.send(Err(WriteError::ShuttingDown));
        }
    }
}

/// The proposals a [`RaftProposer`] queued, for the proposal task.
pub struct ProposalQueue {
    rx: mpsc::UnboundedReceiver<(DecidedBatch, WriteReply)>,
}

/// A proposer and the queue it fills.
pub fn proposal_channel() -> (RaftProposer, ProposalQueue) {
    let (tx, rx) = mpsc::unbounded_channel();
    (RaftProposer { tx }, ProposalQueue { rx })
}

fn hint(forward: &ForwardToLeader<UuidmapRaft>) -> Option<LeaderHint> {
    forward.leader_id.map(|id| LeaderHint {
        id,
        url: forward.leader_node.as_ref().map(|n| n.api_url.clone()),
    })
}

/// Who leads, as this member's metrics say.
fn current_hint<SM>(raft: &Raft<UuidmapRaft, SM>) -> Option<LeaderHint>
where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let metrics = raft.metrics();
    let m = metrics.borrow_watched();
    m.current_leader.map(|id| LeaderHint {
        id,
        url: m
            .membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.api_url.clone()),
    })
}

/// How often the proposal task looks at the lease while proposals wait.
const LEASE_CHECK: Duration = Duration::from_millis(100);

/// The proposal task (module docs): runs until the writer and every
/// proposer are gone. One task both hands proposals to openraft and
/// answers them as openraft answers (no task per write). While proposals
/// wait, it looks at `lease` every `LEASE_CHECK` (100 ms): once it has seen it
/// lapsed twice in a row, each waiting caller is answered
/// [`WriteError::QuorumLost`] (outcome unknown) instead of waiting for a
/// majority that may never come; the proposal itself is still followed,
/// for the writer's sake.
pub async fn run_proposals<SM>(
    mut queue: ProposalQueue,
    raft: Raft<UuidmapRaft, SM>,
    control: ReplicaControl,
    lease: Arc<ReadLease>,
) where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let mut waiting = FuturesUnordered::new();
    // The callers not answered yet, by proposal number.
    let mut callers: HashMap<u64, WriteReply> = HashMap::new();
    let mut next = 0u64;
    let mut lapsed_checks = 0;
    let mut checks = tokio::time::interval(LEASE_CHECK);
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            Some((n, seq, answer)) = waiting.next(), if !waiting.is_empty() => {
                let outcome = outcome(answer, seq, &raft, &control);
                if let Some(reply) = callers.remove(&n) {
                    let _ = reply.send(outcome);
                }
                if callers.is_empty() {
                    // A lapse seen before counts no more.
                    lapsed_checks = 0;
                }
            }
            proposal = queue.rx.recv() => {
                let Some((batch, reply)) = proposal else { break };
                let (responder, answer) = ProgressResponder::complete_only();
                let seq = batch.seq;
                let entry = RaftBatch::new(seq, &batch.ops);
                let sent = raft
                    .write(entry)
                    .with_leader(CommittedLeaderId::new(batch.term))
                    .responder(responder)
                    .await;
                if sent.is_err() {
                    // openraft has stopped: nothing was logged.
                    let _ = reply.send(Err(WriteError::ShuttingDown));
                    continue;
                }
                next += 1;
                let n = next;
                callers.insert(n, reply);
                waiting.push(async move { (n, seq, answer.await) });
            }
            _ = checks.tick(), if !callers.is_empty() => {
                lapsed_checks = if lease.lapsed() { lapsed_checks + 1 } else { 0 };
                if lapsed_checks >= 2 {
                    // Gates and confirmations have no caller waiting.
                    let writes = callers.values().filter(|r| !r.is_closed()).count();
                    if writes > 0 {
                        tracing::warn!(
                            writes,
                            "no majority answers this leader: its writes in flight are answered as of unknown outcome"
                        );
                    }
                    for (_, reply) in callers.drain() {
                        let _ = reply.send(Err(WriteError::QuorumLost));
                    }
                }
            }
        }
    }
    // The writer is gone: answer what is still waiting.
    while let Some((n, seq, answer)) = waiting.next().await {
        let outcome = outcome(answer, seq, &raft, &control);
        if let Some(reply) = callers.remove(&n) {
            let _ = reply.send(outcome);
        }
    }
}

/// What openraft's answer to proposal `seq` means for its caller; tells
/// the writer of a refusal.
fn outcome<SM>(
    answer: Result<
        Result<openraft::raft::ClientWriteResponse<UuidmapRaft>, ClientWriteError<UuidmapRaft>>,
        impl std::fmt::Display,
    >,
    seq: u64,
    raft: &Raft<UuidmapRaft, SM>,
    control: &ReplicaControl,
) -> Result<WriteOutcome, WriteError>
where
    SM: RaftStateMachine<UuidmapRaft>,
{
    match answer {
        Ok(Ok(written)) if !written.data.void => Ok(WriteOutcome {
            lsn: written.data.lsn,
        }),
        Ok(Ok(_void)) => {
            let _ = control.refused(seq);
            Err(WriteError::NotLeader {
                leader: current_hint(raft),
            })
        }
        Ok(Err(ClientWriteError::ForwardToLeader(forward))) => {
            let _ = control.refused(seq);
            Err(WriteError::NotLeader {
                leader: hint(&forward),
            })
        }
        Ok(Err(ClientWriteError::LogEntryDiscarded(forward))) => Err(WriteError::LeadershipLost {
            leader: hint(&forward),
        }),
        Ok(Err(other)) => {
            tracing::warn!("a proposal failed: {other}");
            Err(WriteError::Unanswered)
        }
        // openraft stopped with the entry logged: unknown.
        Err(_) => Err(WriteError::Unanswered),
    }
}

/// How long the leadership task waits before it has a stalled writer
/// lead again, so that a log that keeps refusing (a lapsed lease) is not
/// asked in a hot loop.
const REGATE_AFTER: Duration = Duration::from_millis(20);

/// The leadership task (module docs): runs until openraft stops.
pub async fn watch_leadership<SM>(
    raft: Raft<UuidmapRaft, SM>,
    control: ReplicaControl,
    stalled: Arc<Notify>,
) where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let id = *raft.node_id();
    let mut metrics = raft.metrics();
    // The term the writer was told it leads, and the leader it was last
    // told of while following (its URL included: a follower may hear of
    // the leader before it has the membership that names its URL).
    let mut led: Option<u64> = None;
    let mut told: Option<Option<LeaderHint>> = None;
    let mut again = false;
    loop {
        let leading = {
            let m = metrics.borrow_watched();
            let leads = m.state == openraft::ServerState::Leader && m.current_leader == Some(id);
            leads.then_some(m.current_term)
        };
        let hint = current_hint(&raft);
        let told_ok = match leading {
            Some(term) if led != Some(term) || again => {
                led = Some(term);
                told = None;
                control.lead(term)
            }
            None if led.is_some() || told.as_ref() != Some(&hint) => {
                led = None;
                told = Some(hint.clone());
                control.follow(hint)
            }
            _ => Ok(()),
        };
        if told_ok.is_err() {
            return; // the writer has stopped
        }
        again = false;
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = stalled.notified() => {
                tokio::time::sleep(REGATE_AFTER).await;
                again = true;
            }
        }
    }
}

/// The lease task (module docs): runs until openraft stops. `lease` is
/// how long after a majority's acknowledgement (the time the leader sent
/// what they acknowledged) no other member can lead: openraft's followers
/// vote for no one for the maximum election timeout after hearing from
/// their leader; the caller gives less, for the clocks' drift.
pub async fn watch_lease<SM>(
    raft: Raft<UuidmapRaft, SM>,
    read_lease: Arc<ReadLease>,
    lease: Duration,
) where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let id = *raft.node_id();
    let mut metrics = raft.metrics();
    loop {
        {
            let m = metrics.borrow_watched();
            let leads = m.state == openraft::ServerState::Leader && m.current_leader == Some(id);
            if leads {
                let membership = m.membership_config.membership();
                let alone = membership.voter_ids().all(|v| v == id);
                let until = if alone {
                    None
                } else {
                    // Never acknowledged yet: a lease that has run out.
                    Some(
                        m.last_quorum_acked
                            .as_ref()
                            .map(|t| {
                                let acked_ago = openraft::Instant::elapsed(&**t);
                                std::time::Instant::now()
                                    .checked_sub(acked_ago)
                                    .unwrap_or_else(std::time::Instant::now)
                                    + lease
                            })
                            .unwrap_or_else(std::time::Instant::now),
                    )
                };
                read_lease.lead(m.current_term, until);
            } else {
                read_lease.follow();
            }
        }
        if metrics.changed().await.is_err() {
            read_lease.follow();
            return;
        }
    }
}
