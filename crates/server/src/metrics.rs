//! Prometheus metrics: the per-call series, recorded by a tower layer
//! around the routes, and a plain-HTTP `GET /metrics` endpoint on its own
//! port (`--metrics-listen`, default `127.0.0.1:7879`, `off` to disable).
//!
//! Series (the names and labels are a contract):
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | `uuidmap_rpc_requests_total` | counter | `rpc`, `code` | calls finished |
//! | `uuidmap_rpc_duration_seconds` | histogram | `rpc` | call duration, 25 µs … 10 s |
//! | `uuidmap_lookup_requests_total` | counter | `code` | requests answered on `Lookup` streams (`OK`, or the code of the request's `error`) |
//! | `uuidmap_lookup_keys_total` | counter | | keys looked up on `Lookup` streams |
//! | `uuidmap_scan_entries_examined_total` | counter | | entries `Scan` calls examined: every entry of each segment copy, before the value filter (per server) |
//! | `uuidmap_entries` | gauge | | entries in the index |
//! | `uuidmap_applied_lsn` | gauge | | every write up to it is visible |
//! | `uuidmap_wal_bytes` | counter | | WAL bytes written since start |
//! | `uuidmap_write_groups` | counter | | groups the writer committed |
//! | `uuidmap_write_batches` | counter | | write batches applied |
//! | `uuidmap_write_overlapped_groups` | counter | | groups whose fsync overlapped writing the next group |
//! | `uuidmap_write_calls` | counter | | write calls answered |
//! | `uuidmap_write_step_seconds_total` | counter | `step` | where writes' time went: `queue`, `decide` (per batch), `wal_write`, `wal_sync`, `apply`, `complete` (per group; on a member `wal_write` and `wal_sync` are its Raft log's), `replicate` (a leader's proposals: openraft taking one to its answer), `call` (whole calls) |
//! | `uuidmap_snapshot_age_seconds` | gauge | | since the newest snapshot this process wrote (absent: none yet) |
//! | `uuidmap_snapshot_duration_seconds` | gauge | | how long that snapshot took (absent: none yet) |
//! | `uuidmap_recovery_phase_seconds` | gauge | `phase` | this start's recovery: `map`, `verify`, `restore`, `estimate`, `presize`, `replay` |
//! | `uuidmap_recovery_replayed_ops` | gauge | | WAL ops this start's recovery applied |
//! | `uuidmap_recovery_worker_seconds` | gauge | `worker`, `part` | per replay worker: `presize`, `apply`, `wall` |
//! | `uuidmap_recovery_worker_ops` | gauge | `worker` | ops each replay worker applied |
//! | `uuidmap_replay_budget_seconds` | gauge | | `--max-replay-ms` (absent: off) |
//! | `uuidmap_replay_rate_bytes_per_second` | gauge | | the replay rate the budget assumes (absent: off) |
//! | `uuidmap_snapshot_trigger_wal_bytes` | gauge | | WAL bytes after which a snapshot is taken (absent: none) |
//! | `uuidmap_jemalloc_allocated_bytes` | gauge | | jemalloc `stats.allocated` (process) |
//! | `uuidmap_jemalloc_resident_bytes` | gauge | | jemalloc `stats.resident` (process) |
//!
//! `rpc` is the method name for `uuidmap.v1.UuidMap` and
//! `uuidmap.v1.UuidMapAdmin` (`Get`, `Put`, …, `Snapshot`), `health.Check`,
//! `health.Watch`, `reflection.v1.ServerReflectionInfo`,
//! `reflection.v1alpha.ServerReflectionInfo`, or `unknown` for any other
//! path. `code` is the gRPC status code name (`OK`, `NOT_FOUND`,
//! `INVALID_ARGUMENT`, `UNAUTHENTICATED`, …, as in the gRPC spec), read from
//! the `grpc-status` of the response headers (errors of unary calls are
//! "trailers-only") or else of the trailers. A call is recorded once, when
//! its status is known: so a stream (`Scan`, `Watch`, `Lookup`) is counted and timed
//! when it *ends*, and its duration is the stream's whole life; a call whose
//! response the client abandons before the status is `CANCELLED`.
//!
//! The recorder is process-global (the `metrics` facade has one), installed
//! once by the first server started with metrics on, before it serves;
//! other modules (admission) record through the same facade. Every server
//! in the process renders that one recorder, so in a process running
//! several servers (the tests) the per-call series add up all of them.
//! The state series (`uuidmap_entries` … jemalloc) are instead read from
//! the server's own index at scrape time and appended to the text, so they
//! are exact per server, cost nothing between scrapes, and need no ticker;
//! so is `uuidmap_scan_entries_examined_total`, from the server's own
//! `scan::ScanCounters` (a test or a bench reads one scan's work from the
//! difference of two scrapes, whatever other servers scan meanwhile).
//!
//! The endpoint that serves the text is `metrics_endpoint` (hyper).
//!
//! Hot path: the per-call layer looks the path up in the method table
//! (`methods`: `&'static str` labels, no allocation), and takes its counter and
//! histogram handles from per-server `OnceLock` slots registered on first
//! use; recording is then atomic adds, no lock. The exporter stores
//! histogram samples in lock-free blocks drained by an upkeep thread every
//! 5 s and at each scrape (one block allocation per 64 samples per series).

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::methods::{self, METHODS};
use super::scan::ScanCounters;
use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use uuidmap_cluster::status::{ClusterStatus, Role};
use uuidmap_engine::writer::{DurableIndex, DurableStats};

