//! What a broken network does, through a proxy that cuts connections and
//! swallows answers: scans resume with no duplicates and no gaps, and a
//! compare-and-set whose answer was lost is not sent again.

use std::collections::HashSet;

use uuidmap_client::{CasOutcome, ClientError, ScanOptions};
use uuidmap_testkit::proxy::FaultProxy;
use uuidmap_testkit::server::TestServer;

use super::{key, quick};

/// Loads `n` entries, key(i) -> key(i + 1), in Writes of 10.
async fn load(client: &uuidmap_client::Client, n: u64) {
    let mut writes = Vec::new();
    for i in 0..n {
        writes.push(client.put(key(i), key(i + 1)));
        if writes.len() == 64 {
            for w in writes.drain(..) {
                w.await.unwrap();
            }
        }
    }
    for w in writes {
        w.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_cut_again_and_again_resumes_with_every_entry_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let proxy = FaultProxy::start(server.addr).await;
    let client = quick([proxy.url()]).build().unwrap();
    let n = 40_000;
    load(&client, n).await;
    // 40,000 entries are 1.28 MB, sent in messages of about 128 KiB: a cut
    // every 300 KB lets two messages through each time and breaks the scan
    // about four times.
    proxy.cut_after(300_000);
    let mut seen = HashSet::new();
    let mut scan = client.scan(ScanOptions::default());
    while let Some(page) = scan.next_page().await.unwrap() {
        for (k, v) in page.entries {
            assert!(seen.insert(k), "{k} came twice");
            let i = (k.as_u128() & 0xffff_ffff) as u64 - 1;
            assert_eq!(v, key(i + 1));
        }
    }
    assert_eq!(seen.len() as u64, n, "every entry, once");
    assert!(proxy.cuts() >= 3, "the scan was cut {} times", proxy.cuts());
    drop(proxy);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_filtered_scan_keeps_its_limit_across_resumptions() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let proxy = FaultProxy::start(server.addr).await;
    let client = quick([proxy.url()]).build().unwrap();
    load(&client, 20_000).await;
    proxy.cut_after(200_000);
    let options = ScanOptions {
        limit: 15_000,
        ..Default::default()
    };
    let mut seen = HashSet::new();
    let mut scan = client.scan(options);
    while let Some(page) = scan.next_page().await.unwrap() {
        for (k, _) in page.entries {
            assert!(seen.insert(k), "{k} came twice");
        }
    }
    assert_eq!(seen.len(), 15_000);
    assert!(proxy.cuts() >= 2, "cut {} times", proxy.cuts());
    drop(proxy);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compare_and_set_whose_answer_is_lost_is_undetermined_and_not_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let proxy = FaultProxy::start(server.addr).await;
    let client = quick([proxy.url()]).build().unwrap();
    client.put(key(1), key(10)).await.unwrap();
    client.stats().await.unwrap();

    proxy.cut_next_answer();
    let e = client
        .compare_and_set(key(1), Some(key(10)), Some(key(11)))
        .await
        .unwrap_err();
    match &e {
        ClientError::Undetermined {
            key: k, current, ..
        } => {
            assert_eq!(*k, key(1));
            // It was applied (the server answered; the proxy ate it), and
            // it was applied once: a second send would have found 11, not
            // 10, and failed, which the client would have reported.
            assert_eq!(*current, Some(key(11)), "{e}");
        }
        other => panic!("expected Undetermined, got {other}"),
    }
    assert!(
        e.to_string().contains("may or may not have been applied"),
        "{e}"
    );

    // A plain mismatch is final and says what is there.
    let outcome = client
        .compare_and_set(key(1), Some(key(10)), Some(key(12)))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        CasOutcome::Mismatch {
            current: Some(key(11))
        }
    );
    drop(proxy);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_answer_is_lost_is_resent_only_when_marked_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let proxy = FaultProxy::start(server.addr).await;
    let client = quick([proxy.url()]).build().unwrap();
    client.stats().await.unwrap();

    let before = client.counters();
    proxy.cut_next_answer();
    let e = client.put(key(1), key(2)).await.unwrap_err();
    assert_eq!(
        e.retry_class(),
        uuidmap_client::RetryClass::Conditional,
        "{e}"
    );
    assert_eq!(client.counters().attempts - before.attempts, 1, "sent once");
    let before = client.counters();
    proxy.cut_next_answer();
    let lsn = client.idempotent().put(key(1), key(3)).await.unwrap();
    let after = client.counters();
    // At least twice: the lost answer, then the resend. On a loaded host
    // the reconnect after the cut can fail once more, so not exactly two.
    let attempts = after.attempts - before.attempts;
    assert!(
        attempts >= 2,
        "sent again after the lost answer: {attempts}"
    );
    assert_eq!(
        after.retries - before.retries,
        attempts - 1,
        "every resend counted as a retry"
    );
    assert!(client.written_lsn() >= lsn);
    assert_eq!(client.get(key(1)).await.unwrap(), Some(key(3)));
    drop(proxy);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_write_with_a_compare_and_set_whose_answer_is_lost_is_not_sent_again() {
    use uuidmap_client::WriteOp;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let proxy = FaultProxy::start(server.addr).await;
    let client = quick([proxy.url()]).build().unwrap();
    client.put(key(1), key(10)).await.unwrap();

    let before = client.counters();
    proxy.cut_next_answer();
    let ops = [
        WriteOp::CompareAndSet {
            key: key(1),
            expected: Some(key(10)),
            new: Some(key(11)),
        },
        WriteOp::Put {
            key: key(2),
            value: key(20),
        },
    ];
    let e = client.idempotent().write(&ops).await.unwrap_err();
    // Unknown, not transient, and sent once: resent after it was applied,
    // the compare-and-set would answer a mismatch for a write that happened.
    assert!(e.outcome_unknown() && !e.is_transient(), "{e}");
    let after = client.counters();
    assert_eq!(after.attempts - before.attempts, 1, "sent once");
    // Applied exactly once (the server got it whole) or not at all.
    let now = (
        client.get_unary(key(1)).await.unwrap(),
        client.get_unary(key(2)).await.unwrap(),
    );
    assert!(
        now == (Some(key(11)), Some(key(20))) || now == (Some(key(10)), None),
        "{now:?}"
    );
    drop(proxy);
    server.stop().await.unwrap();
}
