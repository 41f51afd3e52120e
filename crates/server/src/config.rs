//! Options of `uuidmap serve`: command-line flags, `UUIDMAP_*` environment
//! variables and an optional TOML file.
//!
//! Precedence, highest first: a flag, its environment variable, the TOML
//! file (`--config` / `UUIDMAP_CONFIG`), the default. Defaults: listen on
//! `127.0.0.1:7878`, data in `./uuidmap-data`, fsync `always`, metrics on
//! `127.0.0.1:7879` (`ServeConfig::new`, used by tests: metrics off).
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
//! wal_file_bytes = 67108864           # 64 MiB; at least 1 MiB
//! snapshot_wal_bytes = 268435456      # 256 MiB; at least 1 MiB
//! snapshot_interval = 600             # seconds, or "10m", or "off"; at least 1 s
//! max_replay_ms = 500                 # restart budget, or "off"; at least 1 ms
//! stop_grace_ms = 10000               # calls still open this long after a stop are closed
//! replay_workers = "auto"             # or "serial", or a thread count
//! wal_preallocate = "on"              # or "off"
//! wal_overlap_syncs = "off"           # or "on"
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
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::metrics::{DEFAULT_METRICS_LISTEN, MetricsListen};
use super::tls::{RaftTlsFiles, TlsFiles};
use uuidmap_engine::store::replay_apply::ReplayWorkers;
use uuidmap_engine::store::wal::Preallocate;
use uuidmap_engine::writer::{DurableConfig, FsyncPolicy};

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// How long a stop waits for the calls in flight by default.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);
/// The default data directory (relative to the working directory).
pub const DEFAULT_DATA_DIR: &str = "uuidmap-data";
/// The smallest `--wal-file-bytes`: smaller files would mean a file
/// creation (and directory fsync) every few writes.
pub const MIN_WAL_FILE_BYTES: u64 = 1 << 20;
/// The smallest `--snapshot-wal-bytes`: every snapshot writes the whole
/// index, so it must not be asked for every few writes.
pub const MIN_SNAPSHOT_WAL_BYTES: u64 = 1 << 20;
/// The shortest `--snapshot-interval`, for the same reason.
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
    fn default() -> Self {
        Limits {
            max_batch_keys: 65_536,
            max_write_ops: 100_000,
            max_wait: Duration::from_secs(60),
            max_filter_values: 65_536,
        }
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
    fn default() -> Self {
        AdmissionLimits {
            read_permits: 1024,
            read_queue: 512,
            write_permits: 256,
            write_queue: 512,
            scan_permits: 4,
            scan_queue: 64,
            max_long_polls: 100_000,
        }
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
    /// Serve as a member of a replica group; `None`: a single node (the
    /// default).
    pub cluster: Option<ClusterOptions>,
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

/// `--peers`: members separated by commas, each `ID=RAFT_ADDR@CLIENT_URL`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peers(pub Vec<Peer>);

impl FromStr for Peers {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let peers = parse_id_list(
            s,
            "is not a peer",
            "ID=RAFT_ADDR@CLIENT_URL, for example 2=10.0.0.2:7880@http://10.0.0.2:7878",
            |id, rest| {
                let (raft_addr, client_url) = rest.split_once('@').ok_or("no `@`")?;
                check_host_port(raft_addr)?;
                check_url(client_url)?;
                Ok(Peer {
                    id,
                    raft_addr: raft_addr.to_string(),
                    client_url: client_url.to_string(),
                })
            },
        )?;
        Ok(Peers(peers.into_iter().map(|(_, peer)| peer).collect()))
    }
}

/// `--raft-dial`: `ID=HOST:PORT` items separated by commas, in the order
/// given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaftDial(pub Vec<(u64, String)>);

impl FromStr for RaftDial {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let dial = parse_id_list(
            s,
            "is not an address to dial",
            "ID=HOST:PORT, for example 2=127.0.0.1:17890",
            |_, addr| {
                let addr = addr.trim();
                check_host_port(addr)?;
                Ok(addr.to_string())
            },
        )?;
        Ok(RaftDial(dial))
    }
}

/// Parses `ID=REST` items separated by commas (empty items skipped), in
/// the order given: each id a node id (a number from 1), no id twice, and
/// `rest` made into a `T` by `item` (an error says why not). An error
/// names the item, says `what` it is not and why, and how to write one
/// (`form`).
fn parse_id_list<T>(
    s: &str,
    what: &str,
    form: &str,
    item: impl Fn(u64, &str) -> Result<T, String>,
) -> Result<Vec<(u64, T)>, String> {
    let mut out: Vec<(u64, T)> = Vec::new();
    for text in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = |why: &str| format!("{text:?} {what} ({why}): write {form}");
        let (id, rest) = text.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| bad("the id is not a number"))?;
        if id == 0 {
            return Err(bad("node ids start at 1"));
        }
        let value = item(id, rest).map_err(|why| bad(&why))?;
        if out.iter().any(|(i, _)| *i == id) {
            return Err(bad("this id is given twice"));
        }
        out.push((id, value));
    }
    Ok(out)
}

/// `host:port`, with a port.
fn check_host_port(addr: &str) -> Result<(), String> {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(format!("{addr:?} is not host:port")),
    }
}

/// An `http://` or `https://` URL.
fn check_url(url: &str) -> Result<(), String> {
    match url.split_once("://") {
        Some(("http" | "https", rest)) if !rest.is_empty() => Ok(()),
        _ => Err(format!("{url:?} is not an http:// or https:// URL")),
    }
}

impl ServeConfig {
    /// The defaults, with `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        let data_dir = data_dir.into();
        // The store's defaults are stated once, in `DurableConfig::new`.
        let store = DurableConfig::new(&data_dir);
        ServeConfig {
            listen: DEFAULT_LISTEN.parse().expect("the default address parses"),
            data_dir,
            fsync: FsyncPolicy::Always,
            insecure: false,
            tls: None,
            tokens_file: None,
            limits: Limits::default(),
            admission: AdmissionLimits::default(),
            wal_file_bytes: store.wal_segment_bytes,
            wal_preallocate: store.wal_preallocate,
            wal_overlap_syncs: store.pipeline.overlap_syncs,
            snapshot_wal_bytes: store.pipeline.snapshot_every_bytes,
            snapshot_interval: store.snapshot_every,
            max_replay: store.max_replay,
            stop_grace: DEFAULT_STOP_GRACE,
            replay_workers: store.recovery.replay_workers,
            metrics_listen: None,
            cluster: None,
        }
    }
}

