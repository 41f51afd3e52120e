//! [`Client`]: the calls, each run through one retry loop ([`Client::run`]).
//!
//! The loop, for every call:
//! 1. The call's deadline is fixed once: now + its timeout. Every attempt
//!    carries what is left of it as `grpc-timeout`, and the loop never
//!    sleeps or sends past it.
//! 2. An attempt goes to an endpoint ([`crate::endpoints`]); a failure that
//!    says the endpoint is unreachable pessimizes it, and the retry goes
//!    elsewhere.
//! 3. A failure is retried only if its class allows it for this call (see
//!    [`crate::error`]): reads always, Put/Delete/Write after an unknown
//!    outcome only when marked idempotent ([`Client::idempotent`]),
//!    CompareAndSet never after an unknown outcome (it reads the key and
//!    answers [`ClientError::Undetermined`]).
//! 4. Before retry n it waits the backoff of the failure's class, and takes
//!    a token from the retry budget; with none left, or with attempts or
//!    time used up, the last failure is the answer.
//! 5. A write goes to the replica group's leader first, when the client
//!    knows it: the endpoint that took the last write, or the one a member
//!    named in its refusal (`UNAVAILABLE` with `uuidmap-leader`). The
//!    first such redirect of a call is retried at once on that endpoint,
//!    without a backoff or a budget token; a later one waits as any fast
//!    retry does.
//! 6. Each attempt holds a permit of the client's in-flight limit (a
//!    [`LifoSemaphore`]: excess callers wait newest first, until their
//!    deadline); the permit is given back before any backoff.
//!
//! Each call runs in a `tracing` span (`uuidmap_client_call`, with its
//! `rpc`). Counted in the `metrics` crate's recorder, when the application
//! installs one: `uuidmap_client_calls_total{rpc}`,
//! `uuidmap_client_call_seconds{rpc,outcome}` (a histogram),
//! `uuidmap_client_retries_total{rpc,class}`,
//! `uuidmap_client_budget_exhausted_total`, `uuidmap_client_pessimized_total`;
//! always in [`ClientCounters`] (calls, attempts, retries); each retry is
//! logged at debug (`tracing`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::token::Token;
use tonic::transport::Channel;
use tracing::Instrument;
use uuidmap_index::sync::{AcquireError, LifoSemaphore};
use uuidmap_proto::v1 as pb;

use crate::attempt_policy::ReadAttempts;
use crate::auto_batch::Lanes;
use crate::budget::RetryBudget;
use crate::call::{Failure, endpoint_failure, request};
use crate::endpoints::Endpoints;
use crate::error::{ClientError, RetryClass};
use crate::retry::RetryPolicy;
use pb::uuid_map_admin_client::UuidMapAdminClient;
use pb::uuid_map_client::UuidMapClient;

/// What every clone of a client shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) endpoints: Arc<Endpoints>,
    pub(crate) token: Arc<Token>,
    pub(crate) timeout: Duration,
    retry: RetryPolicy,
    budget: RetryBudget,
    read_your_writes: bool,
    /// Reads' attempt timeout and hedging.
    read_attempts: ReadAttempts,
    /// The highest LSN this client has written.
    written: AtomicU64,
    lanes: Lanes,
    counters: Counters,
    /// Attempts in flight (`ClientBuilder::max_in_flight`).
    in_flight: LifoSemaphore,
    in_flight_limit: usize,
}

