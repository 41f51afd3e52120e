//! [`VoteGuard`]: when this member may grant a vote, on top of openraft's
//! own rules (docs/replication.md, section 6.3). Two holes of a leader's
//! read lease are closed here:
//!
//! - **The start hold.** A leader answers reads alone while a majority
//!   acknowledged it less than its lease ago, because each of them
//!   promised to vote for no one for the maximum election timeout after
//!   hearing from it. openraft keeps that promise in memory only: a voter
//!   that restarts has forgotten it and would vote at once (openraft's own
//!   TODO in `storage/helper.rs`). So a member that starts with Raft state
//!   from before (it had voted or been in a group) neither votes nor
//!   leads for [`start_hold`] after its start: the Raft service refuses
//!   `Vote` and `PreVote` (UNAVAILABLE: the candidate counts no vote),
//!   openraft's elections are off (`runtime_config().elect(false)`), and a
//!   leader transfer to it is refused. A fresh member made no promise and
//!   is not held; nor is the only voter of a group (no one else can lead).
//!   Persisting the lease's end instead would need a clock that survives
//!   a reboot and agrees across one (wall time), which is the assumption
//!   a lease should not add; the hold costs a restarted member one
//!   election timeout before it can lead.
//! - **Leader transfer.** openraft lets a vote request flagged
//!   `leadership_transfer` pass a voter's lease, since the leader asked
//!   for that election. Anyone reaching the port could set the flag. Here
//!   the flag is honoured only for the candidate this member's leader
//!   named in a `TransferLeader` it accepted (or that this member, leading,
//!   handed over to), in a later term; otherwise it is cleared and the
//!   lease applies as for any election.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::timing::RaftTiming;
use crate::types::VoteRequest;

/// How long a member that restarts with Raft state holds its vote: the
/// maximum election timeout (what its promise to a leader was), plus one
/// heartbeat interval. The leader counts its lease, the *minimum* timeout,
/// from when it sent what was acknowledged, before the member's restart,
/// so the maximum alone already leaves it a factor of two for the clocks'
/// rate drift; the heartbeat's margin (19 % of the default maximum) keeps
/// the hold safe even for a lease as long as openraft's own (the maximum).
pub fn start_hold(timing: &RaftTiming) -> Duration {
    Duration::from_millis(timing.election_max_ms + timing.heartbeat_ms)
}

/// Why a vote was not considered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VoteHeld {
    /// The member restarted less than its hold ago.
    #[error(
        "this member restarted and grants no vote for {left_ms} ms more (it may have promised \
         its vote to a leader before it stopped)"
    )]
    Restarted {
        /// What is left of the hold, in ms.
        left_ms: u64,
    },
}

/// A member's vote rules on top of openraft's (module docs).
#[derive(Debug, Default)]
pub struct VoteGuard {
    /// No vote, pre-vote or transfer is taken before this.
    hold_until: Option<Instant>,
    /// The last leader transfer this member heard of or made: the term of
    /// the leader that handed over, and the member it named.
    transfer: Mutex<Option<(u64, u64)>>,
}

impl VoteGuard {
    /// A guard that holds votes for `hold` from now (`None`: a fresh
    /// member, or the only voter).
    pub fn new(hold: Option<Duration>) -> VoteGuard {
        VoteGuard {
            hold_until: hold.map(|h| Instant::now() + h),
            transfer: Mutex::new(None),
        }
    }

    /// Refuses while the start hold lasts.
    pub fn check_hold(&self) -> Result<(), VoteHeld> {
        match self.hold_until {
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    Ok(())
                } else {
                    Err(VoteHeld::Restarted {
                        left_ms: left.as_millis() as u64 + 1,
                    })
                }
            }
            None => Ok(()),
        }
    }

    /// The leader of `term` hands its leadership to `to` (heard from that
    /// leader, or decided by this member while it leads).
    pub fn transfer_named(&self, term: u64, to: u64) {
        let mut t = self.transfer.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_none_or(|(old, _)| old <= term) {
            *t = Some((term, to));
        }
    }

    /// The member the leader of `term` named, if this member heard of (or
    /// made) a transfer in that term.
    pub fn named_in(&self, term: u64) -> Option<u64> {
        let t = *self.transfer.lock().unwrap_or_else(|e| e.into_inner());
        t.and_then(|(from_term, to)| (from_term == term).then_some(to))
    }

    /// Checks a vote or pre-vote request: refused while held; a
    /// `leadership_transfer` flag nobody authorized is cleared.
    pub fn check_vote(&self, req: &mut VoteRequest) -> Result<(), VoteHeld> {
        self.check_hold()?;
        if req.leadership_transfer {
            let candidate = req.vote.leader_id.voted_for;
            let term = req.vote.leader_id.term;
            let named = *self.transfer.lock().unwrap_or_else(|e| e.into_inner());
            let authorized =
                named.is_some_and(|(from_term, to)| candidate == to && term > from_term);
            if !authorized {
                tracing::warn!(
                    candidate,
                    term,
                    "a vote request claims a leader transfer no leader named: treated as an \
                     ordinary election"
                );
                req.leadership_transfer = false;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Vote;

    fn request(term: u64, candidate: u64, transfer: bool) -> VoteRequest {
        let mut r = VoteRequest::new(Vote::new(term, candidate), None);
        r.leadership_transfer = transfer;
        r
    }

    #[test]
    fn a_restarted_member_refuses_votes_until_its_hold_ends() {
        let g = VoteGuard::new(Some(Duration::from_millis(200)));
        assert!(matches!(
            g.check_vote(&mut request(5, 2, false)),
            Err(VoteHeld::Restarted { .. })
        ));
        std::thread::sleep(Duration::from_millis(210));
        assert_eq!(g.check_vote(&mut request(5, 2, false)), Ok(()));
        assert_eq!(VoteGuard::new(None).check_hold(), Ok(()), "a fresh member");
    }

    #[test]
    fn a_transfer_flag_counts_only_for_the_candidate_the_leader_named() {
        let g = VoteGuard::new(None);
        let mut forged = request(8, 3, true);
        g.check_vote(&mut forged).unwrap();
        assert!(!forged.leadership_transfer, "no transfer was named");
        g.transfer_named(7, 2);
        let mut other = request(8, 3, true);
        g.check_vote(&mut other).unwrap();
        assert!(!other.leadership_transfer, "another candidate");
        let mut same_term = request(7, 2, true);
        g.check_vote(&mut same_term).unwrap();
        assert!(!same_term.leadership_transfer, "not a later term");
        let mut named = request(8, 2, true);
        g.check_vote(&mut named).unwrap();
        assert!(named.leadership_transfer, "the candidate named");
        g.transfer_named(6, 3);
        let mut stale = request(8, 3, true);
        g.check_vote(&mut stale).unwrap();
        assert!(
            !stale.leadership_transfer,
            "an older transfer does not replace a newer"
        );
    }
}
