//! Durability figures (issue 3), side by side with Redis in the same run.
//! Prints markdown tables to stdout (progress to stderr).
//!
//! Per size (default 1M and 10M entries; `UUIDMAP_BENCH_SIZES`):
//!
//! - **snapshot write**: `write_snapshot` of a presized index holding the
//!   entries, three times into a fresh file (median), with GB/s; next to it,
//!   the raw disk: the same number of bytes written and `fdatasync`ed;
//! - **restart**: `recover` on the directory holding that snapshot (warm page
//!   cache: it was just written) until the first `get` returns the right
//!   value, with and without checksum verification (median of three); then
//!   the first 1M random `get`s after the restart (page faults of the mapped
//!   file) and the same 1M again;
//! - **Redis RDB**: the same pairs (16-byte binary keys and values) loaded
//!   into a private `redis-server` by pipelined `SET`s, `SAVE` timed, then
//!   the server restarted on its dump and timed until a `GET` answers right;
//! - **read latency during snapshots**: a `DurableIndex` recovered from the
//!   snapshot; one reader times each `get` (as in `benches/latency.rs`) while
//!   idle and while `snapshot_now` runs, back to back.
//!
//! Once per run: **durable writes/s** with fsync policy `always` at 1, 16 and
//! 64 writers (`UUIDMAP_BENCH_WRITERS`), each an OS thread submitting
//! single-`Put` batches with `write_blocking` for `UUIDMAP_BENCH_SECS`
//! seconds (default 4); Redis `SET` with `appendfsync always` from as many
//! connections (a client thread each, one command in flight, the same kind of
//! binary keys); the raw `fdatasync` rate of 64-byte appends; and our writers
//! again under fsync `never`, the pipeline's own ceiling on this machine.
//!
//! Redis runs only if `redis-server` is on `PATH` (`tools/bench-durability.sh`
//! installs it), and only under `cargo bench` (not when `cargo test` runs
//! this file as a smoke test). Every file goes to a temporary directory under
//! the system temp dir, removed at the end.

use std::fs::File;
use std::hint::black_box;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap::store::OsIo;
use uuidmap::store::recovery::{RecoveryOptions, recover};
use uuidmap::store::snapshot::write_snapshot;
use uuidmap::writer::{DurableConfig, DurableIndex, FsyncPolicy, Key, PipelineConfig, WriteOp};

#[path = "../common/mod.rs"]
mod common;
use common::histogram::{Latencies, PhaseRow};
#[path = "../common/redis.rs"]
mod redis;

use common::{label, random_keys, shuffled, value_for};

/// Entry counts run when `UUIDMAP_BENCH_SIZES` is unset. 100M can be
/// asked for, but with Redis (about 130 B/entry) it does not fit in 24 GiB.
const DEFAULT_SIZES: &[usize] = &[1_000_000, 10_000_000];

/// Concurrent writers when `UUIDMAP_BENCH_WRITERS` is unset.
const DEFAULT_WRITERS: &[usize] = &[1, 16, 64];

/// Seconds each writer count runs when `UUIDMAP_BENCH_SECS` is unset.
const DEFAULT_WRITE_SECS: f64 = 4.0;

/// Repetitions of the snapshot write and of each restart.
const REPS: usize = 3;

/// Repetitions of the Redis restart (each loads the whole dump).
const REDIS_REPS: usize = 2;

/// Random lookups timed after a restart.
const FIRST_GETS: usize = 1_000_000;

/// Lookups timed idle; during snapshots the reader samples for as long as
/// snapshots run (at least `MIN_SNAPSHOT_PHASE`).
const SAMPLES: usize = 5_000_000;
const TEST_SAMPLES: usize = 50_000;
const MIN_SNAPSHOT_PHASE: Duration = Duration::from_secs(3);
const MAX_SNAPSHOT_SAMPLES: usize = 40_000_000;
const STOP_CHECK_EVERY: usize = 256;

