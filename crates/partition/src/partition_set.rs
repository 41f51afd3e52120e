//! `PartitionSet`: a set of partitions, one bit each (512 bytes), for
//! filtering a scan by the partition of each key.

use crate::{PARTITIONS, PartitionId, partition_of};

/// A set of partitions.
#[derive(Clone, PartialEq, Eq)]
pub struct PartitionSet {
    bits: Box<[u64; PARTITIONS as usize / 64]>,
}

impl std::fmt::Debug for PartitionSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PartitionSet({} partitions)", self.len())
    }
}

impl Default for PartitionSet {
    fn default() -> Self {
        PartitionSet {
            bits: Box::new([0; PARTITIONS as usize / 64]),
        }
    }
}

impl FromIterator<PartitionId> for PartitionSet {
    fn from_iter<I: IntoIterator<Item = PartitionId>>(iter: I) -> Self {
        let mut set = PartitionSet::default();
        for p in iter {
            set.insert(p);
        }
        set
    }
}

impl PartitionSet {
    /// Adds `p`.
    pub fn insert(&mut self, p: PartitionId) {
        let n = usize::from(p.get());
        self.bits[n / 64] |= 1 << (n % 64);
    }

    /// Whether `p` is in the set.
    #[inline]
    pub fn contains(&self, p: PartitionId) -> bool {
        let n = usize::from(p.get());
        self.bits[n / 64] & (1 << (n % 64)) != 0
    }

    /// Whether `key`'s partition is in the set.
    #[inline]
    pub fn contains_key(&self, key: &[u8; 16]) -> bool {
        self.contains(partition_of(key))
    }

    /// How many partitions are in the set.
    pub fn len(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|w| *w == 0)
    }

    /// The partitions, in order.
    pub fn iter(&self) -> impl Iterator<Item = PartitionId> + '_ {
        PartitionId::all().filter(|p| self.contains(*p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_holds_exactly_what_was_put_in() {
        let ps: Vec<PartitionId> = [0, 63, 64, 4095]
            .iter()
            .map(|n| PartitionId::new(*n).unwrap())
            .collect();
        let set: PartitionSet = ps.iter().copied().collect();
        assert_eq!(set.len(), 4);
        assert_eq!(set.iter().collect::<Vec<_>>(), ps);
        assert!(!set.contains(PartitionId::new(1).unwrap()));
        assert!(PartitionSet::default().is_empty());
    }
}
