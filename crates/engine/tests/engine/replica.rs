//! The replica writer (`writer::replica`): what a leader decides against
//! its pending proposals, what a follower refuses, and what applying
//! committed entries does. The proposer here is a fake that keeps what it
//! was given, so each test plays the replicated log's part by hand.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use uuid::Uuid;
use uuidmap_engine::store::Op;
use uuidmap_engine::writer::{
    CONFIRM_FLAG, CommittedEntry, DecidedBatch, LeaderHint, PipelineConfig, ProposalChain,
    Proposer, ReplicaControl, ReplicaPipeline, WriteError, WriteHandle, WriteOp, WriteOutcome,
    WriteReply,
};
use uuidmap_index::sync::LsnWatermark;
use uuidmap_index::{Index, Key};

type Proposed = Arc<Mutex<Vec<(DecidedBatch, WriteReply)>>>;

/// Keeps batches, gates and confirmations (the last two have no ops)
/// apart.
struct KeepProposals {
    batches: Proposed,
    gates: Arc<Mutex<Vec<DecidedBatch>>>,
    confirms: Arc<Mutex<Vec<DecidedBatch>>>,
}

impl Proposer for KeepProposals {
    fn propose(&mut self, batch: DecidedBatch, reply: WriteReply) {
        if batch.ops.is_empty() && batch.seq & CONFIRM_FLAG != 0 {
            self.confirms.lock().unwrap().push(batch);
        } else if batch.ops.is_empty() {
            self.gates.lock().unwrap().push(batch);
        } else {
            self.batches.lock().unwrap().push((batch, reply));
        }
    }
}

struct Rig {
    pipeline: ReplicaPipeline,
    index: Index,
    watermark: Arc<LsnWatermark>,
    proposed: Proposed,
    gates: Arc<Mutex<Vec<DecidedBatch>>>,
    confirms: Arc<Mutex<Vec<DecidedBatch>>>,
    stalls: Arc<AtomicUsize>,
    runtime: tokio::runtime::Runtime,
}

/// The proposal number of the `n`-th proposal of leadership `epoch`.
fn seq(epoch: u64, n: u64) -> u64 {
    (epoch << 32) | n
}

fn key(n: u128) -> Key {
    Key::new(Uuid::from_u128(n)).unwrap()
}

fn val(n: u128) -> Uuid {
    Uuid::from_u128(1000 + n)
}

fn put(k: u128, v: u128) -> WriteOp {
    WriteOp::Put {
        key: key(k),
        value: val(v),
    }
}

fn cas(k: u128, expected: Option<u128>, new: Option<u128>) -> WriteOp {
    WriteOp::CompareAndSet {
        key: key(k),
        expected: expected.map(val),
        new: new.map(val),
    }
}

fn rig() -> Rig {
    let (writer, index) = Index::with_capacity(64);
    let watermark = Arc::new(LsnWatermark::new(0));
    let proposed = Proposed::default();
    let gates = Arc::<Mutex<Vec<DecidedBatch>>>::default();
    let confirms = Arc::<Mutex<Vec<DecidedBatch>>>::default();
    let stalls = Arc::new(AtomicUsize::new(0));
    let counted = stalls.clone();
    let pipeline = ReplicaPipeline::start(
        &PipelineConfig::default(),
        uuidmap_engine::writer::ReplicaIndex {
            writer,
            slot: Arc::new(arc_swap::ArcSwap::from_pointee(index.clone())),
            watermark: watermark.clone(),
            chain: uuidmap_engine::writer::ProposalChain::default(),
        },
        Box::new(KeepProposals {
            batches: proposed.clone(),
            gates: gates.clone(),
            confirms: confirms.clone(),
        }),
        Box::new(move || {
            counted.fetch_add(1, AtomicOrdering::SeqCst);
        }),
        Arc::new(uuidmap_engine::writer::ReadLease::default()),
    )
    .expect("the thread starts");
    Rig {
        pipeline,
        index,
        watermark,
        proposed,
        gates,
        confirms,
        stalls,
        runtime: tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap(),
    }
}

type Answer = std_mpsc::Receiver<Result<WriteOutcome, WriteError>>;

