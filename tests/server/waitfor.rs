//! 10,000 concurrent `WaitFor` long-polls over 8 HTTP/2 connections
//! (1,250 streams each) against the real server, with its default limits:
//!
//! - while they all wait and nothing else happens, the process (server and
//!   test client together, so an upper bound for the server) uses a small
//!   fraction of one core: a waiting poll costs no CPU;
//! - a waiter whose LSN is applied answers within 20 ms of the write that
//!   applied it being acknowledged, while the other waiters keep waiting;
//! - a waiter whose LSN is never reached is answered DEADLINE_EXCEEDED by
//!   the server (not by the client's own timer) within 50 ms of its
//!   deadline: the server answers a little before it (10 %, at most 20 ms,
//!   see `server::wire::CallDeadline::answer_by`), never long after.
//!
//! The test binary runs its tests in one process, so this test runs its
//! body in a child process of its own (the same binary, this test alone):
//! nothing else runs in the process whose CPU time is measured.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request};
use uuidmap::server::ServeConfig;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap::writer::FsyncPolicy;
use uuidmap_testkit::server::{TestServer, b, u};

/// Connections, and long-polls on each.
const CONNECTIONS: usize = 8;
const PER_CONNECTION: usize = 1_250;
const WAITERS: usize = CONNECTIONS * PER_CONNECTION;
/// Waiters whose LSN is never written; the rest wait for one of
/// `WAKE_LSNS` consecutive LSNs, `WAITERS_PER_LSN` each.
const NEVER_WOKEN: usize = 1_000;
const WAKE_LSNS: usize = 90;
const WAITERS_PER_LSN: usize = (WAITERS - NEVER_WOKEN) / WAKE_LSNS;
/// The never-woken waiters' deadlines: spread over [FIRST, FIRST + SPREAD),
/// counted from when each call is made, so that they expire after the
/// wake phase and not all in the same millisecond.
const FIRST_DEADLINE: Duration = Duration::from_secs(6);
const DEADLINE_SPREAD_MS: u64 = 1_000;
/// The woken waiters' deadlines: far beyond the test.
const WOKEN_DEADLINE: Duration = Duration::from_secs(60);

const WAKE_BOUND: Duration = Duration::from_millis(20);
const DEADLINE_BOUND: Duration = Duration::from_millis(50);
/// CPU time over wall time while all wait: 10 % of one core.
const IDLE_CPU_BOUND: f64 = 0.10;

