//! The one place where typed errors become gRPC statuses.
//!
//! Codes follow the gRPC status-code guide:
//! - `INVALID_ARGUMENT`: the request itself is wrong (a UUID that is not 16
//!   bytes, a packed field that is not whole keys, a reserved key, an empty
//!   write batch, a batch over its limit, a write operation with nothing
//!   set, a message too large or not protobuf). Retrying the same request
//!   cannot succeed.
//! - `DEADLINE_EXCEEDED`: a wait (for `min_lsn`, or `WaitFor`) reached the
//!   call's deadline or the server's maximum wait, or the call was still
//!   running at its deadline (a write may then have been applied). The
//!   server never answers its own timeout CANCELLED (see `deadline`).
//! - `UNAVAILABLE`: the server is shutting down, or the write-ahead log or a
//!   snapshot could not be written; retrying later (once the server is back,
//!   or the disk is fixed) can succeed. A write answered so was not
//!   acknowledged, but the client cannot know that it was not applied (a
//!   WAL record whose fsync failed may still be on the disk at the next
//!   start; a transport's UNAVAILABLE may come after the server applied
//!   it): read it back, as after DEADLINE_EXCEEDED.
//! - Reads on a replica group member (README.md, "Read consistency"):
//!   `UNAVAILABLE` when a linearizable read gets no read index (no leader,
//!   the leader unreachable or without a majority: the leader, when known,
//!   in `uuidmap-leader`), and when a stale read's `max_staleness_ms` is
//!   below the member's staleness (the lag in the message: another member
//!   may answer, so it is retryable elsewhere rather than a precondition);
//!   `DEADLINE_EXCEEDED` when the read index or its apply did not come
//!   within the call's bound.
//! - `FAILED_PRECONDITION`: a `Watch` whose next LSN the WAL no longer holds
//!   (rescan, then watch from the scan's `applied_lsn`); on a member of a
//!   partitioned cluster, a key of a partition its group does not own
//!   (`uuidmap-owner-group` names the owner, `uuidmap-table-version` the
//!   table; nothing was done). A write to a moving partition, or any key
//!   before the member has read the table, is `UNAVAILABLE` (nothing
//!   done; retry). `DATA_LOSS`: a
//!   `Watch` met a damaged WAL record.
//! - `RESOURCE_EXHAUSTED`: admission refused the call at once (its class's
//!   queue is full, or too many long polls are open); nothing was run.
//!   `DEADLINE_EXCEEDED` also answers a call whose deadline passed while it
//!   waited for admission (see `admission.rs`); it was not run either.
//! - `UNAUTHENTICATED`: no bearer token, or one the server does not know;
//!   `PERMISSION_DENIED`: a valid token whose role is too low (see
//!   `auth.rs`). Messages never repeat the token.
//! - A compare-and-set that finds another value is not an error at all: the
//!   services answer OK with `applied = false`. Should one reach this module
//!   anyway it becomes `FAILED_PRECONDITION`, never `INTERNAL`.
//!
//! Messages say what was wrong in the caller's terms (field names as in the
//! proto, positions in the batch).

use std::sync::Arc;

use std::time::Duration;
use uuidmap_partition::Refusal;

use tonic::Status;

use crate::errors::{AdmissionError, AuthError, ConsistencyError, RequestError, WaitBound};
use uuidmap_engine::store::WalFollowError;
use uuidmap_engine::writer::{LeaderHint, ReadRefused, TakeSnapshotError, WriteError};
use uuidmap_index::sync::WaitTimedOut;

impl From<RequestError> for Status {
    fn from(e: RequestError) -> Status {
        Status::invalid_argument(e.to_string())
    }
}

