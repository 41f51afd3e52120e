//! The bytes of a WAL file: the file header with its synced-end marker, and
//! the records (one per write batch). `docs/format.md` ("WAL") describes
//! them field by field; this file is the only code that knows them.
//!
//! All integers are little-endian.
//!
//! Header (64 bytes): magic `UUIDMAPW`, format version `u32` (2 or 3), first LSN
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
//!
//! Version 3 ([`WalFormat::Raft`], a replica group's Raft log) has 44-byte
//! record headers: `u32` body length; `u64` LSN (the Raft log index); `u32`
//! op count; `u64` term; `u64` seq (the leader's proposal number); `u8`
//! kind (0 normal, 1 blank, 2 membership); 3 zero bytes; `u32` CRC-32C of
//! those 36 bytes; `u32` CRC-32C of the body. A normal record's body is its
//! ops; a blank one has none; a membership record's body is opaque here
//! (the cluster crate's protobuf). A file holds records of its header's
//! version only.

use crate::store::Op;
use crate::store::le::{u32_at, u64_at};
use crate::store::op_bytes::{PUT_LEN, decode_ops, encode_ops};

/// The file magic.
pub(super) const MAGIC: [u8; 8] = *b"UUIDMAPW";
/// Which record layout a WAL file holds, as its header's version says. A
/// data directory's files are all of one format: a single node writes
/// version 2 and a member of a replica group version 3; readers take both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WalFormat {
    /// Version 2: a single node's log; a record is an LSN and its ops.
    #[default]
    Single,
    /// Version 3: a replica group's Raft log; a record also carries its
    /// term, its kind and the leader's proposal number.
    Raft,
}

impl WalFormat {
    /// The version number in the file header.
    pub(super) fn version(self) -> u32 {
        match self {
            WalFormat::Single => 2,
            WalFormat::Raft => 3,
        }
    }

    fn from_version(version: u32) -> Option<WalFormat> {
        match version {
            2 => Some(WalFormat::Single),
            3 => Some(WalFormat::Raft),
            _ => None,
        }
    }

    /// Bytes of a record before its body.
    pub(super) fn record_overhead(self) -> usize {
        match self {
            WalFormat::Single => RECORD_OVERHEAD,
            WalFormat::Raft => RAFT_RECORD_OVERHEAD,
        }
    }

    /// Bytes of a record header covered by its header CRC (the CRC follows
    /// them).
    fn head_crc_len(self) -> usize {
        match self {
            WalFormat::Single => 16,
            WalFormat::Raft => 36,
        }
    }
}

/// What a record of a Raft log is (version 3; every version 2 record is
/// [`EntryKind::Normal`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EntryKind {
    /// A client batch: its body is ops.
    #[default]
    Normal,
    /// The entry a new leader writes first: no body.
    Blank,
    /// A membership change: an opaque body.
    Membership,
}

impl EntryKind {
    fn tag(self) -> u8 {
        match self {
            EntryKind::Normal => 0,
            EntryKind::Blank => 1,
            EntryKind::Membership => 2,
        }
    }

    fn from_tag(tag: u8) -> Option<EntryKind> {
        match tag {
            0 => Some(EntryKind::Normal),
            1 => Some(EntryKind::Blank),
            2 => Some(EntryKind::Membership),
            _ => None,
        }
    }
}

