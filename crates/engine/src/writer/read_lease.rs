//! [`ReadLease`]: whether a replica group member may answer a read from its
//! own index as the leader (docs/replication.md, section 6).
//!
//! Reads on the leader are linearizable; reads on a follower answer from
//! its index as applied (with `min_lsn` for read-your-writes). A member
//! that believes it leads answers a read only while:
//! - its writer has passed its gate in the current term (every entry
//!   committed before the term began is applied: a new leader has not
//!   always applied what its predecessor acknowledged), and
//! - its *lease* holds: a majority acknowledged it less than the lease
//!   ago (openraft's leader lease; its followers vote for no one else
//!   meanwhile, so no other leader can have acknowledged a write).
//!
//! - it is not handing its leadership over ([`ReadLease::hand_over`]):
//!   once it asked another member to take over, that member may lead
//!   (its voters drop their lease of this one), so this one answers no
//!   read as the leader in that term again.
//!
//! Otherwise the read is refused ([`ReadRefused`]): a leader cut off from
//! the others, whose lease ran out, must not answer from an index that a
//! new leader may have moved past. The state lives in atomics: the check
//! is a few loads and a clock read, no lock, no allocation.
//!
//! The lease's end is kept on CLOCK_BOOTTIME, so that a host suspended
//! and woken does not find its lease still running; an acknowledgement
//! that may predate a suspend renews nothing (`lease_clock`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::lease_clock::{ClockPair, SuspendFence, boottime_ns};

/// Why a member that believes it leads did not answer a read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadRefused {
    /// The leader's lease ran out: a majority has not acknowledged it
    /// lately (it may be cut off, and another may lead).
    #[error(
        "this server leads its replica group but cannot confirm it still does (no majority \
         acknowledged it within its lease: cut off from the others?); retry, or read from \
         another member"
    )]
    LeaseExpired,
    /// A leader whose writer has not passed its gate in this term: just
    /// elected (it is applying what its predecessor committed), or
    /// stalled by a refused proposal until its next gate.
    #[error(
        "this server leads its replica group but is not ready to answer yet (just elected, it \
         is applying what the previous leader committed); retry in a moment"
    )]
    NotReady,
    /// A member that installed a snapshot (or restarted from one) has not
    /// yet applied the log up to the snapshot's last write: its index is
    /// not a prefix of the log yet (docs/replication.md, 4.3).
    #[error(
        "this member is catching up after loading a snapshot (applied LSN {applied}, consistent \
         from LSN {until}); retry in a moment, or read from another member"
    )]
    CatchingUp {
        /// The LSN applied now.
        applied: u64,
        /// The LSN from which the index is consistent.
        until: u64,
    },
    /// This leader is handing its leadership to another member
    /// (`uuidmap cluster transfer-leader`): that member may already lead.
    #[error(
        "this server is handing the leadership of its replica group to another member and \
         answers no more reads as the leader; read from the new leader (`uuidmap cluster \
         status` names it) or retry"
    )]
    HandingOver,
}

/// What a leader's lease rests on, for [`ReadLease::lead`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseAck {
    /// The only voter: its lease always holds.
    Alone,
    /// No majority acknowledged it yet in this term: no lease.
    Never,
    /// A majority acknowledged what it sent at this (monotonic) time.
    At(Instant),
}

/// A member's read lease (module docs).
#[derive(Debug)]
pub struct ReadLease {
    /// The base of the monotonic times the suspend fence compares.
    base: Instant,
    /// openraft says this member leads, in `term`.
    leading: AtomicBool,
    term: AtomicU64,
    /// The lease holds until this CLOCK_BOOTTIME time, in ns (`u64::MAX`:
    /// a group of one, whose lease always holds). Set by the lease task.
    until_boot_ns: AtomicU64,
    /// The term this member handed its leadership over in (0: none); set
    /// by a leader transfer, never cleared (a later term is another).
    handed_over: AtomicU64,
    /// Detects suspends between lease updates; only the lease task
    /// (`lead`) takes it, never a read.
    fence: Mutex<SuspendFence>,
    /// The term whose gate the writer passed (0: none: not leading).
    ready_term: AtomicU64,
    /// Reads wait until the applied LSN reaches this (0: none): set while
    /// a loaded snapshot's fuzzy state is caught up (`CatchingUp`).
    consistent_from: AtomicU64,
    /// The highest commit index this member has told another one (the
    /// `leader_commit` of every AppendEntries it sent, recorded before the
    /// send; [`ReadLease::told_commit`]). A follower may have applied up
    /// to it, and shown it to a read, before this leader applied it.
    commit_told: AtomicU64,
}

