//! Reads across the members of a group never go back in time: one follower
//! gets the leader's entries late (every byte of the leader's Raft link to
//! it delayed by a fault proxy), a writer keeps moving one key forward, and
//! a reader that never writes reads it at the `stale` level (each member
//! answers from its own state) from every member in turn.
//!
//! The reader sends the highest LSN it has seen as `min_lsn`, so the
//! lagging follower waits rather than answer an older value. A reader
//! built without it (`read_your_writes(false)`) shows that the set-up does
//! go back in time, so the first assertion is not empty.
//!
//! A scan of a group, cut again and again, resumes on the member it began
//! on: each member's index has its own layout, which its cursors name.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use uuid::Uuid;
use uuidmap_client::{Client, ReadConsistency};
use uuidmap_testkit::server::TestGroup;

use super::key;

/// The value of step `n` of the key, and back.
fn step(n: u64) -> Uuid {
    Uuid::from_u128(0x5e9_0000_0000_0000_0000_0000_0000_0000 | u128::from(n + 1))
}

fn step_of(v: Option<Uuid>) -> u64 {
    v.map_or(0, |v| (v.as_u128() & 0xffff_ffff) as u64 - 1)
}

/// Reads the key from every member in turn until `done`, alternating the
/// batched and the unary get; the steps seen, in order.
async fn read_steps(reader: Client, done: Arc<AtomicBool>) -> Vec<u64> {
    let mut seen = Vec::new();
    let mut i = 0u64;
    while !done.load(SeqCst) {
        let v = if i.is_multiple_of(2) {
            reader.get(key(0)).await
        } else {
            reader.get_unary(key(0)).await
        };
        seen.push(step_of(v.expect("a read failed")));
        i += 1;
    }
    seen
}

fn went_back(steps: &[u64]) -> Option<(u64, u64)> {
    steps.windows(2).find(|w| w[1] < w[0]).map(|w| (w[0], w[1]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_never_go_back_in_time_when_a_follower_is_held_behind() {
    let (group, proxies) = TestGroup::start_proxied(3).await;
    let l = group.leader().await;
    let writer = Client::builder().endpoints(group.urls()).build().unwrap();
    writer.put(key(0), step(1)).await.unwrap();
    // 300 ms behind: under the election timeout (400-800 ms), so the
    // follower keeps its leader and only lags.
    let lagging = (l + 1) % 3;
    proxies[&(l as u64 + 1, lagging as u64 + 1)].delay(Duration::from_millis(300), Duration::ZERO);

    let reader = |monotonic: bool| {
        Client::builder()
            .endpoints(group.urls())
            .consistency(ReadConsistency::stale())
            .read_your_writes(monotonic)
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let done = Arc::new(AtomicBool::new(false));
    let monotonic = tokio::spawn(read_steps(reader(true), done.clone()));
    let control = tokio::spawn(read_steps(reader(false), done.clone()));
    for n in 2..=60 {
        writer.put(key(0), step(n)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done.store(true, SeqCst);
    let (monotonic, control) = (monotonic.await.unwrap(), control.await.unwrap());

    assert!(
        control.len() > 20 && monotonic.len() > 5,
        "too few reads to judge: {} and {}",
        control.len(),
        monotonic.len()
    );
    assert!(
        went_back(&control).is_some(),
        "the set-up does not discriminate: without min_lsn no read went back ({} reads)",
        control.len()
    );
    assert_eq!(
        went_back(&monotonic),
        None,
        "a monotonic reader went back in time: {monotonic:?}"
    );
    group.stop().await;
}

/// Key `i` spread over the whole key space.
fn spread(i: u64) -> Uuid {
    Uuid::from_u128(u128::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) << 64 | u128::from(i + 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_of_a_group_cut_again_and_again_resumes_on_its_member_with_every_entry_once() {
    use std::collections::HashSet;
    use uuidmap_client::{ScanOptions, WriteOp};
    use uuidmap_testkit::proxy::FaultProxy;

    const KEYS: u64 = 12_000;
    let group = TestGroup::start(3).await;
    group.leader().await;
    let writer = Client::builder().endpoints(group.urls()).build().unwrap();
    // Three scan messages' worth (one holds up to 4096 entries), in Writes
    // of 10 (the test server's limit), 64 at a time.
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(640) {
        let writes: Vec<_> = chunk
            .chunks(10)
            .map(|ten| {
                let writer = writer.clone();
                let ops: Vec<_> = ten
                    .iter()
                    .map(|&i| WriteOp::Put {
                        key: spread(i),
                        value: step(i),
                    })
                    .collect();
                tokio::spawn(async move { writer.write(&ops).await.unwrap() })
            })
            .collect();
        for w in writes {
            w.await.unwrap();
        }
    }
    // The scan begins on member 0, through a proxy that cuts every
    // connection after about a message and a half. Each member's index has
    // its own layout, so a cursor of member 0 means nothing to the others:
    // the scan must come back to member 0 each time.
    let proxy = FaultProxy::start(group.member(0).unwrap().addr).await;
    proxy.cut_after(200_000);
    let mut urls = group.urls();
    urls[0] = proxy.url();
    let reader = Client::builder()
        .endpoints(urls)
        .consistency(ReadConsistency::stale())
        .build()
        .unwrap();
    writer.wait_for(writer.written_lsn()).await.unwrap();
    let mut scan = reader.scan(ScanOptions::default());
    let mut seen = HashSet::new();
    while let Some(page) = scan.next_page().await.unwrap() {
        for (k, _) in page.entries {
            assert!(seen.insert(k), "{k} came twice");
        }
    }
    assert!(proxy.cuts() >= 2, "cut {} times", proxy.cuts());
    assert!(
        seen.len() as u64 >= KEYS,
        "{} of {KEYS} entries",
        seen.len()
    );
    drop(proxy);
    group.stop().await;
}
