//! The data service `uuidmap.v1.UuidMap`: lookups straight from the index
//! (lock-free, after an optional wait for `min_lsn`, and on a replica
//! group member for the read's consistency: `read_gate`), writes through
//! the single-writer pipeline.
//!
//! Read-your-writes: a write answers with its LSN only after it is applied
//! and the watermark published, so a read that first waits for that LSN
//! (on any connection) sees it. A read's `applied_lsn` is loaded *before*
//! the lookup, so the answer reflects at least every write up to it.

use std::sync::Arc;

use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};

use super::admission::Admission;
use super::config::Limits;
use super::deadline::{call_deadline, wait_deadline};
use super::errors::RequestError;
use super::grpc_status::{partition_refused, read_refused, write_error};
use super::lookup::{LookupMetrics, LookupStream, Lookups};
use super::read_gate::{Consistency, MemberReads, ReadGate};
use super::scan_rpc;
use super::wait;
use super::wire::{bytes_of, key, optional_uuid, pack_values, packed_keys, uuid};
use uuid::Uuid;
use uuidmap_engine::writer::{DurableIndex, WriteError, WriteOp};
use uuidmap_partition::Ownership;
use uuidmap_proto::v1::{self as pb, uuid_map_server::UuidMap, write_op::Op};

/// The data service over one durable index.
#[derive(Clone)]
pub struct DataService {
    durable: Arc<DurableIndex>,
    limits: Limits,
    /// Admits each request of a `Lookup` stream (the stream itself is
    /// admitted by the layer).
    admission: Arc<Admission>,
    /// The per-request series of `Lookup`, registered at start.
    lookup_metrics: LookupMetrics,
    /// Becomes `true` when the server starts stopping: waits end at once.
    stopping: watch::Receiver<bool>,
    /// What this service's scans examined; `/metrics` reads it.
    scan_counters: Arc<scan_rpc::ScanCounters>,
    /// A replica group member's view of its group (`None`: a single node).
    cluster: Option<crate::ClusterView>,
    /// Admits reads at their consistency.
    gate: ReadGate,
    /// On a member of a partitioned cluster: refuses keys of partitions its
    /// group does not own (`None`: it serves the whole keyspace).
    ownership: Option<Ownership>,
}

impl DataService {
    /// A service over `durable`, enforcing `limits`, admitting the
    /// requests of `Lookup` streams through `admission` and counting them
    /// in `lookup_metrics`; its waits end when `stopping` becomes `true`.
    pub fn new(
        durable: Arc<DurableIndex>,
        limits: Limits,
        admission: Arc<Admission>,
        lookup_metrics: LookupMetrics,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        let gate = ReadGate::new(Arc::clone(&durable), None, stopping.clone());
        DataService {
            durable,
            limits,
            admission,
            lookup_metrics,
            stopping,
            scan_counters: Arc::default(),
            cluster: None,
            gate,
            ownership: None,
        }
    }

    /// This service as a partitioned member's: every key is checked against
    /// `ownership` before the index sees it.
    pub fn with_ownership(mut self, ownership: Option<Ownership>) -> Self {
        self.ownership = ownership;
        self
    }

    /// Refuses the request if this member may not read one of `keys`.
    fn check_reads<'a>(&self, keys: impl IntoIterator<Item = &'a Uuid>) -> Result<(), Status> {
        match &self.ownership {
            Some(o) => o
                .check_reads(keys.into_iter().map(|k| k.into_bytes()))
                .map_err(partition_refused),
            None => Ok(()),
        }
    }

    /// This service as a replica group member's, whose reads consult
    /// `reads` for their consistency.
    pub fn with_member_reads(mut self, reads: Option<MemberReads>) -> Self {
        self.gate = ReadGate::new(Arc::clone(&self.durable), reads, self.stopping.clone());
        self
    }

    /// Admits a read at its consistency, after `min_lsn` (module
    /// `read_gate`); returns the applied LSN to answer with.
    async fn admit_read<T>(
        &self,
        request: &Request<T>,
        consistency: (i32, u64),
        min_lsn: u64,
    ) -> Result<u64, Status> {
        let consistency = Consistency::of(consistency.0, consistency.1)?;
        if let Some(answer) = self.gate.at_once(consistency, min_lsn) {
            return answer;
        }
        let bound = wait_deadline(request, self.limits.max_wait);
        self.gate.admit(consistency, min_lsn, bound).await
    }

    /// This service as a replica group member's, whose `Stats` answer
    /// with `cluster`'s view of the group.
    pub fn with_cluster(mut self, cluster: Option<crate::ClusterView>) -> Self {
        self.cluster = cluster;
        self
    }

    /// The counters of this service's scans (for the metrics endpoint).
    pub fn scan_counters(&self) -> Arc<scan_rpc::ScanCounters> {
        Arc::clone(&self.scan_counters)
    }

    /// Waits until `lsn` is applied (0: no wait), bounded by the call's
    /// deadline and the server's maximum wait. Returns the applied LSN.
    /// On a replica group member that believes it leads, the read is
    /// refused unless it can answer as the leader (`ReadLease`).
    async fn wait_applied<T>(&self, request: &Request<T>, lsn: u64) -> Result<u64, Status> {
        let current = self.durable.watermark().current();
        let applied = if current >= lsn {
            current
        } else {
            let bound = wait_deadline(request, self.limits.max_wait);
            wait::applied(&self.durable, &self.stopping, lsn, bound).await?
        };
        self.durable.admit_read().map_err(read_refused)?;
        Ok(applied)
    }

    /// On a partitioned member, the write fence's permit: held from the
    /// ownership check until the write is answered (`Ownership`).
    async fn write_permit(&self) -> Option<tokio::sync::OwnedRwLockReadGuard<()>> {
        match &self.ownership {
            Some(o) => Some(o.write_permit().await),
            None => None,
        }
    }

    /// Refuses the request if this member may not write one of `ops`'
    /// keys; `copy`: they are a partition move's copy.
    fn check_writes(&self, ops: &[WriteOp], copy: bool) -> Result<(), Status> {
        match &self.ownership {
            Some(o) => o
                .check_writes(ops.iter().map(|op| op.key().as_uuid().into_bytes()), copy)
                .map_err(partition_refused),
            None => Ok(()),
        }
    }

    async fn submit(&self, ops: Vec<WriteOp>) -> Result<u64, WriteError> {
        self.durable.writes().write(ops).await.map(|o| o.lsn)
    }
}

