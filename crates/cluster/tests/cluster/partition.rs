//! Three members over the real index, every Raft link through its own
//! `FaultProxy` (one per ordered pair of members), under load from
//! clients that record what they were told. The leader is cut off from
//! both others, then the link is healed:
//! - the isolated leader acknowledges nothing meanwhile, and answers a
//!   write in flight (outcome unknown) soon after its lease lapses;
//! - the other two elect a leader and go on;
//! - no LSN is acknowledged twice (no write acknowledged by two leaders);
//! - every key's history of puts, compare-and-sets and reads (a read is a
//!   compare-and-set that cannot match: it is refused with the value) is
//!   linearizable, unknown outcomes included;
//! - after healing, every member holds the same contents, by full scans.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_engine::writer::{WriteError, WriteOp};
use uuidmap_index::Key;
use uuidmap_testkit::cluster::{ReplicaNode, writable_leader};
use uuidmap_testkit::linearizability::{Call, Op, Ret, check};
use uuidmap_testkit::proxy::FaultProxy;

const KEYS: u64 = 6;
/// A value no write uses: a compare-and-set expecting it is a read.
const NEVER: u64 = u64::MAX;

fn key(k: u64) -> Key {
    Key::new(Uuid::from_u128(0xab00 + k as u128)).unwrap()
}

fn value(v: u64) -> Uuid {
    Uuid::from_u128(0x7700_0000_0000_0000_0000 + v as u128)
}

fn value_id(u: Uuid) -> u64 {
    (u.as_u128() - 0x7700_0000_0000_0000_0000) as u64
}

/// What one client call did, for the history.
enum Outcome {
    /// Acknowledged, at this LSN (0: a refusal).
    Done(u64, Ret<u64>),
    /// Nothing was done (refused before it was logged): not in the history.
    NotDone,
    /// Unknown: it may take effect at any time after it was sent, or never.
    Unknown,
}

/// One call, tried on the members from the one that last took a write,
/// moving on when a member says it does not lead (nothing was done), for
/// up to `budget`.
async fn call(
    nodes: &[ReplicaNode],
    hint: &AtomicU64,
    ops: Vec<WriteOp>,
    budget: Duration,
) -> Outcome {
    let until = Instant::now() + budget;
    let mut i = hint.load(SeqCst) as usize;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Outcome::NotDone;
        }
        let n = &nodes[i % nodes.len()];
        match tokio::time::timeout(left.min(Duration::from_secs(1)), n.write(ops.clone())).await {
            Ok(Ok(o)) => {
                hint.store((i % nodes.len()) as u64, SeqCst);
                return Outcome::Done(o.lsn, Ret::Done);
            }
            Ok(Err(WriteError::CasMismatch { current, .. })) => {
                hint.store((i % nodes.len()) as u64, SeqCst);
                return Outcome::Done(
                    0,
                    Ret::CasFailed {
                        current: current.map(value_id),
                    },
                );
            }
            Ok(Err(WriteError::NotLeader { .. })) => {
                i += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // Logged and then lost with the leadership, or no answer in
            // time: it may or may not take effect. The next call tries
            // another member first, as a client does with a slow server.
            Ok(Err(_)) | Err(_) => {
                hint.store(((i + 1) % nodes.len()) as u64, SeqCst);
                return Outcome::Unknown;
            }
        }
    }
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

/// Cuts member `id` off from the others, both ways (`on`), or heals.
fn isolate(proxies: &HashMap<(u64, u64), FaultProxy>, id: u64, on: bool) {
    for ((i, j), p) in proxies {
        if *i == id || *j == id {
            p.partition(on);
        }
    }
}

