//! A member whose `raft-state` has a damaged slot (the one that may hold
//! its newest vote) never falls back to the older vote it finds in the
//! other: a vote is a promise. It votes for no one and takes no entries
//! until its group has made it a learner, then catches up, is promoted
//! back, and trusts its vote again — without an operator
//! (`uuidmap_cluster::rejoin`). A member whose log is damaged does the
//! same after cutting its log at the damage: it may have lost entries it
//! acknowledged, so it must not count in a quorum until rebuilt.

use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use uuid::Uuid;
use uuidmap_cluster::replica::IndexRaft;
use uuidmap_engine::store::OsIo;
use uuidmap_engine::store::raft_state::{RAFT_STATE_FILE, RaftStateFile};
use uuidmap_engine::writer::WriteOp;
use uuidmap_index::Key;
use uuidmap_proto::raft::v1 as pb;
use uuidmap_proto::raft::v1::raft_client::RaftClient;
use uuidmap_testkit::cluster::{ReplicaNode, writable_leader, write_batches};
use uuidmap_testkit::wal_damage::flip_bit_in_record;

fn batch(b: u128) -> Vec<WriteOp> {
    (0..4)
        .map(|i| WriteOp::Put {
            key: Key::new(Uuid::from_u128(b * 4 + i + 1)).unwrap(),
            value: Uuid::from_u128(b),
        })
        .collect()
}

/// Where slot `i` of `raft-state` starts, and where its sequence number is.
const SLOTS: [usize; 2] = [0, 4096];
const SEQ_AT: usize = 12;

/// Flips a byte inside the slot holding the newest state (the higher
/// sequence number), as damage on the disk would.
fn damage_newest_slot(dir: &std::path::Path) {
    let path = dir.join(RAFT_STATE_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    let seq =
        |at: usize| u64::from_le_bytes(bytes[at + SEQ_AT..at + SEQ_AT + 8].try_into().unwrap());
    let newest = if seq(SLOTS[0]) > seq(SLOTS[1]) {
        SLOTS[0]
    } else {
        SLOTS[1]
    };
    bytes[newest + 30] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
}

fn voters(raft: &IndexRaft) -> (Vec<u64>, Vec<u64>, u64) {
    let m = raft.metrics().borrow_watched().membership_config.clone();
    (
        m.membership().voter_ids().collect(),
        m.membership().learner_ids().collect(),
        m.log_id().as_ref().map_or(0, |l| l.index),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_a_damaged_vote_slot_votes_for_no_one_until_rejoined_as_a_learner_and_promoted()
 {
    let mut nodes = ReplicaNode::group(3).await;
    let last = write_batches(&nodes, 0..20, batch).await;
    for n in &nodes {
        n.applied(last).await;
    }
    let l = writable_leader(&nodes).await;
    let (_, _, membership_before) = voters(nodes[l].replica.raft());
    let f = (l + 1) % nodes.len();
    let (id, dir, addr) = nodes.remove(f).stop().await;
    damage_newest_slot(dir.path());
    let read = RaftStateFile::open(std::sync::Arc::new(OsIo), dir.path()).unwrap();
    assert!(
        read.state().vote_distrusted,
        "the older slot is read with its vote distrusted"
    );
    drop(read);

    let member = ReplicaNode::start_at(id, dir, &addr, |_| {}).await;
    // At once, before the group has taken it back: it votes for no one.
    let refused = RaftClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .vote(pb::VoteRequest::default())
        .await
        .expect_err("a member whose vote is not trusted must not vote");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("votes for no one"),
        "{refused:?}"
    );

    // The group writes on meanwhile, and takes it back without anyone's help.
    let last = write_batches(&nodes, 20..30, batch).await;
    let started = Instant::now();
    while !member.replica.vote_trusted() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the member was not taken back within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let l = writable_leader(&nodes).await;
    let (voters_now, learners_now, membership_now) = voters(nodes[l].replica.raft());
    assert!(voters_now.contains(&id), "a voter again: {voters_now:?}");
    assert!(learners_now.is_empty(), "{learners_now:?}");
    assert!(
        membership_now >= membership_before + 2,
        "made a learner, then a voter: two membership changes ({membership_before} → \
         {membership_now})"
    );
    member.applied(last).await;
    assert_eq!(member.contents(), nodes[l].contents());

    // It votes again, and its `raft-state` says so once written again.
    let mut nodes = {
        nodes.push(member);
        nodes
    };
    let last = write_batches(&nodes, 30..35, batch).await;
    for n in &nodes {
        n.applied(last).await;
    }
    let i = nodes.iter().position(|n| n.id() == id).unwrap();
    let (_, dir, _) = nodes.remove(i).stop().await;
    let read = RaftStateFile::open(std::sync::Arc::new(OsIo), dir.path()).unwrap();
    assert!(
        !read.state().vote_distrusted,
        "the mark is cleared once the member is back"
    );
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_a_damaged_log_cuts_it_and_is_rebuilt_from_its_group_without_an_operator() {
    let mut nodes = ReplicaNode::group(3).await;
    let last = write_batches(&nodes, 0..40, batch).await;
    for n in &nodes {
        n.applied(last).await;
    }
    let l = writable_leader(&nodes).await;
    let f = (l + 1) % nodes.len();
    let (id, dir, addr) = nodes.remove(f).stop().await;
    // Damage an entry the member acknowledged, well inside its log.
    flip_bit_in_record(dir.path(), last - 10);

    // It starts (a single node would refuse), distrusting its vote.
    let member = ReplicaNode::start_at(id, dir, &addr, |_| {}).await;
    let refused = RaftClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .vote(pb::VoteRequest::default())
        .await
        .expect_err("a member that lost acknowledged entries must not vote");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");

    let last = write_batches(&nodes, 40..50, batch).await;
    let started = Instant::now();
    while !member.replica.vote_trusted() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the member was not rebuilt within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    member.applied(last).await;
    let l = writable_leader(&nodes).await;
    assert_eq!(
        member.contents(),
        nodes[l].contents(),
        "rebuilt: the entries it cut came back from its group"
    );
    let (voters_now, _, _) = voters(nodes[l].replica.raft());
    assert!(voters_now.contains(&id), "a voter again: {voters_now:?}");
    nodes.push(member);
    for n in nodes {
        n.stop().await;
    }
}