/// Declares the options of `uuidmap serve` once. Each field becomes a flag
/// (`--read-permits`), an environment variable (`UUIDMAP_READ_PERMITS`,
/// through clap's `env`) and a key of the TOML file (`read_permits`); a test
/// checks that the three spellings follow that rule, which is how error
/// messages name them. Every field is optional, so that a set of options can
/// be laid over another ([`ServeOptions::or`]) and the defaults come last,
/// in [`ServeOptions::into_config`].
macro_rules! serve_options {
    ($( $(#[$attr:meta])* $field:ident : $ty:ty, )*) => {
        /// The options of `uuidmap serve`, as flags and environment
        /// variables (clap) or as the keys of the TOML file (serde). A TOML
        /// value is read as the flag's text is, so `snapshot_interval = 30`
        /// and `snapshot_interval = "30s"` mean the same.
        #[derive(clap::Args, Deserialize, Clone, Debug, Default)]
        #[serde(deny_unknown_fields)]
        pub struct ServeOptions {
            $(
                $(#[$attr])*
                #[serde(default, deserialize_with = "as_flag_text")]
                pub $field: Option<$ty>,
            )*
        }

        impl ServeOptions {
            /// Each option of `self`, else of `lower`.
            pub fn or(self, lower: ServeOptions) -> ServeOptions {
                ServeOptions {
                    $( $field: self.$field.or(lower.$field), )*
                }
            }
        }
    };
}

serve_options! {
    /// Address to listen on [default: 127.0.0.1:7878]. Without TLS and
    /// auth, only loopback addresses are accepted unless --insecure.
    #[arg(long, env = "UUIDMAP_LISTEN")]
    listen: SocketAddr,
    /// The data directory [default: ./uuidmap-data].
    #[arg(long, env = "UUIDMAP_DATA_DIR")]
    data_dir: PathBuf,
    /// WAL fsync policy: `always`, `never` or `interval=<ms>` [default: always].
    #[arg(long, env = "UUIDMAP_FSYNC")]
    fsync: FsyncPolicy,
    /// Listen on a non-loopback address without TLS or auth: anyone who can
    /// reach the port can read and change every entry.
    #[arg(
        long,
        env = "UUIDMAP_INSECURE",
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    insecure: bool,
    /// Serve TLS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "UUIDMAP_TLS_CERT")]
    tls_cert: PathBuf,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "UUIDMAP_TLS_KEY")]
    tls_key: PathBuf,
    /// Require client certificates signed by this CA (PEM): mTLS.
    #[arg(long, env = "UUIDMAP_TLS_CLIENT_CA")]
    tls_client_ca: PathBuf,
    /// Require bearer tokens: a file of `read <token>` / `write <token>`
    /// lines (see the README).
    #[arg(long, env = "UUIDMAP_TOKENS_FILE")]
    tokens_file: PathBuf,
    /// Most keys in one BatchGet [default: 65536].
    #[arg(long, env = "UUIDMAP_MAX_BATCH_KEYS")]
    max_batch_keys: usize,
    /// Most operations in one Write [default: 100000].
    #[arg(long, env = "UUIDMAP_MAX_WRITE_OPS")]
    max_write_ops: usize,
    /// Longest wait for min_lsn or WaitFor, in ms [default: 60000].
    #[arg(long, env = "UUIDMAP_MAX_WAIT_MS")]
    max_wait_ms: u64,
    /// Most values in one Scan filter [default: 65536].
    #[arg(long, env = "UUIDMAP_MAX_FILTER_VALUES")]
    max_filter_values: usize,
    /// Reads (Get, BatchGet, Stats, Ping) running at once [default: 1024].
    #[arg(long, env = "UUIDMAP_READ_PERMITS")]
    read_permits: usize,
    /// Reads waiting for a permit; beyond, RESOURCE_EXHAUSTED [default: 512].
    #[arg(long, env = "UUIDMAP_READ_QUEUE")]
    read_queue: usize,
    /// Writes (Put, Delete, CompareAndSet, Write, Snapshot) running at once
    /// [default: 256].
    #[arg(long, env = "UUIDMAP_WRITE_PERMITS")]
    write_permits: usize,
    /// Writes waiting for a permit; beyond, RESOURCE_EXHAUSTED [default: 512].
    #[arg(long, env = "UUIDMAP_WRITE_QUEUE")]
    write_queue: usize,
    /// Scans streaming at once [default: 4].
    #[arg(long, env = "UUIDMAP_SCAN_PERMITS")]
    scan_permits: usize,
    /// Scans waiting for a permit; beyond, RESOURCE_EXHAUSTED [default: 64].
    #[arg(long, env = "UUIDMAP_SCAN_QUEUE")]
    scan_queue: usize,
    /// WaitFor and Watch calls open at once; beyond, RESOURCE_EXHAUSTED
    /// [default: 100000].
    #[arg(long, env = "UUIDMAP_MAX_LONG_POLLS")]
    max_long_polls: usize,
    /// Serve Prometheus metrics (plain HTTP, GET /metrics) on this address,
    /// or `off` [default: 127.0.0.1:7879]. Only loopback unless --insecure.
    #[arg(long, env = "UUIDMAP_METRICS_LISTEN")]
    metrics_listen: MetricsListen,
    /// Start a new WAL file when the current one reaches this many bytes;
    /// at least 1 MiB [default: 67108864 (64 MiB)]. A snapshot lets the
    /// files it covers be removed, and Watch can start only as far back as
    /// the oldest file kept.
    #[arg(long, env = "UUIDMAP_WAL_FILE_BYTES")]
    wal_file_bytes: u64,
    /// Take a snapshot each time this many bytes were written to the WAL;
    /// at least 1 MiB [default: 268435456 (256 MiB)]. Bounds the WAL a
    /// restart replays; each snapshot writes the whole index.
    #[arg(long, env = "UUIDMAP_SNAPSHOT_WAL_BYTES")]
    snapshot_wal_bytes: u64,
    /// Take a snapshot this long after the previous one: seconds (600), or
    /// with a unit (90s, 10m, 1h), at least 1 s; or `off` for snapshots
    /// only on WAL growth, on request and at shutdown [default: 600].
    #[arg(long, env = "UUIDMAP_SNAPSHOT_INTERVAL")]
    snapshot_interval: SnapshotInterval,
    /// The restart budget in milliseconds, at least 1, or `off`: take a
    /// snapshot before the WAL a restart would replay takes longer than
    /// this to replay (at the replay rate the last recovery measured, or a
    /// conservative default), and right after a recovery whose replay took
    /// longer. --snapshot-wal-bytes and --snapshot-interval stay as caps
    /// [default: 500].
    #[arg(long, env = "UUIDMAP_MAX_REPLAY_MS")]
    max_replay_ms: MaxReplay,
    /// Milliseconds a stop (SIGTERM, Ctrl-C) waits for the calls in
    /// flight to finish before it closes them: a stream whose client
    /// stopped reading would otherwise hold the stop forever. Writes
    /// already queued are drained and synced either way [default: 10000].
    #[arg(long, env = "UUIDMAP_STOP_GRACE_MS")]
    stop_grace_ms: u64,
    /// Threads that replay the WAL at start: `auto` (one per core),
    /// `serial` (on the starting thread), or a count [default: auto].
    #[arg(long, env = "UUIDMAP_REPLAY_WORKERS")]
    replay_workers: ReplayWorkers,
    /// `on`: make each next WAL file ahead of need, on a background
    /// thread, as a file of written zeros (one --wal-file-bytes of disk
    /// beyond the WAL), so that a WAL fsync is a data-only flush and
    /// cheaper; `off`: WAL files grow as they are written [default: on].
    #[arg(long, env = "UUIDMAP_WAL_PREALLOCATE")]
    wal_preallocate: Preallocate,
    /// Under --fsync always: `on` overlaps the fsync of one write group
    /// with writing the next while writes keep coming (a second thread
    /// runs the fsync; a lone writer is still synced inline), `off` syncs
    /// every group on the writer thread. Off by default: on a 2-core
    /// machine shared with its clients it cost throughput (BENCHMARKS.md)
    /// [default: off].
    #[arg(long, env = "UUIDMAP_WAL_OVERLAP_SYNCS")]
    wal_overlap_syncs: OnOff,
    /// Serve as member N (at least 1) of a replica group, replicated with
    /// Raft, instead of as a single node; needs --raft-listen. The data
    /// directory then holds the member's Raft log (README, "Replica
    /// groups").
    #[arg(long, env = "UUIDMAP_NODE_ID")]
    node_id: u64,
    /// Where a member listens for the other members' Raft calls. Only
    /// loopback, unless with --raft-tls-cert/key/ca, or --raft-insecure.
    #[arg(long, env = "UUIDMAP_RAFT_LISTEN")]
    raft_listen: SocketAddr,
    /// The address (host:port) the other members dial for this one
    /// [default: --raft-listen].
    #[arg(long, env = "UUIDMAP_RAFT_ADVERTISE")]
    raft_advertise: String,
    /// The URL clients are sent to when this member leads [default:
    /// http:// (https:// with TLS) and --listen].
    #[arg(long, env = "UUIDMAP_ADVERTISE_URL")]
    advertise_url: String,
    /// The other members: ID=RAFT_ADDR@CLIENT_URL, separated by commas.
    #[arg(long, env = "UUIDMAP_PEERS")]
    peers: Peers,
    /// On one member, once: make the replica group of this member and
    /// --peers, all voters. Ignored (with a note in the log) when the
    /// group is made already, so it may stay set.
    #[arg(
        long,
        env = "UUIDMAP_CLUSTER_INIT",
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    cluster_init: bool,
    /// A member takes a snapshot once this many Raft log entries were
    /// applied since its last one (0: only on --snapshot-interval)
    /// [default: 100000].
    #[arg(long, env = "UUIDMAP_RAFT_SNAPSHOT_ENTRIES")]
    raft_snapshot_entries: u64,
    /// Raft log entries a member keeps behind its newest snapshot: a
    /// member further behind is sent the snapshot instead [default:
    /// 10000].
    #[arg(long, env = "UUIDMAP_RAFT_KEEP_ENTRIES")]
    raft_keep_entries: u64,
    /// The address this member dials for member ID's Raft service instead
    /// of the one in the membership (a proxy, a NAT'd address):
    /// ID=HOST:PORT, separated by commas.
    #[arg(long, env = "UUIDMAP_RAFT_DIAL")]
    raft_dial: RaftDial,
    /// The member's Raft certificate (PEM, leaf first): SAN DNS name
    /// `node-<ID>.raft.uuidmap`, usable for serverAuth and clientAuth. With
    /// --raft-tls-key and --raft-tls-ca: mTLS on the Raft port.
    #[arg(long, env = "UUIDMAP_RAFT_TLS_CERT")]
    raft_tls_cert: PathBuf,
    /// The private key (PEM) of --raft-tls-cert.
    #[arg(long, env = "UUIDMAP_RAFT_TLS_KEY")]
    raft_tls_key: PathBuf,
    /// The Raft CA (PEM): the members' certificates must chain to it.
    #[arg(long, env = "UUIDMAP_RAFT_TLS_CA")]
    raft_tls_ca: PathBuf,
    /// Serve Raft on a non-loopback --raft-listen without TLS: plaintext
    /// and unauthenticated, so anyone who can reach the port can rewrite
    /// the group's log. Only on a network the members alone share.
    #[arg(
        long,
        env = "UUIDMAP_RAFT_INSECURE",
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    raft_insecure: bool,
}

/// The command line of `uuidmap serve`: where the TOML file is, and the
/// options, which override the file's.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ServeArgs {
    /// A TOML file with any of the options below (flags and environment
    /// variables override it).
    #[arg(long, env = "UUIDMAP_CONFIG")]
    pub config: Option<PathBuf>,
    /// The options given as flags or environment variables.
    #[command(flatten)]
    pub options: ServeOptions,
}

