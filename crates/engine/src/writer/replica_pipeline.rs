//! The writer thread of a replica group member: the single writer without
//! a WAL of its own. The replicated log (a Raft log, kept by the caller)
//! stands where the WAL stands in [`Pipeline`](super::Pipeline); this
//! thread decides what the leader proposes and applies what the group
//! committed (docs/replication.md, sections 3.2 and 3.3).
//!
//! # Two inputs
//!
//! The thread runs the writers' one loop (`writer_loop`, shared with the
//! single node's group commit), one input a turn, the log's first:
//!
//! - **Callers' batches**, through the same [`WriteHandle`] as a single
//!   node's. While this member leads, each is **decided** here, in queue
//!   order: its compare-and-sets are checked against the *overlay* (every
//!   write this leader proposed and has not applied yet) and then the
//!   index, and an accepted batch becomes blind writes ([`Op`]s), gets the
//!   next *proposal number* (`seq`) and goes to the [`Proposer`], which
//!   logs it and answers the caller once it is applied. A refused batch is
//!   logged nowhere. While this member does not lead, every batch is
//!   refused with [`WriteError::NotLeader`], and so is every batch while
//!   its read lease has lapsed (no majority acknowledged it lately: it may
//!   be cut off, and its proposals would wait for ever).
//! - **Control messages** ([`ReplicaControl`]), which come first when both
//!   wait:
//!   - `apply`: committed entries, in log order. Each normal entry's ops
//!     are applied with its log index (its LSN) as the stamp, then the last
//!     LSN is published on the [`LsnWatermark`]. An entry this leader
//!     proposed in its current term takes its writes out of the overlay
//!     (a key leaves only if this entry is the last proposal that set it).
//!   - `lead(term)`: this member leads `term`. The writer opens a new
//!     *epoch* and first proposes a **gate**: an entry with no ops, logged
//!     (like every proposal) after every proposal made before it. Batches
//!     that arrive meanwhile wait. When the gate is applied, so is every
//!     entry logged before it: an earlier leader's, and this member's own
//!     older proposals. From then on the overlay, which starts empty, is
//!     complete (every entry above the applied LSN was proposed by this
//!     thread in this epoch), and the writer decides.
//!   - `follow(leader)`: it does not lead (or no longer): the overlay is
//!     dropped and writes are refused, naming the leader if known.
//!   - `refused(seq)`: the log refused a proposal (below).
//!
//! # Why a decision made here holds
//!
//! A decision in term T rests on the applied prefix plus this leader's
//! pending proposals. The proposer must log each batch *only in term T*
//! (openraft: `write(..).with_leader(T)`) and in decision order; then a
//! committed proposal's predecessors in the log are exactly what the
//! decision saw (Raft's log matching), and every replica applies the same
//! blind writes. A proposal refused for a changed term fails every later
//! proposal of T too (terms only grow).
//!
//! # The proposal chain: a rejected proposal voids the ones after it
//!
//! The log may refuse a proposal of term T and still take a later one of
//! the same term: openraft refuses writes while a leadership transfer is
//! under way, or while the leader's lease has lapsed, and takes them again
//! afterwards. A later proposal may rest on the refused one's writes (the
//! overlay held them), so it must not take effect. Each proposal therefore
//! carries its place in a *chain*: `seq` is `epoch << 32 | n`, where the
//! epoch grows at every `lead` and `n` counts the epoch's proposals from 1.
//! Every replica applies a batch entry only if it continues the chain of
//! the last batch applied: the same term and epoch and the next `n`, or a
//! later term or epoch and `n = 1`. Otherwise the entry is *void*: it takes
//! its LSN and changes nothing, on every replica alike (the rule reads only
//! the log), and its caller learns it was not applied, so a retry is safe.
//! After a gap every later proposal of the epoch is void, so the writer
//! stops deciding at the first refusal or void entry of its epoch (its
//! gate's included), calls its `on_stall` hook, and decides again only
//! after a new `lead`: a new epoch, behind a new gate. Gates are not links
//! of the chain.
//!
//! **A refused compare-and-set is a read** ("the value was X"), and a
//! leader that was deposed without knowing it must not answer one from
//! its own state. So a refusal is answered only once (a) every proposal
//! it looked at is applied and (b) a *confirmation* proposed after it was
//! decided is applied: an entry with no ops, logged (in this term only,
//! behind every earlier proposal) and committed by a majority, which
//! places the read in the log. One confirmation serves every refusal
//! decided before it was proposed (it is proposed once the queue drains,
//! or after a bounded number of inputs). If the leadership changes or the chain
//! breaks first, the refusal is answered [`WriteError::NotLeader`]
//! (nothing was logged, a retry is safe). Confirmations carry
//! [`CONFIRM_FLAG`] in their proposal number; like gates, they are not
//! links of the chain.
//!
//! **Architecture Invariant:** only this thread mutates the index, and it
//! applies only entries the group committed, in log order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};

