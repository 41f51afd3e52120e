//! End-to-end tests of admission control: the real server on an ephemeral
//! port, called through the generated client.
//!
//! Permits are held deterministically in two ways: a scan whose stream the
//! client does not read (its permit lives as long as the stream), and a
//! raw HTTP/2 call that sends its headers but never its body (the call is
//! admitted on its headers, and its handler then waits for the body,
//! holding the permit).

use std::time::{Duration, Instant};

use tonic::transport::Channel;
use tonic::{Code, Request};
use uuidmap::server::ServeConfig;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap_testkit::server::{
    TestServer, b, config, framed, put_op, raw_status, spread_key as key, stalled_call, u,
};

type Client = UuidMapClient<Channel>;

const ENTRIES: u64 = 200_000;
const WRITE_OPS: usize = 10_000;

/// A config with one permit and a queue of one in every class, and room
/// for big write batches (to load a scan larger than the flow-control
/// windows).
fn tight(dir: &std::path::Path) -> ServeConfig {
    let mut c = config(dir);
    c.limits.max_write_ops = WRITE_OPS;
    c.admission.read_permits = 1;
    c.admission.read_queue = 1;
    c.admission.write_permits = 1;
    c.admission.write_queue = 1;
    c.admission.scan_permits = 1;
    c.admission.scan_queue = 1;
    c.admission.max_long_polls = 2;
    c
}

async fn load(c: &mut Client) {
    let ids: Vec<u64> = (0..ENTRIES).collect();
    for chunk in ids.chunks(WRITE_OPS) {
        let ops = chunk.iter().map(|&i| put_op(key(i), u(7))).collect();
        c.write(pb::WriteRequest { ops }).await.unwrap();
    }
}

fn with_timeout<T>(message: T, timeout: Duration) -> Request<T> {
    let mut r = Request::new(message);
    r.set_timeout(timeout);
    r
}

/// Entries in a whole scan.
async fn scan_all(c: &mut Client, timeout: Duration) -> Result<usize, tonic::Status> {
    let mut stream = c
        .scan(with_timeout(pb::ScanRequest::default(), timeout))
        .await?
        .into_inner();
    let mut n = 0;
    while let Some(m) = stream.message().await? {
        n += m.entries.len() / 32;
    }
    Ok(n)
}

