//! `Watch`: every write batch after an LSN, from the write-ahead log, then
//! the new ones as they are applied.
//!
//! # Protocol
//!
//! A watch after LSN `a` sends the batches after `a` in LSN order, each
//! only once applied (visible to reads): it reads the WAL up to the
//! applied LSN (the watermark), sends what it found, then waits on the
//! watermark (no polling) for the next LSN. On a single node the batches
//! are consecutive (`a+1, a+2, ...`). On a replica group member the
//! WAL is the Raft log, and LSNs of entries that changed nothing (a new
//! leader's first entry, membership changes, the writer's gates, batches
//! voided by a broken proposal chain) are skipped
//! (`uuidmap_engine::writer::ChangeReader`); every member sends the same
//! batches at the same LSNs. Batches read
//! together go out together, in responses of at most [`MAX_RESPONSE_BYTES`]
//! (a single larger batch goes alone); a batch is never held back waiting
//! for more. `a` beyond the applied LSN simply waits.
//!
//! The WAL holds blind writes, so a compare-and-set appears as the put or
//! delete it resulted in; a refused batch never appears.
//!
//! With `owned_only` on a member of a partitioned cluster, each response
//! read is filtered to the group's own changes (`watch_owned`), waiting
//! while that cannot be decided yet, and carries `progress_lsn`, the last
//! LSN read; a response left with no batch is sent all the same, so a
//! merged stream knows the group passed that LSN.
//!
//! # Ends
//!
//! - The changes after `a` are no longer in the WAL (a snapshot covered
//!   them and the snapshotter removed their files, at the start or while
//!   the watch runs): FAILED_PRECONDITION, telling the client to rescan and
//!   watch from the scan's `applied_lsn`. Never a silent skip.
//! - The server stops: UNAVAILABLE.
//! - The client goes away: the task ends at its next wait or send.
//!
//! WAL reads are blocking file I/O: each runs on the blocking pool
//! (`spawn_blocking`), the follower moving there and back.

use std::sync::Arc;

use prost::Message;
use prost::bytes::BytesMut;
use tokio::sync::{mpsc, watch};
use tonic::Status;

use super::grpc_status::{stopping_watch, watch_error};
use super::watch_owned::{Filter, OwnedFilter};
use uuidmap_engine::store::{Op, WalFollowError};
use uuidmap_engine::writer::{ChangeReader, DurableIndex};
use uuidmap_index::sync::LsnWatermark;
use uuidmap_proto::v1 as pb;

/// Most bytes of one response, unless a single batch is larger.
pub const MAX_RESPONSE_BYTES: usize = 256 << 10;
/// Responses waiting for the client.
const CHANNEL_RESPONSES: usize = 2;

/// The response stream.
pub type WatchStream = tokio_stream::wrappers::ReceiverStream<Result<pb::WatchResponse, Status>>;

