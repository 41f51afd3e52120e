//! What each layer of a unary call costs (issue 14, item 3), measured from
//! outside with h2load, a C load generator.
//!
//! The server's stack, from the outside in, is: metrics, transport-error
//! wording, the deadline stamp, admission, auth, then tonic's routing to
//! the service. This bench serves the data service with that stack built
//! up one layer at a time, from the bare service to the whole stack:
//!
//! | stack | layers |
//! | --- | --- |
//! | `bare` | none: tonic and the service |
//! | `+auth` | auth (no tokens configured: the check is one branch) |
//! | `+admission` | and admission (a read permit per call) |
//! | `+deadline` | and the deadline stamp |
//! | `+transport_errors` | and the wording of tonic's own errors |
//! | `+metrics` | and the per-call metrics, recorder installed: the server's whole stack |
//!
//! Each stack is its own process (this binary, re-run with
//! `UUIDMAP_LAYERS_SERVE=<stack>`), with the product's windows, TCP_NODELAY,
//! message limit, gzip and jemalloc, over a fresh data directory with fsync `never` and one
//! entry. The routes of health and reflection, which the product adds, are
//! not here: they are routes, not layers.
//!
//! For each round, stacks run in a rotated order (round r starts at stack
//! r), and each gets, one after the other: `Get` with 1 call in flight
//! (1 connection), `Get` with 64 in flight (4 connections x 16 streams)
//! and `Ping` with 64 in flight. It prints the median and range per row,
//! and each stack's cost per call against `bare`, from the 64-in-flight
//! medians: (1/rate - 1/rate_bare), in microseconds of the 2 shared cores.
//! Because h2load shares those cores, a rate mixes the server's cost with
//! the load generator's; the server's own CPU time per call (user + system,
//! from `/proc/<pid>/stat`, over the `Get`-at-64 row) is the steadier
//! figure, and the table gives it too.
//!
//! `cargo bench -p uuidmap-benches --bench layers` (needs `h2load`:
//! `tools/bench-layers.sh` installs it). Knobs: `UUIDMAP_BENCH_RUNS`
//! (rounds, default 3), `UUIDMAP_BENCH_REQUESTS` (calls per 64-in-flight
//! row, default 200000; a 1-in-flight row makes a tenth as many).

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message;
use tokio::net::TcpListener;
use tonic::codec::CompressionEncoding::Gzip;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use uuidmap::server::admission::{Admission, AdmissionLayer};
use uuidmap::server::auth::AuthLayer;
use uuidmap::server::config::{AdmissionLimits, Limits};
use uuidmap::server::deadline::DeadlineLayer;
use uuidmap::server::lookup::LookupMetrics;
use uuidmap::server::metrics::RpcMetricsLayer;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap::server::proto::v1::uuid_map_server::UuidMapServer;
use uuidmap::server::reflection::Catalog;
use uuidmap::server::service::DataService;
use uuidmap::server::transport_errors::{TransportErrorsLayer, decoder_limit};
use uuidmap::writer::{DurableConfig, DurableIndex, FsyncPolicy};

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The stacks, innermost layer first; each adds one layer to the previous.
const STACKS: [&str; 6] = [
    "bare",
    "+auth",
    "+admission",
    "+deadline",
    "+transport_errors",
    "+metrics",
];
/// The product's HTTP/2 windows (`server::run`).
const CONNECTION_WINDOW: u32 = 16 << 20;
const STREAM_WINDOW: u32 = 4 << 20;
/// The one key every Get asks for (present).
const KEY: u128 = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;

