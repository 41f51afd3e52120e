//! `Lookup`: many batches of lookups on one bidirectional stream.
//!
//! # Protocol
//!
//! Each request is an id of the client's choosing, packed keys, an
//! optional `min_lsn` and a consistency (`read_gate`); each answer is the id, packed values, the `found`
//! bitmap and the applied LSN, exactly as a `BatchGet` of the same keys
//! would answer. A request that cannot be answered (bad keys, too many,
//! shed by admission, its wait reached its bound) gets an answer with
//! `error` set to the status a `BatchGet` would have got, and the stream
//! goes on: one caller's bad batch does not fail the others that a client
//! multiplexes on the stream. The stream itself ends:
//!
//! - OK, once the client has half-closed and every request is answered;
//! - UNAVAILABLE, when the server starts stopping;
//! - with the transport's status, worded as for a unary call, when a
//!   request cannot be read (INVALID_ARGUMENT: not protobuf, over the
//!   message limit, bad gzip);
//! - when the client goes away (the task ends at its next step).
//!
//! # Order
//!
//! A request whose `min_lsn` is applied when it is read, and that needs
//! no read index (the usual case on a single node or the leader; a
//! linearizable read on a follower waits for one) is answered at once, in
//! the order read. One that must wait is handed to
//! a task of its own, which answers when the LSN is applied or its bound
//! passes; the requests behind it do not wait for it, so answers may come
//! out of order. At most [`MAX_WAITING`] requests of a stream wait at once;
//! beyond that the stream reads no further request until one is done. Each
//! wait is bounded by the request's deadline, the stream's and the server's
//! `max_wait` (below).
//!
//! # Deadlines
//!
//! A stream outlives the calls it carries, so its `grpc-timeout` (if any)
//! says nothing about when a request's caller gives up. Each request may
//! carry its own: `timeout_us`, counted from when the request is read, and
//! kept as a call's is ([`CallDeadline::answer_by`]: less a margin of 10 %,
//! at most 20 ms, so the answer is there before the caller stops waiting).
//! The earliest of the request's deadline, the stream's and `max_wait`
//! bounds the request's waits: for its `min_lsn` or read index, and for
//! admission (each piece's read permit). Before each piece is looked up the
//! request's own deadline is checked: once it has passed, the keys are not
//! read (the caller no longer waits for them) and the request is answered
//! DEADLINE_EXCEEDED. Either way the answer is the request's alone; the
//! stream goes on.
//!
//! # Admission
//!
//! The stream is a long poll (admission's `max_long_polls`): open, it costs
//! no CPU. Its work is admitted per request, by keys: each piece of at most
//! [`KEYS_PER_PERMIT`] keys takes a read permit, one after the other, in the
//! same newest-first queue as `Get` and `BatchGet`, and gives it back before
//! the next piece. So a stream costs admission what the `BatchGet`s it
//! replaces would, a large request cannot hold many permits, and a
//! shed piece is answered RESOURCE_EXHAUSTED (or DEADLINE_EXCEEDED after
//! waiting) for its request alone. No permit is held while a request waits
//! for its LSN, nor while its answer waits for the client.
//!
//! # Backpressure
//!
//! Answers reach the response through a channel of `CHANNEL_ANSWERS`: a
//! client that stops reading its answers stops the stream from reading its
//! requests, instead of the server buffering either.

use std::sync::Arc;
use std::time::Duration;

use metrics::Counter;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};
use uuid::Uuid;

use super::admission::Admission;
use super::config::Limits;
use super::deadline::{CallDeadline, request_wait};
use super::errors::WaitBound;
use super::grpc_status::{partition_refused, request_deadline_passed, stopping_stream};
use super::metrics::CODES;
use super::read_gate::{Consistency, ReadGate};
use super::transport_errors;
use super::wire::{pack_values, packed_keys};
use uuidmap_engine::writer::DurableIndex;
use uuidmap_partition::Ownership;
use uuidmap_proto::v1 as pb;

/// Keys looked up under one read permit: about the work of one small
/// `BatchGet` (tens of microseconds), so that a permit is never held long.
pub const KEYS_PER_PERMIT: usize = 1024;
/// Requests of one stream that may wait for their `min_lsn` at once.
pub const MAX_WAITING: usize = 256;
/// Answers waiting for the client.
const CHANNEL_ANSWERS: usize = 16;
/// The RPC's path, for the wording of transport errors.
const PATH: &str = "/uuidmap.v1.UuidMap/Lookup";
/// The longest `timeout_us` taken as given; a longer one is cut to it
/// (`max_wait` bounds every wait long before), so that no deadline
/// overflows the clock.
const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(365 * 86_400);

/// The response stream.
pub type LookupStream = ReceiverStream<Result<pb::LookupResponse, Status>>;

