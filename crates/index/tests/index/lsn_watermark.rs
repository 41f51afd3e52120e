//! `LsnWatermark` as its users rely on it: waits end when (and only when)
//! the applied LSN covers them, promptly, with many waiters at once; deadlines
//! are honoured; no wait leaks its registration.
//!
//! Timing bounds are generous (the machine running the tests may be small
//! and busy); correctness is asserted strictly.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng, rngs::Xoshiro256PlusPlus};
use uuidmap_index::sync::{LsnWatermark, WaitTimedOut};

/// The n-th percentile of `samples` (sorted in place).
fn percentile(samples: &mut [Duration], n: usize) -> Duration {
    samples.sort_unstable();
    samples[(samples.len() - 1) * n / 100]
}

/// What one waiter of the crowd test saw.
enum Outcome {
    /// Woke for a reachable target: how long after its LSN was published.
    Woke(Duration),
    /// Timed out on an unreachable target: how long after its deadline.
    TimedOut(Duration),
    /// Was dropped mid-wait.
    Dropped,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_waiters_wake_promptly_time_out_on_time_and_leave_nothing_behind() {
    const REACHABLE: u64 = 8_000;
    const UNREACHABLE: u64 = 1_000;
    const DROPPED: u64 = 1_000;
    /// The publisher applies LSNs 1..=LAST, one every ~2 ms.
    const LAST: u64 = 400;

    let wm = Arc::new(LsnWatermark::new(0));
    let base = Instant::now();
    // published_at[lsn]: nanoseconds from `base` to just before publish(lsn).
    let published_at: Arc<Vec<AtomicU64>> =
        Arc::new((0..=LAST).map(|_| AtomicU64::new(0)).collect());
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    let mut tasks = Vec::new();

    for _ in 0..REACHABLE {
        let target = rng.random_range(1..=LAST);
        // Half wait with a deadline far beyond the run: it must not fire.
        let deadline = rng
            .random_bool(0.5)
            .then(|| tokio::time::Instant::now() + Duration::from_secs(60));
        let (wm, published_at) = (wm.clone(), published_at.clone());
        tasks.push(tokio::spawn(async move {
            let current = wm
                .wait_for(target, deadline)
                .await
                .expect("reachable target");
            let woke = base.elapsed();
            assert!(current >= target, "woken for {target} at {current}");
            let published =
                Duration::from_nanos(published_at[target as usize].load(Ordering::Acquire));
            assert!(
                published > Duration::ZERO,
                "woken for {target} before it was published"
            );
            Outcome::Woke(woke - published)
        }));
    }
    for i in 0..UNREACHABLE {
        let target = LAST + 1 + i;
        let after = Duration::from_millis(rng.random_range(100..700));
        let deadline = tokio::time::Instant::now() + after;
        let wm = wm.clone();
        tasks.push(tokio::spawn(async move {
            let outcome = wm.wait_for(target, Some(deadline)).await;
            let late = tokio::time::Instant::now().duration_since(deadline);
            let err = outcome.expect_err("the target is never published");
            assert_eq!(err.target, target);
            assert!(err.current < target);
            Outcome::TimedOut(late)
        }));
    }
    for i in 0..DROPPED {
        let target = LAST + 1 + i;
        let after = Duration::from_millis(rng.random_range(10..600));
        let wm = wm.clone();
        tasks.push(tokio::spawn(async move {
            let wait = tokio::time::timeout(after, wm.wait_for(target, None)).await;
            assert!(wait.is_err(), "the target is never published");
            Outcome::Dropped
        }));
    }

    // Start publishing once (nearly) every waiter is registered, so that the
    // latencies measure wakeups, not task start-up.
    let start = Instant::now();
    while wm.waiters() < (REACHABLE + UNREACHABLE + DROPPED) as usize * 9 / 10 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "waiters never registered"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let publisher = {
        let (wm, published_at) = (wm.clone(), published_at.clone());
        std::thread::spawn(move || {
            for lsn in 1..=LAST {
                let at = base.elapsed().as_nanos() as u64;
                published_at[lsn as usize].store(at, Ordering::Release);
                wm.publish(lsn);
                std::thread::sleep(Duration::from_micros(1500));
            }
        })
    };

    let mut woke = Vec::new();
    let mut late = Vec::new();
    let mut dropped = 0;
    for task in tasks {
        match task.await.expect("waiter task") {
            Outcome::Woke(d) => woke.push(d),
            Outcome::TimedOut(d) => late.push(d),
            Outcome::Dropped => dropped += 1,
        }
    }
    publisher.join().unwrap();

    assert_eq!(woke.len() as u64, REACHABLE);
    assert_eq!(late.len() as u64, UNREACHABLE);
    assert_eq!(dropped, DROPPED);
    assert_eq!(
        wm.waiters(),
        0,
        "finished or dropped waits left registrations behind"
    );

    let (p50, p99, max) = (
        percentile(&mut woke, 50),
        percentile(&mut woke, 99),
        percentile(&mut woke, 100),
    );
    let (late99, late_max) = (percentile(&mut late, 99), percentile(&mut late, 100));
    println!("wake after publish: p50 {p50:?} p99 {p99:?} max {max:?}");
    println!("timeout after deadline: p99 {late99:?} max {late_max:?}");
    // The target is 20 ms for every waiter; a busy 2-core machine can stall
    // a worker now and then, so the hard bound on the worst one is looser.
    assert!(p99 <= Duration::from_millis(20), "p99 wake latency {p99:?}");
    assert!(
        max <= Duration::from_millis(100),
        "worst wake latency {max:?}"
    );
    assert!(
        late99 <= Duration::from_millis(50),
        "p99 lateness after deadline {late99:?}"
    );
    assert!(
        late_max <= Duration::from_millis(150),
        "worst lateness after deadline {late_max:?}"
    );
}

#[tokio::test]
async fn a_wait_for_an_applied_lsn_returns_at_once_with_the_current_lsn() {
    let wm = LsnWatermark::new(10);
    assert_eq!(wm.wait_for(7, None).await, Ok(10));
    assert_eq!(
        wm.wait_for(10, Some(tokio::time::Instant::now())).await,
        Ok(10)
    );
    assert_eq!(wm.waiters(), 0);
}

#[tokio::test]
async fn a_publish_wakes_only_the_waiters_it_covers() {
    let wm = Arc::new(LsnWatermark::new(0));
    let early = tokio::spawn({
        let wm = wm.clone();
        async move { wm.wait_for(3, None).await }
    });
    let late = tokio::spawn({
        let wm = wm.clone();
        async move { wm.wait_for(5, None).await }
    });
    while wm.waiters() < 2 {
        tokio::task::yield_now().await;
    }
    wm.publish(4);
    assert_eq!(early.await.unwrap(), Ok(4));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!late.is_finished(), "a wait for 5 ended at 4");
    assert_eq!(wm.waiters(), 1);
    wm.publish(5);
    assert_eq!(late.await.unwrap(), Ok(5));
    assert_eq!(wm.waiters(), 0);
}

