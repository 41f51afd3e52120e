//! [`ReplicaNode`]: a whole member over the real index
//! (`uuidmap_cluster::replica::Replica`) in this process, its Raft service
//! on a loopback port, for the cluster crate's tests.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use uuid::Uuid;
use uuidmap_cluster::ClusterNode;
use uuidmap_cluster::replica::{Replica, ReplicaConfig};
use uuidmap_engine::writer::{WriteError, WriteOp, WriteOutcome};

/// A running member and its Raft service.
pub struct ReplicaNode {
    /// The member.
    pub replica: Replica,
    /// Its addresses, as the membership records them (the client URL is
    /// made up: these members serve no client port).
    pub node: ClusterNode,
    stop: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
    dir: TempDir,
}

impl ReplicaNode {
    /// Starts member `id` on `dir`, its Raft service on `listener`;
    /// `overrides`: Raft addresses to dial instead of the membership's, by
    /// node id (proxies between members).
    pub async fn start(
        id: u64,
        dir: TempDir,
        listener: TcpListener,
        overrides: HashMap<u64, String>,
    ) -> ReplicaNode {
        ReplicaNode::start_configured(id, dir, listener, overrides, |_| {}).await
    }

    /// [`ReplicaNode::start`], with `configure` applied to the member's
    /// configuration first.
    pub async fn start_configured(
        id: u64,
        dir: TempDir,
        listener: TcpListener,
        overrides: HashMap<u64, String>,
        configure: impl FnOnce(&mut ReplicaConfig),
    ) -> ReplicaNode {
        let addr = listener.local_addr().unwrap().to_string();
        let mut config = ReplicaConfig::new(id, dir.path());
        config.peer_overrides = overrides;
        configure(&mut config);
        let replica = Replica::start(config).await.expect("the member starts");
        let incarnation = replica.identity().incarnation;
        let service = replica.raft_service();
        let (stop, server) = super::serve_raft(service, listener, replica.tls());
        ReplicaNode {
            replica,
            node: ClusterNode {
                raft_addr: addr,
                api_url: format!("http://client-port-of-{id}:7000"),
                incarnation,
                resp_addr: String::new(),
            },
            stop: Some((stop, server)),
            dir,
        }
    }

    /// Starts member `id` on `dir` with its Raft service on `addr` (the
    /// address it had before a stop: the membership records it), with
    /// `configure` applied to its configuration.
    pub async fn start_at(
        id: u64,
        dir: TempDir,
        addr: &str,
        configure: impl FnOnce(&mut ReplicaConfig),
    ) -> ReplicaNode {
        let listener = TcpListener::bind(addr)
            .await
            .expect("the member's port again");
        ReplicaNode::start_configured(id, dir, listener, HashMap::new(), configure).await
    }

    /// Starts `n` members (ids 1..=n) on fresh directories and loopback
    /// ports, and makes them a group.
    pub async fn group(n: u64) -> Vec<ReplicaNode> {
        let mut listeners = Vec::new();
        for _ in 0..n {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        ReplicaNode::group_on(listeners, HashMap::new()).await
    }

    /// Starts a member on each of `listeners` (ids 1..=n, in order) on
    /// fresh directories, and makes them a group; `overrides[i][j]` is the
    /// address member `i` dials for member `j` (absent: its listener).
    pub async fn group_on(
        listeners: Vec<TcpListener>,
        overrides: HashMap<u64, HashMap<u64, String>>,
    ) -> Vec<ReplicaNode> {
        ReplicaNode::group_configured(listeners, overrides, |_| {}).await
    }

    /// [`ReplicaNode::group_on`], with `configure` applied to every
    /// member's configuration.
    pub async fn group_configured(
        listeners: Vec<TcpListener>,
        mut overrides: HashMap<u64, HashMap<u64, String>>,
        configure: impl Fn(&mut ReplicaConfig),
    ) -> Vec<ReplicaNode> {
        let mut nodes = Vec::new();
        for (i, listener) in listeners.into_iter().enumerate() {
            let id = i as u64 + 1;
            let map = overrides.remove(&id).unwrap_or_default();
            let dir = tempfile::tempdir().unwrap();
            nodes.push(ReplicaNode::start_configured(id, dir, listener, map, &configure).await);
        }
        let members: BTreeMap<u64, ClusterNode> =
            nodes.iter().map(|n| (n.id(), n.node.clone())).collect();
        nodes[0]
            .replica
            .raft()
            .initialize(members)
            .await
            .expect("the group initializes");
        nodes
    }

    /// Its data directory.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Its node id.
    pub fn id(&self) -> u64 {
        self.replica.id()
    }

    /// Submits a batch to its writer.
    pub async fn write(&self, ops: Vec<WriteOp>) -> Result<WriteOutcome, WriteError> {
        self.replica.writes().write(ops).await
    }

    /// Waits until it has applied `lsn` (up to 20 s).
    pub async fn applied(&self, lsn: u64) {
        self.replica
            .watermark()
            .wait_for(
                lsn,
                Some(tokio::time::Instant::now() + Duration::from_secs(20)),
            )
            .await
            .unwrap_or_else(|e| panic!("member {} did not apply LSN {lsn}: {e}", self.id()));
    }

    /// Its whole index, by a full scan.
    pub fn contents(&self) -> BTreeMap<Uuid, Uuid> {
        let mut out = Vec::new();
        let mut scanner = self.replica.index().scan();
        while scanner.next_segment(&mut out).is_some() {}
        out.into_iter().collect()
    }

    /// Stops it; returns its directory and Raft address, to start it again.
    pub async fn stop(mut self) -> (u64, TempDir, String) {
        if let Some((stop, server)) = self.stop.take() {
            let _ = stop.send(());
            server.await.unwrap();
        }
        let (id, addr) = (self.id(), self.node.raft_addr.clone());
        self.replica.shutdown().await;
        (id, self.dir, addr)
    }
}

/// The member among `nodes` that takes writes now (tries a harmless write
/// on each until one is taken; up to 15 s); its position.
pub async fn writable_leader(nodes: &[ReplicaNode]) -> usize {
    let probe = uuidmap_engine::writer::Key::new(Uuid::from_u128(u64::MAX as u128)).unwrap();
    for _ in 0..300 {
        for (i, n) in nodes.iter().enumerate() {
            if n.write(vec![WriteOp::Delete { key: probe }]).await.is_ok() {
                return i;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no member took a write within 15 s");
}

/// Writes `batch(b)` for each `b` of `range` through the member that
/// takes writes; returns the last LSN.
pub async fn write_batches(
    nodes: &[ReplicaNode],
    range: std::ops::Range<u128>,
    batch: impl Fn(u128) -> Vec<WriteOp>,
) -> u64 {
    let l = writable_leader(nodes).await;
    let mut last = 0;
    for b in range {
        last = nodes[l]
            .write(batch(b))
            .await
            .expect("the leader takes it")
            .lsn;
    }
    last
}