/// `uuidmap_lookup_requests_total{code}`.
const REQUESTS: &str = "uuidmap_lookup_requests_total";
/// `uuidmap_lookup_keys_total`.
const KEYS: &str = "uuidmap_lookup_keys_total";
/// The codes a request's answer can have: OK, or its `error`'s.
const REQUEST_CODES: [Code; 5] = [
    Code::Ok,
    Code::InvalidArgument,
    Code::DeadlineExceeded,
    Code::ResourceExhausted,
    Code::Unavailable,
];

/// The per-request series of `Lookup` (the stream itself is one call of
/// `uuidmap_rpc_*`): see `metrics` for their names. Registered once, when
/// the server starts; counting is an atomic add.
#[derive(Clone)]
pub struct LookupMetrics {
    /// By code, one per [`REQUEST_CODES`].
    requests: [(Code, Counter); 5],
    keys: Counter,
    on: bool,
}

impl LookupMetrics {
    /// The handles, from the recorder installed now; when `on` is false,
    /// handles that count nothing (a server without metrics must not add
    /// to the series of another in the same process).
    pub fn register(on: bool) -> Self {
        let counter = |name: &'static str, code: Option<Code>| match (on, code) {
            (false, _) => Counter::noop(),
            (true, None) => metrics::counter!(name),
            (true, Some(code)) => metrics::counter!(name, "code" => CODES[code as usize]),
        };
        LookupMetrics {
            requests: REQUEST_CODES.map(|c| (c, counter(REQUESTS, Some(c)))),
            keys: counter(KEYS, None),
            on,
        }
    }

    /// Counts one answered request.
    fn answered(&self, answer: &pb::LookupResponse, keys: usize) {
        let code = answer
            .error
            .as_ref()
            .map_or(Code::Ok, |e| Code::from_i32(e.code as i32));
        match self.requests.iter().find(|(c, _)| *c == code) {
            Some((_, counter)) => counter.increment(1),
            // No other code is made here; should one be, count it anyway.
            None if self.on => {
                metrics::counter!(REQUESTS, "code" => CODES[code as usize]).increment(1);
            }
            None => {}
        }
        if answer.error.is_none() {
            self.keys.increment(keys as u64);
        }
    }
}

/// What a stream's requests are answered from; its waiting requests each
/// hold a clone.
#[derive(Clone)]
pub struct Lookups {
    durable: Arc<DurableIndex>,
    /// Admits each request at its consistency.
    gate: ReadGate,
    admission: Arc<Admission>,
    metrics: LookupMetrics,
    limits: Limits,
    /// The stream's own deadline, if it has one.
    call: Option<CallDeadline>,
    stopping: watch::Receiver<bool>,
    /// On a member of a partitioned cluster: refuses keys of partitions its
    /// group does not own.
    ownership: Option<Ownership>,
}

type Answers = mpsc::Sender<Result<pb::LookupResponse, Status>>;

impl Lookups {
    /// The lookups of one stream over `durable`, admitted by `admission`,
    /// counted in `metrics`, within `limits`; `call` is the stream's deadline, and the stream
    /// ends when `stopping` becomes `true`.
    pub fn new(
        durable: Arc<DurableIndex>,
        gate: ReadGate,
        admission: Arc<Admission>,
        metrics: LookupMetrics,
        limits: &Limits,
        call: Option<CallDeadline>,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Lookups {
            durable,
            gate,
            admission,
            metrics,
            limits: limits.clone(),
            call,
            stopping,
            ownership: None,
        }
    }

    /// These lookups on a member of a partitioned cluster: each request's
    /// keys are checked against `ownership` first.
    pub fn with_ownership(mut self, ownership: Option<Ownership>) -> Self {
        self.ownership = ownership;
        self
    }

    /// Serves `requests` on a task of their own; the answers are the
    /// returned stream.
    pub fn start(self, requests: Streaming<pb::LookupRequest>) -> LookupStream {
        let (answers, rx) = mpsc::channel(CHANNEL_ANSWERS);
        tokio::spawn(self.serve(requests, answers));
        ReceiverStream::new(rx)
    }

