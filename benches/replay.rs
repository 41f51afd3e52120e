//! WAL replay and restart (issue 11). Prints markdown tables to stdout
//! (progress to stderr).
//!
//! The data: `UUIDMAP_BENCH_OPS` (default 5,000,000) random puts written
//! through the durable writer (fsync `never`, no snapshot at all) in
//! batches of 100,000, then the process drops the store without a final
//! snapshot: the WAL holds everything, as after the issue's `kill -9` before
//! any snapshot (with fsync `never` the files are in the page cache either
//! way). Everything goes to a temporary directory under the system temp
//! dir, removed at the end.
//!
//! - **replay rate**: the same WAL replayed in this process, read-only,
//!   `UUIDMAP_BENCH_ROUNDS` times (default 3) in turn for each method, median
//!   reported: *old* (the replay as it was before issue 11: serial, no
//!   presize, no prefetch: `wal::replay` into `IndexWriter::insert`),
//!   *serial* (`recover` with `ReplayWorkers::Serial`: presized, prefetched,
//!   on the calling thread) and *parallel* (`recover`, one worker per core).
//!   Ops/s counts the puts applied over the replay's wall time (reading and
//!   checking the WAL included; mapping nothing: there is no snapshot).
//! - **restart**: exec of `uuidmap serve` on a fresh copy of the directory
//!   until the first `Get` of the last key written answers right, polled
//!   every millisecond; then the server is killed (`SIGKILL`). The new
//!   binary is this build's; `UUIDMAP_OLD_BIN` names an older one to run
//!   alternately (say, main's before issue 11). For the new binary, the
//!   recovery phases are read from `Stats`.
//! - **worst case at the default triggers**: `UUIDMAP_BENCH_SNAPSHOT_ENTRIES`
//!   (default 10M) random puts, a snapshot, then as many more puts as the
//!   default 500 ms budget lets the WAL hold before it asks for a snapshot
//!   (three quarters of 500 ms at the parallel replay rate measured above,
//!   which is what a server that measured it uses), left in the WAL; then
//!   restarts as above (the snapshot's checksums verified, as by default).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use uuidmap::index::Index;
use uuidmap::server::proto::v1 as pb;
use uuidmap::store::recovery::{RecoveryOptions, recover};
use uuidmap::store::replay_apply::ReplayWorkers;
use uuidmap::store::wal::{self, ReplayOptions};
use uuidmap::store::{Op, OsIo};
use uuidmap::writer::ReplayBudget;

#[path = "common/binary.rs"]
mod binary;
#[path = "common/redis.rs"]
mod redis;
#[path = "common/restart.rs"]
mod restart;

use restart::{BATCH, copy_dir, each, key, median, open_unsynced, restart_on, value, write_range};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// Writes `ops` random puts and leaves the WAL without a snapshot.
fn make_wal(dir: &Path, ops: u64) {
    let durable = open_unsynced(dir);
    write_range(&durable, 0..ops, |j| (key(j), value(j)));
    drop(durable);
}

/// The worst case the triggers allow: `entries` random puts, a snapshot,
/// then `wal_puts` more (new keys) left in the WAL after it.
fn make_worst_case(dir: &Path, entries: u64, wal_puts: u64) {
    let durable = open_unsynced(dir);
    write_range(&durable, 0..entries, |j| (key(j), value(j)));
    durable.snapshot_now_blocking().expect("the snapshot");
    write_range(&durable, entries..entries + wal_puts, |j| {
        (key(j), value(j))
    });
    drop(durable);
}

/// The replay as it was before issue 11. Returns (ops applied, time).
fn replay_old(dir: &Path) -> (u64, Duration) {
    let started = Instant::now();
    let (mut writer, index) = Index::builder().build().unwrap();
    let options = ReplayOptions {
        read_only: true,
        ..ReplayOptions::default()
    };
    let mut ops_applied = 0u64;
    wal::replay(&OsIo, dir, 0, &options, |lsn, ops: &[Op]| {
        writer.set_stamp(lsn);
        for op in ops {
            match *op {
                // The old path, as it was: each op checked its key again.
                Op::Put { key, value } => {
                    let _ = writer.insert(key.uuid(), value);
                }
                Op::Delete { key } => {
                    writer.remove(key.as_uuid());
                }
            }
            ops_applied += 1;
        }
    })
    .expect("replaying");
    let took = started.elapsed();
    assert!(index.len() as u64 <= ops_applied);
    (ops_applied, took)
}

