//! Read consistency levels on served members (README.md, "Read
//! consistency"): three servers whose every Raft link goes through a fault
//! proxy (`--raft-dial`). The leader's entries are held back from one
//! follower while the leader takes a write; on that follower:
//! - `stale` answers the value from before the write (so the test
//!   discriminates), and with `max_staleness_ms` is refused UNAVAILABLE
//!   with its lag in the message;
//! - `linearizable`, and a request that leaves the field unset, never
//!   answer the old value: they wait (DEADLINE_EXCEEDED) or are refused
//!   (UNAVAILABLE), and answer the new one once the link heals;
//! - concurrent linearizable reads share read-index rounds, which
//!   `/metrics` counts.

use std::time::{Duration, Instant};

use tonic::Code;
use uuidmap::server::proto::v1 as pb;
use uuidmap_testkit::server::{TestGroup, TestServer, b, put_req, sample, scrape, u};

const K: u128 = 0xabc;

fn get(consistency: pb::ReadConsistency, max_staleness_ms: u64) -> pb::GetRequest {
    pb::GetRequest {
        key: b(u(K)),
        min_lsn: 0,
        consistency: consistency as i32,
        max_staleness_ms,
    }
}

async fn read(
    server: &TestServer,
    request: pb::GetRequest,
    timeout: Duration,
) -> Result<pb::GetResponse, tonic::Status> {
    let mut r = tonic::Request::new(request);
    r.set_timeout(timeout);
    server.client().await.get(r).await.map(|r| r.into_inner())
}

fn rounds(metrics: &str) -> f64 {
    sample(metrics, "uuidmap_raft_read_index_rounds_total", &[]).expect("the rounds counter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_back_follower_answers_stale_reads_old_and_linearizable_reads_never() {
    let (group, proxies) = TestGroup::start_proxied(3).await;
    let l = group.leader().await;
    let fi = (l + 1) % 3;
    let (leader, follower) = (group.member(l).unwrap(), group.member(fi).unwrap());
    let lsn1 = leader
        .client()
        .await
        .put(put_req(u(K), u(1)))
        .await
        .unwrap()
        .into_inner()
        .lsn;
    // Linearizable (the default) on the follower sees it at once.
    let first = read(
        follower,
        get(pb::ReadConsistency::Unspecified, 0),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!(first.value, Some(b(u(1))));
    assert!(first.applied_lsn >= lsn1);

    proxies[&(l as u64 + 1, fi as u64 + 1)].partition(true);
    let lsn2 = leader
        .client()
        .await
        .put(put_req(u(K), u(2)))
        .await
        .unwrap()
        .into_inner()
        .lsn;

    // Stale: the old value, with a true applied LSN.
    let stale = read(
        follower,
        get(pb::ReadConsistency::Stale, 0),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    assert_eq!(stale.value, Some(b(u(1))), "the test discriminates");
    assert!(stale.applied_lsn < lsn2);
    // Linearizable, asked for or by default: never the old value.
    for level in [
        pb::ReadConsistency::Linearizable,
        pb::ReadConsistency::Unspecified,
    ] {
        match read(follower, get(level, 0), Duration::from_millis(800)).await {
            Ok(r) => panic!("{level:?} answered {r:?} on a follower without LSN {lsn2}"),
            Err(s) => assert!(
                matches!(s.code(), Code::DeadlineExceeded | Code::Unavailable),
                "{level:?}: {s:?}"
            ),
        }
    }
    // A staleness bound refuses the lagging follower, saying by how much;
    // the leader is never stale.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = read(
        follower,
        get(pb::ReadConsistency::Stale, 200),
        Duration::from_secs(2),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains(" ms stale"), "{refused:?}");
    assert!(
        refused.message().contains("max_staleness_ms of 200"),
        "{refused:?}"
    );
    let on_leader = read(
        leader,
        get(pb::ReadConsistency::Stale, 1),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    assert_eq!(on_leader.value, Some(b(u(2))));

    proxies[&(l as u64 + 1, fi as u64 + 1)].partition(false);
    let until = Instant::now() + Duration::from_secs(15);
    let healed = loop {
        match read(
            follower,
            get(pb::ReadConsistency::Unspecified, 0),
            Duration::from_secs(2),
        )
        .await
        {
            Ok(r) => break r,
            Err(s) => {
                assert!(
                    Instant::now() < until,
                    "no linearizable read after healing: {s:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(healed.value, Some(b(u(2))));
    assert!(healed.applied_lsn >= lsn2);

    // Concurrent linearizable reads share rounds.
    let before = rounds(&scrape(follower).await);
    let mut client = follower.client().await;
    const READS: usize = 200;
    let reads: Vec<_> = (0..READS)
        .map(|_| {
            let mut c = client.clone();
            tokio::spawn(async move { c.get(get(pb::ReadConsistency::Linearizable, 0)).await })
        })
        .collect();
    for r in reads {
        assert_eq!(r.await.unwrap().unwrap().into_inner().value, Some(b(u(2))));
    }
    let _ = client.ping(pb::PingRequest {}).await;
    let used = rounds(&scrape(follower).await) - before;
    assert!(
        used >= 1.0 && used < (READS / 4) as f64,
        "{used} rounds for {READS} reads"
    );
    group.stop().await;
}
