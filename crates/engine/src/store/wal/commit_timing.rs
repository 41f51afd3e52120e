//! [`WalWriter::commit_timed`]: a group commit that adds the time its
//! `write` and its fsync took to two counters, for the per-step figures
//! of both logs (the single node's pipeline, a member's log thread).

use std::sync::atomic::{AtomicU64, Ordering};

use super::writer::WalWriter;
use crate::store::WalWriteError;

impl WalWriter {
    /// [`WalWriter::commit`], adding the nanoseconds its write took to
    /// `write_ns` and those its fsync took to `sync_ns` (counted whether
    /// or not the commit succeeded).
    pub fn commit_timed(
        &mut self,
        sync: bool,
        write_ns: &AtomicU64,
        sync_ns: &AtomicU64,
    ) -> Result<(), WalWriteError> {
        let (write_before, sync_before) = self.io_nanos();
        let committed = self.commit(sync);
        let (write_after, sync_after) = self.io_nanos();
        write_ns.fetch_add(write_after - write_before, Ordering::Relaxed);
        sync_ns.fetch_add(sync_after - sync_before, Ordering::Relaxed);
        committed
    }
}
