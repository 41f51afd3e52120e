//! The bytes of a WAL file: the file header and the records (one per write
//! batch). `docs/format.md` ("WAL") describes them field by field; this file
//! is the only code that knows them.
//!
//! All integers are little-endian.
//!
//! Header (24 bytes): magic `UUIDMAPW`, format version `u32`, first LSN
//! `u64`, CRC-32C of the 20 bytes before it `u32`.
//!
//! Record: `u32` length of the rest of the record; `u32` CRC-32C of
//! everything after this field; `u64` LSN; `u32` op count; the ops, each a
//! `u8` tag (1 = put, 2 = delete), the 16-byte key and, for a put, the
//! 16-byte value.

use crate::store::le::{u32_at, u64_at};
use uuid::Uuid;

use crate::store::Op;

/// The file magic.
pub const MAGIC: [u8; 8] = *b"UUIDMAPW";
/// The format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes in a file header.
pub const HEADER_LEN: usize = 24;
/// Bytes of a record before its ops: length, crc, lsn, op count.
pub const RECORD_OVERHEAD: usize = 20;
/// The largest value of a record's length field. A larger one is corruption
/// (it keeps a damaged length from making us read or allocate garbage).
pub const MAX_RECORD_LEN: u32 = 64 << 20;
/// The most ops one record (batch) may hold so that it fits
/// [`MAX_RECORD_LEN`] even if every op is a put. The writer layer refuses
/// larger batches.
pub const MAX_BATCH_OPS: usize = (MAX_RECORD_LEN as usize - (RECORD_OVERHEAD - 4)) / PUT_LEN;

/// The smallest value of a record's length field (crc, lsn, count; no ops).
const MIN_RECORD_LEN: u32 = (RECORD_OVERHEAD - 4) as u32;
const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
const PUT_LEN: usize = 33;
const DELETE_LEN: usize = 17;

