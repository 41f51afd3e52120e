//! The write-ahead log: every accepted write batch, as one record under its
//! LSN, in files `wal-{first_lsn:020}.log` of the data directory.
//!
//! # Protocol
//!
//! One writer thread owns the [`WalWriter`]: it appends the batches of a
//! group, commits the group (one write, one fsync when durability is asked
//! for), and only then applies and acknowledges them. At startup, recovery
//! [`replay`]s the records after the snapshot's LSN and repairs the end of
//! the log; then a new writer starts a new file at the next LSN. Once a
//! snapshot covers LSN `n`, [`remove_covered`] deletes the files that hold
//! nothing after `n`. [`WalCursor`] reads records from any LSN without
//! changing a file; [`WalFollower`] follows the live log for change streams.
//!
//! # Invariants
//!
//! - LSNs are consecutive across the whole log: a file starts where the one
//!   before it ends (or later, when a snapshot covers the hole), and its
//!   records run on from its first LSN.
//! - A record is the unit of atomicity: after a crash a batch is wholly in
//!   the log or not at all; a cut-off record at the end is a torn tail and
//!   is discarded (see `reader`).
//! - Every record whose commit fsynced and returned `Ok` survives a crash.
//!
//! The byte format is in `docs/format.md` ("WAL") and in `record`.
//!
//! - `record`: the header and record encodings.
//! - `files`: names, listing, removal of covered files.
//! - `writer`: [`WalWriter`], group commit, rollback, rotation.
//! - `spare`: the zero-filled file made ahead of need that the next WAL
//!   file is made from (a data-only fdatasync), and [`Preallocate`].
//! - `reader`: [`WalCursor`], the checks and the torn-tail rule.
//! - `replay`: recovery, [`replay`].
//! - `follow`: [`WalFollower`], reading a live log as it grows (change
//!   streams).

mod commit_timing;
mod follow;
mod reader;
mod record;
mod replay;
mod spare;
mod wal_files;
mod writer;

pub use follow::WalFollower;
pub use reader::{TornTail, WalCursor, WalRecord};
pub use record::{EntryHead, EntryKind, HEADER_LEN, MAX_BATCH_OPS, MAX_OPS_LEN, WalFormat};
pub use replay::{ReplayOptions, ReplayOutcome, WalCut, estimate_puts, replay};
pub use spare::{Preallocate, SPARE_NAME};
pub use wal_files::{WalFile, list_wal_files, parse_wal_file_name, remove_covered, wal_file_name};
pub use writer::{WalOptions, WalWriter};
