//! Shared set-up for the uuidmap benchmarks: the allocator, the sizes to run,
//! and the key sets.
//!
//! Every benchmark of one run uses the same keys (a fixed seed), so the maps
//! are compared on identical inputs. Keys are v4-like random UUIDs; values are
//! random too, derived from the key's position so they need no second array.
//!
//! Each bench binary uses a subset of these helpers, hence the `dead_code`
//! allowance below.
#![allow(dead_code)]

pub mod count;
pub mod histogram;

pub use count::parse_count;

use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng, rngs::Xoshiro256PlusPlus};
use uuid::Uuid;

/// jemalloc serves every allocation, so memory figures come from its
/// statistics and every map allocates through the same allocator.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Environment variable with the entry counts to run, comma-separated
/// (`1000000,10000000`, `1M,10M` or `100k`).
pub const SIZES_ENV: &str = "UUIDMAP_BENCH_SIZES";

/// Seed of the stored keys.
pub const KEY_SEED: u64 = 0x7575_6964_6d61_7001;

/// Seed of the keys that are never stored (misses, keys inserted later).
pub const OTHER_KEY_SEED: u64 = 0x7575_6964_6d61_7002;

/// Seed of lookup orders.
pub const ORDER_SEED: u64 = 0x7575_6964_6d61_7003;

/// The hasher given to every peer map: ahash, as uuidmap itself hashes with
/// (seeded) ahash, so the comparison is between table designs rather than
/// hash functions.
pub type PeerHasher = ahash::RandomState;

/// Entry count used when the binary runs as a test (`cargo test --benches`
/// or `--all-targets`) rather than as a benchmark, so that a test run only
/// checks that the benchmark works.
pub const TEST_SIZE: usize = 20_000;

/// Whether this is a benchmark run: `cargo bench` passes `--bench`; `cargo
/// test` does not.
pub fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// The sizes to run: `UUIDMAP_BENCH_SIZES` if set, else `default` (or
/// [`TEST_SIZE`] under `cargo test`). Prints which sizes were chosen and where
/// they came from.
pub fn bench_sizes(bench: &str, default: &[usize]) -> Vec<usize> {
    let (sizes, from) = match std::env::var(SIZES_ENV) {
        Ok(s) if !s.trim().is_empty() => (
            s.split(',')
                .map(|p| {
                    parse_count(p).unwrap_or_else(|| panic!("{SIZES_ENV}: bad entry count {p:?}"))
                })
                .collect::<Vec<_>>(),
            SIZES_ENV,
        ),
        _ if !bench_mode() => (vec![TEST_SIZE], "test mode: no --bench argument"),
        _ => (default.to_vec(), "default"),
    };
    assert!(
        sizes.iter().all(|&n| n > 0),
        "{SIZES_ENV}: sizes must be positive"
    );
    let shown: Vec<String> = sizes.iter().map(|&n| label(n)).collect();
    eprintln!("{bench}: sizes {} ({from})", shown.join(", "));
    sizes
}

/// A short name for an entry count: `10M`, `100k`, `1234`.
pub fn label(n: usize) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1_000 && n.is_multiple_of(1_000) {
        format!("{}k", n / 1_000)
    } else {
        n.to_string()
    }
}

/// `n` random v4-like UUIDs from `seed` (122 random bits: version 4, RFC 4122
/// variant), so never the nil or max UUID that the index rejects.
///
/// Collisions among 122-bit keys are so unlikely at these sizes (p < 10^-22
/// at 20M) that the keys are treated as distinct.
pub fn random_keys(n: usize, seed: u64) -> Vec<Uuid> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let key =
                uuid::Builder::from_random_bytes(rng.random::<u128>().to_le_bytes()).into_uuid();
            debug_assert!(!key.is_nil() && !key.is_max());
            key
        })
        .collect()
}

/// The value stored for the `i`-th key: a random UUID derived from `i`
/// (splitmix64), the same in every map.
pub fn value_for(i: usize) -> Uuid {
    let lo = splitmix64(i as u64);
    let hi = splitmix64(lo);
    Uuid::from_u64_pair(hi, lo)
}

/// The tests' and benches' one generator (testkit's splitmix64).
use uuidmap_testkit::data::mix as splitmix64;

/// `keys` in a random order, for lookups that jump around memory rather than
/// follow insertion order.
pub fn shuffled(keys: &[Uuid], seed: u64) -> Vec<Uuid> {
    let mut order = keys.to_vec();
    order.shuffle(&mut Xoshiro256PlusPlus::seed_from_u64(seed));
    order
}