/// The header of a WAL file whose first record has LSN `first_lsn`.
pub fn encode_header(first_lsn: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&first_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&h[..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a file's header against the first LSN its name gives. `file` is
/// the whole file.
pub fn check_header(file: &[u8], first_lsn: u64) -> Result<(), BadRecord> {
    let bad = |reason: String| BadRecord {
        reason,
        extent: HEADER_LEN as u64,
    };
    if file.len() < HEADER_LEN {
        return Err(bad(format!(
            "the file is {} bytes long, shorter than the {HEADER_LEN}-byte header",
            file.len()
        )));
    }
    let h = &file[..HEADER_LEN];
    if h[0..8] != MAGIC {
        return Err(bad("the header does not start with UUIDMAPW".into()));
    }
    if crc32c::crc32c(&h[..20]) != u32_at(h, 20) {
        return Err(bad("the header's checksum does not match".into()));
    }
    let version = u32_at(h, 8);
    if version != FORMAT_VERSION {
        return Err(bad(format!(
            "format version {version}, but this build reads version {FORMAT_VERSION}"
        )));
    }
    let lsn = u64_at(h, 12);
    if lsn != first_lsn {
        return Err(bad(format!(
            "the header says the file starts at LSN {lsn}, but its name says {first_lsn}"
        )));
    }
    Ok(())
}

/// Appends the record of batch `lsn` to `buf`.
///
/// # Panics
/// If `ops` has more than [`MAX_BATCH_OPS`] ops (the record would be
/// unreadable).
pub fn encode_record(buf: &mut Vec<u8>, lsn: u64, ops: &[Op]) {
    assert!(
        ops.len() <= MAX_BATCH_OPS,
        "a batch of {} ops exceeds the WAL's limit of {MAX_BATCH_OPS}",
        ops.len()
    );
    let start = buf.len();
    buf.extend_from_slice(&[0; 8]); // length and crc, filled in below
    buf.extend_from_slice(&lsn.to_le_bytes());
    buf.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for op in ops {
        match op {
            Op::Put { key, value } => {
                buf.push(TAG_PUT);
                buf.extend_from_slice(key.as_bytes());
                buf.extend_from_slice(value.as_bytes());
            }
            Op::Delete { key } => {
                buf.push(TAG_DELETE);
                buf.extend_from_slice(key.as_bytes());
            }
        }
    }
    let len = (buf.len() - start - 4) as u32;
    let crc = crc32c::crc32c(&buf[start + 8..]);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// A record that decoded cleanly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedRecord {
    /// Its LSN.
    pub lsn: u64,
    /// Its length in bytes, length field included.
    pub len: u64,
}

/// A record (or header) that fails its checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRecord {
    /// What is wrong, in words.
    pub reason: String,
    /// Where it claims to end, relative to its start (past the end of the
    /// input if its length field is cut off). Decides whether it is a torn
    /// tail (see `reader`).
    pub extent: u64,
}

/// Decodes the record at the start of `buf` (which runs to the end of the
/// file) into `ops` (cleared first; its capacity is reused).
pub fn decode_record(buf: &[u8], ops: &mut Vec<Op>) -> Result<DecodedRecord, BadRecord> {
    ops.clear();
    if buf.len() < 4 {
        return Err(BadRecord {
            reason: format!("only {} bytes are left, too few for a record", buf.len()),
            extent: RECORD_OVERHEAD as u64,
        });
    }
    let len = u32_at(buf, 0);
    let extent = 4 + u64::from(len);
    let bad = |reason: String| BadRecord { reason, extent };
    if !(MIN_RECORD_LEN..=MAX_RECORD_LEN).contains(&len) {
        return Err(bad(format!(
            "the record length {len} is outside {MIN_RECORD_LEN}..={MAX_RECORD_LEN}"
        )));
    }
    if extent > buf.len() as u64 {
        return Err(bad(format!(
            "the record claims {extent} bytes but only {} are left in the file",
            buf.len()
        )));
    }
    let rec = &buf[..extent as usize];
    let crc = u32_at(rec, 4);
    if crc32c::crc32c(&rec[8..]) != crc {
        return Err(bad("the record's checksum does not match".into()));
    }
    let lsn = u64_at(rec, 8);
    let count = u32_at(rec, 16) as usize;
    let mut body = &rec[RECORD_OVERHEAD..];
    if count > body.len() / DELETE_LEN {
        return Err(bad(format!(
            "the record claims {count} ops but has room for at most {}",
            body.len() / DELETE_LEN
        )));
    }
    ops.reserve(count);
    for i in 0..count {
        let op = match body.first() {
            Some(&TAG_PUT) if body.len() >= PUT_LEN => {
                let op = Op::Put {
                    key: uuid_at(body, 1),
                    value: uuid_at(body, 17),
                };
                body = &body[PUT_LEN..];
                op
            }
            Some(&TAG_DELETE) if body.len() >= DELETE_LEN => {
                let op = Op::Delete {
                    key: uuid_at(body, 1),
                };
                body = &body[DELETE_LEN..];
                op
            }
            Some(&(tag @ TAG_PUT | tag @ TAG_DELETE)) => {
                return Err(bad(format!(
                    "op {i} (tag {tag}) runs past the record's end"
                )));
            }
            Some(tag) => return Err(bad(format!("op {i} has the unknown tag {tag}"))),
            None => return Err(bad(format!("op {i} runs past the record's end"))),
        };
        let key = op.key();
        if key.is_nil() || key.is_max() {
            return Err(bad(format!("op {i} has the reserved key {key}")));
        }
        ops.push(op);
    }
    if !body.is_empty() {
        return Err(bad(format!(
            "{} bytes are left after the record's {count} ops",
            body.len()
        )));
    }
    Ok(DecodedRecord { lsn, len: extent })
}

fn uuid_at(b: &[u8], at: usize) -> Uuid {
    Uuid::from_bytes(b[at..at + 16].try_into().expect("16 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: u128, v: u128) -> Op {
        Op::Put {
            key: Uuid::from_u128(k),
            value: Uuid::from_u128(v),
        }
    }

    fn del(k: u128) -> Op {
        Op::Delete {
            key: Uuid::from_u128(k),
        }
    }

    #[test]
    fn a_record_decodes_to_what_was_encoded() {
        let ops = vec![put(1, 2), del(3), put(4, 5)];
        let mut buf = Vec::new();
        encode_record(&mut buf, 42, &ops);
        assert_eq!(buf.len(), RECORD_OVERHEAD + 2 * PUT_LEN + DELETE_LEN);
        let mut out = Vec::new();
        let rec = decode_record(&buf, &mut out).unwrap();
        assert_eq!(
            rec,
            DecodedRecord {
                lsn: 42,
                len: buf.len() as u64
            }
        );
        assert_eq!(out, ops);
    }

    #[test]
    fn an_empty_batch_is_a_valid_record() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 7, &[]);
        let mut out = vec![del(9)];
        assert_eq!(decode_record(&buf, &mut out).unwrap().lsn, 7);
        assert!(out.is_empty());
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 3, &[put(1, 2), del(3)]);
        let mut out = Vec::new();
        for byte in 0..buf.len() {
            for bit in 0..8 {
                let mut damaged = buf.clone();
                damaged[byte] ^= 1 << bit;
                assert!(
                    decode_record(&damaged, &mut out).is_err(),
                    "flip of bit {bit} in byte {byte} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn a_cut_record_claims_more_bytes_than_are_left() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 3, &[put(1, 2)]);
        let mut out = Vec::new();
        for cut in 0..buf.len() {
            let bad = decode_record(&buf[..cut], &mut out).unwrap_err();
            assert!(bad.extent > cut as u64, "cut at {cut}: {bad:?}");
        }
    }

    #[test]
    fn an_unknown_tag_and_a_reserved_key_are_refused_even_with_a_good_checksum() {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        encode_record(&mut buf, 1, &[del(5)]);
        buf[RECORD_OVERHEAD] = 9;
        let crc = crc32c::crc32c(&buf[8..]);
        buf[4..8].copy_from_slice(&crc.to_le_bytes());
        let bad = decode_record(&buf, &mut out).unwrap_err();
        assert!(bad.reason.contains("unknown tag 9"), "{}", bad.reason);

        let mut buf = Vec::new();
        encode_record(&mut buf, 1, &[del(0)]);
        let bad = decode_record(&buf, &mut out).unwrap_err();
        assert!(bad.reason.contains("reserved key"), "{}", bad.reason);
    }

    #[test]
    fn a_header_is_checked_against_the_file_name() {
        let h = encode_header(17);
        assert!(check_header(&h, 17).is_ok());
        assert!(
            check_header(&h, 18)
                .unwrap_err()
                .reason
                .contains("its name says 18")
        );
        assert!(check_header(&h[..10], 17).is_err());
        let mut damaged = h;
        damaged[13] ^= 1;
        assert!(check_header(&damaged, 17).is_err());
    }
}
