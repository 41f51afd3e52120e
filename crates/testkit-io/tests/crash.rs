//! Crash tests with a real process: a child writes batches with fsync policy
//! `always` from several threads (snapshots and WAL rotations running all
//! the while) and is killed with SIGKILL at a random moment. After each kill
//! the directory is recovered and checked:
//!
//! - every acknowledged batch is there, with the last acknowledged values;
//! - every batch is all or nothing (a writer's keys match the state after
//!   exactly its acknowledged batches, or after one more: the batch in
//!   flight when the kill came);
//! - the child process restarts every time, and finds the same state.
//!
//! Every other run overlaps fsyncs (the child's even seeds), so both
//! write pipelines are killed.
//!
//! `cargo test --release --test crash` runs 50 kills; the ignored long run
//! (`-- --ignored`) runs `UUIDMAP_CRASH_ITERS` (default 500).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use uuid::Uuid;
use uuidmap_engine::store::OsIo;
use uuidmap_engine::store::recovery::{RecoveryOptions, recover};
use uuidmap_testkit_io::crashtest::{self, KEYS_PER_WRITER};
use uuidmap_testkit_io::data::mix;

const WRITERS: u32 = 4;

#[test]
fn sigkill_during_writes_and_snapshots_loses_no_acknowledged_batch() {
    kill_loop(50);
}

#[test]
#[ignore = "long run: UUIDMAP_CRASH_ITERS kills (default 500)"]
fn sigkill_long_run() {
    let iters = std::env::var("UUIDMAP_CRASH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    kill_loop(iters);
}

fn kill_loop(iterations: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut model: HashMap<Uuid, Uuid> = HashMap::new();
    let mut total_acks = 0u64;
    for iteration in 0..iterations {
        let seed = iteration + 1;
        let (mut child, lines) = start_child(dir.path(), seed);
        let ready = lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!(
                    "iteration {iteration}: child did not start: {}",
                    stderr(&mut child)
                )
            });
        let entries: usize = ready
            .strip_prefix("ready ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("iteration {iteration}: unexpected first line {ready:?}"));
        assert_eq!(
            entries,
            model.len(),
            "iteration {iteration}: the restarted child sees another state"
        );
        // Let it write for a random while, then kill it.
        let ms = 5 + mix(seed) % 60;
        std::thread::sleep(Duration::from_millis(ms));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        // Only a death by our SIGKILL counts: a child that exited (with an
        // error or not) or crashed by itself found a bug, and must not pass
        // as killed. It logs nothing (RUST_LOG=off), so anything on stderr
        // is a panic or an error report.
        let err = stderr(&mut child);
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "iteration {iteration}: the child was not killed by SIGKILL but ended by itself \
             ({status}): {err}"
        );
        assert!(
            err.is_empty(),
            "iteration {iteration}: the child wrote to stderr before the kill: {err}"
        );
        let mut acked: HashMap<u32, u64> = HashMap::new();
        while let Ok(line) = lines.recv_timeout(Duration::from_secs(5)) {
            let mut f = line.split(' ');
            if f.next() != Some("ack") {
                continue;
            }
            let (Some(w), Some(seq)) = (f.next(), f.next()) else {
                continue;
            };
            let (Ok(w), Ok(seq)) = (w.parse::<u32>(), seq.parse::<u64>()) else {
                continue;
            };
            let e = acked.entry(w).or_insert(0);
            *e = (*e).max(seq + 1);
            total_acks += 1;
        }
        check_recovered(dir.path(), seed, &acked, &mut model, iteration);
    }
    eprintln!("{iterations} kills, {total_acks} acknowledged batches");
    assert!(
        total_acks > iterations,
        "the children acknowledged too little to test anything: {total_acks}"
    );
}

/// Recovers the directory in this process and checks it against the model,
/// which it then advances to the recovered state.
fn check_recovered(
    dir: &Path,
    seed: u64,
    acked: &HashMap<u32, u64>,
    model: &mut HashMap<Uuid, Uuid>,
    iteration: u64,
) {
    let recovered = recover(&OsIo, dir, &RecoveryOptions::default())
        .unwrap_or_else(|e| panic!("iteration {iteration}: recovery failed: {e}"));
    let index = recovered.index;
    for w in 0..WRITERS {
        let acked_batches = acked.get(&w).copied().unwrap_or(0);
        let mut state: HashMap<Uuid, Uuid> = (0..KEYS_PER_WRITER)
            .map(|k| crashtest::key(w, k))
            .filter_map(|k| model.get(&k).map(|v| (k, *v)))
            .collect();
        for seq in 0..acked_batches {
            crashtest::apply(&mut state, &crashtest::batch(seed, w, seq, |_| None));
        }
        let mut one_more = state.clone();
        crashtest::apply(
            &mut one_more,
            &crashtest::batch(seed, w, acked_batches, |_| None),
        );
        let found: HashMap<Uuid, Uuid> = (0..KEYS_PER_WRITER)
            .map(|k| crashtest::key(w, k))
            .filter_map(|k| index.get(&k).map(|v| (k, v)))
            .collect();
        let matched = if found == state {
            state
        } else if found == one_more {
            one_more
        } else {
            panic!(
                "iteration {iteration}, writer {w}: recovered keys match neither the {acked_batches} \
                 acknowledged batches nor one more batch:\nfound    {found:?}\nexpected {state:?}"
            );
        };
        for k in 0..KEYS_PER_WRITER {
            let k = crashtest::key(w, k);
            match matched.get(&k) {
                Some(v) => model.insert(k, *v),
                None => model.remove(&k),
            };
        }
    }
    assert_eq!(
        index.len(),
        model.len(),
        "iteration {iteration}: entries outside the writers' keys"
    );
}

/// Starts the child; its stdout lines arrive on the channel.
fn start_child(dir: &Path, seed: u64) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_crash-child"))
        .arg(dir)
        .arg(seed.to_string())
        .arg(WRITERS.to_string())
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting crash-child");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

fn stderr(child: &mut Child) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}
