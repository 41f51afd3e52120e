//! End-to-end tests of `Scan`: the real server on an ephemeral port,
//! called through the generated client.
//!
//! The index has at least 64 segments, so the tests load 600,000 entries
//! (about 9,400 per segment): more than a message holds, so messages end
//! inside segments and their cursors resume mid-segment.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tonic::Code;
use tonic::transport::Channel;
use uuid::Uuid;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap_testkit::server::{
    MAX_FILTER_VALUES, TestServer, b, config, put_op, sample, scrape, spread_key as key, u,
};

type Client = UuidMapClient<Channel>;

const ENTRIES: u64 = 600_000;
const VALUES: u64 = 16;
const WRITE_OPS: usize = 10_000;

/// The value of key `i`: one of `VALUES` shard ids.
fn value(i: u64) -> Uuid {
    u(0x5000 + (i % VALUES) as u128)
}

async fn server(dir: &std::path::Path) -> TestServer {
    let mut c = config(dir);
    c.limits.max_write_ops = WRITE_OPS;
    TestServer::start_with(c).await
}

/// Puts keys `range` with their values; returns the last LSN.
async fn load(c: &mut Client, range: std::ops::Range<u64>) -> u64 {
    let mut lsn = 0;
    let ids: Vec<u64> = range.collect();
    for chunk in ids.chunks(WRITE_OPS) {
        let ops = chunk.iter().map(|&i| put_op(key(i), value(i))).collect();
        lsn = c
            .write(pb::WriteRequest { ops })
            .await
            .unwrap()
            .into_inner()
            .lsn;
    }
    lsn
}

fn expected(range: std::ops::Range<u64>) -> HashMap<Uuid, Uuid> {
    range.map(|i| (key(i), value(i))).collect()
}

/// Every message of one scan call.
async fn scan(
    c: &mut Client,
    request: pb::ScanRequest,
) -> Result<Vec<pb::ScanResponse>, tonic::Status> {
    let mut stream = c.scan(request).await?.into_inner();
    let mut messages = Vec::new();
    while let Some(m) = stream.message().await? {
        messages.push(m);
    }
    Ok(messages)
}

fn entries(m: &pb::ScanResponse) -> impl Iterator<Item = (Uuid, Uuid)> + '_ {
    assert_eq!(m.entries.len() % 32, 0, "whole entries");
    m.entries.chunks_exact(32).map(|e| {
        (
            Uuid::from_slice(&e[..16]).unwrap(),
            Uuid::from_slice(&e[16..]).unwrap(),
        )
    })
}

/// The entries of `messages` as a map, failing on a key seen twice.
fn collect(messages: &[pb::ScanResponse]) -> HashMap<Uuid, Uuid> {
    let mut all = HashMap::new();
    for m in messages {
        for (k, v) in entries(m) {
            assert!(all.insert(k, v).is_none(), "key {k} returned twice");
        }
    }
    all
}

