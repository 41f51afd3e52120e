//! The spare WAL file: a file of written, fsynced zeros made ahead of need,
//! which the writer turns into its next WAL file.
//!
//! # Why
//!
//! On ext4 (and XFS), an `fdatasync` after an append must also commit the
//! file's new size and block allocation to the journal: two writes where
//! one would do. Overwriting blocks that were written and synced before is a
//! data-only flush. `fallocate` does not help: its extents are "unwritten",
//! and the first write into one is again a metadata change. So, as
//! PostgreSQL and RocksDB do, the WAL writes its records into a file that
//! already holds zeros: measured on this project's machine, a sync went
//! from about 135 µs to 80 µs (BENCHMARKS.md, issue 12).
//!
//! # Protocol
//!
//! - A spare is made as `wal-spare.tmp`: zeros written in chunks, fsynced,
//!   renamed to `wal-spare`, directory fsynced. So a file named
//!   `wal-spare` is always whole zeros, and a crash leaves at most a
//!   `.tmp`, which the next preparation replaces. Neither name is a WAL
//!   file name, so readers never see them.
//! - The writer takes the spare when it starts a new WAL file (at start
//!   and at rotation): it writes the header over the first bytes, fsyncs,
//!   renames the file to its WAL name and fsyncs the directory, the same
//!   steps as a new file. Without a spare ready it creates a file that
//!   grows as it is written, as before; nothing waits for a spare.
//! - Then it asks for the next spare: made on a background thread in the
//!   server ([`Preallocate::Background`]), or at once on the writer thread
//!   ([`Preallocate::Inline`], for the simulated disk's deterministic crash
//!   tests). A spare left by an earlier run is used by the next start.
//! - Dropping [`Spares`] stops a preparation in progress between chunks
//!   and waits for its thread, so no thread writes into the directory
//!   after the writer is gone.
//!
//! # What it costs
//!
//! One file of `--wal-file-bytes` (64 MiB by default) of disk beyond the
//! WAL, written once per WAL file. A full disk fails the preparation (a
//! warning; the writer goes on growing its file), never a write.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crate::store::{FileError, Io};

/// The name of the spare file in the data directory.
pub const SPARE_NAME: &str = "wal-spare";
/// The name the spare has while it is being made.
const SPARE_TMP_NAME: &str = "wal-spare.tmp";
/// The largest spare: past it a WAL file grows as it is written (a file
/// size this large is a way to say "never rotate").
pub(super) const MAX_SPARE_BYTES: u64 = 1 << 30;
/// Zeros written per call: small enough that a cancel is quick.
const CHUNK: usize = 1 << 20;

/// Whether and how the WAL writer prepares zero-filled files ahead of need.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Preallocate {
    /// No spare: every WAL file grows as it is written.
    Off,
    /// The next spare is made on the writer thread when the last one is
    /// taken (a stall of one file's writing; deterministic, for tests on
    /// the simulated disk).
    Inline,
    /// The next spare is made on a background thread (the server's way).
    #[default]
    Background,
}

impl std::str::FromStr for Preallocate {
    type Err = String;

    /// `on` (a background thread) or `off`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" | "true" => Ok(Preallocate::Background),
            "off" | "false" => Ok(Preallocate::Off),
            _ => Err(format!(
                "{s:?} is not a preallocation setting: give `on` (WAL files are made ahead of \
                 need, zero-filled, so each fsync is a data-only flush) or `off`"
            )),
        }
    }
}

/// A background preparation's thread.
type Preparation = JoinHandle<Result<(), FileError>>;

/// The spare of one data directory, and the preparation of the next.
pub(super) struct Spares {
    io: Arc<dyn Io>,
    dir: PathBuf,
    /// Bytes of zeros in a spare (the WAL file size).
    bytes: u64,
    mode: Preallocate,
    /// The background preparation, if one is running or not yet joined.
    running: Option<(Preparation, Arc<AtomicBool>)>,
    /// A spare was made since the last `take` (as far as this process
    /// knows without asking the file system).
    made: bool,
}

impl Spares {
    /// Spares of `bytes` (the WAL file size; at most [`MAX_SPARE_BYTES`]).
    pub(super) fn new(io: Arc<dyn Io>, dir: &Path, bytes: u64, mode: Preallocate) -> Spares {
        Spares {
            io,
            dir: dir.to_path_buf(),
            bytes: bytes.min(MAX_SPARE_BYTES),
            mode,
            running: None,
            made: false,
        }
    }

    /// Whether a spare was made since the last `take` (cheap: no system
    /// call unless a background preparation just finished). The writer
    /// asks after each commit, to leave a file that is not preallocated
    /// (the first one in a new directory) as soon as it can.
    pub(super) fn ready(&mut self) -> bool {
        if self
            .running
            .as_ref()
            .is_some_and(|(thread, _)| thread.is_finished())
        {
            self.join();
            self.made = self.io.file_len(&self.dir.join(SPARE_NAME)).is_ok();
        }
        self.made
    }

    /// The spare's path, if one is ready (the caller renames it away).
    pub(super) fn take(&mut self) -> Option<PathBuf> {
        if self.mode == Preallocate::Off {
            return None;
        }
        if self
            .running
            .as_ref()
            .is_some_and(|(thread, _)| thread.is_finished())
        {
            self.join();
        }
        if self.running.is_some() {
            return None;
        }
        self.made = false;
        let path = self.dir.join(SPARE_NAME);
        self.io.file_len(&path).ok().map(|_| path)
    }

