//! `ClientError`: what went wrong talking to a server, in words that say
//! what to check, and [`RetryClass`]: whether trying again can help.
//!
//! Every failure has exactly one class ([`ClientError::retry_class`]):
//!
//! | class | failures | retried |
//! | --- | --- | --- |
//! | [`RetryClass::Fast`] | connection refused or not made; the stream refused before the server read it (`REFUSED_STREAM`); `UNAVAILABLE` sent by the server (stopping, its disk full, or a member of a replica group that does not lead and names the leader: nothing was applied) | always, fast backoff with equal jitter (at once to the leader a member named, the first time) |
//! | [`RetryClass::Slow`] | `RESOURCE_EXHAUSTED` (admission shed the call: it was not run); `UNAVAILABLE` marked `uuidmap-election` (a member that knows no leader: the group is electing one, which takes hundreds of milliseconds) | always, slow backoff with equal jitter |
//! | [`RetryClass::Conditional`] | `DEADLINE_EXCEEDED`, a transport failure once the request may have been sent, `UNKNOWN`, `INTERNAL`, `CANCELLED` by the server or the network, `UNAVAILABLE` marked `uuidmap-outcome: unknown` (the server's WAL fsync failed with the write in flight, or a leader lost its leadership after logging it) | only an idempotent call, and never a compare-and-set |
//! | [`RetryClass::Final`] | every other code (`INVALID_ARGUMENT`, `UNAUTHENTICATED`, `PERMISSION_DENIED`, `FAILED_PRECONDITION`, ...), a compare-and-set that found another value, bad options, a malformed answer | never |
//!
//! [`ClientError::is_transient`] is true for the first two classes only,
//! as in the YDB SDK: after a conditional failure the operation *may have
//! run*, so code that retries whenever an error is transient must not see
//! one there. Use [`RetryClass::allows_retry`] with the call's idempotence
//! to decide.
//!
//! A conditional failure of a write leaves its outcome unknown: the write
//! may or may not have been applied. Only a call marked idempotent (reads
//! always are) is sent again after one.

use std::path::PathBuf;
use std::time::Duration;

use uuid::Uuid;

/// Whether, and how, a failed call may be tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetryClass {
    /// Nothing was done and nothing says the server is busy: retry soon
    /// (on another endpoint if this one is down).
    Fast,
    /// The server shed the call to protect itself: retry, slowly.
    Slow,
    /// The call may have been done: retry only if doing it twice is the
    /// same as doing it once.
    Conditional,
    /// Trying again gives the same answer.
    Final,
}

impl RetryClass {
    /// Whether a call that failed so may be sent again; `idempotent` says
    /// whether sending it twice is the same as sending it once.
    pub fn allows_retry(self, idempotent: bool) -> bool {
        match self {
            RetryClass::Fast | RetryClass::Slow => true,
            RetryClass::Conditional => idempotent,
            RetryClass::Final => false,
        }
    }

    /// The class of a gRPC status: its code, and for a status tonic made
    /// from a transport failure (it has a source), whether the request
    /// can have reached the server.
    pub fn of_status(status: &tonic::Status) -> RetryClass {
        use tonic::Code::*;
        match status.code() {
            ResourceExhausted => RetryClass::Slow,
            Unavailable | Unknown | Internal | Cancelled
                if std::error::Error::source(status).is_some() =>
            {
                if never_sent(status) {
                    RetryClass::Fast
                } else {
                    RetryClass::Conditional
                }
            }
            // The server says it did nothing, unless it marks the outcome
            // unknown (its WAL's fsync failed).
            Unavailable
                if status
                    .metadata()
                    .get(uuidmap_proto::OUTCOME_METADATA)
                    .is_some_and(|v| v == uuidmap_proto::OUTCOME_UNKNOWN) =>
            {
                RetryClass::Conditional
            }
            // A member that knows no leader: wait for the election.
            Unavailable
                if status
                    .metadata()
                    .get(uuidmap_proto::ELECTION_METADATA)
                    .is_some() =>
            {
                RetryClass::Slow
            }
            Unavailable => RetryClass::Fast,
            DeadlineExceeded | Unknown | Internal | Cancelled => RetryClass::Conditional,
            Ok | InvalidArgument | NotFound | AlreadyExists | PermissionDenied
            | FailedPrecondition | Aborted | OutOfRange | Unimplemented | DataLoss
            | Unauthenticated => RetryClass::Final,
        }
    }
}

