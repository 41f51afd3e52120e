//! Wire format helpers: UUIDs as 16 raw bytes, packed key arrays, the
//! `found` bitmap, and the call's deadline from `grpc-timeout`.

use std::time::Duration;

use prost::bytes::{Bytes, BytesMut};
use tokio::time::Instant;
use uuid::Uuid;

use super::status::{RequestError, WaitBound};
use crate::index::slot::check_key;

/// A UUID field: exactly 16 bytes.
pub fn uuid(field: &str, bytes: &[u8]) -> Result<Uuid, RequestError> {
    <[u8; 16]>::try_from(bytes)
        .map(Uuid::from_bytes)
        .map_err(|_| RequestError::UuidLength {
            field: field.to_string(),
            len: bytes.len(),
        })
}

/// A key field: 16 bytes, not a reserved UUID.
pub fn key(field: &str, bytes: &[u8]) -> Result<Uuid, RequestError> {
    let k = uuid(field, bytes)?;
    check_key(&k).map_err(|source| RequestError::Key {
        field: field.to_string(),
        source,
    })?;
    Ok(k)
}

/// An optional UUID field (absent = no entry).
pub fn optional_uuid(field: &str, bytes: Option<&Bytes>) -> Result<Option<Uuid>, RequestError> {
    bytes.map(|b| uuid(field, b)).transpose()
}

/// A packed array of keys (n×16 bytes), 1 to `max` keys, none reserved.
pub fn packed_keys(
    field: &'static str,
    bytes: &[u8],
    max: usize,
) -> Result<Vec<Uuid>, RequestError> {
    if !bytes.len().is_multiple_of(16) {
        return Err(RequestError::PackedLength {
            field,
            len: bytes.len(),
        });
    }
    let n = bytes.len() / 16;
    if n == 0 {
        return Err(RequestError::NoKeys { field });
    }
    if n > max {
        return Err(RequestError::TooManyKeys { len: n, max });
    }
    bytes
        .chunks_exact(16)
        .enumerate()
        .map(|(i, chunk)| {
            let k = Uuid::from_bytes(chunk.try_into().expect("chunks_exact(16)"));
            check_key(&k).map_err(|source| RequestError::Key {
                field: format!("{field}[{i}]"),
                source,
            })?;
            Ok(k)
        })
        .collect()
}

/// Packs lookup answers: values n×16 (zeros where absent) and the `found`
/// bitmap (bit i%8 of byte i/8, least significant first).
pub fn pack_values(answers: &[Option<Uuid>]) -> (Bytes, Bytes) {
    let mut values = BytesMut::zeroed(answers.len() * 16);
    let mut found = vec![0u8; answers.len().div_ceil(8)];
    for (i, v) in answers.iter().enumerate() {
        if let Some(v) = v {
            values[i * 16..(i + 1) * 16].copy_from_slice(v.as_bytes());
            found[i / 8] |= 1 << (i % 8);
        }
    }
    (values.freeze(), Bytes::from(found))
}

/// A UUID as a bytes field.
pub fn bytes_of(v: Uuid) -> Bytes {
    Bytes::copy_from_slice(v.as_bytes())
}

/// The call's deadline (`grpc-timeout`), counted from when the request
/// entered the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallDeadline {
    /// When the request entered.
    pub arrived: Instant,
    /// The caller's timeout.
    pub timeout: Duration,
}

impl CallDeadline {
    /// When a wait must give up so that the caller gets the server's
    /// DEADLINE_EXCEEDED: the deadline less a margin of 10 % (at most
    /// 20 ms).
    ///
    /// Why the margin: the header is enforced twice more, by timers that
    /// started earlier than this one: by the client (tonic's client answers
    /// its caller a bare CANCELLED "Timeout expired"; other stacks
    /// DEADLINE_EXCEEDED without the server's message) and by tonic's server
    /// (CANCELLED). The answer must leave the server and cross the network
    /// before they fire.
    pub fn answer_by(&self) -> Instant {
        let margin = (self.timeout / 10).min(Duration::from_millis(20));
        self.arrived + self.timeout.saturating_sub(margin)
    }
}

/// Server-wide interceptor: stamps [`CallDeadline`] on every request that
/// carries `grpc-timeout`. As a server layer it runs synchronously when the
/// request enters, before the handler is first polled (which may be later,
/// once the body has arrived), so the deadline counts from arrival.
pub fn stamp_deadline(
    mut request: tonic::Request<()>,
) -> Result<tonic::Request<()>, tonic::Status> {
    if let Some(timeout) = grpc_timeout(request.metadata()) {
        let arrived = Instant::now();
        request
            .extensions_mut()
            .insert(CallDeadline { arrived, timeout });
    }
    Ok(request)
}