use super::core::WriterCore;
use super::handle::{Message, PipelineExit, Request, SyncReply, WriteHandle, add_elapsed};
use super::pipeline::PipelineConfig;
use super::proposal_chain::{CONFIRM_FLAG, ProposalChain, proposal_epoch};
use super::read_lease::ReadLease;
use super::request::{LeaderHint, WriteError, WriteOutcome};
use super::running::RunningWriter;
use super::writer_loop::{self, TurnEnd, Wake, WriterLog};
use crate::store::{FileError, Op, WalWriteError};
use arc_swap::ArcSwap;
use uuidmap_index::sync::LsnWatermark;
use uuidmap_index::{Index, IndexWriter};

/// Where a caller's answer goes.
pub type WriteReply = oneshot::Sender<Result<WriteOutcome, WriteError>>;

/// A batch the leader decided: blind writes, its proposal number, and the
/// term it was decided in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecidedBatch {
    /// The term this leader decided it in: it may be logged in no other.
    pub term: u64,
    /// The proposal number, unique in this process: `epoch << 32 | n`
    /// (module docs, "The proposal chain"); the applied entry carries it
    /// back.
    pub seq: u64,
    /// The puts and deletes.
    pub ops: Vec<Op>,
}

/// Where a leader's writer hands what it decided (module docs).
pub trait Proposer: Send + 'static {
    /// Logs `batch` in `batch.term` only, after every batch proposed
    /// before it, and answers `reply` once it is applied (with its LSN),
    /// or with why not. If the log refuses it, or it is applied void, the
    /// proposer tells the writer ([`ReplicaControl::refused`]). A batch
    /// with no ops is the writer's gate (module docs); nobody waits on its
    /// reply. Must not block: it runs on the writer thread.
    fn propose(&mut self, batch: DecidedBatch, reply: WriteReply);

    /// Whether a caller's batch may be decided now: `Err(bound)` when the
    /// proposals not yet answered reach the proposer's bound (the batch is
    /// then refused with [`WriteError::ProposalsFull`] before it is
    /// decided, so no chain breaks). Gates and confirmations are never
    /// asked: the writer must always be able to propose them.
    fn admit(&self) -> Result<(), usize> {
        Ok(())
    }
}

/// A committed log entry, as the writer applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedEntry {
    /// Its log index: the LSN.
    pub lsn: u64,
    /// The term it was logged in.
    pub term: u64,
    /// A client batch's proposal number and ops; `None` for an entry that
    /// changes nothing in the index (a new leader's blank entry, a
    /// membership).
    pub batch: Option<(u64, Vec<Op>)>,
}

/// Which of a call's entries were void (module docs, "The proposal
/// chain"): each took its LSN and changed nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// The LSNs of the void entries, in order (usually none).
    pub void: Vec<u64>,
    /// The chain after the call: what a snapshot taken at its last entry
    /// records.
    pub chain: ProposalChain,
}

/// A confirmation is proposed once the writer's queue is empty, or after
/// this many inputs while one is wanted, whichever comes first.
const CONFIRM_AFTER_INPUTS: usize = 256;

