//! Concurrency stress: one writer thread and three reader threads.
//!
//! Every value the writer stores is `encode(key, version)`: the top 32 bits are
//! a per-key version that grows with every write to that key (removals
//! included), the low 96 bits a hash of key and version. A reader can therefore
//! check that any value it reads is one the writer wrote *for that key* (a torn
//! value mixing two writes, or a value of another key, fails the hash) and that
//! the versions it sees for a key never go backwards. Keys `1..=PERMANENT` are
//! inserted before the readers start and never removed, so a reader must find
//! them on every lookup, including while their segment grows.
//!
//! A quarter of the writes and reads go to a few hot keys, so reads often
//! overlap writes of the same slot.
//!
//! The writer starts from an empty index and widens the range of keys it
//! touches over the run, so segments grow many times under the readers.
//!
//! Longer runs: `UUIDMAP_STRESS_OPS=50000000 cargo test --release -p
//! uuidmap-index --test index stress:: -- --ignored --nocapture`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Instant;

use uuid::Uuid;
use uuidmap_index::{CasError, Index, IndexWriter};

use crate::data::mix;

/// Reader threads (the test machine has two cores; three readers plus the
/// writer oversubscribe it, which makes preemption inside reads likely).
const READERS: usize = 3;

/// Keys `1..=HOT` (permanent keys) get a quarter of all writes and reads.
const HOT: u64 = 16;

/// Keys per `get_many` batch: not a multiple of the prefetch group.
const BATCH: usize = 37;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(mix(seed) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-enough in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// The UUID of key number `k` (k >= 1): both halves vary, never nil or max.
fn key(k: u64) -> Uuid {
    Uuid::from_u128(((mix(k) as u128) << 64) | k as u128)
}

/// The low 96 bits of every value written for key `k` at `version`.
fn check_bits(k: u64, version: u32) -> u128 {
    let a = mix(k ^ ((version as u64) << 40));
    let b = mix(a ^ k.rotate_left(17));
    (((a as u128) << 32) | (b as u128 & 0xffff_ffff)) & ((1u128 << 96) - 1)
}

/// The value the writer stores for key `k` at `version`.
fn encode(k: u64, version: u32) -> Uuid {
    Uuid::from_u128(((version as u128) << 96) | check_bits(k, version))
}

/// The version of a value read for key `k`; panics if the writer never wrote
/// that value for that key.
fn decode(k: u64, v: Uuid) -> u32 {
    let bits = v.as_u128();
    let version = (bits >> 96) as u32;
    assert_eq!(
        bits & ((1u128 << 96) - 1),
        check_bits(k, version),
        "value {v} for key {k} was never written (torn or invented)"
    );
    version
}

/// Shape of one stress run.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// `Some(1)` for one table that grows many times; `None` for the default.
    segments: Option<usize>,
    /// Keys `1..=permanent` are always present.
    permanent: u64,
    /// Keys `permanent+1..=keys` come and go.
    keys: u64,
    /// Writer operations.
    ops: u64,
}

/// The writer's own record of the index, checked against every answer.
struct WriterState {
    writer: IndexWriter,
    /// Last version written per key (removals count as writes).
    version: Vec<u32>,
    /// Whether each key is present.
    present: Vec<bool>,
}

impl WriterState {
    fn current(&self, k: u64) -> Option<Uuid> {
        self.present[k as usize].then(|| encode(k, self.version[k as usize]))
    }

    /// Sets `k` to its next version; returns the new value.
    fn bump(&mut self, k: u64) -> Uuid {
        self.version[k as usize] += 1;
        encode(k, self.version[k as usize])
    }

    fn insert(&mut self, k: u64) {
        let before = self.current(k);
        let v = self.bump(k);
        assert_eq!(self.writer.insert(key(k), v), Ok(before), "insert {k}");
        self.present[k as usize] = true;
    }

    fn remove(&mut self, k: u64) {
        let before = self.current(k);
        assert_eq!(self.writer.remove(&key(k)), before, "remove {k}");
        self.version[k as usize] += 1;
        self.present[k as usize] = false;
    }

    /// A compare-and-set whose expectation is right: it must succeed.
    fn cas_hit(&mut self, k: u64, to_absent: bool) {
        let before = self.current(k);
        let new = if to_absent {
            self.version[k as usize] += 1;
            None
        } else {
            Some(self.bump(k))
        };
        assert_eq!(
            self.writer.compare_and_set(key(k), before, new),
            Ok(()),
            "cas {k}"
        );
        self.present[k as usize] = new.is_some();
    }

    /// A compare-and-set whose expectation is wrong: it must report the
    /// current value and change nothing.
    fn cas_miss(&mut self, k: u64) {
        let current = self.current(k);
        let wrong = match current {
            Some(_) => None,
            None => Some(encode(k, 0)),
        };
        let new = Some(encode(k, u32::MAX));
        assert_eq!(
            self.writer.compare_and_set(key(k), wrong, new),
            Err(CasError::Mismatch { current }),
            "failed cas {k}"
        );
    }
}

