//! Lookup throughput of uuidmap against peer concurrent maps.
//!
//! Maps (all hold `Uuid -> Uuid`; every peer uses `ahash::RandomState`, as
//! uuidmap itself hashes with seeded ahash):
//!
//! - `uuidmap_session`: the same index read through one
//!   [`uuidmap::index::ReadSession`] per reader thread (`get_hit` and
//!   `get_miss50` only);
//! - `uuidmap`: [`uuidmap::Index`], presized to `n` (huge pages as
//!   `UUIDMAP_BENCH_THP` says: `on`, the default, gives every map huge pages,
//!   peers through jemalloc's `thp:always`; `off` gives none; the run prints
//!   AnonHugePages after each build, see `common::THP_ENV`);
//! - `papaya`: `papaya::HashMap` (one `pin()` per operation);
//! - `scc_hashindex`: `scc::HashIndex` (`peek_with`, which pins per call);
//! - `dashmap`: `dashmap::DashMap`;
//! - `rwlock_hashbrown`: `std::sync::RwLock<hashbrown::HashMap>`, a read lock
//!   per lookup;
//! - `hashbrown_unsync`: the same `hashbrown::HashMap` read with no
//!   synchronisation at all (shared read-only by the reader threads, with no
//!   writer): the ceiling.
//!
//! Every map is presized for `n` and filled with the same `n` keys, once per
//! size, and reused for every workload:
//!
//! - `get_hit/<n>`: uniform random hits;
//! - `get_miss50/<n>`: half hits, half keys that are not stored;
//! - `get_with_writer/<n>`: hits while one extra thread rewrites the values of
//!   a fixed 1 % of the keys as fast as it can (uuidmap: the `IndexWriter`;
//!   peers: their own insert). Reader throughput is what criterion reports;
//!   the writer's rate is in the summary table;
//! - `get_batch/<n>`: uuidmap `get_many` with batches of 64 and 1024 keys
//!   against a loop of `get` over the same keys.
//!
//! Lookups walk a pre-shuffled copy of the keys (random access), each reader
//! thread its own contiguous share, continuing across criterion's calls.
//! Threads are spawned per measurement call and time themselves after a
//! barrier, so thread start-up is not measured; the reported time is the
//! slowest reader's, and the throughput counts the lookups of all readers.
//!
//! At the end a markdown table gives each benchmark's lookups/s (and the
//! background writer's updates/s) summed over criterion's measurement calls.
//!
//! Environment: `UUIDMAP_BENCH_SIZES` (default `1M,10M`),
//! `UUIDMAP_BENCH_THREADS` (reader thread counts, default `1,2`).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, RwLock};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use dashmap::DashMap;
use uuid::Uuid;

mod common;
use common::{PeerHasher, label, per_second, random_keys, shuffled, value_for};

/// Criterion samples per benchmark (its minimum), each one measurement call.
const SAMPLES: usize = 10;

/// Entry counts run when `UUIDMAP_BENCH_SIZES` is unset.
const DEFAULT_SIZES: &[usize] = &[1_000_000, 10_000_000];

/// Reader thread counts run when `UUIDMAP_BENCH_THREADS` is unset.
const DEFAULT_THREADS: &[usize] = &[1, 2];

/// Environment variable with the reader thread counts, comma-separated.
const THREADS_ENV: &str = "UUIDMAP_BENCH_THREADS";

/// Batch sizes of the `get_many` workload.
const BATCHES: &[usize] = &[64, 1024];

/// The writer of `get_with_writer` rewrites one key in this many.
const WRITER_SHARE: usize = 100;

/// Writer operations between two looks at the stop flag.
const WRITER_CHUNK: usize = 64;

fn benches(c: &mut Criterion) {
    common::thp_setup();
    let sizes = common::bench_sizes("maps", DEFAULT_SIZES);
    let threads = reader_threads();
    let cores = std::thread::available_parallelism().map_or(1, |p| p.get());
    eprintln!(
        "maps: reader threads {threads:?}; peers hash with ahash::RandomState; \
         {cores} cores available"
    );
    if threads.iter().any(|&t| t + 1 > cores) {
        eprintln!(
            "maps: note: with the background writer some runs use more threads than the \
             {cores} cores; their reader throughput includes time-sharing"
        );
    }
    let all_keys = random_keys(sizes.iter().copied().max().unwrap_or(0), common::KEY_SEED);
    let mut summary = Summary::default();
    for &n in &sizes {
        bench_size(c, &all_keys[..n], &threads, &mut summary);
    }
    summary.print();
}

