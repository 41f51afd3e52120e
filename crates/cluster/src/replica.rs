//! [`Replica`]: one member of a replica group, whole: the index and its
//! writer thread in replica mode (a [`DurableIndex`] opened with
//! `open_replica`), the log store on the data directory, openraft over
//! them, and the two tasks that join the writer to openraft
//! (`leadership`). The server serves its [`DurableIndex`] as it serves a
//! single node's, and its Raft service besides.
//!
//! Started on a directory it wrote before, a member maps its newest usable
//! snapshot (one whose meta file reads back whole, whose segments pass
//! their CRCs, and whose point the log still reaches), and openraft
//! applies the committed entries after it; with no snapshot, the index is
//! rebuilt from the whole log. A snapshot whose segments fail their CRCs
//! is renamed `*.damaged` (openraft takes the newest listed snapshot as
//! the member's own, and must not be handed it); one that cannot be read
//! for another reason stops the start with the error.
//!
//! The snapshot task takes a snapshot once `snapshot_entries` entries were
//! applied since the last one (or `durable.snapshot_every` passed with
//! any), then tells openraft, and purges the log behind the older
//! retained snapshot, keeping `logs_to_keep` entries at least
//! (`snapshot_task`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::Raft;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use uuidmap_engine::store::RestoredIndex;
use uuidmap_engine::store::raft_state::RAFT_STATE_FILE;
use uuidmap_engine::store::snapshot::{OpenOptions, open_snapshot, set_aside_damaged};
use uuidmap_engine::store::wal::WalOptions;
use uuidmap_engine::store::{FileError, Io, OsIo, SnapshotCorrupt, SnapshotLoadError, StoreError};
use uuidmap_engine::writer::{
    DurableConfig, DurableIndex, IndexRef, MemberLog, ReplicaStart, WriteHandle,
};
use uuidmap_index::sync::LsnWatermark;

use crate::counters::RaftCounters;
use crate::identity::{self, IdentityError, MemberIdentity};
use crate::leadership::{
    LeadershipShared, LeaseTiming, MAX_PROPOSALS, proposal_channel, run_proposals,
    watch_leadership, watch_lease,
};
use crate::log_store::{LogStats, LogStoreConfig, TAIL_ENTRIES, WalLogStore};
use crate::network::GrpcNetworkFactory;
use crate::raft_service::{INCOMING_PREFIX, RaftService};
use crate::raft_tls::RaftTls;
use crate::read_index::ReadIndex;
use crate::rejoin::{VoteTrust, ask_to_rejoin};
use crate::snapshot_file::{self, MemberSnapshot};
use crate::snapshot_task::{SnapshotPolicy, take_snapshots};
use crate::staleness::Staleness;
use crate::state_machine::{AppliedPoint, IndexStateMachine, SnapshotStore};
use crate::timing::{RaftTiming, raft_config};
use crate::transfer::LeaderTransfer;
use crate::vote_guard::{VoteGuard, start_hold};

/// The member's openraft (defined beside its state machine).
pub use crate::state_machine::IndexRaft;

/// What a member needs to start.
#[derive(Clone)]
pub struct ReplicaConfig {
    /// Its node id (never reused for another member).
    pub id: u64,
    /// Its data directory (created if missing).
    pub dir: PathBuf,
    /// The file system (the real one by default).
    pub io: Arc<dyn Io>,
    /// WAL file options.
    pub wal: WalOptions,
    /// Fsync each group of log appends before it counts as written (the
    /// `always` policy); without it, an append counts once written.
    pub sync: bool,
    /// Heartbeat and election timing.
    pub timing: RaftTiming,
    /// The writer's queue depth and batch limit (and, unused yet, the
    /// snapshot options).
    pub durable: DurableConfig,
    /// Raft addresses to use instead of the membership's, by node id (for
    /// tests that put a proxy between members).
    pub peer_overrides: HashMap<u64, String>,
    /// Entries the index is sized for at start.
    pub capacity: usize,
    /// Take a snapshot once this many log entries were applied since the
    /// last (0: only on `durable.snapshot_every`).
    pub snapshot_entries: u64,
    /// Log entries kept behind the newest snapshot at least (the log after
    /// the older retained snapshot is kept too): a follower further behind
    /// is sent the snapshot instead.
    pub logs_to_keep: u64,
    /// mTLS on the Raft port, both ways ([`crate::raft_tls`]); `None`:
    /// plaintext, and any caller is served.
    pub tls: Option<RaftTls>,
    /// The leader's proposals not yet answered, at most: a write over it
    /// is refused (`WriteError::ProposalsFull`).
    pub max_proposals: usize,
    /// Where its Redis-protocol port listens (`host:port`), which its
    /// Raft service's `Identify` answers for the membership; empty: none.
    pub resp_addr: String,
}

