//! The read lease's holes, closed (docs/replication.md, 6.3), on three
//! whole members in this process:
//! - a member restarted with Raft state grants no vote within its hold;
//! - a vote request that claims a leader transfer nobody asked for is an
//!   ordinary election, which a follower of a live leader refuses;
//! - a `TransferLeader` not from the member's leader is refused;
//! - a transfer hands over to the named voter; the old leader stops
//!   answering as the leader before the target takes over, and a target
//!   that is not a voter, or the leader itself, is refused;
//! - a leader cut off from the others steps down within a bound;
//! - a leader's proposals are bounded: writes over the bound are refused
//!   (RESOURCE_EXHAUSTED at the server) and counted;
//! - the counters move on a failover.

use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use uuid::Uuid;
use uuidmap_cluster::cluster_status::Role;
use uuidmap_cluster::transfer::TransferError;
use uuidmap_cluster::types::{TransferLeaderRequest, Vote, VoteRequest};
use uuidmap_cluster::{FromWire, ToWire};
use uuidmap_engine::writer::{ReadRefused, WriteError, WriteOp};
use uuidmap_index::Key;
use uuidmap_proto::raft::v1 as pb;
use uuidmap_testkit::cluster::{ReplicaNode, writable_leader};

fn key(k: u128) -> Key {
    Key::new(Uuid::from_u128(0x0001_ea5e_0000 + k)).unwrap()
}

fn put(k: u128) -> Vec<WriteOp> {
    vec![WriteOp::Put {
        key: key(k),
        value: Uuid::from_u128(k + 1),
    }]
}

async fn raft_client(addr: &str) -> pb::raft_client::RaftClient<tonic::transport::Channel> {
    pb::raft_client::RaftClient::connect(format!("http://{addr}"))
        .await
        .expect("the member's Raft port answers")
}

/// A vote request from `candidate` in `term`, with a log far ahead of
/// anyone's (so that only the vote rules can refuse it).
fn vote_request(term: u64, candidate: u64, transfer: bool) -> pb::VoteRequest {
    let mut r = VoteRequest::new(
        Vote::new(term, candidate),
        Some(uuidmap_cluster::types::log_id(term - 1, 1 << 40)),
    );
    r.leadership_transfer = transfer;
    r.to_wire()
}