/// The reader thread counts from `UUIDMAP_BENCH_THREADS`, or the default.
fn reader_threads() -> Vec<usize> {
    match std::env::var(THREADS_ENV) {
        Ok(s) if !s.trim().is_empty() => s
            .split(',')
            .map(|p| match p.trim().parse::<usize>() {
                Ok(t) if t > 0 => t,
                _ => panic!("{THREADS_ENV}: bad thread count {p:?}"),
            })
            .collect(),
        _ => DEFAULT_THREADS.to_vec(),
    }
}

/// Builds every map with `keys` and runs all workloads against them.
fn bench_size(c: &mut Criterion, keys: &[Uuid], threads: &[usize], summary: &mut Summary) {
    let n = keys.len();
    let size = label(n);
    let hits = shuffled(keys, common::ORDER_SEED);
    let mixed = {
        let misses = random_keys(n / 2, common::OTHER_KEY_SEED);
        let mut m = hits[..n - n / 2].to_vec();
        m.extend_from_slice(&misses);
        shuffled(&m, common::ORDER_SEED + 1)
    };
    let hot = &keys[..(n / WRITER_SHARE).max(1)];

    let (mut writer, index) = timed_build("uuidmap", n, || {
        let (mut w, index) = common::uuidmap_index(n);
        for (i, k) in keys.iter().enumerate() {
            w.insert(*k, value_for(i))
                .expect("generated keys are valid");
        }
        (w, index)
    });
    let papaya = timed_build("papaya", n, || {
        let map = papaya::HashMap::builder()
            .capacity(n)
            .hasher(PeerHasher::new())
            .build();
        let pinned = map.pin();
        for (i, k) in keys.iter().enumerate() {
            pinned.insert(*k, value_for(i));
        }
        drop(pinned);
        map
    });
    let scc = timed_build("scc_hashindex", n, || {
        let map = scc::HashIndex::with_capacity_and_hasher(n, PeerHasher::new());
        for (i, k) in keys.iter().enumerate() {
            map.insert_sync(*k, value_for(i))
                .expect("generated keys are distinct");
        }
        map
    });
    let dash = timed_build("dashmap", n, || {
        let map = DashMap::with_capacity_and_hasher(n, PeerHasher::new());
        for (i, k) in keys.iter().enumerate() {
            map.insert(*k, value_for(i));
        }
        map
    });
    let rw = timed_build("rwlock_hashbrown", n, || {
        let mut map = hashbrown::HashMap::with_capacity_and_hasher(n, PeerHasher::new());
        for (i, k) in keys.iter().enumerate() {
            map.insert(*k, value_for(i));
        }
        RwLock::new(map)
    });
    // Every map answers the same on a sample before anything is timed.
    for k in hits.iter().take(1000).chain(mixed.iter().take(1000)) {
        let want = index.get(k);
        assert_eq!(papaya.pin().get(k).copied(), want);
        assert_eq!(scc.peek_with(k, |_, v| *v), want);
        assert_eq!(dash.get(k).map(|r| *r), want);
        assert_eq!(rw.read().unwrap().get(k).copied(), want);
    }

    for (workload, order) in [("get_hit", &hits), ("get_miss50", &mixed)] {
        let mut g = Group::new(c, format!("{workload}/{size}"), summary);
        bench_gets(&mut g, "uuidmap", threads, order, |k| index.get(k));
        bench_session_gets(&mut g, threads, order, &index);
        bench_gets(&mut g, "papaya", threads, order, |k| {
            papaya.pin().get(k).copied()
        });
        bench_gets(&mut g, "scc_hashindex", threads, order, |k| {
            scc.peek_with(k, |_, v| *v)
        });
        bench_gets(&mut g, "dashmap", threads, order, |k| {
            dash.get(k).map(|r| *r)
        });
        bench_gets(&mut g, "rwlock_hashbrown", threads, order, |k| {
            rw.read().unwrap().get(k).copied()
        });
        {
            // One read guard for the whole benchmark: plain hashbrown
            // lookups, shared read-only by every reader thread.
            let map = rw.read().unwrap();
            bench_gets(&mut g, "hashbrown_unsync", threads, order, |k| {
                map.get(k).copied()
            });
        }
        g.finish();
    }

    let mut g = Group::new(c, format!("get_with_writer/{size}"), summary);
    bench_gets_with_writer(
        &mut g,
        "uuidmap",
        threads,
        &hits,
        hot,
        |k| index.get(k),
        |k, v| {
            writer.insert(k, v).expect("generated keys are valid");
        },
    );
    bench_gets_with_writer(
        &mut g,
        "papaya",
        threads,
        &hits,
        hot,
        |k| papaya.pin().get(k).copied(),
        |k, v| {
            papaya.pin().insert(k, v);
        },
    );
    bench_gets_with_writer(
        &mut g,
        "scc_hashindex",
        threads,
        &hits,
        hot,
        |k| scc.peek_with(k, |_, v| *v),
        |k, v| {
            if let scc::hash_index::Entry::Occupied(mut e) = scc.entry_sync(k) {
                e.update(v);
            }
        },
    );
    bench_gets_with_writer(
        &mut g,
        "dashmap",
        threads,
        &hits,
        hot,
        |k| dash.get(k).map(|r| *r),
        |k, v| {
            dash.insert(k, v);
        },
    );
    bench_gets_with_writer(
        &mut g,
        "rwlock_hashbrown",
        threads,
        &hits,
        hot,
        |k| rw.read().unwrap().get(k).copied(),
        |k, v| {
            rw.write().unwrap().insert(k, v);
        },
    );
    g.finish();

    let mut g = Group::new(c, format!("get_batch/{size}"), summary);
    let index = &index;
    for &batch in BATCHES {
        for &t in threads {
            let get_many = || {
                let mut out = vec![None; batch];
                move |keys: &[Uuid]| {
                    index.get_many(keys, &mut out);
                    black_box(&out);
                }
            };
            bench_readers(
                &mut g,
                &format!("get_many/{batch}/{t}t"),
                t,
                Readers {
                    order: &hits,
                    step: batch,
                    make_reader: &get_many,
                },
                None::<&mut NoWriter>,
            );
            let get_loop = || {
                let mut out = vec![None; batch];
                move |keys: &[Uuid]| {
                    for (k, o) in keys.iter().zip(out.iter_mut()) {
                        *o = index.get(k);
                    }
                    black_box(&out);
                }
            };
            bench_readers(
                &mut g,
                &format!("get_loop/{batch}/{t}t"),
                t,
                Readers {
                    order: &hits,
                    step: batch,
                    make_reader: &get_loop,
                },
                None::<&mut NoWriter>,
            );
        }
    }
    g.finish();
}

