//! One process at a time writes a data directory, through the binary: a
//! second `uuidmap serve` or a `uuidmap repair` on a directory in use is
//! refused (a read-only `uuidmap check` runs beside it) with a message that
//! names the directory and the holder's PID, the holder goes on serving,
//! and a holder killed with SIGKILL leaves no stale lock behind. (The same
//! for a second `DurableIndex`: the engine's `tests/engine/dir_lock.rs`.)

use super::serve_child::{ServeChild, clear_uuidmap_env, client, run_to_exit, serve_command};

const KEY: &str = "6f9619ff-8b86-d011-b42d-00c04fc964ff";
const VALUE: &str = "00000000-0000-4000-8000-00000000000a";

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
