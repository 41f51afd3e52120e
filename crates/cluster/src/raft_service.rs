//! The server side of the Raft service (`uuidmap.raft.v1.Raft`): what the
//! other members call on this one. Each handler converts the message
//! ([`crate::wire`]), hands it to openraft, and converts the answer back.
//!
//! - A call meant for another incarnation of this node (its directory was
//!   replaced) is `FAILED_PRECONDITION` ([`crate::identity`]); `Identify`
//!   answers this node's id and incarnation.
//! - A message that does not convert is `INVALID_ARGUMENT` naming the
//!   field; openraft stopping (`Fatal`) is `UNAVAILABLE`, so the caller
//!   backs off.
//! - `InstallSnapshot` writes the file to
//!   `<snapshot_dir>/snapshot-incoming-….tmp` as it arrives (through the
//!   member's [`Io`], so the crash tests' simulated disk sees it): the first
//!   message must be the header, then consecutive chunks whose CRC-32C
//!   checks out, and the file must end at the length the header gave. Only
//!   then is it fsynced and handed to openraft, whose state machine takes
//!   the file; a file it did not take (an older snapshot, a stale leader),
//!   and every file of a failed transfer, is removed.
//! - `ReadIndex` answers the leader's read index ([`crate::read_index`]),
//!   or why not; an AppendEntries openraft accepted is recorded in the
//!   member's [`Staleness`] clock when it has one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use openraft::storage::{RaftStateMachine, Snapshot};
use tonic::{Request, Response, Status, Streaming};
use uuidmap_engine::store::Io;
use uuidmap_proto::raft::v1 as pb;

use crate::identity::{INCARNATION_HEADER, MemberIdentity};
use crate::read_index::{ReadIndexError, leader_read_index};
use crate::snapshot_file::SnapshotFile;
use crate::staleness::Staleness;
use crate::types::{AppendEntriesRequest, TransferLeaderRequest, UuidmapRaft, VoteRequest};
use crate::wire::{FromWire, SnapshotHeader, ToWire, WireError};

/// The Raft service of one member, over its `openraft::Raft`.
pub struct RaftService<SM>
where
    SM: RaftStateMachine<UuidmapRaft, SnapshotData = SnapshotFile>,
{
    raft: openraft::Raft<UuidmapRaft, SM>,
    snapshot_dir: PathBuf,
    io: Arc<dyn Io>,
    identity: MemberIdentity,
    /// Whether a refusal for another incarnation was logged (once: the
    /// leader calls at heartbeat rate).
    refusal_logged: Arc<AtomicBool>,
    /// The member's staleness clock and applied LSN, when it has them.
    staleness: Option<(Arc<Staleness>, Arc<uuidmap_index::sync::LsnWatermark>)>,
}

impl<SM> RaftService<SM>
where
    SM: RaftStateMachine<UuidmapRaft, SnapshotData = SnapshotFile>,
{
    /// The service of `raft`; snapshots being received are written in
    /// `snapshot_dir` (the data directory: the install renames them there)
    /// through `io`. `identity`: this member's, which it answers
    /// `Identify` with and checks every other call against.
    pub fn new(
        raft: openraft::Raft<UuidmapRaft, SM>,
        snapshot_dir: PathBuf,
        io: Arc<dyn Io>,
        identity: MemberIdentity,
    ) -> Self {
        RaftService {
            raft,
            snapshot_dir,
            io,
            identity,
            refusal_logged: Arc::default(),
            staleness: None,
        }
    }

    /// This service, recording each accepted AppendEntries in `clock`,
    /// with the LSN `applied` has reached ([`Staleness::heard`]).
    pub fn with_staleness(
        mut self,
        clock: Arc<Staleness>,
        applied: Arc<uuidmap_index::sync::LsnWatermark>,
    ) -> Self {
        self.staleness = Some((clock, applied));
        self
    }

    /// Refuses a call meant for another incarnation of this node
    /// ([`crate::identity`]).
    fn check<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let Some(value) = request.metadata().get(INCARNATION_HEADER) else {
            return Ok(());
        };
        let expected = value
            .to_str()
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| {
                Status::invalid_argument(format!("{INCARNATION_HEADER} is not a number: {value:?}"))
            })?;
        let MemberIdentity {
            node_id,
            incarnation,
        } = self.identity;
        if expected == 0 || expected == incarnation {
            return Ok(());
        }
        let message = format!(
            "node {node_id}'s data directory is not the one the group knows (incarnation \
             {incarnation}, and the group's membership records {expected}): it was replaced or \
             emptied, so this node forgot what it acknowledged, and may not vote or take \
             entries in that place. Remove node {node_id} from the group (`uuidmap cluster \
             remove {node_id}`), then add it again (`uuidmap cluster add`)"
        );
        if !self.refusal_logged.swap(true, Ordering::Relaxed) {
            tracing::error!("refusing the group's Raft calls: {message}");
        }
        Err(Status::failed_precondition(message))
    }

    /// The tonic service to add to a server.
    pub fn into_server(self) -> pb::raft_server::RaftServer<Self> {
        pb::raft_server::RaftServer::new(self)
            .max_decoding_message_size(crate::network::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(crate::network::MAX_MESSAGE_BYTES)
    }
}

