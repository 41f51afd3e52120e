//! `uuidmap bench`: a load generator built on the client SDK, as
//! redis-benchmark is for Redis. It runs `--tasks` tasks, each calling
//! `--op` in a loop for `--secs` seconds, checks every answer, and prints
//! calls/s, keys/s and latency percentiles; the last line is one JSON
//! object for scripts.
//!
//! The keys are a fixed sequence (key i and its value are derived from i,
//! so any run can check what an earlier `--load` wrote); each call asks
//! for keys spread over the first `--entries` of them. A read's answer
//! that is present must be key i's value (a wrong one is a wrong answer);
//! an absent one is a miss (counted: load first with `--load`). A Put
//! writes key i's value, so whichever task wrote a key last, the key must
//! hold it: its answer's LSN must be above the task's previous Put's, and
//! after the run up to [`READ_BACK`] of the keys the run put, spread over
//! them, are read back (linearizable) and must hold their values; a
//! missing or other value is a wrong answer.
//!
//! Only answered calls make the rates and the percentiles; failed ones
//! are counted apart (`errors`, with the read-back's failed calls), and
//! so are the client's retries. The exit code (`EXIT_*` below) says
//! whether the figures can be trusted; a run that is not clean says why
//! in one line on stderr.
//!
//! The client runs on one thread (the CLI's runtime), so on a shared
//! machine it takes about one core, as a C load generator would.
//!
//! With `--etcd`, the calls go through a `PartitionedClient` (README
//! "Partitions"): each key routed to its group by the map in etcd, the
//! groups' clients built from the connection flags (`--server` is
//! ignored). Only get, batch-get and put route; a Put's LSN is its
//! group's, so the order check is per task only without `--etcd`.

use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_client::{Client, ClientError, PartitionedClient, ReadConsistency};

use crate::cli_common::{CliError, ConnectArgs, ConsistencyArgs, EXIT_OK};

/// Exit code: calls failed (`errors`), and no answer was wrong.
pub const EXIT_CALLS_FAILED: i32 = 1;
/// Exit code: a wrong answer (or the bench could not run: bad arguments,
/// no server, a failed `--load`).
pub const EXIT_WRONG: i32 = crate::cli_common::EXIT_ERROR;

/// How many of the keys a Put run wrote are read back after it.
pub const READ_BACK: usize = 1000;
/// Keys per read-back call (within any server's batch limit).
const READ_BACK_BATCH: usize = 100;

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
    /// `Client::put`: one key, its value; the keys written are read back
    /// after the run.
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
    /// Route every key through the partition map in this etcd (client
    /// URLs, separated by commas) instead of calling --server.
    #[arg(long)]
    pub etcd: Option<String>,
    /// With --etcd: the partitioned cluster's name.
    #[arg(long, default_value = "uuidmap")]
    pub etcd_cluster: String,
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

/// A tally: one task's, the read-back's, or the run's.
#[derive(Default)]
struct Tally {
    /// Answered calls (failed ones are `errors`).
    calls: u64,
    keys: u64,
    errors: u64,
    wrong: u64,
    misses: u64,
    /// Of answered calls.
    latencies_us: Vec<u32>,
    first_error: Option<String>,
    first_wrong: Option<String>,
    /// The keys (their `i`) a Put task's acknowledged writes were for.
    written: Vec<u64>,
    /// Keys read back and checked after a Put run.
    read_back: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.calls += other.calls;
        self.keys += other.keys;
        self.errors += other.errors;
        self.wrong += other.wrong;
        self.misses += other.misses;
        self.read_back += other.read_back;
        self.latencies_us.extend(other.latencies_us);
        self.written.extend(other.written);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        if self.first_wrong.is_none() {
            self.first_wrong = other.first_wrong;
        }
    }

    fn error(&mut self, e: impl ToString) {
        self.errors += 1;
        self.first_error.get_or_insert_with(|| e.to_string());
    }

    fn wrong(&mut self, what: impl FnOnce() -> String) {
        self.wrong += 1;
        if self.first_wrong.is_none() {
            self.first_wrong = Some(what());
        }
    }

    /// Checks key `i`'s answer `got`; an absent one is a miss when
    /// `absent_is_wrong` is false.
    fn check(&mut self, i: u64, got: Option<Uuid>, absent_is_wrong: bool) {
        match got {
            Some(v) if v == value(i) => {}
            None if !absent_is_wrong => self.misses += 1,
            got => self.wrong(|| {
                let got = got.map_or_else(|| "no entry".to_string(), |v| v.to_string());
                format!("key {} holds {got}, not {}", key(i), value(i))
            }),
        }
    }

    /// The exit code, and the line on stderr that says why it is not 0.
    fn verdict(&self) -> (i32, Option<String>) {
        let first = |e: &Option<String>| e.as_deref().unwrap_or("?").to_string();
        if self.wrong > 0 {
            let why = format!(
                "{} wrong answers (first: {}); the figures measure a broken server",
                self.wrong,
                first(&self.first_wrong)
            );
            (EXIT_WRONG, Some(why))
        } else if self.errors > 0 {
            let why = format!(
                "{} calls failed, left out of the rates (first: {})",
                self.errors,
                first(&self.first_error)
            );
            (EXIT_CALLS_FAILED, Some(why))
        } else if self.calls == 0 {
            let why = "no call was answered".to_string();
            (EXIT_CALLS_FAILED, Some(why))
        } else {
            (EXIT_OK, None)
        }
    }
}

