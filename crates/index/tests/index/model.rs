//! Model-based tests: random operation sequences are applied both to the index
//! and to a `std::collections::HashMap`, every return value is compared, and at
//! the end the whole index (length, point reads, batch reads, full, split,
//! filtered and paged scans) is compared with the model.
//!
//! Keys come from a small pool (so overwrites, removes of present keys and CAS
//! hits happen), from a few "bulk" key ranges that bulk operations fill and
//! drain (so tables grow several times, also with a single segment whose runs
//! wrap around the end of the table), from the full 128-bit space, and are
//! occasionally the reserved nil/max keys.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use uuid::Uuid;
use uuidmap_index::{CasError, Index, IndexWriter, KeyError};
use uuidmap_index::{HashSeeds, ScanCursor, Scanner, ValueFilter};

use crate::data::mix;

/// Keys of the small pool: neighbours of the reserved keys, keys that differ
/// only in one 64-bit half, and a few arbitrary ones.
const KEY_POOL: [u128; 16] = [
    1,
    2,
    u128::MAX - 1,
    u128::MAX - 2,
    1 << 64,
    (1 << 64) | 1,
    u64::MAX as u128,
    (u64::MAX as u128) << 64,
    0x0123_4567_89ab_cdef_0000_0000_0000_0001,
    0x0123_4567_89ab_cdef_0000_0000_0000_0002,
    0xdead_beef_dead_beef_dead_beef_dead_beef,
    0x8000_0000_0000_0000_0000_0000_0000_0000,
    0x7fff_ffff_ffff_ffff_ffff_ffff_ffff_ffff,
    0x5555_5555_5555_5555_5555_5555_5555_5555,
    0xaaaa_aaaa_aaaa_aaaa_aaaa_aaaa_aaaa_aaaa,
    42,
];

/// Values of the small pool; values are unrestricted, so nil and max are in it.
const VALUE_POOL: [u128; 12] = [0, u128::MAX, 1, 2, 3, 4, 5, 6, 7, 1 << 64, 1 << 100, 99];

/// Number of distinct bulk key ranges.
const BULK_RANGES: u64 = 4;

/// Keys per bulk range.
const BULK_SPAN: u64 = 2048;

/// Key `j` of bulk range `range`: never nil or max.
fn bulk_key(range: u64, j: u64) -> Uuid {
    let hi = mix(range * BULK_SPAN + j);
    Uuid::from_u128(((hi as u128) << 64) | (range * BULK_SPAN + j + 1) as u128)
}

#[derive(Clone, Debug)]
enum Key {
    Pool(usize),
    Bulk(u64, u64),
    Any(u128),
    Nil,
    Max,
}

impl Key {
    fn uuid(&self) -> Uuid {
        match *self {
            Key::Pool(i) => Uuid::from_u128(KEY_POOL[i]),
            Key::Bulk(r, j) => bulk_key(r, j),
            Key::Any(k) => Uuid::from_u128(k),
            Key::Nil => Uuid::nil(),
            Key::Max => Uuid::max(),
        }
    }
}

#[derive(Clone, Debug)]
enum Val {
    Pool(usize),
    Any(u128),
}

impl Val {
    fn uuid(&self) -> Uuid {
        match *self {
            Val::Pool(i) => Uuid::from_u128(VALUE_POOL[i]),
            Val::Any(v) => Uuid::from_u128(v),
        }
    }
}

/// The `expected` argument of a compare-and-set.
#[derive(Clone, Debug)]
enum Expect {
    /// The key's current value (or `None` when absent): always matches.
    Current,
    /// `None`: matches only when the key is absent.
    Absent,
    /// A value from the pool: matches when it happens to be the current one.
    Value(Val),
    /// A `Some` that is never the current value: never matches.
    WrongSome,
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Key, Val),
    Remove(Key),
    Cas(Key, Expect, Option<Val>),
    Get(Key),
    /// Insert `count` consecutive keys of a bulk range, starting at `start`.
    BulkInsert {
        range: u64,
        start: u64,
        count: u64,
        value: u128,
    },
    /// Remove `count` consecutive keys of a bulk range, starting at `start`.
    BulkRemove {
        range: u64,
        start: u64,
        count: u64,
    },
}

fn key_strategy() -> impl Strategy<Value = Key> {
    prop_oneof![
        8 => (0..KEY_POOL.len()).prop_map(Key::Pool),
        6 => (0..BULK_RANGES, 0..BULK_SPAN).prop_map(|(r, j)| Key::Bulk(r, j)),
        3 => any::<u128>().prop_map(Key::Any),
        1 => Just(Key::Nil),
        1 => Just(Key::Max),
    ]
}

