//! Applying replayed WAL records to the index at memory speed: presized,
//! prefetched, and on every core.
//!
//! [`apply_replay`] runs a *router* on the calling thread and one *worker*
//! per part of the split index writer (`index::PartWriter`). The router
//! takes the records in LSN order (from `wal::replay`, or any source),
//! hashes each op once, drops the ops at or below their segment's capture
//! LSN, and appends the rest to the buffer of the worker that owns the
//! op's segment; full buffers go to the worker through a bounded channel
//! (backpressure), and come back empty for reuse. Each worker first grows
//! its segments once to take their share of the WAL's estimated entries
//! (the presize: no growth during the replay, and the first touch of the
//! new memory happens on every core), then applies its buffers in the order
//! received, prefetching each op's home slot 16 ops ahead.
//!
//! With one worker ([`ReplayWorkers::Serial`]) the router applies the
//! buffers itself, on the calling thread: the same code, no threads.
//!
//! **Exactness.** Every op belongs to exactly one segment (its key's), and
//! one worker owns each segment, so a segment receives the same ops as in
//! a serial replay, filtered by the same capture LSN, in the same (LSN)
//! order: a channel is FIFO and a worker applies a buffer front to back.
//! Segments share nothing the result depends on (the entry count is a
//! sum), so the parallel result equals the serial one, table by table,
//! down to the slot layout and the stamps. ARCHITECTURE.md ("Parallel
//! replay") gives the argument with the fuzzy-capture rule.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::store::Op;
use uuidmap_index::{Index, IndexWriter, PartWriter, PreparedWrite};

/// Ops a router buffer holds before it goes to its worker (about 224 KiB).
const BUFFER_OPS: usize = 4096;

/// Buffers queued to one worker before the router waits for it.
const QUEUED_BUFFERS: usize = 8;

/// How many threads apply the replayed records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplayWorkers {
    /// One per core (`std::thread::available_parallelism`).
    #[default]
    PerCore,
    /// On the calling thread only.
    Serial,
    /// This many worker threads (at least 1; 1 is still a thread of its
    /// own, unlike `Serial`).
    Threads(usize),
}

impl std::str::FromStr for ReplayWorkers {
    type Err = String;

    /// `auto` (one per core), `serial`, or a thread count (at least 1).
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("auto") {
            return Ok(ReplayWorkers::PerCore);
        }
        if s.eq_ignore_ascii_case("serial") {
            return Ok(ReplayWorkers::Serial);
        }
        match s.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(ReplayWorkers::Threads(n)),
            _ => Err(format!(
                "{s:?} is not a replay worker count: give `auto` (one per core), `serial`, or \
                 a number of threads (at least 1)"
            )),
        }
    }
}

impl ReplayWorkers {
    /// Worker threads to start (0: apply on the calling thread).
    fn threads(self) -> usize {
        match self {
            ReplayWorkers::PerCore => std::thread::available_parallelism().map_or(1, |n| n.get()),
            ReplayWorkers::Serial => 0,
            ReplayWorkers::Threads(n) => n.max(1),
        }
    }
}

/// What one worker did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Segments it owned.
    pub segments: usize,
    /// Ops it applied.
    pub ops: u64,
    /// Time it spent growing its segments before the replay.
    pub presize: Duration,
    /// Time it spent applying ops (not waiting for them).
    pub apply: Duration,
    /// From its start to its last op.
    pub wall: Duration,
}

/// What [`apply_replay`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Ops applied (above their segment's capture LSN).
    pub ops_applied: u64,
    /// Ops skipped: at or below their segment's capture LSN (already in the
    /// snapshot).
    pub ops_skipped: u64,
    /// Entries the index was presized for (beyond those it held).
    pub presized_for: u64,
    /// Per worker (one entry, the calling thread, when serial).
    pub workers: Vec<WorkerReport>,
}

/// Applies the records that `feed` produces to the index, in the manner of
/// the module docs, and returns what `feed` returned with a report.
///
/// `feed` is called once with a sink; it must pass every record in LSN
/// order. `captures[s]` is segment `s`'s capture LSN: an op of segment `s`
/// is applied only if its LSN is above it (an empty slice: every op is
/// applied). `expected_entries` is how many entries the replay may add at
/// most (an estimate; more only costs growth).
pub fn apply_replay<R>(
    writer: &mut IndexWriter,
    index: &Index,
    captures: &[u64],
    workers: ReplayWorkers,
    expected_entries: usize,
    feed: impl FnOnce(&mut dyn FnMut(u64, &[Op])) -> R,
) -> (R, ApplyReport) {
    assert!(
        captures.is_empty() || captures.len() == index.segment_count(),
        "one capture LSN per segment"
    );
    let threads = workers.threads();
    if threads == 0 {
        return apply_serial(writer, index, captures, expected_entries, feed);
    }
    let mut report = ApplyReport {
        presized_for: expected_entries as u64,
        ..ApplyReport::default()
    };
    let parts = writer.split(threads);
    let parts_n = parts.len();
    let (free_tx, free_rx) = mpsc::channel::<Vec<PreparedWrite>>();
    let result = std::thread::scope(|scope| {
        let mut senders = Vec::with_capacity(parts_n);
        let mut handles = Vec::with_capacity(parts_n);
        for (k, part) in parts.into_iter().enumerate() {
            let (tx, rx) = mpsc::sync_channel::<Vec<PreparedWrite>>(QUEUED_BUFFERS);
            senders.push(tx);
            let free = free_tx.clone();
            let worker = std::thread::Builder::new()
                .name(format!("uuidmap-replay-{k}"))
                .spawn_scoped(scope, move || {
                    run_worker(part, expected_entries, rx.into_iter(), |b| {
                        let _ = free.send(b);
                    })
                })
                .expect("starting a replay worker thread");
            handles.push(worker);
        }
        let mut router = Router::new(index, captures, parts_n);
        let result = feed(&mut |lsn, ops| {
            router.route(lsn, ops, |k, full| {
                let empty = free_rx
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(BUFFER_OPS));
                let full = std::mem::replace(full, empty);
                // A worker that panicked drops its receiver; the scope
                // re-raises its panic when it ends.
                let _ = senders[k].send(full);
            })
        });
        for (k, buffer) in router.buffers.iter_mut().enumerate() {
            if !buffer.is_empty() {
                let _ = senders[k].send(std::mem::take(buffer));
            }
        }
        drop(senders);
        report.ops_applied = router.applied;
        report.ops_skipped = router.skipped;
        report.workers = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        result
    });
    (result, report)
}

