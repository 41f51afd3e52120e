//! The admin service `uuidmap.v1.UuidMapAdmin`: operations on the server
//! itself (for now: take a snapshot).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::grpc_status::snapshot_error;
use uuidmap_engine::writer::DurableIndex;
use uuidmap_proto::v1::{self as pb, uuid_map_admin_server::UuidMapAdmin};

/// The admin service over one durable index.
#[derive(Clone)]
pub struct AdminService {
    durable: Arc<DurableIndex>,
}

impl AdminService {
    /// A service over `durable`.
    pub fn new(durable: Arc<DurableIndex>) -> Self {
        AdminService { durable }
    }
}

#[tonic::async_trait]
impl UuidMapAdmin for AdminService {
    async fn snapshot(
        &self,
        _request: Request<pb::SnapshotRequest>,
    ) -> Result<Response<pb::SnapshotResponse>, Status> {
        let info = self
            .durable
            .snapshot_now()
            .await
            .map_err(|e| snapshot_error(&e))?;
        tracing::info!(path = %info.path.display(), lsn = info.lsn, entries = info.entries, "snapshot taken on request");
        Ok(Response::new(pb::SnapshotResponse {
            path: info.path.display().to_string(),
            lsn: info.lsn,
            min_capture_lsn: info.min_capture_lsn,
            entries: info.entries,
            bytes: info.bytes,
            duration_us: info.duration.as_micros() as u64,
        }))
    }
}
