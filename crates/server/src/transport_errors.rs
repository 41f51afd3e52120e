//! The errors tonic answers by itself, before any handler of ours runs,
//! reworded in the server's terms.
//!
//! - **A message over the decoder's limit**: tonic answers OUT_OF_RANGE
//!   "decoded message length too large" (or, for a gzip body that inflates
//!   past it, RESOURCE_EXHAUSTED). The request is what is wrong, so the
//!   answer is INVALID_ARGUMENT, and it names the limit the caller passed
//!   (`--max-batch-keys` for BatchGet and each Lookup request,
//!   `--max-write-ops` for Write,
//!   `--max-filter-values` for Scan) with the size that was sent.
//! - **A gzip body that does not inflate, or a frame whose compression flag
//!   is neither 0 nor 1**: INTERNAL from tonic (which blames the server);
//!   here INVALID_ARGUMENT, since the bytes the client sent are at fault.
//! - **An unknown service or method**: UNIMPLEMENTED with an empty message
//!   from tonic; here the same code with a message that names the method
//!   called and the services (and, for a known service, the methods) this
//!   server has.
//!
//! [`decoder_limit`] sizes the decoder from the configured limits, so that
//! every request within them decodes and gets its own answer, and only a
//! request past them meets the decoder.
//!
//! Only trailers-only answers (status in the headers, as tonic sends these)
//! are looked at; a normal answer passes untouched, with no allocation. A
//! request *stream*'s decoding errors reach its handler instead, which
//! words them with [`in_stream`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Poll, ready};

use tonic::{Code, Status};

use super::config::Limits;
use super::reflection::Catalog;

/// The largest encoded request the server decodes: room for the largest
/// request the limits allow (a Write of `max_write_ops` compare-and-sets,
/// at most 62 bytes each on the wire; a BatchGet of `max_batch_keys` keys;
/// a Scan of `max_filter_values` values) plus framing, and never less than
/// gRPC's usual 4 MiB.
pub fn decoder_limit(limits: &Limits) -> usize {
    const MAX_OP_BYTES: usize = 64;
    const SLACK: usize = 1024;
    (limits.max_write_ops.saturating_mul(MAX_OP_BYTES))
        .max(
            limits
                .max_batch_keys
                .saturating_mul(16)
                .saturating_add(SLACK),
        )
        .max(
            limits
                .max_filter_values
                .saturating_mul(16)
                .saturating_add(SLACK),
        )
        .max(4 << 20)
}

/// What the layer needs to word its answers.
#[derive(Debug)]
struct Wording {
    limits: Limits,
    decoder_limit: usize,
    /// `None` inside a request stream, where no method can be unknown.
    catalog: Option<Arc<Catalog>>,
}

/// The layer.
#[derive(Clone, Debug)]
pub struct TransportErrorsLayer {
    wording: Arc<Wording>,
}

impl TransportErrorsLayer {
    /// Words answers for a server with these limits and services.
    pub fn new(limits: Limits, catalog: Arc<Catalog>) -> Self {
        let decoder_limit = decoder_limit(&limits);
        TransportErrorsLayer {
            wording: Arc::new(Wording {
                limits,
                decoder_limit,
                catalog: Some(catalog),
            }),
        }
    }
}

impl<S> tower_layer::Layer<S> for TransportErrorsLayer {
    type Service = TransportErrors<S>;
    fn layer(&self, inner: S) -> TransportErrors<S> {
        TransportErrors {
            inner,
            wording: self.wording.clone(),
        }
    }
}

/// The service [`TransportErrorsLayer`] wraps.
#[derive(Clone, Debug)]
pub struct TransportErrors<S> {
    inner: S,
    wording: Arc<Wording>,
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for TransportErrors<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    RB: Default,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = TransportErrorsFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The path is kept only for the rare answer that needs it; the
        // `Uri` clone is a reference count, not a copy.
        let uri = request.uri().clone();
        TransportErrorsFuture {
            inner: self.inner.call(request),
            uri,
            wording: self.wording.clone(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner call's future; its answer reworded if tonic made it.
    pub struct TransportErrorsFuture<F> {
        #[pin]
        inner: F,
        uri: http::Uri,
        wording: Arc<Wording>,
    }
}

impl<F, RB, E> Future for TransportErrorsFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
    RB: Default,
{
    type Output = Result<http::Response<RB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(cx))?;
        let Some(code) = response
            .headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i32>().ok())
        else {
            return Poll::Ready(Ok(response));
        };
        let message = response
            .headers()
            .get("grpc-message")
            .map(|v| percent_decode(v.as_bytes()))
            .unwrap_or_default();
        match reword(Code::from(code), &message, this.uri.path(), this.wording) {
            Some(status) => Poll::Ready(Ok(status.into_http())),
            None => Poll::Ready(Ok(response)),
        }
    }
}

