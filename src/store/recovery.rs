//! Recovery: from a data directory to a live index, the LSN to continue at,
//! and a report of what was found.
//!
//! 1. Try the snapshots newest first. A snapshot is used if it opens (its
//!    header and, with verification, every segment checksum are right) and
//!    the WAL holds every record after its smallest capture LSN. A damaged
//!    one is renamed `*.damaged` (kept for inspection, never used again) and
//!    the previous one is tried, with the longer WAL it needs.
//! 2. Without a usable snapshot, the WAL alone must start at LSN 1 (or be
//!    empty in an empty directory); otherwise recovery stops with an error
//!    that says why each candidate was rejected. It never serves a state it
//!    cannot prove complete.
//! 3. Replay the WAL into the index: a record is applied to a key's segment
//!    only if its LSN is above that segment's capture LSN (fuzzy snapshots,
//!    see `store::snapshot`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::index::{Index, IndexWriter};
use crate::store::snapshot::{self, OpenOptions};
use crate::store::wal::{self, ReplayOptions};
use crate::store::{Io, Op, StoreError};

/// How to recover.
#[derive(Clone, Debug)]
pub struct RecoveryOptions {
    /// Check every snapshot segment's checksum (default: yes).
    pub verify_checksums: bool,
    /// Cut the WAL at a corrupt record instead of refusing to start.
    pub truncate_corrupt_wal: bool,
    /// Presize a new, empty index for this many entries.
    pub capacity_hint: usize,
}

impl Default for RecoveryOptions {
    fn default() -> Self {
        RecoveryOptions {
            verify_checksums: true,
            truncate_corrupt_wal: false,
            capacity_hint: 0,
        }
    }
}

/// What recovery found and did.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    /// The snapshot used, if any.
    pub snapshot: Option<PathBuf>,
    /// Its LSN and smallest capture LSN.
    pub snapshot_lsn: u64,
    /// Smallest capture LSN of the snapshot used (0 without one).
    pub min_capture_lsn: u64,
    /// Snapshots rejected, with the reason.
    pub rejected: Vec<String>,
    /// Whether the snapshot was rehashed (its hash fingerprint differed).
    pub rebuilt: bool,
    /// WAL records read (applied to at least part of the index).
    pub records_replayed: u64,
    /// The last LSN of the recovered state.
    pub last_lsn: u64,
    /// Time to open (map and verify) the snapshot and build the index.
    pub open_time: Duration,
    /// Time to replay the WAL.
    pub replay_time: Duration,
    /// Whether a fresh snapshot should be taken at once: the WAL ends before
    /// the snapshot's LSN (writes acknowledged under `never`/`interval` lost
    /// their log records in a crash, but the snapshot holds them).
    pub wal_behind_snapshot: bool,
}

/// A recovered index.
pub struct Recovered {
    pub writer: IndexWriter,
    pub index: Index,
    /// The LSN the next batch takes.
    pub next_lsn: u64,
    pub report: RecoveryReport,
}