fn main() {
    let bench = common::bench_mode();
    let sizes = common::bench_sizes("durability", DEFAULT_SIZES);
    let writers = env_list("UUIDMAP_BENCH_WRITERS", DEFAULT_WRITERS);
    let secs = std::env::var("UUIDMAP_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(if bench { DEFAULT_WRITE_SECS } else { 0.2 });
    let window = Duration::from_secs_f64(secs);
    let redis_bin = if bench { redis::find_server() } else { None };
    match &redis_bin {
        Some(b) => eprintln!("durability: using {} ({})", b.display(), redis::version(b)),
        None if bench => {
            println!(
                "\nredis-server not found: run tools/bench-durability.sh for the Redis figures\n"
            )
        }
        None => eprintln!("durability: test mode, Redis skipped"),
    }
    let tmp = tempfile::TempDir::new().expect("creating a temporary directory");
    eprintln!("durability: files under {}", tmp.path().display());

    let mut report = Report::default();
    for &n in &sizes {
        report
            .sizes
            .push(per_size(n, tmp.path(), bench, redis_bin.as_deref()));
    }
    // The raw fsync rate right before the writers, as the disk is shared.
    report.fsync = fsync_probe(tmp.path(), if bench { 2.0 } else { 0.1 });
    for &w in &writers {
        report
            .writes
            .push(durable_writes(tmp.path(), w, window, FsyncPolicy::Always));
    }
    // The same without fsync: what the pipeline itself (queue, wake-ups,
    // apply) allows on this machine.
    for &w in &writers {
        report
            .writes_never
            .push(durable_writes(tmp.path(), w, window, FsyncPolicy::Never));
    }
    if let Some(bin) = &redis_bin {
        match redis_sets(bin, tmp.path(), &writers, window) {
            Ok(rows) => report.redis_sets = rows,
            Err(e) => eprintln!("durability: Redis SET phase failed: {e}"),
        }
    }
    report.print();
}

fn env_list(var: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(var) {
        Ok(s) if !s.trim().is_empty() => s
            .split(',')
            .map(|p| {
                p.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{var}: bad number {p:?}"))
            })
            .collect(),
        _ => default.to_vec(),
    }
}

// ---------------------------------------------------------------- results

#[derive(Default)]
struct Report {
    fsync: FsyncProbe,
    sizes: Vec<SizeResult>,
    writes: Vec<WriteRun>,
    writes_never: Vec<WriteRun>,
    redis_sets: Vec<WriteRun>,
}

struct SizeResult {
    n: usize,
    /// Snapshot file bytes and the times of each write.
    snapshot_bytes: u64,
    snapshot_times: Vec<Duration>,
    /// The same bytes written and fdatasynced raw.
    raw_write: Duration,
    verify: Vec<RestartRun>,
    no_verify: Vec<RestartRun>,
    redis: Option<RedisRdb>,
    latency: Vec<PhaseRow>,
    /// Durations of the snapshots taken during the latency phase.
    snapshot_now: Vec<Duration>,
}

#[derive(Clone, Copy)]
struct RestartRun {
    /// From calling `recover` to the first correct `get`.
    first_get: Duration,
    /// The recovery report's open (map + verify + build) time.
    open: Duration,
    /// The first `FIRST_GETS` random gets, then the same keys again.
    first_gets: Duration,
    again_gets: Duration,
    first_faults: u64,
}

struct RedisRdb {
    load: Duration,
    used_memory: u64,
    save: Duration,
    rdb_bytes: u64,
    /// Spawn to the first correct `GET`, and the load time Redis logged.
    restarts: Vec<(Duration, Option<f64>)>,
}

struct WriteRun {
    writers: usize,
    ops: u64,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
    /// Batches per WAL sync (ours only).
    per_group: Option<f64>,
}

impl WriteRun {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

#[derive(Default)]
struct FsyncProbe {
    count: u64,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

// ------------------------------------------------------------- per size

fn per_size(n: usize, tmp: &Path, bench: bool, redis_bin: Option<&Path>) -> SizeResult {
    let started = Instant::now();
    let keys = random_keys(n, common::KEY_SEED);
    let order = shuffled(&keys, common::ORDER_SEED);
    let (mut writer, index) = uuidmap::Index::with_capacity(n);
    // Everything is "batch 0", before any log: the snapshot's LSN is 0, and
    // recovery needs no WAL (it refuses a snapshot whose LSN the log does
    // not reach).
    writer.set_stamp(0);
    for (i, k) in keys.iter().enumerate() {
        writer.insert(*k, value_for(i)).expect("valid keys");
    }
    eprintln!(
        "durability {}: built in {:.2?} ({} segments, {:.0} MiB of tables)",
        label(n),
        started.elapsed(),
        index.segment_count(),
        index.table_bytes() as f64 / (1 << 20) as f64
    );

    // Snapshot writes: each into a directory of its own, the previous one
    // removed first so the page cache holds one file.
    let mut snapshot_times = Vec::new();
    let mut snapshot_bytes = 0;
    let mut dir = PathBuf::new();
    for rep in 0..REPS {
        if rep > 0 {
            std::fs::remove_dir_all(&dir).expect("removing a snapshot directory");
        }
        dir = tmp.join(format!("snap-{}-{rep}", label(n)));
        std::fs::create_dir_all(&dir).expect("creating a snapshot directory");
        let info =
            write_snapshot(&OsIo, &dir, &index, &|| 0, &|_| Ok(())).expect("writing a snapshot");
        eprintln!(
            "durability {}: snapshot {} bytes in {:.3?}",
            label(n),
            info.bytes,
            info.duration
        );
        snapshot_bytes = info.bytes;
        snapshot_times.push(info.duration);
    }
    drop((writer, index));
    let raw_write = raw_write_sync(tmp, snapshot_bytes);
    eprintln!(
        "durability {}: raw write + fdatasync of {snapshot_bytes} bytes: {raw_write:.3?}",
        label(n)
    );

    // Restarts, alternating verification so both see the same cache.
    let mut verify = Vec::new();
    let mut no_verify = Vec::new();
    for _ in 0..REPS {
        verify.push(restart(&dir, &keys, &order, true));
        no_verify.push(restart(&dir, &keys, &order, false));
    }

    let redis = redis_bin.and_then(|bin| match redis_rdb(bin, tmp, &keys) {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!("durability {}: Redis RDB phase failed: {e}", label(n));
            None
        }
    });

    let per_phase = if bench { SAMPLES } else { TEST_SAMPLES };
    let min_phase = if bench {
        MIN_SNAPSHOT_PHASE
    } else {
        Duration::ZERO
    };
    let (latency, snapshot_now) = latency_during_snapshots(&dir, n, &order, per_phase, min_phase);
    std::fs::remove_dir_all(&dir).expect("removing the snapshot directory");
    SizeResult {
        n,
        snapshot_bytes,
        snapshot_times,
        raw_write,
        verify,
        no_verify,
        redis,
        latency,
        snapshot_now,
    }
}

/// One restart: `recover` until the first correct `get`, then random gets.
fn restart(dir: &Path, keys: &[Uuid], order: &[Uuid], verify: bool) -> RestartRun {
    let options = RecoveryOptions {
        verify_checksums: verify,
        ..RecoveryOptions::default()
    };
    let probe = keys.len() / 2;
    let started = Instant::now();
    let recovered = recover(&OsIo, dir, &options).expect("recovering from the snapshot");
    let got = recovered.index.get(&keys[probe]);
    let first_get = started.elapsed();
    assert_eq!(got, Some(value_for(probe)), "wrong value after restart");
    assert!(
        recovered.report.snapshot.is_some(),
        "the snapshot was not used"
    );
    let index = &recovered.index;
    let m = FIRST_GETS.min(order.len());
    let faults = minor_faults();
    let t = Instant::now();
    for k in &order[..m] {
        black_box(index.get(black_box(k)));
    }
    let first_gets = t.elapsed();
    let first_faults = minor_faults() - faults;
    let t = Instant::now();
    for k in &order[..m] {
        black_box(index.get(black_box(k)));
    }
    let again_gets = t.elapsed();
    assert_eq!(index.len(), keys.len(), "entries lost in the restart");
    eprintln!(
        "durability {}: restart (verify {verify}) first get {first_get:.3?}, open {:.3?}, \
         first {m} gets {first_gets:.3?} ({first_faults} faults), again {again_gets:.3?}",
        label(keys.len()),
        recovered.report.open_time
    );
    RestartRun {
        first_get,
        open: recovered.report.open_time,
        first_gets,
        again_gets,
        first_faults,
    }
}

fn minor_faults() -> u64 {
    // SAFETY: `getrusage` only writes the `rusage` struct it is given, which
    // is a plain C struct for which all-zero bytes are a valid value.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage.ru_minflt as u64
    }
}

/// Writes `bytes` zero bytes in 1 MiB writes and `fdatasync`s: what the disk
/// gives a snapshot-sized file.
fn raw_write_sync(tmp: &Path, bytes: u64) -> Duration {
    let path = tmp.join("raw-write");
    let buf = vec![0u8; 1 << 20];
    let started = Instant::now();
    let mut f = File::create(&path).expect("creating the raw write file");
    let mut left = bytes;
    while left > 0 {
        let chunk = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..chunk]).expect("raw write");
        left -= chunk as u64;
    }
    f.sync_data().expect("raw fdatasync");
    let elapsed = started.elapsed();
    drop(f);
    std::fs::remove_file(&path).expect("removing the raw write file");
    elapsed
}