/// A TOML value read as the flag's text would be: a string as it is, a
/// number or a boolean as it is written. So each option has one parser,
/// its `FromStr`, and one error message for both spellings.
fn as_flag_text<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: FromStr,
    T::Err: std::fmt::Display,
{
    #[derive(Deserialize)]
    #[serde(untagged, expecting = "a string, a number or true/false")]
    enum Scalar {
        Text(String),
        Integer(i64),
        Float(f64),
        Bool(bool),
    }
    let text = match Scalar::deserialize(d)? {
        Scalar::Text(t) => t,
        Scalar::Integer(n) => n.to_string(),
        Scalar::Float(x) => x.to_string(),
        Scalar::Bool(b) => b.to_string(),
    };
    text.parse()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("{e}")))
}

/// A switch: `on` or `off` (also `true` or `false`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnOff(pub bool);

impl FromStr for OnOff {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" | "true" => Ok(OnOff(true)),
            "off" | "false" => Ok(OnOff(false)),
            _ => Err(format!("{s:?} is not a switch: give `on` or `off`")),
        }
    }
}

/// `--max-replay-ms`: milliseconds, or `off` (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxReplay(pub Option<Duration>);

impl FromStr for MaxReplay {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") {
            return Ok(MaxReplay(None));
        }
        s.parse::<u64>()
            .map(|ms| MaxReplay(Some(Duration::from_millis(ms))))
            .map_err(|_| format!("{s:?} is not a budget: give milliseconds (500) or `off`"))
    }
}

/// `--snapshot-interval`: a duration, or `off` (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotInterval(pub Option<Duration>);

impl FromStr for SnapshotInterval {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") {
            return Ok(SnapshotInterval(None));
        }
        let unit_at = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (number, unit) = s.split_at(unit_at);
        let scale = match unit {
            "" | "s" => 1,
            "m" => 60,
            "h" => 3600,
            _ => 0,
        };
        match number.parse::<u64>() {
            Ok(n) if scale > 0 => Ok(SnapshotInterval(Some(Duration::from_secs(
                n.saturating_mul(scale),
            )))),
            _ => Err(format!(
                "{s:?} is not an interval: give seconds (600), a number with a unit \
                 (90s, 10m, 1h), or `off`"
            )),
        }
    }
}

