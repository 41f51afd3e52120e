//! A full disk: writes fail with an error that says so, reads keep working,
//! nothing acknowledged is lost, and writes resume by themselves once space
//! returns. Snapshots fail cleanly too, keeping the previous one.

use std::path::PathBuf;
use std::sync::Arc;

use uuid::Uuid;
use uuidmap_engine::store::wal::Preallocate;
use uuidmap_engine::writer::{DurableConfig, DurableIndex, WriteError, WriteOp};
use uuidmap_index::Key;
use uuidmap_testkit_io::SimIo;

fn key(i: u64) -> Uuid {
    Uuid::from_u128(0xd15c_0000_0000_0000_0000_0000_0000_0000 | (i as u128 + 1))
}

fn config(io: &SimIo) -> DurableConfig {
    let mut c = DurableConfig::new(PathBuf::from("/data"));
    c.io = Arc::new(io.clone());
    c.snapshot_every = None;
    c.pipeline.snapshot_every_bytes = 0;
    c.wal_segment_bytes = 4096;
    // The capacity arithmetic below leaves no room for a spare file.
    c.wal_preallocate = Preallocate::Off;
    c
}

fn put(d: &DurableIndex, i: u64) -> Result<u64, WriteError> {
    d.writes()
        .write_blocking(vec![WriteOp::Put {
            key: Key::new(key(i)).unwrap(),
            value: key(i + 1000),
        }])
        .map(|o| o.lsn)
}

#[test]
fn a_full_disk_refuses_writes_clearly_keeps_reads_and_recovers() {
    let io = SimIo::new();
    let durable = DurableIndex::open(config(&io)).unwrap();
    for i in 0..50 {
        put(&durable, i).unwrap();
    }
    durable
        .snapshot_now_blocking()
        .expect("a snapshot with room to spare");
    // Fill the disk: allow only a little more than what is there.
    io.set_capacity(Some(io.used_bytes() + 100));
    let mut acked = 50;
    let error = loop {
        match put(&durable, acked) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 10_000, "the disk never filled");
    };
    let message = error.to_string();
    assert!(matches!(error, WriteError::Wal(_)), "{message}");
    assert!(
        message.contains("disk is full"),
        "the error should say the disk is full: {message}"
    );
    // True of a running writer, so said to its callers.
    assert!(message.contains("writes resume by themselves"), "{message}");
    // Reads go on, and see every acknowledged write but not the refused one.
    for i in 0..acked {
        assert_eq!(durable.index().get(&key(i)), Some(key(i + 1000)), "key {i}");
    }
    assert_eq!(durable.index().get(&key(acked)), None);
    // A snapshot cannot be written either; it says why.
    let snap = durable
        .snapshot_now_blocking()
        .expect_err("no room for a snapshot");
    assert!(snap.to_string().contains("disk is full"), "{snap}");
    assert!(
        !snap.to_string().contains("resume"),
        "not about writes: {snap}"
    );
    // Still full: still refused, still nothing lost.
    assert!(put(&durable, acked).is_err());
    // Space returns: writes resume with no restart.
    io.set_capacity(None);
    let lsn = put(&durable, acked).expect("writes resume once there is space");
    acked += 1;
    assert!(lsn > 50);
    durable
        .snapshot_now_blocking()
        .expect("snapshots resume too");
    for i in acked..acked + 20 {
        put(&durable, i).unwrap();
    }
    acked += 20;
    drop(durable);
    // Everything acknowledged survives a crash after all this.
    let reopened = DurableIndex::open(config(&io.restart(7))).unwrap();
    for i in 0..acked {
        assert_eq!(
            reopened.index().get(&key(i)),
            Some(key(i + 1000)),
            "key {i} after restart"
        );
    }
    assert_eq!(reopened.index().len() as u64, acked);
}

#[test]
fn shutdown_reports_a_final_snapshot_the_full_disk_refused_and_loses_nothing() {
    let io = SimIo::new();
    let durable = DurableIndex::open(config(&io)).unwrap();
    for i in 0..50 {
        put(&durable, i).unwrap();
    }
    // Not a byte more: the final snapshot cannot be written.
    io.set_capacity(Some(io.used_bytes()));
    let outcome = durable
        .shutdown()
        .expect("a final snapshot is configured by default");
    let error = outcome.expect_err("no room for the final snapshot");
    assert!(error.is_disk_full(), "{error}");

    // The WAL holds every acknowledged write, even after a power loss.
    io.set_capacity(None);
    let reopened = DurableIndex::open(config(&io.restart(3))).unwrap();
    assert_eq!(reopened.index().len(), 50);
    // With room, shutdown reports the snapshot it took, at the last LSN.
    let info = reopened.shutdown().unwrap().expect("room to spare");
    assert_eq!(info.lsn, 50);

    let mut off = config(&io);
    off.snapshot_on_shutdown = false;
    let quiet = DurableIndex::open(off).unwrap();
    assert!(quiet.shutdown().is_none(), "no final snapshot asked for");
}
