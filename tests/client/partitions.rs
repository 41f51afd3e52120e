//! The partitioned client (`PartitionedClient`) over two groups and a real
//! etcd: keys routed to their owners and merged back, batches kept within
//! a group, and partitions moved back and forth under Put and
//! compare-and-set load with nothing acknowledged lost and every key in
//! exactly one place.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use uuid::Uuid;
use uuidmap_client::partition::{GroupName, PartitionId, partition_of};
use uuidmap_client::{Client, ClientError, MoveOptions, PartitionedClient, ScanOptions, WriteOp};
use uuidmap_testkit::etcd::TestEtcd;
use uuidmap_testkit::proxy::FaultProxy;
use uuidmap_testkit::server::{MAX_WRITE_OPS, TestServer, start_partitioned};

const CLUSTER: &str = "c";

fn g(s: &str) -> GroupName {
    s.parse().unwrap()
}

struct Cluster {
    etcd: TestEtcd,
    servers: Vec<TestServer>,
    _dirs: Vec<tempfile::TempDir>,
    client: PartitionedClient,
}

async fn two_groups() -> Cluster {
    let etcd = TestEtcd::start();
    etcd.init_partitions(CLUSTER, &["g1", "g2"]).await;
    let dirs = vec![tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut servers = Vec::new();
    for (dir, group) in dirs.iter().zip(["g1", "g2"]) {
        servers.push(start_partitioned(dir.path(), &etcd.url, CLUSTER, group).await);
    }
    let template = Client::builder().timeout(Duration::from_secs(10));
    let client = PartitionedClient::connect(std::slice::from_ref(&etcd.url), CLUSTER, template)
        .await
        .unwrap();
    // Until both servers registered and read the table.
    for _ in 0..200 {
        let v = client.refresh().await.unwrap();
        if v.groups.len() == 2
            && client
                .put(Uuid::from_u128(1), Uuid::from_u128(1))
                .await
                .is_ok()
            && client
                .put(Uuid::from_u128(3), Uuid::from_u128(1))
                .await
                .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Cluster {
        etcd,
        servers,
        _dirs: dirs,
        client,
    }
}

impl Cluster {
    /// A client of one group alone (its member's URL).
    fn group(&self, i: usize) -> Client {
        Client::builder()
            .endpoints([format!("http://{}", self.servers[i].addr)])
            .build()
            .unwrap()
    }

    /// Every entry each group's server returns for a full scan.
    async fn scan_all(&self) -> Vec<(Uuid, Uuid)> {
        let mut all = Vec::new();
        for i in 0..self.servers.len() {
            let mut scan = self.group(i).scan(ScanOptions::default());
            while let Some(page) = scan.next_page().await.unwrap() {
                all.extend(page.entries);
            }
        }
        all
    }

    async fn stop(self) {
        for s in self.servers {
            s.stop().await.unwrap();
        }
        drop(self.etcd);
    }
}

fn key(i: u64) -> Uuid {
    Uuid::from_u128(0x9a00_0000_0000_0000_0000_0000_0000_0000 | u128::from(i + 1))
}

#[tokio::test]
async fn keys_go_to_their_owners_and_come_back_merged_in_order() {
    let c = two_groups().await;
    let keys: Vec<Uuid> = (0..300).map(key).collect();
    for (i, k) in keys.iter().enumerate() {
        c.client.put(*k, key(1000 + i as u64)).await.unwrap();
    }
    let mut asked = keys.clone();
    asked.push(key(5000)); // absent
    // (The test servers take at most 100 keys a call.)
    let mut got = Vec::new();
    for chunk in asked.chunks(100) {
        got.extend(c.client.get_many(chunk).await.unwrap());
    }
    for (i, v) in got.iter().enumerate().take(300) {
        assert_eq!(*v, Some(key(1000 + i as u64)), "key {i}");
    }
    assert_eq!(got[300], None);
    // Each key is on its owner's server only.
    let view = c.client.view();
    let entries = c.scan_all().await;
    let (g1, g2) = (c.group(0), c.group(1));
    for k in &keys {
        assert_eq!(entries.iter().filter(|(e, _)| e == k).count(), 1, "{k}");
        let owner = view.owner_of(k.as_bytes()).unwrap().to_string();
        let (mine, other) = if owner == "g1" {
            (&g1, &g2)
        } else {
            (&g2, &g1)
        };
        assert!(mine.get(*k).await.unwrap().is_some());
        let e = other.get(*k).await.unwrap_err();
        assert_eq!(
            e.status().unwrap().code(),
            tonic::Code::FailedPrecondition,
            "{e}"
        );
    }
    // A batch across groups is refused before it is sent; within one it
    // is atomic there.
    let (a, b) = keys
        .iter()
        .find_map(|a| {
            keys.iter()
                .find(|b| view.owner_of(a.as_bytes()) != view.owner_of(b.as_bytes()))
                .map(|b| (*a, *b))
        })
        .unwrap();
    let e = c
        .client
        .write(&[WriteOp::Delete { key: a }, WriteOp::Delete { key: b }])
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Routing { .. }), "{e}");
    assert!(e.to_string().contains("different groups"), "{e}");
    assert!(c.client.get(a).await.unwrap().is_some(), "nothing deleted");
    c.stop().await;
}