/// Waits until `ok` holds, for at most a second.
async fn eventually(mut ok: impl AsyncFnMut() -> bool) {
    for _ in 0..100 {
        if ok().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the condition did not hold within a second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_holds_its_permit_until_its_stream_ends_and_others_time_out_or_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(tight(dir.path())).await;
    let mut c = server.client().await;
    load(&mut c).await;

    // A scan the client reads one message of, then leaves unread: 6 MiB
    // of entries is far more than the windows and buffers between the
    // producer and the client, so the stream cannot end on its own.
    let mut holder = server.client().await;
    let mut held = holder
        .scan(pb::ScanRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(held.message().await.unwrap().is_some());

    // The next scan waits for the permit until its deadline is near.
    let mut waiter = server.client().await;
    let started = Instant::now();
    let queued = tokio::spawn(async move {
        let r = scan_all(&mut waiter, Duration::from_millis(300)).await;
        (r, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The queue (one) is full: a third scan is refused at once.
    let mut third = server.client().await;
    let t = Instant::now();
    let e = scan_all(&mut third, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("overloaded") && e.message().contains("1 scan requests already wait"),
        "{}",
        e.message()
    );
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "refused at once, not at its 5 s deadline: {:?}",
        t.elapsed()
    );
    let (r, waited) = queued.await.unwrap();
    let e = r.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(e.message().contains("it was not run"), "{}", e.message());
    assert!(waited >= Duration::from_millis(250), "{waited:?}");

    // Read the held scan to its end: the permit comes back with the end of
    // the stream, and the next scan runs.
    let mut n = 0;
    while let Some(m) = held.message().await.unwrap() {
        n += m.entries.len() / 32;
    }
    assert!(n > 0);
    assert_eq!(
        scan_all(&mut c, Duration::from_secs(10)).await.unwrap(),
        ENTRIES as usize
    );

    // A scan the client abandons gives its permit back.
    let mut abandoned = holder
        .scan(pb::ScanRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(abandoned.message().await.unwrap().is_some());
    drop(abandoned);
    assert_eq!(
        scan_all(&mut c, Duration::from_secs(5)).await.unwrap(),
        ENTRIES as usize
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_deadline_passes_while_queued_is_refused_and_never_applied() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(tight(dir.path())).await;
    let mut c = server.client().await;
    let before = c.stats(pb::StatsRequest {}).await.unwrap().into_inner();

    let stalled = stalled_call(server.addr, "Put").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let late = pb::PutRequest {
        key: b(u(42)),
        value: b(u(43)),
    };
    // Over bare HTTP/2: tonic's client would race the server's answer with
    // its own timer (CANCELLED) on a busy machine.
    let (code, message) = raw_status(
        &server,
        "/uuidmap.v1.UuidMap/Put",
        "50m",
        Some(framed(&late)),
    )
    .await;
    assert_eq!(code, Code::DeadlineExceeded, "{message}");
    assert!(
        message.contains("write slots") && message.contains("it was not run"),
        "{message}"
    );

    // Once the stalled call goes away, writes run again; the late Put was
    // never applied (no entry, and the LSN did not move).
    drop(stalled);
    let got = c
        .get(pb::GetRequest {
            key: b(u(42)),
            min_lsn: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.value, None);
    assert_eq!(got.applied_lsn, before.applied_lsn);
    let mut put = None;
    eventually(async || {
        put = c
            .put(with_timeout(late.clone(), Duration::from_millis(500)))
            .await
            .ok();
        put.is_some()
    })
    .await;
    assert_eq!(put.unwrap().into_inner().lsn, before.applied_lsn + 1);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pays_the_same_admission_as_get() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(tight(dir.path())).await;
    let mut c = server.client().await;
    let stalled = stalled_call(server.addr, "Get").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..2 {
        // Over bare HTTP/2, so that the answer is the server's (see above).
        let ping = framed(&pb::PingRequest::default());
        let (code, message) =
            raw_status(&server, "/uuidmap.v1.UuidMap/Ping", "50m", Some(ping)).await;
        assert_eq!(code, Code::DeadlineExceeded, "{message}");
        assert!(message.contains("read slots"), "{message}");
    }
    // Writes are another class: they run.
    c.put(pb::PutRequest {
        key: b(u(1)),
        value: b(u(2)),
    })
    .await
    .unwrap();
    drop(stalled);
    eventually(async || {
        c.ping(with_timeout(
            pb::PingRequest::default(),
            Duration::from_millis(200),
        ))
        .await
        .is_ok()
    })
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_are_capped_on_their_own_and_hold_no_read_permit() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(tight(dir.path())).await;
    let mut c = server.client().await;
    // Two WaitFor calls for an LSN far ahead: both open (the cap is two),
    // waiting up to the server's maximum wait (300 ms in tests).
    let polls: Vec<_> = (0..2)
        .map(|_| {
            let mut c = c.clone();
            tokio::spawn(async move {
                c.wait_for(with_timeout(
                    pb::WaitForRequest { lsn: 1_000_000 },
                    Duration::from_secs(5),
                ))
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let e = c
        .wait_for(pb::WaitForRequest { lsn: 1_000_000 })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("2 long polls"), "{}", e.message());
    let e = c.watch(pb::WatchRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    // With one read permit, reads still run while the polls wait.
    for _ in 0..3 {
        c.get(pb::GetRequest {
            key: b(u(5)),
            min_lsn: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    // The polls end by their own wait (DEADLINE_EXCEEDED at the server's
    // maximum), and then the cap has room again.
    for p in polls {
        assert_eq!(p.await.unwrap().unwrap_err().code(), Code::DeadlineExceeded);
    }
    let lsn = c
        .put(pb::PutRequest {
            key: b(u(1)),
            value: b(u(2)),
        })
        .await
        .unwrap()
        .into_inner()
        .lsn;
    c.wait_for(pb::WaitForRequest { lsn }).await.unwrap();
    server.stop().await.unwrap();
}
