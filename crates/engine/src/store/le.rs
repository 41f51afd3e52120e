//! Little-endian field readers shared by the WAL and snapshot decoders.
//! Callers check lengths first; a short slice is a bug, hence the panics.

/// The `u32` at `b[at..at + 4]`.
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The `u64` at `b[at..at + 8]`.
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
