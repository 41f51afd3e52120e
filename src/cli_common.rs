//! What every client command of the binary shares: the exit codes, how
//! to reach the server (`ConnectArgs`), the read consistency flags
//! (`ConsistencyArgs`), and the error a command fails with (`CliError`),
//! worded with the flags that would fix it. Used by `cli` and `bench`.

use std::path::PathBuf;
use std::time::Duration;

use uuidmap_client::{ClientError, ClientOptions, DEFAULT_SERVER, ReadConsistency};

/// Exit code: done (`get`: found).
pub const EXIT_OK: i32 = 0;
/// Exit code: `get` found no entry for the key.
pub const EXIT_NOT_FOUND: i32 = 1;
/// Exit code: any error.
pub const EXIT_ERROR: i32 = 2;

/// How to reach the server (every client command).
#[derive(clap::Args, Clone, Debug)]
pub struct ConnectArgs {
    /// Server address: http://host:port, or https://host:port for TLS;
    /// the members of a replica group separated by commas (writes go to
    /// the leader).
    #[arg(long, env = "UUIDMAP_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Bearer token (prefer the environment variable: a flag shows in `ps`).
    #[arg(long, env = "UUIDMAP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM of the CA that signed the server's certificate (https only).
    #[arg(long, env = "UUIDMAP_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for a server that requires one (mTLS).
    #[arg(long, env = "UUIDMAP_CLIENT_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "UUIDMAP_CLIENT_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Seconds to wait for the connection and for each call (a scan's
    /// stream is not bounded).
    #[arg(long, env = "UUIDMAP_TIMEOUT", default_value = "10", value_parser = seconds)]
    pub timeout: Duration,
}

impl ConnectArgs {
    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            server: self.server.clone(),
            token: self.token.clone(),
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            timeout: self.timeout,
        }
    }
}

/// `--consistency` and `--max-staleness-ms` (README.md, "Replica
/// groups").
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct ConsistencyArgs {
    /// linearizable (the default: every acknowledged write is seen, on any
    /// member) or stale (what the member asked has applied; no round trip
    /// to the leader).
    #[arg(long, value_name = "LEVEL", value_enum, default_value_t)]
    pub consistency: Level,
    /// With --consistency stale: a member more than this many milliseconds
    /// stale refuses (0: no bound).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub max_staleness_ms: u64,
}

/// `--consistency`'s values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Level {
    /// Every acknowledged write is seen.
    #[default]
    Linearizable,
    /// What the member asked has applied.
    Stale,
}

impl ConsistencyArgs {
    /// The client's level.
    pub fn level(&self) -> ReadConsistency {
        match self.consistency {
            Level::Stale => ReadConsistency::Stale {
                max_staleness: (self.max_staleness_ms > 0)
                    .then(|| Duration::from_millis(self.max_staleness_ms)),
            },
            Level::Linearizable => ReadConsistency::Linearizable,
        }
    }
}

/// What a client command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}{hint}", hint = flag_hint(.0))]
    Client(#[from] ClientError),
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    #[error(
        "the scan stopped after {printed} entries: {source}. Continue after the last printed \
         entry with --cursor {cursor}"
    )]
    ScanStopped {
        printed: u64,
        cursor: String,
        source: ClientError,
    },
    #[error("{0}")]
    Refused(String),
}

/// The flags that would fix `e`, for a reader of the command line: the
/// client library names what was wrong, not how this binary spells it.
fn flag_hint(e: &ClientError) -> String {
    match e {
        ClientError::BadServer { .. } => " (--server or UUIDMAP_SERVER)".into(),
        ClientError::Refused { .. } => " (start one with `uuidmap serve`; --server or \
                                         UUIDMAP_SERVER chooses another address)"
            .into(),
        ClientError::NoTlsCa { .. } => " (--tls-ca or UUIDMAP_TLS_CA)".into(),
        ClientError::TlsWithoutHttps { .. } => {
            " (--tls-ca, --tls-cert and --tls-key need an https:// --server)".into()
        }
        ClientError::HalfClientIdentity => " (--tls-cert and --tls-key)".into(),
        ClientError::ReadFile { what, .. } => match *what {
            ClientError::TLS_CA => " (--tls-ca)".into(),
            ClientError::CLIENT_CERT => " (--tls-cert)".into(),
            ClientError::CLIENT_KEY => " (--tls-key)".into(),
            _ => String::new(),
        },
        ClientError::BadToken => " (--token or UUIDMAP_TOKEN)".into(),
        ClientError::NotRetained { .. } => " (from the command line: read applied_lsn with `uuidmap \
                                           stats`, then `uuidmap scan`, then `uuidmap watch --after` \
                                           that LSN)"
            .into(),
        ClientError::Status { status, .. } if status.code() == tonic::Code::Unauthenticated => {
            " (this command sends the token of --token or UUIDMAP_TOKEN)".into()
        }
        _ => String::new(),
    }
}

/// `--timeout`: seconds, more than 0.
pub(crate) fn seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("expected seconds, like 10 or 0.5 (got {s:?})"))?;
    if secs <= 0.0 {
        return Err("the timeout must be more than 0 seconds".into());
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{e}"))
}
