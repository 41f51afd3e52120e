//! uuidmap's test rig, kept out of the product (`publish = false`): the
//! simulated disk that crashes, tears writes, fails fsyncs and fills up
//! ([`SimIo`]); the deterministic write batches of the crash tests and the
//! child process they kill ([`crashtest`], `src/bin/crash-child.rs`); and
//! the one deterministic data generator of the tests and benches
//! ([`data`], splitmix64); and the end-to-end tests' server rig
//! ([`server`]: a real server on a loopback port, raw gRPC calls, metrics
//! scraping, throw-away certificates), and a TCP proxy that cuts, swallows,
//! blackholes and delays on command ([`proxy`]); hosts in network
//! namespaces on one bridge, for faults between machines ([`netns`]); and
//! a linearizability checker for
//! histories of independent registers ([`linearizability`]), for the fault
//! tests of replication; and a replica group in one process
//! ([`cluster`]); and damage to a WAL on the real disk ([`wal_damage`]). The product's crates never depend on it; their tests do.

#![warn(missing_docs, unreachable_pub)]

pub mod cluster;
pub mod crashtest;
pub mod data;
pub mod linearizability;
pub mod netns;
pub mod proxy;
pub mod server;
pub mod sim_io;
pub mod wal_damage;

pub use sim_io::SimIo;
