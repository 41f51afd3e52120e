//! Bad input is refused with a typed error, never a panic: reserved keys,
//! impossible build options, bad splits, malformed or foreign scan cursors,
//! mismatched batch slices.

use proptest::prelude::*;
use uuid::Uuid;
use uuidmap_index::scan::CURSOR_BYTES;
use uuidmap_index::{
    BuildError, HashSeeds, MAX_CAPACITY, MAX_SEGMENTS, ScanCursor, ScanError, Scanner,
};
use uuidmap_index::{CasError, Index, KeyError};

/// Offsets in the cursor encoding (see `ScanCursor::to_bytes`).
const NEXT_SEGMENT: usize = 1;
const END_SEGMENT: usize = 5;
const SEGMENTS: usize = 9;
const AFTER_FLAG: usize = 21;
const AFTER_KEY: usize = 22;

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// A small index with fixed seeds holding keys `1..=n`.
fn filled(seeds: [u64; 4], segments: usize, n: u128) -> Index {
    let (mut w, index) = Index::builder()
        .segments(segments)
        .seeds(HashSeeds(seeds))
        .build()
        .expect("valid index");
    for k in 1..=n {
        w.insert(Uuid::from_u128(k), Uuid::from_u128(k + 1000))
            .expect("valid key");
    }
    index
}

#[test]
fn reserved_keys_are_refused_by_insert_and_cas_and_absent_for_get_and_remove() {
    let (mut w, index) = Index::with_capacity(16);
    let v = Uuid::from_u128(5);
    for (k, e) in [(Uuid::nil(), KeyError::Nil), (Uuid::max(), KeyError::Max)] {
        assert_eq!(w.insert(k, v), Err(e));
        for (expected, new) in [
            (None, Some(v)),
            (Some(v), None),
            (None, None),
            (Some(v), Some(v)),
        ] {
            assert_eq!(
                w.compare_and_set(k, expected, new),
                Err(CasError::Key(e)),
                "cas {expected:?} -> {new:?}"
            );
        }
        assert_eq!(w.remove(&k), None);
        assert_eq!(w.get(&k), None);
        assert_eq!(index.get(&k), None);
        let mut out = [Some(v)];
        index.get_many(&[k], &mut out);
        assert_eq!(out, [None]);
    }
    assert_eq!(index.len(), 0);
    assert_eq!(index.scan().count(), 0);
    // The error messages name the problem.
    assert!(KeyError::Nil.to_string().contains("nil"));
    assert!(CasError::Key(KeyError::Max).to_string().contains("max"));
}

#[test]
fn reserved_uuids_are_ordinary_values() {
    let (mut w, index) = Index::with_capacity(16);
    let k = Uuid::from_u128(9);
    assert_eq!(w.insert(k, Uuid::nil()), Ok(None));
    assert_eq!(index.get(&k), Some(Uuid::nil()));
    assert_eq!(
        w.compare_and_set(k, Some(Uuid::nil()), Some(Uuid::max())),
        Ok(())
    );
    assert_eq!(index.get(&k), Some(Uuid::max()));
    assert_eq!(index.scan().collect::<Vec<_>>(), [(k, Uuid::max())]);
    assert_eq!(w.remove(&k), Some(Uuid::max()));
}

#[test]
fn impossible_capacities_are_build_errors() {
    for capacity in [usize::MAX, MAX_CAPACITY + 1] {
        let err = Index::builder().capacity(capacity).build().err();
        assert_eq!(
            err,
            Some(BuildError::CapacityTooLarge {
                requested: capacity,
                max: MAX_CAPACITY,
            })
        );
    }
}

