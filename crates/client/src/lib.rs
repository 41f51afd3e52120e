//! uuidmap's client SDK: a client of one uuidmap server or of several that
//! serve the same data, which makes the right thing the easy thing for the
//! storage shards and rebalancing jobs that call it.
//!
//! ```no_run
//! # async fn example() -> Result<(), uuidmap_client::ClientError> {
//! use std::time::Duration;
//! use uuid::Uuid;
//! use uuidmap_client::{Client, ScanOptions};
//!
//! let client = Client::builder()
//!     .endpoints(["http://127.0.0.1:7878"])
//!     .timeout(Duration::from_secs(2))
//!     .build()?;
//! let (file, shard) = (Uuid::new_v4(), Uuid::new_v4());
//! client.put(file, shard).await?;
//! assert_eq!(client.get(file).await?, Some(shard));
//! // Move the file, only if no one else did.
//! let moved = client.compare_and_set(file, Some(shard), Some(Uuid::new_v4())).await?;
//! assert!(moved.applied());
//! // Every entry on `shard`, resumed by itself after a failure.
//! let mut scan = client.scan(ScanOptions { values: vec![shard], ..Default::default() });
//! while let Some(page) = scan.next_page().await? {
//!     println!("{} entries", page.entries.len());
//! }
//! # Ok(()) }
//! ```
//!
//! `examples/client.rs` in the repository runs against a live server
//! (`cargo run -p uuidmap-client --example client`).
//!
//! What it does for the caller:
//! - **Endpoints** ([`endpoints`](crate::ClientBuilder::endpoints)): calls
//!   go round the healthy servers; one that cannot be reached is
//!   pessimized (skipped) and probed with `grpc.health.v1` until it serves
//!   again. A server given by DNS name is one endpoint per address it
//!   resolves to, resolved again as the replicas move. Each has a small pool of HTTP/2 connections ([`PoolConfig`]):
//!   the hot one first, more under load, idle ones closed.
//! - **Retries** ([`RetryPolicy`], [`RetryBudget`]): every failure has a
//!   class ([`ClientError::retry_class`]); reads are retried after any
//!   failure that may pass, writes only when nothing was done (or when
//!   marked [`idempotent`](Client::idempotent), and never a
//!   compare-and-set after an unknown outcome), with equal jitter, fast for
//!   network failures and slow for overload or an election, within the
//!   call's deadline and a retry budget. An unknown outcome is never
//!   [`transient`](ClientError::is_transient).
//! - **Replica groups**: give every member's URL. Writes go to the leader
//!   (the member that took the last write, or the one a member named when
//!   it refused a write); a write refused by a follower, or by a member
//!   that lost the leadership before logging it, is sent again at once to
//!   the leader; reads go to every member in turn, with read-your-writes.
//!   A failover is ridden out within the call's deadline.
//! - **CompareAndSet** is never sent twice after a lost answer: the client
//!   reads the key and answers [`ClientError::Undetermined`].
//! - **Auto-batching**: concurrent [`Client::get`]s share `Lookup` requests,
//!   with no timer.
//! - **Resumable scans and watches** ([`Client::scan`], [`Client::watch`],
//!   and the follower's recipe, [`Client::scan_then_watch`]).
//! - **Read-your-writes**: reads carry the highest LSN the client wrote as
//!   `min_lsn` (on by default).
//! - **Deadlines**: every call has one (10 s unless set), sent as
//!   `grpc-timeout`, overridden per call with [`Client::with_timeout`].
//!
//! - **A limit on calls in flight** (1024 unless set): excess callers wait,
//!   newest first, until their deadline.
//!
//! Layering: depends on the protocol crate (`uuidmap-proto`), on the
//! partition crate (`uuidmap-partition`: the key hash and the map in etcd),
//! and on the index crate for its LIFO semaphore only; never on the engine
//! or the server.
//!
//! - `client_builder`: [`ClientBuilder`]; `client`: [`Client`] and the
//!   retry loop; `endpoints`: health and pessimization; `endpoint_source`:
//!   where endpoints come from (DNS names); `pool`: the connections;
//!   `auto_batch`: auto-batching; `consistency_level`: [`ReadConsistency`];
//!   `scan_stream`: [`ScanStream`]; `watch_stream`: [`WatchStream`],
//!   [`FollowStream`]; `retry`: backoffs; `budget`: the retry budget;
//!   `error`: [`ClientError`] and [`RetryClass`]; `partitioned_client`:
//!   [`PartitionedClient`], a partitioned cluster's groups behind one
//!   client, routed by the map in etcd; `cluster_scan`: [`ClusterScan`],
//!   every partition once with one cursor; `partition_move`: moving a
//!   partition between groups online ([`PartitionedClient::move_partition`]).

