//! uuidmap's server: the gRPC services `uuidmap.v1.UuidMap` (data),
//! `uuidmap.v1.UuidMapAdmin` and `uuidmap.v1.UuidMapCluster` (a replica
//! group's membership) over one [`DurableIndex`](uuidmap_engine::writer::DurableIndex) from the engine
//! crate, with what a serious server needs around them: admission control,
//! auth and TLS, deadlines, typed statuses, reflection, health, Prometheus
//! metrics, and the serve options (flags, environment, TOML). It builds on
//! the index, engine and proto crates; the binary runs it.
//!
//! - `proto`: the protocol crate, re-exported for the binary, its tests and
//!   benches (`uuidmap::server::proto`); this crate's own modules import
//!   `uuidmap_proto` directly, so that none points back at this file.
//! - `wire`: UUIDs, packed keys, the `found` bitmap.
//! - `deadline`: the call's deadline, kept by answering DEADLINE_EXCEEDED
//!   before tonic's own timer answers CANCELLED.
//! - `grpc_status`: typed errors to gRPC statuses (the only place).
//! - `transport_errors`: tonic's own answers (an oversized or undecodable
//!   message, an unknown method) reworded in our terms.
//! - `service`, `admin`, `cluster_service`: the three services (data,
//!   admin, and a replica group's membership); `scan_rpc` and
//!   `watch_rpc`, the data service's two streams.
//! - `config`: serve options (flags, environment, TOML).
//! - `tls`, `auth`: TLS/mTLS files; bearer tokens and the role check.
//! - `admission`: per-class LIFO admission control (a tower layer).
//! - `reflection`: gRPC reflection v1 and v1alpha (unknown symbols answered
//!   in the stream), and the catalog of services.
//! - `end_on_stop`: ends reflection streams still open when the stop begins.
//! - `methods`: the one table of RPCs (path, metric label, admission
//!   class, role, streaming) that auth, admission and metrics read.
//! - `metrics`: the per-call Prometheus series and the text they render;
//!   `metrics_endpoint`: `GET /metrics` over HTTP/1.1 (hyper).
//! - `front_end`: the handles another protocol's front end shares with
//!   the gRPC services (the Redis protocol: the `uuidmap-resp` crate).
//! - `serve_member`: serving as a member of a replica group (`--node-id`):
//!   the member, its Raft service on its own listener, `--cluster-init`.
//! - `serve_partitioned`: serving one group's partitions of a partitioned
//!   cluster (`--etcd`): the map's cache, the registration, the ownership
//!   check the data service applies to every key; `partition_upkeep`: the
//!   write fence at each table change, and the drop of partitions that
//!   moved away.
//!
//! Beside our two services the server answers `grpc.health.v1.Health`
//! (SERVING for "", `uuidmap.v1.UuidMap`, `uuidmap.v1.UuidMapAdmin` and
//! `uuidmap.v1.UuidMapCluster`) and
//! gRPC reflection, v1 and v1alpha (grpcurl 1.8 speaks v1alpha); both need
//! no token (see `auth`). Every service accepts gzip-compressed requests and
//! compresses its answers with gzip when the client asks for it
//! (`grpc-accept-encoding`).
//!
//! How [`serve_on`] runs a server, from the address check to the stop:
//! the `serve` module.

#![warn(missing_docs, unreachable_pub)]

pub mod admin;
pub mod admission;
pub mod auth;
pub mod cluster_service;

pub mod config;
pub mod deadline;
pub mod end_on_stop;
pub mod errors;
pub mod exposition;
pub mod front_end;
pub mod lookup;
pub mod methods;
pub mod metrics;
pub mod metrics_endpoint;
mod partition_upkeep;
pub mod read_gate;
mod serve_member;
mod serve_partitioned;
pub use uuidmap_proto as proto;
pub mod grpc_status;
pub mod reflection;
pub mod scan_rpc;
mod serve;
pub mod service;
pub mod stats_answer;
pub mod tls;
pub mod transport_errors;
pub mod wait;
mod watch_owned;
pub mod watch_rpc;
pub mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

