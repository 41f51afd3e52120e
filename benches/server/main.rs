//! Server benchmarks (issue 4): our gRPC server as a separate process
//! against its own empty RPC and against a private `redis-server`, all in
//! one run, on the same machine. Prints a markdown table (stdout; progress
//! on stderr).
//!
//! - **load**: `uuidmap serve --fsync never` on a free loopback port (and
//!   `/metrics` on another) and a temporary data directory, filled with N
//!   entries (`UUIDMAP_BENCH_N`, default 10M) by `Write` batches of 100,000
//!   puts (the server's default limit); Redis (persistence off) with the
//!   same N 16-byte binary keys and 16-byte values by pipelined `SET`s.
//!   Then both sit idle for the same time and their resident memory is
//!   read again.
//! - **unary**: at each caller count (`UUIDMAP_BENCH_CALLERS`, default
//!   1,16,64): `Ping` (the empty RPC: the framework's cost), `Get` of random
//!   loaded keys, and Redis `GET` of the same keys, one command in flight
//!   per connection. Our callers share at most `UUIDMAP_BENCH_CONNS`
//!   (default 4) HTTP/2 connections; each Redis caller has its own.
//! - **batches**: `BatchGet` of `UUIDMAP_BENCH_BATCH` (default 100,1000) random
//!   keys at `UUIDMAP_BENCH_BATCH_CALLERS` (default 4,16) callers; Redis
//!   `GET` pipelined 16 deep (`redis-benchmark -P 16`) at
//!   `UUIDMAP_BENCH_PIPELINE_CALLERS` (default 16,64) connections.
//! - **scans**: a full `Scan`, and one filtered by 100 values (each the value
//!   of one loaded entry, so it returns 100 entries), as one split and as
//!   two splits in parallel. The entries each run examined are the
//!   server's own count (`uuidmap_scan_entries_examined_total` on its
//!   `/metrics`, read before and after the run).
//!
//! **Rounds** (`UUIDMAP_BENCH_ROUNDS`, default 3): every phase runs once
//! per round, and the order of a group's phases rotates from round to round
//! (`rounds`), so that no phase always gets the coldest window. The groups
//! are the phases at one caller count (ours and Redis's side by side, so
//! that noise from other work on the machine hits both alike), the batch
//! phases with Redis's pipelined ones, and the four scans. A row reports
//! the median of its rounds and their range; the targets are judged on
//! medians.
//!
//! Each load phase runs `UUIDMAP_BENCH_SECS` (default 5) after 0.5 s of
//! warm-up, and records the CPU time of the server process (ours or
//! Redis's, from `/proc/<pid>/stat`) and of this process, so that a rate
//! can be read as CPU per call.
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
mod rounds;

use data::Data;
use load::{Outcome, Timing};
use process::{OurServer, cpu_time, resident_bytes};
use report::{Report, Row, ScanRow, ScanRun};

/// What to run.
struct Settings {
    entries: usize,
    timing: Timing,
    callers: Vec<usize>,
    connections: usize,
    batches: Vec<usize>,
    batch_callers: Vec<usize>,
    pipeline_callers: Vec<usize>,
    /// Times every phase runs (each time in another order).
    rounds: usize,
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
        rounds: list("UUIDMAP_BENCH_ROUNDS", &[3])?[0],
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
        "server bench: {} entries, {:.1} s phases, {} rounds, callers {:?}, up to {} HTTP/2 connections",
        common::label(n),
        s.timing.measure.as_secs_f64(),
        s.rounds,
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

    let bench = Bench {
        runtime: &runtime,
        clients: &clients,
        connections: s.connections,
        data: &data,
        server_pid: ours.pid(),
        redis: redis_server.as_ref(),
        timing: s.timing,
        rounds: s.rounds,
    };
    let mut rows = Vec::new();
    // Unary calls, ours and Redis's side by side at each caller count: one
    // group per caller count, so that its phases share a stretch of time.
    for &callers in &s.callers {
        let mut phases = vec![Phase::Ping { callers }, Phase::Get { callers }];
        if bench.redis.is_some() {
            phases.push(Phase::Redis { depth: 1, callers });
        }
        rows.extend(bench.rounds(&phases)?);
    }
    // Batches against Redis pipelined, as one group.
    let mut phases = Vec::new();
    for &batch in &s.batches {
        for &callers in &s.batch_callers {
            phases.push(Phase::BatchGet { batch, callers });
        }
    }
    if bench.redis.is_some() {
        for &callers in &s.pipeline_callers {
            phases.push(Phase::Redis {
                depth: PIPELINE_DEPTH,
                callers,
            });
        }
    }
    rows.extend(bench.rounds(&phases)?);
    // Redis is done: its memory back before the scans.
    drop(redis_server);

