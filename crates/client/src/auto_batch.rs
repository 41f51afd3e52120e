//! Auto-batching of [`crate::Client::get`]: concurrent gets on one client
//! share `Lookup` requests.
//!
//! A client has a few *lanes* (4 by default). A lane is a task that owns
//! one `Lookup` stream and has at most one request on it at a time. A get
//! goes to the next lane in turn (a queue, lock-free); the lane takes
//! everything queued, up to the cap on keys, sends it as one request, and
//! hands each caller its value when the answer comes. So a get on an idle
//! lane goes out at once, and gets that arrive while a lane's request is
//! out join its next one: batches grow with load, and there is no timer to
//! add latency when there is none.
//!
//! A failure is handed to every caller of the batch, with its class; each
//! caller's own retry loop decides what to do with it. A lane whose stream
//! failed opens a new one for its next batch, on the next healthy
//! endpoint. A caller that gave up (its deadline passed) is dropped from
//! the next batch.
//!
//! Deadlines: each caller brings the time its attempt may take (what is
//! left of its call's deadline, cut to the client's attempt timeout).
//! - A caller whose attempt ends while it waits, queued or in a batch out
//!   on the stream, is answered then ([`ClientError::AttemptTimedOut`], or
//!   [`ClientError::DeadlineExceeded`] when the attempt was all its call
//!   had left): a batch never holds a caller past its own deadline. One
//!   whose attempt ended before the batch went out is left out of it.
//! - The request carries the latest of its callers' deadlines as
//!   `timeout_us` (the stream itself carries no `grpc-timeout`: it
//!   outlives every call), so the server gives up on it when the last of
//!   them does: it answers DEADLINE_EXCEEDED, and reads nothing, rather
//!   than work for callers that are gone. That answer goes to the callers
//!   still waiting (the call's deadline to a last attempt; a retryable
//!   status, tried elsewhere, to the others); the endpoint answered, so it
//!   is not pessimized, and the stream goes on.
//! - The lane waits for an answer (and for a stream to open) until the
//!   latest of its batch's deadlines. An endpoint that lets that pass
//!   without a word is pessimized, the stream given up, and the callers
//!   still waiting get [`ClientError::AttemptTimedOut`]: a read then tries
//!   another member.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use crate::token::Token;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use uuid::Uuid;
use uuidmap_proto::v1 as pb;

use crate::call::{Failure, endpoint_failure, request, unpack_values};
use crate::endpoints::{Endpoint, Endpoints};
use crate::error::ClientError;
use crate::pool::Lease;
use pb::uuid_map_client::UuidMapClient;

/// A caller's values, in the order of its keys, and the answer's
/// `applied_lsn`.
pub(crate) type Answered = (Vec<Option<Uuid>>, u64);

/// A get (or a caller's own batch of keys) waiting in a lane.
struct Pending {
    keys: Vec<Uuid>,
    min_lsn: u64,
    consistency: crate::ReadConsistency,
    /// The time the caller's attempt may take (its attempt timeout, or
    /// what is left of its call if that is less).
    attempt: Duration,
    /// When the caller's attempt gives up: when it was queued + `attempt`.
    answer_by: Instant,
    /// `answer_by` is the call's own deadline: this attempt is its last.
    last: bool,
    /// Where the answer goes; taken when the caller is answered before
    /// the rest of its batch (its own deadline came first).
    reply: Option<oneshot::Sender<Result<Answered, Failure>>>,
}

impl Pending {
    /// Answers the caller that its attempt ended (on endpoint `on`, if its
    /// request went out; with `status` if the server said so), unless it
    /// has been answered already.
    fn time_out(&mut self, on: Option<&Endpoint>, status: Option<tonic::Status>) {
        let Some(reply) = self.reply.take() else {
            return;
        };
        let error = if self.last {
            ClientError::DeadlineExceeded {
                rpc: "Lookup",
                timeout: self.attempt,
                attempts: 1,
                last: status.map(|status| {
                    Box::new(ClientError::Status {
                        rpc: "Lookup",
                        status,
                    })
                }),
            }
        } else if let Some(status) = status {
            ClientError::Status {
                rpc: "Lookup",
                status,
            }
        } else {
            ClientError::AttemptTimedOut {
                rpc: "Lookup",
                server: on.map_or_else(
                    || "(not sent: queued in a batching lane)".to_string(),
                    |e| e.url.clone(),
                ),
                after: self.attempt,
            }
        };
        let _ = reply.send(Err(Failure {
            error,
            endpoint: on.map(|e| e.id),
            redirected: false,
        }));
    }

