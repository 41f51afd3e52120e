//! The entries both servers hold: `n` random v4 keys (the seed every bench
//! uses, `common::KEY_SEED`) and the value derived from each key's position
//! (`common::value_for`), so an answer is checked without a second array.

use std::sync::Arc;

use uuid::Uuid;

use crate::common::{KEY_SEED, random_keys, value_for};

/// The key set, shared by every caller.
pub struct Data {
    keys: Vec<Uuid>,
}

impl Data {
    /// `n` keys.
    pub fn new(n: usize) -> Arc<Data> {
        Arc::new(Data {
            keys: random_keys(n, KEY_SEED),
        })
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The `i`-th key, as 16 bytes.
    pub fn key(&self, i: usize) -> &[u8; 16] {
        self.keys[i].as_bytes()
    }

    /// The value stored for the `i`-th key.
    pub fn value(&self, i: usize) -> [u8; 16] {
        *value_for(i).as_bytes()
    }
}

/// A caller's own generator of key positions (xorshift64*): cheap enough
/// that the client spends its time on calls, and different per caller so
/// callers do not walk the index in step.
pub struct Picker {
    state: u64,
    n: u64,
}

impl Picker {
    /// A generator over `0..n` for caller number `caller`.
    pub fn new(n: usize, caller: usize) -> Picker {
        Picker {
            // Never zero (xorshift's fixed point).
            state: 0x9e37_79b9_7f4a_7c15 ^ ((caller as u64 + 1) << 17),
            n: n as u64,
        }
    }

    /// The next position, uniform over `0..n` (multiply-shift, no modulo).
    pub fn next(&mut self) -> usize {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let r = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((u128::from(r) * u128::from(self.n)) >> 64) as usize
    }
}
