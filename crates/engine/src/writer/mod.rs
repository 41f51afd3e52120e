//! The single-writer pipeline over a durable store.
//!
//! - `policy`: [`FsyncPolicy`].
//! - `request`: [`WriteOp`], [`WriteOutcome`], [`WriteError`].
//! - `pipeline`: the writer thread, group commit, [`WriteHandle`].
//! - `sync_thread`: the thread that fsyncs one group while the next is
//!   written.
//! - `snapshotter`: the snapshot thread and its triggers.
//! - `take_snapshot_error`: [`TakeSnapshotError`], why a snapshot asked
//!   for was not taken.
//! - `durable_index`: [`DurableIndex`], recovery plus both threads.
//! - `replica_pipeline`: [`ReplicaPipeline`], the writer thread of a
//!   replica group member: decides what the leader proposes, applies what
//!   the group committed.
//! - `proposal_chain`: [`ProposalChain`], which of a leader's batch
//!   entries every replica applies.
//! - `writer_loop`: the one loop of a writer thread, over either log.
//! - `read_lease`: [`ReadLease`], whether a member that believes it leads
//!   may answer a read.
//! - `lease_clock`: the clocks a lease is measured on (CLOCK_BOOTTIME, and
//!   the suspend fence).
//! - `changes`: [`ChangeReader`], the applied batches read back from the
//!   log for change streams (a member's log holds entries that changed
//!   nothing, which it skips).

mod changes;
mod core;
mod durable_index;
mod handle;
mod lease_clock;
mod overlay;
mod pipeline;
mod policy;
mod proposal_chain;
mod read_lease;
mod replica_pipeline;
mod request;
mod running;
mod snapshotter;
mod sync_thread;
mod take_snapshot_error;
mod writer_loop;

pub use changes::ChangeReader;
pub use durable_index::{
    DEFAULT_MAX_REPLAY, DurableConfig, DurableIndex, DurableStats, IndexRef, MemberFollowStart,
    MemberLog, MemberLogSteps, ReplicaStart, SnapshotRequests,
};
pub use handle::{PipelineExit, PipelineStats, WriteHandle, WriteSteps};
pub use pipeline::{Pipeline, PipelineConfig, PipelineFailure, VOUCH_AFTER_IDLE};
pub use policy::{BadFsyncPolicy, FsyncPolicy};
pub use proposal_chain::{CONFIRM_FLAG, ProposalChain, proposal_epoch};
pub use read_lease::{LeaseAck, ReadLease, ReadRefused};
pub use replica_pipeline::{
    ApplyOutcome, CommittedEntry, DecidedBatch, LoadedSnapshot, Proposer, ReplicaControl,
    ReplicaIndex, ReplicaPipeline, WriteReply, WriterStopped,
};
pub use request::{LeaderHint, WriteError, WriteOp, WriteOutcome};
pub use snapshotter::{
    DEFAULT_REPLAY_BYTES_PER_SEC, MIN_BUDGET_TRIGGER_BYTES, ReplayBudget, SnapshotResult,
    SnapshotStats,
};
pub use take_snapshot_error::TakeSnapshotError;
/// The key type of [`WriteOp`]: a UUID checked once to be storable.
pub use uuidmap_index::Key;