fn request() -> pb::ScanRequest {
    pb::ScanRequest::default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_scan_returns_exactly_the_entries_in_64_to_256_kib_messages_and_resumes_from_any_cursor()
 {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let mut c = server.client().await;
    let lsn = load(&mut c, 0..ENTRIES).await;

    let started = std::time::Instant::now();
    let messages = scan(&mut c, request()).await.unwrap();
    eprintln!(
        "full scan of {ENTRIES} entries: {:?} in {} messages",
        started.elapsed(),
        messages.len()
    );
    assert_eq!(collect(&messages), expected(0..ENTRIES));
    let (last, rest) = messages.split_last().unwrap();
    assert!(
        last.cursor.is_empty(),
        "the last message says the scan is done"
    );
    for m in rest {
        assert!(
            (64 << 10..=256 << 10).contains(&m.entries.len()),
            "a message of {} bytes",
            m.entries.len()
        );
        assert!(!m.cursor.is_empty(), "only the last message has no cursor");
    }
    assert!(last.entries.len() <= 256 << 10);
    assert!(messages.iter().all(|m| m.applied_lsn == lsn));

    // Resuming from a message's cursor gives exactly the entries after it.
    // (Every 4th cursor: each resume scans the rest of the index.)
    let mut before: HashSet<Uuid> = HashSet::new();
    for (i, m) in rest.iter().enumerate() {
        before.extend(entries(m).map(|(k, _)| k));
        if i % 4 != 0 {
            continue;
        }
        let resumed = scan(
            &mut c,
            pb::ScanRequest {
                cursor: m.cursor.clone(),
                ..request()
            },
        )
        .await
        .unwrap();
        let after = collect(&resumed);
        assert!(
            after.keys().all(|k| !before.contains(k)),
            "resume {i} repeats an entry"
        );
        assert_eq!(
            before.len() + after.len(),
            ENTRIES as usize,
            "resume {i} misses entries"
        );
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_under_concurrent_writes_return_each_stable_entry_once_and_no_key_twice() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let mut c = server.client().await;
    load(&mut c, 0..ENTRIES).await;

    // A writer that inserts, overwrites and deletes keys outside the stable
    // range (growing the tables), and overwrites stable keys' values.
    let stop = Arc::new(AtomicBool::new(false));
    let mut w = server.client().await;
    let writer = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let base = ENTRIES + (round % 50) * 2_000;
                let mut ops: Vec<pb::WriteOp> = (base..base + 2_000)
                    .map(|i| put_op(key(i), value(i + round)))
                    .collect();
                // Delete what an earlier round put.
                let old = ENTRIES + ((round + 25) % 50) * 2_000;
                ops.extend((old..old + 2_000).step_by(2).map(|i| pb::WriteOp {
                    op: Some(pb::write_op::Op::Delete(pb::DeleteOp { key: b(key(i)) })),
                }));
                // Overwrite stable entries (they stay present).
                let s = (round * 997) % (ENTRIES - 1_000);
                ops.extend((s..s + 1_000).map(|i| put_op(key(i), value(i + round))));
                w.write(pb::WriteRequest { ops }).await.unwrap();
                round += 1;
            }
            round
        }
    });

    for _ in 0..3 {
        let messages = scan(&mut c, request()).await.unwrap();
        let seen = collect(&messages); // fails on a key returned twice
        for i in 0..ENTRIES {
            assert!(seen.contains_key(&key(i)), "stable key {i} missing");
        }
        // Paged: resume through the cursor of every message.
        let mut seen = HashSet::new();
        let mut cursor = Default::default();
        let mut pages = 0;
        loop {
            let m = scan(
                &mut c,
                pb::ScanRequest {
                    cursor,
                    limit: 50_000,
                    ..request()
                },
            )
            .await
            .unwrap();
            for (k, _) in m.iter().flat_map(entries) {
                assert!(seen.insert(k), "key {k} returned twice across pages");
            }
            pages += 1;
            cursor = m.last().unwrap().cursor.clone();
            if cursor.is_empty() {
                break;
            }
        }
        assert!(pages > 10);
        for i in 0..ENTRIES {
            assert!(
                seen.contains(&key(i)),
                "stable key {i} missing from the paged scan"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.await.unwrap();
    assert!(rounds > 0, "the writer ran during the scans");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_splits_cover_the_index_once_and_filters_and_limits_select_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let mut c = server.client().await;
    let lsn = load(&mut c, 0..ENTRIES).await;
    let all = expected(0..ENTRIES);

    // Seven splits at once, on their own connections.
    let mut tasks = Vec::new();
    for split in 0..7 {
        let mut c = server.client().await;
        tasks.push(tokio::spawn(async move {
            scan(
                &mut c,
                pb::ScanRequest {
                    split,
                    splits: 7,
                    min_lsn: lsn,
                    ..request()
                },
            )
            .await
            .unwrap()
        }));
    }
    let mut union = HashMap::new();
    for t in tasks {
        let part = collect(&t.await.unwrap());
        assert!(!part.is_empty(), "each split holds part of the index");
        for (k, v) in part {
            assert!(union.insert(k, v).is_none(), "key {k} in two splits");
        }
    }
    assert_eq!(union, all);

    // Filters: a few values (compared one by one) and many (hashed).
    for wanted in [vec![3u64, 7], (0..12).collect()] {
        let mut values: Vec<u8> = wanted.iter().flat_map(|&v| *value(v).as_bytes()).collect();
        // Values no entry has change nothing.
        values.extend_from_slice(u(0xdead).as_bytes());
        let got = collect(
            &scan(
                &mut c,
                pb::ScanRequest {
                    values: values.into(),
                    ..request()
                },
            )
            .await
            .unwrap(),
        );
        let want: HashMap<Uuid, Uuid> = all
            .iter()
            .filter(|(_, v)| wanted.iter().any(|&w| value(w) == **v))
            .map(|(k, v)| (*k, *v))
            .collect();
        assert_eq!(got, want, "filter {wanted:?}");
    }

    // Limits: exactly that many, then the cursor resumes after them.
    for limit in [1u64, 1_000, 123_457] {
        let first = scan(&mut c, pb::ScanRequest { limit, ..request() })
            .await
            .unwrap();
        let head = collect(&first);
        assert_eq!(head.len() as u64, limit);
        let cursor = first.last().unwrap().cursor.clone();
        assert!(!cursor.is_empty(), "a limited scan can be resumed");
        let tail = collect(
            &scan(
                &mut c,
                pb::ScanRequest {
                    cursor,
                    ..request()
                },
            )
            .await
            .unwrap(),
        );
        assert!(
            tail.keys().all(|k| !head.contains_key(k)),
            "limit {limit}: resumed twice"
        );
        assert_eq!(
            head.len() + tail.len(),
            all.len(),
            "limit {limit}: entries missed"
        );
    }
    // A limit beyond the end returns everything and ends the scan.
    let whole = scan(
        &mut c,
        pb::ScanRequest {
            limit: ENTRIES * 2,
            ..request()
        },
    )
    .await
    .unwrap();
    assert_eq!(collect(&whole), all);
    assert!(whole.last().unwrap().cursor.is_empty());
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_scan_counts_every_entry_of_its_range_as_examined_however_few_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.limits.max_write_ops = WRITE_OPS;
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let server = TestServer::start_with(cfg).await;
    let mut c = server.client().await;
    // Many entries with common values, and three with a value of their own.
    const COMMON: u64 = 60_000;
    let rare = u(0x6000);
    load(&mut c, 0..COMMON).await;
    let ops = (0..3).map(|i| put_op(key(COMMON + i), rare)).collect();
    let lsn = c
        .write(pb::WriteRequest { ops })
        .await
        .unwrap()
        .into_inner()
        .lsn;
    let total = COMMON + 3;
    // Each delta is this server's own: the counter is per server, so other
    // tests' scans do not add to it.
    let examined = |text: &str| sample(text, "uuidmap_scan_entries_examined_total", &[]).unwrap();
    let filtered = |split, splits| pb::ScanRequest {
        values: b(rare),
        split,
        splits,
        min_lsn: lsn,
        ..request()
    };

    let before = scrape(&server).await;
    let found = collect(&scan(&mut c, filtered(0, 1)).await.unwrap());
    let after = scrape(&server).await;
    assert_eq!(found.len(), 3, "the filter matches only the rare value");
    assert_eq!(
        examined(&after) - examined(&before),
        total as f64,
        "a filtered scan examines every entry, not just those it returns"
    );

    // Two splits: each counts the entries of its own range, and together
    // they count the index once.
    let mut parts = Vec::new();
    for split in 0..2 {
        let before = scrape(&server).await;
        let found = collect(&scan(&mut c, filtered(split, 2)).await.unwrap());
        let after = scrape(&server).await;
        parts.push((found.len(), examined(&after) - examined(&before)));
    }
    assert_eq!(parts[0].0 + parts[1].0, 3);
    assert!(
        parts.iter().all(|&(_, e)| e > 0.0 && e < total as f64),
        "{parts:?}"
    );
    assert_eq!(parts[0].1 + parts[1].1, total as f64, "{parts:?}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_index_scans_as_one_empty_final_message() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let mut c = server.client().await;
    let messages = scan(&mut c, request()).await.unwrap();
    assert_eq!(messages.len(), 1);
    assert!(messages[0].entries.is_empty() && messages[0].cursor.is_empty());
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_scans_are_invalid_argument_with_a_message_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let mut c = server.client().await;
    load(&mut c, 0..20_000).await;
    let first = scan(
        &mut c,
        pb::ScanRequest {
            limit: 10,
            ..request()
        },
    )
    .await
    .unwrap();
    let good = first.last().unwrap().cursor.clone();
    let mut foreign = good.to_vec();
    foreign[13] ^= 1; // the hash layout tag
    let mut out_of_range = good.to_vec();
    out_of_range[1..5].copy_from_slice(&u32::MAX.to_le_bytes());

    let cases: Vec<(&str, pb::ScanRequest, &str)> = vec![
        (
            "garbage cursor",
            pb::ScanRequest {
                cursor: b"not a cursor".to_vec().into(),
                ..request()
            },
            "cursor is malformed",
        ),
        (
            "cursor of another index",
            pb::ScanRequest {
                cursor: foreign.into(),
                ..request()
            },
            "different index layout",
        ),
        (
            "cursor past the end",
            pb::ScanRequest {
                cursor: out_of_range.into(),
                ..request()
            },
            "cursor is malformed",
        ),
        (
            "split >= splits",
            pb::ScanRequest {
                split: 7,
                splits: 7,
                ..request()
            },
            "split 7 of 7",
        ),
        (
            "split of the default single split",
            pb::ScanRequest {
                split: 1,
                ..request()
            },
            "split 1 of 1",
        ),
        (
            "filter not whole values",
            pb::ScanRequest {
                values: vec![1u8; 17].into(),
                ..request()
            },
            "multiple of 16",
        ),
        (
            "too many filter values",
            pb::ScanRequest {
                values: vec![1u8; (MAX_FILTER_VALUES + 1) * 16].into(),
                ..request()
            },
            "at most 64 values",
        ),
    ];
    for (name, req, words) in cases {
        let e = scan(&mut c, req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{name}: {e:?}");
        assert!(e.message().contains(words), "{name}: {}", e.message());
    }
    // The server still serves.
    assert_eq!(
        collect(
            &scan(
                &mut c,
                pb::ScanRequest {
                    cursor: good,
                    ..request()
                }
            )
            .await
            .unwrap()
        )
        .len(),
        20_000 - 10
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_mid_scan_does_not_stop_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let mut c = server.client().await;
    load(&mut c, 0..ENTRIES).await;
    for _ in 0..5 {
        let mut other = server.client().await;
        let mut stream = other.scan(request()).await.unwrap().into_inner();
        stream.message().await.unwrap().unwrap();
        drop(stream); // cancels the call; the producer must let go
    }
    // Every producer has stopped: a graceful stop (which waits for the
    // calls in flight and for the index to be released) completes.
    assert_eq!(
        collect(&scan(&mut c, request()).await.unwrap()).len() as u64,
        ENTRIES
    );
    drop(c);
    tokio::time::timeout(std::time::Duration::from_secs(10), server.stop())
        .await
        .expect("the server stops promptly")
        .unwrap();
}
