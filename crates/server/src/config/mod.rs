//! Options of `uuidmap serve`: command-line flags, `UUIDMAP_*` environment
//! variables and an optional TOML file.
//!
//! Precedence, highest first: a flag, its environment variable, the TOML
//! file (`--config` / `UUIDMAP_CONFIG`), the default. Each default is
//! written once, in its option's row (`options`), from which `serve --help`
//! shows it and a test holds the README's table of options to it
//! (`ServeConfig::new`, used by embedders and tests, turns metrics off).
//!
//! The TOML file uses the flags' names with underscores, for example:
//!
//! ```toml
//! listen = "127.0.0.1:7878"
//! data_dir = "/var/lib/uuidmap"
//! fsync = "interval=10"
//! max_batch_keys = 65536
//! max_write_ops = 100000
//! max_wait_ms = 60000
//! max_filter_values = 65536
//! insecure = false
//! tls_cert = "/etc/uuidmap/server.pem"
//! tls_key = "/etc/uuidmap/server.key"
//! tls_client_ca = "/etc/uuidmap/clients-ca.pem"
//! tokens_file = "/etc/uuidmap/tokens"
//! read_permits = 1024
//! read_queue = 512
//! write_permits = 256
//! write_queue = 512
//! scan_permits = 4
//! scan_queue = 64
//! max_long_polls = 100000
//! metrics_listen = "127.0.0.1:7879"   # or "off"
//! resp_listen = "127.0.0.1:6380"     # the Redis protocol; off when absent
//! wal_file_bytes = 67108864           # 64 MiB; at least 1 MiB
//! snapshot_wal_bytes = 268435456      # 256 MiB; at least 1 MiB
//! snapshot_interval = 600             # seconds, or "10m", or "off"; at least 1 s
//! max_replay_ms = 500                 # restart budget, or "off"; at least 1 ms
//! stop_grace_ms = 10000               # calls still open this long after a stop are closed
//! replay_workers = "auto"             # or "serial", or a thread count
//! wal_preallocate = "on"              # or "off"
//! wal_overlap_syncs = "off"           # or "on"
//! runtime_lifo_slot = "on"            # or "off": answers of one connection in one write
//! # A member of a replica group (README, "Replica groups"):
//! node_id = 1
//! raft_listen = "127.0.0.1:7880"
//! raft_advertise = "127.0.0.1:7880"   # what the others dial; default: raft_listen
//! advertise_url = "http://127.0.0.1:7878"  # where clients are sent; default: from listen
//! peers = "2=127.0.0.1:7890@http://127.0.0.1:7888,3=127.0.0.1:7900@http://127.0.0.1:7898"
//! cluster_init = true                 # on one member, once: make the group of it and its peers
//! raft_snapshot_entries = 100000      # a member's snapshot after this many log entries
//! raft_keep_entries = 10000           # log entries kept behind a member's snapshot
//! raft_dial = "2=127.0.0.1:17890"     # dial member 2's Raft service here (a proxy, a NAT'd address)
//! raft_tls_cert = "/etc/uuidmap/raft-node-1.pem"  # SAN DNS:node-1.raft.uuidmap (README, "Security")
//! raft_tls_key = "/etc/uuidmap/raft-node-1.key"
//! raft_tls_ca = "/etc/uuidmap/raft-ca.pem"
//! raft_insecure = false               # plaintext, unauthenticated Raft off loopback
//! # One group of a partitioned cluster (README, "Partitions"):
//! etcd = "http://127.0.0.1:2379,http://127.0.0.1:22379"
//! etcd_cluster = "uuidmap"            # keys under /uuidmap/<etcd_cluster>/ in etcd
//! group = "g1"                        # the group this server serves partitions for
//! etcd_lease_ttl = 10                 # seconds a registration outlives its last renewal
//!
//! The module's parts:
//! - `options`: the declaration of every option, once (`serve_options!`):
//!   flag, environment variable and TOML key, default and minimum;
//!   [`ServeArgs`];
//! - `option_values`: the parsers of the options' own value types (`--peers`,
//!   `--raft-dial`, switches, the snapshot interval, the replay budget);
//! - `resolve_options`: the options over the file over the defaults, checked
//!   against their minimums and against each other;
//! - `config_error`: [`ConfigError`].

mod config_error;
mod option_values;
mod options;
mod resolve_options;

#[cfg(test)]
mod partition_tests;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::tls::{RaftTlsFiles, TlsFiles};
use uuidmap_engine::store::replay_apply::ReplayWorkers;
use uuidmap_engine::store::wal::Preallocate;
use uuidmap_engine::writer::FsyncPolicy;

