//! End-to-end tests of the gRPC server: the real server on an ephemeral
//! loopback port over a temporary data directory, called through the
//! generated client.

use std::path::Path;
use std::time::{Duration, Instant};

use tonic::{Code, Request};
use uuid::Uuid;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_admin_client::UuidMapAdminClient;
use uuidmap::server::{ServeError, serve};
use uuidmap_testkit::server::{
    MAX_BATCH_KEYS, TestServer, b, config, framed, put_op, raw_status, u,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_answers_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;

    // Put, then Get at that LSN.
    let lsn1 = c
        .put(pb::PutRequest {
            key: b(u(1)),
            value: b(u(0xa)),
        })
        .await
        .unwrap()
        .into_inner()
        .lsn;
    assert!(lsn1 >= 1);
    let got = c
        .get(pb::GetRequest {
            key: b(u(1)),
            min_lsn: lsn1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.value, Some(b(u(0xa))));
    assert!(got.applied_lsn >= lsn1);

    // A nil value is a value: BatchGet's bitmap tells it from "absent".
    let lsn2 = c
        .put(pb::PutRequest {
            key: b(u(2)),
            value: b(Uuid::nil()),
        })
        .await
        .unwrap()
        .into_inner()
        .lsn;
    assert_eq!(lsn2, lsn1 + 1, "LSNs are consecutive");
    let keys: Vec<u8> = [u(1), u(3), u(2)]
        .iter()
        .flat_map(|k| *k.as_bytes())
        .collect();
    let batch = c
        .batch_get(pb::BatchGetRequest {
            keys: keys.into(),
            min_lsn: lsn2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(batch.values.len(), 48);
    assert_eq!(&batch.values[..16], u(0xa).as_bytes());
    assert_eq!(&batch.values[16..], &[0u8; 32][..]);
    assert_eq!(
        &batch.found[..],
        &[0b101],
        "key 0 and 2 found, key 1 absent"
    );

    // Delete.
    let lsn3 = c
        .delete(pb::DeleteRequest { key: b(u(2)) })
        .await
        .unwrap()
        .into_inner()
        .lsn;
    assert_eq!(lsn3, lsn2 + 1);
    let got = c
        .get(pb::GetRequest {
            key: b(u(2)),
            min_lsn: lsn3,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.value, None);

    // CompareAndSet: applied, then a mismatch answered OK with the current value.
    let cas = c
        .compare_and_set(pb::CompareAndSetRequest {
            key: b(u(1)),
            expected: Some(b(u(0xa))),
            new_value: Some(b(u(0xb))),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cas.applied);
    assert_eq!(cas.lsn, lsn3 + 1);
    let cas = c
        .compare_and_set(pb::CompareAndSetRequest {
            key: b(u(1)),
            expected: Some(b(u(0xa))),
            new_value: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!cas.applied);
    assert_eq!(cas.lsn, 0);
    assert_eq!(cas.current, Some(b(u(0xb))));
    // Expected "absent" on a missing key creates it.
    let cas = c
        .compare_and_set(pb::CompareAndSetRequest {
            key: b(u(5)),
            expected: None,
            new_value: Some(b(u(0xc))),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cas.applied);

    // Write: a batch gets one LSN; a CAS mismatch refuses the whole batch.
    let w = c
        .write(pb::WriteRequest {
            ops: vec![
                put_op(u(10), u(0xa)),
                pb::WriteOp {
                    op: Some(pb::write_op::Op::CompareAndSet(pb::CompareAndSetOp {
                        key: b(u(10)),
                        expected: Some(b(u(0xa))),
                        new_value: Some(b(u(0xd))),
                    })),
                },
                pb::WriteOp {
                    op: Some(pb::write_op::Op::Delete(pb::DeleteOp { key: b(u(5)) })),
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(w.applied);
    assert_eq!(w.lsn, cas.lsn + 1);
    let refused = c
        .write(pb::WriteRequest {
            ops: vec![
                put_op(u(11), u(0xa)),
                pb::WriteOp {
                    op: Some(pb::write_op::Op::CompareAndSet(pb::CompareAndSetOp {
                        key: b(u(10)),
                        expected: None,
                        new_value: Some(b(u(0xe))),
                    })),
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!refused.applied);
    assert_eq!(refused.failed_op, 1);
    assert_eq!(refused.current, Some(b(u(0xd))));
    let got = c
        .get(pb::GetRequest {
            key: b(u(11)),
            min_lsn: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.value, None, "nothing of a refused batch is applied");
    let got = c
        .get(pb::GetRequest {
            key: b(u(5)),
            min_lsn: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.value, None);

    // WaitFor an applied LSN answers at once.
    let waited = c
        .wait_for(pb::WaitForRequest { lsn: w.lsn })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(waited.applied_lsn, w.lsn);

    // Stats and the admin snapshot.
    let stats = c.stats(pb::StatsRequest {}).await.unwrap().into_inner();
    assert_eq!(stats.entries, 2, "keys 1 and 10");
    assert_eq!(stats.applied_lsn, w.lsn);
    assert!(stats.wal_bytes > 0);
    let mut admin = UuidMapAdminClient::new(server.channel().await);
    let snap = admin
        .snapshot(pb::SnapshotRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(snap.lsn, w.lsn);
    assert_eq!(snap.entries, 2);
    assert!(Path::new(&snap.path).exists());
    let stats = c.stats(pb::StatsRequest {}).await.unwrap().into_inner();
    assert!(stats.snapshots_taken >= 1);
    assert_eq!(stats.last_snapshot_lsn, w.lsn);
    assert!(stats.snapshot_age_ms.is_some());

    server.stop().await.unwrap();
}

/// Sends one malformed request; returns its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_an_lsn_far_ahead_ends_with_deadline_exceeded_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;

    // Over a bare HTTP/2 connection, so that the answer is the server's:
    // tonic's client enforces the deadline too, and on a busy machine its
    // timer (CANCELLED) may fire before the server's answer arrives.
    let get = framed(&pb::GetRequest {
        key: b(u(1)),
        min_lsn: 1_000_000,
        ..Default::default()
    });
    let t = Instant::now();
    let (code, message) = raw_status(&server, "/uuidmap.v1.UuidMap/Get", "300m", Some(get)).await;
    let took = t.elapsed();
    assert_eq!(code, Code::DeadlineExceeded, "{message}");
    assert!(message.contains("1000000"), "{message}");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(1000),
        "{took:?}"
    );

    let wait = framed(&pb::WaitForRequest { lsn: 1_000_000 });
    let (code, message) =
        raw_status(&server, "/uuidmap.v1.UuidMap/WaitFor", "200m", Some(wait)).await;
    assert_eq!(code, Code::DeadlineExceeded, "{message}");

    let batch = framed(&pb::BatchGetRequest {
        keys: b(u(1)),
        min_lsn: 1_000_000,
        ..Default::default()
    });
    let (code, message) =
        raw_status(&server, "/uuidmap.v1.UuidMap/BatchGet", "200m", Some(batch)).await;
    assert_eq!(code, Code::DeadlineExceeded, "{message}");

    let scan = framed(&pb::ScanRequest {
        min_lsn: 1_000_000,
        ..Default::default()
    });
    let (code, message) = raw_status(&server, "/uuidmap.v1.UuidMap/Scan", "200m", Some(scan)).await;
    assert_eq!(code, Code::DeadlineExceeded, "{message}");
    assert!(message.contains("1000000"), "{message}");

    // Without a deadline the server's maximum wait (300 ms here) bounds it.
    let t = Instant::now();
    let status = c
        .wait_for(pb::WaitForRequest { lsn: 1_000_000 })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert!(
        status.message().contains("maximum wait"),
        "{}",
        status.message()
    );
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_with_min_lsn_sees_the_write_on_another_connection_and_wait_for_wakes_on_apply() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.admission.max_long_polls = 1;
    let server = TestServer::start_with(c).await;
    let mut writer = server.client().await;
    let mut reader = server.client().await;

    for i in 1..=20u128 {
        let lsn = writer
            .put(pb::PutRequest {
                key: b(u(i)),
                value: b(u(i + 100)),
            })
            .await
            .unwrap()
            .into_inner()
            .lsn;
        let got = reader
            .get(pb::GetRequest {
                key: b(u(i)),
                min_lsn: lsn,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            got.value,
            Some(b(u(i + 100))),
            "read-your-writes at LSN {lsn}"
        );
    }

    // A long-poll for the next LSN is woken by the write that makes it.
    let next = reader
        .stats(pb::StatsRequest {})
        .await
        .unwrap()
        .into_inner()
        .applied_lsn
        + 1;
    let mut poller = server.client().await;
    let poll = tokio::spawn(async move {
        loop {
            let mut req = Request::new(pb::WaitForRequest { lsn: next });
            req.set_timeout(Duration::from_secs(5));
            match poller.wait_for(req).await {
                // The probe below holds the one slot for an instant: the
                // poll, refused then, tries again, as a client would.
                Err(s) if s.code() == Code::ResourceExhausted => {
                    tokio::time::sleep(Duration::from_millis(1)).await
                }
                answer => return answer,
            }
        }
    });
    // Synchronised on the poll's arrival: this server allows one long poll
    // at a time, so a probe (a WaitFor already satisfied) is refused once
    // the poll holds the slot.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match reader.wait_for(pb::WaitForRequest { lsn: 1 }).await {
            Err(s) if s.code() == Code::ResourceExhausted => break,
            Ok(_) => {}
            Err(s) => panic!("the probe failed: {s:?}"),
        }
        assert!(!poll.is_finished(), "the poll ended before its LSN came");
        assert!(Instant::now() < deadline, "the WaitFor never arrived");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        !poll.is_finished(),
        "the poll waits for an LSN not yet applied"
    );
    writer
        .put(pb::PutRequest {
            key: b(u(999)),
            value: b(u(1)),
        })
        .await
        .unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(2), poll)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(answered.into_inner().applied_lsn, next);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_address_is_refused_without_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.listen = "0.0.0.0:0".parse().unwrap();
    let e = serve(c, std::future::pending()).await.unwrap_err();
    assert!(matches!(e, ServeError::NotLoopback { .. }), "{e:?}");
    assert!(e.to_string().contains("`insecure`"), "{e}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing was opened or written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_restart_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let mut last = 0;
    for chunk in 0..20u128 {
        let ops = (0..5)
            .map(|i| put_op(u(chunk * 5 + i + 1), u(chunk)))
            .collect();
        last = c
            .write(pb::WriteRequest { ops })
            .await
            .unwrap()
            .into_inner()
            .lsn;
    }
    c.delete(pb::DeleteRequest { key: b(u(1)) }).await.unwrap();
    drop(c);
    server.stop().await.unwrap();

    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let stats = c.stats(pb::StatsRequest {}).await.unwrap().into_inner();
    assert_eq!(stats.entries, 99);
    assert_eq!(stats.applied_lsn, last + 1);
    let keys: Vec<u8> = (1..=100u128).flat_map(|k| *u(k).as_bytes()).collect();
    let batch = c
        .batch_get(pb::BatchGetRequest {
            keys: keys.into(),
            min_lsn: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    for k in 0..100usize {
        let found = batch.found[k / 8] & (1 << (k % 8)) != 0;
        assert_eq!(found, k != 0, "key {}", k + 1);
        if found {
            let chunk = k as u128 / 5;
            assert_eq!(&batch.values[k * 16..k * 16 + 16], u(chunk).as_bytes());
        }
    }
    // The next write continues the LSN sequence.
    let lsn = c
        .put(pb::PutRequest {
            key: b(u(1)),
            value: b(u(1)),
        })
        .await
        .unwrap()
        .into_inner()
        .lsn;
    assert_eq!(lsn, last + 2);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_under_concurrent_writes_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut writers = Vec::new();
    for w in 0..4u128 {
        let mut c = server.client().await;
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 1..=100_000u128 {
                let key = u(w << 64 | i);
                match c
                    .put(pb::PutRequest {
                        key: b(key),
                        value: b(u(w + 1)),
                    })
                    .await
                {
                    Ok(_) => acked.push(key),
                    Err(_) => break, // the server stopped
                }
            }
            acked
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.stop().await.unwrap();
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    assert!(
        !acked.is_empty(),
        "some writes were acknowledged before the stop"
    );

    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    for chunk in acked.chunks(MAX_BATCH_KEYS) {
        let keys: Vec<u8> = chunk.iter().flat_map(|k| *k.as_bytes()).collect();
        let batch = c
            .batch_get(pb::BatchGetRequest {
                keys: keys.into(),
                min_lsn: 0,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        for (i, k) in chunk.iter().enumerate() {
            assert!(
                batch.found[i / 8] & (1 << (i % 8)) != 0,
                "acknowledged key {k} lost"
            );
        }
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_ends_every_wait_at_once_with_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    c.put(pb::PutRequest {
        key: b(u(1)),
        value: b(u(2)),
    })
    .await
    .unwrap();
    // Every kind of wait: WaitFor, and Get, BatchGet and Scan with min_lsn.
    let far = 1_000;
    fn with_deadline<T>(m: T) -> Request<T> {
        let mut r = Request::new(m);
        r.set_timeout(Duration::from_secs(10));
        r
    }
    let mut polls = Vec::new();
    let mut client = c.clone();
    polls.push(tokio::spawn(async move {
        let r = with_deadline(pb::WaitForRequest { lsn: far });
        client.wait_for(r).await.map(drop)
    }));
    let mut client = c.clone();
    polls.push(tokio::spawn(async move {
        let r = with_deadline(pb::GetRequest {
            key: b(u(1)),
            min_lsn: far,
            ..Default::default()
        });
        client.get(r).await.map(drop)
    }));
    let mut client = c.clone();
    polls.push(tokio::spawn(async move {
        let r = with_deadline(pb::BatchGetRequest {
            keys: b(u(1)),
            min_lsn: far,
            ..Default::default()
        });
        client.batch_get(r).await.map(drop)
    }));
    polls.push(tokio::spawn(async move {
        let r = with_deadline(pb::ScanRequest {
            min_lsn: far,
            ..Default::default()
        });
        c.scan(r).await.map(drop)
    }));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    server.stop().await.unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "the stop waited {:?} for a long-poll",
        t.elapsed()
    );
    for (rpc, poll) in ["WaitFor", "Get", "BatchGet", "Scan"].iter().zip(polls) {
        let status = poll.await.unwrap().unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{rpc}: {status:?}");
        assert!(
            status.message().contains("shutting down"),
            "{rpc}: {}",
            status.message()
        );
    }
}
