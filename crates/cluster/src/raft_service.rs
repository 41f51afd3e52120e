//! The server side of the Raft service (`uuidmap.raft.v1.Raft`): what the
//! other members call on this one. Each handler converts the message
//! ([`crate::raft_wire`]), hands it to openraft, and converts the answer back.
//!
//! - With Raft TLS ([`crate::raft_tls`], [`RaftService::verify_callers`]),
//!   a caller whose certificate names no member of the group this member
//!   knows, or a message whose claimed sender is not the caller's node, is
//!   `PERMISSION_DENIED`.
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
//! - `Vote` and `PreVote` pass the member's [`VoteGuard`] first (the start
//!   hold: UNAVAILABLE; an unauthorized leader-transfer flag is cleared).
//!   `TransferLeader` is taken only from the leader this member follows,
//!   in its term (FAILED_PRECONDITION otherwise), and names the candidate
//!   whose transfer flag then counts.
//! - `ReadIndex` answers the leader's read index ([`crate::read_index`]),
//!   or why not; an AppendEntries openraft accepted is recorded in the
//!   member's [`Staleness`] clock when it has one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use openraft::async_runtime::WatchReceiver;
use openraft::storage::{RaftStateMachine, Snapshot};
use tonic::{Request, Response, Status, Streaming};
use uuidmap_engine::store::Io;
use uuidmap_engine::writer::ReadLease;
use uuidmap_proto::raft::v1 as pb;

