//! [`Staleness`]: how far behind the group a member's applied state may
//! be, for `stale` reads bounded by `max_staleness_ms` (README.md, "Read
//! consistency").
//!
//! # Definition
//!
//! - On the leader, while it serves reads from its lease (it leads, its
//!   writer passed its gate in this term, and a majority acknowledged it
//!   within the lease): 0. Nothing was committed that it has not applied
//!   (a write is applied before it is acknowledged).
//! - Otherwise: the time since the member last *knew* it had applied
//!   everything the leader had committed. It knows that at time `t` when
//!   an AppendEntries (or heartbeat) that arrived at `t`, accepted from
//!   the leader, carried `leader_commit = c` and the member has applied
//!   `c`. The time is the message's arrival, so the one-way network delay
//!   before it is left out (sub-millisecond on a LAN).
//! - A member that never knew it: the time since it started.
//!
//! # Protocol
//!
//! The Raft service's AppendEntries handler, after openraft accepted a
//! message, calls [`Staleness::heard`] with its arrival time and
//! `leader_commit`. Keeping only the newest message would never confirm
//! anything under a steady write load (the applied LSN trails the newest
//! `leader_commit` by a round trip), so the clock keeps the *oldest
//! unconfirmed* message (`pending`) and replaces it only once confirmed:
//! staleness then stays within about one apply delay plus one message
//! interval. Readers ([`Staleness::of`]) only load: `pending` is written
//! commit first, then time (`Release`), and read time first (`Acquire`),
//! so a reader that sees a pair's time sees its commit or a later one, and
//! a later commit only makes the answer older (never younger) than true.
//! Writers (the handler, rarely concurrent) are serialised by a mutex that
//! no read takes.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::time::{Duration, Instant};

use uuidmap_engine::writer::ReadLease;

/// A member's staleness clock (module docs).
#[derive(Debug)]
pub struct Staleness {
    /// Times are nanoseconds since this (CLOCK_MONOTONIC).
    base: Instant,
    /// When the member last knew it had applied all the leader had
    /// committed (ns since `base`; 0: never). Raised by the handler.
    caught_up_ns: AtomicU64,
    /// The oldest unconfirmed message's arrival (ns since `base`; 0: none).
    pending_ns: AtomicU64,
    /// Its `leader_commit` (0: none).
    pending_commit: AtomicU64,
    /// Serialises [`Staleness::heard`] (never taken by a read).
    writer: Mutex<()>,
}

impl Default for Staleness {
    fn default() -> Self {
        Staleness {
            base: Instant::now(),
            caught_up_ns: AtomicU64::new(0),
            pending_ns: AtomicU64::new(0),
            pending_commit: AtomicU64::new(0),
            writer: Mutex::new(()),
        }
    }
}

impl Staleness {
    /// Nanoseconds since `base` at `t` (at least 1: 0 means "never").
    fn ns(&self, t: Instant) -> u64 {
        (t.saturating_duration_since(self.base).as_nanos() as u64).max(1)
    }

    /// A message the leader sent, accepted by openraft, arrived at
    /// `arrived` carrying `leader_commit`; `applied` is the LSN applied now.
    pub fn heard(&self, arrived: Instant, leader_commit: u64, applied: u64) {
        let _serial = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let at = self.ns(arrived);
        let (pending_at, pending_commit) = (
            self.pending_ns.load(Relaxed),
            self.pending_commit.load(Relaxed),
        );
        if pending_commit <= applied {
            // The pending message is confirmed (or there is none): its
            // arrival is a time the member was caught up; this message
            // takes its place.
            self.caught_up_ns.fetch_max(pending_at, Relaxed);
            self.pending_commit.store(leader_commit, Relaxed);
            self.pending_ns.store(at, Release);
        }
        if leader_commit <= applied {
            self.caught_up_ns.fetch_max(at, Relaxed);
        }
    }

    /// The staleness of a member that has applied `applied`, whose lease
    /// is `lease` (module docs).
    pub fn of(&self, applied: u64, lease: &ReadLease) -> Duration {
        if lease.serves_as_leader() {
            return Duration::ZERO;
        }
        let mut caught_up = self.caught_up_ns.load(Relaxed);
        let pending_at = self.pending_ns.load(Acquire);
        if pending_at != 0 && self.pending_commit.load(Relaxed) <= applied {
            caught_up = caught_up.max(pending_at);
        }
        let now = self.base.elapsed().as_nanos() as u64;
        Duration::from_nanos(now.saturating_sub(caught_up))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[test]
    fn a_follower_is_as_stale_as_the_last_message_whose_commit_it_applied() {
        let clock = Staleness::default();
        let lease = ReadLease::default();
        let t0 = Instant::now();
        // Commit 10 heard, applied only 5: not known caught up.
        clock.heard(t0, 10, 5);
        std::thread::sleep(Duration::from_millis(30));
        assert!(ms(clock.of(5, &lease)) >= 30, "nothing confirmed yet");
        // Once 10 is applied, the message's arrival counts.
        assert!(ms(clock.of(10, &lease)) < 30 + 20);
        // Under a steady load the newest commit is always ahead, but the
        // oldest unconfirmed message is confirmed in turn.
        let t1 = Instant::now();
        clock.heard(t1, 20, 12);
        let t2 = Instant::now();
        clock.heard(t2, 30, 22);
        assert!(clock.of(22, &lease) <= t1.elapsed().max(t2.elapsed()));
    }

    #[test]
    fn a_member_that_hears_nothing_grows_stale() {
        let clock = Staleness::default();
        let lease = ReadLease::default();
        clock.heard(Instant::now(), 3, 3);
        std::thread::sleep(Duration::from_millis(40));
        assert!(ms(clock.of(3, &lease)) >= 40);
    }
}
