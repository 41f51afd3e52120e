//! Watches that resume, the typed "not retained" error, the follower's
//! scan-then-watch recipe, and Write batches.

use std::collections::HashMap;

use uuid::Uuid;
use uuidmap_client::{Client, ClientError, Follow, ScanOptions, WriteOp};
use uuidmap_testkit::proxy::FaultProxy;
use uuidmap_testkit::server::{TestServer, config};

use super::{key, quick, url};

/// A server whose WAL files are small, so snapshots remove old ones.
async fn server_with_cut_wal(dir: &std::path::Path) -> TestServer {
    let mut c = config(dir);
    c.limits.max_write_ops = 2_000;
    c.wal_file_bytes = 256 << 10;
    TestServer::start_with(c).await
}

/// Writes of 1000 puts each: key(round * 1000 + i) -> key(round).
async fn load(client: &Client, rounds: std::ops::Range<u64>) -> u64 {
    let mut lsn = 0;
    for round in rounds {
        let ops: Vec<WriteOp> = (0..1_000)
            .map(|i| WriteOp::Put {
                key: key(round * 1_000 + i),
                value: key(round),
            })
            .collect();
        lsn = client.write(&ops).await.unwrap();
    }
    lsn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_cut_again_and_again_delivers_every_batch_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let proxy = FaultProxy::start(server.addr).await;
    let writer = quick([url(server.addr)]).build().unwrap();
    let first = writer.put(key(0), key(0)).await.unwrap();
    let watcher = quick([proxy.url()]).build().unwrap();
    let n = 500;
    let watching = tokio::spawn(async move {
        let mut watch = watcher.watch(first);
        let mut lsns = Vec::new();
        while lsns.len() < n {
            // Half through the method, half through `Stream`.
            let batch = if lsns.len().is_multiple_of(2) {
                watch.next().await.unwrap()
            } else {
                futures_util::StreamExt::next(&mut watch)
                    .await
                    .expect("a watch never ends")
                    .unwrap()
            };
            assert_eq!(batch.changes.len(), 1);
            let (k, v) = batch.changes[0];
            let i = (k.as_u128() & 0xffff_ffff) as u64 - 1;
            assert_eq!(v, Some(key(i + 1)));
            lsns.push(batch.lsn);
        }
        (lsns, watch.last_lsn())
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // Single puts, paced so that each is its own message of about 70
    // bytes: a cut every 4 KB breaks the watch about every 50 batches, and
    // what piles up during a resumption stays under 4 KB.
    proxy.cut_after(4_000);
    let mut last = first;
    for i in 1..=n as u64 {
        last = writer.put(key(i), key(i + 1)).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let (lsns, last_seen) = watching.await.unwrap();
    let expected: Vec<u64> = (first + 1..=last).collect();
    assert_eq!(lsns, expected, "every batch once, in order");
    assert_eq!(last_seen, last);
    assert!(proxy.cuts() >= 3, "cut {} times", proxy.cuts());
    drop(proxy);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_older_than_the_kept_wal_is_a_typed_error_and_the_follower_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_cut_wal(dir.path()).await;
    let client = quick([url(server.addr)]).build().unwrap();
    load(&client, 0..100).await;
    client.snapshot().await.unwrap();
    load(&client, 100..101).await;
    client.snapshot().await.unwrap();

    let e = client.watch(0).next().await.unwrap_err();
    assert!(
        matches!(e, ClientError::NotRetained { after: 0, .. }),
        "{e}"
    );
    assert!(!e.is_transient());
    assert!(e.to_string().contains("rescan"), "{e}");

    // The follower: scan, then watch; its state ends equal to the server's.
    let mut follow = client.scan_then_watch(ScanOptions::default());
    let mut mirror: HashMap<Uuid, Uuid> = HashMap::new();
    let applied = loop {
        match follow.next().await.unwrap() {
            Follow::Entries(entries) => mirror.extend(entries),
            Follow::Scanned { applied_lsn } => break applied_lsn,
            other => panic!("{other:?} before the scan ended"),
        }
    };
    assert_eq!(mirror.len(), 101_000);
    let a = client.put(key(1), key(999)).await.unwrap();
    let b = client.delete(key(2)).await.unwrap();
    assert!(a > applied);
    let mut seen = 0;
    while seen < b {
        match follow.next().await.unwrap() {
            Follow::Batch(batch) => {
                seen = batch.lsn;
                for (k, v) in batch.changes {
                    match v {
                        Some(v) => mirror.insert(k, v),
                        None => mirror.remove(&k),
                    };
                }
            }
            other => panic!("{other:?} while watching"),
        }
    }
    assert_eq!(mirror.get(&key(1)), Some(&key(999)));
    assert!(!mirror.contains_key(&key(2)));
    assert_eq!(mirror.len(), 101_000 - 1);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_all_or_nothing_and_names_the_compare_and_set_that_failed() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let client = quick([url(server.addr)]).build().unwrap();
    let lsn = client
        .write(&[
            WriteOp::Put {
                key: key(1),
                value: key(10),
            },
            WriteOp::CompareAndSet {
                key: key(1),
                expected: Some(key(10)),
                new: Some(key(11)),
            },
            WriteOp::Delete { key: key(2) },
        ])
        .await
        .unwrap();
    assert_eq!(client.written_lsn(), lsn);
    assert_eq!(client.get(key(1)).await.unwrap(), Some(key(11)));
    let e = client
        .write(&[
            WriteOp::Put {
                key: key(3),
                value: key(30),
            },
            WriteOp::CompareAndSet {
                key: key(1),
                expected: Some(key(10)),
                new: None,
            },
        ])
        .await
        .unwrap_err();
    assert!(
        matches!(e, ClientError::WriteMismatch { op: 1, current: Some(v), .. } if v == key(11)),
        "{e}"
    );
    assert_eq!(client.get(key(3)).await.unwrap(), None, "nothing applied");
    server.stop().await.unwrap();
}
