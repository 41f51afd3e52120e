//! Scans running concurrently with a writer.
//!
//! The contract under test (see `uuidmap_index::scan`): an entry present for
//! the whole scan is returned exactly once; no key is ever returned twice;
//! entries inserted or removed during the scan may or may not appear.
//!
//! Three kinds of keys, told apart by their top byte:
//! - *stable* keys are inserted before the writer starts and never touched:
//!   each must appear exactly once, with its one value;
//! - *updated* keys are present throughout but the writer keeps changing their
//!   values: each must appear exactly once in an unfiltered scan, with one of
//!   the values the writer uses;
//! - *churn* keys are inserted and removed during the scan (and make tables
//!   grow under it): each may appear at most once, with a valid value.
//!
//! Every value is one of [`SHARDS`] shard UUIDs, so value filters select a
//! known part of the stable set.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_index::{Index, IndexWriter};
use uuidmap_index::{ScanCursor, Scanner, ValueFilter};

use crate::data::mix;

/// Number of distinct values ("shards").
const SHARDS: u64 = 4;

const STABLE: u8 = 1;
const UPDATED: u8 = 2;
const CHURN: u8 = 3;

/// Key `id` of kind `kind`: the kind in the top byte, the id in the low bits.
fn key(kind: u8, id: u64) -> Uuid {
    let spread = (mix(id ^ ((kind as u64) << 56)) >> 8) as u128;
    Uuid::from_u128(((kind as u128) << 120) | (spread << 64) | id as u128)
}

/// Kind and id of a key made by [`key`].
fn parse(k: Uuid) -> (u8, u64) {
    let bits = k.as_u128();
    ((bits >> 120) as u8, bits as u64)
}

/// Shard value `i % SHARDS`. Shard values differ in both 64-bit halves, so a
/// value torn between two of them is not a shard value.
fn shard(i: u64) -> Uuid {
    let i = (i % SHARDS) as u128;
    Uuid::from_u128(((0xa11c_e000 + i) << 64) | (0xb0b_0000 + i))
}

/// The value of stable key `id`.
fn stable_value(id: u64) -> Uuid {
    shard(id)
}

/// Sizes of one scenario.
#[derive(Clone, Copy, Debug)]
struct Setup {
    stable: u64,
    updated: u64,
    segments: Option<usize>,
}

fn build(setup: Setup) -> (IndexWriter, Index) {
    let mut b = Index::builder().capacity(0).huge_pages(false);
    if let Some(s) = setup.segments {
        b = b.segments(s);
    }
    let (mut w, index) = b.build().expect("valid index");
    for id in 1..=setup.stable {
        w.insert(key(STABLE, id), stable_value(id))
            .expect("valid key");
    }
    for id in 1..=setup.updated {
        w.insert(key(UPDATED, id), shard(id)).expect("valid key");
    }
    (w, index)
}

/// Checks one scan's output against the contract. `shards` is the value
/// filter the scan used (`None`: unfiltered).
fn check_scan(setup: Setup, entries: &[(Uuid, Uuid)], shards: Option<&[u64]>) {
    let passes = |v: &Uuid| {
        shards.is_none_or(|s| s.iter().any(|&i| shard(i) == *v))
            && (0..SHARDS).any(|i| shard(i) == *v)
    };
    let mut seen: HashMap<Uuid, Uuid> = HashMap::with_capacity(entries.len());
    for &(k, v) in entries {
        if let Some(old) = seen.insert(k, v) {
            panic!("key {k} returned twice (values {old} and {v})");
        }
        assert!(passes(&v), "key {k} has value {v}, not allowed here");
        match parse(k) {
            (STABLE, id) if (1..=setup.stable).contains(&id) => {
                assert_eq!(v, stable_value(id), "stable key {id} has a wrong value")
            }
            (UPDATED, id) if (1..=setup.updated).contains(&id) => {}
            (CHURN, _) => {}
            _ => panic!("scan returned key {k}, which was never inserted"),
        }
    }
    for id in 1..=setup.stable {
        let v = stable_value(id);
        if shards.is_none_or(|s| s.contains(&(id % SHARDS))) {
            assert!(
                seen.contains_key(&key(STABLE, id)),
                "stable key {id} missing"
            );
        } else {
            assert!(
                !seen.contains_key(&key(STABLE, id)),
                "filtered {v} returned"
            );
        }
    }
    if shards.is_none() {
        for id in 1..=setup.updated {
            assert!(
                seen.contains_key(&key(UPDATED, id)),
                "updated key {id} (present throughout) missing"
            );
        }
    }
}

