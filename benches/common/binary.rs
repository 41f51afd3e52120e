//! The `uuidmap` binary that the process benches (`server`, `replay`)
//! start. The benches are a package of their own, and cargo's
//! `CARGO_BIN_EXE_*` only names binaries of the same package, so the bench
//! asks cargo to build the binary (a no-op when it is up to date) into the
//! bench's own profile directory and runs it from there. Included with
//! `#[path = "../common/binary.rs"] mod binary;`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds `uuidmap` (release) beside this bench's executable and returns
/// its path. Panics, saying why, if cargo cannot build it.
pub fn uuidmap_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the bench's own path");
    // target/release/deps/<bench>-<hash> → target/release
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the bench runs from target/<profile>/deps");
    let target_dir = profile_dir.parent().expect("target/<profile>");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "uuidmap",
            "--bin",
            "uuidmap",
        ])
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .expect("running cargo to build the uuidmap binary");
    assert!(
        status.success(),
        "cargo could not build the uuidmap binary ({status})"
    );
    let binary = target_dir.join("release").join("uuidmap");
    assert!(
        binary.exists(),
        "{} is missing after the build",
        binary.display()
    );
    binary
}