fn main() {
    if let Ok(stack) = std::env::var("UUIDMAP_LAYERS_SERVE") {
        serve(&stack);
        return;
    }
    // `cargo bench` passes `--bench`; this bench takes no arguments.
    if which("h2load").is_none() {
        eprintln!("layers: h2load not found; install nghttp2-client (tools/bench-layers.sh does)");
        std::process::exit(1);
    }
    let runs: usize = knob("UUIDMAP_BENCH_RUNS", 3);
    let requests: usize = knob("UUIDMAP_BENCH_REQUESTS", 200_000);
    let work = tempfile::Builder::new()
        .prefix("uuidmap-bench-layers")
        .tempdir()
        .expect("a temp dir");
    let get = work.path().join("get.bin");
    let ping = work.path().join("ping.bin");
    std::fs::write(
        &get,
        framed(&pb::GetRequest {
            key: uuid::Uuid::from_u128(KEY).as_bytes().to_vec().into(),
            min_lsn: 0,
            ..Default::default()
        }),
    )
    .unwrap();
    std::fs::write(&ping, framed(&pb::PingRequest {})).unwrap();
    eprintln!("layers: {runs} rounds, {requests} calls per 64-in-flight row");

    // rates[stack][row] = one rate per round.
    let rows = [
        "Get, 1 in flight",
        "Get, 64 in flight",
        "Ping, 64 in flight",
    ];
    let mut rates = vec![vec![Vec::new(); rows.len()]; STACKS.len()];
    // cpu[stack] = server CPU µs per Get at 64 in flight, one per round.
    let mut cpu = vec![Vec::new(); STACKS.len()];
    for round in 0..runs {
        for k in 0..STACKS.len() {
            let s = (round + k) % STACKS.len();
            let server = Served::start(STACKS[s], work.path());
            let one = h2load(server.addr, "Get", &get, requests / 10, 1, 1);
            let before = server.cpu_ticks();
            let many = h2load(server.addr, "Get", &get, requests, 4, 16);
            let per_call = (server.cpu_ticks() - before) as f64 * 1e6
                / ticks_per_second() as f64
                / requests as f64;
            cpu[s].push(per_call);
            let pings = h2load(server.addr, "Ping", &ping, requests, 4, 16);
            eprintln!(
                "layers: round {round} {:<18} Get@1 {one:>9.0}/s  Get@64 {many:>9.0}/s  \
                 Ping@64 {pings:>9.0}/s  server CPU {per_call:.2} µs/Get",
                STACKS[s]
            );
            for (row, rate) in [one, many, pings].into_iter().enumerate() {
                rates[s][row].push(rate);
            }
        }
    }

    println!();
    println!("## Unary call cost by layer, median (range) of {runs} rounds");
    println!();
    println!(
        "| stack | {} | {} | {} | vs `bare`, from the rates (Get, 64 in flight) | server CPU per Get (64 in flight) | vs `bare` |",
        rows[0], rows[1], rows[2]
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let bare = median(&rates[0][1]);
    let bare_cpu = median(&cpu[0]);
    for (s, stack) in STACKS.iter().enumerate() {
        let cells: Vec<String> = rates[s]
            .iter()
            .map(|r| {
                let (lo, hi) = range(r);
                format!("{:.0} ({lo:.0}–{hi:.0}) /s", median(r))
            })
            .collect();
        let cost = (1.0 / median(&rates[s][1]) - 1.0 / bare) * 1e6;
        let (lo, hi) = range(&cpu[s]);
        let own = median(&cpu[s]);
        println!(
            "| `{stack}` | {} | {} | {} | {cost:+.2} µs | {own:.2} ({lo:.2}–{hi:.2}) µs | {:+.2} µs |",
            cells[0],
            cells[1],
            cells[2],
            own - bare_cpu
        );
    }
}

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn which(program: &str) -> Option<()> {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()
        .map(|_| ())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) / 2]
}