fn term_of(node: &ReplicaNode) -> u64 {
    node.replica.raft().metrics().borrow_watched().current_term
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_member_grants_no_vote_within_its_hold() {
    let mut nodes = ReplicaNode::group(3).await;
    let l = writable_leader(&nodes).await;
    let f = (l + 1) % 3;
    nodes[l].write(put(1)).await.unwrap();
    let (id, dir, addr) = nodes.remove(f).stop().await;
    let restarted = ReplicaNode::start_at(id, dir, &addr, |_| {}).await;
    let started = Instant::now();
    let mut client = raft_client(&addr).await;
    let term = term_of(&restarted) + 5;
    let refused = client.vote(vote_request(term, 9, false)).await;
    let refused_pre = client.pre_vote(vote_request(term, 9, false)).await;
    // The hold is the maximum election timeout plus a heartbeat: 950 ms.
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "too slow to test the hold"
    );
    let status = refused.expect_err("a vote within the hold");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("restarted"), "{status:?}");
    assert_eq!(
        refused_pre.expect_err("a pre-vote within the hold").code(),
        tonic::Code::Unavailable
    );
    tokio::time::sleep(Duration::from_millis(1000).saturating_sub(started.elapsed())).await;
    client
        .pre_vote(vote_request(term, 9, false))
        .await
        .expect("a pre-vote after the hold is answered");
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_flag_nobody_asked_for_does_not_pass_a_followers_lease() {
    let nodes = ReplicaNode::group(3).await;
    let l = writable_leader(&nodes).await;
    let (f, other) = ((l + 1) % 3, (l + 2) % 3);
    nodes[l].write(put(2)).await.unwrap();
    let mut client = raft_client(&nodes[f].node.raft_addr).await;
    let term = term_of(&nodes[f]) + 1;
    let candidate = nodes[other].id();
    let answer = client
        .vote(vote_request(term, candidate, true))
        .await
        .expect("a follower answers a vote");
    let answer = uuidmap_cluster::types::VoteResponse::from_wire(answer.into_inner()).unwrap();
    assert!(
        !answer.vote_granted,
        "a follower of a live leader granted a forged transfer election"
    );

    // A TransferLeader that does not come from the follower's leader.
    let forged = TransferLeaderRequest::new(
        Vote::new_committed(term_of(&nodes[f]), nodes[other].id()),
        nodes[other].id(),
        None,
    );
    let refused = client
        .transfer_leader(forged.to_wire())
        .await
        .expect_err("a transfer from a member that does not lead");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_makes_the_named_voter_lead_and_refuses_bad_targets() {
    let nodes = ReplicaNode::group(3).await;
    let l = writable_leader(&nodes).await;
    let t = (l + 1) % 3;
    let transfer = nodes[l].replica.leader_transfer();
    let wait = Duration::from_secs(5);
    assert!(matches!(
        transfer.to(nodes[l].id(), wait).await,
        Err(TransferError::ToItself { .. })
    ));
    assert!(matches!(
        transfer.to(9, wait).await,
        Err(TransferError::NotAVoter { id: 9, .. })
    ));
    assert!(matches!(
        nodes[t]
            .replica
            .leader_transfer()
            .to(nodes[l].id(), wait)
            .await,
        Err(TransferError::NotLeader { leader: Some(_) })
    ));
    nodes[l].write(put(3)).await.unwrap();
    let done = transfer
        .to(nodes[t].id(), wait)
        .await
        .expect("the transfer completes");
    assert_eq!(done.leader, nodes[t].id());
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match nodes[t].write(put(4)).await {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < until, "the new leader takes no write: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(matches!(
        nodes[l].write(put(5)).await,
        Err(WriteError::NotLeader { leader: Some(h) }) if h.id == nodes[t].id()
    ));
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_hands_over_stops_answering_as_leader_before_the_target_takes_over() {
    let mut nodes = ReplicaNode::group(3).await;
    let l = writable_leader(&nodes).await;
    nodes[l].write(put(6)).await.unwrap();
    let leader_id = nodes[l].id();
    // The target is stopped: the transfer cannot complete, so the old
    // leader is seen in between.
    let t = (l + 1) % 3;
    let target = nodes[t].id();
    nodes.remove(t).stop().await;
    let l = nodes.iter().position(|n| n.id() == leader_id).unwrap();
    let transfer = nodes[l].replica.leader_transfer();
    let asked = tokio::spawn(async move { transfer.to(target, Duration::from_millis(1500)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let applied = nodes[l].replica.watermark().current();
    let lease = nodes[l].replica.durable().read_lease().unwrap().clone();
    // The remaining follower elects no one before its election timeout
    // (400 ms at least): the old leader is still openraft's leader.
    let status = nodes[l].replica.status();
    assert_eq!(status.role, Role::SteppingDown, "{status:?}");
    assert_eq!(lease.admit(applied), Err(ReadRefused::HandingOver));
    assert!(matches!(
        nodes[l].write(put(7)).await,
        Err(WriteError::NotLeader { .. })
    ));
    let outcome = asked.await.unwrap();
    assert!(
        matches!(outcome, Err(TransferError::NotTaken { to, .. }) if to == target),
        "{outcome:?}"
    );
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_others_steps_down_within_a_bound() {
    let mut nodes = ReplicaNode::group(3).await;
    let l = writable_leader(&nodes).await;
    nodes[l].write(put(8)).await.unwrap();
    let leader = nodes.remove(l);
    for n in nodes {
        n.stop().await;
    }
    let cut = Instant::now();
    // Lapse after the lease (400 ms), step down after the maximum election
    // timeout (800 ms) without a majority: 2 s is the bound with room for
    // a loaded machine.
    loop {
        let status = leader.replica.status();
        if status.role != Role::Leader {
            assert_eq!(status.role, Role::SteppingDown, "{status:?}");
            break;
        }
        assert!(
            cut.elapsed() < Duration::from_secs(2),
            "a cut-off leader still reports itself leader after 2 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let counts = leader.replica.status().counts;
    assert_eq!(counts.step_downs, 1, "{counts:?}");
    assert!(counts.lease_lapses >= 1, "{counts:?}");
    assert!(matches!(
        leader.write(put(9)).await,
        Err(WriteError::NotLeader { .. })
    ));
    leader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_over_the_proposal_bound_are_refused_and_counted() {
    let listeners = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        v
    };
    let nodes =
        ReplicaNode::group_configured(listeners, Default::default(), |c| c.max_proposals = 2).await;
    let l = writable_leader(&nodes).await;
    let before = nodes[l].replica.counters().counts().proposals_refused;
    let writes = (0..64u128).map(|k| nodes[l].write(put(100 + k)));
    let results = futures_util::future::join_all(writes).await;
    let refused = results
        .iter()
        .filter(|r| matches!(r, Err(WriteError::ProposalsFull { bound: 2 })))
        .count();
    let done = results.iter().filter(|r| r.is_ok()).count();
    assert!(refused > 0, "no write was refused over a bound of 2");
    assert!(done > 0, "every write was refused");
    assert_eq!(refused + done, 64, "{results:?}");
    assert_eq!(
        nodes[l].replica.counters().counts().proposals_refused - before,
        refused as u64
    );
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counters_count_elections_and_leader_changes_over_a_failover() {
    let mut nodes = ReplicaNode::group(3).await;
    let l = writable_leader(&nodes).await;
    nodes[l].write(put(10)).await.unwrap();
    let first = nodes[l].id();
    nodes.remove(l).stop().await;
    let l = writable_leader(&nodes).await;
    let new = &nodes[l];
    assert_ne!(new.id(), first);
    let counts = new.replica.status().counts;
    assert!(counts.elections_started >= 1, "{counts:?}");
    assert!(counts.leader_changes >= 2, "{counts:?}");
    let follower = &nodes[1 - l];
    assert!(follower.replica.counters().counts().leader_changes >= 2);
    for n in nodes {
        n.stop().await;
    }
}
