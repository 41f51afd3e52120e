//! Wire format helpers: UUIDs as 16 raw bytes, packed key arrays, the
//! `found` bitmap.

use prost::bytes::{Bytes, BytesMut};
use uuid::Uuid;

use super::errors::RequestError;
use uuidmap_index::Key;

/// A UUID field: exactly 16 bytes.
pub fn uuid(field: &str, bytes: &[u8]) -> Result<Uuid, RequestError> {
    <[u8; 16]>::try_from(bytes)
        .map(Uuid::from_bytes)
        .map_err(|_| RequestError::UuidLength {
            field: field.to_string(),
            len: bytes.len(),
        })
}

/// A key field: 16 bytes, not a reserved UUID. The one check of a key
/// that comes over the wire: the layers below take the [`Key`].
pub fn key(field: &str, bytes: &[u8]) -> Result<Key, RequestError> {
    Key::new(uuid(field, bytes)?).map_err(|source| RequestError::Key {
        field: field.to_string(),
        source,
    })
}

/// An optional UUID field (absent = no entry).
pub fn optional_uuid(field: &str, bytes: Option<&Bytes>) -> Result<Option<Uuid>, RequestError> {
    bytes.map(|b| uuid(field, b)).transpose()
}

/// A packed array of keys (n×16 bytes), 0 to `max` keys, none reserved
/// (an empty batch has an empty answer, as batch APIs do).
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
    if n > max {
        return Err(RequestError::TooManyKeys { len: n, max });
    }
    bytes
        .chunks_exact(16)
        .enumerate()
        .map(|(i, chunk)| {
            let k = Uuid::from_bytes(chunk.try_into().expect("chunks_exact(16)"));
            Key::new(k).map_err(|source| RequestError::Key {
                field: format!("{field}[{i}]"),
                source,
            })?;
            // Lookups take UUIDs: a reserved one is refused here, with the
            // field named, rather than answered "absent".
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
}
