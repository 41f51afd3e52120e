//! Servers of a partitioned cluster (`--etcd`, README "Partitions") over a
//! real etcd: each serves only its group's partitions and refuses the rest
//! with the owner named, whatever the client believes; a change of the
//! table reaches it by the watch; etcd down stops nothing it owns; etcd
//! down at start refuses keys until the table is read; one name per
//! member.

use std::time::{Duration, Instant};

use tonic::Code;
use uuidmap::server::proto::v1 as pb;
use uuidmap_client::partition::{EtcdMap, GroupName, PartitionId, partition_of};
use uuidmap_testkit::etcd::TestEtcd;
use uuidmap_testkit::server::{
    TestServer, b, get_req, put_op, put_req, sample, scrape, start_partitioned, u,
};

const CLUSTER: &str = "t";

fn g(s: &str) -> GroupName {
    s.parse().unwrap()
}

/// The first `n` keys `u(1..)` whose partitions `in_group` accepts.
fn keys_where(n: usize, in_group: impl Fn(PartitionId) -> bool) -> Vec<uuid::Uuid> {
    (1u128..)
        .map(u)
        .filter(|k| in_group(partition_of(k.as_bytes())))
        .take(n)
        .collect()
}

/// Keys of the first half (g1 in an even split of two) and of the second.
fn g1_keys(n: usize) -> Vec<uuid::Uuid> {
    keys_where(n, |p| p.get() < 2048)
}
fn g2_keys(n: usize) -> Vec<uuid::Uuid> {
    keys_where(n, |p| p.get() >= 2048)
}

async fn init_two_groups(etcd: &TestEtcd) -> EtcdMap {
    etcd.init_partitions(CLUSTER, &["g1", "g2"]).await
}