/// Appends 64 bytes and `fdatasync`s, over and over, for `secs` seconds: the
/// rate one writer that syncs every write could reach at best.
fn fsync_probe(tmp: &Path, secs: f64) -> FsyncProbe {
    let path = tmp.join("fsync-probe");
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .mode(0o644)
        .open(&path)
        .expect("creating the fsync probe file");
    let record = [0x5au8; 64];
    let mut latencies = Latencies::new();
    let started = Instant::now();
    while started.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        f.write_all(&record).expect("probe write");
        f.sync_data().expect("probe fdatasync");
        latencies.record_duration(t.elapsed());
    }
    let elapsed = started.elapsed();
    drop(f);
    std::fs::remove_file(&path).expect("removing the fsync probe file");
    let probe = FsyncProbe {
        count: latencies.len(),
        elapsed,
        p50: latencies.quantile_duration(0.50),
        p99: latencies.quantile_duration(0.99),
    };
    eprintln!(
        "durability: 64-byte append + fdatasync: {} in {elapsed:.2?}, p50 {:.3?}, p99 {:.3?}",
        probe.count, probe.p50, probe.p99
    );
    probe
}

// ----------------------------------------------------- read latency phase

/// Idle vs during back-to-back `snapshot_now` on a `DurableIndex` recovered
/// from the snapshot in `dir`.
fn latency_during_snapshots(
    dir: &Path,
    n: usize,
    order: &[Uuid],
    per_phase: usize,
    min_phase: Duration,
) -> (Vec<PhaseRow>, Vec<Duration>) {
    let mut config = DurableConfig::new(dir);
    config.snapshot_every = None;
    config.snapshot_on_shutdown = false;
    config.pipeline.snapshot_every_bytes = 0;
    let durable = DurableIndex::open(config).expect("opening the durable index");
    // The directory has no WAL behind the snapshot, so the open asks for a
    // snapshot at once; it finds the existing one. Wait for it to be done.
    let deadline = Instant::now() + Duration::from_secs(60);
    while durable.stats().snapshots_taken + durable.stats().snapshots_failed == 0
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    let index = durable.index();
    for k in order {
        black_box(index.get(k));
    }
    let mut samples = Vec::with_capacity(MAX_SNAPSHOT_SAMPLES.max(per_phase));
    let mut rows = Vec::new();
    sample(|k| index.get(k), order, per_phase, None, &mut samples);
    rows.push(PhaseRow::of("idle", &samples));

    let done = AtomicBool::new(false);
    let barrier = Barrier::new(2);
    let extra = random_keys(64, common::OTHER_KEY_SEED);
    let durations = std::thread::scope(|s| {
        let snapshots = s.spawn(|| {
            barrier.wait();
            let started = Instant::now();
            let mut durations = Vec::new();
            while durations.is_empty() || started.elapsed() < min_phase {
                // A write first, so the state differs from the newest
                // snapshot (an unchanged state is not written again).
                let key = extra[durations.len() % extra.len()];
                let value = value_for(n + durations.len());
                durable
                    .writes()
                    .write_blocking(vec![WriteOp::Put {
                        key: Key::new(key).expect("bench keys are never reserved"),
                        value,
                    }])
                    .expect("a durable write");
                let info = durable.snapshot_now_blocking().expect("a snapshot");
                durations.push(info.duration);
            }
            done.store(true, Ordering::Relaxed);
            durations
        });
        barrier.wait();
        sample(
            |k| index.get(k),
            order,
            MAX_SNAPSHOT_SAMPLES,
            Some(&done),
            &mut samples,
        );
        snapshots.join().expect("snapshot thread panicked")
    });
    rows.push(PhaseRow::of(
        &format!("`snapshot_now` running ({} snapshots)", durations.len()),
        &samples,
    ));
    eprintln!(
        "durability {}: snapshots during the latency phase took {durations:.3?}",
        label(n)
    );
    durable.shutdown();
    (rows, durations)
}