/// Our answer in place of tonic's (`code`, `message`) to a call of `path`;
/// `None` keeps tonic's.
fn reword(code: Code, message: &str, path: &str, wording: &Wording) -> Option<Status> {
    match code {
        Code::OutOfRange if message.contains("decoded message length too large") => {
            Some(too_large(found_bytes(message), path, wording))
        }
        Code::ResourceExhausted if message.contains("Error decompressing: size limit") => {
            Some(too_large(None, path, wording))
        }
        Code::Internal if message.starts_with("Error decompressing") => {
            Some(Status::invalid_argument(format!(
                "the request's compressed message could not be decompressed ({message}); \
                 send it uncompressed or as valid gzip"
            )))
        }
        Code::Internal if message.contains("invalid compression flag") => {
            Some(Status::invalid_argument(format!(
                "the request is not framed as gRPC messages are ({message}): each message starts \
                 with a compression flag of 0 or 1"
            )))
        }
        Code::Unimplemented if message.is_empty() => {
            Some(unknown_method(path, wording.catalog.as_deref()?))
        }
        _ => None,
    }
}

/// An error of a request stream as its handler reads it (`Lookup`), worded
/// as this layer words a unary call's: tonic hands a message it cannot
/// decode to the handler, inside the stream, where no layer sees it.
pub fn in_stream(status: Status, path: &str, limits: &Limits) -> Status {
    let wording = Wording {
        limits: limits.clone(),
        decoder_limit: decoder_limit(limits),
        catalog: None,
    };
    reword(status.code(), status.message(), path, &wording).unwrap_or(status)
}

/// INVALID_ARGUMENT for a request over the decoder's limit.
fn too_large(found: Option<u64>, path: &str, wording: &Wording) -> Status {
    let size = match found {
        Some(n) => format!("{n} bytes"),
        None => "more bytes once decompressed".to_string(),
    };
    let limits = &wording.limits;
    let limit = wording.decoder_limit;
    let advice = match path {
        "/uuidmap.v1.UuidMap/BatchGet" | "/uuidmap.v1.UuidMap/Lookup" => format!(
            "a BatchGet, or one Lookup request, may hold at most {} keys (the server's \
             `max_batch_keys`): split it",
            limits.max_batch_keys
        ),
        "/uuidmap.v1.UuidMap/Write" => format!(
            "a Write may hold at most {} operations (the server's `max_write_ops`): split it",
            limits.max_write_ops
        ),
        "/uuidmap.v1.UuidMap/Scan" => format!(
            "a scan filter may hold at most {} values (the server's `max_filter_values`): scan \
             with several smaller filters",
            limits.max_filter_values
        ),
        _ => "no valid request of this method comes near that size".to_string(),
    };
    Status::invalid_argument(format!(
        "the request message is {size}, over the {limit} bytes this server decodes: {advice}"
    ))
}