/// Options that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read the config file {path}: {source}")]
    Read {
        /// The config file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for these options.
    #[error("the config file {path} is not valid: {message}")]
    Parse {
        /// The config file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// An option is below its minimum.
    #[error(
        "--{flag} must be at least {min} (it is {value}: {why}); set it with --{flag}, \
         UUIDMAP_{env} or `{option} = ...` in the config file",
        flag = option.replace('_', "-"),
        env = option.to_ascii_uppercase(),
    )]
    TooSmall {
        /// The option, as its config file key (`read_permits`); its flag
        /// and variable follow from it.
        option: &'static str,
        /// The smallest value allowed.
        min: String,
        /// The value given.
        value: String,
        /// Why the minimum.
        why: &'static str,
    },
    /// TLS options that do not fit together.
    #[error("{0}")]
    Tls(&'static str),
    /// Replica group options that do not fit together.
    #[error("{0}")]
    Cluster(String),
}

impl ServeArgs {
    /// The options: the flags (and environment) over the file over the
    /// defaults, checked.
    pub fn resolve(&self) -> Result<ServeConfig, ConfigError> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => ServeOptions::default(),
        };
        self.options.clone().or(file).into_config()
    }
}

impl ServeOptions {
    /// A server configuration: these options over the defaults, each
    /// checked against its minimum.
    pub fn into_config(self) -> Result<ServeConfig, ConfigError> {
        // Checked last, against the listen address and TLS.
        let cluster = ServeOptions {
            node_id: self.node_id,
            raft_listen: self.raft_listen,
            raft_advertise: self.raft_advertise.clone(),
            advertise_url: self.advertise_url.clone(),
            peers: self.peers.clone(),
            cluster_init: self.cluster_init,
            raft_snapshot_entries: self.raft_snapshot_entries,
            raft_keep_entries: self.raft_keep_entries,
            raft_dial: self.raft_dial.clone(),
            raft_tls_cert: self.raft_tls_cert.clone(),
            raft_tls_key: self.raft_tls_key.clone(),
            raft_tls_ca: self.raft_tls_ca.clone(),
            raft_insecure: self.raft_insecure,
            ..ServeOptions::default()
        };
        let mut c = ServeConfig::new(self.data_dir.unwrap_or_else(|| DEFAULT_DATA_DIR.into()));
        let or = |value: Option<usize>, default: usize| value.unwrap_or(default);
        c.listen = self.listen.unwrap_or(c.listen);
        c.fsync = self.fsync.unwrap_or(c.fsync);
        c.insecure = self.insecure.unwrap_or(false);
        c.tls = tls_files(self.tls_cert, self.tls_key, self.tls_client_ca)?;
        c.tokens_file = self.tokens_file;
        c.metrics_listen = self
            .metrics_listen
            .unwrap_or_else(|| DEFAULT_METRICS_LISTEN.parse().expect("the default parses"))
            .0;

        let l = &mut c.limits;
        l.max_batch_keys = at_least_1(
            "max_batch_keys",
            or(self.max_batch_keys, l.max_batch_keys),
            "no BatchGet could hold a key",
        )?;
        l.max_write_ops = at_least_1(
            "max_write_ops",
            or(self.max_write_ops, l.max_write_ops),
            "no Write could hold an operation",
        )?;
        l.max_filter_values = at_least_1(
            "max_filter_values",
            or(self.max_filter_values, l.max_filter_values),
            "no Scan filter could hold a value",
        )?;
        if let Some(ms) = self.max_wait_ms {
            l.max_wait = Duration::from_millis(ms);
        }

        let a = &mut c.admission;
        a.read_permits = at_least_1(
            "read_permits",
            or(self.read_permits, a.read_permits),
            "no read could ever run",
        )?;
        a.read_queue = at_least_1(
            "read_queue",
            or(self.read_queue, a.read_queue),
            "no read could wait for a permit",
        )?;
        a.write_permits = at_least_1(
            "write_permits",
            or(self.write_permits, a.write_permits),
            "no write could ever run",
        )?;
        a.write_queue = at_least_1(
            "write_queue",
            or(self.write_queue, a.write_queue),
            "no write could wait for a permit",
        )?;
        a.scan_permits = at_least_1(
            "scan_permits",
            or(self.scan_permits, a.scan_permits),
            "no scan could ever run",
        )?;
        a.scan_queue = at_least_1(
            "scan_queue",
            or(self.scan_queue, a.scan_queue),
            "no scan could wait for a permit",
        )?;
        a.max_long_polls = at_least_1(
            "max_long_polls",
            or(self.max_long_polls, a.max_long_polls),
            "every WaitFor and Watch would be refused",
        )?;

        c.wal_file_bytes = self.wal_file_bytes.unwrap_or(c.wal_file_bytes);
        if c.wal_file_bytes < MIN_WAL_FILE_BYTES {
            return Err(ConfigError::TooSmall {
                option: "wal_file_bytes",
                min: format!("{MIN_WAL_FILE_BYTES} (1 MiB)"),
                value: c.wal_file_bytes.to_string(),
                why: "smaller files would mean a new file every few writes",
            });
        }
        c.snapshot_wal_bytes = self.snapshot_wal_bytes.unwrap_or(c.snapshot_wal_bytes);
        if c.snapshot_wal_bytes < MIN_SNAPSHOT_WAL_BYTES {
            return Err(ConfigError::TooSmall {
                option: "snapshot_wal_bytes",
                min: format!("{MIN_SNAPSHOT_WAL_BYTES} (1 MiB)"),
                value: c.snapshot_wal_bytes.to_string(),
                why: "each snapshot writes the whole index, so not every few writes",
            });
        }
        if let Some(SnapshotInterval(every)) = self.snapshot_interval {
            c.snapshot_interval = every;
        }
        if let Some(every) = c.snapshot_interval
            && every < MIN_SNAPSHOT_INTERVAL
        {
            return Err(ConfigError::TooSmall {
                option: "snapshot_interval",
                min: "1 second".into(),
                value: format!("{} s", every.as_secs()),
                why: "each snapshot writes the whole index; use `off` to turn timed \
                      snapshots off",
            });
        }
        if let Some(MaxReplay(budget)) = self.max_replay_ms {
            c.max_replay = budget;
        }
        if c.max_replay.is_some_and(|b| b.is_zero()) {
            return Err(ConfigError::TooSmall {
                option: "max_replay_ms",
                min: "1".into(),
                value: "0".into(),
                why: "no restart replays in no time; use `off` to size snapshots by \
                      --snapshot-wal-bytes alone",
            });
        }
        c.replay_workers = self.replay_workers.unwrap_or(c.replay_workers);
        if let Some(ms) = self.stop_grace_ms {
            c.stop_grace = Duration::from_millis(ms);
        }
        c.wal_preallocate = self.wal_preallocate.unwrap_or(c.wal_preallocate);
        c.wal_overlap_syncs = self
            .wal_overlap_syncs
            .map_or(c.wal_overlap_syncs, |OnOff(on)| on);
        c.cluster = cluster.cluster_options(&c)?;
        Ok(c)
    }

