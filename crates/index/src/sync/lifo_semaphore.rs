//! [`LifoSemaphore`]: admission control that serves the newest request
//! first, knows each request's deadline, and takes no lock.
//!
//! # Semantics
//!
//! A semaphore holds `permits` permits and at most `max_waiters` waiters.
//! [`acquire`](LifoSemaphore::acquire) takes a free permit at once if there
//! is one; otherwise it fails at once with [`AcquireError::QueueFull`] when
//! `max_waiters` requests already wait, or else waits. When a permit is
//! released while requests wait, it goes straight to the *newest* waiter
//! (LIFO): under overload the oldest waiters are the ones whose callers have
//! most likely given up, so serving them first would only serve corpses. A
//! waiter whose deadline passes fails with [`AcquireError::DeadlineExceeded`]
//! and never holds the permit to do its work (a permit handed to it at the
//! last moment passes on). A new request that finds a free permit takes it
//! even if others wait: it is the newest, so LIFO would choose it anyway.
//! Releasing only calls [`Waker::wake`]: the waiter's work runs on its own
//! task, never on the releaser's stack.
//!
//! # Design: an array of waiter slots with atomic states
//!
//! The free permits are one counter (`permits`). Waiters live in a fixed
//! array of `max_waiters` slots; each slot is one `AtomicU64` holding a
//! *ticket* (from a global counter: larger means newer) and a *tag*, plus a
//! cell for the waiter's waker. The releaser hands its permit to the
//! `WAITING` slot with the largest ticket. We chose slots over a Treiber
//! stack of nodes because a stack can only shed cancelled waiters from its
//! top: under sustained overload new waiters keep arriving on top while the
//! old ones time out underneath, so dead nodes would pile up without bound.
//! A slot is freed by its own waiter the moment it gives up, the array bounds
//! memory, and no node is ever reclaimed (no epochs, no ABA: a slot's state
//! always carries the ticket of its current waiter, so a stale compare-and-
//! swap fails). The cost is that a release with waiters scans the array:
//! `O(max_waiters)` loads, so size `max_waiters` in the hundreds, not
//! millions (a request that waits behind thousands will miss its deadline
//! anyway).
//!
//! # Slot states
//!
//! - `FREE`: no waiter. A new waiter claims it by CAS to `CLAIMED`.
//! - `CLAIMED`: its waiter is writing (or dropping) the waker; everyone else
//!   leaves the slot alone. The waiter then publishes `WAITING`, or stores
//!   `FREE` when it gave up.
//! - `WAITING`: the waiter sleeps. A releaser may CAS it to `WAKING`; the
//!   waiter may CAS it back to `CLAIMED` (to store a new waker, or to give up).
//! - `WAKING`: a releaser won the slot and is taking the waker out of the
//!   cell; it then CASes to `GRANTED` and wakes the waiter. The waiter may
//!   CAS it to `ABANDONED` if it gives up meanwhile.
//! - `GRANTED`: a permit belongs to the waiter, which takes it and stores
//!   `FREE` (or, having given up, stores `FREE` and releases the permit).
//! - `ABANDONED`: the waiter left during `WAKING`; the releaser, whose CAS to
//!   `GRANTED` then fails, stores `FREE` and gives its permit to the next
//!   waiter. So a hand-off that races a cancellation never loses the permit.
//!
//! The waker cell is touched only by the waiter in `CLAIMED` and by the
//! releaser in `WAKING`; every entry into those states is a CAS or store
//! ordered after the previous owner's last access.
//!
//! # No lost permit (the race in the brief)
//!
//! A naive LIFO semaphore decrements the count and then pushes the waiter;
//! a releaser that sees the count but not yet the waiter must spin until it
//! appears. Here no one waits for anyone. A waiter publishes `WAITING`, runs
//! a `SeqCst` fence, then loads `permits`; a releaser that found no
//! `WAITING` slot adds its permit to `permits`, runs a `SeqCst` fence, then
//! loads `queued` and the slot states. The two fences are ordered one way or
//! the other, and the side whose fence comes second sees the other side's
//! store: the waiter sees the permit (takes it and hands it to the newest
//! waiter, perhaps itself), or the releaser sees the waiter (takes the
//! permit back and grants it). Both may see each other; then the decrement
//! of `permits` decides who moves the permit. A waiter increments `queued`
//! before its fence too, so a releaser that reads `queued == 0` needs no scan:
//! a release with no waiter costs an add, a fence and a load. (Fences rather
//! than `SeqCst` accesses alone carry the argument because loom models
//! `SeqCst` fences exactly but treats `SeqCst` accesses as `AcqRel`.)
//!
//! Permits are conserved: each one is at every moment free (`permits`),
//! held (a [`Permit`]), granted (a `GRANTED` slot) or being moved by exactly
//! one thread. The loom models below check conservation and the races.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use super::Instant;
use crossbeam_utils::CachePadded;

