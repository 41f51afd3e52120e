//! `Scan`: the index's entries as a server stream of packed messages.
//!
//! # Protocol
//!
//! The request is checked first (split, filter, cursor: INVALID_ARGUMENT
//! before any message), then the optional `min_lsn` wait, then the applied
//! LSN is read once: every message carries it, so that a `Watch` from it
//! sees every change the scan may have missed. Entries go out as n×32 bytes
//! (key, value), in messages of [`TARGET_ENTRIES`] (128 KiB) and at most
//! [`MAX_ENTRIES`] (256 KiB); only the last one, and a message sent because
//! a filter matches so little that a second passed without one, is smaller.
//! Every message carries the cursor that resumes after its entries (empty
//! once the split is done).
//!
//! # How, and why it is fast
//!
//! A producer on a blocking thread (copying and filtering are CPU work)
//! takes one consistent copy per segment ([`Scanner::next_segment`]: no
//! sorting) and packs it straight into the message buffer. Segments are
//! usually larger than a message; then the segment's entries are only
//! *partitioned* by key at the message boundaries (`select_nth_unstable`,
//! n·log(pieces), not a sort), so that each message's cursor can be "this
//! segment, after the greatest key sent so far" ([`ScanCursor::resume_after`]).
//! A client that resumes from such a cursor gets the segment's greater keys
//! from a new copy: an entry present throughout falls on exactly one side,
//! which keeps the index's contract (exactly once, never twice).
//!
//! The producer hands messages to the response through a channel of two:
//! a slow client stops the producer (backpressure) instead of the server
//! buffering the index, and a client that goes away drops the receiver,
//! which ends the producer at its next message. A stopping server ends the
//! scan with UNAVAILABLE between messages; the client resumes from the last
//! cursor it received.
//!
//! # What a scan costs
//!
//! The producer adds the entries of each segment copy it took, before the
//! filter, to the server's [`ScanCounters`] after each segment, so that
//! `/metrics` shows the work a filtered scan does
//! (`uuidmap_scan_entries_examined_total`), however little it returns.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prost::bytes::BytesMut;
use tokio::sync::{mpsc, watch};
use tonic::Status;
use uuid::Uuid;

use super::config::Limits;
use super::errors::RequestError;
use uuidmap_index::{Index, ScanCursor, Scanner, ValueFilter};
use uuidmap_partition::{PartitionId, PartitionSet, ScanGuard, ScanPartitions};
use uuidmap_proto::v1 as pb;

/// Entries in a message, normally (128 KiB).
pub const TARGET_ENTRIES: usize = (128 << 10) / ENTRY_BYTES;
/// Most entries in a message (256 KiB).
pub const MAX_ENTRIES: usize = (256 << 10) / ENTRY_BYTES;
/// Bytes of one packed entry: key then value.
const ENTRY_BYTES: usize = 32;
/// A scan that has found fewer than a message's worth of entries sends what
/// it has (and its cursor) after this long, so that a selective filter still
/// shows progress and can be resumed from near where it stopped.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Messages waiting for the client; more would only buffer the index.
const CHANNEL_MESSAGES: usize = 2;

/// One server's scan counters, read by `/metrics` at scrape time. Per
/// server, not in the process-global recorder, so that the count is exact
/// for each server of a process that runs several (the tests).
#[derive(Debug, Default)]
pub struct ScanCounters {
    /// Entries examined by this server's scans: every entry of each
    /// consistent segment copy, before the filter (`Scanner::examined`).
    /// Added to by each scan's producer, once per segment.
    examined: AtomicU64,
}

impl ScanCounters {
    /// Entries examined by this server's scans so far.
    pub fn examined(&self) -> u64 {
        // Relaxed: a count, read on its own; nothing else is read with it.
        self.examined.load(Ordering::Relaxed)
    }

    fn add_examined(&self, n: u64) {
        self.examined.fetch_add(n, Ordering::Relaxed);
    }
}

