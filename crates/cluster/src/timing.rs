//! openraft's configuration for a uuidmap replica group: the timings, and
//! the choices the design makes (docs/replication.md, 4.1 and 5.3).
//!
//! openraft's own defaults (elections after 150–300 ms, heartbeats every
//! 50 ms) assume a member is scheduled within milliseconds. On a busy
//! machine (ours has 2 cores, shared by three members and a load
//! generator in the tests and benchmarks) a 50 ms stall is common, and
//! each one would start an election. So heartbeats come every 150 ms,
//! elections wait 400–800 ms, no extra heartbeat is sent while appends
//! show the leader alive, and a member asks a pre-vote first, so that one
//! cut off for a while does not raise the term when it returns.
//!
//! Expected failover: openraft's members grant no vote until the leader
//! lease (the maximum election timeout) has passed since they last heard
//! the leader, and a member's first election timer fires before that, so
//! the election that wins is the second: after two timeouts, `t1 + t2`
//! with each in `[min, max)`, which is at least the lease as long as
//! `min ≥ max / 2`. Then a vote round, the new leader's first entry and
//! the writer's gate. With 700–1100 ms this measured p50 2.04 s, max
//! 2.27 s over 35 leader faults (BENCHMARKS.md, the chaos run): the
//! 400–800 ms here aim under 2 s at the maximum (1.6 s of timeouts).

use std::sync::Arc;

use openraft::{Config, ConfigError, SnapshotPolicy};

/// The timings of a replica group, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaftTiming {
    /// How often the leader sends heartbeats.
    pub heartbeat_ms: u64,
    /// No heartbeat within this long of the last append to a member.
    pub heartbeat_min_interval_ms: u64,
    /// A follower that hears nothing for a random time in this range
    /// starts an election.
    pub election_min_ms: u64,
    /// See `election_min_ms`.
    pub election_max_ms: u64,
    /// How long a member waits for the next chunk of a snapshot.
    pub snapshot_progress_ms: u64,
}

impl Default for RaftTiming {
    /// Heartbeats every 150 ms (none within 100 ms of an append),
    /// elections after 400–800 ms, 10 s for a snapshot chunk.
    fn default() -> Self {
        RaftTiming {
            heartbeat_ms: 150,
            heartbeat_min_interval_ms: 100,
            election_min_ms: 400,
            election_max_ms: 800,
            snapshot_progress_ms: 10_000,
        }
    }
}

/// openraft's configuration for `timing`, validated (openraft checks that
/// a heartbeat fits well inside the election timeout).
///
/// Snapshots are never taken by openraft on its own, and the log is never
/// purged by it: the member's snapshot task decides both
/// (docs/replication.md, 4.1, and `snapshot_task`).
pub fn raft_config(timing: &RaftTiming) -> Result<Arc<Config>, ConfigError> {
    let config = Config {
        cluster_name: "uuidmap".into(),
        heartbeat_interval: timing.heartbeat_ms,
        heartbeat_min_interval: Some(timing.heartbeat_min_interval_ms),
        election_timeout_min: timing.election_min_ms,
        election_timeout_max: timing.election_max_ms,
        install_snapshot_timeout: timing.snapshot_progress_ms,
        enable_pre_vote: Some(true),
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: u64::MAX,
        // A member that led before its restart starts as a follower and
        // leads again only by winning an election, in a later term:
        // openraft's default restores it as the leader of its old term at
        // once, but a leader sends entries on before its own log thread
        // has written them, so its log may come back without entries its
        // followers hold under the very log ids it would give new ones
        // (log matching broken: members applied different entries under
        // one LSN, and the leader lost acknowledged writes).
        enable_leader_restore: Some(false),
        ..Config::default()
    };
    Ok(Arc::new(config.validate()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_timing_is_a_valid_configuration_with_the_designs_choices() {
        let c = raft_config(&RaftTiming::default()).unwrap();
        assert_eq!(c.heartbeat_interval, 150);
        assert_eq!((c.election_timeout_min, c.election_timeout_max), (400, 800));
        assert_eq!(c.enable_pre_vote, Some(true));
        assert!(matches!(c.snapshot_policy, SnapshotPolicy::Never));
        assert_eq!(c.enable_leader_restore, Some(false));
    }

    #[test]
    fn a_heartbeat_as_slow_as_the_election_is_refused() {
        let timing = RaftTiming {
            heartbeat_ms: 800,
            ..RaftTiming::default()
        };
        assert!(raft_config(&timing).is_err());
    }
}