/// The series counting calls by method and status.
pub const RPC_REQUESTS: &str = "uuidmap_rpc_requests_total";
/// The histogram of call durations by method.
pub const RPC_DURATION: &str = "uuidmap_rpc_duration_seconds";

/// Buckets of [`RPC_DURATION`] (seconds): a lookup answers in tens of µs, a
/// synced write in ms, a wait or a scan page in up to seconds.
const DURATION_BUCKETS: [f64; 18] = [
    25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3,
    500e-3, 1.0, 2.5, 5.0, 10.0,
];

/// How often the exporter's histogram samples are folded into buckets when
/// nobody scrapes (they would otherwise pile up in memory).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's recorder, installed on first use. `None`: another global
/// recorder was installed first (an embedding program's), so only the
/// state series are served.
static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the Prometheus recorder as the global `metrics` recorder, once
/// per process, and starts its upkeep thread. Later calls return the same
/// handle.
pub fn install() -> Option<&'static PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(RPC_DURATION.into()), &DURATION_BUCKETS)
                .expect("the bucket list is not empty")
                .build_recorder();
            let handle = recorder.handle();
            if let Err(e) = metrics::set_global_recorder(recorder) {
                tracing::warn!(
                    "another metrics recorder is installed ({e}); /metrics serves only the \
                     index's state series"
                );
                return None;
            }
            metrics::describe_counter!(
                RPC_REQUESTS,
                "gRPC calls finished, by method and status code."
            );
            metrics::describe_histogram!(
                RPC_DURATION,
                metrics::Unit::Seconds,
                "gRPC call duration, from the request to the status (a stream's whole life)."
            );
            let upkeep = handle.clone();
            let started = std::thread::Builder::new()
                .name("uuidmap-metrics".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_EVERY);
                        upkeep.run_upkeep();
                    }
                });
            if let Err(e) = started {
                tracing::warn!("cannot start the metrics upkeep thread ({e}); histogram samples are folded at each scrape only");
            }
            Some(handle)
        })
        .as_ref()
}

/// Rows of the per-RPC series: one per row of the method table, and one
/// (`methods::UNKNOWN`) for every path not in it.
const RPC_ROWS: usize = methods::UNKNOWN + 1;