fn val_strategy() -> impl Strategy<Value = Val> {
    prop_oneof![
        4 => (0..VALUE_POOL.len()).prop_map(Val::Pool),
        1 => any::<u128>().prop_map(Val::Any),
    ]
}

fn expect_strategy() -> impl Strategy<Value = Expect> {
    prop_oneof![
        Just(Expect::Current),
        Just(Expect::Absent),
        val_strategy().prop_map(Expect::Value),
        Just(Expect::WrongSome),
    ]
}

fn op_strategy(max_bulk: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (key_strategy(), val_strategy()).prop_map(|(k, v)| Op::Insert(k, v)),
        15 => key_strategy().prop_map(Op::Remove),
        25 => (key_strategy(), expect_strategy(), proptest::option::of(val_strategy()))
            .prop_map(|(k, e, n)| Op::Cas(k, e, n)),
        10 => key_strategy().prop_map(Op::Get),
        3 => (0..BULK_RANGES, 0..BULK_SPAN, 0..max_bulk, any::<u128>()).prop_map(
            |(range, start, count, value)| Op::BulkInsert { range, start, count, value }
        ),
        2 => (0..BULK_RANGES, 0..BULK_SPAN, 0..max_bulk)
            .prop_map(|(range, start, count)| Op::BulkRemove { range, start, count }),
    ]
}

/// How the index under test is built.
#[derive(Clone, Debug)]
struct Shape {
    capacity: usize,
    segments: Option<usize>,
    seed: u64,
}

fn shape_strategy() -> impl Strategy<Value = Shape> {
    (
        prop::sample::select(vec![0usize, 1, 10, 200, 3000]),
        prop::sample::select(vec![None, Some(1), Some(1), Some(2), Some(4), Some(16)]),
        any::<u64>(),
    )
        .prop_map(|(capacity, segments, seed)| Shape {
            capacity,
            segments,
            seed,
        })
}

fn build(shape: &Shape) -> (IndexWriter, Index) {
    let mut b = Index::builder()
        .capacity(shape.capacity)
        .seeds(HashSeeds([
            mix(shape.seed),
            mix(shape.seed ^ 1),
            mix(shape.seed ^ 2),
            mix(shape.seed ^ 3),
        ]))
        .huge_pages(false);
    if let Some(s) = shape.segments {
        b = b.segments(s);
    }
    b.build().expect("valid shape")
}

/// The index and its model side by side.
struct Harness {
    writer: IndexWriter,
    index: Index,
    model: HashMap<Uuid, Uuid>,
    /// Every key an operation named, present or not.
    touched: HashSet<Uuid>,
}

impl Harness {
    fn new(shape: &Shape) -> Self {
        let (writer, index) = build(shape);
        Harness {
            writer,
            index,
            model: HashMap::new(),
            touched: HashSet::new(),
        }
    }

    fn reserved(key: &Uuid) -> Option<KeyError> {
        if key.is_nil() {
            Some(KeyError::Nil)
        } else if key.is_max() {
            Some(KeyError::Max)
        } else {
            None
        }
    }

    /// Applies `op` to both sides and compares every answer.
    fn apply(&mut self, op: &Op) {
        match op {
            Op::Insert(k, v) => self.insert(k.uuid(), v.uuid()),
            Op::Remove(k) => self.remove(k.uuid()),
            Op::Cas(k, e, n) => self.cas(k.uuid(), e, n.as_ref().map(Val::uuid)),
            Op::Get(k) => self.check_key(k.uuid()),
            &Op::BulkInsert {
                range,
                start,
                count,
                value,
            } => {
                for j in 0..count {
                    let v = Uuid::from_u128(value.wrapping_add(j as u128));
                    self.insert(bulk_key(range, (start + j) % BULK_SPAN), v);
                }
            }
            &Op::BulkRemove {
                range,
                start,
                count,
            } => {
                for j in 0..count {
                    self.remove(bulk_key(range, (start + j) % BULK_SPAN));
                }
            }
        }
        assert_eq!(self.index.len(), self.model.len(), "len after {op:?}");
        assert_eq!(
            self.writer.len(),
            self.model.len(),
            "writer len after {op:?}"
        );
    }

