//! Server benchmarks (issue 4): our gRPC server as a separate process
//! against its own empty RPC and against a private `redis-server`, all in
//! one run, on the same machine. Prints a markdown table (stdout; progress
//! on stderr).
//!
//! - **load**: `uuidmap serve --fsync never` on a free loopback port and a
//!   temporary data directory, filled with N entries (`UUIDMAP_BENCH_N`,
//!   default 10M) by `Write` batches of 100,000 puts (the server's default
//!   limit); Redis (persistence off) with the same N 16-byte binary keys
//!   and 16-byte values by pipelined `SET`s.
//! - **unary**: at each caller count (`UUIDMAP_BENCH_CALLERS`, default
//!   1,16,64): `Ping` (the empty RPC: the framework's cost), `Get` of random
//!   loaded keys, then Redis `GET` of the same keys, one command in flight
//!   per connection. Our callers share at most `UUIDMAP_BENCH_CONNS`
//!   (default 4) HTTP/2 connections; each Redis caller has its own.
//! - **batches**: `BatchGet` of `UUIDMAP_BENCH_BATCH` (default 100,1000) random
//!   keys at `UUIDMAP_BENCH_BATCH_CALLERS` (default 4,16) callers; Redis
//!   `GET` pipelined 16 deep (`redis-benchmark -P 16`) at
//!   `UUIDMAP_BENCH_PIPELINE_CALLERS` (default 16,64) connections.
//! - **scans**: a full `Scan`, and one filtered by 100 values (each the value
//!   of one loaded entry, so it returns 100 entries and examines all N), as
//!   one split and as two splits in parallel; repeated while the phase's time
//!   lasts (at least once), best and median reported.
//!
//! Each phase runs `UUIDMAP_BENCH_SECS` (default 5) after 0.5 s of warm-up,
//! and records the CPU time of the server process (ours or Redis's, from
//! `/proc/<pid>/stat`) and of this process, so that a rate can be read as
//! CPU per call. Phases alternate between the servers at each caller count,
//! so that noise from other work on the machine hits both alike.
//!
//! Redis runs only under `cargo bench` and if `redis-server` is on `PATH`
//! (`tools/bench-server.sh` installs it). Under `cargo test --benches` this
//! runs as a smoke test: 20,000 entries, short phases, no Redis.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::bytes::Bytes;

#[path = "../common/binary.rs"]
mod binary;
#[path = "../common/mod.rs"]
mod common;
mod data;
mod grpc;
mod load;
mod process;
#[path = "../common/redis.rs"]
mod redis;
mod report;
mod resp;

use data::Data;
use load::{Outcome, Timing};
use process::{OurServer, cpu_time, resident_bytes};
use report::{Report, Row, ScanRow};

/// What to run.
struct Settings {
    entries: usize,
    timing: Timing,
    callers: Vec<usize>,
    connections: usize,
    batches: Vec<usize>,
    batch_callers: Vec<usize>,
    pipeline_callers: Vec<usize>,
    redis: bool,
    /// How long our server sits idle after loading before its resident
    /// memory is read a second time.
    idle: Duration,
}

/// Keys per `Write` (the server's default `--max-write-ops`).
const WRITE_BATCH: usize = 100_000;
/// Pipeline depth of the Redis batch comparison (`redis-benchmark -P 16`).
const PIPELINE_DEPTH: usize = 16;
/// Values in the filtered scan's filter.
const FILTER_VALUES: usize = 100;
/// Most runs of one scan phase.
const MAX_SCAN_RUNS: usize = 5;

fn main() {
    if let Err(e) = run() {
        eprintln!("server bench failed: {e}");
        std::process::exit(1);
    }
}

