//! Loom models of the `sync` primitives: each runs under every interleaving
//! loom reaches (up to `LOOM_MAX_PREEMPTIONS` preemptions).
//!
//! ```text
//! RUSTFLAGS="--cfg uuidmap_loom --cfg crossbeam_loom" LOOM_MAX_PREEMPTIONS=2 \
//!   cargo test --release --lib --target-dir target/loom -- loom_sync
//! ```
//!
//! A lost wakeup shows up as a deadlock (every thread blocked in
//! `loom::future::block_on`), which loom reports as a failure; a lost or
//! invented permit shows up in the final counts. As in `index_loom_models`,
//! actors run in spawned threads, and each model records what its iterations
//! saw and asserts that the interesting interleavings were reached, so a
//! model that stops exploring fails instead of passing.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Mutex;
use std::task::{Context, Poll, Wake, Waker};

use loom::sync::Arc;
use loom::thread;

use super::lifo_semaphore::{Cancelled, LifoSemaphore};
use super::lsn_watermark::LsnWatermark;

/// Runs `model` under loom; returns the union of what its iterations
/// recorded.
fn explore<T, F>(model: F) -> BTreeSet<T>
where
    T: Ord + Send + 'static,
    F: Fn(&Mutex<BTreeSet<T>>) + Send + Sync + 'static,
{
    // A std (not loom) Arc and Mutex: bookkeeping outside the model.
    let seen = std::sync::Arc::new(Mutex::new(BTreeSet::new()));
    let inner = seen.clone();
    loom::model::Builder::new().check(move || model(&inner));
    let mut seen = seen.lock().unwrap();
    std::mem::take(&mut *seen)
}

fn record<T: Ord>(seen: &Mutex<BTreeSet<T>>, outcome: T) {
    seen.lock().unwrap().insert(outcome);
}

/// Runs `future` to completion on the current loom thread, parking between
/// polls (loom's own `block_on` needs a crate feature we do not pull in).
/// A wakeup that never comes leaves the thread parked, which loom reports.
fn block_on<F: Future>(future: F) -> F::Output {
    /// Wakes by unparking the loom thread that polls.
    struct Unpark(thread::Thread);
    impl Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }

    let waker = Waker::from(std::sync::Arc::new(Unpark(thread::current())));
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
            return out;
        }
        thread::park();
    }
}

/// Wraps a future to count how often it was polled: more than once means it
/// went to sleep and was woken.
struct Counted<F> {
    inner: F,
    polls: usize,
}

impl<F: Future + Unpin> Future for Counted<F> {
    type Output = (F::Output, usize);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.polls += 1;
        let polls = self.polls;
        Pin::new(&mut self.inner).poll(cx).map(|out| (out, polls))
    }
}

fn counted<F>(inner: F) -> Counted<F> {
    Counted { inner, polls: 0 }
}

/// Polls `f` once with a waker that does nothing.
fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn loom_sync_watermark_publish_racing_registration_never_loses_the_wakeup() {
    let seen = explore(|seen| {
        let wm = Arc::new(LsnWatermark::new(0));
        let waiter = {
            let wm = wm.clone();
            thread::spawn(move || block_on(counted(wm.wait(1))))
        };
        let publisher = {
            let wm = wm.clone();
            thread::spawn(move || wm.publish(1))
        };
        publisher.join().unwrap();
        let (current, polls) = waiter.join().unwrap();
        assert_eq!(current, 1);
        assert_eq!(wm.waiters(), 0, "a finished wait left its entry behind");
        record(seen, polls > 1);
    });
    assert_eq!(
        seen,
        BTreeSet::from([false, true]),
        "the model must reach both a wait that slept and one that did not"
    );
}

#[test]
fn loom_sync_watermark_cancel_during_publish_leaks_nothing_and_wakes_the_others() {
    let seen = explore(|seen| {
        let wm = Arc::new(LsnWatermark::new(0));
        let quitter = {
            let wm = wm.clone();
            thread::spawn(move || {
                let mut wait = wm.wait(1);
                let slept = poll_once(&mut wait).is_pending();
                drop(wait);
                slept
            })
        };
        let waiter = {
            let wm = wm.clone();
            thread::spawn(move || block_on(wm.wait(1)))
        };
        let publisher = {
            let wm = wm.clone();
            thread::spawn(move || wm.publish(1))
        };
        publisher.join().unwrap();
        let quitter_registered = quitter.join().unwrap();
        assert_eq!(waiter.join().unwrap(), 1);
        assert_eq!(wm.waiters(), 0, "a dropped wait left its entry behind");
        record(seen, quitter_registered);
    });
    assert_eq!(seen, BTreeSet::from([false, true]));
}

