//! How big each segment's table is: staggered sizes that grow by 1.15×.
//!
//! Memory per entry is `33 bytes / occupancy` (a 32-byte slot and its tag
//! byte). A table grows when it reaches [`MAX_LOAD`] and is then `1/GROWTH`
//! as full, so a single table's occupancy saws between 83 % and 95 %. Keys
//! spread evenly over segments, so if every segment had the same size they
//! would all sit at the same point of the saw (and all grow at the same
//! moment). Instead, segment `i` of `S` at growth step `g` has
//! `MIN_CAPACITY · GROWTH^(g + i/S)` slots: the segments' sizes are spread
//! evenly over one growth step, at any moment some are nearly full and some
//! just grew, and the aggregate occupancy stays near the average of the saw,
//! `MAX_LOAD · ln(GROWTH) / (GROWTH − 1)` ≈ 88.5 % (≈ 37 bytes/entry), at
//! every size. Computing sizes from `(g, i)` rather than from the previous
//! size keeps rounding from drifting the stagger away.
//!
//! Why so full: lookups scan tags, not keys (see `table`), so a fuller
//! table costs a lookup almost nothing (`benches/probing.rs`: a hit at 95 %
//! load reads 2.2 lines, at 90 % 2.1); it costs the writer longer shifts
//! on insert, and a grown index more copies (about `1/(GROWTH − 1)` ≈ 7
//! per entry on its way up; presize when the size is known).

/// Occupancy at which a table is replaced by a larger one.
pub(crate) const MAX_LOAD: f64 = 0.95;

/// Size ratio between consecutive growth steps of a segment.
pub(crate) const GROWTH: f64 = 1.15;

/// Slots of the smallest table (segment 0, step 0).
#[cfg(not(uuidmap_loom))]
const MIN_CAPACITY: f64 = 64.0;
/// Under loom, tiny tables keep the models' state spaces small.
#[cfg(uuidmap_loom)]
const MIN_CAPACITY: f64 = 2.0;

/// Highest growth step (a segment of about 2^44 slots): a bound that no
/// real index reaches, so that a size computation never overflows.
pub(crate) const MAX_GENERATION: u32 = 190;

/// Slots of segment `segment` (of `segments`) at growth step `generation`.
pub(crate) fn capacity(segment: usize, segments: usize, generation: u32) -> usize {
    let phase = segment as f64 / segments as f64;
    (MIN_CAPACITY * GROWTH.powf(generation as f64 + phase)).ceil() as usize
}

/// Entries a table of `capacity` slots takes before it grows (always leaves
/// at least one slot empty, which bounds every probe).
pub(crate) fn max_len(capacity: usize) -> usize {
    ((capacity as f64 * MAX_LOAD) as usize).min(capacity - 1)
}

/// The smallest growth step at which segment `segment` holds `entries`
/// without growing.
pub(crate) fn generation_for(segment: usize, segments: usize, entries: usize) -> u32 {
    let mut g = 0;
    while g < MAX_GENERATION && max_len(capacity(segment, segments, g)) < entries {
        g += 1;
    }
    g
}

/// Entries to presize each segment for, for `total` entries spread by a
/// random hash: the mean plus one standard deviation. A segment that draws
/// more grows once (a segment-sized copy); three deviations, so that none
/// grows, cost 2 % more memory for every index (measured in `benches/memory.rs`).
pub(crate) fn presize_per_segment(total: usize, segments: usize) -> usize {
    let mean = total as f64 / segments as f64;
    (mean + mean.sqrt()).ceil() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_grow_by_the_growth_factor_and_are_staggered() {
        let s = 64;
        for g in [0, 10, 40] {
            let a = capacity(0, s, g) as f64;
            let b = capacity(0, s, g + 1) as f64;
            assert!((b / a - GROWTH).abs() < 0.05, "{a} -> {b}");
            // Segment i sits i/S of the way into the step.
            let mid = capacity(s / 2, s, g) as f64;
            assert!(mid > a && mid < b);
        }
    }

    #[test]
    fn every_table_keeps_a_free_slot() {
        for g in 0..60 {
            let c = capacity(3, 16, g);
            assert!(max_len(c) < c);
            assert!(max_len(c) as f64 >= c as f64 * MAX_LOAD - 1.0);
        }
    }

    #[test]
    fn generation_for_is_the_smallest_that_fits() {
        for entries in [0usize, 1, 57, 58, 1000, 123_456] {
            let g = generation_for(5, 64, entries);
            assert!(max_len(capacity(5, 64, g)) >= entries);
            if g > 0 {
                assert!(max_len(capacity(5, 64, g - 1)) < entries);
            }
        }
    }
}