/// What a client has done so far ([`Client::counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCounters {
    /// Calls made (a batched get counts once).
    pub calls: u64,
    /// Attempts of those calls (the first ones included).
    pub attempts: u64,
    /// Attempts made again after a failure: retries, redirects to the
    /// leader, streams opened again.
    pub retries: u64,
    /// Retries refused because the retry budget was spent.
    pub budget_refusals: u64,
    /// Hedges sent: second attempts of slow reads on another member
    /// (counted in `attempts` too).
    pub hedges: u64,
}

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    budget_refusals: AtomicU64,
    hedges: AtomicU64,
}

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        endpoints: Arc<Endpoints>,
        token: Arc<Token>,
        timeout: Duration,
        retry: RetryPolicy,
        budget: RetryBudget,
        read_your_writes: bool,
        read_attempts: ReadAttempts,
        lanes: usize,
        max_batch_keys: usize,
        in_flight: LifoSemaphore,
    ) -> Shared {
        Shared {
            lanes: Lanes::new(
                lanes,
                max_batch_keys,
                Arc::clone(&endpoints),
                Arc::clone(&token),
            ),
            endpoints,
            token,
            timeout,
            retry,
            budget,
            read_your_writes,
            read_attempts,
            written: AtomicU64::new(0),
            counters: Counters::default(),
            in_flight_limit: in_flight.available(),
            in_flight,
        }
    }
}

/// A client of a uuidmap server or replica group. Cheap to clone: clones
/// share connections, the retry budget and the read-your-writes LSN.
///
/// ```no_run
/// # async fn example() -> Result<(), uuidmap_client::ClientError> {
/// use uuid::Uuid;
/// use uuidmap_client::Client;
///
/// let client = Client::builder()
///     .endpoints(["http://10.0.0.1:7878", "http://10.0.0.2:7878"])
///     .build()?;
/// let file = Uuid::new_v4();
/// client.put(file, Uuid::new_v4()).await?;
/// // Read-your-writes: this read waits for the put above.
/// assert!(client.get(file).await?.is_some());
/// // Retried after a lost answer, because setting a value twice is safe here.
/// client.idempotent().put(file, Uuid::nil()).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    shared: Arc<Shared>,
    /// The highest LSN this client (or its session) has seen: written, or
    /// reflected by an answer. Reads send it as `min_lsn`, so that none
    /// goes back in time, whichever member answers. Clones share it;
    /// [`Client::session`] starts another.
    seen: Arc<AtomicU64>,
    timeout: Option<Duration>,
    idempotent: bool,
    /// The consistency of its reads.
    consistency: crate::ReadConsistency,
}

/// Which endpoint an attempt goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// Any, in turn (reads: every member answers them).
    Any,
    /// The replica group's leader when known (writes).
    Leader,
}

impl Client {
    pub(crate) fn new(shared: Shared) -> Client {
        Client {
            shared: Arc::new(shared),
            seen: Arc::new(AtomicU64::new(0)),
            timeout: None,
            idempotent: false,
            consistency: crate::ReadConsistency::default(),
        }
    }

    /// This client with another consistency for its reads (Get, BatchGet,
    /// Lookup, Scan): `client.with_consistency(ReadConsistency::stale())
    /// .get(key)` for one call.
    pub fn with_consistency(&self, consistency: crate::ReadConsistency) -> Client {
        Client {
            consistency,
            ..self.clone()
        }
    }

    /// The consistency of this client's reads.
    pub fn consistency(&self) -> crate::ReadConsistency {
        self.consistency
    }

    /// A builder; give it at least one endpoint.
    pub fn builder() -> crate::ClientBuilder {
        crate::ClientBuilder::default()
    }

