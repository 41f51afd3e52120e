//! A replica group of uuidmap servers, replicated with openraft
//! (docs/replication.md is the design; ARCHITECTURE.md says why openraft
//! 0.10 and why it is pinned).
//!
//! Everything that names an openraft type lives in this crate, so that an
//! upgrade of the pinned alpha touches nothing else.
//!
//! - [`types`]: the type configuration ([`UuidmapRaft`]) and short names for
//!   the openraft types it makes.
//! - [`node`]: a member's addresses and incarnation ([`ClusterNode`]).
//! - [`identity`]: a data directory's node id and incarnation, and why a
//!   member whose directory was replaced is refused by its group.
//! - [`raft_batch`]: what one log entry carries ([`RaftBatch`]) and what applying
//!   it answers ([`Applied`]).
//! - [`log_store`]: openraft's log storage on our WAL and `raft-state`
//!   file ([`log_store::WalLogStore`]).
//! - [`state_machine`]: openraft's state machine over the index
//!   ([`state_machine::IndexStateMachine`]), applied by the engine's
//!   replica writer thread.
//! - [`leadership`]: the writer's proposals into openraft, and the
//!   leadership changes it hears of.
//! - [`membership`]: adding, promoting and removing members, on the
//!   leader.
//! - [`rejoin`]: a member whose vote is not trusted (its `raft-state` was
//!   found damaged) votes for no one until its group has made it a
//!   learner and promoted it back.
//!   leader; [`transfer`]: handing the leadership to another voter
//!   without breaking the read lease.
//! - [`vote_guard`]: when a member may vote (the hold after a restart,
//!   and which leader-transfer elections its leader authorized).
//! - [`counters`]: what happened to a member's Raft, as counters.
//! - [`replica`]: a whole member ([`replica::Replica`]): index, writer,
//!   log, openraft and the tasks between them.
//! - [`network`]: how a member calls the others (openraft's network over
//!   tonic), and [`raft_service`]: what it serves them; [`raft_tls`]: mTLS
//!   on the Raft port, and the node id a member's certificate proves.
//! - [`read_index`]: the read index of linearizable reads on a member
//!   without a lease (ReadIndex, one round for every waiting read), and
//!   [`staleness`]: how stale a member's applied state may be.
//! - [`snapshot_file`]: a snapshot as a file, and its Raft meta file.
//! - [`snapshot_task`]: when a member takes a snapshot.
//! - [`cluster_status`]: a member's view of its group, in plain types.
//! - [`timing`]: openraft's configuration: timings for a busy machine, and
//!   snapshots and purges left to our snapshotter.
//! - [`raft_wire`]: the conversions between those types and the messages of the
//!   `uuidmap.raft.v1` service, and [`WireError`] for what does not convert.
//!
//! Stages 0–4 and 7 of the plan, most of 3, parts of 6, 8 and 9 (see
//! docs/replication.md); the server starts a member with `serve
//! --node-id` (the server crate's `serve_member` module).

#![warn(missing_docs, unreachable_pub)]

pub mod cluster_status;
pub mod counters;
pub mod identity;
pub mod leadership;
pub mod log_store;
pub mod membership;
pub mod network;
pub mod node;
pub mod raft_batch;
pub mod raft_service;
pub mod raft_tls;
pub mod raft_wire;
pub mod read_index;
pub mod rejoin;
pub mod replica;
pub mod snapshot_file;
pub mod snapshot_task;
pub mod staleness;
pub mod state_machine;
pub mod timing;
pub mod transfer;
pub mod types;
pub mod vote_guard;
pub mod wire_error;

pub use node::ClusterNode;
pub use raft_batch::{Applied, RaftBatch};
pub use raft_wire::{FromWire, ToWire, WireError};
pub use types::UuidmapRaft;
