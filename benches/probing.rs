//! Probing schemes compared on the index's slot layout, single-threaded.
//!
//! One flat array of 32-byte slots (key 16 B, value 16 B, nil key = empty),
//! keys hashed with seeded ahash and placed by multiply-shift
//! (`home = (h · capacity) >> 64`), exactly as `src/index/table.rs` does. The
//! schemes:
//!
//! - `linear`: plain linear probing; a lookup stops at the key or at the
//!   first empty slot.
//! - `robin-hood`: Robin Hood linear probing with early exit; a lookup also
//!   stops at the first resident nearer its home than the probe is to the
//!   key's (the resident's home is recomputed by hashing it, and not at the
//!   first slot), as `table.rs` does. Insertion shifts the rest of the run.
//! - `robin-hood-exit@4`: the same table, but a lookup tests for the early
//!   exit only from the fifth slot on (the first four share two cache lines,
//!   and hashing residents there costs a hit more than comparing keys).
//! - `bucket-4`: buckets of four slots (128 B, 128-aligned), probed bucket by
//!   bucket; each bucket fills left to right, so a lookup stops at a bucket's
//!   first empty slot.
//! - `robin-hood-tags` (`probing/tags.rs`): the `robin-hood` table plus a tag
//!   byte per slot in an array of its own; a lookup scans tags, eight to a
//!   word, and compares keys only where a tag matches, as `table.rs` now
//!   does. Its lines count tag lines and slot lines.
//! - `cuckoo-2x2` (`probing/cuckoo.rs`): bucketed cuckoo hashing with two
//!   candidate 64-byte buckets of two slots; a lookup reads both lines.
//!   Inserts evict along a random walk, and give up (the row is left out)
//!   when the table is too full.
//!
//! For each scheme and load factor (0.72, 0.80, 0.90: the saw a segment runs
//! through between growths; 0.95, a fuller table) the table is filled with random keys, then
//! timed: random-order lookups of stored keys (hits) and of never-stored keys
//! (misses), the best of [`REPEATS`] passes, in ns per lookup. Lookups in a
//! pass are independent, so the CPU overlaps several cache misses: these are
//! throughput, not latency, figures. Probe lengths are counted separately
//! (slots compared, and 64-byte cache lines those slots span).
//!
//! ```text
//! cargo bench --bench probing                          # 8 Mi slots (256 MiB)
//! PROBING_SLOTS=1048576 cargo bench --bench probing    # a quicker run
//! ```
//!
//! Environment: `PROBING_SLOTS` (slots per table, default 8 388 608; under
//! `cargo test` 65 536), `PROBING_LOOKUPS` (lookups per pass, default
//! 2 000 000, at most the entry count), `PROBING_HUGE_PAGES=0` to not advise
//! the table as transparent huge pages (the index does advise).

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::hint::black_box;
use std::time::{Duration, Instant};

use ahash::RandomState;

#[path = "probing/cuckoo.rs"]
mod cuckoo;
#[path = "probing/tags.rs"]
mod tags;

use cuckoo::Cuckoo;
use tags::RobinHoodTags;

/// Default slots per table: 8 Mi slots, 256 MiB, well beyond any cache.
const DEFAULT_SLOTS: usize = 8 * 1024 * 1024;

/// Slots per table when run as a test (`cargo test --benches`): only checks
/// that the benchmark works.
const TEST_SLOTS: usize = 64 * 1024;

/// Default lookups per timed pass.
const DEFAULT_LOOKUPS: usize = 2_000_000;

/// Load factors measured.
const LOADS: [f64; 4] = [0.72, 0.80, 0.90, 0.95];

/// Timed passes per measurement; the fastest counts.
const REPEATS: usize = 3;

/// Slots per bucket in the bucketized scheme.
const BUCKET: usize = 4;

/// Fixed hash seeds, so runs are comparable.
const SEEDS: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
];

/// Key words of an empty slot (the nil UUID).
const EMPTY: [u64; 2] = [0, 0];

/// A slot as the index lays it out: key words, then value words.
type Slot = [u64; 4];

/// Zeroed slot memory, aligned to 2 MiB (so buckets are 128-aligned and
/// huge pages can back it), freed on drop.
struct Slots {
    ptr: *mut Slot,
    len: usize,
}

