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
//! Otherwise the read is refused ([`ReadRefused`]): a leader cut off from
//! the others, whose lease ran out, must not answer from an index that a
//! new leader may have moved past. The state lives in atomics: the check
//! is two loads and a clock read, no lock, no allocation.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

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
}

/// A member's read lease (module docs).
#[derive(Debug)]
pub struct ReadLease {
    base: Instant,
    /// openraft says this member leads, in `term`.
    leading: AtomicBool,
    term: AtomicU64,
    /// The lease holds until this many ns after `base` (`u64::MAX`: a
    /// group of one, whose lease always holds).
    until_ns: AtomicU64,
    /// The term whose gate the writer passed (0: none: not leading).
    ready_term: AtomicU64,
    /// Reads wait until the applied LSN reaches this (0: none): set while
    /// a loaded snapshot's fuzzy state is caught up (`CatchingUp`).
    consistent_from: AtomicU64,
}

impl Default for ReadLease {
    fn default() -> Self {
        ReadLease {
            base: Instant::now(),
            leading: AtomicBool::new(false),
            term: AtomicU64::new(0),
            until_ns: AtomicU64::new(0),
            ready_term: AtomicU64::new(0),
            consistent_from: AtomicU64::new(0),
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
        // The lease first: a leader cut off from the others also stops
        // deciding (its proposals are refused), and should say why.
        let until = self.until_ns.load(Relaxed);
        if until != u64::MAX && (self.base.elapsed().as_nanos() as u64) >= until {
            return Err(ReadRefused::LeaseExpired);
        }
        if self.ready_term.load(Relaxed) != self.term.load(Relaxed) {
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

    /// Whether this member may answer a linearizable read at once, from
    /// its lease: it believes it leads, its writer passed its gate in this
    /// term and its lease holds. (The snapshot catch-up, `CatchingUp`, is
    /// checked apart: [`ReadLease::is_consistent_at`].) Otherwise a
    /// linearizable read asks the leader for a read index (ReadIndex).
    pub fn serves_as_leader(&self) -> bool {
        if !self.leading.load(Relaxed) {
            return false;
        }
        let until = self.until_ns.load(Relaxed);
        let holds = until == u64::MAX || (self.base.elapsed().as_nanos() as u64) < until;
        holds && self.ready_term.load(Relaxed) == self.term.load(Relaxed)
    }

    /// Whether this member believes it leads but its lease ran out: no
    /// majority acknowledged it lately (it may be cut off). Its proposals
    /// would wait for a majority that may never come.
    pub fn lapsed(&self) -> bool {
        let until = self.until_ns.load(Relaxed);
        self.leading.load(Relaxed)
            && until != u64::MAX
            && (self.base.elapsed().as_nanos() as u64) >= until
    }

    /// openraft says this member leads `term`, and its lease holds until
    /// `until` (`None`: always, a group of one).
    pub fn lead(&self, term: u64, until: Option<Instant>) {
        let until_ns = match until {
            None => u64::MAX,
            Some(t) => t.saturating_duration_since(self.base).as_nanos() as u64,
        };
        self.until_ns.store(until_ns, Relaxed);
        self.term.store(term, Relaxed);
        self.leading.store(true, Relaxed);
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
    fn a_leader_answers_only_once_ready_and_within_its_lease() {
        let lease = ReadLease::default();
        assert_eq!(lease.admit(0), Ok(()), "a follower answers");
        lease.lead(3, Some(Instant::now() + Duration::from_secs(60)));
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
        lease.lead(3, Some(Instant::now()));
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
        lease.lead(3, None);
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
    }
}
