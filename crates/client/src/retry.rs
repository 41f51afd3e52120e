//! When to try a failed call again: [`RetryPolicy`] (how many attempts, and
//! how long to wait before each) and [`Backoff`] (exponential, with jitter).
//!
//! The schemes follow the distributed-database SDK the brief learns from
//! (lesson 4):
//! - **equal jitter** (`t/2 + random(0, t/2)`, `t = min(cap, base·2ⁿ)`)
//!   for network failures and for overload: every caller waits at least
//!   half the interval, so a member that is restarting or shedding gets
//!   real relief, and callers that failed together still spread out.
//!   Network failures (a refused connection, a server that is stopping)
//!   get the *fast* backoff ([`Backoff::FAST`], from 5 ms); overload
//!   (`RESOURCE_EXHAUSTED`) and a group that is electing a leader get the
//!   *slow* one ([`Backoff::SLOW`], from 50 ms).
//! - **full jitter** (`random(0, min(cap, base·2ⁿ))`) for conflicts, where
//!   the fastest retry wins and nothing is down: [`Backoff::CONFLICT`]. No
//!   failure of the protocol is a conflict the client retries by itself (a
//!   compare-and-set that found another value is the caller's to decide
//!   again), so it is offered for the caller's own compare-and-set loops.
//!
//! The jitter is written here rather than taken from a backoff crate: the
//! maintained ones (backon, for one) add a random fraction *on top of* the
//! delay, which is neither of the two schemes above, and the schemes are
//! two lines each.

use std::time::Duration;

use crate::error::RetryClass;

/// How the random part of a delay is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// Anywhere from 0 to the interval.
    Full,
    /// At least half the interval, at most all of it.
    Equal,
}

/// Exponential backoff with jitter: before retry `n` (1 for the first),
/// the interval is `min(cap, base·2ⁿ⁻¹)` and the delay is drawn from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first interval.
    pub base: Duration,
    /// The largest interval.
    pub cap: Duration,
    /// How the delay is drawn from the interval.
    pub jitter: Jitter,
}

impl Backoff {
    /// Equal jitter from 5 ms, up to 500 ms: network failures.
    pub const FAST: Backoff = Backoff {
        base: Duration::from_millis(5),
        cap: Duration::from_millis(500),
        jitter: Jitter::Equal,
    };
    /// Full jitter from 5 ms, up to 500 ms: conflicts (a caller's own
    /// compare-and-set loop, between a mismatch and its next try).
    pub const CONFLICT: Backoff = Backoff {
        base: Duration::from_millis(5),
        cap: Duration::from_millis(500),
        jitter: Jitter::Full,
    };
    /// Equal jitter from 50 ms, up to 5 s: overload, and an election.
    pub const SLOW: Backoff = Backoff {
        base: Duration::from_millis(50),
        cap: Duration::from_secs(5),
        jitter: Jitter::Equal,
    };

    /// The interval before retry `retry` (1 for the first retry).
    pub fn interval(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(31);
        self.base
            .checked_mul(1 << doublings)
            .map_or(self.cap, |d| d.min(self.cap))
    }

    /// The delay before retry `retry`, drawn with `uniform`, a number in
    /// [0, 1) (random in use; fixed in tests).
    pub fn delay_with(&self, retry: u32, uniform: f64) -> Duration {
        let interval = self.interval(retry);
        match self.jitter {
            Jitter::Full => interval.mul_f64(uniform),
            Jitter::Equal => interval / 2 + (interval / 2).mul_f64(uniform),
        }
    }

    /// The delay before retry `retry`, drawn at random.
    pub fn delay(&self, retry: u32) -> Duration {
        self.delay_with(retry, fastrand::f64())
    }
}

/// How a client retries: the backoffs by class and the most attempts per
/// call. No retry ever waits past the call's deadline, and every retry
/// also needs a token from the client's retry budget
/// ([`crate::RetryBudget`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// For [`RetryClass::Fast`] failures (and [`RetryClass::Conditional`]
    /// ones of idempotent calls).
    pub fast: Backoff,
    /// For [`RetryClass::Slow`] failures (overload).
    pub slow: Backoff,
    /// The most attempts of one call, the first included (1: never retry).
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    /// [`Backoff::FAST`], [`Backoff::SLOW`], at most 8 attempts.
    fn default() -> Self {
        RetryPolicy {
            fast: Backoff::FAST,
            slow: Backoff::SLOW,
            max_attempts: 8,
        }
    }
}

impl RetryPolicy {
    /// Never retries.
    pub const NEVER: RetryPolicy = RetryPolicy {
        fast: Backoff::FAST,
        slow: Backoff::SLOW,
        max_attempts: 1,
    };

    /// The backoff for a failure of `class` (`None` for a final one).
    pub fn backoff(&self, class: RetryClass) -> Option<&Backoff> {
        match class {
            RetryClass::Fast | RetryClass::Conditional => Some(&self.fast),
            RetryClass::Slow => Some(&self.slow),
            RetryClass::Final => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn intervals_double_from_the_base_up_to_the_cap() {
        let b = Backoff::FAST;
        let intervals: Vec<Duration> = (1..=9).map(|n| b.interval(n)).collect();
        assert_eq!(
            intervals,
            [5, 10, 20, 40, 80, 160, 320, 500, 500].map(|m| m * MS)
        );
        // No overflow however many retries.
        assert_eq!(b.interval(u32::MAX), 500 * MS);
        assert_eq!(Backoff::SLOW.interval(1), 50 * MS);
        assert_eq!(Backoff::SLOW.interval(10), 5000 * MS);
    }

    #[test]
    fn full_jitter_spans_zero_to_the_interval() {
        let b = Backoff::CONFLICT;
        assert_eq!(b.delay_with(3, 0.0), Duration::ZERO);
        assert_eq!(b.delay_with(3, 0.5), 10 * MS);
        assert!(b.delay_with(3, 0.999_999) < 20 * MS);
    }

    #[test]
    fn equal_jitter_never_waits_less_than_half_the_interval() {
        let b = Backoff::SLOW;
        assert_eq!(b.delay_with(2, 0.0), 50 * MS);
        assert_eq!(b.delay_with(2, 0.5), 75 * MS);
        assert!(b.delay_with(2, 0.999_999) < 100 * MS);
        // Network failures too: the fast backoff is equal jitter.
        assert_eq!(Backoff::FAST.delay_with(3, 0.0), 10 * MS);
    }

    #[test]
    fn random_delays_stay_within_their_bounds_and_do_vary() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let d = Backoff::SLOW.delay(4);
            assert!((200 * MS..400 * MS).contains(&d), "{d:?}");
            seen.insert(d);
        }
        assert!(seen.len() > 100, "the jitter barely varies: {}", seen.len());
    }

    #[test]
    fn each_class_gets_its_backoff_and_a_final_failure_none() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(RetryClass::Fast), Some(&Backoff::FAST));
        assert_eq!(p.backoff(RetryClass::Conditional), Some(&Backoff::FAST));
        assert_eq!(p.backoff(RetryClass::Slow), Some(&Backoff::SLOW));
        assert_eq!(p.backoff(RetryClass::Final), None);
    }
}