impl Default for ReadLease {
    fn default() -> Self {
        ReadLease {
            base: Instant::now(),
            leading: AtomicBool::new(false),
            term: AtomicU64::new(0),
            until_boot_ns: AtomicU64::new(0),
            handed_over: AtomicU64::new(0),
            fence: Mutex::new(SuspendFence::default()),
            ready_term: AtomicU64::new(0),
            consistent_from: AtomicU64::new(0),
            commit_told: AtomicU64::new(0),
        }
    }
}

impl ReadLease {
    /// Whether a read may be answered now, with `applied` the LSN applied
    /// (module docs). A member that does not believe it leads answers as a
    /// follower, once caught up after loading a snapshot.
    pub fn admit(&self, applied: u64) -> Result<(), ReadRefused> {
        self.admit_applied(applied)?;
        if !self.leading.load(Relaxed) {
            return Ok(());
        }
        let term = self.term.load(Relaxed);
        if self.handed_over(term) {
            return Err(ReadRefused::HandingOver);
        }
        // The lease first: a leader cut off from the others also stops
        // deciding (its proposals are refused), and should say why.
        let until = self.until_boot_ns.load(Relaxed);
        if until != u64::MAX && boottime_ns() >= until {
            return Err(ReadRefused::LeaseExpired);
        }
        if self.ready_term.load(Relaxed) != term {
            return Err(ReadRefused::NotReady);
        }
        Ok(())
    }

    /// Whether the index as applied up to `applied` may be read at all:
    /// refused only while a loaded snapshot is caught up (`CatchingUp`).
    /// The check of a read that does not rest on the lease (a stale read,
    /// or a linearizable one after its read index was applied).
    pub fn admit_applied(&self, applied: u64) -> Result<(), ReadRefused> {
        let until = self.consistent_from.load(Relaxed);
        if applied < until {
            return Err(ReadRefused::CatchingUp { applied, until });
        }
        Ok(())
    }

    /// Records that this member is about to tell another one that
    /// `index` is committed (an AppendEntries' `leader_commit`).
    pub fn told_commit(&self, index: u64) {
        self.commit_told.fetch_max(index, Ordering::Release);
    }

    /// The highest commit index this member told another one. A leader's
    /// read from its lease waits until it applied this much: a follower
    /// applies what it is told is committed, possibly before the leader
    /// does, and a linearizable read there may already have shown it; a
    /// later read on the leader must not show less.
    pub fn commit_told(&self) -> u64 {
        self.commit_told.load(Ordering::Acquire)
    }

    /// Whether this member may answer a linearizable read at once, from
    /// its lease: it believes it leads, its writer passed its gate in this
    /// term and its lease holds. (The snapshot catch-up, `CatchingUp`, is
    /// checked apart: [`ReadLease::is_consistent_at`].) Otherwise a
    /// linearizable read asks the leader for a read index (ReadIndex).
    pub fn serves_as_leader(&self) -> bool {
        if !self.leading.load(Relaxed) {
            return false;
        }
        let term = self.term.load(Relaxed);
        if self.handed_over(term) {
            return false;
        }
        let until = self.until_boot_ns.load(Relaxed);
        let holds = until == u64::MAX || boottime_ns() < until;
        holds && self.ready_term.load(Relaxed) == term
    }

    /// Whether this member believes it leads but its lease ran out: no
    /// majority acknowledged it lately (it may be cut off). Its proposals
    /// would wait for a majority that may never come.
    pub fn lapsed(&self) -> bool {
        let until = self.until_boot_ns.load(Relaxed);
        self.leading.load(Relaxed) && until != u64::MAX && boottime_ns() >= until
    }

