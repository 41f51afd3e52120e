//! Typed errors of the index layer.

use thiserror::Error;

/// A key the index cannot store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The nil UUID marks empty slots, so it cannot be a key.
    #[error("the nil UUID (all zeros) is reserved and cannot be used as a key")]
    Nil,
    /// The max UUID is reserved as a marker, so it cannot be a key.
    #[error("the max UUID (all ones) is reserved and cannot be used as a key")]
    Max,
}

/// A request to build an index that cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The capacity hint is larger than the index supports.
    #[error("capacity {requested} is larger than the supported maximum of {max} entries")]
    CapacityTooLarge {
        /// The capacity asked for, in entries.
        requested: usize,
        /// The largest capacity supported, in entries.
        max: usize,
    },
    /// The segment count is not a power of two within the supported range.
    #[error("segment count {requested} must be a power of two between 1 and {max}")]
    BadSegmentCount {
        /// The segment count asked for.
        requested: usize,
        /// The largest segment count supported.
        max: usize,
    },
    /// The presized tables would not fit in this machine's memory.
    #[error(
        "presizing needs {bytes} bytes of tables, more than this machine's {physical} bytes of memory; ask for a smaller capacity"
    )]
    MoreThanMemory {
        /// The bytes the presized tables would take.
        bytes: usize,
        /// The machine's physical memory, in bytes.
        physical: usize,
    },
    /// The allocator refused the memory for the presized tables.
    #[error("could not allocate {bytes} bytes for the index tables")]
    OutOfMemory {
        /// The bytes the allocator refused.
        bytes: usize,
    },
    /// Restoring tables needs the seeds they were hashed with.
    #[error("restoring an index needs the hash seeds its tables were built with")]
    SeedsRequired,
    /// A restored table has no free slot (probes rely on one).
    #[error("segment {segment} holds {len} entries in {capacity} slots: a table needs a free slot")]
    FullTable {
        /// The segment whose table is full.
        segment: usize,
        /// The entries it holds.
        len: usize,
        /// Its slots.
        capacity: usize,
    },
}

/// A scan cursor that does not fit the index or the request.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ScanError {
    /// `split` must be smaller than `splits`, and `splits` at least 1.
    #[error("split {split} of {splits} is not valid: need 0 <= split < splits and splits >= 1")]
    BadSplit {
        /// The split asked for.
        split: u32,
        /// The number of splits asked for.
        splits: u32,
    },
    /// The cursor was made for an index with a different shape or hash.
    #[error(
        "the scan cursor belongs to a different index layout (it was made for {cursor_segments} segments and hash {cursor_tag:#x}; this index has {index_segments} segments and hash {index_tag:#x}); restart the scan"
    )]
    ForeignCursor {
        /// The segment count the cursor was made for.
        cursor_segments: u32,
        /// The hash tag the cursor was made for.
        cursor_tag: u64,
        /// This index's segment count.
        index_segments: u32,
        /// This index's hash tag.
        index_tag: u64,
    },
    /// The cursor's bytes are not a cursor.
    #[error("the scan cursor is malformed: {0}")]
    Malformed(&'static str),
}

/// Why a compare-and-set did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CasError {
    /// The key's value was not the expected one; nothing changed.
    #[error("compare-and-set failed: the current value is {}", match .current { Some(v) => v.to_string(), None => "absent".to_string() })]
    Mismatch {
        /// The key's value at the time (`None`: absent).
        current: Option<uuid::Uuid>,
    },
    /// The key is reserved.
    #[error(transparent)]
    Key(#[from] KeyError),
}
