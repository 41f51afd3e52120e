//! The server's wiring. Lifecycle of [`serve_on`]: refuse a non-loopback address unless it is
//! protected or `insecure` (see [`check_listen_address`]); read the TLS
//! files and the tokens file; recover the data directory;
//! serve with TCP_NODELAY on every accepted socket; when `shutdown`
//! resolves, stop accepting, end the waits in progress (`min_lsn`,
//! `WaitFor`) with UNAVAILABLE instead of holding the stop for up to their
//! deadlines, let the other in-flight RPCs finish and the connections close,
//! then shut the index down (queued writes drained and synced, a final
//! snapshot). When the stop begins, every health status turns NOT_SERVING
//! and is then cleared: a health `Watch` stream receives NOT_SERVING and
//! ends, instead of holding the graceful stop forever; a reflection stream
//! still open ends with UNAVAILABLE (`end_on_stop`). The metrics endpoint
//! stops accepting at the same time. Calls still open `stop_grace` after
//! the stop began (a stream whose client stopped reading holds its sender
//! and its HTTP/2 stream) are closed, and the index is shut down anyway.
//!
//! TCP_NODELAY: tonic's `Server::tcp_nodelay` is ignored on the
//! `serve_with_incoming*` paths, which we use (to serve a listener bound by
//! the caller, e.g. on port 0). So it is set on the [`TcpIncoming`] itself.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::codec::CompressionEncoding::Gzip;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_reflection::pb::v1::server_reflection_server::ServerReflectionServer;
use tonic_reflection::pb::v1alpha::server_reflection_server::ServerReflectionServer as ServerReflectionServerV1Alpha;

use crate::front_end::{FrontEnd, Shared};
use crate::transport_errors;
use crate::{ClusterView, ServeConfig, ServeError};
use crate::{
    admin, admission, auth, cluster_service, deadline, end_on_stop, read_gate, serve_partitioned,
};
use crate::{lookup, metrics, metrics_endpoint, reflection, serve_member, service, tls};
use uuidmap_engine::store::{Io, OsIo};
use uuidmap_engine::writer::{DurableConfig, DurableIndex};
use uuidmap_proto::v1::uuid_map_admin_server::UuidMapAdminServer;
use uuidmap_proto::v1::uuid_map_cluster_server::UuidMapClusterServer;
use uuidmap_proto::v1::uuid_map_server::UuidMapServer;

/// HTTP/2 flow-control windows. The defaults (64 KiB) cap one stream at
/// 64 KiB per round trip; large batch answers and (later) scans need more.
const CONNECTION_WINDOW: u32 = 16 << 20;
const STREAM_WINDOW: u32 = 4 << 20;

/// The loopback rule: a loopback address may be served as configured; any
/// other needs TLS *and* client authentication (bearer tokens, or client
/// certificates verified against the client CA), unless `insecure`.
/// TLS alone is not enough (anyone could connect and change every entry),
/// and tokens alone are not either (they would cross the network in clear).
pub fn check_listen_address(addr: SocketAddr, config: &ServeConfig) -> Result<(), ServeError> {
    let tls = config.tls.is_some();
    let client_auth =
        config.tokens_file.is_some() || config.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
    let missing = match (tls, client_auth) {
        (true, true) => return Ok(()),
        (false, false) => "neither TLS nor client authentication is configured",
        (false, true) => "TLS is not configured, so tokens would cross the network in clear",
        (true, false) => "no client authentication is configured",
    };
    if addr.ip().is_loopback() || config.insecure {
        Ok(())
    } else {
        Err(ServeError::NotLoopback { addr, missing })
    }
}

/// The loopback rule of the metrics endpoint: it has neither TLS nor
/// authentication, so a non-loopback address needs `insecure`, as the gRPC
/// port does without TLS and client authentication. Metrics hold only
/// counts, but those still tell an outsider the load, the size of the map
/// and when it is being rebalanced; serving them publicly is a choice.
pub fn check_metrics_address(addr: SocketAddr, config: &ServeConfig) -> Result<(), ServeError> {
    if addr.ip().is_loopback() || config.insecure {
        Ok(())
    } else {
        Err(ServeError::MetricsNotLoopback { addr })
    }
}

