//! [`Member`]: one member of a replica group in this process, for tests
//! and benches: a `WalLogStore` in its own directory, a [`KvMachine`], and
//! the Raft service on a loopback port, with the product's timing.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use openraft::Raft;
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use uuidmap_cluster::log_store::{LogStats, LogStoreConfig, TAIL_ENTRIES, WalLogStore};
use uuidmap_cluster::network::GrpcNetworkFactory;
use uuidmap_cluster::raft_service::RaftService;
use uuidmap_cluster::timing::{RaftTiming, raft_config};
use uuidmap_cluster::{ClusterNode, UuidmapRaft};
use uuidmap_engine::store::OsIo;
use uuidmap_engine::store::wal::WalOptions;

use super::KvMachine;

/// A running member.
pub struct Member {
    /// Its node id.
    pub id: u64,
    /// Its Raft.
    pub raft: Raft<UuidmapRaft, KvMachine>,
    /// Its state machine.
    pub machine: KvMachine,
    /// Its addresses, as the membership records them.
    pub node: ClusterNode,
    /// What its log thread has done.
    pub log: Arc<LogStats>,
    stop: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
    dir: Option<TempDir>,
}

impl Member {
    /// Starts member `id` in a new directory under the system temp dir,
    /// its Raft service on an ephemeral loopback port.
    pub async fn start(id: u64) -> Member {
        let dir = tempfile::tempdir().expect("a temp dir");
        Member::start_in(id, dir, "127.0.0.1:0").await
    }

    /// Starts member `id` on the data directory `dir` (new, or one it ran
    /// on before), its Raft service listening on `listen`.
    pub async fn start_in(id: u64, dir: TempDir, listen: &str) -> Member {
        let listener = TcpListener::bind(listen).await.expect("a loopback port");
        let addr = listener.local_addr().expect("bound").to_string();
        let store = WalLogStore::open(LogStoreConfig {
            io: Arc::new(OsIo),
            dir: dir.path().to_path_buf(),
            wal: WalOptions::default(),
            sync: true,
            tail_entries: TAIL_ENTRIES,
        })
        .expect("the log store opens");
        let log = store.stats();
        let identity = uuidmap_cluster::identity::load_or_create(&OsIo, dir.path(), id)
            .expect("the member's identity");
        let machine = KvMachine::new(dir.path());
        let network = GrpcNetworkFactory {
            id,
            overrides: Arc::new(HashMap::new()),
            tls: None,
            ..Default::default()
        };
        let config = raft_config(&RaftTiming::default()).expect("the product's timing is valid");
        let raft = Raft::new(id, config, network, store, machine.clone())
            .await
            .expect("openraft starts");
        let service = RaftService::new(
            raft.clone(),
            dir.path().to_path_buf(),
            Arc::new(OsIo),
            identity,
        )
        .into_server();
        let (stop, server) = super::serve_raft(service, listener, None);
        Member {
            id,
            raft,
            machine,
            node: ClusterNode {
                raft_addr: addr,
                api_url: format!("http://api-of-{id}"),
                incarnation: identity.incarnation,
                resp_addr: String::new(),
            },
            log,
            stop: Some((stop, server)),
            dir: Some(dir),
        }
    }

    /// Starts `n` members (ids 1..=n) and makes them a group, member 1
    /// initializing it; returns once a leader leads.
    pub async fn group(n: u64) -> Vec<Member> {
        let mut members = Vec::new();
        for id in 1..=n {
            members.push(Member::start(id).await);
        }
        let nodes: BTreeMap<u64, ClusterNode> =
            members.iter().map(|m| (m.id, m.node.clone())).collect();
        members[0]
            .raft
            .initialize(nodes)
            .await
            .expect("the group initializes");
        let all: Vec<&Member> = members.iter().collect();
        leader(&all).await;
        members
    }

    /// Stops its Raft and its service.
    pub async fn stop(&mut self) {
        self.raft.shutdown().await.expect("openraft stops");
        if let Some((stop, server)) = self.stop.take() {
            let _ = stop.send(());
            server.await.expect("the service stops");
        }
    }

    /// Stops and starts again on the same directory and address, as an
    /// operator restart does.
    pub async fn restart(mut self) -> Member {
        self.stop().await;
        let dir = self.dir.take().expect("a directory");
        let (id, addr) = (self.id, self.node.raft_addr.clone());
        drop(self);
        Member::start_in(id, dir, &addr).await
    }
}

/// The member that leads, once one of `members` does and knows it
/// (waits up to 10 s; panics otherwise).
pub async fn leader(members: &[&Member]) -> u64 {
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
    let id = m.current_leader.expect("a leader");
    // Until the leader itself knows it leads (and has committed its first
    // entry), a write is sent back with ForwardToLeader.
    let lead = members.iter().find(|x| x.id == id).expect("a member");
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
