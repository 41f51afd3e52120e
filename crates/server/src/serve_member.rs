//! Serving as a member of a replica group (`--node-id`): the member
//! (`uuidmap_cluster::replica::Replica`) is started on the data directory,
//! its Raft service is served on its own listener (`--raft-listen`), and,
//! with `--cluster-init`, the group is made of this member and
//! `--peers`. The data and admin services then serve the member's
//! [`DurableIndex`] as they serve a single node's: reads from its index,
//! writes through its writer, which takes them while it leads and refuses
//! them otherwise with UNAVAILABLE and the leader in the `uuidmap-leader`
//! metadata.
//!
//! A member takes its own snapshots (`--raft-snapshot-entries`,
//! `--snapshot-interval`, and the admin `Snapshot` call) and starts from
//! the newest at a restart; one far behind is sent the leader's
//! (docs/replication.md, section 4). What a member does not do yet:
//! Watch (refused with UNIMPLEMENTED).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use uuidmap_cluster::ClusterNode;
use uuidmap_cluster::raft_tls::RaftTls;
use uuidmap_cluster::replica::{IndexRaft, Replica, ReplicaConfig};
use uuidmap_engine::store::Io;
use uuidmap_engine::writer::{DurableConfig, DurableIndex, FsyncPolicy};

use crate::ServeError;
use crate::config::{ClusterOptions, ServeConfig};

/// A running member and its Raft service.
pub(crate) struct Member {
    replica: Replica,
    /// Its peers are asked who they are over it (`--cluster-init`).
    raft_tls: Option<RaftTls>,
    /// Where its Redis-protocol port listens, for the membership
    /// `--cluster-init` makes; empty: none.
    resp_addr: String,
    raft_server: JoinHandle<Result<(), tonic::transport::Error>>,
    stop_raft: oneshot::Sender<()>,
}

/// Starts the member on `config.data_dir`, serving Raft on `raft_listener`.
pub(crate) async fn start(
    config: &ServeConfig,
    cluster: &ClusterOptions,
    durable: DurableConfig,
    io: Arc<dyn Io>,
    raft_listener: TcpListener,
) -> Result<Member, ServeError> {
    let mut replica_config = ReplicaConfig::new(cluster.node_id, &config.data_dir);
    replica_config.io = io;
    // The Raft log is the member's WAL: `--wal-file-bytes` and
    // `--wal-preallocate` are its settings.
    replica_config.wal.segment_bytes = durable.wal_segment_bytes;
    replica_config.wal.preallocate = durable.wal_preallocate;
    replica_config.durable = durable;
    replica_config.snapshot_entries = cluster.snapshot_entries;
    replica_config.logs_to_keep = cluster.keep_entries;
    // `--raft-dial`: these members' Raft services are reached elsewhere
    // than the membership says (a proxy, a NAT'd address).
    replica_config.peer_overrides = cluster.dial.clone();
    // The log store fsyncs each group of appends under `always`; under the
    // other policies an append counts once written (the group's other
    // members hold it too).
    replica_config.sync = config.fsync == FsyncPolicy::Always;
    // Read before the data directory is opened: a bad file stops the
    // start at once, naming it.
    let raft_tls = match &cluster.tls {
        Some(files) => Some(crate::tls::raft_tls(cluster.node_id, files)?),
        None => None,
    };
    replica_config.tls = raft_tls.clone();
    replica_config.resp_addr = cluster.resp_advertise.clone();
    let replica = Replica::start(replica_config)
        .await
        .map_err(ServeError::Member)?;
    // Before its Raft service answers anyone (a vote above all).
    if let Err(e) = refuse_a_forgotten_member(&replica, cluster).await {
        replica.shutdown().await;
        return Err(e);
    }
    let (stop_raft, stopped) = oneshot::channel::<()>();
    let service = replica.raft_service();
    let mut builder = match uuidmap_cluster::raft_service::raft_server(raft_tls.as_ref()) {
        Ok(b) => b,
        Err(e) => {
            replica.shutdown().await;
            return Err(ServeError::Transport(e));
        }
    };
    let raft_server = tokio::spawn(builder.add_service(service).serve_with_incoming_shutdown(
        tonic::transport::server::TcpIncoming::from(raft_listener).with_nodelay(Some(true)),
        async {
            let _ = stopped.await;
        },
    ));
    let member = Member {
        replica,
        raft_tls,
        resp_addr: cluster.resp_advertise.clone(),
        raft_server,
        stop_raft,
    };
    if cluster.init {
        member.init(cluster).await?;
    }
    tracing::info!(
        node_id = cluster.node_id,
        raft_listen = %cluster.raft_listen,
        raft_advertise = %cluster.raft_advertise,
        advertise_url = %cluster.advertise_url,
        peers = cluster.peers.len(),
        raft_tls = cluster.tls.is_some(),
        dial = ?cluster.dial,
        "serving as a member of a replica group"
    );
    Ok(member)
}

