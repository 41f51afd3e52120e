//! The snapshot file's bytes: the prologue, the header with its segment
//! directory, the trailer, and the structural checks every reader runs
//! before it trusts an offset. `docs/format.md` ("Snapshot") is the
//! field-by-field description; this file is its implementation.
//!
//! Layout, all integers little-endian:
//!
//! ```text
//! 0            prologue: magic, format version, zeros up to 4096
//! 4096         segment 0's slot array (capacity * 32 bytes), then (version
//!              2) its tags (ceil(capacity / 8) * 8 bytes)
//! (4096-aligned) segment 1's slot array ... one per segment, in order
//! H            header: fixed fields, segment directory, crc32c of the header
//! end - 16     trailer: H (u64), magic
//! ```
//!
//! The header comes last because files are written strictly by appending
//! ([`crate::store::IoFile`]) and a segment's place and size are known only
//! once it has been copied (the writer may grow it while the snapshot is
//! being written).

use crate::store::le::{u32_at, u64_at};
use uuidmap_index::{HashSeeds, MAX_SEGMENTS};

/// First and last eight bytes of every snapshot file, and the header's first.
pub(super) const MAGIC: [u8; 8] = *b"UUIDMAPS";
/// The format this build writes: version 2 stores each table's tags after
/// its slots, and its `max_disp` in the directory.
pub(super) const FORMAT_VERSION: u32 = 2;
/// The oldest format this build reads: version 1 holds slots only, and a
/// reader rebuilds the tags by hashing the keys.
pub(super) const OLDEST_READABLE_VERSION: u32 = 1;
/// Alignment of every slot array in the file: a page, so that the private
/// mapping of the file can serve as the tables in place.
pub(super) const PAGE: u64 = 4096;
/// Bytes before the first slot array.
pub(super) const PROLOGUE_LEN: u64 = PAGE;
/// Bytes after the header: its offset and the magic.
pub(super) const TRAILER_LEN: u64 = 16;
/// Bytes of one slot (key, then value).
pub(super) const SLOT_BYTES: u64 = 32;
/// Bytes of the header before the segment directory.
const HEADER_FIXED_LEN: usize = 104;
/// Bytes of one directory entry in format version 1; version 2 adds
/// `max_disp`.
const DIRECTORY_ENTRY_LEN_V1: usize = 40;
const DIRECTORY_ENTRY_LEN_V2: usize = 48;
/// Bytes of the header's closing checksum.
const HEADER_CRC_LEN: usize = 4;

/// One segment as the directory describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentEntry {
    /// Byte offset of the slot array in the file (a multiple of 4096).
    pub offset: u64,
    /// Slots in the array; it spans `capacity * 32` bytes.
    pub capacity: u64,
    /// Entries (non-empty slots) in it.
    pub len: u64,
    /// Every batch with an LSN up to this one is wholly contained in the
    /// array (see the module docs of `snapshot`).
    pub capture_lsn: u64,
    /// The table's growth generation.
    pub generation: u32,
    /// crc32c of the array's bytes (its slots, then its tags if stored).
    pub crc: u32,
    /// Format version 2: the tags follow the slots, and lookups scan them
    /// this far from a key's home. `None` in version 1 (no tags stored).
    pub max_disp: Option<u64>,
}

impl SegmentEntry {
    /// Bytes of the slots.
    pub fn slot_bytes(&self) -> u64 {
        self.capacity * SLOT_BYTES
    }

    /// Bytes of the tags stored after the slots: one per slot, in whole
    /// 8-byte words (0 in version 1).
    pub fn tag_bytes(&self) -> u64 {
        if self.max_disp.is_some() {
            self.capacity.div_ceil(8) * 8
        } else {
            0
        }
    }

    /// Bytes of the array: its slots, then its tags if stored.
    pub fn bytes(&self) -> u64 {
        self.slot_bytes() + self.tag_bytes()
    }
}

