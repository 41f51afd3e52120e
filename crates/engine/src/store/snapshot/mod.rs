//! Snapshots: the index's segments written to a file, while the writer goes
//! on, and mapped back in place on restart.
//!
//! - `format`: the file's bytes (prologue, header and segment directory,
//!   trailer) and the structural checks; `docs/format.md` has the layout
//!   field by field.
//! - `write`: [`write_snapshot`], the file protocol and retention.
//! - `open`: [`open_snapshot`], verification, and [`OpenedSnapshot::into_index`].
//! - `files`: names, [`list_snapshots`], removal of old files.
//! - `version_1_tests`: files of the format before tags were stored still
//!   load.
//!
//! # Fuzzy capture: why a snapshot taken under writes is exact
//!
//! Writing a snapshot does not stop the writer. Segments are copied one at a
//! time, each copy consistent on its own (taken under the segment's
//! seqlock), but different segments are copied at different moments, so the
//! file as a whole is no single state of the index. What makes it usable is a
//! *capture LSN* per segment: every batch with an LSN up to it is wholly in
//! that segment's copy. Recovery replays, for each segment, the logged
//! batches after its capture LSN.
//!
//! For segment `i`, the snapshot reads `applied` (the watermark of fully
//! applied batches, published by the writer with `Release`, read here with
//! `Acquire`) and *then* copies the segment; the copy reports `stamp`, the
//! LSN of the latest write it contains (the writer stamps every write with
//! its batch's LSN). The capture LSN is `max(applied, stamp - 1)`:
//!
//! - Every batch `<= applied` had finished before the watermark said so,
//!   hence before the copy began: its writes to segment `i` are in the copy
//!   (the acquire load orders the copy after them).
//! - The copy contains a write of batch `stamp`. There is one writer and it
//!   applies batches in LSN order, so every batch `< stamp` had finished
//!   before batch `stamp` wrote anything; the copy is a state of the segment
//!   after that write, so it holds all of their writes to segment `i`.
//! - Batch `stamp` itself (and batch `applied + 1`) may be in the copy only
//!   in part; that is why it is above the capture LSN.
//!
//! Replay is correct over such a copy because the log holds only blind
//! writes (`Put`, `Delete`; a compare-and-set is logged as its outcome). The
//! copy holds, for each key of the segment, the key's value after some prefix
//! of the write sequence that includes every write of batches `<= capture`.
//! Replaying every write after the capture in order leaves each key with the
//! last value written to it, or, if nothing after the capture wrote it, with
//! the value it had at the capture, which the copy already holds. The same
//! argument shows that replaying everything after the *smallest* capture LSN,
//! for every key, is also correct (merely slower), which is what recovery
//! does when the per-segment captures cannot be used (see
//! [`Restored::Rebuilt`]).
//!
//! The snapshot's LSN, in its name, is the watermark read after the last copy
//! (raised to the largest capture LSN, which can pass the watermark when
//! batches are applied before the watermark is published): the log up to it
//! must be kept with the snapshot. A restored table is stamped with its
//! capture LSN + 1, so the next snapshot that copies it untouched computes
//! the same capture LSN again.
//!
//! # Files
//!
//! `snapshot-{lsn:020}.snap`, written as a `.tmp` file, synced, renamed into
//! place, directory synced: a file with the final name is always complete.
//! A file in place is never modified (it is mapped copy-on-write by a
//! running server). The two newest snapshots are kept.

mod format;
mod open;
mod snapshot_files;
#[cfg(test)]
mod version_1_tests;
mod write;

pub use format::SegmentEntry;
pub use open::{Load, OpenOptions, OpenedSnapshot, Restored, RestoredIndex, open_snapshot};
pub use snapshot_files::{list_snapshots, set_aside_damaged, snapshot_path};
pub use write::{SnapshotInfo, write_snapshot};
