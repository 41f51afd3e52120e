//! Memory per entry of uuidmap and its peers, and uuidmap's single-writer
//! insert throughput. Prints markdown tables to stdout (progress to stderr).
//!
//! Each map is built by inserting `n` keys into a new map, one map at a time
//! (each dropped before the next). Bytes per entry is the growth of jemalloc's
//! `stats.allocated` from just before the map is created to just after it is
//! built, divided by `n`. The keys were allocated before the baseline, so they
//! are not counted. uuidmap is measured twice: grown from empty
//! (`Index::with_capacity(0)`) and presized (`Index::with_capacity(n)`); the
//! peers (ahash-hashed, as in `maps.rs`) start empty. `hashbrown` stands for
//! `RwLock<hashbrown::HashMap>` too: the lock adds a few bytes per map, not
//! per entry.
//!
//! Deferred frees, treated alike on every side: before memory is read, each
//! map's deferred reclamation is forced by `Measured::reclaim`, between two
//! calls of [`settle`]. uuidmap: epoch flushes hand its retired tables to the
//! writer, whose `reclaim` frees them. papaya: `guard().flush()` retires the
//! thread's seize batch and dropping the guard frees it, 8 rounds. scc:
//! `scc::Guard::new().accelerate()` then dropping the guard, 8 rounds, which
//! moves sdd's epoch on so that this thread frees what expired. dashmap and
//! hashbrown free at once and need nothing. Then the thread's jemalloc cache
//! is flushed and dirty pages purged, the same for all.
//!
//! jemalloc's `stats.resident` (active pages, allocator metadata and dirty
//! pages not yet returned to the OS) is printed for reference, after purging
//! dirty pages so that one map's freed memory does not count towards the next.
//!
//! Environment: `UUIDMAP_BENCH_SIZES` (default `1M,2M,5M,10M,20M`). The insert
//! throughput runs at the largest size, capped at 10M.

use std::time::{Duration, Instant};

use uuid::Uuid;

mod common;
use common::{PeerHasher, label, random_keys, value_for};

/// Entry counts run when `UUIDMAP_BENCH_SIZES` is unset.
const DEFAULT_SIZES: &[usize] = &[1_000_000, 2_000_000, 5_000_000, 10_000_000, 20_000_000];

/// Largest entry count of the insert-throughput runs.
const INSERT_SIZE_CAP: usize = 10_000_000;

/// Runs per insert-throughput case (the median is reported).
const INSERT_RUNS: usize = 3;

/// Insert rate uuidmap must reach into a presized index, in inserts/s.
const PRESIZED_INSERT_TARGET: f64 = 5e6;

/// Rounds of `pin().flush()` to drain crossbeam-epoch's garbage: each round
/// may advance the global epoch and frees a few expired bags.
const EPOCH_FLUSH_ROUNDS: usize = 1024;

/// One map at one size.
struct Measurement {
    /// Which map.
    map: &'static str,
    /// Entries inserted.
    n: usize,
    /// Growth of `stats.allocated` over the build, in bytes.
    allocated: usize,
    /// Growth of `stats.resident` over the build, in bytes (may be negative
    /// when the build reuses pages the baseline still held).
    resident: isize,
    /// Time to create the map and insert `n` entries.
    build: Duration,
}

