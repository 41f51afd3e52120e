//! The one deterministic data generator of the tests and the benches:
//! splitmix64 (Steele, Lea and Flood), as a stateless mixer ([`mix`]) and as
//! a stream ([`SplitMix64`]). Counters go in, keys and values that hash like
//! random ones come out, and a failing run can be replayed from its seed.

/// splitmix64 of `x`: one step of the generator from state `x`. Spreads
/// small inputs (counters, seeds) over the whole 64-bit space.
pub const fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// splitmix64 as a stream: `next` advances the state and mixes it.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next number of the stream.
    pub fn next_u64(&mut self) -> u64 {
        let z = mix(self.0);
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_splitmix64_sequence() {
        // The first outputs of splitmix64 seeded with 1234567, from the
        // reference implementation (prng.di.unimi.it/splitmix64.c).
        let mut s = SplitMix64(1234567);
        assert_eq!(s.next_u64(), 6457827717110365317);
        assert_eq!(s.next_u64(), 3203168211198807973);
        assert_eq!(s.next_u64(), 9817491932198370423);
    }
}
