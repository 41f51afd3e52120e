//! Three members over the real Raft service on loopback (in one process):
//! they elect a leader, replicate, and go on under a new leader when the
//! first one stops; a member added later, after the log was compacted,
//! catches up from a snapshot shipped as a file in checksummed chunks; a
//! member restarted on its own directory rebuilds from its log and takes
//! the rest from the leader.
//! Each member's log is a `WalLogStore` in its own directory; the state
//! machine is the tests' small one (`common`).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use common::KvMachine;
use openraft::async_runtime::WatchReceiver;
use openraft::{Config, Raft};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use uuid::Uuid;
use uuidmap_cluster::log_store::{LogStoreConfig, TAIL_ENTRIES, WalLogStore};
use uuidmap_cluster::network::GrpcNetworkFactory;
use uuidmap_cluster::raft_service::RaftService;
use uuidmap_cluster::timing::{RaftTiming, raft_config};
use uuidmap_cluster::{ClusterNode, RaftBatch, UuidmapRaft};
use uuidmap_engine::store::wal::WalOptions;
use uuidmap_engine::store::{Op, OsIo};
use uuidmap_index::Key;

struct Member {
    id: u64,
    raft: Raft<UuidmapRaft, KvMachine>,
    machine: KvMachine,
    node: ClusterNode,
    stop: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
    dir: Option<TempDir>,
}

/// The product's configuration (`timing`), as a member of a group runs.
fn config() -> Arc<Config> {
    raft_config(&RaftTiming::default()).expect("a valid Raft config")
}

async fn start(id: u64) -> Member {
    start_in(id, tempfile::tempdir().unwrap(), "127.0.0.1:0").await
}

/// Starts member `id` on the data directory `dir` (new, or one it ran on
/// before), its Raft service listening on `listen`.
async fn start_in(id: u64, dir: TempDir, listen: &str) -> Member {
    let listener = TcpListener::bind(listen).await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let store = WalLogStore::open(LogStoreConfig {
        io: Arc::new(OsIo),
        dir: dir.path().to_path_buf(),
        wal: WalOptions::default(),
        sync: true,
        tail_entries: TAIL_ENTRIES,
    })
    .unwrap();
    let machine = KvMachine::new(dir.path());
    let network = GrpcNetworkFactory {
        id,
        overrides: Arc::new(HashMap::new()),
    };
    let raft = Raft::new(id, config(), network, store, machine.clone())
        .await
        .unwrap();
    let service = RaftService::new(raft.clone(), dir.path().to_path_buf()).into_server();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                async {
                    let _ = stopped.await;
                },
            )
            .await
            .unwrap();
    });
    Member {
        id,
        raft,
        machine,
        node: ClusterNode {
            raft_addr: addr.clone(),
            api_url: format!("http://api-of-{id}"),
        },
        stop: Some((stop, server)),
        dir: Some(dir),
    }
}

impl Member {
    async fn stop(&mut self) {
        self.raft.shutdown().await.unwrap();
        if let Some((stop, server)) = self.stop.take() {
            let _ = stop.send(());
            server.await.unwrap();
        }
    }

    /// Stops and starts again on the same directory and address, as an
    /// operator restart does.
    async fn restart(mut self) -> Member {
        self.stop().await;
        let dir = self.dir.take().unwrap();
        let (id, addr) = (self.id, self.node.raft_addr.clone());
        drop(self);
        start_in(id, dir, &addr).await
    }
}

fn put(k: u128, v: u128) -> Op {
    Op::Put {
        key: Key::new(Uuid::from_u128(k)).unwrap(),
        value: Uuid::from_u128(v),
    }
}

/// The member that leads, once one does (waits up to 10 s).
async fn leader(members: &[&Member]) -> u64 {
    let m = members[0]
        .raft
        .wait(Some(Duration::from_secs(10)))
        .metrics(
            |m| {
                m.current_leader
                    .is_some_and(|l| members.iter().any(|x| x.id == l))
            },
            "a leader among the live members",
        )
        .await
        .expect("a leader is elected");
    let id = m.current_leader.unwrap();
    // Until the leader itself knows it leads (and has committed its first
    // entry), a write is sent back with ForwardToLeader.
    let lead = members.iter().find(|x| x.id == id).unwrap();
    lead.raft
        .wait(Some(Duration::from_secs(10)))
        .metrics(
            |m| m.state == openraft::ServerState::Leader && m.current_leader == Some(id),
            "the leader knows it leads",
        )
        .await
        .expect("the leader settles");
    lead.raft
        .ensure_linearizable(openraft::ReadPolicy::ReadIndex)
        .await
        .expect("the leader confirms its leadership");
    id
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_elect_replicate_and_go_on_under_a_new_leader() {
    let mut members = vec![start(1).await, start(2).await, start(3).await];
    let nodes: BTreeMap<u64, ClusterNode> =
        members.iter().map(|m| (m.id, m.node.clone())).collect();
    members[0].raft.initialize(nodes).await.unwrap();

    let all: Vec<&Member> = members.iter().collect();
    let first = leader(&all).await;
    let lead = members.iter().find(|m| m.id == first).unwrap();
    let lsn = write(lead, 0..20).await;
    for m in &members {
        applied(m, lsn).await;
        assert_eq!(m.machine.map(), expected(0..20), "member {}", m.id);
    }

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
    let mut one = start(1).await;
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

    let mut two = start(2).await;
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
    let mut members = vec![start(1).await, start(2).await, start(3).await];
    let nodes: BTreeMap<u64, ClusterNode> =
        members.iter().map(|m| (m.id, m.node.clone())).collect();
    members[0].raft.initialize(nodes).await.unwrap();
    let all: Vec<&Member> = members.iter().collect();
    let first = leader(&all).await;
    let lead = members.iter().find(|m| m.id == first).unwrap();
    let lsn = write(lead, 0..20).await;
    for m in &members {
        applied(m, lsn).await;
    }

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
