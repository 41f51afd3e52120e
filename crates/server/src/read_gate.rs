//! A read's consistency (`ReadConsistency` in the protocol; README.md,
//! "Read consistency"): when a read may be answered, and from which LSN.
//! `Get`, `BatchGet`, each `Lookup` request and the start of a `Scan` pass
//! through [`ReadGate`] before they read the index.
//!
//! - A single node answers every level at once (after `min_lsn`): a write
//!   is applied before it is acknowledged.
//! - A member, `linearizable` (the default): on the leader while it serves
//!   from its lease (`ReadLease::serves_as_leader`), once it applied every
//!   commit index it told a follower (`ReadLease::commit_told`: that
//!   follower may already have shown those writes to a read); otherwise it
//!   gets a read index ([`ReadIndex`]: one round for every read waiting),
//!   waits until its applied LSN reaches it (and `min_lsn`), bounded as a
//!   `min_lsn` wait is, and answers unless it is catching up after loading
//!   a snapshot.
//! - A member, `stale`: at once from what it has applied (after
//!   `min_lsn`), unless catching up; with `max_staleness_ms`, refused when
//!   its [`Staleness`] exceeds it.
//!
//! Invariant: the LSN returned was loaded after the check that makes the
//! read linearizable (or after the read index was applied), and before the
//! index is read, so the answer's `applied_lsn` stays true.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tonic::Status;

use super::errors::{ConsistencyError, RequestError, WaitBound};
use super::grpc_status::{read_index_error, read_refused};
use super::wait;
use uuidmap_cluster::read_index::ReadIndex;
use uuidmap_cluster::staleness::Staleness;
use uuidmap_engine::writer::{DurableIndex, ReadLease};
use uuidmap_proto::v1 as pb;

/// What a read asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    /// Every write acknowledged before the read arrived is in the answer.
    Linearizable,
    /// What the member has applied; `max_staleness`: refuse beyond it.
    Stale {
        /// The bound (`None`: no bound).
        max_staleness: Option<Duration>,
    },
}

impl Consistency {
    /// The request's `consistency` and `max_staleness_ms` fields, checked
    /// (an unknown level is INVALID_ARGUMENT).
    pub fn of(consistency: i32, max_staleness_ms: u64) -> Result<Consistency, RequestError> {
        match pb::ReadConsistency::try_from(consistency) {
            Ok(pb::ReadConsistency::Unspecified | pb::ReadConsistency::Linearizable) => {
                Ok(Consistency::Linearizable)
            }
            Ok(pb::ReadConsistency::Stale) => Ok(Consistency::Stale {
                max_staleness: (max_staleness_ms > 0)
                    .then(|| Duration::from_millis(max_staleness_ms)),
            }),
            Err(_) => Err(RequestError::UnknownConsistency { value: consistency }),
        }
    }
}

/// What a member's reads consult (cheap to clone).
#[derive(Clone)]
pub struct MemberReads {
    /// The read-index rounds.
    pub read_index: ReadIndex,
    /// The staleness clock.
    pub staleness: Arc<Staleness>,
    /// The read lease (the leader's fast path).
    pub lease: Arc<ReadLease>,
}

/// Admits reads at their consistency (module docs). Cheap to clone.
#[derive(Clone)]
pub struct ReadGate {
    durable: Arc<DurableIndex>,
    /// `None`: a single node.
    member: Option<MemberReads>,
    /// Becomes `true` when the server starts stopping: waits end at once.
    stopping: watch::Receiver<bool>,
}

impl ReadGate {
    /// The gate of `durable`'s reads; `member` on a replica group member.
    pub fn new(
        durable: Arc<DurableIndex>,
        member: Option<MemberReads>,
        stopping: watch::Receiver<bool>,
    ) -> ReadGate {
        ReadGate {
            durable,
            member,
            stopping,
        }
    }

