//! A full disk: writes fail with an error that says so, reads keep working,
//! nothing acknowledged is lost, and writes resume by themselves once space
//! returns. Snapshots fail cleanly too, keeping the previous one.

use std::path::PathBuf;
use std::sync::Arc;

use uuid::Uuid;
use uuidmap::store::SimIo;
use uuidmap::writer::{DurableConfig, DurableIndex, WriteError, WriteOp};

fn key(i: u64) -> Uuid {
    Uuid::from_u128(0xd15c_0000_0000_0000_0000_0000_0000_0000 | (i as u128 + 1))
}

fn config(io: &SimIo) -> DurableConfig {
    let mut c = DurableConfig::new(PathBuf::from("/data"));
    c.io = Arc::new(io.clone());
    c.snapshot_every = None;
    c.pipeline.snapshot_every_bytes = 0;
    c.wal_segment_bytes = 4096;
    c
}

fn put(d: &DurableIndex, i: u64) -> Result<u64, WriteError> {
    d.writes()
        .write_blocking(vec![WriteOp::Put {
            key: key(i),
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