impl Slots {
    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len.max(1) * size_of::<Slot>(), 2 << 20).expect("table layout")
    }

    fn zeroed(len: usize, huge_pages: bool) -> Slots {
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size and a power-of-two alignment.
        let ptr = unsafe { alloc_zeroed(layout) }.cast::<Slot>();
        assert!(!ptr.is_null(), "cannot allocate {} bytes", layout.size());
        if huge_pages {
            // SAFETY: the range is exactly our allocation; madvise only
            // changes how the kernel backs it. Failure (THP off) is harmless.
            unsafe { libc::madvise(ptr.cast(), layout.size(), libc::MADV_HUGEPAGE) };
        }
        Slots { ptr, len }
    }

    fn get(&self) -> &[Slot] {
        // SAFETY: `ptr` points to `len` zero-initialised slots owned by
        // `self`, and all-zero bytes are a valid `[u64; 4]`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn get_mut(&mut self) -> &mut [Slot] {
        // SAFETY: as in `get`; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc_zeroed` with this same layout.
        unsafe { dealloc(self.ptr.cast(), Self::layout(self.len)) }
    }
}

/// The hash and home computation shared by every scheme.
struct Hasher(RandomState);

impl Hasher {
    #[inline(always)]
    fn hash(&self, k: [u64; 2]) -> u64 {
        self.0.hash_one((k[0] as u128) | ((k[1] as u128) << 64))
    }

    /// Multiply-shift: the position in `0..n` of `k`'s hash.
    #[inline(always)]
    fn home(&self, k: [u64; 2], n: usize) -> usize {
        home_of_hash(self.hash(k), n)
    }
}

/// Multiply-shift of a hash already computed.
#[inline(always)]
fn home_of_hash(hash: u64, n: usize) -> usize {
    ((hash as u128 * n as u128) >> 64) as usize
}

/// What one lookup touched: slots (or tags) compared, and the distinct
/// 64-byte cache lines it read.
struct Trace {
    found: bool,
    slots: usize,
    lines: usize,
}

impl Trace {
    /// A probe over slots `first..=last` of a table of `n` (wrapping).
    fn over_slots(found: bool, slots: usize, first: usize, last: usize, n: usize) -> Trace {
        Trace {
            found,
            slots,
            lines: lines(first, last, n),
        }
    }
}