/// A writer thread that inserts and removes churn keys (more inserts than
/// removes, so tables grow, up to a bound) and changes the values of the
/// updated keys, until stopped.
struct Churn {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    thread: thread::JoinHandle<IndexWriter>,
}

impl Churn {
    fn start(mut w: IndexWriter, setup: Setup) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let (stop2, ops2) = (stop.clone(), ops.clone());
        let thread = thread::spawn(move || {
            let mut x = 1u64;
            let (mut lo, mut hi) = (0u64, 0u64);
            let mut n = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                x = mix(x);
                // Keep the churn population bounded (at most the stable
                // set's size), so that a paged scan, whose pages each cost a
                // copy of the segment, can outpace the inserts ahead of it.
                let full = hi - lo >= setup.stable.max(1000);
                match x % 10 {
                    _ if full => {
                        lo += 1;
                        w.remove(&key(CHURN, lo));
                    }
                    0..=4 => {
                        hi += 1;
                        w.insert(key(CHURN, hi), shard(x >> 8)).expect("valid key");
                    }
                    5 | 6 if lo < hi => {
                        // Remove an old churn key (the oldest or a random one).
                        let id = if x.is_multiple_of(2) {
                            lo += 1;
                            lo
                        } else {
                            lo + 1 + (x >> 16) % (hi - lo)
                        };
                        w.remove(&key(CHURN, id));
                    }
                    7 if lo < hi => {
                        // Set (or revive) a churn key of the live range.
                        let id = lo + 1 + (x >> 16) % (hi - lo);
                        let k = key(CHURN, id);
                        let current = w.get(&k);
                        w.compare_and_set(k, current, Some(shard(x >> 8)))
                            .expect("cas with the current value succeeds");
                    }
                    _ if setup.updated > 0 => {
                        let id = 1 + (x >> 16) % setup.updated;
                        w.insert(key(UPDATED, id), shard(x >> 8))
                            .expect("valid key");
                    }
                    _ => {}
                }
                n += 1;
                ops2.store(n, Ordering::Relaxed);
            }
            w
        });
        // Let the writer get going before any scan starts.
        while ops.load(Ordering::Relaxed) < 1000 {
            thread::yield_now();
        }
        Churn { stop, ops, thread }
    }

    fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    fn finish(self) -> IndexWriter {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("writer thread")
    }
}

/// Runs `round` repeatedly for about `budget` while the churn writer runs,
/// and checks that the writer made progress during the rounds.
fn under_writes(setup: Setup, budget: Duration, mut round: impl FnMut(&Index)) {
    let (w, index) = build(setup);
    let start_bytes = index.table_bytes();
    let churn = Churn::start(w, setup);
    let before = churn.ops();
    let started = Instant::now();
    let mut rounds = 0;
    while rounds < 3 || started.elapsed() < budget {
        round(&index);
        rounds += 1;
    }
    let during = churn.ops() - before;
    let w = churn.finish();
    println!(
        "{setup:?}: {rounds} rounds, {during} writes during them; table bytes {start_bytes} -> {}",
        index.table_bytes()
    );
    assert!(during > 0, "the writer ran during the scans");
    drop(w);
}

const BUDGET: Duration = Duration::from_millis(700);

const SETUP: Setup = Setup {
    stable: 40_000,
    updated: 2_000,
    segments: None,
};

#[test]
fn full_scan_under_writes_returns_every_present_key_exactly_once() {
    for setup in [
        SETUP,
        Setup {
            segments: Some(1),
            stable: 10_000,
            updated: 500,
        },
    ] {
        under_writes(setup, BUDGET, |index| {
            let entries: Vec<_> = index.scan().collect();
            check_scan(setup, &entries, None);
        });
    }
}

