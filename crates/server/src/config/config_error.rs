//! [`ConfigError`]: options that cannot be used, each named by its flag,
//! its variable and its config file key.

use std::path::PathBuf;

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
    /// Partitioned cluster options that do not fit together.
    #[error("{0}")]
    Partitions(String),
}