/// Runs `build`, printing how long it took.
fn timed_build<T>(name: &str, n: usize, build: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let map = build();
    let elapsed = start.elapsed();
    eprintln!(
        "maps: built {name} with {} entries in {:.2?} ({})",
        label(n),
        elapsed,
        per_second(n, elapsed)
    );
    // Cumulative over the maps built so far: each step should grow by
    // about the map's size when THP is on, and stay near 0 when it is off.
    common::print_huge_pages(&format!("maps: after building {name}"));
    map
}

/// The type of "no background writer".
type NoWriter = fn(&AtomicBool) -> u64;

/// One benchmark per thread count of single `get`s through `get`.
fn bench_gets<G>(g: &mut Group<'_, '_>, map: &str, threads: &[usize], order: &[Uuid], get: G)
where
    G: Fn(&Uuid) -> Option<Uuid> + Sync,
{
    bench_get_readers(g, map, threads, order, &get, None::<&mut NoWriter>);
}

/// `uuidmap_session`: each reader thread makes one [`uuidmap::index::ReadSession`]
/// before the clock starts and looks every key up through it (one epoch pin
/// per `SESSION_REPIN_EVERY` lookups instead of one per lookup).
fn bench_session_gets(
    g: &mut Group<'_, '_>,
    threads: &[usize],
    order: &[Uuid],
    index: &uuidmap::Index,
) {
    let reader = || {
        let mut session = index.session();
        move |keys: &[Uuid]| {
            for k in keys {
                black_box(session.get(k));
            }
        }
    };
    for &t in threads {
        bench_readers(
            g,
            &format!("uuidmap_session/{t}t"),
            t,
            Readers {
                order,
                step: 1,
                make_reader: &reader,
            },
            None::<&mut NoWriter>,
        );
    }
}

