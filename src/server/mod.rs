//! The gRPC server: `uuidmap.v1.UuidMap` (data) and `uuidmap.v1.UuidMapAdmin`
//! over one [`DurableIndex`].
//!
//! - `proto`: the generated messages, servers and clients.
//! - `wire`: UUIDs, packed keys, the `found` bitmap, the call's deadline.
//! - `status`: typed errors to gRPC statuses (the only place).
//! - `codec`: prost's codec, with undecodable messages as INVALID_ARGUMENT.
//! - `service`, `admin`: the two services; `scan` and `watch`, the data
//!   service's two streams.
//! - `config`: serve options (flags, environment, TOML).
//!
//! Lifecycle of [`serve_on`]: refuse a non-loopback address unless
//! `insecure` (there is no TLS or auth yet); recover the data directory;
//! serve with TCP_NODELAY on every accepted socket; when `shutdown`
//! resolves, stop accepting, end the waits in progress (`min_lsn`,
//! `WaitFor`) with UNAVAILABLE instead of holding the stop for up to their
//! deadlines, let the other in-flight RPCs finish and the connections close,
//! then shut the index down (queued writes drained and synced, a final
//! snapshot).
//!
//! TCP_NODELAY: tonic's `Server::tcp_nodelay` is ignored on the
//! `serve_with_incoming*` paths, which we use (to serve a listener bound by
//! the caller, e.g. on port 0). So it is set on the [`TcpIncoming`] itself.

pub mod admin;
pub mod codec;
pub mod config;
pub mod proto;
pub mod scan;
pub mod service;
pub mod status;
pub mod watch;
pub mod wire;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

pub use config::{ServeArgs, ServeConfig};

use crate::store::StoreError;
use crate::writer::{DurableConfig, DurableIndex};
use proto::v1::uuid_map_admin_server::UuidMapAdminServer;
use proto::v1::uuid_map_server::UuidMapServer;

/// HTTP/2 flow-control windows. The defaults (64 KiB) cap one stream at
/// 64 KiB per round trip; large batch answers and (later) scans need more.
const CONNECTION_WINDOW: u32 = 16 << 20;
const STREAM_WINDOW: u32 = 4 << 20;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A non-loopback address without TLS and auth.
    #[error(
        "refusing to listen on {addr}: this server has no TLS or authentication yet, so only \
         loopback addresses (127.0.0.1, ::1) are allowed; pass --insecure (UUIDMAP_INSECURE=true) \
         to accept connections from anyone who can reach this port"
    )]
    NotLoopback { addr: SocketAddr },
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The data directory could not be recovered.
    #[error("cannot open the data directory: {0}")]
    Open(#[from] StoreError),
    /// The gRPC transport failed.
    #[error("the gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// A thread of the server panicked.
    #[error("{0}")]
    Join(String),
}

/// Refuses `addr` unless it is loopback or `insecure`.
pub fn check_listen_address(addr: SocketAddr, insecure: bool) -> Result<(), ServeError> {
    if addr.ip().is_loopback() || insecure {
        Ok(())
    } else {
        Err(ServeError::NotLoopback { addr })
    }
}

/// Binds `config.listen` and serves until `shutdown` resolves.
pub async fn serve(
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    check_listen_address(config.listen, config.insecure)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
    serve_on(listener, config, shutdown).await
}

/// Serves on an already bound `listener` (its address wins over
/// `config.listen`) until `shutdown` resolves, then shuts down gracefully.
pub async fn serve_on(
    listener: TcpListener,
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: config.listen,
        source,
    })?;
    check_listen_address(addr, config.insecure)?;
    let durable = open(&config).await?;
    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        shutdown.await;
        // Wakes every wait in progress (see `DataService::wait_applied`).
        let _ = stopping_tx.send(true);
    };
    let result = run(listener, addr, &config, durable.clone(), stopping, shutdown).await;
    close(durable).await?;
    result
}

async fn open(config: &ServeConfig) -> Result<Arc<DurableIndex>, ServeError> {
    let mut durable = DurableConfig::new(&config.data_dir);
    durable.pipeline.policy = config.fsync;
    durable.wal_segment_bytes = config.wal_file_bytes;
    // The service checks the limit first, with the same message; the
    // pipeline's limit must not be lower.
    durable.pipeline.max_batch_ops = durable
        .pipeline
        .max_batch_ops
        .max(config.limits.max_write_ops);
    // Recovery reads files and may take a while: off the async workers.
    let opened = tokio::task::spawn_blocking(move || DurableIndex::open(durable))
        .await
        .map_err(|e| ServeError::Join(format!("recovery panicked: {e}")))??;
    Ok(Arc::new(opened))
}

async fn run(
    listener: TcpListener,
    addr: SocketAddr,
    config: &ServeConfig,
    durable: Arc<DurableIndex>,
    stopping: tokio::sync::watch::Receiver<bool>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    // The largest request the limits allow, with room for the framing
    // (a write op is at most ~60 bytes on the wire).
    let max_message = (config.limits.max_write_ops * 64)
        .max(config.limits.max_batch_keys * 16 + 1024)
        .max(config.limits.max_filter_values * 16 + 1024)
        .max(4 << 20);
    let data = UuidMapServer::new(service::DataService::new(
        durable.clone(),
        config.limits.clone(),
        stopping,
    ))
    .max_decoding_message_size(max_message);
    let admin = UuidMapAdminServer::new(admin::AdminService::new(durable));
    let incoming = incoming(listener);
    tracing::info!(
        %addr,
        data_dir = %config.data_dir.display(),
        fsync = %config.fsync,
        "serving uuidmap.v1"
    );
    Server::builder()
        .layer(tonic::service::InterceptorLayer::new(
            wire::stamp_deadline as fn(_) -> _,
        ))
        .initial_connection_window_size(CONNECTION_WINDOW)
        .initial_stream_window_size(STREAM_WINDOW)
        .add_service(data)
        .add_service(admin)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await?;
    tracing::info!("stopped accepting; in-flight calls finished");
    Ok(())
}

/// The accepted connections, each with TCP_NODELAY set: a reply is a few
/// dozen bytes, and Nagle's algorithm would hold it back waiting for the
/// client's delayed ACK (up to 40 ms on Linux).
fn incoming(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// Shuts the index down once the services have let go of it.
async fn close(durable: Arc<DurableIndex>) -> Result<(), ServeError> {
    // The transport drops each connection's service clone when the
    // connection ends; give stragglers a moment.
    let mut durable = durable;
    for _ in 0..500 {
        match Arc::try_unwrap(durable) {
            Ok(owned) => {
                tokio::task::spawn_blocking(move || owned.shutdown())
                    .await
                    .map_err(|e| ServeError::Join(format!("shutdown panicked: {e}")))?;
                tracing::info!("index shut down: writes drained, final snapshot taken");
                return Ok(());
            }
            Err(shared) => {
                durable = shared;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    Err(ServeError::Join(
        "the index was still in use 5 s after the server stopped; it was not shut down cleanly \
         (acknowledged writes are in the WAL and will be replayed at the next start)"
            .into(),
    ))
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
    fn only_loopback_is_accepted_unless_insecure() {
        let any: SocketAddr = "0.0.0.0:7878".parse().unwrap();
        assert!(check_listen_address("127.0.0.1:7878".parse().unwrap(), false).is_ok());
        assert!(check_listen_address("[::1]:7878".parse().unwrap(), false).is_ok());
        assert!(matches!(
            check_listen_address(any, false),
            Err(ServeError::NotLoopback { .. })
        ));
        assert!(check_listen_address(any, true).is_ok());
    }
}