/// CPU time (user + system) of this whole process so far.
fn process_cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` points to writable memory the size of a `rusage`,
    // which getrusage fills; RUSAGE_SELF is a valid `who`. It cannot fail
    // with these arguments, and the all-zero `rusage` is a valid value
    // anyway.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A connection of its own (a `TestServer::channel` clone would share one).
async fn connection(server: &TestServer) -> Channel {
    Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        // The client side of the h2 connection queues streams beyond the
        // server's SETTINGS_MAX_CONCURRENT_STREAMS; the server sets none
        // (tonic's default: no limit), so nothing is held back here. The
        // request buffer must take a whole connection's polls at once.
        .buffer_size(PER_CONNECTION)
        .connect()
        .await
        .unwrap()
}

/// What a waiter reports: its number, when its answer arrived, when its
/// call was made, and the answer.
type Report = (
    usize,
    Instant,
    Instant,
    Result<pb::WaitForResponse, tonic::Status>,
);

/// Waiter `i`: the LSN it waits for and its call's timeout.
fn plan(i: usize, base: u64) -> (u64, Duration) {
    if i < NEVER_WOKEN {
        let spread = Duration::from_millis(i as u64 * DEADLINE_SPREAD_MS / NEVER_WOKEN as u64);
        (u64::MAX / 2, FIRST_DEADLINE + spread)
    } else {
        let lsn = base + 1 + ((i - NEVER_WOKEN) / WAITERS_PER_LSN) as u64;
        (lsn, WOKEN_DEADLINE)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Set in the child process that runs the body.
const ALONE: &str = "UUIDMAP_TEST_LONG_POLLS_ALONE";

#[test]
fn ten_thousand_long_polls_wait_idle_wake_within_20_ms_and_time_out_at_their_deadlines() {
    if std::env::var_os(ALONE).is_some() {
        return tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(long_polls());
    }
    let name = "waitfor::ten_thousand_long_polls_wait_idle_wake_within_20_ms_and_time_out_at_their_deadlines";
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(ALONE, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    let stderr = String::from_utf8_lossy(&child.stderr);
    eprintln!("{stderr}");
    assert!(
        child.status.success(),
        "the child failed: {}\n{stdout}",
        child.status
    );
    // The child ran exactly this test (not zero tests: a renamed test would
    // otherwise pass by running nothing).
    assert!(stdout.contains("1 passed"), "{stdout}");
}

async fn long_polls() {
    let dir = tempfile::tempdir().unwrap();
    // The default limits (max wait 60 s, and any cap on long-polls); only
    // fsync is off, to keep the wake writes short.
    let mut config = ServeConfig::new(dir.path());
    config.fsync = FsyncPolicy::Never;
    let server = TestServer::start_with(config).await;
    let mut writer = server.client().await;
    let base = writer
        .put(pb::PutRequest {
            key: b(u(1)),
            value: b(u(1)),
        })
        .await
        .unwrap()
        .into_inner()
        .lsn;

    // Start every poll.
    let (tx, mut rx) = mpsc::unbounded_channel::<Report>();
    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        channels.push(connection(&server).await);
    }
    let spawn = |i: usize| {
        // Interleaved, so each connection carries both kinds.
        let mut client = UuidMapClient::new(channels[i % CONNECTIONS].clone());
        let (lsn, timeout) = plan(i, base);
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut request = Request::new(pb::WaitForRequest { lsn });
            request.set_timeout(timeout);
            let called = Instant::now();
            let answer = client.wait_for(request).await.map(|r| r.into_inner());
            let _ = tx.send((i, Instant::now(), called, answer));
        });
    };
    // A Ping on each connection after a batch of polls: HTTP/2 opens
    // streams in order, so its answer means the server has received every
    // poll queued on that connection before it (the pause lets every
    // spawned call get queued).
    let received = || async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        for channel in &channels {
            UuidMapClient::new(channel.clone())
                .ping(pb::PingRequest {})
                .await
                .unwrap();
        }
    };
    let ramp = Instant::now();
    // The woken ones in one burst.
    (NEVER_WOKEN..WAITERS).for_each(spawn);
    received().await;
    // The never-woken ones in small batches: a burst of thousands of calls
    // on the two cores that run both client and server would reach the
    // server's handlers a few hundred ms after the client started the
    // calls' clocks (the server's deadline counts from arrival, as
    // grpc-timeout is relative), and the client's own timer (CANCELLED)
    // would fire first. That queueing delay is what we keep out, not what
    // we measure.
    for batch in (0..NEVER_WOKEN).collect::<Vec<_>>().chunks(50) {
        batch.iter().copied().for_each(spawn);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    received().await;
    drop(tx);
    let ramp = ramp.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // All wait; nothing else happens. Measure the process's CPU time.
    let cpu_before = process_cpu_time();
    let wall = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_cpu = (process_cpu_time() - cpu_before).as_secs_f64() / wall.elapsed().as_secs_f64();
    if let Ok(early) = rx.try_recv() {
        panic!("waiter {} answered before any wake: {:?}", early.0, early.3);
    }

    // Wake one LSN at a time; each write's waiters must answer within the
    // bound of its acknowledgement, and no one else may answer meanwhile.
    // Offsets are signed: the server wakes a waiter when it publishes the
    // LSN, which is before the write's own answer is sent, so a waiter's
    // answer often arrives first.
    let mut wake = Vec::with_capacity(WAITERS - NEVER_WOKEN);
    for n in 0..WAKE_LSNS as u64 {
        let lsn = writer
            .put(pb::PutRequest {
                key: b(u(2 + u128::from(n))),
                value: b(u(1)),
            })
            .await
            .unwrap()
            .into_inner()
            .lsn;
        let acked = Instant::now();
        assert_eq!(lsn, base + 1 + n, "nothing else writes");
        for _ in 0..WAITERS_PER_LSN {
            let (i, answered, _, answer) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap_or_else(|_| panic!("the waiters of LSN {lsn} did not all answer in 5 s"))
                .unwrap();
            let (target, _) = plan(i, base);
            assert_eq!(
                target, lsn,
                "waiter {i} answered when LSN {lsn} was applied"
            );
            assert_eq!(answer.unwrap().applied_lsn, lsn, "waiter {i}");
            wake.push(signed_ms(answered, acked));
        }
    }

    // The rest reach their deadlines.
    let mut to_deadline = Vec::with_capacity(NEVER_WOKEN);
    for _ in 0..NEVER_WOKEN {
        let (i, answered, called, answer) = tokio::time::timeout(FIRST_DEADLINE * 2, rx.recv())
            .await
            .expect("every never-woken waiter answers by its deadline")
            .unwrap();
        assert!(i < NEVER_WOKEN, "waiter {i} was woken late");
        let status = answer.unwrap_err();
        // Not the client's own timer (CANCELLED): the server's answer.
        assert_eq!(
            status.code(),
            Code::DeadlineExceeded,
            "waiter {i}: {status:?}"
        );
        assert!(status.message().contains("not applied yet"), "{status:?}");
        to_deadline.push(signed_ms(answered, called + plan(i, base).1));
    }
    server.stop().await.unwrap();

    wake.sort_by(f64::total_cmp);
    to_deadline.sort_by(f64::total_cmp);
    let figures = |v: &[f64]| {
        format!(
            "min {:.2} ms, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            v[0],
            percentile(v, 0.5),
            percentile(v, 0.99),
            v[v.len() - 1]
        )
    };
    eprintln!(
        "{WAITERS} long-polls on {CONNECTIONS} connections, started and received in {ramp:?}; \
         process CPU while all waited: {:.3} % of one core; answer after the waking write's \
         acknowledgement ({WAITERS_PER_LSN} waiters per LSN): {}; never-woken answers \
         relative to their deadline: {}",
        idle_cpu * 100.0,
        figures(&wake),
        figures(&to_deadline),
    );
    assert!(
        idle_cpu < IDLE_CPU_BOUND,
        "the process used {:.1} % of a core while 10,000 polls waited",
        idle_cpu * 100.0
    );
    let bound = WAKE_BOUND.as_secs_f64() * 1e3;
    let slowest = wake[wake.len() - 1];
    assert!(
        slowest <= bound,
        "a waiter answered {slowest:.2} ms after its LSN was applied"
    );
    let bound = DEADLINE_BOUND.as_secs_f64() * 1e3;
    let (earliest, latest) = (to_deadline[0], to_deadline[to_deadline.len() - 1]);
    assert!(
        -bound <= earliest && latest <= bound,
        "never-woken waiters answered from {earliest:.2} to {latest:.2} ms from their deadlines"
    );
}

/// `t - from` in milliseconds, negative when `t` is earlier.
fn signed_ms(t: Instant, from: Instant) -> f64 {
    match t.checked_duration_since(from) {
        Some(d) => d.as_secs_f64() * 1e3,
        None => -(from - t).as_secs_f64() * 1e3,
    }
}
