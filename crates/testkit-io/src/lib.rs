//! uuidmap's I/O test rig, kept out of the product (`publish = false`) and
//! depending on nothing above the engine, so that the engine's own tests
//! take it without compiling the server: the simulated disk that crashes,
//! tears writes, fails fsyncs and fills up ([`SimIo`]); the deterministic
//! write batches of the crash tests and the child process they kill
//! ([`crashtest`], `src/bin/crash-child.rs`); the one deterministic data
//! generator of the tests and benches ([`data`], splitmix64); damage to a
//! WAL ([`wal_damage`]); and what several tests of the engine and of the
//! binary share: a model of the map and the batches written into it
//! ([`batch_model`]), a directory whose every state is known
//! ([`grouped_writes`]), the replay tests' keys and table comparison
//! ([`replay_data`]). The server and cluster rig, `uuidmap-testkit`,
//! re-exports all of it.

#![warn(missing_docs, unreachable_pub)]

pub mod batch_model;
pub mod crashtest;
pub mod data;
pub mod grouped_writes;
pub mod replay_data;
pub mod sim_io;
pub mod wal_damage;

pub use sim_io::SimIo;
