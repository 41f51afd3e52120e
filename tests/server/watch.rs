//! End-to-end tests of `Watch`: the real server on an ephemeral port,
//! called through the generated client.

use std::time::Duration;

use tonic::transport::Channel;
use tonic::{Code, Streaming};
use uuid::Uuid;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_admin_client::UuidMapAdminClient;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap_testkit::server::{TestServer, b, config, put_op, u};

type Client = UuidMapClient<Channel>;

/// A change as (key, value or None for a removal).
type Change = (Uuid, Option<Uuid>);

fn change(c: &pb::Change) -> Change {
    (
        Uuid::from_slice(&c.key).unwrap(),
        c.value.as_ref().map(|v| Uuid::from_slice(v).unwrap()),
    )
}

async fn watch(
    c: &mut Client,
    after_lsn: u64,
) -> Result<Streaming<pb::WatchResponse>, tonic::Status> {
    Ok(c.watch(pb::WatchRequest {
        after_lsn,
        ..Default::default()
    })
    .await?
    .into_inner())
}

/// Batches from `stream` until (and including) LSN `last`, checking they
/// are consecutive from `first`.
async fn batches_until(
    stream: &mut Streaming<pb::WatchResponse>,
    first: u64,
    last: u64,
) -> Vec<(u64, Vec<Change>)> {
    let mut out: Vec<(u64, Vec<Change>)> = Vec::new();
    while out.last().is_none_or(|b| b.0 < last) {
        let response = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("a batch within 10 s")
            .unwrap()
            .expect("the stream goes on");
        assert!(!response.batches.is_empty(), "a response holds batches");
        for batch in response.batches {
            let want = out.last().map_or(first, |b| b.0 + 1);
            assert_eq!(batch.lsn, want, "batches are consecutive, in LSN order");
            out.push((batch.lsn, batch.changes.iter().map(change).collect()));
        }
    }
    out
}

async fn put(c: &mut Client, k: Uuid, v: Uuid) -> u64 {
    c.put(pb::PutRequest {
        key: b(k),
        value: b(v),
    })
    .await
    .unwrap()
    .into_inner()
    .lsn
}

