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
//! | `uuidmap_partition_group_info` | gauge | `group`, `cluster` | a partitioned server's group (1) |
//! | `uuidmap_partitions` | gauge | `state` | partitions `owned`, `moving_out`, `moving_in` |
//! | `uuidmap_partition_table_version` | gauge | | the partition table version in use |
//! | `uuidmap_partition_fenced_version` | gauge | | the last version this server fenced |
//! | `uuidmap_partition_fence_lsn` | gauge | | the applied LSN at that fence |
//! | `uuidmap_partition_etcd_up` | gauge | | 1 while the map's last etcd call succeeded |
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
//! the server's own index at scrape time, registered in a registry of that
//! scrape (`exposition`) and appended to the text, so they
//! are exact per server, cost nothing between scrapes, and need no ticker;
//! so is `uuidmap_scan_entries_examined_total`, from the server's own
//! `scan_rpc::ScanCounters` (a test or a bench reads one scan's work from the
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

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::methods::{self, METHODS};
use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

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

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        // The outermost layer: the one look-up of the path, for every layer.
        let rpc = methods::resolve(&mut request).index;
        let pending = self.series.as_ref().map(|series| Pending {
            series: series.clone(),
            rpc,
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

/// The recorder's series as text (empty when another program's recorder
/// was installed first).
pub(crate) fn recorder_text() -> String {
    RECORDER
        .get()
        .and_then(Option::as_ref)
        .map(PrometheusHandle::render)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

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