    /// Whether the caller still waits for this batch's answer.
    fn waits(&self) -> bool {
        self.reply.as_ref().is_some_and(|r| !r.is_closed())
    }
}

/// The lanes of one client.
#[derive(Debug)]
pub(crate) struct Lanes {
    queues: Vec<mpsc::UnboundedSender<Pending>>,
    next: AtomicUsize,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl Lanes {
    /// `n` lanes, each a task (spawned on the current runtime) that ends
    /// when the client is dropped.
    pub(crate) fn new(
        n: usize,
        max_keys: usize,
        endpoints: Arc<Endpoints>,
        token: Arc<Token>,
    ) -> Lanes {
        let queues = (0..n)
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                let lane = Lane {
                    queue: rx,
                    max_keys,
                    endpoints: Arc::clone(&endpoints),
                    token: Arc::clone(&token),
                    stream: None,
                    next_id: 0,
                    carry: None,
                };
                tokio::spawn(lane.run());
                tx
            })
            .collect();
        Lanes {
            queues,
            next: AtomicUsize::new(0),
        }
    }

    /// The values of `keys` through the next lane, in one request with
    /// whatever else is queued there; `remaining` bounds the wait, and
    /// `attempt` the lane's wait for the answer.
    pub(crate) async fn get(
        &self,
        keys: Vec<Uuid>,
        min_lsn: u64,
        consistency: crate::ReadConsistency,
        remaining: Duration,
        attempt: Duration,
    ) -> Result<Answered, Failure> {
        let (reply, answer) = oneshot::channel();
        let lane = self.next.fetch_add(1, Relaxed) % self.queues.len();
        let last = attempt >= remaining;
        let attempt = attempt.min(remaining);
        let gone = || Failure {
            error: ClientError::Status {
                rpc: "Lookup",
                status: tonic::Status::cancelled("the client is shutting down"),
            },
            endpoint: None,
            redirected: false,
        };
        self.queues[lane]
            .send(Pending {
                keys,
                min_lsn,
                consistency,
                attempt,
                answer_by: Instant::now() + attempt,
                last,
                reply: Some(reply),
            })
            .map_err(|_| gone())?;
        match tokio::time::timeout(remaining, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(gone()),
            Err(_) => Err(Failure {
                error: ClientError::DeadlineExceeded {
                    rpc: "Lookup",
                    timeout: remaining,
                    attempts: 1,
                    last: None,
                },
                endpoint: None,
                redirected: false,
            }),
        }
    }
}

/// An open `Lookup` stream.
struct Stream {
    endpoint: Arc<Endpoint>,
    /// Counts the stream on its connection.
    _lease: Lease,
    requests: mpsc::Sender<pb::LookupRequest>,
    answers: tonic::Streaming<pb::LookupResponse>,
}

struct Lane {
    queue: mpsc::UnboundedReceiver<Pending>,
    max_keys: usize,
    endpoints: Arc<Endpoints>,
    token: Arc<Token>,
    stream: Option<Stream>,
    next_id: u64,
    /// A caller's keys that did not fit in the last batch: the next one
    /// starts with them.
    carry: Option<Pending>,
}

impl Lane {
    async fn run(mut self) {
        let mut batch = Vec::new();
        loop {
            let first = match self.carry.take() {
                Some(p) => p,
                None => match self.queue.recv().await {
                    Some(p) => p,
                    None => return,
                },
            };
            let mut keys = first.keys.len();
            batch.push(first);
            while keys < self.max_keys {
                match self.queue.try_recv() {
                    Ok(p) if keys + p.keys.len() > self.max_keys => {
                        self.carry = Some(p);
                        break;
                    }
                    Ok(p) => {
                        keys += p.keys.len();
                        batch.push(p);
                    }
                    Err(_) => break,
                }
            }
            // A caller whose attempt ended while it was queued is answered
            // now and left out: the batch would not go out for it.
            let now = Instant::now();
            for p in batch.iter_mut().filter(|p| p.answer_by <= now) {
                p.time_out(self.stream.as_ref().map(|s| &*s.endpoint), None);
            }
            batch.retain(Pending::waits);
            if batch.is_empty() {
                continue;
            }
            match self.lookup(&mut batch).await {
                Ok((values, applied_lsn)) => {
                    // Each caller's values, in the order of its keys.
                    let mut rest = values.into_iter();
                    for p in batch.drain(..) {
                        let mine: Vec<Option<Uuid>> = rest.by_ref().take(p.keys.len()).collect();
                        if let Some(reply) = p.reply {
                            let _ = reply.send(Ok((mine, applied_lsn)));
                        }
                    }
                }
                Err(LaneError::Failed(error, endpoint)) => {
                    for p in batch.drain(..) {
                        let Some(reply) = p.reply else { continue };
                        let _ = reply.send(Err(Failure {
                            error: clone_error(&error),
                            endpoint,
                            redirected: false,
                        }));
                    }
                }
                // The server gave up at the request's deadline: each
                // caller still waiting gets its own timeout.
                Err(LaneError::Deadline(status, endpoint)) => {
                    for mut p in batch.drain(..) {
                        p.time_out(Some(&endpoint), Some(status.clone()));
                    }
                }
            }
        }
    }