/// The status for a refused write. (A function, not a `From` impl: both
/// types are foreign to this crate.)
pub fn write_error(e: WriteError) -> Status {
    match e {
        WriteError::Empty => Status::invalid_argument(e.to_string()),
        // The limit is the server's `max_write_ops` (the pipeline's is never
        // lower: `open_index`).
        WriteError::TooLarge { len, max } => Status::invalid_argument(format!(
            "a Write may hold at most {max} operations (the server's `max_write_ops`); this \
             one holds {len}: split it"
        )),
        WriteError::CasMismatch { .. } => Status::failed_precondition(e.to_string()),
        // The WAL's fsync failed (the batch may have reached the disk and
        // be replayed at the restart), the writer ended with the batch
        // queued, or a leader that lost its majority holds it logged: its
        // outcome is unknown, and the client must not resend it unless it
        // is idempotent.
        WriteError::WalFailed(_) | WriteError::Unanswered | WriteError::QuorumLost => {
            let mut status = Status::unavailable(e.to_string());
            status.metadata_mut().insert(
                uuidmap_proto::OUTCOME_METADATA,
                tonic::metadata::MetadataValue::from_static(uuidmap_proto::OUTCOME_UNKNOWN),
            );
            status
        }
        WriteError::Wal(_) | WriteError::ShuttingDown => Status::unavailable(e.to_string()),
        // Nothing was logged: the write may go to the leader as it is.
        WriteError::NotLeader { ref leader } => {
            let mut status = Status::unavailable(e.to_string());
            add_leader(&mut status, leader.as_ref());
            status
        }
        // Logged by a leader that lost its leadership: it may still commit.
        WriteError::LeadershipLost { ref leader } => {
            let mut status = Status::unavailable(e.to_string());
            add_leader(&mut status, leader.as_ref());
            status.metadata_mut().insert(
                uuidmap_proto::OUTCOME_METADATA,
                tonic::metadata::MetadataValue::from_static(uuidmap_proto::OUTCOME_UNKNOWN),
            );
            status
        }
        // Nothing was logged: the client backs off (its overload class).
        WriteError::ProposalsFull { .. } => Status::resource_exhausted(e.to_string()),
        // A kind of refusal added to the engine after this was written:
        // nothing was applied (the engine refuses before logging), and a
        // retry may succeed.
        _ => Status::unavailable(e.to_string()),
    }
}

/// Names the leader in `status`'s metadata ([`uuidmap_proto::LEADER_METADATA`]),
/// or, when none is known, says that the group is electing one
/// ([`uuidmap_proto::ELECTION_METADATA`]).
fn add_leader(status: &mut Status, leader: Option<&LeaderHint>) {
    let metadata = status.metadata_mut();
    let Some(leader) = leader else {
        metadata.insert(
            uuidmap_proto::ELECTION_METADATA,
            tonic::metadata::MetadataValue::from_static(uuidmap_proto::ELECTION_NO_LEADER),
        );
        return;
    };
    metadata.insert(
        uuidmap_proto::LEADER_ID_METADATA,
        tonic::metadata::MetadataValue::from(leader.id),
    );
    // A URL that is not valid metadata is left out (the message names it).
    if let Some(url) = &leader.url
        && let Ok(value) = url.parse()
    {
        metadata.insert(uuidmap_proto::LEADER_METADATA, value);
    }
}

/// A partitioned member's refusal of a key its group does not serve: the
/// owner and the table version in the metadata, so that a client routes
/// the request again without parsing the message.
pub fn partition_refused(r: Refusal) -> Status {
    let (mut status, partition, version) = match &r {
        Refusal::NotOwned {
            partition, version, ..
        } => (
            Status::failed_precondition(r.to_string()),
            Some(*partition),
            *version,
        ),
        Refusal::Moving {
            partition, version, ..
        } => (
            Status::unavailable(r.to_string()),
            Some(*partition),
            *version,
        ),
        Refusal::NoTable { .. } => (Status::unavailable(r.to_string()), None, 0),
    };
    let md = status.metadata_mut();
    md.insert(
        uuidmap_proto::TABLE_VERSION_METADATA,
        tonic::metadata::MetadataValue::from(version),
    );
    if let Some(p) = partition {
        md.insert(
            uuidmap_proto::PARTITION_METADATA,
            tonic::metadata::MetadataValue::from(p.get()),
        );
    }
    // Group names are [a-z0-9-]: always valid metadata.
    match &r {
        Refusal::NotOwned { owner, .. } => {
            if let Ok(v) = owner.as_str().parse() {
                md.insert(uuidmap_proto::OWNER_GROUP_METADATA, v);
            }
        }
        Refusal::Moving { to, .. } => {
            if let Ok(v) = to.as_str().parse() {
                md.insert(uuidmap_proto::MOVING_TO_METADATA, v);
            }
        }
        Refusal::NoTable { .. } => {}
    }
    status
}

