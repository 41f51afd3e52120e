//! The markdown the bench prints: the machine and command, one row per load
//! phase, one per scan, and the targets with verdicts. Every phase
//! ran once per round (see `rounds`): a row gives the median of its rounds
//! and, where shown, their range; a target is judged on medians, never on
//! a best run.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::load::Outcome;

/// The median of some rounds' values, and their range.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// Of `values` (at least one; zeros if none). With an even count the
    /// median is the mean of the two middle values.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return Spread {
                median: 0.0,
                min: 0.0,
                max: 0.0,
            };
        }
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Spread {
            median,
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    /// `min–max`, each written by `f`.
    fn range(&self, f: impl Fn(f64) -> String) -> String {
        format!("{}–{}", f(self.min), f(self.max))
    }
}

/// One closed-loop phase, run once per round.
pub struct Row {
    /// `uuidmap` or `Redis`.
    pub system: &'static str,
    /// `Ping`, `Get`, `BatchGet`, `GET`.
    pub operation: &'static str,
    /// Keys per call (1 for `Get`, the batch size, the pipeline depth).
    pub per_call: usize,
    pub callers: usize,
    pub connections: usize,
    /// What each round measured, in round order.
    pub runs: Vec<Outcome>,
}

impl Row {
    /// `f` of each round's outcome.
    pub fn spread(&self, f: impl Fn(&Outcome) -> f64) -> Spread {
        Spread::of(self.runs.iter().map(f))
    }

    pub fn calls_per_sec(&self) -> Spread {
        self.spread(Outcome::ops_per_sec)
    }

    pub fn keys_per_sec(&self) -> Spread {
        self.spread(Outcome::keys_per_sec)
    }

    /// The `q`-quantile latency of each round, in µs.
    pub fn latency_us(&self, q: f64) -> Spread {
        self.spread(|o| o.latency(q).as_secs_f64() * 1e6)
    }

    /// Server CPU per call of each round, in µs.
    pub fn server_cpu_us(&self) -> Spread {
        self.spread(|o| o.server_cpu_per_op().as_secs_f64() * 1e6)
    }
}

/// One run of a scan.
pub struct ScanRun {
    /// From the call to the end of the last stream.
    pub wall: Duration,
    /// Entries the server examined meanwhile (its
    /// `uuidmap_scan_entries_examined_total`, after minus before).
    pub examined: u64,
}

/// One scan, run once per round.
pub struct ScanRow {
    /// `full` or `filtered (k values)`.
    pub what: String,
    pub splits: u32,
    /// Entries each run returned.
    pub returned: u64,
    /// Messages the last run received.
    pub messages: u64,
    /// Each round's run, in round order.
    pub runs: Vec<ScanRun>,
    /// Server CPU over all runs.
    pub server_cpu: Duration,
}

impl ScanRow {
    /// Wall seconds of the runs.
    pub fn seconds(&self) -> Spread {
        Spread::of(self.runs.iter().map(|r| r.wall.as_secs_f64()))
    }

    /// Entries examined by the runs, as the server counted them.
    pub fn examined(&self) -> Spread {
        Spread::of(self.runs.iter().map(|r| r.examined as f64))
    }

    /// Entries examined per second, run by run.
    pub fn examined_per_sec(&self) -> Spread {
        Spread::of(
            self.runs
                .iter()
                .map(|r| r.examined as f64 / r.wall.as_secs_f64()),
        )
    }

    /// Server CPU per examined entry, over all runs, in ns.
    pub fn server_cpu_ns_per_entry(&self) -> f64 {
        let examined: u64 = self.runs.iter().map(|r| r.examined).sum();
        self.server_cpu.as_secs_f64() * 1e9 / examined.max(1) as f64
    }
}

