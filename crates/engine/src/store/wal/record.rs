//! The bytes of a WAL file: the file header with its synced-end marker, and
//! the records (one per write batch). `docs/format.md` ("WAL") describes
//! them field by field; this file is the only code that knows them.
//!
//! All integers are little-endian.
//!
//! Header (64 bytes): magic `UUIDMAPW`, format version `u32` (2), first LSN
//! `u64`, CRC-32C of the 20 bytes before it `u32`; then two 20-byte
//! *synced-end* slots, each `u64` LSN, `u64` byte offset, `u32` CRC-32C of
//! those 16 bytes. The slot with the higher LSN that checks out says that
//! every record up to that LSN, ending at that offset, was fsynced: recovery
//! refuses a file that lost any of it (see `reader`).
//!
//! Record (24 bytes, then the ops): `u32` byte length of the ops; `u64` LSN;
//! `u32` op count; `u32` CRC-32C of those 16 bytes (the *header CRC*, so a
//! damaged length is recognised as damage, never trusted); `u32` CRC-32C of
//! the ops. The ops are spelled as `op_bytes` spells them.

use crate::store::Op;
use crate::store::le::{u32_at, u64_at};
use crate::store::op_bytes::{PUT_LEN, decode_ops, encode_ops};

/// The file magic.
pub(super) const MAGIC: [u8; 8] = *b"UUIDMAPW";
/// The format version this code writes and reads.
pub(super) const FORMAT_VERSION: u32 = 2;
/// Bytes in a file header, synced-end slots included: the first record
/// starts here.
pub const HEADER_LEN: usize = 64;
/// Bytes of the fixed part of the header (magic, version, first LSN, CRC).
const FIXED_HEADER_LEN: usize = 24;
/// Offset of synced-end slot 0; slot 1 follows it.
const SLOT_OFFSET: usize = FIXED_HEADER_LEN;
/// Bytes of one synced-end slot.
pub(super) const SLOT_LEN: usize = 20;
/// Bytes of a record before its ops: length, LSN, count, header CRC, ops CRC.
pub(super) const RECORD_OVERHEAD: usize = 24;
/// The largest byte length of a record's ops. A larger one is corruption
/// (it keeps a damaged length from making us read or allocate garbage).
pub const MAX_OPS_LEN: u32 = 64 << 20;
/// The most ops one record (batch) may hold so that it fits
/// [`MAX_OPS_LEN`] even if every op is a put. The writer layer refuses
/// larger batches.
pub const MAX_BATCH_OPS: usize = MAX_OPS_LEN as usize / PUT_LEN;

/// The header of a WAL file whose first record has LSN `first_lsn`, both
/// slots vouching for the empty file (no record, the end at the header): a
/// file has two valid slots from its creation on, and a slot is rewritten
/// only whole (20 bytes inside the first sector: a sector write is atomic),
/// so a slot that does not check out is damage.
pub(super) fn encode_header(first_lsn: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&first_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&h[..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    for slot in 0..2 {
        let (at, bytes) = encode_synced_end(slot, empty_synced_end(first_lsn));
        h[at as usize..at as usize + SLOT_LEN].copy_from_slice(&bytes);
    }
    h
}

/// What a new file vouches for: nothing past its header.
pub(super) fn empty_synced_end(first_lsn: u64) -> SyncedEnd {
    SyncedEnd {
        lsn: first_lsn.saturating_sub(1),
        offset: HEADER_LEN as u64,
    }
}

/// Where the synced end of a file is: every record up to `lsn` is whole in
/// the file and ends at byte `offset`, and was fsynced before this was
/// written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SyncedEnd {
    /// The last record vouched for.
    pub lsn: u64,
    /// The byte offset where it ends.
    pub offset: u64,
}

/// The bytes of synced-end slot `slot` (0 or 1) holding `end`, and the
/// offset in the file at which they go.
pub(super) fn encode_synced_end(slot: usize, end: SyncedEnd) -> (u64, [u8; SLOT_LEN]) {
    let mut b = [0u8; SLOT_LEN];
    b[0..8].copy_from_slice(&end.lsn.to_le_bytes());
    b[8..16].copy_from_slice(&end.offset.to_le_bytes());
    let crc = crc32c::crc32c(&b[..16]);
    b[16..20].copy_from_slice(&crc.to_le_bytes());
    ((SLOT_OFFSET + (slot & 1) * SLOT_LEN) as u64, b)
}

