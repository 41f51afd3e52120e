//! A voter whose data directory is replaced (a lost disk, an emptied
//! directory) and that is started again under its old id and address,
//! without being removed first. It forgot what it acknowledged: had it a
//! vote, it could help elect a member that lacks acknowledged writes. The
//! group recognises it by its directory's incarnation
//! (`uuidmap_cluster::identity`): it is refused every Raft call, so it
//! neither takes entries nor votes, and a member left alone with it stays
//! without a leader. Removed and added again, it catches up.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use uuid::Uuid;
use uuidmap_cluster::{identity, membership, network};
use uuidmap_engine::writer::WriteOp;
use uuidmap_index::Key;
use uuidmap_testkit::cluster::{ReplicaNode, writable_leader, write_batches};

fn batch(b: u128) -> Vec<WriteOp> {
    (0..5)
        .map(|i| WriteOp::Put {
            key: Key::new(Uuid::from_u128(b * 5 + i + 1)).unwrap(),
            value: Uuid::from_u128(b),
        })
        .collect()
}

/// Writes batches `range` through the leader; returns the last LSN.
async fn load(nodes: &[ReplicaNode], range: std::ops::Range<u128>) -> u64 {
    write_batches(nodes, range, batch).await
}

async fn start(id: u64, dir: tempfile::TempDir, addr: &str) -> ReplicaNode {
    ReplicaNode::start_at(id, dir, addr, |_| {}).await
}

fn leader_of(node: &ReplicaNode) -> Option<u64> {
    node.replica
        .raft()
        .metrics()
        .borrow_watched()
        .current_leader
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_a_replaced_directory_neither_takes_entries_nor_votes_until_added_again() {
    let mut nodes = ReplicaNode::group(3).await;
    let last = load(&nodes, 0..20).await;
    for n in &nodes {
        n.applied(last).await;
    }
    let l = writable_leader(&nodes).await;
    let f = (l + 1) % nodes.len();
    let (id, lost, addr) = nodes.remove(f).stop().await;
    let old = identity::load_or_create(&uuidmap_engine::store::OsIo, lost.path(), id).unwrap();
    drop(lost);

    // Its disk is replaced, and it starts again in its old place.
    let replaced = start(id, tempfile::tempdir().unwrap(), &addr).await;
    let now = replaced.replica.identity();
    assert_ne!(now.incarnation, old.incarnation);
    assert_eq!(
        network::identify(&addr, id, None, Duration::from_secs(5)).await,
        Ok(now),
        "Identify answers the new incarnation"
    );

    // The group writes on; the replaced member is sent nothing.
    let last = load(&nodes, 20..40).await;
    let expected = {
        let l = writable_leader(&nodes).await;
        nodes[l].applied(last).await;
        nodes[l].contents()
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(replaced.contents().is_empty(), "it took no entries");
    assert_eq!(
        replaced
            .replica
            .raft()
            .metrics()
            .borrow_watched()
            .last_log_index,
        None,
        "its log is empty"
    );

    // The leader stops. The one member left cannot be elected with the
    // replaced member's vote: there is no leader, and no write is taken.
    let l = writable_leader(&nodes).await;
    let (leader_id, leader_dir, leader_addr) = nodes.remove(l).stop().await;
    let survivor = nodes.pop().unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_ne!(
        leader_of(&survivor),
        Some(survivor.id()),
        "elected with the vote of a member that forgot its log"
    );
    assert_eq!(leader_of(&replaced), None);
    assert!(
        survivor.write(batch(99)).await.is_err(),
        "a write was taken without a quorum of members that remember"
    );

    // The old leader comes back: the group has its quorum again. The
    // replaced member is removed, then added again with its new
    // incarnation, and catches up.
    let back = start(leader_id, leader_dir, &leader_addr).await;
    let mut nodes = vec![back, survivor];
    let l = writable_leader(&nodes).await;
    let raft = nodes[l].replica.raft().clone();
    membership::remove(&raft, BTreeSet::from([id]))
        .await
        .expect("removed");
    membership::add_learner(&raft, id, replaced.node.clone())
        .await
        .expect("added again as a learner, and caught up");
    membership::promote(&raft, BTreeSet::from([id]))
        .await
        .expect("promoted");
    let members: BTreeMap<u64, u64> = raft
        .metrics()
        .borrow_watched()
        .membership_config
        .membership()
        .nodes()
        .map(|(id, node)| (*id, node.incarnation))
        .collect();
    assert_eq!(members.get(&id), Some(&now.incarnation));
    replaced.applied(last).await;
    assert_eq!(replaced.contents(), expected);
    nodes.push(replaced);
    let last = load(&nodes, 40..45).await;
    for n in &nodes {
        n.applied(last).await;
    }
    for n in nodes {
        n.stop().await;
    }
}