/// `e`'s sources, from its first cause down (not `e` itself).
fn causes<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(e.source(), |c| c.source())
}

/// Whether `status` is tonic's own "Timeout expired": the deadline the
/// client sent passed with no answer.
pub(crate) fn is_local_timeout(status: &tonic::Status) -> bool {
    causes(status).any(|c| c.is::<tonic::TimeoutExpired>())
}

/// Whether `status` was made from a failure to connect (tonic's
/// `ConnectError`).
pub(crate) fn is_connect_failure(status: &tonic::Status) -> bool {
    causes(status).any(|c| c.is::<tonic::ConnectError>())
}

/// A failure to connect to `server`: a refused connection named plainly,
/// anything else with its whole cause.
pub(crate) fn connect_error(server: &str, e: &(dyn std::error::Error + 'static)) -> ClientError {
    let refused = causes(e).any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    });
    if refused {
        ClientError::Refused {
            server: server.to_string(),
        }
    } else {
        ClientError::Connect {
            server: server.to_string(),
            why: uuidmap_proto::error_chain::error_chain(e),
        }
    }
}

/// Whether a transport failure happened before the request left: the
/// connection was never made, or HTTP/2 refused the stream (which, by the
/// protocol, the server has not processed).
fn never_sent(status: &tonic::Status) -> bool {
    is_connect_failure(status)
        || causes(status).any(|e| {
            let unreachable = e.downcast_ref::<std::io::Error>().is_some_and(|io| {
                matches!(
                    io.kind(),
                    std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::AddrNotAvailable
                        | std::io::ErrorKind::HostUnreachable
                        | std::io::ErrorKind::NetworkUnreachable
                )
            });
            let refused_stream = e
                .downcast_ref::<h2::Error>()
                .is_some_and(|h2| h2.reason() == Some(h2::Reason::REFUSED_STREAM));
            // hyper-util's connector names its failures so; its error type
            // is private.
            unreachable || refused_stream || e.to_string().starts_with("tcp connect error")
        })
}

