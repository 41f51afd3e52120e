//! Issue 34 item 7: a grpcio client got a gzip body it had not been told
//! was compressed when a 1 ms deadline raced a `Scan`'s first answer. The
//! server was not at fault: on the wire, each such answer had
//! `grpc-encoding: gzip` in its headers before any message, every message
//! had the compressed flag, and every one inflated. grpcio 1.85 (C-core 58)
//! hands a message that arrives around the deadline up undecompressed, the
//! same against a plain python-h2 server that sends the headers first;
//! grpcio 1.51 never does (`tools/grpcio-deadline-repro.py`).
//!
//! This test keeps the server's side of that contract, as a non-tonic
//! client sees it (bare HTTP/2, `grpc-accept-encoding` as C-core sends it):
//! on one connection, many calls whose `grpc-timeout` is about as long as
//! the work, so that the messages race the client's deadline; half of them
//! cancelled by the client at the deadline as C-core does, and half with
//! the request message sent late, so that the server's own
//! DEADLINE_EXCEEDED races the handler's answer. For each:
//! a trailers-only answer carries no message; otherwise a message has the
//! compressed flag only when the headers say `grpc-encoding: gzip`, a flag-0
//! message is never a gzip stream, and every message decodes (inflated
//! first when flagged). It asserts the agreement whether or not the race
//! is won on this machine, so it guards the property on any CI box.

use std::io::Read;
use std::time::{Duration, Instant};

use prost::Message;
use prost::bytes::{Buf, Bytes, BytesMut};
use tonic::Code;
use uuidmap::server::proto::v1 as pb;
use uuidmap_testkit::server::*;

/// Entries in the index: one Scan answer is a single 64 KiB message.
const ENTRIES: usize = 2_000;

/// What a client saw of one call.
#[derive(Default)]
struct Seen {
    /// The response headers (absent: the client gave up before them).
    headers: Option<http::HeaderMap>,
    /// Each whole message: its compressed flag and its bytes.
    messages: Vec<(u8, Bytes)>,
    /// Bytes of a message not yet whole.
    partial: BytesMut,
    trailers: Option<http::HeaderMap>,
}

impl Seen {
    fn take_messages(&mut self) {
        while self.partial.len() >= 5 {
            let len = u32::from_be_bytes(self.partial[1..5].try_into().unwrap()) as usize;
            if self.partial.len() < 5 + len {
                return;
            }
            let flag = self.partial[0];
            let mut message = self.partial.split_to(5 + len);
            message.advance(5);
            self.messages.push((flag, message.freeze()));
        }
    }

    /// The call's status, from a trailers-only answer or the trailers.
    fn status(&self) -> Option<Code> {
        let headers = match &self.headers {
            Some(h) if h.contains_key("grpc-status") => h,
            _ => self.trailers.as_ref()?,
        };
        let code: i32 = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
        Some(Code::from(code))
    }
}

