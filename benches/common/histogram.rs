//! Latency percentiles, the same way in every bench: an HdrHistogram of
//! nanoseconds (the `hdrhistogram` crate), auto-resizing, with 3
//! significant figures. So a percentile is exact to 0.1 % of its value (a
//! p99 of 812 ns is 811–813 ns), which is far finer than run-to-run spread,
//! and recording costs a few nanoseconds and no allocation per sample once
//! the histogram has grown to the run's range.
//!
//! Included by the benches that report latencies (through `common`, or by
//! path in `overload.rs`), each of which uses a subset, hence the
//! `dead_code` allowance.
#![allow(dead_code)]

use std::time::Duration;

use hdrhistogram::Histogram;

/// Latencies in nanoseconds.
#[derive(Clone)]
pub struct Latencies(Histogram<u64>);

impl std::fmt::Debug for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Latencies {{ samples: {}, p50: {} ns, p99: {} ns, max: {} ns }}",
            self.len(),
            self.quantile(0.5),
            self.quantile(0.99),
            self.max()
        )
    }
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies::new()
    }
}

impl Latencies {
    /// An empty histogram.
    pub fn new() -> Latencies {
        Latencies(Histogram::new(3).expect("3 significant figures is a valid precision"))
    }

    /// Records one sample of `ns` nanoseconds.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        // `record` grows the auto-resizing histogram to fit; it fails only
        // past the largest trackable value (u64's range), where saturating
        // is right. (`saturating_record` alone would clamp to the current,
        // not yet grown, range.)
        if self.0.record(ns).is_err() {
            self.0.saturating_record(ns);
        }
    }

    /// Records one sample.
    #[inline]
    pub fn record_duration(&mut self, d: Duration) {
        self.record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Adds every sample of `other`.
    pub fn add(&mut self, other: &Latencies) {
        self.0.add(&other.0).expect("auto-resizing histograms add");
    }

    /// Samples recorded.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `q` quantile (0.5: the median), in ns; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        self.0.value_at_quantile(q)
    }

    /// The `q` quantile as a duration.
    pub fn quantile_duration(&self, q: f64) -> Duration {
        Duration::from_nanos(self.quantile(q))
    }

    /// The largest sample, in ns.
    pub fn max(&self) -> u64 {
        self.0.max()
    }
}

/// One phase's latency percentiles, in ns, as the latency tables print
/// them.
#[derive(Clone, Debug)]
pub struct PhaseRow {
    /// The phase's name.
    pub phase: String,
    /// Samples taken.
    pub samples: usize,
    /// Median.
    pub p50: u32,
    /// 99th percentile.
    pub p99: u32,
    /// 99.9th percentile.
    pub p999: u32,
    /// Largest sample.
    pub max: u32,
}

impl PhaseRow {
    /// The percentiles of `samples` (ns), through a [`Latencies`].
    pub fn of(phase: &str, samples: &[u32]) -> PhaseRow {
        assert!(!samples.is_empty(), "{phase}: no samples");
        let mut h = Latencies::new();
        for &s in samples {
            h.record(u64::from(s));
        }
        let ns = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        PhaseRow {
            phase: phase.to_string(),
            samples: samples.len(),
            p50: ns(h.quantile(0.50)),
            p99: ns(h.quantile(0.99)),
            p999: ns(h.quantile(0.999)),
            max: ns(h.max()),
        }
    }
}
