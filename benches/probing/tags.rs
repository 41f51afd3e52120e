//! `robin-hood-tags`: the Robin Hood table of `robin-hood`, with a tag byte
//! per slot in an array of its own, which lookups scan instead of keys.

use super::{Hasher, RobinHood, Scheme, Slot, Trace, home_of_hash, key_of};

/// A tag byte of an empty slot: zero, which `zero_bytes` finds.
const EMPTY_TAG: u8 = 0;
const _: () = assert!(EMPTY_TAG == 0 && PAD_TAG != EMPTY_TAG);

/// A tag byte past the table's last slot (padding of the last tag word):
/// never matches, never ends a probe.
const PAD_TAG: u8 = 1;

/// Every byte of a word set to 1.
const LO: u64 = 0x0101_0101_0101_0101;

/// Every byte of a word set to 0x7f.
const HI7: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// The tag of a hash: its low byte (the home comes from the high bits, so
/// the two are independent), never one of the two reserved tags.
#[inline(always)]
fn tag_of(hash: u64) -> u8 {
    let t = hash as u8;
    if t < 2 { t + 2 } else { t }
}

/// 0x80 in each byte of `x` that is zero, exactly (no carries between bytes).
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    !(((x & HI7) + HI7) | x | HI7)
}

/// Robin Hood placement, as `robin-hood` (the same slots, the same order),
/// plus a tag byte per slot in an array of its own: a lookup scans tags, 8 to
/// a word, from the key's home and compares keys only where the tag matches.
/// It stops at the first empty tag, or past the table's largest
/// displacement, which the writer keeps exactly (an insert hashes each
/// resident it shifts). The tags of 8 Mi slots are 8 MiB: at 10M entries they
/// mostly stay in cache, so a hit costs one slot line from memory.
pub(crate) struct RobinHoodTags {
    /// `ceil(n / 8)` words of tags; byte `j` of word `w` is slot `8w + j`.
    tags: Vec<u64>,
    /// Largest displacement of any entry.
    max_disp: usize,
}

impl RobinHoodTags {
    #[inline(always)]
    fn set_tag(&mut self, i: usize, tag: u8) {
        let (w, shift) = (i / 8, (i % 8) * 8);
        self.tags[w] = (self.tags[w] & !(0xff << shift)) | (u64::from(tag) << shift);
    }

    #[inline(always)]
    fn tag(&self, i: usize) -> u8 {
        (self.tags[i / 8] >> ((i % 8) * 8)) as u8
    }

    /// The slot of `key`, calling `seen(word)` for each tag word read and
    /// `compared(slot)` for each key compared.
    #[inline(always)]
    fn find(
        &self,
        t: &[Slot],
        h: &Hasher,
        key: [u64; 2],
        mut seen: impl FnMut(usize),
        mut compared: impl FnMut(usize),
    ) -> Option<usize> {
        let n = t.len();
        let hash = h.hash(key);
        let home = home_of_hash(hash, n);
        let wanted = u64::from(tag_of(hash)) * LO;
        let mut word = home / 8;
        let mut skip = home % 8;
        let mut scanned = 0;
        loop {
            seen(word);
            let w = self.tags[word];
            let after = !0u64 << (8 * skip);
            let empty = zero_bytes(w) & after;
            // Matches before the first empty tag only.
            let before_empty = if empty == 0 {
                !0
            } else {
                (empty & empty.wrapping_neg()) - 1
            };
            let mut m = zero_bytes(w ^ wanted) & after & before_empty;
            while m != 0 {
                let i = word * 8 + (m.trailing_zeros() / 8) as usize;
                compared(i);
                if key_of(&t[i]) == key {
                    return Some(i);
                }
                m &= m - 1;
            }
            // Slots covered (the padding past the last slot is none).
            scanned += ((word + 1) * 8).min(n) - (word * 8 + skip);
            if empty != 0 || scanned > self.max_disp {
                return None;
            }
            word += 1;
            if word * 8 >= n {
                word = 0;
            }
            skip = 0;
        }
    }
}

impl Scheme for RobinHoodTags {
    const NAME: &'static str = "robin-hood-tags";

    fn new(slots: usize) -> Self {
        let mut tags = vec![0u64; slots.div_ceil(8)];
        // Padding after the last slot.
        for i in slots..tags.len() * 8 {
            let (w, shift) = (i / 8, (i % 8) * 8);
            tags[w] |= u64::from(PAD_TAG) << shift;
        }
        RobinHoodTags { tags, max_disp: 0 }
    }

    fn insert(&mut self, t: &mut [Slot], h: &Hasher, key: [u64; 2], value: [u64; 2]) -> bool {
        let n = t.len();
        let mut max_disp = self.max_disp;
        let at = RobinHood::<1>::insert_shifting(t, h, key, value, |from, to, resident| {
            let moved = self.tag(from);
            self.set_tag(to, moved);
            let d = RobinHood::<1>::displacement(to, h.home(resident, n), n);
            max_disp = max_disp.max(d);
        });
        let hash = h.hash(key);
        self.set_tag(at, tag_of(hash));
        let d = RobinHood::<1>::displacement(at, home_of_hash(hash, n), n);
        self.max_disp = max_disp.max(d);
        true
    }

    #[inline(always)]
    fn get(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Option<[u64; 2]> {
        self.find(t, h, key, |_| {}, |_| {})
            .map(|i| [t[i][2], t[i][3]])
    }

    fn trace(&self, t: &[Slot], h: &Hasher, key: [u64; 2]) -> Trace {
        // Tag words live at `tag_base`, apart from the slots: 8 words a line.
        let mut tag_lines = Vec::new();
        let mut slot_lines = Vec::new();
        let mut slots = 0;
        let found = self
            .find(
                t,
                h,
                key,
                |w| tag_lines.push(w / 8),
                |i| {
                    slots += 1;
                    slot_lines.push(i / 2);
                },
            )
            .is_some();
        tag_lines.dedup();
        slot_lines.sort_unstable();
        slot_lines.dedup();
        Trace {
            found,
            slots,
            lines: tag_lines.len() + slot_lines.len(),
        }
    }
}