/// A checked scan request, ready to run.
pub struct ScanPlan {
    scanner: Scanner,
    /// Entries still allowed (`None`: no limit).
    limit: Option<u64>,
    /// Only keys of these partitions (`None`: every key).
    partitions: Option<PartitionSet>,
    /// On a partitioned member: keeps the partitions' entries in place
    /// until the scan ends.
    guard: Option<ScanGuard>,
}

impl ScanPlan {
    /// This scan limited to `held` (a partitioned member's: what its group
    /// holds, of what the request asked), whose entries stay until it ends.
    pub fn with_partitions(mut self, held: ScanPartitions) -> ScanPlan {
        self.partitions = Some(held.set);
        self.guard = Some(held.guard);
        self
    }
}

/// The response stream.
pub type ScanStream = tokio_stream::wrappers::ReceiverStream<Result<pb::ScanResponse, Status>>;

/// Checks `request` against `index` and `limits`.
pub fn plan(
    index: &Index,
    request: &pb::ScanRequest,
    limits: &Limits,
) -> Result<ScanPlan, RequestError> {
    // Checked even with a cursor (which carries its own split): a request
    // with split >= splits is wrong whatever else it says.
    let splits = request.splits.max(1);
    let fresh = index.scan_cursor(request.split, splits)?;
    let cursor = if request.cursor.is_empty() {
        fresh
    } else {
        ScanCursor::from_bytes(&request.cursor)?
    };
    let filter = filter(&request.values, limits.max_filter_values)?;
    let partitions = partitions(&request.partitions)?;
    let scanner = Scanner::new(index.clone(), cursor, filter)?;
    Ok(ScanPlan {
        scanner,
        limit: (request.limit > 0).then_some(request.limit),
        partitions,
        guard: None,
    })
}

/// The set of `partitions` (`None` when empty), each checked.
fn partitions(partitions: &[u32]) -> Result<Option<PartitionSet>, RequestError> {
    let mut set = PartitionSet::default();
    for (index, &value) in partitions.iter().enumerate() {
        let p = u16::try_from(value)
            .ok()
            .and_then(PartitionId::new)
            .ok_or(RequestError::NoSuchPartition { index, value })?;
        set.insert(p);
    }
    Ok((!set.is_empty()).then_some(set))
}

/// The filter of `values` (n×16 bytes); `None` when empty.
fn filter(values: &[u8], max: usize) -> Result<Option<ValueFilter>, RequestError> {
    if !values.len().is_multiple_of(16) {
        return Err(RequestError::FilterLength { len: values.len() });
    }
    let n = values.len() / 16;
    if n > max {
        return Err(RequestError::TooManyFilterValues { len: n, max });
    }
    Ok((n > 0).then(|| {
        ValueFilter::new(
            values
                .chunks_exact(16)
                .map(|c| Uuid::from_bytes(c.try_into().expect("chunks_exact(16)"))),
        )
    }))
}