/// Only reading and checking the WAL (`wal::replay` applying nothing): the
/// floor under every replay, done by one thread. Returns (ops, time).
fn read_only(dir: &Path) -> (u64, Duration) {
    let started = Instant::now();
    let options = ReplayOptions {
        read_only: true,
        ..ReplayOptions::default()
    };
    let mut n = 0u64;
    wal::replay(&OsIo, dir, 0, &options, |_, ops: &[Op]| {
        n += ops.len() as u64;
    })
    .expect("reading");
    (n, started.elapsed())
}

/// `recover` with `workers`. Returns (ops applied, replay time, report line).
fn replay_new(dir: &Path, workers: ReplayWorkers) -> (u64, Duration, String) {
    let options = RecoveryOptions {
        read_only: true,
        replay_workers: workers,
        ..RecoveryOptions::default()
    };
    let r = recover(&OsIo, dir, &options).expect("recovering");
    let p = &r.report.phases;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let workers = p
        .workers
        .iter()
        .map(|w| format!("{:.0}/{:.0}", ms(w.apply), ms(w.wall)))
        .collect::<Vec<_>>()
        .join(" ");
    let line = format!(
        "estimate {:.1} ms, presize {:.0} ms ({} entries), replay {:.0} ms, workers apply/wall ms: {}",
        ms(p.estimate),
        ms(p.presize),
        p.presized_for,
        ms(p.replay),
        workers
    );
    (r.report.ops_replayed, p.replay, line)
}

