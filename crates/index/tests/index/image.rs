//! Segment images: a raw copy of every segment, lent back to a new index,
//! gives the same map, and the restored index keeps working (writes, growth).

use std::ptr::NonNull;
use std::sync::Arc;

use uuid::Uuid;
use uuidmap_index::{ExternalSlots, ExternalTags, LentMemory, RestoredSegment, StoredTags};
use uuidmap_index::{Index, IndexBuilder};

use crate::data::mix;

fn key(i: u64) -> Uuid {
    Uuid::from_u128(((mix(i) as u128) << 64) | mix(i ^ 0xabc) as u128 | 1)
}

/// Copies every segment and rebuilds an index around the copies, with the
/// copied tags.
fn restore_copy(index: &Index) -> (uuidmap_index::IndexWriter, Index, Vec<u64>) {
    restore_copy_as(index, |generation| generation, true)
}

/// [`restore_copy`], with each segment's growth generation replaced by
/// `generation(its own)`, and the tags taken from the copies or rebuilt.
fn restore_copy_as(
    index: &Index,
    generation: impl Fn(u32) -> u32,
    stored_tags: bool,
) -> (uuidmap_index::IndexWriter, Index, Vec<u64>) {
    let mut restored = Vec::new();
    let mut stamps = Vec::new();
    for s in 0..index.segment_count() {
        let mut words = Vec::new();
        let image = index.copy_segment_raw(s, &mut words);
        assert_eq!(words.len(), image.capacity * 4 + image.tag_words);
        assert_eq!(image.tag_words, image.capacity.div_ceil(8));
        stamps.push(image.stamp);
        let tag_bytes: Vec<u8> = bytemuck::cast_slice(&words[image.capacity * 4..]).to_vec();
        let tags = stored_tags.then(|| {
            StoredTags::from_le_bytes(image.capacity, &tag_bytes, image.max_disp as u64).unwrap()
        });
        words.truncate(image.capacity * 4);
        let mut memory: Box<[u64]> = words.into_boxed_slice();
        let ptr = NonNull::new(memory.as_mut_ptr().cast::<u8>()).unwrap();
        let keepalive: Arc<dyn Send + Sync> = Arc::new(memory);
        // SAFETY: the boxed words are 8-aligned, `capacity * 32` bytes, kept
        // alive by `keepalive`, and used by nothing else.
        let memory = unsafe { LentMemory::new(ptr, image.capacity * 4, keepalive) };
        let slots = ExternalSlots::new(memory, image.capacity).unwrap();
        restored.push(RestoredSegment {
            slots,
            len: image.len,
            generation: generation(image.generation),
            stamp: image.stamp,
            tags,
        });
    }
    let (w, i) = IndexBuilder::default()
        .seeds(index.seeds())
        .restore(restored)
        .unwrap();
    (w, i, stamps)
}

/// A snapshot written under another growth schedule (before 2026-11-27,
/// tables grew by 1.25× to 90 % full) names generations whose successor,
/// under today's schedule, is smaller than the table itself. Growth must
/// still go to a table that holds everything: here every restored segment
/// claims generation 0 (64 slots) while holding thousands of entries.
#[test]
fn a_table_from_another_growth_schedule_grows_into_a_larger_one() {
    let (mut writer, index) = Index::builder().segments(2).build().unwrap();
    for i in 0..10_000u64 {
        writer.insert(key(i), key(i)).unwrap();
    }
    let (mut w2, restored, _) = restore_copy_as(&index, |_| 0, false);
    let before = restored.table_bytes();
    for i in 10_000..30_000u64 {
        w2.insert(key(i), key(i)).unwrap();
    }
    assert!(restored.table_bytes() > before, "the segments grew");
    for i in 0..30_000u64 {
        assert_eq!(restored.get(&key(i)), Some(key(i)), "key {i}");
    }
}

#[test]
fn restored_images_answer_every_key_and_keep_growing() {
    let (mut writer, index) = Index::builder().segments(4).build().unwrap();
    for i in 0..20_000u64 {
        writer.set_stamp(i + 1);
        writer.insert(key(i), key(i + 1_000_000)).unwrap();
    }
    for i in (0..20_000u64).step_by(3) {
        writer.set_stamp(30_000 + i);
        writer.remove(&key(i));
    }
    let (mut w2, restored, stamps) = restore_copy(&index);
    assert_eq!(restored.len(), index.len());
    assert!(
        stamps.iter().all(|&s| s > 20_000),
        "every segment saw a removal"
    );
    for i in 0..20_000u64 {
        assert_eq!(restored.get(&key(i)), index.get(&key(i)), "key {i}");
    }
    // The restored index grows out of its lent memory into its own.
    for i in 20_000..60_000u64 {
        w2.insert(key(i), key(i)).unwrap();
    }
    for i in 0..60_000u64 {
        let want = if i >= 20_000 {
            Some(key(i))
        } else {
            index.get(&key(i))
        };
        assert_eq!(restored.get(&key(i)), want, "key {i}");
    }
}

