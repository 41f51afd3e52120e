//! [`LsnWatermark`]: the applied-LSN watermark that anyone can wait on
//! without polling (read-your-writes, follower catch-up, long-poll watches).
//!
//! # Semantics
//!
//! The writer thread is the only publisher: after applying a group it calls
//! [`publish`](LsnWatermark::publish) with the group's last LSN. The watermark
//! never goes backwards. [`wait_for(n)`](LsnWatermark::wait_for) resolves
//! once the watermark is `>= n` and returns the watermark it saw; with a
//! deadline it fails with [`WaitTimedOut`] once the deadline passes first.
//! Waiters are woken through their [`Waker`] only: the publisher never runs a
//! waiter's code (for tokio, `wake` only schedules the task).
//!
//! # The waiter registry
//!
//! Waiters live in [`SHARDS`] shards. A new waiter picks its shard
//! round-robin (one relaxed `fetch_add`), and each shard is a mutex around a
//! `BTreeMap` ordered by `(target, id)`. We take per-shard mutexes rather
//! than a lock-free structure because:
//! - the publisher needs "every waiter whose target is `<= lsn`", which an
//!   ordered map gives with one `split_off`, and lock-free ordered maps are
//!   large and hard to verify;
//! - the lock is never global: registrations spread over the shards, so
//!   10,000 waiters registering at once contend per shard, and the critical
//!   sections only insert or remove one entry (the publisher's moves the due
//!   ones out and wakes them after unlocking);
//! - the publisher skips a shard without locking it when the shard's
//!   `min_target` (an atomic copy of the map's smallest target) is above the
//!   new LSN, and skips all shards when no one waits at all, so a publish with
//!   no waiter due costs a store, a fence and one load per shard at most, and
//!   a store, a fence and one load when nobody waits (the fence is what a
//!   `SeqCst` store costs on x86 anyway).
//!
//! # No lost wakeup (a Dekker pair)
//!
//! A waiter (1) increments `waiting`, (2) inserts its entry and stores the
//! shard's new `min_target`, runs a `SeqCst` fence, then (3) loads
//! `current`; the publisher (a) stores `current`, runs a `SeqCst` fence,
//! then (b) loads `waiting` and (c) each shard's `min_target`. The two fences
//! are ordered one way or the other. If the publisher's comes first, (3)
//! sees the new LSN and the waiter returns without sleeping. If the waiter's
//! comes first, (b) sees its increment and (c) sees its `min_target` store
//! or a later one, and every later store still reflects the waiter's entry
//! while it is present, so the minimum is `<=` its target and the publisher
//! locks the shard and finds the entry. Either the waiter sees the LSN or the
//! publisher sees the waiter: never neither. (Fences carry the argument
//! because loom models `SeqCst` fences exactly but treats `SeqCst` accesses
//! as `AcqRel`.) The loom models check this.
//!
//! Whoever removes an entry (the publisher when it is due, the waiter when it
//! finishes or is dropped) decrements `waiting`, so [`LsnWatermark::waiters`]
//! goes back to 0 when every wait is over.
//!
//! # Deadlines and tokio's timer
//!
//! A wait with a deadline races the registration against
//! `tokio::time::sleep_until`, created only once the fast path has failed.
//! In tokio 1.54 (the version in `Cargo.lock`) the default timer is one wheel
//! behind one runtime-wide mutex: the sharded wheel of tokio 1.38 (#6534) was
//! reverted in 1.45 (#7226), and the per-worker wheel exists only behind
//! `tokio_unstable` (`Builder::enable_alt_timer`). So many concurrent
//! deadline waits do take that one lock on registration and cancellation.
//! Waits without a deadline never touch the timer.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use super::Instant;
use crossbeam_utils::CachePadded;

use crate::atomic::{AtomicU64, AtomicUsize, Mutex, Ordering, fence, lock};

/// Number of waiter shards: enough that 2-16 cores registering at once
/// rarely meet on a lock; few enough that a publisher's scan of the
/// `min_target`s stays within a few cache lines' worth of loads.
#[cfg(not(uuidmap_loom))]
const SHARDS: usize = 16;
/// Two shards under loom: enough for two waiters to land apart or together.
#[cfg(uuidmap_loom)]
const SHARDS: usize = 2;

