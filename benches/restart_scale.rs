//! Restart at scale (issue 38): a snapshot of `UUIDMAP_BENCH_ENTRIES`
//! random entries (default 100M), then a WAL tail of `UUIDMAP_BENCH_TAIL`
//! updates of existing keys (default 1M, random keys: a rebalancing job's
//! moves), left in the WAL as after a `kill -9`. Prints markdown tables to
//! stdout (progress to stderr).
//!
//! - **recovery in this process** (`recover`, read-only, warm page cache):
//!   each phase's time, the replay rate, and the page faults the recovery
//!   took (minor and major, `getrusage`), `UUIDMAP_BENCH_ROUNDS` rounds
//!   (default 3);
//! - **a full check**: one more recovery, as the server runs it, and
//!   every key's value against the data's model;
//! - **the floor** under that replay: as many one-byte writes as the tail
//!   has updates, at random offsets of the snapshot file mapped privately
//!   as the server maps it, on every core: the copy-on-write page faults
//!   alone, which no replay into the mapping can avoid;
//! - **restart as a process**: exec of `uuidmap serve` on a fresh copy of
//!   the directory until the first `Get` of the last key updated answers
//!   the updated value, its page faults (`/proc/<pid>/stat` at that
//!   moment) and its `Stats.restart`; warm (the copy's pages read first)
//!   and cold (`posix_fadvise(DONTNEED)` on every file of the copy, and
//!   `drop_caches` when writable), alternating in each round. The source
//!   directory's pages are dropped after each copy either way, so the page
//!   cache holds one copy of the files, as on the machine of a server that
//!   was killed.
//!
//! `UUIDMAP_BENCH_IN_PROCESS_ONLY=1` stops after the first two (an A/B of
//! the recovery code without the process restarts' copies).
//!
//! The data is made once through the durable writer (fsync `never`) in
//! `UUIDMAP_BENCH_DIR` (default: a temporary directory under the system
//! temp dir, removed at the end); a directory already made for the same
//! sizes is reused, so the figures of two builds can be taken on the same
//! files. It needs about 2 × 4.4 GB of disk and 9 GB of memory at 100M.
//!
//!   UUIDMAP_BENCH_DIR=/var/tmp/scale cargo bench --bench restart_scale

use std::path::Path;
use std::time::{Duration, Instant};

use uuidmap::store::OsIo;
use uuidmap::store::recovery::{RecoveryOptions, recover};
use uuidmap::store::snapshot::Load;
use uuidmap_testkit::data::mix;

#[path = "common/binary.rs"]
mod binary;
#[path = "common/count.rs"]
mod count;
#[path = "common/restart.rs"]
mod restart;

use restart::{
    copy_dir, each, key, median, open_unsynced, restart_on, update_value, value, write_range,
};

/// The count in `name` (`10000000`, `10_000_000`, `10M`, `250k`), or
/// `default` when unset. A value that is not a count stops the bench: a
/// knob silently ignored would measure another size than the one written
/// down.
fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(s) => count::parse_count(&s).map_or_else(
            || panic!("{name}={s:?} is not a count: give e.g. 10000000, 10_000_000, 10M or 250k"),
            |n| n as u64,
        ),
    }
}

/// The key the `j`-th update of the tail writes (an existing one).
fn updated(entries: u64, j: u64) -> u64 {
    mix(j ^ 0x7a11) % entries
}

