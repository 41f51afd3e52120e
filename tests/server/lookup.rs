//! The streaming `Lookup` RPC: many requests on one stream, each answered
//! by id as a `BatchGet` of its keys would be, out of order when one waits
//! for its LSN; a bad or shed request refused alone while the stream goes
//! on; the stream admitted as a long poll and its work by keys; a stopping
//! server ends it.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::Streaming;
use tonic::transport::Channel;
use uuid::Uuid;
use uuidmap::server::ServeConfig;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap_testkit::server::{
    MAX_BATCH_KEYS, TestServer, b, config, put_op, sample, scrape, spread_key, stalled_call, u,
};

type Client = UuidMapClient<Channel>;

/// An open Lookup stream: where requests go, where answers come from.
struct Stream {
    requests: mpsc::Sender<pb::LookupRequest>,
    answers: Streaming<pb::LookupResponse>,
}

impl Stream {
    async fn open(c: &mut Client) -> Result<Stream, tonic::Status> {
        let (requests, rx) = mpsc::channel(64);
        let answers = c.lookup(ReceiverStream::new(rx)).await?.into_inner();
        Ok(Stream { requests, answers })
    }

    async fn send(&self, id: u64, keys: &[Uuid], min_lsn: u64) {
        self.send_raw(
            id,
            keys.iter().flat_map(|k| *k.as_bytes()).collect(),
            min_lsn,
        )
        .await;
    }

    async fn send_raw(&self, id: u64, keys: Vec<u8>, min_lsn: u64) {
        let request = pb::LookupRequest {
            id,
            keys: keys.into(),
            min_lsn,
            ..Default::default()
        };
        self.requests.send(request).await.unwrap();
    }

    /// As `send`, with a deadline of the request's own (`timeout_us`).
    async fn send_timed(&self, id: u64, keys: &[Uuid], min_lsn: u64, timeout: Duration) {
        let request = pb::LookupRequest {
            id,
            keys: keys.iter().flat_map(|k| *k.as_bytes()).collect(),
            min_lsn,
            timeout_us: timeout.as_micros() as u64,
            ..Default::default()
        };
        self.requests.send(request).await.unwrap();
    }

    /// The next answer, within 5 s.
    async fn next(&mut self) -> pb::LookupResponse {
        tokio::time::timeout(Duration::from_secs(5), self.answers.message())
            .await
            .expect("an answer within 5 s")
            .expect("the stream goes on")
            .expect("the stream has not ended")
    }

    /// Half-closes the stream and reads the answers still to come, until
    /// the server ends it; fails if it ends with an error.
    async fn finish(mut self) -> Vec<pb::LookupResponse> {
        drop(self.requests);
        let mut rest = Vec::new();
        while let Some(a) = self.answers.message().await.unwrap() {
            rest.push(a);
        }
        rest
    }
}

/// Puts `k → v` for every pair, in write batches; the last LSN.
async fn load(c: &mut Client, entries: &[(Uuid, Uuid)]) -> u64 {
    let mut lsn = 0;
    for chunk in entries.chunks(10) {
        let ops = chunk.iter().map(|&(k, v)| put_op(k, v)).collect();
        lsn = c
            .write(pb::WriteRequest { ops })
            .await
            .unwrap()
            .into_inner()
            .lsn;
    }
    lsn
}

/// The error code of an answer that was refused.
fn code(a: &pb::LookupResponse) -> Option<Code> {
    a.error.as_ref().map(|e| Code::from_i32(e.code as i32))
}

fn message(a: &pb::LookupResponse) -> &str {
    a.error.as_ref().map_or("", |e| &e.message)
}