fn settings() -> Result<Settings, String> {
    let bench = common::bench_mode();
    let list = |name: &str, default: &[usize]| -> Result<Vec<usize>, String> {
        match std::env::var(name) {
            Ok(s) if !s.trim().is_empty() => s
                .split(',')
                .map(|p| {
                    common::parse_count(p)
                        .filter(|&n| n > 0)
                        .ok_or_else(|| format!("{name}: bad count {p:?}"))
                })
                .collect(),
            _ => Ok(default.to_vec()),
        }
    };
    let entries = match std::env::var("UUIDMAP_BENCH_N") {
        Ok(s) if !s.trim().is_empty() => common::parse_count(&s)
            .filter(|&n| n >= FILTER_VALUES)
            .ok_or_else(|| format!("UUIDMAP_BENCH_N: bad entry count {s:?} (at least 100)"))?,
        _ if bench => 10_000_000,
        _ => common::TEST_SIZE,
    };
    let secs = match std::env::var("UUIDMAP_BENCH_SECS") {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|&s| s > 0.0)
            .ok_or_else(|| format!("UUIDMAP_BENCH_SECS: bad duration {s:?}"))?,
        _ if bench => 5.0,
        _ => 0.2,
    };
    let timing = Timing {
        warmup: Duration::from_secs_f64(if bench { 0.5 } else { 0.05 }),
        measure: Duration::from_secs_f64(secs),
    };
    // jemalloc's background purge releases within about 10 s
    // (dirty_decay_ms); 15 s of quiet shows where it settles.
    let idle = Duration::from_secs(if bench { 15 } else { 0 });
    Ok(Settings {
        entries,
        timing,
        callers: list("UUIDMAP_BENCH_CALLERS", &[1, 16, 64])?,
        connections: list("UUIDMAP_BENCH_CONNS", &[4])?[0],
        batches: list("UUIDMAP_BENCH_BATCH", &[100, 1000])?,
        batch_callers: list("UUIDMAP_BENCH_BATCH_CALLERS", &[4, 16])?,
        pipeline_callers: list("UUIDMAP_BENCH_PIPELINE_CALLERS", &[16, 64])?,
        redis: bench,
        idle,
    })
}

