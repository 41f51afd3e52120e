//! [`ScanStream`]: a scan that resumes itself.
//!
//! Each message of a scan carries a cursor that resumes after its entries.
//! The stream remembers the last one; when the scan fails with a failure
//! that allows a retry (a scan only reads, so every transient one does), it
//! opens a new scan from that cursor, on the next healthy endpoint, after
//! the backoff of the failure's class and with a token of the retry budget.
//! So the entries come once each: none twice, none skipped (entries
//! written during the scan may or may not appear, as the server's Scan
//! says). A limit counts entries across resumptions.

use std::sync::Arc;

use futures_util::Stream;
use prost::bytes::Bytes;
use uuid::Uuid;
use uuidmap_proto::v1 as pb;

use crate::call::{endpoint_failure, uuid_of};
use crate::client::Client;
use crate::endpoints::Endpoint;
use crate::error::ClientError;
use crate::pool::Lease;
use pb::uuid_map_client::UuidMapClient;

/// What to scan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanOptions {
    /// Split `split` of `splits` (0 of 1: the whole index).
    pub split: u32,
    /// How many splits the index is cut into (0 means 1).
    pub splits: u32,
    /// Only entries with one of these values (empty: all).
    pub values: Vec<Uuid>,
    /// Stop after this many entries (0: no limit).
    pub limit: u64,
    /// Resume after this cursor (empty: from the start).
    pub cursor: Bytes,
    /// Only keys of these partitions (0 to 4095, the partition crate's
    /// `partition_of`; empty: all). A server of a partitioned cluster
    /// refuses a partition its group does not hold.
    pub partitions: Vec<u16>,
}

/// One message of a scan: entries and where to resume after them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanPage {
    /// (key, value) pairs.
    pub entries: Vec<(Uuid, Uuid)>,
    /// Resumes after these entries; empty when the split is done.
    pub cursor: Bytes,
    /// The applied LSN when this scan began (its first call, before any
    /// resumption): a watch after it sees every change the scan may have
    /// missed.
    pub applied_lsn: u64,
}

/// The pages of a scan; see the module doc.
pub struct ScanStream {
    client: Client,
    options: ScanOptions,
    /// Entries given so far.
    delivered: u64,
    done: bool,
    open: Option<(Arc<Endpoint>, tonic::Streaming<pb::ScanResponse>, Lease)>,
    /// Failures since the last page.
    failures: u32,
    /// The endpoint the scan began on: a resumption goes there first. A
    /// cursor names segments of that member's index layout (its hash seeds
    /// and segment count); another member's index may be laid out
    /// otherwise and refuse it ("a different index layout").
    home: Option<usize>,
    /// The first call's applied LSN.
    applied_lsn: Option<u64>,
}

impl ScanStream {
    pub(crate) fn new(client: Client, options: ScanOptions) -> ScanStream {
        ScanStream {
            client,
            options,
            delivered: 0,
            done: false,
            open: None,
            failures: 0,
            applied_lsn: None,
            home: None,
        }
    }

    /// The applied LSN when the scan began (`None` before its first page).
    pub fn applied_lsn(&self) -> Option<u64> {
        self.applied_lsn
    }

    /// The cursor that resumes after the entries given so far.
    pub fn cursor(&self) -> &Bytes {
        &self.options.cursor
    }

    /// The next page; `None` when the scan is done.
    pub async fn next_page(&mut self) -> Result<Option<ScanPage>, ClientError> {
        loop {
            if self.done {
                return Ok(None);
            }
            let (endpoint, stream, lease) = match self.open.take() {
                Some(open) => open,
                None => self.start().await?,
            };
            let page_timeout = self.client.timeout();
            let message = match tokio::time::timeout(page_timeout, stream_message(stream)).await {
                Ok((Ok(message), stream)) => {
                    self.open = Some((endpoint, stream, lease));
                    message
                }
                Ok((Err(status), _)) => {
                    let failure =
                        endpoint_failure(self.client.endpoints(), &endpoint, "Scan", status);
                    self.failed(failure.error).await?;
                    continue;
                }
                Err(_) => {
                    let error = ClientError::DeadlineExceeded {
                        rpc: "Scan",
                        timeout: page_timeout,
                        attempts: 1,
                        last: None,
                    };
                    self.failed(error).await?;
                    continue;
                }
            };
            let Some(message) = message else {
                self.done = true;
                return Ok(None);
            };
            self.failures = 0;
            self.client.observe(message.applied_lsn);
            let applied_lsn = *self.applied_lsn.get_or_insert(message.applied_lsn);
            let entries = unpack_entries(&message.entries)?;
            self.delivered += entries.len() as u64;
            self.options.cursor = message.cursor.clone();
            if message.cursor.is_empty()
                || (self.options.limit > 0 && self.delivered >= self.options.limit)
            {
                self.done = true;
                self.open = None;
            }
            return Ok(Some(ScanPage {
                entries,
                cursor: message.cursor,
                applied_lsn,
            }));
        }
    }