/// As [`bench_gets`], while another thread rewrites the values of `hot` keys
/// through `update`, round after round, until the readers finish.
fn bench_gets_with_writer<G, U>(
    g: &mut Group<'_, '_>,
    map: &str,
    threads: &[usize],
    order: &[Uuid],
    hot: &[Uuid],
    get: G,
    mut update: U,
) where
    G: Fn(&Uuid) -> Option<Uuid> + Sync,
    U: FnMut(Uuid, Uuid) + Send,
{
    // Continues through `hot` across calls; the value changes every round.
    let mut next = 0usize;
    let mut writer = |stop: &AtomicBool| {
        let mut ops = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..WRITER_CHUNK {
                let i = next % hot.len();
                update(hot[i], value_for(usize::MAX - next));
                next = next.wrapping_add(1);
            }
            ops += WRITER_CHUNK as u64;
        }
        ops
    };
    bench_get_readers(g, map, threads, order, &get, Some(&mut writer));
}

/// One benchmark per thread count of readers doing single `get`s over
/// `order`, with `writer` (if any) running beside them.
fn bench_get_readers<G, W>(
    g: &mut Group<'_, '_>,
    map: &str,
    threads: &[usize],
    order: &[Uuid],
    get: &G,
    mut writer: Option<&mut W>,
) where
    G: Fn(&Uuid) -> Option<Uuid> + Sync,
    W: FnMut(&AtomicBool) -> u64 + Send,
{
    let reader = || {
        |keys: &[Uuid]| {
            for k in keys {
                black_box(get(k));
            }
        }
    };
    for &t in threads {
        bench_readers(
            g,
            &format!("{map}/{t}t"),
            t,
            Readers {
                order,
                step: 1,
                make_reader: &reader,
            },
            writer.as_deref_mut(),
        );
    }
}

/// Throughput of each benchmark, for the table printed at the end of the run.
#[derive(Default)]
struct Summary {
    rows: Vec<SummaryRow>,
}

struct SummaryRow {
    /// `<workload>/<size>/<map>/<threads>t`.
    bench: String,
    /// Lookups per second, all readers together.
    lookups: f64,
    /// Updates per second of the background writer, if there was one.
    writer: Option<f64>,
}

impl Summary {
    fn print(&self) {
        if self.rows.is_empty() {
            return;
        }
        println!(
            "\n## Lookup throughput (sum over the last {SAMPLES} measurement calls of each \
             benchmark)\n"
        );
        println!("| benchmark | lookups/s | background writer updates/s |");
        println!("| --- | ---: | ---: |");
        for r in &self.rows {
            let writer = r
                .writer
                .map_or(String::new(), |w| format!("{:.2} M/s", w / 1e6));
            println!("| {} | {:.2} M/s | {writer} |", r.bench, r.lookups / 1e6);
        }
    }
}

/// A criterion group named `<workload>/<size>`, and the summary its
/// benchmarks add to.
struct Group<'c, 's> {
    criterion: BenchmarkGroup<'c, WallTime>,
    name: String,
    summary: &'s mut Summary,
}

impl<'c, 's> Group<'c, 's> {
    fn new(c: &'c mut Criterion, name: String, summary: &'s mut Summary) -> Self {
        Group {
            criterion: c.benchmark_group(&name),
            name,
            summary,
        }
    }

    fn finish(self) {
        self.criterion.finish();
    }
}

/// The lookups of one benchmark: which keys, how many per step, and how each
/// reader thread makes its reader.
struct Readers<'a, M> {
    /// The lookup order; reader `t` of `T` cycles through the `t`-th of `T`
    /// equal contiguous shares.
    order: &'a [Uuid],
    /// Keys handed to the reader per call (one criterion iteration).
    step: usize,
    /// Makes a thread's reader, on that thread, before the clock starts.
    make_reader: &'a M,
}

