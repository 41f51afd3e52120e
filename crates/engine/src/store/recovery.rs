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
//!    see `store::snapshot`). The index is first presized for the puts the
//!    WAL files can hold (their sizes), and the records are applied on
//!    every core (`store::replay_apply`).
//!
//! Each phase is timed ([`RecoveryPhases`]): map, verify, restore,
//! estimate, presize, replay, and each replay worker.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::store::replay_apply::{ReplayWorkers, WorkerReport, apply_replay};
use crate::store::snapshot::{self, Load, OpenOptions, set_aside_damaged};
use crate::store::wal::{self, ReplayOptions};
use crate::store::{FileError, Io, SnapshotLoadError, StoreError, WalReadError};
use uuidmap_index::{Index, IndexBuilder, IndexWriter};

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
    /// Threads that apply the replayed records (default: one per core).
    pub replay_workers: ReplayWorkers,
    /// How to load the snapshot; `None` (the default): the cheaper way
    /// for the WAL tail ([`Load::for_tail`]).
    pub snapshot_load: Option<Load>,
}

impl Default for RecoveryOptions {
    fn default() -> Self {
        RecoveryOptions {
            verify_checksums: true,
            truncate_corrupt_wal: false,
            read_only: false,
            capacity_hint: 0,
            replay_workers: ReplayWorkers::default(),
            snapshot_load: None,
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
    /// Ops of those records applied (above their segment's capture LSN).
    pub ops_replayed: u64,
    /// Bytes of the records read.
    pub bytes_replayed: u64,
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
    /// Where the time went.
    pub phases: RecoveryPhases,
}

/// The time of each recovery phase (of the snapshot used, or of the
/// WAL-only recovery).
#[derive(Clone, Debug, Default)]
pub struct RecoveryPhases {
    /// How the snapshot came into memory (chosen for the WAL tail).
    pub load: Load,
    /// Mapping (or reading) the snapshot and checking its header and
    /// layout.
    pub map: Duration,
    /// Checking every segment's checksum (zero when not asked, or when it
    /// was done as the snapshot was read: `load` is `Read`).
    pub verify: Duration,
    /// Building the index around the mapped tables (or rebuilding it).
    pub restore: Duration,
    /// Estimating the WAL's puts from its file sizes.
    pub estimate: Duration,
    /// Entries the index was presized for, beyond the snapshot's.
    pub presized_for: u64,
    /// Growing the tables for them (the slowest worker's; the workers
    /// presize their own segments at once).
    pub presize: Duration,
    /// Reading and applying the WAL, presize included (wall clock).
    pub replay: Duration,
    /// Each replay worker (one, the calling thread, when serial).
    pub workers: Vec<WorkerReport>,
}

impl RecoveryReport {
    /// WAL bytes replayed per second (`None` when too little was replayed
    /// to tell: under 1 MiB or 1 ms).
    pub fn replay_bytes_per_sec(&self) -> Option<f64> {
        let secs = self.phases.replay.as_secs_f64();
        (self.bytes_replayed >= 1 << 20 && secs >= 0.001).then(|| self.bytes_replayed as f64 / secs)
    }

    /// Logs the phases, one line each, and one line per replay worker.
    pub fn log_phases(&self) {
        let p = &self.phases;
        // Milliseconds to the microsecond.
        let ms = |d: Duration| d.as_micros() as f64 / 1e3;
        tracing::info!(
            ms = ms(p.map),
            load = ?p.load,
            "recovery phase: map the snapshot"
        );
        tracing::info!(
            ms = ms(p.verify),
            "recovery phase: verify the snapshot's checksums"
        );
        tracing::info!(ms = ms(p.restore), "recovery phase: restore the index");
        tracing::info!(
            ms = ms(p.estimate),
            "recovery phase: estimate the WAL's puts"
        );
        tracing::info!(
            ms = ms(p.presize),
            entries = p.presized_for,
            "recovery phase: presize the index"
        );
        let secs = p.replay.as_secs_f64();
        tracing::info!(
            ms = ms(p.replay),
            records = self.records_replayed,
            ops = self.ops_replayed,
            bytes = self.bytes_replayed,
            ops_per_sec = if secs > 0.0 {
                (self.ops_replayed as f64 / secs) as u64
            } else {
                0
            },
            workers = p.workers.len(),
            "recovery phase: replay the WAL"
        );
        for (i, w) in p.workers.iter().enumerate() {
            tracing::info!(
                worker = i,
                segments = w.segments,
                ops = w.ops,
                presize_ms = ms(w.presize),
                apply_ms = ms(w.apply),
                wall_ms = ms(w.wall),
                "recovery phase: replay worker"
            );
        }
    }
}

/// A recovered index.
pub struct Recovered {
    /// The recovered index's one writer.
    pub writer: IndexWriter,
    /// The recovered index, for readers.
    pub index: Index,
    /// The LSN the next batch takes.
    pub next_lsn: u64,
    /// What recovery read, replayed and repaired, phase by phase.
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
        let mut phases = RecoveryPhases::default();
        let header_only = OpenOptions {
            verify: false,
            ..OpenOptions::default()
        };
        let mut opened = match snapshot::open_snapshot(io, path, &header_only) {
            Ok(o) => o,
            Err(e) => {
                reject(io, path, &e, options, &mut report);
                continue;
            }
        };
        // A long tail writes to most of the snapshot's pages: read it in
        // bulk rather than fault each page in (`Load::for_tail`), and check
        // its checksums as it arrives (inside `map`); a mapped one is
        // checked apart (`verify`).
        phases.load = match options.snapshot_load {
            Some(load) => load,
            None => Load::for_tail(
                io.file_len(path).unwrap_or(0),
                opened.entries,
                wal::estimate_puts(io, dir, *lsn)?,
            ),
        };
        if phases.load == Load::Read {
            match opened.read_whole(io, options.verify_checksums) {
                Ok(()) => {}
                Err(e @ SnapshotLoadError::Corrupt(_)) => {
                    reject(io, path, &e, options, &mut report);
                    continue;
                }
                // Not the file's fault (no memory for the copy, say): the
                // mapping is still there, so use it, as a short tail would.
                Err(e) => {
                    tracing::warn!(
                        "could not read snapshot {} whole ({e}); mapping it instead",
                        path.display()
                    );
                    phases.load = Load::Map;
                }
            }
        }
        phases.map = started.elapsed();
        if options.verify_checksums && phases.load == Load::Map {
            let t = Instant::now();
            if let Err(e) = opened.verify() {
                reject(io, path, &e, options, &mut report);
                continue;
            }
            phases.verify = t.elapsed();
        }
        let t = Instant::now();
        let restored = match opened.into_index() {
            Ok(r) => r,
            Err(e) => {
                reject(io, path, &e, options, &mut report);
                continue;
            }
        };
        phases.restore = t.elapsed();
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
            (&mut writer, &index),
            min_capture,
            &captures,
            options.replay_workers,
            &mut phases,
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
        report.bytes_replayed = outcome.bytes;
        report.ops_replayed = phases.workers.iter().map(|w| w.ops).sum();
        report.last_lsn = log_end;
        report.replay_time = started.elapsed();
        report.phases = phases;
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
    let started = Instant::now();
    let mut phases = RecoveryPhases::default();
    // The segment count follows the entries expected (the WAL's puts);
    // the replay workers presize the tables, each its own, at once.
    let expected = presize_cap(wal::estimate_puts(io, dir, 0)?) as usize;
    let (mut writer, index) = Index::builder()
        .segments(IndexBuilder::default_segments(
            options.capacity_hint.max(expected),
        ))
        .capacity(options.capacity_hint)
        .build()
        .or_else(|_| Index::builder().build())?;
    phases.restore = started.elapsed();
    let started = Instant::now();
    let outcome = replay_into(
        io,
        dir,
        &replay_options,
        (&mut writer, &index),
        0,
        &[],
        options.replay_workers,
        &mut phases,
    )
    .map_err(|e| with_rejections(e, &report))?;
    note_repairs(&outcome, &mut report);
    report.records_replayed = outcome.records;
    report.bytes_replayed = outcome.bytes;
    report.ops_replayed = phases.workers.iter().map(|w| w.ops).sum();
    report.last_lsn = outcome.last_lsn.unwrap_or(0);
    report.replay_time = started.elapsed();
    report.phases = phases;
    Ok(Recovered {
        writer,
        index,
        next_lsn: report.last_lsn + 1,
        report,
    })
}

/// Replays the WAL after `from` into the index, presized for the puts its
/// files can hold, skipping for each key the records at or below its
/// segment's capture LSN (`captures`, by segment; empty: none), with
/// `workers` threads. Times the phases into `phases`.
#[allow(clippy::too_many_arguments)]
fn replay_into(
    io: &dyn Io,
    dir: &Path,
    options: &ReplayOptions,
    (writer, index): (&mut IndexWriter, &Index),
    from: u64,
    captures: &[u64],
    workers: ReplayWorkers,
    phases: &mut RecoveryPhases,
) -> Result<wal::ReplayOutcome, WalReadError> {
    let started = Instant::now();
    let expected = presize_for(
        presize_cap(wal::estimate_puts(io, dir, from)?),
        index.len() as u64,
    );
    phases.estimate = started.elapsed();
    let started = Instant::now();
    let (outcome, applied) = apply_replay(
        writer,
        index,
        captures,
        workers,
        expected as usize,
        |sink| wal::replay(io, dir, from, options, |lsn, ops| sink(lsn, ops)),
    );
    phases.replay = started.elapsed();
    // Free the tables the presize replaced, on this thread, now.
    writer.reclaim();
    phases.presized_for = applied.presized_for;
    phases.presize = applied
        .workers
        .iter()
        .map(|w| w.presize)
        .max()
        .unwrap_or_default();
    phases.workers = applied.workers;
    outcome
}

/// The entries to presize an index holding `entries` for, when the WAL
/// may add `estimate`: all of them, unless the index already holds eight
/// times as many. A restored snapshot's tables are its mapped pages: the
/// estimate counts every WAL byte as a new key, so for a tail of updates
/// it would grow (copy out of the mapping, rehashing) every segment that a
/// share of it takes over its limit, for entries that never come (413 ms
/// of a 100M-entry restart with 1M updates, BENCHMARKS.md "Restart at
/// 100M"). Below an eighth, a segment that does fill grows once, on the
/// replay worker that owns it, as the presize would have grown it.
fn presize_for(estimate: u64, entries: u64) -> u64 {
    if entries > 0 && estimate <= entries / 8 {
        0
    } else {
        estimate
    }
}

/// The WAL's estimated puts, capped so that presizing for them takes at
/// most a quarter of the machine's memory (about 40 bytes an entry at the
/// presized load). The estimate counts every WAL byte as a put, so a log of
/// updates to few keys overestimates; past the cap the replay grows the
/// tables as it needs, as it did before presizing.
fn presize_cap(estimate: u64) -> u64 {
    const BYTES_PER_ENTRY: u64 = 40;
    match uuidmap_index::physical_memory() {
        Some(physical) => estimate.min(physical as u64 / 4 / BYTES_PER_ENTRY),
        None => estimate,
    }
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
) -> Result<(), FileError> {
    report.set_aside.push(path.to_path_buf());
    if options.read_only {
        return Ok(());
    }
    let mut aside = path.as_os_str().to_owned();
    aside.push(".beyond-log");
    io.rename(path, Path::new(&aside))
        .map_err(|e| FileError::new("setting aside the snapshot", path, e))?;
    io.sync_dir(dir)
        .map_err(|e| FileError::new("syncing the data directory", dir, e))?;
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
    error: &SnapshotLoadError,
    options: &RecoveryOptions,
    report: &mut RecoveryReport,
) {
    tracing::error!("not using snapshot {}: {error}", path.display());
    report.rejected.push(error.to_string());
    if !matches!(error, SnapshotLoadError::Corrupt(_)) || options.read_only {
        // Not proven damaged (an I/O error, say, or a newer build's
        // format), or only looking: leave it where it is.
        return;
    }
    if let Err(e) = set_aside_damaged(io, path) {
        // Best effort: it is rejected again at the next start.
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
fn with_rejections(e: WalReadError, report: &RecoveryReport) -> StoreError {
    match e {
        WalReadError::Gap {
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
        e => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::presize_for;

    #[test]
    fn a_small_wal_after_a_large_snapshot_is_not_presized_for() {
        // An empty index (WAL-only recovery) is presized for the whole WAL.
        assert_eq!(presize_for(5_000_000, 0), 5_000_000);
        // A tail of up to an eighth of the restored entries is not.
        assert_eq!(presize_for(1_000_000, 100_000_000), 0);
        assert_eq!(presize_for(12_500_000, 100_000_000), 0);
        // A larger one is, whole.
        assert_eq!(presize_for(12_500_001, 100_000_000), 12_500_001);
    }
}
