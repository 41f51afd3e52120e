//! Linearizable reads on members that cannot answer from a lease
//! (`uuidmap_cluster::read_index`), over three members of the real index
//! whose every Raft link goes through its own `FaultProxy`:
//! - a follower held back from the leader's entries reads, at `stale`, the
//!   value from before an acknowledged write, and is as stale as it was
//!   cut off; its read index covers the write, so a linearizable read
//!   waits for it instead of answering the old value, and answers the new
//!   one once the link heals;
//! - a leader cut off while the others elect a new one and write gets no
//!   read index (its stale value is there to be read), until it learns of
//!   the new leader;
//! - concurrent reads share rounds.
//!
//! A linearizable read here is what the server does (`read_gate.rs`):
//! the read index, a wait until it is applied, then the index.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_engine::writer::WriteOp;
use uuidmap_index::Key;
use uuidmap_testkit::cluster::{ReplicaNode, writable_leader};
use uuidmap_testkit::proxy::FaultProxy;

fn key() -> Key {
    Key::new(Uuid::from_u128(0xfeed)).unwrap()
}

fn value(v: u128) -> Uuid {
    Uuid::from_u128(0x5500 + v)
}

fn put(v: u128) -> Vec<WriteOp> {
    vec![WriteOp::Put {
        key: key(),
        value: value(v),
    }]
}

/// A group of three whose member `i` dials member `j` through
/// `proxies[(i, j)]`.
async fn proxied_group() -> (Vec<ReplicaNode>, HashMap<(u64, u64), FaultProxy>) {
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let mut proxies = HashMap::new();
    let mut overrides: HashMap<u64, HashMap<u64, String>> = HashMap::new();
    for i in 1..=3u64 {
        for j in (1..=3u64).filter(|&j| j != i) {
            let p = FaultProxy::start(addrs[j as usize - 1]).await;
            overrides
                .entry(i)
                .or_default()
                .insert(j, p.addr.to_string());
            proxies.insert((i, j), p);
        }
    }
    (ReplicaNode::group_on(listeners, overrides).await, proxies)
}

/// The value a stale read on `node` answers.
fn stale_get(node: &ReplicaNode) -> Option<Uuid> {
    node.replica.index().get(key().as_uuid())
}

/// A linearizable read on `node` (module docs), within `within`.
async fn linearizable_get(node: &ReplicaNode, within: Duration) -> Result<Option<Uuid>, String> {
    let until = tokio::time::Instant::now() + within;
    let index = tokio::time::timeout_at(until, node.replica.read_index().read_index())
        .await
        .map_err(|_| "no read index in time".to_string())?
        .map_err(|e| e.to_string())?;
    node.replica
        .watermark()
        .wait_for(index, Some(until))
        .await
        .map_err(|e| format!("read index {index} not applied in time: {e:?}"))?;
    Ok(stale_get(node))
}

/// A linearizable read on `node`, retried until it answers (up to 15 s).
async fn linearizable_get_eventually(node: &ReplicaNode) -> Option<Uuid> {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        match linearizable_get(node, Duration::from_secs(2)).await {
            Ok(v) => return v,
            Err(e) if Instant::now() < until => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("node {}: no linearizable read in 15 s: {e}", node.id()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_held_back_never_reads_linearizably_a_value_older_than_an_acknowledged_write() {
    let (nodes, proxies) = proxied_group().await;
    let l = writable_leader(&nodes).await;
    let (leader, f) = (&nodes[l], &nodes[(l + 1) % 3]);
    let lsn1 = leader.write(put(1)).await.unwrap().lsn;
    f.applied(lsn1).await;
    assert_eq!(
        linearizable_get(f, Duration::from_secs(5)).await,
        Ok(Some(value(1)))
    );

    // The leader's entries and heartbeats no longer reach the follower
    // (its own calls to the leader still do).
    proxies[&(leader.id(), f.id())].partition(true);
    let lsn2 = leader.write(put(2)).await.unwrap().lsn;
    // The test discriminates: a stale read there answers the old value.
    assert_eq!(stale_get(f), Some(value(1)));
    // A linearizable read does not: it waits (or is refused).
    let read = linearizable_get(f, Duration::from_millis(700)).await;
    assert_ne!(read, Ok(Some(value(1))), "a stale linearizable read");
    assert!(read.is_err(), "{read:?}");
    // It is as stale as it was cut off, the leader not at all.
    let lease = |n: &ReplicaNode| n.replica.durable().read_lease().unwrap().clone();
    let lag = f
        .replica
        .staleness()
        .of(f.replica.watermark().current(), &lease(f));
    assert!(lag >= Duration::from_millis(600), "{lag:?}");
    assert_eq!(
        leader
            .replica
            .staleness()
            .of(leader.replica.watermark().current(), &lease(leader)),
        Duration::ZERO
    );

    proxies[&(leader.id(), f.id())].partition(false);
    assert_eq!(linearizable_get_eventually(f).await, Some(value(2)));
    assert!(f.replica.watermark().current() >= lsn2);
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_gets_no_read_index_until_it_learns_the_new_leader() {
    let (nodes, proxies) = proxied_group().await;
    let l = writable_leader(&nodes).await;
    let old = &nodes[l];
    let lsn1 = old.write(put(1)).await.unwrap().lsn;
    for n in &nodes {
        n.applied(lsn1).await;
    }
    // Cut it off both ways; the others elect a leader and take value 2.
    let isolate = |on: bool| {
        for ((i, j), p) in &proxies {
            if *i == old.id() || *j == old.id() {
                p.partition(on);
            }
        }
    };
    isolate(true);
    let until = Instant::now() + Duration::from_secs(15);
    'written: loop {
        for n in nodes.iter().filter(|n| n.id() != old.id()) {
            if n.write(put(2)).await.is_ok() {
                break 'written;
            }
        }
        assert!(Instant::now() < until, "the majority took no write");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The old value is there to be read; a linearizable read never gets it.
    assert_eq!(stale_get(old), Some(value(1)));
    for _ in 0..3 {
        let read = linearizable_get(old, Duration::from_secs(2)).await;
        assert!(read.is_err(), "the deposed leader answered {read:?}");
    }
    isolate(false);
    assert_eq!(linearizable_get_eventually(old).await, Some(value(2)));
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_linearizable_reads_on_a_follower_share_read_index_rounds() {
    let (nodes, _proxies) = proxied_group().await;
    let l = writable_leader(&nodes).await;
    let lsn = nodes[l].write(put(1)).await.unwrap().lsn;
    let nodes = std::sync::Arc::new(nodes);
    let f = (l + 1) % 3;
    nodes[f].applied(lsn).await;
    let before = nodes[f].replica.read_index().rounds();
    const READS: u64 = 400;
    let reads: Vec<_> = (0..READS)
        .map(|_| {
            let nodes = nodes.clone();
            tokio::spawn(async move { linearizable_get(&nodes[f], Duration::from_secs(10)).await })
        })
        .collect();
    for r in reads {
        assert_eq!(r.await.unwrap(), Ok(Some(value(1))));
    }
    let rounds = nodes[f].replica.read_index().rounds() - before;
    assert!(
        (1..READS / 4).contains(&rounds),
        "{rounds} rounds for {READS} reads"
    );
    let nodes = std::sync::Arc::try_unwrap(nodes).ok().unwrap();
    for n in nodes {
        n.stop().await;
    }
}
