//! Every Raft message survives the trip to protobuf bytes and back
//! unchanged, and a message that is damaged or incomplete is refused with
//! words that name what is wrong, never read as something else.

use std::collections::BTreeMap;
use uuidmap_engine::writer::ProposalChain;

use proptest::prelude::*;
use prost::Message;
use uuid::Uuid;
use uuidmap_cluster::raft_wire::SnapshotHeader;
use uuidmap_cluster::types::{
    AppendEntriesRequest, AppendEntriesResponse, Entry, EntryPayload, LeaderId, LogId, Membership,
    SnapshotMeta, SnapshotResponse, StoredMembership, TransferLeaderError, TransferLeaderRequest,
    Vote, VoteRequest, VoteResponse, log_id,
};
use uuidmap_cluster::{ClusterNode, FromWire, RaftBatch, ToWire, WireError};
use uuidmap_engine::store::Op;
use uuidmap_index::Key;
use uuidmap_proto::raft::v1 as pb;

/// To the wire, to bytes, back from bytes, back from the wire.
fn round_trip<T>(value: &T) -> T
where
    T: ToWire + FromWire<Wire = <T as ToWire>::Wire>,
    <T as ToWire>::Wire: Message + Default,
{
    let bytes = value.to_wire().encode_to_vec();
    let wire = <T as ToWire>::Wire::decode(bytes.as_slice()).expect("our own bytes decode");
    T::from_wire(wire).expect("our own message converts back")
}

fn arb_log_id() -> impl Strategy<Value = LogId> {
    (any::<u64>(), any::<u64>()).prop_map(|(t, i)| log_id(t, i))
}

fn arb_vote() -> impl Strategy<Value = Vote> {
    (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(term, voted_for, committed)| Vote {
        leader_id: LeaderId { term, voted_for },
        committed,
    })
}

fn arb_node() -> impl Strategy<Value = ClusterNode> {
    (
        "[a-z0-9.:]{0,20}",
        "[a-z0-9.:/]{0,24}",
        any::<u64>(),
        "[a-z0-9.:]{0,20}",
    )
        .prop_map(|(raft_addr, api_url, incarnation, resp_addr)| ClusterNode {
            raft_addr,
            api_url,
            incarnation,
            resp_addr,
        })
}

/// A valid membership: one or two voter sets (a joint change), every voter
/// with its addresses, and some learners.
fn arb_membership() -> impl Strategy<Value = Membership> {
    (
        prop::collection::vec(prop::collection::btree_set(0u64..16, 1..5), 1..3),
        prop::collection::btree_map(16u64..32, arb_node(), 0..3),
        arb_node(),
    )
        .prop_map(|(configs, learners, node)| {
            let mut nodes: BTreeMap<u64, ClusterNode> = learners;
            for id in configs.iter().flatten() {
                nodes.insert(*id, node.clone());
            }
            Membership::new(configs, nodes).expect("every voter has a node")
        })
}

fn arb_op() -> impl Strategy<Value = Op> {
    // Keys 1..u128::MAX: the nil and max UUIDs are reserved.
    (1..u128::MAX, any::<u128>(), any::<bool>()).prop_map(|(k, v, put)| {
        let key = Key::new(Uuid::from_u128(k)).unwrap();
        if put {
            Op::Put {
                key,
                value: Uuid::from_u128(v),
            }
        } else {
            Op::Delete { key }
        }
    })
}

fn arb_entry() -> impl Strategy<Value = Entry> {
    let payload = prop_oneof![
        Just(EntryPayload::Blank),
        (any::<u64>(), prop::collection::vec(arb_op(), 0..8))
            .prop_map(|(seq, ops)| EntryPayload::Normal(RaftBatch::new(seq, &ops))),
        arb_membership().prop_map(EntryPayload::Membership),
    ];
    (arb_log_id(), payload).prop_map(|(log_id, payload)| Entry { log_id, payload })
}

