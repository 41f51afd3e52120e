//! What the replay tests share (the engine's, and the root package's with
//! a killed `uuidmap serve`): their keys and values, and two indexes
//! compared table by table, down to the slot layout and the stamps.

use uuid::Uuid;
use uuidmap_index::Index;

/// Key `k` of the replay tests.
pub fn key(k: u64) -> Uuid {
    Uuid::from_u64_pair(0x5eed_0000_0000_0000 | k, k.wrapping_mul(0x9e37_79b9) | 1)
}

/// A value of the replay tests.
pub fn value(x: u64) -> Uuid {
    Uuid::from_u64_pair(x, !x)
}

/// Panics unless `a` and `b` hold the same entries in the same slots, segment
/// by segment (capacity, length, generation, stamp, slots, tags and the
/// tags' scan bound); `what` names
/// the run in the message.
pub fn assert_same_tables(a: &Index, b: &Index, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: entry counts");
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for s in 0..a.segment_count() {
        assert_eq!(
            a.copy_segment_raw(s, &mut x),
            b.copy_segment_raw(s, &mut y),
            "{what}: segment {s}'s image (capacity, length, generation, stamp, max_disp)"
        );
        assert!(x == y, "{what}: segment {s}'s slots or tags differ");
    }
}