/// A capacity the index supports but this machine cannot hold is refused up
/// front (tables are prefaulted, so accepting it would summon the OOM killer).
#[test]
fn capacities_beyond_physical_memory_are_build_errors_and_with_capacity_falls_back() {
    // MAX_CAPACITY entries need over 2 TB of tables: no test machine has that.
    match Index::builder().capacity(MAX_CAPACITY).build() {
        Err(BuildError::MoreThanMemory { bytes, physical }) => {
            assert!(bytes > physical, "{bytes} <= {physical}");
            assert!(bytes >= MAX_CAPACITY * 32);
        }
        other => panic!("expected MoreThanMemory, got {:?}", other.err()),
    }
    let (mut w, index) = Index::with_capacity(MAX_CAPACITY);
    assert_eq!(w.insert(Uuid::from_u128(5), Uuid::from_u128(6)), Ok(None));
    assert_eq!(index.get(&Uuid::from_u128(5)), Some(Uuid::from_u128(6)));
}

#[test]
fn segment_counts_that_are_zero_not_a_power_of_two_or_too_many_are_build_errors() {
    for segments in [0, 3, 6, 1000, MAX_SEGMENTS * 2, 1 << 20, usize::MAX] {
        let err = Index::builder().segments(segments).build().err();
        assert_eq!(
            err,
            Some(BuildError::BadSegmentCount {
                requested: segments,
                max: MAX_SEGMENTS,
            }),
            "{segments} segments"
        );
    }
    for segments in [1, 2, 4, 128] {
        let (_, index) = Index::builder()
            .segments(segments)
            .build()
            .expect("power of two");
        assert_eq!(index.segment_count(), segments);
    }
}

#[test]
fn with_capacity_of_usize_max_falls_back_to_a_working_index() {
    let (mut w, index) = Index::with_capacity(usize::MAX);
    for k in 1..=1000u128 {
        assert_eq!(w.insert(Uuid::from_u128(k), Uuid::from_u128(k)), Ok(None));
    }
    assert_eq!(index.len(), 1000);
    assert_eq!(index.get(&Uuid::from_u128(77)), Some(Uuid::from_u128(77)));
    assert_eq!(index.scan().count(), 1000);
}

#[test]
fn bad_splits_are_scan_errors() {
    let index = filled([1, 2, 3, 4], 8, 100);
    for (split, splits) in [
        (0, 0),
        (1, 0),
        (1, 1),
        (5, 5),
        (6, 5),
        (u32::MAX, u32::MAX),
        (u32::MAX, 1),
    ] {
        assert_eq!(
            index.scan_cursor(split, splits),
            Err(ScanError::BadSplit { split, splits }),
            "split {split} of {splits}"
        );
    }
    // The largest valid splits work (and are empty or small).
    let mut total = 0;
    for split in [0, 1, u32::MAX - 2, u32::MAX - 1] {
        let cursor = index.scan_cursor(split, u32::MAX).expect("valid split");
        total += Scanner::new(index.clone(), cursor, None)
            .expect("own cursor")
            .count();
    }
    assert!(total <= 100);
}

#[test]
fn malformed_cursor_bytes_are_errors() {
    let index = filled([1, 2, 3, 4], 8, 100);
    let good = index.scan_cursor(1, 3).expect("valid").to_bytes();
    assert!(ScanCursor::from_bytes(&good).is_ok());
    let malformed = |b: &[u8]| matches!(ScanCursor::from_bytes(b), Err(ScanError::Malformed(_)));

    // Wrong lengths.
    assert!(malformed(&[]));
    assert!(malformed(&good[..good.len() - 1]));
    let mut longer = good.to_vec();
    longer.push(0);
    assert!(malformed(&longer));
    assert!(malformed(&[0xff; 1000]));

    // Unknown format.
    for format in [0u8, 2, 0xff] {
        let mut b = good;
        b[0] = format;
        assert!(malformed(&b), "format {format}");
    }

    // Resume-key flag other than 0/1, or a key behind flag 0.
    let mut b = good;
    b[AFTER_FLAG] = 2;
    assert!(malformed(&b));
    let mut b = good;
    b[AFTER_KEY + 3] = 1;
    assert!(malformed(&b));

    // Segment positions out of range.
    let mut b = good;
    put_u32(&mut b, END_SEGMENT, 9); // past the 8 segments
    assert!(malformed(&b));
    let mut b = good;
    put_u32(&mut b, NEXT_SEGMENT, 7);
    put_u32(&mut b, END_SEGMENT, 5); // next > end
    assert!(malformed(&b));
    let mut b = good;
    put_u32(&mut b, NEXT_SEGMENT, u32::MAX);
    put_u32(&mut b, END_SEGMENT, u32::MAX);
    assert!(
        malformed(&b),
        "positions past the cursor's own segment count"
    );

    // Errors say what is wrong.
    assert!(ScanError::Malformed("x").to_string().contains("malformed"));
}