    /// openraft says this member leads `term`; its lease rests on `ack`
    /// and lasts `lease` after it (on CLOCK_BOOTTIME, `lease_clock`).
    /// Returns whether a suspend of the host was seen since the last call
    /// (the lease is then lapsed until an acknowledgement after it).
    pub fn lead(&self, term: u64, ack: LeaseAck, lease: Duration) -> bool {
        self.lead_at(term, ack, lease, ClockPair::now())
    }

    /// [`ReadLease::lead`] with the clocks read at `now`.
    fn lead_at(&self, term: u64, ack: LeaseAck, lease: Duration, now: ClockPair) -> bool {
        let mono_ns = |t: Instant| t.saturating_duration_since(self.base).as_nanos() as u64;
        let (suspended, admitted) = {
            let mut fence = self.fence.lock().unwrap_or_else(|e| e.into_inner());
            let suspended = fence.observe(mono_ns(now.mono), now.boot_ns);
            let admitted = match ack {
                LeaseAck::At(t) => fence.admits(mono_ns(t)),
                _ => true,
            };
            (suspended, admitted)
        };
        let until = match ack {
            LeaseAck::Alone => u64::MAX,
            LeaseAck::Never => 0,
            LeaseAck::At(_) if !admitted => 0,
            LeaseAck::At(t) => {
                let age = now.mono.saturating_duration_since(t).as_nanos() as u64;
                now.boot_ns.saturating_sub(age) + lease.as_nanos() as u64
            }
        };
        self.until_boot_ns.store(until, Relaxed);
        self.term.store(term, Relaxed);
        self.leading.store(true, Relaxed);
        suspended
    }

    /// This leader hands its leadership over in `term`: from now on it
    /// answers no read as the leader in that term. Called before openraft
    /// is asked to transfer.
    pub fn hand_over(&self, term: u64) {
        self.handed_over.store(term, Relaxed);
    }

    /// Whether this member handed its leadership over in `term`.
    pub fn handed_over(&self, term: u64) -> bool {
        term != 0 && self.handed_over.load(Relaxed) == term
    }

    /// The term whose gate the writer passed (0: it decides nothing).
    pub fn ready_term(&self) -> u64 {
        self.ready_term.load(Relaxed)
    }

    /// This member does not lead.
    pub fn follow(&self) {
        self.leading.store(false, Relaxed);
    }

    /// Reads are refused until the applied LSN reaches `lsn`: the index
    /// holds a snapshot's writes up to it, not all of the log before it.
    pub fn set_consistent_from(&self, lsn: u64) {
        self.consistent_from.fetch_max(lsn, Relaxed);
    }

    /// Whether the index is consistent once `applied` is applied.
    pub fn is_consistent_at(&self, applied: u64) -> bool {
        applied >= self.consistent_from.load(Relaxed)
    }

