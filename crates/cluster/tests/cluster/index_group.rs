//! Members over the real index (`Replica`: the engine's replica writer,
//! `IndexStateMachine`, the log store, openraft), in one process with the
//! Raft service on loopback: writes through the leader's write handle,
//! compare-and-set decided by the leader against its pending proposals,
//! followers that refuse writes naming the leader and hold the same
//! contents, failover, and a member that rebuilds its index from its log.

use std::collections::HashMap;

use tokio::net::TcpListener;
use uuid::Uuid;
use uuidmap_cluster::replica::{Replica, ReplicaConfig};
use uuidmap_engine::writer::{WriteError, WriteOp};
use uuidmap_index::Key;
use uuidmap_testkit::cluster::{ReplicaNode, writable_leader};

/// Starts member `id` on `dir`, its Raft service on `listen`.
async fn start_in(id: u64, dir: tempfile::TempDir, listen: &str) -> ReplicaNode {
    let listener = TcpListener::bind(listen).await.expect("a loopback port");
    ReplicaNode::start(id, dir, listener, HashMap::new()).await
}

async fn group(n: u64) -> Vec<ReplicaNode> {
    ReplicaNode::group(n).await
}

fn key(k: u128) -> Key {
    Key::new(Uuid::from_u128(k)).unwrap()
}

fn put(k: u128, v: u128) -> WriteOp {
    WriteOp::Put {
        key: key(k),
        value: Uuid::from_u128(v),
    }
}

