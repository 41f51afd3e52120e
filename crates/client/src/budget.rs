//! [`RetryBudget`]: a token bucket that every retry draws from, so that a
//! cluster that is down gets a trickle of retries rather than a storm.
//!
//! The bucket holds up to `burst` tokens and gains `per_second` tokens each
//! second, plus `per_call` for every first attempt: a busy, healthy client
//! earns its retries in proportion to its traffic (as gRPC's retry
//! throttling and Finagle's retry budget do), and an idle one still has a
//! floor. A retry takes one whole token; without one, the retry waits for
//! the next token to accrue, within the call's deadline (so a brief outage
//! is ridden out at a bounded rate, not failed), and a bucket that never
//! refills (`per_second` 0) fails it at once, with its last error.
//!
//! Lock-free: the tokens are one atomic count of thousandths, and the time
//! of the last refill another; whoever moves the refill time forward (a
//! compare-and-swap) adds the tokens for the span it claimed, so no span is
//! counted twice.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Thousandths of a token.
const MILLI: u64 = 1000;

/// The budget's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryBudgetConfig {
    /// The most tokens the bucket holds (and holds at the start).
    pub burst: u32,
    /// Tokens gained per second whatever the traffic.
    pub per_second: f64,
    /// Tokens gained per call (first attempts only).
    pub per_call: f64,
}

impl Default for RetryBudgetConfig {
    /// 20 tokens, 10 per second, and one per 10 calls.
    fn default() -> Self {
        RetryBudgetConfig {
            burst: 20,
            per_second: 10.0,
            per_call: 0.1,
        }
    }
}

/// The client's retry budget (shared by all its calls).
#[derive(Debug)]
pub struct RetryBudget {
    config: RetryBudgetConfig,
    start: Instant,
    /// Thousandths of a token.
    tokens: AtomicU64,
    /// Microseconds from `start` of the last refill.
    refilled: AtomicU64,
}

impl RetryBudget {
    /// A full bucket.
    pub fn new(config: RetryBudgetConfig) -> RetryBudget {
        RetryBudget {
            config,
            start: Instant::now(),
            tokens: AtomicU64::new(u64::from(config.burst) * MILLI),
            refilled: AtomicU64::new(0),
        }
    }

    /// The tokens now, for metrics and tests.
    pub fn tokens(&self) -> f64 {
        self.refill(self.start.elapsed());
        self.tokens.load(Relaxed) as f64 / MILLI as f64
    }

    /// Counts a first attempt.
    pub fn deposit(&self) {
        self.add((self.config.per_call * MILLI as f64) as u64);
    }

    /// Takes a token for a retry; false if there is none.
    pub fn withdraw(&self) -> bool {
        self.withdraw_at(self.start.elapsed())
    }

    /// [`RetryBudget::withdraw`] at `now` from the budget's start (tests
    /// drive the clock).
    pub fn withdraw_at(&self, now: Duration) -> bool {
        self.refill(now);
        self.tokens
            .fetch_update(Relaxed, Relaxed, |t| t.checked_sub(MILLI))
            .is_ok()
    }

    /// How long until the bucket holds a whole token at the refill rate
    /// (`None` if it never refills by time).
    pub fn time_to_token(&self) -> Option<Duration> {
        if self.config.per_second <= 0.0 {
            return None;
        }
        let have = self.tokens.load(Relaxed).min(MILLI);
        let missing = (MILLI - have) as f64 / MILLI as f64;
        Some(Duration::from_secs_f64(missing / self.config.per_second))
    }

    fn refill(&self, now: Duration) {
        let now = now.as_micros() as u64;
        let last = self.refilled.load(Relaxed);
        if now <= last
            || self
                .refilled
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            // Another caller claimed this span (or time did not move).
            return;
        }
        let gained = (now - last) as f64 / 1e6 * self.config.per_second * MILLI as f64;
        self.add(gained as u64);
    }

    fn add(&self, milli: u64) {
        let cap = u64::from(self.config.burst) * MILLI;
        let _ = self
            .tokens
            .fetch_update(Relaxed, Relaxed, |t| Some((t + milli).min(cap)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(burst: u32, per_second: f64, per_call: f64) -> RetryBudget {
        RetryBudget::new(RetryBudgetConfig {
            burst,
            per_second,
            per_call,
        })
    }

    #[test]
    fn a_full_bucket_allows_its_burst_then_nothing() {
        let b = budget(5, 0.0, 0.0);
        let granted = (0..20).filter(|_| b.withdraw_at(Duration::ZERO)).count();
        assert_eq!(granted, 5);
    }

    #[test]
    fn an_empty_bucket_refills_at_its_rate_and_never_past_its_burst() {
        let b = budget(5, 10.0, 0.0);
        while b.withdraw_at(Duration::ZERO) {}
        // Over 10 s at 10/s, asking every 10 ms: 100 retries, never a
        // burst (the bucket was emptied).
        let mut granted = 0;
        for ms in (10..=10_000).step_by(10) {
            let mut now = 0;
            while b.withdraw_at(Duration::from_millis(ms)) {
                now += 1;
            }
            assert!(now <= 1, "{now} retries at {ms} ms");
            granted += now;
        }
        assert!((99..=100).contains(&granted), "{granted} retries in 10 s");
        // A long idle spell fills it to the burst only.
        let later = Duration::from_secs(3600);
        let burst = (0..100).filter(|_| b.withdraw_at(later)).count();
        assert_eq!(burst, 5);
    }

    #[test]
    fn calls_earn_retries_in_proportion() {
        let b = budget(100, 0.0, 0.1);
        while b.withdraw_at(Duration::ZERO) {}
        for _ in 0..50 {
            b.deposit();
        }
        let granted = (0..100).filter(|_| b.withdraw_at(Duration::ZERO)).count();
        assert_eq!(granted, 5);
    }

    #[test]
    fn concurrent_withdrawals_never_overdraw() {
        let b = std::sync::Arc::new(budget(1000, 0.0, 0.0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    (0..1000).filter(|_| b.withdraw_at(Duration::ZERO)).count()
                })
            })
            .collect();
        let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 1000);
    }
}
