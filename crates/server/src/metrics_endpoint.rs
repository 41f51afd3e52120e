//! The Prometheus endpoint: `GET /metrics` (and `HEAD`) over HTTP/1.1 on
//! its own listener, served by hyper.
//!
//! Why not the exporter's own listener: it binds its own address (so a
//! caller cannot serve a pre-bound port-0 listener and learn the port), it
//! cannot be stopped with the server, and it only renders the global
//! recorder, where the state series are read from this server's index
//! and its scan counters (`exposition::render`).
//!
//! Answers: 200 with the text exposition for `/metrics` (any query
//! string), 404 for another path, 405 (with `Allow`) for another method,
//! and hyper's own 400 for a request that is not HTTP/1.1, at once. A
//! client that sends nothing is dropped after [`HEADER_TIMEOUT`]. When the
//! server stops, the listener closes, and the scrapes in flight get
//! [`DRAIN`] to finish.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use uuidmap_engine::writer::DurableIndex;

use crate::scan_rpc::ScanCounters;

/// How long a connection may take to send its request head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the scrapes in flight may take to finish once the server stops.
pub const DRAIN: Duration = Duration::from_secs(2);

/// The exposition format's content type.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the endpoint on `listener` until `stopping` becomes true: the
/// recorder's series, then the state of `durable` and `scans`.
pub async fn serve_endpoint(
    listener: TcpListener,
    durable: Arc<DurableIndex>,
    scans: Arc<ScanCounters>,
    cluster: Option<crate::ClusterView>,
    partitions: Option<uuidmap_partition::Ownership>,
    mut stopping: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopping.wait_for(|s| *s) => break,
        };
        let socket = match accepted {
            Ok((socket, _)) => socket,
            // Out of file descriptors and the like: back off a little.
            Err(e) => {
                tracing::warn!("metrics endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let durable = durable.clone();
        let scans = scans.clone();
        let cluster = cluster.clone();
        let partitions = partitions.clone();
        let service = service_fn(move |request| {
            let response = answer(
                &request,
                &durable,
                &scans,
                cluster.as_ref(),
                partitions.as_ref(),
            );
            async move { Ok::<_, Infallible>(response) }
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .serve_connection(TokioIo::new(socket), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("metrics endpoint: connection ended: {e}");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("metrics endpoint: scrapes still running after {DRAIN:?}; dropped");
    }
}

/// The answer to one request.
fn answer(
    request: &Request<Incoming>,
    durable: &DurableIndex,
    scans: &ScanCounters,
    cluster: Option<&crate::ClusterView>,
    partitions: Option<&uuidmap_partition::Ownership>,
) -> Response<Full<Bytes>> {
    let method = request.method();
    if method != Method::GET && method != Method::HEAD {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"only GET /metrics\n"),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    if request.uri().path() != "/metrics" {
        return text(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"try /metrics\n"),
        );
    }
    let body = crate::exposition::render(
        durable,
        scans,
        cluster.map(|view| view()).as_ref(),
        partitions,
    );
    text(StatusCode::OK, PROMETHEUS_TEXT, Bytes::from(body))
}

/// A response of `status` with a text `body` of `content_type`.
fn text(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