/// The default of [`ReplicaConfig::snapshot_entries`]: a restart applies
/// at most about this many entries (batches) after its snapshot.
pub const SNAPSHOT_ENTRIES: u64 = 100_000;

/// The default of [`ReplicaConfig::logs_to_keep`].
pub const LOGS_TO_KEEP: u64 = 10_000;

impl ReplicaConfig {
    /// Defaults for member `id` on `dir`: fsync every append, the
    /// product's timing.
    pub fn new(id: u64, dir: impl Into<PathBuf>) -> ReplicaConfig {
        let dir = dir.into();
        ReplicaConfig {
            id,
            dir: dir.clone(),
            io: Arc::new(OsIo),
            wal: WalOptions::default(),
            sync: true,
            timing: RaftTiming::default(),
            durable: DurableConfig::new(dir.clone()),
            peer_overrides: HashMap::new(),
            capacity: 1 << 16,
            snapshot_entries: SNAPSHOT_ENTRIES,
            logs_to_keep: LOGS_TO_KEEP,
            tls: None,
            max_proposals: MAX_PROPOSALS,
            resp_addr: String::new(),
        }
    }
}

/// Why a member did not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The log could not be opened (the directory is in use, a single
    /// node's, unreadable, or damaged), or the writer thread not started.
    #[error("the member could not start: {0}")]
    Store(#[from] StoreError),
    /// openraft refused the configuration or did not start.
    #[error("Raft did not start: {0}")]
    Raft(String),
    /// The directory's identity is damaged, or another node's.
    #[error("the member could not start: {0}")]
    Identity(#[from] IdentityError),
}

/// A running member (module docs).
pub struct Replica {
    id: u64,
    dir: PathBuf,
    io: Arc<dyn Io>,
    raft: IndexRaft,
    durable: Arc<DurableIndex>,
    log: Arc<LogStats>,
    identity: MemberIdentity,
    /// Whether its vote is trusted (`crate::rejoin`).
    trust: Arc<VoteTrust>,
    snapshots: SnapshotStore,
    shared: LeadershipShared,
    /// Linearizable reads' read index (ReadIndex rounds).
    read_index: ReadIndex,
    /// How stale the applied state may be (stale reads).
    staleness: Arc<Staleness>,
    tasks: Vec<JoinHandle<()>>,
    tls: Option<Arc<RaftTls>>,
    /// Where its Redis-protocol port listens; empty: none.
    resp_addr: String,
}

impl Replica {
    /// Opens the log on `config.dir` and starts the member. A new member
    /// waits to be made part of a group ([`Replica::raft`]'s `initialize`
    /// on one member, or `add_learner` from a leader).
    pub async fn start(config: ReplicaConfig) -> Result<Replica, ReplicaError> {
        refuse_single_node_dir(&config)?;
        // Raft state from before: it may have promised its vote.
        let had_state = config
            .io
            .list(&config.dir)
            .is_ok_and(|names| names.iter().any(|n| n == RAFT_STATE_FILE));
        let store = WalLogStore::open(LogStoreConfig {
            io: config.io.clone(),
            dir: config.dir.clone(),
            wal: config.wal,
            sync: config.sync,
            tail_entries: TAIL_ENTRIES,
        })?;
        // After the log store took the directory's lock.
        let identity = identity::load_or_create(&*config.io, &config.dir, config.id)?;
        let log = store.stats();
        let trust = store.vote_trust();
        let written = store.written();
        let purged = store.purged_index();
        remove_incoming(&config);
        let start = open_newest_snapshot(&config, purged).map_err(StoreError::from)?;
        let counters = Arc::new(RaftCounters::default());
        let (proposer, proposals) =
            proposal_channel(config.max_proposals, counters.clone(), log.steps.clone());
        let stalled = Arc::new(Notify::new());
        let on_stall = {
            let stalled = stalled.clone();
            move || stalled.notify_one()
        };
        let mut durable = config.durable.clone();
        durable.dir = config.dir.clone();
        durable.io = config.io.clone();
        let (point, start) = match start {
            Some((snapshot, restored)) => {
                let lsn = snapshot.meta.last_log_id.map_or(0, |l| l.index);
                let start = ReplicaStart {
                    restored,
                    lsn,
                    chain: snapshot.file.chain,
                    path: snapshot.file.path.clone(),
                };
                let point = AppliedPoint {
                    log_id: snapshot.meta.last_log_id,
                    membership: snapshot.meta.last_membership,
                    chain: snapshot.file.chain,
                };
                (point, Some(start))
            }
            None => (AppliedPoint::default(), None),
        };
        let (requests, snapshot_requests) = tokio::sync::mpsc::unbounded_channel();
        let (io, dir) = (config.io.clone(), config.dir.clone());
        let member_log = MemberLog {
            snapshots: requests,
            follow: Box::new(move |after| {
                snapshot_file::chain_point_at_or_before(&*io, &dir, after)
            }),
            written_bytes: log.bytes.clone(),
            steps: log.steps.clone(),
        };
        let (durable, control) = DurableIndex::open_replica(
            durable,
            config.capacity,
            start,
            Box::new(proposer),
            Box::new(on_stall),
            member_log,
        )?;
        let durable = Arc::new(durable);
        let snapshots = SnapshotStore::new(
            config.io.clone(),
            config.dir.clone(),
            durable.clone(),
            point,
        );
        let tls = config.tls.clone().map(Arc::new);
        let overrides = Arc::new(config.peer_overrides.clone());
        let network = GrpcNetworkFactory {
            id: config.id,
            overrides: overrides.clone(),
            tls: tls.clone(),
            counters: counters.clone(),
            lease: durable.read_lease().cloned(),
        };
        let raft_config =
            raft_config(&config.timing).map_err(|e| ReplicaError::Raft(e.to_string()))?;
        let machine = IndexStateMachine::new(control.clone(), snapshots.clone(), written)
            .counting(counters.clone());
        let raft = Raft::new(config.id, raft_config, network, store, machine)
            .await
            .map_err(|e| ReplicaError::Raft(e.to_string()))?;
        let read_lease = durable
            .read_lease()
            .expect("a member's index has a read lease")
            .clone();
        let hold = start_hold_of(&raft, had_state, &config.timing);
        let shared = LeadershipShared {
            lease: read_lease,
            guard: Arc::new(VoteGuard::new(hold)),
            stalled,
            counters,
        };
        // The followers' own wait is the maximum election timeout; the
        // minimum leaves room for the clocks' drift. A leader unheard for
        // the maximum steps down (`leadership`).
        let lease = LeaseTiming {
            lease: std::time::Duration::from_millis(config.timing.election_min_ms),
            step_down_after: std::time::Duration::from_millis(config.timing.election_max_ms),
        };
        if trust.distrusted() {
            // No election until the group has taken this member back
            // (`crate::rejoin`); the Raft service refuses votes meanwhile.
            raft.runtime_config().elect(false);
        }
        let (read_index, read_index_task) =
            crate::read_index::start(raft.clone(), overrides, tls.clone());
        let mut tasks = vec![
            read_index_task,
            tokio::spawn(ask_to_rejoin(
                raft.clone(),
                trust.clone(),
                identity,
                Arc::new(config.peer_overrides.clone()),
                tls.clone(),
            )),
            tokio::spawn(run_proposals(
                proposals,
                raft.clone(),
                control.clone(),
                shared.lease.clone(),
            )),
            tokio::spawn(watch_leadership(raft.clone(), control, shared.clone())),
            tokio::spawn(watch_lease(raft.clone(), shared.clone(), lease)),
            tokio::spawn(take_snapshots(
                raft.clone(),
                snapshots.clone(),
                SnapshotPolicy {
                    keep: config.logs_to_keep,
                    entries: config.snapshot_entries,
                    every: config.durable.snapshot_every,
                },
                snapshot_requests,
            )),
        ];
        if let Some(hold) = hold {
            tracing::info!(
                hold_ms = hold.as_millis() as u64,
                "restarted with Raft state: no vote and no election until the hold ends"
            );
            raft.runtime_config().elect(false);
            let (raft, trust) = (raft.clone(), trust.clone());
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(hold).await;
                // A distrusted vote keeps elections off until the group
                // took the member back (`ask_to_rejoin` turns them on).
                if !trust.distrusted() {
                    raft.runtime_config().elect(true);
                }
            }));
        }
        Ok(Replica {
            id: config.id,
            dir: config.dir,
            io: config.io,
            raft,
            durable,
            log,
            identity,
            trust,
            snapshots,
            shared,
            read_index,
            staleness: Arc::default(),
            tasks,
            tls,
            resp_addr: config.resp_addr,
        })
    }

    /// Its node id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// openraft, for membership changes and metrics.
    pub fn raft(&self) -> &IndexRaft {
        &self.raft
    }

    /// The index, its applied LSN and its writes, as the server serves
    /// them. Writes are decided and proposed while this member leads, and
    /// refused with the leader's address otherwise.
    pub fn durable(&self) -> &Arc<DurableIndex> {
        &self.durable
    }

    /// The index, for reads.
    pub fn index(&self) -> IndexRef<'_> {
        self.durable.index()
    }

    /// The applied LSN: every entry up to it is visible in the index.
    pub fn watermark(&self) -> &Arc<LsnWatermark> {
        self.durable.watermark()
    }

    /// Where writes go (see [`Replica::durable`]).
    pub fn writes(&self) -> WriteHandle {
        self.durable.writes().clone()
    }

    /// What this member knows of its group now, its counters included.
    pub fn status(&self) -> crate::cluster_status::ClusterStatus {
        let mut status = crate::cluster_status::member_status(&self.raft, &self.shared);
        status.read_index_rounds = self.read_index.rounds();
        status
    }

    /// [`Replica::status`], as a function that outlives the borrow (for
    /// the server's `Stats` and `/metrics`).
    pub fn status_view(
        &self,
    ) -> impl Fn() -> crate::cluster_status::ClusterStatus + Send + Sync + 'static {
        let (raft, shared, read_index) = (
            self.raft.clone(),
            self.shared.clone(),
            self.read_index.clone(),
        );
        move || {
            let mut status = crate::cluster_status::member_status(&raft, &shared);
            status.read_index_rounds = read_index.rounds();
            status
        }
    }

    /// Its Raft counters.
    pub fn counters(&self) -> Arc<RaftCounters> {
        self.shared.counters.clone()
    }

    /// Its leader transfer (`transfer`).
    pub fn leader_transfer(&self) -> LeaderTransfer {
        LeaderTransfer {
            raft: self.raft.clone(),
            shared: self.shared.clone(),
        }
    }

    /// The read index of linearizable reads that cannot rest on the lease
    /// ([`crate::read_index`]).
    pub fn read_index(&self) -> &ReadIndex {
        &self.read_index
    }

    /// How stale this member's applied state may be ([`Staleness`]).
    pub fn staleness(&self) -> &Arc<Staleness> {
        &self.staleness
    }

    /// What the log store has done.
    pub fn log_stats(&self) -> Arc<LogStats> {
        self.log.clone()
    }

    /// The Raft service the other members call, to serve on the Raft
    /// address.
    pub fn raft_service(
        &self,
    ) -> uuidmap_proto::raft::v1::raft_server::RaftServer<RaftService<IndexStateMachine>> {
        let service = RaftService::new(
            self.raft.clone(),
            self.dir.clone(),
            self.io.clone(),
            self.identity,
        )
        .with_vote_trust(self.trust.clone())
        .guarded(self.shared.guard.clone(), self.shared.counters.clone())
        .with_staleness(self.staleness.clone(), self.durable.watermark().clone())
        .with_lease(self.shared.lease.clone())
        .with_resp_addr(self.resp_addr.clone());
        match self.tls {
            Some(_) => service.verify_callers().into_server(),
            None => service.into_server(),
        }
    }

    /// Its Raft TLS, which its Raft service is served with and its peers
    /// are dialed with (`None`: plaintext).
    pub fn tls(&self) -> Option<&RaftTls> {
        self.tls.as_deref()
    }

    /// Whether its vote is trusted now (`crate::rejoin`): not after its
    /// `raft-state` was found damaged, until its group took it back.
    pub fn vote_trusted(&self) -> bool {
        !self.trust.distrusted()
    }

    /// Its node id and its directory's incarnation ([`identity`]), which
    /// the group's membership records.
    pub fn identity(&self) -> MemberIdentity {
        self.identity
    }

    /// Stops openraft (which syncs the log), waits for a snapshot being
    /// taken, then stops the writer: nothing writes the directory after.
    pub async fn shutdown(mut self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::error!("Raft did not stop cleanly: {e}");
        }
        for task in self.tasks.drain(..) {
            task.abort();
        }
        // An aborted snapshot task leaves its blocking take running: wait
        // for it, then join the writer thread, which stops at once.
        let (snapshots, durable) = (self.snapshots.clone(), self.durable.clone());
        let _ = tokio::task::spawn_blocking(move || {
            snapshots.close();
            durable.shutdown()
        })
        .await;
    }
}