fn invalid(e: WireError) -> Status {
    Status::invalid_argument(e.to_string())
}

fn stopping(e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("this node's Raft is stopping: {e}"))
}

/// The tonic server to serve the Raft service with: HTTP/2 windows sized
/// for snapshot transfers (the defaults, 64 KiB, cap a stream at 64 KiB
/// per round trip: a 400 MB snapshot would crawl), and no Nagle delay.
pub fn raft_server() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .initial_stream_window_size(8 << 20)
        .initial_connection_window_size(16 << 20)
        .tcp_nodelay(true)
}

/// How the names of snapshot files being received start.
pub const INCOMING_PREFIX: &str = "snapshot-incoming-";

/// Names the incoming files apart within the process.
static INCOMING: AtomicU64 = AtomicU64::new(0);

impl<SM> RaftService<SM>
where
    SM: RaftStateMachine<UuidmapRaft, SnapshotData = SnapshotFile>,
{
    /// Receives the file into `path`; returns the header.
    async fn receive(
        &self,
        stream: &mut Streaming<pb::SnapshotChunk>,
        path: &Path,
    ) -> Result<SnapshotHeader, Status> {
        let first = stream
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("the snapshot stream is empty"))?;
        let Some(pb::snapshot_chunk::Chunk::Meta(meta)) = first.chunk else {
            return Err(Status::invalid_argument(
                "the first message of a snapshot must be its meta",
            ));
        };
        let header = SnapshotHeader::from_wire(meta).map_err(invalid)?;
        // A blocking thread writes what arrives (the `Io` calls block),
        // while the next chunks come in: receiving and writing overlap.
        let (chunks, writer) = file_writer(self.io.clone(), path.to_path_buf());
        let received = async {
            let mut written = 0u64;
            while let Some(msg) = stream.message().await? {
                let Some(pb::snapshot_chunk::Chunk::Bytes(chunk)) = msg.chunk else {
                    return Err(Status::invalid_argument(
                        "a snapshot has one meta, at its start",
                    ));
                };
                if chunk.offset != written {
                    return Err(Status::invalid_argument(format!(
                        "a snapshot chunk starts at byte {}, but {written} bytes came before it",
                        chunk.offset
                    )));
                }
                if crc32c::crc32c(&chunk.data) != chunk.crc32c {
                    return Err(Status::invalid_argument(format!(
                        "the snapshot chunk at byte {written} fails its CRC-32C"
                    )));
                }
                written += chunk.data.len() as u64;
                if written > header.file_len {
                    return Err(Status::invalid_argument(format!(
                        "the snapshot runs past the {} bytes its meta gave",
                        header.file_len
                    )));
                }
                if chunks.send(chunk.data).await.is_err() {
                    // The writer stopped on an error, which it gives below.
                    return Ok(());
                }
            }
            if written != header.file_len {
                return Err(Status::invalid_argument(format!(
                    "the snapshot ended after {written} of the {} bytes its meta gave",
                    header.file_len
                )));
            }
            Ok(())
        }
        .await;
        // The writer is done with the file (and its name) before anyone
        // removes it.
        drop(chunks);
        let wrote = writer
            .await
            .unwrap_or_else(|e| Err(format!("the writer thread failed: {e}")));
        received?;
        wrote.map_err(|e| Status::unavailable(format!("{}: {e}", path.display())))?;
        Ok(header)
    }
}