    /// Makes sure a spare is or will be ready: starts making one if there
    /// is none and none is being made.
    pub(super) fn replenish(&mut self) {
        if self.mode == Preallocate::Off || self.running.is_some() {
            return;
        }
        if self.io.file_len(&self.dir.join(SPARE_NAME)).is_ok() {
            return;
        }
        let cancel = Arc::new(AtomicBool::new(false));
        match self.mode {
            Preallocate::Off => {}
            Preallocate::Inline => {
                let made = prepare(&*self.io, &self.dir, self.bytes, &cancel);
                self.made = made.is_ok();
                warn_if_failed(made);
            }
            Preallocate::Background => {
                let (io, dir, bytes, stop) = (
                    self.io.clone(),
                    self.dir.clone(),
                    self.bytes,
                    cancel.clone(),
                );
                match std::thread::Builder::new()
                    .name("uuidmap-wal-spare".into())
                    .spawn(move || prepare(&*io, &dir, bytes, &stop))
                {
                    Ok(thread) => self.running = Some((thread, cancel)),
                    Err(e) => tracing::warn!(
                        error = %e,
                        "could not start the thread that prepares the next WAL file; \
                         WAL files grow as they are written"
                    ),
                }
            }
        }
    }

    /// Waits for the background preparation, logging its failure.
    fn join(&mut self) {
        if let Some((thread, _)) = self.running.take() {
            match thread.join() {
                Ok(result) => warn_if_failed(result),
                Err(_) => tracing::warn!("the thread preparing the next WAL file panicked"),
            }
        }
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        if let Some((_, cancel)) = &self.running {
            cancel.store(true, Ordering::Relaxed);
        }
        self.join();
    }
}

fn warn_if_failed(result: Result<(), FileError>) {
    if let Err(e) = result {
        tracing::warn!(
            error = %e,
            "could not prepare the next WAL file in advance (writes go on, each WAL fsync \
             costs a little more); it is tried again at the next WAL file"
        );
    }
}

/// Makes `dir/wal-spare` (module docs). A cancel removes the `.tmp` and
/// returns `Ok`.
fn prepare(io: &dyn Io, dir: &Path, bytes: u64, cancel: &AtomicBool) -> Result<(), FileError> {
    let tmp = dir.join(SPARE_TMP_NAME);
    if io.file_len(&tmp).is_ok() {
        io.remove(&tmp)
            .map_err(|e| FileError::new("removing the leftover", &tmp, e))?;
    }
    let made = (|| {
        let mut file = io
            .create(&tmp)
            .map_err(|e| FileError::new("creating the spare WAL file", &tmp, e))?;
        let zeros = vec![0u8; CHUNK.min(bytes as usize)];
        let mut left = bytes;
        while left > 0 {
            if cancel.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let n = left.min(zeros.len() as u64) as usize;
            file.write_all(&zeros[..n])
                .map_err(|e| FileError::new("writing zeros into the spare WAL file", &tmp, e))?;
            left -= n as u64;
        }
        file.sync()
            .map_err(|e| FileError::new("fsyncing the spare WAL file", &tmp, e))?;
        let spare = dir.join(SPARE_NAME);
        io.rename(&tmp, &spare)
            .map_err(|e| FileError::new("renaming into place the spare WAL file", &spare, e))?;
        io.sync_dir(dir)
            .map_err(|e| FileError::new("syncing the data directory", dir, e))?;
        Ok(true)
    })();
    match made {
        Ok(true) => Ok(()),
        Ok(false) => {
            let _ = io.remove(&tmp);
            Ok(())
        }
        Err(e) => {
            let _ = io.remove(&tmp);
            Err(e)
        }
    }
}

/// Whether `bytes` are all zero (a preallocated file's unwritten rest).
pub(super) fn all_zero(bytes: &[u8]) -> bool {
    // Word at a time: a WAL file's rest can be tens of MiB.
    let (head, words, tail) = bytemuck::pod_align_to::<u8, u64>(bytes);
    head.iter().all(|&b| b == 0) && words.iter().all(|&w| w == 0) && tail.iter().all(|&b| b == 0)
}

/// Where the records of a WAL file end, as far as a few page reads can
/// tell: a binary search from the end finds a zero-filled 4 KiB page whose
/// page before is not all zeros (assuming the records are followed only by
/// zeros), and the result is just past that page's last non-zero byte; or
/// the file's length if its last page is not zero. Records never hold a
/// whole page of zeros (every op has a non-nil key), so for an undamaged
/// file this is the end of the last record, give or take the zero bytes
/// a record may end with. Used to read and estimate a preallocated file
/// without its zeros; everything read is still checked.
pub(super) fn records_end(io: &dyn Io, path: &Path, file_len: u64) -> Result<u64, FileError> {
    const PAGE: u64 = 4096;
    let read_page = |page: u64| -> Result<Vec<u8>, FileError> {
        io.read_at(path, page * PAGE, PAGE as usize)
            .map_err(|e| FileError::new("reading the WAL file", path, e))
    };
    let page_is_zero = |page: u64| -> Result<bool, FileError> { Ok(all_zero(&read_page(page)?)) };
    let pages = file_len.div_ceil(PAGE);
    if pages <= 1 || !page_is_zero(pages - 1)? {
        return Ok(file_len);
    }
    // Invariant: page `hi` is zero; page `lo` (the header's) is not.
    let (mut lo, mut hi) = (0u64, pages - 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if page_is_zero(mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let last = read_page(lo)?;
    let used = last.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    Ok(lo * PAGE + used as u64)
}