/// A failed client operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server address is not a URI.
    #[error("{server:?} is not a server address like http://127.0.0.1:7878: {why}")]
    BadServer {
        /// The address as given.
        server: String,
        /// Why it is not an address.
        why: String,
    },
    /// TLS options were given for an address that is not `https://`.
    #[error("TLS options were given but the server address {server} is not https://")]
    TlsWithoutHttps {
        /// The address as given.
        server: String,
    },
    /// An `https://` address without the CA to check the server against.
    #[error(
        "{server} is https:// but no CA certificate was given: give the PEM of the CA that \
         signed the server's certificate, or trust the system's roots \
         (ClientBuilder::tls_system_roots)"
    )]
    NoTlsCa {
        /// The address as given.
        server: String,
    },
    /// A client certificate without its key, or a key without its
    /// certificate.
    #[error("a client certificate and its key go together: give both or neither")]
    HalfClientIdentity,
    /// A PEM file could not be read.
    #[error("cannot read the {what} {path}: {source}")]
    ReadFile {
        /// What the file is for: [`ClientError::TLS_CA`],
        /// [`ClientError::CLIENT_CERT`] or [`ClientError::CLIENT_KEY`].
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The token cannot travel in gRPC metadata.
    #[error("the token must be visible ASCII characters (no spaces or control characters)")]
    BadToken,
    /// The token provider gave no token when the client was built.
    #[error("the token provider gave no token: {why}")]
    TokenProvider {
        /// The provider's words.
        why: String,
    },
    /// Nothing listens at the address.
    #[error("cannot connect to {server}: connection refused; is the server running there?")]
    Refused {
        /// The address tried.
        server: String,
    },
    /// Any other failure to connect (name resolution, TLS handshake,
    /// timeout).
    #[error("cannot connect to {server}: {why}")]
    Connect {
        /// The address tried.
        server: String,
        /// What failed.
        why: String,
    },
    /// The server answered with an error.
    #[error("{rpc} failed: {}: {}", code_name(.status.code()), .status.message())]
    Status {
        /// The RPC called.
        rpc: &'static str,
        /// The server's answer.
        status: tonic::Status,
    },
    /// The server answered something this client cannot read.
    #[error("{rpc}: the server's answer is malformed: {why}")]
    BadResponse {
        /// The RPC called.
        rpc: &'static str,
        /// What is wrong with the answer.
        why: String,
    },
    /// No answer came within the call's deadline (after `attempts`
    /// attempts); a write's outcome is unknown.
    #[error("{rpc}: no answer within the call's deadline of {timeout:?} ({attempts} attempt(s)){}", last_error(.last))]
    DeadlineExceeded {
        /// The RPC called.
        rpc: &'static str,
        /// The call's timeout.
        timeout: Duration,
        /// Attempts made.
        attempts: u32,
        /// The last attempt's failure, if one failed before the deadline.
        last: Option<Box<ClientError>>,
    },
    /// One attempt of a read got no answer within its own timeout (a part
    /// of the call's deadline, [`crate::ClientBuilder::attempt_timeout`]):
    /// the call tried another endpoint. The endpoint is pessimized when it
    /// lets an attempt pass without a word (a batched get's endpoint, once
    /// the latest deadline of the get's batch has passed too).
    #[error("{rpc}: {server} did not answer within the attempt timeout of {after:?}")]
    AttemptTimedOut {
        /// The RPC called.
        rpc: &'static str,
        /// The endpoint that did not answer.
        server: String,
        /// The attempt's timeout.
        after: Duration,
    },
    /// A `Write` whose compare-and-set number `op` found another value:
    /// nothing of the batch was applied.
    #[error(
        "the Write changed nothing: its operation {op}, a compare-and-set of {key}, found the \
         entry {}",
        entry(.current)
    )]
    WriteMismatch {
        /// The failed operation's index in the batch.
        op: usize,
        /// Its key.
        key: Uuid,
        /// Its value at the batch's turn (`None`: no entry).
        current: Option<Uuid>,
    },
    /// A compare-and-set whose outcome is unknown (its answer was lost), so
    /// it was not sent again; `current` is the key's value read afterwards.
    /// Decide again from it: if it is the value you set, the
    /// compare-and-set was most likely applied (or another writer set the
    /// same value).
    #[error(
        "compare-and-set of {key} may or may not have been applied ({cause}); the entry is now {}",
        entry(.current)
    )]
    Undetermined {
        /// The key.
        key: Uuid,
        /// Its value read after the failure (`None`: no entry).
        current: Option<Uuid>,
        /// Why the outcome is unknown.
        cause: Box<ClientError>,
    },
    /// A watch asked for changes the server no longer keeps (a snapshot
    /// covered them and their WAL files were removed).
    #[error(
        "the changes after LSN {after} are no longer kept: rescan, then watch from the scan's \
         applied LSN (Client::scan_then_watch does both); the server said: {why}"
    )]
    NotRetained {
        /// The last LSN the watch had.
        after: u64,
        /// The server's words.
        why: String,
    },
    /// The client's limit on calls in flight was reached and its queue of
    /// waiting callers was full.
    #[error(
        "{rpc} was not sent: this client already has {in_flight} calls in flight and its queue \
         of waiting callers is full; raise ClientBuilder::max_in_flight or call less at once"
    )]
    Overloaded {
        /// The RPC.
        rpc: &'static str,
        /// The limit on calls in flight.
        in_flight: usize,
    },
    /// The blocking client's runtime could not be started.
    #[error("the blocking client's runtime could not be started: {why}")]
    Runtime {
        /// The system's words.
        why: String,
    },
    /// The client was built without an endpoint.
    #[error("no server to call: give the client at least one endpoint")]
    NoEndpoints,
    /// A partitioned client could not route a key: the cluster's map in
    /// etcd could not be read, has no table, or names a group with no
    /// registered member.
    #[error("cannot route the call: {why}")]
    Routing {
        /// What is missing.
        why: String,
    },
}