    /// The replica group options, checked (`None`: a single node).
    fn cluster_options(&self, c: &ServeConfig) -> Result<Option<ClusterOptions>, ConfigError> {
        let err = |m: String| Err(ConfigError::Cluster(m));
        let Some(node_id) = self.node_id else {
            let given = [
                ("--raft-listen", self.raft_listen.is_some()),
                ("--raft-advertise", self.raft_advertise.is_some()),
                ("--advertise-url", self.advertise_url.is_some()),
                ("--peers", self.peers.is_some()),
                ("--cluster-init", self.cluster_init == Some(true)),
                (
                    "--raft-snapshot-entries",
                    self.raft_snapshot_entries.is_some(),
                ),
                ("--raft-keep-entries", self.raft_keep_entries.is_some()),
                ("--raft-dial", self.raft_dial.is_some()),
                ("--raft-tls-cert", self.raft_tls_cert.is_some()),
                ("--raft-tls-key", self.raft_tls_key.is_some()),
                ("--raft-tls-ca", self.raft_tls_ca.is_some()),
                ("--raft-insecure", self.raft_insecure == Some(true)),
            ];
            return match given.iter().find(|(_, on)| *on) {
                Some((flag, _)) => err(format!(
                    "{flag} is an option of a replica group member: give --node-id too, or \
                     leave it out to serve a single node"
                )),
                None => Ok(None),
            };
        };
        if node_id == 0 {
            return err("--node-id must be at least 1".into());
        }
        let Some(raft_listen) = self.raft_listen else {
            return err(format!(
                "member {node_id} needs --raft-listen: the address the other members' Raft \
                 calls reach it on (another port than --listen)"
            ));
        };
        if raft_listen == c.listen {
            return err(format!(
                "--raft-listen and --listen are both {raft_listen}: give the Raft traffic its own \
                 port"
            ));
        }
        let raft_advertise = match &self.raft_advertise {
            Some(a) => {
                check_host_port(a)
                    .map_err(|why| ConfigError::Cluster(format!("--raft-advertise: {why}")))?;
                a.clone()
            }
            None if raft_listen.ip().is_unspecified() => {
                return err(format!(
                    "--raft-listen {raft_listen} is every interface: give --raft-advertise, the \
                     address the other members dial for this one"
                ));
            }
            None => raft_listen.to_string(),
        };
        let advertise_url = match &self.advertise_url {
            Some(u) => {
                check_url(u)
                    .map_err(|why| ConfigError::Cluster(format!("--advertise-url: {why}")))?;
                u.clone()
            }
            None if c.listen.ip().is_unspecified() => {
                return err(format!(
                    "--listen {} is every interface: give --advertise-url, the URL clients are \
                     sent to when this member leads",
                    c.listen
                ));
            }
            None => format!(
                "{}://{}",
                if c.tls.is_some() { "https" } else { "http" },
                c.listen
            ),
        };
        let peers = self.peers.clone().unwrap_or_default().0;
        if peers.iter().any(|p| p.id == node_id) {
            return err(format!(
                "--peers names node {node_id}, which is this member (--node-id): list only the \
                 others"
            ));
        }
        let dial = self.raft_dial.clone().unwrap_or_default().0;
        if dial.iter().any(|(id, _)| *id == node_id) {
            return err(format!(
                "--raft-dial names node {node_id}, which is this member (--node-id): a member \
                 does not dial itself"
            ));
        }
        Ok(Some(ClusterOptions {
            node_id,
            raft_listen,
            raft_advertise,
            advertise_url,
            peers,
            init: self.cluster_init.unwrap_or(false),
            snapshot_entries: self
                .raft_snapshot_entries
                .unwrap_or(uuidmap_cluster::replica::SNAPSHOT_ENTRIES),
            keep_entries: self
                .raft_keep_entries
                .unwrap_or(uuidmap_cluster::replica::LOGS_TO_KEEP),
            dial: dial.into_iter().collect(),
            tls: self.raft_tls_files()?,
            raft_insecure: self.raft_insecure.unwrap_or(false),
        }))
    }

    /// The Raft TLS files: all three or none.
    fn raft_tls_files(&self) -> Result<Option<RaftTlsFiles>, ConfigError> {
        match (&self.raft_tls_cert, &self.raft_tls_key, &self.raft_tls_ca) {
            (Some(cert), Some(key), Some(ca)) => Ok(Some(RaftTlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            })),
            (None, None, None) => Ok(None),
            given => {
                let missing: Vec<&str> = [
                    ("--raft-tls-cert", given.0.is_none()),
                    ("--raft-tls-key", given.1.is_none()),
                    ("--raft-tls-ca", given.2.is_none()),
                ]
                .into_iter()
                .filter_map(|(flag, missing)| missing.then_some(flag))
                .collect();
                Err(ConfigError::Cluster(format!(
                    "--raft-tls-cert, --raft-tls-key and --raft-tls-ca go together (the member's \
                     certificate, its key, and the Raft CA, PEM): give all three or none; \
                     missing {}",
                    missing.join(" and ")
                )))
            }
        }
    }
}

/// `value`, unless it is 0: then the error naming `option`.
fn at_least_1(option: &'static str, value: usize, why: &'static str) -> Result<usize, ConfigError> {
    match value {
        0 => Err(ConfigError::TooSmall {
            option,
            min: "1".into(),
            value: "0".into(),
            why,
        }),
        n => Ok(n),
    }
}

/// The TLS files, when the combination makes sense.
fn tls_files(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
) -> Result<Option<TlsFiles>, ConfigError> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert,
            key,
            client_ca,
        })),
        (None, None) if client_ca.is_some() => Err(ConfigError::Tls(
            "--tls-client-ca needs TLS on: give --tls-cert and --tls-key too",
        )),
        (None, None) => Ok(None),
        _ => Err(ConfigError::Tls(
            "--tls-cert and --tls-key go together: give both (the certificate chain and its \
             private key, PEM) or neither",
        )),
    }
}