#[test]
fn a_copy_reports_the_stamp_of_its_latest_write() {
    let (mut writer, index) = Index::builder().segments(1).build().unwrap();
    let mut words = Vec::new();
    assert_eq!(index.copy_segment_raw(0, &mut words).stamp, 0);
    writer.set_stamp(7);
    writer.insert(key(1), key(2)).unwrap();
    writer.set_stamp(9);
    writer.remove(&key(5)); // absent: no write, no stamp
    let image = index.copy_segment_raw(0, &mut words);
    assert_eq!((image.stamp, image.len), (7, 1));
    // Growth carries the stamp over to the larger table.
    for i in 10..1000u64 {
        writer.set_stamp(100 + i);
        writer.insert(key(i), key(i)).unwrap();
    }
    let image = index.copy_segment_raw(0, &mut words);
    assert!(image.generation > 0);
    assert_eq!(image.stamp, 1099);
}

#[test]
fn restore_refuses_bad_inputs() {
    let (_w, index) = Index::builder().segments(2).build().unwrap();
    // No seeds.
    assert!(IndexBuilder::default().restore(Vec::new()).is_err());
    let mut words = Vec::new();
    let image = index.copy_segment_raw(0, &mut words);
    words.truncate(image.capacity * 4);
    let mut memory: Box<[u64]> = words.into_boxed_slice();
    let ptr = NonNull::new(memory.as_mut_ptr().cast::<u8>()).unwrap();
    let keepalive: Arc<dyn Send + Sync> = Arc::new(memory);
    // SAFETY: as in `restore_copy`.
    let memory = unsafe { LentMemory::new(ptr, image.capacity * 4, keepalive.clone()) };
    // Lent memory must be exactly the slots' words.
    // SAFETY: as above (a shorter part of the same words).
    let short = unsafe { LentMemory::new(ptr, image.capacity * 4 - 1, keepalive.clone()) };
    assert!(ExternalSlots::new(short, image.capacity).is_none());
    // SAFETY: as above.
    let tag_words =
        unsafe { LentMemory::new(ptr, image.capacity.div_ceil(8) + 1, keepalive.clone()) };
    assert!(ExternalTags::new(tag_words, image.capacity).is_none());
    // SAFETY: as above.
    let empty = unsafe { LentMemory::new(ptr, 0, keepalive) };
    assert!(ExternalSlots::new(empty, 0).is_none());
    let slots = ExternalSlots::new(memory, image.capacity).unwrap();
    // A table claiming to be full, and a segment count of 1 is fine but full is not.
    let err = IndexBuilder::default()
        .seeds(index.seeds())
        .restore(vec![RestoredSegment {
            slots,
            len: image.capacity,
            generation: 0,
            stamp: 0,
            tags: None,
        }])
        .err()
        .expect("a full table is refused");
    assert!(err.to_string().contains("free slot"), "{err}");
}

/// Tags carried in an image are the ones a rebuild computes by hashing, and
/// the carried `max_disp` bounds every displacement: a table restored with
/// them answers exactly as one whose tags were rebuilt, hits and misses,
/// before and after more writes.
#[test]
fn stored_tags_restore_the_same_table_as_rebuilt_ones() {
    let (mut writer, index) = Index::builder().segments(4).build().unwrap();
    for i in 0..30_000u64 {
        writer.insert(key(i), key(i + 7)).unwrap();
    }
    for i in (0..30_000u64).step_by(5) {
        writer.remove(&key(i));
    }
    let (mut w_stored, stored, _) = restore_copy_as(&index, |g| g, true);
    let (mut w_rebuilt, rebuilt, _) = restore_copy_as(&index, |g| g, false);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for s in 0..index.segment_count() {
        let ia = stored.copy_segment_raw(s, &mut a);
        let ib = rebuilt.copy_segment_raw(s, &mut b);
        assert!(a == b, "segment {s}: slots and tags equal");
        assert!(ia.max_disp >= ib.max_disp, "segment {s}: the bound holds");
    }
    for i in 0..40_000u64 {
        let want = (i < 30_000 && i % 5 != 0).then(|| key(i + 7));
        assert_eq!(stored.get(&key(i)), want, "key {i}");
        assert_eq!(rebuilt.get(&key(i)), want, "key {i}");
    }
    for i in 30_000..50_000u64 {
        w_stored.insert(key(i), key(i)).unwrap();
        w_rebuilt.insert(key(i), key(i)).unwrap();
    }
    for i in 0..50_000u64 {
        assert_eq!(stored.get(&key(i)), rebuilt.get(&key(i)), "key {i}");
    }
}

#[test]
fn stored_tags_of_the_wrong_length_are_refused() {
    assert!(StoredTags::from_le_bytes(17, &[0; 24], 0).is_some());
    assert!(StoredTags::from_le_bytes(17, &[0; 16], 0).is_none());
    assert!(StoredTags::from_le_bytes(17, &[0; 32], 0).is_none());
    assert!(StoredTags::from_le_bytes(17, &[0; 23], 0).is_none());
}