use crate::counters::RaftCounters;
use crate::identity::{INCARNATION_HEADER, MemberIdentity};
use crate::raft_tls::RaftTls;
use crate::raft_wire::{FromWire, SnapshotHeader, ToWire, WireError};
use crate::read_index::{ReadIndexError, leader_read_index};
use crate::rejoin::{Promotions, RejoinError, VoteTrust};
use crate::snapshot_file::SnapshotFile;
use crate::staleness::Staleness;
use crate::types::{AppendEntriesRequest, TransferLeaderRequest, UuidmapRaft, VoteRequest};
use crate::vote_guard::VoteGuard;

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
    /// Whether callers are verified by their certificates (Raft TLS on).
    verify_callers: bool,
    /// Whether this member's vote is trusted ([`crate::rejoin`]): while
    /// not, it refuses votes, and entries until it is a learner.
    trust: Arc<VoteTrust>,
    /// On the leader: the members being promoted back after a rejoin.
    promotions: Arc<Promotions>,
    /// The member's vote rules on top of openraft's.
    guard: Arc<VoteGuard>,
    /// The member's counters (snapshots received).
    counters: Arc<RaftCounters>,
    /// The member's staleness clock and applied LSN, when it has them.
    staleness: Option<(Arc<Staleness>, Arc<uuidmap_index::sync::LsnWatermark>)>,
    /// The member's read lease, when it has one: while it holds, a
    /// `ReadIndex` call is answered from it ([`RaftService::lease_read_index`]).
    lease: Option<Arc<ReadLease>>,
    /// Where this member's Redis-protocol port listens, which `Identify`
    /// answers; empty: none.
    resp_addr: String,
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
            verify_callers: false,
            trust: VoteTrust::new(false),
            promotions: Arc::default(),
            guard: Arc::default(),
            counters: Arc::default(),
            staleness: None,
            lease: None,
            resp_addr: String::new(),
        }
    }

    /// The same service, answering `Identify` with `resp_addr`, where this
    /// member's Redis-protocol port listens (`host:port`).
    pub fn with_resp_addr(mut self, resp_addr: String) -> Self {
        self.resp_addr = resp_addr;
        self
    }

    /// The same service, checking votes with `guard` and counting in
    /// `counters` (the member's; by default, no hold and counters of its
    /// own).
    pub fn guarded(mut self, guard: Arc<VoteGuard>, counters: Arc<RaftCounters>) -> Self {
        self.guard = guard;
        self.counters = counters;
        self
    }

    /// Refuses a `TransferLeader` that does not come from the leader this
    /// member follows, in its term, or that names this member while its
    /// start hold lasts.
    fn check_transfer(&self, req: &TransferLeaderRequest) -> Result<(), Status> {
        let from = req.from_leader();
        let (vote, leader) = {
            let m = self.raft.metrics();
            let m = m.borrow_watched();
            (m.vote, m.current_leader)
        };
        let sender = from.leader_id.voted_for;
        if !from.committed || vote != *from || leader != Some(sender) {
            return Err(Status::failed_precondition(format!(
                "a leader transfer is taken only from the leader this member follows, in its \
                 term: the request comes from node {sender} in term {}, and this member's \
                 leader is {leader:?} in term {}",
                from.leader_id.term, vote.leader_id.term
            )));
        }
        if *req.to_node_id() == self.identity.node_id {
            self.guard
                .check_hold()
                .map_err(|e| Status::unavailable(e.to_string()))?;
        }
        Ok(())
    }

    /// Verifies every caller by its certificate ([`crate::raft_tls`]): to
    /// serve with the member's Raft TLS on.
    pub fn verify_callers(mut self) -> Self {
        self.verify_callers = true;
        self
    }

    /// The caller's node, when callers are verified, after refusing one
    /// that is not a member of the group this member knows
    /// ([`crate::raft_tls`]).
    async fn caller<T>(&self, request: &Request<T>) -> Result<Option<u64>, Status> {
        if !self.verify_callers {
            return Ok(None);
        }
        let node_ids = |m: &crate::types::Membership| -> BTreeSet<u64> {
            m.nodes().map(|(id, _)| *id).collect()
        };
        let mut members = node_ids(
            self.raft
                .metrics()
                .borrow_watched()
                .membership_config
                .membership(),
        );
        // The metrics lag the core: right after a start or `initialize`
        // they show no membership while the member is in a group. Only
        // openraft's state says "in no group", which admits any node.
        if members.is_empty() {
            members = self
                .raft
                .with_raft_state(move |st| node_ids(st.membership_state.effective().membership()))
                .await
                .map_err(stopping)?;
        }
        crate::raft_tls::authorize_caller(request, &members).map(Some)
    }

    /// This service for a member whose vote is trusted as `trust` says
    /// (the log store's, [`crate::rejoin`]); trusted by default.
    pub fn with_vote_trust(mut self, trust: Arc<VoteTrust>) -> Self {
        self.trust = trust;
        self
    }

    /// Refuses a vote (or a transfer of leadership) while this member's
    /// vote is not trusted.
    fn check_vote_trusted(&self) -> Result<(), Status> {
        if self.trust.distrusted() {
            return Err(Status::unavailable(format!(
                "node {} votes for no one: its Raft state was found damaged, so it may have \
                 promised its vote in a later term; its group makes it a learner and promotes it \
                 back",
                self.identity.node_id
            )));
        }
        Ok(())
    }

    /// Refuses entries while this member's vote is not trusted and its group
    /// has not made it a learner yet.
    fn check_takes_entries(&self) -> Result<(), Status> {
        if self.trust.refuses_entries() {
            return Err(Status::unavailable(format!(
                "node {} takes no entries until its group has made it a learner: its Raft state \
                 was found damaged (it asks the leader to rejoin it)",
                self.identity.node_id
            )));
        }
        Ok(())
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

    /// This service, answering `ReadIndex` from `lease` while it holds.
    pub fn with_lease(mut self, lease: Arc<ReadLease>) -> Self {
        self.lease = Some(lease);
        self
    }

    /// The read index from this member's lease, if it holds: it leads,
    /// its writer passed its gate in this term and a majority acknowledged
    /// it less than the lease ago. Its applied LSN, loaded after that
    /// check, covers every write acknowledged before the call: the rule of
    /// its own linearizable reads (docs/replication.md 6.1), so no
    /// heartbeat round is needed. `None`: the caller gets one.
    fn lease_read_index(&self) -> Option<u64> {
        let lease = self.lease.as_ref()?;
        let (_, applied) = self.staleness.as_ref()?;
        if !lease.serves_as_leader() {
            return None;
        }
        // At least what a follower was told is committed: another
        // follower may already show it.
        let applied = applied.current();
        lease
            .admit_applied(applied)
            .ok()
            .map(|()| applied.max(lease.commit_told()))
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

/// Refuses a message whose vote names another node than the verified
/// `caller` (`None`: callers are not verified).
fn sent_by(caller: Option<u64>, vote: &crate::types::Vote) -> Result<(), Status> {
    match caller {
        Some(caller) => crate::raft_tls::check_sender(caller, vote.leader_id.voted_for),
        None => Ok(()),
    }
}

fn stopping(e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("this node's Raft is stopping: {e}"))
}

/// The tonic server to serve the Raft service with: HTTP/2 windows sized
/// for snapshot transfers (the defaults, 64 KiB, cap a stream at 64 KiB
/// per round trip: a 400 MB snapshot would crawl), no Nagle delay, and
/// this member's TLS, when it has any.
pub fn raft_server(
    tls: Option<&RaftTls>,
) -> Result<tonic::transport::Server, tonic::transport::Error> {
    let server = tonic::transport::Server::builder()
        .initial_stream_window_size(8 << 20)
        .initial_connection_window_size(16 << 20)
        .tcp_nodelay(true);
    match tls {
        Some(tls) => server.tls_config(tls.server_config()),
        None => Ok(server),
    }
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
    /// `caller`: the verified caller's node, which must be the leader
    /// the header names.
    async fn receive(
        &self,
        stream: &mut Streaming<pb::SnapshotChunk>,
        path: &Path,
        caller: Option<u64>,
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
        sent_by(caller, &header.vote)?;
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
                if uuidmap_engine::store::crc32c(&chunk.data) != chunk.crc32c {
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
        let caller = self.caller(&request).await?;
        self.check_vote_trusted()?;
        let mut req = VoteRequest::from_wire(request.into_inner()).map_err(invalid)?;
        sent_by(caller, &req.vote)?;
        self.guard
            .check_vote(&mut req)
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let resp = self.raft.vote(req).await.map_err(stopping)?;
        Ok(Response::new(resp.to_wire()))
    }

    async fn pre_vote(
        &self,
        request: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        self.check(&request)?;
        let caller = self.caller(&request).await?;
        self.check_vote_trusted()?;
        let mut req = VoteRequest::from_wire(request.into_inner()).map_err(invalid)?;
        sent_by(caller, &req.vote)?;
        self.guard
            .check_vote(&mut req)
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let resp = self.raft.pre_vote(req).await.map_err(stopping)?;
        Ok(Response::new(resp.to_wire()))
    }

    async fn append_entries(
        &self,
        request: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        self.check(&request)?;
        let caller = self.caller(&request).await?;
        self.check_takes_entries()?;
        let arrived = std::time::Instant::now();
        let req = AppendEntriesRequest::from_wire(request.into_inner()).map_err(invalid)?;
        sent_by(caller, &req.vote)?;
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
        let caller = self.caller(&request).await?;
        self.check_takes_entries()?;
        let mut stream = request.into_inner();
        let path = self.snapshot_dir.join(format!(
            "{INCOMING_PREFIX}{}-{}.tmp",
            std::process::id(),
            INCOMING.fetch_add(1, Ordering::Relaxed)
        ));
        let started = std::time::Instant::now();
        let received = self.receive(&mut stream, &path, caller).await;
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
        RaftCounters::bump(&self.counters.snapshots_received);
        Ok(Response::new(resp.to_wire()))
    }

    async fn transfer_leader(
        &self,
        request: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        self.check(&request)?;
        let caller = self.caller(&request).await?;
        self.check_vote_trusted()?;
        let req = TransferLeaderRequest::from_wire(request.into_inner()).map_err(invalid)?;
        sent_by(caller, req.from_leader())?;
        self.check_transfer(&req)?;
        self.guard
            .transfer_named(req.from_leader().leader_id.term, *req.to_node_id());
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
        let index = match self.lease_read_index() {
            Some(index) => Ok(index),
            None => leader_read_index(&self.raft).await,
        };
        let outcome = match index {
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
        request: Request<pb::IdentifyRequest>,
    ) -> Result<Response<pb::IdentifyResponse>, Status> {
        // Any node of the Raft CA: a member not added yet is asked too.
        if self.verify_callers {
            crate::raft_tls::caller_node(&request)?;
        }
        Ok(Response::new(pb::IdentifyResponse {
            node_id: self.identity.node_id,
            incarnation: self.identity.incarnation,
            resp_addr: self.resp_addr.clone(),
        }))
    }

    async fn rejoin(
        &self,
        request: Request<pb::RejoinRequest>,
    ) -> Result<Response<pb::RejoinResponse>, Status> {
        // With Raft TLS, only the node itself may ask.
        let caller = self.caller(&request).await?;
        let pb::RejoinRequest {
            node_id,
            incarnation,
        } = request.into_inner();
        if caller.is_some_and(|c| c != node_id) {
            return Err(Status::permission_denied(format!(
                "node {} may not ask for node {node_id} to rejoin: only a node asks for itself",
                caller.unwrap_or_default()
            )));
        }
        match crate::rejoin::rejoin(&self.raft, &self.promotions, node_id, incarnation).await {
            Ok(learner_at) => Ok(Response::new(pb::RejoinResponse { learner_at })),
            Err(e @ (RejoinError::NotLeader { .. } | RejoinError::ChangeFailed { .. })) => {
                Err(Status::unavailable(e.to_string()))
            }
            Err(e @ RejoinError::Refused(_)) => Err(Status::failed_precondition(e.to_string())),
        }
    }
}