    // Scans: full and filtered, one split and two, also in rotating rounds.
    let filter: Bytes = (0..FILTER_VALUES)
        .flat_map(|k| data.value(k * (n / FILTER_VALUES)))
        .collect::<Vec<u8>>()
        .into();
    let mut scan_phases = Vec::new();
    for (what, values, expected) in [
        ("full".to_string(), Bytes::new(), n as u64),
        (
            format!("filtered ({FILTER_VALUES} values)"),
            filter,
            FILTER_VALUES as u64,
        ),
    ] {
        for splits in [1u32, 2] {
            scan_phases.push(ScanPhase {
                what: what.clone(),
                values: values.clone(),
                expected,
                splits,
            });
        }
    }
    let scan_runs = rounds::run(&scan_phases, s.rounds, |round, phase| {
        let run = scan_once(&runtime, &clients, &ours, phase)?;
        eprintln!(
            "round {}/{}: scan {}, {} split(s): {:.3?}, {} entries examined",
            round + 1,
            s.rounds,
            phase.what,
            phase.splits,
            run.run.wall,
            run.run.examined
        );
        Ok(run)
    })?;
    let scans: Vec<ScanRow> = scan_phases
        .into_iter()
        .zip(scan_runs)
        .map(|(phase, runs)| ScanRow {
            what: phase.what,
            splits: phase.splits,
            returned: phase.expected,
            messages: runs.last().map_or(0, |r| r.messages),
            server_cpu: runs.iter().map(|r| r.server_cpu).sum(),
            runs: runs.into_iter().map(|r| r.run).collect(),
        })
        .collect();

    drop(clients);
    let stopped = ours.stop()?;
    eprintln!("uuidmap serve stopped gracefully in {stopped:.2?}");

    let command = std::env::var("UUIDMAP_BENCH_COMMAND")
        .unwrap_or_else(|_| format!("UUIDMAP_BENCH_N={n} cargo bench --bench server"));
    let report = Report {
        entries: n,
        command,
        timing: s.timing,
        rounds: s.rounds,
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

/// One load phase: what runs, against which server.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Our empty RPC (the framework's own cost).
    Ping { callers: usize },
    /// Our unary `Get`.
    Get { callers: usize },
    /// Our `BatchGet` of `batch` keys.
    BatchGet { batch: usize, callers: usize },
    /// Redis `GET`, `depth` commands per round trip on each connection.
    Redis { depth: usize, callers: usize },
}

/// What the load phases share.
struct Bench<'a> {
    runtime: &'a tokio::runtime::Runtime,
    /// Our connections.
    clients: &'a [grpc::Client],
    /// Most connections our callers share.
    connections: usize,
    data: &'a Arc<Data>,
    /// Our server's process.
    server_pid: u32,
    /// Redis, when it runs.
    redis: Option<&'a redis::Server>,
    timing: Timing,
    rounds: usize,
}

