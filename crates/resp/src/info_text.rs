//! `INFO`: the gRPC `Stats` answer (the same function builds both:
//! `stats_answer::stats`) in INFO's text format, `# Section` lines and
//! `key:value` lines, each ending in CRLF.

use std::fmt::Write;

use uuidmap_proto::v1::StatsResponse;

/// The INFO text of the sections, in order: `server` (what answers),
/// `keyspace` (as Redis names the entry count, for the tools that read
/// it), `stats` (the index, the WAL and the snapshots), `restart` (the
/// last start) and, on a replica group member, `replication` (its view of
/// the group).
///
/// The INFO text of `s` for `section` (any case; `None`, `all`,
/// `everything` or `default`: every section). An unknown section is
/// empty, as in Redis.
pub fn info(s: &StatsResponse, section: Option<&str>, port: u16) -> String {
    let wants = |name: &str| {
        section.is_none_or(|w| {
            w.eq_ignore_ascii_case(name)
                || ["all", "everything", "default"]
                    .iter()
                    .any(|a| w.eq_ignore_ascii_case(a))
        })
    };
    let mut t = String::new();
    // Writing to a String cannot fail.
    let line = |t: &mut String, k: &str, v: &dyn std::fmt::Display| {
        let _ = write!(t, "{k}:{v}\r\n");
    };
    if wants("server") {
        t.push_str("# Server\r\n");
        line(&mut t, "uuidmap_version", &env!("CARGO_PKG_VERSION"));
        // The Redis version whose protocol we answer as (RESP2): clients
        // that check it see a version they speak with.
        line(&mut t, "redis_version", &"7.0.0");
        line(&mut t, "redis_mode", &"standalone");
        line(&mut t, "tcp_port", &port);
        t.push_str("\r\n");
    }
    if wants("keyspace") {
        t.push_str("# Keyspace\r\n");
        let _ = write!(t, "db0:keys={},expires=0,avg_ttl=0\r\n\r\n", s.entries);
    }
    if wants("stats") {
        t.push_str("# Stats\r\n");
        line(&mut t, "entries", &s.entries);
        line(&mut t, "table_bytes", &s.table_bytes);
        line(&mut t, "applied_lsn", &s.applied_lsn);
        line(&mut t, "wal_bytes", &s.wal_bytes);
        line(&mut t, "snapshots_taken", &s.snapshots_taken);
        line(&mut t, "snapshots_failed", &s.snapshots_failed);
        line(&mut t, "last_snapshot_lsn", &s.last_snapshot_lsn);
        if let Some(age) = s.snapshot_age_ms {
            line(&mut t, "snapshot_age_ms", &age);
        }
        line(
            &mut t,
            "last_snapshot_duration_us",
            &s.last_snapshot_duration_us,
        );
        line(&mut t, "wal_failures", &s.wal_failures);
        line(&mut t, "queued_batches", &s.queued_batches);
        t.push_str("\r\n");
    }
    if let Some(r) = s.restart.as_ref().filter(|_| wants("restart")) {
        t.push_str("# Restart\r\n");
        line(&mut t, "snapshot_used", &u8::from(r.snapshot_used));
        line(&mut t, "snapshot_lsn", &r.snapshot_lsn);
        line(&mut t, "map_us", &r.map_us);
        line(&mut t, "snapshot_read", &u8::from(r.snapshot_read));
        line(&mut t, "verify_us", &r.verify_us);
        line(&mut t, "restore_us", &r.restore_us);
        line(&mut t, "presize_us", &r.presize_us);
        line(&mut t, "replay_us", &r.replay_us);
        line(&mut t, "records_replayed", &r.records_replayed);
        line(&mut t, "bytes_replayed", &r.bytes_replayed);
        line(&mut t, "max_replay_ms", &r.max_replay_ms);
        t.push_str("\r\n");
    }
    if let Some(c) = s.cluster.as_ref().filter(|_| wants("replication")) {
        t.push_str("# Replication\r\n");
        line(&mut t, "node_id", &c.node_id);
        line(&mut t, "cluster_role", &c.role);
        line(&mut t, "term", &c.term);
        if let Some(l) = c.leader_id {
            line(&mut t, "leader_id", &l);
        }
        if let Some(u) = &c.leader_url {
            line(&mut t, "leader_url", u);
        }
        t.push_str("\r\n");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_has_sections_and_key_value_lines_and_a_section_can_be_asked_for() {
        let s = StatsResponse {
            entries: 42,
            applied_lsn: 7,
            ..StatsResponse::default()
        };
        let all = info(&s, None, 6380);
        for want in [
            "# Server\r\n",
            "# Keyspace\r\ndb0:keys=42,",
            "entries:42\r\n",
        ] {
            assert!(all.contains(want), "{all}");
        }
        assert!(all.contains("applied_lsn:7\r\n"));
        let only = info(&s, Some("KEYSPACE"), 6380);
        assert!(
            only.starts_with("# Keyspace") && !only.contains("# Stats"),
            "{only}"
        );
        assert_eq!(info(&s, Some("nothing"), 6380), "");
    }
}
