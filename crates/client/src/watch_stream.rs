//! [`WatchStream`]: the change stream that resumes itself, and
//! [`FollowStream`]: the recipe for a follower, a scan then a watch.
//!
//! A watch delivers every write batch after an LSN, in LSN order. The
//! stream remembers the last LSN it delivered; when the watch breaks with a
//! transient failure (the server restarting, a cut connection), it watches
//! again after that LSN, on the next healthy endpoint, with the backoff of
//! the failure's class and a token of the retry budget. So no batch comes
//! twice and none is skipped. When the server no longer keeps the changes
//! after that LSN (a snapshot covered them), the stream fails with
//! [`ClientError::NotRetained`]: rescan, then watch from the scan's
//! applied LSN, which is what [`FollowStream`] does.
//!
//! A watch can be idle for as long as no one writes, so it has no
//! deadline; a dead connection is found by HTTP/2 keepalive pings (every
//! 10 s, 5 s to answer, set on every endpoint).
//!
//! [`WatchStream`] is a [`futures_util::Stream`] too (endless: it yields
//! an error and goes on if polled again), for `StreamExt` combinators and
//! `select!`. Its state moves into a boxed future while a batch is
//! awaited, so it can be polled without a self-reference.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use uuid::Uuid;
use uuidmap_proto::v1 as pb;

use crate::call::{endpoint_failure, uuid_of};
use crate::client::Client;
use crate::endpoints::Endpoint;
use crate::error::ClientError;
use crate::pool::Lease;
use crate::scan_stream::{ScanOptions, ScanStream};
use pb::uuid_map_client::UuidMapClient;

/// The changes of one write batch, in batch order (a compare-and-set
/// appears as the put or delete it resulted in).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchBatch {
    /// The batch's LSN.
    pub lsn: u64,
    /// (key, new value; `None`: removed).
    pub changes: Vec<(Uuid, Option<Uuid>)>,
}

/// The batches after an LSN; see the module doc.
pub struct WatchStream {
    /// The watch, while no batch is awaited.
    idle: Option<Box<Watcher>>,
    /// The batch awaited, with the watch it will give back.
    pending: Option<Pending>,
    /// The last LSN delivered (or the one the watch started after).
    after: u64,
}

/// A batch awaited, and the watch that awaits it.
type Pending =
    Pin<Box<dyn Future<Output = (Box<Watcher>, Result<WatchBatch, ClientError>)> + Send>>;

impl WatchStream {
    pub(crate) fn new(client: Client, after_lsn: u64, owned_only: bool) -> WatchStream {
        WatchStream {
            idle: Some(Box::new(Watcher::new(client, after_lsn, owned_only))),
            pending: None,
            after: after_lsn,
        }
    }

    /// The last LSN delivered (a new watch after it goes on from here).
    pub fn last_lsn(&self) -> u64 {
        self.after
    }

    /// The next batch; waits for one as long as it takes.
    pub async fn next(&mut self) -> Result<WatchBatch, ClientError> {
        std::future::poll_fn(|cx| self.poll_batch(cx)).await
    }

    fn poll_batch(&mut self, cx: &mut Context<'_>) -> Poll<Result<WatchBatch, ClientError>> {
        if self.pending.is_none() {
            let mut watcher = self.idle.take().expect("idle when nothing is pending");
            self.pending = Some(Box::pin(async move {
                let batch = watcher.next().await;
                (watcher, batch)
            }));
        }
        let pending = self.pending.as_mut().expect("set just above");
        let (watcher, batch) = std::task::ready!(pending.as_mut().poll(cx));
        self.pending = None;
        self.after = watcher.after;
        self.idle = Some(watcher);
        Poll::Ready(batch)
    }
}

impl futures_util::Stream for WatchStream {
    type Item = Result<WatchBatch, ClientError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_batch(cx).map(Some)
    }
}

/// The watch itself: what [`WatchStream`] polls.
struct Watcher {
    client: Client,
    /// The last LSN delivered (or the one the watch started after).
    after: u64,
    open: Option<(Arc<Endpoint>, tonic::Streaming<pb::WatchResponse>, Lease)>,
    buffered: VecDeque<WatchBatch>,
    /// Failures since the last message.
    failures: u32,
    /// Asks for the group's own changes only, and yields the server's
    /// progress as batches with no change (`WatchRequest.owned_only`: a
    /// cluster-wide watch's group stream).
    owned_only: bool,
}

impl Watcher {
    fn new(client: Client, after_lsn: u64, owned_only: bool) -> Watcher {
        Watcher {
            client,
            after: after_lsn,
            open: None,
            buffered: VecDeque::new(),
            failures: 0,
            owned_only,
        }
    }

    async fn next(&mut self) -> Result<WatchBatch, ClientError> {
        loop {
            if let Some(batch) = self.buffered.pop_front() {
                self.after = batch.lsn;
                self.client.observe(batch.lsn);
                return Ok(batch);
            }
            let (endpoint, mut stream, lease) = match self.open.take() {
                Some(open) => open,
                None => self.start().await?,
            };
            match stream.message().await {
                Ok(Some(message)) => {
                    self.open = Some((endpoint, stream, lease));
                    self.failures = 0;
                    for b in message.batches {
                        // A batch already delivered cannot come again from
                        // a watch after it; this guards the promise anyway.
                        if b.lsn > self.after {
                            self.buffered.push_back(batch_of(b)?);
                        }
                    }
                    let last = self.buffered.back().map_or(self.after, |b| b.lsn);
                    if self.owned_only && message.progress_lsn > last {
                        self.buffered.push_back(WatchBatch {
                            lsn: message.progress_lsn,
                            changes: Vec::new(),
                        });
                    }
                }
                Ok(None) => {
                    // The server ended the stream without an error: watch
                    // again.
                    let error = ClientError::Status {
                        rpc: "Watch",
                        status: tonic::Status::unavailable("the change stream ended"),
                    };
                    self.failed(error).await?;
                }
                Err(status) => {
                    let error = self.classify(&endpoint, status);
                    self.failed(error).await?;
                }
            }
        }
    }

