//! `SCAN` over the index's exact-once scan, with the 64-bit cursors Redis
//! clients expect (`redis-cli` and `redis-py` read the cursor as an
//! unsigned number).
//!
//! # The cursor
//!
//! `segment << 32 | prefix`: the scan goes on in segment `segment` with the
//! keys whose first four bytes, read big-endian, are at least `prefix`.
//! `0` starts a scan, and a reply's cursor `0` ends it, as in Redis.
//!
//! # Exactly once
//!
//! Each segment's remaining keys are copied in one consistent copy (the
//! index's scan, under the segment's seqlock) and handed out in key order.
//! A reply ends either at the end of a segment or after *every* key of the
//! copy that shares the first four bytes of the last one handed out (a
//! reply may hold a few more keys than `COUNT` asks: `COUNT` is a hint, as
//! in Redis), so the next cursor names a prefix boundary: the keys before
//! it were all handed out, the keys from it on were not. A key lives in one
//! segment for ever. So a key present for the whole scan is returned
//! exactly once, and no key is returned twice; keys added or removed during
//! the scan may or may not appear (the index's scan contract). Redis
//! promises only "at least once".
//!
//! # The copy kept between replies
//!
//! A connection keeps the sorted rest of the segment its last reply ended
//! in (keys only, at most one segment's). When the next `SCAN` names the
//! cursor that reply gave, it goes on from that rest instead of copying
//! the segment again: a rest is what a new copy would give for every key
//! present throughout, which is all the contract asks. Any other cursor
//! copies the segment again.

use uuid::Uuid;
use uuidmap_index::{Index, ScanCursor, Scanner};

/// A `SCAN` cursor that names no place in this index.
#[derive(Debug, thiserror::Error)]
#[error("ERR invalid cursor")]
pub struct InvalidCursor;

/// The sorted keys of a segment not yet handed out, after a reply.
pub struct SegmentRest {
    /// The cursor the reply gave, which resumes here.
    cursor: u64,
    /// The segment's keys from that cursor on, sorted.
    keys: Vec<Uuid>,
    /// `keys[pos..]` are not handed out yet.
    pos: usize,
}