/// The `found N bytes` of tonic's message.
fn found_bytes(message: &str) -> Option<u64> {
    let rest = &message[message.find("found ")? + "found ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// UNIMPLEMENTED for a call of `path` that no service here answers.
fn unknown_method(path: &str, catalog: &Catalog) -> Status {
    let (service, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((path, ""));
    if let Some(known) = catalog.services().iter().find(|s| s.name == service) {
        return Status::unimplemented(format!(
            "{service} has no method {method:?}; its methods are {} (is the client built from a \
             newer proto than this server?)",
            known.methods.join(", ")
        ));
    }
    let services: Vec<&str> = catalog.services().iter().map(|s| s.name.as_str()).collect();
    Status::unimplemented(format!(
        "this server has no service {service:?} (called {path:?}); it serves {}",
        services.join(", ")
    ))
}

/// A `grpc-message` value, percent-decoded (gRPC encodes bytes outside
/// printable ASCII, and `%`, as `%XX`).
fn percent_decode(value: &[u8]) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        if value[i] == b'%'
            && let Some(byte) = value
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(value[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use uuidmap_proto::v1 as pb;

    fn wording(limits: Limits) -> Wording {
        Wording {
            decoder_limit: decoder_limit(&limits),
            limits,
            catalog: Some(Arc::new(Catalog::of_server())),
        }
    }

    #[test]
    fn every_request_within_the_limits_fits_the_decoder() {
        let max_key = vec![0x7f; 16];
        for limits in [
            Limits::default(),
            Limits {
                max_batch_keys: 1_000_000,
                max_write_ops: 10,
                max_filter_values: 10,
                ..Limits::default()
            },
            Limits {
                max_batch_keys: 10,
                max_write_ops: 300_000,
                max_filter_values: 2_000_000,
                ..Limits::default()
            },
        ] {
            let limit = decoder_limit(&limits);
            let batch = pb::BatchGetRequest {
                keys: vec![0x7f; limits.max_batch_keys * 16].into(),
                min_lsn: u64::MAX,
                ..Default::default()
            };
            assert!(batch.encoded_len() <= limit, "{limits:?}");
            let lookup = pb::LookupRequest {
                id: u64::MAX,
                keys: vec![0x7f; limits.max_batch_keys * 16].into(),
                min_lsn: u64::MAX,
                consistency: i32::MAX,
                max_staleness_ms: u64::MAX,
                timeout_us: u64::MAX,
            };
            assert!(lookup.encoded_len() <= limit, "{limits:?}");
            let cas = pb::WriteOp {
                op: Some(pb::write_op::Op::CompareAndSet(pb::CompareAndSetOp {
                    key: max_key.clone().into(),
                    expected: Some(max_key.clone().into()),
                    new_value: Some(max_key.clone().into()),
                })),
            };
            let write = pb::WriteRequest {
                ops: vec![cas; limits.max_write_ops],
            };
            assert!(write.encoded_len() <= limit, "{limits:?}");
            let scan = pb::ScanRequest {
                values: vec![0x7f; limits.max_filter_values * 16].into(),
                cursor: vec![0xff; 64].into(),
                split: u32::MAX,
                splits: u32::MAX,
                limit: u64::MAX,
                min_lsn: u64::MAX,
                ..Default::default()
            };
            assert!(scan.encoded_len() <= limit, "{limits:?}");
        }
    }

    #[test]
    fn an_oversized_request_is_invalid_argument_naming_its_limit() {
        let c = wording(Limits::default());
        let tonic = "Error, decoded message length too large: found 8000005 bytes, the limit is: \
                     6400000 bytes";
        let s = reword(Code::OutOfRange, tonic, "/uuidmap.v1.UuidMap/BatchGet", &c).unwrap();
        assert_eq!(s.code(), Code::InvalidArgument);
        assert!(
            s.message().contains("8000005 bytes") && s.message().contains("`max_batch_keys`"),
            "{}",
            s.message()
        );
        for (path, flag) in [
            ("/uuidmap.v1.UuidMap/Write", "`max_write_ops`"),
            ("/uuidmap.v1.UuidMap/Scan", "`max_filter_values`"),
        ] {
            let s = reword(Code::OutOfRange, tonic, path, &c).unwrap();
            assert!(s.message().contains(flag), "{}", s.message());
        }
        let inflated = reword(
            Code::ResourceExhausted,
            "Error decompressing: size limit, of 6400000 bytes, exceeded while decompressing message",
            "/uuidmap.v1.UuidMap/Write",
            &c,
        )
        .unwrap();
        assert_eq!(inflated.code(), Code::InvalidArgument);
        let flag = reword(
            Code::Internal,
            "protocol error: received message with invalid compression flag: 7 (valid flags are \
             0 and 1), while sending request",
            "/uuidmap.v1.UuidMap/Get",
            &c,
        )
        .unwrap();
        assert_eq!(flag.code(), Code::InvalidArgument);
        // Our own statuses pass untouched.
        assert!(reword(Code::OutOfRange, "something else", "/x/y", &c).is_none());
        assert!(reword(Code::ResourceExhausted, "queue full", "/x/y", &c).is_none());
    }

    #[test]
    fn an_unknown_method_names_the_method_and_the_services() {
        let c = wording(Limits::default());
        let s = reword(
            Code::Unimplemented,
            "",
            "/uuidmap.v1.UuidMap/Frobnicate",
            &c,
        )
        .unwrap();
        assert!(
            s.message().contains("Frobnicate") && s.message().contains("BatchGet"),
            "{}",
            s.message()
        );
        let s = reword(Code::Unimplemented, "", "/foo.Bar/Baz", &c).unwrap();
        assert!(
            s.message().contains("foo.Bar")
                && s.message().contains("uuidmap.v1.UuidMap")
                && s.message().contains("grpc.health.v1.Health"),
            "{}",
            s.message()
        );
        // A message of tonic's own (an unsupported encoding) is kept.
        assert!(
            reword(
                Code::Unimplemented,
                "Content is compressed with zstd",
                "/a/b",
                &c
            )
            .is_none()
        );
    }

    #[test]
    fn grpc_messages_are_percent_decoded() {
        assert_eq!(percent_decode(b"a%20b%25c%"), "a b%c%");
        assert_eq!(percent_decode(b"caf%C3%A9"), "café");
    }
}