/// One restart of `bin` on a fresh copy of `data`: exec until the first
/// `Get` of key `probe` answers right (`restart::restart_on`).
fn restart(
    rt: &tokio::runtime::Runtime,
    bin: &Path,
    data: &Path,
    scratch: &Path,
    probe: u64,
) -> (Duration, Option<pb::RestartStats>) {
    let dir = scratch.join("restart");
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(data, &dir);
    let r = restart_on(rt, bin, &dir, key(probe), value(probe));
    (r.took, r.stats)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let smoke = !std::env::args().any(|a| a == "--bench");
    let ops = env_u64("UUIDMAP_BENCH_OPS", if smoke { 200_000 } else { 5_000_000 });
    let rounds = env_u64("UUIDMAP_BENCH_ROUNDS", if smoke { 1 } else { 3 }) as usize;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let scratch = tempfile::tempdir().expect("a temp dir");
    let data = scratch.path().join("data");
    eprintln!("writing {ops} random puts in batches of {BATCH} ...");
    let t = Instant::now();
    make_wal(&data, ops);
    let wal_bytes: u64 = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    eprintln!(
        "  {:.1} s, {:.0} MB in {}",
        t.elapsed().as_secs_f64(),
        wal_bytes as f64 / 1e6,
        data.display()
    );

    println!(
        "### WAL replay, {ops} random puts ({:.0} MB of WAL), no snapshot, {cores} cores\n",
        wal_bytes as f64 / 1e6
    );
    let mut rates: [Vec<f64>; 4] = Default::default();
    let mut times: [Vec<f64>; 4] = Default::default();
    let mut notes: [String; 3] = Default::default();
    for round in 0..rounds {
        let (n, took) = read_only(&data);
        rates[3].push(n as f64 / took.as_secs_f64());
        times[3].push(took.as_secs_f64() * 1e3);
        let (n, took) = replay_old(&data);
        eprintln!("round {round}: old {:.0} ms", took.as_secs_f64() * 1e3);
        rates[0].push(n as f64 / took.as_secs_f64());
        times[0].push(took.as_secs_f64() * 1e3);
        for (i, workers) in [(1, ReplayWorkers::Serial), (2, ReplayWorkers::PerCore)] {
            let (n, took, line) = replay_new(&data, workers);
            eprintln!("round {round}: {workers:?}: {line}");
            assert_eq!(n, ops);
            rates[i].push(n as f64 / took.as_secs_f64());
            times[i].push(took.as_secs_f64() * 1e3);
            notes[i] = line;
        }
    }
    println!("| replay | ms (median of {rounds}) | Mops/s | vs old |");
    println!("| --- | --- | --- | --- |");
    let old_rate = median(rates[0].clone());
    for (i, name) in [
        "old (serial, grows, no prefetch)",
        "serial (presized, prefetched)",
        "parallel (one worker per core)",
        "reading and checking the WAL only (one thread)",
    ]
    .iter()
    .enumerate()
    {
        let rate = median(rates[i].clone());
        println!(
            "| {name} | {:.0} | {:.2} | {:.2}× |",
            median(times[i].clone()),
            rate / 1e6,
            rate / old_rate
        );
    }
    println!();
    println!("serial, last round: {}  ", notes[1]);
    println!("parallel, last round: {}\n", notes[2]);

    let new_bin = binary::uuidmap_binary();
    let old_bin = std::env::var_os("UUIDMAP_OLD_BIN").map(PathBuf::from);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut new_times = Vec::new();
    let mut old_times = Vec::new();
    let mut last_stats = None;
    for round in 0..rounds {
        if let Some(old) = &old_bin {
            let (t, _) = restart(&rt, old, &data, scratch.path(), ops - 1);
            eprintln!("round {round}: old binary: {:.0} ms", t.as_secs_f64() * 1e3);
            old_times.push(t.as_secs_f64() * 1e3);
        }
        let (t, stats) = restart(&rt, &new_bin, &data, scratch.path(), ops - 1);
        eprintln!("round {round}: new binary: {:.0} ms", t.as_secs_f64() * 1e3);
        new_times.push(t.as_secs_f64() * 1e3);
        last_stats = stats;
    }
    println!("### Restart: exec of `uuidmap serve` to the first served Get\n");
    println!("| binary | ms (median of {rounds}) | each |");
    println!("| --- | --- | --- |");
    if !old_times.is_empty() {
        println!(
            "| old (`UUIDMAP_OLD_BIN`) | {:.0} | {} |",
            median(old_times.clone()),
            each(&old_times)
        );
    }
    println!(
        "| new (this build) | {:.0} | {} |",
        median(new_times.clone()),
        each(&new_times)
    );
    if let Some(s) = last_stats.take() {
        let ms = |us: u64| us as f64 / 1e3;
        println!(
            "\nnew, last round, from `Stats`: estimate {:.1} ms, presize {:.0} ms, replay {:.0} ms \
             ({} ops, {} workers: apply ms {}); restart budget {} ms at {:.0} MB/s, snapshot \
             trigger {:.1} MB",
            ms(s.estimate_us),
            ms(s.presize_us),
            ms(s.replay_us),
            s.ops_replayed,
            s.workers.len(),
            s.workers
                .iter()
                .map(|w| format!("{:.0}", ms(w.apply_us)))
                .collect::<Vec<_>>()
                .join("/"),
            s.max_replay_ms,
            s.replay_bytes_per_sec as f64 / 1e6,
            s.snapshot_trigger_bytes as f64 / 1e6
        );
    }

    if let Some(bin) = redis::find_server().filter(|_| !smoke) {
        redis_aof_restarts(&bin, ops, rounds, median(new_times.clone()));
    }

    // The worst case the default triggers allow: a snapshot of
    // `UUIDMAP_BENCH_SNAPSHOT_ENTRIES` (default 10M), then as much WAL as
    // the 500 ms budget lets accumulate at the replay rate a server
    // measures (the parallel rate above): three quarters of 500 ms of it.
    let entries = env_u64(
        "UUIDMAP_BENCH_SNAPSHOT_ENTRIES",
        if smoke { 300_000 } else { 10_000_000 },
    );
    let parallel_bytes_per_sec = median(rates[2].clone()) * wal_bytes as f64 / ops as f64;
    let trigger = ReplayBudget::new(
        uuidmap::writer::DEFAULT_MAX_REPLAY,
        Some(parallel_bytes_per_sec),
        None,
    )
    .trigger_bytes()
    .min(256 << 20);
    let bytes_per_put = wal_bytes as f64 / ops as f64;
    let wal_puts = (trigger as f64 / bytes_per_put) as u64;
    let worst = scratch.path().join("worst");
    eprintln!("worst case: {entries} entries, a snapshot, then {wal_puts} puts ...");
    make_worst_case(&worst, entries, wal_puts);
    let mut new_times = Vec::new();
    let mut old_times = Vec::new();
    let probe = entries + wal_puts - 1;
    for round in 0..rounds {
        if let Some(old) = &old_bin {
            let (t, _) = restart(&rt, old, &worst, scratch.path(), probe);
            eprintln!("round {round}: old binary: {:.0} ms", t.as_secs_f64() * 1e3);
            old_times.push(t.as_secs_f64() * 1e3);
        }
        let (t, stats) = restart(&rt, &new_bin, &worst, scratch.path(), probe);
        eprintln!("round {round}: new binary: {:.0} ms", t.as_secs_f64() * 1e3);
        new_times.push(t.as_secs_f64() * 1e3);
        last_stats = stats;
    }
    println!(
        "\n### Worst case at the default triggers: {entries} entries in the snapshot, then \
         {wal_puts} puts ({:.0} MB, the 500 ms budget's trigger at {:.0} MB/s) in the WAL\n",
        trigger as f64 / 1e6,
        parallel_bytes_per_sec / 1e6
    );
    println!("| binary | ms (median of {rounds}) | each |");
    println!("| --- | --- | --- |");
    if !old_times.is_empty() {
        println!(
            "| old (`UUIDMAP_OLD_BIN`) | {:.0} | {} |",
            median(old_times.clone()),
            each(&old_times)
        );
    }
    println!(
        "| new (this build) | {:.0} | {} |",
        median(new_times.clone()),
        each(&new_times)
    );
    if let Some(s) = last_stats {
        let ms = |us: u64| us as f64 / 1e3;
        println!(
            "\nnew, last round, from `Stats`: map {:.1} ms, verify {:.0} ms, restore {:.1} ms, \
             presize {:.0} ms ({} entries), replay {:.0} ms ({} ops)",
            ms(s.map_us),
            ms(s.verify_us),
            ms(s.restore_us),
            ms(s.presize_us),
            s.presized_for,
            ms(s.replay_us),
            s.ops_replayed
        );
    }
}

