//! [`RaftCounters`]: what happened to a member's Raft since it started, as
//! counters that only go up (the server exports them in `/metrics`). Each
//! is incremented where its event happens, with one relaxed atomic add:
//!
//! - `elections_started`: elections this member started as a candidate
//!   (pre-votes not counted), once per term, when it first asks a vote
//!   (`network`);
//! - `leader_changes`: the times this member saw a new leader, in a new
//!   term or another member (`leadership`, from openraft's metrics: two
//!   changes between two looks count once);
//! - `lease_lapses`: the times this member, leading, saw its read lease
//!   run out (no majority acknowledged it within the lease);
//! - `step_downs`: the times a leader whose lease stayed lapsed gave up
//!   its leadership (`leadership`);
//! - `void_entries`: log entries this member applied as void (a proposal
//!   that broke its chain: changed nothing, `state_machine`);
//! - `snapshots_sent`, `snapshots_received`: whole snapshot transfers to
//!   and from other members (`network`, `raft_service`);
//! - `proposals_refused`: client writes refused because the leader's
//!   proposals in flight reached their bound (`leadership`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A member's Raft counters (module docs).
#[derive(Debug, Default)]
pub struct RaftCounters {
    /// Elections started (module docs).
    pub elections_started: AtomicU64,
    /// New leaders seen.
    pub leader_changes: AtomicU64,
    /// Read leases that ran out while leading.
    pub lease_lapses: AtomicU64,
    /// Leaderships given up after a lapsed lease.
    pub step_downs: AtomicU64,
    /// Entries applied void.
    pub void_entries: AtomicU64,
    /// Snapshots sent whole to another member.
    pub snapshots_sent: AtomicU64,
    /// Snapshots received whole from the leader.
    pub snapshots_received: AtomicU64,
    /// Writes refused over the proposal bound.
    pub proposals_refused: AtomicU64,
    /// The highest term this member asked votes in (not a counter: how
    /// `elections_started` counts each term once).
    last_election_term: AtomicU64,
}

/// A plain copy of the counters, for a scrape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RaftCounts {
    /// See [`RaftCounters`].
    pub elections_started: u64,
    /// See [`RaftCounters`].
    pub leader_changes: u64,
    /// See [`RaftCounters`].
    pub lease_lapses: u64,
    /// See [`RaftCounters`].
    pub step_downs: u64,
    /// See [`RaftCounters`].
    pub void_entries: u64,
    /// See [`RaftCounters`].
    pub snapshots_sent: u64,
    /// See [`RaftCounters`].
    pub snapshots_received: u64,
    /// See [`RaftCounters`].
    pub proposals_refused: u64,
}

impl RaftCounters {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// This member asks votes as a candidate in `term`: counts an election
    /// the first time for each term (one election asks every voter).
    pub fn election_in(&self, term: u64) {
        if self.last_election_term.fetch_max(term, Relaxed) < term {
            Self::bump(&self.elections_started);
        }
    }

    /// The counters now.
    pub fn counts(&self) -> RaftCounts {
        RaftCounts {
            elections_started: self.elections_started.load(Relaxed),
            leader_changes: self.leader_changes.load(Relaxed),
            lease_lapses: self.lease_lapses.load(Relaxed),
            step_downs: self.step_downs.load(Relaxed),
            void_entries: self.void_entries.load(Relaxed),
            snapshots_sent: self.snapshots_sent.load(Relaxed),
            snapshots_received: self.snapshots_received.load(Relaxed),
            proposals_refused: self.proposals_refused.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_election_counts_once_however_many_voters_it_asks() {
        let c = RaftCounters::default();
        c.election_in(3);
        c.election_in(3);
        c.election_in(2);
        assert_eq!(c.counts().elections_started, 1);
        c.election_in(5);
        assert_eq!(c.counts().elections_started, 2);
    }
}