    /// One request for `batch`'s keys on the lane's stream (opened first
    /// if need be), carrying the latest of their deadlines; a caller whose
    /// own deadline comes first is answered when it does.
    async fn lookup(&mut self, batch: &mut [Pending]) -> Result<Answered, LaneError> {
        // The latest of the callers' attempts bounds the lane's waits.
        let answer_by = batch
            .iter()
            .map(|p| p.answer_by)
            .max()
            .unwrap_or_else(Instant::now);
        if self.stream.is_none() {
            self.stream = Some(self.open(batch, answer_by).await?);
        }
        let stream = self.stream.as_mut().expect("opened");
        let endpoint = stream.endpoint.clone();
        self.next_id += 1;
        let id = self.next_id;
        let n: usize = batch.iter().map(|p| p.keys.len()).sum();
        // The strongest level of the batch serves every caller in it.
        let consistency = batch
            .iter()
            .map(|p| p.consistency)
            .reduce(crate::ReadConsistency::strongest)
            .unwrap_or_default()
            .to_wire();
        let sent_at = Instant::now();
        // At least 1 µs: 0 would mean no deadline at all.
        let timeout = answer_by
            .saturating_duration_since(sent_at)
            .max(Duration::from_micros(1));
        let request = pb::LookupRequest {
            id,
            keys: batch
                .iter()
                .flat_map(|p| p.keys.iter().flat_map(|k| *k.as_bytes()))
                .collect::<Vec<u8>>()
                .into(),
            min_lsn: batch.iter().map(|p| p.min_lsn).max().unwrap_or(0),
            consistency: consistency.0,
            max_staleness_ms: consistency.1,
            timeout_us: u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX),
        };
        let sent = stream.requests.send(request).await.is_ok();
        let answer = if sent {
            within(batch, answer_by, &endpoint, stream.answers.message()).await
        } else {
            Ok(Ok(None))
        };
        let answer = match answer {
            Ok(Ok(Some(answer))) if answer.id == id => answer,
            other => {
                // The stream is broken (or answered out of turn): give it up.
                self.stream = None;
                let status = match other {
                    Ok(Err(status)) => status,
                    Err(()) => {
                        self.endpoints.timed_out(&endpoint);
                        return Err(LaneError::Failed(
                            ClientError::AttemptTimedOut {
                                rpc: "Lookup",
                                server: endpoint.url.clone(),
                                after: answer_by.saturating_duration_since(sent_at),
                            },
                            Some(endpoint.id),
                        ));
                    }
                    Ok(Ok(Some(a))) => tonic::Status::internal(format!(
                        "a Lookup answer for request {} came while {id} was the only one out",
                        a.id
                    )),
                    Ok(Ok(None)) => tonic::Status::unavailable("the Lookup stream ended"),
                };
                let failure = endpoint_failure(&self.endpoints, &endpoint, "Lookup", status);
                return Err(LaneError::Failed(failure.error, failure.endpoint));
            }
        };
        if let Some(e) = answer.error {
            let status = lookup_status(e);
            // The server's margin: it answers by its deadline less 10 %
            // (at most 20 ms), counted from when it read the request.
            let margin = (timeout / 10).min(Duration::from_millis(20));
            if status.code() == tonic::Code::DeadlineExceeded
                && Instant::now() + margin >= answer_by
            {
                return Err(LaneError::Deadline(status, endpoint));
            }
            return Err(LaneError::Failed(
                ClientError::Status {
                    rpc: "Lookup",
                    status,
                },
                Some(endpoint.id),
            ));
        }
        self.endpoints.succeeded(&endpoint);
        endpoint.latency.record(sent_at.elapsed());
        unpack_values("Lookup", n, &answer.values, &answer.found)
            .map(|values| (values, answer.applied_lsn))
            .map_err(|e| LaneError::Failed(e, Some(endpoint.id)))
    }

    /// Opens a stream on the next healthy endpoint, waiting until
    /// `answer_by` (a caller of `batch` whose own deadline comes first is
    /// answered then).
    async fn open(
        &mut self,
        batch: &mut [Pending],
        answer_by: Instant,
    ) -> Result<Stream, LaneError> {
        let e = self.endpoints.pick(None);
        let (requests, rx) = mpsc::channel(1);
        // A stream has no deadline: each request's answer is bounded
        // instead (by its callers' attempts).
        let r = request(
            self.token.value(),
            tokio_stream::wrappers::ReceiverStream::new(rx),
            None,
        );
        let (channel, lease) = e.pool.lease();
        let started = Instant::now();
        let Ok(opened) = within(batch, answer_by, &e, UuidMapClient::new(channel).lookup(r)).await
        else {
            self.endpoints.timed_out(&e);
            return Err(LaneError::Failed(
                ClientError::AttemptTimedOut {
                    rpc: "Lookup",
                    server: e.url.clone(),
                    after: answer_by.saturating_duration_since(started),
                },
                Some(e.id),
            ));
        };
        match opened {
            Ok(answers) => Ok(Stream {
                endpoint: e.clone(),
                _lease: lease,
                requests,
                answers: answers.into_inner(),
            }),
            Err(status) => {
                let failure = endpoint_failure(&self.endpoints, &e, "Lookup", status);
                Err(LaneError::Failed(failure.error, failure.endpoint))
            }
        }
    }
}

