//! The bytes of a sequence of ops: how a WAL record's body spells its
//! batch, and how a replica group ships a batch to its followers (the Raft
//! entries carry these bytes, so a follower writes them to its own WAL
//! without decoding and encoding them again).
//!
//! Each op is a `u8` tag (1 = put, 2 = delete), the 16-byte key and, for a
//! put, the 16-byte value. `docs/format.md` ("WAL") shows the layout.

use uuid::Uuid;
use uuidmap_index::Key;

use crate::store::Op;

const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
/// Bytes of an encoded put.
pub const PUT_LEN: usize = 33;
/// Bytes of an encoded delete.
pub const DELETE_LEN: usize = 17;

/// Appends the bytes of `ops` to `buf`.
pub fn encode_ops(buf: &mut Vec<u8>, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Put { key, value } => {
                buf.push(TAG_PUT);
                buf.extend_from_slice(key.as_uuid().as_bytes());
                buf.extend_from_slice(value.as_bytes());
            }
            Op::Delete { key } => {
                buf.push(TAG_DELETE);
                buf.extend_from_slice(key.as_uuid().as_bytes());
            }
        }
    }
}

/// Decodes `body`, which must hold exactly `count` ops, onto the end of
/// `out`. The error says, in words, what is wrong: an unknown tag, a
/// reserved key, an op cut short, a count that does not fit the bytes, or
/// bytes left over.
pub fn decode_ops(mut body: &[u8], count: usize, out: &mut Vec<Op>) -> Result<(), String> {
    if count > body.len() / DELETE_LEN {
        return Err(format!(
            "{count} ops are claimed but there is room for at most {}",
            body.len() / DELETE_LEN
        ));
    }
    out.reserve(count);
    for i in 0..count {
        let (op, len) = op_at(body, i)?;
        out.push(op);
        body = &body[len..];
    }
    if !body.is_empty() {
        return Err(format!(
            "{} bytes are left after the {count} ops",
            body.len()
        ));
    }
    Ok(())
}

/// Counts the ops in `body`, checking each as [`decode_ops`] does, or says
/// why it is not a sequence of ops. (The wire does not send the count: it
/// follows from the bytes.)
pub fn count_ops(mut body: &[u8]) -> Result<usize, String> {
    let mut count = 0;
    while !body.is_empty() {
        let (_, len) = op_at(body, count)?;
        body = &body[len..];
        count += 1;
    }
    Ok(count)
}

/// The op that starts `body` (op number `i`, for the error) and its length
/// in bytes.
#[inline]
fn op_at(body: &[u8], i: usize) -> Result<(Op, usize), String> {
    match body.first() {
        Some(&TAG_PUT) if body.len() >= PUT_LEN => {
            let key = key_at(body).map_err(|why| format!("op {i} {why}"))?;
            let value = uuid_at(body, 17);
            Ok((Op::Put { key, value }, PUT_LEN))
        }
        Some(&TAG_DELETE) if body.len() >= DELETE_LEN => {
            let key = key_at(body).map_err(|why| format!("op {i} {why}"))?;
            Ok((Op::Delete { key }, DELETE_LEN))
        }
        Some(&(tag @ TAG_PUT | tag @ TAG_DELETE)) => {
            Err(format!("op {i} (tag {tag}) runs past the end"))
        }
        Some(tag) => Err(format!("op {i} has the unknown tag {tag}")),
        None => Err(format!("op {i} runs past the end")),
    }
}

/// The key of the op that starts `body`. A reserved key in bytes whose
/// checksum holds was never accepted, so the caller calls them corrupt.
fn key_at(body: &[u8]) -> Result<Key, String> {
    let key = uuid_at(body, 1);
    Key::new(key).map_err(|e| format!("has the reserved key {key} ({e})"))
}

fn uuid_at(b: &[u8], at: usize) -> Uuid {
    Uuid::from_bytes(b[at..at + 16].try_into().expect("16 bytes"))
}

/// Ops for the tests of this crate.
#[cfg(test)]
pub(crate) mod test_ops {
    use super::*;

    /// `Put` of key `k` (not 0) to value `v`.
    pub(crate) fn put(k: u128, v: u128) -> Op {
        Op::Put {
            key: Key::new(Uuid::from_u128(k)).unwrap(),
            value: Uuid::from_u128(v),
        }
    }

    /// `Delete` of key `k` (not 0).
    pub(crate) fn del(k: u128) -> Op {
        Op::Delete {
            key: Key::new(Uuid::from_u128(k)).unwrap(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_ops::{del, put};
    use super::*;

    #[test]
    fn ops_decode_to_what_was_encoded_and_count_alike() {
        let ops = vec![put(1, 2), del(3), put(4, 5)];
        let mut buf = Vec::new();
        encode_ops(&mut buf, &ops);
        assert_eq!(buf.len(), 2 * PUT_LEN + DELETE_LEN);
        assert_eq!(count_ops(&buf), Ok(3));
        let mut out = vec![del(9)];
        decode_ops(&buf, 3, &mut out).unwrap();
        assert_eq!(out[1..], ops[..], "decoding appends");
    }

    #[test]
    fn malformed_bytes_are_refused_in_words() {
        let mut buf = Vec::new();
        encode_ops(&mut buf, &[put(1, 2), del(3)]);
        let mut out = Vec::new();
        // Cut anywhere inside an op.
        for cut in [1, PUT_LEN - 1, PUT_LEN + 1, buf.len() - 1] {
            assert!(
                count_ops(&buf[..cut])
                    .unwrap_err()
                    .contains("runs past the end")
            );
            assert!(decode_ops(&buf[..cut], 2, &mut out).is_err(), "cut {cut}");
        }
        // An unknown tag.
        let mut bad = buf.clone();
        bad[PUT_LEN] = 7;
        assert!(count_ops(&bad).unwrap_err().contains("unknown tag 7"));
        // A reserved key (nil).
        let mut nil = buf.clone();
        nil[1..17].fill(0);
        assert!(count_ops(&nil).unwrap_err().contains("reserved key"));
        // A count that does not match the bytes.
        assert!(
            decode_ops(&buf, 1, &mut out)
                .unwrap_err()
                .contains("left after")
        );
        assert!(decode_ops(&buf, 3, &mut out).is_err());
    }
}
