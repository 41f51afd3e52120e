//! The text exposition of `GET /metrics`: the recorder's series (the
//! per-call ones, see `metrics`), then this server's state read when the
//! scrape comes: its index, its scans, its restart, and on a member its
//! view of the group. The names and labels are a contract, listed in the
//! `metrics` module's table.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use super::scan_rpc::ScanCounters;
use uuidmap_cluster::cluster_status::{ClusterStatus, Role};
use uuidmap_engine::writer::{DurableIndex, DurableStats};

/// The text exposition: the recorder's series, then this server's state
/// (its index and its scans).
pub fn render(
    durable: &DurableIndex,
    scans: &ScanCounters,
    cluster: Option<&ClusterStatus>,
) -> String {
    let mut out = super::metrics::recorder_text();
    let s = durable.stats();
    let mut series = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
        );
    };
    series(
        "uuidmap_entries",
        "gauge",
        "Entries in the index.",
        s.entries as f64,
    );
    series(
        "uuidmap_applied_lsn",
        "gauge",
        "Every write up to this LSN is visible.",
        s.applied_lsn as f64,
    );
    series(
        "uuidmap_wal_bytes",
        "counter",
        "WAL bytes written since the server started.",
        s.wal_bytes as f64,
    );
    series(
        "uuidmap_write_groups",
        "counter",
        "Groups the writer committed (one WAL write and, under always, one fsync each).",
        s.groups as f64,
    );
    series(
        "uuidmap_write_overlapped_groups",
        "counter",
        "Groups whose fsync ran on the sync thread while the next group was written.",
        s.overlapped_groups as f64,
    );
    series(
        "uuidmap_write_batches",
        "counter",
        "Write batches applied.",
        s.batches as f64,
    );
    series(
        "uuidmap_write_calls",
        "counter",
        "Write calls answered by the writer.",
        s.write_calls as f64,
    );
    series(
        "uuidmap_scan_entries_examined_total",
        "counter",
        "Entries Scan calls examined: every entry of each segment copy, before the value filter.",
        scans.examined() as f64,
    );
    if s.last_snapshot_unix_ms > 0 {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        series(
            "uuidmap_snapshot_age_seconds",
            "gauge",
            "Seconds since the newest snapshot written by this server.",
            now_ms.saturating_sub(s.last_snapshot_unix_ms) as f64 / 1e3,
        );
        series(
            "uuidmap_snapshot_duration_seconds",
            "gauge",
            "How long writing the newest snapshot took.",
            s.last_snapshot_duration_us as f64 / 1e6,
        );
    }
    // jemalloc caches its statistics; advancing the epoch refreshes them.
    use tikv_jemalloc_ctl::{epoch, stats};
    if epoch::advance().is_ok() {
        if let Ok(b) = stats::allocated::read() {
            series(
                "uuidmap_jemalloc_allocated_bytes",
                "gauge",
                "Bytes allocated by the process through jemalloc.",
                b as f64,
            );
        }
        if let Ok(b) = stats::resident::read() {
            series(
                "uuidmap_jemalloc_resident_bytes",
                "gauge",
                "Bytes in physically resident data pages mapped by jemalloc.",
                b as f64,
            );
        }
    }
    render_restart(&mut out, durable, &s);
    if let Some(c) = cluster {
        render_cluster(&mut out, c);
    }
    let _ = write!(
        out,
        "# HELP uuidmap_write_step_seconds_total Where writes' time went: queue and decide are \
         per batch, wal_write, wal_sync, apply and complete per group (on a member, wal_write \
         and wal_sync are its Raft log's, per log group), replicate per proposal (a leader: \
         from openraft taking it to its answer), call is whole write \
         calls.\n# TYPE uuidmap_write_step_seconds_total counter\n"
    );
    for (step, ns) in s.write_step_ns {
        let _ = writeln!(
            out,
            "uuidmap_write_step_seconds_total{{step=\"{step}\"}} {}",
            ns as f64 / 1e9
        );
    }
    out
}