async fn applied(c: &mut Client) -> u64 {
    c.stats(pb::StatsRequest {})
        .await
        .unwrap()
        .into_inner()
        .applied_lsn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_zero_sees_every_batch_in_order_with_cas_as_its_result_then_follows() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let (k1, k2, k3) = (u(1), u(2), u(3));

    assert_eq!(put(&mut c, k1, u(0xa)).await, 1);
    let w = c
        .write(pb::WriteRequest {
            ops: vec![
                put_op(k2, u(0xb)),
                pb::WriteOp {
                    op: Some(pb::write_op::Op::Delete(pb::DeleteOp { key: b(k1) })),
                },
                pb::WriteOp {
                    op: Some(pb::write_op::Op::CompareAndSet(pb::CompareAndSetOp {
                        key: b(k2),
                        expected: Some(b(u(0xb))),
                        new_value: Some(b(u(0xc))),
                    })),
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(w.lsn, 2);
    let cas = |key, expected: Option<Uuid>, new_value: Option<Uuid>| pb::CompareAndSetRequest {
        key: b(key),
        expected: expected.map(b),
        new_value: new_value.map(b),
    };
    let created = c
        .compare_and_set(cas(k3, None, Some(u(0xd))))
        .await
        .unwrap();
    assert_eq!(created.into_inner().lsn, 3);
    // A mismatch changes nothing and logs nothing.
    let refused = c
        .compare_and_set(cas(k3, None, Some(u(0xe))))
        .await
        .unwrap();
    assert!(!refused.into_inner().applied);
    let removed = c
        .compare_and_set(cas(k3, Some(u(0xd)), None))
        .await
        .unwrap();
    assert_eq!(removed.into_inner().lsn, 4);

    let mut stream = watch(&mut c, 0).await.unwrap();
    let seen = batches_until(&mut stream, 1, 4).await;
    assert_eq!(
        seen,
        vec![
            (1, vec![(k1, Some(u(0xa)))]),
            (2, vec![(k2, Some(u(0xb))), (k1, None), (k2, Some(u(0xc)))]),
            (3, vec![(k3, Some(u(0xd)))]),
            (4, vec![(k3, None)]),
        ]
    );

    // Then it follows new writes as they are applied, promptly.
    for i in 0..20u128 {
        let lsn = put(&mut c, u(100 + i), u(i)).await;
        let started = std::time::Instant::now();
        let got = batches_until(&mut stream, lsn, lsn).await;
        assert_eq!(got, vec![(lsn, vec![(u(100 + i), Some(u(i)))])]);
        assert!(started.elapsed() < Duration::from_secs(1));
    }
    drop(stream);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_the_applied_lsn_sees_only_new_batches_and_one_ahead_waits() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    for i in 0..10 {
        put(&mut c, u(i + 1), u(i)).await;
    }
    let now = applied(&mut c).await;
    let mut from_now = watch(&mut c, now).await.unwrap();
    // After an LSN not applied yet: waits for it, then goes on.
    let mut ahead = watch(&mut c, now + 2).await.unwrap();
    let lsn = put(&mut c, u(50), u(5)).await;
    assert_eq!(lsn, now + 1);
    assert_eq!(
        batches_until(&mut from_now, now + 1, now + 1).await,
        vec![(now + 1, vec![(u(50), Some(u(5)))])]
    );
    put(&mut c, u(51), u(5)).await;
    put(&mut c, u(52), u(5)).await;
    let got = batches_until(&mut ahead, now + 3, now + 3).await;
    assert_eq!(got, vec![(now + 3, vec![(u(52), Some(u(5)))])]);
    drop((from_now, ahead));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_available_at_once_share_responses_of_at_most_256_kib() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.max_write_ops = 2_000;
    let server = TestServer::start_with(config).await;
    let mut c = server.client().await;
    let mut last = 0;
    for round in 0..300u128 {
        let ops = (0..1_000)
            .map(|i| put_op(u(round * 1_000 + i + 1), u(round)))
            .collect();
        last = c
            .write(pb::WriteRequest { ops })
            .await
            .unwrap()
            .into_inner()
            .lsn;
    }
    let mut stream = watch(&mut c, 0).await.unwrap();
    let mut responses = 0;
    let mut next = 1;
    while next <= last {
        let r = stream.message().await.unwrap().unwrap();
        assert!(prost::Message::encoded_len(&r) <= 256 << 10);
        for batch in &r.batches {
            assert_eq!(batch.lsn, next);
            assert_eq!(batch.changes.len(), 1_000);
            next += 1;
        }
        responses += 1;
    }
    // About 38 KB per batch: six fit in a response.
    assert!(
        responses * 4 <= last,
        "{responses} responses for {last} batches"
    );
    drop(stream);
    server.stop().await.unwrap();
}

/// A server with small WAL files and a backlog of `batches` batches of
/// 1,000 puts; then two snapshots, so that the WAL files the first one
/// covers are removed.
async fn server_with_cut_wal(dir: &std::path::Path) -> TestServer {
    let mut config = config(dir);
    config.limits.max_write_ops = 2_000;
    config.wal_file_bytes = 256 << 10;
    TestServer::start_with(config).await
}

async fn load(c: &mut Client, rounds: std::ops::Range<u128>) -> u64 {
    let mut last = 0;
    for round in rounds {
        let ops = (0..1_000)
            .map(|i| put_op(u(round * 1_000 + i + 1), u(round)))
            .collect();
        last = c
            .write(pb::WriteRequest { ops })
            .await
            .unwrap()
            .into_inner()
            .lsn;
    }
    last
}

async fn snapshot_twice(server: &TestServer, c: &mut Client, round: u128) {
    let mut admin = UuidMapAdminClient::new(server.channel().await);
    admin.snapshot(pb::SnapshotRequest {}).await.unwrap();
    load(c, round..round + 1).await;
    admin.snapshot(pb::SnapshotRequest {}).await.unwrap();
}

fn wal_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("wal-"))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_older_than_the_kept_wal_is_failed_precondition_telling_to_rescan() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_cut_wal(dir.path()).await;
    let mut c = server.client().await;
    load(&mut c, 0..100).await;
    let before = wal_files(dir.path());
    snapshot_twice(&server, &mut c, 100).await;
    let after = wal_files(dir.path());
    assert!(
        after.first() > before.first(),
        "the snapshots removed old WAL files: {before:?} -> {after:?}"
    );

    let e = watch(&mut c, 0).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let m = e.message();
    assert!(
        m.contains("after LSN 0 are no longer kept")
            && m.contains("Rescan")
            && m.contains("applied_lsn"),
        "{m}"
    );

    // The rescan-then-watch recipe: a Scan's applied_lsn is watchable.
    let mut scan = c
        .scan(pb::ScanRequest::default())
        .await
        .unwrap()
        .into_inner();
    let applied_lsn = scan.message().await.unwrap().unwrap().applied_lsn;
    let mut stream = watch(&mut c, applied_lsn).await.unwrap();
    let lsn = put(&mut c, u(1 << 80), u(1)).await;
    assert_eq!(lsn, applied_lsn + 1);
    batches_until(&mut stream, lsn, lsn).await;
    drop((stream, scan));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_files_removed_under_a_running_watch_end_it_with_failed_precondition_not_a_skip() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_cut_wal(dir.path()).await;
    let mut c = server.client().await;
    // About 38 MB of WAL: far more than the stream buffers.
    let last = load(&mut c, 0..1_000).await;
    let mut watcher = server.client().await;
    let mut stream = watch(&mut watcher, 0).await.unwrap();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.batches[0].lsn, 1);
    let mut next = first.batches.last().unwrap().lsn + 1;
    // The watch is held back by the client not reading; meanwhile the
    // snapshotter removes the files it has yet to read.
    snapshot_twice(&server, &mut c, 1_000).await;
    let end = loop {
        match stream.message().await {
            Ok(Some(r)) => {
                for batch in r.batches {
                    assert_eq!(batch.lsn, next, "never a skipped batch");
                    next += 1;
                }
            }
            Ok(None) => panic!("the stream ended without an error"),
            Err(e) => break e,
        }
    };
    assert_eq!(end.code(), Code::FailedPrecondition, "{end:?}");
    assert!(end.message().contains("Rescan"), "{}", end.message());
    assert!(next <= last, "it ended before the end of the removed files");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_ends_a_watch_with_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    put(&mut c, u(1), u(1)).await;
    let mut stream = watch(&mut c, 0).await.unwrap();
    batches_until(&mut stream, 1, 1).await;
    let stopped = tokio::spawn(server.stop());
    let e = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("the watch ends promptly")
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("shutting down"), "{}", e.message());
    drop((stream, c));
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
}