pub use config::{ServeArgs, ServeConfig};
pub use serve::{
    ServerParts, check_listen_address, check_metrics_address, serve, serve_on, serve_with,
};

use uuidmap_engine::store::{StoreError, WalWriteError};
use uuidmap_engine::writer::TakeSnapshotError;

/// A replica group member's view of its group, read when asked (`Stats`,
/// `/metrics`).
pub type ClusterView =
    Arc<dyn Fn() -> uuidmap_cluster::cluster_status::ClusterStatus + Send + Sync>;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A non-loopback address without TLS and client authentication.
    #[error(
        "refusing to listen on {addr}: {missing}. A non-loopback address needs TLS (a \
         certificate and its key) and client authentication (bearer tokens, or client \
         certificates checked against a client CA); only loopback addresses (127.0.0.1, ::1) \
         may go without, unless the server is set `insecure`, to serve anyone who can reach \
         this port"
    )]
    NotLoopback {
        /// The address asked for.
        addr: SocketAddr,
        /// What it lacks (TLS, client authentication, or both).
        missing: &'static str,
    },
    /// A non-loopback metrics address without `insecure`.
    #[error(
        "refusing to serve metrics on {addr}: the metrics endpoint is plain HTTP without \
         authentication (it reveals request counts, rates and sizes, never entries). Use a \
         loopback address (127.0.0.1:7879) behind a scraper or proxy on this host, turn the \
         endpoint off, or set the server `insecure` to serve it to anyone who can reach this \
         port"
    )]
    MetricsNotLoopback {
        /// The metrics address asked for.
        addr: SocketAddr,
    },
    /// The TLS files cannot be used.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The tokens file cannot be used.
    #[error(transparent)]
    Tokens(#[from] auth::TokensError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The data directory could not be locked or recovered.
    #[error("cannot open the data directory: {0}{hint}", hint = start_hint(.0))]
    Open(#[from] StoreError),
    /// The WAL failed for good while serving (a failed fsync): the server
    /// stopped so that a restart recovers from what is on disk.
    #[error("stopped because the WAL failed: {0}")]
    WalFailed(Arc<WalWriteError>),
    /// The server stopped, but its final snapshot could not be written.
    #[error(
        "the final snapshot failed: {0}{hint}. Nothing is lost: every acknowledged write is \
         in the WAL, which the next start replays (that start takes longer by the replay)",
        hint = if .0.is_disk_full() { "; free space on the data disk before the next start" } else { "" }
    )]
    FinalSnapshot(Arc<TakeSnapshotError>),
    /// The gRPC transport failed.
    #[error("the gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// A thread of the server panicked.
    #[error("{0}")]
    Join(String),
    /// The member of a replica group could not start.
    #[error("cannot start the replica group member: {0}")]
    Member(#[source] uuidmap_cluster::replica::ReplicaError),
    /// Raft failed: it could not make the group, or it stopped on a fatal
    /// error while serving.
    #[error("Raft failed: {0}")]
    RaftFailed(String),
    /// A non-loopback Raft address without Raft TLS or `raft_insecure`
    /// (`insecure` does not relax it).
    #[error(
        "refusing to serve Raft on {addr} without TLS: anyone who can reach a plaintext Raft \
         port can vote, append entries and rewrite the group's log. Give the member its Raft \
         certificate, key and CA (--raft-tls-cert, --raft-tls-key, --raft-tls-ca: mTLS, each \
         member proving its node id), use a loopback address, or, on a network only the \
         members share, --raft-insecure (plaintext and unauthenticated; --insecure relaxes \
         only the client port and metrics)"
    )]
    RaftNotLoopback {
        /// The Raft address asked for.
        addr: SocketAddr,
    },
    /// A server of a partitioned cluster could not join it.
    #[error("cannot join the partitioned cluster: {0}")]
    Partitions(#[source] uuidmap_partition::PartitionError),
}

/// The process is about to exit: a full disk needs room before the next
/// start (nothing resumes by itself here).
fn start_hint(e: &StoreError) -> &'static str {
    if e.is_disk_full() {
        "; free space on the data disk, then start again"
    } else {
        ""
    }
}