/// Everything one run measured.
pub struct Report {
    pub entries: usize,
    pub command: String,
    pub timing: crate::load::Timing,
    /// Rounds every phase ran.
    pub rounds: usize,
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
            "**Rounds:** {r}. Every phase ran once per round, and the order of the phases rotated from round to round within each group (the phases at one caller count; the batch phases; the scans), so no phase always ran first. Each figure is the median of the {r} rounds; \"min–max\" is their range. The targets are judged on medians.  ",
            r = self.rounds
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
            "| server | call | keys/call | callers | connections | calls/s | calls/s min–max | keys/s | p50 µs | p99 µs | p99 µs min–max | p99.9 µs | server CPU µs/call | server CPU (cores) | client CPU µs/call |"
        );
        let _ = writeln!(
            s,
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for r in &self.rows {
            let calls = r.calls_per_sec();
            let p99 = r.latency_us(0.99);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.2} | {:.1} |",
                r.system,
                r.operation,
                r.per_call,
                r.callers,
                r.connections,
                thousands(calls.median),
                calls.range(thousands),
                if r.per_call == 0 {
                    "–".into()
                } else {
                    thousands(r.keys_per_sec().median)
                },
                micros(r.latency_us(0.5).median),
                micros(p99.median),
                p99.range(micros),
                micros(r.latency_us(0.999).median),
                r.server_cpu_us().median,
                r.spread(|o| o.server_cpu.as_secs_f64() / o.elapsed.as_secs_f64())
                    .median,
                r.spread(|o| o.client_cpu_per_op().as_secs_f64() * 1e6)
                    .median,
            );
        }

        let _ = writeln!(
            s,
            "\n| scan | splits | entries returned | entries examined (server's count) | messages | s | s min–max | examined/s | server CPU ns/entry |"
        );
        let _ = writeln!(
            s,
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for r in &self.scans {
            let examined = r.examined();
            let seconds = r.seconds();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.3} | {} | {} | {:.1} |",
                r.what,
                r.splits,
                thousands(r.returned as f64),
                if examined.min == examined.max {
                    thousands(examined.median)
                } else {
                    format!(
                        "{} ({})",
                        thousands(examined.median),
                        examined.range(thousands)
                    )
                },
                r.messages,
                seconds.median,
                seconds.range(|x| format!("{x:.3}")),
                thousands(r.examined_per_sec().median),
                r.server_cpu_ns_per_entry(),
            );
        }

        let _ = writeln!(
            s,
            "\n| target | measured (medians of {} rounds) | verdict |",
            self.rounds
        );
        let _ = writeln!(s, "| --- | --- | --- |");
        for (target, measured, verdict) in self.targets() {
            let _ = writeln!(s, "| {target} | {measured} | {verdict} |");
        }
        s
    }

    /// (target, measured, verdict) rows, each on medians over the rounds.
    /// Where a target names no caller count or split count, the row with
    /// the best median stands for the system.
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
            let get_row = find("uuidmap", "Get", 1, c).expect("a Get row");
            let get = get_row.calls_per_sec();
            // The CPU each server spent per call: less sensitive than the
            // rates to other work on the machine taking CPU from the server.
            let cpu = |r: &Row| r.server_cpu_us().median;
            if let Some(ping) = find("uuidmap", "Ping", 0, c) {
                let ping_rate = ping.calls_per_sec();
                out.push((
                    format!("`Get` ≥ 0.9× `Ping`, {c} callers"),
                    format!(
                        "{} vs {} calls/s = {:.2}× (ranges {} and {}); server CPU {:.1} vs {:.1} µs/call",
                        thousands(get.median),
                        thousands(ping_rate.median),
                        get.median / ping_rate.median,
                        get.range(thousands),
                        ping_rate.range(thousands),
                        cpu(get_row),
                        cpu(ping)
                    ),
                    verdict(get.median / ping_rate.median, 0.9),
                ));
            }
            if let Some(redis) = find("Redis", "GET", 1, c) {
                let redis_rate = redis.calls_per_sec();
                out.push((
                    format!("`Get` ≥ Redis `GET`, {c} callers"),
                    format!(
                        "{} vs {} calls/s = {:.2}× (ranges {} and {}); server CPU {:.1} vs {:.1} µs/call",
                        thousands(get.median),
                        thousands(redis_rate.median),
                        get.median / redis_rate.median,
                        get.range(thousands),
                        redis_rate.range(thousands),
                        cpu(get_row),
                        cpu(redis)
                    ),
                    verdict(get.median / redis_rate.median, 1.0),
                ));
            }
        }
        let by_median_keys =
            |a: &&Row, b: &&Row| a.keys_per_sec().median.total_cmp(&b.keys_per_sec().median);
        let pipelined = self
            .rows
            .iter()
            .filter(|r| r.system == "Redis" && r.per_call > 1)
            .max_by(by_median_keys);
        if let Some(p) = pipelined {
            let redis = p.keys_per_sec();
            let mut sizes: Vec<usize> = self
                .rows
                .iter()
                .filter(|r| r.operation == "BatchGet")
                .map(|r| r.per_call)
                .collect();
            sizes.dedup();
            for size in sizes {
                let row = self
                    .rows
                    .iter()
                    .filter(|r| r.operation == "BatchGet" && r.per_call == size)
                    .max_by(by_median_keys)
                    .expect("a BatchGet row");
                let ours = row.keys_per_sec();
                out.push((
                    format!("`BatchGet` {size} ≥ 5× Redis `-P {}` keys/s", p.per_call),
                    format!(
                        "{} keys/s ({} callers, range {}) vs {} ({} connections, range {}) = {:.2}×; each side at its caller count with the higher median",
                        thousands(ours.median),
                        row.callers,
                        ours.range(thousands),
                        thousands(redis.median),
                        p.callers,
                        redis.range(thousands),
                        ours.median / redis.median
                    ),
                    verdict(ours.median / redis.median, 5.0),
                ));
            }
        }
        let scan_row = |filtered: bool| {
            self.scans
                .iter()
                .filter(|r| r.what.starts_with("filtered") == filtered)
                .max_by(|a, b| {
                    a.examined_per_sec()
                        .median
                        .total_cmp(&b.examined_per_sec().median)
                })
        };
        let splits = |n: u32| format!("{n} split{}", if n == 1 { "" } else { "s" });
        if let Some(full) = scan_row(false) {
            let rate = full.examined_per_sec().median;
            let seconds = full.seconds();
            out.push((
                "full `Scan` of 10M ≤ 1 s (10M entries/s)".into(),
                format!(
                    "{} entries in {:.3} s (range {}, {}) = {} entries/s; 10M would take {:.2} s",
                    thousands(full.examined().median),
                    seconds.median,
                    seconds.range(|x| format!("{x:.3}")),
                    splits(full.splits),
                    thousands(rate),
                    10e6 / rate
                ),
                verdict(rate / SCAN_TARGET, 1.0),
            ));
        }
        if let Some(filtered) = scan_row(true) {
            let rate = filtered.examined_per_sec();
            out.push((
                "filtered `Scan` ≥ 50M entries examined/s".into(),
                format!(
                    "{} examined/s (range {}; {}, {}, examined as the server counted)",
                    thousands(rate.median),
                    rate.range(thousands),
                    filtered.what,
                    splits(filtered.splits),
                ),
                verdict(rate.median / FILTERED_TARGET, 1.0),
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

/// Microseconds, one decimal below 100.
fn micros(us: f64) -> String {
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