/// One proto write operation, checked.
fn write_op(index: usize, op: &pb::WriteOp) -> Result<WriteOp, RequestError> {
    let f = |name: &str| format!("ops[{index}].{name}");
    Ok(match &op.op {
        Some(Op::Put(p)) => WriteOp::Put {
            key: key(&f("put.key"), &p.key)?,
            value: uuid(&f("put.value"), &p.value)?,
        },
        Some(Op::Delete(d)) => WriteOp::Delete {
            key: key(&f("delete.key"), &d.key)?,
        },
        Some(Op::CompareAndSet(c)) => WriteOp::CompareAndSet {
            key: key(&f("compare_and_set.key"), &c.key)?,
            expected: optional_uuid(&f("compare_and_set.expected"), c.expected.as_ref())?,
            new: optional_uuid(&f("compare_and_set.new_value"), c.new_value.as_ref())?,
        },
        None => return Err(RequestError::UnknownOp { index }),
    })
}

#[tonic::async_trait]
impl UuidMap for DataService {
    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let r = request.get_ref();
        let k = key("key", &r.key)?;
        self.check_reads([k.as_uuid()])?;
        let applied_lsn = self
            .admit_read(&request, (r.consistency, r.max_staleness_ms), r.min_lsn)
            .await?;
        let value = self.durable.index().get(k.as_uuid()).map(bytes_of);
        Ok(Response::new(pb::GetResponse { value, applied_lsn }))
    }

    async fn batch_get(
        &self,
        request: Request<pb::BatchGetRequest>,
    ) -> Result<Response<pb::BatchGetResponse>, Status> {
        let r = request.get_ref();
        let keys = packed_keys("keys", &r.keys, self.limits.max_batch_keys)?;
        self.check_reads(&keys)?;
        let applied_lsn = self
            .admit_read(&request, (r.consistency, r.max_staleness_ms), r.min_lsn)
            .await?;
        let mut answers = vec![None; keys.len()];
        self.durable.index().get_many(&keys, &mut answers);
        let (values, found) = pack_values(&answers);
        Ok(Response::new(pb::BatchGetResponse {
            values,
            found,
            applied_lsn,
        }))
    }

    type LookupStream = LookupStream;

    /// See `server::lookup`.
    async fn lookup(
        &self,
        request: Request<Streaming<pb::LookupRequest>>,
    ) -> Result<Response<Self::LookupStream>, Status> {
        let lookups = Lookups::new(
            Arc::clone(&self.durable),
            self.gate.clone(),
            Arc::clone(&self.admission),
            self.lookup_metrics.clone(),
            &self.limits,
            call_deadline(&request),
            self.stopping.clone(),
        )
        .with_ownership(self.ownership.clone());
        Ok(Response::new(lookups.start(request.into_inner())))
    }

    async fn put(
        &self,
        request: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutResponse>, Status> {
        let r = request.get_ref();
        let op = WriteOp::Put {
            key: key("key", &r.key)?,
            value: uuid("value", &r.value)?,
        };
        let ops = vec![op];
        let _permit = self.write_permit().await;
        self.check_writes(&ops, false)?;
        let lsn = self.submit(ops).await.map_err(write_error)?;
        Ok(Response::new(pb::PutResponse { lsn }))
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let op = WriteOp::Delete {
            key: key("key", &request.get_ref().key)?,
        };
        let ops = vec![op];
        let _permit = self.write_permit().await;
        self.check_writes(&ops, false)?;
        let lsn = self.submit(ops).await.map_err(write_error)?;
        Ok(Response::new(pb::DeleteResponse { lsn }))
    }

    async fn compare_and_set(
        &self,
        request: Request<pb::CompareAndSetRequest>,
    ) -> Result<Response<pb::CompareAndSetResponse>, Status> {
        let r = request.get_ref();
        let op = WriteOp::CompareAndSet {
            key: key("key", &r.key)?,
            expected: optional_uuid("expected", r.expected.as_ref())?,
            new: optional_uuid("new_value", r.new_value.as_ref())?,
        };
        let ops = vec![op];
        let _permit = self.write_permit().await;
        self.check_writes(&ops, false)?;
        let response = match self.submit(ops).await {
            Ok(lsn) => pb::CompareAndSetResponse {
                applied: true,
                lsn,
                current: None,
            },
            Err(WriteError::CasMismatch { current, .. }) => pb::CompareAndSetResponse {
                applied: false,
                lsn: 0,
                current: current.map(bytes_of),
            },
            Err(e) => return Err(write_error(e)),
        };
        Ok(Response::new(response))
    }

    async fn write(
        &self,
        request: Request<pb::WriteRequest>,
    ) -> Result<Response<pb::WriteResponse>, Status> {
        let ops = &request.get_ref().ops;
        // The pipeline's own checks, made before decoding the ops: a batch
        // over the limit costs no decoding.
        if ops.is_empty() {
            return Err(write_error(WriteError::Empty));
        }
        if ops.len() > self.limits.max_write_ops {
            return Err(write_error(WriteError::TooLarge {
                len: ops.len(),
                max: self.limits.max_write_ops,
            }));
        }
        let ops = ops
            .iter()
            .enumerate()
            .map(|(i, op)| write_op(i, op))
            .collect::<Result<Vec<_>, _>>()?;
        let copy = request
            .metadata()
            .get(uuidmap_proto::PARTITION_COPY_METADATA)
            .is_some();
        let _permit = self.write_permit().await;
        self.check_writes(&ops, copy)?;
        let response = match self.submit(ops).await {
            Ok(lsn) => pb::WriteResponse {
                applied: true,
                lsn,
                failed_op: 0,
                current: None,
            },
            Err(WriteError::CasMismatch { index, current, .. }) => pb::WriteResponse {
                applied: false,
                lsn: 0,
                failed_op: u32::try_from(index).unwrap_or(u32::MAX),
                current: current.map(bytes_of),
            },
            Err(e) => return Err(write_error(e)),
        };
        Ok(Response::new(response))
    }

    async fn wait_for(
        &self,
        request: Request<pb::WaitForRequest>,
    ) -> Result<Response<pb::WaitForResponse>, Status> {
        let applied_lsn = self.wait_applied(&request, request.get_ref().lsn).await?;
        Ok(Response::new(pb::WaitForResponse { applied_lsn }))
    }

    async fn stats(
        &self,
        _request: Request<pb::StatsRequest>,
    ) -> Result<Response<pb::StatsResponse>, Status> {
        let mut stats = super::stats_answer::stats(&self.durable, self.cluster.as_ref());
        stats.partitions = self
            .ownership
            .as_ref()
            .map(super::stats_answer::partition_stats);
        Ok(Response::new(stats))
    }

    type ScanStream = scan_rpc::ScanStream;

    /// See `server::scan`.
    async fn scan(
        &self,
        request: Request<pb::ScanRequest>,
    ) -> Result<Response<Self::ScanStream>, Status> {
        let r = request.get_ref();
        let mut plan = scan_rpc::plan(&self.durable.index(), r, &self.limits)?;
        if let Some(o) = &self.ownership {
            let held = o
                .scan_partitions(&r.partitions)
                .map_err(partition_refused)?;
            plan = plan.with_partitions(held);
        }
        let applied_lsn = self
            .admit_read(&request, (r.consistency, r.max_staleness_ms), r.min_lsn)
            .await?;
        let stream = scan_rpc::start(
            plan,
            applied_lsn,
            self.stopping.clone(),
            Arc::clone(&self.scan_counters),
        );
        Ok(Response::new(stream))
    }

    type WatchStream = super::watch_rpc::WatchStream;

    /// See `server::watch`.
    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let after_lsn = request.get_ref().after_lsn;
        let owned = match (&self.ownership, request.get_ref().owned_only) {
            (Some(ownership), true) => Some(super::watch_owned::OwnedFilter {
                ownership: ownership.clone(),
            }),
            _ => None,
        };
        let stream =
            super::watch_rpc::start(&self.durable, after_lsn, self.stopping.clone(), owned).await?;
        Ok(Response::new(stream))
    }

    async fn ping(
        &self,
        _request: Request<pb::PingRequest>,
    ) -> Result<Response<pb::PingResponse>, Status> {
        Ok(Response::new(pb::PingResponse {}))
    }
}
