//! The partition of a key: a fixed, unseeded hash of its 16 bytes.
//!
//! `partition_of(key) = fmix64(hi ^ fmix64(lo)) >> 52`, where `hi` and
//! `lo` are the key's bytes 0..8 and 8..16 read as big-endian `u64`s and
//! `fmix64` is MurmurHash3's 64-bit finalizer. The top 12 bits of the
//! result pick one of [`PARTITIONS`] partitions.
//!
//! **Invariant:** this function never changes. Every member, every client
//! and every partition table in etcd agree on it; a change would send keys
//! to groups that do not hold them. It is deliberately not the index's
//! hash, which is seeded per process (ahash) and may change between builds.
//! `tests::frozen_vectors` pins it. Both halves go through the finalizer so
//! that time-ordered ids (UUIDv7: the high bytes are a clock) spread as
//! evenly as random ones.

use std::fmt;

/// How many partitions the keyspace is split into. Fixed for a cluster's
/// life (a power of two, as Aerospike's 4096).
pub const PARTITIONS: u16 = 4096;

/// One partition: `0..PARTITIONS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId(u16);

impl PartitionId {
    /// Partition `n`, or `None` when `n` is not below [`PARTITIONS`].
    pub fn new(n: u16) -> Option<PartitionId> {
        (n < PARTITIONS).then_some(PartitionId(n))
    }

    /// The partition's number.
    pub fn get(self) -> u16 {
        self.0
    }

    /// Every partition, in order.
    pub fn all() -> impl Iterator<Item = PartitionId> {
        (0..PARTITIONS).map(PartitionId)
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// MurmurHash3's 64-bit finalizer: every input bit reaches every output
/// bit.
const fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// The partition that owns `key` (module docs give the function).
pub fn partition_of(key: &[u8; 16]) -> PartitionId {
    let mut hi = [0; 8];
    let mut lo = [0; 8];
    hi.copy_from_slice(&key[..8]);
    lo.copy_from_slice(&key[8..]);
    let h = fmix64(u64::from_be_bytes(hi) ^ fmix64(u64::from_be_bytes(lo)));
    PartitionId((h >> 52) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(hex: &str) -> [u8; 16] {
        let mut k = [0; 16];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
        }
        k
    }

    /// The function is part of the cluster's format: these values are the
    /// contract (docs/partitions.md lists the same ones, computed there by
    /// an independent implementation in Python).
    #[test]
    fn frozen_vectors() {
        let cases = [
            ("00000000000000000000000000000001", 2006),
            ("0123456789abcdef0123456789abcdef", 1403),
            ("ffffffffffffffffffffffffffffffff", 952),
            ("6ba7b810-9dad-11d1-80b4-00c04fd430c8", 1863),
            ("0190f1c2-7a3b-7cde-8f01-23456789abcd", 2948),
        ];
        for (hex, want) in cases {
            let hex: String = hex.chars().filter(|c| *c != '-').collect();
            let got = partition_of(&key(&hex)).get();
            assert_eq!(got, want, "partition of {hex}");
        }
    }

    /// A deterministic stream of keys: splitmix64, so the test is the same
    /// on every run.
    fn keys(mut state: u64, n: usize, v7: bool) -> impl Iterator<Item = [u8; 16]> {
        (0..n).map(move |i| {
            let mut next = || {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                fmix64(state)
            };
            let mut k = [0; 16];
            if v7 {
                // Time-ordered: a millisecond clock in the top 48 bits that
                // advances every 64 keys, random below.
                let ms = 1_700_000_000_000u64 + (i as u64 / 64);
                k[..8].copy_from_slice(&((ms << 16) | (next() & 0xffff)).to_be_bytes());
            } else {
                k[..8].copy_from_slice(&next().to_be_bytes());
            }
            k[8..].copy_from_slice(&next().to_be_bytes());
            k
        })
    }

    /// Random and time-ordered keys both spread evenly: with 1M keys each
    /// partition expects 244, with a standard deviation of about 15.6; no
    /// partition may be more than 6 deviations off.
    #[test]
    fn keys_spread_evenly_over_the_partitions() {
        for v7 in [false, true] {
            let mut counts = vec![0u32; PARTITIONS as usize];
            let n = 1 << 20;
            for k in keys(7, n, v7) {
                counts[partition_of(&k).get() as usize] += 1;
            }
            let mean = n as f64 / f64::from(PARTITIONS);
            let (lo, hi) = (mean - 6.0 * mean.sqrt(), mean + 6.0 * mean.sqrt());
            for (p, c) in counts.iter().enumerate() {
                let c = f64::from(*c);
                assert!(
                    (lo..=hi).contains(&c),
                    "partition {p}: {c} keys, expected {lo:.0}..{hi:.0} (time-ordered: {v7})"
                );
            }
        }
    }

    #[test]
    fn partition_ids_are_bounded() {
        assert_eq!(PartitionId::new(4095).map(PartitionId::get), Some(4095));
        assert_eq!(PartitionId::new(4096), None);
        assert_eq!(PartitionId::all().count(), 4096);
    }
}