/// Starts the producer, which counts what it examines in `counters`; the
/// stream ends after the message with the final cursor, or with an error
/// status.
pub fn start(
    plan: ScanPlan,
    applied_lsn: u64,
    stopping: watch::Receiver<bool>,
    counters: Arc<ScanCounters>,
) -> ScanStream {
    let (tx, rx) = mpsc::channel(CHANNEL_MESSAGES);
    let producer = Producer {
        scanner: plan.scanner,
        partitions: plan.partitions,
        _guard: plan.guard,
        counters,
        counted: 0,
        limit: plan.limit,
        stage: Vec::new(),
        packed: BytesMut::new(),
        applied_lsn,
        last_sent: Instant::now(),
        sent_final: false,
        tx,
        stopping,
    };
    tokio::task::spawn_blocking(move || producer.run());
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Why the producer stopped early.
enum Stop {
    /// The client went away (the receiver was dropped).
    ClientGone,
    /// The server is stopping; the client was told.
    Stopping,
}

/// The scan's producer: fills messages and sends them.
struct Producer {
    scanner: Scanner,
    /// Only keys of these partitions (`None`: every key).
    partitions: Option<PartitionSet>,
    /// Held until the producer ends (`ScanPlan::guard`).
    _guard: Option<ScanGuard>,
    /// The server's counters, added to after each segment.
    counters: Arc<ScanCounters>,
    /// How much of `scanner.examined()` is already in `counters`.
    counted: u64,
    /// Entries still allowed (`None`: no limit).
    limit: Option<u64>,
    /// The current segment's entries (reused).
    stage: Vec<(Uuid, Uuid)>,
    /// The message being filled, packed.
    packed: BytesMut,
    applied_lsn: u64,
    /// When the last message went out.
    last_sent: Instant,
    /// Whether the last message sent had the empty (final) cursor.
    sent_final: bool,
    tx: mpsc::Sender<Result<pb::ScanResponse, Status>>,
    stopping: watch::Receiver<bool>,
}

impl Producer {
    fn run(mut self) {
        // Either way the producer is done: the client was told, or is gone.
        match self.produce() {
            Ok(()) | Err(Stop::ClientGone) | Err(Stop::Stopping) => {}
        }
    }

    /// Sends the whole scan; every path ends with the final message sent or
    /// a `Stop`.
    fn produce(&mut self) -> Result<(), Stop> {
        loop {
            if self.scanner.cursor().is_done() {
                // Unless the last message already said so.
                if !self.packed.is_empty() || !self.sent_final {
                    let end = self.scanner.cursor().clone();
                    self.send(&end)?;
                }
                return Ok(());
            }
            let before = self.scanner.cursor().clone();
            self.stage.clear();
            self.scanner.next_segment(&mut self.stage);
            if let Some(set) = &self.partitions {
                self.stage.retain(|(k, _)| set.contains_key(k.as_bytes()));
            }
            // Before this segment's entries are sent: a client that has
            // the final message finds the whole scan counted.
            let examined = self.scanner.examined();
            self.counters.add_examined(examined - self.counted);
            self.counted = examined;
            let mut after_stage = self.scanner.cursor().clone();
            if let Some(left) = self.limit {
                if self.stage.len() as u64 > left {
                    // The limit ends inside this segment: keep its `left`
                    // smallest keys, and resume after the greatest of them.
                    let keep = left as usize;
                    self.stage
                        .select_nth_unstable_by_key(keep - 1, |e| e.0.as_u128());
                    self.stage.truncate(keep);
                    after_stage = before.resume_after(self.stage[keep - 1].0);
                }
                self.limit = Some(left - self.stage.len() as u64);
            }
            self.pack_segment(&before)?;
            if self.limit == Some(0) {
                // The segment's last piece is still buffered: its cursor
                // is the final one.
                return self.send(&after_stage);
            }
            if self.packed.len() >= TARGET_ENTRIES * ENTRY_BYTES
                || self.last_sent.elapsed() >= PROGRESS_EVERY
            {
                self.send(&after_stage)?;
            }
        }
    }

    /// Adds `self.stage` (the rest of the segment at `before`) to the
    /// message, sending full messages on the way. Afterwards the buffered
    /// entries, if any, end with the whole stage, so the cursor after the
    /// stage resumes after them.
    fn pack_segment(&mut self, before: &ScanCursor) -> Result<(), Stop> {
        let buffered = self.packed.len() / ENTRY_BYTES;
        let n = self.stage.len();
        if buffered + n <= MAX_ENTRIES {
            pack(&mut self.packed, &self.stage);
            return Ok(());
        }
        // Message boundaries inside the stage: top the message up to the
        // target, then whole messages; the rest stays buffered.
        let first = TARGET_ENTRIES.saturating_sub(buffered).max(1);
        let boundaries: Vec<usize> = (first..n).step_by(TARGET_ENTRIES).collect();
        partition_at(&mut self.stage, &boundaries, 0);
        let mut start = 0;
        for &b in &boundaries {
            pack(&mut self.packed, &self.stage[start..b]);
            let cursor = before.resume_after(self.stage[b - 1].0);
            self.send(&cursor)?;
            start = b;
        }
        pack(&mut self.packed, &self.stage[start..]);
        Ok(())
    }

    /// Sends the buffered entries with `cursor` (empty when done).
    fn send(&mut self, cursor: &ScanCursor) -> Result<(), Stop> {
        if *self.stopping.borrow() {
            let _ = self.tx.blocking_send(Err(Status::unavailable(
                "the server is shutting down; resume the scan from the cursor of the last \
                 message received",
            )));
            return Err(Stop::Stopping);
        }
        let message = pb::ScanResponse {
            entries: self.packed.split().freeze(),
            cursor: if cursor.is_done() {
                Default::default()
            } else {
                cursor.to_bytes().to_vec().into()
            },
            applied_lsn: self.applied_lsn,
        };
        self.last_sent = Instant::now();
        self.sent_final = cursor.is_done();
        self.tx
            .blocking_send(Ok(message))
            .map_err(|_| Stop::ClientGone)
    }
}

/// Appends `entries` to `packed`, 32 bytes each.
fn pack(packed: &mut BytesMut, entries: &[(Uuid, Uuid)]) {
    packed.reserve(entries.len() * ENTRY_BYTES);
    for (k, v) in entries {
        packed.extend_from_slice(k.as_bytes());
        packed.extend_from_slice(v.as_bytes());
    }
}

/// Reorders `v` (which starts at absolute position `offset`) so that for
/// every absolute boundary `b` in `boundaries` (ascending, inside `v`),
/// the entries before `b` have the smallest keys and `v[b - 1]` the
/// greatest of those. A partial sort: n·log(boundaries) comparisons.
fn partition_at(v: &mut [(Uuid, Uuid)], boundaries: &[usize], offset: usize) {
    if boundaries.is_empty() {
        return;
    }
    let mid = boundaries.len() / 2;
    let b = boundaries[mid] - offset;
    // `Uuid::as_u128` is big-endian: the same order as the key bytes, which
    // is the order the cursor's "after" compares in.
    v.select_nth_unstable_by_key(b - 1, |e| e.0.as_u128());
    let (left, right) = v.split_at_mut(b);
    // Keep v[b - 1] in place: recurse on the entries before it.
    partition_at(&mut left[..b - 1], &boundaries[..mid], offset);
    partition_at(right, &boundaries[mid + 1..], offset + b);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_puts_each_pieces_keys_below_the_next_and_its_greatest_last() {
        let mut v: Vec<(Uuid, Uuid)> = (0..1000u128)
            .map(|i| {
                let k = Uuid::from_u128(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
                (k, Uuid::from_u128(i))
            })
            .collect();
        let boundaries = [7, 100, 101, 500, 999];
        partition_at(&mut v, &boundaries, 0);
        let mut start = 0;
        for &b in boundaries.iter().chain([&1000]) {
            let piece_max = v[start..b].iter().map(|e| e.0).max().unwrap();
            if b < 1000 {
                assert_eq!(
                    v[b - 1].0,
                    piece_max,
                    "the boundary holds the piece's greatest"
                );
            }
            assert!(
                v[b..].iter().all(|e| e.0 > piece_max),
                "later pieces are greater"
            );
            start = b;
        }
    }

    #[test]
    fn a_filter_must_be_whole_values_within_the_limit() {
        assert!(matches!(
            filter(&[0; 17], 10),
            Err(RequestError::FilterLength { len: 17 })
        ));
        assert!(matches!(
            filter(&[0; 48], 2),
            Err(RequestError::TooManyFilterValues { len: 3, max: 2 })
        ));
        assert!(filter(&[], 2).unwrap().is_none());
        assert!(filter(&[0; 32], 2).unwrap().unwrap().matches(&Uuid::nil()));
    }
}