    /// This client with another deadline for its calls.
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        Client {
            timeout: Some(timeout),
            ..self.clone()
        }
    }

    /// This client with its writes marked idempotent: a Put, Delete or
    /// Write whose outcome is unknown (its answer was lost) is sent again.
    /// Right when doing the write twice is the same as doing it once, for
    /// example when no one else writes these keys meanwhile. A
    /// compare-and-set, alone or inside a Write, is never sent again after
    /// an unknown outcome, idempotent or not.
    pub fn idempotent(&self) -> Client {
        Client {
            idempotent: true,
            ..self.clone()
        }
    }

    /// The highest LSN this client has written (0: none yet).
    pub fn written_lsn(&self) -> u64 {
        self.shared.written.load(Relaxed)
    }

    /// The highest LSN this client's session has seen: its writes' and the
    /// `applied_lsn` of its reads' answers (0: none yet). Its reads ask
    /// for at least this much (unless built with
    /// [`read_your_writes(false)`](crate::ClientBuilder::read_your_writes)).
    pub fn seen_lsn(&self) -> u64 {
        self.seen.load(Relaxed)
    }

    /// This client with a session of its own: its reads are monotonic and
    /// see its own writes (as the client's are), counting from what the
    /// client has seen so far, but what it sees from now on no longer
    /// holds back the client's other clones, nor theirs it. Connections,
    /// retries and the budget stay shared.
    pub fn session(&self) -> Client {
        Client {
            seen: Arc::new(AtomicU64::new(self.seen_lsn())),
            ..self.clone()
        }
    }

    /// This client, in `other`'s session: the two share the LSN seen,
    /// so that reads through either never go back behind what the other
    /// saw. For a client built again for the same group (its members
    /// changed) to go on from where the old one was.
    pub(crate) fn in_session_of(self, other: &Client) -> Client {
        self.observe(other.seen_lsn());
        Client {
            seen: Arc::clone(&other.seen),
            ..self
        }
    }

    /// What this client (and its clones) has done so far.
    pub fn counters(&self) -> ClientCounters {
        let c = &self.shared.counters;
        ClientCounters {
            calls: c.calls.load(Relaxed),
            attempts: c.attempts.load(Relaxed),
            retries: c.retries.load(Relaxed),
            budget_refusals: c.budget_refusals.load(Relaxed),
            hedges: c.hedges.load(Relaxed),
        }
    }

    /// How many connections to endpoint `i` are open now (0 if there is
    /// no such endpoint). Endpoints are in the builder's order, a DNS
    /// name's addresses in a row ([`Client::endpoint_urls`]).
    pub fn open_connections(&self, i: usize) -> usize {
        self.shared.endpoints.at(i).map_or(0, |e| e.pool.open())
    }

    /// Whether endpoint `i` (as in [`Client::open_connections`]) is
    /// pessimized now.
    pub fn is_pessimized(&self, i: usize) -> bool {
        self.shared
            .endpoints
            .at(i)
            .is_some_and(|e| self.shared.endpoints.is_pessimized(&e))
    }

    /// The URL of the member that took this client's last write, or that
    /// a member named as its replica group's leader since (`None`: none
    /// yet): where writes go first.
    pub fn leader_url(&self) -> Option<String> {
        self.shared.endpoints.leader_url()
    }

    /// Asks the replica group which member leads and learns its URL, if
    /// it is not one of this client's (at connect; bounded by `timeout`;
    /// a single node or a group without a leader teaches nothing).
    pub(crate) async fn learn_leader(&self, timeout: Duration) {
        let asked =
            tokio::time::timeout(timeout, self.with_timeout(timeout).cluster_status()).await;
        if let Ok(Ok(pb::ClusterStats {
            leader_url: Some(url),
            ..
        })) = asked
            && !url.is_empty()
        {
            self.shared.endpoints.leader_named(&url);
        }
    }

    /// The URL each endpoint connects to now: the builder's servers, a DNS
    /// name as one URL per address it resolved to.
    pub fn endpoint_urls(&self) -> Vec<String> {
        self.shared
            .endpoints
            .snapshot()
            .iter()
            .map(|e| e.url.clone())
            .collect()
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(self.shared.timeout)
    }

    /// The `min_lsn` of a read.
    pub(crate) fn min_lsn(&self) -> u64 {
        if self.shared.read_your_writes {
            self.seen.load(Relaxed)
        } else {
            0
        }
    }

    /// Notes an answer's `applied_lsn` (or a write's LSN): later reads ask
    /// for at least that much. A load first, so that the common case (an
    /// LSN already seen) writes nothing to the shared line.
    pub(crate) fn observe(&self, lsn: u64) {
        if lsn > self.seen.load(Relaxed) {
            self.seen.fetch_max(lsn, Relaxed);
        }
    }

    pub(crate) fn wrote(&self, lsn: u64) -> u64 {
        self.shared.written.fetch_max(lsn, Relaxed);
        self.observe(lsn);
        lsn
    }

    /// A request with the token and `remaining` as its deadline.
    pub(crate) fn request<T>(&self, message: T, remaining: Duration) -> tonic::Request<T> {
        request(self.shared.token.value(), message, Some(remaining))
    }

    /// A request with the token and no deadline (a stream's).
    pub(crate) fn stream_request<T>(&self, message: T) -> tonic::Request<T> {
        request(self.shared.token.value(), message, None)
    }

    /// Before a stream (a read) is opened again after its `retry`th
    /// failure in a row: false if `error` does not allow it (its class, the
    /// attempts, the budget); otherwise waits the backoff of its class and
    /// answers true.
    pub(crate) async fn wait_to_resume(&self, error: &ClientError, retry: u32) -> bool {
        let class = error.retry_class();
        let allowed = class.allows_retry(true)
            && retry < self.shared.retry.max_attempts
            && (self.shared.budget.withdraw()
                || self.wait_for_budget(Instant::now() + self.timeout()).await);
        if allowed {
            self.shared.counters.retries.fetch_add(1, Relaxed);
            if let Some(b) = self.shared.retry.backoff(class) {
                tokio::time::sleep(b.delay(retry)).await;
            }
        }
        allowed
    }

    /// Runs `attempt` under the retry loop (see the module doc), in a
    /// `tracing` span named after the call, its latency counted
    /// ([`crate::call_metrics`]). `attempt` gets the time left and the
    /// endpoint to avoid (the last one that failed).
    pub(crate) async fn run<T, F, Fut>(
        &self,
        rpc: &'static str,
        idempotent: bool,
        attempt: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Duration, Option<usize>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let started = Instant::now();
        crate::call_metrics::started(rpc);
        let span = tracing::debug_span!("uuidmap_client_call", rpc);
        let answer = self
            .retry_loop(rpc, idempotent, attempt)
            .instrument(span)
            .await;
        crate::call_metrics::ended(rpc, started.elapsed(), answer.is_ok());
        answer
    }

    async fn retry_loop<T, F, Fut>(
        &self,
        rpc: &'static str,
        idempotent: bool,
        mut attempt: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Duration, Option<usize>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let shared = &self.shared;
        let timeout = self.timeout();
        let deadline = Instant::now() + timeout;
        shared.budget.deposit();
        shared.counters.calls.fetch_add(1, Relaxed);
        let mut attempts = 0;
        let mut avoid = None;
        let mut last: Option<ClientError> = None;
        // One redirect per call goes at once; members that disagree about
        // who leads (an election under way) get the backoff.
        let mut redirected = false;
        let mut token_renewed = false;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(ClientError::DeadlineExceeded {
                    rpc,
                    timeout,
                    attempts,
                    last: last.map(Box::new),
                });
            }
            let permit = match shared
                .in_flight
                .acquire(Some(tokio::time::Instant::from_std(deadline)))
                .await
            {
                Ok(permit) => permit,
                Err(AcquireError::DeadlineExceeded) => {
                    return Err(ClientError::DeadlineExceeded {
                        rpc,
                        timeout,
                        attempts,
                        last: last.map(Box::new),
                    });
                }
                Err(_) => {
                    return Err(ClientError::Overloaded {
                        rpc,
                        in_flight: shared.in_flight_limit,
                    });
                }
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            attempts += 1;
            shared.counters.attempts.fetch_add(1, Relaxed);
            let outcome = tokio::time::timeout(remaining, attempt(remaining, avoid)).await;
            drop(permit);
            let failure = match outcome {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(failure)) => failure,
                Err(_) => {
                    return Err(ClientError::DeadlineExceeded {
                        rpc,
                        timeout,
                        attempts,
                        last: last.map(Box::new),
                    });
                }
            };
            let error = failure.error;
            let class = error.retry_class();
            // The attempt ran into the call's deadline (tonic's timer, or a
            // batch's wait), or failed in a way worth retrying with no time
            // left: the answer is the call's own deadline, with the last
            // real failure.
            let timed_out = matches!(error, ClientError::DeadlineExceeded { .. });
            if timed_out || (class.allows_retry(idempotent) && Instant::now() >= deadline) {
                return Err(ClientError::DeadlineExceeded {
                    rpc,
                    timeout,
                    attempts,
                    last: if timed_out { last } else { Some(error) }.map(Box::new),
                });
            }
            avoid = failure.endpoint;
            // A token the server refused: nothing ran. Ask the provider
            // once, and send the call again at once if the token changed.
            if !token_renewed
                && error
                    .status()
                    .is_some_and(|s| s.code() == tonic::Code::Unauthenticated)
                && shared.token.refresh_now()
            {
                token_renewed = true;
                tracing::debug!(rpc, "token refused: sending again with the renewed token");
                avoid = None;
                last = Some(error);
                continue;
            }
            if !class.allows_retry(idempotent) || attempts >= shared.retry.max_attempts {
                return Err(error);
            }
            if failure.redirected && !redirected {
                redirected = true;
                // Sent to the leader a member named: nothing to wait for,
                // and no retry storm to guard against.
                tracing::debug!(rpc, attempt = attempts, %error, "redirected to the leader");
                metrics::counter!("uuidmap_client_redirects_total", "rpc" => rpc).increment(1);
                shared.counters.retries.fetch_add(1, Relaxed);
                last = Some(error);
                continue;
            }
            let delay = shared
                .retry
                .backoff(class)
                .map_or(Duration::ZERO, |b| b.delay(attempts));
            if Instant::now() + delay >= deadline {
                return Err(error);
            }
            if !shared.budget.withdraw() {
                metrics::counter!("uuidmap_client_budget_exhausted_total").increment(1);
                shared.counters.budget_refusals.fetch_add(1, Relaxed);
                if !self.wait_for_budget(deadline).await {
                    tracing::debug!(rpc, %error, "not retried: the retry budget is spent");
                    return Err(error);
                }
            }
            tracing::debug!(rpc, attempt = attempts, ?class, ?delay, %error, "retrying");
            metrics::counter!(
                "uuidmap_client_retries_total",
                "rpc" => rpc,
                "class" => class_label(class)
            )
            .increment(1);
            shared.counters.retries.fetch_add(1, Relaxed);
            tokio::time::sleep(delay).await;
            last = Some(error);
        }
    }

    /// Waits for a token of the retry budget until `deadline`; false if
    /// none came in time.
    async fn wait_for_budget(&self, deadline: Instant) -> bool {
        let budget = &self.shared.budget;
        loop {
            let Some(wait) = budget.time_to_token() else {
                return false;
            };
            // A little past the token's time, so that it has accrued.
            let wake = Instant::now() + wait + Duration::from_millis(1);
            if wake >= deadline {
                return false;
            }
            tokio::time::sleep_until(wake.into()).await;
            if budget.withdraw() {
                return true;
            }
        }
    }

    /// [`Client::run`] for a unary call on an endpoint's channel:
    /// `call` gets the channel and the time left.
    pub(crate) async fn unary<T, F, Fut>(
        &self,
        rpc: &'static str,
        idempotent: bool,
        call: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Channel, Duration) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        self.unary_to(Route::Any, rpc, idempotent, call).await
    }

    /// [`Client::unary`] for a write: to the replica group's leader first,
    /// when the client knows it (module docs of `endpoints`).
    pub(crate) async fn unary_write<T, F, Fut>(
        &self,
        rpc: &'static str,
        idempotent: bool,
        call: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Channel, Duration) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        self.unary_to(Route::Leader, rpc, idempotent, call).await
    }

    async fn unary_to<T, F, Fut>(
        &self,
        route: Route,
        rpc: &'static str,
        idempotent: bool,
        mut call: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Channel, Duration) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let endpoints = &self.shared.endpoints;
        self.run(rpc, idempotent, |remaining, avoid| {
            let e = match route {
                Route::Any => endpoints.pick(avoid),
                Route::Leader => endpoints.pick_for_write(avoid),
            };
            let (channel, lease) = e.pool.lease();
            let answer = call(channel, remaining);
            async move {
                let answer = answer.await;
                drop(lease);
                match answer {
                    Ok(answer) => {
                        endpoints.succeeded(&e);
                        if route == Route::Leader {
                            endpoints.took_write(&e);
                        }
                        Ok(answer)
                    }
                    Err(status) => Err(endpoint_failure(endpoints, &e, rpc, status)),
                }
            }
        })
        .await
    }

    /// Waits until the server has applied `lsn`; the applied LSN then.
    pub async fn wait_for(&self, lsn: u64) -> Result<u64, ClientError> {
        let applied_lsn = self
            .unary("WaitFor", true, |channel, remaining| {
                let r = self.request(pb::WaitForRequest { lsn }, remaining);
                async move { UuidMapClient::new(channel).wait_for(r).await }
            })
            .await?
            .into_inner()
            .applied_lsn;
        self.observe(applied_lsn);
        Ok(applied_lsn)
    }

    /// The server's figures.
    pub async fn stats(&self) -> Result<pb::StatsResponse, ClientError> {
        Ok(self
            .unary("Stats", true, |channel, remaining| {
                let r = self.request(pb::StatsRequest {}, remaining);
                async move { UuidMapClient::new(channel).stats(r).await }
            })
            .await?
            .into_inner())
    }

    /// Takes a snapshot now; answers once it is durable. (Taking a second
    /// one is harmless, so it is retried.)
    pub async fn snapshot(&self) -> Result<pb::SnapshotResponse, ClientError> {
        Ok(self
            .unary("Snapshot", true, |channel, remaining| {
                let r = self.request(pb::SnapshotRequest {}, remaining);
                async move { UuidMapAdminClient::new(channel).snapshot(r).await }
            })
            .await?
            .into_inner())
    }

    /// Does nothing on the server: a round trip.
    pub async fn ping(&self) -> Result<(), ClientError> {
        self.unary("Ping", true, |channel, remaining| {
            let r = self.request(pb::PingRequest {}, remaining);
            async move { UuidMapClient::new(channel).ping(r).await }
        })
        .await?;
        Ok(())
    }

    pub(crate) fn endpoints(&self) -> &Arc<Endpoints> {
        &self.shared.endpoints
    }

    /// Whether this client's writes are marked idempotent.
    pub(crate) fn writes_idempotent(&self) -> bool {
        self.idempotent
    }

    /// The client's default deadline (a read-back's, after a call whose
    /// own deadline may be spent).
    pub(crate) fn default_timeout(&self) -> Duration {
        self.shared.timeout
    }

    pub(crate) fn lanes(&self) -> &Lanes {
        &self.shared.lanes
    }

    pub(crate) fn read_attempts(&self) -> ReadAttempts {
        self.shared.read_attempts
    }

    pub(crate) fn budget(&self) -> &RetryBudget {
        &self.shared.budget
    }

    /// Counts a hedge, as an attempt too.
    pub(crate) fn count_hedge(&self) {
        self.shared.counters.hedges.fetch_add(1, Relaxed);
        self.shared.counters.attempts.fetch_add(1, Relaxed);
    }
}

fn class_label(class: RetryClass) -> &'static str {
    match class {
        RetryClass::Fast => "fast",
        RetryClass::Slow => "slow",
        RetryClass::Conditional => "conditional",
        RetryClass::Final => "final",
    }
}