#[test]
fn cursors_of_another_layout_are_refused_as_foreign() {
    let a = filled([1, 2, 3, 4], 8, 100);
    let other_seeds = filled([1, 2, 3, 5], 8, 100);
    let other_segments = filled([1, 2, 3, 4], 16, 100);
    let cursor = a.scan_cursor(0, 2).expect("valid");
    // Also after a round trip through bytes, and mid-segment.
    let mut scanner = Scanner::new(a.clone(), cursor.clone(), None).expect("own");
    let mut page = Vec::new();
    scanner.next_page(3, &mut page);
    let resumed =
        ScanCursor::from_bytes(&scanner.cursor().to_bytes()).expect("own cursor bytes decode");
    for c in [cursor, resumed] {
        for other in [&other_seeds, &other_segments] {
            let err = Scanner::new(other.clone(), c.clone(), None).err();
            assert!(
                matches!(err, Some(ScanError::ForeignCursor { .. })),
                "{err:?}"
            );
        }
    }
    let err = Scanner::new(other_segments.clone(), a.scan_cursor(0, 1).unwrap(), None)
        .err()
        .expect("foreign");
    assert!(err.to_string().contains("restart the scan"), "{err}");
}

#[test]
fn cursors_carry_over_to_an_index_with_the_same_seeds_and_segment_count() {
    // Same layout (a restored snapshot): the cursor is accepted and the two
    // halves of a scan, one on each index, cover the data once.
    let a = filled([9, 8, 7, 6], 4, 200);
    let b = filled([9, 8, 7, 6], 4, 200);
    let mut first = Scanner::new(a.clone(), a.scan_cursor(0, 1).unwrap(), None).unwrap();
    let mut seen = Vec::new();
    first.next_page(77, &mut seen);
    let bytes = first.cursor().to_bytes();
    let cursor = ScanCursor::from_bytes(&bytes).expect("decodes");
    let rest = Scanner::new(b.clone(), cursor, None).expect("same layout");
    seen.extend(rest);
    let mut keys: Vec<u128> = seen.iter().map(|(k, _)| k.as_u128()).collect();
    keys.sort_unstable();
    assert_eq!(keys, (1..=200).collect::<Vec<_>>());
}