/// Makes the data in `dir` unless a marker says it is there already.
fn prepare(dir: &Path, entries: u64, tail: u64) {
    let marker = dir.join(format!("made-{entries}-{tail}"));
    if marker.exists() {
        eprintln!("reusing the data in {}", dir.display());
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let t = Instant::now();
    let durable = open_unsynced(dir);
    write_range(&durable, 0..entries, |j| (key(j), value(j)));
    eprintln!("  {entries} puts: {:.1} s", t.elapsed().as_secs_f64());
    durable.snapshot_now_blocking().expect("the snapshot");
    eprintln!("  and the snapshot: {:.1} s", t.elapsed().as_secs_f64());
    write_range(&durable, 0..tail, |j| {
        (key(updated(entries, j)), update_value(j))
    });
    drop(durable);
    eprintln!("  and {tail} updates: {:.1} s", t.elapsed().as_secs_f64());
    std::fs::write(&marker, b"").unwrap();
}

/// This process's (minor, major) page faults so far.
fn faults() -> (u64, u64) {
    // SAFETY: rusage is plain integers, for which all zeros is a value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into the struct we own and pass;
    // RUSAGE_SELF is always valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    (usage.ru_minflt as u64, usage.ru_majflt as u64)
}

/// The floor (module docs): `writes` one-byte writes at random offsets of
/// `snapshot`, mapped privately, on `threads` threads. Returns the time and
/// the page faults taken.
fn cow_floor(snapshot: &Path, writes: u64, threads: usize) -> (Duration, (u64, u64)) {
    let file = std::fs::File::open(snapshot).unwrap();
    // SAFETY: a private (copy-on-write) mapping of a file nobody writes
    // while the bench runs; the writes below stay inside it.
    let mut map = unsafe { memmap2::MmapOptions::new().map_copy(&file).unwrap() };
    let len = map.len();
    let base = map.as_mut_ptr() as usize;
    let before = faults();
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads as u64 {
            s.spawn(move || {
                for i in (t..writes).step_by(threads) {
                    let offset = (mix(i ^ 0xf100) as usize) % len;
                    // SAFETY: `offset < len`, inside the live mapping, which
                    // outlives the scope; threads race on the same bytes at
                    // most, through atomic byte adds.
                    let byte = unsafe { &*((base + offset) as *const std::sync::atomic::AtomicU8) };
                    byte.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    let took = started.elapsed();
    let after = faults();
    (took, (after.0 - before.0, after.1 - before.1))
}

fn files_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Drops the page-cache pages of every file in `dir`.
fn drop_cached(dir: &Path) {
    use std::os::fd::AsRawFd;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        // SAFETY: posix_fadvise takes the descriptor of a file we hold open
        // and plain integers; it touches no memory of ours.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// Drops the page-cache pages of every file in `dir`, and the whole page
/// cache when this process may.
fn evict(dir: &Path) {
    drop_cached(dir);
    let _ = std::fs::write("/proc/sys/vm/drop_caches", b"1");
}

/// Reads every file of `dir`, so that its pages are in the page cache.
fn warm(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let _ = std::fs::read(entry.unwrap().path());
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let smoke = !std::env::args().any(|a| a == "--bench");
    let entries = env_u64(
        "UUIDMAP_BENCH_ENTRIES",
        if smoke { 300_000 } else { 100_000_000 },
    );
    let tail = env_u64("UUIDMAP_BENCH_TAIL", if smoke { 30_000 } else { 1_000_000 });
    let rounds = env_u64("UUIDMAP_BENCH_ROUNDS", if smoke { 1 } else { 3 }) as usize;
    let scratch = tempfile::tempdir().expect("a temp dir");
    let root = std::env::var_os("UUIDMAP_BENCH_DIR")
        .map_or_else(|| scratch.path().to_path_buf(), Into::into);
    let data = root.join("data");
    eprintln!("data: {entries} entries, a snapshot, then {tail} updates in the WAL");
    prepare(&data, entries, tail);
    let probe = updated(entries, tail - 1);
    let probe_value = update_value(tail - 1);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());

    println!(
        "### Recovery in one process, warm: {entries} entries in the snapshot, {tail} updates \
         in the WAL ({:.2} GB of files), {cores} cores\n",
        files_size(&data) as f64 / 1e9
    );
    println!(
        "| round | load | map ms | verify ms | restore ms | presize ms | replay ms | workers' \
         apply / wall ms | ops | Mops/s | exec-free total ms | minor faults | major faults |"
    );
    println!(
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
    );
    // Both ways of loading the snapshot in each round, the order
    // alternating: the snapshot mapped (pages copied on first write) and
    // read whole first (what the server picks for this tail).
    let mut rates = [Vec::new(), Vec::new()];
    let mut totals = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let loads = if round % 2 == 0 {
            [Load::Map, Load::Read]
        } else {
            [Load::Read, Load::Map]
        };
        for load in loads {
            let i = usize::from(load == Load::Read);
            warm(&data);
            let before = faults();
            let options = RecoveryOptions {
                read_only: true,
                snapshot_load: Some(load),
                ..RecoveryOptions::default()
            };
            let started = Instant::now();
            let recovered = recover(&OsIo, &data, &options).expect("recovering");
            let total = started.elapsed();
            let after = faults();
            let r = &recovered.report;
            let p = &r.phases;
            let rate = r.ops_replayed as f64 / p.replay.as_secs_f64();
            rates[i].push(rate);
            totals[i].push(ms(total));
            let workers = p
                .workers
                .iter()
                .map(|w| format!("{:.0} / {:.0}", ms(w.apply), ms(w.wall)))
                .collect::<Vec<_>>()
                .join(", ");
            println!(
                "| {} | {load:?} | {:.1} | {:.0} | {:.1} | {:.0} | {:.0} | {workers} | {} | {:.2} \
                 | {:.0} | {} | {} |",
                round + 1,
                ms(p.map),
                ms(p.verify),
                ms(p.restore),
                ms(p.presize),
                ms(p.replay),
                r.ops_replayed,
                rate / 1e6,
                ms(total),
                after.0 - before.0,
                after.1 - before.1
            );
            drop(recovered);
        }
    }
    for (i, load) in ["Map", "Read"].iter().enumerate() {
        println!(
            "\n{load}: replay rate, median {:.2} Mops/s; whole recovery, median {:.0} ms",
            median(rates[i].clone()) / 1e6,
            median(totals[i].clone())
        );
    }
    println!();

    // The whole state, checked once: the recovery the server would run
    // (its own choice of load), every key's value against the data's
    // model (the last update of a key wins), and nothing more.
    let started = Instant::now();
    let recovered = recover(
        &OsIo,
        &data,
        &RecoveryOptions {
            read_only: true,
            ..RecoveryOptions::default()
        },
    )
    .expect("recovering");
    let mut last_update = std::collections::HashMap::with_capacity(tail as usize);
    for j in 0..tail {
        last_update.insert(updated(entries, j), j);
    }
    let index = &recovered.index;
    let wrong = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..cores as u64 {
            let (last_update, wrong) = (&last_update, &wrong);
            s.spawn(move || {
                for i in (t..entries).step_by(cores) {
                    let want = last_update.get(&i).map_or(value(i), |&j| update_value(j));
                    if index.get(&key(i)) != Some(want) {
                        wrong.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let wrong = wrong.into_inner();
    println!(
        "Full check ({:?} load): {} entries, {wrong} with a wrong or missing value, {} \
         updated keys; {:.1} s with the recovery\n",
        recovered.report.phases.load,
        index.len(),
        last_update.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(wrong, 0, "a recovered value is wrong");
    assert_eq!(index.len() as u64, entries, "the entry count");
    drop(recovered);

    let snapshot = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "snap"))
        .expect("a snapshot file");
    println!(
        "### The floor: {tail} one-byte writes at random offsets of the snapshot, mapped \
         privately, {cores} threads\n"
    );
    println!("| round | ms | Mwrites/s | minor faults |");
    println!("| --- | ---: | ---: | ---: |");
    for round in 0..rounds {
        warm(&data);
        let (took, (minor, _)) = cow_floor(&snapshot, tail, cores);
        println!(
            "| {} | {:.0} | {:.2} | {minor} |",
            round + 1,
            ms(took),
            tail as f64 / took.as_secs_f64() / 1e6
        );
    }
    println!();

    if std::env::var_os("UUIDMAP_BENCH_IN_PROCESS_ONLY").is_some() {
        return;
    }
    let bin = binary::uuidmap_binary();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut times = [Vec::new(), Vec::new()];
    let mut notes = [String::new(), String::new()];
    let run = root.join("run");
    for round in 0..rounds {
        for (i, cold) in [(0, false), (1, true)] {
            let _ = std::fs::remove_dir_all(&run);
            copy_dir(&data, &run);
            // One copy of the files in the page cache, as on a machine
            // whose server was killed: with the source's pages cached too
            // (7.2 GB twice at 100M) the cache filled the memory, and the
            // server's 4 GB were reclaimed from it while it read, which
            // moved the warm restart by about 1 s between runs.
            drop_cached(&data);
            if cold {
                evict(&run);
            } else {
                warm(&run);
            }
            let restart::Restarted {
                took,
                stats,
                faults: pf,
            } = restart_on(&rt, &bin, &run, key(probe), probe_value);
            let name = if cold { "cold" } else { "warm" };
            eprintln!("round {round}: {name}: {:.0} ms", ms(took));
            times[i].push(ms(took));
            if let Some(s) = stats {
                let ms = |us: u64| us as f64 / 1e3;
                notes[i] = format!(
                    "map {:.1} ms, verify {:.0} ms, restore {:.1} ms, presize {:.0} ms, replay \
                     {:.0} ms ({} ops); page faults at the first Get: {} minor, {} major",
                    ms(s.map_us),
                    ms(s.verify_us),
                    ms(s.restore_us),
                    ms(s.presize_us),
                    ms(s.replay_us),
                    s.ops_replayed,
                    pf.map_or(0, |f| f.0),
                    pf.map_or(0, |f| f.1),
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&run);
    println!("### Restart as a process: exec of `uuidmap serve` to the first served Get\n");
    println!("| page cache | ms (median of {rounds}) | each | last round, from `Stats` |");
    println!("| --- | ---: | --- | --- |");
    for (i, name) in ["warm", "cold (files evicted)"].iter().enumerate() {
        println!(
            "| {name} | {:.0} | {} | {} |",
            median(times[i].clone()),
            each(&times[i]),
            notes[i]
        );
    }
}