/// Times `get` on keys from `order` (cycling), one at a time, into `samples`
/// (cleared first): `max` samples, or fewer once `stop` is set.
fn sample(
    get: impl Fn(&Uuid) -> Option<Uuid>,
    order: &[Uuid],
    max: usize,
    stop: Option<&AtomicBool>,
    samples: &mut Vec<u32>,
) {
    samples.clear();
    let mut keys = order.iter().cycle();
    while samples.len() < max {
        if samples.len().is_multiple_of(STOP_CHECK_EVERY)
            && stop.is_some_and(|s| s.load(Ordering::Relaxed))
        {
            break;
        }
        let key = keys.next().expect("order is not empty");
        let start = Instant::now();
        black_box(get(black_box(key)));
        samples.push(u32::try_from(start.elapsed().as_nanos()).unwrap_or(u32::MAX));
    }
}

// --------------------------------------------------------- durable writes

/// A key no run has used: `(writer, i)` spread by splitmix into a v4 UUID.
fn write_key(writer: usize, i: u64) -> Uuid {
    let lo = splitmix64(((writer as u64) << 40) ^ i ^ 0x5eed);
    let hi = splitmix64(lo);
    let bytes = ((hi as u128) << 64 | lo as u128).to_le_bytes();
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// The tests' and benches' one generator (testkit's splitmix64).
use uuidmap_testkit::data::mix as splitmix64;

/// Runs `writers` threads, each calling `op(writer, i)` in a loop for
/// `window`; returns the operations finished inside the window and the
/// per-operation latencies' p50 and p99.
fn timed_writers<S: Send>(
    writers: usize,
    window: Duration,
    setup: impl Fn(usize) -> S + Sync,
    op: impl Fn(&mut S, usize, u64) + Sync,
) -> (u64, Duration, Duration, Duration) {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let barrier = Barrier::new(writers + 1);
    let latencies: Vec<Latencies> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (stop, total, barrier, setup, op) = (&stop, &total, &barrier, &setup, &op);
                s.spawn(move || {
                    let mut state = setup(w);
                    let mut lat = Latencies::new();
                    barrier.wait();
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        op(&mut state, w, i);
                        if !stop.load(Ordering::Relaxed) {
                            lat.record_duration(t.elapsed());
                            i += 1;
                        }
                    }
                    total.fetch_add(i, Ordering::Relaxed);
                    lat
                })
            })
            .collect();
        barrier.wait();
        std::thread::sleep(window);
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("writer thread panicked"))
            .collect()
    });
    let mut all = Latencies::new();
    for l in &latencies {
        all.add(l);
    }
    (
        total.into_inner(),
        window,
        all.quantile_duration(0.5),
        all.quantile_duration(0.99),
    )
}