#[test]
fn get_many_with_mismatched_lengths_answers_the_common_prefix() {
    let (mut w, index) = Index::with_capacity(100);
    for k in 1..=50u128 {
        w.insert(Uuid::from_u128(k), Uuid::from_u128(k * 10))
            .expect("valid key");
    }
    let keys: Vec<Uuid> = (1..=40u128).map(Uuid::from_u128).collect();
    let sentinel = Some(Uuid::from_u128(0x5e47));

    // More keys than answers.
    let mut out = vec![sentinel; 21];
    index.get_many(&keys, &mut out);
    for (i, got) in out.iter().enumerate() {
        assert_eq!(*got, Some(Uuid::from_u128((i as u128 + 1) * 10)));
    }

    // More answers than keys: the tail is untouched.
    let mut out = vec![sentinel; 60];
    index.get_many(&keys[..17], &mut out);
    for (i, got) in out.iter().enumerate() {
        let want = if i < 17 {
            Some(Uuid::from_u128((i as u128 + 1) * 10))
        } else {
            sentinel
        };
        assert_eq!(*got, want, "answer {i}");
    }

    // Empty on either side.
    index.get_many(&[], &mut out);
    index.get_many(&keys, &mut []);
    assert_eq!(out[17], sentinel);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any bytes decode to a cursor or an error, never a panic; a decoded
    /// cursor re-encodes to the same bytes.
    #[test]
    fn arbitrary_bytes_never_panic_from_bytes(bytes in prop_oneof![
        prop::collection::vec(any::<u8>(), 0..80),
        // The right length and format, so the field checks are reached.
        prop::collection::vec(any::<u8>(), CURSOR_BYTES).prop_map(|mut b| {
            b[0] = 1;
            b
        }),
    ]) {
        if let Ok(c) = ScanCursor::from_bytes(&bytes) {
            prop_assert_eq!(&c.to_bytes()[..], &bytes[..]);
        }
    }

    /// Real cursors (any split of the index, resumed after any key, or
    /// finished) decode back to themselves: the random bytes above almost
    /// never decode, so this is what reaches the decoder's success path.
    #[test]
    fn valid_cursor_bytes_decode_to_the_same_cursor(
        splits in 1u32..64,
        split_seed in any::<u32>(),
        after in proptest::option::of(any::<u128>()),
    ) {
        let index = filled([1, 2, 3, 4], 8, 10);
        let split = split_seed % splits;
        let mut cursor = index.scan_cursor(split, splits).expect("a valid split");
        // A split past the segment count is empty: a finished cursor, which
        // has nothing to resume.
        if let Some(k) = after.filter(|_| !cursor.is_done()) {
            cursor = cursor.resume_after(Uuid::from_u128(k));
        }
        let bytes = cursor.to_bytes();
        let decoded = ScanCursor::from_bytes(&bytes);
        prop_assert!(decoded.is_ok(), "{:?}", decoded);
        prop_assert_eq!(decoded.unwrap().to_bytes(), bytes);
    }

    /// Cursors of the right length and format, with arbitrary positions and
    /// resume keys, are refused or scan without panicking; with the index's
    /// own layout they scan only within the index.
    #[test]
    fn arbitrary_cursor_fields_never_panic_a_scan(
        next in prop_oneof![0u32..10, any::<u32>()],
        end in prop_oneof![0u32..10, any::<u32>()],
        segments in prop_oneof![Just(8u32), 0u32..20, any::<u32>()],
        own_tag in any::<bool>(),
        tag in any::<u64>(),
        after in proptest::option::of(any::<u128>()),
        limit in 1usize..50,
    ) {
        let index = filled([1, 2, 3, 4], 8, 100);
        let mut b = index.scan_cursor(0, 1).expect("valid").to_bytes();
        put_u32(&mut b, NEXT_SEGMENT, next);
        put_u32(&mut b, END_SEGMENT, end);
        put_u32(&mut b, SEGMENTS, segments);
        if !own_tag {
            b[13..21].copy_from_slice(&tag.to_le_bytes());
        }
        if let Some(k) = after {
            b[AFTER_FLAG] = 1;
            b[AFTER_KEY..].copy_from_slice(&k.to_be_bytes());
        }
        let Ok(cursor) = ScanCursor::from_bytes(&b) else {
            return Ok(());
        };
        prop_assert!(next <= end && end <= segments);
        match Scanner::new(index.clone(), cursor, None) {
            Err(ScanError::ForeignCursor { .. }) => {
                prop_assert!(segments != 8 || !own_tag);
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
            Ok(mut scanner) => {
                let mut out = Vec::new();
                while scanner.next_page(limit, &mut out) > 0 {
                    prop_assert!(out.len() <= 100);
                }
                prop_assert!(scanner.cursor().is_done());
                for (k, v) in out {
                    prop_assert_eq!(index.get(&k), Some(v));
                }
            }
        }
    }
}