/// Submits a batch: it is in the writer's queue, behind every batch
/// submitted before, when this returns; the answer arrives when the writer
/// (or the proposer's owner) gives it.
fn submit(handle: &WriteHandle, ops: Vec<WriteOp>) -> Answer {
    let (tx, rx) = std_mpsc::channel();
    let handle = handle.clone();
    let mut write = Box::pin(async move { handle.write(ops).await });
    // The first poll queues the batch (the queue has room) and then waits
    // for the answer, which another thread goes on waiting for.
    match write.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(answer) => tx.send(answer).unwrap(),
        Poll::Pending => {
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let _ = tx.send(runtime.block_on(write));
            });
        }
    }
    rx
}

fn answer(rx: &Answer) -> Result<WriteOutcome, WriteError> {
    rx.recv_timeout(Duration::from_secs(10))
        .expect("an answer within 10 s")
}

fn no_answer_yet(rx: &Answer) {
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "answered too early"
    );
}

impl Rig {
    fn control(&self) -> ReplicaControl {
        self.pipeline.control()
    }

    /// Makes the writer lead `term`, and commits its gate at `lsn`.
    fn lead(&self, term: u64, lsn: u64) {
        let before = self.gates.lock().unwrap().len();
        self.control().lead(term).unwrap();
        let gate = self.gate(before + 1);
        assert_eq!(gate.term, term);
        self.apply(vec![CommittedEntry {
            lsn,
            term,
            batch: Some((gate.seq, Vec::new())),
        }]);
    }

