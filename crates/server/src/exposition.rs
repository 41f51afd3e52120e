//! The text exposition of `GET /metrics`: the recorder's series (the
//! per-call ones, see `metrics`), then this server's state read when the
//! scrape comes: its index, its scans, its restart, and on a member its
//! view of the group. The names and labels are a contract, listed in the
//! `metrics` module's table.
//!
//! Both parts are written by libraries: the recorder's by
//! `metrics-exporter-prometheus`, the state's by the `prometheus` crate's
//! text encoder, from a registry made anew for each scrape (`StateSeries`).
//! Both write the Prometheus text format (0.0.4), names as given.

use std::time::{SystemTime, UNIX_EPOCH};

use prometheus::core::Collector;
use prometheus::{Counter, CounterVec, Encoder as _, Gauge, GaugeVec, Opts, Registry, TextEncoder};

use super::scan_rpc::ScanCounters;
use uuidmap_cluster::cluster_status::{ClusterStatus, Role};
use uuidmap_engine::writer::{DurableIndex, DurableStats};
use uuidmap_partition::Ownership;

/// The text exposition: the recorder's series, then this server's state
/// (its index and its scans).
pub fn render(
    durable: &DurableIndex,
    scans: &ScanCounters,
    cluster: Option<&ClusterStatus>,
    partitions: Option<&Ownership>,
) -> String {
    let mut out = super::metrics::recorder_text();
    let state = StateSeries::new();
    let s = durable.stats();
    state.gauge("uuidmap_entries", "Entries in the index.", s.entries as f64);
    state.gauge(
        "uuidmap_applied_lsn",
        "Every write up to this LSN is visible.",
        s.applied_lsn as f64,
    );
    state.counter(
        "uuidmap_wal_bytes",
        "WAL bytes written since the server started.",
        s.wal_bytes as f64,
    );
    state.counter(
        "uuidmap_write_groups",
        "Groups the writer committed (one WAL write and, under always, one fsync each).",
        s.groups as f64,
    );
    state.counter(
        "uuidmap_write_overlapped_groups",
        "Groups whose fsync ran on the sync thread while the next group was written.",
        s.overlapped_groups as f64,
    );
    state.counter(
        "uuidmap_write_batches",
        "Write batches applied.",
        s.batches as f64,
    );
    state.counter(
        "uuidmap_write_calls",
        "Write calls answered by the writer.",
        s.write_calls as f64,
    );
    state.counter(
        "uuidmap_scan_entries_examined_total",
        "Entries Scan calls examined: every entry of each segment copy, before the value filter.",
        scans.examined() as f64,
    );
    if s.last_snapshot_unix_ms > 0 {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        state.gauge(
            "uuidmap_snapshot_age_seconds",
            "Seconds since the newest snapshot written by this server.",
            now_ms.saturating_sub(s.last_snapshot_unix_ms) as f64 / 1e3,
        );
        state.gauge(
            "uuidmap_snapshot_duration_seconds",
            "How long writing the newest snapshot took.",
            s.last_snapshot_duration_us as f64 / 1e6,
        );
    }
    // jemalloc caches its statistics; advancing the epoch refreshes them.
    use tikv_jemalloc_ctl::{epoch, stats};
    if epoch::advance().is_ok() {
        if let Ok(b) = stats::allocated::read() {
            state.gauge(
                "uuidmap_jemalloc_allocated_bytes",
                "Bytes allocated by the process through jemalloc.",
                b as f64,
            );
        }
        if let Ok(b) = stats::resident::read() {
            state.gauge(
                "uuidmap_jemalloc_resident_bytes",
                "Bytes in physically resident data pages mapped by jemalloc.",
                b as f64,
            );
        }
    }
    render_restart(&state, durable, &s);
    if let Some(c) = cluster {
        render_cluster(&state, c);
    }
    if let Some(o) = partitions {
        render_partitions(&state, o);
    }
    state.counters(
        "uuidmap_write_step_seconds_total",
        "Where writes' time went: queue and decide are per batch, wal_write, wal_sync, apply \
         and complete per group (on a member, wal_write and wal_sync are its Raft log's, per \
         log group), replicate per proposal (a leader: from openraft taking it to its answer), \
         call is whole write calls.",
        ["step"],
        s.write_step_ns
            .iter()
            .map(|&(step, ns)| ([step], ns as f64 / 1e9)),
    );
    state.append_to(&mut out);
    out
}

