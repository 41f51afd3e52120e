//! Watch on the members of a replica group: every member, follower or
//! leader, sends the same batches at the same LSNs, those the writer
//! applied, skipping the log entries that changed nothing (the leader's
//! first entry, membership changes, the writer's gates); a watch that
//! starts after a snapshot's point follows the proposal chain from there.

use std::collections::BTreeMap;
use std::time::Duration;

use tonic::Streaming;
use uuid::Uuid;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_admin_client::UuidMapAdminClient;
use uuidmap_testkit::server::{TestGroup, TestServer, b, cas_req, put_req, u};

/// A batch as (LSN, its changes as (key, value or None for a removal)).
type Batch = (u64, Vec<(Uuid, Option<Uuid>)>);

/// The batches of a watch after `after` on `server`, until one at or past
/// LSN `last`, checking their LSNs only grow.
async fn watched(server: &TestServer, after: u64, last: u64) -> Vec<Batch> {
    let mut c = server.client().await;
    let mut stream: Streaming<pb::WatchResponse> = c
        .watch(pb::WatchRequest {
            after_lsn: after,
            ..Default::default()
        })
        .await
        .expect("a member serves Watch")
        .into_inner();
    let mut out: Vec<Batch> = Vec::new();
    while out.last().is_none_or(|b| b.0 < last) {
        let response = tokio::time::timeout(Duration::from_secs(20), stream.message())
            .await
            .expect("a batch within 20 s")
            .unwrap()
            .expect("the stream goes on");
        assert!(!response.batches.is_empty(), "a response holds batches");
        for batch in response.batches {
            assert!(
                batch.lsn > out.last().map_or(after, |b| b.0),
                "LSNs grow: {} after {:?}",
                batch.lsn,
                out.last().map(|b| b.0)
            );
            let changes = batch
                .changes
                .iter()
                .map(|c| {
                    let value = c.value.as_ref().map(|v| Uuid::from_slice(v).unwrap());
                    (Uuid::from_slice(&c.key).unwrap(), value)
                })
                .collect();
            out.push((batch.lsn, changes));
        }
    }
    out
}

/// Writes through `server` (the leader): puts of keys `keys`, with `k +
/// offset` as values; returns the LSNs.
async fn puts(server: &TestServer, keys: std::ops::RangeInclusive<u128>, offset: u128) -> Vec<u64> {
    let mut c = server.client().await;
    let mut lsns = Vec::new();
    for k in keys {
        let r = c
            .put(put_req(u(k), u(k + offset)))
            .await
            .expect("the leader takes it");
        lsns.push(r.into_inner().lsn);
    }
    lsns
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_watches_the_same_applied_batches_and_from_after_a_snapshot() {
    let group = TestGroup::start(3).await;
    let l = group.leader().await;
    let leader = group.member(l).unwrap();
    let mut lsns = puts(leader, 1..=10, 100).await;
    let mut c = leader.client().await;
    let del = c
        .delete(pb::DeleteRequest { key: b(u(3)) })
        .await
        .unwrap()
        .into_inner();
    lsns.push(del.lsn);
    let cas = c
        .compare_and_set(cas_req(u(4), Some(u(104)), Some(u(7))))
        .await
        .unwrap()
        .into_inner();
    assert!(cas.applied);
    lsns.push(cas.lsn);
    // Refused: logged nowhere, so watched nowhere.
    let refused = c
        .compare_and_set(cas_req(u(4), Some(u(104)), Some(u(8))))
        .await
        .unwrap()
        .into_inner();
    assert!(!refused.applied);
    let last = *lsns.last().unwrap();

    let mut on_leader = watched(leader, 0, last).await;
    // First the delete by which `leader()` found the leader.
    let probe = on_leader.remove(0);
    assert_eq!(probe.1, vec![(Uuid::from_u128(u128::MAX - 1), None)]);
    assert!(probe.0 > 1, "the group's first entries are not batches");
    assert_eq!(
        on_leader.iter().map(|b| b.0).collect::<Vec<_>>(),
        lsns,
        "exactly the applied writes: the entries before and between them changed nothing"
    );
    assert_eq!(on_leader[10].1, vec![(u(3), None)], "the delete");
    assert_eq!(
        on_leader[11].1,
        vec![(u(4), Some(u(7)))],
        "the CAS as its put"
    );
    on_leader.insert(0, probe);
    for i in 0..3 {
        if i != l {
            let member = group.member(i).unwrap();
            assert_eq!(
                watched(member, 0, last).await,
                on_leader,
                "member {}",
                i + 1
            );
        }
    }
    let mut state = BTreeMap::new();
    for (_, changes) in &on_leader[1..] {
        for &(k, v) in changes {
            match v {
                Some(v) => state.insert(k, v),
                None => state.remove(&k),
            };
        }
    }
    assert_eq!(state.len(), 9);
    assert_eq!(state[&u(4)], u(7));

    // Every member takes a snapshot; then ten more puts. A watch after the
    // snapshot starts reading the log at the snapshot's point, with the
    // proposal chain recorded there: were the chain not carried, the
    // later puts (the same leader's, numbered on) would read as void.
    let mut points = Vec::new();
    for i in 0..3 {
        let member = group.member(i).unwrap();
        let mut admin = UuidMapAdminClient::new(member.channel().await);
        let taken = admin
            .snapshot(pb::SnapshotRequest {})
            .await
            .unwrap()
            .into_inner();
        // Idle: the snapshot's point is its LSN.
        assert!(taken.lsn >= last, "{taken:?}");
        points.push(taken.lsn);
    }
    let later = puts(leader, 11..=20, 100).await;
    for (i, &point) in points.iter().enumerate() {
        let member = group.member(i).unwrap();
        let got = watched(member, point, *later.last().unwrap()).await;
        assert_eq!(
            got.iter().map(|b| b.0).collect::<Vec<_>>(),
            later,
            "member {}",
            i + 1
        );
        assert_eq!(got[0].1, vec![(u(11), Some(u(111)))]);
    }
    group.stop().await;
}