fn cas(k: u128, expected: Option<u128>, new: Option<u128>) -> WriteOp {
    WriteOp::CompareAndSet {
        key: key(k),
        expected: expected.map(Uuid::from_u128),
        new: new.map(Uuid::from_u128),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_over_the_index_write_decide_refuse_and_agree() {
    let nodes = group(3).await;
    let l = writable_leader(&nodes).await;
    let leader = &nodes[l];

    // Writes from many tasks at once: each gets its LSN, all distinct.
    let mut tasks = Vec::new();
    for k in 1..=64u128 {
        let writes = leader.replica.writes();
        tasks.push(tokio::spawn(
            async move { writes.write(vec![put(k, k)]).await },
        ));
    }
    let mut lsns = Vec::new();
    for t in tasks {
        lsns.push(t.await.unwrap().expect("the leader takes the write").lsn);
    }
    lsns.sort();
    lsns.dedup();
    assert_eq!(lsns.len(), 64, "one LSN per batch");

    // A chain of 20 compare-and-sets queued at once (join_all polls them
    // in order, so they reach the writer in order): each is decided while
    // the ones before it are still pending, and sees them (the leader's
    // overlay). Deciding against the applied index alone would refuse all
    // but the first.
    let writes = leader.replica.writes();
    let chain = (0..20u128).map(|step| writes.write(vec![cas(1, Some(1 + step), Some(2 + step))]));
    let mut lsns = Vec::new();
    for outcome in futures_util::future::join_all(chain).await {
        lsns.push(outcome.expect("each CAS sees the one before it").lsn);
    }
    assert!(
        lsns.windows(2).all(|w| w[0] < w[1]),
        "decided in order: {lsns:?}"
    );
    let ok = 20;
    let last = leader
        .write(vec![cas(1, Some(1 + ok), Some(100))])
        .await
        .expect("the value is what the accepted CASes left");
    // A refused CAS changes nothing and says what it found.
    match leader.write(vec![put(500, 1), cas(1, Some(7), None)]).await {
        Err(WriteError::CasMismatch { current, .. }) => {
            assert_eq!(current, Some(Uuid::from_u128(100)))
        }
        other => panic!("{other:?}"),
    }

    // A follower refuses, naming the leader and its client URL.
    let follower = &nodes[(l + 1) % 3];
    match follower.write(vec![put(9, 9)]).await {
        Err(WriteError::NotLeader { leader: Some(hint) }) => {
            assert_eq!(hint.id, leader.id());
            assert_eq!(hint.url.as_deref(), Some(leader.node.api_url.as_str()));
        }
        other => panic!("{other:?}"),
    }

    // Every member applies the same entries to the same contents.
    for n in &nodes {
        n.applied(last.lsn).await;
    }
    let contents = leader.contents();
    assert_eq!(contents.len(), 64);
    assert_eq!(contents[&Uuid::from_u128(1)], Uuid::from_u128(100));
    assert!(!contents.contains_key(&Uuid::from_u128(500)));
    for n in &nodes {
        assert_eq!(n.contents(), contents, "member {}", n.id());
    }
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_leader_stops_another_takes_writes_and_a_restarted_member_rebuilds_its_index() {
    let mut nodes = group(3).await;
    let l = writable_leader(&nodes).await;
    let mut last = 0;
    for k in 1..=30u128 {
        last = nodes[l].write(vec![put(k, k + 1000)]).await.unwrap().lsn;
    }
    for n in &nodes {
        n.applied(last).await;
    }
    let before = nodes[l].contents();
    let old = nodes.remove(l);
    let old_id = old.id();
    let (_, old_dir, old_addr) = old.stop().await;

    // The other two elect a leader whose writer passes its gate.
    let l = writable_leader(&nodes).await;
    assert_ne!(nodes[l].id(), old_id);
    let after = nodes[l]
        .write(vec![cas(5, Some(1005), Some(7))])
        .await
        .expect("the new leader reads what the old one wrote");
    for n in &nodes {
        n.applied(after.lsn).await;
        assert_eq!(
            n.replica.index().get(&Uuid::from_u128(5)),
            Some(Uuid::from_u128(7))
        );
    }

    // The old leader comes back on its directory: its index is rebuilt
    // from its log, and it catches up from the new leader.
    let back = start_in(old_id, old_dir, &old_addr).await;
    back.applied(after.lsn).await;
    let mut expected = before;
    expected.insert(Uuid::from_u128(5), Uuid::from_u128(7));
    assert_eq!(back.contents(), expected);
    assert_eq!(nodes[l].contents(), expected);
    back.stop().await;
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_one_takes_writes_and_rebuilds_after_a_restart() {
    let mut nodes = group(1).await;
    writable_leader(&nodes).await;
    let n = nodes.pop().unwrap();
    let mut last = 0;
    for k in 1..=10u128 {
        last = n.write(vec![put(k, k)]).await.unwrap().lsn;
    }
    let contents = n.contents();
    let (id, dir, addr) = n.stop().await;
    let n = start_in(id, dir, &addr).await;
    n.applied(last).await;
    assert_eq!(n.contents(), contents);
    let nodes = vec![n];
    let l = writable_leader(&nodes).await;
    let more = nodes[l].write(vec![put(11, 11)]).await.unwrap();
    assert!(more.lsn > last, "LSNs go on after the restart");
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_opens_only_in_the_mode_that_wrote_it() {
    use uuidmap_engine::writer::{DurableConfig, DurableIndex};

    // A single node's directory is not a member's.
    let single = tempfile::tempdir().unwrap();
    let path = single.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let d = DurableIndex::open(DurableConfig::new(&path)).unwrap();
        d.writes().write_blocking(vec![put(1, 1)]).unwrap();
        d.shutdown();
    })
    .await
    .unwrap();
    let err = Replica::start(ReplicaConfig::new(1, single.path()))
        .await
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("a single node's data") && text.contains("without --node-id"),
        "{text}"
    );

    // A member's directory is not a single node's.
    let member = tempfile::tempdir().unwrap();
    Replica::start(ReplicaConfig::new(1, member.path()))
        .await
        .unwrap()
        .shutdown()
        .await;
    let path = member.path().to_path_buf();
    let err = tokio::task::spawn_blocking(move || DurableIndex::open(DurableConfig::new(&path)))
        .await
        .unwrap()
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("replica group member") && text.contains("--node-id"),
        "{text}"
    );
}

/// Cuts a stopped member's Raft log from `first_cut` on, as the log's own
/// conflict cut does (the header then vouches for what is left): the log
/// a restart finds when the end of what it had written never reached the
/// disk (a kill before the log thread wrote it, a full disk, a power cut
/// under `--fsync batch`), although the member had already sent it on.
fn lose_log_end(dir: &std::path::Path, next_lsn: u64, first_cut: u64) {
    use std::sync::Arc;
    use uuidmap_engine::store::OsIo;
    use uuidmap_engine::store::wal::{Preallocate, WalFormat, WalOptions, WalWriter};
    let mut wal = WalWriter::create(
        Arc::new(OsIo),
        dir,
        next_lsn,
        WalOptions {
            format: WalFormat::Raft,
            preallocate: Preallocate::Off,
            ..WalOptions::default()
        },
    )
    .unwrap();
    wal.truncate_from(first_cut).unwrap();
}

/// openraft, by default, restores a member that led before its restart
/// as the leader of the same term at once. A leader sends entries on
/// before its own log thread has written them, so a restarted leader may
/// miss entries its followers hold under the very log ids it would now
/// give to new ones: Raft's log matching breaks, and the members apply
/// different entries under one LSN. Here the leader's log lost its last
/// entry, an acknowledged write: the group must give it back (a new
/// election, in a later term, which only a member holding it can win),
/// and every member must end with the same contents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_restarts_without_the_end_of_its_log_gets_it_back_and_no_member_diverges() {
    let mut nodes = group(3).await;
    let l = writable_leader(&nodes).await;
    let mut last = 0;
    for k in 1..=20u128 {
        last = nodes[l].write(vec![put(k, k + 1000)]).await.unwrap().lsn;
    }
    for n in &nodes {
        n.applied(last).await;
    }
    let expected = nodes[l].contents();
    assert_eq!(expected.len(), 20);
    let leader_id = nodes[l].id();
    let mut stopped = Vec::new();
    for n in nodes.drain(..) {
        stopped.push(n.stop().await);
    }
    let (_, dir, _) = stopped.iter().find(|(id, _, _)| *id == leader_id).unwrap();
    lose_log_end(dir.path(), last + 1, last);

    // The old leader first: restored as the leader of its term, it would
    // write its gate at `last` before the others are back.
    stopped.sort_by_key(|(id, _, _)| *id != leader_id);
    for (id, dir, addr) in stopped {
        let listener = TcpListener::bind(&addr).await.expect("the member's port");
        nodes.push(ReplicaNode::start(id, dir, listener, HashMap::new()).await);
    }
    let l = writable_leader(&nodes).await;
    let more = nodes[l].write(vec![put(21, 1021)]).await.unwrap().lsn;
    for n in &nodes {
        n.applied(more).await;
    }
    let mut expected = expected;
    expected.insert(Uuid::from_u128(21), Uuid::from_u128(1021));
    for n in &nodes {
        assert_eq!(
            n.contents(),
            expected,
            "member {} (the old leader was {leader_id})",
            n.id()
        );
    }
    for n in nodes {
        n.stop().await;
    }
}