/// The `rpc` label of a row.
fn rpc_label(rpc: usize) -> &'static str {
    METHODS.get(rpc).map_or("unknown", |m| m.label)
}

/// gRPC status code names, indexed by code (the gRPC spec's names).
pub(crate) const CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];
const CANCELLED: usize = 1;
const UNKNOWN: usize = 2;
const INTERNAL: usize = 13;

/// The code of a `grpc-status` value; `None` if there is none. A value
/// that is not a known code counts as UNKNOWN (as a client would read it).
fn status_code(headers: &http::HeaderMap) -> Option<usize> {
    let value = headers.get("grpc-status")?;
    let code = std::str::from_utf8(value.as_bytes())
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|c| *c < CODES.len());
    Some(code.unwrap_or(UNKNOWN))
}

/// One server's handles, registered with the global recorder on first use
/// (so only the series that happened appear).
struct RpcSeries {
    /// `[rpc][code]`.
    requests: Vec<[OnceLock<Counter>; CODES.len()]>,
    /// `[rpc]`.
    duration: Vec<OnceLock<Histogram>>,
}

impl RpcSeries {
    fn new() -> Self {
        RpcSeries {
            requests: (0..RPC_ROWS)
                .map(|_| std::array::from_fn(|_| OnceLock::new()))
                .collect(),
            duration: (0..RPC_ROWS).map(|_| OnceLock::new()).collect(),
        }
    }

    fn record(&self, rpc: usize, code: usize, elapsed: Duration) {
        let label = rpc_label(rpc);
        self.requests[rpc][code]
            .get_or_init(|| metrics::counter!(RPC_REQUESTS, "rpc" => label, "code" => CODES[code]))
            .increment(1);
        self.duration[rpc]
            .get_or_init(|| metrics::histogram!(RPC_DURATION, "rpc" => label))
            .record(elapsed.as_secs_f64());
    }
}

/// The per-call layer: on (`Some`) when metrics are on.
#[derive(Clone, Default)]
pub struct RpcMetricsLayer {
    series: Option<Arc<RpcSeries>>,
}

impl RpcMetricsLayer {
    /// Records every call when `on` (install the recorder first).
    pub fn new(on: bool) -> Self {
        RpcMetricsLayer {
            series: on.then(|| Arc::new(RpcSeries::new())),
        }
    }
}

impl<S> tower_layer::Layer<S> for RpcMetricsLayer {
    type Service = RpcMetrics<S>;
    fn layer(&self, inner: S) -> RpcMetrics<S> {
        RpcMetrics {
            inner,
            series: self.series.clone(),
        }
    }
}

/// The service [`RpcMetricsLayer`] wraps around the routes.
#[derive(Clone)]
pub struct RpcMetrics<S> {
    inner: S,
    series: Option<Arc<RpcSeries>>,
}

/// A call not yet recorded. Dropped unrecorded: the client went away
/// before the status was sent, so it counts as CANCELLED.
struct Pending {
    series: Arc<RpcSeries>,
    rpc: usize,
    start: Instant,
    done: bool,
}

impl Pending {
    fn finish(mut self, code: usize) {
        self.done = true;
        self.series.record(self.rpc, code, self.start.elapsed());
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            self.series
                .record(self.rpc, CANCELLED, self.start.elapsed());
        }
    }
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for RpcMetrics<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
{
    type Response = http::Response<RpcBody<RB>>;
    type Error = S::Error;
    type Future = RpcFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let pending = self.series.as_ref().map(|series| Pending {
            series: series.clone(),
            rpc: methods::method(request.uri().path()).0,
            start: Instant::now(),
            done: false,
        });
        RpcFuture {
            inner: self.inner.call(request),
            pending,
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner call's future; records a trailers-only answer at once.
    pub struct RpcFuture<F> {
        #[pin]
        inner: F,
        pending: Option<Pending>,
    }
}

impl<F, RB, E> Future for RpcFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
{
    type Output = Result<http::Response<RpcBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match this.inner.poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => {
                if let Some(p) = this.pending.take() {
                    p.finish(INTERNAL);
                }
                return Poll::Ready(Err(e));
            }
            Poll::Ready(Ok(response)) => response,
        };
        let mut pending = this.pending.take();
        if let Some(code) = status_code(response.headers())
            && let Some(p) = pending.take()
        {
            p.finish(code);
        }
        Poll::Ready(Ok(response.map(|inner| RpcBody { inner, pending })))
    }
}

