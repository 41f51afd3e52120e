//! [`TestGroup`]: a replica group of real servers (`serve --node-id`) in
//! the test's runtime, on ephemeral loopback ports, each member with its
//! own data directory; members can be stopped and started again on the
//! same ports and directory.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

use tempfile::TempDir;
use tokio::net::TcpListener;
use uuidmap_server::config::{ClusterOptions, Peer};
use uuidmap_server::{ServeConfig, ServeError};

use super::{TestServer, config};
use crate::ports::unused_addr;
use crate::proxy::FaultProxy;

/// The tests' configuration ([`config`]) for member `id`, serving clients
/// on `listen` and Raft on `raft`; `init`: it makes the group.
pub fn member_config(
    dir: &Path,
    id: u64,
    listen: SocketAddr,
    raft: SocketAddr,
    peers: Vec<Peer>,
    init: bool,
) -> ServeConfig {
    let mut c = config(dir);
    c.listen = listen;
    c.cluster = Some(ClusterOptions {
        node_id: id,
        raft_listen: raft,
        raft_advertise: raft.to_string(),
        advertise_url: format!("http://{listen}"),
        resp_advertise: String::new(),
        peers,
        init,
        snapshot_entries: uuidmap_cluster::replica::SNAPSHOT_ENTRIES,
        // Short, so that a snapshot taken on request purges the log of a
        // test's few writes.
        keep_entries: 5,
        dial: Default::default(),
        tls: None,
        raft_insecure: false,
    });
    c
}

/// Member `i`'s peers (0-based; node ids from 1) in a group whose members
/// serve clients and Raft at `addrs` (client, Raft), in member order.
fn peers_of(i: usize, addrs: &[(SocketAddr, SocketAddr)]) -> Vec<Peer> {
    addrs
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(j, (client, raft))| Peer {
            id: j as u64 + 1,
            raft_addr: raft.to_string(),
            client_url: format!("http://{client}"),
        })
        .collect()
}

/// [`member_config`] for member `i` (0-based) of a group whose members
/// serve clients and Raft at `addrs`: its peers are the others, and
/// member 0 makes the group.
pub fn group_member_config(
    dir: &Path,
    i: usize,
    addrs: &[(SocketAddr, SocketAddr)],
) -> ServeConfig {
    member_config(
        dir,
        i as u64 + 1,
        addrs[i].0,
        addrs[i].1,
        peers_of(i, addrs),
        i == 0,
    )
}

/// A change made to every member's configuration before it starts.
pub type Configure = std::sync::Arc<dyn Fn(&mut ServeConfig) + Send + Sync>;

/// A running group; member `i` (from 0) has node id `i + 1`.
pub struct TestGroup {
    members: Vec<Option<TestServer>>,
    configs: Vec<ServeConfig>,
    dirs: Vec<TempDir>,
    configure: Configure,
}

async fn bind(addr: SocketAddr) -> TcpListener {
    TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("cannot bind {addr}: {e}"))
}

impl TestGroup {
    /// Starts `n` members; member 1 makes the group of all of them.
    pub async fn start(n: usize) -> TestGroup {
        TestGroup::start_inner(n, false, std::sync::Arc::new(|_| {}))
            .await
            .0
    }

    /// [`TestGroup::start`], with `configure` applied to each member's
    /// configuration (the extra members' too).
    pub async fn start_configured(n: usize, configure: Configure) -> TestGroup {
        TestGroup::start_inner(n, false, configure).await.0
    }

    /// [`TestGroup::start`], with every Raft link through a fault proxy of
    /// its own (`proxies[(i, j)]`: where node `i` dials node `j`, by
    /// `--raft-dial`), and each member's metrics endpoint served.
    pub async fn start_proxied(n: usize) -> (TestGroup, HashMap<(u64, u64), FaultProxy>) {
        TestGroup::start_inner(n, true, std::sync::Arc::new(|_| {})).await
    }

