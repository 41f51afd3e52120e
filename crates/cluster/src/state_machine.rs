//! [`IndexStateMachine`]: openraft's state machine over the index. It
//! hands committed entries to the replica writer thread
//! (`uuidmap_engine::writer::ReplicaPipeline`), which alone changes the
//! index, and answers each entry's proposer with its LSN
//! (docs/replication.md, section 3.3).
//!
//! - A normal entry's ops are applied with its log index as their LSN, if
//!   the entry continues its leader's chain of proposals; otherwise it is
//!   *void* on every replica (the writer's module docs, "The proposal
//!   chain"), and its proposer learns that it was not applied.
//! - A membership entry is recorded for [`applied_state`]; a blank entry
//!   changes nothing. Both move the applied LSN on.
//!
//! Snapshots are stage 5 of the plan: until then this machine has none
//! and builds none. openraft is configured never to ask on its own
//! (`timing::raft_config`: `SnapshotPolicy::Never`), and no log is ever
//! purged, so a restarted member rebuilds its index by applying its
//! committed log again, from the start.
//!
//! [`applied_state`]: RaftStateMachine::applied_state

use futures_util::StreamExt;
use openraft::EntryPayload;
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use uuidmap_engine::writer::{CommittedEntry, ReplicaControl};

use crate::snapshot_file::SnapshotFile;
use crate::types::{CommittedLeaderId, LogId, SnapshotMeta, StoredMembership};
use crate::{Applied, ClusterNode, UuidmapRaft};

/// A snapshot of the index, as a file.
pub type IndexSnapshot = Snapshot<CommittedLeaderId, u64, ClusterNode, SnapshotFile>;

/// Entries handed to the writer in one message, at most: a long catch-up
/// is applied (and made visible) in steps.
const APPLY_CHUNK: usize = 1024;

/// openraft's state machine over the index (module docs).
pub struct IndexStateMachine {
    control: ReplicaControl,
    applied: Option<LogId>,
    membership: StoredMembership,
}

impl IndexStateMachine {
    /// The machine that applies through `control`, over an index that
    /// holds nothing yet.
    pub fn new(control: ReplicaControl) -> IndexStateMachine {
        IndexStateMachine {
            control,
            applied: None,
            membership: StoredMembership::default(),
        }
    }
}

fn writer_stopped(e: impl std::error::Error + Send + Sync + 'static) -> std::io::Error {
    std::io::Error::other(e)
}

/// The entries of one chunk on their way to the writer, and whom to
/// answer once it applied them.
#[derive(Default)]
struct Chunk {
    entries: Vec<CommittedEntry>,
    responders: Vec<(u64, openraft::storage::ApplyResponder<UuidmapRaft>)>,
    last: Option<LogId>,
    membership: Option<StoredMembership>,
}

impl IndexStateMachine {
    /// Has the writer apply `chunk`, then records it and answers its
    /// proposers.
    async fn apply_chunk(&mut self, chunk: &mut Chunk) -> Result<(), std::io::Error> {
        let outcome = self
            .control
            .apply(std::mem::take(&mut chunk.entries))
            .await
            .map_err(writer_stopped)?;
        if let Some(last) = chunk.last.take() {
            self.applied = Some(last);
        }
        if let Some(membership) = chunk.membership.take() {
            self.membership = membership;
        }
        let mut void = outcome.void.iter().peekable();
        for (lsn, responder) in chunk.responders.drain(..) {
            while void.next_if(|&&v| v < lsn).is_some() {}
            let is_void = void.next_if_eq(&&lsn).is_some();
            responder.send(Applied { lsn, void: is_void });
        }
        Ok(())
    }
}

impl RaftStateMachine<UuidmapRaft> for IndexStateMachine {
    type SnapshotData = SnapshotFile;
    type SnapshotBuilder = NoSnapshotYet;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), std::io::Error> {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<S>(&mut self, mut entries: S) -> Result<(), std::io::Error>
    where
        S: futures_util::Stream<Item = Result<EntryResponder<UuidmapRaft>, std::io::Error>>
            + Unpin
            + Send,
    {
        let mut chunk = Chunk::default();
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let lsn = entry.log_id.index;
            let batch = match &entry.payload {
                EntryPayload::Normal(batch) => {
                    let mut ops = Vec::with_capacity(batch.op_count());
                    batch.decode_into(&mut ops);
                    Some((batch.seq(), ops))
                }
                EntryPayload::Membership(m) => {
                    chunk.membership = Some(StoredMembership::new(Some(entry.log_id), m.clone()));
                    None
                }
                EntryPayload::Blank => None,
            };
            chunk.entries.push(CommittedEntry {
                lsn,
                term: entry.log_id.leader_id.term,
                batch,
            });
            chunk.last = Some(entry.log_id);
            if let Some(r) = responder {
                chunk.responders.push((lsn, r));
            }
            if chunk.entries.len() >= APPLY_CHUNK {
                self.apply_chunk(&mut chunk).await?;
            }
        }
        if !chunk.entries.is_empty() {
            self.apply_chunk(&mut chunk).await?;
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> NoSnapshotYet {
        NoSnapshotYet
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        _file: SnapshotFile,
    ) -> Result<(), std::io::Error> {
        Err(std::io::Error::other(format!(
            "this member cannot install a snapshot yet (up to {:?}): snapshots of a replica group \
             are stage 5 of docs/replication.md",
            meta.last_log_id
        )))
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<IndexSnapshot>, std::io::Error> {
        Ok(None)
    }
}

/// The snapshot builder until stage 5: never asked for (module docs), and
/// says so if it is.
pub struct NoSnapshotYet;

impl RaftSnapshotBuilder<UuidmapRaft> for NoSnapshotYet {
    type SnapshotData = SnapshotFile;

    async fn build_snapshot(&mut self) -> Result<IndexSnapshot, std::io::Error> {
        Err(std::io::Error::other(
            "a replica group member builds no snapshot yet (stage 5 of docs/replication.md)",
        ))
    }
}