impl Member {
    /// Makes the group of this member and its peers, unless it is made.
    async fn init(&self, cluster: &ClusterOptions) -> Result<(), ServeError> {
        let raft = self.replica.raft();
        let made = raft
            .is_initialized()
            .await
            .map_err(|e| ServeError::RaftFailed(e.to_string()))?;
        if made {
            tracing::info!("--cluster-init: the group is made already; nothing to do");
            return Ok(());
        }
        // A member started with --cluster-init on an empty directory (a
        // wiped one, say) must not make a second group beside the one its
        // peers are in. A peer that answers is asked; one that does not
        // (the first start of every member at once) proves nothing.
        for p in &cluster.peers {
            if let Some(uuidmap_proto::v1::ClusterStats { voters, .. }) =
                peer_group(&p.client_url).await
            {
                return Err(ServeError::RaftFailed(format!(
                    "--cluster-init: peer {} ({}) is already in a group (voters {voters:?}); \
                     making another would split it. Start this member without --cluster-init \
                     and add it with `uuidmap cluster add` (remove it first if it was a member \
                     that lost its data)",
                    p.id, p.client_url
                )));
            }
        }
        let mut members = BTreeMap::new();
        members.insert(
            cluster.node_id,
            ClusterNode {
                raft_addr: cluster.raft_advertise.clone(),
                api_url: cluster.advertise_url.clone(),
                incarnation: self.replica.identity().incarnation,
                resp_addr: self.resp_addr.clone(),
            },
        );
        let identities = futures_util::future::join_all(
            cluster
                .peers
                .iter()
                .map(|p| peer_identity(p, self.raft_tls.as_ref())),
        )
        .await;
        for (p, found) in cluster.peers.iter().zip(identities) {
            let (incarnation, resp_addr) = found?;
            members.insert(
                p.id,
                ClusterNode {
                    raft_addr: p.raft_addr.clone(),
                    api_url: p.client_url.clone(),
                    incarnation,
                    resp_addr,
                },
            );
        }
        let voters = members.len();
        raft.initialize(members)
            .await
            .map_err(|e| ServeError::RaftFailed(format!("making the group failed: {e}")))?;
        tracing::info!(voters, "--cluster-init: the group is made");
        Ok(())
    }

    /// Its Raft TLS (`None`: plaintext).
    pub(crate) fn raft_tls(&self) -> Option<RaftTls> {
        self.raft_tls.clone()
    }

    /// The index the services serve.
    pub(crate) fn durable(&self) -> Arc<DurableIndex> {
        self.replica.durable().clone()
    }

    /// Its view of the group, read when asked.
    pub(crate) fn view(&self) -> crate::ClusterView {
        let view = self.replica.status_view();
        let read_index = self.replica.read_index().clone();
        Arc::new(move || {
            let mut status = view();
            status.read_index_rounds = read_index.rounds();
            status
        })
    }

    /// The member.
    pub(crate) fn replica(&self) -> &uuidmap_cluster::replica::Replica {
        &self.replica
    }

    /// What its reads consult for their consistency (`read_gate`).
    pub(crate) fn reads(&self) -> crate::read_gate::MemberReads {
        crate::read_gate::MemberReads {
            read_index: self.replica.read_index().clone(),
            staleness: self.replica.staleness().clone(),
            lease: self
                .replica
                .durable()
                .read_lease()
                .expect("a member's index has a read lease")
                .clone(),
        }
    }

    /// openraft, to watch for its failure.
    pub(crate) fn raft(&self) -> IndexRaft {
        self.replica.raft().clone()
    }

    /// Stops Raft (its service, then openraft, which syncs the log), then
    /// the writer.
    pub(crate) async fn stop(self) {
        let _ = self.stop_raft.send(());
        match self.raft_server.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("the Raft service ended with an error: {e}"),
            Err(e) => tracing::warn!("the Raft service's task failed: {e}"),
        }
        self.replica.shutdown().await;
    }
}

/// How long `--cluster-init` waits for each peer to say which node it is.
const IDENTIFY_WAIT: Duration = Duration::from_secs(5);