/// `a` is request `id`'s DEADLINE_EXCEEDED, whose message holds every one
/// of `says`.
fn assert_deadline(a: &pb::LookupResponse, id: u64, says: &[&str]) {
    assert_eq!(
        (a.id, code(a)),
        (id, Some(Code::DeadlineExceeded)),
        "{:?}",
        a.error
    );
    for words in says {
        assert!(message(a).contains(words), "{words:?}: {:?}", a.error);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_answers_every_request_by_id_as_batch_get_would() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    // Keys 0..400 are present with value 1000+i; 400..600 are not. One
    // value is the nil UUID, which `found` tells from "absent".
    let entries: Vec<(Uuid, Uuid)> = (0..400)
        .map(|i| {
            let v = if i == 7 { Uuid::nil() } else { u(1000 + i) };
            (spread_key(i as u64), v)
        })
        .collect();
    let lsn = load(&mut c, &entries).await;

    let mut stream = Stream::open(&mut c).await.unwrap();
    let mut asked: HashMap<u64, Vec<Uuid>> = HashMap::new();
    for r in 0..40u64 {
        // Sizes 0 to MAX_BATCH_KEYS, present and absent keys mixed.
        let n = (r as usize * 37) % (MAX_BATCH_KEYS + 1);
        let keys: Vec<Uuid> = (0..n as u64)
            .map(|j| spread_key((r * 131 + j * 17) % 600))
            .collect();
        let id = r * 1_000_003 + 5;
        stream.send(id, &keys, lsn).await;
        asked.insert(id, keys);
    }
    let first = stream.next().await;
    let mut answers = stream.finish().await;
    answers.push(first);
    assert_eq!(answers.len(), asked.len(), "one answer per request");
    for a in answers {
        let keys = asked.remove(&a.id).expect("an id that was asked, once");
        assert_eq!(a.error, None, "request {}", a.id);
        assert!(a.applied_lsn >= lsn, "the min_lsn was honoured");
        let packed: Vec<u8> = keys.iter().flat_map(|k| *k.as_bytes()).collect();
        let batch = c
            .batch_get(pb::BatchGetRequest {
                keys: packed.into(),
                min_lsn: 0,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (&a.values, &a.found),
            (&batch.values, &batch.found),
            "request {} answers as BatchGet does",
            a.id
        );
        // And BatchGet answers as the entries say.
        for (i, k) in keys.iter().enumerate() {
            let expected = entries.iter().find(|e| e.0 == *k).map(|e| e.1);
            let found = a.found[i / 8] & (1 << (i % 8)) != 0;
            assert_eq!(found, expected.is_some(), "request {} key {i}", a.id);
            if let Some(v) = expected {
                assert_eq!(&a.values[i * 16..(i + 1) * 16], v.as_bytes());
            }
        }
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_for_its_lsn_does_not_hold_back_the_ones_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.limits.max_wait = Duration::from_secs(10);
    let server = TestServer::start_with(cfg).await;
    let mut c = server.client().await;
    let k = u(42);
    let lsn = load(&mut c, &[(u(1), u(2))]).await;

    let mut stream = Stream::open(&mut c).await.unwrap();
    stream.send(1, &[k], lsn + 1).await;
    stream.send(2, &[k], 0).await;
    let second = stream.next().await;
    assert_eq!(
        second.id, 2,
        "the request behind the waiting one answers first"
    );
    assert_eq!((second.error, &second.found[..]), (None, &[0u8][..]));

    let put = c
        .put(pb::PutRequest {
            key: b(k),
            value: b(u(43)),
        })
        .await
        .unwrap()
        .into_inner()
        .lsn;
    assert_eq!(put, lsn + 1);
    let first = stream.next().await;
    assert_eq!(first.id, 1);
    assert_eq!(first.error, None);
    assert_eq!(
        (&first.found[..], &first.values[..]),
        (&[1u8][..], &b(u(43))[..])
    );
    assert!(first.applied_lsn > lsn);
    assert!(stream.finish().await.is_empty());
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_request_is_refused_alone_and_the_stream_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let lsn = load(&mut c, &[(u(1), u(2))]).await;

    let mut stream = Stream::open(&mut c).await.unwrap();
    stream.send_raw(1, vec![1; 17], 0).await;
    stream.send(2, &[u(1), Uuid::nil()], 0).await;
    stream.send(3, &vec![u(1); MAX_BATCH_KEYS + 1], 0).await;
    // Waits for an LSN never written: the server's maximum wait (300 ms
    // in the tests' config) ends it.
    stream.send(4, &[u(1)], lsn + 1_000).await;
    stream.send(5, &[u(1)], 0).await;
    let mut answers = vec![
        stream.next().await,
        stream.next().await,
        stream.next().await,
        stream.next().await,
    ];
    answers.extend(stream.finish().await);
    answers.sort_by_key(|a| a.id);
    let ids: Vec<u64> = answers.iter().map(|a| a.id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);

    assert_eq!(code(&answers[0]), Some(Code::InvalidArgument));
    assert!(
        message(&answers[0]).contains("multiple of 16"),
        "{answers:?}"
    );
    assert_eq!(code(&answers[1]), Some(Code::InvalidArgument));
    assert!(message(&answers[1]).contains("keys[1]"), "{answers:?}");
    assert_eq!(code(&answers[2]), Some(Code::InvalidArgument));
    assert!(
        message(&answers[2]).contains(&format!("at most {MAX_BATCH_KEYS} keys")),
        "{answers:?}"
    );
    assert_eq!(code(&answers[3]), Some(Code::DeadlineExceeded));
    assert!(
        message(&answers[3]).contains(&format!("{}", lsn + 1_000)),
        "the message names the LSN waited for: {answers:?}"
    );
    for a in &answers[..4] {
        assert!(a.values.is_empty() && a.found.is_empty());
    }
    assert_eq!(answers[4].error, None);
    assert_eq!(&answers[4].values[..], &b(u(2))[..]);
    server.stop().await.unwrap();
}

/// One read permit, a read queue of one, two long polls, and batches
/// larger than a permit's worth of keys.
fn tight(dir: &std::path::Path) -> ServeConfig {
    let mut c = config(dir);
    c.limits.max_batch_keys = 3_000;
    c.admission.read_permits = 1;
    c.admission.read_queue = 1;
    c.admission.max_long_polls = 2;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_is_a_long_poll_and_its_requests_are_admitted_as_reads() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(tight(dir.path())).await;
    let mut c = server.client().await;
    let entries: Vec<(Uuid, Uuid)> = (0..2_500).map(|i| (spread_key(i), u(7))).collect();
    load(&mut c, &entries).await;

    // A request of 2,500 keys is looked up a permit's worth at a time,
    // under the one read permit there is.
    let mut a = Stream::open(&mut c).await.unwrap();
    let keys: Vec<Uuid> = entries.iter().map(|e| e.0).collect();
    a.send(1, &keys, 0).await;
    let big = a.next().await;
    assert_eq!(big.error, None);
    assert!(big.found[..2_500 / 8].iter().all(|&f| f == 0xff));
    assert_eq!(big.found[2_500 / 8], 0x0f);

    // Two streams are open: a third is refused, as a long poll is.
    let mut b = Stream::open(&mut c).await.unwrap();
    let third = Stream::open(&mut c).await.err().expect("refused");
    assert_eq!(third.code(), Code::ResourceExhausted, "{third:?}");
    assert!(third.message().contains("long polls"), "{third:?}");

    // With the read permit held by a stalled Get, one request waits in the
    // queue of one until the server's maximum wait, and a request that
    // finds the queue full is refused at once. Either stream may be the
    // one that queued.
    let stalled = stalled_call(server.addr, "Get").await;
    // Until the stalled call holds the permit, a ping with a short
    // deadline gets through.
    for tries in 0.. {
        let mut ping = tonic::Request::new(pb::PingRequest::default());
        ping.set_timeout(Duration::from_millis(30));
        match c.ping(ping).await {
            Err(e) if e.code() == Code::DeadlineExceeded => break,
            _ if tries < 100 => tokio::time::sleep(Duration::from_millis(10)).await,
            other => panic!("the stalled Get never held the read permit: {other:?}"),
        }
    }
    a.send(2, &keys[..10], 0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    b.send(3, &keys[..10], 0).await;
    let (x, y) = (a.next().await, b.next().await);
    let mut codes = [code(&x), code(&y)];
    codes.sort_by_key(|c| c.map(|c| c as i32));
    assert_eq!(
        codes,
        [Some(Code::DeadlineExceeded), Some(Code::ResourceExhausted)],
        "{x:?} {y:?}"
    );
    assert!(message(&x).contains("read") && message(&y).contains("read"));

    // Once the permit is free, the same streams are answered again.
    drop(stalled);
    let mut id = 10;
    loop {
        a.send(id, &keys[..10], 0).await;
        let answer = a.next().await;
        assert_eq!(answer.id, id);
        if answer.error.is_none() {
            assert_eq!(answer.found, vec![0xff, 0x03]);
            break;
        }
        id += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A stream that ends frees its long poll.
    assert!(b.finish().await.is_empty());
    let mut tries = 0;
    let c2 = loop {
        match Stream::open(&mut c).await {
            Ok(s) => break s,
            Err(e) if e.code() == Code::ResourceExhausted && tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    drop(c2);
    drop(a);
    server.stop().await.unwrap();
}

/// Each request's own deadline (`timeout_us`) on a stream without one:
/// its waits (for its LSN, for a read permit) end there rather than at the
/// server's maximum wait of 10 s; one whose deadline passes before its keys
/// are looked up gets the deadline error, not an answer; and a request with
/// time to spare is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_given_up_at_its_own_deadline_and_the_stream_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tight(dir.path());
    cfg.limits.max_wait = Duration::from_secs(10);
    let server = TestServer::start_with(cfg).await;
    let mut c = server.client().await;
    let entries: Vec<(Uuid, Uuid)> = (0..2_500).map(|i| (spread_key(i), u(7))).collect();
    let lsn = load(&mut c, &entries).await;
    let keys: Vec<Uuid> = entries.iter().map(|e| e.0).collect();
    let mut stream = Stream::open(&mut c).await.unwrap();
    const DEADLINE: Duration = Duration::from_millis(200);
    let within_deadline = |took: Duration| took >= DEADLINE * 8 / 10 && took < DEADLINE * 5;

    // An LSN never written: the wait ends at the request's deadline.
    let started = std::time::Instant::now();
    stream
        .send_timed(1, &keys[..1], lsn + 1_000, DEADLINE)
        .await;
    let a = stream.next().await;
    assert_deadline(&a, 1, &["request's deadline"]);
    assert!(
        within_deadline(started.elapsed()),
        "{:?}",
        started.elapsed()
    );

    // 1 µs is over before the second permit's worth of keys (1,024 each)
    // is looked up: no answer, whatever the first piece found.
    stream
        .send_timed(2, &keys, 0, Duration::from_micros(1))
        .await;
    let a = stream.next().await;
    assert_deadline(&a, 2, &["passed before"]);
    assert!(a.values.is_empty() && a.found.is_empty());

    // With time to spare, the same keys are answered.
    stream
        .send_timed(3, &keys, 0, Duration::from_secs(10))
        .await;
    let a = stream.next().await;
    assert_eq!((a.id, a.error), (3, None));
    assert_eq!(a.found[..2_500 / 8], [0xff; 2_500 / 8]);

    // The read permit held by a stalled Get: the wait for it ends at the
    // request's deadline.
    let stalled = stalled_call(server.addr, "Get").await;
    for tries in 0.. {
        let mut ping = tonic::Request::new(pb::PingRequest::default());
        ping.set_timeout(Duration::from_millis(30));
        match c.ping(ping).await {
            Err(e) if e.code() == Code::DeadlineExceeded => break,
            _ if tries < 100 => tokio::time::sleep(Duration::from_millis(10)).await,
            other => panic!("the stalled Get never held the read permit: {other:?}"),
        }
    }
    let started = std::time::Instant::now();
    stream.send_timed(4, &keys[..1], 0, DEADLINE).await;
    let a = stream.next().await;
    assert_deadline(&a, 4, &["read", "request's deadline"]);
    assert!(
        within_deadline(started.elapsed()),
        "{:?}",
        started.elapsed()
    );
    drop(stalled);
    assert!(stream.finish().await.is_empty());
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_ends_an_open_stream_with_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let mut stream = Stream::open(&mut c).await.unwrap();
    stream.send(1, &[u(1)], 0).await;
    assert_eq!(stream.next().await.error, None);
    // The client keeps its side open; the stop must not wait for it.
    tokio::time::timeout(Duration::from_secs(10), server.stop())
        .await
        .expect("the stop does not wait for the open stream")
        .unwrap();
    let end = stream.answers.message().await;
    let status = end.expect_err("the stream ends in an error");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_too_large_to_decode_ends_the_stream_with_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let mut stream = Stream::open(&mut c).await.unwrap();
    stream.send(1, &[u(1)], 0).await;
    assert_eq!(stream.next().await.error, None);
    // Over the 4 MiB the server decodes (its batch limit is far below).
    stream.send_raw(2, vec![1; 5 << 20], 0).await;
    let status = stream.answers.message().await.expect_err("the stream ends");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("at most {MAX_BATCH_KEYS} keys")),
        "{status:?}"
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_and_keys_are_counted_in_metrics_and_the_stream_as_one_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let server = TestServer::start_with(cfg).await;
    let mut c = server.client().await;
    let before = scrape(&server).await;
    let stream = Stream::open(&mut c).await.unwrap();
    stream.send(1, &[u(1), u(2), u(3)], 0).await;
    stream.send(2, &[u(4); 5], 0).await;
    stream.send_raw(3, vec![0; 15], 0).await;
    assert_eq!(stream.finish().await.len(), 3);
    let after = scrape(&server).await;
    // The series are process-wide (tests run side by side): only this
    // test's server has metrics on, so only it adds to them.
    let delta = |name, labels: &[(&str, &str)]| {
        sample(&after, name, labels).unwrap_or(0.0) - sample(&before, name, labels).unwrap_or(0.0)
    };
    let requests = "uuidmap_lookup_requests_total";
    assert_eq!(delta(requests, &[("code", "OK")]), 2.0, "{after}");
    assert_eq!(delta(requests, &[("code", "INVALID_ARGUMENT")]), 1.0);
    assert_eq!(delta("uuidmap_lookup_keys_total", &[]), 8.0);
    let calls = &[("rpc", "Lookup"), ("code", "OK")];
    assert_eq!(delta("uuidmap_rpc_requests_total", calls), 1.0);
    server.stop().await.unwrap();
}