/// `min_target` of a shard with no waiter.
const NO_WAITER: u64 = u64::MAX;

/// A wait whose deadline passed before the watermark reached its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timed out waiting for LSN {target} to be applied: the applied LSN is still {current}")]
pub struct WaitTimedOut {
    /// The LSN waited for.
    pub target: u64,
    /// The applied LSN when the wait gave up.
    pub current: u64,
}

/// The applied-LSN watermark; share it through an `Arc`.
pub struct LsnWatermark {
    /// The applied LSN. Stored only by the publisher (`SeqCst`, see the
    /// module docs); never decreases.
    current: CachePadded<AtomicU64>,
    /// Entries across all shards. A waiter increments it before inserting;
    /// whoever removes an entry decrements it.
    waiting: CachePadded<AtomicUsize>,
    /// Source of registration ids; `id % SHARDS` is the waiter's shard.
    next_id: CachePadded<AtomicU64>,
    /// The waiter registry.
    shards: Box<[CachePadded<Shard>]>,
}

/// One shard of the waiter registry.
struct Shard {
    /// The smallest target in `waiters`, or [`NO_WAITER`]. Stored under the
    /// lock after every change to the map; loaded without it by the publisher.
    min_target: AtomicU64,
    /// Waiters keyed by `(target, id)`, so that the due ones are a prefix.
    waiters: Mutex<BTreeMap<(u64, u64), Waker>>,
}

impl Shard {
    /// Republishes the map's minimum; called with the lock held.
    fn store_min(&self, map: &BTreeMap<(u64, u64), Waker>) {
        let min = map.first_key_value().map_or(NO_WAITER, |(&(t, _), _)| t);
        self.min_target.store(min, Ordering::SeqCst);
    }
}

impl LsnWatermark {
    /// A watermark at `initial` (the LSN recovery ended at) with no waiter.
    pub fn new(initial: u64) -> Self {
        Self {
            current: CachePadded::new(AtomicU64::new(initial)),
            waiting: CachePadded::new(AtomicUsize::new(0)),
            next_id: CachePadded::new(AtomicU64::new(0)),
            shards: (0..SHARDS)
                .map(|_| {
                    CachePadded::new(Shard {
                        min_target: AtomicU64::new(NO_WAITER),
                        waiters: Mutex::new(BTreeMap::new()),
                    })
                })
                .collect(),
        }
    }

    /// The applied LSN: every batch up to it is visible to readers.
    pub fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    /// Writer only (single publisher): sets the watermark to `lsn` and wakes
    /// every waiter whose target is `<= lsn`. `lsn` must not be below the
    /// current watermark.
    pub fn publish(&self, lsn: u64) {
        debug_assert!(
            lsn >= self.current.load(Ordering::Relaxed),
            "the applied LSN went backwards"
        );
        self.current.store(lsn, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) == 0 {
            return;
        }
        for shard in self.shards.iter() {
            if shard.min_target.load(Ordering::SeqCst) > lsn {
                continue;
            }
            let due = {
                let mut map = lock(&shard.waiters);
                let later = match lsn.checked_add(1) {
                    Some(next) => map.split_off(&(next, 0)),
                    None => BTreeMap::new(),
                };
                let due = std::mem::replace(&mut *map, later);
                shard.store_min(&map);
                due
            };
            self.waiting.fetch_sub(due.len(), Ordering::SeqCst);
            // Outside the lock: a waker may be arbitrary code, and a woken
            // task re-polling on another core must not find the lock held.
            due.into_values().for_each(Waker::wake);
        }
    }

    #[cfg(feature = "tokio")]
    /// Resolves with the watermark once it is `>= lsn`, or fails with
    /// [`WaitTimedOut`] once `deadline` passes first. Cancel-safe: dropping
    /// the future removes its registration.
    pub async fn wait_for(&self, lsn: u64, deadline: Option<Instant>) -> Result<u64, WaitTimedOut> {
        let current = self.current();
        if current >= lsn {
            return Ok(current);
        }
        let wait = self.wait(lsn);
        let Some(deadline) = deadline else {
            return Ok(wait.await);
        };
        tokio::select! {
            biased;
            current = wait => Ok(current),
            () = tokio::time::sleep_until(deadline) => self.check(lsn),
        }
    }

