//! Three members over the real Raft service on loopback (in one process):
//! they elect a leader, replicate, and go on under a new leader when the
//! first one stops; a member added later, after the log was compacted,
//! catches up from a snapshot shipped as a file in checksummed chunks; a
//! member restarted on its own directory rebuilds from its log and takes
//! the rest from the leader.
//! Each member's log is a `WalLogStore` in its own directory; the state
//! machine is the testkit's small one (`KvMachine`).

use std::collections::BTreeMap;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use uuid::Uuid;
use uuidmap_cluster::RaftBatch;
use uuidmap_engine::store::Op;
use uuidmap_index::Key;
use uuidmap_testkit::cluster::{Member, leader};

fn put(k: u128, v: u128) -> Op {
    Op::Put {
        key: Key::new(Uuid::from_u128(k)).unwrap(),
        value: Uuid::from_u128(v),
    }
}

/// Writes keys `range` through the leader, one batch each; returns the
/// last LSN.
async fn write(leader: &Member, range: std::ops::Range<u128>) -> u64 {
    let mut lsn = 0;
    for k in range {
        let resp = leader
            .raft
            .client_write(RaftBatch::new(k as u64, &[put(k + 1, k * 7)]))
            .await
            .expect("the leader takes the write");
        assert!(resp.data.lsn > lsn, "LSNs grow");
        lsn = resp.data.lsn;
    }
    lsn
}

async fn applied(member: &Member, lsn: u64) {
    member
        .raft
        .wait(Some(Duration::from_secs(10)))
        .applied_index_at_least(Some(lsn), "the write applied")
        .await
        .unwrap_or_else(|e| panic!("member {} did not apply LSN {lsn}: {e}", member.id));
}

fn expected(range: std::ops::Range<u128>) -> BTreeMap<Uuid, Uuid> {
    range
        .map(|k| (Uuid::from_u128(k + 1), Uuid::from_u128(k * 7)))
        .collect()
}

/// A group of three that took keys 0..20 through its leader, every member
/// having applied them; returns it and the leader's id.
async fn three_with_20_writes() -> (Vec<Member>, u64) {
    let members = Member::group(3).await;
    let all: Vec<&Member> = members.iter().collect();
    let first = leader(&all).await;
    let lead = members.iter().find(|m| m.id == first).unwrap();
    let lsn = write(lead, 0..20).await;
    for m in &members {
        applied(m, lsn).await;
        assert_eq!(m.machine.map(), expected(0..20), "member {}", m.id);
    }
    (members, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_elect_replicate_and_go_on_under_a_new_leader() {
    let (mut members, first) = three_with_20_writes().await;

    // The leader stops; the other two elect one of themselves and go on.
    let at = members.iter().position(|m| m.id == first).unwrap();
    members[at].stop().await;
    let rest: Vec<&Member> = members.iter().filter(|m| m.id != first).collect();
    let second = leader(&rest).await;
    assert_ne!(second, first);
    let lead = rest.iter().find(|m| m.id == second).unwrap();
    let lsn = write(lead, 20..30).await;
    for m in &rest {
        applied(m, lsn).await;
        assert_eq!(m.machine.map(), expected(0..30), "member {}", m.id);
    }
    for m in members.iter_mut() {
        if m.id != first {
            m.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_added_after_compaction_catches_up_from_a_shipped_snapshot() {
    let mut one = Member::start(1).await;
    one.raft
        .initialize(BTreeMap::from([(1, one.node.clone())]))
        .await
        .unwrap();
    leader(&[&one]).await;
    let lsn = write(&one, 0..200).await;
    applied(&one, lsn).await;
    // Snapshot, then drop the log it covers: a new member can only get
    // the first 200 writes from the snapshot.
    one.raft.trigger().snapshot().await.unwrap();
    one.raft
        .wait(Some(Duration::from_secs(10)))
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index == lsn),
            "snapshot built",
        )
        .await
        .unwrap();
    one.raft.trigger().purge_log(lsn).await.unwrap();
    one.raft
        .wait(Some(Duration::from_secs(10)))
        .metrics(|m| m.purged.is_some_and(|p| p.index == lsn), "log purged")
        .await
        .unwrap();

    let mut two = Member::start(2).await;
    one.raft
        .add_learner(2, two.node.clone(), true)
        .await
        .expect("the learner catches up");
    let lsn = write(&one, 200..210).await;
    applied(&two, lsn).await;
    assert_eq!(two.machine.map(), expected(0..210));
    assert!(
        two.machine.state.lock().unwrap().snapshot.is_some(),
        "member 2 installed a snapshot"
    );
    one.stop().await;
    two.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restarted_on_its_directory_catches_up_from_its_log_and_the_leaders() {
    let (mut members, first) = three_with_20_writes().await;

    // A follower goes down; the others go on without it.
    let at = members.iter().position(|m| m.id != first).unwrap();
    let down = members.remove(at);
    let term_before = down.raft.metrics().borrow_watched().current_term;
    let mut down = Some(down);
    down.as_mut().unwrap().stop().await;
    let lead = members.iter().find(|m| m.id == first).unwrap();
    let lsn = write(lead, 20..40).await;

    // It comes back on its own log (its state machine starts empty and
    // is rebuilt from the log, LSN 0's membership entry included), and
    // takes the rest from the leader.
    let back = down.take().unwrap().restart().await;
    applied(&back, lsn).await;
    assert_eq!(back.machine.map(), expected(0..40));
    assert!(back.raft.metrics().borrow_watched().current_term >= term_before);
    members.push(back);
    for m in members.iter_mut() {
        m.stop().await;
    }
}