/// What a version 3 record carries besides its LSN and body (all zero and
/// [`EntryKind::Normal`] for a version 2 record).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryHead {
    /// The term of the leader that wrote the entry.
    pub term: u64,
    /// What the record is.
    pub kind: EntryKind,
    /// The leader's proposal number (normal records; 0 otherwise).
    pub seq: u64,
}
/// Bytes in a file header, synced-end slots included: the first record
/// starts here.
pub const HEADER_LEN: usize = 64;
/// Bytes of the fixed part of the header (magic, version, first LSN, CRC).
const FIXED_HEADER_LEN: usize = 24;
/// Offset of synced-end slot 0; slot 1 follows it.
const SLOT_OFFSET: usize = FIXED_HEADER_LEN;
/// Bytes of one synced-end slot.
pub(super) const SLOT_LEN: usize = 20;
/// Bytes of a version 2 record before its ops: length, LSN, count, header
/// CRC, ops CRC.
pub(super) const RECORD_OVERHEAD: usize = 24;
/// Bytes of a version 3 record before its body (module docs).
pub(super) const RAFT_RECORD_OVERHEAD: usize = 44;
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
pub(super) fn encode_header(first_lsn: u64, format: WalFormat) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&format.version().to_le_bytes());
    h[12..20].copy_from_slice(&first_lsn.to_le_bytes());
    let crc = crate::store::crc32c(&h[..20]);
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
    let crc = crate::store::crc32c(&b[..16]);
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
        if crate::store::crc32c(&b[..16]) != u32_at(b, 16) {
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
/// whole file. Returns the format of its records.
pub(super) fn check_header(file: &[u8], first_lsn: u64) -> Result<WalFormat, BadRecord> {
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
    if crate::store::crc32c(&h[..20]) != u32_at(h, 20) {
        return Err(bad("the header's checksum does not match".into()));
    }
    let version = u32_at(h, 8);
    let Some(format) = WalFormat::from_version(version) else {
        return Err(BadRecord {
            reason: format!(
                "format version {version}, but this build reads versions 2 and 3 \
                 (a WAL written by another uuidmap release)"
            ),
            written_so: true,
        });
    };
    let lsn = u64_at(h, 12);
    if lsn != first_lsn {
        return Err(BadRecord {
            reason: format!(
                "the header says the file starts at LSN {lsn}, but its name says {first_lsn}"
            ),
            written_so: true,
        });
    }
    Ok(format)
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
    let ops_crc = crate::store::crc32c(&buf[start + RECORD_OVERHEAD..]);
    let head = &mut buf[start..start + RECORD_OVERHEAD];
    head[0..4].copy_from_slice(&ops_len.to_le_bytes());
    head[4..12].copy_from_slice(&lsn.to_le_bytes());
    head[12..16].copy_from_slice(&(ops.len() as u32).to_le_bytes());
    let head_crc = crate::store::crc32c(&head[..16]);
    head[16..20].copy_from_slice(&head_crc.to_le_bytes());
    head[20..24].copy_from_slice(&ops_crc.to_le_bytes());
}

/// Appends the version 3 record of entry `lsn` to `buf`: `body` is the
/// ops (`count` of them, spelled as `op_bytes` spells them) of a normal
/// entry, nothing for a blank one, the opaque membership bytes otherwise.
///
/// # Panics
/// If the body is over [`MAX_OPS_LEN`] bytes, or a blank or membership
/// entry claims ops (the record would be unreadable).
pub(super) fn encode_entry(buf: &mut Vec<u8>, lsn: u64, head: EntryHead, count: u32, body: &[u8]) {
    assert!(
        body.len() <= MAX_OPS_LEN as usize,
        "an entry of {} bytes exceeds the WAL's limit of {MAX_OPS_LEN}",
        body.len()
    );
    assert!(
        head.kind == EntryKind::Normal || count == 0,
        "a {:?} entry has no ops",
        head.kind
    );
    let mut h = [0u8; RAFT_RECORD_OVERHEAD];
    h[0..4].copy_from_slice(&(body.len() as u32).to_le_bytes());
    h[4..12].copy_from_slice(&lsn.to_le_bytes());
    h[12..16].copy_from_slice(&count.to_le_bytes());
    h[16..24].copy_from_slice(&head.term.to_le_bytes());
    h[24..32].copy_from_slice(&head.seq.to_le_bytes());
    h[32] = head.kind.tag();
    let head_crc = crate::store::crc32c(&h[..36]);
    h[36..40].copy_from_slice(&head_crc.to_le_bytes());
    h[40..44].copy_from_slice(&crate::store::crc32c(body).to_le_bytes());
    buf.extend_from_slice(&h);
    buf.extend_from_slice(body);
}

/// A record that decoded cleanly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DecodedRecord {
    /// Its LSN.
    pub lsn: u64,
    /// Its length in bytes, header included.
    pub len: u64,
    /// Its term, kind and proposal number.
    pub head: EntryHead,
    /// The offset of its body from the record's start.
    pub body_at: usize,
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
pub(super) fn claimed_len(buf: &[u8], format: WalFormat) -> Option<usize> {
    let (overhead, crc_len) = (format.record_overhead(), format.head_crc_len());
    if buf.len() < overhead || crate::store::crc32c(&buf[..crc_len]) != u32_at(buf, crc_len) {
        return None;
    }
    Some(overhead + u32_at(buf, 0) as usize)
}

/// Decodes the record of a `format` file at the start of `buf` (which runs
/// to the end of the file) into `ops` (cleared first; its capacity is
/// reused; empty for a blank or membership entry).
pub(super) fn decode_record(
    buf: &[u8],
    format: WalFormat,
    ops: &mut Vec<Op>,
) -> Result<DecodedRecord, BadRecord> {
    decode_record_from(buf, format, ops, 0)
}

/// [`decode_record`], but the ops of a record below LSN `ops_from` are
/// neither decoded nor checked (`ops` is left empty): a reader that skips
/// the records before the LSN it wants checks their length and checksums,
/// which tell where the next record starts and whether it was damaged
/// (recovery after a snapshot skips up to a whole file of them).
pub(super) fn decode_record_from(
    buf: &[u8],
    format: WalFormat,
    ops: &mut Vec<Op>,
    ops_from: u64,
) -> Result<DecodedRecord, BadRecord> {
    ops.clear();
    let bad = |reason: String| BadRecord {
        reason,
        written_so: false,
    };
    let certain = |reason: String| BadRecord {
        reason,
        written_so: true,
    };
    let (overhead, crc_len) = (format.record_overhead(), format.head_crc_len());
    if buf.len() < overhead {
        return Err(bad(format!(
            "only {} bytes are left, too few for a record header",
            buf.len()
        )));
    }
    if crate::store::crc32c(&buf[..crc_len]) != u32_at(buf, crc_len) {
        return Err(bad("the record header's checksum does not match".into()));
    }
    let body_len = u32_at(buf, 0);
    let lsn = u64_at(buf, 4);
    let count = u32_at(buf, 12) as usize;
    let head = match format {
        WalFormat::Single => EntryHead::default(),
        WalFormat::Raft => {
            let tag = buf[32];
            let Some(kind) = EntryKind::from_tag(tag) else {
                return Err(certain(format!(
                    "record LSN {lsn} has the unknown kind {tag}"
                )));
            };
            if buf[33..36] != [0; 3] {
                return Err(certain(format!(
                    "record LSN {lsn} has reserved bytes that are not zero"
                )));
            }
            EntryHead {
                term: u64_at(buf, 16),
                kind,
                seq: u64_at(buf, 24),
            }
        }
    };
    if body_len > MAX_OPS_LEN {
        return Err(certain(format!(
            "the record length {body_len} is over the limit of {MAX_OPS_LEN}"
        )));
    }
    let extent = overhead as u64 + u64::from(body_len);
    if extent > buf.len() as u64 {
        return Err(bad(format!(
            "the record (LSN {lsn}) claims {extent} bytes but only {} are left in the file",
            buf.len()
        )));
    }
    let rec = &buf[..extent as usize];
    if crate::store::crc32c(&rec[overhead..]) != u32_at(rec, crc_len + 4) {
        return Err(bad(format!(
            "the checksum of record LSN {lsn}'s ops does not match"
        )));
    }
    match head.kind {
        EntryKind::Normal if lsn < ops_from => {}
        EntryKind::Normal => decode_ops(&rec[overhead..], count, ops)
            .map_err(|why| certain(format!("record LSN {lsn}: {why}")))?,
        EntryKind::Blank if body_len != 0 || count != 0 => {
            return Err(certain(format!(
                "record LSN {lsn} is a blank entry but has a body"
            )));
        }
        EntryKind::Membership if count != 0 => {
            return Err(certain(format!(
                "record LSN {lsn} is a membership entry but claims {count} ops"
            )));
        }
        EntryKind::Blank | EntryKind::Membership => {}
    }
    Ok(DecodedRecord {
        lsn,
        len: extent,
        head,
        body_at: overhead,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::op_bytes::DELETE_LEN;
    use crate::store::op_bytes::test_ops::{del, put};

    #[test]
    fn a_record_decodes_to_what_was_encoded() {
        let ops = vec![put(1, 2), del(3), put(4, 5)];
        let mut buf = Vec::new();
        encode_record(&mut buf, 42, &ops);
        assert_eq!(buf.len(), RECORD_OVERHEAD + 2 * PUT_LEN + DELETE_LEN);
        let mut out = Vec::new();
        let rec = decode_record(&buf, WalFormat::Single, &mut out).unwrap();
        assert_eq!(
            rec,
            DecodedRecord {
                lsn: 42,
                len: buf.len() as u64,
                head: EntryHead::default(),
                body_at: RECORD_OVERHEAD,
            }
        );
        assert_eq!(out, ops);
    }

    #[test]
    fn an_empty_batch_is_a_valid_record() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 7, &[]);
        let mut out = vec![del(9)];
        assert_eq!(
            decode_record(&buf, WalFormat::Single, &mut out)
                .unwrap()
                .lsn,
            7
        );
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
                    decode_record(&damaged, WalFormat::Single, &mut out).is_err(),
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
            let bad = decode_record(&buf[..cut], WalFormat::Single, &mut out).unwrap_err();
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
            let bad = decode_record(&damaged, WalFormat::Single, &mut out).unwrap_err();
            assert!(bad.reason.contains("header's checksum"), "{bad:?}");
        }
    }

    #[test]
    fn the_synced_end_is_the_newer_slot_that_checks_out() {
        let mut file = encode_header(5, WalFormat::Single).to_vec();
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
        let crc = crate::store::crc32c(&buf[RECORD_OVERHEAD..]);
        buf[20..24].copy_from_slice(&crc.to_le_bytes());
        let bad = decode_record(&buf, WalFormat::Single, &mut out).unwrap_err();
        assert!(bad.reason.contains("unknown tag 9"), "{}", bad.reason);
        assert!(bad.written_so);

        // A `Key` cannot be nil, so write one in place and checksum it as
        // a writer with a bug would.
        let mut buf = Vec::new();
        encode_record(&mut buf, 1, &[del(5)]);
        buf[RECORD_OVERHEAD + 1..RECORD_OVERHEAD + 17].fill(0);
        let crc = crate::store::crc32c(&buf[RECORD_OVERHEAD..]);
        buf[20..24].copy_from_slice(&crc.to_le_bytes());
        let bad = decode_record(&buf, WalFormat::Single, &mut out).unwrap_err();
        assert!(bad.reason.contains("reserved key"), "{}", bad.reason);
        assert!(bad.written_so);
    }

    #[test]
    fn a_record_skipped_is_checked_by_its_checksums_not_its_ops() {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        encode_record(&mut buf, 7, &[put(1, 2), del(3)]);
        let whole = buf.len() as u64;
        // Below the LSN wanted: its length and LSN, no ops.
        let rec = decode_record_from(&buf, WalFormat::Single, &mut out, 8).unwrap();
        assert_eq!((rec.lsn, rec.len), (7, whole));
        assert!(out.is_empty());
        // At it: the ops.
        let rec = decode_record_from(&buf, WalFormat::Single, &mut out, 7).unwrap();
        assert_eq!((rec.lsn, out.len()), (7, 2));
        // An op written wrong (checksums right) is not looked at below it,
        // and refused at it.
        buf[RECORD_OVERHEAD] = 9;
        let crc = crate::store::crc32c(&buf[RECORD_OVERHEAD..]);
        buf[20..24].copy_from_slice(&crc.to_le_bytes());
        assert!(decode_record_from(&buf, WalFormat::Single, &mut out, 8).is_ok());
        assert!(decode_record_from(&buf, WalFormat::Single, &mut out, 7).is_err());
        // A damaged body fails its checksum either way.
        buf[RECORD_OVERHEAD + 5] ^= 1;
        let bad = decode_record_from(&buf, WalFormat::Single, &mut out, 8).unwrap_err();
        assert!(bad.reason.contains("checksum"), "{}", bad.reason);
    }

    #[test]
    fn a_header_is_checked_against_the_file_name() {
        let h = encode_header(17, WalFormat::Single);
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

    /// An entry: LSN, head, ops, body.
    type Written = (u64, EntryHead, Vec<Op>, Vec<u8>);

    /// One record of each kind, as a replica group's log holds them.
    fn raft_records() -> (Vec<u8>, Vec<Written>) {
        let ops = vec![put(1, 2), del(3)];
        let mut op_bytes = Vec::new();
        encode_ops(&mut op_bytes, &ops);
        let entries = vec![
            (
                0,
                EntryHead {
                    term: 0,
                    kind: EntryKind::Membership,
                    seq: 0,
                },
                vec![],
                b"members".to_vec(),
            ),
            (
                1,
                EntryHead {
                    term: 1,
                    kind: EntryKind::Blank,
                    seq: 0,
                },
                vec![],
                vec![],
            ),
            (
                2,
                EntryHead {
                    term: 1,
                    kind: EntryKind::Normal,
                    seq: 77,
                },
                ops,
                op_bytes,
            ),
        ];
        let mut buf = Vec::new();
        for (lsn, head, ops, body) in &entries {
            encode_entry(&mut buf, *lsn, *head, ops.len() as u32, body);
        }
        (buf, entries)
    }

    #[test]
    fn raft_records_of_every_kind_decode_to_what_was_encoded() {
        let (buf, entries) = raft_records();
        let mut at = 0;
        let mut out = Vec::new();
        for (lsn, head, ops, body) in entries {
            let rec = decode_record(&buf[at..], WalFormat::Raft, &mut out).unwrap();
            assert_eq!((rec.lsn, rec.head), (lsn, head));
            assert_eq!(out, ops);
            assert_eq!(
                &buf[at + rec.body_at..at + rec.len as usize],
                body.as_slice()
            );
            assert_eq!(
                claimed_len(&buf[at..], WalFormat::Raft),
                Some(rec.len as usize)
            );
            at += rec.len as usize;
        }
        assert_eq!(at, buf.len());
    }

    #[test]
    fn every_flipped_bit_of_a_raft_record_is_detected() {
        let (buf, _) = raft_records();
        let mut out = Vec::new();
        let mut records = Vec::new();
        let mut at = 0;
        while at < buf.len() {
            let len = decode_record(&buf[at..], WalFormat::Raft, &mut out)
                .unwrap()
                .len as usize;
            records.push(&buf[at..at + len]);
            at += len;
        }
        for rec in records {
            for byte in 0..rec.len() {
                for bit in 0..8 {
                    let mut damaged = rec.to_vec();
                    damaged[byte] ^= 1 << bit;
                    let got = decode_record(&damaged, WalFormat::Raft, &mut out);
                    assert!(
                        got.is_err(),
                        "flip of bit {bit} in byte {byte} went unnoticed"
                    );
                }
            }
        }
    }

    #[test]
    fn a_raft_record_written_wrong_is_damage_not_a_tear() {
        let mut out = Vec::new();
        // A blank entry with a body, and a membership entry that claims ops:
        // checksums hold, so they were written so.
        let mut buf = Vec::new();
        encode_entry(
            &mut buf,
            4,
            EntryHead {
                term: 2,
                kind: EntryKind::Membership,
                seq: 0,
            },
            0,
            b"x",
        );
        let mut blank = buf.clone();
        blank[32] = 1; // kind: blank
        let crc = crate::store::crc32c(&blank[..36]);
        blank[36..40].copy_from_slice(&crc.to_le_bytes());
        let bad = decode_record(&blank, WalFormat::Raft, &mut out).unwrap_err();
        assert!(
            bad.written_so && bad.reason.contains("blank entry but has a body"),
            "{bad:?}"
        );
        let mut kind = buf.clone();
        kind[32] = 9;
        let crc = crate::store::crc32c(&kind[..36]);
        kind[36..40].copy_from_slice(&crc.to_le_bytes());
        let bad = decode_record(&kind, WalFormat::Raft, &mut out).unwrap_err();
        assert!(
            bad.written_so && bad.reason.contains("unknown kind 9"),
            "{bad:?}"
        );
        // Cut anywhere: a tear, never damage written so.
        for cut in 0..buf.len() {
            let bad = decode_record(&buf[..cut], WalFormat::Raft, &mut out).unwrap_err();
            assert!(!bad.written_so, "cut at {cut}: {bad:?}");
        }
        // A version 2 reader does not take a version 3 record for one.
        assert!(decode_record(&buf, WalFormat::Single, &mut out).is_err());
    }

    #[test]
    fn a_header_says_its_format() {
        for format in [WalFormat::Single, WalFormat::Raft] {
            let h = encode_header(0, format);
            assert_eq!(check_header(&h, 0), Ok(format));
        }
        let mut h = encode_header(3, WalFormat::Raft);
        h[8..12].copy_from_slice(&4u32.to_le_bytes());
        let crc = crate::store::crc32c(&h[..20]);
        h[20..24].copy_from_slice(&crc.to_le_bytes());
        let bad = check_header(&h, 3).unwrap_err();
        assert!(
            bad.written_so && bad.reason.contains("format version 4"),
            "{bad:?}"
        );
    }
}