fn run() -> Result<(), String> {
    let s = settings()?;
    let loadavg_before = report::loadavg();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the client runtime: {e}"))?;
    let n = s.entries;
    eprintln!(
        "server bench: {} entries, {:.1} s phases, callers {:?}, up to {} HTTP/2 connections",
        common::label(n),
        s.timing.measure.as_secs_f64(),
        s.callers,
        s.connections
    );
    let data = Data::new(n);

    // Our server, loaded.
    let binary = binary::uuidmap_binary();
    let mut ours = OurServer::start(&binary, &[])?;
    let port = ours.port;
    let ready = ours.wait_ready(|| runtime.block_on(grpc::ping_once(port)))?;
    eprintln!(
        "uuidmap serve (pid {}) answered Ping after {ready:.2?}",
        ours.pid()
    );
    let clients = runtime.block_on(grpc::connect(port, s.connections))?;
    let load_ours = runtime.block_on(grpc::load(&clients[0], &data, WRITE_BATCH))?;
    let held = runtime.block_on(grpc::entries(&clients[0]))?;
    if held != n as u64 {
        return Err(format!("the server holds {held} entries after loading {n}"));
    }
    let rss_ours = resident_bytes(ours.pid());
    let loaded_at = Instant::now();
    eprintln!("uuidmap: loaded {n} entries in {load_ours:.2?}");

    // Redis, loaded.
    let redis_binary = if s.redis { redis::find_server() } else { None };
    let redis_dir = tempfile::Builder::new()
        .prefix("uuidmap-bench-redis")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))?;
    let mut redis_server = None;
    let mut load_redis = None;
    let mut redis_loaded_at = None;
    let mut redis_version = None;
    if let Some(bin) = &redis_binary {
        redis_version = Some(redis::version(bin));
        let (server, _) =
            redis::Server::start(bin, redis_dir.path(), &["--save", "", "--appendonly", "no"])
                .map_err(|e| format!("cannot start redis-server: {e}"))?;
        let mut conn = server.connect().map_err(|e| e.to_string())?;
        let took = conn
            .pipelined_sets(n, |i| (*data.key(i), data.value(i)))
            .map_err(|e| format!("loading Redis: {e}"))?;
        match conn.command(&[b"DBSIZE"]).map_err(|e| e.to_string())? {
            redis::Reply::Int(c) if c as usize == n => {}
            other => return Err(format!("Redis DBSIZE answered {other:?} after {n} SETs")),
        }
        eprintln!("redis: loaded {n} entries in {took:.2?}");
        load_redis = Some(took);
        redis_loaded_at = Some(Instant::now());
        redis_server = Some(server);
    } else if s.redis {
        eprintln!("redis-server is not on PATH: no Redis rows (tools/bench-server.sh installs it)");
    }
    let rss_redis = redis_server.as_ref().and_then(|r| resident_bytes(r.pid()));
    // Our server sat idle while Redis loaded; what it holds after a quiet
    // spell is what an operator sees (jemalloc returns the tables growth
    // outgrew in the background, within seconds).
    if let Some(rest) = s.idle.checked_sub(loaded_at.elapsed()) {
        std::thread::sleep(rest);
    }
    let rss_ours_idle = (loaded_at.elapsed(), resident_bytes(ours.pid()));
    // Redis's resident memory after the same idle time as ours (issue 16
    // item 4), so neither side is read while still settling.
    let rss_redis_idle = match (&redis_server, redis_loaded_at) {
        (Some(r), Some(at)) => {
            if let Some(rest) = rss_ours_idle.0.checked_sub(at.elapsed()) {
                std::thread::sleep(rest);
            }
            resident_bytes(r.pid())
        }
        _ => None,
    };

    let mut rows = Vec::new();
    let phase = |rows: &mut Vec<Row>, row: Row| {
        let o = &row.outcome;
        eprintln!(
            "{} {} x{} at {} callers: {:.0} calls/s, p99 {:.1?}, server CPU {:.1?}/call",
            row.system,
            row.operation,
            row.per_call,
            row.callers,
            o.ops_per_sec(),
            o.latency(0.99),
            o.server_cpu_per_op()
        );
        rows.push(row);
    };
    let conns = |callers: usize| callers.min(s.connections);
    let client = |i: usize, callers: usize| clients[i % conns(callers)].clone();

    // Unary calls, ours and Redis's side by side at each caller count.
    for &c in &s.callers {
        let outcome = load::run(
            &runtime,
            (0..c).map(|i| grpc::Ping::new(client(i, c))).collect(),
            s.timing,
            ours.pid(),
        )?;
        phase(&mut rows, ours_row("Ping", 0, c, conns(c), outcome));
        let outcome = load::run(
            &runtime,
            (0..c)
                .map(|i| grpc::Get::new(client(i, c), data.clone(), i))
                .collect(),
            s.timing,
            ours.pid(),
        )?;
        phase(&mut rows, ours_row("Get", 1, c, conns(c), outcome));
        if let Some(r) = &redis_server {
            let outcome = redis_phase(&runtime, r, &data, c, 1, s.timing)?;
            phase(&mut rows, redis_row(1, c, outcome));
        }
    }

    // Batches.
    for &b in &s.batches {
        for &c in &s.batch_callers {
            let outcome = load::run(
                &runtime,
                (0..c)
                    .map(|i| grpc::BatchGet::new(client(i, c), data.clone(), i, b))
                    .collect(),
                s.timing,
                ours.pid(),
            )?;
            phase(&mut rows, ours_row("BatchGet", b, c, conns(c), outcome));
        }
    }
    if let Some(r) = &redis_server {
        for &c in &s.pipeline_callers {
            let outcome = redis_phase(&runtime, r, &data, c, PIPELINE_DEPTH, s.timing)?;
            phase(&mut rows, redis_row(PIPELINE_DEPTH, c, outcome));
        }
    }
    // Redis is done: its memory back before the scans.
    drop(redis_server);

    // Scans.
    let filter: Bytes = (0..FILTER_VALUES)
        .flat_map(|k| data.value(k * (n / FILTER_VALUES)))
        .collect::<Vec<u8>>()
        .into();
    let mut scans = Vec::new();
    for (what, values, expected) in [
        ("full".to_string(), Bytes::new(), n as u64),
        (
            format!("filtered ({FILTER_VALUES} values)"),
            filter,
            FILTER_VALUES as u64,
        ),
    ] {
        for splits in [1u32, 2] {
            let row = scan_phase(
                &runtime,
                &clients,
                ours.pid(),
                &what,
                splits,
                &values,
                expected,
                n as u64,
                s.timing.measure,
            )?;
            eprintln!(
                "scan {what}, {splits} split(s): best {:.3?} of {} runs",
                row.best(),
                row.runs.len()
            );
            scans.push(row);
        }
    }

    drop(clients);
    let stopped = ours.stop()?;
    eprintln!("uuidmap serve stopped gracefully in {stopped:.2?}");

    let command = std::env::var("UUIDMAP_BENCH_COMMAND")
        .unwrap_or_else(|_| format!("UUIDMAP_BENCH_N={n} cargo bench --bench server"));
    let report = Report {
        entries: n,
        command,
        timing: s.timing,
        load_ours,
        load_redis,
        rss_ours,
        rss_ours_idle,
        rss_redis,
        rss_redis_idle,
        redis_version,
        loadavg_before,
        loadavg_after: report::loadavg(),
        rows,
        scans,
    };
    println!("{}", report.markdown());
    Ok(())
}