/// One probing scheme over a slot array.
trait Scheme {
    const NAME: &'static str;
    /// A scheme over a table of `slots` slots, with no entries.
    fn new(slots: usize) -> Self;
    /// Stores an absent key; false if the table cannot take it (full).
    fn insert(&mut self, t: &mut [Slot], h: &Hasher, key: [u64; 2], value: [u64; 2]) -> bool;
    /// The value stored for `key`.
    fn get(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Option<[u64; 2]>;
    /// The same lookup, counting what it touches.
    fn trace(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Trace;
}

#[inline(always)]
fn key_of(s: &Slot) -> [u64; 2] {
    [s[0], s[1]]
}

#[inline(always)]
fn next(i: usize, n: usize) -> usize {
    if i + 1 == n { 0 } else { i + 1 }
}

/// Plain linear probing.
struct Linear;

impl Scheme for Linear {
    fn new(_: usize) -> Self {
        Linear
    }

    const NAME: &'static str = "linear";

    fn insert(&mut self, t: &mut [Slot], h: &Hasher, key: [u64; 2], value: [u64; 2]) -> bool {
        let mut i = h.home(key, t.len());
        while key_of(&t[i]) != EMPTY {
            i = next(i, t.len());
        }
        t[i] = [key[0], key[1], value[0], value[1]];
        true
    }

    #[inline(always)]
    fn get(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Option<[u64; 2]> {
        let mut i = h.home(key, t.len());
        loop {
            let s = &t[i];
            let k = key_of(s);
            if k == key {
                return Some([s[2], s[3]]);
            }
            if k == EMPTY {
                return None;
            }
            i = next(i, t.len());
        }
    }

    fn trace(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Trace {
        let first = h.home(key, t.len());
        let (mut i, mut slots) = (first, 1);
        loop {
            let k = key_of(&t[i]);
            if k == key || k == EMPTY {
                return Trace::over_slots(k == key, slots, first, i, t.len());
            }
            i = next(i, t.len());
            slots += 1;
        }
    }
}

/// Robin Hood linear probing with early exit, tested from probe distance
/// `EXIT_FROM` on; `RobinHood<1>` is exactly `src/index/table.rs`.
struct RobinHood<const EXIT_FROM: usize>;

impl RobinHood<1> {
    /// Stores an absent key at its exact Robin Hood position (exit test
    /// from distance 1: the table is the same whatever `EXIT_FROM` a lookup
    /// uses), shifting the rest of the run forward by one; calls
    /// `moved(from, to, key)` for each resident shifted, last first. Returns
    /// where the key went.
    pub(crate) fn insert_shifting(
        t: &mut [Slot],
        h: &Hasher,
        key: [u64; 2],
        value: [u64; 2],
        mut moved: impl FnMut(usize, usize, [u64; 2]),
    ) -> usize {
        let n = t.len();
        let at = match Self::probe(t, h, key).0 {
            Err(at) => at,
            Ok(_) => panic!("keys are distinct"),
        };
        let mut empty = at;
        while key_of(&t[empty]) != EMPTY {
            empty = next(empty, n);
        }
        while empty != at {
            let prev = if empty == 0 { n - 1 } else { empty - 1 };
            t[empty] = t[prev];
            moved(prev, empty, key_of(&t[empty]));
            empty = prev;
        }
        t[at] = [key[0], key[1], value[0], value[1]];
        at
    }
}

impl<const EXIT_FROM: usize> RobinHood<EXIT_FROM> {
    #[inline(always)]
    fn displacement(i: usize, home: usize, n: usize) -> usize {
        if i >= home { i - home } else { i + n - home }
    }

    /// Where `key` is, or where it belongs (`Err`), and the slots compared.
    #[inline(always)]
    fn probe(t: &[Slot], h: &Hasher, key: [u64; 2]) -> (Result<usize, usize>, usize) {
        let n = t.len();
        let mut i = h.home(key, n);
        let mut probe = 0;
        loop {
            let k = key_of(&t[i]);
            if k == key {
                return (Ok(i), probe + 1);
            }
            if k == EMPTY {
                return (Err(i), probe + 1);
            }
            // At distance 0 nothing can be nearer its home: no hash needed.
            // Testing later than needed only makes a miss probe further.
            if probe >= EXIT_FROM && Self::displacement(i, h.home(k, n), n) < probe {
                return (Err(i), probe + 1);
            }
            probe += 1;
            i = next(i, n);
        }
    }
}

impl<const EXIT_FROM: usize> Scheme for RobinHood<EXIT_FROM> {
    fn new(_: usize) -> Self {
        RobinHood
    }

    const NAME: &'static str = match EXIT_FROM {
        1 => "robin-hood",
        4 => "robin-hood-exit@4",
        _ => "robin-hood-exit@?",
    };

    fn insert(&mut self, t: &mut [Slot], h: &Hasher, key: [u64; 2], value: [u64; 2]) -> bool {
        RobinHood::<1>::insert_shifting(t, h, key, value, |_, _, _| {});
        true
    }

    #[inline(always)]
    fn get(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Option<[u64; 2]> {
        match Self::probe(t, h, key).0 {
            Ok(i) => Some([t[i][2], t[i][3]]),
            Err(_) => None,
        }
    }

    fn trace(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Trace {
        let first = h.home(key, t.len());
        let (r, slots) = Self::probe(t, h, key);
        Trace::over_slots(r.is_ok(), slots, first, r.unwrap_or_else(|i| i), t.len())
    }
}

/// Four-slot buckets, probed linearly bucket by bucket.
struct Bucketed;

impl Bucketed {
    /// The slot holding `key` or the first empty slot after its home bucket
    /// (`Err`), and the slots compared.
    #[inline(always)]
    fn probe(t: &[Slot], h: &Hasher, key: [u64; 2]) -> (Result<usize, usize>, usize) {
        let buckets = t.len() / BUCKET;
        let mut b = h.home(key, buckets);
        let mut slots = 0;
        loop {
            let start = b * BUCKET;
            for (j, s) in t[start..start + BUCKET].iter().enumerate() {
                slots += 1;
                let k = key_of(s);
                if k == key {
                    return (Ok(start + j), slots);
                }
                if k == EMPTY {
                    return (Err(start + j), slots);
                }
            }
            b = next(b, buckets);
        }
    }
}

impl Scheme for Bucketed {
    fn new(_: usize) -> Self {
        Bucketed
    }

    const NAME: &'static str = "bucket-4";

    fn insert(&mut self, t: &mut [Slot], h: &Hasher, key: [u64; 2], value: [u64; 2]) -> bool {
        match Self::probe(t, h, key).0 {
            Err(i) => t[i] = [key[0], key[1], value[0], value[1]],
            Ok(_) => panic!("keys are distinct"),
        }
        true
    }

    #[inline(always)]
    fn get(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Option<[u64; 2]> {
        match Self::probe(t, h, key).0 {
            Ok(i) => Some([t[i][2], t[i][3]]),
            Err(_) => None,
        }
    }

    fn trace(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Trace {
        let first = h.home(key, t.len() / BUCKET) * BUCKET;
        let (r, slots) = Self::probe(t, h, key);
        Trace::over_slots(r.is_ok(), slots, first, r.unwrap_or_else(|i| i), t.len())
    }
}

/// SplitMix64 (testkit's): a small, fixed random stream for keys and lookup
/// orders.
struct SplitMix(uuidmap_testkit::data::SplitMix64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A random key: never the nil (empty) or max (reserved) key in practice,
    /// checked anyway.
    fn key(&mut self) -> [u64; 2] {
        loop {
            let k = [self.next(), self.next()];
            if k != EMPTY && k != [u64::MAX; 2] {
                return k;
            }
        }
    }
}

/// The value stored for a key (derived, so no second array is needed).
#[inline(always)]
fn value_of(k: [u64; 2]) -> [u64; 2] {
    [k[1] ^ 0x5555, k[0]]
}

/// One row of the results.
struct Row {
    scheme: &'static str,
    load: f64,
    entries: usize,
    insert_ns: f64,
    hit_ns: f64,
    miss_ns: f64,
    hit_slots: f64,
    miss_slots: f64,
    hit_lines: f64,
    miss_lines: f64,
    max_slots: usize,
}

/// Workload shared by every scheme at one load factor.
struct Workload<'a> {
    load: f64,
    /// Keys to insert, in insertion order.
    keys: &'a [[u64; 2]],
    /// Stored keys in random lookup order.
    hits: Vec<[u64; 2]>,
    /// Never-stored keys.
    misses: &'a [[u64; 2]],
}

/// Cache lines (64 B) spanned by slots `first..=last`, wrapping at `n`.
fn lines(first: usize, last: usize, n: usize) -> usize {
    let span = |a: usize, b: usize| (b * 32) / 64 - (a * 32) / 64 + 1;
    if last >= first {
        span(first, last)
    } else {
        span(first, n - 1) + span(0, last)
    }
}

/// Best-of-[`REPEATS`] time of looking up every key of `keys`, per lookup;
/// checks that exactly `expect_found` of them were found.
fn time_lookups<S: Scheme>(
    s: &S,
    t: &[Slot],
    h: &Hasher,
    keys: &[[u64; 2]],
    expect_found: usize,
) -> f64 {
    let mut best = Duration::MAX;
    for _ in 0..REPEATS {
        let start = Instant::now();
        let mut found = 0usize;
        let mut acc = 0u64;
        for &k in keys {
            if let Some(v) = s.get(black_box(t), h, k) {
                found += 1;
                acc ^= v[0];
            }
        }
        let elapsed = start.elapsed();
        black_box(acc);
        assert_eq!(found, expect_found, "{}: wrong lookup results", S::NAME);
        best = best.min(elapsed);
    }
    best.as_nanos() as f64 / keys.len().max(1) as f64
}

/// One scheme's row, or `None` (said on stderr) if its table filled up
/// before the load.
fn measure<S: Scheme>(table: &mut Slots, h: &Hasher, w: &Workload) -> Option<Row> {
    let t = table.get_mut();
    t.fill([0; 4]);
    let mut s = S::new(t.len());
    let start = Instant::now();
    for (n, &k) in w.keys.iter().enumerate() {
        if !s.insert(t, h, k, value_of(k)) {
            eprintln!(
                "probing: {} full at load {:.3} (wanted {:.2})",
                S::NAME,
                n as f64 / t.len() as f64,
                w.load
            );
            return None;
        }
    }
    let insert_ns = start.elapsed().as_nanos() as f64 / w.keys.len().max(1) as f64;
    let t = table.get();

    let hit_ns = time_lookups(&s, t, h, &w.hits, w.hits.len());
    let miss_ns = time_lookups(&s, t, h, w.misses, 0);

    let mut max_slots = 0;
    let mut cost = |keys: &[[u64; 2]], found: bool| {
        let (mut slots, mut touched) = (0usize, 0usize);
        for &k in keys {
            let tr = s.trace(t, h, k);
            assert_eq!(tr.found, found, "{}: trace disagrees with get", S::NAME);
            slots += tr.slots;
            touched += tr.lines;
            max_slots = max_slots.max(tr.slots);
        }
        let per = keys.len().max(1) as f64;
        (slots as f64 / per, touched as f64 / per)
    };
    let (hit_slots, hit_lines) = cost(&w.hits, true);
    let (miss_slots, miss_lines) = cost(w.misses, false);
    Some(Row {
        scheme: S::NAME,
        load: w.load,
        entries: w.keys.len(),
        insert_ns,
        hit_ns,
        miss_ns,
        hit_slots,
        miss_slots,
        hit_lines,
        miss_lines,
        max_slots,
    })
}

fn env_count(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}: not a count: {s:?}")),
        _ => default,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not.
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let slots = env_count(
        "PROBING_SLOTS",
        if bench_mode {
            DEFAULT_SLOTS
        } else {
            TEST_SLOTS
        },
    );
    // Whole buckets, so all schemes use the same number of slots.
    let slots = slots / BUCKET * BUCKET;
    assert!(slots >= 64, "PROBING_SLOTS: need at least 64 slots");
    let lookups = env_count("PROBING_LOOKUPS", DEFAULT_LOOKUPS).max(1);
    let huge_pages = std::env::var("PROBING_HUGE_PAGES").map_or(true, |v| v != "0");

    let [a, b, c, d] = SEEDS;
    let h = Hasher(RandomState::with_seeds(a, b, c, d));
    let max_entries = (slots as f64 * LOADS[LOADS.len() - 1]) as usize;
    let mut rng = SplitMix(uuidmap_testkit::data::SplitMix64(0x7072_6f62_696e_6701));
    let keys: Vec<[u64; 2]> = (0..max_entries).map(|_| rng.key()).collect();
    let misses: Vec<[u64; 2]> = (0..lookups.min(max_entries)).map(|_| rng.key()).collect();
    let mut table = Slots::zeroed(slots, huge_pages);

    eprintln!(
        "probing: {slots} slots ({} MiB), up to {lookups} lookups per pass, best of {REPEATS}, huge pages {}",
        (slots * size_of::<Slot>()) >> 20,
        if huge_pages { "advised" } else { "off" },
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    for load in LOADS {
        let n = (slots as f64 * load) as usize;
        let hits = (0..lookups.min(n))
            .map(|_| keys[(rng.next() % n as u64) as usize])
            .collect();
        let w = Workload {
            load,
            keys: &keys[..n],
            hits,
            misses: &misses[..lookups.min(n)],
        };
        rows.extend(measure::<Linear>(&mut table, &h, &w));
        rows.extend(measure::<RobinHood<1>>(&mut table, &h, &w));
        rows.extend(measure::<RobinHood<4>>(&mut table, &h, &w));
        rows.extend(measure::<Bucketed>(&mut table, &h, &w));
        rows.extend(measure::<RobinHoodTags>(&mut table, &h, &w));
        rows.extend(measure::<Cuckoo>(&mut table, &h, &w));
        eprintln!("probing: load {load:.2} done at {:.1?}", started.elapsed());
    }

    println!(
        "\n{slots} slots of 32 B ({} MiB); ns per operation (lookups: random order, \
         best of {REPEATS}); probes in slots compared and 64 B lines spanned\n",
        (slots * size_of::<Slot>()) >> 20
    );
    println!(
        "| scheme | load | entries | insert ns | hit ns | miss ns | hit slots | miss slots | hit lines | miss lines | max slots |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.2} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            r.scheme,
            r.load,
            r.entries,
            r.insert_ns,
            r.hit_ns,
            r.miss_ns,
            r.hit_slots,
            r.miss_slots,
            r.hit_lines,
            r.miss_lines,
            r.max_slots
        );
    }
}