/// What the bench calls: one server (or group), or a partitioned cluster.
#[derive(Clone)]
enum Target {
    Direct(Client),
    Routed(PartitionedClient),
}

impl Target {
    async fn get(&self, k: Uuid) -> Result<Option<Uuid>, ClientError> {
        match self {
            Target::Direct(c) => c.get(k).await,
            Target::Routed(c) => c.get(k).await,
        }
    }

    async fn get_many(&self, k: &[Uuid]) -> Result<Vec<Option<Uuid>>, ClientError> {
        match self {
            Target::Direct(c) => c.get_many(k).await,
            Target::Routed(c) => c.get_many(k).await,
        }
    }

    async fn put(&self, k: Uuid, v: Uuid) -> Result<u64, ClientError> {
        match self {
            Target::Direct(c) => c.put(k, v).await,
            Target::Routed(c) => c.put(k, v).await,
        }
    }

    /// The client's retries so far (a routed client's are its groups').
    fn retries(&self) -> u64 {
        match self {
            Target::Direct(c) => c.counters().retries,
            Target::Routed(_) => 0,
        }
    }
}

/// Runs the bench; the exit code.
pub async fn run(args: BenchArgs) -> Result<i32, CliError> {
    let builder = args
        .connect
        .options()
        .builder()
        .batching(args.lanes as usize, 4096)
        .consistency(args.consistency.level());
    let client = match &args.etcd {
        None => Target::Direct(builder.connect().await?),
        Some(etcd) => {
            if matches!(args.op, BenchOp::GetUnary | BenchOp::Lookup) {
                return Err(CliError::Refused(
                    "--etcd routes --op get, batch-get and put only".into(),
                ));
            }
            let endpoints: Vec<String> = etcd.split(',').map(|s| s.trim().to_owned()).collect();
            Target::Routed(
                PartitionedClient::connect(&endpoints, &args.etcd_cluster, builder).await?,
            )
        }
    };
    if let Some(n) = args.load {
        load(&client, n, args.json).await?;
    }
    let keys_per_call = match args.op {
        BenchOp::BatchGet | BenchOp::Lookup => args.keys,
        _ => 1,
    };
    let retries_before = client.retries();
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
        total.add(task.await.expect("a bench task panicked"));
    }
    let elapsed = start.elapsed().as_secs_f64();
    if args.op == BenchOp::Put {
        let written = std::mem::take(&mut total.written);
        total.add(read_back(&client, written).await);
    }
    let retries = client.retries() - retries_before;
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
        println!("calls/s      {calls_per_s:.0} (answered calls only)");
        println!("keys/s       {keys_per_s:.0}");
        println!(
            "latency      p50 {} us, p99 {} us, p99.9 {} us",
            pct(0.5),
            pct(0.99),
            pct(0.999)
        );
        println!("errors       {} failed calls", total.errors);
        println!("wrong        {} answers", total.wrong);
        println!("misses       {} keys with no entry", total.misses);
        println!("retries      {retries}");
        if args.op == BenchOp::Put {
            println!("read back    {} keys put, each checked", total.read_back);
        }
        if let Some(e) = &total.first_error {
            println!("first error  {e}");
        }
    }
    println!(
        "{{\"op\":\"{op}\",\"tasks\":{},\"keys_per_call\":{keys_per_call},\"secs\":{elapsed:.3},\
         \"calls\":{},\"calls_per_s\":{calls_per_s:.1},\"keys_per_s\":{keys_per_s:.1},\
         \"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"errors\":{},\"wrong\":{},\"misses\":{},\
         \"retries\":{retries},\"read_back\":{}}}",
        args.tasks,
        total.calls,
        pct(0.5),
        pct(0.99),
        pct(0.999),
        total.errors,
        total.wrong,
        total.misses,
        total.read_back
    );
    let (code, why) = total.verdict();
    if let Some(why) = why {
        eprintln!("uuidmap bench: {why}");
    }
    Ok(code)
}

