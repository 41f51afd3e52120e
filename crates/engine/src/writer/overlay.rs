//! [`Overlay`]: the writes the writer decided and has not applied yet, for
//! the compare-and-sets decided after them.
//!
//! Each write is recorded with the *tag* of the batch that made it: its
//! LSN on a single node (the WAL group commit), its proposal number on a
//! replica group's leader. Tags only grow between two [`Overlay::clear`]s,
//! and batches are retired (applied) in tag order; a key leaves the
//! overlay when the batch retired is the last one that wrote it.
//!
//! # Built only when read
//!
//! Most writes are plain puts and deletes, which never read the overlay.
//! So recording a write only pushes it on a list (a copy of 48 bytes), and
//! the map is built from that list the first time a compare-and-set asks
//! ([`Overlay::get`]). From then on writes go straight into the map, until
//! the map empties again (every write in it applied), when the overlay
//! goes back to the list.
//!
//! **Invariant:** a key's entry, when present, is the value the newest
//! recorded and not retired write left it with, and the tag of that write.

use std::collections::{HashMap, VecDeque};

use uuid::Uuid;

use crate::store::Op;
use uuidmap_index::Key;

/// Decided, not yet applied writes (module docs).
#[derive(Default)]
pub(super) struct Overlay {
    /// Recorded writes not folded into `map` yet, oldest first (empty
    /// while `map` is in use).
    list: VecDeque<(u64, Op)>,
    /// Each key's value after the newest write recorded for it (`None`:
    /// removed), and that write's tag.
    map: HashMap<Key, (Option<Uuid>, u64), ahash::RandomState>,
    /// Whether `map` holds every recorded write (it was read since it was
    /// last empty).
    built: bool,
}

impl Overlay {
    /// Records `ops`, the blind writes of the batch tagged `tag`, decided
    /// after every write recorded so far.
    pub(super) fn record(&mut self, ops: &[Op], tag: u64) {
        if self.built {
            for op in ops {
                self.map.insert(op.key(), (op.value(), tag));
            }
        } else {
            self.list.extend(ops.iter().map(|op| (tag, *op)));
        }
    }

    /// The batch tagged `tag`, whose writes were `ops`, is applied: they
    /// are in the index now, so the overlay forgets each key it was the
    /// last to write. Every batch with a smaller tag is applied already.
    pub(super) fn retire(&mut self, ops: &[Op], tag: u64) {
        if !self.built {
            while self.list.front().is_some_and(|&(t, _)| t <= tag) {
                self.list.pop_front();
            }
            return;
        }
        for op in ops {
            let key = op.key();
            if self.map.get(&key).is_some_and(|&(_, t)| t == tag) {
                self.map.remove(&key);
            }
        }
        if self.map.is_empty() {
            self.built = false;
        }
    }

    /// The value `key` has after the recorded writes: `None` if none of
    /// them wrote it, `Some(None)` if the last one removed it.
    pub(super) fn get(&mut self, key: Key) -> Option<Option<Uuid>> {
        if !self.built {
            for (tag, op) in self.list.drain(..) {
                self.map.insert(op.key(), (op.value(), tag));
            }
            self.built = true;
        }
        self.map.get(&key).map(|&(value, _)| value)
    }

    /// Forgets every recorded write (they were dropped: a failed group, a
    /// lost leadership).
    pub(super) fn clear(&mut self) {
        self.list.clear();
        self.map.clear();
        self.built = false;
    }

    /// Whether no write is recorded.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty() && self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> Key {
        Key::new(Uuid::from_bytes([n; 16])).unwrap()
    }

    fn put(k: u8, v: u8) -> Op {
        Op::Put {
            key: key(k),
            value: Uuid::from_bytes([v; 16]),
        }
    }

    fn val(v: u8) -> Option<Option<Uuid>> {
        Some(Some(Uuid::from_bytes([v; 16])))
    }

    #[test]
    fn a_read_sees_the_newest_write_and_a_retired_batch_only_drops_its_own_keys() {
        for read_early in [false, true] {
            let mut o = Overlay::default();
            o.record(&[put(1, 10), put(2, 20)], 5);
            if read_early {
                assert_eq!(o.get(key(1)), val(10));
            }
            o.record(&[put(1, 11), Op::Delete { key: key(3) }], 6);
            assert_eq!(o.get(key(1)), val(11));
            assert_eq!(o.get(key(3)), Some(None));
            assert_eq!(o.get(key(4)), None);
            o.retire(&[put(1, 10), put(2, 20)], 5);
            // Key 1 was written again by batch 6: it stays.
            assert_eq!(o.get(key(1)), val(11));
            assert_eq!(o.get(key(2)), None);
            o.retire(&[put(1, 11), Op::Delete { key: key(3) }], 6);
            assert!(o.is_empty());
            assert_eq!(o.get(key(1)), None);
        }
    }

    #[test]
    fn unread_writes_leave_the_list_as_their_batches_are_retired() {
        let mut o = Overlay::default();
        o.record(&[put(1, 10)], 1);
        o.record(&[put(2, 20)], 2);
        o.retire(&[put(1, 10)], 1);
        assert_eq!(o.list.len(), 1);
        assert_eq!(o.get(key(1)), None);
        assert_eq!(o.get(key(2)), val(20));
        o.retire(&[put(2, 20)], 2);
        assert!(o.is_empty());
        // Empty again: the next writes go on the list.
        o.record(&[put(3, 30)], 3);
        assert_eq!(o.list.len(), 1);
        o.clear();
        assert!(o.is_empty());
        assert_eq!(o.get(key(3)), None);
    }
}