/// A replica group member's view of its group (see the table above).
fn render_cluster(out: &mut String, c: &ClusterStatus) {
    let mut gauge = |name: &str, help: &str, value: Option<u64>| {
        if let Some(v) = value {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}\n"
            );
        }
    };
    gauge(
        "uuidmap_raft_node_id",
        "This member's node id.",
        Some(c.node_id),
    );
    gauge(
        "uuidmap_raft_term",
        "This member's current Raft term.",
        Some(c.term),
    );
    gauge(
        "uuidmap_raft_leader_id",
        "The leader this member knows of (absent while none is known).",
        c.leader_id,
    );
    gauge(
        "uuidmap_raft_commit_index",
        "The last log index (LSN) this member knows committed.",
        c.commit_index,
    );
    gauge(
        "uuidmap_raft_applied_index",
        "The last log index (LSN) this member applied.",
        c.applied_index,
    );
    gauge(
        "uuidmap_raft_last_log_index",
        "The last index in this member's log.",
        c.last_log_index,
    );
    gauge(
        "uuidmap_raft_voters",
        "Voters in the membership in force.",
        Some(c.voters.len() as u64),
    );
    let _ = write!(
        out,
        "# HELP uuidmap_raft_read_index_rounds_total Read-index rounds this member began for \
         linearizable reads it could not answer from its lease (one round serves every read \
         waiting when it begins).\n# TYPE uuidmap_raft_read_index_rounds_total counter\n\
         uuidmap_raft_read_index_rounds_total {}\n",
        c.read_index_rounds
    );
    let _ = write!(
        out,
        "# HELP uuidmap_raft_role This member's role: 1 for the one it has.\n\
         # TYPE uuidmap_raft_role gauge\n"
    );
    for role in [
        Role::Leader,
        Role::SteppingDown,
        Role::Follower,
        Role::Candidate,
        Role::Learner,
        Role::Stopped,
    ] {
        let _ = writeln!(
            out,
            "uuidmap_raft_role{{role=\"{}\"}} {}",
            role.as_str(),
            u8::from(c.role == role)
        );
    }
    let k = &c.counts;
    for (name, help, value) in [
        (
            "uuidmap_raft_elections_started_total",
            "Elections this member started as a candidate (pre-votes not counted).",
            k.elections_started,
        ),
        (
            "uuidmap_raft_leader_changes_total",
            "New leaders (another member, or a new term) this member saw.",
            k.leader_changes,
        ),
        (
            "uuidmap_raft_lease_lapses_total",
            "Times this member, leading, saw its read lease run out (no majority acknowledged it \
             within the lease).",
            k.lease_lapses,
        ),
        (
            "uuidmap_raft_step_downs_total",
            "Times this member stopped leading because no majority acknowledged it.",
            k.step_downs,
        ),
        (
            "uuidmap_raft_void_entries_total",
            "Log entries applied void (a proposal after one the log refused: changed nothing).",
            k.void_entries,
        ),
        (
            "uuidmap_raft_snapshots_sent_total",
            "Snapshots this member sent whole to another.",
            k.snapshots_sent,
        ),
        (
            "uuidmap_raft_snapshots_received_total",
            "Snapshots this member received whole from its leader.",
            k.snapshots_received,
        ),
        (
            "uuidmap_raft_proposals_refused_total",
            "Writes refused RESOURCE_EXHAUSTED: the leader's proposals in flight were at their \
             bound.",
            k.proposals_refused,
        ),
    ] {
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"
        );
    }
    if !c.followers.is_empty() {
        let _ = write!(
            out,
            "# HELP uuidmap_raft_follower_lag_entries On the leader: entries each other member \
             lacks of its log.\n# TYPE uuidmap_raft_follower_lag_entries gauge\n"
        );
        for f in &c.followers {
            let _ = writeln!(
                out,
                "uuidmap_raft_follower_lag_entries{{node=\"{}\"}} {}",
                f.id, f.lag
            );
        }
    }
}

