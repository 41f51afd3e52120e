//! What the restart benches (`replay`, `restart_scale`) share: the data
//! (random keys, a snapshot and a WAL tail written through the durable
//! writer), and one restart of `uuidmap serve` as a process, timed from
//! exec to the first `Get` answered right. Included with
//! `#[path = "common/restart.rs"] mod restart;`.

// Each bench uses a different part of these helpers.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap::writer::{DurableConfig, DurableIndex, FsyncPolicy, Key, WriteOp};
/// The tests' and benches' one generator (testkit's splitmix64).
use uuidmap_testkit::data::mix;

/// Puts per `Write` batch when the data is made.
pub const BATCH: u64 = 100_000;

/// Key `i` of the data.
pub fn key(i: u64) -> Uuid {
    Uuid::from_u64_pair(mix(i) | 1, mix(!i))
}

/// The value key `i` is first written with.
pub fn value(i: u64) -> Uuid {
    Uuid::from_u64_pair(i, mix(i ^ 0x5555))
}

/// The value the `j`-th update of the data writes.
pub fn update_value(j: u64) -> Uuid {
    Uuid::from_u64_pair(!j, mix(j ^ 0xaaaa))
}

/// A durable index in `dir` that writes at memory speed: fsync `never`,
/// no snapshot unless asked, none at shutdown, no replay budget.
pub fn open_unsynced(dir: &Path) -> DurableIndex {
    let mut config = DurableConfig::new(dir);
    config.pipeline.policy = FsyncPolicy::Never;
    config.pipeline.snapshot_every_bytes = 0;
    config.pipeline.max_batch_ops = BATCH as usize;
    config.snapshot_every = None;
    config.snapshot_on_shutdown = false;
    config.max_replay = None;
    DurableIndex::open(config).expect("opening the store")
}

/// Writes `(key, value)` for every `i` in `range`, in batches of
/// [`BATCH`].
pub fn write_range(
    durable: &DurableIndex,
    range: std::ops::Range<u64>,
    op: impl Fn(u64) -> (Uuid, Uuid),
) {
    let mut i = range.start;
    while i < range.end {
        let n = BATCH.min(range.end - i);
        let batch = (i..i + n)
            .map(|j| {
                let (k, v) = op(j);
                WriteOp::Put {
                    key: Key::new(k).expect("bench keys are never reserved"),
                    value: v,
                }
            })
            .collect();
        durable.writes().write_blocking(batch).expect("writing");
        i += n;
    }
}

/// Copies the files of `from` (not its lock) into `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() && entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// A loopback port free now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The median of `v`.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `v` as "a, b, c" (whole numbers).
pub fn each(v: &[f64]) -> String {
    v.iter()
        .map(|t| format!("{t:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What one restart measured.
pub struct Restarted {
    /// Exec to the first `Get` answered right.
    pub took: Duration,
    /// The server's `Stats.restart`, if it reports it.
    pub stats: Option<pb::RestartStats>,
    /// The server's (minor, major) page faults at that moment.
    pub faults: Option<(u64, u64)>,
}

/// A running process's (minor, major) page faults, from `/proc`.
fn process_faults(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces and
    // parentheses): state, ppid, pgrp, session, tty, tpgid, flags, minflt,
    // cminflt, majflt.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f.get(7)?.parse().ok()?, f.get(9)?.parse().ok()?))
}

/// One restart of `bin` on `dir` (used as it is: give it a fresh copy):
/// exec until the first `Get` of `probe` answers `expected`. The server is
/// killed (`SIGKILL`) after.
pub fn restart_on(
    rt: &tokio::runtime::Runtime,
    bin: &Path,
    dir: &Path,
    probe: Uuid,
    expected: Uuid,
) -> Restarted {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let mut child: Child = Command::new(bin)
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--listen", &addr, "--metrics-listen", "off"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the server");
    let url = format!("http://{addr}");
    let (took, stats) = rt.block_on(async {
        loop {
            if started.elapsed() > Duration::from_secs(300) {
                panic!("the server did not answer within 5 minutes");
            }
            let Ok(mut client) = UuidMapClient::connect(url.clone()).await else {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            };
            let Ok(got) = client
                .get(pb::GetRequest {
                    key: probe.as_bytes().to_vec().into(),
                    min_lsn: 0,
                    ..Default::default()
                })
                .await
            else {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            };
            let took = started.elapsed();
            let got = got.into_inner().value.expect("the probe key is there");
            assert_eq!(&got[..], expected.as_bytes(), "wrong value");
            let stats = client
                .stats(pb::StatsRequest {})
                .await
                .ok()
                .and_then(|s| s.into_inner().restart);
            break (took, stats);
        }
    });
    let faults = process_faults(child.id());
    let _ = child.kill();
    let _ = child.wait();
    Restarted {
        took,
        stats,
        faults,
    }
}