fn ours_row(
    operation: &'static str,
    per_call: usize,
    callers: usize,
    connections: usize,
    outcome: Outcome,
) -> Row {
    Row {
        system: "uuidmap",
        operation,
        per_call,
        callers,
        connections,
        outcome,
    }
}

fn redis_row(depth: usize, callers: usize, outcome: Outcome) -> Row {
    Row {
        system: "Redis",
        operation: "GET",
        per_call: depth,
        callers,
        connections: callers,
        outcome,
    }
}

/// `callers` Redis connections, each sending GETs `depth` at a time.
fn redis_phase(
    runtime: &tokio::runtime::Runtime,
    server: &redis::Server,
    data: &Arc<Data>,
    callers: usize,
    depth: usize,
    timing: Timing,
) -> Result<Outcome, String> {
    let gets = runtime.block_on(async {
        let mut gets = Vec::with_capacity(callers);
        for i in 0..callers {
            gets.push(resp::Gets::connect(server.port, data.clone(), i, depth).await?);
        }
        Ok::<_, String>(gets)
    })?;
    load::run(runtime, gets, timing, server.pid())
}

/// Scans (split i of `splits`, each on its own connection, in parallel)
/// until `budget` has passed or [`MAX_SCAN_RUNS`] runs, at least once; every
/// run must return `expected` entries.
#[allow(clippy::too_many_arguments)]
fn scan_phase(
    runtime: &tokio::runtime::Runtime,
    clients: &[grpc::Client],
    server_pid: u32,
    what: &str,
    splits: u32,
    values: &Bytes,
    expected: u64,
    examined: u64,
    budget: Duration,
) -> Result<ScanRow, String> {
    let mut row = ScanRow {
        what: what.to_string(),
        splits,
        returned: 0,
        examined,
        messages: 0,
        runs: Vec::new(),
        server_cpu: Duration::ZERO,
    };
    let cpu_before = cpu_time(server_pid)?;
    let started = Instant::now();
    while row.runs.is_empty() || (started.elapsed() < budget && row.runs.len() < MAX_SCAN_RUNS) {
        let run_started = Instant::now();
        let results = runtime.block_on(async {
            let tasks: Vec<_> = (0..splits)
                .map(|split| {
                    let client = clients[split as usize % clients.len()].clone();
                    tokio::spawn(grpc::scan(client, split, splits, values.clone()))
                })
                .collect();
            let mut results = Vec::new();
            for t in tasks {
                results.push(
                    t.await
                        .map_err(|e| format!("a scan task panicked: {e}"))??,
                );
            }
            Ok::<_, String>(results)
        })?;
        row.runs.push(run_started.elapsed());
        let returned: u64 = results.iter().map(|r| r.entries).sum();
        if returned != expected {
            return Err(format!(
                "scan {what} ({splits} splits) returned {returned} entries, expected {expected}"
            ));
        }
        row.returned = returned;
        row.messages = results.iter().map(|r| r.messages).sum();
    }
    row.server_cpu = cpu_time(server_pid)?.saturating_sub(cpu_before);
    Ok(row)
}
