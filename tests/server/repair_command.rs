//! A WAL that lost records a snapshot already holds, through the binary:
//! `uuidmap check` changes nothing and names the repair command; `uuidmap
//! repair --dry-run` reports what a repair would cut and changes nothing;
//! `uuidmap repair` does it, and the server's state then starts. (The
//! refusals and the repair itself: the engine's `tests/engine/repair.rs`.)

use std::process::Command;
use std::sync::Arc;

use uuidmap::store::OsIo;
use uuidmap_testkit::grouped_writes::{build, groups_of, open};
use uuidmap_testkit::wal_damage::cut_wal_after;

fn uuidmap(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_uuidmap"))
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

#[test]
fn check_names_the_repair_command_and_repair_dry_run_then_repair_get_the_directory_going() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let states = build(Arc::new(OsIo), dir);
    cut_wal_after(&OsIo, dir, 27);
    let d = dir.to_str().unwrap();

    let check = uuidmap(&["check", "--data-dir", d]);
    assert_eq!(check.status.code(), Some(1));
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(
        err.contains(&format!("uuidmap repair --data-dir {d} --dry-run")),
        "{err}"
    );

    let listing = || {
        let mut l: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        l.sort();
        l
    };
    let before = listing();
    let dry = uuidmap(&["repair", "--data-dir", d, "--dry-run"]);
    assert_eq!(dry.status.code(), Some(0), "{dry:?}");
    let out = String::from_utf8_lossy(&dry.stdout);
    assert!(out.contains("would be renamed *.beyond-log"), "{out}");
    assert!(out.contains("acknowledged writes lost"), "{out}");
    assert!(out.contains("LSN 28..=30"), "{out}");
    assert_eq!(listing(), before, "the dry run changed nothing");

    let repair = uuidmap(&["repair", "--data-dir", d]);
    assert_eq!(repair.status.code(), Some(0), "{repair:?}");
    let check = uuidmap(&["check", "--data-dir", d]);
    assert_eq!(check.status.code(), Some(0), "{check:?}");
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(out.contains("last LSN          27"), "{out}");
    let again = uuidmap(&["repair", "--data-dir", d, "--dry-run"]);
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("nothing to repair"),
        "{again:?}"
    );
    let d = open(Arc::new(OsIo), dir).unwrap();
    assert_eq!(groups_of(&d.index()), states[27]);
}