/// What the replicated log tells the writer.
enum Control {
    Apply(Vec<CommittedEntry>, oneshot::Sender<ApplyOutcome>),
    Lead(u64),
    Follow(Option<LeaderHint>),
    Refused(u64),
    Load(Box<LoadedSnapshot>, oneshot::Sender<()>),
}

/// A snapshot the group sent, mapped, for the writer to make the index's
/// contents ([`ReplicaControl::load`]).
pub struct LoadedSnapshot {
    /// The snapshot as an index (mapped in place).
    pub restored: crate::store::RestoredIndex,
    /// The last entry wholly in it (its smallest capture LSN): the
    /// applied LSN once loaded.
    pub lsn: u64,
    /// The chain at `lsn`.
    pub chain: ProposalChain,
}

/// The writer thread is gone: it stopped, or failed.
#[derive(Debug, thiserror::Error)]
#[error("the writer thread has stopped")]
pub struct WriterStopped;

/// Sends the writer what the replicated log decided; cloneable.
#[derive(Clone)]
pub struct ReplicaControl {
    tx: mpsc::UnboundedSender<Control>,
}

impl ReplicaControl {
    /// Applies committed `entries` (in log order, after every entry sent
    /// before) and returns once they are visible, saying which were void.
    pub async fn apply(&self, entries: Vec<CommittedEntry>) -> Result<ApplyOutcome, WriterStopped> {
        let (done, applied) = oneshot::channel();
        self.tx
            .send(Control::Apply(entries, done))
            .map_err(|_| WriterStopped)?;
        applied.await.map_err(|_| WriterStopped)
    }

    /// This member leads `term`: open a new epoch behind a gate (module
    /// docs). Safe to send again in the same term.
    pub fn lead(&self, term: u64) -> Result<(), WriterStopped> {
        self.tx.send(Control::Lead(term)).map_err(|_| WriterStopped)
    }

    /// The log refused the proposal `seq` before logging it (module docs,
    /// "The proposal chain"): the writer stops deciding until the next
    /// `lead`.
    pub fn refused(&self, seq: u64) -> Result<(), WriterStopped> {
        self.tx
            .send(Control::Refused(seq))
            .map_err(|_| WriterStopped)
    }

    /// Puts `snapshot`'s index in place of the index (readers find it
    /// through the slot given at the start), with the applied LSN its
    /// `lsn`; returns once done. Until the log is
    /// applied up to the snapshot's own LSN (its largest capture), reads
    /// are refused ([`ReadLease::set_consistent_from`]). Only for a member
    /// that follows, and a snapshot past what it applied.
    pub async fn load(&self, snapshot: LoadedSnapshot) -> Result<(), WriterStopped> {
        let (done, loaded) = oneshot::channel();
        self.tx
            .send(Control::Load(Box::new(snapshot), done))
            .map_err(|_| WriterStopped)?;
        loaded.await.map_err(|_| WriterStopped)
    }

    /// This member does not lead; `leader` is who does, if known.
    pub fn follow(&self, leader: Option<LeaderHint>) -> Result<(), WriterStopped> {
        self.tx
            .send(Control::Follow(leader))
            .map_err(|_| WriterStopped)
    }
}

/// The running writer thread of a replica.
pub struct ReplicaPipeline {
    running: RunningWriter,
    control: ReplicaControl,
}

/// The index a replica's writer starts over.
pub struct ReplicaIndex {
    /// The index's one writer.
    pub writer: IndexWriter,
    /// Where readers find the index (a snapshot install puts another
    /// there).
    pub slot: Arc<ArcSwap<Index>>,
    /// Its applied LSN: every entry up to it is in the index.
    pub watermark: Arc<LsnWatermark>,
    /// Where the proposal chain stood at that LSN.
    pub chain: ProposalChain,
}

