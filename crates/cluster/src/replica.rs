//! [`Replica`]: one member of a replica group, whole: the index, its
//! writer thread in replica mode, the log store on the data directory,
//! openraft over them, and the two tasks that join the writer to openraft
//! (`leadership`). The server serves its index, its write handle and its
//! Raft service.
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
use uuidmap_engine::store::wal::WalOptions;
use uuidmap_engine::store::{Io, OsIo, StoreError};
use uuidmap_engine::writer::{PipelineConfig, ReplicaPipeline, WriteHandle};
use uuidmap_index::Index;
use uuidmap_index::sync::LsnWatermark;

use crate::UuidmapRaft;
use crate::leadership::{proposal_channel, run_proposals, watch_leadership};
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
    /// The writer's queue depth and batch limit.
    pub pipeline: PipelineConfig,
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
        ReplicaConfig {
            id,
            dir: dir.into(),
            io: Arc::new(OsIo),
            wal: WalOptions::default(),
            sync: true,
            timing: RaftTiming::default(),
            pipeline: PipelineConfig::default(),
            peer_overrides: HashMap::new(),
            capacity: 1 << 16,
        }
    }
}

/// Why a member did not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The log could not be opened (the directory is in use, unreadable,
    /// or damaged).
    #[error("the replicated log could not be opened: {0}")]
    Log(#[from] StoreError),
    /// The writer thread could not be started.
    #[error("the writer thread could not be started: {0}")]
    Thread(#[source] std::io::Error),
    /// openraft refused the configuration or did not start.
    #[error("Raft did not start: {0}")]
    Raft(String),
}

/// A running member (module docs).
pub struct Replica {
    id: u64,
    dir: PathBuf,
    raft: IndexRaft,
    index: Index,
    watermark: Arc<LsnWatermark>,
    writes: WriteHandle,
    log: Arc<LogStats>,
    pipeline: Option<ReplicaPipeline>,
    tasks: Vec<JoinHandle<()>>,
}

impl Replica {
    /// Opens the log on `config.dir` and starts the member. A new member
    /// waits to be made part of a group ([`Replica::raft`]'s `initialize`
    /// on one member, or `add_learner` from a leader).
    pub async fn start(config: ReplicaConfig) -> Result<Replica, ReplicaError> {
        let store = WalLogStore::open(LogStoreConfig {
            io: config.io.clone(),
            dir: config.dir.clone(),
            wal: config.wal,
            sync: config.sync,
            tail_entries: TAIL_ENTRIES,
        })?;
        let log = store.stats();
        let (writer, index) = Index::with_capacity(config.capacity);
        let watermark = Arc::new(LsnWatermark::new(0));
        let (proposer, proposals) = proposal_channel();
        let stalled = Arc::new(Notify::new());
        let on_stall = {
            let stalled = stalled.clone();
            move || stalled.notify_one()
        };
        let pipeline = ReplicaPipeline::start(
            &config.pipeline,
            writer,
            watermark.clone(),
            Box::new(proposer),
            Box::new(on_stall),
        )
        .map_err(ReplicaError::Thread)?;
        let control = pipeline.control();
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
        let tasks = vec![
            tokio::spawn(run_proposals(proposals, raft.clone(), control.clone())),
            tokio::spawn(watch_leadership(raft.clone(), control, stalled)),
        ];
        Ok(Replica {
            id: config.id,
            dir: config.dir,
            writes: pipeline.handle(),
            raft,
            index,
            watermark,
            log,
            pipeline: Some(pipeline),
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

    /// The index, for reads.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The applied LSN: every entry up to it is visible in the index.
    pub fn watermark(&self) -> &Arc<LsnWatermark> {
        &self.watermark
    }

    /// Where writes go: decided and proposed while this member leads,
    /// refused with the leader's address otherwise.
    pub fn writes(&self) -> WriteHandle {
        self.writes.clone()
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
        if let Some(pipeline) = self.pipeline.take() {
            // Joins the writer thread, which stops at once.
            let _ = tokio::task::spawn_blocking(move || pipeline.stop()).await;
        }
    }
}
