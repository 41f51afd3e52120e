//! [`Key`]: a UUID the index can store as a key.
//!
//! The nil UUID marks empty slots and the max UUID is reserved as a marker,
//! so neither can be a key. A `Key` is made once, where a UUID enters the
//! system (the wire, the CLI, a WAL record or snapshot slot read from disk,
//! or the `Uuid`-taking methods of [`IndexWriter`](crate::IndexWriter)),
//! and the layers below take it without checking again.

use std::fmt;

use uuid::Uuid;

use super::index_error::KeyError;
use super::slot::{EMPTY_KEY, MAX_KEY, to_words};

/// A UUID that is neither nil nor max: one the index can store.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Uuid);

impl Key {
    /// `uuid` as a key, unless it is reserved.
    #[inline]
    pub fn new(uuid: Uuid) -> Result<Key, KeyError> {
        match to_words(&uuid) {
            EMPTY_KEY => Err(KeyError::Nil),
            MAX_KEY => Err(KeyError::Max),
            _ => Ok(Key(uuid)),
        }
    }

    /// The key's UUID.
    #[inline]
    pub const fn uuid(self) -> Uuid {
        self.0
    }

    /// The key's UUID, borrowed.
    #[inline]
    pub const fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

impl TryFrom<Uuid> for Key {
    type Error = KeyError;

    fn try_from(uuid: Uuid) -> Result<Key, KeyError> {
        Key::new(uuid)
    }
}

impl From<Key> for Uuid {
    fn from(key: Key) -> Uuid {
        key.0
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nil_and_max_are_refused_and_their_neighbours_are_keys() {
        assert_eq!(Key::new(Uuid::nil()), Err(KeyError::Nil));
        assert_eq!(Key::new(Uuid::max()), Err(KeyError::Max));
        for n in [1, u128::MAX - 1, 1 << 64, (1 << 64) - 1] {
            let uuid = Uuid::from_u128(n);
            let key = Key::try_from(uuid).unwrap();
            assert_eq!(key.uuid(), uuid);
            assert_eq!(Uuid::from(key), uuid);
            assert_eq!(key.to_string(), uuid.to_string());
        }
    }
}
