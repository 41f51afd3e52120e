//! Latency of single uuidmap lookups on one reader thread, idle and with one
//! busy background thread. Prints a markdown table to stdout (progress to
//! stderr).
//!
//! Each `get` is timed on its own with `std::time::Instant` (two clock reads
//! per lookup); the `timer` row gives the cost of those two reads alone, which
//! every other row includes. Samples go into a preallocated vector, which is
//! sorted afterwards for the percentiles (nearest rank).
//!
//! Phases, on an index presized for and filled with `n` entries (default
//! 10M), looking up stored keys in a pre-shuffled order:
//!
//! - `idle`: nothing else runs;
//! - `full scan`: another thread scans the whole index over and over;
//! - `segment growth`: another thread, the writer, inserts `n / 2` new keys,
//!   so every segment outgrows its presized table (most of them twice): the
//!   reader samples for as long as the writer runs;
//! - `papaya idle`: the same idle measurement on a `papaya::HashMap` (ahash)
//!   with the same entries, for reference.
//!
//! The machine needs only two cores: the reader and one background thread.
//!
//! Environment: `UUIDMAP_BENCH_SIZES` (default `10M`), one table per size.

use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;

mod common;
use common::histogram::PhaseRow;
use common::{PeerHasher, label, per_second, random_keys, shuffled, value_for};

/// Entry counts run when `UUIDMAP_BENCH_SIZES` is unset.
const DEFAULT_SIZES: &[usize] = &[10_000_000];

/// Lookups timed in the fixed-length phases (idle, scan, papaya).
const SAMPLES: usize = 5_000_000;

/// Lookups timed per fixed-length phase under `cargo test`.
const TEST_SAMPLES: usize = 100_000;

/// Most lookups timed while the writer grows the index; the reader stops
/// early if it reaches this before the writer is done.
const MAX_GROWTH_SAMPLES: usize = 40_000_000;

/// Samples between two looks at the stop flag.
const STOP_CHECK_EVERY: usize = 256;

fn main() {
    let sizes = common::bench_sizes("latency", DEFAULT_SIZES);
    let per_phase = if common::bench_mode() {
        SAMPLES
    } else {
        TEST_SAMPLES
    };
    for &n in &sizes {
        run(n, per_phase);
    }
}

/// All phases at `n` entries, `per_phase` lookups in the fixed-length ones;
/// prints one table.
fn run(n: usize, per_phase: usize) {
    let keys = random_keys(n, common::KEY_SEED);
    let order = shuffled(&keys, common::ORDER_SEED);
    let extra = random_keys(n / 2, common::OTHER_KEY_SEED);
    let mut samples = Vec::with_capacity(MAX_GROWTH_SAMPLES.max(per_phase));
    let mut rows = Vec::new();

    samples.clear();
    for _ in 0..per_phase {
        let start = Instant::now();
        samples.push(nanos(start.elapsed()));
    }
    rows.push(PhaseRow::of("timer (two clock reads, no lookup)", &samples));

    let (mut writer, index) = uuidmap::Index::with_capacity(n);
    for (i, k) in keys.iter().enumerate() {
        writer
            .insert(*k, value_for(i))
            .expect("generated keys are valid");
    }
    eprintln!(
        "latency: {} entries in {} segments, {:.1} table bytes/entry",
        label(n),
        index.segment_count(),
        index.table_bytes() as f64 / n as f64
    );

    sample(|k| index.get(k), &order, per_phase, None, &mut samples);
    rows.push(PhaseRow::of("idle", &samples));

    // Full scans on a second thread, for as long as the reader samples.
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(2);
    let scanned = std::thread::scope(|s| {
        let scanner = s.spawn(|| {
            barrier.wait();
            let (mut scans, mut entries) = (0u64, 0u64);
            'scans: while !stop.load(Ordering::Relaxed) {
                for (i, entry) in index.scan().enumerate() {
                    black_box(entry);
                    entries += 1;
                    if i % 4096 == 0 && stop.load(Ordering::Relaxed) {
                        break 'scans;
                    }
                }
                scans += 1;
            }
            (scans, entries)
        });
        barrier.wait();
        sample(|k| index.get(k), &order, per_phase, None, &mut samples);
        stop.store(true, Ordering::Relaxed);
        scanner.join().expect("scanner thread panicked")
    });
    eprintln!(
        "latency: scanner finished {} full scans, {} entries read",
        scanned.0, scanned.1
    );
    rows.push(PhaseRow::of("full scan", &samples));

    // The writer inserts new keys; every segment outgrows its table.
    let (segments, bytes_before) = (index.segment_count(), index.table_bytes());
    let writer_done = AtomicBool::new(false);
    let writer_time = std::thread::scope(|s| {
        let w = s.spawn(|| {
            barrier.wait();
            let start = Instant::now();
            for (i, k) in extra.iter().enumerate() {
                writer
                    .insert(*k, value_for(n + i))
                    .expect("generated keys are valid");
            }
            let elapsed = start.elapsed();
            writer_done.store(true, Ordering::Relaxed);
            elapsed
        });
        barrier.wait();
        sample(
            |k| index.get(k),
            &order,
            MAX_GROWTH_SAMPLES,
            Some(&writer_done),
            &mut samples,
        );
        w.join().expect("writer thread panicked")
    });
    eprintln!(
        "latency: writer inserted {} keys in {:.2?} ({}); table bytes {:.0} MiB -> {:.0} MiB \
         over {segments} segments{}",
        label(extra.len()),
        writer_time,
        per_second(extra.len(), writer_time),
        bytes_before as f64 / (1 << 20) as f64,
        index.table_bytes() as f64 / (1 << 20) as f64,
        if samples.len() == MAX_GROWTH_SAMPLES {
            "; the reader hit its sample cap before the writer finished"
        } else {
            ""
        },
    );
    rows.push(PhaseRow::of("segment growth", &samples));
    drop((writer, index));

    let papaya = papaya::HashMap::builder()
        .capacity(n)
        .hasher(PeerHasher::new())
        .build();
    {
        let pinned = papaya.pin();
        for (i, k) in keys.iter().enumerate() {
            pinned.insert(*k, value_for(i));
        }
    }
    sample(
        |k| papaya.pin().get(k).copied(),
        &order,
        per_phase,
        None,
        &mut samples,
    );
    rows.push(PhaseRow::of("papaya idle (reference)", &samples));

    print_table(n, &rows);
}

/// Times `get` on keys from `order` (cycling), one lookup at a time, into
/// `samples` (cleared first): `max` samples, or fewer if `stop` is set.
fn sample(
    get: impl Fn(&Uuid) -> Option<Uuid>,
    order: &[Uuid],
    max: usize,
    stop: Option<&AtomicBool>,
    samples: &mut Vec<u32>,
) {
    samples.clear();
    samples.reserve(max);
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
        samples.push(nanos(start.elapsed()));
    }
}

fn nanos(d: Duration) -> u32 {
    u32::try_from(d.as_nanos()).unwrap_or(u32::MAX)
}

fn print_table(n: usize, rows: &[PhaseRow]) {
    println!(
        "\n## uuidmap `get` latency, {} entries, one reader (each get timed alone)\n",
        label(n)
    );
    println!("| phase | samples | p50 ns | p99 ns | p99.9 ns | max ns |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            r.phase, r.samples, r.p50, r.p99, r.p999, r.max
        );
    }
}
