//! `ClientError`: what went wrong talking to a server, in words that say
//! what to check.

use std::path::PathBuf;

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
         signed the server's certificate (the system's roots are not used)"
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