/// The synced end a file's header vouches for: the slot with the higher
/// LSN. Both slots must check out (see [`encode_header`]); otherwise the
/// error says which is damaged: with it, nothing would tell lost synced
/// records from a torn tail. `file` is the whole file (or its header).
pub(super) fn read_synced_end(file: &[u8]) -> Result<SyncedEnd, String> {
    if file.len() < HEADER_LEN {
        return Err(format!(
            "the file is shorter than its {HEADER_LEN}-byte header"
        ));
    }
    let mut best: Option<SyncedEnd> = None;
    for slot in 0..2 {
        let at = SLOT_OFFSET + slot * SLOT_LEN;
        let b = &file[at..at + SLOT_LEN];
        if crc32c::crc32c(&b[..16]) != u32_at(b, 16) {
            return Err(format!(
                "synced-end slot {slot} of the header (bytes {at}..{}) is damaged, so the \
                 file cannot show which of its records were synced",
                at + SLOT_LEN
            ));
        }
        let end = SyncedEnd {
            lsn: u64_at(b, 0),
            offset: u64_at(b, 8),
        };
        if best.is_none_or(|b| end.lsn > b.lsn) {
            best = Some(end);
        }
    }
    Ok(best.expect("two slots"))
}

/// Checks a file's header (its fixed part; the synced-end slots are read by
/// [`read_synced_end`]) against the first LSN its name gives. `file` is the
/// whole file.
pub(super) fn check_header(file: &[u8], first_lsn: u64) -> Result<(), BadRecord> {
    let bad = |reason: String| BadRecord {
        reason,
        written_so: false,
    };
    if file.len() < HEADER_LEN {
        return Err(bad(format!(
            "the file is {} bytes long, shorter than its {HEADER_LEN}-byte header",
            file.len()
        )));
    }
    let h = &file[..FIXED_HEADER_LEN];
    if h[0..8] != MAGIC {
        return Err(bad("the header does not start with UUIDMAPW".into()));
    }
    if crc32c::crc32c(&h[..20]) != u32_at(h, 20) {
        return Err(bad("the header's checksum does not match".into()));
    }
    let version = u32_at(h, 8);
    if version != FORMAT_VERSION {
        return Err(BadRecord {
            reason: format!(
                "format version {version}, but this build reads version {FORMAT_VERSION} \
                 (a WAL written by another uuidmap release)"
            ),
            written_so: true,
        });
    }
    let lsn = u64_at(h, 12);
    if lsn != first_lsn {
        return Err(BadRecord {
            reason: format!(
                "the header says the file starts at LSN {lsn}, but its name says {first_lsn}"
            ),
            written_so: true,
        });
    }
    Ok(())
}

/// Appends the record of batch `lsn` to `buf`.
///
/// # Panics
/// If `ops` has more than [`MAX_BATCH_OPS`] ops (the record would be
/// unreadable).
pub(super) fn encode_record(buf: &mut Vec<u8>, lsn: u64, ops: &[Op]) {
    assert!(
        ops.len() <= MAX_BATCH_OPS,
        "a batch of {} ops exceeds the WAL's limit of {MAX_BATCH_OPS}",
        ops.len()
    );
    let start = buf.len();
    buf.extend_from_slice(&[0; RECORD_OVERHEAD]); // filled in below
    encode_ops(buf, ops);
    let ops_len = (buf.len() - start - RECORD_OVERHEAD) as u32;
    let ops_crc = crc32c::crc32c(&buf[start + RECORD_OVERHEAD..]);
    let head = &mut buf[start..start + RECORD_OVERHEAD];
    head[0..4].copy_from_slice(&ops_len.to_le_bytes());
    head[4..12].copy_from_slice(&lsn.to_le_bytes());
    head[12..16].copy_from_slice(&(ops.len() as u32).to_le_bytes());
    let head_crc = crc32c::crc32c(&head[..16]);
    head[16..20].copy_from_slice(&head_crc.to_le_bytes());
    head[20..24].copy_from_slice(&ops_crc.to_le_bytes());
}

/// A record that decoded cleanly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DecodedRecord {
    /// Its LSN.
    pub lsn: u64,
    /// Its length in bytes, header included.
    pub len: u64,
}

/// A record (or file header) that fails its checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct BadRecord {
    /// What is wrong, in words.
    pub reason: String,
    /// Its checksums match, so it was written exactly so: no torn write
    /// makes such a record (an unknown tag, a reserved key, another
    /// version). Always damage (or a foreign file), wherever it is.
    pub written_so: bool,
}
/// The length a record at the start of `buf` claims, if its header is
/// whole and its header checksum matches (a reader that read too little of
/// a file learns how much more it needs).
pub(super) fn claimed_len(buf: &[u8]) -> Option<usize> {
    if buf.len() < RECORD_OVERHEAD || crc32c::crc32c(&buf[..16]) != u32_at(buf, 16) {
        return None;
    }
    Some(RECORD_OVERHEAD + u32_at(buf, 0) as usize)
}

