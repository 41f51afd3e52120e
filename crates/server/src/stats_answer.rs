//! The `Stats` answer's parts built from the engine's and the cluster's
//! figures: the replica group's view, and the recovery and the restart
//! budget. Used by the `Stats` call (`service`), the Redis protocol's
//! `INFO` (the `uuidmap-resp` crate) and the cluster service's `Status`;
//! `/metrics` renders the same figures (`metrics`).

use std::time::{SystemTime, UNIX_EPOCH};

use uuidmap_cluster::cluster_status::ClusterStatus;
use uuidmap_engine::writer::DurableIndex;
use uuidmap_proto::v1 as pb;

use crate::ClusterView;

/// The whole `Stats` answer: the index's figures now, and on a member its
/// view of the group.
pub fn stats(durable: &DurableIndex, cluster: Option<&ClusterView>) -> pb::StatsResponse {
    let s = durable.stats();
    let snapshot_age_ms = (s.last_snapshot_unix_ms > 0).then(|| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        now.saturating_sub(s.last_snapshot_unix_ms)
    });
    pb::StatsResponse {
        entries: s.entries,
        table_bytes: s.table_bytes,
        applied_lsn: s.applied_lsn,
        wal_bytes: s.wal_bytes,
        snapshots_taken: s.snapshots_taken,
        snapshots_failed: s.snapshots_failed,
        last_snapshot_lsn: s.last_snapshot_lsn,
        snapshot_age_ms,
        last_snapshot_duration_us: s.last_snapshot_duration_us,
        wal_failures: s.wal_failures,
        queued_batches: s.queued_batches,
        restart: Some(restart_stats(durable)),
        cluster: cluster.map(|view| cluster_stats(&view())),
        // A partitioned member's service adds its own (`partition_stats`).
        partitions: None,
    }
}

/// The `Stats` answer's view of the replica group.
pub fn cluster_stats(c: &ClusterStatus) -> pb::ClusterStats {
    pb::ClusterStats {
        node_id: c.node_id,
        role: c.role.as_str().to_string(),
        term: c.term,
        leader_id: c.leader_id,
        leader_url: c.leader_url.clone(),
        commit_index: c.commit_index,
        applied_index: c.applied_index,
        last_log_index: c.last_log_index,
        voters: c.voters.clone(),
        learners: c.learners.clone(),
        members: c
            .member_urls
            .iter()
            .map(|(id, url)| pb::ClusterMember {
                node_id: *id,
                client_url: url.clone(),
            })
            .collect(),
        followers: c
            .followers
            .iter()
            .map(|f| pb::FollowerStats {
                node_id: f.id,
                matched_index: f.matched,
                lag: f.lag,
            })
            .collect(),
    }
}

/// `Stats`' view of the recovery and the restart budget.
pub fn restart_stats(durable: &DurableIndex) -> pb::RestartStats {
    let report = durable.recovery_report();
    let s = durable.stats();
    let p = &report.phases;
    let us = |d: std::time::Duration| d.as_micros() as u64;
    pb::RestartStats {
        snapshot_used: report.snapshot.is_some(),
        snapshot_lsn: report.snapshot_lsn,
        map_us: us(p.map),
        snapshot_read: p.load == uuidmap_engine::store::snapshot::Load::Read,
        verify_us: us(p.verify),
        restore_us: us(p.restore),
        estimate_us: us(p.estimate),
        presize_us: us(p.presize),
        presized_for: p.presized_for,
        replay_us: us(p.replay),
        records_replayed: report.records_replayed,
        bytes_replayed: report.bytes_replayed,
        ops_replayed: report.ops_replayed,
        workers: p
            .workers
            .iter()
            .map(|w| pb::ReplayWorkerStats {
                segments: w.segments as u32,
                ops: w.ops,
                presize_us: us(w.presize),
                apply_us: us(w.apply),
                wall_us: us(w.wall),
            })
            .collect(),
        max_replay_ms: s.max_replay_ms,
        replay_bytes_per_sec: s.replay_bytes_per_sec,
        snapshot_trigger_bytes: s.snapshot_trigger_bytes,
    }
}

/// A partitioned member's place in its cluster, as `Stats` reports it.
pub fn partition_stats(o: &uuidmap_partition::Ownership) -> pb::PartitionStats {
    let s = o.stats();
    pb::PartitionStats {
        group: o.group().to_string(),
        cluster: o.cache().etcd().cluster().to_owned(),
        table_version: s.table_version,
        fenced_version: s.fenced_version,
        fence_lsn: s.fence_lsn,
        owned: s.owned,
        moving_out: s.moving_out,
        moving_in: s.moving_in,
        etcd_error: o.cache().etcd_error().unwrap_or_default(),
    }
}