/// How a client makes one call.
#[derive(Clone, Copy)]
struct Pace {
    /// `grpc-timeout`, and the same as a duration.
    timeout: (&'static str, Duration),
    /// Reset the stream (CANCEL) at the deadline, as C-core does, instead
    /// of reading everything the server sends.
    cancel: bool,
    /// Send the request message only after the timeout (the timer's
    /// granularity, 1 ms, at least), so that the server's own deadline
    /// answer races the handler's.
    late_body: bool,
}

/// Calls `path` with `body` as grpcio does (its `grpc-accept-encoding`),
/// paced by `pace`.
async fn call(
    connection: &h2::client::SendRequest<Bytes>,
    authority: &str,
    path: &str,
    body: Bytes,
    pace: Pace,
) -> Seen {
    let (timeout, after) = pace.timeout;
    let mut client = connection.clone().ready().await.unwrap();
    let request = http::Request::post(format!("http://{authority}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-accept-encoding", "identity,deflate,gzip")
        .header("grpc-timeout", timeout)
        .body(())
        .unwrap();
    let started = Instant::now();
    let (response, mut send) = client.send_request(request, false).unwrap();
    if pace.late_body {
        tokio::time::sleep(after).await;
    }
    // Refused only when the server has already answered and closed the
    // stream (its deadline came before the late body): the answer is read
    // below all the same.
    let _ = send.send_data(body, true);
    let mut seen = Seen::default();
    let read = async {
        let (head, mut body) = response.await.unwrap().into_parts();
        seen.headers = Some(head.headers);
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            seen.partial.extend_from_slice(&chunk);
            seen.take_messages();
        }
        seen.trailers = body.trailers().await.unwrap();
    };
    if !pace.cancel {
        read.await;
    } else if tokio::time::timeout_at((started + after).into(), read)
        .await
        .is_err()
    {
        send.send_reset(h2::Reason::CANCEL);
    }
    seen
}

/// What the checks counted, to show that the test exercised the race.
#[derive(Debug, Default)]
struct Counts {
    compressed: usize,
    trailers_only: usize,
    cancelled_by_client: usize,
    ok_scans: usize,
}

/// The contract on one call's answer; `path` says how to decode its
/// messages.
fn check(path: &str, seen: &Seen, counts: &mut Counts) {
    let Some(headers) = &seen.headers else {
        counts.cancelled_by_client += 1;
        return;
    };
    if headers.contains_key("grpc-status") {
        counts.trailers_only += 1;
        assert!(
            seen.messages.is_empty() && seen.partial.is_empty(),
            "{path}: a trailers-only answer carried data"
        );
        return;
    }
    let encoding = headers.get("grpc-encoding").map(|v| v.to_str().unwrap());
    assert!(
        matches!(encoding, None | Some("gzip")),
        "{path}: grpc-encoding {encoding:?} (the client accepts identity, deflate, gzip; \
         the server sends gzip)"
    );
    let mut entries = 0;
    for (flag, message) in &seen.messages {
        let plain = match flag {
            0 => {
                assert!(
                    !message.starts_with(&[0x1f, 0x8b]),
                    "{path}: a message without the compressed flag is a gzip stream \
                     (headers {headers:?})"
                );
                message.to_vec()
            }
            1 => {
                assert_eq!(
                    encoding,
                    Some("gzip"),
                    "{path}: a message has the compressed flag but the headers do not say \
                     grpc-encoding: gzip (headers {headers:?})"
                );
                counts.compressed += 1;
                let mut plain = Vec::new();
                flate2::read::GzDecoder::new(&message[..])
                    .read_to_end(&mut plain)
                    .unwrap_or_else(|e| panic!("{path}: a flagged message does not inflate: {e}"));
                plain
            }
            other => panic!("{path}: compressed flag {other}"),
        };
        let decoded = match path.rsplit('/').next().unwrap() {
            "Scan" => pb::ScanResponse::decode(&plain[..]).map(|m| {
                assert_eq!(m.entries.len() % 32, 0, "{path}: entries of 32 bytes");
                entries += m.entries.len() / 32;
            }),
            "Get" => pb::GetResponse::decode(&plain[..]).map(drop),
            "Put" => pb::PutResponse::decode(&plain[..]).map(drop),
            "Ping" => pb::PingResponse::decode(&plain[..]).map(drop),
            other => panic!("no decoder for {other}"),
        };
        decoded.unwrap_or_else(|e| panic!("{path}: a message does not decode: {e}"));
    }
    if seen.trailers.is_some() {
        assert!(seen.partial.is_empty(), "{path}: a message cut short");
        if path.ends_with("/Scan") && seen.status() == Some(Code::Ok) {
            assert_eq!(entries, ENTRIES, "a whole Scan returns every entry");
            counts.ok_scans += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compressed_flag_agrees_with_grpc_encoding_when_deadlines_race_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.limits.max_write_ops = ENTRIES;
    let server = TestServer::start_with(c).await;
    server
        .client()
        .await
        .write(pb::WriteRequest {
            ops: (0..ENTRIES as u64)
                .map(|i| put_op(spread_key(i), spread_key(i + 1_000_000)))
                .collect(),
        })
        .await
        .unwrap();

    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (connection, driver) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 24)
        .handshake(tcp)
        .await
        .unwrap();
    tokio::spawn(driver);
    let authority = server.addr.to_string();

    // Deadlines from shorter than the server's work to longer, so that on
    // a fast box and a loaded one alike some answers race the server's own
    // DEADLINE_EXCEEDED and some messages race the client's deadline.
    const TIMEOUTS: [(&str, Duration); 5] = [
        ("100u", Duration::from_micros(100)),
        ("500u", Duration::from_micros(500)),
        ("1m", Duration::from_millis(1)),
        ("2m", Duration::from_millis(2)),
        ("4m", Duration::from_millis(4)),
    ];
    // Every combination of timeout, cancel and late body, in turn.
    let pace = |n: usize| Pace {
        timeout: TIMEOUTS[n % TIMEOUTS.len()],
        cancel: (n / TIMEOUTS.len()) % 2 == 1,
        late_body: (n / (2 * TIMEOUTS.len())) % 2 == 1,
    };
    let scan = framed(&pb::ScanRequest::default());
    let mut counts = Counts::default();
    let began = Instant::now();
    let mut n = 0usize;
    for round in 0..3u64 {
        for i in 0..10u64 {
            let key = spread_key(round * 10 + i);
            let calls = [
                (
                    "/uuidmap.v1.UuidMap/Get",
                    framed(&pb::GetRequest {
                        key: b(key),
                        ..Default::default()
                    }),
                ),
                ("/uuidmap.v1.UuidMap/Ping", framed(&pb::PingRequest {})),
                (
                    "/uuidmap.v1.UuidMap/Put",
                    framed(&put_req(key, spread_key(round * 10 + i + 1_000_000))),
                ),
            ];
            for (path, body) in calls {
                let seen = call(&connection, &authority, path, body, pace(n)).await;
                check(path, &seen, &mut counts);
                n += 1;
            }
        }
        for _ in 0..60 {
            let path = "/uuidmap.v1.UuidMap/Scan";
            let seen = call(&connection, &authority, path, scan.clone(), pace(n)).await;
            check(path, &seen, &mut counts);
            n += 1;
        }
    }
    eprintln!("{n} calls in {:?}: {counts:?}", began.elapsed());
    // Whether a deadline won each race depends on the box; a Scan with
    // time to spare is a whole, compressed answer on any box, so the
    // checks above are known to run on compressed messages.
    let path = "/uuidmap.v1.UuidMap/Scan";
    let unhurried = Pace {
        timeout: ("10S", Duration::from_secs(10)),
        cancel: false,
        late_body: false,
    };
    let seen = call(&connection, &authority, path, scan, unhurried).await;
    let compressed_before = counts.compressed;
    check(path, &seen, &mut counts);
    assert_eq!(seen.status(), Some(Code::Ok));
    assert!(
        counts.compressed > compressed_before,
        "the answer to a client that accepts gzip is compressed"
    );
    server.stop().await.unwrap();
}
