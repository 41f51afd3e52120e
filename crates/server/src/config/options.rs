//! Every option of `uuidmap serve`, declared once.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::Deserialize;

use super::ConfigError;
use super::option_values::{
    EtcdEndpoints, MaxReplay, MetricsListen, OnOff, Peers, RaftDial, SnapshotInterval, as_flag_text,
};
use uuidmap_engine::store::replay_apply::ReplayWorkers;
use uuidmap_engine::store::wal::Preallocate;
use uuidmap_engine::writer::FsyncPolicy;

/// Declares the options of `uuidmap serve` once, one row each. Each field
/// becomes a flag (`--read-permits`), an environment variable
/// (`UUIDMAP_READ_PERMITS`, through clap's `env`) and a key of the TOML file
/// (`read_permits`); a test checks that the three spellings follow that
/// rule, which is how error messages name them. Every field is optional, so
/// that a set of options can be laid over another ([`ServeOptions::or`])
/// and the defaults come last, in [`ServeOptions::into_config`].
///
/// A row may end with its default, as the flag's text (`= "1024"`): the
/// help shows that text ([`show_defaults`]), and [`ServeOptions::defaults`]
/// parses it as a given flag would be, so the default is written once. A
/// numeric row may add its minimum and why (`= "1024" at_least 1 "no read
/// could ever run"`): [`ServeOptions::check_minimums`] refuses a smaller
/// value with an error that names the option.
macro_rules! serve_options {
    ($(
        $(#[$attr:meta])*
        $field:ident : $ty:ty $( = $default:literal $( at_least $min:literal $why:literal )? )? ,
    )*) => {
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

        /// Each option with a default, and the default as the flag's text.
        pub const OPTION_DEFAULTS: &[(&str, &str)] = &[
            $( $( (stringify!($field), $default), )? )*
        ];

        impl ServeOptions {
            /// Each option of `self`, else of `lower`.
            pub fn or(self, lower: ServeOptions) -> ServeOptions {
                ServeOptions {
                    $( $field: self.$field.or(lower.$field), )*
                }
            }

            /// Every option that has a default, set to it.
            pub fn defaults() -> ServeOptions {
                ServeOptions {
                    $( $field: None $( .or(Some(default_value::<$ty>(stringify!($field), $default))) )?, )*
                }
            }

            /// Refuses an option below its minimum, naming it.
            pub fn check_minimums(&self) -> Result<(), ConfigError> {
                $( $( $(
                    if let Some(value) = self.$field && value < $min {
                        return Err(ConfigError::TooSmall {
                            option: stringify!($field),
                            min: size_text($min),
                            value: value.to_string(),
                            why: $why,
                        });
                    }
                )? )? )*
                Ok(())
            }
        }
    };
}

/// `serve`'s command with each option's default at the end of its help,
/// as its row states it. (clap's own `[default: ...]` would come with a
/// default value, which would hide whether a flag was given, and a
/// doc comment cannot be built by `macro_rules`: clap reads its text before
/// `concat!` is expanded.)
pub fn show_defaults(serve: clap::Command) -> clap::Command {
    OPTION_DEFAULTS.iter().fold(serve, |cmd, (option, text)| {
        cmd.mut_arg(*option, |arg| {
            let shown = format!("[default: {text}]");
            let help = arg
                .get_help()
                .map_or_else(|| shown.clone(), |h| format!("{h} {shown}"));
            let long = arg.get_long_help().map(|h| format!("{h}\n\n{shown}"));
            let arg = arg.help(help);
            match long {
                Some(long) => arg.long_help(long),
                None => arg,
            }
        })
    })
}

/// An option's default, parsed from its row's text as a flag's would be.
fn default_value<T: FromStr>(option: &str, text: &str) -> T
where
    T::Err: std::fmt::Display,
{
    text.parse()
        .unwrap_or_else(|e| panic!("the default of {option}, {text:?}, does not parse: {e}"))
}

/// A minimum as the error shows it: a whole number of MiB says so too.
fn size_text(n: u64) -> String {
    const MIB: u64 = 1 << 20;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{n} ({} MiB)", n / MIB)
    } else {
        n.to_string()
    }
}

