//! Closed-loop load: `callers` concurrent tasks, each issuing one operation
//! and waiting for its answer before the next, for a fixed time; what is
//! measured is the rate, the latency percentiles and the CPU time the server
//! process and the bench process spent meanwhile.
//!
//! Every phase has a warm-up (connections open, caches and the server's
//! threads busy) that is not counted. An operation counts if it started and
//! finished inside the measured window; an operation still in flight at the
//! end is not counted (at most one per caller, negligible against the
//! thousands each caller completes).

use std::future::Future;
use std::time::{Duration, Instant};

use crate::common::histogram::Latencies;
use crate::process::cpu_time;

/// One caller's operation: a unary call, a batch, a pipeline of GETs.
pub trait Caller: Send + 'static {
    /// Does one operation; answers how many keys it looked up (1 for a
    /// single call, 0 for a ping) or what went wrong.
    fn call(&mut self) -> impl Future<Output = Result<u64, String>> + Send;
}

/// How long a phase runs.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Not counted.
    pub warmup: Duration,
    /// Counted.
    pub measure: Duration,
}

/// What one phase measured.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Operations completed in the window.
    pub ops: u64,
    /// Keys they looked up.
    pub keys: u64,
    /// The window.
    pub elapsed: Duration,
    /// Every counted operation's latency.
    pub latencies: Latencies,
    /// CPU time (user + system) of the server process during the window.
    pub server_cpu: Duration,
    /// CPU time of this (client) process during the window.
    pub client_cpu: Duration,
}

impl Outcome {
    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// Keys per second.
    pub fn keys_per_sec(&self) -> f64 {
        self.keys as f64 / self.elapsed.as_secs_f64()
    }

    /// The `q`-quantile latency (0 < q <= 1; zero when nothing was
    /// counted).
    pub fn latency(&self, q: f64) -> Duration {
        self.latencies.quantile_duration(q)
    }

    /// Server CPU per operation.
    pub fn server_cpu_per_op(&self) -> Duration {
        self.server_cpu.div_f64(self.ops.max(1) as f64)
    }

    /// Client CPU per operation.
    pub fn client_cpu_per_op(&self) -> Duration {
        self.client_cpu.div_f64(self.ops.max(1) as f64)
    }
}

/// What one caller counted.
struct Tally {
    ops: u64,
    keys: u64,
    latencies: Latencies,
}

/// Runs `callers` (one task each on `runtime`) for `timing`, measuring the
/// CPU time of process `server_pid`. Fails on the first failed operation.
pub fn run<C: Caller>(
    runtime: &tokio::runtime::Runtime,
    callers: Vec<C>,
    timing: Timing,
    server_pid: u32,
) -> Result<Outcome, String> {
    let start = Instant::now();
    let measured_from = start + timing.warmup;
    let end = measured_from + timing.measure;
    runtime.block_on(async move {
        let tasks: Vec<_> = callers
            .into_iter()
            .map(|caller| tokio::spawn(drive(caller, measured_from, end)))
            .collect();
        tokio::time::sleep_until(measured_from.into()).await;
        let server_before = cpu_time(server_pid)?;
        let client_before = cpu_time(std::process::id())?;
        tokio::time::sleep_until(end.into()).await;
        let server_cpu = cpu_time(server_pid)?.saturating_sub(server_before);
        let client_cpu = cpu_time(std::process::id())?.saturating_sub(client_before);
        let elapsed = timing.measure;
        let mut outcome = Outcome {
            ops: 0,
            keys: 0,
            elapsed,
            latencies: Latencies::new(),
            server_cpu,
            client_cpu,
        };
        for task in tasks {
            let tally = task
                .await
                .map_err(|e| format!("a caller panicked: {e}"))??;
            outcome.ops += tally.ops;
            outcome.keys += tally.keys;
            outcome.latencies.add(&tally.latencies);
        }
        Ok(outcome)
    })
}

/// One caller's loop.
async fn drive<C: Caller>(
    mut caller: C,
    measured_from: Instant,
    end: Instant,
) -> Result<Tally, String> {
    let mut tally = Tally {
        ops: 0,
        keys: 0,
        latencies: Latencies::new(),
    };
    loop {
        let started = Instant::now();
        if started >= end {
            return Ok(tally);
        }
        let keys = caller.call().await?;
        let finished = Instant::now();
        if started >= measured_from && finished <= end {
            tally.ops += 1;
            tally.keys += keys;
            tally
                .latencies
                .record_duration(finished.duration_since(started));
        }
    }
}