impl Bench<'_> {
    /// Runs `phases` in rotating rounds; one row per phase, in their order.
    fn rounds(&self, phases: &[Phase]) -> Result<Vec<Row>, String> {
        let runs = rounds::run(phases, self.rounds, |round, &phase| {
            let o = self.run(phase)?;
            let row = self.row(phase, Vec::new());
            eprintln!(
                "round {}/{}: {} {} x{} at {} callers: {:.0} calls/s, p99 {:.1?}, server CPU {:.1?}/call",
                round + 1,
                self.rounds,
                row.system,
                row.operation,
                row.per_call,
                row.callers,
                o.ops_per_sec(),
                o.latency(0.99),
                o.server_cpu_per_op()
            );
            Ok(o)
        })?;
        Ok(phases
            .iter()
            .zip(runs)
            .map(|(&phase, runs)| self.row(phase, runs))
            .collect())
    }

    /// Connections `callers` of ours share.
    fn conns(&self, callers: usize) -> usize {
        callers.min(self.connections)
    }

    /// Caller `i`'s connection, of `callers`.
    fn client(&self, i: usize, callers: usize) -> grpc::Client {
        self.clients[i % self.conns(callers)].clone()
    }

    /// One run of `phase`.
    fn run(&self, phase: Phase) -> Result<Outcome, String> {
        let data = self.data;
        match phase {
            Phase::Ping { callers } => load::run(
                self.runtime,
                (0..callers)
                    .map(|i| grpc::Ping::new(self.client(i, callers)))
                    .collect(),
                self.timing,
                self.server_pid,
            ),
            Phase::Get { callers } => load::run(
                self.runtime,
                (0..callers)
                    .map(|i| grpc::Get::new(self.client(i, callers), data.clone(), i))
                    .collect(),
                self.timing,
                self.server_pid,
            ),
            Phase::BatchGet { batch, callers } => load::run(
                self.runtime,
                (0..callers)
                    .map(|i| grpc::BatchGet::new(self.client(i, callers), data.clone(), i, batch))
                    .collect(),
                self.timing,
                self.server_pid,
            ),
            Phase::Redis { depth, callers } => {
                let server = self.redis.ok_or("a Redis phase without Redis")?;
                let gets = self.runtime.block_on(async {
                    let mut gets = Vec::with_capacity(callers);
                    for i in 0..callers {
                        gets.push(resp::Gets::connect(server.port, data.clone(), i, depth).await?);
                    }
                    Ok::<_, String>(gets)
                })?;
                load::run(self.runtime, gets, self.timing, server.pid())
            }
        }
    }

    /// The table's row for `phase`, with its rounds' outcomes.
    fn row(&self, phase: Phase, runs: Vec<Outcome>) -> Row {
        let ours = |operation, per_call, callers| Row {
            system: "uuidmap",
            operation,
            per_call,
            callers,
            connections: self.conns(callers),
            runs: Vec::new(),
        };
        let row = match phase {
            Phase::Ping { callers } => ours("Ping", 0, callers),
            Phase::Get { callers } => ours("Get", 1, callers),
            Phase::BatchGet { batch, callers } => ours("BatchGet", batch, callers),
            // One connection per caller: RESP has no multiplexing.
            Phase::Redis { depth, callers } => Row {
                system: "Redis",
                operation: "GET",
                per_call: depth,
                callers,
                connections: callers,
                runs: Vec::new(),
            },
        };
        Row { runs, ..row }
    }
}

/// One scan: split i of `splits` on connection i, in parallel.
struct ScanPhase {
    /// `full` or `filtered (k values)`.
    what: String,
    /// The filter's values (n×16 bytes; empty: all).
    values: Bytes,
    /// Entries every run must return.
    expected: u64,
    splits: u32,
}

/// What one run of a scan measured.
struct ScanOnce {
    run: ScanRun,
    /// Messages received.
    messages: u64,
    /// Server CPU during the run.
    server_cpu: Duration,
}

/// Runs `phase` once, reading the entries the server examined from its
/// `/metrics` before and after (outside the timed span). Fails unless the
/// run returned `phase.expected` entries.
fn scan_once(
    runtime: &tokio::runtime::Runtime,
    clients: &[grpc::Client],
    server: &OurServer,
    phase: &ScanPhase,
) -> Result<ScanOnce, String> {
    let splits = phase.splits;
    let examined_before = server.scan_entries_examined(runtime)?;
    let cpu_before = cpu_time(server.pid())?;
    let started = Instant::now();
    let results = runtime.block_on(async {
        let tasks: Vec<_> = (0..splits)
            .map(|split| {
                let client = clients[split as usize % clients.len()].clone();
                tokio::spawn(grpc::scan(client, split, splits, phase.values.clone()))
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
    let wall = started.elapsed();
    let server_cpu = cpu_time(server.pid())?.saturating_sub(cpu_before);
    // Every split's producer counted its last segment before sending its
    // final message, which the client has received.
    let examined = server.scan_entries_examined(runtime)? - examined_before;
    let returned: u64 = results.iter().map(|r| r.entries).sum();
    if returned != phase.expected {
        return Err(format!(
            "scan {} ({splits} splits) returned {returned} entries, expected {}",
            phase.what, phase.expected
        ));
    }
    Ok(ScanOnce {
        run: ScanRun { wall, examined },
        messages: results.iter().map(|r| r.messages).sum(),
        server_cpu,
    })
}