use crate::atomic::{AtomicU64, AtomicUsize, Ordering, UnsafeCell, fence};

/// Why [`LifoSemaphore::acquire`] did not get a permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
// Not `#[non_exhaustive]`: the two outcomes are the primitive's contract,
// and admission matches them exhaustively so that a third must be handled.
pub enum AcquireError {
    /// Every permit is taken and the waiting queue is full.
    #[error("the server is over capacity: all permits are taken and the waiting queue is full")]
    QueueFull,
    /// The request's deadline passed before a permit was free.
    #[error("the request's deadline passed while it waited for capacity")]
    DeadlineExceeded,
}

/// How a cancelled wait left its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Cancelled {
    /// It was still waiting: it freed its slot.
    Freed,
    /// A releaser was mid hand-off: the releaser frees the slot and passes
    /// the permit on.
    Abandoned,
    /// A permit had been granted: the waiter released it.
    PassedOn,
}

/// Bits of a slot state that hold the tag; the rest hold the ticket.
const TAG_BITS: u32 = 3;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const FREE: u64 = 0;
const CLAIMED: u64 = 1;
const WAITING: u64 = 2;
const WAKING: u64 = 3;
const GRANTED: u64 = 4;
const ABANDONED: u64 = 5;

/// The state word of the waiter with `ticket` in state `tag`.
const fn state(ticket: u64, tag: u64) -> u64 {
    (ticket << TAG_BITS) | tag
}

const fn tag(state: u64) -> u64 {
    state & TAG_MASK
}

/// A lock-free LIFO semaphore with bounded, deadline-aware waiting.
pub struct LifoSemaphore {
    /// Free permits. Releasers add, acquirers CAS down from above zero.
    permits: CachePadded<AtomicUsize>,
    /// Slots not `FREE`: incremented by a waiter before it claims a slot,
    /// decremented by whoever stores `FREE`.
    queued: CachePadded<AtomicUsize>,
    /// Source of tickets; a waiter takes the next one when it registers.
    next_ticket: CachePadded<AtomicU64>,
    /// The waiter slots; `max_waiters` of them.
    slots: Box<[Slot]>,
}

/// One waiter's place (see the module docs for the states).
struct Slot {
    /// `state(ticket, tag)`.
    state: AtomicU64,
    /// The waiter's waker: written by the waiter in `CLAIMED`, taken by a
    /// releaser in `WAKING`.
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: the only non-Sync part is the waker cell, and the state machine
// gives one thread at a time access to it (the waiter in CLAIMED, the
// releaser that won WAKING); each of those states is entered by an atomic
// operation that reads the store by which the previous accessor left.
unsafe impl Sync for Slot {}

impl LifoSemaphore {
    /// A semaphore with `permits` free permits and room for `max_waiters`
    /// waiting requests.
    pub fn new(permits: usize, max_waiters: usize) -> Self {
        Self {
            permits: CachePadded::new(AtomicUsize::new(permits)),
            queued: CachePadded::new(AtomicUsize::new(0)),
            next_ticket: CachePadded::new(AtomicU64::new(0)),
            slots: (0..max_waiters)
                .map(|_| Slot {
                    state: AtomicU64::new(FREE),
                    waker: UnsafeCell::new(None),
                })
                .collect(),
        }
    }

