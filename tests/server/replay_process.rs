//! WAL replay on every core gives exactly the serial result, after a real
//! crash: a `uuidmap serve` killed with SIGKILL. (Replay itself, and after
//! a stop that leaves the WAL behind: the engine's `tests/engine/replay.rs`.)

use std::collections::HashMap;
use std::time::Duration;

use uuid::Uuid;
use uuidmap::store::OsIo;
use uuidmap::store::recovery::{RecoveryOptions, recover};
use uuidmap::store::replay_apply::ReplayWorkers;
use uuidmap_testkit::replay_data::{assert_same_tables, key, value};

/// A real crash with a large WAL: `uuidmap serve` takes 600,000 puts and
/// deletes through `Write` batches while snapshots are triggered every
/// 8 MiB of WAL (fuzzy captures under writes), and is killed with SIGKILL
/// right after the last batch is acknowledged. The directory is then
/// recovered serially and in parallel: both hold every acknowledged write,
/// table for table alike.
#[test]
fn a_sigkilled_server_with_a_large_wal_recovers_alike_serially_and_in_parallel() {
    use uuidmap::server::proto::v1 as pb;
    use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;

    let dir = tempfile::tempdir().unwrap();
    let port = uuidmap_testkit::ports::unused_port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_uuidmap"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args([
            "--listen",
            &addr,
            "--metrics-listen",
            "off",
            "--fsync",
            "never",
        ])
        .args([
            "--snapshot-wal-bytes",
            "8388608",
            "--snapshot-interval",
            "off",
        ])
        .env("RUST_LOG", "off")
        .spawn()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut model: HashMap<Uuid, Uuid> = HashMap::new();
    let bytes = |u: Uuid| u.as_bytes().to_vec().into();
    rt.block_on(async {
        let mut client = loop {
            match UuidMapClient::connect(format!("http://{addr}")).await {
                Ok(c) => break c,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..60 {
            let mut ops = Vec::with_capacity(10_000);
            for _ in 0..10_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = key(x % 400_000);
                let op = if x.is_multiple_of(8) {
                    model.remove(&k);
                    pb::write_op::Op::Delete(pb::DeleteOp { key: bytes(k) })
                } else {
                    let v = value(x);
                    model.insert(k, v);
                    pb::write_op::Op::Put(pb::PutOp {
                        key: bytes(k),
                        value: bytes(v),
                    })
                };
                ops.push(pb::WriteOp { op: Some(op) });
            }
            client.write(pb::WriteRequest { ops }).await.unwrap();
        }
    });
    child.kill().unwrap();
    child.wait().unwrap();

    let mut results = Vec::new();
    for workers in [
        ReplayWorkers::Serial,
        ReplayWorkers::Threads(3),
        ReplayWorkers::PerCore,
    ] {
        let options = RecoveryOptions {
            read_only: true,
            replay_workers: workers,
            ..RecoveryOptions::default()
        };
        let r = recover(&OsIo, dir.path(), &options).unwrap();
        assert!(r.report.snapshot.is_some(), "snapshots were taken");
        assert!(r.report.ops_replayed > 0, "and the WAL after one replayed");
        assert_eq!(r.index.len(), model.len(), "{workers:?}");
        for (k, v) in &model {
            assert_eq!(r.index.get(k), Some(*v), "{workers:?}");
        }
        results.push((workers, r));
    }
    for (workers, r) in &results[1..] {
        assert_same_tables(&results[0].1.index, &r.index, &format!("{workers:?}"));
    }
}