    async fn start_inner(
        n: usize,
        proxied: bool,
        configure: Configure,
    ) -> (TestGroup, HashMap<(u64, u64), FaultProxy>) {
        let mut listeners = Vec::new();
        for _ in 0..n {
            // Ports outside bind(0)'s range, so that a restarted member
            // finds its ports still free.
            listeners.push((bind(unused_addr()).await, bind(unused_addr()).await));
        }
        let addrs: Vec<(SocketAddr, SocketAddr)> = listeners
            .iter()
            .map(|(l, r)| (l.local_addr().unwrap(), r.local_addr().unwrap()))
            .collect();
        let dirs: Vec<TempDir> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut proxies = HashMap::new();
        if proxied {
            for i in 1..=n as u64 {
                for j in (1..=n as u64).filter(|&j| j != i) {
                    let target = addrs[j as usize - 1].1;
                    proxies.insert((i, j), FaultProxy::start(target).await);
                }
            }
        }
        let mut configs = Vec::new();
        let mut members = Vec::new();
        for (i, (l, r)) in listeners.into_iter().enumerate() {
            let mut c = group_member_config(dirs[i].path(), i, &addrs);
            configure(&mut c);
            if proxied {
                let id = i as u64 + 1;
                let cluster = c.cluster.as_mut().expect("a member");
                for ((from, to), p) in &proxies {
                    if *from == id {
                        cluster.dial.insert(*to, p.addr.to_string());
                    }
                }
                c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
            }
            configs.push(c.clone());
            members.push(Some(TestServer::start_member(c, l, r).await));
        }
        let group = TestGroup {
            members,
            configs,
            dirs,
            configure,
        };
        (group, proxies)
    }

    /// Every member's client URL, in member order.
    pub fn urls(&self) -> Vec<String> {
        self.configs
            .iter()
            .map(|c| format!("http://{}", c.listen))
            .collect()
    }

    /// Member `i`, if it runs.
    pub fn member(&self, i: usize) -> Option<&TestServer> {
        self.members[i].as_ref()
    }

    /// Starts one more member (node id: its position + 1) on a fresh
    /// directory and ports, in no group yet: it waits to be added
    /// (`UuidMapCluster.AddLearner` on the leader). Returns its position.
    pub async fn start_extra(&mut self) -> usize {
        let (l, r) = (bind(unused_addr()).await, bind(unused_addr()).await);
        let i = self.members.len();
        let dir = tempfile::tempdir().unwrap();
        let mut c = member_config(
            dir.path(),
            i as u64 + 1,
            l.local_addr().unwrap(),
            r.local_addr().unwrap(),
            Vec::new(),
            false,
        );
        (self.configure)(&mut c);
        self.configs.push(c.clone());
        self.dirs.push(dir);
        self.members
            .push(Some(TestServer::start_member(c, l, r).await));
        i
    }

    /// Member `i`'s Raft address and client URL, as `AddLearner` takes them.
    pub fn addresses(&self, i: usize) -> (String, String) {
        let c = &self.configs[i];
        let cluster = c.cluster.as_ref().expect("a member");
        (
            cluster.raft_advertise.clone(),
            format!("http://{}", c.listen),
        )
    }

    /// Member `i`'s data directory.
    pub fn dir(&self, i: usize) -> &Path {
        self.dirs[i].path()
    }

    /// Stops member `i` and empties its data directory (a lost disk).
    pub async fn wipe_member(&mut self, i: usize) {
        if self.members[i].is_some() {
            self.stop_member(i).await.expect("a clean stop");
        }
        let dir = self.dirs[i].path();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
            }
        }
        // It comes back knowing no group: not the one that made it.
        if let Some(c) = self.configs[i].cluster.as_mut() {
            c.init = false;
        }
    }

    /// Sets whether member `i` starts with `--cluster-init` next time.
    pub fn set_init(&mut self, i: usize, init: bool) {
        if let Some(c) = self.configs[i].cluster.as_mut() {
            c.init = init;
        }
    }

    /// Stops member `i` gracefully; its result.
    pub async fn stop_member(&mut self, i: usize) -> Result<(), ServeError> {
        let m = self.members[i].take().expect("the member runs");
        m.stop().await
    }

    /// Starts member `i` again on its directory and ports.
    pub async fn restart_member(&mut self, i: usize) {
        assert!(self.members[i].is_none(), "stop it first");
        let c = self.configs[i].clone();
        let cluster = c.cluster.clone().expect("a member");
        let (l, r) = (bind(c.listen).await, bind(cluster.raft_listen).await);
        self.members[i] = Some(TestServer::start_member(c, l, r).await);
    }

    /// The member that takes writes now: tries a write on each until one
    /// is taken (up to 15 s); returns its position.
    pub async fn leader(&self) -> usize {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            for (i, m) in self.members.iter().enumerate() {
                let Some(m) = m else { continue };
                let probe = uuidmap_proto::v1::DeleteRequest {
                    key: super::b(uuid::Uuid::from_u128(u128::MAX - 1)),
                };
                if m.client().await.delete(probe).await.is_ok() {
                    return i;
                }
            }
            assert!(
                std::time::Instant::now() < until,
                "no member took a write within 15 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Stops every member still running; each must stop cleanly.
    pub async fn stop(mut self) {
        for i in 0..self.members.len() {
            if self.members[i].is_some() {
                self.stop_member(i).await.expect("a clean stop");
            }
        }
    }
}