fn last_error(last: &Option<Box<ClientError>>) -> String {
    last.as_ref()
        .map_or(String::new(), |e| format!("; the last attempt failed: {e}"))
}

fn entry(current: &Option<Uuid>) -> String {
    current.map_or("absent".to_string(), |v| format!("{v}"))
}

impl ClientError {
    /// [`ClientError::ReadFile`]'s `what` for the CA certificate.
    pub const TLS_CA: &'static str = "TLS CA";
    /// [`ClientError::ReadFile`]'s `what` for the client certificate.
    pub const CLIENT_CERT: &'static str = "client certificate";
    /// [`ClientError::ReadFile`]'s `what` for the client's private key.
    pub const CLIENT_KEY: &'static str = "client key";

    /// The gRPC status, if the server answered with one.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            ClientError::Status { status, .. } => Some(status),
            _ => None,
        }
    }

    /// Whether, and how, the call may be tried again (see the module doc).
    pub fn retry_class(&self) -> RetryClass {
        match self {
            ClientError::Status { status, .. } => RetryClass::of_status(status),
            // Nothing listened or the connection could not be made: the
            // request never left.
            ClientError::Refused { .. } | ClientError::Connect { .. } => RetryClass::Fast,
            ClientError::DeadlineExceeded { .. } | ClientError::AttemptTimedOut { .. } => {
                RetryClass::Conditional
            }
            ClientError::BadServer { .. }
            | ClientError::TlsWithoutHttps { .. }
            | ClientError::NoTlsCa { .. }
            | ClientError::HalfClientIdentity
            | ClientError::ReadFile { .. }
            | ClientError::BadToken
            | ClientError::TokenProvider { .. }
            | ClientError::BadResponse { .. }
            | ClientError::WriteMismatch { .. }
            | ClientError::Undetermined { .. }
            | ClientError::NotRetained { .. }
            | ClientError::Overloaded { .. }
            | ClientError::Runtime { .. }
            | ClientError::NoEndpoints
            | ClientError::Routing { .. } => RetryClass::Final,
        }
    }

    /// Whether the call was surely not done and may pass if tried again:
    /// [`RetryClass::Fast`] and [`RetryClass::Slow`]. False for an unknown
    /// outcome ([`RetryClass::Conditional`]: a write may have been
    /// applied), as in the YDB SDK; whether such a call may be sent again
    /// depends on its idempotence ([`RetryClass::allows_retry`]).
    pub fn is_transient(&self) -> bool {
        matches!(self.retry_class(), RetryClass::Fast | RetryClass::Slow)
    }

    /// Whether the call's outcome is unknown: it may or may not have been
    /// done ([`RetryClass::Conditional`]). A write that failed so should be
    /// read back before it is decided again.
    pub fn outcome_unknown(&self) -> bool {
        self.retry_class() == RetryClass::Conditional
    }
}