impl ReplicaPipeline {
    /// Starts the thread over `index`; it follows until told it leads.
    /// `config`'s queue depth and batch limit apply; its fsync policy is
    /// the log's business.
    /// `on_stall` is called when a leader stops deciding because the log
    /// refused or voided one of its proposals (module docs): whoever sends
    /// `lead` should send it again, if this member still leads.
    pub fn start(
        config: &PipelineConfig,
        index: ReplicaIndex,
        proposer: Box<dyn Proposer>,
        on_stall: Box<dyn Fn() + Send>,
        lease: Arc<ReadLease>,
    ) -> std::io::Result<ReplicaPipeline> {
        let ReplicaIndex {
            writer,
            slot,
            watermark,
            chain,
        } = index;
        let (handle, rx) = WriteHandle::new(config.queue_depth, config.max_batch_ops);
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let state = ReplicaWriter {
            core: WriterCore::new(writer, watermark, handle.stats_arc()),
            slot,
            proposer,
            on_stall,
            lease,
            deferred: VecDeque::new(),
            role: Role::Following(None),
            epoch: 0,
            next_seq: 1,
            chain,
            last_proposed: 0,
            applied_own: 0,
            refusals: VecDeque::new(),
            next_confirm: 1,
            confirm_proposed: 0,
            confirm_applied: 0,
            confirm_wanted: None,
            inputs_since_wanted: 0,
            ops: Vec::new(),
            control: control_rx,
            control_open: true,
        };
        let running = RunningWriter::spawn("uuidmap-replica-writer", handle, move || {
            writer_loop::run(state, rx)
        })?;
        Ok(ReplicaPipeline {
            running,
            control: ReplicaControl { tx: control_tx },
        })
    }

    /// A handle for submitting writes.
    pub fn handle(&self) -> WriteHandle {
        self.running.handle().clone()
    }

    /// The handle the replicated log drives the writer with.
    pub fn control(&self) -> ReplicaControl {
        self.control.clone()
    }

    /// Stops accepting writes, decides what is queued, and returns the
    /// writer.
    pub fn stop(mut self) -> Option<PipelineExit> {
        self.running.stop()
    }
}

enum Role {
    Following(Option<LeaderHint>),
    /// Leads `term`, and waits for the gate proposal `gate` to be applied.
    Gating {
        term: u64,
        gate: u64,
    },
    Leading(u64),
}

/// A refused batch waiting for the proposals it looked at and for a
/// confirmation (module docs).
struct Refusal {
    /// Answered once this member's proposals up to this one are applied.
    after_seq: u64,
    /// ... and once a confirmation numbered at least this is applied.
    confirm: u64,
    reply: WriteReply,
    error: WriteError,
}

/// The state of a member's writer thread: the core, over the Raft log.
/// The core's overlay holds this leader's pending proposals, tagged with
/// their proposal numbers.
struct ReplicaWriter {
    core: WriterCore,
    /// Where readers find the index the core writes.
    slot: Arc<ArcSwap<Index>>,
    proposer: Box<dyn Proposer>,
    on_stall: Box<dyn Fn() + Send>,
    /// Told when the gate is passed, and when the writer stops deciding.
    lease: Arc<ReadLease>,
    /// Batches that arrived while the gate was pending.
    deferred: VecDeque<Request>,
    role: Role,
    /// The epoch of the current leadership (module docs).
    epoch: u64,
    /// The proposal number the next accepted batch takes.
    next_seq: u64,
    chain: ProposalChain,
    /// The last proposal made, and the last of this term applied.
    last_proposed: u64,
    applied_own: u64,
    refusals: VecDeque<Refusal>,
    /// The number the next confirmation takes; the last one proposed; the
    /// last one applied.
    next_confirm: u64,
    confirm_proposed: u64,
    confirm_applied: u64,
    /// A refusal waits for a confirmation not proposed yet (in this term),
    /// and the inputs taken since.
    confirm_wanted: Option<u64>,
    inputs_since_wanted: usize,
    ops: Vec<Op>,
    /// What the replicated log sends, and whether its side is still there.
    control: mpsc::UnboundedReceiver<Control>,
    control_open: bool,
}