    #[cfg(feature = "tokio")]
    /// Takes a permit: at once if one is free, else after waiting newest-
    /// first, or fails (see [`AcquireError`]). Dropping the future gives up
    /// the wait without losing a permit.
    pub async fn acquire(&self, deadline: Option<Instant>) -> Result<Permit<'_>, AcquireError> {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(AcquireError::DeadlineExceeded);
        }
        if let Some(permit) = self.try_acquire() {
            return Ok(permit);
        }
        let wait = self.wait(deadline);
        let Some(deadline) = deadline else {
            return wait.await;
        };
        tokio::select! {
            biased;
            acquired = wait => acquired,
            () = tokio::time::sleep_until(deadline) => Err(AcquireError::DeadlineExceeded),
        }
    }

    #[cfg(feature = "tokio")]
    /// [`acquire`](Self::acquire) for callers that need a `'static` permit
    /// (tonic handlers, tower layers). The future is a named type, so that a
    /// tower service can hold it without boxing.
    pub fn acquire_owned(self: &Arc<Self>, deadline: Option<Instant>) -> AcquireOwned {
        AcquireOwned {
            wait: OwnedWait {
                sem: Arc::clone(self),
                state: WaitState::default(),
            },
            deadline,
            timer: None,
        }
    }

    /// Takes a free permit if there is one, without waiting.
    pub fn try_acquire(&self) -> Option<Permit<'_>> {
        // `then`, not `then_some`: an eagerly built Permit would be dropped,
        // and so released, when no permit was taken.
        self.try_take_permit().then(|| Permit { sem: self })
    }

    /// [`try_acquire`](Self::try_acquire) for callers that need a
    /// `'static` permit.
    pub fn try_acquire_owned(self: &Arc<Self>) -> Option<OwnedPermit> {
        self.try_take_permit().then(|| OwnedPermit {
            sem: Arc::clone(self),
        })
    }

    /// Free permits now, for metrics.
    pub fn available(&self) -> usize {
        self.permits.load(Ordering::Relaxed)
    }

    /// Waiting requests now (including ones just granted a permit and not
    /// yet running), for metrics.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// The future behind [`acquire`](Self::acquire), without the timer.
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Wait<'_> {
        Wait {
            sem: self,
            deadline,
            state: WaitState::default(),
        }
    }

    /// Decrements `permits` if it is above zero.
    fn try_take_permit(&self) -> bool {
        let mut free = self.permits.load(Ordering::SeqCst);
        while free > 0 {
            match self.permits.compare_exchange_weak(
                free,
                free - 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => free = now,
            }
        }
        false
    }

    /// Gives one permit back: to the newest waiter, else to `permits`.
    pub(crate) fn release(&self) {
        loop {
            if self.grant_newest() {
                return;
            }
            self.permits.fetch_add(1, Ordering::SeqCst);
            // The releaser's half of the Dekker pair (module docs).
            fence(Ordering::SeqCst);
            if self.queued.load(Ordering::SeqCst) == 0 || self.newest_waiting().is_none() {
                return;
            }
            if !self.try_take_permit() {
                return; // someone else took it and is responsible for it
            }
        }
    }

    /// Hands a permit the caller owns to the newest `WAITING` waiter;
    /// `false` if there is none (the caller still owns the permit).
    fn grant_newest(&self) -> bool {
        while self.queued.load(Ordering::SeqCst) != 0 {
            let Some((index, seen)) = self.newest_waiting() else {
                return false;
            };
            let slot = &self.slots[index];
            let ticket = seen >> TAG_BITS;
            let waking = state(ticket, WAKING);
            if slot
                .state
                .compare_exchange(seen, waking, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                continue; // the waiter left or re-registered, or another releaser won
            }
            // SAFETY: we moved the slot to WAKING, which gives us the cell;
            // the waiter's write happened before its WAITING store, which our
            // CAS read.
            let waker = slot.waker.with_mut(|cell| unsafe { (*cell).take() });
            let granted = state(ticket, GRANTED);
            match slot
                .state
                .compare_exchange(waking, granted, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    // After GRANTED the slot is the waiter's again; we only
                    // wake it (which for tokio only schedules its task).
                    if let Some(waker) = waker {
                        waker.wake();
                    }
                    return true;
                }
                Err(now) => {
                    debug_assert_eq!(now, state(ticket, ABANDONED));
                    // The waiter gave up meanwhile and left the slot to us.
                    drop(waker);
                    self.free_slot(index);
                }
            }
        }
        false
    }

    /// The slot index and state of the `WAITING` slot with the largest
    /// ticket, if any.
    fn newest_waiting(&self) -> Option<(usize, u64)> {
        let mut newest: Option<(usize, u64)> = None;
        for (index, slot) in self.slots.iter().enumerate() {
            let s = slot.state.load(Ordering::SeqCst);
            // Equal tags: comparing states compares tickets.
            if tag(s) == WAITING && newest.is_none_or(|(_, best)| s > best) {
                newest = Some((index, s));
            }
        }
        newest
    }

    /// Claims a slot for a new waiter and publishes it `WAITING`; returns
    /// `(slot, ticket)`.
    fn register(&self, waker: &Waker) -> Result<(usize, u64), AcquireError> {
        if self.queued.fetch_add(1, Ordering::SeqCst) >= self.slots.len() {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(AcquireError::QueueFull);
        }
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed) + 1;
        // Fewer slots than `queued` are taken (a slot is freed before the
        // count drops), so a free one exists; it may move while we look.
        let mut index = (ticket % self.slots.len() as u64) as usize;
        loop {
            let slot = &self.slots[index];
            if slot.state.load(Ordering::Relaxed) == FREE
                && slot
                    .state
                    .compare_exchange(
                        FREE,
                        state(ticket, CLAIMED),
                        Ordering::SeqCst,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                break;
            }
            index = (index + 1) % self.slots.len();
            if index == 0 {
                yield_now();
            }
        }
        self.publish(index, ticket, waker);
        Ok((index, ticket))
    }

    /// Stores `waker` in our `CLAIMED` slot, publishes it `WAITING`, and
    /// runs the waiter's half of the Dekker pair (module docs).
    fn publish(&self, index: usize, ticket: u64, waker: &Waker) {
        let slot = &self.slots[index];
        // SAFETY: the slot is CLAIMED by the caller, so no releaser touches
        // the cell; the last releaser left it before storing GRANTED, which
        // the waiter read before it freed the slot.
        slot.waker
            .with_mut(|cell| unsafe { *cell = Some(waker.clone()) });
        slot.state.store(state(ticket, WAITING), Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.permits.load(Ordering::SeqCst) > 0 && self.try_take_permit() {
            // A permit was freed while no one could see us: hand it to the
            // newest waiter (perhaps us).
            self.release();
        }
    }

    /// Stores `FREE` in a slot whose waker cell is empty or ours.
    fn free_slot(&self, index: usize) {
        self.slots[index].state.store(FREE, Ordering::SeqCst);
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }

    /// Gives up the wait in slot `index`; [`Cancelled::PassedOn`] if a
    /// permit had already been granted to it, which the caller now owns.
    fn cancel(&self, index: usize, ticket: u64) -> Cancelled {
        let slot = &self.slots[index];
        loop {
            let s = slot.state.load(Ordering::SeqCst);
            match tag(s) {
                WAITING => {
                    let claimed = state(ticket, CLAIMED);
                    if slot
                        .state
                        .compare_exchange(s, claimed, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                    {
                        // SAFETY: CLAIMED by us, so no releaser touches the cell.
                        let waker = slot.waker.with_mut(|cell| unsafe { (*cell).take() });
                        drop(waker);
                        self.free_slot(index);
                        return Cancelled::Freed;
                    }
                }
                WAKING => {
                    let abandoned = state(ticket, ABANDONED);
                    if slot
                        .state
                        .compare_exchange(s, abandoned, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                    {
                        return Cancelled::Abandoned;
                    }
                }
                GRANTED => {
                    self.free_slot(index);
                    return Cancelled::PassedOn;
                }
                _ => unreachable!("waiter slot {index} in state {s:#x} while its waiter waits"),
            }
        }
    }
}

impl std::fmt::Debug for LifoSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LifoSemaphore")
            .field("available", &self.available())
            .field("queued", &self.queued())
            .field("max_waiters", &self.slots.len())
            .finish()
    }
}