/// The incarnation of peer `p` for the membership `--cluster-init` makes
/// (uuidmap_cluster::identity), and its Redis-protocol address: asked
/// until it answers, for up to [`IDENTIFY_WAIT`] (its members start at
/// about the same time). A peer that does not answer is recorded as
/// unknown (incarnation 0, not checked; no Redis-protocol address), with a
/// warning; one that answers with another node id stops the start. With
/// `tls`, the peer proves its node id by its certificate.
async fn peer_identity(
    p: &crate::config::Peer,
    tls: Option<&RaftTls>,
) -> Result<(u64, String), ServeError> {
    let until = tokio::time::Instant::now() + IDENTIFY_WAIT;
    loop {
        let asked = uuidmap_cluster::network::identify_member(
            &p.raft_addr,
            p.id,
            tls,
            Duration::from_secs(1),
        );
        match asked.await {
            Ok(found) if found.identity.node_id == p.id => {
                return Ok((found.identity.incarnation, found.resp_addr));
            }
            Ok(found) => {
                return Err(ServeError::RaftFailed(format!(
                    "--cluster-init: peer {} is listed at {}, but the member there is node {}: \
                     check --peers",
                    p.id, p.raft_addr, found.identity.node_id
                )));
            }
            Err(e) if tokio::time::Instant::now() >= until => {
                tracing::warn!(
                    peer = p.id,
                    "--cluster-init: the peer did not say which node it is ({e}); the group \
                     records it without an incarnation, so a replaced directory under its id is \
                     not recognised until it is removed and added again"
                );
                return Ok((0, String::new()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The voters of the group the server at `url` is in, if it answers
/// within a second and is in one.
async fn peer_group(url: &str) -> Option<uuidmap_proto::v1::ClusterStats> {
    use pb::uuid_map_cluster_client::UuidMapClusterClient;
    use uuidmap_proto::v1 as pb;
    let ask = async {
        let channel = tonic::transport::Endpoint::from_shared(url.to_string())
            .ok()?
            .connect_timeout(std::time::Duration::from_secs(1))
            .connect()
            .await
            .ok()?;
        let status = UuidMapClusterClient::new(channel)
            .status(pb::ClusterStatusRequest {})
            .await
            .ok()?
            .into_inner();
        (!status.voters.is_empty()).then_some(status)
    };
    tokio::time::timeout(std::time::Duration::from_secs(2), ask)
        .await
        .ok()
        .flatten()
}

/// Refuses a member that starts with no Raft state (an empty directory,
/// a lost disk) while its group's leader knows it acknowledged entries
/// before: a voter that forgot its log and its vote could help elect a
/// leader that lacks acknowledged writes, and the leader would find the
/// member's log gone backwards. It must be removed first, then added
/// again (README, "Replica groups"). Best effort: it asks the peers given
/// with `--peers`, and only a leader that has replicated to this member
/// since it took over knows; a member started for the first time (listed
/// by `--cluster-init` before it ever ran) has acknowledged nothing, and
/// starts. The guard that always holds is the incarnation check on every
/// Raft call (`uuidmap_cluster::identity`); this one stops the process at
/// once, with the steps, where it can tell.
async fn refuse_a_forgotten_member(
    replica: &Replica,
    cluster: &ClusterOptions,
) -> Result<(), ServeError> {
    let initialized = replica
        .raft()
        .is_initialized()
        .await
        .map_err(|e| ServeError::RaftFailed(e.to_string()))?;
    if initialized || cluster.init {
        return Ok(());
    }
    let id = cluster.node_id;
    for p in &cluster.peers {
        let Some(group) = peer_group(&p.client_url).await else {
            continue;
        };
        let acknowledged = group.role == "leader"
            && group
                .followers
                .iter()
                .any(|f| f.node_id == id && f.matched_index.is_some());
        if acknowledged {
            return Err(ServeError::RaftFailed(format!(
                "node {id} is a member of the group led by peer {} ({}; voters {:?}), which \
                 replicated its log to it, but its data directory holds no Raft state: it lost \
                 its data, and a member that forgot what it acknowledged may lose acknowledged \
                 writes. Remove it first (`uuidmap cluster remove {id}`), then start it and add \
                 it again (`uuidmap cluster add`): it catches up from the leader's snapshot",
                p.id, p.client_url, group.voters
            )));
        }
    }
    Ok(())
}

/// Resolves when openraft has stopped on a fatal error (its log could
/// not be written, say), with the error; never while it runs, nor after
/// a clean stop.
///
/// It watches openraft's server metrics, which change with the state, the
/// leader or the membership, not its whole metrics, which change (and
/// would wake this task, on the main thread) at every write. openraft
/// drops their sender when its core stops, after it recorded why in the
/// whole metrics' `running_state`.
pub(crate) async fn failed(raft: IndexRaft) -> String {
    let mut server = raft.server_metrics();
    let mut stopped = false;
    loop {
        if let Err(e) = &raft.metrics().borrow_watched().running_state {
            return e.to_string();
        }
        if stopped {
            // A clean stop.
            std::future::pending::<()>().await;
        }
        stopped = server.changed().await.is_err();
    }
}
