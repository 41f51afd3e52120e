//! The key hash: seeded ahash, with seeds and a fingerprint that travel with the
//! table.
//!
//! The seeds are drawn at random when an index is created (so that keys chosen
//! by an adversary cannot be steered into one segment) and kept, so that a
//! snapshot can be restored with the same layout. ahash's output depends on the
//! crate version and on the CPU features it was compiled for; the fingerprint
//! (the hash of fixed inputs under fixed seeds) lets a restorer detect that its
//! ahash hashes differently and rebuild instead of probing in the wrong places.
//!
//! The high `segment_bits` of a hash pick the segment; the remaining bits,
//! shifted up, pick the home slot by multiply-shift (`(h * capacity) >> 64`),
//! which is monotonic in the hash and works for any capacity.

use ahash::RandomState;

/// The four ahash seeds of an index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashSeeds(pub [u64; 4]);

impl HashSeeds {
    /// Fresh seeds from the operating system's randomness (via ahash's
    /// runtime-random `RandomState`).
    pub fn random() -> Self {
        let r = RandomState::new();
        // Four independent-looking words derived from the random state.
        let mut seeds = [0u64; 4];
        for (i, s) in seeds.iter_mut().enumerate() {
            *s = r.hash_one(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1));
        }
        HashSeeds(seeds)
    }
}

/// The hash function of one index, and how its output is split between the
/// segment number and the slot position.
#[derive(Clone)]
pub(crate) struct KeyHasher {
    /// The ahash state built from `seeds`.
    state: RandomState,
    /// The seeds, kept for snapshots.
    seeds: HashSeeds,
    /// log2 of the segment count (< 64): how many high hash bits pick the segment.
    segment_bits: u32,
}

impl KeyHasher {
    pub(crate) fn new(seeds: HashSeeds, segment_bits: u32) -> Self {
        assert!(segment_bits < 64);
        let [a, b, c, d] = seeds.0;
        KeyHasher {
            state: RandomState::with_seeds(a, b, c, d),
            seeds,
            segment_bits,
        }
    }

    /// The segment a hash belongs to (its high `segment_bits` bits).
    #[inline(always)]
    pub(crate) fn segment(&self, hash: u64) -> usize {
        hash.checked_shr(64 - self.segment_bits).unwrap_or(0) as usize
    }

    /// The hash bits left for slot placement once the segment bits are taken.
    #[inline(always)]
    pub(crate) fn rest(&self, hash: u64) -> u64 {
        hash << self.segment_bits
    }

    /// The hash bits of `rest` back in their place: the low bits of the
    /// hash, which the tag of a slot is taken from.
    #[inline(always)]
    pub(crate) fn unplaced(&self, rest: u64) -> u64 {
        rest >> self.segment_bits
    }

    /// A tag naming this placement (seeds and segment count): a scan cursor
    /// made for one placement is refused by another.
    pub(crate) fn layout_tag(&self) -> u64 {
        self.hash([0x5ca1_ab1e, self.segment_bits as u64])
    }

    pub(crate) fn seeds(&self) -> HashSeeds {
        self.seeds
    }

    /// Hashes the key's two in-memory words.
    #[inline(always)]
    pub(crate) fn hash(&self, key: [u64; 2]) -> u64 {
        self.state
            .hash_one((key[0] as u128) | ((key[1] as u128) << 64))
    }
}

/// The output of the hash function on fixed inputs under fixed seeds. Two builds
/// whose fingerprints agree place keys identically.
pub fn hash_fingerprint() -> u64 {
    let h = KeyHasher::new(HashSeeds([1, 2, 3, 4]), 0);
    let mut acc = 0u64;
    for i in 0..8u64 {
        acc = acc.rotate_left(7) ^ h.hash([i.wrapping_mul(0x9e37_79b9_7f4a_7c15), !i]);
    }
    acc
}

/// The home slot of a hash (already stripped of its segment bits) in a table
/// of `capacity` slots.
#[inline(always)]
pub(crate) fn home_slot(rest: u64, capacity: usize) -> usize {
    ((rest as u128 * capacity as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seeds_hash_the_same() {
        let a = KeyHasher::new(HashSeeds([5, 6, 7, 8]), 4);
        let b = KeyHasher::new(HashSeeds([5, 6, 7, 8]), 4);
        let c = KeyHasher::new(HashSeeds([5, 6, 7, 9]), 4);
        assert_eq!(a.hash([1, 2]), b.hash([1, 2]));
        assert_ne!(a.hash([1, 2]), c.hash([1, 2]));
    }

    #[test]
    fn segment_and_rest_split_the_hash() {
        let h = KeyHasher::new(HashSeeds([1, 1, 1, 1]), 4);
        assert_eq!(h.segment(0xF000_0000_0000_0001), 15);
        assert_eq!(h.rest(0xF000_0000_0000_0001), 0x10);
        let whole = KeyHasher::new(HashSeeds([1, 1, 1, 1]), 0);
        assert_eq!(whole.segment(u64::MAX), 0);
        assert_eq!(whole.rest(42), 42);
    }

    /// The fingerprint of this build's hashing. Snapshots record it; one
    /// written by a build that hashes differently is rehashed at open,
    /// which makes that restart slow. So a change here (a new ahash, or a
    /// build with other CPU features) must be deliberate: update the
    /// constant, and say so in the release notes.
    #[test]
    fn fingerprint_is_the_known_constant() {
        assert_eq!(
            hash_fingerprint(),
            0x17aa_24b7_34f7_ac25,
            "the hash fingerprint changed: {:#018x}",
            hash_fingerprint()
        );
    }

    #[test]
    fn random_seeds_differ() {
        assert_ne!(HashSeeds::random(), HashSeeds::random());
    }

    #[test]
    fn home_slot_is_in_range_and_monotonic() {
        for cap in [1usize, 3, 64, 1000, 1 << 20] {
            assert_eq!(home_slot(0, cap), 0);
            assert_eq!(home_slot(u64::MAX, cap), cap - 1);
            assert!(home_slot(1 << 63, cap) <= home_slot((1 << 63) + 1, cap));
        }
    }
}