/// One scrape's state series: registered in a registry of their own,
/// made anew for each scrape (so a series whose source is gone, a lag of a
/// member that left, is gone too), and written by the `prometheus` crate's
/// text encoder in the Prometheus text format the recorder writes.
///
/// Why a registry per scrape, and not the `metrics` recorder: that
/// recorder is process-global, and a process may run several servers (the
/// tests do), each exposing its own state; and its counters are integers,
/// where `uuidmap_write_step_seconds_total` counts seconds.
struct StateSeries {
    registry: Registry,
}

impl StateSeries {
    fn new() -> Self {
        Self {
            registry: Registry::new(),
        }
    }

    fn register(&self, name: &str, collector: prometheus::Result<impl Collector + 'static>) {
        // The names and help texts are constants, checked by the tests: a
        // refusal here is a bug, which costs the scrape one series.
        if let Err(e) = collector.and_then(|c| self.registry.register(Box::new(c))) {
            debug_assert!(false, "metric {name}: {e}");
            tracing::warn!(metric = name, error = %e, "metric series not exposed");
        }
    }

    fn gauge(&self, name: &str, help: &str, value: f64) {
        self.register(
            name,
            Gauge::with_opts(Opts::new(name, help)).inspect(|g| {
                g.set(value);
            }),
        );
    }

    fn counter(&self, name: &str, help: &str, value: f64) {
        self.register(
            name,
            Counter::with_opts(Opts::new(name, help)).inspect(|c| {
                c.inc_by(value);
            }),
        );
    }

    /// A gauge with labels: one series per row (none: the family is
    /// left out).
    fn gauges<const N: usize, L: AsRef<str> + std::fmt::Debug>(
        &self,
        name: &str,
        help: &str,
        labels: [&str; N],
        rows: impl IntoIterator<Item = ([L; N], f64)>,
    ) {
        let family = GaugeVec::new(Opts::new(name, help), &labels);
        self.labelled(name, family, rows, |v, values, x| {
            v.with_label_values(values).set(x)
        });
    }

    /// A counter with labels: one series per row.
    fn counters<const N: usize, L: AsRef<str> + std::fmt::Debug>(
        &self,
        name: &str,
        help: &str,
        labels: [&str; N],
        rows: impl IntoIterator<Item = ([L; N], f64)>,
    ) {
        let family = CounterVec::new(Opts::new(name, help), &labels);
        self.labelled(name, family, rows, |v, values, x| {
            v.with_label_values(values).inc_by(x)
        });
    }

    /// Registers `family` with a series per row, each set by `set`.
    fn labelled<V: Collector + 'static, const N: usize, L>(
        &self,
        name: &str,
        family: prometheus::Result<V>,
        rows: impl IntoIterator<Item = ([L; N], f64)>,
        set: impl Fn(&V, &[L; N], f64),
    ) {
        self.register(
            name,
            family.inspect(|v| {
                for (values, value) in rows {
                    set(v, &values, value);
                }
            }),
        );
    }

    /// Writes the series, sorted by name, after `out`.
    fn append_to(&self, out: &mut String) {
        let mut bytes = Vec::new();
        match TextEncoder::new().encode(&self.registry.gather(), &mut bytes) {
            Ok(()) => out.push_str(&String::from_utf8_lossy(&bytes)),
            Err(e) => tracing::warn!(error = %e, "state metrics not exposed"),
        }
    }

    #[cfg(test)]
    fn text(&self) -> String {
        let mut out = String::new();
        self.append_to(&mut out);
        out
    }
}