/// When a wait of this call must give up, and why then: the call's
/// deadline (as stamped by [`stamp_deadline`], else read from the header
/// now) less its margin, capped at `max_wait` from now.
pub fn wait_deadline<T>(request: &tonic::Request<T>, max_wait: Duration) -> (Instant, WaitBound) {
    let now = Instant::now();
    let call = request
        .extensions()
        .get::<CallDeadline>()
        .copied()
        .or_else(|| {
            grpc_timeout(request.metadata()).map(|timeout| CallDeadline {
                arrived: now,
                timeout,
            })
        });
    bound_wait(call, now, max_wait)
}

/// [`wait_deadline`] for a layer below [`stamp_deadline`], which sees the
/// HTTP request: the stamp is there whenever the call has a deadline.
pub(crate) fn http_wait_deadline(
    extensions: &http::Extensions,
    max_wait: Duration,
) -> (Instant, WaitBound) {
    let call = extensions.get::<CallDeadline>().copied();
    bound_wait(call, Instant::now(), max_wait)
}

/// The earlier of the call's deadline (less its margin) and `max_wait`
/// from `now`.
fn bound_wait(
    call: Option<CallDeadline>,
    now: Instant,
    max_wait: Duration,
) -> (Instant, WaitBound) {
    // A configured maximum too large to add to now: a year is as good.
    let cap = now
        .checked_add(max_wait)
        .unwrap_or(now + Duration::from_secs(365 * 86_400));
    match call.map(|c| c.answer_by()) {
        Some(by) if by <= cap => (by, WaitBound::CallDeadline),
        _ => (cap, WaitBound::ServerMaximum),
    }
}

/// The `grpc-timeout` header (gRPC over HTTP/2: at most 8 digits and a
/// unit, H M S m u n). An unreadable header counts as absent, as in tonic.
pub fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let s = metadata.get("grpc-timeout")?.to_str().ok()?;
    if s.len() < 2 || s.len() > 9 {
        return None;
    }
    let (digits, unit) = s.split_at(s.len() - 1);
    let n: u64 = digits.parse().ok()?;
    let t = match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    };
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_bitmap_tells_a_nil_value_from_an_absent_one() {
        let (values, found) = pack_values(&[Some(Uuid::nil()), None, Some(Uuid::from_u128(5))]);
        assert_eq!(values.len(), 48);
        assert_eq!(&found[..], &[0b101]);
        assert_eq!(&values[32..48], Uuid::from_u128(5).as_bytes());
    }

    #[test]
    fn packed_keys_refuse_partial_keys_reserved_keys_and_oversized_batches() {
        assert!(matches!(
            packed_keys("keys", &[1; 33], 10),
            Err(RequestError::PackedLength { len: 33, .. })
        ));
        let mut two = vec![1u8; 32];
        two[16..].fill(0xff);
        let e = packed_keys("keys", &two, 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            "keys[1]: the max UUID (all ones) is reserved and cannot be used as a key"
        );
        assert!(matches!(
            packed_keys("keys", &[1; 48], 2),
            Err(RequestError::TooManyKeys { len: 3, max: 2 })
        ));
    }

    #[tokio::test]
    async fn a_wait_ends_before_the_call_deadline_and_never_after_the_server_maximum() {
        let mut r = tonic::Request::new(());
        r.metadata_mut()
            .insert("grpc-timeout", "100m".parse().unwrap());
        let now = Instant::now();
        let (by, bound) = wait_deadline(&r, Duration::from_secs(60));
        assert_eq!(bound, WaitBound::CallDeadline);
        assert!(by >= now + Duration::from_millis(85) && by <= now + Duration::from_millis(95));
        let (by, bound) = wait_deadline(&r, Duration::from_millis(50));
        assert_eq!(bound, WaitBound::ServerMaximum);
        assert!(by <= Instant::now() + Duration::from_millis(50));
        let (_, bound) = wait_deadline(&tonic::Request::new(()), Duration::from_secs(1));
        assert_eq!(bound, WaitBound::ServerMaximum);
    }

    #[test]
    fn grpc_timeout_units_parse_and_garbage_is_ignored() {
        let mut m = tonic::metadata::MetadataMap::new();
        m.insert("grpc-timeout", "250m".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_millis(250)));
        m.insert("grpc-timeout", "3S".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_secs(3)));
        m.insert("grpc-timeout", "123456789m".parse().unwrap());
        assert_eq!(grpc_timeout(&m), None);
        m.insert("grpc-timeout", "5x".parse().unwrap());
        assert_eq!(grpc_timeout(&m), None);
    }
}