#[test]
fn loom_sync_watermark_wakes_two_waiters_at_their_own_targets() {
    let seen = explore(|seen| {
        let wm = Arc::new(LsnWatermark::new(0));
        let waiters = [1, 2].map(|target| {
            let wm = wm.clone();
            thread::spawn(move || block_on(counted(wm.wait(target))))
        });
        let publisher = {
            let wm = wm.clone();
            thread::spawn(move || {
                wm.publish(1);
                wm.publish(2);
            })
        };
        publisher.join().unwrap();
        let [(first, first_polls), (second, second_polls)] = waiters.map(|w| w.join().unwrap());
        assert!(first >= 1, "woken for 1 at {first}");
        assert_eq!(second, 2, "woken for 2 at {second}");
        assert_eq!(wm.waiters(), 0);
        record(seen, (first, first_polls > 1, second_polls > 1));
    });
    // The first waiter saw 1 and, in other runs, 2; both waiters slept in
    // some runs.
    assert!(seen.iter().any(|&(first, _, _)| first == 1));
    assert!(seen.iter().any(|&(first, _, _)| first == 2));
    assert!(seen.iter().any(|&(_, a, b)| a && b));
}

#[test]
fn loom_sync_semaphore_release_racing_a_new_waiter_never_loses_the_permit() {
    let seen = explore(|seen| {
        let sem = Arc::new(LifoSemaphore::new(1, 2));
        let held = sem.try_acquire().expect("one free permit");
        std::mem::forget(held); // the releaser thread gives it back
        let releaser = {
            let sem = sem.clone();
            thread::spawn(move || sem.release())
        };
        let waiter = {
            let sem = sem.clone();
            thread::spawn(move || {
                let (permit, polls) = block_on(counted(sem.wait(None)));
                drop(permit.expect("no deadline, room to wait"));
                polls > 1
            })
        };
        releaser.join().unwrap();
        let slept = waiter.join().unwrap();
        assert_eq!(sem.available(), 1, "the permit was lost or duplicated");
        assert_eq!(sem.queued(), 0);
        record(seen, slept);
    });
    assert_eq!(seen, BTreeSet::from([false, true]));
}

#[test]
fn loom_sync_semaphore_hand_off_racing_cancellation_conserves_the_permit() {
    let seen = explore(|seen| {
        let sem = Arc::new(LifoSemaphore::new(1, 2));
        std::mem::forget(sem.try_acquire().expect("one free permit"));
        let releaser = {
            let sem = sem.clone();
            thread::spawn(move || sem.release())
        };
        let quitter = {
            let sem = sem.clone();
            thread::spawn(move || {
                let mut wait = sem.wait(None);
                match poll_once(&mut wait) {
                    Poll::Ready(permit) => {
                        drop(permit.expect("room to wait"));
                        None
                    }
                    Poll::Pending => wait.cancel(),
                }
            })
        };
        releaser.join().unwrap();
        let outcome = quitter.join().unwrap();
        assert_eq!(sem.available(), 1, "the permit was lost or duplicated");
        assert_eq!(sem.queued(), 0, "a cancelled wait kept its slot");
        record(seen, outcome);
    });
    assert_eq!(
        seen,
        BTreeSet::from([
            None,
            Some(Cancelled::Freed),
            Some(Cancelled::Abandoned),
            Some(Cancelled::PassedOn),
        ]),
        "the model must reach every way a cancellation meets a hand-off"
    );
}

#[test]
fn loom_sync_semaphore_two_releasers_two_waiters_conserve_permits() {
    let seen = explore(|seen| {
        let sem = Arc::new(LifoSemaphore::new(2, 2));
        for _ in 0..2 {
            std::mem::forget(sem.try_acquire().expect("two free permits"));
        }
        let releasers = [(); 2].map(|()| {
            let sem = sem.clone();
            thread::spawn(move || sem.release())
        });
        let waiters = [(); 2].map(|()| {
            let sem = sem.clone();
            thread::spawn(move || {
                let (permit, polls) = block_on(counted(sem.wait(None)));
                drop(permit.expect("no deadline, room to wait"));
                polls > 1
            })
        });
        for r in releasers {
            r.join().unwrap();
        }
        let slept = waiters.map(|w| w.join().unwrap());
        assert_eq!(sem.available(), 2, "permits were lost or duplicated");
        assert_eq!(sem.queued(), 0);
        record(seen, slept);
    });
    assert!(
        seen.contains(&[true, true]),
        "both waiters must sleep in some run"
    );
}