/// Everything the header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Header {
    /// The format version (also in the prologue).
    pub version: u32,
    /// The index's hash seeds.
    pub seeds: HashSeeds,
    /// The hash fingerprint of the build that wrote the file.
    pub fingerprint: u64,
    /// The snapshot's LSN (its name): at least the applied LSN when the last
    /// segment had been copied, and at least every capture LSN.
    pub lsn: u64,
    /// Smallest capture LSN of any segment.
    pub min_capture_lsn: u64,
    /// Largest capture LSN of any segment.
    pub max_capture_lsn: u64,
    /// When the file was written, in milliseconds since the Unix epoch.
    pub created_unix_millis: u64,
    /// Entries in all segments.
    pub entries: u64,
    /// The directory, one entry per segment, in segment order.
    pub segments: Vec<SegmentEntry>,
}

/// The prologue: magic, version, zeros up to the first page boundary.
pub(super) fn prologue(version: u32) -> Vec<u8> {
    let mut p = vec![0u8; PROLOGUE_LEN as usize];
    p[..8].copy_from_slice(&MAGIC);
    p[8..12].copy_from_slice(&version.to_le_bytes());
    p
}

/// Why a file's header cannot be used ([`Header::parse_file`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unreadable {
    /// It fails a check; the reason is for a user.
    Damaged(String),
    /// A newer build wrote it: its framing holds (the version is the same
    /// in the prologue and in the header, whose checksum holds) but the
    /// version is past the ones this build reads. Not damage.
    Newer(u32),
}

impl From<String> for Unreadable {
    fn from(reason: String) -> Self {
        Unreadable::Damaged(reason)
    }
}

impl From<&str> for Unreadable {
    fn from(reason: &str) -> Self {
        Unreadable::Damaged(reason.into())
    }
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::Damaged(reason) => f.write_str(reason),
            Unreadable::Newer(version) => write!(
                f,
                "the file is in snapshot format version {version}, written by a newer build; \
                 this build reads versions {OLDEST_READABLE_VERSION} to {FORMAT_VERSION}"
            ),
        }
    }
}

/// The trailer for a header at `header_offset`.
pub(super) fn trailer(header_offset: u64) -> [u8; TRAILER_LEN as usize] {
    let mut t = [0u8; TRAILER_LEN as usize];
    t[..8].copy_from_slice(&header_offset.to_le_bytes());
    t[8..].copy_from_slice(&MAGIC);
    t
}

/// Bytes of a directory entry in format `version`.
fn directory_entry_len(version: u32) -> usize {
    if version >= 2 {
        DIRECTORY_ENTRY_LEN_V2
    } else {
        DIRECTORY_ENTRY_LEN_V1
    }
}

/// Bytes of a header in format `version` with `segments` directory entries.
pub(super) fn header_len(version: u32, segments: usize) -> usize {
    HEADER_FIXED_LEN + segments * directory_entry_len(version) + HEADER_CRC_LEN
}