/// Lets another thread run (under loom, lets the model schedule it).
fn yield_now() {
    #[cfg(uuidmap_loom)]
    loom::thread::yield_now();
    #[cfg(not(uuidmap_loom))]
    std::thread::yield_now();
}

/// A permit borrowed from a [`LifoSemaphore`]; dropping it releases it.
#[must_use = "dropping the permit releases it at once"]
#[derive(Debug)]
pub struct Permit<'a> {
    sem: &'a LifoSemaphore,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.sem.release();
    }
}

/// A permit that owns a handle to its [`LifoSemaphore`]; dropping it
/// releases it.
#[must_use = "dropping the permit releases it at once"]
#[derive(Debug)]
pub struct OwnedPermit {
    sem: Arc<LifoSemaphore>,
}

impl Drop for OwnedPermit {
    fn drop(&mut self) {
        self.sem.release();
    }
}

/// The part of a wait that is not the semaphore handle: which slot it
/// owns, and the waker stored there. Shared by [`Wait`] (borrowed) and
/// [`AcquireOwned`] (owned), which poll it through
/// [`LifoSemaphore::poll_wait`].
#[derive(Default)]
pub(crate) struct WaitState {
    /// `(slot, ticket)` while the wait owns a slot.
    slot: Option<(usize, u64)>,
    /// A copy of the waker in our slot, to compare without touching the slot.
    waker: Option<Waker>,
}

