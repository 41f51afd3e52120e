//! The markdown the bench prints: the machine and command, one row per load
//! phase, one per scan, and the targets with verdicts.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::load::Outcome;

/// One closed-loop phase.
pub struct Row {
    /// `uuidmap` or `Redis`.
    pub system: &'static str,
    /// `Ping`, `Get`, `BatchGet`, `GET`.
    pub operation: &'static str,
    /// Keys per call (1 for `Get`, the batch size, the pipeline depth).
    pub per_call: usize,
    pub callers: usize,
    pub connections: usize,
    pub outcome: Outcome,
}

/// One scan phase (repeated while its time lasts).
pub struct ScanRow {
    /// `full` or `filtered (k values)`.
    pub what: String,
    pub splits: u32,
    /// Entries each run returned.
    pub returned: u64,
    /// Entries each run examined (all of them).
    pub examined: u64,
    /// Messages each run received.
    pub messages: u64,
    /// The wall time of each run.
    pub runs: Vec<Duration>,
    /// Server CPU over all runs.
    pub server_cpu: Duration,
}

impl ScanRow {
    pub fn best(&self) -> Duration {
        self.runs.iter().copied().min().unwrap_or_default()
    }

    pub fn median(&self) -> Duration {
        let mut runs = self.runs.clone();
        runs.sort();
        runs.get(runs.len() / 2).copied().unwrap_or_default()
    }

    /// Entries examined per second in the best run.
    pub fn examined_per_sec(&self) -> f64 {
        self.examined as f64 / self.best().as_secs_f64()
    }
}

/// Everything one run measured.
pub struct Report {
    pub entries: usize,
    pub command: String,
    pub timing: crate::load::Timing,
    pub load_ours: Duration,
    pub load_redis: Option<Duration>,
    pub rss_ours: Option<u64>,
    /// Resident again after this long idle since the load ended.
    pub rss_ours_idle: (Duration, Option<u64>),
    pub rss_redis: Option<u64>,
    /// Redis resident after the same idle time as `rss_ours_idle`.
    pub rss_redis_idle: Option<u64>,
    pub redis_version: Option<String>,
    pub loadavg_before: String,
    pub loadavg_after: String,
    pub rows: Vec<Row>,
    pub scans: Vec<ScanRow>,
}

/// Full scan target: 10M entries in 1 s.
const SCAN_TARGET: f64 = 10e6;
/// Filtered scan target: entries examined per second.
const FILTERED_TARGET: f64 = 50e6;

impl Report {
    /// The markdown.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let n = crate::common::label(self.entries);
        let _ = writeln!(s, "### Server, {n} entries\n");
        let _ = writeln!(
            s,
            "**Machine:** {} cores (`nproc`), {}. **Date:** {}. **Load average** before / after: {} / {}.  ",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model(),
            utc_now(),
            self.loadavg_before,
            self.loadavg_after,
        );
        let _ = writeln!(s, "**Command:** `{}`  ", self.command);
        let _ = writeln!(
            s,
            "**Phases:** closed loop, {:.1} s warm-up then {:.1} s measured; the client is this bench (tokio, one worker per core) on the same cores as the servers.  ",
            self.timing.warmup.as_secs_f64(),
            self.timing.measure.as_secs_f64()
        );
        let _ = writeln!(
            s,
            "**Load:** uuidmap {n} entries by `Write` batches in {:.2} s ({:.2} M/s), resident {} right after and {} after {:.0} s idle; Redis{} by pipelined `SET`s in {}, resident {} right after and {} after the same {:.0} s idle.\n",
            self.load_ours.as_secs_f64(),
            self.entries as f64 / self.load_ours.as_secs_f64() / 1e6,
            mib(self.rss_ours),
            mib(self.rss_ours_idle.1),
            self.rss_ours_idle.0.as_secs_f64(),
            self.redis_version
                .as_deref()
                .map(|v| {
                    // `Redis server v=7.0.15 sha=...`: the version only.
                    let short = v.split_whitespace().find_map(|w| w.strip_prefix("v="));
                    format!(" {}", short.unwrap_or(v))
                })
                .unwrap_or_default(),
            self.load_redis
                .map_or("–".into(), |d| format!("{:.2} s", d.as_secs_f64())),
            mib(self.rss_redis),
            mib(self.rss_redis_idle),
            self.rss_ours_idle.0.as_secs_f64(),
        );

