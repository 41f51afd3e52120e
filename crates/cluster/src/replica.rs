//! [`Replica`]: one member of a replica group, whole: the index and its
//! writer thread in replica mode (a [`DurableIndex`] opened with
//! `open_replica`), the log store on the data directory, openraft over
//! them, and the two tasks that join the writer to openraft
//! (`leadership`). The server serves its [`DurableIndex`] as it serves a
//! single node's, and its Raft service besides.
//!
//! Started on a directory it wrote before, a member opens its log, and
//! openraft applies the committed entries again: the index is rebuilt from
//! the log (snapshots are stage 5 of docs/replication.md).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::Raft;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use uuidmap_engine::store::raft_state::RAFT_STATE_FILE;
use uuidmap_engine::store::wal::WalOptions;
use uuidmap_engine::store::{Io, OsIo, StoreError};
use uuidmap_engine::writer::{DurableConfig, DurableIndex, WriteHandle};
use uuidmap_index::Index;
use uuidmap_index::sync::LsnWatermark;

use crate::UuidmapRaft;
use crate::leadership::{proposal_channel, run_proposals, watch_leadership, watch_lease};
use crate::log_store::{LogStats, LogStoreConfig, TAIL_ENTRIES, WalLogStore};
use crate::network::GrpcNetworkFactory;
use crate::raft_service::RaftService;
use crate::state_machine::IndexStateMachine;
use crate::timing::{RaftTiming, raft_config};

/// openraft over the index.
pub type IndexRaft = Raft<UuidmapRaft, IndexStateMachine>;

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
}

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
}

/// A running member (module docs).
pub struct Replica {
    id: u64,
    dir: PathBuf,
    raft: IndexRaft,
    durable: Arc<DurableIndex>,
    log: Arc<LogStats>,
    tasks: Vec<JoinHandle<()>>,
}

impl Replica {
    /// Opens the log on `config.dir` and starts the member. A new member
    /// waits to be made part of a group ([`Replica::raft`]'s `initialize`
    /// on one member, or `add_learner` from a leader).
    pub async fn start(config: ReplicaConfig) -> Result<Replica, ReplicaError> {
        refuse_single_node_dir(&config)?;
        let store = WalLogStore::open(LogStoreConfig {
            io: config.io.clone(),
            dir: config.dir.clone(),
            wal: config.wal,
            sync: config.sync,
            tail_entries: TAIL_ENTRIES,
        })?;
        let log = store.stats();
        let (proposer, proposals) = proposal_channel();
        let stalled = Arc::new(Notify::new());
        let on_stall = {
            let stalled = stalled.clone();
            move || stalled.notify_one()
        };
        let mut durable = config.durable.clone();
        durable.dir = config.dir.clone();
        durable.io = config.io.clone();
        let (durable, control) = DurableIndex::open_replica(
            durable,
            config.capacity,
            Box::new(proposer),
            Box::new(on_stall),
        )?;
        let network = GrpcNetworkFactory {
            id: config.id,
            overrides: Arc::new(config.peer_overrides.clone()),
        };
        let raft_config =
            raft_config(&config.timing).map_err(|e| ReplicaError::Raft(e.to_string()))?;
        let machine = IndexStateMachine::new(control.clone());
        let raft = Raft::new(config.id, raft_config, network, store, machine)
            .await
            .map_err(|e| ReplicaError::Raft(e.to_string()))?;
        let read_lease = durable
            .read_lease()
            .expect("a member's index has a read lease")
            .clone();
        // The followers' own wait is the maximum election timeout; the
        // minimum leaves room for the clocks' drift.
        let lease = std::time::Duration::from_millis(config.timing.election_min_ms);
        let tasks = vec![
            tokio::spawn(run_proposals(proposals, raft.clone(), control.clone())),
            tokio::spawn(watch_leadership(raft.clone(), control, stalled)),
            tokio::spawn(watch_lease(raft.clone(), read_lease, lease)),
        ];
        Ok(Replica {
            id: config.id,
            dir: config.dir,
            raft,
            durable: Arc::new(durable),
            log,
            tasks,
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
    pub fn index(&self) -> &Index {
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

    /// What this member knows of its group now.
    pub fn status(&self) -> crate::status::ClusterStatus {
        crate::status::status_of(&self.raft)
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
        RaftService::new(self.raft.clone(), self.dir.clone()).into_server()
    }

    /// Stops openraft (which syncs the log), then the writer.
    pub async fn shutdown(mut self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::error!("Raft did not stop cleanly: {e}");
        }
        for task in self.tasks.drain(..) {
            task.abort();
        }
        // Joins the writer thread, which stops at once.
        let durable = self.durable.clone();
        let _ = tokio::task::spawn_blocking(move || durable.shutdown()).await;
    }
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