pub use config_error::ConfigError;
pub use option_values::{
    EtcdEndpoints, MaxReplay, MetricsListen, OnOff, Peers, RaftDial, SnapshotInterval,
};
pub use options::{OPTION_DEFAULTS, ServeArgs, ServeOptions, show_defaults};

/// An option's default as its row states it (`options`), as the flag's
/// text: for a clap argument outside `serve` that shares the option.
///
/// # Panics
///
/// If `option` has no default: a typo in the caller, caught by its tests.
pub fn default_text(option: &str) -> &'static str {
    options::OPTION_DEFAULTS
        .iter()
        .find(|(name, _)| *name == option)
        .map(|(_, text)| *text)
        .unwrap_or_else(|| panic!("the option {option} has no default"))
}

/// What a row with a default holds after [`ServeOptions::defaults`].
pub(crate) const DEFAULTED: &str = "the option's row states its default";

/// The shortest `--snapshot-interval`: every snapshot writes the whole
/// index, so it must not be asked for every second.
pub const MIN_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(1);

/// Limits a request must stay within.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most keys in one `BatchGet`.
    pub max_batch_keys: usize,
    /// Most operations in one `Write`.
    pub max_write_ops: usize,
    /// Longest wait for `min_lsn` or `WaitFor`, whatever the call's deadline
    /// (and the bound of a call without one).
    pub max_wait: Duration,
    /// Most values in one `Scan` filter.
    pub max_filter_values: usize,
}

impl Default for Limits {
    /// The options' defaults (`options`).
    fn default() -> Self {
        ServeConfig::new("").limits
    }
}

/// Admission control (see `admission.rs`): how many requests of each class
/// run at once (*permits*), how many more may wait for one (*queue*), and
/// how many long polls may be open.
///
/// Why the defaults:
/// - A queue is scanned by every release that finds waiters
///   (`O(queue)` loads), and a request queued behind hundreds of others
///   under overload will miss any sensible deadline anyway: keep queues in
///   the hundreds. Overload beyond permits + queue is refused at once with
///   RESOURCE_EXHAUSTED, which a client can back off from.
/// - Reads (Get, BatchGet, Stats, Ping): 1024 running, 512 waiting. A point
///   read takes about a microsecond, so the permits only bite when many
///   large BatchGets pile up: they bound the answers being built at once
///   (1024 × a 65,536-key BatchGet's 1 MiB answer at worst).
/// - Writes (Put, Delete, CompareAndSet, Write, admin Snapshot): 256
///   running, 512 waiting. Writes funnel into one writer thread that
///   commits them in groups; 256 in flight fills a group and keeps the
///   memory of queued batches bounded.
/// - Scans: 4 running, 64 waiting. Each scan runs a producer on a blocking
///   thread that copies segments at memory speed; on a small machine more
///   than a few at once would starve the point reads of CPU.
/// - Long polls (WaitFor, Watch): 100,000 open. They hold no read or scan
///   permit while they wait (they cost a small waiter and no CPU), so they
///   get a plain cap instead, far above what a fleet of services waiting
///   for their own writes needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Reads running at once.
    pub read_permits: usize,
    /// Reads waiting for a permit; more are refused.
    pub read_queue: usize,
    /// Writes running at once.
    pub write_permits: usize,
    /// Writes waiting for a permit; more are refused.
    pub write_queue: usize,
    /// Scans streaming at once.
    pub scan_permits: usize,
    /// Scans waiting for a permit; more are refused.
    pub scan_queue: usize,
    /// WaitFor and Watch calls open at once; more are refused.
    pub max_long_polls: usize,
}

impl Default for AdmissionLimits {
    /// The options' defaults (`options`).
    fn default() -> Self {
        ServeConfig::new("").admission
    }
}