/// Why a batch got no values.
enum LaneError {
    /// The batch failed (on the endpoint with this id, if any): each
    /// caller still waiting gets a copy.
    Failed(ClientError, Option<usize>),
    /// The endpoint answered DEADLINE_EXCEEDED at the request's deadline
    /// (the latest of its callers'): each caller still waiting gets its
    /// own timeout.
    Deadline(tonic::Status, Arc<Endpoint>),
}

/// Runs `work` until `answer_by`, the latest deadline of `batch`'s
/// callers; meanwhile each caller whose own deadline comes first is
/// answered then, as timed out on `on`. `Err` when `answer_by` passed
/// first (`work` is dropped then, and only then).
async fn within<F: Future>(
    batch: &mut [Pending],
    answer_by: Instant,
    on: &Endpoint,
    work: F,
) -> Result<F::Output, ()> {
    let mut work = std::pin::pin!(work);
    loop {
        let now = Instant::now();
        for p in batch.iter_mut().filter(|p| p.answer_by <= now) {
            p.time_out(Some(on), None);
        }
        let wake = batch
            .iter()
            .filter(|p| p.reply.is_some())
            .map(|p| p.answer_by)
            .min()
            .map_or(answer_by, |w| w.min(answer_by));
        tokio::select! {
            biased;
            out = &mut work => return Ok(out),
            () = tokio::time::sleep_until(wake) => {
                if wake >= answer_by {
                    return Err(());
                }
            }
        }
    }
}

/// A copy of a batch's error for each of its callers (a status keeps its
/// code, message and source). A lane's failures are of the kinds matched
/// here; any other is passed on in words, as a final error.
fn clone_error(e: &ClientError) -> ClientError {
    match e {
        ClientError::Status { rpc, status } => ClientError::Status {
            rpc,
            status: status.clone(),
        },
        ClientError::BadResponse { rpc, why } => ClientError::BadResponse {
            rpc,
            why: why.clone(),
        },
        ClientError::Refused { server } => ClientError::Refused {
            server: server.clone(),
        },
        ClientError::Connect { server, why } => ClientError::Connect {
            server: server.clone(),
            why: why.clone(),
        },
        ClientError::DeadlineExceeded {
            rpc,
            timeout,
            attempts,
            last,
        } => ClientError::DeadlineExceeded {
            rpc,
            timeout: *timeout,
            attempts: *attempts,
            last: last.as_deref().map(clone_error).map(Box::new),
        },
        ClientError::AttemptTimedOut { rpc, server, after } => ClientError::AttemptTimedOut {
            rpc,
            server: server.clone(),
            after: *after,
        },
        other => ClientError::BadResponse {
            rpc: "Lookup",
            why: other.to_string(),
        },
    }
}

/// A Lookup answer's error as the status a unary call would have given,
/// its metadata (a partition refusal's owner and table version) included.
fn lookup_status(e: pb::LookupError) -> tonic::Status {
    let mut metadata = tonic::metadata::MetadataMap::new();
    for (k, v) in e.metadata {
        // A key or value a header cannot hold is left out: the code and
        // the message still say what happened.
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::AsciiMetadataKey::from_bytes(k.as_bytes()),
            v.parse(),
        ) {
            metadata.insert(k, v);
        }
    }
    tonic::Status::with_metadata(tonic::Code::from_i32(e.code as i32), e.message, metadata)
}