/// A replica group member's view of its group (see the table above).
/// A partitioned server's view of its group's partitions (the same
/// figures as `Stats.partitions`).
fn render_partitions(state: &StateSeries, o: &Ownership) {
    let s = o.stats();
    state.gauges(
        "uuidmap_partition_group_info",
        "The partition-owning group this server is a member of (always 1).",
        ["group", "cluster"],
        [([o.group().as_str(), o.cache().etcd().cluster()], 1.0)],
    );
    state.gauge(
        "uuidmap_partition_table_version",
        "The partition table version in use (its etcd mod revision; 0: none read yet).",
        s.table_version as f64,
    );
    state.gauge(
        "uuidmap_partition_fenced_version",
        "The last table version this server fenced (a move waits for it).",
        s.fenced_version as f64,
    );
    state.gauge(
        "uuidmap_partition_fence_lsn",
        "The applied LSN when that version was fenced.",
        s.fence_lsn as f64,
    );
    state.gauges(
        "uuidmap_partitions",
        "Partitions by state: owned by the group, of those moving out, and being copied in.",
        ["state"],
        [
            (["owned"], f64::from(s.owned)),
            (["moving_out"], f64::from(s.moving_out)),
            (["moving_in"], f64::from(s.moving_in)),
        ],
    );
    state.gauge(
        "uuidmap_partition_etcd_up",
        "1 while the last etcd call of the map's cache succeeded, 0 after it failed.",
        if o.cache().etcd_error().is_some() {
            0.0
        } else {
            1.0
        },
    );
}

fn render_cluster(state: &StateSeries, c: &ClusterStatus) {
    for (name, help, value) in [
        (
            "uuidmap_raft_node_id",
            "This member's node id.",
            Some(c.node_id),
        ),
        (
            "uuidmap_raft_term",
            "This member's current Raft term.",
            Some(c.term),
        ),
        (
            "uuidmap_raft_leader_id",
            "The leader this member knows of (absent while none is known).",
            c.leader_id,
        ),
        (
            "uuidmap_raft_commit_index",
            "The last log index (LSN) this member knows committed.",
            c.commit_index,
        ),
        (
            "uuidmap_raft_applied_index",
            "The last log index (LSN) this member applied.",
            c.applied_index,
        ),
        (
            "uuidmap_raft_last_log_index",
            "The last index in this member's log.",
            c.last_log_index,
        ),
        (
            "uuidmap_raft_voters",
            "Voters in the membership in force.",
            Some(c.voters.len() as u64),
        ),
    ] {
        if let Some(v) = value {
            state.gauge(name, help, v as f64);
        }
    }
    state.gauges(
        "uuidmap_raft_role",
        "This member's role: 1 for the one it has.",
        ["role"],
        [
            Role::Leader,
            Role::SteppingDown,
            Role::Follower,
            Role::Candidate,
            Role::Learner,
            Role::Stopped,
        ]
        .map(|role| ([role.as_str()], f64::from(u8::from(c.role == role)))),
    );
    let k = &c.counts;
    for (name, help, value) in [
        (
            "uuidmap_raft_read_index_rounds_total",
            "Read-index rounds this member began for linearizable reads it could not answer \
             from its lease (one round serves every read waiting when it begins).",
            c.read_index_rounds,
        ),
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
        state.counter(name, help, value as f64);
    }
    state.gauges(
        "uuidmap_raft_follower_lag_entries",
        "On the leader: entries each other member lacks of its log.",
        ["node"],
        c.followers
            .iter()
            .map(|f| ([f.id.to_string()], f.lag as f64)),
    );
}