    /// The writer passed its gate in `term` (0: it stopped deciding).
    pub(crate) fn set_ready(&self, term: u64) {
        self.ready_term.store(term, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_commit_told_to_followers_is_the_highest_sent_across_terms() {
        // AppendEntries leave on several tasks, one per follower, and
        // arrive out of order; the floor a leader's lease read waits for
        // is the highest commit index any of them carried, never lower.
        let lease = ReadLease::default();
        assert_eq!(lease.commit_told(), 0);
        lease.told_commit(40);
        lease.told_commit(12);
        assert_eq!(lease.commit_told(), 40);
        // A new term keeps it: an index committed is committed for good,
        // and a follower told it may show it.
        lease.lead(4, LeaseAck::Alone, Duration::ZERO);
        assert_eq!(lease.commit_told(), 40);
        lease.told_commit(41);
        assert_eq!(lease.commit_told(), 41);
    }

    #[test]
    fn a_leader_answers_only_once_ready_and_within_its_lease() {
        let lease = ReadLease::default();
        assert_eq!(lease.admit(0), Ok(()), "a follower answers");
        lease.lead(3, LeaseAck::At(Instant::now()), Duration::from_secs(60));
        assert_eq!(lease.admit(0), Err(ReadRefused::NotReady));
        lease.set_ready(2);
        assert_eq!(
            lease.admit(0),
            Err(ReadRefused::NotReady),
            "an older term's gate"
        );
        lease.set_ready(3);
        assert_eq!(lease.admit(0), Ok(()));
        assert!(lease.serves_as_leader());
        assert!(!lease.lapsed());
        lease.lead(3, LeaseAck::At(Instant::now()), Duration::ZERO);
        assert_eq!(lease.admit(0), Err(ReadRefused::LeaseExpired));
        assert!(
            !lease.serves_as_leader(),
            "a lapsed lease serves no read at once"
        );
        assert!(lease.lapsed());
        lease.set_ready(0);
        assert_eq!(
            lease.admit(0),
            Err(ReadRefused::LeaseExpired),
            "a stalled leader without a lease says so"
        );
        lease.set_ready(3);
        lease.lead(3, LeaseAck::Alone, Duration::ZERO);
        assert_eq!(lease.admit(0), Ok(()), "a group of one");
        assert!(!lease.lapsed(), "a group of one's lease always holds");
        lease.follow();
        lease.set_ready(0);
        assert_eq!(lease.admit(0), Ok(()), "a follower again");
        assert!(!lease.serves_as_leader(), "a follower asks the leader");
        lease.set_consistent_from(9);
        assert_eq!(
            lease.admit(8),
            Err(ReadRefused::CatchingUp {
                applied: 8,
                until: 9
            })
        );
        assert_eq!(lease.admit(9), Ok(()), "caught up");
        lease.lead(3, LeaseAck::Never, Duration::from_secs(60));
        assert_eq!(
            lease.admit(9),
            Err(ReadRefused::LeaseExpired),
            "never acknowledged"
        );
    }

    #[test]
    fn a_leader_that_hands_over_answers_no_read_as_leader_in_that_term() {
        let lease = ReadLease::default();
        lease.lead(4, LeaseAck::Alone, Duration::ZERO);
        lease.set_ready(4);
        assert_eq!(lease.admit(0), Ok(()));
        lease.hand_over(4);
        assert!(lease.handed_over(4));
        assert_eq!(lease.admit(0), Err(ReadRefused::HandingOver));
        lease.lead(4, LeaseAck::Alone, Duration::ZERO);
        assert_eq!(
            lease.admit(0),
            Err(ReadRefused::HandingOver),
            "a lease update in the same term does not undo it"
        );
        lease.lead(6, LeaseAck::Alone, Duration::ZERO);
        lease.set_ready(6);
        assert_eq!(lease.admit(0), Ok(()), "leading again in a later term");
    }

    #[test]
    fn a_suspend_between_lease_updates_lapses_the_lease_until_a_later_ack() {
        let lease = ReadLease::default();
        let s = 1_000_000_000;
        let t0 = Instant::now();
        let boot0 = boottime_ns();
        let at = |secs: u64, slept: u64| ClockPair {
            mono: t0 + Duration::from_secs(secs),
            boot_ns: boot0 + (secs + slept) * s,
        };
        let minute = Duration::from_secs(60);
        assert!(!lease.lead_at(1, LeaseAck::At(t0), minute, at(0, 0)));
        lease.set_ready(1);
        assert_eq!(lease.admit(0), Ok(()));
        // The host slept 30 s between two updates; the ack is from before.
        assert!(lease.lead_at(1, LeaseAck::At(t0), minute, at(1, 30)));
        assert_eq!(lease.admit(0), Err(ReadRefused::LeaseExpired));
        assert!(lease.lapsed());
        // The same ack again, no new suspend: still refused.
        assert!(!lease.lead_at(1, LeaseAck::At(t0), minute, at(2, 30)));
        assert_eq!(lease.admit(0), Err(ReadRefused::LeaseExpired));
        // An acknowledgement after the wake-up renews it.
        let fresh = t0 + Duration::from_secs(2);
        assert!(!lease.lead_at(1, LeaseAck::At(fresh), minute, at(2, 30)));
        assert_eq!(lease.admit(0), Ok(()));
    }
}
