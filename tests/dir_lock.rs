//! One process per data directory: a second server on the same directory
//! would hand out the same LSNs and lose half of the acknowledged writes.
//! The lock is a `flock` on `LOCK`, so a killed holder frees it.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuidmap::store::{SimIo, StoreError};
use uuidmap::writer::{DurableConfig, DurableIndex};

fn open(io: &SimIo) -> Result<DurableIndex, StoreError> {
    let mut c = DurableConfig::new("/data");
    c.io = Arc::new(io.clone());
    c.snapshot_every = None;
    DurableIndex::open(c)
}

#[test]
fn a_second_open_of_a_directory_is_refused_until_the_first_lets_go() {
    let io = SimIo::new();
    let first = open(&io).unwrap();
    let err = open(&io).err().expect("refused");
    assert!(matches!(err, StoreError::DirLocked { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("/data") && message.contains("in use"),
        "{message}"
    );
    first.shutdown();
    open(&io).expect("free again once the first is gone");
}

fn serve(dir: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_uuidmap"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
        ])
        .arg("--data-dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the server wrote its PID into the lock file (it holds the
/// lock from then on).
fn wait_for_lock(dir: &std::path::Path, pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let lock: PathBuf = dir.join("LOCK");
    while std::fs::read_to_string(&lock)
        .ok()
        .map(|s| s.trim().to_string())
        != Some(pid.to_string())
    {
        assert!(Instant::now() < deadline, "the server never took the lock");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_second_server_on_a_directory_exits_naming_it_and_the_holder_and_kill_9_frees_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut first = serve(dir);
    wait_for_lock(dir, first.id());

    let second = serve(dir).wait_with_output().unwrap();
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains(&dir.display().to_string()), "{err}");
    assert!(err.contains(&format!("PID {}", first.id())), "{err}");
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first keeps serving"
    );

    // SIGKILL: the kernel drops the flock with the process.
    first.kill().unwrap();
    first.wait().unwrap();
    let mut third = serve(dir);
    wait_for_lock(dir, third.id());
    assert!(third.try_wait().unwrap().is_none());
    third.kill().unwrap();
    third.wait().unwrap();
    let mut rest = String::new();
    if let Some(mut e) = third.stderr.take() {
        let _ = e.read_to_string(&mut rest);
    }
    assert!(!rest.contains("in use"), "{rest}");
}