/// The status for a read a member that believes it leads would not
/// answer: nothing was read; retry, here or on another member.
pub fn read_refused(e: ReadRefused) -> Status {
    Status::unavailable(e.to_string())
}

/// The status for a leader transfer that was not made: a follower
/// redirects as for a write; a bad target is FAILED_PRECONDITION; a
/// transfer not completed in time is UNAVAILABLE (the leader stopped
/// leading: look who leads, then retry if need be).
pub fn transfer_error(e: uuidmap_cluster::transfer::TransferError) -> Status {
    use uuidmap_cluster::transfer::TransferError as E;
    match e {
        E::NotLeader { ref leader } => {
            let mut status = Status::unavailable(e.to_string());
            add_leader(&mut status, leader.as_ref());
            status
        }
        E::ToItself { .. } | E::NotAVoter { .. } => Status::failed_precondition(e.to_string()),
        E::NotTaken { .. } | E::Stopped(_) => Status::unavailable(e.to_string()),
    }
}

/// The status for a read a member would not answer at the consistency
/// asked.
impl From<ConsistencyError> for Status {
    fn from(e: ConsistencyError) -> Status {
        match e {
            ConsistencyError::TooStale { .. } => Status::unavailable(e.to_string()),
            ConsistencyError::ReadIndexTimedOut { .. } => Status::deadline_exceeded(e.to_string()),
        }
    }
}

/// The status for a linearizable read that got no read index: nothing was
/// read; retry, here or on the leader (named when known).
pub fn read_index_error(e: uuidmap_cluster::read_index::ReadIndexError) -> Status {
    let mut status = Status::unavailable(e.to_string());
    add_leader(&mut status, e.leader());
    status
}

/// The status for a membership change that was not made.
pub fn membership_error(e: uuidmap_cluster::membership::MembershipError) -> Status {
    use uuidmap_cluster::membership::MembershipError as E;
    match e {
        E::NotLeader { ref leader } => {
            let mut status = Status::unavailable(e.to_string());
            add_leader(&mut status, leader.as_ref());
            status
        }
        E::Refused(_) => Status::failed_precondition(e.to_string()),
        E::Unknown(_) => {
            let mut status = Status::unavailable(e.to_string());
            status.metadata_mut().insert(
                uuidmap_proto::OUTCOME_METADATA,
                tonic::metadata::MetadataValue::from_static(uuidmap_proto::OUTCOME_UNKNOWN),
            );
            status
        }
        E::Stopped(_) => Status::unavailable(e.to_string()),
    }
}

/// The status for a wait that reached its bound.
pub fn wait_timed_out(e: WaitTimedOut, bound: WaitBound) -> Status {
    let why = match bound {
        WaitBound::CallDeadline => "the call's deadline is near",
        WaitBound::RequestDeadline => "the request's deadline (`timeout_us`) is near",
        WaitBound::ServerMaximum => {
            "the server's maximum wait passed (set a deadline on the call to wait longer, \
             up to the server's `max_wait_ms`)"
        }
    };
    Status::deadline_exceeded(format!(
        "LSN {} is not applied yet (the applied LSN is {}) and {why}",
        e.target, e.current
    ))
}