/// What protects the server: read once at start, immutable after.
struct Security {
    /// TLS (and mTLS), or plaintext.
    tls: Option<tonic::transport::ServerTlsConfig>,
    /// Bearer tokens, or none needed.
    tokens: Option<Arc<auth::Tokens>>,
}

impl Security {
    fn load(config: &ServeConfig) -> Result<Security, ServeError> {
        let tls = config.tls.as_ref().map(tls::server_config).transpose()?;
        let tokens = match &config.tokens_file {
            Some(path) => Some(Arc::new(auth::Tokens::load(path)?)),
            None => None,
        };
        Ok(Security { tls, tokens })
    }
}

/// Binds `config.listen` and serves until `shutdown` resolves.
pub async fn serve(
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    serve_with(config, Vec::new(), shutdown).await
}

/// [`serve`], with other protocols' front ends beside gRPC (the binary's
/// `--resp-listen`), over the same handles.
pub async fn serve_with(
    config: ServeConfig,
    front_ends: Vec<Box<dyn FrontEnd>>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    check_listen_address(config.listen, &config)?;
    let listener = bind(config.listen).await?;
    serve_listener(listener, config, front_ends, shutdown).await
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Serves on an already bound `listener` (its address wins over
/// `config.listen`), and metrics on `config.metrics_listen`, until
/// `shutdown` resolves, then shuts down gracefully.
pub async fn serve_on(
    listener: TcpListener,
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    serve_listener(listener, config, Vec::new(), shutdown).await
}

/// Binds the metrics address, if any, and serves on `listener` with
/// `front_ends` beside gRPC.
async fn serve_listener(
    listener: TcpListener,
    config: ServeConfig,
    front_ends: Vec<Box<dyn FrontEnd>>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let metrics = match config.metrics_listen {
        Some(addr) => {
            check_metrics_address(addr, &config)?;
            Some(bind(addr).await?)
        }
        None => None,
    };
    let mut parts = ServerParts::new(listener, config).metrics(metrics);
    parts.front_ends = front_ends;
    parts.serve(shutdown).await
}

/// What a server is assembled from: its listeners, its options and the
/// file system under its data directory. [`serve`] and [`serve_on`] build
/// one; a caller that binds the metrics port itself (for example on port
/// 0) or runs the server on another file system (a test's simulated disk)
/// builds its own.
pub struct ServerParts {
    /// The gRPC listener; its address wins over `config.listen`.
    pub listener: TcpListener,
    /// The metrics listener; wins over `config.metrics_listen` (`None`:
    /// metrics off).
    pub metrics: Option<TcpListener>,
    /// The options.
    pub config: ServeConfig,
    /// The file system the data directory lives on.
    pub io: Arc<dyn Io>,
    /// A member's Raft listener; wins over the replica group options'
    /// `raft_listen` (`None`: bound from them, when there are any).
    pub raft: Option<TcpListener>,
    /// Other protocols served beside gRPC over the same handles
    /// (`front_end`); none by default.
    pub front_ends: Vec<Box<dyn FrontEnd>>,
}

impl ServerParts {
    /// A server on `listener` with `config`, metrics off, on the operating
    /// system's file system.
    pub fn new(listener: TcpListener, config: ServeConfig) -> ServerParts {
        ServerParts {
            listener,
            metrics: None,
            config,
            io: Arc::new(OsIo),
            raft: None,
            front_ends: Vec::new(),
        }
    }

    /// Serves `front_end` beside gRPC, over the same handles.
    pub fn front_end(mut self, front_end: Box<dyn FrontEnd>) -> ServerParts {
        self.front_ends.push(front_end);
        self
    }

    /// Serves a member's Raft calls on `listener` instead of binding
    /// `raft_listen` (for a caller that binds port 0).
    pub fn raft(mut self, listener: TcpListener) -> ServerParts {
        self.raft = Some(listener);
        self
    }

    /// Serves metrics on `listener` (`None`: off).
    pub fn metrics(mut self, listener: Option<TcpListener>) -> ServerParts {
        self.metrics = listener;
        self
    }

    /// Keeps the data directory on `io` instead of the operating system's
    /// file system.
    pub fn io(mut self, io: Arc<dyn Io>) -> ServerParts {
        self.io = io;
        self
    }

    /// Serves until `shutdown` resolves, then shuts down gracefully:
    /// in-flight calls finish, the writes drain, the final snapshot is
    /// taken and the directory is released.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), ServeError> {
        let ServerParts {
            listener,
            metrics,
            config,
            io,
            raft,
            front_ends,
        } = self;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
        check_listen_address(addr, &config)?;
        if let Some(m) = &metrics {
            let maddr = m.local_addr().map_err(|source| ServeError::Bind {
                addr: config.metrics_listen.unwrap_or(addr),
                source,
            })?;
            check_metrics_address(maddr, &config)?;
            // Before the first call, so no series is recorded into the void.
            metrics::install();
        }
        let security = Security::load(&config)?;
        let (durable, member) = match &config.cluster {
            None => (open(&config, io).await?, None),
            Some(cluster) => {
                let raft_listener = match raft {
                    Some(l) => l,
                    None => TcpListener::bind(cluster.raft_listen)
                        .await
                        .map_err(|source| ServeError::Bind {
                            addr: cluster.raft_listen,
                            source,
                        })?,
                };
                let raft_addr = raft_listener
                    .local_addr()
                    .map_err(|source| ServeError::Bind {
                        addr: cluster.raft_listen,
                        source,
                    })?;
                if !raft_addr.ip().is_loopback() && cluster.tls.is_none() && !cluster.raft_insecure
                {
                    return Err(ServeError::RaftNotLoopback { addr: raft_addr });
                }
                let durable = durable_config(&config, io.clone());
                let m = serve_member::start(&config, cluster, durable, io, raft_listener).await?;
                (m.durable(), Some(m))
            }
        };
        let partitioned = match &config.partitions {
            Some(p) => Some(
                serve_partitioned::Partitioned::start(
                    p,
                    &durable,
                    member.as_ref().map(|m| m.view()),
                )
                .await?,
            ),
            None => None,
        };
        let raft_failed = member.as_ref().map(|m| m.raft());
        let cluster = member.as_ref().map(|m| m.view());
        let member_reads = member.as_ref().map(|m| m.reads());
        let member_raft = member.as_ref().map(|m| m.raft());
        let raft_tls = member.as_ref().and_then(|m| m.raft_tls());
        let transfer = member.as_ref().map(|m| m.replica().leader_transfer());
        let (raft_failure_tx, raft_failure) = tokio::sync::oneshot::channel::<String>();
        let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
        let failing = durable.clone();
        let shutdown = async move {
            let raft_failed = async move {
                match raft_failed {
                    Some(raft) => serve_member::failed(raft).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown => {}
                e = failing.wal_failed() => tracing::error!(
                    "stopping: the WAL failed and no more writes can be acknowledged ({e}); \
                     restart the server to recover from what is on disk"
                ),
                e = raft_failed => {
                    tracing::error!(
                        "stopping: Raft stopped on a fatal error ({e}); restart the server to \
                         recover from what is on disk"
                    );
                    let _ = raft_failure_tx.send(e);
                }
            }
            drop(failing);
            // Wakes every wait in progress (see `DataService::wait_applied`).
            let _ = stopping_tx.send(true);
        };
        let assembled = Assembled {
            listener,
            metrics_listener: metrics,
            addr,
            security,
            durable: durable.clone(),
            cluster,
            member_reads,
            raft: member_raft,
            raft_tls,
            transfer,
            stopping,
            front_ends,
            ownership: partitioned.as_ref().map(|p| p.ownership()),
        };
        let result = run(assembled, &config, shutdown).await;
        if let Some(p) = partitioned {
            p.stop().await;
        }
        let failure = durable.wal_failure();
        if let Some(m) = member {
            m.stop().await;
        }
        close(durable).await?;
        result?;
        if let Ok(e) = raft_failure.await {
            return Err(ServeError::RaftFailed(e));
        }
        match failure {
            Some(e) => Err(ServeError::WalFailed(e)),
            None => Ok(()),
        }
    }
}

/// What `run` serves with, once the options are checked and the index is
/// open.
struct Assembled {
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    addr: SocketAddr,
    security: Security,
    durable: Arc<DurableIndex>,
    cluster: Option<ClusterView>,
    /// What a member's reads consult for their consistency.
    member_reads: Option<read_gate::MemberReads>,
    raft: Option<uuidmap_cluster::replica::IndexRaft>,
    /// The member's Raft TLS, to ask a node being added who it is.
    raft_tls: Option<uuidmap_cluster::raft_tls::RaftTls>,
    transfer: Option<uuidmap_cluster::transfer::LeaderTransfer>,
    stopping: tokio::sync::watch::Receiver<bool>,
    /// Other protocols, served over the same handles.
    front_ends: Vec<Box<dyn FrontEnd>>,
    /// On a server of a partitioned cluster: which keys it may serve.
    ownership: Option<uuidmap_partition::Ownership>,
}

async fn open(config: &ServeConfig, io: Arc<dyn Io>) -> Result<Arc<DurableIndex>, ServeError> {
    let durable = durable_config(config, io);
    // Recovery reads files and may take a while: off the async workers.
    let opened = tokio::task::spawn_blocking(move || DurableIndex::open(durable))
        .await
        .map_err(|e| ServeError::Join(format!("recovery panicked: {e}")))??;
    Ok(Arc::new(opened))
}

/// The store's options, from the server's.
fn durable_config(config: &ServeConfig, io: Arc<dyn Io>) -> DurableConfig {
    let mut durable = DurableConfig::new(&config.data_dir);
    durable.io = io;
    durable.pipeline.policy = config.fsync;
    durable.wal_segment_bytes = config.wal_file_bytes;
    durable.wal_preallocate = config.wal_preallocate;
    durable.pipeline.overlap_syncs = config.wal_overlap_syncs;
    durable.pipeline.snapshot_every_bytes = config.snapshot_wal_bytes;
    durable.snapshot_every = config.snapshot_interval;
    durable.max_replay = config.max_replay;
    durable.recovery.replay_workers = config.replay_workers;
    // The service checks the limit first, with the same error
    // (`WriteError::TooLarge`); the pipeline's limit must not be lower.
    durable.pipeline.max_batch_ops = durable
        .pipeline
        .max_batch_ops
        .max(config.limits.max_write_ops);
    durable
}

/// The names the health service reports on ("" is the whole server).
const HEALTH_NAMES: [&str; 4] = [
    "",
    <UuidMapServer<service::DataService> as tonic::server::NamedService>::NAME,
    <UuidMapAdminServer<admin::AdminService> as tonic::server::NamedService>::NAME,
    <UuidMapClusterServer<cluster_service::ClusterService> as tonic::server::NamedService>::NAME,
];

async fn run(
    assembled: Assembled,
    config: &ServeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let Assembled {
        listener,
        metrics_listener,
        addr,
        security,
        durable,
        cluster,
        member_reads,
        raft,
        raft_tls,
        transfer,
        stopping,
        front_ends,
        ownership,
    } = assembled;
    let max_message = transport_errors::decoder_limit(&config.limits);
    let catalog = Arc::new(reflection::Catalog::of_server());
    let metrics_on = metrics_listener.is_some();
    let admission = Arc::new(admission::Admission::new(
        &config.admission,
        config.limits.max_wait,
    ));
    let data_service = service::DataService::new(
        durable.clone(),
        config.limits.clone(),
        Arc::clone(&admission),
        lookup::LookupMetrics::register(metrics_on),
        stopping.clone(),
    )
    .with_cluster(cluster.clone())
    .with_member_reads(member_reads.clone())
    .with_ownership(ownership.clone());
    let shared = Shared {
        durable: durable.clone(),
        limits: config.limits.clone(),
        admission: Arc::clone(&admission),
        gate: read_gate::ReadGate::new(durable.clone(), member_reads, stopping.clone()),
        tokens: security.tokens.clone(),
        cluster: cluster.clone(),
        stopping: stopping.clone(),
        stop_grace: config.stop_grace,
    };
    let front_ends: Vec<_> = front_ends
        .into_iter()
        .map(|f| tokio::spawn(f.serve(shared.clone())))
        .collect();
    let metrics_addr = match metrics_listener {
        Some(m) => {
            let maddr = m.local_addr().ok();
            tokio::spawn(metrics_endpoint::serve_endpoint(
                m,
                durable.clone(),
                data_service.scan_counters(),
                cluster.clone(),
                ownership,
                stopping.clone(),
            ));
            maddr
        }
        None => None,
    };
    let (mut health, health_service) = tonic_health::server::health_reporter();
    for name in HEALTH_NAMES {
        health
            .set_service_status(name, tonic_health::ServingStatus::Serving)
            .await;
    }
    let shutdown = async move {
        shutdown.await;
        for name in HEALTH_NAMES {
            health
                .set_service_status(name, tonic_health::ServingStatus::NotServing)
                .await;
        }
        // Dropping a status's sender ends its Watch streams (after they
        // deliver NOT_SERVING); open streams would hold the stop forever.
        for name in HEALTH_NAMES {
            health.clear_service_status(name).await;
        }
    };
    let health_service = health_service.accept_compressed(Gzip).send_compressed(Gzip);
    let reflection_v1 = end_on_stop::EndOnStop::new(
        ServerReflectionServer::new(reflection::ReflectionV1(catalog.clone()))
            .accept_compressed(Gzip)
            .send_compressed(Gzip),
        stopping.clone(),
    );
    let reflection_v1alpha = end_on_stop::EndOnStop::new(
        ServerReflectionServerV1Alpha::new(reflection::ReflectionV1Alpha(catalog.clone()))
            .accept_compressed(Gzip)
            .send_compressed(Gzip),
        stopping.clone(),
    );
    let data = UuidMapServer::new(data_service)
        .max_decoding_message_size(max_message)
        .accept_compressed(Gzip)
        .send_compressed(Gzip);
    let admin = UuidMapAdminServer::new(admin::AdminService::new(durable))
        .accept_compressed(Gzip)
        .send_compressed(Gzip);
    let cluster_service = UuidMapClusterServer::new(
        cluster_service::ClusterService::new(raft)
            .with_raft_tls(raft_tls)
            .with_member(transfer, cluster),
    )
    .accept_compressed(Gzip)
    .send_compressed(Gzip);
    let incoming = incoming(listener);
    tracing::info!(
        %addr,
        data_dir = %config.data_dir.display(),
        fsync = %config.fsync,
        tls = security.tls.is_some(),
        client_certificates = config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        tokens = security.tokens.as_ref().map_or(0, |t| t.len()),
        metrics = %metrics_addr.map_or_else(|| "off".to_string(), |a| format!("http://{a}/metrics")),
        "serving uuidmap.v1"
    );
    let mut builder = Server::builder();
    if let Some(tls) = security.tls {
        builder = builder.tls_config(tls)?;
    }
    let served = builder
        // Outermost: times the whole call, and counts refused ones too.
        .layer(metrics::RpcMetricsLayer::new(metrics_on))
        // Inside metrics, so that they count the answers as reworded.
        .layer(transport_errors::TransportErrorsLayer::new(
            config.limits.clone(),
            catalog,
        ))
        // Next: the deadline counts from arrival, admission reads it, and
        // a call still running at it is answered DEADLINE_EXCEEDED here.
        .layer(deadline::DeadlineLayer)
        // Before auth: a refusal for overload costs less than hashing a
        // token, and an overloaded server should shed before doing any
        // per-call work. (A caller without a valid token still never runs:
        // auth answers it once admitted.)
        .layer(admission::AdmissionLayer::new(admission))
        // Innermost, right around the routes (whose bodies it can build).
        .layer(
            auth::AuthLayer::new(security.tokens).with_certificate_clients(
                config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
            ),
        )
        .initial_connection_window_size(CONNECTION_WINDOW)
        .initial_stream_window_size(STREAM_WINDOW)
        .add_service(data)
        .add_service(admin)
        .add_service(cluster_service)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .serve_with_incoming_shutdown(incoming, shutdown);
    // The stop waits for the calls in flight, but not forever: a stream
    // whose client stopped reading blocks its sender, and its HTTP/2
    // stream, until the client reads again.
    let mut stop_began = stopping.clone();
    let grace = config.stop_grace;
    tokio::select! {
        served = served => {
            served?;
            tracing::info!("stopped accepting; in-flight calls finished");
        }
        () = async {
            // Err: the sender is gone, which happens only after the stop began.
            let _ = stop_began.wait_for(|s| *s).await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(
                "calls still open {} ms after the stop began (a client that stopped reading \
                 its stream?); closing them (--stop-grace-ms)",
                grace.as_millis()
            );
        }
    }
    // The front ends saw the stop too: they finish the command in flight
    // on each connection (a write is answered once durable), then close.
    let front_ends_done = async {
        for f in front_ends {
            let _ = f.await;
        }
    };
    if tokio::time::timeout(grace, front_ends_done).await.is_err() {
        tracing::warn!(
            "front-end connections still open {} ms after the stop; closing them",
            grace.as_millis()
        );
    }
    Ok(())
}

/// The accepted connections, each with TCP_NODELAY set: a reply is a few
/// dozen bytes, and Nagle's algorithm would hold it back waiting for the
/// client's delayed ACK (up to 40 ms on Linux).
fn incoming(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// Shuts the index down: drains the writes, takes the final snapshot and
/// releases the directory, even while connections that have stopped being
/// served still hold their clones of the `Arc` (shutdown takes `&self`).
async fn close(durable: Arc<DurableIndex>) -> Result<(), ServeError> {
    let final_snapshot = tokio::task::spawn_blocking(move || durable.shutdown())
        .await
        .map_err(|e| ServeError::Join(format!("shutdown panicked: {e}")))?;
    match final_snapshot {
        Some(Ok(info)) => {
            tracing::info!(
                "index shut down: writes drained, final snapshot taken at LSN {}",
                info.lsn
            );
            Ok(())
        }
        Some(Err(e)) => Err(ServeError::FinalSnapshot(e)),
        None => {
            tracing::info!("index shut down: writes drained (no final snapshot)");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::StreamExt;

    #[tokio::test]
    async fn accepted_connections_have_tcp_nodelay_set() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut accepted = incoming(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let server_side = accepted.next().await.unwrap().unwrap();
        assert!(server_side.nodelay().unwrap());
    }

    #[test]
    fn a_non_loopback_metrics_address_needs_insecure() {
        let mut c = ServeConfig::new("d");
        assert!(check_metrics_address("127.0.0.1:7879".parse().unwrap(), &c).is_ok());
        assert!(check_metrics_address("[::1]:7879".parse().unwrap(), &c).is_ok());
        let any: SocketAddr = "0.0.0.0:7879".parse().unwrap();
        let msg = check_metrics_address(any, &c).unwrap_err().to_string();
        assert!(
            msg.contains("insecure") && msg.contains("off") && !msg.contains("--"),
            "{msg}"
        );
        c.insecure = true;
        assert!(check_metrics_address(any, &c).is_ok());
    }

    #[test]
    fn a_non_loopback_address_needs_tls_and_client_auth_unless_insecure() {
        let any: SocketAddr = "0.0.0.0:7878".parse().unwrap();
        let tls = |client_ca: Option<&str>| {
            Some(tls::TlsFiles {
                cert: "c.pem".into(),
                key: "k.pem".into(),
                client_ca: client_ca.map(Into::into),
            })
        };
        let plain = ServeConfig::new("d");
        let mut tls_only = plain.clone();
        tls_only.tls = tls(None);
        let mut tokens_only = plain.clone();
        tokens_only.tokens_file = Some("tokens".into());
        let mut tls_tokens = tls_only.clone();
        tls_tokens.tokens_file = Some("tokens".into());
        let mut mtls = plain.clone();
        mtls.tls = tls(Some("ca.pem"));

        for c in [&plain, &tls_only, &tokens_only, &tls_tokens, &mtls] {
            assert!(check_listen_address("127.0.0.1:7878".parse().unwrap(), c).is_ok());
            assert!(check_listen_address("[::1]:7878".parse().unwrap(), c).is_ok());
            let mut insecure = c.clone();
            insecure.insecure = true;
            assert!(check_listen_address(any, &insecure).is_ok());
        }
        for (c, why) in [
            (&plain, "neither TLS nor client authentication"),
            (&tls_only, "no client authentication"),
            (&tokens_only, "in clear"),
        ] {
            let e = check_listen_address(any, c).unwrap_err();
            assert!(matches!(e, ServeError::NotLoopback { .. }), "{e:?}");
            let msg = e.to_string();
            assert!(
                msg.contains(why) && msg.contains("insecure") && !msg.contains("--"),
                "{msg}"
            );
        }
        assert!(check_listen_address(any, &tls_tokens).is_ok());
        assert!(check_listen_address(any, &mtls).is_ok());
    }
}