/// uuidmap: `writers` threads, single-`Put` batches, fsync `always`.
fn durable_writes(tmp: &Path, writers: usize, window: Duration, policy: FsyncPolicy) -> WriteRun {
    let dir = tempfile::TempDir::new_in(tmp).expect("a data directory");
    let mut config = DurableConfig::new(dir.path());
    config.snapshot_every = None;
    config.snapshot_on_shutdown = false;
    config.pipeline = PipelineConfig {
        policy,
        snapshot_every_bytes: 0,
        ..PipelineConfig::default()
    };
    config.recovery.capacity_hint = 1 << 20;
    let durable = DurableIndex::open(config).expect("opening a durable index");
    let stats = || {
        let s = durable.writes().stats();
        (
            s.groups.load(Ordering::Relaxed),
            s.batches.load(Ordering::Relaxed),
        )
    };
    let (groups0, batches0) = stats();
    let (ops, elapsed, p50, p99) = timed_writers(
        writers,
        window,
        |_| durable.writes().clone(),
        |h, w, i| {
            let key = write_key(w, i);
            h.write_blocking(vec![WriteOp::Put {
                key: Key::new(key).expect("bench keys are never reserved"),
                value: key,
            }])
            .expect("a durable write");
        },
    );
    let (groups1, batches1) = stats();
    let per_group = (batches1 - batches0) as f64 / (groups1 - groups0).max(1) as f64;
    let run = WriteRun {
        writers,
        ops,
        elapsed,
        p50,
        p99,
        per_group: Some(per_group),
    };
    eprintln!(
        "durability: {writers} writers, fsync {policy}: {:.0} writes/s, {per_group:.1} batches per group, \
         p50 {p50:.3?}, p99 {p99:.3?}",
        run.rate()
    );
    durable.shutdown();
    run
}