/// The status for a call still running at its deadline (see `deadline`):
/// `writes` says whether it may change the index.
pub fn call_deadline_passed(timeout: Duration, writes: bool) -> Status {
    if writes {
        Status::deadline_exceeded(format!(
            "the call's deadline ({timeout:?}) passed before the server could answer; the write \
             may or may not have been applied. Read the keys back (Get) before acting on it: a \
             Put or Delete can simply be sent again, a CompareAndSet must be decided again from \
             what Get returns"
        ))
    } else {
        Status::deadline_exceeded(format!(
            "the call's deadline ({timeout:?}) passed before the server could answer; nothing \
             was changed. Retry, with a longer deadline if this repeats"
        ))
    }
}

/// The status for a `Lookup` request whose own deadline (`timeout_us`,
/// less its margin) passed before it was looked up: nothing was read for
/// it, since its caller no longer waits.
pub fn request_deadline_passed(timeout: Duration) -> Status {
    Status::deadline_exceeded(format!(
        "the request's deadline (timeout_us: {timeout:?}) passed before the server could look          its keys up; retry, with a longer deadline if this repeats"
    ))
}

/// The status for a wait cut short because the server is stopping.
pub fn stopping_wait(target: u64, current: u64) -> Status {
    Status::unavailable(format!(
        "the server is shutting down; LSN {target} was not applied yet (the applied LSN is \
         {current}); retry the read once the server is back"
    ))
}

/// The status for a change stream that cannot go on (or start): `after` is
/// the last LSN the client has (or asked to start after).
pub fn watch_error(e: &WalFollowError, after: u64) -> Status {
    match e {
        WalFollowError::NotRetained { oldest, .. } => {
            let oldest = oldest.map_or(String::new(), |o| {
                format!(" (the oldest change kept is LSN {o})")
            });
            Status::failed_precondition(format!(
                "the changes after LSN {after} are no longer kept{oldest}: a snapshot covered \
                 them and their WAL files were removed. Rescan with Scan, then watch from its \
                 applied_lsn"
            ))
        }
        WalFollowError::Corrupt(_) => Status::data_loss(format!(
            "the change stream cannot go on after LSN {after}: {e}"
        )),
        _ => Status::unavailable(format!(
            "the change stream cannot go on after LSN {after}: {e}; retry from there"
        )),
    }
}

/// The status for a change stream ended because the server is stopping.
pub fn stopping_watch() -> Status {
    Status::unavailable(
        "the server is shutting down; once it is back, watch again after the last LSN received",
    )
}

/// The status that ends a reflection stream still open when the server
/// stops (see `end_on_stop`).
pub fn stopping_stream() -> Status {
    Status::unavailable("the server is shutting down; reconnect once it is back")
}

/// The status for a call the bearer-token check refused.
impl From<&AuthError> for Status {
    fn from(e: &AuthError) -> Status {
        match e {
            AuthError::WrongRole { .. } | AuthError::CertificateOnly { .. } => {
                Status::permission_denied(e.to_string())
            }
            AuthError::Missing | AuthError::NotBearer | AuthError::UnknownToken => {
                Status::unauthenticated(e.to_string())
            }
        }
    }
}

/// The status for a call admission control refused (it was not run).
impl From<&AdmissionError> for Status {
    fn from(e: &AdmissionError) -> Status {
        match e {
            AdmissionError::QueueFull { .. } | AdmissionError::LongPolls { .. } => {
                Status::resource_exhausted(e.to_string())
            }
            AdmissionError::Deadline { .. } => Status::deadline_exceeded(e.to_string()),
        }
    }
}