/// Recovers the state in `dir` (created if missing).
pub fn recover(
    io: &dyn Io,
    dir: &Path,
    options: &RecoveryOptions,
) -> Result<Recovered, StoreError> {
    io.create_dir_all(dir)
        .map_err(|e| StoreError::io("creating the data directory", dir, e))?;
    let mut report = RecoveryReport::default();
    let replay_options = ReplayOptions {
        truncate_corrupt: options.truncate_corrupt_wal,
    };
    let snapshots = snapshot::list_snapshots(io, dir)?;
    for (lsn, path) in &snapshots {
        let started = Instant::now();
        let open_options = OpenOptions {
            verify: options.verify_checksums,
            ..OpenOptions::default()
        };
        let opened = match snapshot::open_snapshot(io, path, &open_options) {
            Ok(o) => o,
            Err(e) => {
                reject(io, path, &e, &mut report);
                continue;
            }
        };
        let restored = match opened.into_index() {
            Ok(r) => r,
            Err(e) => {
                reject(io, path, &e, &mut report);
                continue;
            }
        };
        report.open_time = started.elapsed();
        let mut writer = restored.writer;
        let index = restored.index;
        let captures = restored.capture_lsns;
        let min_capture = captures.iter().copied().min().unwrap_or(0);
        let started = Instant::now();
        let replayed = replay_into(
            io,
            dir,
            &replay_options,
            &mut writer,
            &index,
            min_capture,
            |seg| captures[seg],
        );
        match replayed {
            Ok(outcome) => {
                report.snapshot = Some(path.clone());
                report.snapshot_lsn = *lsn;
                report.min_capture_lsn = min_capture;
                report.rebuilt = matches!(restored.how, snapshot::Restored::Rebuilt { .. });
                report.records_replayed = outcome.records;
                let max_capture = captures.iter().copied().max().unwrap_or(0).max(*lsn);
                let wal_last = outcome.last_lsn.unwrap_or(0);
                // Behind means the log holds records but ends before the
                // snapshot: the writer's next file would leave a hole. A log
                // that ends exactly at the snapshot (a clean stop), or holds
                // nothing (its files were all covered and removed), is not.
                report.wal_behind_snapshot = outcome.log_end.is_some_and(|end| end < max_capture);
                report.last_lsn = wal_last.max(max_capture);
                report.replay_time = started.elapsed();
                return Ok(Recovered {
                    writer,
                    index,
                    next_lsn: report.last_lsn + 1,
                    report,
                });
            }
            // A gap means this snapshot needs WAL that is gone; an older
            // snapshot cannot need less. Corruption is fatal either way.
            Err(e) => return Err(with_rejections(e, &report)),
        }
    }
    // No usable snapshot: the WAL must be the whole history.
    let files = wal::list_wal_files(io, dir)?;
    if let Some(first) = files.first()
        && first.first_lsn > 1
    {
        return Err(StoreError::NoValidState {
            dir: dir.to_path_buf(),
            reason: format!(
                "no usable snapshot{}, and the WAL starts at LSN {} (the records before it \
                 were removed after a snapshot that is now missing or damaged)",
                rejections(&report),
                first.first_lsn
            ),
        });
    }
    let (mut writer, index) = Index::builder()
        .capacity(options.capacity_hint)
        .build()
        .or_else(|_| Index::builder().build())?;
    let started = Instant::now();
    let outcome = replay_into(io, dir, &replay_options, &mut writer, &index, 0, |_| 0)
        .map_err(|e| with_rejections(e, &report))?;
    report.records_replayed = outcome.records;
    report.last_lsn = outcome.last_lsn.unwrap_or(0);
    report.replay_time = started.elapsed();
    Ok(Recovered {
        writer,
        index,
        next_lsn: report.last_lsn + 1,
        report,
    })
}

/// Replays the WAL after `from` into the index, skipping for each key the
/// records at or below its segment's capture LSN.
fn replay_into(
    io: &dyn Io,
    dir: &Path,
    options: &ReplayOptions,
    writer: &mut IndexWriter,
    index: &Index,
    from: u64,
    capture: impl Fn(usize) -> u64,
) -> Result<wal::ReplayOutcome, StoreError> {
    wal::replay(io, dir, from, options, |lsn, ops: &[Op]| {
        writer.set_stamp(lsn);
        for op in ops {
            if lsn <= capture(index.segment_of(&op.key())) {
                continue;
            }
            match *op {
                Op::Put { key, value } => {
                    // Logged keys were checked before they were logged; a
                    // reserved key here would fail the CRC first.
                    let _ = writer.insert(key, value);
                }
                Op::Delete { key } => {
                    writer.remove(&key);
                }
            }
        }
    })
}

/// Logs a rejected snapshot, remembers why, and moves it aside.
fn reject(io: &dyn Io, path: &Path, error: &StoreError, report: &mut RecoveryReport) {
    tracing::error!("not using snapshot {}: {error}", path.display());
    report.rejected.push(error.to_string());
    if !matches!(error, StoreError::SnapshotCorrupt { .. }) {
        // Not proven damaged (an I/O error, say): leave it where it is.
        return;
    }
    let mut aside = path.as_os_str().to_owned();
    aside.push(".damaged");
    if let Err(e) = io.rename(path, Path::new(&aside)) {
        tracing::warn!("could not rename {} aside: {e}", path.display());
    }
}

fn rejections(report: &RecoveryReport) -> String {
    if report.rejected.is_empty() {
        String::new()
    } else {
        format!(" (rejected: {})", report.rejected.join("; "))
    }
}

/// Adds the rejected snapshots to a fatal error, so the operator sees the
/// whole story in one message.
fn with_rejections(e: StoreError, report: &RecoveryReport) -> StoreError {
    match e {
        StoreError::WalGap {
            dir,
            expected,
            found,
        } if !report.rejected.is_empty() => StoreError::NoValidState {
            dir,
            reason: format!(
                "the WAL continues at LSN {found} where LSN {expected} was needed{}",
                rejections(report)
            ),
        },
        e => e,
    }
}