impl LifoSemaphore {
    /// Advances a wait: `Ready(Ok(()))` once a permit belongs to the caller
    /// (the deadline is the caller's business), `Ready(Err(QueueFull))` when
    /// it could not queue.
    fn poll_wait(
        &self,
        wait: &mut WaitState,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), AcquireError>> {
        // `will_wake` may answer false even for a clone of the same waker
        // (it is best-effort), so a poll stores its waker at most once: a
        // second comparison could otherwise re-store it forever.
        let mut stored = false;
        let (index, ticket) = match wait.slot {
            Some(registered) => registered,
            None => {
                if self.try_take_permit() {
                    return Poll::Ready(Ok(()));
                }
                match self.register(cx.waker()) {
                    Ok(registered) => {
                        wait.slot = Some(registered);
                        wait.waker = Some(cx.waker().clone());
                        stored = true;
                        registered
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        };
        let slot = &self.slots[index];
        loop {
            let s = slot.state.load(Ordering::SeqCst);
            match tag(s) {
                GRANTED => {
                    wait.slot = None;
                    self.free_slot(index);
                    return Poll::Ready(Ok(()));
                }
                WAITING => {
                    if stored || wait.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        return Poll::Pending;
                    }
                    // Polled by another task: take the slot back to swap the
                    // waker, then publish again (which re-checks permits).
                    let claimed = state(ticket, CLAIMED);
                    if slot
                        .state
                        .compare_exchange(s, claimed, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                    {
                        wait.waker = Some(cx.waker().clone());
                        stored = true;
                        self.publish(index, ticket, cx.waker());
                    }
                }
                WAKING => {
                    // A releaser is about to grant us and wake the stored
                    // waker. If that one is stale, poll again soon (the
                    // releaser's window is a few instructions long).
                    if !stored && !wait.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        cx.waker().wake_by_ref();
                    }
                    return Poll::Pending;
                }
                _ => unreachable!("waiter slot {index} in state {s:#x} while its waiter waits"),
            }
        }
    }

    /// Gives up a wait (what dropping it does); `None` if it held no slot.
    /// A permit granted meanwhile is passed on.
    fn cancel_wait(&self, wait: &mut WaitState) -> Option<Cancelled> {
        let (index, ticket) = wait.slot.take()?;
        let outcome = self.cancel(index, ticket);
        if outcome == Cancelled::PassedOn {
            self.release();
        }
        Some(outcome)
    }
}

/// Whether `deadline` has passed.
fn passed(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// A wait for a permit; gives up its slot (and any permit granted to it)
/// when dropped.
pub(crate) struct Wait<'a> {
    sem: &'a LifoSemaphore,
    /// Checked when a permit arrives: a waiter past its deadline passes the
    /// permit on rather than doing work nobody waits for.
    deadline: Option<Instant>,
    /// The slot and waker.
    state: WaitState,
}

impl Wait<'_> {
    /// Gives up the wait now (what dropping does); `None` if it held no
    /// slot.
    pub(crate) fn cancel(&mut self) -> Option<Cancelled> {
        self.sem.cancel_wait(&mut self.state)
    }
}

impl<'a> Future for Wait<'a> {
    type Output = Result<Permit<'a>, AcquireError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let sem = this.sem;
        match sem.poll_wait(&mut this.state, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => {
                let permit = Permit { sem };
                if passed(this.deadline) {
                    drop(permit); // passes it on
                    return Poll::Ready(Err(AcquireError::DeadlineExceeded));
                }
                Poll::Ready(Ok(permit))
            }
        }
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// The owned half of [`AcquireOwned`]: gives up its slot when dropped.
struct OwnedWait {
    sem: Arc<LifoSemaphore>,
    state: WaitState,
}

impl Drop for OwnedWait {
    fn drop(&mut self) {
        self.sem.cancel_wait(&mut self.state);
    }
}

#[cfg(feature = "tokio")]
pin_project_lite::pin_project! {
    /// The future of [`LifoSemaphore::acquire_owned`]: the same semantics
    /// as [`acquire`](LifoSemaphore::acquire) (free permit at once, else
    /// wait newest-first until the deadline, else fail), as a named type.
    /// Dropping it gives up the wait without losing a permit. It allocates
    /// nothing: the timer is created in place, and only when the request
    /// has to wait.
    #[must_use = "futures do nothing unless polled"]
    pub struct AcquireOwned {
        wait: OwnedWait,
        deadline: Option<Instant>,
        // The deadline's timer, armed on the first poll that has to wait.
        #[pin]
        timer: Option<tokio::time::Sleep>,
    }
}

#[cfg(feature = "tokio")]
impl std::fmt::Debug for AcquireOwned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcquireOwned")
            .field("queued", &self.wait.state.slot.is_some())
            .field("deadline", &self.deadline)
            .finish()
    }
}

