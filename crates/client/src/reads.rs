//! The reads of [`Client`] that answer values: `get` and `lookup` (batched
//! on the `Lookup` streams), `get_unary` and `get_many` (unary). Each sends
//! the session's LSN as `min_lsn` and notes the answer's `applied_lsn`
//! ([`Client::seen_lsn`]), so that reads never go back in time, whichever
//! member answers.

use uuid::Uuid;
use uuidmap_proto::v1 as pb;

use crate::call::{bytes_of, unpack_values, uuid_of};
use crate::client::Client;
use crate::error::ClientError;
use pb::uuid_map_client::UuidMapClient;

impl Client {
    /// The value of `key`, or `None`. Concurrent gets on one client are
    /// batched: a get goes out at once when a lane is idle, and otherwise
    /// joins the next batch (one `Lookup` request per batch, on a stream
    /// per lane).
    pub async fn get(&self, key: Uuid) -> Result<Option<Uuid>, ClientError> {
        let min_lsn = self.min_lsn();
        let lanes = self.lanes();
        let attempt = self.read_attempts().timeout(self.timeout());
        let (mut values, applied_lsn) = self
            .run("Lookup", true, |remaining, _| {
                lanes.get(vec![key], min_lsn, self.consistency(), remaining, attempt)
            })
            .await?;
        self.observe(applied_lsn);
        Ok(values.pop().flatten())
    }

    /// The values of `keys`, in their order (`None`: no entry), through
    /// the `Lookup` streams: one request (shared with concurrent gets),
    /// without the per-call cost of a unary `BatchGet`. More keys than the
    /// server's batch limit (65536 by default) are refused by the server.
    pub async fn lookup(&self, keys: &[Uuid]) -> Result<Vec<Option<Uuid>>, ClientError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let min_lsn = self.min_lsn();
        let lanes = self.lanes();
        let attempt = self.read_attempts().timeout(self.timeout());
        let (values, applied_lsn) = self
            .run("Lookup", true, |remaining, _| {
                lanes.get(
                    keys.to_vec(),
                    min_lsn,
                    self.consistency(),
                    remaining,
                    attempt,
                )
            })
            .await?;
        self.observe(applied_lsn);
        Ok(values)
    }

    /// The value of `key` through one unary `Get` call (no batching).
    pub async fn get_unary(&self, key: Uuid) -> Result<Option<Uuid>, ClientError> {
        let (consistency, max_staleness_ms) = self.consistency().to_wire();
        let message = pb::GetRequest {
            key: bytes_of(key),
            min_lsn: self.min_lsn(),
            consistency,
            max_staleness_ms,
        };
        let answer = self
            .unary_read("Get", |channel, remaining| {
                let r = self.request(message.clone(), remaining);
                async move { UuidMapClient::new(channel).get(r).await }
            })
            .await?
            .into_inner();
        self.observe(answer.applied_lsn);
        answer.value.map(|v| uuid_of("Get", &v)).transpose()
    }

    /// The values of `keys`, in their order (`None`: no entry), in one
    /// `BatchGet` call.
    pub async fn get_many(&self, keys: &[Uuid]) -> Result<Vec<Option<Uuid>>, ClientError> {
        let message = pb::BatchGetRequest {
            keys: keys
                .iter()
                .flat_map(|k| *k.as_bytes())
                .collect::<Vec<u8>>()
                .into(),
            min_lsn: self.min_lsn(),
            consistency: self.consistency().to_wire().0,
            max_staleness_ms: self.consistency().to_wire().1,
        };
        let answer = self
            .unary_read("BatchGet", |channel, remaining| {
                let r = self.request(message.clone(), remaining);
                async move { UuidMapClient::new(channel).batch_get(r).await }
            })
            .await?
            .into_inner();
        self.observe(answer.applied_lsn);
        unpack_values("BatchGet", keys.len(), &answer.values, &answer.found)
    }
}