/// Scans every split of `splits` on `threads` threads at once and returns
/// everything they returned.
fn parallel_split_scan(
    index: &Index,
    splits: u32,
    threads: u32,
    filter: Option<&ValueFilter>,
) -> Vec<(Uuid, Uuid)> {
    thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut out = Vec::new();
                    for split in (t..splits).step_by(threads as usize) {
                        let cursor = index.scan_cursor(split, splits).expect("valid split");
                        out.extend(
                            Scanner::new(index.clone(), cursor, filter.cloned()).expect("own"),
                        );
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("scanner thread"))
            .collect()
    })
}

#[test]
fn parallel_split_scans_under_writes_return_every_present_key_exactly_once() {
    let mut splits = [3u32, 4, 5, 100].into_iter().cycle();
    under_writes(SETUP, BUDGET, |index| {
        let entries = parallel_split_scan(index, splits.next().expect("cycle"), 3, None);
        check_scan(SETUP, &entries, None);
    });
}

#[test]
fn filtered_scans_under_writes_return_exactly_the_matching_stable_keys_once() {
    let mut round = 0u64;
    under_writes(SETUP, BUDGET, |index| {
        round += 1;
        // One shard, two shards, and all shards but one.
        let shards: Vec<u64> = match round % 3 {
            0 => vec![round % SHARDS],
            1 => vec![0, 2],
            _ => (1..SHARDS).collect(),
        };
        let filter = ValueFilter::new(shards.iter().map(|&i| shard(i)));
        let entries: Vec<_> = if round.is_multiple_of(2) {
            let cursor = index.scan_cursor(0, 1).expect("valid split");
            Scanner::new(index.clone(), cursor, Some(filter))
                .expect("own cursor")
                .collect()
        } else {
            parallel_split_scan(index, 4, 2, Some(&filter))
        };
        check_scan(SETUP, &entries, Some(&shards));
    });
}

/// Scans in pages of `limit`, making a new scanner from the cursor's bytes for
/// every page.
fn paged_scan(index: &Index, limit: usize, filter: Option<&ValueFilter>) -> Vec<(Uuid, Uuid)> {
    let mut all = Vec::new();
    let mut bytes = index.scan_cursor(0, 1).expect("valid split").to_bytes();
    let mut pages = 0;
    loop {
        let cursor = ScanCursor::from_bytes(&bytes).expect("own cursor bytes decode");
        let mut scanner = Scanner::new(index.clone(), cursor, filter.cloned()).expect("own");
        let n = scanner.next_page(limit, &mut all);
        assert!(n <= limit);
        if n == 0 {
            assert!(scanner.cursor().is_done(), "an empty page ends the scan");
            break;
        }
        bytes = scanner.cursor().to_bytes();
        pages += 1;
        assert!(pages < 1_000_000, "paged scan does not terminate");
    }
    all
}

#[test]
fn paged_scans_resumed_from_cursor_bytes_under_writes_return_every_present_key_exactly_once() {
    let mut limits = [7usize, 100, 1000, 5000].into_iter().cycle();
    let mut round = 0;
    under_writes(SETUP, BUDGET, |index| {
        round += 1;
        let limit = limits.next().expect("cycle");
        if round % 5 == 0 {
            let shards = [1, 3];
            let filter = ValueFilter::new(shards.iter().map(|&i| shard(i)));
            check_scan(
                SETUP,
                &paged_scan(index, limit, Some(&filter)),
                Some(&shards),
            );
        } else {
            check_scan(SETUP, &paged_scan(index, limit, None), None);
        }
    });
    // One big segment: every page re-copies it while the writer changes it.
    let single = Setup {
        segments: Some(1),
        stable: 20_000,
        updated: 500,
    };
    under_writes(single, BUDGET, |index| {
        let limit = limits.next().expect("cycle").max(1000);
        check_scan(single, &paged_scan(index, limit, None), None);
    });
}

