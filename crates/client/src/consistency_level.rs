//! [`ReadConsistency`]: how up to date a read must be (the protocol's
//! `ReadConsistency`; README.md, "Read consistency"). A client's default
//! is set on the builder ([`crate::ClientBuilder::consistency`],
//! linearizable unless changed) and overridden per call with
//! [`crate::Client::with_consistency`].
//!
//! Gets batched onto one `Lookup` request ask for the strongest level
//! among them: a linearizable answer serves a stale caller, and a tighter
//! staleness bound serves a looser one.

use std::time::Duration;

use uuidmap_proto::v1 as pb;

/// How up to date a read must be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadConsistency {
    /// Every write acknowledged before the read was sent is in the answer,
    /// on any member (a member that is not the leader with a lease first
    /// asks the leader for its commit index). The default.
    #[default]
    Linearizable,
    /// What the member that answers has applied: it may miss recent
    /// writes acknowledged elsewhere, and costs no round trip.
    Stale {
        /// A member more stale than this refuses, and the client tries
        /// another (`None`: no bound).
        max_staleness: Option<Duration>,
    },
}

impl ReadConsistency {
    /// `Stale` without a bound.
    pub fn stale() -> ReadConsistency {
        ReadConsistency::Stale {
            max_staleness: None,
        }
    }

    /// The request fields: `consistency` and `max_staleness_ms`.
    pub(crate) fn to_wire(self) -> (i32, u64) {
        match self {
            ReadConsistency::Linearizable => (pb::ReadConsistency::Linearizable as i32, 0),
            ReadConsistency::Stale { max_staleness } => (
                pb::ReadConsistency::Stale as i32,
                max_staleness.map_or(0, |d| (d.as_millis() as u64).max(1)),
            ),
        }
    }

    /// The level that serves both `self` and `other` (module docs).
    pub(crate) fn strongest(self, other: ReadConsistency) -> ReadConsistency {
        use ReadConsistency::{Linearizable, Stale};
        match (self, other) {
            (Linearizable, _) | (_, Linearizable) => Linearizable,
            (Stale { max_staleness: a }, Stale { max_staleness: b }) => Stale {
                max_staleness: match (a, b) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, None) => a,
                    (None, b) => b,
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_asks_for_the_strongest_level_of_its_gets() {
        let ms = |n| ReadConsistency::Stale {
            max_staleness: Some(Duration::from_millis(n)),
        };
        let stale = ReadConsistency::stale();
        let lin = ReadConsistency::Linearizable;
        assert_eq!(stale.strongest(lin), lin);
        assert_eq!(ms(5).strongest(lin), lin);
        assert_eq!(stale.strongest(ms(5)), ms(5));
        assert_eq!(ms(9).strongest(ms(5)), ms(5));
        assert_eq!(stale.strongest(stale), stale);
        assert_eq!(lin.to_wire(), (1, 0));
        assert_eq!(stale.to_wire(), (2, 0));
        assert_eq!(ms(5).to_wire(), (2, 5));
    }
}
