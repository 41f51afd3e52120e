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
//!   A leader that *hands over* (a transfer, or a step-down below) tells
//!   the writer to follow the member it hands over to.
//! - The *lease task* keeps the member's [`ReadLease`] up to date from
//!   openraft's metrics: whether it leads, in which term, and until when
//!   a majority's last acknowledgement lets it answer reads alone. A
//!   leader that no majority acknowledged for `step_down_after` (the
//!   maximum election timeout: by then every follower that stopped
//!   hearing it has started an election) **steps down**: openraft 0.10
//!   has no step-down for a voter that leads, so it does what openraft's
//!   own step-down of a removed leader does (`core/step_down_watcher.rs`):
//!   it hands its leadership to the most up-to-date other voter
//!   (`trigger().transfer_leader`), which stops its heartbeats and its
//!   proposals, and the writer and the read lease leave the leading role
//!   at once, so clients are told "not the leader" and move on. It stays
//!   openraft's leader (reported as `stepping-down`) until it hears of a
//!   newer term.
//!   While the lease holds, the task looks again only when half of it is
//!   left (or the state, leader or membership changes), not at every
//!   change of openraft's metrics, which change at every write: a look
//!   then finds a newer acknowledgement under load and extends the lease
//!   from it. A lease with less than half left, lapsed, or not yet granted
//!   is looked at on every change, so that it is extended or granted as
//!   soon as an acknowledgement arrives. A follower's lease task wakes only
//!   when the state, the leader or the membership changes.
//! - The proposals not yet answered are bounded (`max_proposals`): the
//!   writer asks [`Proposer::admit`] before it decides a caller's batch,
//!   and a batch over the bound is refused, nothing logged
//!   ([`WriteError::ProposalsFull`], counted). Gates and confirmations
//!   are never refused (the writer needs them; one of each at a time), so
//!   the queue and the proposals waiting in openraft hold at most the
//!   bound plus two.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use openraft::Raft;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ClientWriteError, ForwardToLeader};
use openraft::impls::ProgressResponder;
use openraft::storage::RaftStateMachine;
use tokio::sync::{Notify, mpsc};
use uuidmap_engine::writer::{
    DecidedBatch, LeaderHint, LeaseAck, MemberLogSteps, Proposer, ReadLease, ReplicaControl,
    WriteError, WriteOutcome, WriteReply,
};

use crate::counters::RaftCounters;
use crate::types::{CommittedLeaderId, StoredMembership};
use crate::vote_guard::VoteGuard;
use crate::{RaftBatch, UuidmapRaft};

/// The default bound on a leader's proposals not yet answered: at the
/// 64 writers of the benchmarks and a commit every few ms, far more than
/// is ever in flight; a group that stops committing fills it in seconds
/// rather than filling memory.
pub const MAX_PROPOSALS: usize = 4096;

/// The writer's [`Proposer`] (module docs).
pub struct RaftProposer {
    tx: mpsc::UnboundedSender<(DecidedBatch, WriteReply)>,
    /// Proposals handed over and not yet answered (the task lowers it).
    in_flight: Arc<AtomicUsize>,
    bound: usize,
    counters: Arc<RaftCounters>,
}

impl Proposer for RaftProposer {
    fn propose(&mut self, batch: DecidedBatch, reply: WriteReply) {
        self.in_flight.fetch_add(1, Relaxed);
        if let Err(mpsc::error::SendError((_, reply))) = self.tx.send((batch, reply)) {
            // The proposal task is gone: this member is shutting down.
            self.in_flight.fetch_sub(1, Relaxed);
            let _ = reply.send(Err(WriteError::ShuttingDown));
        }
    }

    fn admit(&self) -> Result<(), usize> {
        if self.in_flight.load(Relaxed) >= self.bound {
            RaftCounters::bump(&self.counters.proposals_refused);
            return Err(self.bound);
        }
        Ok(())
    }
}

