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
//! - An entry is applied only once it is in this member's log files: an
//!   entry is committed once a majority has it, which need not include
//!   this member's own write yet. So every applied entry can be read back
//!   from the files (a change stream reads up to the applied LSN), and a
//!   snapshot's writes are all in this member's log.
//!
//! # Snapshots (docs/replication.md, section 4)
//!
//! A member's snapshot is a snapshot file of its directory, taken while
//! the writer goes on, with a meta file beside it (`snapshot_file`): the
//! log id it covers, the membership there, and the proposal chain.
//!
//! - **Taking one** ([`SnapshotStore::take`], on the member's snapshot
//!   task): after each applied chunk this machine records its *applied
//!   point* (log id, membership, chain), once the writer has published
//!   that LSN. A snapshot reads the point, then copies the segments; every
//!   segment's capture LSN is at least the watermark at its copy, so at
//!   least the point: the log after the point, applied to the file,
//!   gives the state exactly (blind writes, in log order). The meta says
//!   the point. Then openraft is told (`trigger().snapshot()`): its
//!   builder hands back the file just written; the log behind the older
//!   retained snapshot is purged (`snapshot_task`).
//! - **Installing one** ([`RaftStateMachine::install_snapshot`]): the
//!   received file is checked (header and every segment's CRC), its meta
//!   written, then it is renamed into place and mapped, as a restart maps
//!   one; the writer makes the index's contents the file's
//!   (`ReplicaControl::load`), and reads are refused until the log is
//!   applied up to the file's own LSN (its largest capture). Every other
//!   snapshot is removed.
//! - **Restarting**: the member starts from its newest usable snapshot
//!   (`replica.rs`), mapped in place, and openraft applies the log after
//!   its point.
//!
//! A snapshot is not taken while the index is catching up after a load:
//! its segments then hold writes past the applied LSN.
//!
//! [`applied_state`]: RaftStateMachine::applied_state

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use openraft::EntryPayload;
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use uuidmap_engine::store::snapshot::{
    OpenOptions, SnapshotInfo, open_snapshot, snapshot_path, write_snapshot,
};
use uuidmap_engine::store::{FileError, Io, SnapshotCorrupt, SnapshotLoadError};
use uuidmap_engine::writer::{
    CommittedEntry, DurableIndex, LoadedSnapshot, ProposalChain, ReplicaControl, TakeSnapshotError,
};

use crate::snapshot_file::{self, MemberSnapshot, SnapshotFile};
use crate::types::{CommittedLeaderId, LogId, SnapshotMeta, StoredMembership};
use crate::{Applied, ClusterNode, UuidmapRaft};

/// openraft over the index.
pub type IndexRaft = openraft::Raft<UuidmapRaft, IndexStateMachine>;

/// A snapshot of the index, as a file.
pub type IndexSnapshot = Snapshot<CommittedLeaderId, u64, ClusterNode, SnapshotFile>;

/// Entries handed to the writer in one message, at most: a long catch-up
/// is applied (and made visible) in steps.
const APPLY_CHUNK: usize = 1024;

/// Where the applied state stands: what a snapshot taken now records
/// (module docs).
#[derive(Clone, Debug, Default)]
pub struct AppliedPoint {
    /// The last entry applied.
    pub log_id: Option<LogId>,
    /// The membership in force there.
    pub membership: StoredMembership,
    /// The proposal chain there.
    pub chain: ProposalChain,
}

/// A member's snapshots: taking them, and finding them (module docs).
#[derive(Clone)]
pub struct SnapshotStore {
    io: Arc<dyn Io>,
    dir: PathBuf,
    durable: Arc<DurableIndex>,
    point: Arc<Mutex<AppliedPoint>>,
    /// Held while a snapshot is taken; `true` once the member stops
    /// ([`SnapshotStore::close`]).
    closed: Arc<Mutex<bool>>,
}

impl SnapshotStore {
    /// The snapshots of `durable` in `dir`, starting from `point`.
    pub fn new(
        io: Arc<dyn Io>,
        dir: PathBuf,
        durable: Arc<DurableIndex>,
        point: AppliedPoint,
    ) -> SnapshotStore {
        SnapshotStore {
            io,
            dir,
            durable,
            point: Arc::new(Mutex::new(point)),
            closed: Arc::new(Mutex::new(false)),
        }
    }

    /// Waits for a snapshot being taken to end, and refuses any after:
    /// the member's directory is not written once it has stopped (its
    /// lock is released, and another process may open it). Blocks.
    pub fn close(&self) {
        *self.closed.lock().unwrap_or_else(PoisonError::into_inner) = true;
    }

