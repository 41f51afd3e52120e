//! `uuidmap bench`: a load generator built on the client SDK, as
//! redis-benchmark is for Redis. It runs `--tasks` tasks, each calling
//! `--op` in a loop for `--secs` seconds, checks every answer, and prints
//! calls/s, keys/s and latency percentiles; the last line is one JSON
//! object for scripts.
//!
//! The keys are a fixed sequence (key i and its value are derived from i,
//! so any run can check what an earlier `--load` wrote); each call asks
//! for keys spread over the first `--entries` of them. An answer that is
//! present must be key i's value (a wrong one fails the run, exit code 2);
//! an absent one is a miss (counted: load first with `--load`).
//!
//! The client runs on one thread (the CLI's runtime), so on a shared
//! machine it takes about one core, as a C load generator would.

use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_client::Client;

use crate::cli_common::{CliError, ConnectArgs, ConsistencyArgs};

/// What `uuidmap bench` calls.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchOp {
    /// `Client::get`: one key, auto-batched into Lookup requests.
    Get,
    /// `Client::get_unary`: one unary Get per key.
    GetUnary,
    /// `Client::get_many`: one unary BatchGet of --keys keys.
    BatchGet,
    /// `Client::lookup`: --keys keys per request on the Lookup streams.
    Lookup,
    /// `Client::put`: one key, its value.
    Put,
}

/// `uuidmap bench`.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// The call to make.
    #[arg(long, value_enum, default_value = "get")]
    pub op: BenchOp,
    /// Concurrent callers.
    #[arg(long, default_value = "64", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub tasks: u64,
    /// Keys per call (batch-get and lookup; the others use 1).
    #[arg(long, default_value = "100", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub keys: u64,
    /// Seconds to run.
    #[arg(long, default_value = "5", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub secs: u64,
    /// How many entries the keys are drawn from.
    #[arg(long, default_value = "100000", value_parser = clap::value_parser!(u64).range(1..))]
    pub entries: u64,
    /// Put the first N entries of the sequence before the run.
    #[arg(long, value_name = "N")]
    pub load: Option<u64>,
    /// The client's batching lanes (`ClientBuilder::batching`): Lookup
    /// requests in flight at once.
    #[arg(long, default_value = "4", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub lanes: u64,
    /// Print only the JSON line.
    #[arg(long)]
    pub json: bool,
    /// How up to date the reads (get, batch-get, lookup) must be.
    #[command(flatten)]
    pub consistency: ConsistencyArgs,
    /// How to reach the server.
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// Key `i` of the sequence (never nil nor max).
fn key(i: u64) -> Uuid {
    Uuid::from_u128(u128::from(mix(i)) << 64 | u128::from(i) | 1 << 63)
}

/// Key `i`'s value.
fn value(i: u64) -> Uuid {
    Uuid::from_u128(u128::from(mix(!i)) << 64 | u128::from(i))
}

/// splitmix64's finalizer: spreads consecutive `i` over the table.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One task's tally.
#[derive(Default)]
struct Tally {
    calls: u64,
    keys: u64,
    errors: u64,
    wrong: u64,
    misses: u64,
    latencies_us: Vec<u32>,
    first_error: Option<String>,
}

