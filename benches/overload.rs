//! Admission under overload: goodput and p99 latency of the LIFO semaphore
//! the server uses against a FIFO `tokio::sync::Semaphore`.
//!
//! The workload (the issue's): a simulated server with `permits` permits
//! and a fixed service time (a timer sleep, so that the figures measure the
//! queueing discipline rather than the CPU a shared machine has left),
//! offered 4× its capacity by an open-loop client that sends a request
//! every 1/rate seconds, each with a 100 ms deadline. A request counts as
//! *goodput* only if its response is complete within its deadline. Both
//! limiters give up a waiting request at its deadline; LIFO serves the
//! newest waiter, FIFO the oldest. The LIFO side goes through
//! `acquire_owned` with a queue of 512, as the server's admission layer does
//! (server default: `--read-queue 512`).
//!
//! FIFO runs twice: with the same queue bound of 512 (a request that finds
//! 512 waiting is refused at once, as LIFO's full queue refuses it), so the
//! two differ only in order; and unbounded, as a plain tokio `Semaphore`
//! would ship. The verdict lines compare LIFO with each.
//!
//! Capacity is `permits / service time` (nominal). tokio's timer rounds each
//! service sleep up to its next millisecond tick, so a request really holds
//! its permit a little longer; the *effective* capacity divides by the
//! measured mean service time instead, and is the fairer denominator.
//!
//! Run: `cargo bench --bench overload` (about 27 s). Prints a markdown
//! table.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use uuidmap::sync::LifoSemaphore;

#[path = "common/histogram.rs"]
mod histogram;
use histogram::Latencies;

/// The client deadline.
const DEADLINE: Duration = Duration::from_millis(100);
/// Offered load as a multiple of capacity.
const OVERLOAD: f64 = 4.0;
/// How long requests are sent.
const RUN: Duration = Duration::from_millis(4_000);
/// Completions before this are not counted: the queue is still filling.
const WARMUP: Duration = Duration::from_millis(500);
/// The LIFO semaphore's queue (the server's default read queue).
const LIFO_QUEUE: usize = 512;

#[derive(Clone)]
enum Limiter {
    Lifo(Arc<LifoSemaphore>),
    /// The semaphore, and the queue bound with the count of waiters
    /// (`None`: unbounded).
    Fifo(
        Arc<tokio::sync::Semaphore>,
        Option<(usize, Arc<AtomicUsize>)>,
    ),
}

impl Limiter {
    fn name(&self) -> &'static str {
        match self {
            Limiter::Lifo(_) => "LIFO (LifoSemaphore)",
            Limiter::Fifo(_, Some(_)) => "FIFO (tokio Semaphore), queue 512",
            Limiter::Fifo(_, None) => "FIFO (tokio Semaphore), unbounded",
        }
    }
}

/// One request: `(done, latency, service)` if answered within its deadline.
async fn request(
    limiter: Limiter,
    service: Duration,
    sent: Instant,
) -> Option<(Instant, Duration, Duration)> {
    let deadline = sent + DEADLINE;
    let serve = || async {
        let began = Instant::now();
        tokio::time::sleep(service).await;
        began.elapsed()
    };
    let held = match limiter {
        Limiter::Lifo(sem) => match sem.acquire_owned(Some(deadline)).await {
            Ok(_permit) => Some(serve().await),
            Err(_) => None,
        },
        Limiter::Fifo(sem, bound) => {
            // A bounded queue refuses a request that finds it full; one
            // that gets a permit at once never queued.
            let queued = match (sem.clone().try_acquire_owned(), &bound) {
                (Ok(permit), _) => Some(Ok(permit)),
                (Err(_), Some((max, waiting))) => {
                    if waiting.fetch_add(1, Ordering::AcqRel) >= *max {
                        waiting.fetch_sub(1, Ordering::AcqRel);
                        None
                    } else {
                        let r = tokio::time::timeout_at(deadline, sem.acquire_owned()).await;
                        waiting.fetch_sub(1, Ordering::AcqRel);
                        r.ok().map(|p| Ok(p.expect("never closed")))
                    }
                }
                (Err(_), None) => tokio::time::timeout_at(deadline, sem.acquire_owned())
                    .await
                    .ok()
                    .map(|p| Ok::<_, ()>(p.expect("never closed"))),
            };
            match queued {
                Some(Ok(_permit)) => Some(serve().await),
                _ => None,
            }
        }
    };
    let done = Instant::now();
    held.filter(|_| done <= deadline)
        .map(|held| (done, done - sent, held))
}