    fn insert(&mut self, k: Uuid, v: Uuid) {
        self.touched.insert(k);
        let got = self.writer.insert(k, v);
        match Self::reserved(&k) {
            Some(e) => assert_eq!(got, Err(e), "insert of reserved key {k}"),
            None => assert_eq!(got, Ok(self.model.insert(k, v)), "insert {k} -> {v}"),
        }
        self.check_key(k);
    }

    fn remove(&mut self, k: Uuid) {
        self.touched.insert(k);
        assert_eq!(self.writer.remove(&k), self.model.remove(&k), "remove {k}");
        self.check_key(k);
    }

    fn cas(&mut self, k: Uuid, e: &Expect, new: Option<Uuid>) {
        self.touched.insert(k);
        let current = self.model.get(&k).copied();
        let expected = match e {
            Expect::Current => current,
            Expect::Absent => None,
            Expect::Value(v) => Some(v.uuid()),
            Expect::WrongSome => Some(match current {
                Some(c) => Uuid::from_u128(c.as_u128() ^ 1),
                None => Uuid::from_u128(7),
            }),
        };
        let got = self.writer.compare_and_set(k, expected, new);
        let want = if let Some(e) = Self::reserved(&k) {
            Err(CasError::Key(e))
        } else if expected != current {
            Err(CasError::Mismatch { current })
        } else {
            match new {
                Some(v) => self.model.insert(k, v),
                None => self.model.remove(&k),
            };
            Ok(())
        };
        assert_eq!(
            got, want,
            "cas {k}: expected {expected:?}, new {new:?}, current {current:?}"
        );
        self.check_key(k);
    }

    /// The reader and the writer both answer `k` as the model does.
    fn check_key(&self, k: Uuid) {
        let want = self.model.get(&k).copied();
        assert_eq!(self.index.get(&k), want, "reader get {k}");
        assert_eq!(self.writer.get(&k), want, "writer get {k}");
    }

    /// Compares the whole index with the model.
    fn check_all(&self) {
        let r = &self.index;
        assert_eq!(r.len(), self.model.len());
        assert_eq!(r.is_empty(), self.model.is_empty());
        assert_eq!(self.writer.is_empty(), self.model.is_empty());

        // Point and batch reads of every key ever named, present or not, plus
        // the reserved keys; odd lengths so the batch's last group is partial.
        let mut keys: Vec<Uuid> = self.touched.iter().copied().collect();
        keys.extend(self.model.keys().copied());
        keys.push(Uuid::nil());
        keys.push(Uuid::max());
        keys.extend(KEY_POOL.iter().map(|&k| Uuid::from_u128(k)));
        for k in &keys {
            self.check_key(*k);
        }
        for len in [keys.len(), keys.len().saturating_sub(1), 17, 16, 15, 1, 0] {
            let len = len.min(keys.len());
            let mut out = vec![Some(Uuid::from_u128(0xbad)); len];
            r.get_many(&keys[..len], &mut out);
            for (k, got) in keys[..len].iter().zip(&out) {
                assert_eq!(*got, self.model.get(k).copied(), "get_many {k}");
            }
        }

        // Full scan.
        assert_eq!(unique(r.scan()), self.model, "full scan");

        // Split scans, including more splits than segments.
        let segments = r.segment_count() as u32;
        let mut split_counts: Vec<u32> = (1..=5).collect();
        split_counts.extend([segments, segments + 1, 2 * segments + 3]);
        for splits in split_counts {
            let mut all = Vec::new();
            for split in 0..splits {
                let cursor = r.scan_cursor(split, splits).expect("valid split");
                all.extend(Scanner::new(r.clone(), cursor, None).expect("own cursor"));
            }
            assert_eq!(unique(all), self.model, "{splits} split scans");
        }

        // Paging re-copies the current segment for every page, so keep the
        // page count times the segment size modest on large single segments.
        let cost = self.model.len() * self.model.len() / r.segment_count();
        let small = |limit: usize| limit.max(cost / 300_000);

        // Filtered scans: few values (compared linearly), many values (hashed),
        // none, and a filter combined with splits.
        for n in [0, 1, 3, 10, VALUE_POOL.len()] {
            let values: Vec<Uuid> = VALUE_POOL[..n]
                .iter()
                .map(|&v| Uuid::from_u128(v))
                .collect();
            let want: HashMap<Uuid, Uuid> = self
                .model
                .iter()
                .filter(|(_, v)| values.contains(v))
                .map(|(k, v)| (*k, *v))
                .collect();
            let filter = ValueFilter::new(values.iter().copied());
            let cursor = r.scan_cursor(0, 1).expect("valid split");
            let got = Scanner::new(r.clone(), cursor, Some(filter.clone())).expect("own cursor");
            assert_eq!(unique(got), want, "scan filtered on {n} values");
            let mut all = Vec::new();
            for split in 0..3 {
                let cursor = r.scan_cursor(split, 3).expect("valid split");
                all.extend(Scanner::new(r.clone(), cursor, Some(filter.clone())).expect("own"));
            }
            assert_eq!(unique(all), want, "split scans filtered on {n} values");

            // Paged, resumed from cursor bytes each time.
            assert_eq!(
                paged(r, small(7), 2, Some(&filter)),
                want,
                "paged filtered scan"
            );
        }

        // Paged scans, resumed from cursor bytes each time.
        for limit in [small(1), small(2), small(7)] {
            assert_eq!(
                paged(r, limit, 1, None),
                self.model,
                "paged scan, limit {limit}"
            );
        }
        assert_eq!(paged(r, small(2), 5, None), self.model, "paged split scan");
    }
}