/// Puts entries 0..n from 64 tasks.
async fn load(client: &Target, n: u64, quiet: bool) -> Result<(), CliError> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..64u64)
        .map(|t| {
            let client = match client {
                Target::Direct(c) => Target::Direct(c.idempotent()),
                routed => routed.clone(),
            };
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

/// Up to `n` of `keys`, spread evenly over them once sorted, without
/// repeats.
fn sample(mut keys: Vec<u64>, n: usize) -> Vec<u64> {
    keys.sort_unstable();
    keys.dedup();
    if keys.len() <= n {
        return keys;
    }
    (0..n).map(|j| keys[j * keys.len() / n]).collect()
}

/// Reads back a sample of the keys a Put run `written`, each of which
/// must hold its value; the tally of that check (its calls are not the
/// run's: only its errors, wrong answers and `read_back` count).
async fn read_back(client: &Target, written: Vec<u64>) -> Tally {
    let mut tally = Tally::default();
    let client = match client {
        Target::Direct(c) => Target::Direct(c.with_consistency(ReadConsistency::Linearizable)),
        routed => routed.clone(),
    };
    for chunk in sample(written, READ_BACK).chunks(READ_BACK_BATCH) {
        let keys: Vec<Uuid> = chunk.iter().map(|&i| key(i)).collect();
        match client.get_many(&keys).await {
            Ok(values) => {
                for (&i, v) in chunk.iter().zip(values) {
                    tally.check(i, v, true);
                }
                tally.read_back += chunk.len() as u64;
            }
            Err(e) => tally.error(format_args!("reading back the keys put: {e}")),
        }
    }
    tally
}

/// What a call answered.
enum Answer {
    /// A read's values, in the order of its keys.
    Values(Vec<Option<Uuid>>),
    /// A Put's LSN.
    Lsn(u64),
}

async fn caller(client: Target, args: BenchArgs, task: u64, keys: u64, end: Instant) -> Tally {
    let mut tally = Tally::default();
    // Each task walks the key space from its own place, with a stride
    // prime to common sizes.
    let mut next = mix(task) % args.entries;
    let mut draw = || {
        next = (next + 7919) % args.entries;
        next
    };
    // The LSN of this task's last acknowledged Put.
    let mut last_lsn = 0;
    use Answer::{Lsn, Values};
    while Instant::now() < end {
        let ids: Vec<u64> = (0..keys).map(|_| draw()).collect();
        let started = Instant::now();
        let answer = match args.op {
            BenchOp::Get => client.get(key(ids[0])).await.map(|v| Values(vec![v])),
            BenchOp::GetUnary => match &client {
                Target::Direct(c) => c.get_unary(key(ids[0])).await.map(|v| Values(vec![v])),
                Target::Routed(_) => unreachable!("refused in `run`"),
            },
            BenchOp::BatchGet => {
                let k: Vec<Uuid> = ids.iter().map(|&i| key(i)).collect();
                client.get_many(&k).await.map(Values)
            }
            BenchOp::Lookup => {
                let k: Vec<Uuid> = ids.iter().map(|&i| key(i)).collect();
                match &client {
                    Target::Direct(c) => c.lookup(&k).await.map(Values),
                    Target::Routed(_) => unreachable!("refused in `run`"),
                }
            }
            BenchOp::Put => client.put(key(ids[0]), value(ids[0])).await.map(Lsn),
        };
        let us = started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                tally.error(e);
                continue;
            }
        };
        tally.calls += 1;
        tally.latencies_us.push(us);
        tally.keys += ids.len() as u64;
        match answer {
            Values(values) if values.len() != ids.len() => tally.wrong(|| {
                format!("{} values for {} keys", values.len(), ids.len())
            }),
            Values(values) => {
                for (&i, v) in ids.iter().zip(values) {
                    tally.check(i, v, false);
                }
            }
            // A Put: its LSN, above the task's previous one (a later
            // write of one caller); its key is read back after the run.
            Lsn(lsn) if lsn <= last_lsn && matches!(client, Target::Direct(_)) => tally.wrong(|| {
                format!(
                    "the Put of key {} answered LSN {lsn}, not above this task's previous {last_lsn}",
                    key(ids[0])
                )
            }),
            Lsn(lsn) => {
                last_lsn = lsn;
                tally.written.push(ids[0]);
            }
        }
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_spread_over_the_keys_without_repeats() {
        assert_eq!(sample(vec![3, 1, 3, 2], 10), vec![1, 2, 3]);
        let s = sample((0..10_000).rev().collect(), 1000);
        assert_eq!(s.len(), 1000);
        assert_eq!((s[0], s[1], s[999]), (0, 10, 9990));
    }

    #[test]
    fn wrong_answers_exit_2_failed_calls_1_and_each_says_why() {
        let mut t = Tally {
            calls: 5,
            ..Tally::default()
        };
        assert_eq!(t.verdict(), (EXIT_OK, None));
        t.check(7, Some(value(7)), true);
        t.check(8, None, false);
        assert_eq!((t.wrong, t.misses), (0, 1));
        assert_eq!(t.verdict(), (EXIT_OK, None));
        t.error("UNAVAILABLE");
        let (code, why) = t.verdict();
        assert_eq!(code, 1);
        assert!(why.unwrap().contains("1 calls failed"));
        t.check(9, None, true);
        let (code, why) = t.verdict();
        assert_eq!(code, 2);
        let why = why.unwrap();
        assert!(why.contains("1 wrong") && why.contains("no entry"), "{why}");
        assert_eq!(Tally::default().verdict().0, EXIT_CALLS_FAILED);
    }
}
