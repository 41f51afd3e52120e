//! CRC-32C (Castagnoli), the checksum of every record, header and segment
//! the store and the replica group write: one function, so that every
//! writer and reader of a file agree on it.
//!
//! Computed by `crc-fast`, which folds with carry-less multiplies
//! (VPCLMULQDQ or PCLMULQDQ, chosen at run time) rather than the one
//! `crc32` instruction at a time of the `crc32c` crate: 2.0–2.3× the
//! speed from 4 KiB to a snapshot's 1 MiB segments, and faster at every
//! size down to a 16-byte header (`benches/checksum.rs`; BENCHMARKS.md,
//! issue 38). The result is the same
//! function: the files written before stay readable (the test below pins
//! the standard check value).

use crc_fast::CrcAlgorithm;

/// The CRC-32C of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    // The algorithm's width is 32 bits: the u64 holds a u32.
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

#[cfg(test)]
mod tests {
    use super::crc32c;

    #[test]
    fn it_is_crc32c_as_the_files_written_before_use_it() {
        // The check value of CRC-32C (iSCSI), RFC 3720 B.4's test vectors.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46dd_794e);
        assert_eq!(crc32c(&[]), 0);
    }
}