pin_project_lite::pin_project! {
    /// A response body that records the call when its trailers pass (or
    /// when it ends or is dropped without them).
    pub struct RpcBody<B> {
        #[pin]
        inner: B,
        pending: Option<Pending>,
    }
}

impl<B: http_body::Body> http_body::Body for RpcBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        let code = match &polled {
            Poll::Ready(Some(Ok(frame))) => frame
                .trailers_ref()
                .map(|t| status_code(t).unwrap_or(UNKNOWN)),
            Poll::Ready(Some(Err(_))) => Some(INTERNAL),
            Poll::Ready(None) => Some(UNKNOWN),
            Poll::Pending => None,
        };
        if let Some(code) = code
            && let Some(p) = this.pending.take()
        {
            p.finish(code);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The text exposition: the recorder's series, then this server's state
/// (its index and its scans).
pub fn render(
    durable: &DurableIndex,
    scans: &ScanCounters,
    cluster: Option<&ClusterStatus>,
) -> String {
    let mut out = RECORDER
        .get()
        .and_then(Option::as_ref)
        .map(PrometheusHandle::render)
        .unwrap_or_default();
    let s = durable.stats();
    let mut series = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
        );
    };
    series(
        "uuidmap_entries",
        "gauge",
        "Entries in the index.",
        s.entries as f64,
    );
    series(
        "uuidmap_applied_lsn",
        "gauge",
        "Every write up to this LSN is visible.",
        s.applied_lsn as f64,
    );
    series(
        "uuidmap_wal_bytes",
        "counter",
        "WAL bytes written since the server started.",
        s.wal_bytes as f64,
    );
    series(
        "uuidmap_write_groups",
        "counter",
        "Groups the writer committed (one WAL write and, under always, one fsync each).",
        s.groups as f64,
    );
    series(
        "uuidmap_write_overlapped_groups",
        "counter",
        "Groups whose fsync ran on the sync thread while the next group was written.",
        s.overlapped_groups as f64,
    );
    series(
        "uuidmap_write_batches",
        "counter",
        "Write batches applied.",
        s.batches as f64,
    );
    series(
        "uuidmap_write_calls",
        "counter",
        "Write calls answered by the writer.",
        s.write_calls as f64,
    );
    series(
        "uuidmap_scan_entries_examined_total",
        "counter",
        "Entries Scan calls examined: every entry of each segment copy, before the value filter.",
        scans.examined() as f64,
    );
    if s.last_snapshot_unix_ms > 0 {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        series(
            "uuidmap_snapshot_age_seconds",
            "gauge",
            "Seconds since the newest snapshot written by this server.",
            now_ms.saturating_sub(s.last_snapshot_unix_ms) as f64 / 1e3,
        );
        series(
            "uuidmap_snapshot_duration_seconds",
            "gauge",
            "How long writing the newest snapshot took.",
            s.last_snapshot_duration_us as f64 / 1e6,
        );
    }
    // jemalloc caches its statistics; advancing the epoch refreshes them.
    use tikv_jemalloc_ctl::{epoch, stats};
    if epoch::advance().is_ok() {
        if let Ok(b) = stats::allocated::read() {
            series(
                "uuidmap_jemalloc_allocated_bytes",
                "gauge",
                "Bytes allocated by the process through jemalloc.",
                b as f64,
            );
        }
        if let Ok(b) = stats::resident::read() {
            series(
                "uuidmap_jemalloc_resident_bytes",
                "gauge",
                "Bytes in physically resident data pages mapped by jemalloc.",
                b as f64,
            );
        }
    }
    render_restart(&mut out, durable, &s);
    if let Some(c) = cluster {
        render_cluster(&mut out, c);
    }
    let _ = write!(
        out,
        "# HELP uuidmap_write_step_seconds_total Where writes' time went: queue and decide are \
         per batch, wal_write, wal_sync, apply and complete per group (on a member, wal_write \
         and wal_sync are its Raft log's, per log group), replicate per proposal (a leader: \
         from openraft taking it to its answer), call is whole write \
         calls.\n# TYPE uuidmap_write_step_seconds_total counter\n"
    );
    for (step, ns) in s.write_step_ns {
        let _ = writeln!(
            out,
            "uuidmap_write_step_seconds_total{{step=\"{step}\"}} {}",
            ns as f64 / 1e9
        );
    }
    out
}

