//! Options of `uuidmap serve`: command-line flags, `UUIDMAP_*` environment
//! variables and an optional TOML file.
//!
//! Precedence, highest first: a flag, its environment variable, the TOML
//! file (`--config` / `UUIDMAP_CONFIG`), the default. Defaults: listen on
//! `127.0.0.1:7878`, data in `./uuidmap-data`, fsync `always`.
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
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::writer::FsyncPolicy;

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// The default data directory (relative to the working directory).
pub const DEFAULT_DATA_DIR: &str = "uuidmap-data";

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
    /// Request limits.
    pub limits: Limits,
    /// WAL files are rotated at this size (a snapshot lets the files it
    /// covers be removed, which is how far back `Watch` can start).
    pub wal_file_bytes: u64,
}

impl ServeConfig {
    /// The defaults, with `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        ServeConfig {
            listen: DEFAULT_LISTEN.parse().expect("the default address parses"),
            data_dir: data_dir.into(),
            fsync: FsyncPolicy::Always,
            insecure: false,
            limits: Limits::default(),
            wal_file_bytes: 64 << 20,
        }
    }
}

/// The flags of `uuidmap serve`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ServeArgs {
    /// A TOML file with any of the options below (flags and environment
    /// variables override it).
    #[arg(long, env = "UUIDMAP_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:7878]. Without TLS and
    /// auth, only loopback addresses are accepted unless --insecure.
    #[arg(long, env = "UUIDMAP_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// The data directory [default: ./uuidmap-data].
    #[arg(long, env = "UUIDMAP_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// WAL fsync policy: always, never or interval=<ms> [default: always].
    #[arg(long, env = "UUIDMAP_FSYNC")]
    pub fsync: Option<FsyncPolicy>,
    /// Listen on a non-loopback address without TLS or auth: anyone who can
    /// reach the port can read and change every entry.
    #[arg(long, env = "UUIDMAP_INSECURE")]
    pub insecure: bool,
    /// Most keys in one BatchGet [default: 65536].
    #[arg(long, env = "UUIDMAP_MAX_BATCH_KEYS")]
    pub max_batch_keys: Option<usize>,
    /// Most operations in one Write [default: 100000].
    #[arg(long, env = "UUIDMAP_MAX_WRITE_OPS")]
    pub max_write_ops: Option<usize>,
    /// Longest wait for min_lsn or WaitFor, in ms [default: 60000].
    #[arg(long, env = "UUIDMAP_MAX_WAIT_MS")]
    pub max_wait_ms: Option<u64>,
    /// Most values in one Scan filter [default: 65536].
    #[arg(long, env = "UUIDMAP_MAX_FILTER_VALUES")]
    pub max_filter_values: Option<usize>,
}

/// The TOML file.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    fsync: Option<String>,
    insecure: Option<bool>,
    max_batch_keys: Option<usize>,
    max_write_ops: Option<usize>,
    max_wait_ms: Option<u64>,
    max_filter_values: Option<usize>,
}

/// Options that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the config file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{what} must be at least 1")]
    Zero { what: &'static str },
}

impl ServeArgs {
    /// Merges the flags (and environment) over the file over the defaults.
    pub fn resolve(&self) -> Result<ServeConfig, ConfigError> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let bad = |message: String| ConfigError::Parse {
            path: self.config.clone().unwrap_or_default(),
            message,
        };
        let mut config = ServeConfig::new(DEFAULT_DATA_DIR);
        if let Some(listen) = &file.listen {
            config.listen = listen.parse().map_err(|_| {
                bad(format!(
                    "listen = {listen:?} is not an address like {DEFAULT_LISTEN}"
                ))
            })?;
        }
        if let Some(fsync) = &file.fsync {
            config.fsync = fsync.parse().map_err(|e| bad(format!("fsync: {e}")))?;
        }
        config.data_dir = self
            .data_dir
            .clone()
            .or(file.data_dir)
            .unwrap_or(config.data_dir);
        config.listen = self.listen.unwrap_or(config.listen);
        config.fsync = self.fsync.unwrap_or(config.fsync);
        config.insecure = self.insecure || file.insecure.unwrap_or(false);
        let limits = &mut config.limits;
        limits.max_batch_keys = self
            .max_batch_keys
            .or(file.max_batch_keys)
            .unwrap_or(limits.max_batch_keys);
        limits.max_write_ops = self
            .max_write_ops
            .or(file.max_write_ops)
            .unwrap_or(limits.max_write_ops);
        limits.max_filter_values = self
            .max_filter_values
            .or(file.max_filter_values)
            .unwrap_or(limits.max_filter_values);
        if let Some(ms) = self.max_wait_ms.or(file.max_wait_ms) {
            limits.max_wait = Duration::from_millis(ms);
        }
        if limits.max_batch_keys == 0 {
            return Err(ConfigError::Zero {
                what: "max_batch_keys",
            });
        }
        if limits.max_filter_values == 0 {
            return Err(ConfigError::Zero {
                what: "max_filter_values",
            });
        }
        if limits.max_write_ops == 0 {
            return Err(ConfigError::Zero {
                what: "max_write_ops",
            });
        }
        Ok(config)
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
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

    #[test]
    fn defaults_are_loopback_7878_local_data_dir_and_fsync_always() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.listen, "127.0.0.1:7878".parse().unwrap());
        assert_eq!(c.data_dir, PathBuf::from("uuidmap-data"));
        assert_eq!(c.fsync, FsyncPolicy::Always);
        assert!(!c.insecure);
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
            data_dir: Some("/from/flag".into()),
            ..ServeArgs::default()
        };
        let c = args.resolve().unwrap();
        assert_eq!(c.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(c.data_dir, PathBuf::from("/from/flag"));
        assert_eq!(c.fsync, FsyncPolicy::Never);
        assert_eq!(c.limits.max_batch_keys, 10);
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
}
