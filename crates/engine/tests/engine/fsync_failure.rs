//! A failed WAL fsync is fatal ("fsyncgate"): Linux may drop the pages of a
//! failed fsync and mark them clean, so a later fsync that succeeds proves
//! nothing. The simulated disk does exactly that: the failed fsync's writes
//! never reach the disk, though reads still see them.

use std::sync::Arc;

use uuid::Uuid;
use uuidmap_engine::store::wal::Preallocate;
use uuidmap_engine::writer::{DurableConfig, DurableIndex, FsyncPolicy, WriteError, WriteOp};
use uuidmap_index::Key;
use uuidmap_testkit_io::SimIo;

fn open(io: &SimIo) -> DurableIndex {
    let mut c = DurableConfig::new("/data");
    c.io = Arc::new(io.clone());
    c.snapshot_every = None;
    c.pipeline.policy = FsyncPolicy::Always;
    // Counts fsyncs: no spare file made in between.
    c.wal_preallocate = Preallocate::Off;
    DurableIndex::open(c).unwrap()
}

fn put(k: u128) -> Vec<WriteOp> {
    vec![WriteOp::Put {
        key: Key::new(Uuid::from_u128(k)).unwrap(),
        value: Uuid::from_u128(k + 1000),
    }]
}

#[test]
fn after_a_failed_fsync_nothing_more_is_acknowledged_and_every_acknowledged_write_survives() {
    let io = SimIo::new();
    let d = open(&io);
    for k in 1..=20 {
        d.writes().write_blocking(put(k)).unwrap();
    }
    assert!(d.wal_failure().is_none());
    io.set_sync_failure_after(Some(0));
    let failed = d.writes().write_blocking(put(21)).unwrap_err();
    assert!(matches!(failed, WriteError::WalFailed(_)), "{failed}");
    // Not retried as if nothing happened: every later write is refused,
    // though the disk's next fsync would succeed.
    for k in 22..=25 {
        let later = d.writes().write_blocking(put(k)).unwrap_err();
        assert!(matches!(later, WriteError::WalFailed(_)), "{later}");
        assert!(
            later.to_string().contains("accepts no more writes"),
            "{later}"
        );
    }
    assert!(
        d.wal_failure().is_some(),
        "the owner is told, to stop the process"
    );
    for k in 22..=25 {
        assert_eq!(d.index().get(&Uuid::from_u128(k)), None, "never applied");
    }
    drop(d);

    // After a power loss, every acknowledged write is there, and nothing
    // refused after the failure; the failed one may or may not be.
    for seed in 0..8 {
        let d = open(&io.restart(seed));
        for k in 1..=20 {
            assert_eq!(
                d.index().get(&Uuid::from_u128(k)),
                Some(Uuid::from_u128(k + 1000))
            );
        }
        for k in 22..=25 {
            assert_eq!(d.index().get(&Uuid::from_u128(k)), None);
        }
        // And the directory takes writes again after the restart.
        let lsn = d.writes().write_blocking(put(30)).unwrap().lsn;
        assert!(lsn >= 21);
    }
}
