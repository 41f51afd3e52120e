//! One process at a time writes a data directory: a second `DurableIndex`,
//! a second `uuidmap serve` or a `uuidmap repair` on a directory in use is
//! refused (a read-only `uuidmap check` runs beside it) with a message that names the directory and the holder's PID,
//! the holder goes on serving, and a holder killed with SIGKILL leaves no
//! stale lock behind.

mod serve_child;

use std::path::PathBuf;
use std::sync::Arc;

use serve_child::{ServeChild, clear_uuidmap_env, client, run_to_exit, serve_command};
use uuidmap::Key;
use uuidmap::store::{DirLockError, StoreError};
use uuidmap::writer::{DurableConfig, DurableIndex, WriteOp};
use uuidmap_testkit::SimIo;

const KEY: &str = "6f9619ff-8b86-d011-b42d-00c04fc964ff";
const VALUE: &str = "00000000-0000-4000-8000-00000000000a";

fn quiet(config: &mut DurableConfig) {
    config.snapshot_every = None;
    config.snapshot_on_shutdown = false;
    config.wal_preallocate = uuidmap::store::wal::Preallocate::Off;
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
        !uuidmap::store::Io::list(&io, "/data".as_ref())
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
        matches!(refused, uuidmap::writer::WriteError::ShuttingDown),
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

#[test]
fn a_second_serve_on_a_directory_in_use_exits_non_zero_naming_the_holder_and_the_first_keeps_serving()
 {
    let dir = tempfile::tempdir().unwrap();
    let mut first = ServeChild::start(serve_command(dir.path()));
    let (code, _, err) = client(&first.url(), &["put", KEY, VALUE]);
    assert_eq!(code, Some(0), "{err}");

    let (status, log) = run_to_exit(serve_command(dir.path()));
    assert_eq!(status.code(), Some(1), "{log}");
    let expected = format!(
        "data directory {} is in use by another uuidmap process (PID {}); stop it first",
        dir.path().display(),
        first.child.id()
    );
    assert!(log.contains(&expected), "{log}");

    // `repair` writes the directory: refused too.
    let mut repair = std::process::Command::new(env!("CARGO_BIN_EXE_uuidmap"));
    clear_uuidmap_env(&mut repair);
    repair.arg("repair").arg("--data-dir").arg(dir.path());
    let (status, log) = run_to_exit(repair);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains(&expected), "{log}");
    // `check` changes no file: it runs beside the server.
    let mut check = std::process::Command::new(env!("CARGO_BIN_EXE_uuidmap"));
    clear_uuidmap_env(&mut check);
    check.arg("check").arg("--data-dir").arg(dir.path());
    let (status, log) = run_to_exit(check);
    assert_eq!(status.code(), Some(0), "{log}");

    // The first goes on reading and writing.
    assert!(first.running());
    let (code, out, err) = client(&first.url(), &["get", KEY]);
    assert_eq!((code, out.trim()), (Some(0), VALUE), "{err}");
    let (code, out, err) = client(&first.url(), &["del", KEY]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "lsn 2\n");
    let (status, log) = first.stop();
    assert!(status.success(), "{log}");
}

#[test]
fn a_serve_killed_with_sigkill_leaves_no_lock_and_a_new_one_starts() {
    let dir = tempfile::tempdir().unwrap();
    let first = ServeChild::start(serve_command(dir.path()));
    let (code, _, err) = client(&first.url(), &["put", KEY, VALUE]);
    assert_eq!(code, Some(0), "{err}");
    first.kill();
    assert!(
        dir.path().join("LOCK").exists(),
        "the file stays; only the lock goes"
    );

    let second = ServeChild::start(serve_command(dir.path()));
    let (code, out, err) = client(&second.url(), &["get", KEY]);
    assert_eq!(
        (code, out.trim()),
        (Some(0), VALUE),
        "the acknowledged write survives: {err}"
    );
    let (status, log) = second.stop();
    assert!(status.success(), "{log}");
}