/// The proposals a [`RaftProposer`] queued, for the proposal task.
pub struct ProposalQueue {
    rx: mpsc::UnboundedReceiver<(DecidedBatch, WriteReply)>,
    in_flight: Arc<AtomicUsize>,
    /// Where the time from a proposal to its answer is counted.
    steps: Arc<MemberLogSteps>,
}

/// Answers one proposal's caller, which leaves the bound.
fn answer_caller(
    in_flight: &AtomicUsize,
    reply: WriteReply,
    outcome: Result<WriteOutcome, WriteError>,
) {
    in_flight.fetch_sub(1, Relaxed);
    let _ = reply.send(outcome);
}

/// A proposer and the queue it fills; at most `bound` proposals of
/// callers not yet answered (module docs), refusals counted in
/// `counters`.
pub fn proposal_channel(
    bound: usize,
    counters: Arc<RaftCounters>,
    steps: Arc<MemberLogSteps>,
) -> (RaftProposer, ProposalQueue) {
    let (tx, rx) = mpsc::unbounded_channel();
    let in_flight = Arc::new(AtomicUsize::new(0));
    (
        RaftProposer {
            tx,
            in_flight: in_flight.clone(),
            bound: bound.max(1),
            counters,
        },
        ProposalQueue {
            rx,
            in_flight,
            steps,
        },
    )
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
    let in_flight = queue.in_flight.clone();
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
            Some((n, seq, answer, proposed)) = waiting.next(), if !waiting.is_empty() => {
                let elapsed = Instant::now().saturating_duration_since(proposed);
                queue
                    .steps
                    .replicate_ns
                    .fetch_add(elapsed.as_nanos() as u64, Relaxed);
                let outcome = outcome(answer, seq, &raft, &control);
                if let Some(reply) = callers.remove(&n) {
                    answer_caller(&in_flight, reply, outcome);
                }
                if callers.is_empty() {
                    // A lapse seen before counts no more.
                    lapsed_checks = 0;
                }
            }
            proposal = queue.rx.recv() => {
                let Some((batch, reply)) = proposal else { break };
                let (responder, answer) = ProgressResponder::complete_only();
                let proposed = Instant::now();
                let seq = batch.seq;
                let entry = RaftBatch::new(seq, &batch.ops);
                let sent = raft
                    .write(entry)
                    .with_leader(CommittedLeaderId::new(batch.term))
                    .responder(responder)
                    .await;
                if sent.is_err() {
                    // openraft has stopped: nothing was logged.
                    answer_caller(&in_flight, reply, Err(WriteError::ShuttingDown));
                    continue;
                }
                next += 1;
                let n = next;
                callers.insert(n, reply);
                waiting.push(async move { (n, seq, answer.await, proposed) });
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
                        answer_caller(&in_flight, reply, Err(WriteError::QuorumLost));
                    }
                }
            }
        }
    }
    // The writer is gone: answer what is still waiting.
    while let Some((n, seq, answer, _)) = waiting.next().await {
        let outcome = outcome(answer, seq, &raft, &control);
        if let Some(reply) = callers.remove(&n) {
            answer_caller(&in_flight, reply, outcome);
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

/// What the leadership and lease tasks share with a leader transfer.
#[derive(Clone)]
pub struct LeadershipShared {
    /// The member's read lease.
    pub lease: Arc<ReadLease>,
    /// The member's vote rules, which record a transfer.
    pub guard: Arc<VoteGuard>,
    /// Wakes the leadership task (a stalled writer, or a hand-over).
    pub stalled: Arc<Notify>,
    /// The member's counters.
    pub counters: Arc<RaftCounters>,
}

impl LeadershipShared {
    /// This member, leading `term`, hands its leadership to `to`: from now
    /// on it answers no read as the leader in `term` and its writer is
    /// told to follow `to` (module docs). openraft is not asked here.
    pub fn hand_over(&self, term: u64, to: u64) {
        self.lease.hand_over(term);
        self.guard.transfer_named(term, to);
        self.stalled.notify_one();
    }

    /// Whom this member, leading `term`, handed over to (if it did).
    pub fn handed_over_to(&self, term: u64) -> Option<u64> {
        if self.lease.handed_over(term) {
            self.guard.named_in(term)
        } else {
            None
        }
    }
}

/// The hint for member `id`, from `membership`.
fn hint_in(membership: &StoredMembership, id: u64) -> LeaderHint {
    LeaderHint {
        id,
        url: membership
            .membership()
            .get_node(&id)
            .map(|n| n.api_url.clone()),
    }
}

/// The leadership task (module docs): runs until openraft stops.
pub async fn watch_leadership<SM>(
    raft: Raft<UuidmapRaft, SM>,
    control: ReplicaControl,
    shared: LeadershipShared,
) where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let id = *raft.node_id();
    // The server metrics change with the state, the leader, the vote or
    // the membership, which is all this task reads; openraft's whole
    // metrics change at every write.
    let mut metrics = raft.server_metrics();
    // The term the writer was told it leads, and the leader it was last
    // told of while following (its URL included: a follower may hear of
    // the leader before it has the membership that names its URL).
    let mut led: Option<u64> = None;
    let mut told: Option<Option<LeaderHint>> = None;
    let mut again = false;
    // The last leader seen, with its term, for `leader_changes`.
    let mut seen: Option<(u64, u64)> = None;
    loop {
        // Read from the server metrics alone: openraft sends its whole
        // metrics just after them, so a look at those here could still
        // see the leader before.
        let (leading, current, membership) = {
            let m = metrics.borrow_watched();
            let term =
                openraft::vote::RaftLeaderId::term(openraft::vote::RaftVote::leader_id(&m.vote));
            let leads = m.state == openraft::ServerState::Leader && m.current_leader == Some(id);
            let current = m.current_leader.map(|l| (term, l));
            (leads.then_some(term), current, m.membership_config.clone())
        };
        if current.is_some() && current != seen {
            seen = current;
            RaftCounters::bump(&shared.counters.leader_changes);
        }
        // A leader that handed over follows the member it named.
        let handed = leading.and_then(|term| shared.handed_over_to(term));
        let (leading, hint) = match handed {
            Some(to) => (None, Some(hint_in(&membership, to))),
            None => (leading, current.map(|(_, l)| hint_in(&membership, l))),
        };
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
            _ = shared.stalled.notified() => {
                tokio::time::sleep(REGATE_AFTER).await;
                again = true;
            }
        }
    }
}