        let _ = writeln!(
            s,
            "| server | call | keys/call | callers | connections | calls/s | keys/s | p50 µs | p99 µs | p99.9 µs | server CPU µs/call | server CPU (cores) | client CPU µs/call |"
        );
        let _ = writeln!(
            s,
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for r in &self.rows {
            let o = &r.outcome;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.2} | {:.1} |",
                r.system,
                r.operation,
                r.per_call,
                r.callers,
                r.connections,
                thousands(o.ops_per_sec()),
                if r.per_call == 0 {
                    "–".into()
                } else {
                    thousands(o.keys_per_sec())
                },
                micros(o.latency(0.5)),
                micros(o.latency(0.99)),
                micros(o.latency(0.999)),
                o.server_cpu_per_op().as_secs_f64() * 1e6,
                o.server_cpu.as_secs_f64() / o.elapsed.as_secs_f64(),
                o.client_cpu_per_op().as_secs_f64() * 1e6,
            );
        }

        let _ = writeln!(
            s,
            "\n| scan | splits | entries returned | entries examined | messages | best s | median s (runs) | examined/s (best) | server CPU ns/entry |"
        );
        let _ = writeln!(
            s,
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for r in &self.scans {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.3} | {:.3} ({}) | {} | {:.1} |",
                r.what,
                r.splits,
                thousands(r.returned as f64),
                thousands(r.examined as f64),
                r.messages,
                r.best().as_secs_f64(),
                r.median().as_secs_f64(),
                r.runs.len(),
                thousands(r.examined_per_sec()),
                r.server_cpu.as_secs_f64() * 1e9 / (r.examined as f64 * r.runs.len() as f64),
            );
        }

        let _ = writeln!(s, "\n| target | measured | verdict |");
        let _ = writeln!(s, "| --- | --- | --- |");
        for (target, measured, verdict) in self.targets() {
            let _ = writeln!(s, "| {target} | {measured} | {verdict} |");
        }
        s
    }

    /// (target, measured, verdict) rows.
    fn targets(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        let find = |system: &str, op: &str, per_call: usize, callers: usize| {
            self.rows.iter().find(|r| {
                r.system == system
                    && r.operation == op
                    && r.per_call == per_call
                    && r.callers == callers
            })
        };
        let callers: Vec<usize> = self
            .rows
            .iter()
            .filter(|r| r.operation == "Get")
            .map(|r| r.callers)
            .collect();
        for &c in &callers {
            let get_row = &find("uuidmap", "Get", 1, c).expect("a Get row").outcome;
            let get = get_row.ops_per_sec();
            // The CPU each server spent per call: less sensitive than the
            // rates to other work on the machine taking CPU from the server.
            let cpu = |o: &Outcome| o.server_cpu_per_op().as_secs_f64() * 1e6;
            if let Some(ping) = find("uuidmap", "Ping", 0, c) {
                let ping_rate = ping.outcome.ops_per_sec();
                out.push((
                    format!("`Get` ≥ 0.9× `Ping`, {c} callers"),
                    format!(
                        "{} vs {} calls/s = {:.2}×; server CPU {:.1} vs {:.1} µs/call",
                        thousands(get),
                        thousands(ping_rate),
                        get / ping_rate,
                        cpu(get_row),
                        cpu(&ping.outcome)
                    ),
                    verdict(get / ping_rate, 0.9),
                ));
            }
            if let Some(redis) = find("Redis", "GET", 1, c) {
                let redis_rate = redis.outcome.ops_per_sec();
                out.push((
                    format!("`Get` ≥ Redis `GET`, {c} callers"),
                    format!(
                        "{} vs {} calls/s = {:.2}×; server CPU {:.1} vs {:.1} µs/call",
                        thousands(get),
                        thousands(redis_rate),
                        get / redis_rate,
                        cpu(get_row),
                        cpu(&redis.outcome)
                    ),
                    verdict(get / redis_rate, 1.0),
                ));
            }
        }
        let best_pipelined = self
            .rows
            .iter()
            .filter(|r| r.system == "Redis" && r.per_call > 1)
            .max_by(|a, b| {
                a.outcome
                    .keys_per_sec()
                    .total_cmp(&b.outcome.keys_per_sec())
            });
        if let Some(p) = best_pipelined {
            let redis = p.outcome.keys_per_sec();
            let mut sizes: Vec<usize> = self
                .rows
                .iter()
                .filter(|r| r.operation == "BatchGet")
                .map(|r| r.per_call)
                .collect();
            sizes.dedup();
            for size in sizes {
                let best = self
                    .rows
                    .iter()
                    .filter(|r| r.operation == "BatchGet" && r.per_call == size)
                    .max_by(|a, b| {
                        a.outcome
                            .keys_per_sec()
                            .total_cmp(&b.outcome.keys_per_sec())
                    })
                    .expect("a BatchGet row");
                let ours = best.outcome.keys_per_sec();
                out.push((
                    format!("`BatchGet` {size} ≥ 5× Redis `-P {}` keys/s", p.per_call),
                    format!(
                        "{} keys/s ({} callers) vs {} ({} connections) = {:.2}×",
                        thousands(ours),
                        best.callers,
                        thousands(redis),
                        p.callers,
                        ours / redis
                    ),
                    verdict(ours / redis, 5.0),
                ));
            }
        }
        let best_scan = |filtered: bool| {
            self.scans
                .iter()
                .filter(|r| r.what.starts_with("filtered") == filtered)
                .max_by(|a, b| a.examined_per_sec().total_cmp(&b.examined_per_sec()))
        };
        if let Some(full) = best_scan(false) {
            let rate = full.examined_per_sec();
            out.push((
                "full `Scan` of 10M ≤ 1 s (10M entries/s)".into(),
                format!(
                    "{} entries in {:.3} s ({} split{}) = {} entries/s; 10M would take {:.2} s",
                    thousands(full.examined as f64),
                    full.best().as_secs_f64(),
                    full.splits,
                    if full.splits == 1 { "" } else { "s" },
                    thousands(rate),
                    10e6 / rate
                ),
                verdict(rate / SCAN_TARGET, 1.0),
            ));
        }
        if let Some(filtered) = best_scan(true) {
            let rate = filtered.examined_per_sec();
            out.push((
                "filtered `Scan` ≥ 50M entries examined/s".into(),
                format!(
                    "{} examined/s ({}, {} split{})",
                    thousands(rate),
                    filtered.what,
                    filtered.splits,
                    if filtered.splits == 1 { "" } else { "s" },
                ),
                verdict(rate / FILTERED_TARGET, 1.0),
            ));
        }
        out
    }
}

/// "met (1.23×)" or "missed by 12 %" for `measured` against `target`.
fn verdict(measured: f64, target: f64) -> String {
    if measured >= target {
        format!("**met** ({:.2}× the target)", measured / target)
    } else {
        format!("**missed** by {:.0} %", (1.0 - measured / target) * 100.0)
    }
}

/// `1234567.8` as `1,234,568`.
pub fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 100.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("–".into(), |b| {
        format!("{:.0} MiB", b as f64 / (1 << 20) as f64)
    })
}

/// The first `model name` of `/proc/cpuinfo`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// The 1-minute load average.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// Now, as `2026-11-22 06:30 UTC`.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's days-to-civil, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rem / 3_600,
        rem % 3_600 / 60
    )
}