impl Header {
    /// The header's bytes, checksum included. Every segment must have a
    /// `max_disp` in version 2 and none in version 1.
    pub(super) fn encode(&self) -> Vec<u8> {
        let len = header_len(self.version, self.segments.len());
        let mut b = Vec::with_capacity(len);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes()); // flags: none defined
        for seed in self.seeds.0 {
            b.extend_from_slice(&seed.to_le_bytes());
        }
        for v in [
            self.fingerprint,
            self.lsn,
            self.min_capture_lsn,
            self.max_capture_lsn,
            self.created_unix_millis,
            self.entries,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        debug_assert_eq!(b.len(), HEADER_FIXED_LEN);
        for s in &self.segments {
            for v in [s.offset, s.capacity, s.len, s.capture_lsn] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&s.generation.to_le_bytes());
            b.extend_from_slice(&s.crc.to_le_bytes());
            debug_assert_eq!(s.max_disp.is_some(), self.version >= 2);
            if let Some(max_disp) = s.max_disp {
                b.extend_from_slice(&max_disp.to_le_bytes());
            }
        }
        let crc = crate::store::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(b.len(), len);
        b
    }

    /// Reads the header of a whole snapshot file and checks its structure:
    /// magics, version, checksum, and that every segment lies inside the
    /// file, page aligned, in order, without overlap, with a free slot. Does
    /// not read the slot arrays. The error is a reason for a user.
    pub(super) fn parse_file(file: &[u8]) -> Result<Header, Unreadable> {
        let file_len = file.len() as u64;
        if file_len < PROLOGUE_LEN + TRAILER_LEN {
            return Err(format!(
                "the file is {file_len} bytes, shorter than the smallest snapshot \
                 ({} bytes): it was cut short",
                PROLOGUE_LEN + TRAILER_LEN
            )
            .into());
        }
        if file[..8] != MAGIC {
            return Err(
                "the file does not start with the snapshot magic \"UUIDMAPS\": \
                        it is not a snapshot, or its first page is damaged"
                    .into(),
            );
        }
        // A version past this build's is told apart from a damaged one by
        // the framing every version keeps (docs/format.md), checked below.
        let version = u32_at(file, 8);
        if version < OLDEST_READABLE_VERSION {
            return Err(format!(
                "the file is in snapshot format version {version}; this build reads \
                 versions {OLDEST_READABLE_VERSION} to {FORMAT_VERSION}"
            )
            .into());
        }
        let trailer_at = file.len() - TRAILER_LEN as usize;
        if file[trailer_at + 8..] != MAGIC {
            return Err(format!(
                "the file ({file_len} bytes) does not end with the snapshot trailer: \
                 it was cut short or its end is damaged"
            )
            .into());
        }
        let header_offset = u64_at(file, trailer_at);
        let min_header = header_len(version, 0) as u64;
        if header_offset < PROLOGUE_LEN
            || header_offset > file_len - TRAILER_LEN
            || file_len - TRAILER_LEN - header_offset < min_header
        {
            return Err(format!(
                "the trailer places the header at byte {header_offset}, outside the \
                 file ({file_len} bytes): the trailer is damaged"
            )
            .into());
        }
        let header = &file[header_offset as usize..trailer_at];
        let declared_len = u32_at(header, 12) as usize;
        if declared_len != header.len() {
            return Err(format!(
                "the header at byte {header_offset} says it is {declared_len} bytes, but \
                 {} bytes lie between it and the trailer: the file is {file_len} bytes, \
                 not the length its header implies",
                header.len()
            )
            .into());
        }
        let (body, crc) = header.split_at(header.len() - HEADER_CRC_LEN);
        if crate::store::crc32c(body) != u32_at(crc, 0) {
            return Err(format!(
                "the header at byte {header_offset} fails its checksum: the file is damaged"
            )
            .into());
        }
        // The checksum holds, so what follows describes what the writer wrote;
        // the checks below guard against a writer bug or a forged file.
        if header[..8] != MAGIC || u32_at(header, 8) != version {
            return Err("the header's magic or version disagrees with the file's start".into());
        }
        if version > FORMAT_VERSION {
            return Err(Unreadable::Newer(version));
        }
        let count = u32_at(header, 16) as usize;
        if count == 0 || count > MAX_SEGMENTS || !count.is_power_of_two() {
            return Err(format!(
                "the header claims {count} segments; a snapshot has a power of two \
                 between 1 and {MAX_SEGMENTS}"
            )
            .into());
        }
        if header_len(version, count) != header.len() {
            return Err(format!(
                "the header is {} bytes but {count} segments need {}",
                header.len(),
                header_len(version, count)
            )
            .into());
        }
        let flags = u32_at(header, 20);
        if flags != 0 {
            return Err(format!(
                "the header sets flags {flags:#x}, which this build does not know"
            )
            .into());
        }
        let seeds = HashSeeds([
            u64_at(header, 24),
            u64_at(header, 32),
            u64_at(header, 40),
            u64_at(header, 48),
        ]);
        let entry_len = directory_entry_len(version);
        let h = Header {
            version,
            seeds,
            fingerprint: u64_at(header, 56),
            lsn: u64_at(header, 64),
            min_capture_lsn: u64_at(header, 72),
            max_capture_lsn: u64_at(header, 80),
            created_unix_millis: u64_at(header, 88),
            entries: u64_at(header, 96),
            segments: (0..count)
                .map(|i| {
                    let e = &header[HEADER_FIXED_LEN + i * entry_len..];
                    SegmentEntry {
                        offset: u64_at(e, 0),
                        capacity: u64_at(e, 8),
                        len: u64_at(e, 16),
                        capture_lsn: u64_at(e, 24),
                        generation: u32_at(e, 32),
                        crc: u32_at(e, 36),
                        max_disp: (version >= 2).then(|| u64_at(e, 40)),
                    }
                })
                .collect(),
        };
        h.check_layout(header_offset)?;
        Ok(h)
    }

    /// Checks that the segments tile `[PROLOGUE_LEN, header_offset)` in
    /// order, page aligned, and that the totals agree with the directory.
    fn check_layout(&self, header_offset: u64) -> Result<(), String> {
        let mut end = PROLOGUE_LEN;
        let mut entries = 0u64;
        let (mut min, mut max) = (u64::MAX, 0);
        for (i, s) in self.segments.iter().enumerate() {
            if !s.offset.is_multiple_of(PAGE) {
                return Err(format!(
                    "segment {i} starts at byte {}, not at a multiple of {PAGE}",
                    s.offset
                ));
            }
            if s.offset < end {
                return Err(format!(
                    "segment {i} starts at byte {}, overlapping what comes before it \
                     (which ends at byte {end})",
                    s.offset
                ));
            }
            if s.len >= s.capacity {
                return Err(format!(
                    "segment {i} claims {} entries in {} slots; a table always keeps a \
                     free slot",
                    s.len, s.capacity
                ));
            }
            // The tags' bytes are at most a slot's per slot: no overflow
            // once the slots' do not.
            let seg_end = s
                .capacity
                .checked_mul(SLOT_BYTES)
                .and_then(|b| b.checked_add(s.tag_bytes()))
                .and_then(|b| b.checked_add(s.offset))
                .filter(|&e| e <= header_offset)
                .ok_or_else(|| {
                    format!(
                        "segment {i} ({} slots at byte {}) runs past the header at byte \
                         {header_offset}: the file is shorter than its header says",
                        s.capacity, s.offset
                    )
                })?;
            end = seg_end;
            entries += s.len;
            min = min.min(s.capture_lsn);
            max = max.max(s.capture_lsn);
        }
        if entries != self.entries {
            return Err(format!(
                "the segments hold {entries} entries but the header says {}",
                self.entries
            ));
        }
        if min != self.min_capture_lsn || max != self.max_capture_lsn || max > self.lsn {
            return Err(format!(
                "the capture LSNs (from {min} to {max}) disagree with the header's range \
                 ({} to {}) or exceed the snapshot's LSN {}",
                self.min_capture_lsn, self.max_capture_lsn, self.lsn
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of format `version` with two segments.
    fn sample(version: u32) -> (Header, Vec<u8>) {
        let max_disp = |d| (version >= 2).then_some(d);
        let segments = vec![
            SegmentEntry {
                offset: PROLOGUE_LEN,
                capacity: 3,
                len: 1,
                capture_lsn: 5,
                generation: 0,
                crc: 0,
                max_disp: max_disp(1),
            },
            SegmentEntry {
                offset: 2 * PAGE,
                capacity: 200,
                len: 2,
                capture_lsn: 9,
                generation: 7,
                crc: 0,
                max_disp: max_disp(4),
            },
        ];
        let header = Header {
            version,
            seeds: HashSeeds([1, 2, 3, 4]),
            fingerprint: 77,
            lsn: 10,
            min_capture_lsn: 5,
            max_capture_lsn: 9,
            created_unix_millis: 123,
            entries: 3,
            segments,
        };
        let mut file = prologue(version);
        file.resize(2 * PAGE as usize + header.segments[1].bytes() as usize, 0);
        let at = file.len() as u64;
        file.extend_from_slice(&header.encode());
        file.extend_from_slice(&trailer(at));
        (header, file)
    }

    #[test]
    fn a_header_reads_back_as_written_in_either_version() {
        for version in [1, 2] {
            let (header, file) = sample(version);
            assert_eq!(Header::parse_file(&file).unwrap(), header, "{version}");
        }
        // Version 2's arrays hold the tags after the slots.
        let (header, _) = sample(2);
        assert_eq!(header.segments[1].bytes(), 200 * 32 + 200);
        assert_eq!(header.segments[0].bytes(), 3 * 32 + 8);
        assert_eq!(sample(1).0.segments[0].bytes(), 3 * 32);
    }

    #[test]
    fn every_single_byte_change_to_the_header_is_caught() {
        for version in [1, 2] {
            let (_, file) = sample(version);
            let header_at = file.len() - TRAILER_LEN as usize - header_len(version, 2);
            for i in header_at..file.len() {
                let mut bad = file.clone();
                bad[i] ^= 0x10;
                assert!(Header::parse_file(&bad).is_err(), "v{version} byte {i}");
            }
            for i in 0..12 {
                let mut bad = file.clone();
                bad[i] ^= 0x01;
                assert!(
                    Header::parse_file(&bad).is_err(),
                    "v{version} prologue byte {i}"
                );
            }
        }
    }

    /// `file` with its version set to `version` in the prologue and the
    /// header, and the header's checksum taken again.
    fn with_version(mut file: Vec<u8>, version: u32) -> Vec<u8> {
        let len = file.len();
        let at = u64_at(&file, len - TRAILER_LEN as usize) as usize;
        let end = len - TRAILER_LEN as usize - HEADER_CRC_LEN;
        file[8..12].copy_from_slice(&version.to_le_bytes());
        file[at + 8..at + 12].copy_from_slice(&version.to_le_bytes());
        let crc = crate::store::crc32c(&file[at..end]);
        file[end..end + HEADER_CRC_LEN].copy_from_slice(&crc.to_le_bytes());
        file
    }

    fn is_damaged(file: &[u8]) -> bool {
        matches!(Header::parse_file(file), Err(Unreadable::Damaged(_)))
    }

    #[test]
    fn a_newer_version_is_told_from_a_damaged_version_field() {
        let (_, file) = sample(2);
        assert!(Header::parse_file(&file).is_ok(), "this build's own");
        let newer = Header::parse_file(&with_version(file.clone(), 3)).unwrap_err();
        assert_eq!(newer, Unreadable::Newer(3));
        // A flipped bit in either copy of the version, or the header's
        // checksum not holding, is damage.
        let mut flipped = file.clone();
        flipped[8] ^= 0x80;
        assert!(is_damaged(&flipped));
        let mut one_copy = with_version(file.clone(), 3);
        one_copy[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert!(is_damaged(&one_copy));
        let mut bad_crc = with_version(file, 3);
        let n = bad_crc.len();
        bad_crc[n - TRAILER_LEN as usize - 1] ^= 1;
        assert!(is_damaged(&bad_crc));
    }

    #[test]
    fn a_version_this_build_does_not_know_is_refused_by_number() {
        let (_, file) = sample(2);
        for (version, damaged) in [(3, false), (0, true)] {
            let e = Header::parse_file(&with_version(file.clone(), version))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("version {version}")) && e.contains("versions 1 to 2"),
                "{e}"
            );
            assert_eq!(is_damaged(&with_version(file.clone(), version)), damaged);
        }
    }

    #[test]
    fn overlapping_or_unaligned_segments_are_refused() {
        let (mut header, _) = sample(2);
        header.segments[1].offset = PROLOGUE_LEN;
        assert!(
            header
                .check_layout(1 << 20)
                .unwrap_err()
                .contains("overlapping")
        );
        header.segments[1].offset = 2 * PAGE + 8;
        assert!(
            header
                .check_layout(1 << 20)
                .unwrap_err()
                .contains("multiple")
        );
        header.segments[1].offset = 2 * PAGE;
        assert!(
            header
                .check_layout(2 * PAGE + 100)
                .unwrap_err()
                .contains("runs past")
        );
        header.segments[1].capacity = u64::MAX;
        assert!(
            header
                .check_layout(u64::MAX)
                .unwrap_err()
                .contains("runs past")
        );
    }
}
