//! `ClientError`: what went wrong talking to a server, in words that say
//! what to check.

use std::path::PathBuf;

/// A failed client operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server address is not a URI.
    #[error("--server {server:?} is not a server address like http://127.0.0.1:7878: {why}")]
    BadServer {
        /// The address as given.
        server: String,
        /// Why it is not an address.
        why: String,
    },
    /// TLS options that do not fit together or with the address.
    #[error("{0}")]
    TlsOptions(String),
    /// A PEM file could not be read.
    #[error("cannot read the {what} {path}: {source}")]
    ReadFile {
        /// What the file is for (e.g. "TLS CA").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The token cannot travel in gRPC metadata.
    #[error("the token must be visible ASCII characters (no spaces or control characters)")]
    BadToken,
    /// Nothing listens at the address.
    #[error(
        "cannot connect to {server}: connection refused; is the server running there? \
         (start one with `uuidmap serve`; --server or UUIDMAP_SERVER chooses another address)"
    )]
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
}

impl ClientError {
    /// The gRPC status, if the server answered with one.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            ClientError::Status { status, .. } => Some(status),
            _ => None,
        }
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