/// [`apply_replay`] on the calling thread.
fn apply_serial<R>(
    writer: &mut IndexWriter,
    index: &Index,
    captures: &[u64],
    expected_entries: usize,
    feed: impl FnOnce(&mut dyn FnMut(u64, &[Op])) -> R,
) -> (R, ApplyReport) {
    let started = Instant::now();
    let mut part = writer.split(1).pop().expect("one part");
    let mut worker = WorkerReport {
        segments: index.segment_count(),
        ..WorkerReport::default()
    };
    part.reserve_share(expected_entries);
    worker.presize = started.elapsed();
    let mut router = Router::new(index, captures, 1);
    let result = feed(&mut |lsn, ops| {
        router.route(lsn, ops, |_, full| {
            let t = Instant::now();
            part.apply(full);
            worker.apply += t.elapsed();
            full.clear();
        })
    });
    let t = Instant::now();
    part.apply(&router.buffers[0]);
    worker.apply += t.elapsed();
    worker.ops = router.applied;
    worker.wall = started.elapsed();
    let report = ApplyReport {
        ops_applied: router.applied,
        ops_skipped: router.skipped,
        presized_for: expected_entries as u64,
        workers: vec![worker],
    };
    (result, report)
}

/// A worker: presize its segments, then apply the buffers it receives,
/// handing each back emptied.
fn run_worker(
    mut part: PartWriter<'_>,
    expected_entries: usize,
    buffers: impl Iterator<Item = Vec<PreparedWrite>>,
    give_back: impl Fn(Vec<PreparedWrite>),
) -> WorkerReport {
    let started = Instant::now();
    let mut report = WorkerReport {
        segments: part.segments().count(),
        ..WorkerReport::default()
    };
    part.reserve_share(expected_entries);
    report.presize = started.elapsed();
    for mut buffer in buffers {
        let t = Instant::now();
        part.apply(&buffer);
        report.apply += t.elapsed();
        report.ops += buffer.len() as u64;
        buffer.clear();
        give_back(buffer);
    }
    report.wall = started.elapsed();
    report
}

/// Hashes ops, filters them by capture LSN and sorts them into one buffer
/// per part.
struct Router<'a> {
    /// The index (for its hash).
    index: &'a Index,
    /// Capture LSN per segment (empty: none).
    captures: &'a [u64],
    /// Pending ops per part, in LSN order.
    buffers: Vec<Vec<PreparedWrite>>,
    /// Ops routed to a part.
    applied: u64,
    /// Ops dropped (covered by the snapshot, or a reserved key).
    skipped: u64,
}

impl<'a> Router<'a> {
    fn new(index: &'a Index, captures: &'a [u64], parts: usize) -> Self {
        Router {
            index,
            captures,
            buffers: (0..parts).map(|_| Vec::with_capacity(BUFFER_OPS)).collect(),
            applied: 0,
            skipped: 0,
        }
    }

    /// Routes one record's ops; calls `flush(part, buffer)` for each buffer
    /// that fills (the callee leaves it empty).
    #[inline]
    fn route(
        &mut self,
        lsn: u64,
        ops: &[Op],
        mut flush: impl FnMut(usize, &mut Vec<PreparedWrite>),
    ) {
        let parts = self.buffers.len();
        for op in ops {
            let w = match *op {
                Op::Put { key, ref value } => self.index.prepare_put(key, value, lsn),
                Op::Delete { key } => self.index.prepare_delete(key, lsn),
            };
            let segment = w.segment();
            if self.captures.get(segment).is_some_and(|&c| lsn <= c) {
                self.skipped += 1;
                continue;
            }
            self.applied += 1;
            let k = PartWriter::part_of(segment, parts);
            let buffer = &mut self.buffers[k];
            buffer.push(w);
            if buffer.len() >= BUFFER_OPS {
                flush(k, buffer);
            }
        }
    }
}