proptest! {
    #[test]
    fn entries_round_trip(entry in arb_entry()) {
        prop_assert_eq!(round_trip(&entry), entry);
    }

    #[test]
    fn vote_requests_and_responses_round_trip(
        vote in arb_vote(),
        last in prop::option::of(arb_log_id()),
        flag in any::<bool>(),
    ) {
        let mut req = VoteRequest::new(vote, last);
        req.leadership_transfer = flag;
        prop_assert_eq!(round_trip(&req), req);
        let resp = VoteResponse::new(vote, last, flag);
        prop_assert_eq!(round_trip(&resp), resp);
    }

    #[test]
    fn append_entries_round_trip(
        vote in arb_vote(),
        prev in prop::option::of(arb_log_id()),
        entries in prop::collection::vec(arb_entry(), 0..5),
        commit in prop::option::of(arb_log_id()),
    ) {
        let req = AppendEntriesRequest { vote, prev_log_id: prev, entries, leader_commit: commit };
        let back = round_trip(&req);
        prop_assert_eq!(back.vote, req.vote);
        prop_assert_eq!(back.prev_log_id, req.prev_log_id);
        prop_assert_eq!(back.entries, req.entries);
        prop_assert_eq!(back.leader_commit, req.leader_commit);
    }

    #[test]
    fn append_entries_responses_round_trip(
        vote in arb_vote(),
        matching in prop::option::of(arb_log_id()),
        which in 0..4u8,
    ) {
        let resp = match which {
            0 => AppendEntriesResponse::Success,
            1 => AppendEntriesResponse::PartialSuccess(matching),
            2 => AppendEntriesResponse::Conflict,
            _ => AppendEntriesResponse::HigherVote(vote),
        };
        prop_assert_eq!(round_trip(&resp), resp);
    }

    #[test]
    fn snapshot_headers_round_trip(
        vote in arb_vote(),
        last in prop::option::of(arb_log_id()),
        m_id in prop::option::of(arb_log_id()),
        membership in arb_membership(),
        file_len in any::<u64>(),
        snapshot_lsn in any::<u64>(),
        chain_term in any::<u64>(),
        chain_seq in any::<u64>(),
    ) {
        let header = SnapshotHeader {
            vote,
            meta: SnapshotMeta {
                last_log_id: last,
                last_membership: StoredMembership::new(m_id, membership),
            },
            file_len,
            snapshot_lsn,
            chain: ProposalChain { term: chain_term, seq: chain_seq },
        };
        prop_assert_eq!(round_trip(&header), header);
        let resp = SnapshotResponse::new(vote);
        prop_assert_eq!(round_trip(&resp), resp);
    }

    #[test]
    fn transfer_leader_round_trips(
        from in arb_vote(),
        other in arb_vote(),
        to in any::<u64>(),
        a in prop::option::of(arb_log_id()),
        b in prop::option::of(arb_log_id()),
    ) {
        let req = TransferLeaderRequest::new(from, to, a);
        prop_assert_eq!(round_trip(&req), req);
        for resp in [
            Ok(()),
            Err(TransferLeaderError::VoteChanged { expected: from, actual: other }),
            Err(TransferLeaderError::LogNotFlushed { expected: a, actual: b }),
        ] {
            prop_assert_eq!(round_trip(&resp), resp);
        }
    }
}

#[test]
fn an_empty_membership_round_trips_as_the_default() {
    // A snapshot taken before any membership entry carries the default.
    let header = SnapshotHeader {
        vote: Vote::new(1, 1),
        meta: SnapshotMeta::default(),
        file_len: 0,
        snapshot_lsn: 0,
        chain: ProposalChain::default(),
    };
    assert_eq!(round_trip(&header), header);
}

#[test]
fn a_request_without_its_vote_is_refused_by_name() {
    let err = AppendEntriesRequest::from_wire(pb::AppendEntriesRequest::default()).unwrap_err();
    assert_eq!(
        err,
        WireError::Missing {
            message: "AppendEntriesRequest",
            field: "vote"
        }
    );
    assert_eq!(
        err.to_string(),
        "the AppendEntriesRequest message has no vote"
    );
    assert!(VoteRequest::from_wire(pb::VoteRequest::default()).is_err());
    assert!(AppendEntriesResponse::from_wire(pb::AppendEntriesResponse::default()).is_err());
}