/// Keys of partition `p`, `n` of them.
fn keys_in(p: PartitionId, n: usize) -> Vec<Uuid> {
    (0u64..)
        .map(key)
        .filter(|k| partition_of(k.as_bytes()) == p)
        .take(n)
        .collect()
}

#[tokio::test]
async fn partitions_move_back_and_forth_under_load_losing_nothing_acknowledged() {
    let c = two_groups().await;
    let p = partition_of(key(0).as_bytes());
    let hot = keys_in(p, 20);
    let cold: Vec<Uuid> = (100..400).map(key).collect();
    for k in hot.iter().chain(&cold) {
        c.client.put(*k, Uuid::from_u128(1)).await.unwrap();
    }
    // Writers: puts of a counter to the hot keys and to others, and a
    // compare-and-set chain on one hot key; each records what was
    // acknowledged.
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for (w, keys) in [hot[..10].to_vec(), cold[..50].to_vec()]
        .into_iter()
        .enumerate()
    {
        let (client, stop) = (c.client.clone(), Arc::clone(&stop));
        writers.push(tokio::spawn(async move {
            let mut acked: HashMap<Uuid, u128> = HashMap::new();
            let mut n: u128 = 2;
            while !stop.load(Ordering::Relaxed) {
                for k in &keys {
                    let v = Uuid::from_u128((w as u128) << 64 | n);
                    client
                        .put(*k, v)
                        .await
                        .unwrap_or_else(|e| panic!("put {k}: {e}"));
                    acked.insert(*k, v.as_u128());
                    n += 1;
                }
            }
            acked
        }));
    }
    let cas_key = hot[15];
    let cas = {
        let (client, stop) = (c.client.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut current = Uuid::from_u128(1);
            let mut applied = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let next = Uuid::from_u128(current.as_u128() + 1);
                let outcome = client
                    .compare_and_set(cas_key, Some(current), Some(next))
                    .await
                    .unwrap_or_else(|e| panic!("cas: {e}"));
                assert!(outcome.applied(), "only this task writes it: {outcome:?}");
                current = next;
                applied += 1;
            }
            (current, applied)
        })
    };
    let options = MoveOptions {
        batch: MAX_WRITE_OPS,
        ..MoveOptions::default()
    };
    let first = c.client.view().owner(p).unwrap().clone();
    let other = if first == g("g1") { g("g2") } else { g("g1") };
    let mut reports = Vec::new();
    for to in [&other, &first, &other] {
        tokio::time::sleep(Duration::from_millis(200)).await;
        reports.push(c.client.move_partition(p, to, &options).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked = HashMap::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    let (cas_value, cas_applied) = cas.await.unwrap();
    assert!(cas_applied > 0);
    for r in &reports {
        assert!(r.blocked < r.total, "{r:?}");
    }
    assert_eq!(c.client.view().owner(p), Some(&other));
    // Every acknowledged write is there, at the owner.
    for (k, v) in &acked {
        assert_eq!(
            c.client.get(*k).await.unwrap(),
            Some(Uuid::from_u128(*v)),
            "{k}"
        );
    }
    assert_eq!(c.client.get(cas_key).await.unwrap(), Some(cas_value));
    // Every key once, across the groups' scans (the source dropped its
    // copy, or its scan leaves it out).
    let entries = c.scan_all().await;
    for k in hot.iter().chain(&cold) {
        assert_eq!(
            entries.iter().filter(|(e, _)| e == k).count(),
            1,
            "{k} not once"
        );
    }
    // And the groups dropped what moved away: their entries add up to the
    // keys, none held twice.
    let distinct = entries.len() as u64;
    let mut held = 0;
    for _ in 0..200 {
        held = 0;
        for i in 0..2 {
            held += c.group(i).stats().await.unwrap().entries;
        }
        if held == distinct {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        held, distinct,
        "the groups hold {held} entries for {distinct} keys"
    );
    c.stop().await;
}

#[tokio::test]
async fn a_cluster_scan_returns_every_key_once_across_a_move_and_a_resume() {
    let c = two_groups().await;
    let keys: Vec<Uuid> = (0..400).map(key).collect();
    for k in &keys {
        c.client.put(*k, Uuid::from_u128(7)).await.unwrap();
    }
    let all: std::collections::HashSet<Uuid> =
        c.scan_all().await.into_iter().map(|(k, _)| k).collect();
    let count = |seen: &[(Uuid, Uuid)]| {
        let mut n: HashMap<Uuid, usize> = HashMap::new();
        for (k, _) in seen {
            *n.entry(*k).or_default() += 1;
        }
        n
    };
    // A scan, and between its pages a partition of the group it has not
    // read yet moves to the one it has.
    let mut scan = c.client.scan(Vec::new());
    let first = scan.next_page().await.unwrap().unwrap();
    assert_eq!(first.group, "g1");
    assert!(
        first.cursor.starts_with("uuidmap-cluster-scan 1|g2:"),
        "{}",
        first.cursor
    );
    let moved = keys
        .iter()
        .map(|k| partition_of(k.as_bytes()))
        .find(|p| p.get() >= 2048)
        .unwrap();
    let options = MoveOptions {
        batch: MAX_WRITE_OPS,
        ..MoveOptions::default()
    };
    c.client
        .move_partition(moved, &g("g1"), &options)
        .await
        .unwrap();
    let mut seen = first.entries;
    while let Some(page) = scan.next_page().await.unwrap() {
        seen.extend(page.entries);
    }
    let n = count(&seen);
    assert_eq!(n.len(), all.len(), "every key");
    assert!(n.values().all(|c| *c == 1), "each once");
    // Resumed from a page's cursor (as by another process): the rest, once.
    let mut scan = c.client.scan(Vec::new());
    let first = scan.next_page().await.unwrap().unwrap();
    let mut seen = first.entries;
    let mut resumed = c.client.resume_scan(&first.cursor, Vec::new()).unwrap();
    while let Some(page) = resumed.next_page().await.unwrap() {
        seen.extend(page.entries);
    }
    let n = count(&seen);
    assert_eq!(n.len(), all.len());
    assert!(n.values().all(|c| *c == 1));
    assert!(c.client.resume_scan("garbage", Vec::new()).is_err());
    c.stop().await;
}

#[tokio::test]
async fn a_cluster_watch_gives_each_write_once_and_in_order_across_moves_and_nothing_of_a_move() {
    let c = two_groups().await;
    let p = partition_of(key(0).as_bytes());
    let hot = keys_in(p, 8);
    let cold: Vec<Uuid> = (500..520).map(key).collect();
    let keys: Vec<Uuid> = hot.iter().chain(&cold).copied().collect();
    // Written before the watch starts: never shown.
    for k in &keys {
        c.client.put(*k, Uuid::from_u128(1)).await.unwrap();
    }
    let mut watch = c.client.watch().await.unwrap();
    // One writer, puts of a counter: each key's acknowledged values, in
    // order, are what the watch must give, exactly.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, stop, keys) = (c.client.clone(), Arc::clone(&stop), keys.clone());
        tokio::spawn(async move {
            let mut acked: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
            let mut n: u128 = 2;
            while !stop.load(Ordering::Relaxed) {
                for k in &keys {
                    let v = Uuid::from_u128(n);
                    client
                        .put(*k, v)
                        .await
                        .unwrap_or_else(|e| panic!("put {k}: {e}"));
                    acked.entry(*k).or_default().push(v);
                    n += 1;
                }
            }
            acked
        })
    };
    let options = MoveOptions {
        batch: MAX_WRITE_OPS,
        ..MoveOptions::default()
    };
    let first = c.client.view().owner(p).cloned().unwrap();
    let other = if first == g("g1") { g("g2") } else { g("g1") };
    for to in [&other, &first, &other] {
        tokio::time::sleep(Duration::from_millis(150)).await;
        c.client.move_partition(p, to, &options).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    stop.store(true, Ordering::Relaxed);
    let acked = writer.await.unwrap();
    // Every key's acknowledged values come, once each, in order; nothing
    // else (no copy of a move, no drop of moved entries) comes at all.
    let mut seen: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    let done = |seen: &HashMap<Uuid, Vec<Uuid>>| {
        acked
            .iter()
            .all(|(k, vs)| seen.get(k).map(Vec::len) >= Some(vs.len()))
    };
    while !done(&seen) {
        let batch = tokio::time::timeout(Duration::from_secs(20), watch.next())
            .await
            .expect("the watch delivers every acknowledged write within 20 s")
            .unwrap();
        for (k, v) in batch.changes {
            let v = v.unwrap_or_else(|| panic!("{k} removed by {} at {}", batch.group, batch.lsn));
            seen.entry(k).or_default().push(v);
        }
    }
    for (k, vs) in &acked {
        assert_eq!(seen.get(k), Some(vs), "the changes of {k}");
    }
    assert_eq!(seen.len(), acked.len(), "no change of another key");
    // The cursor, as text, resumes exactly after what was delivered.
    let cursor: uuidmap_client::ClusterCursor = watch.cursor().to_string().parse().unwrap();
    drop(watch);
    c.client
        .put(hot[0], Uuid::from_u128(u128::MAX - 1))
        .await
        .unwrap();
    let mut resumed = c.client.watch_from(&cursor).unwrap();
    let batch = tokio::time::timeout(Duration::from_secs(20), resumed.next())
        .await
        .expect("the resumed watch delivers the new write")
        .unwrap();
    assert_eq!(
        batch.changes,
        vec![(hot[0], Some(Uuid::from_u128(u128::MAX - 1)))]
    );
    assert!(
        "g1:x".parse::<uuidmap_client::ClusterCursor>().is_err()
            && "g1:1,g1:2"
                .parse::<uuidmap_client::ClusterCursor>()
                .is_err()
    );
}

/// A member that has not yet seen the map the client routes by (its etcd
/// watch was lost while the table changed) refuses the key as its old
/// owner's: the client waits for it to catch up rather than failing the
/// call, and the call is answered once it has.
#[tokio::test]
async fn a_member_behind_the_map_is_waited_for_not_failed() {
    let etcd = TestEtcd::start();
    let map = etcd.init_partitions(CLUSTER, &["g1", "g2"]).await;
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let g1 = start_partitioned(dirs[0].path(), &etcd.url, CLUSTER, "g1").await;
    // g2's member reaches etcd through a link the test can cut.
    let etcd_addr = etcd.url.trim_start_matches("http://").parse().unwrap();
    let link = FaultProxy::start(etcd_addr).await;
    let g2 = start_partitioned(dirs[1].path(), &link.url(), CLUSTER, "g2").await;
    let template = Client::builder().timeout(Duration::from_secs(10));
    let client = PartitionedClient::connect(std::slice::from_ref(&etcd.url), CLUSTER, template)
        .await
        .unwrap();
    let view = map.load().await.unwrap();
    let k = (0u64..)
        .map(key)
        .find(|k| view.owner_of(k.as_bytes()) == Some(&g("g1")))
        .unwrap();
    let p = partition_of(k.as_bytes());
    for _ in 0..200 {
        if client.refresh().await.unwrap().groups.len() == 2 && client.get(k).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Cut off, g2's member keeps the table in which g1 owns the key; the
    // table then gives the partition to g2 (no data moves: routing alone
    // is under test).
    link.partition(true);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let table = view
        .table
        .as_ref()
        .unwrap()
        .with_move(p, &g("g2"))
        .and_then(|t| t.with_fence(p))
        .and_then(|t| t.with_move_done(p))
        .unwrap();
    map.replace_table(view.version, &table).await.unwrap();
    let routed_by = client.refresh().await.unwrap();
    assert_eq!(routed_by.owner_of(k.as_bytes()), Some(&g("g2")));
    let heal = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        link.partition(false);
        link
    });
    // A cluster scan meanwhile plans the partition at g2, and is refused
    // the same way: it waits too.
    let scan = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut scan = client.scan(Vec::new());
            let mut pages = 0;
            while scan.next_page().await?.is_some() {
                pages += 1;
            }
            Ok::<_, ClientError>(pages)
        })
    };
    let asked = std::time::Instant::now();
    let answer = client.get(k).await;
    let waited = asked.elapsed();
    assert_eq!(
        answer.unwrap(),
        None,
        "g2's member answers once it has the table (the key's data did not move)"
    );
    assert!(
        waited >= Duration::from_millis(600),
        "answered after {waited:?}, before g2's member could have read the new table"
    );
    let pages = scan
        .await
        .unwrap()
        .expect("the cluster scan waits for g2's member too");
    assert!(pages >= 2, "both groups scanned: {pages} pages");
    let _link = heal.await.unwrap();
    g1.stop().await.unwrap();
    g2.stop().await.unwrap();
}