/// Collects scanned entries, failing if a key comes twice.
fn unique(entries: impl IntoIterator<Item = (Uuid, Uuid)>) -> HashMap<Uuid, Uuid> {
    let mut seen = HashMap::new();
    for (k, v) in entries {
        if let Some(old) = seen.insert(k, v) {
            panic!("key {k} returned twice (values {old} and {v})");
        }
    }
    seen
}

/// Scans all `splits` splits in pages of `limit`, building a new scanner from
/// the cursor's bytes for every page, and checks that every page is full
/// except the last (so the scan makes progress).
fn paged(
    index: &Index,
    limit: usize,
    splits: u32,
    filter: Option<&ValueFilter>,
) -> HashMap<Uuid, Uuid> {
    let mut all = Vec::new();
    for split in 0..splits {
        let mut bytes = index.scan_cursor(split, splits).expect("valid").to_bytes();
        loop {
            let cursor = ScanCursor::from_bytes(&bytes).expect("own cursor bytes decode");
            if cursor.is_done() {
                break;
            }
            let mut scanner =
                Scanner::new(index.clone(), cursor, filter.cloned()).expect("own cursor");
            let mut page = Vec::new();
            let n = scanner.next_page(limit, &mut page);
            assert_eq!(n, page.len(), "next_page counts what it appends");
            assert!(n <= limit, "page of {n} over limit {limit}");
            if n < limit {
                assert!(scanner.cursor().is_done(), "a short page ends the scan");
            }
            all.extend(page);
            bytes = scanner.cursor().to_bytes();
            assert!(
                all.len() <= index.len() + limit,
                "paged scan does not terminate"
            );
        }
    }
    unique(all)
}

fn run(shape: &Shape, ops: &[Op]) {
    let mut h = Harness::new(shape);
    for op in ops {
        h.apply(op);
    }
    h.check_all();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Short and medium sequences over every index shape.
    #[test]
    fn index_matches_hashmap_model(
        shape in shape_strategy(),
        ops in prop::collection::vec(op_strategy(300), 0..200),
    ) {
        run(&shape, &ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Long sequences with large bulk operations: tables grow many times and
    /// shrink back, with one segment as well as many.
    #[test]
    fn index_matches_hashmap_model_through_many_growths(
        shape in shape_strategy(),
        ops in prop::collection::vec(op_strategy(BULK_SPAN), 200..800),
    ) {
        run(&shape, &ops);
    }
}

/// One segment grown from the smallest table to tens of thousands of entries
/// (some 45 growths of 1.15×), with removals along the way, matches the model; keys
/// whose runs wrap past the end of the table are found at every size.
#[test]
fn single_segment_growing_many_times_matches_model() {
    let shape = Shape {
        capacity: 0,
        segments: Some(1),
        seed: 7,
    };
    let mut h = Harness::new(&shape);
    let start_bytes = h.index.table_bytes();
    for i in 0..40_000u64 {
        let k = Uuid::from_u128(((mix(i) as u128) << 64) | (i as u128 + 1));
        h.insert(k, Uuid::from_u128(i as u128));
        if i % 3 == 0 {
            let old = Uuid::from_u128(((mix(i / 2) as u128) << 64) | (i as u128 / 2 + 1));
            h.remove(old);
        }
        if i.is_power_of_two() {
            for k in h.model.keys() {
                h.check_key(*k);
            }
        }
    }
    assert!(
        h.index.table_bytes() > 400 * start_bytes,
        "the table grew many times"
    );
    h.check_all();
}
