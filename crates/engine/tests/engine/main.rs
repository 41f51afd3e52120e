//! The engine's tests, one binary with a module per subject (it links
//! once). They take the I/O rig (`uuidmap-testkit-io`: the simulated disk,
//! deterministic data) and nothing above the engine: `cargo test -p
//! uuidmap-engine` compiles no server. What needs the `uuidmap` binary
//! (a `serve` killed, `repair` and `check` run) is in the root package's
//! `tests/server/`.
//!
//! - `wal`, `raft_wal`, `snapshot`, `raft_state`: the files, each on the
//!   simulated disk; `replay`: parallel replay against serial; `repair`:
//!   a log shorter than its snapshot, and the repair.
//! - `pipeline`: the single writer as callers see it; `replica`: the
//!   replica writer; `dir_lock`: one process at a time.
//! - Crashes and damage: `fault_injection`, `power_loss`, `fsync_failure`,
//!   `disk_full`, `corruption`, `damage_campaign`.
//!
//! Proptest keeps its regressions in `tests/proptest-regressions/`
//! (beside this directory: proptest's default for a source under a
//! `main.rs`).

mod corruption;
mod damage_campaign;
mod dir_lock;
mod disk_full;
mod fault_injection;
mod fsync_failure;
mod pipeline;
mod power_loss;
mod raft_state;
mod raft_wal;
mod repair;
mod replay;
mod replica;
mod snapshot;
mod wal;
