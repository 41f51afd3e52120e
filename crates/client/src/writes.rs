//! The writes of [`Client`]: `put`, `delete`, `compare_and_set` and
//! `write`, each to the replica group's leader first. What is sent again
//! after an unknown outcome is decided here: a Put, Delete or Write only
//! through [`Client::idempotent`], and a compare-and-set never (it is read
//! back instead: [`ClientError::Undetermined`]).

use uuid::Uuid;
use uuidmap_proto::v1 as pb;

use crate::call::{bytes_of, uuid_of};
use crate::client::Client;
use crate::error::{ClientError, RetryClass};
use crate::write_op::{CasOutcome, WriteOp};
use pb::uuid_map_client::UuidMapClient;

impl Client {
    /// Sets `key` to `value`; the write's LSN. Not sent again after an
    /// unknown outcome unless the client is [`Client::idempotent`].
    pub async fn put(&self, key: Uuid, value: Uuid) -> Result<u64, ClientError> {
        let message = pb::PutRequest {
            key: bytes_of(key),
            value: bytes_of(value),
        };
        let lsn = self
            .unary_write("Put", self.writes_idempotent(), |channel, remaining| {
                let r = self.request(message.clone(), remaining);
                async move { UuidMapClient::new(channel).put(r).await }
            })
            .await?
            .into_inner()
            .lsn;
        Ok(self.wrote(lsn))
    }

    /// Removes `key` (whether or not present); the write's LSN. Retried as
    /// [`Client::put`] is.
    pub async fn delete(&self, key: Uuid) -> Result<u64, ClientError> {
        let message = pb::DeleteRequest { key: bytes_of(key) };
        let lsn = self
            .unary_write("Delete", self.writes_idempotent(), |channel, remaining| {
                let r = self.request(message.clone(), remaining);
                async move { UuidMapClient::new(channel).delete(r).await }
            })
            .await?
            .into_inner()
            .lsn;
        Ok(self.wrote(lsn))
    }

    /// Sets `key` to `new` (`None`: removes it) only if its value is
    /// `expected` (`None`: no entry): [`CasOutcome::Applied`] with the
    /// change's LSN, or [`CasOutcome::Mismatch`] with the value found (not
    /// an error: nothing failed).
    ///
    /// A compare-and-set is never sent twice after an unknown outcome: the
    /// client reads the key back (waiting for its own writes) and answers
    /// [`ClientError::Undetermined`] with what it found.
    pub async fn compare_and_set(
        &self,
        key: Uuid,
        expected: Option<Uuid>,
        new: Option<Uuid>,
    ) -> Result<CasOutcome, ClientError> {
        let message = pb::CompareAndSetRequest {
            key: bytes_of(key),
            expected: expected.map(bytes_of),
            new_value: new.map(bytes_of),
        };
        let answer = self
            .unary_write("CompareAndSet", false, |channel, remaining| {
                let r = self.request(message.clone(), remaining);
                async move { UuidMapClient::new(channel).compare_and_set(r).await }
            })
            .await;
        match answer {
            Ok(answer) => {
                let answer = answer.into_inner();
                if answer.applied {
                    Ok(CasOutcome::Applied {
                        lsn: self.wrote(answer.lsn),
                    })
                } else {
                    Ok(CasOutcome::Mismatch {
                        current: answer
                            .current
                            .map(|v| uuid_of("CompareAndSet", &v))
                            .transpose()?,
                    })
                }
            }
            Err(cause) if cause.retry_class() == RetryClass::Conditional => {
                // The outcome is unknown: read what is there now, with the
                // client's default deadline (this call's may be spent).
                match self
                    .with_timeout(self.default_timeout())
                    .get_unary(key)
                    .await
                {
                    Ok(current) => Err(ClientError::Undetermined {
                        key,
                        current,
                        cause: Box::new(cause),
                    }),
                    Err(_) => Err(cause),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Applies `ops` in order, all or none, at one LSN (returned). If a
    /// compare-and-set among them finds another value, nothing is applied
    /// and the answer is [`ClientError::WriteMismatch`]. Retried as
    /// [`Client::put`] is: after a lost answer only when the client is
    /// [`Client::idempotent`] and no operation is a compare-and-set (sent
    /// again after it was applied, it would find its own value and answer
    /// a mismatch for a write that happened). A failure with an unknown
    /// outcome ([`ClientError::outcome_unknown`]) is returned as it is:
    /// read the keys back before deciding again.
    pub async fn write(&self, ops: &[WriteOp]) -> Result<u64, ClientError> {
        self.write_request(ops, false).await
    }

    /// [`Client::write`] as a partition move's copy: a server takes it for
    /// a partition being copied to its group
    /// ([`uuidmap_proto::PARTITION_COPY_METADATA`]).
    pub(crate) async fn write_copy(&self, ops: &[WriteOp]) -> Result<u64, ClientError> {
        self.write_request(ops, true).await
    }

    async fn write_request(&self, ops: &[WriteOp], copy: bool) -> Result<u64, ClientError> {
        let message = pb::WriteRequest {
            ops: ops.iter().copied().map(WriteOp::to_proto).collect(),
        };
        let has_cas = ops
            .iter()
            .any(|op| matches!(op, WriteOp::CompareAndSet { .. }));
        let answer = self
            .unary_write(
                "Write",
                self.writes_idempotent() && !has_cas,
                |channel, remaining| {
                    let mut r = self.request(message.clone(), remaining);
                    if copy {
                        r.metadata_mut().insert(
                            uuidmap_proto::PARTITION_COPY_METADATA,
                            tonic::metadata::MetadataValue::from_static("1"),
                        );
                    }
                    async move { UuidMapClient::new(channel).write(r).await }
                },
            )
            .await?
            .into_inner();
        if answer.applied {
            return Ok(self.wrote(answer.lsn));
        }
        let op = answer.failed_op as usize;
        let key = match ops.get(op) {
            Some(WriteOp::CompareAndSet { key, .. }) => *key,
            _ => {
                return Err(ClientError::BadResponse {
                    rpc: "Write",
                    why: format!("operation {op} is named as the failed compare-and-set"),
                });
            }
        };
        Err(ClientError::WriteMismatch {
            op,
            key,
            current: answer.current.map(|v| uuid_of("Write", &v)).transpose()?,
        })
    }
}
