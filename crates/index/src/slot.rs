//! The 32-byte slot: the unit of storage in memory, in snapshots and on the wire.
//!
//! A slot is a key UUID followed by a value UUID, both as raw bytes. The slot
//! arrays of the live index hold exactly these bytes (read and written as four
//! `u64` words through atomics), so an array can be written to a file and used
//! again straight from an mmap of that file with no conversion.
//!
//! Reserved keys: the nil UUID (all zeros) marks an empty slot, and the max UUID
//! (all ones) is kept back as a marker for future use (tombstones, cursors).
//! Neither is accepted as a key ([`Key`](crate::Key) holds the rule); values
//! are unrestricted.

use bytemuck::{Pod, Zeroable};
use uuid::Uuid;

/// One entry as it lies in a slot array: key bytes, then value bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Pod, Zeroable)]
#[repr(C)]
pub struct Slot {
    /// Key UUID bytes; all zeros means the slot is empty.
    pub key: [u8; 16],
    /// Value UUID bytes, unrestricted.
    pub value: [u8; 16],
}

const _: () = assert!(size_of::<Slot>() == 32);

/// Number of `u64` words in one slot.
pub(crate) const SLOT_WORDS: usize = 4;

/// A key as the two native-endian words it occupies in a slot.
pub(crate) type KeyWords = [u64; 2];

/// The key words of an empty slot (the nil UUID).
pub(crate) const EMPTY_KEY: KeyWords = [0, 0];

/// The key words of the max UUID, reserved.
pub(crate) const MAX_KEY: KeyWords = [u64::MAX, u64::MAX];

/// Splits 16 UUID bytes into the two words they occupy in memory.
#[inline]
pub(crate) fn to_words(uuid: &Uuid) -> [u64; 2] {
    let b = uuid.as_bytes();
    let (lo, hi) = b.split_at(8);
    [
        u64::from_ne_bytes(lo.try_into().expect("8 bytes")),
        u64::from_ne_bytes(hi.try_into().expect("8 bytes")),
    ]
}

/// Joins two in-memory words back into a UUID.
#[inline]
pub(crate) fn from_words(words: [u64; 2]) -> Uuid {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&words[0].to_ne_bytes());
    b[8..].copy_from_slice(&words[1].to_ne_bytes());
    Uuid::from_bytes(b)
}

impl Slot {
    /// Builds a slot from a key and a value.
    pub fn new(key: Uuid, value: Uuid) -> Self {
        Slot {
            key: key.into_bytes(),
            value: value.into_bytes(),
        }
    }

    /// The key as a UUID.
    pub fn key(&self) -> Uuid {
        Uuid::from_bytes(self.key)
    }

    /// The value as a UUID.
    pub fn value(&self) -> Uuid {
        Uuid::from_bytes(self.value)
    }

    /// Whether this slot is empty (nil key).
    pub fn is_empty(&self) -> bool {
        self.key == [0; 16]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_preserves_bytes() {
        let u = Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(from_words(to_words(&u)), u);
        // A slot's first two words are exactly the key's bytes.
        let s = Slot::new(u, Uuid::from_u128(7));
        let w: [u64; SLOT_WORDS] = bytemuck::cast(s);
        assert_eq!(from_words([w[0], w[1]]), u);
        assert_eq!(from_words([w[2], w[3]]), Uuid::from_u128(7));
    }
}