// ------------------------------------------------------------------ Redis

/// Loads the pairs, `SAVE`s, and restarts on the dump.
fn redis_rdb(bin: &Path, tmp: &Path, keys: &[Uuid]) -> std::io::Result<RedisRdb> {
    let n = keys.len();
    let dir = tempfile::TempDir::new_in(tmp)?;
    let args = [
        "--save",
        "",
        "--appendonly",
        "no",
        "--dbfilename",
        "dump.rdb",
    ];
    let (mut server, _) = redis::Server::start(bin, dir.path(), &args)?;
    let mut conn = server.connect()?;
    let load = conn.pipelined_sets(n, |i| (*keys[i].as_bytes(), *value_for(i).as_bytes()))?;
    match conn.command(&[b"DBSIZE"])? {
        redis::Reply::Int(c) if c as usize == n => {}
        other => return Err(std::io::Error::other(format!("DBSIZE answered {other:?}"))),
    }
    let used_memory = conn
        .info_field("memory", "used_memory")?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    eprintln!(
        "durability {}: Redis loaded in {load:.2?}, used_memory {used_memory}",
        label(n)
    );
    let started = Instant::now();
    match conn.command(&[b"SAVE"])? {
        redis::Reply::Simple(s) if s == "OK" => {}
        other => return Err(std::io::Error::other(format!("SAVE answered {other:?}"))),
    }
    let save = started.elapsed();
    let rdb_bytes = std::fs::metadata(dir.path().join("dump.rdb"))?.len();
    eprintln!(
        "durability {}: Redis SAVE {rdb_bytes} bytes in {save:.2?}",
        label(n)
    );
    drop(conn);
    let probe = n / 2;
    let mut restarts = Vec::new();
    for _ in 0..REDIS_REPS {
        let started = Instant::now();
        let (_, mut conn) = server.restart()?;
        let got = conn.command(&[b"GET", keys[probe].as_bytes()])?;
        let first_get = started.elapsed();
        match got {
            redis::Reply::Bulk(Some(v)) if v == value_for(probe).as_bytes() => {}
            other => return Err(std::io::Error::other(format!("GET answered {other:?}"))),
        }
        let logged = server.logged_load_seconds();
        eprintln!(
            "durability {}: Redis restart to first GET {first_get:.3?} (log says {logged:?} s)",
            label(n)
        );
        restarts.push((first_get, logged));
    }
    server.shutdown()?;
    Ok(RedisRdb {
        load,
        used_memory,
        save,
        rdb_bytes,
        restarts,
    })
}

/// Redis `SET` with `appendfsync always`, one connection per writer.
fn redis_sets(
    bin: &Path,
    tmp: &Path,
    writers: &[usize],
    window: Duration,
) -> std::io::Result<Vec<WriteRun>> {
    let mut rows = Vec::new();
    for &w in writers {
        let dir = tempfile::TempDir::new_in(tmp)?;
        let args = [
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ];
        let (mut server, _) = redis::Server::start(bin, dir.path(), &args)?;
        let port = server.port;
        let (ops, elapsed, p50, p99) = timed_writers(
            w,
            window,
            |_| redis::Server::connect_port(port).expect("a Redis connection"),
            |c, w, i| {
                let key = write_key(w, i);
                match c.command(&[b"SET", key.as_bytes(), key.as_bytes()]) {
                    Ok(redis::Reply::Simple(s)) if s == "OK" => {}
                    other => panic!("SET answered {other:?}"),
                }
            },
        );
        server.shutdown()?;
        let run = WriteRun {
            writers: w,
            ops,
            elapsed,
            p50,
            p99,
            per_group: None,
        };
        eprintln!(
            "durability: Redis {w} connections: {:.0} SET/s, p50 {p50:.3?}, p99 {p99:.3?}",
            run.rate()
        );
        rows.push(run);
    }
    Ok(rows)
}

