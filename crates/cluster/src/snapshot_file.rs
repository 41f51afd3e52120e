//! A snapshot as openraft hands it around: a file on disk, and the file
//! beside it that says what it is to Raft.
//!
//! In a replica group the Raft snapshot **is** a snapshot file of the data
//! directory (docs/replication.md, section 4): the leader sends the file's
//! bytes, a follower writes them to a file of its own and installs that.
//! openraft never looks inside; the network and the state machine do.
//!
//! # The meta file
//!
//! A snapshot file holds the index; what Raft needs besides (the log id
//! it covers, the membership in force there, and the proposal chain) is
//! kept in `snapshot-<lsn>.raft` beside `snapshot-<lsn>.snap`:
//!
//! ```text
//! "UMRS" | u32 CRC-32C of the rest | prost `uuidmap.raft.v1.SnapshotMeta`
//! ```
//!
//! It is written (temp file, fsync, rename) **before** the snapshot it
//! describes is used for anything: a member only ever uses a snapshot
//! whose meta file reads back whole, and ignores one without it. A meta
//! file whose snapshot is gone is debris and is removed.

use std::path::{Path, PathBuf};

use prost::Message;
use uuidmap_engine::store::snapshot::list_snapshots;
use uuidmap_engine::store::{FileError, Io};
use uuidmap_engine::writer::ProposalChain;
use uuidmap_proto::raft::v1 as pb;

use crate::raft_wire::{FromWire, SnapshotHeader, ToWire};
use crate::types::{SnapshotMeta, Vote};

/// A snapshot file: where it is, its largest capture LSN (the LSN a node
/// that installs it must apply up to before it serves reads), and the
/// proposal chain at the log id it covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotFile {
    /// The file.
    pub path: PathBuf,
    /// Its largest capture LSN (the LSN in its name).
    pub snapshot_lsn: u64,
    /// The proposal chain at the snapshot's `last_log_id`.
    pub chain: ProposalChain,
}

const MAGIC: &[u8; 4] = b"UMRS";

/// The meta file of the snapshot at `snapshot` (`….snap` → `….raft`).
pub fn meta_path(snapshot: &Path) -> PathBuf {
    snapshot.with_extension("raft")
}

/// A member's snapshot: the file and its Raft meta.
#[derive(Clone, Debug)]
pub struct MemberSnapshot {
    /// The log id it covers and the membership there.
    pub meta: SnapshotMeta,
    /// The file.
    pub file: SnapshotFile,
}

/// Writes the meta file of `file` durably (temp file, fsync, rename,
/// directory fsync).
pub fn write_meta(
    io: &dyn Io,
    dir: &Path,
    meta: &SnapshotMeta,
    file: &SnapshotFile,
) -> Result<(), FileError> {
    let header = SnapshotHeader {
        vote: Vote::new(0, 0),
        meta: meta.clone(),
        file_len: 0,
        snapshot_lsn: file.snapshot_lsn,
        chain: file.chain,
    };
    let body = header.to_wire().encode_to_vec();
    let mut bytes = Vec::with_capacity(8 + body.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&uuidmap_engine::store::crc32c(&body).to_le_bytes());
    bytes.extend_from_slice(&body);
    let path = meta_path(&file.path);
    let temp = path.with_extension("raft.tmp");
    let mut out = io
        .create(&temp)
        .map_err(|e| FileError::new("creating the snapshot's meta file", &temp, e))?;
    out.write_all(&bytes)
        .and_then(|()| out.sync())
        .map_err(|e| FileError::new("writing the snapshot's meta file", &temp, e))?;
    drop(out);
    io.rename(&temp, &path)
        .map_err(|e| FileError::new("renaming into place the snapshot's meta file", &path, e))?;
    io.sync_dir(dir)
        .map_err(|e| FileError::new("syncing the directory of the snapshot's meta", dir, e))
}