/// A scanner of one 200k-entry segment finishes even though the writer
/// updates that segment in a tight loop (the hand-off bounds its retries).
#[test]
fn scan_of_a_hammered_single_segment_finishes_and_is_complete() {
    let setup = Setup {
        stable: 200_000,
        updated: 1_000,
        segments: Some(1),
    };
    let (mut w, index) = build(setup);
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, writes) = (stop.clone(), writes.clone());
        thread::spawn(move || {
            let mut x = 1u64;
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                x = mix(x);
                let id = 1 + x % setup.updated;
                w.insert(key(UPDATED, id), shard(x >> 8))
                    .expect("valid key");
                n += 1;
                if n % 64 == 0 {
                    writes.store(n, Ordering::Relaxed);
                }
            }
            w
        })
    };
    while writes.load(Ordering::Relaxed) < 1000 {
        thread::yield_now();
    }

    let (tx, rx) = mpsc::channel();
    let scanner = {
        let index = index.clone();
        thread::spawn(move || {
            let started = Instant::now();
            let mut scanner = index.scan();
            let entries: Vec<_> = scanner.by_ref().collect();
            let full = (entries, scanner.handoffs(), started.elapsed());

            // Paged: every page re-copies the segment under the same writes.
            let started = Instant::now();
            let cursor = index.scan_cursor(0, 1).expect("valid split");
            let mut scanner = Scanner::new(index.clone(), cursor, None).expect("own cursor");
            let mut paged = Vec::new();
            while scanner.next_page(40_000, &mut paged) > 0 {}
            let paged = (paged, scanner.handoffs(), started.elapsed());
            let _ = tx.send((full, paged));
        })
    };
    let result = rx.recv_timeout(Duration::from_secs(30));
    let writes_during = writes.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let ((full, full_handoffs, full_time), (paged, paged_handoffs, paged_time)) =
        result.expect("the scans finished within 30 s despite the writer");
    scanner.join().expect("scanner thread");
    writer.join().expect("writer thread");
    println!(
        "full scan: {full_time:?}, {full_handoffs} hand-offs; paged scan: {paged_time:?}, \
         {paged_handoffs} hand-offs; {writes_during} writes meanwhile"
    );
    check_scan(setup, &full, None);
    check_scan(setup, &paged, None);
}

/// What the server does with a segment larger than a message: take it whole,
/// hand it on in key-ordered pieces, and give out `resume_after(greatest key
/// so far)` as each piece's cursor. Resuming from any such cursor (through
/// its bytes), with a writer changing the segment in between, returns each
/// stable key after the cut exactly once and none before it.
#[test]
fn a_segment_resumed_after_a_key_returns_exactly_its_greater_stable_keys() {
    let setup = Setup {
        stable: 4_000,
        updated: 0,
        segments: Some(1),
    };
    let (mut w, index) = build(setup);
    let start = index.scan_cursor(0, 1).unwrap();
    let mut scanner = Scanner::new(index.clone(), start.clone(), None).unwrap();
    let mut whole = Vec::new();
    scanner.next_segment(&mut whole);
    assert!(scanner.cursor().is_done());
    let mut keys: Vec<Uuid> = whole.iter().map(|e| e.0).collect();
    keys.sort_unstable();
    for (i, cut) in keys.iter().enumerate().step_by(397) {
        // Churn in the segment between the pieces.
        for j in 0..50 {
            w.insert(key(CHURN, (i * 50 + j) as u64), shard(1)).unwrap();
        }
        let cursor = ScanCursor::from_bytes(&start.resume_after(*cut).to_bytes()).unwrap();
        let rest: Vec<(Uuid, Uuid)> = Scanner::new(index.clone(), cursor, None).unwrap().collect();
        let stable_rest: Vec<Uuid> = rest
            .iter()
            .map(|e| e.0)
            .filter(|k| parse(*k).0 == STABLE)
            .collect();
        assert!(
            rest.iter().all(|e| e.0 > *cut),
            "nothing at or before the cut"
        );
        assert_eq!(
            stable_rest.len(),
            keys.len() - i - 1,
            "every stable key after the cut"
        );
    }
}
