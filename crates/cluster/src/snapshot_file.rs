//! A snapshot as openraft hands it around: a file on disk.
//!
//! In a replica group the Raft snapshot **is** a snapshot file of the data
//! directory (docs/replication.md, section 4): the leader sends the file's
//! bytes, a follower writes them to a file of its own and installs that.
//! openraft never looks inside; the network and the state machine do.

use std::path::PathBuf;

/// A snapshot file: where it is, and the largest capture LSN it holds (the
/// LSN a node that installs it must apply up to before it serves reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotFile {
    /// The file.
    pub path: PathBuf,
    /// Its largest capture LSN (0 when the state machine has no such
    /// notion).
    pub snapshot_lsn: u64,
}