fn range(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

/// A gRPC-framed message: flag 0, the length big-endian, the bytes.
fn framed(message: &impl Message) -> Vec<u8> {
    let body = message.encode_to_vec();
    let mut out = vec![0];
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Calls/s of `n` calls to `method` with `body`, over `conns` connections
/// with `streams` each in flight. Fails the bench if any call failed.
fn h2load(
    addr: SocketAddr,
    method: &str,
    body: &Path,
    n: usize,
    conns: usize,
    streams: usize,
) -> f64 {
    let out = Command::new("h2load")
        .args(["-n", &n.to_string(), "-c", &conns.to_string()])
        .args(["-m", &streams.to_string(), "-t", "1", "-d"])
        .arg(body)
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .arg(format!("http://{addr}/uuidmap.v1.UuidMap/{method}"))
        .output()
        .expect("h2load runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("h2load printed no `{prefix}` line:\n{text}"))
            .to_string()
    };
    let done = line("requests:");
    assert!(
        done.contains(&format!("{n} succeeded")),
        "not every call succeeded: {done}"
    );
    // "finished in 2.10s, 95238.10 req/s, ..."
    line("finished in")
        .split(", ")
        .nth(1)
        .and_then(|r| r.strip_suffix(" req/s"))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no rate in h2load's output:\n{text}"))
}

/// A stack served by a child process of this binary.
struct Served {
    child: Child,
    addr: SocketAddr,
}

impl Served {
    fn start(stack: &str, work: &Path) -> Served {
        let port = StdListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let dir = work.join(format!("data-{}", stack.trim_start_matches('+')));
        let _ = std::fs::remove_dir_all(&dir);
        let child = Command::new(std::env::current_exe().unwrap())
            .env("UUIDMAP_LAYERS_SERVE", stack)
            .env("UUIDMAP_LAYERS_ADDR", addr.to_string())
            .env("UUIDMAP_LAYERS_DIR", &dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("the server child starts");
        let served = Served { child, addr };
        served.put_the_key();
        served
    }

    /// Waits until the server answers, then puts the key the Gets ask for.
    fn put_the_key(&self) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = format!("http://{}", self.addr);
        rt.block_on(async {
            let start = Instant::now();
            let mut client = loop {
                match UuidMapClient::connect(url.clone()).await {
                    Ok(c) => break c,
                    Err(e) if start.elapsed() < Duration::from_secs(30) => {
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => panic!("the server at {url} did not start: {e}"),
                }
            };
            client
                .put(pb::PutRequest {
                    key: uuid::Uuid::from_u128(KEY).as_bytes().to_vec().into(),
                    value: uuid::Uuid::from_u128(7).as_bytes().to_vec().into(),
                })
                .await
                .expect("the put is answered");
        });
    }
}

impl Served {
    /// The server's CPU time so far (user + system), in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .expect("the server's /proc/<pid>/stat");
        // Fields after the command (which is in parentheses and may hold
        // spaces): state is field 3, utime 14 and stime 15.
        let rest = &stat[stat.rfind(')').expect("a command in parentheses") + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        let field = |n: usize| fields[n - 3].parse::<u64>().expect("a tick count");
        field(14) + field(15)
    }
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
fn ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(100)
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child: serves `stack` until killed.
fn serve(stack: &str) {
    let addr: SocketAddr = std::env::var("UUIDMAP_LAYERS_ADDR")
        .unwrap()
        .parse()
        .unwrap();
    let dir = std::env::var("UUIDMAP_LAYERS_DIR").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let mut config = DurableConfig::new(Path::new(&dir));
        config.pipeline.policy = FsyncPolicy::Never;
        let durable = Arc::new(DurableIndex::open(config).expect("the index opens"));
        let limits = Limits::default();
        let admission_limits = AdmissionLimits::default();
        let metrics_on = stack == "+metrics";
        if metrics_on {
            uuidmap::server::metrics::install();
        }
        let admission = Arc::new(Admission::new(&admission_limits, limits.max_wait));
        let (_stop, stopping) = tokio::sync::watch::channel(false);
        let data = UuidMapServer::new(DataService::new(
            durable,
            limits.clone(),
            Arc::clone(&admission),
            LookupMetrics::register(metrics_on),
            stopping,
        ))
        .max_decoding_message_size(decoder_limit(&limits))
        .accept_compressed(Gzip)
        .send_compressed(Gzip);
        let listener = TcpListener::bind(addr).await.expect("the port is free");
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let builder = || {
            Server::builder()
                .initial_connection_window_size(CONNECTION_WINDOW)
                .initial_stream_window_size(STREAM_WINDOW)
        };
        let auth = || AuthLayer::new(None);
        let admit = || AdmissionLayer::new(Arc::clone(&admission));
        let wording = || TransportErrorsLayer::new(limits.clone(), Arc::new(Catalog::of_server()));
        // Outermost first, as `server::run` adds them.
        let served = match stack {
            "bare" => {
                builder()
                    .add_service(data)
                    .serve_with_incoming(incoming)
                    .await
            }
            "+auth" => {
                builder()
                    .layer(auth())
                    .add_service(data)
                    .serve_with_incoming(incoming)
                    .await
            }
            "+admission" => {
                builder()
                    .layer(admit())
                    .layer(auth())
                    .add_service(data)
                    .serve_with_incoming(incoming)
                    .await
            }
            "+deadline" => {
                builder()
                    .layer(DeadlineLayer)
                    .layer(admit())
                    .layer(auth())
                    .add_service(data)
                    .serve_with_incoming(incoming)
                    .await
            }
            "+transport_errors" => {
                builder()
                    .layer(wording())
                    .layer(DeadlineLayer)
                    .layer(admit())
                    .layer(auth())
                    .add_service(data)
                    .serve_with_incoming(incoming)
                    .await
            }
            "+metrics" => {
                builder()
                    .layer(RpcMetricsLayer::new(true))
                    .layer(wording())
                    .layer(DeadlineLayer)
                    .layer(admit())
                    .layer(auth())
                    .add_service(data)
                    .serve_with_incoming(incoming)
                    .await
            }
            other => panic!("no stack {other:?}; the stacks are {STACKS:?}"),
        };
        served.expect("the server runs");
    });
}
