//! The client side of the Raft service: how a member reaches the others
//! (openraft's `RaftNetworkFactory` and `RaftNetworkV2` over tonic).
//!
//! - One lazily connected channel per target, to the target's
//!   `raft_addr` from the membership, unless a local override names
//!   another address for that node id (test rigs put a fault proxy there).
//! - With Raft TLS ([`crate::raft_tls`]), every channel is TLS: this
//!   member presents its certificate, and the target must present a
//!   certificate of the Raft CA for its own node name, whatever address
//!   is dialed (a `--raft-dial` proxy included).
//! - Every call carries the incarnation the membership records for its
//!   target ([`crate::identity`]), which the target checks.
//! - Every unary call carries openraft's deadline (`RPCOption::hard_ttl`).
//!   A call that failed (connection refused or reset, any gRPC status, an
//!   answer that does not convert) is `Unreachable`, which makes openraft
//!   back off; one that ran out of time is `Timeout`.
//! - A snapshot is sent as one client stream: its header, then the file in
//!   [`SNAPSHOT_CHUNK`]-byte chunks, each with its CRC-32C. The transfer
//!   has no overall deadline (a large snapshot takes what it takes); it
//!   stops when openraft cancels it.

use std::collections::HashMap;
use std::future::Future;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::{RPCTypes, RaftNetworkV2};
use tonic::transport::{Channel, Endpoint};
use uuidmap_proto::raft::v1 as pb;
use uuidmap_proto::raft::v1::raft_client::RaftClient;

use crate::identity::INCARNATION_HEADER;
use crate::node::ClusterNode;
use crate::raft_tls::RaftTls;
use crate::raft_wire::{FromWire, SnapshotHeader, ToWire};
use crate::snapshot_file::SnapshotFile;
use uuidmap_engine::writer::ReadLease;

use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderError,
    TransferLeaderRequest, UuidmapRaft, Vote, VoteRequest, VoteResponse,
};

/// Bytes of a snapshot file per message.
pub const SNAPSHOT_CHUNK: usize = 1 << 20;

/// The largest message a member sends or takes: a log entry may hold up to
/// 64 MiB of ops (the WAL's limit), plus its framing.
pub const MAX_MESSAGE_BYTES: usize = (64 << 20) + (1 << 20);

/// Makes a [`RaftPeer`] per target (openraft's network factory).
#[derive(Clone, Default)]
pub struct GrpcNetworkFactory {
    /// This node's id, for the errors.
    pub id: u64,
    /// Addresses to use instead of the membership's, by node id.
    pub overrides: Arc<HashMap<u64, String>>,
    /// This member's Raft TLS (`None`: plaintext).
    pub tls: Option<Arc<RaftTls>>,
    /// The member's counters (elections started, snapshots sent).
    pub counters: Arc<crate::counters::RaftCounters>,
    /// The member's read lease, told every commit index sent to a
    /// follower ([`ReadLease::told_commit`]; `None`: not recorded).
    pub lease: Option<Arc<ReadLease>>,
}

/// The connection to one other member.
pub struct RaftPeer {
    id: u64,
    target: u64,
    /// The target's incarnation in the membership (0: unknown).
    incarnation: u64,
    client: Result<RaftClient<Channel>, String>,
    counters: Arc<crate::counters::RaftCounters>,
    lease: Option<Arc<ReadLease>>,
}

impl RaftNetworkFactory<UuidmapRaft> for GrpcNetworkFactory {
    type Network = RaftPeer;

