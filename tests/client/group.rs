//! The client against a replica group of three servers: writes find the
//! leader and stay with it, a write sent to a follower is redirected at
//! once, and writes ride out the leader's stop with nothing acknowledged
//! lost.

use std::time::Duration;

use uuid::Uuid;
use uuidmap_client::{Client, ClientError};
use uuidmap_testkit::server::TestGroup;

use crate::{key, quick};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_to_the_leader_a_follower_names_and_stay_there() {
    let group = TestGroup::start(3).await;
    let leader = group.leader().await;
    let follower = (leader + 1) % 3;
    let urls = group.urls();
    // The follower first: its first write is refused and redirected.
    let client = quick([urls[follower].clone(), urls[leader].clone()])
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    // The follower hears of the leader with its first heartbeat; until
    // then its refusal names no one and the write is retried in turn.
    client.put(key(0), Uuid::from_u128(0)).await.unwrap();
    let before = client.counters();
    for i in 1..=30 {
        client
            .put(key(i), Uuid::from_u128(i as u128))
            .await
            .unwrap();
    }
    let after = client.counters();
    assert_eq!(after.calls - before.calls, 30);
    assert_eq!(
        after.attempts - before.attempts,
        30,
        "every write went straight to the leader"
    );

    // A new client that knows only the members, in an order that puts a
    // follower first: one redirect, no backoff.
    let fresh = quick([urls[follower].clone(), urls[leader].clone()])
        .build()
        .unwrap();
    fresh.put(key(100), Uuid::from_u128(100)).await.unwrap();
    let c = fresh.counters();
    assert!(c.attempts <= 2, "{c:?}");
    // Reads go to every member; read-your-writes holds on the follower.
    for i in 0..=30 {
        assert_eq!(
            client.get(key(i)).await.unwrap(),
            Some(Uuid::from_u128(i as u128))
        );
    }
    group.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_ride_out_the_leaders_stop_and_nothing_acknowledged_is_lost() {
    let mut group = TestGroup::start(3).await;
    let leader = group.leader().await;
    let client = quick(group.urls())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut acked = Vec::new();
    for i in 0..20 {
        client
            .put(key(i), Uuid::from_u128(i as u128))
            .await
            .unwrap();
        acked.push(i);
    }
    group.stop_member(leader).await.expect("a clean stop");
    // Not marked idempotent: a write refused by a follower, or not
    // delivered to the stopped leader, was not applied, so it is sent
    // again; the call waits out the election within its deadline.
    for i in 20..40 {
        match client.put(key(i), Uuid::from_u128(i as u128)).await {
            Ok(_) => acked.push(i),
            Err(e @ ClientError::Status { .. }) if e.retry_class().allows_retry(true) => {
                // The leader lost its leadership after logging it: its
                // outcome is unknown, and it is not counted as acked.
            }
            Err(e) => panic!("write {i} failed: {e}"),
        }
    }
    assert!(
        acked.len() >= 38,
        "most writes went through: {}",
        acked.len()
    );
    let after = client
        .compare_and_set(key(0), Some(Uuid::from_u128(0)), Some(Uuid::from_u128(7)))
        .await
        .expect("the new leader decides a CAS on the old one's writes");
    assert!(after.lsn().is_some_and(|lsn| lsn > 0), "{after:?}");
    // Every acknowledged write is on the two members left.
    for i in acked {
        let want = if i == 0 { 7 } else { i as u128 };
        assert_eq!(
            client.get(key(i)).await.unwrap(),
            Some(Uuid::from_u128(want)),
            "key {i}"
        );
    }
    // The stopped member comes back and catches up.
    group.restart_member(leader).await;
    let back = Client::builder()
        .endpoints([group.urls()[leader].clone()])
        .build()
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if back.get(key(0)).await.ok().flatten() == Some(Uuid::from_u128(7)) {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the restarted member did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    group.stop().await;
}