    /// The entries one by one, as a [`Stream`].
    pub fn entries(self) -> impl Stream<Item = Result<(Uuid, Uuid), ClientError>> {
        futures_util::stream::unfold(
            (self, Vec::new().into_iter()),
            |(mut scan, mut page)| async move {
                loop {
                    if let Some(entry) = page.next() {
                        return Some((Ok(entry), (scan, page)));
                    }
                    match scan.next_page().await {
                        Ok(Some(next)) => page = next.entries.into_iter(),
                        Ok(None) => return None,
                        Err(e) => {
                            scan.done = true;
                            return Some((Err(e), (scan, page)));
                        }
                    }
                }
            },
        )
    }

    /// Opens the scan from the cursor (through the retry loop).
    async fn start(
        &mut self,
    ) -> Result<(Arc<Endpoint>, tonic::Streaming<pb::ScanResponse>, Lease), ClientError> {
        let request = pb::ScanRequest {
            cursor: self.options.cursor.clone(),
            split: self.options.split,
            splits: self.options.splits,
            values: self
                .options
                .values
                .iter()
                .flat_map(|v| *v.as_bytes())
                .collect::<Vec<u8>>()
                .into(),
            limit: if self.options.limit > 0 {
                self.options.limit - self.delivered
            } else {
                0
            },
            // Resumed, at least the state the first page showed: a member
            // further behind would answer the rest from an older state, and
            // a watch from the scan's applied LSN would miss the changes
            // between the two.
            min_lsn: self.client.min_lsn().max(self.applied_lsn.unwrap_or(0)),
            consistency: self.client.consistency().to_wire().0,
            max_staleness_ms: self.client.consistency().to_wire().1,
            partitions: self
                .options
                .partitions
                .iter()
                .map(|p| u32::from(*p))
                .collect(),
        };
        let client = &self.client;
        let endpoints = client.endpoints();
        let home = self.home;
        let opened = client
            .run("Scan", true, |_remaining, avoid| {
                // Home first (even pessimized: a cut connection is not a
                // dead member), elsewhere once home has failed this time.
                let e = home
                    .filter(|&h| Some(h) != avoid)
                    .and_then(|h| endpoints.by_id(h))
                    .unwrap_or_else(|| endpoints.pick(avoid));
                // The scan itself has no deadline; opening it does (the
                // retry loop bounds this attempt by what is left).
                let r = client.stream_request(request.clone());
                let (channel, lease) = e.pool.lease();
                async move {
                    match UuidMapClient::new(channel).scan(r).await {
                        Ok(stream) => Ok((e, stream.into_inner(), lease)),
                        Err(status) => Err(endpoint_failure(endpoints, &e, "Scan", status)),
                    }
                }
            })
            .await?;
        self.home.get_or_insert(opened.0.id);
        Ok(opened)
    }

    /// A failure of an open scan: waits to resume, or gives up with it.
    async fn failed(&mut self, error: ClientError) -> Result<(), ClientError> {
        self.open = None;
        self.failures += 1;
        tracing::debug!(%error, cursor = ?self.options.cursor, "the scan failed");
        if !self.client.wait_to_resume(&error, self.failures).await {
            self.done = true;
            return Err(error);
        }
        Ok(())
    }
}

/// The next message, with the stream handed back.
async fn stream_message(
    mut stream: tonic::Streaming<pb::ScanResponse>,
) -> (
    Result<Option<pb::ScanResponse>, tonic::Status>,
    tonic::Streaming<pb::ScanResponse>,
) {
    let message = stream.message().await;
    (message, stream)
}

/// Packed entries (n×32 bytes: key then value) as pairs.
pub fn unpack_entries(packed: &[u8]) -> Result<Vec<(Uuid, Uuid)>, ClientError> {
    if !packed.len().is_multiple_of(32) {
        return Err(ClientError::BadResponse {
            rpc: "Scan",
            why: format!(
                "entries must be whole 32-byte entries, but they are {} bytes long",
                packed.len()
            ),
        });
    }
    packed
        .chunks_exact(32)
        .map(|e| Ok((uuid_of("Scan", &e[..16])?, uuid_of("Scan", &e[16..])?)))
        .collect()
}

impl Client {
    /// The entries, page by page; resumed from the last cursor after a
    /// transient failure (on another endpoint if need be), so no entry is
    /// given twice and none is skipped. Each page has the call's deadline;
    /// the whole scan has none.
    pub fn scan(&self, options: ScanOptions) -> ScanStream {
        ScanStream::new(self.clone(), options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_entries_unpack_in_order_and_a_partial_entry_is_an_error() {
        let mut packed = Vec::new();
        for (k, v) in [(1u128, 10u128), (2, 20)] {
            packed.extend_from_slice(Uuid::from_u128(k).as_bytes());
            packed.extend_from_slice(Uuid::from_u128(v).as_bytes());
        }
        let e = unpack_entries(&packed).unwrap();
        assert_eq!(
            e,
            vec![
                (Uuid::from_u128(1), Uuid::from_u128(10)),
                (Uuid::from_u128(2), Uuid::from_u128(20))
            ]
        );
        packed.pop();
        let err = unpack_entries(&packed).unwrap_err().to_string();
        assert!(err.contains("63 bytes"), "{err}");
    }
}