#[tokio::test]
async fn a_timed_out_wait_reports_its_target_and_the_lsn_reached() {
    let wm = LsnWatermark::new(2);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(10);
    let err = wm.wait_for(3, Some(deadline)).await.unwrap_err();
    assert_eq!(
        err,
        WaitTimedOut {
            target: 3,
            current: 2
        }
    );
    assert!(
        tokio::time::Instant::now() >= deadline,
        "timed out before the deadline"
    );
    assert_eq!(
        err.to_string(),
        "timed out waiting for LSN 3 to be applied: the applied LSN is still 2"
    );
    assert_eq!(wm.waiters(), 0);
}

#[test]
fn a_blocking_wait_parks_until_published_and_honours_its_timeout() {
    let wm = Arc::new(LsnWatermark::new(0));
    let publisher = {
        let wm = wm.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            wm.publish(1);
        })
    };
    assert_eq!(wm.wait_for_blocking(1, None), Ok(1));
    publisher.join().unwrap();

    let start = Instant::now();
    let err = wm
        .wait_for_blocking(2, Some(Duration::from_millis(30)))
        .unwrap_err();
    assert_eq!(
        err,
        WaitTimedOut {
            target: 2,
            current: 1
        }
    );
    assert!(start.elapsed() >= Duration::from_millis(30));
    assert_eq!(wm.waiters(), 0);
}