/// A server with `grace` for its stop, a Watch from LSN 0 over about 4 MB
/// of batches, opened and never read (the client's window fills, then the
/// server's send blocks).
async fn server_with_unread_watch(
    dir: &std::path::Path,
    grace: Duration,
) -> (TestServer, Client, Streaming<pb::WatchResponse>) {
    let mut config = config(dir);
    config.limits.max_write_ops = 2_000;
    config.stop_grace = grace;
    let server = TestServer::start_with(config).await;
    let mut c = server.client().await;
    for round in 0..100u128 {
        let ops = (0..1_000)
            .map(|i| put_op(u(round * 1_000 + i + 1), u(round)))
            .collect();
        c.write(pb::WriteRequest { ops }).await.unwrap();
    }
    let stream = watch(&mut c, 0).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    (server, c, stream)
}

/// A client that opens a Watch and stops reading blocks the server's send
/// and holds a graceful stop (shown with a long grace: the stop waits until
/// the client lets go); with `stop_grace` the stop closes the call and
/// finishes anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_client_stopped_reading_holds_the_stop_only_for_its_grace() {
    let dir = tempfile::tempdir().unwrap();
    let (server, c, stream) = server_with_unread_watch(dir.path(), Duration::from_secs(3600)).await;
    let mut stopping = tokio::spawn(server.stop());
    assert!(
        tokio::time::timeout(Duration::from_secs(1), &mut stopping)
            .await
            .is_err(),
        "the unread stream did not hold the stop: the test proves nothing"
    );
    drop((stream, c));
    tokio::time::timeout(Duration::from_secs(20), stopping)
        .await
        .expect("the stop finished once the client let go")
        .unwrap()
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (server, _c, _stream) =
        server_with_unread_watch(dir.path(), Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(20), server.stop())
        .await
        .expect("the stop finished while the client still held the stream")
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
}