/// Reads the meta file of the snapshot at `snapshot`; an error says what
/// is wrong with it (missing, short, failing its CRC).
pub fn read_meta(io: &dyn Io, snapshot: &Path, lsn: u64) -> Result<MemberSnapshot, String> {
    let path = meta_path(snapshot);
    let bytes = io
        .read(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err(format!("{} is not a snapshot meta file", path.display()));
    }
    let crc = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    let body = &bytes[8..];
    if uuidmap_engine::store::crc32c(body) != crc {
        return Err(format!("{} fails its CRC-32C", path.display()));
    }
    let header = pb::SnapshotMeta::decode(body)
        .map_err(|e| e.to_string())
        .and_then(|m| SnapshotHeader::from_wire(m).map_err(|e| e.to_string()))
        .map_err(|e| format!("{} does not decode: {e}", path.display()))?;
    if header.snapshot_lsn != lsn {
        return Err(format!(
            "{} describes the snapshot of LSN {}, not {lsn}",
            path.display(),
            header.snapshot_lsn
        ));
    }
    Ok(MemberSnapshot {
        meta: header.meta,
        file: SnapshotFile {
            path: snapshot.to_path_buf(),
            snapshot_lsn: lsn,
            chain: header.chain,
        },
    })
}

/// The newest snapshot in `dir` whose meta file reads back whole (module
/// docs); others are skipped with a warning.
pub fn newest(io: &dyn Io, dir: &Path) -> Result<Option<MemberSnapshot>, FileError> {
    for (lsn, path) in list_snapshots(io, dir)? {
        match read_meta(io, &path, lsn) {
            Ok(found) => return Ok(Some(found)),
            Err(reason) => {
                tracing::warn!(snapshot = %path.display(), %reason, "skipping a snapshot without a usable meta file");
            }
        }
    }
    Ok(None)
}

/// The snapshots in `dir` whose meta file reads back whole, newest first.
pub fn usable(io: &dyn Io, dir: &Path) -> Result<Vec<MemberSnapshot>, FileError> {
    Ok(list_snapshots(io, dir)?
        .into_iter()
        .filter_map(|(lsn, path)| read_meta(io, &path, lsn).ok())
        .collect())
}

/// Where a reader of the log that wants the entries after `lsn` can start
/// and know the proposal chain (`ChangeReader`): the point of the newest
/// usable snapshot at or before `lsn`, with its chain; or 0 and the empty
/// chain (the log's start).
pub fn chain_point_at_or_before(
    io: &dyn Io,
    dir: &Path,
    lsn: u64,
) -> Result<(u64, ProposalChain), FileError> {
    for snapshot in usable(io, dir)? {
        let point = snapshot.meta.last_log_id.map_or(0, |l| l.index);
        if point <= lsn {
            return Ok((point, snapshot.file.chain));
        }
    }
    Ok((0, ProposalChain::default()))
}

/// Removes every snapshot and meta file in `dir` but `keep`'s, the
/// snapshots older than the newest `older` ones kept (with `keep`), and
/// meta files whose snapshot is gone. Best effort: what cannot be
/// removed is logged and left.
pub fn prune(io: &dyn Io, dir: &Path, keep: &Path, older: usize) {
    let snapshots = match list_snapshots(io, dir) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot list snapshots to prune");
            return;
        }
    };
    let keep_lsn = snapshots
        .iter()
        .find(|(_, p)| p == keep)
        .map_or(0, |&(lsn, _)| lsn);
    let kept: Vec<&PathBuf> = snapshots
        .iter()
        .filter(|(lsn, p)| p == keep || *lsn < keep_lsn)
        .take(older + 1)
        .map(|(_, p)| p)
        .collect();
    for (_, path) in &snapshots {
        if !kept.contains(&path) {
            for victim in [path.clone(), meta_path(path)] {
                match io.remove(&victim) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(path = %victim.display(), error = %e, "cannot remove an old snapshot")
                    }
                }
            }
        }
    }
    // Meta files whose snapshot is gone.
    if let Ok(names) = io.list(dir) {
        for name in names {
            if let Some(stem) = name.strip_suffix(".raft") {
                let snapshot = dir.join(format!("{stem}.snap"));
                if io.file_len(&snapshot).is_err() {
                    let _ = io.remove(&dir.join(&name));
                }
            }
        }
    }
}