/// A replica group member's view of its group (see the table above).
fn render_cluster(out: &mut String, c: &ClusterStatus) {
    let mut gauge = |name: &str, help: &str, value: Option<u64>| {
        if let Some(v) = value {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}\n"
            );
        }
    };
    gauge(
        "uuidmap_raft_node_id",
        "This member's node id.",
        Some(c.node_id),
    );
    gauge(
        "uuidmap_raft_term",
        "This member's current Raft term.",
        Some(c.term),
    );
    gauge(
        "uuidmap_raft_leader_id",
        "The leader this member knows of (absent while none is known).",
        c.leader_id,
    );
    gauge(
        "uuidmap_raft_commit_index",
        "The last log index (LSN) this member knows committed.",
        c.commit_index,
    );
    gauge(
        "uuidmap_raft_applied_index",
        "The last log index (LSN) this member applied.",
        c.applied_index,
    );
    gauge(
        "uuidmap_raft_last_log_index",
        "The last index in this member's log.",
        c.last_log_index,
    );
    gauge(
        "uuidmap_raft_voters",
        "Voters in the membership in force.",
        Some(c.voters.len() as u64),
    );
    let _ = write!(
        out,
        "# HELP uuidmap_raft_read_index_rounds_total Read-index rounds this member began for \
         linearizable reads it could not answer from its lease (one round serves every read \
         waiting when it begins).\n# TYPE uuidmap_raft_read_index_rounds_total counter\n\
         uuidmap_raft_read_index_rounds_total {}\n",
        c.read_index_rounds
    );
    let _ = write!(
        out,
        "# HELP uuidmap_raft_role This member's role: 1 for the one it has.\n\
         # TYPE uuidmap_raft_role gauge\n"
    );
    for role in [
        Role::Leader,
        Role::SteppingDown,
        Role::Follower,
        Role::Candidate,
        Role::Learner,
        Role::Stopped,
    ] {
        let _ = writeln!(
            out,
            "uuidmap_raft_role{{role=\"{}\"}} {}",
            role.as_str(),
            u8::from(c.role == role)
        );
    }
    let k = &c.counts;
    for (name, help, value) in [
        (
            "uuidmap_raft_elections_started_total",
            "Elections this member started as a candidate (pre-votes not counted).",
            k.elections_started,
        ),
        (
            "uuidmap_raft_leader_changes_total",
            "New leaders (another member, or a new term) this member saw.",
            k.leader_changes,
        ),
        (
            "uuidmap_raft_lease_lapses_total",
            "Times this member, leading, saw its read lease run out (no majority acknowledged it \
             within the lease).",
            k.lease_lapses,
        ),
        (
            "uuidmap_raft_step_downs_total",
            "Times this member stopped leading because no majority acknowledged it.",
            k.step_downs,
        ),
        (
            "uuidmap_raft_void_entries_total",
            "Log entries applied void (a proposal after one the log refused: changed nothing).",
            k.void_entries,
        ),
        (
            "uuidmap_raft_snapshots_sent_total",
            "Snapshots this member sent whole to another.",
            k.snapshots_sent,
        ),
        (
            "uuidmap_raft_snapshots_received_total",
            "Snapshots this member received whole from its leader.",
            k.snapshots_received,
        ),
        (
            "uuidmap_raft_proposals_refused_total",
            "Writes refused RESOURCE_EXHAUSTED: the leader's proposals in flight were at their \
             bound.",
            k.proposals_refused,
        ),
    ] {
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"
        );
    }
    if !c.followers.is_empty() {
        let _ = write!(
            out,
            "# HELP uuidmap_raft_follower_lag_entries On the leader: entries each other member \
             lacks of its log.\n# TYPE uuidmap_raft_follower_lag_entries gauge\n"
        );
        for f in &c.followers {
            let _ = writeln!(
                out,
                "uuidmap_raft_follower_lag_entries{{node=\"{}\"}} {}",
                f.id, f.lag
            );
        }
    }
}

