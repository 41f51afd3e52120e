//! `uuidmap serve` as a process: the snapshot and WAL options take effect
//! from the command line and the environment, and a stop whose final
//! snapshot fails says so, exits non-zero and loses nothing.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::serve_child::{ServeChild, run_to_exit, serve_command};
use prost::bytes::Bytes;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;

/// WAL bytes of one put (tag, key, value; see docs/format.md).
const PUT_BYTES: u64 = 33;

fn key(i: u64) -> Bytes {
    Bytes::copy_from_slice(
        uuid::Uuid::from_u128(0x5e7e_0000_0000_0000 | (i as u128 + 1)).as_bytes(),
    )
}

/// Puts keys `from..to` in Write batches of `batch`, one after the other
/// (so each batch is one WAL group).
async fn put_range(url: &str, from: u64, to: u64, batch: u64) {
    let mut c = UuidMapClient::connect(url.to_string()).await.unwrap();
    let mut i = from;
    while i < to {
        let end = (i + batch).min(to);
        let ops = (i..end)
            .map(|k| pb::WriteOp {
                op: Some(pb::write_op::Op::Put(pb::PutOp {
                    key: key(k),
                    value: key(k + 1),
                })),
            })
            .collect();
        c.write(pb::WriteRequest { ops }).await.unwrap();
        i = end;
    }
}

async fn entries(url: &str) -> u64 {
    let mut c = UuidMapClient::connect(url.to_string()).await.unwrap();
    c.stats(pb::StatsRequest {})
        .await
        .unwrap()
        .into_inner()
        .entries
}

fn snapshots(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".snap"))
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_small_snapshot_wal_bytes_makes_the_server_snapshot_after_that_many_wal_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = serve_command(dir.path());
    cmd.args(["--fsync", "never", "--snapshot-wal-bytes", "1048576"]);
    let server = ServeChild::start(cmd);
    let url = server.url();
    let rt = runtime();
    // About 0.6 MiB of WAL: below the trigger, no snapshot.
    let below = (600 << 10) / PUT_BYTES;
    rt.block_on(put_range(&url, 0, below, 5_000));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(snapshots(dir.path()), Vec::<String>::new(), "too early");
    // Past 1 MiB: a snapshot follows (the defaults, 256 MiB or 10 minutes,
    // would not take one in this test's life).
    let past = (1100 << 10) / PUT_BYTES;
    rt.block_on(put_range(&url, below, past, 5_000));
    let deadline = Instant::now() + Duration::from_secs(30);
    while snapshots(dir.path()).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no snapshot after {} WAL bytes:\n{}",
            past * PUT_BYTES,
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, log) = server.stop();
    assert!(status.success(), "{log}");
    assert!(log.contains("final snapshot taken"), "{log}");
}

#[test]
fn options_from_the_environment_are_checked_against_their_minimums() {
    let dir = tempfile::tempdir().unwrap();
    for (var, value, says) in [
        (
            "UUIDMAP_WAL_FILE_BYTES",
            "4096",
            "--wal-file-bytes must be at least 1048576",
        ),
        (
            "UUIDMAP_SNAPSHOT_WAL_BYTES",
            "4096",
            "--snapshot-wal-bytes must be at least 1048576",
        ),
        (
            "UUIDMAP_SNAPSHOT_INTERVAL",
            "0",
            "--snapshot-interval must be at least 1 second",
        ),
    ] {
        let mut cmd = serve_command(dir.path());
        cmd.env(var, value);
        let (status, log) = run_to_exit(cmd);
        assert_eq!(status.code(), Some(1), "{var}: {log}");
        assert!(log.contains(says) && log.contains(var), "{var}: {log}");
    }
    // Nothing was started: the directory was never created or locked.
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn a_stop_whose_final_snapshot_fails_exits_non_zero_says_nothing_is_lost_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Files may grow to 1.5 MiB: enough for every WAL file (1 MiB plus
    // one 5,000-put group), not for a snapshot of 100,000 entries (over
    // 3 MiB). A write past the limit fails with EFBIG: the final snapshot
    // fails as it would on a full disk.
    const FILE_LIMIT: libc::rlim_t = 1536 << 10;
    let mut cmd = serve_command(dir.path());
    cmd.args(["--fsync", "always", "--wal-file-bytes", "1048576"]);
    // SAFETY: between fork and exec the closure calls only setrlimit(2)
    // and signal(2), both async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: FILE_LIMIT,
                rlim_max: FILE_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Else the kernel kills the process at the limit (SIGXFSZ);
            // ignored, the write fails instead, and stays ignored after
            // exec.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let server = ServeChild::start(cmd);
    let url = server.url();
    let rt = runtime();
    let count = 100_000;
    rt.block_on(put_range(&url, 0, count, 5_000));
    let (status, log) = server.stop();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("the final snapshot failed") && log.contains("Nothing is lost"),
        "{log}"
    );
    assert!(!log.contains("final snapshot taken"), "{log}");

    // Without the limit: every acknowledged write is back (from the WAL).
    let server = ServeChild::start(serve_command(dir.path()));
    assert_eq!(rt.block_on(entries(&server.url())), count);
    let (status, log) = server.stop();
    assert!(status.success(), "{log}");
}