/// A map builder: a name and a function that inserts all keys into a new map
/// and returns it (with its entry count, checked against the key count).
type Builder = (&'static str, fn(&[Uuid]) -> Box<dyn Measured>);

/// What the measurement needs from a built map.
trait Measured {
    /// Entries the map holds.
    fn entries(&self) -> usize;
    /// For uuidmap, the bytes its tables report holding.
    fn table_bytes(&self) -> Option<usize> {
        None
    }
    /// Frees what the map keeps for deferred reclamation (uuidmap's retired
    /// tables, which its writer frees; a server's writer calls `reclaim`
    /// routinely).
    fn reclaim(&mut self) {}
}

impl Measured for (uuidmap::IndexWriter, uuidmap::Index) {
    fn entries(&self) -> usize {
        self.1.len()
    }
    fn table_bytes(&self) -> Option<usize> {
        Some(self.1.table_bytes())
    }
    fn reclaim(&mut self) {
        self.0.reclaim();
    }
}

/// Rounds of each peer's forced reclamation in `Measured::reclaim`: enough
/// for a retired batch to pass through every stage of its collector.
const PEER_RECLAIM_ROUNDS: usize = 8;

impl Measured for papaya::HashMap<Uuid, Uuid, PeerHasher> {
    fn entries(&self) -> usize {
        self.len()
    }
    /// papaya retires the tables it outgrew into seize's per-thread batch,
    /// which is freed once the batch is retired and no guard can see it.
    /// `Guard::flush` retires this (the only) thread's batch even when it is
    /// not full, and dropping the guard lets seize free it.
    fn reclaim(&mut self) {
        use papaya::Guard as _;
        for _ in 0..PEER_RECLAIM_ROUNDS {
            let guard = self.guard();
            guard.flush();
            drop(guard);
        }
    }
}

impl Measured for scc::HashIndex<Uuid, Uuid, PeerHasher> {
    fn entries(&self) -> usize {
        self.len()
    }
    /// scc retires old bucket arrays and removed entries through sdd, which
    /// frees them when the epoch has moved on past every guard that could
    /// see them. `Guard::accelerate` asks for the epoch to advance, and
    /// dropping the guard lets this thread free what has expired; a few
    /// rounds pass the epoch through all of its states.
    fn reclaim(&mut self) {
        for _ in 0..PEER_RECLAIM_ROUNDS {
            let guard = scc::Guard::new();
            guard.accelerate();
            drop(guard);
        }
    }
}

impl Measured for dashmap::DashMap<Uuid, Uuid, PeerHasher> {
    fn entries(&self) -> usize {
        self.len()
    }
}

impl Measured for hashbrown::HashMap<Uuid, Uuid, PeerHasher> {
    fn entries(&self) -> usize {
        self.len()
    }
}

fn uuidmap_grown(keys: &[Uuid]) -> Box<dyn Measured> {
    Box::new(fill_uuidmap(uuidmap::Index::with_capacity(0), keys))
}

fn uuidmap_presized(keys: &[Uuid]) -> Box<dyn Measured> {
    Box::new(fill_uuidmap(
        uuidmap::Index::with_capacity(keys.len()),
        keys,
    ))
}

fn fill_uuidmap(
    (mut writer, index): (uuidmap::IndexWriter, uuidmap::Index),
    keys: &[Uuid],
) -> (uuidmap::IndexWriter, uuidmap::Index) {
    for (i, k) in keys.iter().enumerate() {
        writer
            .insert(*k, value_for(i))
            .expect("generated keys are valid");
    }
    (writer, index)
}

fn papaya(keys: &[Uuid]) -> Box<dyn Measured> {
    let map = papaya::HashMap::with_hasher(PeerHasher::new());
    let pinned = map.pin();
    for (i, k) in keys.iter().enumerate() {
        pinned.insert(*k, value_for(i));
    }
    drop(pinned);
    Box::new(map)
}

fn scc_hashindex(keys: &[Uuid]) -> Box<dyn Measured> {
    let map = scc::HashIndex::with_hasher(PeerHasher::new());
    for (i, k) in keys.iter().enumerate() {
        map.insert_sync(*k, value_for(i))
            .expect("generated keys are distinct");
    }
    Box::new(map)
}

fn dashmap(keys: &[Uuid]) -> Box<dyn Measured> {
    let map = dashmap::DashMap::with_hasher(PeerHasher::new());
    for (i, k) in keys.iter().enumerate() {
        map.insert(*k, value_for(i));
    }
    Box::new(map)
}

fn hashbrown(keys: &[Uuid]) -> Box<dyn Measured> {
    let mut map = hashbrown::HashMap::with_hasher(PeerHasher::new());
    for (i, k) in keys.iter().enumerate() {
        map.insert(*k, value_for(i));
    }
    Box::new(map)
}

const MAPS: &[Builder] = &[
    ("uuidmap (grown)", uuidmap_grown),
    ("uuidmap (presized)", uuidmap_presized),
    ("papaya", papaya),
    ("scc_hashindex", scc_hashindex),
    ("dashmap", dashmap),
    ("hashbrown", hashbrown),
];

fn main() {
    let sizes = common::bench_sizes("memory", DEFAULT_SIZES);
    let max = sizes.iter().copied().max().unwrap_or(0);
    let keys = random_keys(max, common::KEY_SEED);

    let mut rows = Vec::new();
    for &n in &sizes {
        for &(name, build) in MAPS {
            let m = measure(name, &keys[..n], build);
            eprintln!(
                "memory: {name} {}: {:.1} B/entry, built in {:.2?}",
                label(n),
                m.allocated as f64 / n as f64,
                m.build
            );
            rows.push(m);
        }
    }
    print_memory_tables(&sizes, &rows);

    let n = max.min(INSERT_SIZE_CAP);
    print_insert_throughput(&keys[..n]);
}

/// Builds one map from `keys`, measures it, and drops it.
fn measure(
    map: &'static str,
    keys: &[Uuid],
    build: fn(&[Uuid]) -> Box<dyn Measured>,
) -> Measurement {
    let n = keys.len();
    settle();
    let (allocated_before, resident_before) = jemalloc_stats();
    let start = Instant::now();
    let mut built = build(keys);
    let build_time = start.elapsed();
    // Every map's deferred frees are forced alike: epoch flushes hand
    // uuidmap's retired tables to its writer, `reclaim` frees them (and runs
    // papaya's and scc's collectors); then the allocator is settled again.
    settle();
    built.reclaim();
    settle();
    let (allocated_after, resident_after) = jemalloc_stats();
    assert_eq!(built.entries(), n, "{map}: entry count after building");
    let allocated = allocated_after.saturating_sub(allocated_before);
    if let Some(tables) = built.table_bytes() {
        // The index's own account of its slot memory: the allocator should
        // see that plus a little (segments, handles). Much more means retired
        // tables were not freed.
        eprintln!(
            "memory: {map} {}: tables {:.1} B/entry, allocator {:.1} B/entry",
            label(n),
            tables as f64 / n as f64,
            allocated as f64 / n as f64
        );
    }
    drop(built);
    Measurement {
        map,
        n,
        allocated,
        resident: resident_after as isize - resident_before as isize,
        build: build_time,
    }
}

/// Brings the allocator to a quiet state before its statistics are read.
///
/// uuidmap retires the table a segment outgrew through crossbeam-epoch, which
/// hands it back to the writer only after the global epoch has moved on, so a
/// freshly built index can still have retired tables queued. Pinning and
/// flushing on this (the only) thread advances the epoch and runs the queued
/// hand-overs; `Measured::reclaim` then lets the writer free them. Freed
/// blocks of up to 32 KiB then sit in this thread's jemalloc cache, where
/// they still count as allocated, so the cache is flushed. Last, dirty pages
/// are purged so that `resident` counts live memory.
fn settle() {
    for _ in 0..EPOCH_FLUSH_ROUNDS {
        crossbeam_epoch::pin().flush();
    }
    flush_thread_cache();
    purge_dirty_pages();
}

/// Returns the blocks cached by this thread's jemalloc tcache to their arenas,
/// by disabling the cache (which flushes it) and enabling it again.
fn flush_thread_cache() {
    let name = b"thread.tcache.enabled\0";
    // SAFETY: `thread.tcache.enabled` is a C `bool`, which is Rust's `bool`,
    // and the name is NUL-terminated.
    unsafe {
        if let Ok(previous) = tikv_jemalloc_ctl::raw::update::<bool>(name, false) {
            let _ = tikv_jemalloc_ctl::raw::write::<bool>(name, previous);
        }
    }
}

/// Returns every arena's unused dirty pages to the OS, by setting its dirty
/// decay time to zero (which purges at once) and back.
fn purge_dirty_pages() {
    let arenas = tikv_jemalloc_ctl::arenas::narenas::read().unwrap_or(0);
    for arena in 0..arenas {
        let name = format!("arena.{arena}.dirty_decay_ms\0");
        // SAFETY: `arena.<i>.dirty_decay_ms` is an `ssize_t`, which is
        // `isize` on every platform jemalloc supports, and the name is
        // NUL-terminated. Arenas not yet initialised answer with an error,
        // which is ignored.
        unsafe {
            if let Ok(previous) = tikv_jemalloc_ctl::raw::update::<isize>(name.as_bytes(), 0) {
                let _ = tikv_jemalloc_ctl::raw::write::<isize>(name.as_bytes(), previous);
            }
        }
    }
}

/// jemalloc's `stats.allocated` and `stats.resident`, refreshed.
fn jemalloc_stats() -> (usize, usize) {
    // Statistics are a snapshot taken when the epoch advances.
    tikv_jemalloc_ctl::epoch::advance().expect("advancing jemalloc's stats epoch");
    (
        tikv_jemalloc_ctl::stats::allocated::read().expect("reading stats.allocated"),
        tikv_jemalloc_ctl::stats::resident::read().expect("reading stats.resident"),
    )
}

fn print_memory_tables(sizes: &[usize], rows: &[Measurement]) {
    println!("\n## Memory per entry (jemalloc stats.allocated; 32 B of it is key + value)\n");
    println!("| map | entries | bytes/entry | resident bytes/entry | build (inserts/s) |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for m in rows {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.2} M/s |",
            m.map,
            label(m.n),
            m.allocated as f64 / m.n as f64,
            m.resident as f64 / m.n as f64,
            m.n as f64 / m.build.as_secs_f64() / 1e6
        );
    }

    let shown: Vec<String> = sizes.iter().map(|&n| label(n)).collect();
    println!(
        "\n## Bytes per entry over sizes {} (allocated)\n",
        shown.join(", ")
    );
    println!("| map | average | max |");
    println!("| --- | ---: | ---: |");
    for &(name, _) in MAPS {
        let per_entry: Vec<f64> = rows
            .iter()
            .filter(|m| m.map == name)
            .map(|m| m.allocated as f64 / m.n as f64)
            .collect();
        let average = per_entry.iter().sum::<f64>() / per_entry.len() as f64;
        let max = per_entry.iter().copied().fold(0.0, f64::max);
        println!("| {name} | {average:.1} | {max:.1} |");
    }
}

