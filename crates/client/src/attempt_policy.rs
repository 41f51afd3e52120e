//! [`ReadAttempts`]: how long one attempt of a read may take and whether
//! slow reads are hedged, as the builder sets them and the client keeps
//! them (`read_attempt` carries them out).

use std::time::Duration;

/// How reads' attempts are bounded and hedged
/// ([`crate::ClientBuilder::attempt_timeout`],
/// [`crate::ClientBuilder::hedging`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ReadAttempts {
    /// An attempt's timeout as a part of the call's deadline.
    pub(crate) fraction: f64,
    /// A fixed attempt timeout instead (still capped by the deadline).
    pub(crate) fixed: Option<Duration>,
    /// Whether slow reads are hedged.
    pub(crate) hedging: bool,
}

impl Default for ReadAttempts {
    fn default() -> Self {
        ReadAttempts {
            fraction: 0.25,
            fixed: None,
            hedging: true,
        }
    }
}

impl ReadAttempts {
    /// The timeout of one attempt of a call whose deadline is `timeout`.
    pub(crate) fn timeout(&self, timeout: Duration) -> Duration {
        self.fixed.unwrap_or_else(|| timeout.mul_f64(self.fraction))
    }
}