/// The lease task's timings.
#[derive(Clone, Copy, Debug)]
pub struct LeaseTiming {
    /// How long after a majority's acknowledgement (the time the leader
    /// sent what they acknowledged) no other member can lead: openraft's
    /// followers vote for no one for the maximum election timeout after
    /// hearing from their leader; the caller gives less (the minimum),
    /// for the clocks' drift.
    pub lease: Duration,
    /// A leader that no majority acknowledged for this long steps down
    /// (module docs).
    pub step_down_after: Duration,
}

/// What the lease task does after one look at the metrics.
enum LeaseStep {
    /// Nothing until the metrics change.
    Wait,
    /// Look again at this time (the lease's end, or the step-down's), or
    /// when the metrics change.
    WakeAt(Instant),
    /// The lease holds with more than half of it left: look again at this
    /// time (when half is left), or when the state, the leader or the
    /// membership changes, not at every write (module docs).
    RefreshAt(Instant),
    /// Step down from `term`, handing over to `to`.
    StepDown { term: u64, to: Option<u64> },
}

/// The lease task (module docs): runs until openraft stops.
pub async fn watch_lease<SM>(
    raft: Raft<UuidmapRaft, SM>,
    shared: LeadershipShared,
    timing: LeaseTiming,
) where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let id = *raft.node_id();
    let metrics = raft.metrics();
    let mut server = raft.server_metrics();
    let mut data = raft.data_metrics();
    // Whether the lease held at the last look (for `lease_lapses`), and
    // since when this member leads its current term.
    let mut held = false;
    let mut leading_since: Option<(u64, Instant)> = None;
    loop {
        let step = {
            let m = metrics.borrow_watched();
            let leads = m.state == openraft::ServerState::Leader && m.current_leader == Some(id);
            if leads {
                let term = m.current_term;
                let since = match leading_since {
                    Some((t, at)) if t == term => at,
                    _ => {
                        let now = Instant::now();
                        leading_since = Some((term, now));
                        held = false;
                        now
                    }
                };
                let membership = m.membership_config.membership();
                let alone = membership.voter_ids().all(|v| v == id);
                let acked_at = m.last_quorum_acked.as_ref().map(|t| {
                    let acked_ago = openraft::Instant::elapsed(&**t);
                    Instant::now()
                        .checked_sub(acked_ago)
                        .unwrap_or_else(Instant::now)
                });
                let ack = match (alone, acked_at) {
                    (true, _) => LeaseAck::Alone,
                    (false, Some(at)) => LeaseAck::At(at),
                    (false, None) => LeaseAck::Never,
                };
                if shared.lease.lead(term, ack, timing.lease) {
                    tracing::warn!(
                        "this host was suspended: the read lease waits for an acknowledgement \
                         sent after it"
                    );
                }
                let lapsed = shared.lease.lapsed();
                if lapsed && held {
                    RaftCounters::bump(&shared.counters.lease_lapses);
                }
                held = !lapsed;
                if alone || shared.lease.handed_over(term) {
                    LeaseStep::Wait
                } else {
                    let last = acked_at.map_or(since, |a| a.max(since));
                    let step_at = last + timing.step_down_after;
                    if Instant::now() >= step_at {
                        // The most up-to-date other voter.
                        let voters: Vec<u64> = membership.voter_ids().collect();
                        let to = m
                            .replication
                            .as_ref()
                            .and_then(|r| {
                                r.iter()
                                    .filter(|(v, _)| **v != id && voters.contains(v))
                                    .max_by_key(|(_, matched)| matched.as_ref().map(|l| l.index))
                                    .map(|(v, _)| *v)
                            })
                            .or_else(|| voters.iter().copied().find(|v| *v != id));
                        LeaseStep::StepDown { term, to }
                    } else if lapsed {
                        LeaseStep::WakeAt(step_at)
                    } else if Instant::now() < last + timing.lease / 2 {
                        LeaseStep::RefreshAt(last + timing.lease / 2)
                    } else {
                        LeaseStep::WakeAt((last + timing.lease).min(step_at))
                    }
                }
            } else {
                shared.lease.follow();
                held = false;
                leading_since = None;
                LeaseStep::Wait
            }
        };
        // Whether a change of the data metrics (an acknowledgement) wakes
        // the task too: only while a lease waits to be granted or
        // extended. A follower, a leader alone or one that handed over
        // wait for the state, the leader or the membership to change.
        let mut on_data = false;
        let wake = match step {
            LeaseStep::Wait => None,
            LeaseStep::WakeAt(at) => {
                on_data = true;
                Some(at)
            }
            LeaseStep::RefreshAt(at) => Some(at),
            LeaseStep::StepDown { term, to } => {
                on_data = true;
                RaftCounters::bump(&shared.counters.step_downs);
                tracing::warn!(
                    term,
                    ?to,
                    after_ms = timing.step_down_after.as_millis() as u64,
                    "no majority acknowledged this leader lately: it steps down"
                );
                if let Some(to) = to {
                    shared.hand_over(term, to);
                    if raft.trigger().transfer_leader(to).await.is_err() {
                        shared.lease.follow();
                        return; // openraft has stopped
                    }
                }
                None
            }
        };
        tokio::select! {
            changed = server.changed() => if changed.is_err() {
                shared.lease.follow();
                return;
            },
            changed = data.changed(), if on_data => if changed.is_err() {
                shared.lease.follow();
                return;
            },
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(
                wake.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600)),
            )), if wake.is_some() => {}
        }
    }
}