#![warn(missing_docs, unreachable_pub)]

mod attempt_policy;
mod auto_batch;
pub mod blocking;
mod budget;
mod call;
mod call_metrics;
mod client;
mod client_builder;
mod cluster_scan;
mod cluster_watch;
mod consistency_level;
mod endpoint_source;
mod endpoints;
pub mod error;
mod latency;
mod membership_calls;
mod partition_move;
mod partitioned_client;
mod pool;
mod read_attempt;
mod reads;
mod reroute;
mod retry;
mod scan_stream;
mod token;
mod watch_stream;
mod write_op;
mod writes;

use std::path::PathBuf;
use std::time::Duration;

pub use budget::{RetryBudget, RetryBudgetConfig};
pub use client::{Client, ClientCounters};
pub use client_builder::ClientBuilder;
pub use cluster_scan::{ClusterScan, ClusterScanPage};
pub use cluster_watch::{ClusterBatch, ClusterCursor, ClusterWatch};
pub use consistency_level::ReadConsistency;
pub use error::{ClientError, RetryClass};
pub use partition_move::{MoveOptions, MoveReport};
pub use partitioned_client::PartitionedClient;
pub use pool::PoolConfig;
pub use reroute::{MAX_REROUTES, MEMBER_CATCH_UP};
pub use retry::{Backoff, Jitter, RetryPolicy};
pub use scan_stream::{ScanOptions, ScanPage, ScanStream, unpack_entries};
pub use token::TokenProvider;
/// The partition layer the [`PartitionedClient`] routes with (the stable
/// key hash, the table, the map in etcd).
pub use uuidmap_partition as partition;
pub use watch_stream::{Follow, FollowStream, WatchBatch, WatchStream};
pub use write_op::{CasOutcome, WriteOp};

/// The default server address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7878";

/// How to reach one server: what the `uuidmap` CLI's connection flags say.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// `http://host:port` or `https://host:port`; several (the members of
    /// a replica group) separated by commas.
    pub server: String,
    /// Bearer token sent with every call.
    pub token: Option<String>,
    /// PEM of the CA that signed the server's certificate (https only).
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for servers that require one (mTLS).
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// Bound of the connection and of each call.
    pub timeout: Duration,
}

impl ClientOptions {
    /// Plaintext to `server`, no token, 10 s timeout.
    pub fn new(server: impl Into<String>) -> Self {
        ClientOptions {
            server: server.into(),
            token: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            timeout: Duration::from_secs(10),
        }
    }

    /// A builder with these options.
    pub fn builder(&self) -> ClientBuilder {
        let servers = self
            .server
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let mut b = Client::builder()
            .endpoints(servers)
            .timeout(self.timeout)
            .connect_timeout(self.timeout);
        if let Some(token) = &self.token {
            b = b.token(token.clone());
        }
        if let Some(ca) = &self.tls_ca {
            b = b.tls_ca(ca.clone());
        }
        b.tls_identity_parts(self.tls_cert.clone(), self.tls_key.clone())
    }
}

impl Client {
    /// Connects to one server (eagerly: a server that is not running is
    /// reported here, naming the address).
    pub async fn connect(options: &ClientOptions) -> Result<Client, ClientError> {
        options.builder().connect().await
    }
}