fn writer_loop(mut s: WriterState, plan: Plan) -> WriterState {
    let mut rng = Rng::new(0x5eed);
    let churn = plan.keys - plan.permanent;
    for i in 0..plan.ops {
        // The churn range widens over the run, so tables keep growing.
        let active = 1 + churn * (i + 1) / plan.ops;
        let r = rng.next();
        let permanent = r % 4 < 2;
        let k = if r.is_multiple_of(4) {
            // Hot keys: overwritten over and over while readers read them,
            // to catch a value read half before and half after a write.
            rng.range(1, HOT)
        } else if permanent {
            rng.range(1, plan.permanent)
        } else {
            plan.permanent + rng.range(1, active)
        };
        let present = s.present[k as usize];
        match rng.next() % 8 {
            0..=2 => s.insert(k),
            3 | 4 if permanent || !present => s.cas_hit(k, false),
            3 => s.remove(k),
            4 => s.cas_hit(k, true),
            5 | 6 => s.cas_hit(k, false),
            _ => s.cas_miss(k),
        }
    }
    s
}

/// What one reader saw.
#[derive(Default, Debug)]
struct ReaderReport {
    gets: u64,
    batched: u64,
    hits: u64,
}

fn reader_loop(index: Index, plan: Plan, id: u64, stop: &AtomicBool) -> ReaderReport {
    let mut rng = Rng::new(id);
    let mut last = vec![0u32; plan.keys as usize + 1];
    let mut report = ReaderReport::default();
    let mut ids = [0u64; BATCH];
    let mut keys = [Uuid::nil(); BATCH];
    let mut out = [None; BATCH];
    let mut seen = |k: u64, got: Option<Uuid>, report: &mut ReaderReport| match got {
        Some(v) => {
            let version = decode(k, v);
            assert!(
                version >= last[k as usize],
                "key {k} went back from version {} to {version}",
                last[k as usize]
            );
            last[k as usize] = version;
            report.hits += 1;
        }
        None => assert!(k > plan.permanent, "permanent key {k} missing"),
    };
    while !stop.load(Ordering::Relaxed) {
        for i in 0..64 {
            let k = if i % 4 == 0 {
                rng.range(1, HOT)
            } else {
                rng.range(1, plan.keys)
            };
            let got = index.get(&key(k));
            seen(k, got, &mut report);
            report.gets += 1;
        }
        for (id, key_slot) in ids.iter_mut().zip(keys.iter_mut()) {
            *id = rng.range(1, plan.keys);
            *key_slot = key(*id);
        }
        index.get_many(&keys, &mut out);
        for (&k, &got) in ids.iter().zip(out.iter()) {
            seen(k, got, &mut report);
        }
        report.batched += BATCH as u64;
        let len = index.len() as u64;
        assert!(
            (plan.permanent..=plan.keys).contains(&len),
            "len {len} out of range"
        );
    }
    report
}

fn run(plan: Plan) {
    let mut builder = Index::builder().capacity(0).huge_pages(false);
    if let Some(s) = plan.segments {
        builder = builder.segments(s);
    }
    let (writer, index) = builder.build().expect("valid index");
    let mut state = WriterState {
        writer,
        version: vec![0; plan.keys as usize + 1],
        present: vec![false; plan.keys as usize + 1],
    };
    for k in 1..=plan.permanent {
        state.insert(k);
    }
    let start_bytes = index.table_bytes();

    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS as u64)
        .map(|id| {
            let (index, stop) = (index.clone(), stop.clone());
            thread::spawn(move || reader_loop(index, plan, id, &stop))
        })
        .collect();
    let writer = thread::spawn(move || writer_loop(state, plan));
    let writer_result = writer.join();
    stop.store(true, Ordering::Relaxed);
    let reports: Vec<ReaderReport> = readers
        .into_iter()
        .map(|r| r.join().expect("reader saw a wrong value"))
        .collect();
    let state = writer_result.expect("writer saw a wrong answer");
    let elapsed = started.elapsed();

    let reads: u64 = reports.iter().map(|r| r.gets + r.batched).sum();
    println!(
        "{plan:?}: {} writes and {reads} reads in {elapsed:?}; table bytes {start_bytes} -> {}; {reports:?}",
        plan.ops,
        index.table_bytes()
    );
    assert!(
        reports.iter().all(|r| r.hits > 0 && r.batched > 0),
        "every reader read during the run"
    );
    assert!(
        index.table_bytes() > 4 * start_bytes,
        "tables grew during the run"
    );

    // After the run the index holds exactly what the writer believes.
    let mut len = 0;
    for k in 1..=plan.keys {
        assert_eq!(index.get(&key(k)), state.current(k), "final value of {k}");
        len += state.present[k as usize] as usize;
    }
    assert_eq!(index.len(), len);
    assert_eq!(index.scan().count(), len);
}

/// Ops per run, from `UUIDMAP_STRESS_OPS` when set.
fn ops(default: u64) -> u64 {
    std::env::var("UUIDMAP_STRESS_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn readers_see_only_written_values_and_versions_never_go_back_while_segments_grow() {
    run(Plan {
        segments: None,
        permanent: 20_000,
        keys: 300_000,
        ops: 4_000_000,
    });
}

#[test]
fn readers_see_only_written_values_while_a_single_table_grows_many_times() {
    run(Plan {
        segments: Some(1),
        permanent: 2_000,
        keys: 60_000,
        ops: 1_000_000,
    });
}

/// The same properties over a much longer run. Run with
/// `UUIDMAP_STRESS_OPS=50000000 cargo test --release -p uuidmap-index --test index
/// stress:: -- --ignored`.
#[test]
#[ignore = "long: run explicitly with --ignored"]
fn long_run_readers_see_only_written_values() {
    run(Plan {
        segments: None,
        permanent: 100_000,
        keys: 3_000_000,
        ops: ops(50_000_000),
    });
    run(Plan {
        segments: Some(1),
        permanent: 10_000,
        keys: 500_000,
        ops: ops(50_000_000) / 4,
    });
}
