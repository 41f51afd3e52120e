//! `cuckoo-2x2`: bucketed cuckoo hashing, two candidate 64-byte buckets of
//! two slots each.

use super::{EMPTY, Hasher, Scheme, Slot, Trace, home_of_hash, key_of, next};

/// Bucketed cuckoo hashing: buckets of two slots (64 B, one cache line),
/// two candidate buckets per key from two hashes. A lookup reads both
/// lines, whose addresses are known at once, so their misses overlap; an
/// insert that finds both full evicts along a random walk (MemC3's and
/// libcuckoo's layout, without their tag bytes).
pub(crate) struct Cuckoo {
    /// The random walk's state.
    rng: u64,
}

/// Slots per cuckoo bucket: one 64-byte line.
const CUCKOO_BUCKET: usize = 2;

/// Evictions an insert tries before it declares the table full.
const CUCKOO_MAX_KICKS: usize = 1000;

impl Cuckoo {
    /// The two candidate buckets of a key (distinct).
    #[inline(always)]
    fn buckets(h: &Hasher, key: [u64; 2], n: usize) -> [usize; 2] {
        let nb = n / CUCKOO_BUCKET;
        let hash = h.hash(key);
        let b1 = home_of_hash(hash, nb);
        let b2 = home_of_hash(hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (hash >> 29), nb);
        [b1, if b2 == b1 { next(b1, nb) } else { b2 }]
    }

    /// The slot holding `key`, and the slots compared.
    #[inline(always)]
    fn find(t: &[Slot], h: &Hasher, key: [u64; 2]) -> (Option<usize>, usize) {
        let [b1, b2] = Self::buckets(h, key, t.len());
        let (s1, s2) = (b1 * CUCKOO_BUCKET, b2 * CUCKOO_BUCKET);
        // All four keys loaded before any branch: both lines in flight.
        let keys = [
            key_of(&t[s1]),
            key_of(&t[s1 + 1]),
            key_of(&t[s2]),
            key_of(&t[s2 + 1]),
        ];
        let at = [s1, s1 + 1, s2, s2 + 1];
        for j in 0..4 {
            if keys[j] == key {
                return (Some(at[j]), j + 1);
            }
        }
        (None, 4)
    }

    fn free_in(t: &[Slot], b: usize) -> Option<usize> {
        (b * CUCKOO_BUCKET..(b + 1) * CUCKOO_BUCKET).find(|&i| key_of(&t[i]) == EMPTY)
    }
}

impl Scheme for Cuckoo {
    const NAME: &'static str = "cuckoo-2x2";

    fn new(_: usize) -> Self {
        Cuckoo {
            rng: 0x6375_636b_6f6f_0001,
        }
    }

    fn insert(&mut self, t: &mut [Slot], h: &Hasher, key: [u64; 2], value: [u64; 2]) -> bool {
        let mut carried = [key[0], key[1], value[0], value[1]];
        let [b1, b2] = Self::buckets(h, key, t.len());
        let mut b = b1;
        for i in [b1, b2] {
            if let Some(s) = Self::free_in(t, i) {
                t[s] = carried;
                return true;
            }
        }
        for _ in 0..CUCKOO_MAX_KICKS {
            // Evict a random resident of `b` and carry it to its other bucket.
            self.rng = self
                .rng
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let victim = b * CUCKOO_BUCKET + (self.rng >> 63) as usize;
            std::mem::swap(&mut t[victim], &mut carried);
            let [c1, c2] = Self::buckets(h, key_of(&carried), t.len());
            b = if c1 == b { c2 } else { c1 };
            if let Some(s) = Self::free_in(t, b) {
                t[s] = carried;
                return true;
            }
        }
        // The carried entry is dropped: the table is abandoned.
        false
    }

    #[inline(always)]
    fn get(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Option<[u64; 2]> {
        Self::find(t, h, key).0.map(|i| [t[i][2], t[i][3]])
    }

    fn trace(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Trace {
        let (at, slots) = Self::find(t, h, key);
        // Both lines are read whatever the outcome.
        Trace {
            found: at.is_some(),
            slots,
            lines: 2,
        }
    }
}