/// The status for a snapshot that could not be taken.
pub fn snapshot_error(e: &Arc<TakeSnapshotError>) -> Status {
    if let TakeSnapshotError::NotInGroupYet(_) = **e {
        return Status::unimplemented(e.to_string());
    }
    let hint = if e.is_disk_full() {
        "; free space on the data disk, then ask again"
    } else {
        ""
    };
    Status::unavailable(format!(
        "the snapshot was not taken (the previous snapshots are kept): {e}{hint}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;
    use uuid::Uuid;
    use uuidmap_engine::store::FileError;
    use uuidmap_index::Key;

    #[test]
    fn a_write_over_the_proposal_bound_is_resource_exhausted_and_says_what_to_do() {
        let s = write_error(WriteError::ProposalsFull { bound: 4096 });
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(s.message().contains("4096") && s.message().contains("retry after"));
        assert!(s.metadata().get(uuidmap_proto::OUTCOME_METADATA).is_none());
    }

    #[test]
    fn a_cas_mismatch_is_never_internal() {
        let s = write_error(WriteError::CasMismatch {
            index: 0,
            key: Key::new(Uuid::from_u128(1)).unwrap(),
            expected: None,
            current: Some(Uuid::from_u128(2)),
        });
        assert_eq!(s.code(), Code::FailedPrecondition);
    }

    #[test]
    fn disk_and_shutdown_failures_are_unavailable_and_oversized_batches_invalid() {
        assert_eq!(
            write_error(WriteError::ShuttingDown).code(),
            Code::Unavailable
        );
        let wal = WriteError::Wal(Arc::new(
            FileError::new(
                "appending to",
                std::path::Path::new("/data/wal"),
                std::io::Error::other("disk full"),
            )
            .into(),
        ));
        assert_eq!(write_error(wal).code(), Code::Unavailable);
        let s = write_error(WriteError::TooLarge { len: 11, max: 10 });
        assert_eq!(s.code(), Code::InvalidArgument);
        assert!(
            s.message()
                .contains("at most 10 operations (the server's `max_write_ops`)")
                && s.message().contains("holds 11"),
            "{}",
            s.message()
        );
        assert_eq!(write_error(WriteError::Empty).code(), Code::InvalidArgument);
    }

    #[test]
    fn a_write_to_a_follower_names_the_leader_and_only_a_lost_one_is_of_unknown_outcome() {
        let leader = LeaderHint {
            id: 3,
            url: Some("http://10.0.0.3:7000".into()),
        };
        let s = write_error(WriteError::NotLeader {
            leader: Some(leader.clone()),
        });
        assert_eq!(s.code(), Code::Unavailable);
        let md = s.metadata();
        assert_eq!(
            md.get(uuidmap_proto::LEADER_METADATA).unwrap(),
            "http://10.0.0.3:7000"
        );
        assert_eq!(md.get(uuidmap_proto::LEADER_ID_METADATA).unwrap(), "3");
        assert!(md.get(uuidmap_proto::OUTCOME_METADATA).is_none());

        let s = write_error(WriteError::LeadershipLost {
            leader: Some(leader),
        });
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(
            s.metadata().get(uuidmap_proto::OUTCOME_METADATA).unwrap(),
            uuidmap_proto::OUTCOME_UNKNOWN
        );
        assert_eq!(
            s.metadata().get(uuidmap_proto::LEADER_ID_METADATA).unwrap(),
            "3"
        );

        let s = write_error(WriteError::QuorumLost);
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(
            s.metadata().get(uuidmap_proto::OUTCOME_METADATA).unwrap(),
            uuidmap_proto::OUTCOME_UNKNOWN
        );
        assert!(
            s.metadata()
                .get(uuidmap_proto::LEADER_ID_METADATA)
                .is_none()
        );

        // No leader known: no leader in the metadata but the election
        // marker (the client backs off for it), and the message says so.
        let s = write_error(WriteError::NotLeader { leader: None });
        assert!(
            s.metadata()
                .get(uuidmap_proto::LEADER_ID_METADATA)
                .is_none()
        );
        assert_eq!(
            s.metadata().get(uuidmap_proto::ELECTION_METADATA).unwrap(),
            uuidmap_proto::ELECTION_NO_LEADER
        );
        assert!(
            s.message().contains("no leader is known yet"),
            "{}",
            s.message()
        );
    }

    #[test]
    fn a_timed_out_wait_is_deadline_exceeded_and_names_both_lsns() {
        let s = wait_timed_out(
            WaitTimedOut {
                target: 90,
                current: 7,
            },
            WaitBound::CallDeadline,
        );
        assert_eq!(s.code(), Code::DeadlineExceeded);
        assert!(s.message().contains("90") && s.message().contains('7'));
    }
}