/// The first four bytes of `key`, big-endian: the cursor's prefix.
fn prefix(key: &Uuid) -> u32 {
    let b = key.as_bytes();
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The segment and prefix `cursor` names, checked against `segments`.
fn split(cursor: u64, segments: usize) -> Result<(u32, u32), InvalidCursor> {
    let segment = cursor >> 32;
    if segment >= segments as u64 {
        return Err(InvalidCursor);
    }
    Ok((segment as u32, cursor as u32))
}

/// Copies the keys of `segment` whose prefix is at least `from`, sorted.
/// One consistent copy of the segment (may spin briefly under writes):
/// call it off the async workers.
pub fn copy_rest(index: &Index, segment: u32, from: u32) -> Vec<Uuid> {
    let segments = index.segment_count() as u32;
    let mut cursor: ScanCursor = index
        .scan_cursor(segment, segments)
        .expect("a segment of the index is a valid split");
    if from > 0 {
        // The greatest key of the prefix below: the scan returns the keys
        // after it, which are exactly those of prefix `from` or more.
        let mut below = [0xffu8; 16];
        below[..4].copy_from_slice(&(from - 1).to_be_bytes());
        cursor = cursor.resume_after(Uuid::from_bytes(below));
    }
    let mut scanner = Scanner::new(index.clone(), cursor, None).expect("the index's own cursor");
    let mut entries = Vec::new();
    while scanner.next_segment(&mut entries).is_some() {}
    let mut keys: Vec<Uuid> = entries.into_iter().map(|(k, _)| k).collect();
    keys.sort_unstable();
    keys
}

/// Where a reply stands while it is filled.
pub enum Step {
    /// The reply needs the rest of `segment` from prefix `from`: copy it
    /// ([`copy_rest`]) and call [`Page::take`] again.
    Copy {
        /// The segment.
        segment: u32,
        /// The first prefix.
        from: u32,
    },
    /// The reply is full; its cursor (0: the scan is done).
    Done(u64),
}

/// One `SCAN` reply being filled.
pub struct Page {
    /// The keys of the reply.
    pub keys: Vec<Uuid>,
    /// The keys it wants (at least one).
    count: usize,
    /// Where it stands: the next segment and prefix.
    segment: u32,
    from: u32,
    segments: u32,
}

impl Page {
    /// A reply from `cursor` wanting about `count` keys, in an index of
    /// `segments` segments.
    pub fn new(cursor: u64, count: usize, segments: usize) -> Result<Page, InvalidCursor> {
        let (segment, from) = split(cursor, segments)?;
        Ok(Page {
            keys: Vec::new(),
            count: count.max(1),
            segment,
            from,
            segments: segments as u32,
        })
    }

    /// The cursor the reply stands at now.
    fn cursor(&self) -> u64 {
        (u64::from(self.segment) << 32) | u64::from(self.from)
    }

    /// Fills the reply from `kept` (the connection's rest, used if it
    /// resumes at this reply's place) and from `copied` (the rest just
    /// copied for the place [`Step::Copy`] named). Leaves in `kept` the
    /// rest the reply ended in, if any.
    pub fn take(&mut self, kept: &mut Option<SegmentRest>, copied: Option<Vec<Uuid>>) -> Step {
        let mut copied = copied;
        loop {
            if self.segment >= self.segments {
                return Step::Done(0);
            }
            let mut rest = match (kept.take(), copied.take()) {
                (Some(k), _) if k.cursor == self.cursor() => k,
                (_, Some(keys)) => SegmentRest {
                    cursor: self.cursor(),
                    keys,
                    pos: 0,
                },
                _ => {
                    return Step::Copy {
                        segment: self.segment,
                        from: self.from,
                    };
                }
            };
            let room = self.count.saturating_sub(self.keys.len());
            let left = &rest.keys[rest.pos..];
            if left.len() <= room {
                self.keys.extend_from_slice(left);
                self.segment += 1;
                self.from = 0;
                if self.keys.len() >= self.count {
                    let done = self.segment >= self.segments;
                    return Step::Done(if done { 0 } else { self.cursor() });
                }
                continue;
            }
            // End after every key sharing the last one's prefix.
            let last = prefix(&left[room - 1]);
            let end = room + left[room..].partition_point(|k| prefix(k) == last);
            self.keys.extend_from_slice(&left[..end]);
            if end == left.len() {
                self.segment += 1;
                self.from = 0;
                let done = self.segment >= self.segments;
                return Step::Done(if done { 0 } else { self.cursor() });
            }
            // The next key has a greater prefix, so `last + 1` fits.
            self.from = last + 1;
            rest.pos += end;
            rest.cursor = self.cursor();
            *kept = Some(rest);
            return Step::Done(self.cursor());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Scans `index` to the end with `count`, copying as the connection
    /// does, and returns every key handed out (duplicates kept).
    fn scan_all(index: &Index, count: usize) -> Vec<Uuid> {
        let mut kept = None;
        let mut cursor = 0;
        let mut all = Vec::new();
        loop {
            let mut page = Page::new(cursor, count, index.segment_count()).unwrap();
            let mut copied = None;
            let next = loop {
                match page.take(&mut kept, copied.take()) {
                    Step::Copy { segment, from } => copied = Some(copy_rest(index, segment, from)),
                    Step::Done(c) => break c,
                }
            };
            all.extend(page.keys);
            if next == 0 {
                return all;
            }
            cursor = next;
        }
    }

    #[test]
    fn a_scan_returns_every_key_exactly_once_at_any_count() {
        let (mut writer, index) = Index::with_capacity(5000);
        // Keys that share their first four bytes in runs, to cross the
        // prefix boundaries.
        let keys: Vec<Uuid> = (1..=3000u128)
            .map(|i| Uuid::from_u128(((i / 3) << 96) | i))
            .collect();
        for k in &keys {
            writer.insert(*k, *k).unwrap();
        }
        let want: HashSet<Uuid> = keys.iter().copied().collect();
        for count in [1, 2, 7, 10, 1000, 100_000] {
            let got = scan_all(&index, count);
            assert_eq!(got.len(), keys.len(), "count {count}");
            assert_eq!(got.iter().copied().collect::<HashSet<_>>(), want);
        }
    }

    #[test]
    fn a_cursor_resumes_without_the_kept_rest_and_a_foreign_one_is_refused() {
        let (mut writer, index) = Index::with_capacity(1000);
        for i in 1..=500u128 {
            writer
                .insert(Uuid::from_u128(i << 64), Uuid::nil())
                .unwrap();
        }
        let mut kept = None;
        let mut page = Page::new(0, 10, index.segment_count()).unwrap();
        let mut copied = None;
        let cursor = loop {
            match page.take(&mut kept, copied.take()) {
                Step::Copy { segment, from } => copied = Some(copy_rest(&index, segment, from)),
                Step::Done(c) => break c,
            }
        };
        // Resuming from the cursor alone (another connection) hands out
        // the keys after the first page, once each.
        let mut rest = HashSet::new();
        let mut c = cursor;
        let mut none = None;
        while c != 0 {
            let mut p = Page::new(c, 10, index.segment_count()).unwrap();
            let mut copied = None;
            c = loop {
                match p.take(&mut none, copied.take()) {
                    Step::Copy { segment, from } => copied = Some(copy_rest(&index, segment, from)),
                    Step::Done(c) => break c,
                }
            };
            none = None;
            for k in p.keys {
                assert!(rest.insert(k));
            }
        }
        assert_eq!(rest.len() + page.keys.len(), 500);
        let past = (index.segment_count() as u64) << 32;
        assert!(Page::new(past, 10, index.segment_count()).is_err());
    }
}