    /// [`wait_for`](Self::wait_for) for callers outside a runtime (tests,
    /// the CLI): parks the calling thread.
    pub fn wait_for_blocking(
        &self,
        lsn: u64,
        timeout: Option<Duration>,
    ) -> Result<u64, WaitTimedOut> {
        /// Wakes a parked thread.
        struct Unpark(std::thread::Thread);
        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }

        let end = timeout.map(|t| std::time::Instant::now() + t);
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut wait = pin!(self.wait(lsn));
        loop {
            if let Poll::Ready(current) = wait.as_mut().poll(&mut cx) {
                return Ok(current);
            }
            match end {
                None => std::thread::park(),
                Some(end) => {
                    let left = end.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return self.check(lsn);
                    }
                    std::thread::park_timeout(left);
                }
            }
        }
    }

    /// Waiters registered now (approximate while they come and go), for
    /// metrics.
    pub fn waiters(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The future behind the waits: resolves once the watermark is `>= lsn`.
    pub(crate) fn wait(&self, lsn: u64) -> Wait<'_> {
        Wait {
            watermark: self,
            target: lsn,
            registered: None,
        }
    }

    /// The outcome of a wait whose time ran out.
    fn check(&self, lsn: u64) -> Result<u64, WaitTimedOut> {
        let current = self.current();
        if current >= lsn {
            Ok(current)
        } else {
            Err(WaitTimedOut {
                target: lsn,
                current,
            })
        }
    }
}

impl std::fmt::Debug for LsnWatermark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LsnWatermark")
            .field("current", &self.current())
            .field("waiters", &self.waiters())
            .finish()
    }
}

/// A wait for the watermark to reach `target`; deregisters when dropped.
pub(crate) struct Wait<'a> {
    watermark: &'a LsnWatermark,
    target: u64,
    /// `(shard, id)` of this wait's entry while it may be in the registry.
    registered: Option<(usize, u64)>,
}

impl Wait<'_> {
    /// Inserts the entry (steps 1 and 2 of the module docs' protocol).
    fn register(&mut self, waker: &Waker) {
        let w = self.watermark;
        w.waiting.fetch_add(1, Ordering::SeqCst);
        let id = w.next_id.fetch_add(1, Ordering::Relaxed);
        let index = (id % SHARDS as u64) as usize;
        let shard = &w.shards[index];
        let mut map = lock(&shard.waiters);
        map.insert((self.target, id), waker.clone());
        shard.store_min(&map);
        self.registered = Some((index, id));
    }

    /// Removes the entry if the publisher has not already.
    fn deregister(&mut self) {
        let Some((index, id)) = self.registered.take() else {
            return;
        };
        let w = self.watermark;
        let shard = &w.shards[index];
        let mut map = lock(&shard.waiters);
        if map.remove(&(self.target, id)).is_some() {
            shard.store_min(&map);
            drop(map);
            w.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Future for Wait<'_> {
    type Output = u64;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u64> {
        let w = self.watermark;
        let current = w.current.load(Ordering::SeqCst);
        if current >= self.target {
            self.deregister();
            return Poll::Ready(current);
        }
        match self.registered {
            None => {
                self.register(cx.waker());
                fence(Ordering::SeqCst);
                // Step 3: the publisher may have stored between our first
                // load and the registration.
                let current = w.current.load(Ordering::SeqCst);
                if current >= self.target {
                    self.deregister();
                    return Poll::Ready(current);
                }
                Poll::Pending
            }
            Some((index, id)) => {
                let mut map = lock(&w.shards[index].waiters);
                match map.get_mut(&(self.target, id)) {
                    Some(stored) => {
                        if !stored.will_wake(cx.waker()) {
                            stored.clone_from(cx.waker());
                        }
                        Poll::Pending
                    }
                    None => {
                        // The publisher removed the entry: it published an
                        // LSN >= target before doing so.
                        drop(map);
                        self.registered = None;
                        Poll::Ready(w.current.load(Ordering::Acquire))
                    }
                }
            }
        }
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        self.deregister();
    }
}