/// The recovery phases and the restart budget (see the table above).
fn render_restart(out: &mut String, durable: &DurableIndex, s: &DurableStats) {
    let report = durable.recovery_report();
    let p = &report.phases;
    let mut head = |name: &str, help: &str| {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n");
    };
    head(
        "uuidmap_recovery_phase_seconds",
        "Time of each phase of the recovery this server started with.",
    );
    for (phase, d) in [
        ("map", p.map),
        ("verify", p.verify),
        ("restore", p.restore),
        ("estimate", p.estimate),
        ("presize", p.presize),
        ("replay", p.replay),
    ] {
        let _ = writeln!(
            out,
            "uuidmap_recovery_phase_seconds{{phase=\"{phase}\"}} {}",
            d.as_secs_f64()
        );
    }
    let _ = write!(
        out,
        "# HELP uuidmap_recovery_replayed_ops WAL ops the recovery applied.\n\
         # TYPE uuidmap_recovery_replayed_ops gauge\nuuidmap_recovery_replayed_ops {}\n",
        report.ops_replayed
    );
    let _ = write!(
        out,
        "# HELP uuidmap_recovery_worker_seconds Time of each replay worker: presize, apply \
         (not waiting), wall.\n# TYPE uuidmap_recovery_worker_seconds gauge\n"
    );
    for (i, w) in p.workers.iter().enumerate() {
        for (part, d) in [("presize", w.presize), ("apply", w.apply), ("wall", w.wall)] {
            let _ = writeln!(
                out,
                "uuidmap_recovery_worker_seconds{{worker=\"{i}\",part=\"{part}\"}} {}",
                d.as_secs_f64()
            );
        }
    }
    let _ = write!(
        out,
        "# HELP uuidmap_recovery_worker_ops Ops each replay worker applied.\n\
         # TYPE uuidmap_recovery_worker_ops gauge\n"
    );
    for (i, w) in p.workers.iter().enumerate() {
        let _ = writeln!(
            out,
            "uuidmap_recovery_worker_ops{{worker=\"{i}\"}} {}",
            w.ops
        );
    }
    if s.max_replay_ms > 0 {
        let _ = write!(
            out,
            "# HELP uuidmap_replay_budget_seconds The restart budget (--max-replay-ms).\n\
             # TYPE uuidmap_replay_budget_seconds gauge\nuuidmap_replay_budget_seconds {}\n",
            s.max_replay_ms as f64 / 1e3
        );
    }
    let mut gauge = |name: &str, help: &str, value: u64| {
        if value > 0 {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
            );
        }
    };
    gauge(
        "uuidmap_replay_rate_bytes_per_second",
        "The WAL replay rate the restart budget assumes.",
        s.replay_bytes_per_sec,
    );
    gauge(
        "uuidmap_snapshot_trigger_wal_bytes",
        "WAL bytes after which a snapshot is taken.",
        s.snapshot_trigger_bytes,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_members_view_of_its_group_is_rendered_as_gauges() {
        let status = ClusterStatus {
            node_id: 2,
            role: Role::Leader,
            term: 7,
            leader_id: Some(2),
            leader_url: Some("http://h2:7878".into()),
            commit_index: Some(40),
            applied_index: Some(39),
            last_log_index: Some(41),
            voters: vec![1, 2, 3],
            learners: vec![],
            member_urls: vec![],
            followers: vec![
                uuidmap_cluster::status::FollowerProgress {
                    id: 1,
                    matched: Some(41),
                    lag: 0,
                },
                uuidmap_cluster::status::FollowerProgress {
                    id: 3,
                    matched: None,
                    lag: 41,
                },
            ],
            counts: uuidmap_cluster::counters::RaftCounts {
                elections_started: 3,
                step_downs: 1,
                proposals_refused: 5,
                ..Default::default()
            },
            read_index_rounds: 12,
        };
        let mut out = String::new();
        render_cluster(&mut out, &status);
        for line in [
            "uuidmap_raft_node_id 2",
            "uuidmap_raft_term 7",
            "uuidmap_raft_leader_id 2",
            "uuidmap_raft_commit_index 40",
            "uuidmap_raft_applied_index 39",
            "uuidmap_raft_last_log_index 41",
            "uuidmap_raft_voters 3",
            "uuidmap_raft_read_index_rounds_total 12",
            "uuidmap_raft_role{role=\"leader\"} 1",
            "uuidmap_raft_role{role=\"follower\"} 0",
            "uuidmap_raft_follower_lag_entries{node=\"1\"} 0",
            "uuidmap_raft_follower_lag_entries{node=\"3\"} 41",
            "uuidmap_raft_elections_started_total 3",
            "uuidmap_raft_step_downs_total 1",
            "uuidmap_raft_proposals_refused_total 5",
            "uuidmap_raft_void_entries_total 0",
            "# TYPE uuidmap_raft_leader_changes_total counter",
        ] {
            assert!(out.lines().any(|l| l == line), "no {line:?} in:\n{out}");
        }
        // A follower that knows no leader yet: no leader gauge, no lags.
        let mut out = String::new();
        render_cluster(
            &mut out,
            &ClusterStatus {
                role: Role::Follower,
                leader_id: None,
                followers: vec![],
                ..status
            },
        );
        assert!(!out.contains("uuidmap_raft_leader_id"), "{out}");
        assert!(!out.contains("follower_lag"), "{out}");
        assert!(
            out.contains("uuidmap_raft_role{role=\"follower\"} 1"),
            "{out}"
        );
    }

    #[test]
    fn paths_map_to_static_rpc_labels_and_unknown_paths_to_unknown() {
        let rpc_index = |path: &str| methods::method(path).0;
        assert_eq!(rpc_label(rpc_index("/uuidmap.v1.UuidMap/Get")), "Get");
        assert_eq!(
            rpc_label(rpc_index("/uuidmap.v1.UuidMapAdmin/Snapshot")),
            "Snapshot"
        );
        assert_eq!(
            rpc_label(rpc_index("/grpc.health.v1.Health/Watch")),
            "health.Watch"
        );
        assert_eq!(rpc_label(rpc_index("/uuidmap.v1.UuidMap/Nope")), "unknown");
        assert_eq!(rpc_label(rpc_index("")), "unknown");
    }

    #[test]
    fn grpc_status_values_map_to_spec_code_names() {
        let mut h = http::HeaderMap::new();
        assert_eq!(status_code(&h), None);
        for (value, name) in [("0", "OK"), ("5", "NOT_FOUND"), ("16", "UNAUTHENTICATED")] {
            h.insert("grpc-status", value.parse().unwrap());
            assert_eq!(status_code(&h).map(|c| CODES[c]), Some(name));
        }
        h.insert("grpc-status", "99".parse().unwrap());
        assert_eq!(status_code(&h).map(|c| CODES[c]), Some("UNKNOWN"));
    }
}
