//! When the writer makes the WAL durable before acknowledging.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The fsync policy of the write-ahead log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FsyncPolicy {
    /// fsync every group before acknowledging it (the default): an
    /// acknowledged write survives `kill -9` and power loss.
    #[default]
    Always,
    /// Acknowledge after the write reaches the OS; fsync at most this long
    /// after it. A power loss can lose that window; `kill -9` cannot.
    Interval(Duration),
    /// Never fsync (the OS flushes when it likes). For tests and bulk loads.
    Never,
}

/// A policy string that is not `always`, `never` or `interval=<ms>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown fsync policy {0:?}: use \"always\", \"never\" or \"interval=<milliseconds>\" \
     (for example interval=10)"
)]
pub struct BadFsyncPolicy(pub String);

impl FromStr for FsyncPolicy {
    type Err = BadFsyncPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        match t {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            _ => t
                .strip_prefix("interval=")
                .map(|ms| ms.trim_end_matches("ms"))
                .and_then(|ms| ms.parse::<u64>().ok())
                .filter(|&ms| ms > 0)
                .map(|ms| FsyncPolicy::Interval(Duration::from_millis(ms)))
                .ok_or_else(|| BadFsyncPolicy(s.to_string())),
        }
    }
}

impl fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsyncPolicy::Always => f.write_str("always"),
            FsyncPolicy::Never => f.write_str("never"),
            FsyncPolicy::Interval(d) => write!(f, "interval={}", d.as_millis()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print_back() {
        for s in ["always", "never", "interval=10"] {
            assert_eq!(s.parse::<FsyncPolicy>().unwrap().to_string(), s);
        }
        assert_eq!(
            "interval=5ms".parse::<FsyncPolicy>(),
            Ok(FsyncPolicy::Interval(Duration::from_millis(5)))
        );
        for bad in ["", "sometimes", "interval=", "interval=0", "interval=x"] {
            let e = bad.parse::<FsyncPolicy>().unwrap_err();
            assert!(e.to_string().contains("interval=<milliseconds>"), "{e}");
        }
    }
}
