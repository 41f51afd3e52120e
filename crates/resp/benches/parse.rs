//! The RESP port's request parser against the `redis-protocol` crate
//! (6.0), on the buffers redis-benchmark sends (issue 36: "write our own
//! only if measured faster, and say so").
//!
//! ```text
//! cargo bench -p uuidmap-resp --bench parse
//! ```
//!
//! Three buffers, each RESP2 arrays of bulk strings exactly as
//! `tools/bench-resp.sh` has redis-benchmark send them: 16 pipelined `GET
//! <36-character UUID>`; 16 pipelined `SET <36-character UUID> <16
//! bytes>`; one `MGET` of 100 such keys. Each parser walks the whole
//! buffer, request by request, and hands every request's arguments to the
//! same sink as a slice of `&[u8]`, built as the connection builds it
//! (`connection::run`: on the stack up to 8 arguments, a `Vec` past
//! that). What differs is only how the request is framed:
//!
//! - `ours`: [`parser::parse`] with the server's limits, into a vector of
//!   ranges reused from request to request, as the connection reuses it;
//! - `redis_protocol_range`: `resp2::decode::decode_range`, the crate's
//!   fastest decoder (every other one calls it, then copies or slices):
//!   ranges of the buffer, in a `Vec` it allocates per array;
//! - `redis_protocol_bytes_mut`: `resp2::decode::decode_bytes_mut`, the
//!   decoder its tokio codec uses: splits a `BytesMut` and hands out
//!   `Bytes` views (refcounted). Each iteration starts from a fresh copy
//!   of the buffer, made outside the timed part.
//!
//! Throughput is requests per second (one element: one request).

use std::hint::black_box;
use std::ops::Range;

use bytes::BytesMut;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use redis_protocol::resp2::decode::{decode_bytes_mut, decode_range};
use redis_protocol::resp2::types::{BytesFrame, RangeFrame};
use uuidmap_resp::parser::{self, Limits};

/// The connection's: up to this many arguments go on the stack.
const INLINE_ARGS: usize = 8;

/// The server's limits at its defaults do not matter to the speed; these
/// let every buffer through.
const LIMITS: Limits = Limits {
    max_args: 1024,
    max_bulk: uuidmap_resp::MAX_BULK,
};

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

fn request(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        bulk(out, a);
    }
}

/// `10000000-0000-4000-8000-<12 digits>`: the script's key template, as
/// redis-benchmark's `-r` fills it.
fn key(i: u64) -> Vec<u8> {
    format!("10000000-0000-4000-8000-{:012}", i * 7_919 % 1_000_000).into_bytes()
}

/// The three buffers: (name, bytes, requests in it).
fn buffers() -> Vec<(&'static str, Vec<u8>, u64)> {
    let mut get = Vec::new();
    let mut set = Vec::new();
    for i in 0..16 {
        request(&mut get, &[b"GET", &key(i)]);
        request(&mut set, &[b"SET", &key(i), b"xxxxxxxxxxxxxxxx"]);
    }
    let keys: Vec<Vec<u8>> = (0..100).map(key).collect();
    let mut mget_args: Vec<&[u8]> = vec![b"MGET"];
    mget_args.extend(keys.iter().map(Vec::as_slice));
    let mut mget = Vec::new();
    request(&mut mget, &mget_args);
    vec![
        ("get_x16", get, 16),
        ("set_x16", set, 16),
        ("mget_100", mget, 1),
    ]
}

/// Where every request's arguments go: what `Commands::execute` takes.
/// Returns a number so that nothing is optimised away.
#[inline(never)]
fn sink(args: &[&[u8]]) -> usize {
    black_box(args).len() + black_box(args[args.len() - 1]).len()
}

/// Hands `n` arguments, the `i`th given by `arg(i)`, to the sink as the
/// connection does (`connection::run`).
#[inline(always)]
fn hand<'a>(n: usize, arg: impl Fn(usize) -> &'a [u8]) -> usize {
    if n <= INLINE_ARGS {
        let mut args: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
        for (i, a) in args.iter_mut().enumerate().take(n) {
            *a = arg(i);
        }
        sink(&args[..n])
    } else {
        let args: Vec<&[u8]> = (0..n).map(arg).collect();
        sink(&args)
    }
}

fn ours(buf: &[u8], ranges: &mut Vec<Range<usize>>) -> usize {
    let mut start = 0;
    let mut total = 0;
    while let Some(n) = parser::parse(&buf[start..], ranges, LIMITS).expect("valid") {
        let req = &buf[start..start + n];
        total += hand(ranges.len(), |i| &req[ranges[i].clone()]);
        start += n;
    }
    total
}

fn redis_protocol_range(buf: &[u8]) -> usize {
    let mut start = 0;
    let mut total = 0;
    while let Some((frame, n)) = decode_range(&buf[start..]).expect("valid") {
        let req = &buf[start..start + n];
        let RangeFrame::Array(items) = frame else {
            panic!("not an array")
        };
        total += hand(items.len(), |i| match &items[i] {
            RangeFrame::BulkString((s, e)) => &req[*s..*e],
            _ => panic!("not a bulk string"),
        });
        start += n;
    }
    total
}

fn redis_protocol_bytes_mut(mut buf: BytesMut) -> usize {
    let mut total = 0;
    while let Some((frame, _, _)) = decode_bytes_mut(&mut buf).expect("valid") {
        let BytesFrame::Array(items) = frame else {
            panic!("not an array")
        };
        total += hand(items.len(), |i| match &items[i] {
            BytesFrame::BulkString(b) => &b[..],
            _ => panic!("not a bulk string"),
        });
    }
    total
}

fn parse(c: &mut Criterion) {
    for (name, buf, requests) in buffers() {
        // The three agree before any is timed.
        let mut ranges = Vec::new();
        let want = ours(&buf, &mut ranges);
        assert_eq!(redis_protocol_range(&buf), want, "{name}");
        assert_eq!(
            redis_protocol_bytes_mut(BytesMut::from(&buf[..])),
            want,
            "{name}"
        );

        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements(requests));
        group.bench_function("ours", |b| {
            let mut ranges = Vec::new();
            b.iter(|| ours(black_box(&buf), &mut ranges))
        });
        group.bench_function("redis_protocol_range", |b| {
            b.iter(|| redis_protocol_range(black_box(&buf)))
        });
        group.bench_function("redis_protocol_bytes_mut", |b| {
            b.iter_batched(
                || BytesMut::from(&buf[..]),
                redis_protocol_bytes_mut,
                BatchSize::SmallInput,
            )
        });
        group.finish();
    }
}

criterion_group!(benches, parse);
criterion_main!(benches);