/// Single-writer insert rate into a presized and a grown-from-empty uuidmap:
/// the median of [`INSERT_RUNS`] runs each, timed twice per run: with the
/// clock started before `Index::with_capacity` (so the presized index's
/// allocation and prefaulting of its slot arrays count) and after it.
fn print_insert_throughput(keys: &[Uuid]) {
    let n = keys.len();
    println!(
        "\n## uuidmap single-writer inserts, {} new keys (median of {INSERT_RUNS})\n",
        label(n)
    );
    println!("| index | clock starts | inserts/s | runs (M/s) |");
    println!("| --- | --- | ---: | --- |");
    let mut presized_median = 0.0;
    for (name, capacity) in [("presized", n), ("grown from empty", 0)] {
        // Each run times two spans: from before `with_capacity` (allocation
        // and prefaulting of the slot arrays counted) and from after it
        // (inserts only). Both are reported; the target is judged on the
        // first, which is what a caller who creates and fills an index pays.
        let (mut with_alloc, mut inserts_only): (Vec<f64>, Vec<f64>) = (0..INSERT_RUNS)
            .map(|_| {
                let before_alloc = Instant::now();
                let (mut writer, index) = uuidmap::Index::with_capacity(capacity);
                let start = Instant::now();
                for (i, k) in keys.iter().enumerate() {
                    writer
                        .insert(*k, value_for(i))
                        .expect("generated keys are valid");
                }
                let end = Instant::now();
                assert_eq!(index.len(), n);
                drop((writer, index));
                settle();
                (
                    n as f64 / (end - before_alloc).as_secs_f64(),
                    n as f64 / (end - start).as_secs_f64(),
                )
            })
            .unzip();
        for (clock, rates) in [
            ("before `with_capacity`", &mut with_alloc),
            ("after `with_capacity`", &mut inserts_only),
        ] {
            let runs: Vec<String> = rates.iter().map(|r| format!("{:.2}", r / 1e6)).collect();
            rates.sort_by(f64::total_cmp);
            let median = rates[rates.len() / 2];
            println!(
                "| {name} | {clock} | {:.2} M/s | {} |",
                median / 1e6,
                runs.join(", ")
            );
        }
        if capacity > 0 {
            presized_median = with_alloc[with_alloc.len() / 2];
        }
    }
    let verdict = if presized_median >= PRESIZED_INSERT_TARGET {
        "met"
    } else {
        "NOT met"
    };
    println!(
        "\nTarget >= {:.0} M inserts/s into a presized index, clock started before `with_capacity`: {verdict}.",
        PRESIZED_INSERT_TARGET / 1e6
    );
}
