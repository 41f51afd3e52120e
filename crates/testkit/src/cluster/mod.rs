//! A replica group in one process, for the cluster crate's tests and the
//! Raft benches: [`KvMachine`] (a small state machine whose snapshots are
//! files) and [`Member`] (a member on a loopback port with the product's
//! log store, network and timing); [`ReplicaNode`] (a whole member over
//! the real index).

mod kv_machine;
mod member;
mod replica_node;

pub use kv_machine::{KvMachine, KvSnapshot, KvState};
pub use member::{Member, leader};
pub use replica_node::{ReplicaNode, writable_leader};
