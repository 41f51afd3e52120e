//! Recovery: from a data directory to a live index, the LSN to continue at,
//! and a report of what was found.
//!
//! 1. Try the snapshots newest first. A snapshot is used if it opens (its
//!    header and, with verification, every segment checksum are right) and
//!    the WAL holds every record after its smallest capture LSN *up to its
//!    LSN*: the writer makes the WAL durable through a snapshot's LSN before
//!    the snapshot itself, so a log that ends earlier lost synced records,
//!    and the snapshot (which may hold parts of the lost batches) cannot be
//!    rolled back to it: recovery refuses ([`StoreError::WalBehindSnapshot`])
//!    rather than serve a mix. A damaged snapshot is renamed `*.damaged`
//!    (kept for inspection, never used again) and the previous one is tried,
//!    with the longer WAL it needs.
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
    /// The repair: cut the WAL at a corrupt record (or at a file that lost
    /// its last records) instead of refusing to start, and set aside the
    /// snapshots that hold writes past the cut (renamed `*.beyond-log`).
    pub truncate_corrupt_wal: bool,
    /// Change no file (inspection, and the repair's dry run): report what a
    /// start or a repair would cut, set aside or rename.
    pub read_only: bool,
    /// Presize a new, empty index for this many entries.
    pub capacity_hint: usize,
}

impl Default for RecoveryOptions {
    fn default() -> Self {
        RecoveryOptions {
            verify_checksums: true,
            truncate_corrupt_wal: false,
            read_only: false,
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
    /// Bytes of a torn WAL tail cut off (or, read-only, to be cut).
    pub torn_bytes: u64,
    /// The repair's cut of the WAL, made or (read-only) planned.
    pub cut: Option<wal::WalCut>,
    /// Snapshots set aside (or, read-only, to be) because they hold writes
    /// past the end of the repaired log.
    pub set_aside: Vec<PathBuf>,
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
        read_only: options.read_only,
        synced_through: 0,
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
                reject(io, path, &e, options, &mut report);
                continue;
            }
        };
        let restored = match opened.into_index() {
            Ok(r) => r,
            Err(e) => {
                reject(io, path, &e, options, &mut report);
                continue;
            }
        };
        report.open_time = started.elapsed();
        let mut writer = restored.writer;
        let index = restored.index;
        let captures = restored.capture_lsns;
        let min_capture = captures.iter().copied().min().unwrap_or(0);
        let started = Instant::now();
        let replay_options = ReplayOptions {
            synced_through: *lsn,
            ..replay_options
        };
        let replayed = replay_into(
            io,
            dir,
            &replay_options,
            &mut writer,
            &index,
            min_capture,
            |seg| captures[seg],
        );
        let outcome = replayed.map_err(|e| with_rejections(e, &report))?;
        note_repairs(&outcome, &mut report);
        let log_end = outcome.log_end.unwrap_or(0);
        if log_end < *lsn {
            let behind = StoreError::WalBehindSnapshot {
                snapshot: path.clone(),
                snapshot_lsn: *lsn,
                log_end,
                last_file: wal::list_wal_files(io, dir)?.pop().map(|f| f.path),
            };
            if !options.truncate_corrupt_wal {
                return Err(behind);
            }
            // The repair cut the log (or found it cut) before this
            // snapshot's writes: set it aside and try the one before it.
            set_aside(io, dir, path, options, &mut report)?;
            report.rejected.push(behind.to_string());
            continue;
        }
        report.snapshot = Some(path.clone());
        report.snapshot_lsn = *lsn;
        report.min_capture_lsn = min_capture;
        report.rebuilt = matches!(restored.how, snapshot::Restored::Rebuilt { .. });
        report.records_replayed = outcome.records;
        report.last_lsn = log_end;
        report.replay_time = started.elapsed();
        return Ok(Recovered {
            writer,
            index,
            next_lsn: report.last_lsn + 1,
            report,
        });
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
    note_repairs(&outcome, &mut report);
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

/// Records what replay cut (a torn tail, a repair's cut).
fn note_repairs(outcome: &wal::ReplayOutcome, report: &mut RecoveryReport) {
    report.torn_bytes += outcome.torn_bytes;
    if outcome.cut.is_some() && report.cut.is_none() {
        report.cut.clone_from(&outcome.cut);
    }
}

/// Renames a snapshot that holds writes past the repaired log's end to
/// `*.beyond-log`, durably: were it left, a later start would take it with
/// a log whose new records reuse its LSNs for other writes.
fn set_aside(
    io: &dyn Io,
    dir: &Path,
    path: &Path,
    options: &RecoveryOptions,
    report: &mut RecoveryReport,
) -> Result<(), StoreError> {
    report.set_aside.push(path.to_path_buf());
    if options.read_only {
        return Ok(());
    }
    let mut aside = path.as_os_str().to_owned();
    aside.push(".beyond-log");
    io.rename(path, Path::new(&aside))
        .map_err(|e| StoreError::io("setting aside the snapshot", path, e))?;
    io.sync_dir(dir)
        .map_err(|e| StoreError::io("syncing the data directory", dir, e))?;
    tracing::error!(
        "repair: set snapshot {} aside (renamed *.beyond-log): it holds writes past the end \
         of the repaired log",
        path.display()
    );
    Ok(())
}

/// Logs a rejected snapshot, remembers why, and moves it aside.
fn reject(
    io: &dyn Io,
    path: &Path,
    error: &StoreError,
    options: &RecoveryOptions,
    report: &mut RecoveryReport,
) {
    tracing::error!("not using snapshot {}: {error}", path.display());
    report.rejected.push(error.to_string());
    if !matches!(error, StoreError::SnapshotCorrupt { .. }) || options.read_only {
        // Not proven damaged (an I/O error, say), or only looking: leave it
        // where it is.
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
            ends_early: None,
            ..
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
