//! What a lookup is made of on this machine: the memory floor and the fixed
//! per-call costs, measured so that BENCHMARKS.md can say what limits `get`.
//!
//! - `dependent random read`: a pointer chase through a shuffled cycle over
//!   a 400 MB array (each load's address depends on the previous load): the
//!   latency of one cache-and-TLB miss to DRAM.
//! - `independent random reads`: the same array read at random addresses that
//!   do not depend on each other: how many misses the core overlaps.
//! - `get, cache-resident`: `Index::get` on a 4 Ki-entry index, all hits: the
//!   work of a lookup without the miss.
//! - `epoch pin` and `ahash of a key`: two parts of that work.
//!
//! `cargo bench --bench floor` (about 20 s). Under `cargo test` it runs tiny.
//! `UUIDMAP_BENCH_THP=on|off` (default on) gives the array and the index
//! huge pages or not (see `common::THP_ENV`); the run prints the process's
//! AnonHugePages after filling the array.

use std::hint::black_box;
use std::time::Instant;

mod common;
use common::random_keys;

fn main() {
    common::thp_setup();
    let (words, steps, rounds) = if common::bench_mode() {
        (50_000_000usize, 5_000_000usize, 2_000usize)
    } else {
        (1 << 16, 1 << 12, 2)
    };
    let mut rows = Vec::new();

    // A random cyclic permutation (Sattolo), so the chase visits every word.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut next: Vec<u32> = (0..words as u32).collect();
    for i in (1..words).rev() {
        next.swap(i, (rnd() as usize) % i);
    }
    // The array's pages: huge or not as UUIDMAP_BENCH_THP says, advised
    // before the first write touches them.
    let mut chase = vec![0u64; words];
    common::advise_huge_pages(&mut chase);
    for i in 0..words {
        chase[next[i] as usize] = next[(i + 1) % words] as u64;
    }
    drop(next);
    common::print_huge_pages("floor: 400 MB array");
    let t = Instant::now();
    let mut p = 0usize;
    for _ in 0..steps {
        p = chase[p] as usize;
    }
    black_box(p);
    rows.push((
        "dependent random read (400 MB)",
        t.elapsed().as_nanos() as f64 / steps as f64,
    ));

    let addresses: Vec<usize> = (0..steps).map(|_| (rnd() as usize) % words).collect();
    let t = Instant::now();
    let mut sum = 0u64;
    for &a in &addresses {
        sum = sum.wrapping_add(chase[a]);
    }
    black_box(sum);
    rows.push((
        "independent random reads (400 MB)",
        t.elapsed().as_nanos() as f64 / steps as f64,
    ));
    drop(chase);

    let keys = random_keys(4096, common::KEY_SEED);
    let (mut writer, index) = common::uuidmap_index(keys.len());
    for k in &keys {
        writer.insert(*k, *k).expect("generated keys are valid");
    }
    let ops = (rounds * keys.len()) as f64;
    let t = Instant::now();
    let mut hits = 0usize;
    for _ in 0..rounds {
        for k in &keys {
            hits += index.get(k).is_some() as usize;
        }
    }
    assert_eq!(hits, rounds * keys.len(), "every key is present");
    rows.push((
        "get, cache-resident (4 Ki entries)",
        t.elapsed().as_nanos() as f64 / ops,
    ));

    let t = Instant::now();
    for _ in 0..rounds {
        for _ in &keys {
            black_box(crossbeam_epoch::pin());
        }
    }
    rows.push(("epoch pin + unpin", t.elapsed().as_nanos() as f64 / ops));

    let state = ahash::RandomState::with_seeds(1, 2, 3, 4);
    let t = Instant::now();
    let mut acc = 0u64;
    for _ in 0..rounds {
        for k in &keys {
            acc ^= state.hash_one(black_box(k.as_u128()));
        }
    }
    black_box(acc);
    rows.push(("ahash of a key", t.elapsed().as_nanos() as f64 / ops));

    println!("\n## What a lookup costs on this machine\n");
    println!("| measurement | ns each |\n| --- | ---: |");
    for (what, ns) in rows {
        println!("| {what} | {ns:.1} |");
    }
}