/// Retries `f` until it is `Ok`, for up to 10 s.
async fn eventually<T, E: std::fmt::Debug, F, Fut>(what: &str, f: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match f().await {
            Ok(t) => return t,
            Err(e) if Instant::now() > until => panic!("{what}: still {e:?} after 10 s"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn md<'a>(s: &'a tonic::Status, key: &str) -> &'a str {
    s.metadata()
        .get(key)
        .unwrap_or_else(|| panic!("no {key} in {s:?}"))
        .to_str()
        .unwrap()
}

#[tokio::test]
async fn a_server_serves_its_groups_partitions_and_refuses_the_rest_naming_the_owner() {
    let etcd = TestEtcd::start();
    let map = init_two_groups(&etcd).await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s1 = start_partitioned(d1.path(), &etcd.url, CLUSTER, "g1").await;
    let s2 = start_partitioned(d2.path(), &etcd.url, CLUSTER, "g2").await;
    let (mine, theirs) = (g1_keys(5), g2_keys(5));
    let mut c1 = s1.client().await;
    for k in &mine {
        c1.put(put_req(*k, u(7))).await.unwrap();
    }
    // A key of g2's at g1: refused, nothing written, the owner named.
    let version = map.load().await.unwrap().version;
    for k in &theirs {
        let s = c1.put(put_req(*k, u(7))).await.unwrap_err();
        assert_eq!(s.code(), Code::FailedPrecondition, "{s:?}");
        assert_eq!(md(&s, "uuidmap-owner-group"), "g2");
        assert_eq!(md(&s, "uuidmap-table-version"), version.to_string());
        let p = partition_of(k.as_bytes()).get().to_string();
        assert_eq!(md(&s, "uuidmap-partition"), p);
        assert!(s.message().contains("owned by group g2"), "{}", s.message());
        let s = c1
            .get(pb::GetRequest {
                key: b(*k),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(s.code(), Code::FailedPrecondition);
    }
    // A batch with one foreign key is refused whole: its own keys too.
    let fresh = g1_keys(20)[10..].to_vec();
    let ops = vec![put_op(fresh[0], u(9)), put_op(theirs[0], u(9))];
    let s = c1.write(pb::WriteRequest { ops }).await.unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition);
    let got = c1.get(get_req(fresh[0])).await.unwrap().into_inner();
    assert_eq!(got.value, None, "a refused batch wrote nothing");
    // BatchGet: refused whole if any key is foreign; served when all are
    // ours.
    let packed = |keys: &[uuid::Uuid]| {
        keys.iter()
            .flat_map(|k| k.into_bytes())
            .collect::<Vec<u8>>()
    };
    let mixed = [mine[0], theirs[0]];
    let s = c1
        .batch_get(pb::BatchGetRequest {
            keys: packed(&mixed).into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition);
    let ours = c1
        .batch_get(pb::BatchGetRequest {
            keys: packed(&mine).into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ours.values.len(), 16 * mine.len());
    // Lookup: the refusal is the request's, the stream goes on.
    let requests = tokio_stream::iter([
        pb::LookupRequest {
            id: 1,
            keys: packed(&theirs[..1]).into(),
            ..Default::default()
        },
        pb::LookupRequest {
            id: 2,
            keys: packed(&mine[..1]).into(),
            ..Default::default()
        },
    ]);
    let mut answers = c1.lookup(requests).await.unwrap().into_inner();
    let first = answers.message().await.unwrap().unwrap();
    let error = first.error.expect("refused");
    assert_eq!(error.code, Code::FailedPrecondition as u32);
    assert!(
        error.message.contains("owned by group g2"),
        "{}",
        error.message
    );
    let second = answers.message().await.unwrap().unwrap();
    assert!(second.error.is_none() && second.values.len() == 16);
    // g2 serves its own keys.
    let mut c2 = s2.client().await;
    c2.put(put_req(theirs[0], u(8))).await.unwrap();
    s1.stop().await.unwrap();
    s2.stop().await.unwrap();
}

#[tokio::test]
async fn a_partition_given_to_another_group_is_refused_by_its_old_owner_at_once() {
    let etcd = TestEtcd::start();
    let map = init_two_groups(&etcd).await;
    let d1 = tempfile::tempdir().unwrap();
    let s1 = start_partitioned(d1.path(), &etcd.url, CLUSTER, "g1").await;
    let k = g1_keys(1)[0];
    let mut c1 = s1.client().await;
    c1.put(put_req(k, u(1))).await.unwrap();
    // The table gives k's partition to g2, as a move does: copying (the
    // owner serves it as before), fenced, flipped.
    let view = map.load().await.unwrap();
    let p = partition_of(k.as_bytes());
    let copying = view.table.unwrap().with_move(p, &g("g2")).unwrap();
    let v = map.replace_table(view.version, &copying).await.unwrap();
    c1.put(put_req(k, u(1))).await.unwrap();
    // While it is copied, the owner serves reads as before.
    let got = c1.get(get_req(k)).await.unwrap().into_inner();
    assert_eq!(
        got.value,
        Some(b(u(1))),
        "the owner serves reads while it is copied"
    );
    let table = copying.with_fence(p).unwrap();
    let moving = map.replace_table(v, &table).await.unwrap();
    // While it is fenced, writes and reads are refused as retryable: after
    // the flip a member that has not seen it yet would otherwise answer
    // with the frozen value while the new owner takes writes.
    // (The writes before the server sees the mark succeed: they write the
    // value it has.)
    let s = eventually("the write refused as moving", || {
        let mut c = c1.clone();
        async move {
            match c.put(put_req(k, u(1))).await {
                Err(s) if s.code() == Code::Unavailable => Ok(s),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert_eq!(md(&s, "uuidmap-moving-to"), "g2");
    let s = c1.get(get_req(k)).await.unwrap_err();
    assert_eq!(s.code(), Code::Unavailable, "{s:?}");
    assert_eq!(md(&s, "uuidmap-moving-to"), "g2");
    let done = table.with_move_done(p).unwrap();
    map.replace_table(moving, &done).await.unwrap();
    // A client that still believes g1 owns it (a stale map) is refused.
    let s = eventually("the read refused as not owned", || {
        let mut c = c1.clone();
        async move {
            match c.get(get_req(k)).await {
                Err(s) if s.code() == Code::FailedPrecondition => Ok(s),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert_eq!(md(&s, "uuidmap-owner-group"), "g2");
    let s = c1.put(put_req(k, u(3))).await.unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition);
    // A stale table version in etcd never wins: the compare fails.
    assert!(map.replace_table(view.version, &done).await.is_err());
    s1.stop().await.unwrap();
}

#[tokio::test]
async fn with_etcd_down_a_server_goes_on_serving_what_it_owns() {
    let mut etcd = TestEtcd::start();
    init_two_groups(&etcd).await;
    let d1 = tempfile::tempdir().unwrap();
    let s1 = start_partitioned(d1.path(), &etcd.url, CLUSTER, "g1").await;
    let (mine, theirs) = (g1_keys(3), g2_keys(1));
    let c1 = s1.client().await;
    // The server has read the table once it takes a write of its own.
    let first = mine[0];
    eventually("the server read the table", || {
        let mut c = c1.clone();
        async move { c.put(put_req(first, u(5))).await }
    })
    .await;
    let mut c1 = c1;
    etcd.kill();
    for k in &mine {
        c1.put(put_req(*k, u(5))).await.unwrap();
        let got = c1
            .get(pb::GetRequest {
                key: b(*k),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.value, Some(b(u(5))));
    }
    // And still refuses what it does not own.
    let s = c1.put(put_req(theirs[0], u(5))).await.unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition);
    // Longer than the 2 s lease: the registration comes back once etcd
    // does.
    tokio::time::sleep(Duration::from_secs(3)).await;
    etcd.restart();
    let map = EtcdMap::connect(std::slice::from_ref(&etcd.url), CLUSTER)
        .await
        .unwrap();
    eventually("the member registered again", || {
        let map = map.clone();
        async move {
            let v = map.load().await.map_err(|e| e.to_string())?;
            match v.member_urls(&g("g1")).as_slice() {
                [url] if *url == format!("http://{}", s1.addr) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    s1.stop().await.unwrap();
}

#[tokio::test]
async fn a_server_started_while_etcd_is_down_refuses_keys_until_it_reads_the_table() {
    let mut etcd = TestEtcd::start();
    init_two_groups(&etcd).await;
    etcd.kill();
    let d1 = tempfile::tempdir().unwrap();
    let s1 = start_partitioned(d1.path(), &etcd.url, CLUSTER, "g1").await;
    let k = g1_keys(1)[0];
    let mut c1 = eventually("the server answers", || {
        let addr = s1.addr;
        async move {
            uuidmap::server::proto::v1::uuid_map_client::UuidMapClient::connect(format!(
                "http://{addr}"
            ))
            .await
        }
    })
    .await;
    let s = c1.put(put_req(k, u(1))).await.unwrap_err();
    assert_eq!(s.code(), Code::Unavailable, "{s:?}");
    assert!(
        s.message().contains("not read the partition table"),
        "{}",
        s.message()
    );
    etcd.restart();
    eventually("the write accepted once etcd is back", || {
        let mut c = c1.clone();
        async move { c.put(put_req(k, u(1))).await }
    })
    .await;
    s1.stop().await.unwrap();
}

#[tokio::test]
async fn a_second_server_under_the_same_member_name_is_refused_at_start() {
    let etcd = TestEtcd::start();
    let map = init_two_groups(&etcd).await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s1 = start_partitioned(d1.path(), &etcd.url, CLUSTER, "g1").await;
    eventually("the first registered", || {
        let map = map.clone();
        async move {
            let v = map.load().await.map_err(|e| e.to_string())?;
            match v.member_urls(&g("g1")).len() {
                1 => Ok(()),
                n => Err(format!("{n} members")),
            }
        }
    })
    .await;
    let s2 = start_partitioned(d2.path(), &etcd.url, CLUSTER, "g1").await;
    let e = TestServer::stop(s2).await.unwrap_err().to_string();
    assert!(
        e.contains("registered by another server") && e.contains(&s1.addr.to_string()),
        "{e}"
    );
    s1.stop().await.unwrap();
}

#[tokio::test]
async fn scans_and_stats_follow_the_table() {
    let etcd = TestEtcd::start();
    let map = init_two_groups(&etcd).await;
    let d2 = tempfile::tempdir().unwrap();
    let s2 = start_partitioned(d2.path(), &etcd.url, CLUSTER, "g2").await;
    let c2 = s2.client().await;
    let (mine, theirs) = (g2_keys(3), g1_keys(1));
    let first = mine[0];
    eventually("the server read the table", || {
        let mut c = c2.clone();
        async move { c.put(put_req(first, u(5))).await }
    })
    .await;
    let mut c2 = c2;
    let scan = |partitions: Vec<u32>| pb::ScanRequest {
        partitions,
        ..Default::default()
    };
    // A partition of g1's, by number: refused like its keys.
    let foreign = u32::from(partition_of(theirs[0].as_bytes()).get());
    let s = c2.scan(scan(vec![foreign])).await.unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition);
    assert_eq!(md(&s, "uuidmap-owner-group"), "g1");
    let s = c2.scan(scan(vec![4096])).await.unwrap_err();
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(s.message().contains("0 to 4095"), "{}", s.message());
    // One of its own: only that partition's keys.
    let own = u32::from(partition_of(first.as_bytes()).get());
    let mut stream = c2.scan(scan(vec![own])).await.unwrap().into_inner();
    let mut keys = Vec::new();
    while let Some(m) = stream.message().await.unwrap() {
        keys.extend(m.entries.chunks(32).map(|e| e[..16].to_vec()));
    }
    assert_eq!(keys, [first.as_bytes().to_vec()]);
    // Being copied to g2, a g1 partition takes the mover's copy writes at
    // g2 (marked `uuidmap-partition-copy`), and no one else's: a client
    // sending it there holds an old map. Stats counts it.
    let view = map.load().await.unwrap();
    let p = partition_of(theirs[0].as_bytes());
    let copying = view.table.unwrap().with_move(p, &g("g2")).unwrap();
    map.replace_table(view.version, &copying).await.unwrap();
    let k = theirs[0];
    let copy = |ops: Vec<pb::WriteOp>| {
        let mut r = tonic::Request::new(pb::WriteRequest { ops });
        r.metadata_mut().insert(
            "uuidmap-partition-copy",
            tonic::metadata::MetadataValue::from_static("1"),
        );
        r
    };
    eventually("the copy's write taken", || {
        let mut c = c2.clone();
        async move { c.write(copy(vec![put_op(k, u(6))])).await }
    })
    .await;
    let s = c2.put(put_req(k, u(7))).await.unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition, "{s:?}");
    assert_eq!(md(&s, "uuidmap-owner-group"), "g1");
    // A plain scan of g2 lists what g2 owns, not the copy coming in.
    let mut stream = c2.scan(scan(vec![])).await.unwrap().into_inner();
    while let Some(m) = stream.message().await.unwrap() {
        assert!(
            m.entries.chunks(32).all(|e| e[..16] != k.as_bytes()[..]),
            "the copy of a partition still g1's was listed"
        );
    }
    // A copy write for a partition not moving here is refused too.
    let s = c2
        .write(copy(vec![put_op(mine[1], u(6))]))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition, "{s:?}");
    let s = c2.get(get_req(k)).await.unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition);
    let stats = c2
        .stats(pb::StatsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .partitions
        .expect("a partitioned server reports its partitions");
    assert_eq!(
        (stats.group.as_str(), stats.cluster.as_str()),
        ("g2", CLUSTER)
    );
    assert_eq!(
        (stats.owned, stats.moving_in, stats.moving_out),
        (2048, 1, 0)
    );
    assert!(stats.fenced_version <= stats.table_version && stats.table_version > view.version);
    assert!(stats.etcd_error.is_empty());
    // /metrics shows the same figures, for the group.
    let text = scrape(&s2).await;
    assert_eq!(
        sample(
            &text,
            "uuidmap_partition_group_info",
            &[("group", "g2"), ("cluster", CLUSTER)]
        ),
        Some(1.0),
        "{text}"
    );
    for (state, n) in [("owned", 2048.0), ("moving_in", 1.0), ("moving_out", 0.0)] {
        assert_eq!(
            sample(&text, "uuidmap_partitions", &[("state", state)]),
            Some(n),
            "{state}"
        );
    }
    let version = sample(&text, "uuidmap_partition_table_version", &[]).unwrap();
    assert!(version >= stats.table_version as f64, "{version}");
    assert!(sample(&text, "uuidmap_partition_fenced_version", &[]).unwrap() <= version);
    assert_eq!(sample(&text, "uuidmap_partition_etcd_up", &[]), Some(1.0));
    s2.stop().await.unwrap();
}

/// `uuidmap ARGS` against `etcd`'s cluster `CLUSTER`; exit code, stdout,
/// stderr.
fn cli(etcd: &TestEtcd, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_uuidmap"))
        .args(args)
        .env("UUIDMAP_ETCD", &etcd.url)
        .env("UUIDMAP_ETCD_CLUSTER", CLUSTER)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_cli_makes_shows_and_moves_partitions_and_says_what_is_wrong() {
    let etcd = TestEtcd::start();
    let (code, out, _) = cli(&etcd, &["cluster", "partitions"]);
    assert_eq!(code, 0);
    assert!(out.contains("table none"), "{out}");
    let (code, out, err) = cli(
        &etcd,
        &["cluster", "partitions", "init", "--groups", "g1,g2"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("0-2047 g1\n2048-4095 g2\n"), "{out}");
    let (code, _, err) = cli(&etcd, &["cluster", "partitions", "init", "--groups", "g3"]);
    assert_eq!(code, 2);
    assert!(err.contains("already has a partition table"), "{err}");
    let (code, _, err) = cli(&etcd, &["cluster", "partitions", "init", "--groups", "G!"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a group name"), "{err}");
    // A move needs the target's servers, and a partition that exists.
    let (code, _, err) = cli(
        &etcd,
        &["cluster", "move", "--partition", "4096", "--to", "g2"],
    );
    assert_eq!(code, 2);
    assert!(err.contains("0 to 4095"), "{err}");
    let (code, _, err) = cli(
        &etcd,
        &["cluster", "move", "--partition", "7", "--to", "g2"],
    );
    assert_eq!(code, 2);
    assert!(err.contains("no member registered"), "{err}");
    // With both groups served, a move goes through and the table says so.
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s1 = start_partitioned(d1.path(), &etcd.url, CLUSTER, "g1").await;
    let s2 = start_partitioned(d2.path(), &etcd.url, CLUSTER, "g2").await;
    let etcd_url = etcd.url.clone();
    eventually("both registered", || {
        let url = etcd_url.clone();
        async move {
            let map = EtcdMap::connect(&[url], CLUSTER)
                .await
                .map_err(|e| e.to_string())?;
            let v = map.load().await.map_err(|e| e.to_string())?;
            if v.groups.len() == 2 {
                Ok(())
            } else {
                Err(format!("{:?}", v.groups))
            }
        }
    })
    .await;
    let etcd = tokio::task::spawn_blocking(move || {
        let (code, out, err) = cli(
            &etcd,
            &["cluster", "move", "--partition", "7", "--to", "g2"],
        );
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("from g1\nto g2\n") && out.contains("writes_blocked_ms"),
            "{out}"
        );
        let (_, out, _) = cli(&etcd, &["cluster", "partitions"]);
        assert!(out.contains("0-6 g1\n7-7 g2\n8-2047 g1\n"), "{out}");
        assert!(out.contains("group g2 partitions 2049 entries 0"), "{out}");
        etcd
    })
    .await
    .unwrap();
    s1.stop().await.unwrap();
    s2.stop().await.unwrap();
    drop(etcd);
}
