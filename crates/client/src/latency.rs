//! [`Latency`]: an endpoint's recent answer times, lock-free, enough to
//! say when a read has waited longer than that endpoint usually makes it
//! wait ([`Latency::p95`]): the moment to hedge it.
//!
//! A log-linear histogram of atomic counters (8 buckets per doubling, so a
//! percentile is within 1/8 of the truth, from 16 µs to about 17 s), that
//! forgets: once it holds [`WINDOW`] samples, every bucket is halved, so
//! the figure follows the last few thousand answers rather than all of
//! them. The halving is racy with concurrent records (a sample counted
//! while a bucket is halved may lose half a count), which moves a
//! percentile by far less than a bucket's width.
//!
//! A record is two relaxed atomic adds; a query reads every bucket (160
//! loads), which is done once per hedgeable read.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::Duration;

/// Buckets per doubling.
const SUB: usize = 8;
/// Doublings covered above [`FLOOR_US`].
const DOUBLINGS: usize = 20;
const BUCKETS: usize = SUB * DOUBLINGS;
/// The smallest time told apart, in microseconds.
const FLOOR_US: u64 = 16;
/// Samples held before the histogram halves itself.
pub(crate) const WINDOW: u32 = 4096;
/// Samples needed before a percentile is given.
pub(crate) const MIN_SAMPLES: u32 = 32;

/// One endpoint's recent answer times.
#[derive(Debug)]
pub(crate) struct Latency {
    buckets: [AtomicU32; BUCKETS],
    count: AtomicU32,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            buckets: std::array::from_fn(|_| AtomicU32::new(0)),
            count: AtomicU32::new(0),
        }
    }
}

/// The bucket of `us` microseconds.
fn bucket(us: u64) -> usize {
    let x = us.max(FLOOR_US) / FLOOR_US; // >= 1
    let doubling = 63 - x.leading_zeros() as usize;
    if doubling >= DOUBLINGS {
        return BUCKETS - 1;
    }
    // The SUB steps between 2^d and 2^(d+1), from the bits below the top.
    let scaled = ((us.max(FLOOR_US) << 3) / FLOOR_US) >> doubling; // in [8, 16)
    doubling * SUB + (scaled as usize - SUB).min(SUB - 1)
}

/// The upper bound of bucket `i`, in microseconds.
fn upper_us(i: usize) -> u64 {
    let (doubling, step) = (i / SUB, i % SUB);
    (FLOOR_US << doubling) * (SUB + step + 1) as u64 / SUB as u64
}

impl Latency {
    /// Counts an answer that took `took`.
    pub(crate) fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.buckets[bucket(us)].fetch_add(1, Relaxed);
        if self.count.fetch_add(1, Relaxed) + 1 >= WINDOW {
            // One caller halves: the one that moves the count down.
            if self
                .count
                .fetch_update(Relaxed, Relaxed, |c| (c >= WINDOW).then_some(c / 2))
                .is_ok()
            {
                for b in &self.buckets {
                    let _ = b.fetch_update(Relaxed, Relaxed, |n| Some(n / 2));
                }
            }
        }
    }

    /// The time that 95 % of the recent answers came within (the upper
    /// bound of its bucket); `None` until [`MIN_SAMPLES`] were counted.
    pub(crate) fn p95(&self) -> Option<Duration> {
        self.quantile(0.95)
    }

    fn quantile(&self, q: f64) -> Option<Duration> {
        let counts: [u32; BUCKETS] = std::array::from_fn(|i| self.buckets[i].load(Relaxed));
        let total: u64 = counts.iter().map(|&n| u64::from(n)).sum();
        if total < u64::from(MIN_SAMPLES) {
            return None;
        }
        let rank = (total as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (i, &n) in counts.iter().enumerate() {
            seen += u64::from(n);
            if seen >= rank {
                return Some(Duration::from_micros(upper_us(i)));
            }
        }
        Some(Duration::from_micros(upper_us(BUCKETS - 1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_rise_with_the_time_and_bound_it_within_an_eighth() {
        let mut last = 0;
        for us in [16u64, 17, 20, 31, 32, 33, 100, 1_000, 12_345, 1_000_000] {
            let b = bucket(us);
            assert!(b >= last, "{us} µs fell to bucket {b} below {last}");
            last = b;
            let upper = upper_us(b);
            assert!(upper >= us, "{us} µs above its bucket's bound {upper}");
            assert!(
                upper as f64 <= us as f64 * 1.126 + 2.0,
                "{us} µs: bound {upper} too loose"
            );
        }
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn the_p95_follows_the_slow_twentieth_and_waits_for_enough_samples() {
        let l = Latency::default();
        for _ in 0..MIN_SAMPLES - 1 {
            l.record(Duration::from_micros(100));
        }
        assert_eq!(l.p95(), None, "too few samples");
        for _ in 0..900 {
            l.record(Duration::from_micros(100));
        }
        for _ in 0..100 {
            l.record(Duration::from_millis(10));
        }
        // About 10 % are slow: the p95 is among them.
        let p95 = l.p95().unwrap();
        assert!(
            (Duration::from_millis(10)..Duration::from_micros(11_300)).contains(&p95),
            "{p95:?}"
        );
    }

    #[test]
    fn old_samples_fade_once_the_window_is_full() {
        let l = Latency::default();
        for _ in 0..WINDOW {
            l.record(Duration::from_millis(50));
        }
        for _ in 0..4 * WINDOW {
            l.record(Duration::from_micros(200));
        }
        let p95 = l.p95().unwrap();
        assert!(p95 < Duration::from_millis(1), "{p95:?}");
    }
}