/// The start hold of a member (`vote_guard`): `None` for a fresh member
/// (no Raft state before this start) and for the only voter.
fn start_hold_of(
    raft: &IndexRaft,
    had_state: bool,
    timing: &RaftTiming,
) -> Option<std::time::Duration> {
    use openraft::async_runtime::WatchReceiver;
    let id = *raft.node_id();
    let metrics = raft.metrics();
    let m = metrics.borrow_watched();
    let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
    let alone = voters == [id];
    (had_state && !alone).then(|| start_hold(timing))
}

/// Refuses a directory that holds a single node's data (WAL or snapshot
/// files and no `raft-state`): its WAL is not a Raft log.
fn refuse_single_node_dir(config: &ReplicaConfig) -> Result<(), StoreError> {
    let names = match config.io.list(&config.dir) {
        Ok(names) => names,
        // Missing: the log store creates it.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io("listing the data directory", &config.dir, e)),
    };
    let member = names.iter().any(|n| n == RAFT_STATE_FILE);
    let single = names
        .iter()
        .any(|n| n.starts_with("wal-") || n.starts_with("snapshot-"));
    if single && !member {
        return Err(StoreError::WrongMode {
            dir: config.dir.clone(),
            found: "a single node's data (WAL or snapshot files, no `raft-state`)",
            wanted: "a replica group member's",
            hint: "start it without --node-id, or give the member an empty directory",
        });
    }
    Ok(())
}