#[cfg(feature = "tokio")]
impl Future for AcquireOwned {
    type Output = Result<OwnedPermit, AcquireError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let deadline = *this.deadline;
        let wait = &mut *this.wait;
        if wait.state.slot.is_none() && passed(deadline) {
            return Poll::Ready(Err(AcquireError::DeadlineExceeded));
        }
        // The wait first, the timer second: a permit that arrived in time
        // wins over a timer that fired in the same instant (`granted`
        // checks the deadline anyway).
        match wait.sem.poll_wait(&mut wait.state, cx) {
            Poll::Ready(Ok(())) => {
                let permit = OwnedPermit {
                    sem: Arc::clone(&wait.sem),
                };
                if passed(deadline) {
                    drop(permit); // passes it on
                    return Poll::Ready(Err(AcquireError::DeadlineExceeded));
                }
                return Poll::Ready(Ok(permit));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        let Some(deadline) = deadline else {
            return Poll::Pending;
        };
        if this.timer.is_none() {
            this.timer.set(Some(tokio::time::sleep_until(deadline)));
        }
        let timer = this.timer.as_pin_mut().expect("armed above");
        if timer.poll(cx).is_ready() {
            wait.sem.cancel_wait(&mut wait.state);
            return Poll::Ready(Err(AcquireError::DeadlineExceeded));
        }
        Poll::Pending
    }
}