    /// The applied point now.
    pub fn point(&self) -> AppliedPoint {
        self.point
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_point(&self, point: AppliedPoint) {
        *self.point.lock().unwrap_or_else(PoisonError::into_inner) = point;
    }

    /// Whether the index is a prefix of the log now (not catching up
    /// after loading a snapshot).
    pub fn is_consistent(&self) -> bool {
        let applied = self.durable.watermark().current();
        self.durable
            .read_lease()
            .is_none_or(|lease| lease.is_consistent_at(applied))
    }

    /// Takes a snapshot now, while the writer goes on (module docs), and
    /// returns it and what was written; `None` when there is nothing to
    /// take yet (nothing applied, or catching up after a load), or the
    /// member has stopped. Blocks:
    /// call it on a blocking thread. Recorded in the index's snapshot
    /// figures.
    pub fn take(&self) -> Result<Option<(MemberSnapshot, SnapshotInfo)>, TakeSnapshotError> {
        let closed = self.closed.lock().unwrap_or_else(PoisonError::into_inner);
        if *closed {
            return Ok(None);
        }
        let point = self.point();
        if point.log_id.is_none() || !self.is_consistent() {
            return Ok(None);
        }
        let stats = self.durable.snapshot_stats();
        let taken = self.write(point);
        match &taken {
            Ok((_, info)) => {
                stats.taken.fetch_add(1, Ordering::Relaxed);
                stats
                    .last_duration_us
                    .store(info.duration.as_micros() as u64, Ordering::Relaxed);
                let now = SystemTime::now().duration_since(UNIX_EPOCH);
                stats
                    .last_unix_ms
                    .store(now.map_or(0, |d| d.as_millis() as u64), Ordering::Relaxed);
                stats.last_lsn.store(info.lsn, Ordering::Relaxed);
                stats.last_bytes.store(info.bytes, Ordering::Relaxed);
            }
            Err(_) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        taken.map(Some)
    }

    fn write(
        &self,
        point: AppliedPoint,
    ) -> Result<(MemberSnapshot, SnapshotInfo), TakeSnapshotError> {
        let watermark = self.durable.watermark().clone();
        let info = write_snapshot(
            &*self.io,
            &self.dir,
            &self.durable.index(),
            &|| watermark.current(),
            // Every write in the file is of an applied entry, which is in
            // this member's log files already (module docs): synced under
            // `always`; under the other policies a power cut may take the
            // log's end, which the group still holds, and reads wait until
            // it is applied again (`ReadLease::set_consistent_from`, set at
            // every start).
            &|_| Ok(()),
        )?;
        // An unchanged index: the file already there keeps its own meta.
        if let Ok(found) = snapshot_file::read_meta(&*self.io, &info.path, info.lsn) {
            snapshot_file::prune(&*self.io, &self.dir, &info.path, 1);
            return Ok((found, info));
        }
        let point_lsn = point.log_id.map_or(0, |l| l.index);
        if info.min_capture_lsn < point_lsn {
            return Err(SnapshotCorrupt {
                path: info.path,
                reason: format!(
                    "its smallest capture LSN {} is below the applied point {point_lsn} read \
                     before it was taken",
                    info.min_capture_lsn
                ),
            }
            .into());
        }
        let taken = MemberSnapshot {
            meta: SnapshotMeta {
                last_log_id: point.log_id,
                last_membership: point.membership,
            },
            file: SnapshotFile {
                path: info.path.clone(),
                snapshot_lsn: info.lsn,
                chain: point.chain,
            },
        };
        snapshot_file::write_meta(&*self.io, &self.dir, &taken.meta, &taken.file)?;
        snapshot_file::prune(&*self.io, &self.dir, &taken.file.path, 1);
        Ok((taken, info))
    }

    /// The newest usable snapshot in the directory.
    pub fn newest(&self) -> Result<Option<MemberSnapshot>, FileError> {
        snapshot_file::newest(&*self.io, &self.dir)
    }

    /// The usable snapshots in the directory, newest first.
    pub fn usable(&self) -> Result<Vec<MemberSnapshot>, FileError> {
        snapshot_file::usable(&*self.io, &self.dir)
    }
}

fn storage_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

async fn blocking<T: Send + 'static, E: std::fmt::Display + Send + 'static>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, std::io::Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(storage_error)?
        .map_err(storage_error)
}

/// openraft's state machine over the index (module docs).
pub struct IndexStateMachine {
    control: ReplicaControl,
    /// The first LSN not in this member's log files yet.
    written: tokio::sync::watch::Receiver<u64>,
    applied: Option<LogId>,
    membership: StoredMembership,
    chain: ProposalChain,
    snapshots: SnapshotStore,
    /// Counts the entries applied void.
    counters: Arc<crate::counters::RaftCounters>,
}

impl IndexStateMachine {
    /// The machine that applies through `control`, over an index that
    /// holds the state at `snapshots`' applied point (nothing, or the
    /// snapshot it started from); `written` is the log store's
    /// (`WalLogStore::written`): an entry is applied only once it is in
    /// this member's log files (module docs).
    pub fn new(
        control: ReplicaControl,
        snapshots: SnapshotStore,
        written: tokio::sync::watch::Receiver<u64>,
    ) -> IndexStateMachine {
        let point = snapshots.point();
        IndexStateMachine {
            control,
            written,
            applied: point.log_id,
            membership: point.membership,
            chain: point.chain,
            snapshots,
            counters: Arc::default(),
        }
    }

