//! One process at a time writes a data directory: a second `DurableIndex`
//! on a directory in use is refused with a message that names the directory
//! and the holder's PID, until the first is dropped or shut down. (The same
//! through the binary, `serve`, `repair` and `check`: the root package's
//! `tests/server/dir_lock_process.rs`.)

use std::path::PathBuf;
use std::sync::Arc;

use uuidmap_engine::store::{DirLockError, StoreError};
use uuidmap_engine::writer::{DurableConfig, DurableIndex, WriteOp};
use uuidmap_index::Key;
use uuidmap_testkit_io::SimIo;

const KEY: &str = "6f9619ff-8b86-d011-b42d-00c04fc964ff";
const VALUE: &str = "00000000-0000-4000-8000-00000000000a";

fn quiet(config: &mut DurableConfig) {
    config.snapshot_every = None;
    config.snapshot_on_shutdown = false;
    config.wal_preallocate = uuidmap_engine::store::wal::Preallocate::Off;
}

#[test]
fn a_second_open_of_a_directory_is_refused_naming_it_and_the_pid_until_the_first_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = DurableConfig::new(dir.path());
    quiet(&mut config);
    let first = DurableIndex::open(config.clone()).unwrap();
    let lsn = first
        .writes()
        .write_blocking(vec![WriteOp::Put {
            key: Key::new(KEY.parse().unwrap()).unwrap(),
            value: VALUE.parse().unwrap(),
        }])
        .unwrap()
        .lsn;

    let refused = DurableIndex::open(config.clone()).err().expect("refused");
    assert!(
        matches!(
            &refused,
            StoreError::DirLock(DirLockError::InUse { pid: Some(p), .. }) if *p == std::process::id()
        ),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(
        message.contains(&dir.path().display().to_string())
            && message.contains(&format!("PID {}", std::process::id())),
        "{message}"
    );
    // The refusal touched nothing: the first goes on writing.
    first
        .writes()
        .write_blocking(vec![WriteOp::Delete {
            key: Key::new(VALUE.parse().unwrap()).unwrap(),
        }])
        .unwrap();

    drop(first);
    let second = DurableIndex::open(config).expect("free once the first is dropped");
    assert!(second.watermark().current() > lsn);
}

#[test]
fn on_the_simulated_disk_the_lock_is_in_memory_and_released_by_shutdown() {
    let io = SimIo::new();
    let mut config = DurableConfig::new(PathBuf::from("/data"));
    config.io = Arc::new(io.clone());
    quiet(&mut config);
    let first = DurableIndex::open(config.clone()).unwrap();
    assert!(matches!(
        DurableIndex::open(config.clone()),
        Err(StoreError::DirLock(DirLockError::InUse { .. }))
    ));
    assert!(
        !uuidmap_engine::store::Io::list(&io, "/data".as_ref())
            .unwrap()
            .iter()
            .any(|name| name == "LOCK"),
        "no lock file on the simulated disk"
    );
    // A restarted disk (a crash) has no holder.
    DurableIndex::open({
        let mut c = config.clone();
        c.io = Arc::new(io.restart(1));
        c
    })
    .expect("a restart finds no lock");
    first.shutdown();
    DurableIndex::open(config).expect("free after shutdown");
}

#[test]
fn shutdown_through_a_shared_handle_releases_the_directory_while_other_handles_live_and_is_idempotent()
 {
    let dir = tempfile::tempdir().unwrap();
    let mut config = DurableConfig::new(dir.path());
    quiet(&mut config);
    config.snapshot_on_shutdown = true;
    let first = Arc::new(DurableIndex::open(config.clone()).unwrap());
    // A straggler (a connection the server has stopped serving) still
    // holds a handle.
    let straggler = first.clone();
    let lsn = first
        .writes()
        .write_blocking(vec![WriteOp::Put {
            key: Key::new(KEY.parse().unwrap()).unwrap(),
            value: VALUE.parse().unwrap(),
        }])
        .unwrap()
        .lsn;

    let outcome = first.shutdown().expect("a final snapshot was configured");
    assert_eq!(outcome.expect("the final snapshot is taken").lsn, lsn);
    assert!(
        first.shutdown().is_none(),
        "a second shutdown has nothing to stop"
    );
    assert!(straggler.shutdown().is_none());
    // Writes are refused, reads still answer from the final state.
    let refused = straggler
        .writes()
        .write_blocking(vec![WriteOp::Delete {
            key: Key::new(KEY.parse().unwrap()).unwrap(),
        }])
        .unwrap_err();
    assert!(
        matches!(refused, uuidmap_engine::writer::WriteError::ShuttingDown),
        "{refused:?}"
    );
    assert_eq!(
        straggler.index().get(&KEY.parse().unwrap()),
        Some(VALUE.parse().unwrap())
    );
    // The directory is free although both handles are alive, and holds
    // the write.
    let second = DurableIndex::open(config).expect("free after shutdown");
    assert_eq!(
        second.index().get(&KEY.parse().unwrap()),
        Some(VALUE.parse().unwrap())
    );
    drop((first, straggler));
}
