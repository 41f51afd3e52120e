//! The replica group's membership calls of [`Client`]: its status, and
//! adding, promoting, removing members and handing over the leadership,
//! on the leader.

use uuidmap_proto::v1 as pb;

use crate::client::Client;
use crate::error::ClientError;
use pb::uuid_map_cluster_client::UuidMapClusterClient;

impl Client {
    /// A replica group member's view of its group (the member this call
    /// reaches: give one endpoint to ask a given member).
    pub async fn cluster_status(&self) -> Result<pb::ClusterStats, ClientError> {
        Ok(self
            .unary("cluster.Status", true, |channel, remaining| {
                let r = self.request(pb::ClusterStatusRequest {}, remaining);
                async move { UuidMapClusterClient::new(channel).status(r).await }
            })
            .await?
            .into_inner())
    }

    /// Adds node `id` to the replica group as a learner (its Raft address
    /// and its clients' URL), on the leader; answers once it has caught up.
    pub async fn add_learner(
        &self,
        id: u64,
        raft_addr: &str,
        client_url: &str,
    ) -> Result<pb::MembershipResponse, ClientError> {
        let message = pb::AddLearnerRequest {
            node_id: id,
            raft_addr: raft_addr.to_string(),
            client_url: client_url.to_string(),
        };
        Ok(self
            .unary_write("cluster.AddLearner", false, |channel, remaining| {
                let r = self.request(message.clone(), remaining);
                async move { UuidMapClusterClient::new(channel).add_learner(r).await }
            })
            .await?
            .into_inner())
    }

    /// Makes the learners `ids` voters, on the leader.
    pub async fn promote(&self, ids: &[u64]) -> Result<pb::MembershipResponse, ClientError> {
        let message = pb::PromoteRequest {
            node_ids: ids.to_vec(),
        };
        Ok(self
            .unary_write("cluster.Promote", false, |channel, remaining| {
                let r = self.request(message.clone(), remaining);
                async move { UuidMapClusterClient::new(channel).promote(r).await }
            })
            .await?
            .into_inner())
    }

    /// Removes the members `ids` from the replica group, on the leader.
    pub async fn remove_members(&self, ids: &[u64]) -> Result<pb::MembershipResponse, ClientError> {
        let message = pb::RemoveRequest {
            node_ids: ids.to_vec(),
        };
        Ok(self
            .unary_write("cluster.Remove", false, |channel, remaining| {
                let r = self.request(message.clone(), remaining);
                async move { UuidMapClusterClient::new(channel).remove(r).await }
            })
            .await?
            .into_inner())
    }

    /// Hands the group's leadership to voter `id`, on the leader; answers
    /// who leads once it took over. Not resent after an unknown outcome
    /// (a second transfer would be asked of the new leader).
    pub async fn transfer_leader(
        &self,
        id: u64,
    ) -> Result<pb::TransferLeaderResponse, ClientError> {
        let message = pb::TransferLeaderRequest { node_id: id };
        Ok(self
            .unary_write("cluster.TransferLeader", false, |channel, remaining| {
                let r = self.request(message, remaining);
                async move { UuidMapClusterClient::new(channel).transfer_leader(r).await }
            })
            .await?
            .into_inner())
    }
}
