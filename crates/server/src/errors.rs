//! The server's typed errors: what is wrong with a request, why admission
//! or auth refused a call, and where a wait's bound came from.
//!
//! The layers that raise them (`wire`, `scan_rpc`, `service`, `admission`,
//! `auth`, `deadline`) import this module; `grpc_status` turns each into a
//! gRPC status with a `From` impl. Neither imports the other's layer, so
//! there is no cycle: raisers → `errors` ← `grpc_status`.

use uuidmap_index::{KeyError, ScanError};

use crate::methods::{Class, Role};

/// A request that breaks the wire rules or the server's limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// A UUID field is not 16 bytes.
    #[error("{field} must be a 16-byte UUID, but it is {len} bytes long")]
    UuidLength {
        /// The field, as the request names it.
        field: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A key is reserved.
    #[error("{field}: {source}")]
    Key {
        /// The field, as the request names it.
        field: String,
        /// Why the key is refused.
        source: KeyError,
    },
    /// A packed key field is not a whole number of 16-byte keys.
    #[error("{field} must hold whole 16-byte keys, but its {len} bytes are not a multiple of 16")]
    PackedLength {
        /// The field.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// A batch has more keys than the configured limit.
    #[error(
        "a BatchGet, or one Lookup request, may hold at most {max} keys (the server's \
         `max_batch_keys`); this one holds {len}: split it"
    )]
    TooManyKeys {
        /// The keys in the batch.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// A write operation has none of put, delete, compare_and_set set.
    #[error(
        "ops[{index}] sets no operation: set one of put, delete or compare_and_set \
         (a client built from an older or newer proto may send an operation this server \
         does not know)"
    )]
    UnknownOp {
        /// The operation's position in `ops`.
        index: usize,
    },
    /// A scan filter is not a whole number of 16-byte values.
    #[error("values must hold whole 16-byte UUIDs, but its {len} bytes are not a multiple of 16")]
    FilterLength {
        /// The filter's length in bytes.
        len: usize,
    },
    /// A scan filter has more values than the configured limit.
    #[error(
        "a scan filter may hold at most {max} values (the server's `max_filter_values`); this \
         one holds {len} (scan with several smaller filters instead)"
    )]
    TooManyFilterValues {
        /// The values in the filter.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// A scan's partition that does not exist.
    #[error(
        "partitions[{index}] is {value}: partitions are numbered 0 to 4095 (docs/partitions.md)"
    )]
    NoSuchPartition {
        /// Its position in the request.
        index: usize,
        /// The number given.
        value: u32,
    },
    /// A scan cursor or split that does not fit this index.
    #[error("{0}")]
    Scan(#[from] ScanError),
    /// A `consistency` this server does not know.
    #[error(
        "consistency {value} is not a ReadConsistency this server knows (0 or 1: \
         linearizable, 2: stale)"
    )]
    UnknownConsistency {
        /// The value sent.
        value: i32,
    },
}

/// Why a replica group member did not answer a read at the consistency
/// asked (beyond the lease's `ReadRefused` and the cluster's
/// `ReadIndexError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConsistencyError {
    /// A stale read's `max_staleness_ms` is below this member's staleness.
    #[error(
        "this member is {lag_ms} ms stale (it last knew it had applied everything the leader \
         had committed {lag_ms} ms ago), more than the read's max_staleness_ms of {max_ms}; \
         read from another member (the leader is never stale), allow more staleness, or read \
         with consistency `linearizable`"
    )]
    TooStale {
        /// This member's staleness.
        lag_ms: u64,
        /// The bound the read asked for.
        max_ms: u64,
    },
    /// A linearizable read's read index did not come within its bound.
    #[error("the leader's read index did not come before {why}; the read was not answered: retry")]
    ReadIndexTimedOut {
        /// Which bound passed.
        why: &'static str,
    },
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdmissionError {
    /// Every permit of the class is taken and its queue is full.
    #[error(
        "the server is overloaded: all {permits} {class} slots are busy and {queue} {class} \
         requests already wait; retry with backoff"
    )]
    QueueFull {
        /// The call's class.
        class: Class,
        /// The class's permits.
        permits: usize,
        /// The class's queue bound.
        queue: usize,
    },
    /// The call's deadline (or the server's maximum wait) passed while it
    /// waited for a permit; it was not run.
    #[error(
        "the request waited for one of the server's {permits} {class} slots (all busy) until \
         {why}; it was not run. The server is overloaded: retry with backoff"
    )]
    Deadline {
        /// The call's class.
        class: Class,
        /// The class's permits.
        permits: usize,
        /// Which limit ended the wait (the call's deadline or the server's).
        why: &'static str,
    },
    /// Too many long polls are open.
    #[error(
        "the server is overloaded: {max} long polls (WaitFor, Watch and Lookup streams) are \
         already open; retry with backoff"
    )]
    LongPolls {
        /// The cap on open long polls.
        max: usize,
    },
}

/// Why the bearer-token check refused a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `authorization` metadata.
    #[error(
        "this server requires a bearer token: send the metadata `authorization: Bearer <token>`"
    )]
    Missing,
    /// The metadata is not `Bearer <token>`.
    #[error("the authorization metadata must have the form `Bearer <token>`")]
    NotBearer,
    /// A token this server does not know.
    #[error("the bearer token is not valid on this server")]
    UnknownToken,
    /// A known token whose role is too low.
    #[error("{method} needs a token with the {needed} role; this token has the {has} role")]
    WrongRole {
        /// The method called.
        method: String,
        /// The role it needs.
        needed: Role,
        /// The token's role.
        has: Role,
    },
    /// A method above `write` on a server whose callers are verified by
    /// client certificates alone (no tokens file).
    #[error(
        "{method} needs the {needed} role, and a client certificate alone grants the write \
         role at most: give the server a tokens file (--tokens-file) with an `{needed} <token>` \
         line, and call with that token (--token or UUIDMAP_TOKEN)"
    )]
    CertificateOnly {
        /// The method called.
        method: String,
        /// The role it needs.
        needed: Role,
    },
}

/// Where the bound of a wait came from, for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitBound {
    /// The call's deadline (`grpc-timeout`).
    CallDeadline,
    /// A `Lookup` request's own deadline (its `timeout_us`), earlier than
    /// its stream's.
    RequestDeadline,
    /// The server's maximum wait (the call had no deadline, or a longer one).
    ServerMaximum,
}
