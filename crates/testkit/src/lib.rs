//! uuidmap's test rig for the server and the replica group, kept out of
//! the product (`publish = false`): the end-to-end tests' server rig
//! ([`server`]: a real server on a loopback port, raw gRPC calls, metrics
//! scraping, throw-away certificates), and a TCP proxy that cuts, swallows,
//! blackholes and delays on command ([`proxy`]); hosts in network
//! namespaces on one bridge, for faults between machines ([`netns`]);
//! loopback ports for child servers that no `bind(0)` takes meanwhile
//! ([`ports`]); and a linearizability checker for
//! histories of independent registers ([`linearizability`]), for the fault
//! tests of replication; and a replica group in one process
//! ([`cluster`]). The I/O rig below it (`uuidmap-testkit-io`: the simulated
//! disk [`SimIo`], the crash child, [`data`], [`wal_damage`]) is re-exported
//! here, so that a test above the engine names one rig. The product's
//! crates never depend on it; their tests do.

#![warn(missing_docs, unreachable_pub)]

pub mod cluster;
pub mod etcd;
pub mod linearizability;
pub mod netns;
pub mod ports;
pub mod proxy;
pub mod server;

pub use uuidmap_testkit_io::{
    SimIo, batch_model, crashtest, data, grouped_writes, replay_data, wal_damage,
};