    /// The same machine, counting void entries in `counters`.
    pub fn counting(mut self, counters: Arc<crate::counters::RaftCounters>) -> Self {
        self.counters = counters;
        self
    }

    fn publish_point(&self) {
        self.snapshots.set_point(AppliedPoint {
            log_id: self.applied,
            membership: self.membership.clone(),
            chain: self.chain,
        });
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
        // Committed (on a majority) need not mean written here yet: wait
        // for this member's log thread, so that every applied entry can
        // be read back from the files (change streams, module docs).
        if let Some(last) = chunk.entries.last().map(|e| e.lsn) {
            self.written
                .wait_for(|&next| next > last)
                .await
                .map_err(|_| std::io::Error::other("the Raft log thread has stopped"))?;
        }
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
        self.chain = outcome.chain;
        self.publish_point();
        self.counters.void_entries.fetch_add(
            outcome.void.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
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
    type SnapshotBuilder = IndexSnapshotBuilder;

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

    async fn get_snapshot_builder(&mut self) -> IndexSnapshotBuilder {
        IndexSnapshotBuilder {
            snapshots: self.snapshots.clone(),
        }
    }

    async fn try_create_snapshot_builder(&mut self, force: bool) -> Option<IndexSnapshotBuilder> {
        // openraft forces a build only when its log is purged and it knows
        // of no snapshot; otherwise it builds when the snapshot task asks,
        // which it does only while the index is consistent.
        (force || self.snapshots.is_consistent()).then(|| IndexSnapshotBuilder {
            snapshots: self.snapshots.clone(),
        })
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        file: SnapshotFile,
    ) -> Result<(), std::io::Error> {
        let io = self.snapshots.io.clone();
        let dir = self.snapshots.dir.clone();
        let received = file.clone();
        let meta_owned = meta.clone();
        // Checked whole, its meta written, renamed into place, mapped.
        let started = std::time::Instant::now();
        let (installed, restored) = blocking(move || -> Result<_, SnapshotLoadError> {
            let opened = open_snapshot(&*io, &received.path, &OpenOptions::default())?;
            if opened.lsn != received.snapshot_lsn {
                return Err(SnapshotCorrupt {
                    path: received.path.clone(),
                    reason: format!(
                        "it holds LSN {}, but was sent as LSN {}",
                        opened.lsn, received.snapshot_lsn
                    ),
                }
                .into());
            }
            let installed = SnapshotFile {
                path: snapshot_path(&dir, received.snapshot_lsn),
                ..received.clone()
            };
            snapshot_file::write_meta(&*io, &dir, &meta_owned, &installed)?;
            io.rename(&received.path, &installed.path).map_err(|e| {
                FileError::new(
                    "renaming into place the received snapshot",
                    &installed.path,
                    e,
                )
            })?;
            io.sync_dir(&dir)
                .map_err(|e| FileError::new("syncing the data directory", &dir, e))?;
            Ok((installed, opened.into_index()?))
        })
        .await?;
        let lsn = meta.last_log_id.map_or(0, |l| l.index);
        let checked = started.elapsed();
        self.control
            .load(LoadedSnapshot {
                restored,
                lsn,
                chain: installed.chain,
            })
            .await
            .map_err(writer_stopped)?;
        tracing::info!(
            point = lsn,
            file_lsn = installed.snapshot_lsn,
            checked_ms = checked.as_millis() as u64,
            took_ms = started.elapsed().as_millis() as u64,
            "installed the leader's snapshot"
        );
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.chain = installed.chain;
        self.publish_point();
        let (io, dir) = (self.snapshots.io.clone(), self.snapshots.dir.clone());
        let _ = tokio::task::spawn_blocking(move || {
            snapshot_file::prune(&*io, &dir, &installed.path, 0);
        })
        .await;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<IndexSnapshot>, std::io::Error> {
        let snapshots = self.snapshots.clone();
        let newest = blocking(move || snapshots.newest()).await?;
        Ok(newest.map(|s| Snapshot {
            meta: s.meta,
            snapshot: s.file,
        }))
    }
}

/// openraft's snapshot builder: hands back the snapshot the snapshot task
/// just took, or takes one (module docs).
pub struct IndexSnapshotBuilder {
    snapshots: SnapshotStore,
}

impl RaftSnapshotBuilder<UuidmapRaft> for IndexSnapshotBuilder {
    type SnapshotData = SnapshotFile;

    async fn build_snapshot(&mut self) -> Result<IndexSnapshot, std::io::Error> {
        let snapshots = self.snapshots.clone();
        let found = blocking(move || -> Result<_, TakeSnapshotError> {
            // The task took one just before it asked; take one only if
            // the directory holds none usable (openraft forced a build).
            match snapshots.newest()? {
                Some(found) => Ok(Some(found)),
                None => Ok(snapshots.take()?.map(|(taken, _)| taken)),
            }
        })
        .await?;
        let found = found.ok_or_else(|| {
            std::io::Error::other("there is nothing to snapshot: no entry is applied yet")
        })?;
        Ok(Snapshot {
            meta: found.meta,
            snapshot: found.file,
        })
    }
}
