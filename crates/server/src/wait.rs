//! Waiting until an LSN is applied (a read's `min_lsn`, `WaitFor`), bounded
//! by a deadline and by the server's stop: the one wait that the unary
//! reads and each request of a `Lookup` stream share.

use tokio::sync::watch;
use tokio::time::Instant;
use tonic::Status;

use super::errors::WaitBound;
use super::grpc_status::{stopping_wait, wait_timed_out};
use uuidmap_engine::writer::DurableIndex;

/// Waits until `lsn` is applied, or `bound` (its end, and which bound that
/// is, for the message) passes, or the server starts stopping (`stopping`
/// becomes `true`, or its sender is gone). Returns the applied LSN.
/// Cancel-safe.
pub async fn applied(
    durable: &DurableIndex,
    stopping: &watch::Receiver<bool>,
    lsn: u64,
    bound: (Instant, WaitBound),
) -> Result<u64, Status> {
    let watermark = durable.watermark();
    let current = watermark.current();
    if current >= lsn {
        return Ok(current);
    }
    let mut stopping = stopping.clone();
    tokio::select! {
        waited = watermark.wait_for(lsn, Some(bound.0)) => {
            waited.map_err(|e| wait_timed_out(e, bound.1))
        }
        // Err: the server is gone, which is stopping too.
        _ = stopping.wait_for(|s| *s) => Err(stopping_wait(lsn, watermark.current())),
    }
}