#[test]
fn an_entry_without_a_payload_or_log_id_is_refused() {
    let entry = Entry {
        log_id: log_id(3, 7),
        payload: EntryPayload::Blank,
    };
    let mut wire = entry.to_wire();
    wire.payload = None;
    assert!(
        Entry::from_wire(wire)
            .unwrap_err()
            .to_string()
            .contains("no payload")
    );
    let mut wire = entry.to_wire();
    wire.log_id = None;
    assert!(
        Entry::from_wire(wire)
            .unwrap_err()
            .to_string()
            .contains("no log_id")
    );
}

#[test]
fn a_batch_with_damaged_ops_is_refused_not_misread() {
    let op = Op::Put {
        key: Key::new(Uuid::from_u128(5)).unwrap(),
        value: Uuid::from_u128(6),
    };
    let entry = Entry {
        log_id: log_id(2, 10),
        payload: EntryPayload::Normal(RaftBatch::new(1, &[op, op])),
    };
    let mut wire = entry.to_wire();
    let Some(pb::entry::Payload::Batch(batch)) = &mut wire.payload else {
        unreachable!()
    };
    let mut ops = batch.ops.to_vec();
    ops.truncate(40); // the second put cut short
    batch.ops = ops.into();
    let err = Entry::from_wire(wire).unwrap_err();
    assert!(matches!(err, WireError::Batch(_)), "{err}");
    assert!(err.to_string().contains("runs past the end"), "{err}");
}

#[test]
fn a_membership_whose_voter_has_no_addresses_is_refused() {
    let wire = pb::Membership {
        configs: vec![pb::NodeIds { ids: vec![1, 2] }],
        nodes: [(1, ClusterNode::default().to_wire())]
            .into_iter()
            .collect(),
    };
    let err = Membership::from_wire(wire).unwrap_err();
    assert!(matches!(err, WireError::Membership(_)), "{err}");
    // An empty voter set is refused too.
    let wire = pb::Membership {
        configs: vec![pb::NodeIds { ids: vec![] }],
        nodes: Default::default(),
    };
    assert!(Membership::from_wire(wire).is_err());
}

#[test]
fn fields_land_where_the_proto_file_says() {
    // A round trip cannot see two fields swapped on both ways; the proto
    // file is what another implementation reads, so pin it.
    let vote = Vote {
        leader_id: LeaderId {
            term: 3,
            voted_for: 7,
        },
        committed: true,
    };
    assert_eq!(
        vote.to_wire(),
        pb::Vote {
            term: 3,
            node_id: 7,
            committed: true
        }
    );
    assert_eq!(log_id(4, 9).to_wire(), pb::LogId { term: 4, index: 9 });
    let node = ClusterNode {
        raft_addr: "10.0.0.1:7879".into(),
        api_url: "http://10.0.0.1:7878".into(),
        incarnation: 77,
        resp_addr: "10.0.0.1:6380".into(),
    };
    let wire = node.to_wire();
    assert_eq!(wire.raft_addr, "10.0.0.1:7879");
    assert_eq!(wire.api_url, "http://10.0.0.1:7878");
    assert_eq!(wire.incarnation, 77);
    assert_eq!(wire.resp_addr, "10.0.0.1:6380");
    let m = Membership::new(
        vec![[1, 2].into_iter().collect()],
        [(1, node.clone()), (2, node.clone()), (5, node)]
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
    )
    .unwrap();
    let wire = m.to_wire();
    assert_eq!(wire.configs, vec![pb::NodeIds { ids: vec![1, 2] }]);
    let mut ids: Vec<u64> = wire.nodes.keys().copied().collect();
    ids.sort_unstable(); // a protobuf map has no order
    assert_eq!(ids, vec![1, 2, 5]);
    assert_eq!(m.learner_ids().collect::<Vec<_>>(), vec![5]);
}