serve_options! {
    /// Address to listen on. Without TLS and auth, only loopback addresses
    /// are accepted unless --insecure.
    #[arg(long, env = "UUIDMAP_LISTEN")]
    listen: SocketAddr = "127.0.0.1:7878",
    /// The data directory.
    #[arg(long, env = "UUIDMAP_DATA_DIR")]
    data_dir: PathBuf = "uuidmap-data",
    /// WAL fsync policy: `always`, `never` or `interval=<ms>`.
    #[arg(long, env = "UUIDMAP_FSYNC")]
    fsync: FsyncPolicy = "always",
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
    /// Most keys in one BatchGet.
    #[arg(long, env = "UUIDMAP_MAX_BATCH_KEYS")]
    max_batch_keys: usize = "65536" at_least 1 "no BatchGet could hold a key",
    /// Most operations in one Write.
    #[arg(long, env = "UUIDMAP_MAX_WRITE_OPS")]
    max_write_ops: usize = "100000" at_least 1 "no Write could hold an operation",
    /// Longest wait for min_lsn or WaitFor, in ms.
    #[arg(long, env = "UUIDMAP_MAX_WAIT_MS")]
    max_wait_ms: u64 = "60000",
    /// Most values in one Scan filter.
    #[arg(long, env = "UUIDMAP_MAX_FILTER_VALUES")]
    max_filter_values: usize = "65536" at_least 1 "no Scan filter could hold a value",
    /// Reads (Get, BatchGet, Stats, Ping) running at once.
    #[arg(long, env = "UUIDMAP_READ_PERMITS")]
    read_permits: usize = "1024" at_least 1 "no read could ever run",
    /// Reads waiting for a permit; beyond, RESOURCE_EXHAUSTED.
    #[arg(long, env = "UUIDMAP_READ_QUEUE")]
    read_queue: usize = "512" at_least 1 "no read could wait for a permit",
    /// Writes (Put, Delete, CompareAndSet, Write, Snapshot) running at once.
    #[arg(long, env = "UUIDMAP_WRITE_PERMITS")]
    write_permits: usize = "256" at_least 1 "no write could ever run",
    /// Writes waiting for a permit; beyond, RESOURCE_EXHAUSTED.
    #[arg(long, env = "UUIDMAP_WRITE_QUEUE")]
    write_queue: usize = "512" at_least 1 "no write could wait for a permit",
    /// Scans streaming at once.
    #[arg(long, env = "UUIDMAP_SCAN_PERMITS")]
    scan_permits: usize = "4" at_least 1 "no scan could ever run",
    /// Scans waiting for a permit; beyond, RESOURCE_EXHAUSTED.
    #[arg(long, env = "UUIDMAP_SCAN_QUEUE")]
    scan_queue: usize = "64" at_least 1 "no scan could wait for a permit",
    /// WaitFor and Watch calls open at once; beyond, RESOURCE_EXHAUSTED.
    #[arg(long, env = "UUIDMAP_MAX_LONG_POLLS")]
    max_long_polls: usize = "100000" at_least 1 "every WaitFor and Watch would be refused",
    /// Serve Prometheus metrics (plain HTTP, GET /metrics) on this address,
    /// or `off`. Only loopback unless --insecure.
    #[arg(long, env = "UUIDMAP_METRICS_LISTEN")]
    metrics_listen: MetricsListen = "127.0.0.1:7879",
    /// Also serve the Redis protocol (RESP2) on this address, over the same
    /// index, admission, auth and metrics as gRPC [default: off]. Over TLS
    /// with --tls-cert; plaintext otherwise, and then only loopback unless
    /// --insecure (README, "The Redis protocol").
    #[arg(long, env = "UUIDMAP_RESP_LISTEN")]
    resp_listen: SocketAddr,
    /// Start a new WAL file when the current one reaches this many bytes;
    /// at least 1 MiB (the default is 64 MiB). A snapshot lets the
    /// files it covers be removed, and Watch can start only as far back as
    /// the oldest file kept.
    #[arg(long, env = "UUIDMAP_WAL_FILE_BYTES")]
    wal_file_bytes: u64 = "67108864" at_least 1048576 "smaller files would mean a new file every few writes",
    /// Take a snapshot each time this many bytes were written to the WAL;
    /// at least 1 MiB (the default is 256 MiB). Bounds the WAL a
    /// restart replays; each snapshot writes the whole index.
    #[arg(long, env = "UUIDMAP_SNAPSHOT_WAL_BYTES")]
    snapshot_wal_bytes: u64 = "268435456" at_least 1048576 "each snapshot writes the whole index, so not every few writes",
    /// Take a snapshot this long after the previous one: seconds (600), or
    /// with a unit (90s, 10m, 1h), at least 1 s; or `off` for snapshots
    /// only on WAL growth, on request and at shutdown.
    #[arg(long, env = "UUIDMAP_SNAPSHOT_INTERVAL")]
    snapshot_interval: SnapshotInterval = "600",
    /// The restart budget in milliseconds, at least 1, or `off`: take a
    /// snapshot before the WAL a restart would replay takes longer than
    /// this to replay (at the replay rate the last recovery measured, or a
    /// conservative default), and right after a recovery whose replay took
    /// longer. --snapshot-wal-bytes and --snapshot-interval stay as caps.
    #[arg(long, env = "UUIDMAP_MAX_REPLAY_MS")]
    max_replay_ms: MaxReplay = "500",
    /// Milliseconds a stop (SIGTERM, Ctrl-C) waits for the calls in
    /// flight to finish before it closes them: a stream whose client
    /// stopped reading would otherwise hold the stop forever. Writes
    /// already queued are drained and synced either way.
    #[arg(long, env = "UUIDMAP_STOP_GRACE_MS")]
    stop_grace_ms: u64 = "10000",
    /// Threads that replay the WAL at start: `auto` (one per core),
    /// `serial` (on the starting thread), or a count.
    #[arg(long, env = "UUIDMAP_REPLAY_WORKERS")]
    replay_workers: ReplayWorkers = "auto",
    /// `on`: make each next WAL file ahead of need, on a background
    /// thread, as a file of written zeros (one --wal-file-bytes of disk
    /// beyond the WAL), so that a WAL fsync is a data-only flush and
    /// cheaper; `off`: WAL files grow as they are written.
    #[arg(long, env = "UUIDMAP_WAL_PREALLOCATE")]
    wal_preallocate: Preallocate = "on",
    /// Under --fsync always: `on` overlaps the fsync of one write group
    /// with writing the next while writes keep coming (a second thread
    /// runs the fsync; a lone writer is still synced inline), `off` syncs
    /// every group on the writer thread. Off by default: on a 2-core
    /// machine shared with its clients it cost throughput (BENCHMARKS.md).
    #[arg(long, env = "UUIDMAP_WAL_OVERLAP_SYNCS")]
    wal_overlap_syncs: OnOff = "off",
    /// `off` runs the server's async runtime without tokio's LIFO slot, so
    /// that the answers to many calls on one HTTP/2 connection leave in one
    /// write: unary calls multiplexed on a few connections gain (writes
    /// +25 to 40 %, Gets +45 % at 64 in flight on 4 connections), while
    /// calls on many one-call connections and Lookup streams lose 10 to
    /// 14 % (BENCHMARKS.md, "Answers in batches"). `on` (the default)
    /// keeps tokio's default.
    #[arg(long, env = "UUIDMAP_RUNTIME_LIFO_SLOT")]
    runtime_lifo_slot: OnOff = "on",
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
    /// applied since its last one (0: only on --snapshot-interval).
    #[arg(long, env = "UUIDMAP_RAFT_SNAPSHOT_ENTRIES")]
    raft_snapshot_entries: u64 = "100000",
    /// Raft log entries a member keeps behind its newest snapshot: a
    /// member further behind is sent the snapshot instead.
    #[arg(long, env = "UUIDMAP_RAFT_KEEP_ENTRIES")]
    raft_keep_entries: u64 = "10000",
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
    /// Serve one group's partitions of a partitioned cluster whose map is
    /// in this etcd: its client URLs, separated by commas (README,
    /// "Partitions"). Needs --group.
    #[arg(long, env = "UUIDMAP_ETCD")]
    etcd: EtcdEndpoints,
    /// The partitioned cluster's name: its keys in etcd are under
    /// /uuidmap/NAME/ [default: uuidmap].
    #[arg(long, env = "UUIDMAP_ETCD_CLUSTER")]
    etcd_cluster: String,
    /// The replica group this server serves partitions for, in the
    /// partitioned cluster (--etcd). Every member of a group gives the same
    /// name.
    #[arg(long, env = "UUIDMAP_GROUP")]
    group: String,
    /// Seconds this server's registration in etcd outlives its last
    /// renewal (renewed every third of it) [default: 10].
    #[arg(long, env = "UUIDMAP_ETCD_LEASE_TTL")]
    etcd_lease_ttl: u64,
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