/// Removes what an interrupted snapshot transfer left (best effort).
fn remove_incoming(config: &ReplicaConfig) {
    let Ok(names) = config.io.list(&config.dir) else {
        return;
    };
    for name in names.iter().filter(|n| n.starts_with(INCOMING_PREFIX)) {
        let _ = config.io.remove(&config.dir.join(name));
    }
}

/// The newest snapshot a member can start from (module docs), mapped;
/// those that cannot serve are skipped with a warning. `purged`: the
/// last index the log no longer holds. Refuses to start when the log is
/// purged and no snapshot covers it: the member cannot be rebuilt here.
fn open_newest_snapshot(
    config: &ReplicaConfig,
    purged: Option<u64>,
) -> Result<Option<(MemberSnapshot, RestoredIndex)>, SnapshotLoadError> {
    let io = &*config.io;
    for (lsn, path) in uuidmap_engine::store::snapshot::list_snapshots(io, &config.dir)? {
        let snapshot = match snapshot_file::read_meta(io, &path, lsn) {
            Ok(s) => s,
            Err(reason) => {
                tracing::warn!(snapshot = %path.display(), %reason, "skipping a snapshot without a usable meta file");
                continue;
            }
        };
        let point = snapshot.meta.last_log_id.map_or(0, |l| l.index);
        if purged.is_some_and(|p| p > point) {
            tracing::warn!(snapshot = %path.display(), point, ?purged, "skipping a snapshot older than the log's start");
            continue;
        }
        match open_snapshot(io, &path, &OpenOptions::default()).and_then(|o| o.into_index()) {
            Ok(restored) => {
                tracing::info!(snapshot = %path.display(), point, "starting from a snapshot");
                return Ok(Some((snapshot, restored)));
            }
            Err(e @ SnapshotLoadError::Corrupt(_)) => {
                // Set aside, not only skipped: openraft takes the newest
                // listed snapshot as the member's current one, and would
                // install it over the older one started from (and fail).
                tracing::error!(snapshot = %path.display(), error = %e, "skipping a damaged snapshot");
                set_aside_damaged(io, &path)
                    .map_err(|e| FileError::new("renaming aside the damaged snapshot", &path, e))?;
            }
            // Not proven damaged (an I/O error, say): starting from an
            // older one would leave this one listed as the newest, so the
            // start stops here, saying why.
            Err(e) => return Err(e),
        }
    }
    if let Some(purged) = purged {
        return Err(SnapshotCorrupt {
            path: config.dir.clone(),
            reason: format!(
                "the Raft log is purged up to index {purged}, and no usable snapshot covers \
                 it: this member cannot be rebuilt from its directory. Replace it: remove it \
                 from the group (`uuidmap cluster remove`), empty its directory, and add it \
                 again (`uuidmap cluster add`); it is sent a snapshot"
            ),
        }
        .into());
    }
    Ok(None)
}