/// Starts a watch after `after_lsn`; FAILED_PRECONDITION at once if the
/// WAL no longer holds the LSN after it.
pub(crate) async fn start(
    durable: &Arc<DurableIndex>,
    after_lsn: u64,
    stopping: watch::Receiver<bool>,
    owned: Option<OwnedFilter>,
) -> Result<WatchStream, Status> {
    let opener = durable.clone();
    let follower = tokio::task::spawn_blocking(move || opener.follow(after_lsn))
        .await
        .map_err(|e| Status::internal(format!("opening the WAL panicked: {e}")))?
        .map_err(|e| watch_error(&e, after_lsn))?;
    let (tx, rx) = mpsc::channel(CHANNEL_RESPONSES);
    let task = WatchTask {
        reader: Some(BatchReader {
            follower,
            carry: None,
            bytes: BytesMut::new(),
        }),
        watermark: durable.watermark().clone(),
        tx,
        stopping,
        owned,
    };
    tokio::spawn(task.run());
    Ok(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// One watch: waits, reads, sends.
struct WatchTask {
    /// `None` only while it is on the blocking pool.
    reader: Option<BatchReader>,
    watermark: Arc<LsnWatermark>,
    tx: mpsc::Sender<Result<pb::WatchResponse, Status>>,
    stopping: watch::Receiver<bool>,
    /// With `owned_only` on a partitioned member: the filter.
    owned: Option<OwnedFilter>,
}

impl WatchTask {
    async fn run(mut self) {
        loop {
            let next = self.reader.as_ref().expect("reader is home").next_lsn();
            let mut stopping = self.stopping.clone();
            let stop = tokio::select! {
                biased;
                // Err: the server is gone, which is stopping too.
                _ = stopping.wait_for(|s| *s) => true,
                () = self.tx.closed() => return,
                _ = self.watermark.wait_for(next, None) => false,
            };
            if stop {
                let _ = self.tx.send(Err(stopping_watch())).await;
                return;
            }
            let upto = self.watermark.current();
            let mut reader = self.reader.take().expect("reader is home");
            let read = tokio::task::spawn_blocking(move || {
                let response = reader.read(upto);
                (reader, response)
            })
            .await;
            let (reader, response) = match read {
                Ok(done) => done,
                Err(e) => {
                    let status = Status::internal(format!("reading the WAL panicked: {e}"));
                    let _ = self.tx.send(Err(status)).await;
                    return;
                }
            };
            let after = reader.next_lsn() - 1;
            self.reader = Some(reader);
            let message = match (response, self.owned.clone()) {
                (Ok(mut r), Some(owned)) => {
                    r.progress_lsn = after;
                    match self.decide_owned(&owned, r).await {
                        Some(decided) => decided,
                        None => return,
                    }
                }
                (response, _) => response.map_err(|e| watch_error(&e, after)),
            };
            if message
                .as_ref()
                .is_ok_and(|r| r.batches.is_empty() && r.progress_lsn == 0)
            {
                // A member's entries that changed nothing: wait for more.
                continue;
            }
            let failed = message.is_err();
            if self.tx.send(message).await.is_err() || failed {
                return;
            }
        }
    }

    /// `r` with only the group's own changes (`watch_owned`), once they
    /// can be decided; `None`: the client went away meanwhile.
    async fn decide_owned(
        &self,
        owned: &OwnedFilter,
        mut r: pb::WatchResponse,
    ) -> Option<Result<pb::WatchResponse, Status>> {
        let mut tables = owned.ownership.cache().subscribe();
        loop {
            match owned.filter(&r.batches) {
                Filter::Keep(batches) => {
                    r.batches = batches;
                    return Some(Ok(r));
                }
                Filter::Forgotten(why) => return Some(Err(Status::failed_precondition(why))),
                Filter::Hold => {}
            }
            let mut stopping = self.stopping.clone();
            tokio::select! {
                biased;
                _ = stopping.wait_for(|s| *s) => return Some(Err(stopping_watch())),
                () = self.tx.closed() => return None,
                changed = tables.changed() => {
                    if changed.is_err() {
                        return Some(Err(stopping_watch()));
                    }
                }
            }
        }
    }
}

/// Reads batches from the WAL into responses.
struct BatchReader {
    follower: ChangeReader,
    /// A batch read but left out of the last response (it would have made
    /// it too large); it opens the next one.
    carry: Option<pb::WatchBatch>,
    /// Key and value bytes of the batch being built; its changes are slices
    /// of it (one buffer per batch, not two allocations per change).
    bytes: BytesMut,
}

impl BatchReader {
    /// The LSN the next batch sent will have.
    fn next_lsn(&self) -> u64 {
        match &self.carry {
            Some(batch) => batch.lsn,
            None => self.follower.next_lsn(),
        }
    }

    /// The next response: the batches from `next_lsn()` on, up to `upto`
    /// (applied, so committed), at most [`MAX_RESPONSE_BYTES`] unless the
    /// first is larger. On a single node at least one batch, as `upto >=
    /// next_lsn()`; on a member none when the entries up to `upto` changed
    /// nothing.
    fn read(&mut self, upto: u64) -> Result<pb::WatchResponse, WalFollowError> {
        let mut batches = Vec::new();
        let mut size = 0;
        loop {
            let batch = match self.carry.take() {
                Some(batch) => batch,
                None => match self.follower.next_batch(upto)? {
                    Some((lsn, ops)) => batch(&mut self.bytes, lsn, ops),
                    None => break,
                },
            };
            let len = batch.encoded_len() + 4; // + its tag and length
            if !batches.is_empty() && size + len > MAX_RESPONSE_BYTES {
                self.carry = Some(batch);
                break;
            }
            size += len;
            batches.push(batch);
        }
        Ok(pb::WatchResponse {
            batches,
            progress_lsn: 0,
        })
    }
}

/// One logged batch as a `WatchBatch`.
fn batch(bytes: &mut BytesMut, lsn: u64, ops: &[Op]) -> pb::WatchBatch {
    bytes.reserve(ops.len() * 32);
    for op in ops {
        bytes.extend_from_slice(op.key().as_uuid().as_bytes());
        if let Op::Put { value, .. } = op {
            bytes.extend_from_slice(value.as_bytes());
        }
    }
    let all = bytes.split().freeze();
    let mut at = 0;
    let mut take = || {
        at += 16;
        all.slice(at - 16..at)
    };
    let changes = ops
        .iter()
        .map(|op| {
            let key = take();
            let value = matches!(op, Op::Put { .. }).then(&mut take);
            pb::Change { key, value }
        })
        .collect();
    pb::WatchBatch { lsn, changes }
}