    async fn new_client(&mut self, target: u64, node: &ClusterNode) -> RaftPeer {
        let addr = self
            .overrides
            .get(&target)
            .cloned()
            .unwrap_or_else(|| node.raft_addr.clone());
        let client = endpoint(&addr, target, self.tls.as_deref())
            .map(|e| {
                let channel = e
                    .connect_timeout(Duration::from_secs(1))
                    .tcp_nodelay(true)
                    // A snapshot is hundreds of MiB: big windows, or it
                    // crawls.
                    .initial_stream_window_size(8 << 20)
                    .initial_connection_window_size(16 << 20)
                    .connect_lazy();
                RaftClient::new(channel)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES)
            })
            .map_err(|e| format!("node {target}'s Raft address {addr:?} is not usable: {e}"));
        RaftPeer {
            id: self.id,
            target,
            incarnation: node.incarnation,
            client,
            counters: self.counters.clone(),
            lease: self.lease.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct PeerError(String);

impl RaftPeer {
    fn client(&self) -> Result<RaftClient<Channel>, Unreachable<UuidmapRaft>> {
        self.client
            .clone()
            .map_err(|e| Unreachable::new(&PeerError(e)))
    }

    /// `message` as a request to the target: with the incarnation the
    /// membership records for it, which it checks ([`crate::identity`]).
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if self.incarnation != 0 {
            request.metadata_mut().insert(
                INCARNATION_HEADER,
                tonic::metadata::MetadataValue::from(self.incarnation),
            );
        }
        request
    }

    /// Sends `message` with `call` under openraft's deadline, maps the
    /// errors, and converts the answer.
    async fn unary<M, W, R, Fut>(
        &self,
        action: RPCTypes,
        option: &RPCOption,
        message: &M,
        call: impl FnOnce(RaftClient<Channel>, tonic::Request<W>) -> Fut,
    ) -> Result<R, RPCError<UuidmapRaft>>
    where
        M: ToWire<Wire = W>,
        R: FromWire,
        Fut: Future<Output = Result<tonic::Response<R::Wire>, tonic::Status>>,
    {
        let client = self.client()?;
        let mut request = self.request(message.to_wire());
        let ttl = option.hard_ttl();
        request.set_timeout(ttl);
        match tokio::time::timeout(ttl, call(client, request)).await {
            Err(_) => Err(RPCError::Timeout(Timeout {
                action,
                id: self.id,
                target: self.target,
                timeout: ttl,
            })),
            Ok(Err(status)) => Err(status_error(self.target, &status)),
            Ok(Ok(resp)) => R::from_wire(resp.into_inner()).map_err(|e| wire_error(self.target, e)),
        }
    }
}

/// Every failed call backs off (`Unreachable`): openraft retries a
/// `Network` error at once, and a member that keeps refusing (stopping,
/// another release, a bad message) would then be called in a hot loop.
fn status_error(target: u64, status: &tonic::Status) -> RPCError<UuidmapRaft> {
    RPCError::Unreachable(Unreachable::new(&PeerError(format!(
        "node {target} answered {:?}: {}",
        status.code(),
        status.message()
    ))))
}

fn wire_error(target: u64, e: crate::raft_wire::WireError) -> RPCError<UuidmapRaft> {
    RPCError::Unreachable(Unreachable::new(&PeerError(format!(
        "node {target} answered a message that does not convert: {e}"
    ))))
}

impl RaftNetworkV2<UuidmapRaft> for RaftPeer {
    type SnapshotData = SnapshotFile;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse, RPCError<UuidmapRaft>> {
        // Before the send: the follower may apply what this commit index
        // covers and show it to a read before this leader applied it.
        if let (Some(lease), Some(commit)) = (&self.lease, &rpc.leader_commit) {
            lease.told_commit(commit.index);
        }
        self.unary(
            RPCTypes::AppendEntries,
            &option,
            &rpc,
            |mut c, r| async move { c.append_entries(r).await },
        )
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest,
        option: RPCOption,
    ) -> Result<VoteResponse, RPCError<UuidmapRaft>> {
        self.counters.election_in(rpc.vote.leader_id.term);
        self.unary(RPCTypes::Vote, &option, &rpc, |mut c, r| async move {
            c.vote(r).await
        })
        .await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest,
        option: RPCOption,
    ) -> Result<VoteResponse, RPCError<UuidmapRaft>> {
        self.unary(RPCTypes::Vote, &option, &rpc, |mut c, r| async move {
            c.pre_vote(r).await
        })
        .await
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest,
        option: RPCOption,
    ) -> Result<Result<(), TransferLeaderError>, RPCError<UuidmapRaft>> {
        self.unary(
            RPCTypes::TransferLeader,
            &option,
            &req,
            |mut c, r| async move { c.transfer_leader(r).await },
        )
        .await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: openraft::storage::Snapshot<
            crate::types::CommittedLeaderId,
            u64,
            ClusterNode,
            SnapshotFile,
        >,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse, StreamingError<UuidmapRaft>> {
        let mut client = self.client()?;
        let unreachable = |e: String| StreamingError::Unreachable(Unreachable::new(&PeerError(e)));
        let file = snapshot.snapshot;
        let mut reader = std::fs::File::open(&file.path)
            .map_err(|e| unreachable(format!("opening {}: {e}", file.path.display())))?;
        let file_len = reader
            .metadata()
            .map_err(|e| unreachable(format!("reading {}: {e}", file.path.display())))?
            .len();
        let header = SnapshotHeader {
            vote,
            meta: snapshot.meta,
            file_len,
            snapshot_lsn: file.snapshot_lsn,
            chain: file.chain,
        };
        // The chunks are read on a blocking thread and handed to the
        // stream through a small channel (back-pressure: two chunks ahead).
        let (tx, rx) = tokio::sync::mpsc::channel::<pb::SnapshotChunk>(2);
        let first = pb::SnapshotChunk {
            chunk: Some(pb::snapshot_chunk::Chunk::Meta(header.to_wire())),
        };
        let path = file.path.clone();
        let reading = tokio::task::spawn_blocking(move || -> Result<(), String> {
            tx.blocking_send(first)
                .map_err(|_| "the transfer ended".to_string())?;
            let mut offset = 0u64;
            loop {
                let mut data = vec![0u8; SNAPSHOT_CHUNK];
                let mut got = 0;
                while got < data.len() {
                    match reader.read(&mut data[got..]) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) => return Err(format!("reading {}: {e}", path.display())),
                    }
                }
                if got == 0 {
                    return Ok(());
                }
                data.truncate(got);
                let chunk = pb::SnapshotBytes {
                    offset,
                    crc32c: uuidmap_engine::store::crc32c(&data),
                    data: data.into(),
                };
                offset += got as u64;
                tx.blocking_send(pb::SnapshotChunk {
                    chunk: Some(pb::snapshot_chunk::Chunk::Bytes(chunk)),
                })
                .map_err(|_| "the transfer ended".to_string())?;
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let sent = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            sent = client.install_snapshot(self.request(stream)) => sent,
        };
        let resp = sent.map_err(|status| {
            StreamingError::Unreachable(Unreachable::new(&PeerError(format!(
                "node {} answered {:?}: {}",
                self.target,
                status.code(),
                status.message()
            ))))
        })?;
        if let Ok(Err(e)) = reading.await {
            return Err(unreachable(e));
        }
        let resp = SnapshotResponse::from_wire(resp.into_inner()).map_err(|e| {
            StreamingError::Unreachable(Unreachable::new(&PeerError(e.to_string())))
        })?;
        crate::counters::RaftCounters::bump(&self.counters.snapshots_sent);
        Ok(resp)
    }
}

/// The endpoint of node `target`'s Raft service at `addr` (`host:port`):
/// plaintext, or TLS verified for the target's node name.
pub(crate) fn endpoint(
    addr: &str,
    target: u64,
    tls: Option<&RaftTls>,
) -> Result<Endpoint, tonic::transport::Error> {
    match tls {
        None => Endpoint::from_shared(format!("http://{addr}")),
        Some(tls) => {
            Endpoint::from_shared(format!("https://{addr}"))?.tls_config(tls.client_config(target))
        }
    }
}

/// Asks the member whose Raft service listens at `raft_addr` (`host:port`)
/// which node it is and its incarnation ([`crate::identity`]), within
/// `timeout`. `expected`: the node it should be; with `tls`, the member
/// must prove it by its certificate (the answer could name another node
/// only if the certificate and the directory disagree). The error says why
/// it did not answer.
pub async fn identify(
    raft_addr: &str,
    expected: u64,
    tls: Option<&RaftTls>,
    timeout: Duration,
) -> Result<crate::identity::MemberIdentity, String> {
    identify_member(raft_addr, expected, tls, timeout)
        .await
        .map(|found| found.identity)
}

/// What a member says of itself when asked ([`identify_member`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identified {
    /// Its node id and incarnation.
    pub identity: crate::identity::MemberIdentity,
    /// Where its Redis-protocol port listens (`host:port`); empty: none.
    pub resp_addr: String,
}

/// [`identify`], and the member's Redis-protocol address, which a
/// membership records beside its incarnation.
pub async fn identify_member(
    raft_addr: &str,
    expected: u64,
    tls: Option<&RaftTls>,
    timeout: Duration,
) -> Result<Identified, String> {
    let endpoint = endpoint(raft_addr, expected, tls)
        .map_err(|e| format!("the Raft address {raft_addr:?} is not usable: {e}"))?
        .connect_timeout(timeout)
        .timeout(timeout);
    let asked = async {
        let channel = endpoint.connect().await.map_err(|e| {
            format!(
                "cannot reach {raft_addr}: {}",
                uuidmap_proto::error_chain::error_chain(&e)
            )
        })?;
        RaftClient::new(channel)
            .identify(pb::IdentifyRequest {})
            .await
            .map_err(|s| format!("{raft_addr} answered {:?}: {}", s.code(), s.message()))
    };
    let answer = tokio::time::timeout(timeout, asked)
        .await
        .map_err(|_| format!("{raft_addr} did not answer within {timeout:?}"))??
        .into_inner();
    Ok(Identified {
        identity: crate::identity::MemberIdentity {
            node_id: answer.node_id,
            incarnation: answer.incarnation,
        },
        resp_addr: answer.resp_addr,
    })
}