/// `rate` per second as `12.3 M/s`.
pub fn per_second(count: usize, elapsed: Duration) -> String {
    format!("{:.2} M/s", count as f64 / elapsed.as_secs_f64() / 1e6)
}

/// Environment variable choosing the page size of every side of a
/// side-by-side bench: `on` (default) or `off`.
///
/// - `on`: uuidmap's tables ask for transparent huge pages (its default,
///   `madvise(MADV_HUGEPAGE)`), and so does jemalloc for every peer
///   (`_RJEM_MALLOC_CONF=thp:always`, which makes jemalloc advise its own
///   mappings), and `floor`'s array is advised too.
/// - `off`: uuidmap is built with `huge_pages(false)`, jemalloc runs with
///   `thp:never`, and `floor`'s array is advised `MADV_NOHUGEPAGE`.
///
/// Either way both sides get the same page size (with the system's THP
/// setting at `madvise` or `always`); [`print_huge_pages`] shows what the
/// process really got.
pub const THP_ENV: &str = "UUIDMAP_BENCH_THP";

/// The environment variable tikv-jemallocator's (prefixed) jemalloc reads
/// its options from at start-up.
const JEMALLOC_CONF_ENV: &str = "_RJEM_MALLOC_CONF";

/// Whether this run uses transparent huge pages ([`THP_ENV`]).
pub fn thp_on() -> bool {
    match std::env::var(THP_ENV).as_deref() {
        Ok("off") => false,
        Ok("on") | Err(_) => true,
        Ok(other) => panic!("{THP_ENV}: expected on or off, not {other:?}"),
    }
}

/// Makes jemalloc's THP option match [`THP_ENV`]. jemalloc reads its
/// options only when the process starts, so when `_RJEM_MALLOC_CONF` does not
/// already say so, the bench re-executes itself with it set (before anything
/// is measured). Call first thing in `main`.
pub fn thp_setup() {
    let want = if thp_on() { "thp:always" } else { "thp:never" };
    let conf = std::env::var(JEMALLOC_CONF_ENV).unwrap_or_default();
    if !conf.split(',').any(|o| o == want) {
        use std::os::unix::process::CommandExt;
        let conf = if conf.is_empty() {
            want.to_string()
        } else {
            format!("{conf},{want}")
        };
        let exe = std::env::current_exe().expect("the bench's own path");
        let err = std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env(JEMALLOC_CONF_ENV, conf)
            .exec();
        panic!("re-executing with {JEMALLOC_CONF_ENV}: {err}");
    }
    eprintln!(
        "{THP_ENV}={}: {JEMALLOC_CONF_ENV}={conf}, uuidmap huge_pages({}); system THP: {}",
        if thp_on() { "on" } else { "off" },
        thp_on(),
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default()
            .trim()
    );
}

/// A presized uuidmap index with huge pages as [`THP_ENV`] says.
pub fn uuidmap_index(capacity: usize) -> (uuidmap::IndexWriter, uuidmap::Index) {
    uuidmap::Index::builder()
        .capacity(capacity)
        .huge_pages(thp_on())
        .build()
        .expect("a valid index configuration")
}

/// `AnonHugePages` of this process in KiB (from `/proc/self/smaps_rollup`).
pub fn anon_huge_pages_kib() -> Option<u64> {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Prints how much of the process's anonymous memory is in huge pages, so
/// that a run shows the THP mode took effect (both sides: print it after
/// building each map).
pub fn print_huge_pages(what: &str) {
    match anon_huge_pages_kib() {
        Some(kib) => eprintln!(
            "{what}: AnonHugePages {} MiB ({THP_ENV}={})",
            kib / 1024,
            if thp_on() { "on" } else { "off" }
        ),
        None => eprintln!("{what}: AnonHugePages unknown (no /proc/self/smaps_rollup)"),
    }
}

/// Advises the pages of `buf` (before they are first touched) as huge or
/// not, as [`THP_ENV`] says.
pub fn advise_huge_pages<T>(buf: &mut [T]) {
    const PAGE: usize = 4096;
    let start = buf.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(buf);
    let aligned = start.next_multiple_of(PAGE);
    if end <= aligned {
        return;
    }
    let advice = if thp_on() {
        libc::MADV_HUGEPAGE
    } else {
        libc::MADV_NOHUGEPAGE
    };
    // SAFETY: [aligned, end) lies within `buf`, which this process owns;
    // madvise with these advices changes only how pages are backed, never
    // their contents.
    let rc = unsafe { libc::madvise(aligned as *mut libc::c_void, end - aligned, advice) };
    if rc != 0 {
        eprintln!("madvise: {}", std::io::Error::last_os_error());
    }
}