/// A thread that creates `path` through `io`, writes the chunks sent to
/// it in order, and fsyncs the file once the sender is dropped; its
/// result says which step failed.
fn file_writer(
    io: Arc<dyn Io>,
    path: PathBuf,
) -> (
    tokio::sync::mpsc::Sender<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), String>>,
) {
    // A few chunks ahead: enough to keep the disk busy, little memory.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(4);
    let writer = tokio::task::spawn_blocking(move || {
        let mut file = io
            .create(&path)
            .map_err(|e| format!("cannot create it: {e}"))?;
        while let Some(chunk) = rx.blocking_recv() {
            file.write_all(&chunk)
                .map_err(|e| format!("cannot write it: {e}"))?;
        }
        file.sync().map_err(|e| format!("cannot fsync it: {e}"))
    });
    (tx, writer)
}

#[tonic::async_trait]
impl<SM> pb::raft_server::Raft for RaftService<SM>
where
    SM: RaftStateMachine<UuidmapRaft, SnapshotData = SnapshotFile>,
{
    async fn vote(
        &self,
        request: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        self.check(&request)?;
        let req = VoteRequest::from_wire(request.into_inner()).map_err(invalid)?;
        let resp = self.raft.vote(req).await.map_err(stopping)?;
        Ok(Response::new(resp.to_wire()))
    }

    async fn pre_vote(
        &self,
        request: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        self.check(&request)?;
        let req = VoteRequest::from_wire(request.into_inner()).map_err(invalid)?;
        let resp = self.raft.pre_vote(req).await.map_err(stopping)?;
        Ok(Response::new(resp.to_wire()))
    }

    async fn append_entries(
        &self,
        request: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        self.check(&request)?;
        let arrived = std::time::Instant::now();
        let req = AppendEntriesRequest::from_wire(request.into_inner()).map_err(invalid)?;
        let commit = req.leader_commit.map_or(0, |l| l.index);
        let resp = self.raft.append_entries(req).await.map_err(stopping)?;
        if let Some((clock, applied)) = &self.staleness
            && resp.is_success()
        {
            clock.heard(arrived, commit, applied.current());
        }
        Ok(Response::new(resp.to_wire()))
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<pb::SnapshotChunk>>,
    ) -> Result<Response<pb::SnapshotResponse>, Status> {
        self.check(&request)?;
        let mut stream = request.into_inner();
        let path = self.snapshot_dir.join(format!(
            "{INCOMING_PREFIX}{}-{}.tmp",
            std::process::id(),
            INCOMING.fetch_add(1, Ordering::Relaxed)
        ));
        let started = std::time::Instant::now();
        let received = self.receive(&mut stream, &path).await;
        let header = match received {
            Ok(header) => {
                tracing::info!(
                    bytes = header.file_len,
                    took_ms = started.elapsed().as_millis() as u64,
                    "received a snapshot"
                );
                header
            }
            Err(status) => {
                let _ = self.io.remove(&path);
                return Err(status);
            }
        };
        let snapshot = Snapshot {
            meta: header.meta,
            snapshot: SnapshotFile {
                path: path.clone(),
                snapshot_lsn: header.snapshot_lsn,
                chain: header.chain,
            },
        };
        let installed = self.raft.install_full_snapshot(header.vote, snapshot).await;
        // The state machine moves a file it installs; one left was not.
        let _ = self.io.remove(&path);
        let resp = installed.map_err(stopping)?;
        Ok(Response::new(resp.to_wire()))
    }

    async fn transfer_leader(
        &self,
        request: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        self.check(&request)?;
        let req = TransferLeaderRequest::from_wire(request.into_inner()).map_err(invalid)?;
        let resp = self
            .raft
            .handle_transfer_leader(req)
            .await
            .map_err(stopping)?;
        Ok(Response::new(resp.to_wire()))
    }

    async fn read_index(
        &self,
        request: Request<pb::ReadIndexRequest>,
    ) -> Result<Response<pb::ReadIndexResponse>, Status> {
        use pb::read_index_response::Outcome;
        self.check(&request)?;
        let outcome = match leader_read_index(&self.raft).await {
            Ok(index) => Outcome::ReadIndex(index),
            Err(ReadIndexError::Stopping) => return Err(stopping("asked for a read index")),
            Err(e) => Outcome::Refused(pb::ReadIndexRefused {
                reason: e.to_string(),
                leader_id: e.leader().map_or(0, |l| l.id),
            }),
        };
        Ok(Response::new(pb::ReadIndexResponse {
            outcome: Some(outcome),
        }))
    }

    async fn identify(
        &self,
        _request: Request<pb::IdentifyRequest>,
    ) -> Result<Response<pb::IdentifyResponse>, Status> {
        Ok(Response::new(pb::IdentifyResponse {
            node_id: self.identity.node_id,
            incarnation: self.identity.incarnation,
        }))
    }
}
