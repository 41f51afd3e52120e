//! The client learns its replica group's leader: given one follower's URL
//! only, it reaches a leader it was not given, from the refusal that names
//! it, or from the group's status when it connects.

use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_client::Client;
use uuidmap_testkit::server::TestGroup;

use crate::{key, quick};

/// A follower's index, once it knows the leader (`leader`'s index).
async fn follower_that_knows(group: &TestGroup, leader: usize) -> usize {
    let follower = (leader + 1) % 3;
    let one = Client::builder()
        .endpoints([group.urls()[follower].clone()])
        .build()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while one
        .cluster_status()
        .await
        .ok()
        .and_then(|s| s.leader_url)
        .is_none()
    {
        assert!(
            Instant::now() < until,
            "the follower never heard of a leader"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    follower
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_given_only_a_follower_writes_through_the_leader_its_refusal_names() {
    let group = TestGroup::start(3).await;
    let leader = group.leader().await;
    let follower = follower_that_knows(&group, leader).await;
    let urls = group.urls();
    let client = quick([urls[follower].clone()])
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    client.put(key(0), Uuid::from_u128(1)).await.unwrap();
    assert_eq!(client.leader_url().as_deref(), Some(urls[leader].as_str()));
    assert!(client.endpoint_urls().contains(&urls[leader]));
    // Later writes go straight there.
    let before = client.counters();
    for i in 1..=10 {
        client.put(key(i), Uuid::from_u128(1)).await.unwrap();
    }
    let after = client.counters();
    assert_eq!(after.attempts - before.attempts, 10, "{after:?}");
    group.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_connected_to_a_follower_learns_the_leader_before_its_first_write() {
    let group = TestGroup::start(3).await;
    let leader = group.leader().await;
    let follower = follower_that_knows(&group, leader).await;
    let urls = group.urls();
    let client = quick([urls[follower].clone()]).connect().await.unwrap();
    assert_eq!(
        client.endpoint_urls().len(),
        2,
        "{:?}",
        client.endpoint_urls()
    );
    assert_eq!(client.leader_url().as_deref(), Some(urls[leader].as_str()));
    // The first write goes to the leader at once.
    let before = client.counters();
    client.put(key(0), Uuid::from_u128(1)).await.unwrap();
    let after = client.counters();
    assert_eq!(after.attempts - before.attempts, 1, "{after:?}");
    group.stop().await;
}