// --------------------------------------------------------------- printing

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn secs(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.3} s", d.as_secs_f64())
    }
}

fn gbps(bytes: u64, d: Duration) -> String {
    format!("{:.2} GB/s", bytes as f64 / d.as_secs_f64() / 1e9)
}

/// Every run's time, or the fastest and slowest when there are many.
fn all(v: &[Duration]) -> String {
    if v.len() > 5 {
        let (lo, hi) = (v.iter().min(), v.iter().max());
        return format!(
            "{} runs, {} to {}",
            v.len(),
            secs(*lo.expect("not empty")),
            secs(*hi.expect("not empty"))
        );
    }
    v.iter().map(|d| secs(*d)).collect::<Vec<_>>().join(", ")
}

impl Report {
    fn print(&self) {
        for s in &self.sizes {
            s.print();
        }
        self.print_writes();
        self.print_targets();
    }

    fn print_writes(&self) {
        println!("\n## Durable writes/s, fsync `always`, single-op batches\n");
        println!(
            "| writers | uuidmap writes/s | batches per fsync | p50 ack | p99 ack | Redis SET/s (appendfsync always) | p50 | p99 | uuidmap / Redis | uuidmap, fsync `never` |"
        );
        println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for w in &self.writes {
            let r = self.redis_sets.iter().find(|r| r.writers == w.writers);
            let never = self.writes_never.iter().find(|r| r.writers == w.writers);
            println!(
                "| {} | {:.0} | {:.1} | {} | {} | {} | {} | {} | {} | {} |",
                w.writers,
                w.rate(),
                w.per_group.unwrap_or(0.0),
                secs(w.p50),
                secs(w.p99),
                r.map_or("–".into(), |r| format!("{:.0}", r.rate())),
                r.map_or("–".into(), |r| secs(r.p50)),
                r.map_or("–".into(), |r| secs(r.p99)),
                r.map_or("–".into(), |r| format!("{:.2}×", w.rate() / r.rate())),
                never.map_or("–".into(), |r| format!("{:.0}", r.rate())),
            );
        }
        let f = &self.fsync;
        println!(
            "\nRaw disk, one 64-byte append + `fdatasync` at a time: {:.0}/s (p50 {}, p99 {}).",
            f.count as f64 / f.elapsed.as_secs_f64(),
            secs(f.p50),
            secs(f.p99)
        );
    }

    fn print_targets(&self) {
        let Some(big) = self.sizes.iter().max_by_key(|s| s.n) else {
            return;
        };
        println!("\n## Targets at {} entries\n", label(big.n));
        println!("| target | measured | verdict |");
        println!("| --- | --- | --- |");
        let restart = median(big.verify.iter().map(|r| r.first_get).collect());
        let verdict = |ok: bool, by: f64| {
            if ok {
                "met".to_string()
            } else {
                format!("missed ({by:.2}× the target)")
            }
        };
        println!(
            "| restart with verification ≤ 0.3 s | {} | {} |",
            secs(restart),
            verdict(restart.as_secs_f64() <= 0.3, restart.as_secs_f64() / 0.3)
        );
        if let Some(r) = &big.redis {
            let redis = median(r.restarts.iter().map(|x| x.0).collect());
            let ratio = redis.as_secs_f64() / restart.as_secs_f64();
            println!(
                "| restart ≥ 25× faster than Redis RDB load | {ratio:.1}× ({} vs {}) | {} |",
                secs(restart),
                secs(redis),
                verdict(ratio >= 25.0, ratio / 25.0)
            );
        }
        let snap = median(big.snapshot_times.clone());
        println!(
            "| snapshot ≤ 1 s | {} | {} |",
            secs(snap),
            verdict(snap.as_secs_f64() <= 1.0, snap.as_secs_f64())
        );
        let one = self.writes.iter().find(|w| w.writers == 1);
        let many = self.writes.iter().find(|w| w.writers == 64);
        if let (Some(one), Some(many)) = (one, many) {
            let ratio = many.rate() / one.rate();
            println!(
                "| 64 writers ≥ 20× one writer | {ratio:.1}× ({:.0} vs {:.0}/s) | {} |",
                many.rate(),
                one.rate(),
                verdict(ratio >= 20.0, ratio / 20.0)
            );
            if let Some(r) = self.redis_sets.iter().find(|r| r.writers == 64) {
                let ratio = many.rate() / r.rate();
                println!(
                    "| 64 writers ≥ Redis appendfsync always at 64 | {ratio:.2}× ({:.0} vs {:.0}/s) | {} |",
                    many.rate(),
                    r.rate(),
                    verdict(ratio >= 1.0, ratio)
                );
            }
        }
        if let [idle, during, ..] = &big.latency[..] {
            let ratio = during.p999 as f64 / idle.p999 as f64;
            println!(
                "| p99.9 read during a snapshot ≤ 2× idle | {ratio:.2}× ({} vs {} ns) | {} |",
                during.p999,
                idle.p999,
                verdict(ratio <= 2.0, ratio / 2.0)
            );
        }
    }
}