struct Row {
    limiter: &'static str,
    permits: usize,
    service: Duration,
    offered: usize,
    goodput: f64,
    nominal: f64,
    effective: f64,
    p50: Option<Duration>,
    p99: Option<Duration>,
}

async fn run(limiter: Limiter, permits: usize, service: Duration) -> Row {
    let nominal = permits as f64 / service.as_secs_f64();
    let per_ms = OVERLOAD * nominal / 1000.0;
    let start = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_millis(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut owed = 0.0;
    let mut requests = Vec::new();
    while start.elapsed() < RUN {
        ticker.tick().await;
        owed += per_ms;
        let now = Instant::now();
        while owed >= 1.0 {
            owed -= 1.0;
            requests.push(tokio::spawn(request(limiter.clone(), service, now)));
        }
    }
    let window = (start + WARMUP)..(start + RUN);
    let offered = requests.len();
    let mut latencies = Latencies::new();
    let mut held = Duration::ZERO;
    for r in requests {
        if let Some((done, latency, service)) = r.await.expect("a request panicked")
            && window.contains(&done)
        {
            latencies.record_duration(latency);
            held += service;
        }
    }
    let n = latencies.len();
    let mean_service = if n > 0 { held / n as u32 } else { service };
    let pct = |p: f64| (n > 0).then(|| latencies.quantile_duration(p));
    Row {
        limiter: limiter.name(),
        permits,
        service,
        offered,
        goodput: n as f64 / (RUN - WARMUP).as_secs_f64(),
        nominal,
        effective: permits as f64 / mean_service.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
    }
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("–".into(), |d| format!("{:.1}", d.as_secs_f64() * 1e3))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // (permits, service time): a small server, and one with 8× the permits
    // (and so 8× the request rate: 25,600 offered/s).
    let shapes = [
        (8, Duration::from_millis(10)),
        (64, Duration::from_millis(10)),
    ];
    let mut rows = Vec::new();
    for (permits, service) in shapes {
        for limiter in [
            Limiter::Lifo(Arc::new(LifoSemaphore::new(permits, LIFO_QUEUE))),
            Limiter::Fifo(
                Arc::new(tokio::sync::Semaphore::new(permits)),
                Some((LIFO_QUEUE, Arc::new(AtomicUsize::new(0)))),
            ),
            Limiter::Fifo(Arc::new(tokio::sync::Semaphore::new(permits)), None),
        ] {
            let row = runtime.block_on(run(limiter, permits, service));
            eprintln!("{} permits={permits}: done", row.limiter);
            rows.push(row);
        }
    }
    println!(
        "\nOverload: {OVERLOAD}× capacity, {} ms deadlines, {} s runs ({} s counted), \
         2 tokio workers\n",
        DEADLINE.as_millis(),
        RUN.as_secs_f64(),
        (RUN - WARMUP).as_secs_f64()
    );
    println!(
        "| limiter | permits × service | offered/s | goodput/s | % of nominal capacity | \
         % of effective capacity | p50 ms | p99 ms |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in &rows {
        println!(
            "| {} | {} × {} ms | {:.0} | {:.0} | {:.0} % | {:.0} % | {} | {} |",
            r.limiter,
            r.permits,
            r.service.as_millis(),
            r.offered as f64 / RUN.as_secs_f64(),
            r.goodput,
            100.0 * r.goodput / r.nominal,
            100.0 * r.goodput / r.effective,
            ms(r.p50),
            ms(r.p99),
        );
    }
    for shape in rows.chunks(3) {
        let lifo = &shape[0];
        for (fifo, bounds) in [
            (&shape[1], "equal queue bounds (512 each)"),
            (&shape[2], "shipped bounds (LIFO 512, FIFO unbounded)"),
        ] {
            let ratio = if fifo.goodput > 0.0 {
                format!("{:.1}×", lifo.goodput / fifo.goodput)
            } else {
                "∞ (FIFO served nothing in time)".into()
            };
            println!(
                "\n{} permits, {bounds}: LIFO goodput / FIFO goodput = {ratio}",
                lifo.permits
            );
        }
    }
}
