//! What every call of the client shares, whatever it calls: the request
//! with its token and deadline, a failure noted on its endpoint, and the
//! UUIDs and found bits of the answers.

use std::time::Duration;

use prost::bytes::Bytes;
use tonic::metadata::{Ascii, MetadataValue};
use uuid::Uuid;

use crate::endpoints::{Endpoint, Endpoints};
use crate::error::ClientError;

/// A failed attempt, and the endpoint it failed on.
pub(crate) struct Failure {
    pub(crate) error: ClientError,
    pub(crate) endpoint: Option<usize>,
    /// The endpoint named another member as its group's leader, and the
    /// client has an endpoint for it: the retry goes there at once.
    pub(crate) redirected: bool,
}

/// A request with `token` and `remaining` (if any) as its deadline.
pub(crate) fn request<T>(
    token: Option<MetadataValue<Ascii>>,
    message: T,
    remaining: Option<Duration>,
) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    if let Some(remaining) = remaining {
        r.set_timeout(remaining);
    }
    if let Some(token) = token {
        r.metadata_mut().insert("authorization", token);
    }
    r
}

/// A failed call on endpoint `e`, noted on the endpoint.
pub(crate) fn endpoint_failure(
    endpoints: &Endpoints,
    e: &Endpoint,
    rpc: &'static str,
    status: tonic::Status,
) -> Failure {
    if crate::error::is_local_timeout(&status) {
        // tonic's own enforcement of the deadline sent: no answer in time,
        // which says nothing about whether the endpoint is reachable.
        return Failure {
            error: ClientError::DeadlineExceeded {
                rpc,
                timeout: Duration::ZERO,
                attempts: 1,
                last: None,
            },
            endpoint: Some(e.id),
            redirected: false,
        };
    }
    let from_transport = std::error::Error::source(&status).is_some();
    // A member of a replica group that does not lead names the leader.
    let redirected = status.code() == tonic::Code::Unavailable
        && status
            .metadata()
            .get(uuidmap_proto::LEADER_METADATA)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|url| {
                url.trim_end_matches('/') != e.url.trim_end_matches('/')
                    && endpoints.leader_named(url)
            });
    let error = if crate::error::is_connect_failure(&status) {
        // The connection was not made: say to what, and why.
        crate::error::connect_error(&e.url, &status)
    } else {
        ClientError::Status { rpc, status }
    };
    if !redirected {
        endpoints.failed(e, error.retry_class(), from_transport);
    }
    Failure {
        error,
        endpoint: Some(e.id),
        redirected,
    }
}

pub(crate) fn bytes_of(u: Uuid) -> Bytes {
    Bytes::copy_from_slice(u.as_bytes())
}

pub(crate) fn uuid_of(rpc: &'static str, bytes: &[u8]) -> Result<Uuid, ClientError> {
    <[u8; 16]>::try_from(bytes)
        .map(Uuid::from_bytes)
        .map_err(|_| ClientError::BadResponse {
            rpc,
            why: format!("a UUID of {} bytes", bytes.len()),
        })
}

/// `n` packed values and their found bits as options.
pub(crate) fn unpack_values(
    rpc: &'static str,
    n: usize,
    values: &[u8],
    found: &[u8],
) -> Result<Vec<Option<Uuid>>, ClientError> {
    if values.len() != n * 16 || found.len() != n.div_ceil(8) {
        return Err(ClientError::BadResponse {
            rpc,
            why: format!(
                "{n} keys were asked for, but the answer has {} bytes of values and {} of \
                 found bits",
                values.len(),
                found.len()
            ),
        });
    }
    Ok(values
        .chunks_exact(16)
        .enumerate()
        .map(|(i, v)| {
            (found[i / 8] >> (i % 8) & 1 == 1)
                .then(|| Uuid::from_bytes(v.try_into().expect("16 bytes")))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_unpack_by_their_found_bits_and_a_short_answer_is_an_error() {
        let mut values = Vec::new();
        for v in [5u128, 0, 7] {
            values.extend_from_slice(Uuid::from_u128(v).as_bytes());
        }
        let got = unpack_values("BatchGet", 3, &values, &[0b101]).unwrap();
        assert_eq!(
            got,
            [Some(Uuid::from_u128(5)), None, Some(Uuid::from_u128(7))]
        );
        let e = unpack_values("BatchGet", 4, &values, &[0b101]).unwrap_err();
        assert!(e.to_string().contains("4 keys"), "{e}");
    }
}