/// The canonical name of a gRPC status code (`NOT_FOUND`, ...), as in the
/// gRPC documentation and other clients' messages.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    /// Every code as the server sends it (no transport source), with the
    /// class and whether an idempotent and a non-idempotent call retry.
    #[test]
    fn every_code_has_one_class_and_idempotence_decides_only_conditional_ones() {
        use RetryClass::*;
        let table = [
            (Code::Ok, Final),
            (Code::Cancelled, Conditional),
            (Code::Unknown, Conditional),
            (Code::InvalidArgument, Final),
            (Code::DeadlineExceeded, Conditional),
            (Code::NotFound, Final),
            (Code::AlreadyExists, Final),
            (Code::PermissionDenied, Final),
            (Code::ResourceExhausted, Slow),
            (Code::FailedPrecondition, Final),
            (Code::Aborted, Final),
            (Code::OutOfRange, Final),
            (Code::Unimplemented, Final),
            (Code::Internal, Conditional),
            (Code::Unavailable, Fast),
            (Code::DataLoss, Final),
            (Code::Unauthenticated, Final),
        ];
        assert_eq!(table.len(), 17, "every gRPC code");
        for (code, class) in table {
            let e = ClientError::Status {
                rpc: "Get",
                status: tonic::Status::new(code, "from the server"),
            };
            assert_eq!(e.retry_class(), class, "{code:?}");
            // An unknown outcome is never transient (the YDB SDK's rule).
            assert_eq!(e.is_transient(), matches!(class, Fast | Slow), "{code:?}");
            assert_eq!(e.outcome_unknown(), class == Conditional, "{code:?}");
            let (idempotent, not) = match class {
                Fast | Slow => (true, true),
                Conditional => (true, false),
                Final => (false, false),
            };
            assert_eq!(class.allows_retry(true), idempotent, "{code:?} idempotent");
            assert_eq!(class.allows_retry(false), not, "{code:?} not idempotent");
        }
    }

    fn transport(code: Code, source: impl std::error::Error + Send + Sync + 'static) -> RetryClass {
        let mut status = tonic::Status::new(code, "transport");
        status.set_source(std::sync::Arc::new(source));
        RetryClass::of_status(&status)
    }

    #[test]
    fn a_transport_failure_is_fast_only_when_the_request_cannot_have_left() {
        use std::io::{Error, ErrorKind};
        assert_eq!(
            transport(Code::Unavailable, Error::from(ErrorKind::ConnectionRefused)),
            RetryClass::Fast
        );
        assert_eq!(
            transport(
                Code::Unavailable,
                h2::Error::from(h2::Reason::REFUSED_STREAM)
            ),
            RetryClass::Fast
        );
        // A reset or a broken pipe once connected: the request may have
        // been read, so the outcome is unknown.
        assert_eq!(
            transport(Code::Unavailable, Error::from(ErrorKind::ConnectionReset)),
            RetryClass::Conditional
        );
        assert_eq!(
            transport(Code::Unknown, h2::Error::from(h2::Reason::INTERNAL_ERROR)),
            RetryClass::Conditional
        );
        assert_eq!(
            transport(Code::Cancelled, h2::Error::from(h2::Reason::CANCEL)),
            RetryClass::Conditional
        );
    }

    #[test]
    fn unavailable_with_an_unknown_outcome_is_conditional() {
        let mut status = tonic::Status::unavailable("the write-ahead log failed");
        status.metadata_mut().insert(
            uuidmap_proto::OUTCOME_METADATA,
            tonic::metadata::MetadataValue::from_static(uuidmap_proto::OUTCOME_UNKNOWN),
        );
        assert_eq!(RetryClass::of_status(&status), RetryClass::Conditional);
        assert!(!RetryClass::of_status(&status).allows_retry(false));
        // Even from a leader that lost its leadership and knows no other:
        // the unknown outcome wins over the election.
        status.metadata_mut().insert(
            uuidmap_proto::ELECTION_METADATA,
            tonic::metadata::MetadataValue::from_static(uuidmap_proto::ELECTION_NO_LEADER),
        );
        assert_eq!(RetryClass::of_status(&status), RetryClass::Conditional);
    }

    #[test]
    fn a_member_that_knows_no_leader_gets_the_slow_backoff() {
        let mut status = tonic::Status::unavailable("no leader is known yet");
        status.metadata_mut().insert(
            uuidmap_proto::ELECTION_METADATA,
            tonic::metadata::MetadataValue::from_static(uuidmap_proto::ELECTION_NO_LEADER),
        );
        let e = ClientError::Status { rpc: "Put", status };
        assert_eq!(e.retry_class(), RetryClass::Slow);
        assert!(e.is_transient() && !e.outcome_unknown());
    }

    #[test]
    fn client_side_failures_are_classed_too() {
        let refused = ClientError::Refused {
            server: "http://127.0.0.1:1".into(),
        };
        assert_eq!(refused.retry_class(), RetryClass::Fast);
        let late = ClientError::DeadlineExceeded {
            rpc: "Put",
            timeout: Duration::from_millis(5),
            attempts: 1,
            last: None,
        };
        assert_eq!(late.retry_class(), RetryClass::Conditional);
        let mismatch = ClientError::WriteMismatch {
            op: 0,
            key: Uuid::from_u128(1),
            current: None,
        };
        assert_eq!(mismatch.retry_class(), RetryClass::Final);
        assert!(!mismatch.is_transient());
        assert!(mismatch.to_string().contains("absent"), "{mismatch}");
    }
}