/// Everything `serve` needs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The address to listen on.
    pub listen: SocketAddr,
    /// The data directory (created if missing).
    pub data_dir: PathBuf,
    /// When the WAL is fsynced.
    pub fsync: FsyncPolicy,
    /// Allow a non-loopback listen address without TLS and auth.
    pub insecure: bool,
    /// TLS (and mTLS when `client_ca` is set); `None`: plaintext.
    pub tls: Option<TlsFiles>,
    /// Bearer tokens (see `auth.rs`); `None`: no token needed.
    pub tokens_file: Option<PathBuf>,
    /// Request limits.
    pub limits: Limits,
    /// Admission control: permits and queues per request class.
    pub admission: AdmissionLimits,
    /// WAL files are rotated at this size (a snapshot lets the files it
    /// covers be removed, which is how far back `Watch` can start).
    pub wal_file_bytes: u64,
    /// Whether WAL files are made ahead of need, zero-filled, so that each
    /// fsync is a data-only flush (the default).
    pub wal_preallocate: Preallocate,
    /// Under `--fsync always`, whether one group's fsync overlaps writing
    /// the next when writes keep coming (off by default).
    pub wal_overlap_syncs: bool,
    /// Whether the server's tokio runtime keeps its LIFO slot (the
    /// default); without it one connection's answers leave together
    /// (`--runtime-lifo-slot`).
    pub runtime_lifo_slot: bool,
    /// Take a snapshot each time this many bytes were written to the WAL.
    pub snapshot_wal_bytes: u64,
    /// Take a snapshot this long after the previous one (`None`: only on
    /// the other triggers).
    pub snapshot_interval: Option<Duration>,
    /// The restart budget: snapshot before a restart would replay the WAL
    /// for longer, and after a recovery that did (`None`: off).
    pub max_replay: Option<Duration>,
    /// How long a stop waits for the calls in flight (a stream whose
    /// client stopped reading would hold it forever) before it closes
    /// them and shuts the index down anyway.
    pub stop_grace: Duration,
    /// Threads that replay the WAL at start.
    pub replay_workers: ReplayWorkers,
    /// Prometheus `GET /metrics` on this address; `None`: off (the
    /// default of [`ServeConfig::new`], so tests do not share a port).
    pub metrics_listen: Option<SocketAddr>,
    /// The Redis protocol (RESP2) on this address, served by the
    /// `uuidmap-resp` crate beside gRPC; `None`: off (the default).
    pub resp_listen: Option<SocketAddr>,
    /// Serve as a member of a replica group; `None`: a single node (the
    /// default).
    pub cluster: Option<ClusterOptions>,
    /// Serve one group's partitions of a partitioned cluster (`--etcd`);
    /// `None`: the whole keyspace (the default).
    pub partitions: Option<PartitionOptions>,
}

/// How a server serves its group's partitions (`--etcd` and the options
/// that go with it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionOptions {
    /// etcd's client URLs.
    pub etcd: Vec<String>,
    /// The cluster's name in etcd.
    pub cluster: String,
    /// The group this server serves.
    pub group: uuidmap_partition::GroupName,
    /// The server's name among its group's members in etcd: `node-<ID>`
    /// for a replica group member, `single` for a single node.
    pub member: String,
    /// The URL registered for clients to reach this server.
    pub advertise_url: String,
    /// How long the registration outlives its last renewal.
    pub lease_ttl: Duration,
}

/// How a member of a replica group serves (`--node-id` and the options
/// that go with it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Its node id: at least 1, never reused for another member.
    pub node_id: u64,
    /// Where it listens for the other members' Raft calls.
    pub raft_listen: SocketAddr,
    /// The address the others dial for it (host:port).
    pub raft_advertise: String,
    /// The URL clients are sent to when it leads.
    pub advertise_url: String,
    /// Where Redis-protocol clients are sent (`MOVED`) when it leads
    /// (host:port): `--resp-listen`, its host taken from `advertise_url`
    /// when it listens on every interface; empty without `--resp-listen`.
    pub resp_advertise: String,
    /// The other members it is started with.
    pub peers: Vec<Peer>,
    /// Make the group of this member and its peers, if it is not made yet.
    pub init: bool,
    /// Take a snapshot once this many log entries were applied since the
    /// last (0: only on the snapshot interval).
    pub snapshot_entries: u64,
    /// Log entries kept behind the newest snapshot.
    pub keep_entries: u64,
    /// The address (host:port) to dial for a member's Raft service
    /// instead of the one in the membership, by node id (`--raft-dial`).
    pub dial: HashMap<u64, String>,
    /// mTLS on the Raft port (`--raft-tls-*`); `None`: plaintext.
    pub tls: Option<RaftTlsFiles>,
    /// Serve plaintext, unauthenticated Raft on a non-loopback address
    /// (`--raft-insecure`).
    pub raft_insecure: bool,
}

/// Another member, as `--peers` names it: `ID=RAFT_ADDR@CLIENT_URL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its node id.
    pub id: u64,
    /// The address its Raft service listens on (host:port).
    pub raft_addr: String,
    /// The URL its clients use.
    pub client_url: String,
}

impl ServeConfig {
    /// The options' defaults (`options`), with `data_dir`, and with the
    /// metrics endpoint off (the embedder's choice, as in tests; `serve`'s
    /// own default turns it on).
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        ServeOptions {
            data_dir: Some(data_dir.into()),
            metrics_listen: Some(MetricsListen(None)),
            ..ServeOptions::default()
        }
        .into_config()
        .expect("the defaults are valid")
    }
}