/// Redis with `appendonly yes` (`appendfsync everysec`, no RDB), the same
/// `ops` puts as pipelined `SET`s of the same 16-byte keys and values, then
/// `SIGKILL` and a restart from the AOF until a `GET` of the last key
/// answers right; `rounds` times (median).
fn redis_aof_restarts(bin: &Path, ops: u64, rounds: usize, ours_ms: f64) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let args = [
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
    ];
    let (mut server, _) = redis::Server::start(bin, dir.path(), &args).expect("starting redis");
    let mut conn = server.connect().expect("connecting to redis");
    eprintln!("redis: {ops} SETs ...");
    conn.pipelined_sets(ops as usize, |i| {
        (*key(i as u64).as_bytes(), *value(i as u64).as_bytes())
    })
    .expect("loading redis");
    drop(conn);
    // `appendfsync everysec`: let a second pass, so that the AOF holds every
    // acknowledged SET before the kill (a kill right after the load once
    // lost them all).
    std::thread::sleep(Duration::from_secs(2));
    let probe = ops - 1;
    let mut times = Vec::new();
    for round in 0..rounds {
        // SAFETY: kill has no memory effects in this process; the pid is
        // our child's, which has not been reaped yet.
        unsafe {
            libc::kill(server.pid() as i32, libc::SIGKILL);
        }
        let started = Instant::now();
        let (_, mut conn) = server.restart().expect("restarting redis");
        let got = conn.command(&[b"GET", key(probe).as_bytes()]).expect("GET");
        let took = started.elapsed();
        match got {
            redis::Reply::Bulk(Some(v)) if v == value(probe).as_bytes() => {}
            other => {
                let log = std::fs::read_to_string(dir.path().join("redis.log")).unwrap_or_default();
                panic!("redis answered {other:?}; its log: {log}")
            }
        }
        eprintln!(
            "round {round}: redis from its AOF: {:.0} ms",
            took.as_secs_f64() * 1e3
        );
        times.push(took.as_secs_f64() * 1e3);
    }
    let each = times
        .iter()
        .map(|t| format!("{t:.0}"))
        .collect::<Vec<_>>()
        .join(", ");
    let redis_ms = median(times);
    println!(
        "\n### Redis ({}) from its AOF, the same {ops} SETs, kill -9, exec to the first GET\n",
        redis::version(bin)
    );
    println!("| server | ms (median of {rounds}) | each |");
    println!("| --- | --- | --- |");
    println!("| redis, `appendonly yes` | {redis_ms:.0} | {each} |");
    println!(
        "| uuidmap, WAL only (above) | {ours_ms:.0} | {:.1}× faster |",
        redis_ms / ours_ms
    );
}
