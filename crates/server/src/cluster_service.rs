//! The `uuidmap.v1.UuidMapCluster` service: a replica group's membership
//! (`proto/uuidmap/v1/cluster.proto`), on a member's openraft through
//! `uuidmap_cluster::membership`. A single node answers
//! FAILED_PRECONDITION.

use std::collections::BTreeSet;

use tonic::{Request, Response, Status};
use uuidmap_cluster::ClusterNode;
use uuidmap_cluster::membership::{self, MembershipChanged};
use uuidmap_cluster::network;
use uuidmap_cluster::raft_tls::RaftTls;
use uuidmap_cluster::replica::IndexRaft;
use uuidmap_cluster::transfer::LeaderTransfer;
use uuidmap_proto::v1 as pb;

use crate::grpc_status::{membership_error, transfer_error};

/// How long `add` waits for the new member to say which node it is.
const IDENTIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a leader transfer waits for the new leader: two election
/// timeouts of the default timing, and the new leader's first entry.
const TRANSFER_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The cluster service of one server.
#[derive(Clone)]
pub struct ClusterService {
    /// The member's openraft; `None` on a single node.
    raft: Option<IndexRaft>,
    /// The member's Raft TLS, which a node being added must prove its id
    /// with (`None`: plaintext).
    raft_tls: Option<RaftTls>,
    /// The member's leader transfer.
    transfer: Option<LeaderTransfer>,
    /// The member's own view (its counters, a leader stepping down).
    view: Option<crate::ClusterView>,
}

impl ClusterService {
    /// The service of a member whose openraft is `raft` (`None`: a single
    /// node).
    pub fn new(raft: Option<IndexRaft>) -> Self {
        ClusterService {
            raft,
            raft_tls: None,
            transfer: None,
            view: None,
        }
    }

    /// Asks nodes being added who they are over the member's Raft TLS.
    pub fn with_raft_tls(mut self, tls: Option<RaftTls>) -> Self {
        self.raft_tls = tls;
        self
    }

    /// The same service, with the member's leader transfer and view.
    pub fn with_member(
        mut self,
        transfer: Option<LeaderTransfer>,
        view: Option<crate::ClusterView>,
    ) -> Self {
        self.transfer = transfer;
        self.view = view;
        self
    }

    fn raft(&self) -> Result<&IndexRaft, Status> {
        self.raft.as_ref().ok_or_else(|| {
            Status::failed_precondition(
                "this server serves as a single node, not as a member of a replica group (start \
                 members with `uuidmap serve --node-id`)",
            )
        })
    }
}

fn ids(node_ids: Vec<u64>, what: &str) -> Result<BTreeSet<u64>, Status> {
    if node_ids.is_empty() {
        return Err(Status::invalid_argument(format!(
            "name at least one node to {what}"
        )));
    }
    if node_ids.contains(&0) {
        return Err(Status::invalid_argument("node ids start at 1"));
    }
    Ok(node_ids.into_iter().collect())
}

fn response(m: MembershipChanged) -> Response<pb::MembershipResponse> {
    Response::new(pb::MembershipResponse {
        lsn: m.lsn,
        voters: m.voters,
        learners: m.learners,
    })
}

#[tonic::async_trait]
impl pb::uuid_map_cluster_server::UuidMapCluster for ClusterService {
    async fn status(
        &self,
        _request: Request<pb::ClusterStatusRequest>,
    ) -> Result<Response<pb::ClusterStats>, Status> {
        let raft = self.raft()?;
        let status = match &self.view {
            Some(view) => view(),
            None => uuidmap_cluster::cluster_status::status_of(raft),
        };
        Ok(Response::new(crate::stats_answer::cluster_stats(&status)))
    }

    async fn add_learner(
        &self,
        request: Request<pb::AddLearnerRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        let raft = self.raft()?;
        let r = request.into_inner();
        if r.node_id == 0 {
            return Err(Status::invalid_argument("node ids start at 1"));
        }
        // The same checks as `--peers` makes of a member's addresses.
        let peer = format!("{}={}@{}", r.node_id, r.raft_addr, r.client_url);
        let parsed: crate::config::Peers = peer
            .parse()
            .map_err(|e: String| Status::invalid_argument(e))?;
        let p = &parsed.0[0];
        // The membership records its incarnation, which every Raft call to
        // it then carries (uuidmap_cluster::identity), and its
        // Redis-protocol address.
        let found = network::identify_member(
            &p.raft_addr,
            r.node_id,
            self.raft_tls.as_ref(),
            IDENTIFY_TIMEOUT,
        )
        .await
        .map_err(|e| {
            // Not UNAVAILABLE: retrying does not help until it runs.
            Status::failed_precondition(format!(
                "node {} was not added: asked which node it is, {e}. Start it first (`uuidmap \
                     serve --node-id {}` with that Raft address)",
                r.node_id, r.node_id
            ))
        })?;
        if found.identity.node_id != r.node_id {
            return Err(Status::failed_precondition(format!(
                "node {} was not added: the member at {} is node {}",
                r.node_id, p.raft_addr, found.identity.node_id
            )));
        }
        let node = ClusterNode {
            raft_addr: p.raft_addr.clone(),
            api_url: p.client_url.clone(),
            incarnation: found.identity.incarnation,
            resp_addr: found.resp_addr,
        };
        membership::add_learner(raft, r.node_id, node)
            .await
            .map(response)
            .map_err(membership_error)
    }

    async fn promote(
        &self,
        request: Request<pb::PromoteRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        let raft = self.raft()?;
        let ids = ids(request.into_inner().node_ids, "promote")?;
        membership::promote(raft, ids)
            .await
            .map(response)
            .map_err(membership_error)
    }

    async fn remove(
        &self,
        request: Request<pb::RemoveRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        let raft = self.raft()?;
        let ids = ids(request.into_inner().node_ids, "remove")?;
        membership::remove(raft, ids)
            .await
            .map(response)
            .map_err(membership_error)
    }

    async fn transfer_leader(
        &self,
        request: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        self.raft()?;
        let transfer = self
            .transfer
            .as_ref()
            .ok_or_else(|| Status::failed_precondition("this member cannot transfer"))?;
        let to = request.into_inner().node_id;
        if to == 0 {
            return Err(Status::invalid_argument("node ids start at 1"));
        }
        let done = transfer
            .to(to, TRANSFER_WAIT)
            .await
            .map_err(transfer_error)?;
        Ok(Response::new(pb::TransferLeaderResponse {
            leader_id: done.leader,
            leader_url: done.url.unwrap_or_default(),
            term: done.term,
        }))
    }
}