/// Decodes the record at the start of `buf` (which runs to the end of the
/// file) into `ops` (cleared first; its capacity is reused).
pub(super) fn decode_record(buf: &[u8], ops: &mut Vec<Op>) -> Result<DecodedRecord, BadRecord> {
    ops.clear();
    let bad = |reason: String| BadRecord {
        reason,
        written_so: false,
    };
    if buf.len() < RECORD_OVERHEAD {
        return Err(bad(format!(
            "only {} bytes are left, too few for a record header",
            buf.len()
        )));
    }
    if crc32c::crc32c(&buf[..16]) != u32_at(buf, 16) {
        return Err(bad("the record header's checksum does not match".into()));
    }
    let ops_len = u32_at(buf, 0);
    let lsn = u64_at(buf, 4);
    let count = u32_at(buf, 12) as usize;
    if ops_len > MAX_OPS_LEN {
        return Err(BadRecord {
            reason: format!("the record length {ops_len} is over the limit of {MAX_OPS_LEN}"),
            written_so: true,
        });
    }
    let extent = RECORD_OVERHEAD as u64 + u64::from(ops_len);
    if extent > buf.len() as u64 {
        return Err(bad(format!(
            "the record (LSN {lsn}) claims {extent} bytes but only {} are left in the file",
            buf.len()
        )));
    }
    let rec = &buf[..extent as usize];
    if crc32c::crc32c(&rec[RECORD_OVERHEAD..]) != u32_at(rec, 20) {
        return Err(bad(format!(
            "the checksum of record LSN {lsn}'s ops does not match"
        )));
    }
    let certain = |reason: String| BadRecord {
        reason,
        written_so: true,
    };
    decode_ops(&rec[RECORD_OVERHEAD..], count, ops)
        .map_err(|why| certain(format!("record LSN {lsn}: {why}")))?;
    Ok(DecodedRecord { lsn, len: extent })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::op_bytes::DELETE_LEN;
    use uuid::Uuid;
    use uuidmap_index::Key;

    fn put(k: u128, v: u128) -> Op {
        Op::Put {
            key: Key::new(Uuid::from_u128(k)).unwrap(),
            value: Uuid::from_u128(v),
        }
    }

    fn del(k: u128) -> Op {
        Op::Delete {
            key: Key::new(Uuid::from_u128(k)).unwrap(),
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
    fn a_cut_record_is_not_mistaken_for_damage_written_so() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 3, &[put(1, 2)]);
        let mut out = Vec::new();
        for cut in 0..buf.len() {
            let bad = decode_record(&buf[..cut], &mut out).unwrap_err();
            assert!(!bad.written_so, "cut at {cut}: {bad:?}");
        }
    }

    #[test]
    fn a_flipped_length_bit_fails_the_header_checksum() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 3, &[put(1, 2)]);
        let mut out = Vec::new();
        for bit in 0..32 {
            let mut damaged = buf.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            let bad = decode_record(&damaged, &mut out).unwrap_err();
            assert!(bad.reason.contains("header's checksum"), "{bad:?}");
        }
    }

    #[test]
    fn the_synced_end_is_the_newer_slot_that_checks_out() {
        let mut file = encode_header(5).to_vec();
        assert_eq!(read_synced_end(&file), Ok(empty_synced_end(5)));
        let ends = [
            SyncedEnd {
                lsn: 7,
                offset: 200,
            },
            SyncedEnd {
                lsn: 9,
                offset: 300,
            },
            SyncedEnd {
                lsn: 12,
                offset: 420,
            },
        ];
        for (i, end) in ends.iter().enumerate() {
            let (at, bytes) = encode_synced_end(i, *end);
            file[at as usize..at as usize + SLOT_LEN].copy_from_slice(&bytes);
            assert_eq!(read_synced_end(&file), Ok(*end));
        }
        // Damage to either slot is refused: the newer one may have vouched
        // for records the older one does not.
        for slot in 0..2 {
            let mut damaged = file.clone();
            let (at, _) = encode_synced_end(slot, ends[0]);
            damaged[at as usize + 3] ^= 0x10;
            let err = read_synced_end(&damaged).unwrap_err();
            assert!(err.contains(&format!("slot {slot}")), "{err}");
        }
        assert!(
            check_header(&file, 5).is_ok(),
            "the slots are not the fixed header"
        );
    }

    #[test]
    fn an_unknown_tag_and_a_reserved_key_are_refused_even_with_a_good_checksum() {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        encode_record(&mut buf, 1, &[del(5)]);
        buf[RECORD_OVERHEAD] = 9;
        let crc = crc32c::crc32c(&buf[RECORD_OVERHEAD..]);
        buf[20..24].copy_from_slice(&crc.to_le_bytes());
        let bad = decode_record(&buf, &mut out).unwrap_err();
        assert!(bad.reason.contains("unknown tag 9"), "{}", bad.reason);
        assert!(bad.written_so);

        // A `Key` cannot be nil, so write one in place and checksum it as
        // a writer with a bug would.
        let mut buf = Vec::new();
        encode_record(&mut buf, 1, &[del(5)]);
        buf[RECORD_OVERHEAD + 1..RECORD_OVERHEAD + 17].fill(0);
        let crc = crc32c::crc32c(&buf[RECORD_OVERHEAD..]);
        buf[20..24].copy_from_slice(&crc.to_le_bytes());
        let bad = decode_record(&buf, &mut out).unwrap_err();
        assert!(bad.reason.contains("reserved key"), "{}", bad.reason);
        assert!(bad.written_so);
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