/// One client: calls on random keys until `stop`, recording each.
async fn client(
    nodes: Arc<Vec<ReplicaNode>>,
    hint: Arc<AtomicU64>,
    next_value: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    start: Instant,
    seed: u64,
) -> (Vec<Op<u64, u64>>, Vec<u64>) {
    let mut history = Vec::new();
    let mut lsns = Vec::new();
    let mut rng = seed;
    let mut last_seen: HashMap<u64, Option<u64>> = HashMap::new();
    while !stop.load(SeqCst) {
        // xorshift: no dependency for a few random choices.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let k = rng % KEYS;
        let v = next_value.fetch_add(1, SeqCst);
        let (c, ops) = match rng % 3 {
            0 => (
                Call::Put(v),
                vec![WriteOp::Put {
                    key: key(k),
                    value: value(v),
                }],
            ),
            1 => {
                let expected = last_seen.get(&k).copied().flatten();
                (
                    Call::Cas {
                        expected,
                        new: Some(v),
                    },
                    vec![WriteOp::CompareAndSet {
                        key: key(k),
                        expected: expected.map(value),
                        new: Some(value(v)),
                    }],
                )
            }
            _ => (
                Call::Get,
                vec![WriteOp::CompareAndSet {
                    key: key(k),
                    expected: Some(value(NEVER)),
                    new: None,
                }],
            ),
        };
        let invoked = start.elapsed().as_nanos() as u64;
        let outcome = call(&nodes, &hint, ops, Duration::from_secs(3)).await;
        let returned = start.elapsed().as_nanos() as u64;
        let ret = match outcome {
            Outcome::NotDone => continue,
            Outcome::Unknown => None,
            Outcome::Done(lsn, ret) => {
                if lsn > 0 {
                    lsns.push(lsn);
                }
                Some(match (c, ret) {
                    // A read is a refused compare-and-set: its value.
                    (Call::Get, Ret::CasFailed { current }) => {
                        last_seen.insert(k, current);
                        (returned, Ret::Value(current))
                    }
                    (_, Ret::CasFailed { current }) => {
                        last_seen.insert(k, current);
                        (returned, Ret::CasFailed { current })
                    }
                    (_, r) => {
                        last_seen.insert(k, Some(v));
                        (returned, r)
                    }
                })
            }
        };
        history.push(Op {
            key: k,
            call: c,
            invoked,
            returned: ret,
        });
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    (history, lsns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_acknowledges_nothing_and_the_histories_stay_linearizable() {
    let (nodes, proxies) = proxied_group().await;
    let nodes = Arc::new(nodes);
    let l = writable_leader(&nodes).await;
    let leader_id = l as u64 + 1;

    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let hint = Arc::new(AtomicU64::new(l as u64));
    let next_value = Arc::new(AtomicU64::new(1));
    let mut clients = Vec::new();
    for c in 0..4u64 {
        clients.push(tokio::spawn(client(
            nodes.clone(),
            Arc::new(AtomicU64::new(hint.load(SeqCst))),
            next_value.clone(),
            stop.clone(),
            start,
            0x9e37_79b9_7f4a_7c15 ^ (c + 1),
        )));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;

    // Cut the leader off, both ways.
    isolate(&proxies, leader_id, true);
    // A reader that keeps asking the cut-off leader, as a client that has
    // not noticed would: it must never be answered from a stale index.
    let stale_reader = {
        let (nodes, stop) = (nodes.clone(), stop.clone());
        let healed = Arc::new(AtomicBool::new(false));
        let done = healed.clone();
        let task = tokio::spawn(async move {
            let mut history = Vec::new();
            let mut k = 0;
            while !done.load(SeqCst) && !stop.load(SeqCst) {
                k = (k + 1) % KEYS;
                let invoked = start.elapsed().as_nanos() as u64;
                let read = nodes[l].write(vec![WriteOp::CompareAndSet {
                    key: key(k),
                    expected: Some(value(NEVER)),
                    new: None,
                }]);
                let returned = match tokio::time::timeout(Duration::from_millis(500), read).await {
                    Ok(Err(WriteError::CasMismatch { current, .. })) => Some((
                        start.elapsed().as_nanos() as u64,
                        Ret::Value(current.map(value_id)),
                    )),
                    Ok(Err(WriteError::NotLeader { .. })) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    Ok(other) => panic!("a read answered {other:?}"),
                    Err(_) => None,
                };
                history.push(Op {
                    key: k,
                    call: Call::Get,
                    invoked,
                    returned,
                });
            }
            history
        });
        (task, healed)
    };
    // It acknowledges nothing while cut off: a write it takes before its
    // lease lapses cannot commit, and is answered as of unknown outcome
    // once the lease has lapsed a while (not left waiting for a majority
    // that never comes); after that it refuses at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let isolated = tokio::time::timeout(
        Duration::from_secs(2),
        nodes[l].write(vec![WriteOp::Put {
            key: key(0),
            value: value(NEVER - 1),
        }]),
    )
    .await;
    assert!(
        matches!(
            isolated,
            Ok(Err(WriteError::QuorumLost | WriteError::NotLeader { .. }))
        ),
        "the isolated leader acknowledged a write, or kept it waiting: {isolated:?}"
    );
    // The others go on.
    let others: Vec<&ReplicaNode> = nodes.iter().filter(|n| n.id() != leader_id).collect();
    let until = Instant::now() + Duration::from_secs(15);
    let new_leader = loop {
        let mut found = None;
        for n in &others {
            let r = n.write(vec![WriteOp::Delete { key: key(KEYS + 1) }]).await;
            if r.is_ok() {
                found = Some(n.id());
            }
        }
        if let Some(id) = found {
            break id;
        }
        assert!(Instant::now() < until, "the majority elected no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(new_leader, leader_id);
    // Cut off past its lease, the old leader takes no new write: it
    // refuses at once, nothing logged, so a client tries another member.
    let refused = tokio::time::timeout(
        Duration::from_secs(1),
        nodes[l].write(vec![WriteOp::Put {
            key: key(0),
            value: value(NEVER - 2),
        }]),
    )
    .await;
    assert!(
        matches!(refused, Ok(Err(WriteError::NotLeader { .. }))),
        "the cut-off leader kept a write waiting, or took it: {refused:?}"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;

    // Heal; let the clients go on a while, then stop them.
    stale_reader.1.store(true, SeqCst);
    let stale_reads = stale_reader.0.await.unwrap();
    isolate(&proxies, leader_id, false);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, SeqCst);
    let stale_answered = stale_reads.iter().filter(|o| o.returned.is_some()).count();
    let mut history = stale_reads;
    let mut lsns = Vec::new();
    for c in clients {
        let (h, l) = c.await.unwrap();
        history.extend(h);
        lsns.extend(l);
    }

    // No LSN was acknowledged twice.
    let unique: BTreeSet<u64> = lsns.iter().copied().collect();
    assert_eq!(unique.len(), lsns.len(), "an LSN acknowledged twice");
    // Each key's history is linearizable.
    let done = history.iter().filter(|o| o.returned.is_some()).count();
    assert!(done > 100, "too few calls went through: {done}");
    check(&history, 5_000_000).unwrap_or_else(|v| panic!("{v:?}"));
    // Every member converges to the same contents.
    let last = nodes
        .iter()
        .map(|n| n.replica.watermark().current())
        .max()
        .unwrap();
    for n in nodes.iter() {
        n.applied(last).await;
    }
    let contents = nodes[0].contents();
    for n in nodes.iter() {
        assert_eq!(n.contents(), contents, "member {}", n.id());
    }
    eprintln!(
        "{} calls ({} with a known outcome), {} LSNs acknowledged; leader {leader_id} cut off, \
         then {new_leader}; the cut-off leader answered {stale_answered} reads",
        history.len(),
        done,
        lsns.len()
    );
    let nodes = Arc::try_unwrap(nodes).ok().expect("the clients are done");
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_never_answers_a_read_from_its_stale_index() {
    let (nodes, proxies) = proxied_group().await;
    let l = writable_leader(&nodes).await;
    let leader_id = l as u64 + 1;
    let put = |v| {
        vec![WriteOp::Put {
            key: key(0),
            value: value(v),
        }]
    };
    nodes[l].write(put(1)).await.unwrap();
    // The leader answers reads from its index while a majority backs it;
    // a follower answers them as a follower.
    assert_eq!(nodes[l].replica.durable().admit_read(), Ok(()));
    assert_eq!(nodes[(l + 1) % 3].replica.durable().admit_read(), Ok(()));
    let read = || {
        vec![WriteOp::CompareAndSet {
            key: key(0),
            expected: Some(value(NEVER)),
            new: None,
        }]
    };
    // A read on the leader: refused with the value, once confirmed.
    assert!(matches!(
        nodes[l].write(read()).await,
        Err(WriteError::CasMismatch { current: Some(v), .. }) if v == value(1)
    ));

    // Cut it off. No write reaches it from now on, so nothing tells its
    // writer that it lost its lease; the majority elects a leader and
    // takes a new value.
    isolate(&proxies, leader_id, true);
    let others: Vec<&ReplicaNode> = nodes.iter().filter(|n| n.id() != leader_id).collect();
    let until = Instant::now() + Duration::from_secs(15);
    'written: loop {
        for n in &others {
            if n.write(put(2)).await.is_ok() {
                break 'written;
            }
        }
        assert!(Instant::now() < until, "the majority took no write");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its read lease has run out (and, unheard by a majority, it has
    // stepped down or is handing over): reads from its index are refused.
    let refused = nodes[l].replica.durable().admit_read();
    assert!(
        matches!(
            refused,
            Err(uuidmap_engine::writer::ReadRefused::LeaseExpired
                | uuidmap_engine::writer::ReadRefused::HandingOver)
        ) || (refused.is_ok()
            && !nodes[l]
                .replica
                .durable()
                .read_lease()
                .unwrap()
                .serves_as_leader()),
        "{refused:?}"
    );
    // Value 2 is acknowledged: a read that starts now must not say 1.
    for _ in 0..5 {
        match tokio::time::timeout(Duration::from_millis(300), nodes[l].write(read())).await {
            Ok(Err(WriteError::CasMismatch { current, .. })) => {
                assert_ne!(
                    current,
                    Some(value(1)),
                    "a stale read from the cut-off leader"
                )
            }
            Ok(Err(WriteError::NotLeader { .. })) | Err(_) => {}
            Ok(other) => panic!("{other:?}"),
        }
    }
    isolate(&proxies, leader_id, false);
    for n in nodes {
        n.stop().await;
    }
}