    /// Commits the `n`-th confirmation proposed at `lsn`.
    fn confirm(&self, n: usize, lsn: u64) {
        let mut c = None;
        for _ in 0..1000 {
            if let Some(x) = self.confirms.lock().unwrap().get(n - 1) {
                c = Some(x.clone());
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let c = c.unwrap_or_else(|| panic!("no confirmation #{n} within 5 s"));
        self.apply(vec![CommittedEntry {
            lsn,
            term: c.term,
            batch: Some((c.seq, Vec::new())),
        }]);
    }

    /// Waits for the `n`-th gate proposed.
    fn gate(&self, n: usize) -> DecidedBatch {
        for _ in 0..1000 {
            if let Some(gate) = self.gates.lock().unwrap().get(n - 1) {
                return gate.clone();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("no gate #{n} within 5 s");
    }

    fn apply(&self, entries: Vec<CommittedEntry>) {
        self.runtime
            .block_on(self.control().apply(entries))
            .expect("the writer runs");
    }

    /// Waits for the `n`-th proposal (counting from 1) and returns its
    /// batch; the reply stays with the rig.
    fn proposal(&self, n: usize) -> DecidedBatch {
        for _ in 0..1000 {
            if let Some((batch, _)) = self.proposed.lock().unwrap().get(n - 1) {
                return batch.clone();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("no proposal #{n} within 5 s");
    }

    /// Commits proposal `n` at `lsn`: applies it as the log would, and
    /// answers its caller as the proposer would.
    fn commit(&self, n: usize, lsn: u64) {
        let batch = self.proposal(n);
        self.apply(vec![CommittedEntry {
            lsn,
            term: batch.term,
            batch: Some((batch.seq, batch.ops)),
        }]);
        let (_, reply) = self.proposed.lock().unwrap().remove(n - 1);
        let _ = reply.send(Ok(WriteOutcome { lsn }));
        // Keep the numbering: the removed slot is refilled with a marker.
        self.proposed.lock().unwrap().insert(
            n - 1,
            (
                DecidedBatch {
                    term: 0,
                    seq: 0,
                    ops: Vec::new(),
                },
                tokio::sync::oneshot::channel().0,
            ),
        );
    }

    fn get(&self, k: u128) -> Option<Uuid> {
        self.index.get(&Uuid::from_u128(k))
    }
}

#[test]
fn a_follower_refuses_writes_naming_the_leader_and_applies_what_is_committed() {
    let rig = rig();
    let handle = rig.pipeline.handle();
    let refused = answer(&submit(&handle, vec![put(1, 1)]));
    assert!(
        matches!(refused, Err(WriteError::NotLeader { leader: None })),
        "{refused:?}"
    );
    let leader = LeaderHint {
        id: 2,
        url: Some("http://10.0.0.2:7000".into()),
    };
    rig.control().follow(Some(leader.clone())).unwrap();
    let refused = answer(&submit(&handle, vec![put(1, 1)])).unwrap_err();
    assert!(
        matches!(&refused, WriteError::NotLeader { leader: Some(l) } if *l == leader),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .contains("node 2, at http://10.0.0.2:7000"),
        "{refused}"
    );
    assert!(rig.proposed.lock().unwrap().is_empty());

    // Committed entries of another leader: applied in order, stamped with
    // their LSN; entries without a batch still move the LSN on.
    rig.apply(vec![
        CommittedEntry {
            lsn: 1,
            term: 1,
            batch: None,
        },
        CommittedEntry {
            lsn: 2,
            term: 1,
            batch: Some((
                seq(1, 1),
                vec![
                    Op::Put {
                        key: key(1),
                        value: val(1),
                    },
                    Op::Put {
                        key: key(2),
                        value: val(2),
                    },
                ],
            )),
        },
        CommittedEntry {
            lsn: 3,
            term: 1,
            batch: Some((seq(1, 2), vec![Op::Delete { key: key(2) }])),
        },
    ]);
    assert_eq!(rig.watermark.current(), 3);
    assert_eq!(rig.get(1), Some(val(1)));
    assert_eq!(rig.get(2), None);
    rig.apply(vec![CommittedEntry {
        lsn: 4,
        term: 2,
        batch: None,
    }]);
    assert_eq!(rig.watermark.current(), 4, "a blank entry is an LSN too");
}

#[test]
fn a_leader_decides_compare_and_set_against_its_pending_proposals() {
    let rig = rig();
    let handle = rig.pipeline.handle();
    rig.lead(3, 4);

    let first = submit(&handle, vec![put(1, 1)]);
    assert_eq!(
        rig.proposal(1),
        DecidedBatch {
            term: 3,
            seq: seq(1, 1),
            ops: vec![Op::Put {
                key: key(1),
                value: val(1)
            }],
        }
    );
    // Not applied yet, but the leader proposed it: a CAS sees it.
    let second = submit(&handle, vec![cas(1, Some(1), Some(2))]);
    let second_batch = rig.proposal(2);
    assert_eq!(second_batch.seq, seq(1, 2));
    assert_eq!(
        second_batch.ops,
        vec![Op::Put {
            key: key(1),
            value: val(2)
        }]
    );
    assert_eq!(rig.get(1), None, "nothing is applied before it commits");

    // A CAS that expects the applied value (absent) is refused, but only
    // once the proposals it looked at are applied: a refusal is a read.
    let refused = submit(&handle, vec![cas(1, None, Some(9))]);
    no_answer_yet(&refused);
    rig.commit(1, 5);
    assert_eq!(answer(&first).unwrap(), WriteOutcome { lsn: 5 });
    no_answer_yet(&refused);
    // After proposal 1 applied, key 1 still reads 2 from proposal 2.
    let third = submit(&handle, vec![cas(1, Some(2), Some(3))]);
    assert_eq!(rig.proposal(3).seq, seq(1, 3));
    rig.commit(2, 6);
    assert_eq!(answer(&second).unwrap(), WriteOutcome { lsn: 6 });
    // It looked at proposals 1 and 2 only, but it is a read: it waits for
    // the confirmation proposed when it was decided (logged after
    // proposal 2, before 3), which places it in the log.
    no_answer_yet(&refused);
    rig.confirm(1, 7);
    match answer(&refused) {
        Err(WriteError::CasMismatch {
            current, expected, ..
        }) => {
            assert_eq!(current, Some(val(2)), "the value when it was decided");
            assert_eq!(expected, None);
        }
        other => panic!("{other:?}"),
    }
    no_answer_yet(&third);
    rig.commit(3, 8);
    assert_eq!(answer(&third).unwrap(), WriteOutcome { lsn: 8 });
    assert_eq!(rig.get(1), Some(val(3)));
    assert_eq!(rig.watermark.current(), 8);

    // Everything applied: the overlay is empty again and a CAS reads the
    // index.
    let fourth = submit(&handle, vec![cas(1, Some(3), None)]);
    assert_eq!(rig.proposal(4).ops, vec![Op::Delete { key: key(1) }]);
    rig.commit(4, 9);
    assert_eq!(answer(&fourth).unwrap(), WriteOutcome { lsn: 9 });
    assert_eq!(rig.get(1), None);
}

#[test]
fn a_batch_sees_its_own_earlier_writes_and_a_refused_batch_proposes_nothing() {
    let rig = rig();
    let handle = rig.pipeline.handle();
    rig.lead(1, 1);
    let accepted = submit(
        &handle,
        vec![put(4, 1), cas(4, Some(1), Some(2)), cas(5, None, None)],
    );
    assert_eq!(
        rig.proposal(1).ops,
        vec![
            Op::Put {
                key: key(4),
                value: val(1)
            },
            Op::Put {
                key: key(4),
                value: val(2)
            },
            Op::Delete { key: key(5) },
        ]
    );
    // A refusal waits for the pending proposal, then is answered.
    let waiting = submit(&handle, vec![put(6, 1), cas(6, Some(2), Some(3))]);
    no_answer_yet(&waiting);
    rig.commit(1, 2);
    assert_eq!(answer(&accepted).unwrap(), WriteOutcome { lsn: 2 });
    no_answer_yet(&waiting);
    rig.confirm(1, 3);
    assert!(matches!(
        answer(&waiting),
        Err(WriteError::CasMismatch { index: 1, .. })
    ));
    assert_eq!(rig.get(6), None, "a refused batch writes nothing");
    assert_eq!(
        rig.proposed.lock().unwrap().len(),
        1,
        "nothing else proposed"
    );
    // Nothing pending: a refusal still waits for its confirmation (a new
    // one: the first was proposed before it was decided).
    let refused = submit(&handle, vec![put(7, 1), cas(7, Some(2), None)]);
    no_answer_yet(&refused);
    rig.confirm(2, 4);
    let refused = answer(&refused);
    match refused {
        Err(WriteError::CasMismatch { index, current, .. }) => {
            assert_eq!(index, 1);
            assert_eq!(current, Some(val(1)), "the batch's own put");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rig.proposed.lock().unwrap().len(), 1);
    assert_eq!(rig.get(7), None);
}

#[test]
fn losing_the_leadership_drops_pending_decisions_and_answers_waiting_refusals() {
    let rig = rig();
    let handle = rig.pipeline.handle();
    rig.lead(4, 1);
    let _first = submit(&handle, vec![put(1, 1)]);
    rig.proposal(1);
    let refused = submit(&handle, vec![cas(1, Some(5), None)]);
    no_answer_yet(&refused);
    let leader = LeaderHint { id: 3, url: None };
    rig.control().follow(Some(leader.clone())).unwrap();
    match answer(&refused) {
        Err(WriteError::NotLeader { leader: Some(l) }) => assert_eq!(l, leader),
        other => panic!("{other:?}"),
    }
    // The proposal may still commit under the next leader: it is applied
    // as any committed entry, without being in anyone's overlay.
    let p = rig.proposal(1);
    rig.apply(vec![CommittedEntry {
        lsn: 9,
        term: p.term,
        batch: Some((p.seq, p.ops)),
    }]);
    assert_eq!(rig.get(1), Some(val(1)));

    // Leading again (term 6): decisions start from the applied index.
    rig.lead(6, 10);
    let next = submit(&handle, vec![cas(1, Some(1), Some(2))]);
    let batch = rig.proposal(2);
    assert_eq!((batch.term, batch.seq), (6, seq(2, 1)), "a new epoch");
    // An entry of another term with the same proposal number does not take
    // the key out of this leader's overlay.
    rig.apply(vec![CommittedEntry {
        lsn: 11,
        term: 5,
        batch: Some((seq(2, 1), vec![Op::Delete { key: key(8) }])),
    }]);
    let after = submit(&handle, vec![cas(1, Some(2), Some(3))]);
    assert_eq!(
        rig.proposal(3).seq,
        seq(2, 2),
        "key 1 still reads 2 from proposal 2"
    );
    drop((next, after));
}

#[test]
fn stopping_answers_what_is_queued_and_refuses_later_writes() {
    let rig = rig();
    let handle = rig.pipeline.handle();
    let Rig {
        pipeline, index, ..
    } = rig;
    let exit = pipeline.stop().expect("the thread stops");
    assert_eq!(exit.next_lsn, 1);
    assert!(matches!(
        handle.write_blocking(vec![put(1, 1)]),
        Err(WriteError::ShuttingDown)
    ));
    assert_eq!(index.len(), 0);
}

#[test]
fn the_chain_admits_the_next_proposal_or_the_first_of_a_later_epoch_or_term() {
    let mut chain = ProposalChain::default();
    assert!(chain.admit(2, seq(1, 1)), "the first batch of all");
    assert!(chain.admit(2, seq(1, 2)));
    assert!(!chain.admit(2, seq(1, 4)), "a gap: proposal 3 was refused");
    assert!(
        !chain.admit(2, seq(1, 5)),
        "every later one of the epoch too"
    );
    assert_eq!(chain.seq, seq(1, 2), "a void entry leaves the chain");
    assert!(!chain.admit(2, seq(2, 2)), "a new epoch starts at 1");
    assert!(chain.admit(2, seq(2, 1)));
    assert!(!chain.admit(2, seq(1, 3)), "an older epoch never again");
    assert!(chain.admit(3, seq(1, 1)), "a new term, another leader");
    assert!(!chain.admit(2, seq(3, 1)), "an older term never again");
}

#[test]
fn a_proposal_the_log_refused_voids_the_rest_of_its_epoch() {
    let rig = rig();
    let handle = rig.pipeline.handle();
    rig.lead(2, 3);
    let a = submit(&handle, vec![put(1, 1)]);
    let pa = rig.proposal(1);
    let b = submit(&handle, vec![cas(1, Some(1), Some(2))]);
    let pb = rig.proposal(2);
    let c = submit(&handle, vec![cas(1, Some(2), Some(3))]);
    let pc = rig.proposal(3);
    // The log takes a, refuses b (a lapsed lease, say), then takes c,
    // which rests on b's write.
    rig.commit(1, 4);
    assert_eq!(answer(&a).unwrap(), WriteOutcome { lsn: 4 });
    rig.control().refused(pb.seq).unwrap();
    let outcome = rig
        .runtime
        .block_on(rig.control().apply(vec![CommittedEntry {
            lsn: 5,
            term: pc.term,
            batch: Some((pc.seq, pc.ops)),
        }]))
        .unwrap();
    assert_eq!(outcome.void, vec![5], "c takes its LSN and changes nothing");
    assert_eq!(rig.get(1), Some(val(1)));
    assert_eq!(rig.watermark.current(), 5);
    // The writer stopped deciding: a write now is sent to the leader.
    let d = answer(&submit(&handle, vec![put(2, 2)]));
    assert!(matches!(d, Err(WriteError::NotLeader { .. })), "{d:?}");
    drop((b, c));
    assert_eq!(rig.stalls.load(AtomicOrdering::SeqCst), 1);
    // A new lead starts a new epoch, which the chain admits.
    rig.lead(2, 6);
    let e = submit(&handle, vec![cas(1, Some(1), Some(5))]);
    let pe = rig.proposal(4);
    assert_eq!(pe.seq, seq(2, 1));
    rig.commit(4, 7);
    assert_eq!(answer(&e).unwrap(), WriteOutcome { lsn: 7 });
    assert_eq!(rig.get(1), Some(val(5)));
    let _ = pa;
}

#[test]
fn a_void_entry_of_its_own_epoch_stops_the_leader_even_before_the_refusal_arrives() {
    let rig = rig();
    let handle = rig.pipeline.handle();
    rig.lead(7, 2);
    let _a = submit(&handle, vec![put(1, 1)]);
    rig.proposal(1);
    let _b = submit(&handle, vec![put(2, 2)]);
    let pb = rig.proposal(2);
    // Proposal 1 never reached the log; 2 did.
    let outcome = rig
        .runtime
        .block_on(rig.control().apply(vec![CommittedEntry {
            lsn: 3,
            term: 7,
            batch: Some((pb.seq, pb.ops)),
        }]))
        .unwrap();
    assert_eq!(outcome.void, vec![3]);
    assert_eq!(rig.get(2), None);
    let c = answer(&submit(&handle, vec![put(3, 3)]));
    assert!(matches!(c, Err(WriteError::NotLeader { .. })), "{c:?}");
}

#[test]
fn batches_wait_for_the_gate_and_a_refused_gate_stalls_the_leader() {
    let rig = rig();
    let handle = rig.pipeline.handle();
    rig.control().lead(3).unwrap();
    let gate = rig.gate(1);
    assert_eq!((gate.term, gate.seq), (3, seq(1, 0)));
    // Until the gate is applied, a batch waits: an older entry may still
    // change what it reads.
    let waiting = submit(&handle, vec![cas(1, Some(1), Some(2))]);
    no_answer_yet(&waiting);
    assert!(rig.proposed.lock().unwrap().is_empty());
    // An entry logged before the gate (an older leader's) is applied
    // first, then the gate, and only then is the batch decided.
    rig.apply(vec![
        CommittedEntry {
            lsn: 1,
            term: 2,
            batch: Some((
                seq(9, 1),
                vec![Op::Put {
                    key: key(1),
                    value: val(1),
                }],
            )),
        },
        CommittedEntry {
            lsn: 2,
            term: 3,
            batch: Some((gate.seq, Vec::new())),
        },
    ]);
    let p = rig.proposal(1);
    assert_eq!(p.seq, seq(1, 1));
    assert_eq!(
        p.ops,
        vec![Op::Put {
            key: key(1),
            value: val(2)
        }]
    );

    // A refusal of an older epoch changes nothing.
    rig.control().refused(seq(0, 5)).unwrap();
    let next = submit(&handle, vec![put(3, 3)]);
    assert_eq!(rig.proposal(2).seq, seq(1, 2));
    assert_eq!(rig.stalls.load(AtomicOrdering::SeqCst), 0);

    // Lead again in the same term: a new epoch behind a new gate, which
    // the log refuses: the leader stalls and says so, and the batch that
    // waited for the gate is sent away.
    rig.control().lead(3).unwrap();
    let gate = rig.gate(2);
    assert_eq!(gate.seq, seq(2, 0));
    let sent_away = submit(&handle, vec![put(4, 4)]);
    no_answer_yet(&sent_away);
    rig.control().refused(gate.seq).unwrap();
    let answer = answer(&sent_away);
    assert!(
        matches!(answer, Err(WriteError::NotLeader { .. })),
        "{answer:?}"
    );
    assert_eq!(rig.stalls.load(AtomicOrdering::SeqCst), 1);
    drop((waiting, next));
}

#[test]
fn a_refusal_is_answered_only_through_a_confirmation_of_its_leader() {
    let rig = rig();
    let handle = rig.pipeline.handle();
    rig.lead(5, 1);
    // A refusal needs a confirmation proposed after it was decided: the
    // second, decided after the first confirmation was proposed, gets its
    // own.
    let r1 = submit(&handle, vec![cas(1, Some(1), None)]);
    no_answer_yet(&r1);
    let r2 = submit(&handle, vec![cas(2, Some(1), None)]);
    no_answer_yet(&r2);
    assert_eq!(rig.confirms.lock().unwrap().len(), 2);
    rig.confirm(1, 2);
    assert!(matches!(answer(&r1), Err(WriteError::CasMismatch { .. })));
    no_answer_yet(&r2);
    rig.confirm(2, 3);
    assert!(matches!(answer(&r2), Err(WriteError::CasMismatch { .. })));

    // A leader that was deposed without knowing it: the log refuses its
    // confirmation, and the refusal is sent away rather than answered
    // from its own, possibly stale, index.
    let r3 = submit(&handle, vec![cas(3, Some(1), None)]);
    no_answer_yet(&r3);
    let c = rig.confirms.lock().unwrap()[2].clone();
    rig.control().refused(c.seq).unwrap();
    let answer3 = answer(&r3);
    assert!(
        matches!(answer3, Err(WriteError::NotLeader { .. })),
        "{answer3:?}"
    );
    // It still leads its epoch: the next refusal proposes a new one.
    let r4 = submit(&handle, vec![cas(4, Some(1), None)]);
    no_answer_yet(&r4);
    rig.confirm(4, 4);
    assert!(matches!(answer(&r4), Err(WriteError::CasMismatch { .. })));
}