/// Runs the bench; the exit code.
pub async fn run(args: BenchArgs) -> Result<i32, CliError> {
    let client = args
        .connect
        .options()
        .builder()
        .batching(args.lanes as usize, 4096)
        .connect()
        .await?
        .with_consistency(args.consistency.level());
    if let Some(n) = args.load {
        load(&client, n, args.json).await?;
    }
    let keys_per_call = match args.op {
        BenchOp::BatchGet | BenchOp::Lookup => args.keys,
        _ => 1,
    };
    let start = Instant::now();
    let end = start + Duration::from_secs(args.secs);
    let tasks: Vec<_> = (0..args.tasks)
        .map(|t| {
            let client = client.clone();
            let args = args.clone();
            tokio::spawn(async move { caller(client, args, t, keys_per_call, end).await })
        })
        .collect();
    let mut total = Tally::default();
    for task in tasks {
        let t = task.await.expect("a bench task panicked");
        total.calls += t.calls;
        total.keys += t.keys;
        total.errors += t.errors;
        total.wrong += t.wrong;
        total.misses += t.misses;
        total.latencies_us.extend(t.latencies_us);
        if total.first_error.is_none() {
            total.first_error = t.first_error;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    total.latencies_us.sort_unstable();
    let pct = |p: f64| -> u32 {
        let l = &total.latencies_us;
        if l.is_empty() {
            return 0;
        }
        l[((l.len() - 1) as f64 * p).round() as usize]
    };
    let calls_per_s = total.calls as f64 / elapsed;
    let keys_per_s = total.keys as f64 / elapsed;
    let op = clap::ValueEnum::to_possible_value(&args.op)
        .map_or_else(String::new, |v| v.get_name().to_string());
    if !args.json {
        println!("op           {op}");
        println!("tasks        {} (lanes {})", args.tasks, args.lanes);
        println!("keys/call    {keys_per_call}");
        println!("seconds      {elapsed:.2}");
        println!("calls/s      {calls_per_s:.0}");
        println!("keys/s       {keys_per_s:.0}");
        println!(
            "latency      p50 {} us, p99 {} us, p99.9 {} us",
            pct(0.5),
            pct(0.99),
            pct(0.999)
        );
        println!(
            "errors       {} (wrong answers {}, misses {})",
            total.errors, total.wrong, total.misses
        );
        if let Some(e) = &total.first_error {
            println!("first error  {e}");
        }
    }
    println!(
        "{{\"op\":\"{op}\",\"tasks\":{},\"keys_per_call\":{keys_per_call},\"secs\":{elapsed:.3},\
         \"calls\":{},\"calls_per_s\":{calls_per_s:.1},\"keys_per_s\":{keys_per_s:.1},\
         \"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"errors\":{},\"wrong\":{},\"misses\":{}}}",
        args.tasks,
        total.calls,
        pct(0.5),
        pct(0.99),
        pct(0.999),
        total.errors,
        total.wrong,
        total.misses
    );
    Ok(if total.wrong > 0 {
        crate::cli_common::EXIT_ERROR
    } else {
        crate::cli_common::EXIT_OK
    })
}

/// Puts entries 0..n from 64 tasks.
async fn load(client: &Client, n: u64, quiet: bool) -> Result<(), CliError> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..64u64)
        .map(|t| {
            let client = client.idempotent();
            tokio::spawn(async move {
                let mut i = t;
                while i < n {
                    client.put(key(i), value(i)).await?;
                    i += 64;
                }
                Ok::<_, uuidmap_client::ClientError>(())
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a load task panicked")?;
    }
    if !quiet {
        println!(
            "loaded       {n} entries in {:.2} s",
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

async fn caller(client: Client, args: BenchArgs, task: u64, keys: u64, end: Instant) -> Tally {
    let mut tally = Tally::default();
    // Each task walks the key space from its own place, with a stride
    // prime to common sizes.
    let mut next = mix(task) % args.entries;
    let mut draw = || {
        next = (next + 7919) % args.entries;
        next
    };
    while Instant::now() < end {
        let ids: Vec<u64> = (0..keys).map(|_| draw()).collect();
        let started = Instant::now();
        let answer: Result<Vec<Option<Uuid>>, _> = match args.op {
            BenchOp::Get => client.get(key(ids[0])).await.map(|v| vec![v]),
            BenchOp::GetUnary => client.get_unary(key(ids[0])).await.map(|v| vec![v]),
            BenchOp::BatchGet => {
                let k: Vec<Uuid> = ids.iter().map(|&i| key(i)).collect();
                client.get_many(&k).await
            }
            BenchOp::Lookup => {
                let k: Vec<Uuid> = ids.iter().map(|&i| key(i)).collect();
                client.lookup(&k).await
            }
            BenchOp::Put => client
                .put(key(ids[0]), value(ids[0]))
                .await
                .map(|_| vec![Some(value(ids[0]))]),
        };
        let us = started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
        tally.calls += 1;
        tally.latencies_us.push(us);
        match answer {
            Ok(values) => {
                tally.keys += values.len() as u64;
                for (&i, v) in ids.iter().zip(values) {
                    match v {
                        Some(v) if v == value(i) => {}
                        Some(_) => tally.wrong += 1,
                        None => tally.misses += 1,
                    }
                }
            }
            Err(e) => {
                tally.errors += 1;
                tally.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    tally
}