    /// Reads the requests in order until the client half-closes, goes
    /// away, or the server stops (module docs).
    async fn serve(self, mut requests: Streaming<pb::LookupRequest>, answers: Answers) {
        let waiting = Arc::new(Semaphore::new(MAX_WAITING));
        let mut stopping = self.stopping.clone();
        loop {
            let next = tokio::select! {
                biased;
                // Err: the server is gone, which is stopping too.
                _ = stopping.wait_for(|s| *s) => None,
                () = answers.closed() => return,
                next = requests.message() => Some(next),
            };
            let Some(next) = next else {
                let _ = answers.send(Err(stopping_stream())).await;
                return;
            };
            let request = match next {
                Ok(Some(request)) => request,
                // Half-closed: the waiting requests hold their own senders,
                // so the response ends after the last of them answers.
                Ok(None) => return,
                Err(status) => {
                    let status = transport_errors::in_stream(status, PATH, &self.limits);
                    let _ = answers.send(Err(status)).await;
                    return;
                }
            };
            let id = request.id;
            let own = own_deadline(request.timeout_us, Instant::now());
            let keys = match packed_keys("keys", &request.keys, self.limits.max_batch_keys) {
                Ok(keys) => keys,
                Err(e) => {
                    if !self.reply(&answers, refused(id, e.into()), 0).await {
                        return;
                    }
                    continue;
                }
            };
            if let Some(o) = &self.ownership
                && let Err(r) = o.check_reads(keys.iter().map(|k| k.into_bytes()))
            {
                if !self
                    .reply(&answers, refused(id, partition_refused(r)), 0)
                    .await
                {
                    return;
                }
                continue;
            }
            let consistency = match Consistency::of(request.consistency, request.max_staleness_ms) {
                Ok(c) => c,
                Err(e) => {
                    if !self.reply(&answers, refused(id, e.into()), 0).await {
                        return;
                    }
                    continue;
                }
            };
            let answer = match self.gate.at_once(consistency, request.min_lsn) {
                Some(Ok(applied)) => self.answer(id, &keys, applied, own).await,
                Some(Err(status)) => refused(id, status),
                None => {
                    let Ok(slot) = Arc::clone(&waiting).acquire_owned().await else {
                        return; // never closed
                    };
                    let (lookups, answers) = (self.clone(), answers.clone());
                    tokio::spawn(async move {
                        let answer = lookups
                            .after_wait(id, &keys, consistency, request.min_lsn, own)
                            .await;
                        lookups.reply(&answers, answer, keys.len()).await;
                        drop(slot);
                    });
                    continue;
                }
            };
            if !self.reply(&answers, answer, keys.len()).await {
                return;
            }
        }
    }

    /// Counts `answer` (to a request of `keys` keys) and sends it; `false`
    /// if the client has gone away.
    async fn reply(&self, answers: &Answers, answer: pb::LookupResponse, keys: usize) -> bool {
        self.metrics.answered(&answer, keys);
        answers.send(Ok(answer)).await.is_ok()
    }

    /// The answer to a request that first waits until `min_lsn` is applied
    /// (and, on a member, for its consistency); `own` is the request's
    /// deadline.
    async fn after_wait(
        &self,
        id: u64,
        keys: &[Uuid],
        consistency: Consistency,
        min_lsn: u64,
        own: Option<CallDeadline>,
    ) -> pb::LookupResponse {
        let bound = request_wait(self.call, own, Instant::now(), self.limits.max_wait);
        match self.gate.admit(consistency, min_lsn, bound).await {
            Ok(applied) => self.answer(id, keys, applied, own).await,
            Err(status) => refused(id, status),
        }
    }

    /// Looks `keys` up, a read permit per [`KEYS_PER_PERMIT`] keys, unless
    /// the request's own deadline `own` has passed first;
    /// `applied_lsn` was read before the first lookup, after the request
    /// was admitted at its consistency.
    async fn answer(
        &self,
        id: u64,
        keys: &[Uuid],
        applied_lsn: u64,
        own: Option<CallDeadline>,
    ) -> pb::LookupResponse {
        let mut found = vec![None; keys.len()];
        let index = self.durable.index();
        let pieces = keys.chunks(KEYS_PER_PERMIT);
        for (keys, found) in pieces.zip(found.chunks_mut(KEYS_PER_PERMIT)) {
            let now = Instant::now();
            let bound = request_wait(self.call, own, now, self.limits.max_wait);
            if let (Some(own), (by, WaitBound::RequestDeadline)) = (own, bound)
                && by <= now
            {
                return refused(id, request_deadline_passed(own.timeout));
            }
            let permit = match self.admission.read_permit(bound).await {
                Ok(permit) => permit,
                Err(e) => return refused(id, Status::from(&e)),
            };
            index.get_many(keys, found);
            drop(permit);
        }
        let (values, found) = pack_values(&found);
        pb::LookupResponse {
            id,
            values,
            found,
            applied_lsn,
            error: None,
        }
    }
}

/// A request's own deadline from its `timeout_us` (0: none), read at
/// `read`.
fn own_deadline(timeout_us: u64, read: Instant) -> Option<CallDeadline> {
    (timeout_us > 0).then(|| CallDeadline {
        arrived: read,
        timeout: Duration::from_micros(timeout_us).min(MAX_REQUEST_TIMEOUT),
    })
}

/// The answer to a request that gets none: the status a `BatchGet` would
/// have got.
fn refused(id: u64, status: Status) -> pb::LookupResponse {
    // The status's text metadata (a partition refusal's owner and table
    // version), which a unary call would carry in its trailers.
    let metadata = status
        .metadata()
        .iter()
        .filter_map(|kv| match kv {
            tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned()))
            }
            tonic::metadata::KeyAndValueRef::Binary(..) => None,
        })
        .collect();
    pb::LookupResponse {
        id,
        error: Some(pb::LookupError {
            code: status.code() as i32 as u32,
            message: status.message().to_string(),
            metadata,
        }),
        ..Default::default()
    }
}