impl WriterLog for ReplicaWriter {
    /// What the replicated log sent (`None`: its side hung up).
    type Input = Option<Control>;

    fn core(&mut self) -> &mut WriterCore {
        &mut self.core
    }

    fn wait(
        &mut self,
        runtime: &Runtime,
        queue: &mut mpsc::Receiver<Message>,
    ) -> Wake<Option<Control>> {
        let control = &mut self.control;
        let control_open = self.control_open;
        runtime.block_on(async {
            tokio::select! {
                biased;
                c = control.recv(), if control_open => Wake::Log(c),
                m = queue.recv() => Wake::Message(m),
            }
        })
    }

    fn on_input(&mut self, input: Option<Control>) -> bool {
        match input {
            Some(control) => self.on_control(control),
            // The log's side hung up: only callers are left.
            None => self.control_open = false,
        }
        true
    }

    fn take(&mut self, request: Request) {
        self.decide(request);
    }

    fn sync_through(&mut self, lsn: u64, reply: SyncReply) {
        // The replicated log is made durable by its own store; a member's
        // snapshots are taken by its snapshot task.
        let _ = reply.send(Err(Arc::new(WalWriteError::from(FileError::new(
            "making the log durable for a snapshot",
            "the replicated log",
            std::io::Error::other(format!(
                "a replica group member takes no snapshots yet (asked for LSN {lsn})"
            )),
        )))));
    }

    /// One input a turn: a committed entry never waits behind callers.
    fn room(&self, _ops: usize) -> bool {
        false
    }

    fn end_turn(&mut self, end: TurnEnd) {
        if end.stopping {
            return;
        }
        // Under a queue that never drains, refusals would wait for ever:
        // propose after a bounded number of inputs too.
        if self.confirm_wanted.is_some() {
            self.inputs_since_wanted += 1;
        }
        if end.queue_empty || self.inputs_since_wanted >= CONFIRM_AFTER_INPUTS {
            self.flush_confirmation();
        }
    }

    /// Batches queued before the stop were taken in the last turn (decided
    /// and handed to the proposer, which answers them, or refused); those
    /// waiting for a gate are refused.
    fn finish(mut self) -> PipelineExit {
        for request in self.deferred.drain(..) {
            let _ = request.reply.send(Err(WriteError::ShuttingDown));
        }
        let next_lsn = self.core.watermark.current() + 1;
        PipelineExit {
            writer: self.core.writer,
            next_lsn,
        }
    }
}

impl ReplicaWriter {
    fn on_control(&mut self, control: Control) {
        match control {
            Control::Apply(entries, done) => {
                let outcome = self.apply(&entries);
                let _ = done.send(outcome);
            }
            Control::Lead(term) => {
                self.lease.set_ready(0);
                self.drop_pending(None);
                self.epoch += 1;
                let gate = self.epoch << 32;
                self.next_seq = gate | 1;
                self.role = Role::Gating { term, gate };
                // Nobody waits on a gate's answer.
                let (reply, _) = oneshot::channel();
                let batch = DecidedBatch {
                    term,
                    seq: gate,
                    ops: Vec::new(),
                };
                self.proposer.propose(batch, reply);
            }
            Control::Follow(leader) => {
                self.lease.set_ready(0);
                self.drop_pending(leader.clone());
                self.refuse_deferred(leader.clone());
                self.role = Role::Following(leader);
            }
            Control::Refused(seq) if seq & CONFIRM_FLAG != 0 => {
                // The refusals it would have placed are sent away; the
                // next refusal proposes a new confirmation.
                let leader = match &self.role {
                    Role::Following(leader) => leader.clone(),
                    _ => None,
                };
                for refusal in self.refusals.drain(..) {
                    let _ = refusal.reply.send(Err(WriteError::NotLeader {
                        leader: leader.clone(),
                    }));
                }
                self.confirm_proposed = 0;
            }
            Control::Refused(seq) => self.chain_broken(seq),
            Control::Load(snapshot, done) => {
                self.load(*snapshot);
                let _ = done.send(());
            }
        }
    }

