//! The cluster crate's tests, one binary with a module per subject (it
//! links once). The rig is `uuidmap-testkit` (a group in one process, the
//! fault proxy, the simulated disk); nothing here needs the server.
//!
//! - The log store: `log_store` (openraft's conformance suite and more),
//!   `log_crash` (power loss), `raft_wire` (every message through protobuf
//!   and back).
//! - Members over the real index: `index_group`, `three_nodes` (elections,
//!   replication, a member added after compaction), `snapshots`,
//!   `snapshot_crash`, `install_stream` (bad `InstallSnapshot` streams),
//!   `raft_tls` (mTLS on the Raft port).
//! - Faults: `partition` and `read_index` (every link through a
//!   `FaultProxy`), `lease_safety`, `damaged_vote`, `identity_crash`,
//!   `replaced_directory`.
//!
//! Proptest keeps its regressions in `tests/proptest-regressions/`
//! (beside this directory: proptest's default for a source under a
//! `main.rs`).

mod damaged_vote;
mod identity_crash;
mod index_group;
mod install_stream;
mod lease_safety;
mod log_crash;
mod log_store;
mod partition;
mod raft_tls;
mod raft_wire;
mod read_index;
mod replaced_directory;
mod snapshot_crash;
mod snapshots;
mod three_nodes;