fn read_file(path: &Path) -> Result<ServeOptions, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(f: impl FnOnce(&mut ServeOptions)) -> Result<ServeConfig, String> {
        let mut o = ServeOptions {
            node_id: Some(1),
            raft_listen: Some("127.0.0.1:7880".parse().unwrap()),
            ..ServeOptions::default()
        };
        f(&mut o);
        o.into_config().map_err(|e| e.to_string())
    }

    /// `uuidmap serve`'s arguments as the binary parses them.
    fn parse(args: &[&str]) -> Result<ServeArgs, String> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        <Cli as clap::Parser>::try_parse_from(args)
            .map(|cli| cli.serve)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_member_is_made_of_its_id_its_raft_port_and_its_peers() {
        assert_eq!(ServeArgs::default().resolve().unwrap().cluster, None);
        let c = member(|o| {
            o.peers = Some(
                "2=127.0.0.1:7890@http://127.0.0.1:7888, 3=h3:7900@https://h3:7898"
                    .parse()
                    .unwrap(),
            );
            o.cluster_init = Some(true);
        })
        .unwrap()
        .cluster
        .unwrap();
        assert_eq!(c.node_id, 1);
        assert_eq!(
            c.raft_advertise, "127.0.0.1:7880",
            "defaults to --raft-listen"
        );
        assert_eq!(c.advertise_url, "http://127.0.0.1:7878", "from --listen");
        assert!(c.init);
        assert_eq!(
            c.peers,
            vec![
                Peer {
                    id: 2,
                    raft_addr: "127.0.0.1:7890".into(),
                    client_url: "http://127.0.0.1:7888".into()
                },
                Peer {
                    id: 3,
                    raft_addr: "h3:7900".into(),
                    client_url: "https://h3:7898".into()
                },
            ]
        );
        // The same from the TOML file.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uuidmap.toml");
        std::fs::write(
            &path,
            "node_id = 1\nraft_listen = \"127.0.0.1:7880\"\ncluster_init = true\n\
             peers = \"2=127.0.0.1:7890@http://127.0.0.1:7888,3=h3:7900@https://h3:7898\"\n",
        )
        .unwrap();
        let from_file = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        assert_eq!(from_file.resolve().unwrap().cluster, Some(c));
    }

    #[test]
    fn replica_group_options_that_do_not_fit_are_refused_in_words() {
        type Change = Box<dyn FnOnce(&mut ServeOptions)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|o| o.node_id = None),
                "--raft-listen is an option of a replica group member",
            ),
            (Box::new(|o| o.node_id = Some(0)), "at least 1"),
            (Box::new(|o| o.raft_listen = None), "needs --raft-listen"),
            (
                Box::new(|o| o.raft_listen = Some("127.0.0.1:7878".parse().unwrap())),
                "its own port",
            ),
            (
                Box::new(|o| o.raft_listen = Some("0.0.0.0:7880".parse().unwrap())),
                "give --raft-advertise",
            ),
            (
                Box::new(|o| o.listen = Some("0.0.0.0:7878".parse().unwrap())),
                "give --advertise-url",
            ),
            (
                Box::new(|o| o.advertise_url = Some("10.0.0.1:7878".into())),
                "not an http:// or https:// URL",
            ),
            (
                Box::new(|o| o.peers = Some("1=h:1@http://h:2".parse().unwrap())),
                "which is this member",
            ),
        ];
        for (change, words) in cases {
            let e = member(change).unwrap_err();
            assert!(e.contains(words), "{e:?} should say {words:?}");
        }
        for (peers, words) in [
            ("2=h:1", "no `@`"),
            ("x=h:1@http://h", "not a number"),
            ("0=h:1@http://h", "start at 1"),
            ("2=h@http://h", "not host:port"),
            ("2=h:1@ftp://h", "not an http"),
            ("2=h:1@http://h,2=g:1@http://g", "given twice"),
        ] {
            let e = peers.parse::<Peers>().unwrap_err();
            assert!(
                e.contains(words) && e.contains("ID=RAFT_ADDR@CLIENT_URL"),
                "{e}"
            );
        }
    }

    #[test]
    fn raft_dial_sends_a_members_raft_calls_elsewhere_and_a_bad_value_names_the_flag() {
        let member = ["serve", "--node-id", "1", "--raft-listen", "127.0.0.1:7880"];
        let with = |extra: &[&'static str]| [&member[..], extra].concat();
        let c = parse(&with(&["--raft-dial", "2=127.0.0.1:17890, 3=h3:17900"]))
            .unwrap()
            .resolve()
            .unwrap()
            .cluster
            .unwrap();
        let want: HashMap<u64, String> = [(2, "127.0.0.1:17890".into()), (3, "h3:17900".into())]
            .into_iter()
            .collect();
        assert_eq!(c.dial, want);
        // None given: the membership's addresses.
        let plain = parse(&member).unwrap().resolve().unwrap().cluster.unwrap();
        assert!(plain.dial.is_empty());
        // The same from the TOML file.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uuidmap.toml");
        std::fs::write(
            &path,
            "node_id = 1\nraft_listen = \"127.0.0.1:7880\"\n\
             raft_dial = \"2=127.0.0.1:17890,3=h3:17900\"\n",
        )
        .unwrap();
        let from_file = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        assert_eq!(from_file.resolve().unwrap().cluster.unwrap().dial, want);

        // A bad value: refused naming the flag and the form it takes.
        for (value, words) in [
            ("2", "no `=`"),
            ("x=h:1", "not a number"),
            ("0=h:1", "start at 1"),
            ("2=h", "not host:port"),
            ("2=h:1,2=g:1", "given twice"),
        ] {
            let e = parse(&with(&["--raft-dial", value])).unwrap_err();
            assert!(
                e.contains("--raft-dial") && e.contains(words) && e.contains("ID=HOST:PORT"),
                "{value}: {e}"
            );
        }
        // Only a member dials, and never itself.
        let e = parse(&["serve", "--raft-dial", "2=h:1"])
            .unwrap()
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--raft-dial is an option of a replica group member"),
            "{e}"
        );
        let e = parse(&with(&["--raft-dial", "1=h:1"]))
            .unwrap()
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(e.contains("which is this member"), "{e}");
    }

    #[test]
    fn defaults_are_loopback_7878_local_data_dir_and_fsync_always() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.listen, "127.0.0.1:7878".parse().unwrap());
        assert_eq!(c.data_dir, PathBuf::from("uuidmap-data"));
        assert_eq!(c.fsync, FsyncPolicy::Always);
        assert!(!c.insecure);
        assert_eq!(c.metrics_listen, Some("127.0.0.1:7879".parse().unwrap()));
    }

    #[test]
    fn metrics_listen_comes_from_the_flag_or_the_file_and_can_be_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uuidmap.toml");
        std::fs::write(&path, "metrics_listen = \"off\"\n").unwrap();
        let from_file = ServeArgs {
            config: Some(path.clone()),
            ..ServeArgs::default()
        };
        assert_eq!(from_file.resolve().unwrap().metrics_listen, None);
        let flag: MetricsListen = "127.0.0.1:9100".parse().unwrap();
        let flag_wins = ServeArgs {
            config: Some(path.clone()),
            options: ServeOptions {
                metrics_listen: Some(flag),
                ..ServeOptions::default()
            },
        };
        assert_eq!(flag_wins.resolve().unwrap().metrics_listen, flag.0);
        std::fs::write(&path, "metrics_listen = \"nowhere\"\n").unwrap();
        let e = from_file.resolve().unwrap_err().to_string();
        assert!(e.contains("metrics_listen") && e.contains("`off`"), "{e}");
        assert_eq!(ServeConfig::new("d").metrics_listen, None);
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uuidmap.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9000\"\ndata_dir = \"/from/file\"\nfsync = \"never\"\nmax_batch_keys = 10\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            options: ServeOptions {
                data_dir: Some("/from/flag".into()),
                ..ServeOptions::default()
            },
        };
        let c = args.resolve().unwrap();
        assert_eq!(c.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(c.data_dir, PathBuf::from("/from/flag"));
        assert_eq!(c.fsync, FsyncPolicy::Never);
        assert_eq!(c.limits.max_batch_keys, 10);
    }

    #[test]
    fn tls_needs_both_cert_and_key_and_client_ca_needs_tls() {
        let only_cert = ServeArgs {
            options: ServeOptions {
                tls_cert: Some("c.pem".into()),
                ..ServeOptions::default()
            },
            ..ServeArgs::default()
        };
        let e = only_cert.resolve().unwrap_err().to_string();
        assert!(e.contains("go together"), "{e}");
        let only_ca = ServeArgs {
            options: ServeOptions {
                tls_client_ca: Some("ca.pem".into()),
                ..ServeOptions::default()
            },
            ..ServeArgs::default()
        };
        let e = only_ca.resolve().unwrap_err().to_string();
        assert!(e.contains("needs TLS on"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uuidmap.toml");
        std::fs::write(
            &path,
            "tls_cert = \"c.pem\"\ntls_key = \"k.pem\"\ntokens_file = \"t\"\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            options: ServeOptions {
                tls_client_ca: Some("ca.pem".into()),
                ..ServeOptions::default()
            },
        };
        let c = args.resolve().unwrap();
        let tls = c.tls.unwrap();
        assert_eq!(tls.cert, PathBuf::from("c.pem"));
        assert_eq!(tls.client_ca, Some(PathBuf::from("ca.pem")));
        assert_eq!(c.tokens_file, Some(PathBuf::from("t")));
    }

    #[test]
    fn admission_limits_come_from_flags_then_file_then_defaults_and_zero_is_refused() {
        let defaults = ServeArgs::default().resolve().unwrap().admission;
        assert_eq!(defaults, AdmissionLimits::default());
        assert!(defaults.max_long_polls >= 50_000);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uuidmap.toml");
        std::fs::write(
            &path,
            "read_permits = 8\nread_queue = 9\nwrite_permits = 10\nwrite_queue = 11\n\
             scan_permits = 2\nscan_queue = 3\nmax_long_polls = 70000\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path.clone()),
            options: ServeOptions {
                scan_permits: Some(5),
                max_long_polls: Some(60_000),
                ..ServeOptions::default()
            },
        };
        let a = args.resolve().unwrap().admission;
        assert_eq!(
            a,
            AdmissionLimits {
                read_permits: 8,
                read_queue: 9,
                write_permits: 10,
                write_queue: 11,
                scan_permits: 5,
                scan_queue: 3,
                max_long_polls: 60_000,
            }
        );
        // Clap reads the flags and the environment variables.
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from([
            "serve",
            "--read-queue",
            "100",
            "--write-permits",
            "7",
            "--scan-queue",
            "1",
        ])
        .unwrap();
        let a = cli.serve.resolve().unwrap().admission;
        assert_eq!((a.read_queue, a.write_permits, a.scan_queue), (100, 7, 1));
        // Zero is refused, by name and with the way to set it.
        let zero = ServeArgs {
            options: ServeOptions {
                scan_permits: Some(0),
                ..ServeOptions::default()
            },
            ..ServeArgs::default()
        };
        let e = zero.resolve().unwrap_err().to_string();
        assert!(
            e.contains("--scan-permits must be at least 1")
                && e.contains("UUIDMAP_SCAN_PERMITS")
                && e.contains("scan_permits = "),
            "{e}"
        );
        std::fs::write(&path, "read_queue = 0\n").unwrap();
        let e = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(e.contains("--read-queue must be at least 1"), "{e}");
    }

    #[test]
    fn wal_file_and_snapshot_triggers_come_from_flags_then_file_and_minimums_are_refused() {
        let defaults = ServeArgs::default().resolve().unwrap();
        assert_eq!(defaults.wal_file_bytes, 64 << 20);
        assert_eq!(defaults.snapshot_wal_bytes, 256 << 20);
        assert_eq!(defaults.snapshot_interval, Some(Duration::from_secs(600)));
        assert_eq!(defaults.max_replay, Some(Duration::from_millis(500)));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uuidmap.toml");
        std::fs::write(
            &path,
            "wal_file_bytes = 2097152
snapshot_wal_bytes = 8388608
snapshot_interval = 30
max_replay_ms = 250
",
        )
        .unwrap();
        let from_file = ServeArgs {
            config: Some(path.clone()),
            ..ServeArgs::default()
        };
        let c = from_file.resolve().unwrap();
        assert_eq!(
            (c.wal_file_bytes, c.snapshot_wal_bytes, c.snapshot_interval),
            (2 << 20, 8 << 20, Some(Duration::from_secs(30)))
        );
        assert_eq!(c.max_replay, Some(Duration::from_millis(250)));

        // Flags win over the file.
        let mut args = parse(&[
            "serve",
            "--wal-file-bytes",
            "1048576",
            "--snapshot-interval",
            "10m",
        ])
        .unwrap();
        args.config = Some(path.clone());
        let c = args.resolve().unwrap();
        assert_eq!(
            (c.wal_file_bytes, c.snapshot_wal_bytes, c.snapshot_interval),
            (1 << 20, 8 << 20, Some(Duration::from_secs(600)))
        );
        let off = parse(&["serve", "--snapshot-interval", "off"]).unwrap();
        assert_eq!(off.resolve().unwrap().snapshot_interval, None);
        let mut budget = parse(&["serve", "--max-replay-ms", "100"]).unwrap();
        budget.config = Some(path.clone());
        assert_eq!(
            budget.resolve().unwrap().max_replay,
            Some(Duration::from_millis(100))
        );
        let off = parse(&["serve", "--max-replay-ms", "off"]).unwrap();
        assert_eq!(off.resolve().unwrap().max_replay, None);
        assert_eq!(defaults.wal_preallocate, Preallocate::Background);
        let off = parse(&["serve", "--wal-preallocate", "off"]).unwrap();
        assert_eq!(off.resolve().unwrap().wal_preallocate, Preallocate::Off);
        assert!(!defaults.wal_overlap_syncs);
        let on = parse(&["serve", "--wal-overlap-syncs", "on"]).unwrap();
        assert!(on.resolve().unwrap().wal_overlap_syncs);
        let e = parse(&["serve", "--wal-overlap-syncs", "maybe"]).unwrap_err();
        assert!(
            e.contains("--wal-overlap-syncs") && e.contains("`on`"),
            "{e}"
        );
        let e = parse(&["serve", "--wal-preallocate", "sometimes"]).unwrap_err();
        assert!(e.contains("--wal-preallocate") && e.contains("`on`"), "{e}");
        assert_eq!(defaults.replay_workers, ReplayWorkers::PerCore);
        for (flag, workers) in [
            ("serial", ReplayWorkers::Serial),
            ("3", ReplayWorkers::Threads(3)),
            ("auto", ReplayWorkers::PerCore),
        ] {
            let args = parse(&["serve", "--replay-workers", flag]).unwrap();
            assert_eq!(args.resolve().unwrap().replay_workers, workers);
        }
        let e = parse(&["serve", "--replay-workers", "0"]).unwrap_err();
        assert!(
            e.contains("--replay-workers") && e.contains("serial"),
            "{e}"
        );
        let e = parse(&["serve", "--max-replay-ms", "1s"]).unwrap_err();
        assert!(e.contains("--max-replay-ms") && e.contains("`off`"), "{e}");
        let e = parse(&["serve", "--snapshot-interval", "5 minutes"]).unwrap_err();
        assert!(
            e.contains("--snapshot-interval") && e.contains("`off`"),
            "{e}"
        );
        // (The variables are read by the binary in tests/serve_process.rs:
        // setting one here would race the other tests' threads.)

        // Below the minimums: refused, naming the option's three spellings.
        for (args, names) in [
            (
                &["serve", "--wal-file-bytes", "65536"][..],
                [
                    "--wal-file-bytes must be at least 1048576",
                    "UUIDMAP_WAL_FILE_BYTES",
                    "wal_file_bytes = ",
                ],
            ),
            (
                &["serve", "--snapshot-wal-bytes", "1000"][..],
                [
                    "--snapshot-wal-bytes must be at least 1048576",
                    "UUIDMAP_SNAPSHOT_WAL_BYTES",
                    "snapshot_wal_bytes = ",
                ],
            ),
            (
                &["serve", "--max-replay-ms", "0"][..],
                [
                    "--max-replay-ms must be at least 1",
                    "UUIDMAP_MAX_REPLAY_MS",
                    "max_replay_ms = ",
                ],
            ),
            (
                &["serve", "--snapshot-interval", "0"][..],
                [
                    "--snapshot-interval must be at least 1 second",
                    "UUIDMAP_SNAPSHOT_INTERVAL",
                    "`off`",
                ],
            ),
        ] {
            let e = parse(args).unwrap().resolve().unwrap_err().to_string();
            for name in names {
                assert!(e.contains(name), "{args:?}: {e}");
            }
        }
        std::fs::write(&path, "snapshot_interval = \"0s\"\n").unwrap();
        let e = from_file.resolve().unwrap_err().to_string();
        assert!(e.contains("--snapshot-interval must be at least"), "{e}");
        std::fs::write(
            &path,
            "max_replay_ms = \"off\"\nreplay_workers = \"serial\"\nwal_preallocate = \"off\"\n",
        )
        .unwrap();
        let c = from_file.resolve().unwrap();
        assert_eq!(
            (c.max_replay, c.replay_workers, c.wal_preallocate),
            (None, ReplayWorkers::Serial, Preallocate::Off)
        );
        std::fs::write(&path, "snapshot_interval = \"soon\"\n").unwrap();
        let e = from_file.resolve().unwrap_err().to_string();
        assert!(
            e.contains("uuidmap.toml") && e.contains("snapshot_interval"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_key_in_the_file_is_refused_with_the_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "lisen = \"127.0.0.1:1\"\n").unwrap();
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        let e = args.resolve().unwrap_err().to_string();
        assert!(e.contains("bad.toml") && e.contains("lisen"), "{e}");
    }

    #[test]
    fn the_raft_tls_files_go_together_and_name_what_is_missing() {
        let c = member(|o| {
            o.raft_tls_cert = Some("n1.pem".into());
            o.raft_tls_key = Some("n1.key".into());
            o.raft_tls_ca = Some("ca.pem".into());
        })
        .unwrap();
        let tls = c.cluster.unwrap().tls.expect("Raft TLS on");
        assert_eq!(tls.ca, PathBuf::from("ca.pem"));
        let e = member(|o| {
            o.raft_tls_cert = Some("n1.pem".into());
            o.raft_tls_key = Some("n1.key".into());
        })
        .unwrap_err();
        assert!(
            e.contains("all three") && e.contains("missing --raft-tls-ca"),
            "{e}"
        );
        assert!(member(|_| {}).unwrap().cluster.unwrap().tls.is_none());
        // A member's options, without --node-id.
        for f in [
            (|o: &mut ServeOptions| o.raft_tls_ca = Some("ca.pem".into())) as fn(&mut _),
            |o: &mut ServeOptions| o.raft_insecure = Some(true),
        ] {
            let mut o = ServeOptions::default();
            f(&mut o);
            let e = o.into_config().unwrap_err().to_string();
            assert!(e.contains("--node-id"), "{e}");
        }
        // --insecure is not --raft-insecure.
        let c = member(|o| o.insecure = Some(true)).unwrap();
        assert!(!c.cluster.unwrap().raft_insecure);
        let c = member(|o| o.raft_insecure = Some(true)).unwrap();
        assert!(c.cluster.unwrap().raft_insecure && !c.insecure);
    }

    #[test]
    fn each_option_is_a_flag_a_variable_and_a_file_key_spelled_alike() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uuidmap.toml");
        let command = Cli::command();
        let mut count = 0;
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            assert_eq!(arg.get_long(), Some(id.replace('_', "-").as_str()), "{id}");
            let env = arg.get_env().unwrap().to_str().unwrap();
            assert_eq!(env, format!("UUIDMAP_{}", id.to_ascii_uppercase()), "{id}");
            if id == "config" {
                continue;
            }
            // The key is known to the file (an unknown one is refused),
            // and a value no option takes is refused naming the key.
            std::fs::write(&path, format!("{id} = [1, 2]\n")).unwrap();
            let e = ServeArgs {
                config: Some(path.clone()),
                ..ServeArgs::default()
            }
            .resolve()
            .map(|_| ())
            .unwrap_err()
            .to_string();
            assert!(!e.contains("unknown field"), "{id}: {e}");
            assert!(
                e.contains(id) && e.contains("a string, a number or true/false"),
                "{id}: {e}"
            );
            count += 1;
        }
        assert_eq!(
            count, 41,
            "a new option? add it to the README and the module doc"
        );
    }

    #[test]
    fn a_file_value_is_read_as_the_flag_text_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uuidmap.toml");
        std::fs::write(
            &path,
            "insecure = true\nfsync = \"interval=5\"\nreplay_workers = 3\n\
             snapshot_interval = \"2m\"\nmax_replay_ms = 40\n",
        )
        .unwrap();
        let c = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        }
        .resolve()
        .unwrap();
        assert!(c.insecure);
        assert_eq!(c.fsync, "interval=5".parse().unwrap());
        assert_eq!(c.replay_workers, ReplayWorkers::Threads(3));
        assert_eq!(c.snapshot_interval, Some(Duration::from_secs(120)));
        assert_eq!(c.max_replay, Some(Duration::from_millis(40)));
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        for (args, insecure) in [
            (&["serve"][..], false),
            (&["serve", "--insecure"][..], true),
            (
                &["serve", "--insecure", "--listen", "127.0.0.1:1"][..],
                true,
            ),
            (&["serve", "--insecure=false"][..], false),
        ] {
            let cli = <Cli as clap::Parser>::try_parse_from(args).unwrap();
            assert_eq!(cli.serve.resolve().unwrap().insecure, insecure, "{args:?}");
        }
    }
}