    /// Puts the snapshot's index in place of this one (see
    /// [`ReplicaControl::load`]): from now on the writer writes it and
    /// readers find it; the old one is freed when its last reader lets
    /// go. Reads are refused until the log reaches the snapshot's largest
    /// capture: segments hold writes up to their own captures, so the
    /// state is no prefix of the log before then.
    fn load(&mut self, snapshot: LoadedSnapshot) {
        let LoadedSnapshot {
            restored,
            lsn,
            chain,
        } = snapshot;
        self.lease.set_consistent_from(restored.lsn.max(lsn));
        let leader = match &self.role {
            Role::Following(leader) => leader.clone(),
            _ => None,
        };
        self.drop_pending(leader.clone());
        self.refuse_deferred(leader.clone());
        self.role = Role::Following(leader);
        // The restored tables are stamped with their segments' capture
        // LSNs, so a later snapshot of them claims no more than they hold.
        self.core.writer = restored.writer;
        self.slot.store(Arc::new(restored.index));
        self.chain = chain;
        self.core.publish(lsn);
    }

    /// Forgets this leader's pending proposals (the leadership changed)
    /// and answers the refusals that waited on them: nothing was logged.
    fn drop_pending(&mut self, leader: Option<LeaderHint>) {
        self.core.forget_decided();
        self.confirm_wanted = None;
        for refusal in self.refusals.drain(..) {
            let _ = refusal.reply.send(Err(WriteError::NotLeader {
                leader: leader.clone(),
            }));
        }
    }

    /// A proposal of this epoch was refused or void: the ones decided
    /// after it may rest on it, so stop deciding until the next `lead`.
    fn chain_broken(&mut self, seq: u64) {
        let leads = matches!(self.role, Role::Leading(_) | Role::Gating { .. });
        if leads && proposal_epoch(seq) == self.epoch {
            self.role = Role::Following(None);
            self.lease.set_ready(0);
            (self.on_stall)();
            self.drop_pending(None);
            self.refuse_deferred(None);
        }
    }

    fn refuse_deferred(&mut self, leader: Option<LeaderHint>) {
        for request in self.deferred.drain(..) {
            let _ = request.reply.send(Err(WriteError::NotLeader {
                leader: leader.clone(),
            }));
        }
    }

    /// The gate `seq` of `term` was applied: if it is the one awaited,
    /// decide from now on, starting with the batches that waited.
    fn gate_applied(&mut self, term: u64, seq: u64) -> bool {
        if !matches!(self.role, Role::Gating { term: t, gate } if t == term && gate == seq) {
            return false;
        }
        self.role = Role::Leading(term);
        self.lease.set_ready(term);
        // Every proposal before the gate is applied or void.
        self.applied_own = self.last_proposed;
        true
    }