/// The recovery phases and the restart budget (see the table above).
fn render_restart(state: &StateSeries, durable: &DurableIndex, s: &DurableStats) {
    let report = durable.recovery_report();
    let p = &report.phases;
    state.gauges(
        "uuidmap_recovery_phase_seconds",
        "Time of each phase of the recovery this server started with.",
        ["phase"],
        [
            ("map", p.map),
            ("verify", p.verify),
            ("restore", p.restore),
            ("estimate", p.estimate),
            ("presize", p.presize),
            ("replay", p.replay),
        ]
        .map(|(phase, d)| ([phase], d.as_secs_f64())),
    );
    state.gauge(
        "uuidmap_recovery_replayed_ops",
        "WAL ops the recovery applied.",
        report.ops_replayed as f64,
    );
    state.gauges(
        "uuidmap_recovery_worker_seconds",
        "Time of each replay worker: presize, apply (not waiting), wall.",
        ["worker", "part"],
        p.workers.iter().enumerate().flat_map(|(i, w)| {
            [("presize", w.presize), ("apply", w.apply), ("wall", w.wall)]
                .map(|(part, d)| ([i.to_string(), part.to_string()], d.as_secs_f64()))
        }),
    );
    state.gauges(
        "uuidmap_recovery_worker_ops",
        "Ops each replay worker applied.",
        ["worker"],
        p.workers
            .iter()
            .enumerate()
            .map(|(i, w)| ([i.to_string()], w.ops as f64)),
    );
    if s.max_replay_ms > 0 {
        state.gauge(
            "uuidmap_replay_budget_seconds",
            "The restart budget (--max-replay-ms).",
            s.max_replay_ms as f64 / 1e3,
        );
    }
    for (name, help, value) in [
        (
            "uuidmap_replay_rate_bytes_per_second",
            "The WAL replay rate the restart budget assumes.",
            s.replay_bytes_per_sec,
        ),
        (
            "uuidmap_snapshot_trigger_wal_bytes",
            "WAL bytes after which a snapshot is taken.",
            s.snapshot_trigger_bytes,
        ),
    ] {
        if value > 0 {
            state.gauge(name, help, value as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text keeps the Prometheus text format and names the recorder
    /// writes: `# HELP` and `# TYPE` before each family, names as given
    /// (no `_total` added to a counter), seconds as fractions, and a
    /// family with no series left out.
    #[test]
    fn state_series_are_written_in_the_prometheus_text_format() {
        let state = StateSeries::new();
        state.counter("uuidmap_wal_bytes", "WAL bytes.", 4096.0);
        state.gauge("uuidmap_entries", "Entries.", 3.0);
        state.counters(
            "uuidmap_write_step_seconds_total",
            "Steps.",
            ["step"],
            [(["queue"], 0.25), (["call"], 1.5)],
        );
        state.gauges(
            "uuidmap_recovery_worker_seconds",
            "Workers.",
            ["worker", "part"],
            [(["0", "wall"], 0.125)],
        );
        state.gauges(
            "uuidmap_raft_follower_lag_entries",
            "Lags.",
            ["node"],
            std::iter::empty::<([&str; 1], f64)>(),
        );
        let text = state.text();
        for line in [
            "# HELP uuidmap_wal_bytes WAL bytes.",
            "# TYPE uuidmap_wal_bytes counter",
            "uuidmap_wal_bytes 4096",
            "# TYPE uuidmap_entries gauge",
            "uuidmap_entries 3",
            "# TYPE uuidmap_write_step_seconds_total counter",
            "uuidmap_write_step_seconds_total{step=\"queue\"} 0.25",
            "uuidmap_write_step_seconds_total{step=\"call\"} 1.5",
            "# TYPE uuidmap_recovery_worker_seconds gauge",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
        // The labels come in the library's order (by name); a scraper
        // reads them in any order.
        assert!(
            text.contains("uuidmap_recovery_worker_seconds{part=\"wall\",worker=\"0\"} 0.125"),
            "{text}"
        );
        assert!(!text.contains("follower_lag"), "{text}");
        // Every sample follows its family's TYPE line.
        let mut typed = None;
        for line in text.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                typed = t.split(' ').next();
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert_eq!(
                    Some(name),
                    typed,
                    "{line} is not under its TYPE in:\n{text}"
                );
            }
        }
    }

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
        let state = StateSeries::new();
        render_cluster(&state, &status);
        let out = state.text();
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
        let state = StateSeries::new();
        render_cluster(
            &state,
            &ClusterStatus {
                role: Role::Follower,
                leader_id: None,
                followers: vec![],
                ..status
            },
        );
        let out = state.text();
        assert!(!out.contains("uuidmap_raft_leader_id"), "{out}");
        assert!(!out.contains("follower_lag"), "{out}");
        assert!(
            out.contains("uuidmap_raft_role{role=\"follower\"} 1"),
            "{out}"
        );
    }
}