    /// The read's answer when it needs no wait: `Some(Ok(applied))` to
    /// read now, `Some(Err)` to refuse now, `None` when it must wait
    /// ([`ReadGate::admit`]: `min_lsn` not applied, or a read index to get).
    pub fn at_once(&self, consistency: Consistency, min_lsn: u64) -> Option<Result<u64, Status>> {
        let applied = self.durable.watermark().current();
        if applied < min_lsn {
            return None;
        }
        let Some(member) = &self.member else {
            return Some(Ok(applied));
        };
        Some(match consistency {
            Consistency::Linearizable => {
                if !member.lease.serves_as_leader() {
                    return None;
                }
                // Loaded after the lease check: every write acknowledged
                // before it is applied. A follower may show more: what it
                // was told is committed, applied there before here. Only
                // past that does the leader answer at once.
                let applied = self.durable.watermark().current();
                if applied < member.lease.commit_told() {
                    return None;
                }
                self.durable
                    .admit_applied(applied)
                    .map(|()| applied)
                    .map_err(read_refused)
            }
            Consistency::Stale { max_staleness } => self.stale(member, applied, max_staleness),
        })
    }

    /// Admits the read, waiting as it must, within `bound` (module docs).
    /// Returns the applied LSN to answer with. Cancel-safe.
    pub async fn admit(
        &self,
        consistency: Consistency,
        min_lsn: u64,
        bound: (Instant, WaitBound),
    ) -> Result<u64, Status> {
        if let Some(answer) = self.at_once(consistency, min_lsn) {
            return answer;
        }
        let applied = wait::applied(&self.durable, &self.stopping, min_lsn, bound).await?;
        let Some(member) = &self.member else {
            return Ok(applied);
        };
        match consistency {
            Consistency::Stale { max_staleness } => self.stale(member, applied, max_staleness),
            Consistency::Linearizable => {
                if member.lease.serves_as_leader() {
                    let told = member.lease.commit_told();
                    let applied =
                        wait::applied(&self.durable, &self.stopping, told.max(min_lsn), bound)
                            .await?;
                    // Still the leader with a lease after the wait: else
                    // the read index below.
                    if member.lease.serves_as_leader() {
                        self.durable.admit_applied(applied).map_err(read_refused)?;
                        return Ok(applied);
                    }
                }
                let index = tokio::time::timeout_at(bound.0, member.read_index.read_index())
                    .await
                    .map_err(|_| ConsistencyError::ReadIndexTimedOut {
                        why: match bound.1 {
                            WaitBound::CallDeadline => "the call's deadline was near",
                            WaitBound::RequestDeadline => {
                                "the request's deadline (`timeout_us`) was near"
                            }
                            WaitBound::ServerMaximum => "the server's maximum wait passed",
                        },
                    })?
                    .map_err(read_index_error)?;
                let applied = wait::applied(&self.durable, &self.stopping, index, bound).await?;
                self.durable.admit_applied(applied).map_err(read_refused)?;
                Ok(applied)
            }
        }
    }

    /// A stale read on `member`, with `applied` applied.
    fn stale(
        &self,
        member: &MemberReads,
        applied: u64,
        max_staleness: Option<Duration>,
    ) -> Result<u64, Status> {
        self.durable.admit_applied(applied).map_err(read_refused)?;
        if let Some(max) = max_staleness {
            let lag = member.staleness.of(applied, &member.lease);
            if lag > max {
                return Err(ConsistencyError::TooStale {
                    lag_ms: lag.as_millis() as u64,
                    max_ms: max.as_millis() as u64,
                }
                .into());
            }
        }
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_consistency_is_linearizable_and_an_unknown_one_is_refused() {
        assert_eq!(Consistency::of(0, 0), Ok(Consistency::Linearizable));
        assert_eq!(Consistency::of(0, 50), Ok(Consistency::Linearizable));
        assert_eq!(Consistency::of(1, 0), Ok(Consistency::Linearizable));
        assert_eq!(
            Consistency::of(2, 0),
            Ok(Consistency::Stale {
                max_staleness: None
            })
        );
        assert_eq!(
            Consistency::of(2, 50),
            Ok(Consistency::Stale {
                max_staleness: Some(Duration::from_millis(50))
            })
        );
        assert_eq!(
            Consistency::of(7, 0),
            Err(RequestError::UnknownConsistency { value: 7 })
        );
    }
}