    fn apply(&mut self, entries: &[CommittedEntry]) -> ApplyOutcome {
        let started = Instant::now();
        let leading = match self.role {
            Role::Leading(term) | Role::Gating { term, .. } => Some(term),
            Role::Following(_) => None,
        };
        let mut gated = false;
        let mut batches = 0;
        let mut outcome = ApplyOutcome::default();
        // Filled in at the end.
        for entry in entries {
            let Some((seq, ops)) = &entry.batch else {
                continue;
            };
            if ops.is_empty() {
                // A gate or a confirmation: not a link of the chain.
                if seq & CONFIRM_FLAG != 0 {
                    if leading == Some(entry.term) {
                        self.confirm_applied = self.confirm_applied.max(seq & !CONFIRM_FLAG);
                    }
                } else {
                    gated |= self.gate_applied(entry.term, *seq);
                }
                continue;
            }
            if !self.chain.applies(entry.term, *seq, ops.len()) {
                outcome.void.push(entry.lsn);
                if leading == Some(entry.term) {
                    self.chain_broken(*seq);
                }
                continue;
            }
            // This leader's own proposal leaves its overlay.
            let own = leading == Some(entry.term);
            self.core.apply(entry.lsn, ops, own.then_some(*seq));
            batches += 1;
            if own {
                self.applied_own = self.applied_own.max(*seq);
            }
        }
        if let Some(last) = entries.last() {
            self.core.publish(last.lsn);
        }
        outcome.chain = self.chain;
        while self
            .refusals
            .front()
            .is_some_and(|r| r.after_seq <= self.applied_own && r.confirm <= self.confirm_applied)
        {
            let refusal = self.refusals.pop_front().expect("checked");
            let _ = refusal.reply.send(Err(refusal.error));
        }
        let stats = &self.core.stats;
        stats.groups.fetch_add(1, Ordering::Relaxed);
        stats.batches.fetch_add(batches, Ordering::Relaxed);
        add_elapsed(&stats.steps.apply_ns, started);
        if gated {
            // Entries after the gate in this call were logged after it and
            // before any proposal of the new epoch: decide only now.
            for request in std::mem::take(&mut self.deferred) {
                self.decide(request);
            }
        }
        outcome
    }

    /// Decides a caller's batch (module docs): proposes it, refuses it, or
    /// sends it to the leader.
    fn decide(&mut self, request: Request) {
        let taken = Instant::now();
        let term = match &self.role {
            // Cut off (no majority acknowledged it lately): its proposals
            // may never commit, so a caller is better sent elsewhere at
            // once, nothing logged, than kept waiting.
            Role::Leading(_) if self.lease.lapsed() => {
                let _ = request
                    .reply
                    .send(Err(WriteError::NotLeader { leader: None }));
                return;
            }
            Role::Leading(term) => {
                if let Err(bound) = self.proposer.admit() {
                    let _ = request.reply.send(Err(WriteError::ProposalsFull { bound }));
                    return;
                }
                *term
            }
            Role::Gating { .. } => {
                self.deferred.push_back(request);
                return;
            }
            Role::Following(leader) => {
                let _ = request.reply.send(Err(WriteError::NotLeader {
                    leader: leader.clone(),
                }));
                return;
            }
        };
        self.ops.clear();
        let refused = self.core.decide(&request.ops, &mut self.ops).err();
        if let Some(error) = refused {
            // A confirmation proposed from now on covers it; one proposed
            // earlier does not (it may be logged before the decision's
            // reads).
            let confirm = self.next_confirm;
            self.refusals.push_back(Refusal {
                after_seq: self.last_proposed,
                confirm,
                reply: request.reply,
                error,
            });
            // Proposed once the queue is drained: one confirmation for the
            // refusals decided meanwhile.
            if self.confirm_proposed < confirm {
                self.confirm_wanted = Some(term);
            }
        } else {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.last_proposed = seq;
            self.core.record(&self.ops, seq);
            let batch = DecidedBatch {
                term,
                seq,
                ops: std::mem::take(&mut self.ops),
            };
            self.proposer.propose(batch, request.reply);
        }
        add_elapsed(&self.core.stats.steps.decide_ns, taken);
    }

    /// Proposes the confirmation refusals wait for, if one is wanted and
    /// this member still leads the term they were decided in.
    fn flush_confirmation(&mut self) {
        self.inputs_since_wanted = 0;
        let Some(term) = self.confirm_wanted.take() else {
            return;
        };
        if matches!(self.role, Role::Leading(t) if t == term) {
            self.propose_confirmation(term);
        }
    }

    /// Proposes the next confirmation (module docs); nobody waits on its
    /// answer: the refusals it covers are answered when it is applied.
    fn propose_confirmation(&mut self, term: u64) {
        let number = self.next_confirm;
        self.next_confirm += 1;
        self.confirm_proposed = number;
        let (reply, _) = oneshot::channel();
        let batch = DecidedBatch {
            term,
            seq: CONFIRM_FLAG | number,
            ops: Vec::new(),
        };
        self.proposer.propose(batch, reply);
    }
}