/// The recovery phases and the restart budget (see the table above).
fn render_restart(out: &mut String, durable: &DurableIndex, s: &DurableStats) {
    let report = durable.recovery_report();
    let p = &report.phases;
    let mut head = |name: &str, help: &str| {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n");
    };
    head(
        "uuidmap_recovery_phase_seconds",
        "Time of each phase of the recovery this server started with.",
    );
    for (phase, d) in [
        ("map", p.map),
        ("verify", p.verify),
        ("restore", p.restore),
        ("estimate", p.estimate),
        ("presize", p.presize),
        ("replay", p.replay),
    ] {
        let _ = writeln!(
            out,
            "uuidmap_recovery_phase_seconds{{phase=\"{phase}\"}} {}",
            d.as_secs_f64()
        );
    }
    let _ = write!(
        out,
        "# HELP uuidmap_recovery_replayed_ops WAL ops the recovery applied.\n\
         # TYPE uuidmap_recovery_replayed_ops gauge\nuuidmap_recovery_replayed_ops {}\n",
        report.ops_replayed
    );
    let _ = write!(
        out,
        "# HELP uuidmap_recovery_worker_seconds Time of each replay worker: presize, apply \
         (not waiting), wall.\n# TYPE uuidmap_recovery_worker_seconds gauge\n"
    );
    for (i, w) in p.workers.iter().enumerate() {
        for (part, d) in [("presize", w.presize), ("apply", w.apply), ("wall", w.wall)] {
            let _ = writeln!(
                out,
                "uuidmap_recovery_worker_seconds{{worker=\"{i}\",part=\"{part}\"}} {}",
                d.as_secs_f64()
            );
        }
    }
    let _ = write!(
        out,
        "# HELP uuidmap_recovery_worker_ops Ops each replay worker applied.\n\
         # TYPE uuidmap_recovery_worker_ops gauge\n"
    );
    for (i, w) in p.workers.iter().enumerate() {
        let _ = writeln!(
            out,
            "uuidmap_recovery_worker_ops{{worker=\"{i}\"}} {}",
            w.ops
        );
    }
    if s.max_replay_ms > 0 {
        let _ = write!(
            out,
            "# HELP uuidmap_replay_budget_seconds The restart budget (--max-replay-ms).\n\
             # TYPE uuidmap_replay_budget_seconds gauge\nuuidmap_replay_budget_seconds {}\n",
            s.max_replay_ms as f64 / 1e3
        );
    }
    let mut gauge = |name: &str, help: &str, value: u64| {
        if value > 0 {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
            );
        }
    };
    gauge(
        "uuidmap_replay_rate_bytes_per_second",
        "The WAL replay rate the restart budget assumes.",
        s.replay_bytes_per_sec,
    );
    gauge(
        "uuidmap_snapshot_trigger_wal_bytes",
        "WAL bytes after which a snapshot is taken.",
        s.snapshot_trigger_bytes,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_members_view_of_its_group_is_rendered_as_gauges() {
        let status = ClusterStatus {
            node_id: 2,
            role: Role::Leader,
            term: 7,
            leader_id: Some(2),
            leader_url: Some("http://h2:7878".into()),
            commit_index: Some(40),
            applied_index: Some(39),
            last_log_index: Some(41),
            voters: vec![1, 2, 3],
            learners: vec![],
            member_urls: vec![],
            member_resp_addrs: vec![],
            followers: vec![
                uuidmap_cluster::cluster_status::FollowerProgress {
                    id: 1,
                    matched: Some(41),
                    lag: 0,
                },
                uuidmap_cluster::cluster_status::FollowerProgress {
                    id: 3,
                    matched: None,
                    lag: 41,
                },
            ],
            counts: uuidmap_cluster::counters::RaftCounts {
                elections_started: 3,
                step_downs: 1,
                proposals_refused: 5,
                ..Default::default()
            },
            read_index_rounds: 12,
        };
        let mut out = String::new();
        render_cluster(&mut out, &status);
        for line in [
            "uuidmap_raft_node_id 2",
            "uuidmap_raft_term 7",
            "uuidmap_raft_leader_id 2",
            "uuidmap_raft_commit_index 40",
            "uuidmap_raft_applied_index 39",
            "uuidmap_raft_last_log_index 41",
            "uuidmap_raft_voters 3",
            "uuidmap_raft_read_index_rounds_total 12",
            "uuidmap_raft_role{role=\"leader\"} 1",
            "uuidmap_raft_role{role=\"follower\"} 0",
            "uuidmap_raft_follower_lag_entries{node=\"1\"} 0",
            "uuidmap_raft_follower_lag_entries{node=\"3\"} 41",
            "uuidmap_raft_elections_started_total 3",
            "uuidmap_raft_step_downs_total 1",
            "uuidmap_raft_proposals_refused_total 5",
            "uuidmap_raft_void_entries_total 0",
            "# TYPE uuidmap_raft_leader_changes_total counter",
        ] {
            assert!(out.lines().any(|l| l == line), "no {line:?} in:\n{out}");
        }
        // A follower that knows no leader yet: no leader gauge, no lags.
        let mut out = String::new();
        render_cluster(
            &mut out,
            &ClusterStatus {
                role: Role::Follower,
                leader_id: None,
                followers: vec![],
                ..status
            },
        );
        assert!(!out.contains("uuidmap_raft_leader_id"), "{out}");
        assert!(!out.contains("follower_lag"), "{out}");
        assert!(
            out.contains("uuidmap_raft_role{role=\"follower\"} 1"),
            "{out}"
        );
    }
}