    async fn start(
        &mut self,
    ) -> Result<(Arc<Endpoint>, tonic::Streaming<pb::WatchResponse>, Lease), ClientError> {
        let client = &self.client;
        let endpoints = client.endpoints();
        let after = self.after;
        let owned_only = self.owned_only;
        let opened = client
            .run("Watch", true, |_remaining, avoid| {
                let e = endpoints.pick(avoid);
                let r = client.stream_request(pb::WatchRequest {
                    after_lsn: after,
                    owned_only,
                });
                let (channel, lease) = e.pool.lease();
                async move {
                    match UuidMapClient::new(channel).watch(r).await {
                        Ok(stream) => Ok((e, stream.into_inner(), lease)),
                        Err(status) => Err(endpoint_failure(endpoints, &e, "Watch", status)),
                    }
                }
            })
            .await;
        match opened {
            Err(ClientError::Status { status, .. })
                if status.code() == tonic::Code::FailedPrecondition =>
            {
                Err(not_retained(after, &status))
            }
            other => other,
        }
    }

    fn classify(&self, endpoint: &Endpoint, status: tonic::Status) -> ClientError {
        if status.code() == tonic::Code::FailedPrecondition {
            return not_retained(self.after, &status);
        }
        endpoint_failure(self.client.endpoints(), endpoint, "Watch", status).error
    }

    async fn failed(&mut self, error: ClientError) -> Result<(), ClientError> {
        self.open = None;
        self.failures += 1;
        tracing::debug!(%error, after = self.after, "the watch failed");
        if !self.client.wait_to_resume(&error, self.failures).await {
            return Err(error);
        }
        Ok(())
    }
}

fn not_retained(after: u64, status: &tonic::Status) -> ClientError {
    ClientError::NotRetained {
        after,
        why: status.message().to_string(),
    }
}

fn batch_of(b: pb::WatchBatch) -> Result<WatchBatch, ClientError> {
    let changes = b
        .changes
        .into_iter()
        .map(|c| {
            Ok((
                uuid_of("Watch", &c.key)?,
                c.value.map(|v| uuid_of("Watch", &v)).transpose()?,
            ))
        })
        .collect::<Result<_, ClientError>>()?;
    Ok(WatchBatch {
        lsn: b.lsn,
        changes,
    })
}

/// What a follower receives ([`Client::scan_then_watch`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Entries of the scan (the state to start from).
    Entries(Vec<(Uuid, Uuid)>),
    /// The scan is done; changes follow.
    Scanned {
        /// The LSN the watch starts after.
        applied_lsn: u64,
    },
    /// A change batch, after the scan.
    Batch(WatchBatch),
    /// The server no longer kept the changes the watch needed: the
    /// follower starts over (drop what it built; entries come again).
    Restart,
}

/// The recipe for a follower: scan, then watch after the scan's applied
/// LSN, and on [`ClientError::NotRetained`] start over.
pub struct FollowStream {
    client: Client,
    options: ScanOptions,
    phase: Phase,
}

enum Phase {
    Scanning(Box<ScanStream>),
    Watching(WatchStream),
}

impl FollowStream {
    pub(crate) fn new(client: Client, options: ScanOptions) -> FollowStream {
        let scan = client.scan(options.clone());
        FollowStream {
            client,
            options,
            phase: Phase::Scanning(Box::new(scan)),
        }
    }

    /// The next thing to apply.
    pub async fn next(&mut self) -> Result<Follow, ClientError> {
        match &mut self.phase {
            Phase::Scanning(scan) => match scan.next_page().await? {
                Some(page) => Ok(Follow::Entries(page.entries)),
                None => {
                    let applied_lsn = match scan.applied_lsn() {
                        Some(lsn) => lsn,
                        // A scan with no message at all: watch from what
                        // the server has applied now.
                        None => self.client.stats().await?.applied_lsn,
                    };
                    self.phase = Phase::Watching(self.client.watch(applied_lsn));
                    Ok(Follow::Scanned { applied_lsn })
                }
            },
            Phase::Watching(watch) => match watch.next().await {
                Ok(batch) => Ok(Follow::Batch(batch)),
                Err(ClientError::NotRetained { .. }) => {
                    let mut options = self.options.clone();
                    options.cursor = Default::default();
                    self.phase = Phase::Scanning(Box::new(self.client.scan(options)));
                    Ok(Follow::Restart)
                }
                Err(e) => Err(e),
            },
        }
    }
}

impl Client {
    /// Every write batch after `after_lsn`, in LSN order, resumed after
    /// the last one delivered when the stream breaks.
    pub fn watch(&self, after_lsn: u64) -> WatchStream {
        WatchStream::new(self.clone(), after_lsn, false)
    }

    /// [`Client::watch`] of a partition-owning group, for a cluster-wide
    /// watch: only the group's own changes (no partition move's), and a
    /// batch with no change wherever the server reports progress past the
    /// last batch (`WatchRequest.owned_only`).
    pub(crate) fn watch_owned(&self, after_lsn: u64) -> WatchStream {
        WatchStream::new(self.clone(), after_lsn, true)
    }

    /// A scan then a watch from the scan's applied LSN, started over when
    /// the server no longer keeps the changes the watch needs: what a
    /// process that mirrors the index (or the part of it `options`
    /// selects) needs, in one stream.
    pub fn scan_then_watch(&self, options: ScanOptions) -> FollowStream {
        FollowStream::new(self.clone(), options)
    }
}