/// Registers one benchmark: `threads` readers, each calling its reader on
/// `step` keys at a time; optionally `writer` runs on one more thread
/// meanwhile. One criterion iteration is one step of every reader.
fn bench_readers<M, R, W>(
    g: &mut Group<'_, '_>,
    id: &str,
    threads: usize,
    readers: Readers<'_, M>,
    mut writer: Option<&mut W>,
) where
    M: Fn() -> R + Sync,
    R: FnMut(&[Uuid]),
    W: FnMut(&AtomicBool) -> u64 + Send,
{
    assert!(
        readers.order.len() / threads >= readers.step,
        "{id}: {} keys are too few for {threads} threads of {}",
        readers.order.len(),
        readers.step
    );
    let mut cursors = vec![0usize; threads];
    let mut calls: Vec<Call> = Vec::new();
    let elements = (threads * readers.step) as u64;
    g.criterion.throughput(Throughput::Elements(elements));
    g.criterion.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let call = run_round(&readers, iters, &mut cursors, writer.as_deref_mut());
            calls.push(Call {
                lookups: iters * elements,
                ..call
            });
            call.time
        })
    });
    // Criterion's measurement calls come last; the warm-up calls before them
    // are left out.
    let measured = &calls[calls.len().saturating_sub(SAMPLES)..];
    if measured.is_empty() {
        return; // filtered out on the command line
    }
    let sum = |f: fn(&Call) -> f64| measured.iter().map(f).sum::<f64>();
    let lookups = sum(|c| c.lookups as f64) / sum(|c| c.time.as_secs_f64());
    let writer = (writer.is_some() && sum(|c| c.writer_time.as_secs_f64()) > 0.0)
        .then(|| sum(|c| c.writer_ops as f64) / sum(|c| c.writer_time.as_secs_f64()));
    g.summary.rows.push(SummaryRow {
        bench: format!("{}/{id}", g.name),
        lookups,
        writer,
    });
}

/// What one measurement call did.
#[derive(Clone, Copy, Default)]
struct Call {
    /// Lookups of all readers.
    lookups: u64,
    /// The slowest reader's time.
    time: Duration,
    /// Updates of the background writer, and its running time.
    writer_ops: u64,
    writer_time: Duration,
}

/// One criterion measurement call: spawns the readers (and the writer), lets
/// them start together, and returns the slowest reader's time for `iters`
/// steps (and the writer's work). Thread start-up happens before the barrier
/// and is not timed.
fn run_round<M, R, W>(
    readers: &Readers<'_, M>,
    iters: u64,
    cursors: &mut [usize],
    writer: Option<&mut W>,
) -> Call
where
    M: Fn() -> R + Sync,
    R: FnMut(&[Uuid]),
    W: FnMut(&AtomicBool) -> u64 + Send,
{
    let Readers {
        order,
        step,
        make_reader,
    } = *readers;
    let share = order.len() / cursors.len();
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(cursors.len() + usize::from(writer.is_some()));
    std::thread::scope(|s| {
        let background = writer.map(|w| {
            let (stop, barrier) = (&stop, &barrier);
            s.spawn(move || {
                barrier.wait();
                let start = Instant::now();
                let ops = w(stop);
                (ops, start.elapsed())
            })
        });
        let threads: Vec<_> = cursors
            .iter()
            .enumerate()
            .map(|(t, &pos)| {
                let region = &order[t * share..(t + 1) * share];
                let barrier = &barrier;
                s.spawn(move || {
                    let mut read = make_reader();
                    let mut pos = pos;
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        if pos + step > region.len() {
                            pos = 0;
                        }
                        read(&region[pos..pos + step]);
                        pos += step;
                    }
                    (start.elapsed(), pos)
                })
            })
            .collect();
        let mut call = Call::default();
        for (cursor, thread) in cursors.iter_mut().zip(threads) {
            let (elapsed, pos) = thread.join().expect("reader thread panicked");
            call.time = call.time.max(elapsed);
            *cursor = pos;
        }
        stop.store(true, Ordering::Relaxed);
        if let Some(w) = background {
            (call.writer_ops, call.writer_time) = w.join().expect("writer thread panicked");
        }
        call
    })
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(SAMPLES)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .without_plots()
}

criterion_group! {
    name = maps;
    config = config();
    targets = benches
}
criterion_main!(maps);