impl SizeResult {
    fn print(&self) {
        let n = label(self.n);
        println!("\n## Snapshot write, {n} entries\n");
        println!("| what | bytes | median | all runs | rate |");
        println!("| --- | ---: | ---: | --- | ---: |");
        let snap = median(self.snapshot_times.clone());
        println!(
            "| uuidmap `write_snapshot` | {} | {} | {} | {} |",
            self.snapshot_bytes,
            secs(snap),
            all(&self.snapshot_times),
            gbps(self.snapshot_bytes, snap)
        );
        println!(
            "| raw write + `fdatasync`, same bytes | {} | {} | | {} |",
            self.snapshot_bytes,
            secs(self.raw_write),
            gbps(self.snapshot_bytes, self.raw_write)
        );
        if let Some(r) = &self.redis {
            println!(
                "| Redis `SAVE` (RDB) | {} | {} | | {} |",
                r.rdb_bytes,
                secs(r.save),
                gbps(r.rdb_bytes, r.save)
            );
        }
        if !self.snapshot_now.is_empty() {
            println!(
                "| `snapshot_now` under reads (latency phase) | | {} | {} | {} |",
                secs(median(self.snapshot_now.clone())),
                all(&self.snapshot_now),
                gbps(self.snapshot_bytes, median(self.snapshot_now.clone()))
            );
        }

        println!("\n## Restart to the first served lookup, {n} entries (warm page cache)\n");
        println!(
            "| what | median | all runs | open (map, verify, build) | first 1M random gets | minor faults | same 1M again |"
        );
        println!("| --- | ---: | --- | ---: | ---: | ---: | ---: |");
        for (name, runs) in [
            ("uuidmap, verified", &self.verify),
            ("uuidmap, not verified", &self.no_verify),
        ] {
            let firsts: Vec<Duration> = runs.iter().map(|r| r.first_get).collect();
            let mid = runs
                .iter()
                .find(|r| r.first_get == median(firsts.clone()))
                .expect("median is one of the runs");
            println!(
                "| {name} | {} | {} | {} | {} | {} | {} |",
                secs(mid.first_get),
                all(&firsts),
                secs(mid.open),
                secs(mid.first_gets),
                mid.first_faults,
                secs(mid.again_gets)
            );
        }
        if let Some(r) = &self.redis {
            let firsts: Vec<Duration> = r.restarts.iter().map(|x| x.0).collect();
            let logged: Vec<String> = r
                .restarts
                .iter()
                .map(|x| x.1.map_or("?".into(), |s| format!("{s:.3} s")))
                .collect();
            println!(
                "| Redis, RDB load (spawn to first `GET`) | {} | {} | logged load: {} | | | |",
                secs(median(firsts.clone())),
                all(&firsts),
                logged.join(", ")
            );
            println!(
                "\nRedis held the pairs in {:.1} B/entry (`used_memory`); loading them by pipelined `SET` took {}.",
                r.used_memory as f64 / self.n as f64,
                secs(r.load)
            );
        }

        println!("\n## `get` latency while snapshots run, {n} entries, one reader\n");
        println!("| phase | samples | p50 ns | p99 ns | p99.9 ns | max ns |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: |");
        for r in &self.latency {
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                r.phase, r.samples, r.p50, r.p99, r.p999, r.max
            );
        }
    }
}
