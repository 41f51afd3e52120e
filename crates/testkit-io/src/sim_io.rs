//! A simulated disk that loses what was not made durable: the [`Io`] that
//! crash tests drive (in the spirit of redb's fuzzing backend).
//!
//! # The model
//!
//! The disk holds *inodes* (file contents) and two namespaces mapping paths
//! to inodes:
//!
//! - the **current** namespace is what the running process sees: `create`,
//!   `rename` and `remove` change it at once;
//! - the **durable** namespace is what a power loss leaves: `sync_dir(dir)`
//!   copies the current entries of `dir` into it (and drops the durable
//!   entries of `dir` that are gone). A new file's name is durable only after
//!   `sync_dir`, however often the file itself was synced.
//!
//! Each inode has **current** bytes (what reads see), **durable** bytes,
//! and the list of changes made since its last sync (writes at an offset,
//! and length changes), in order. `IoFile::sync` and `Io::truncate` make the
//! current bytes durable. After a power loss ([`SimIo::restart`]) a file
//! holds its durable bytes with each pending change applied or not,
//! independently, and a pending write possibly torn to a prefix: the page
//! cache writes pages back in any order, and a crash can cut a write. A
//! write inside one 512-byte sector is never torn (a sector write is
//! atomic), which the WAL header's synced-end slots rely on.
//!
//! Directories exist once `create_dir_all` made them and are durable at once
//! (the store creates its data directory before anything else, and the
//! directory's own entry is not what the tests are about).
//!
//! # Faults
//!
//! - **Crash**: [`SimIo::set_crash_after`]`(Some(k))` lets `k` more mutating
//!   or syncing calls (create, open_write, write_all, write_at, sync,
//!   set_len, rename, remove, sync_dir, truncate) succeed; the next one and
//!   every call after it fail with "simulated crash": the process is dead.
//!   The write that crashes lands in the current bytes (unsynced), so a
//!   restart may keep a prefix of it, as a power cut in the middle of a
//!   write would.
//! - **Failed fsync**: [`SimIo::set_sync_failure_after`]`(Some(k))` lets `k`
//!   more `IoFile::sync` calls succeed; the next one fails with `EIO` and,
//!   as Linux may, forgets the file's pending writes: reads still see them,
//!   but no later sync will make them durable (PostgreSQL's "fsyncgate").
//! - **Disk full**: [`SimIo::set_capacity`] bounds the total length of the
//!   files in the current namespace. A write or extension that would exceed
//!   it changes nothing and fails with `ENOSPC`. Reads, shrinking and
//!   removals keep working, so freeing space (or raising the capacity) lets
//!   writes resume.
//!
//! # Locks
//!
//! `lock_dir` keeps an in-memory table of locked directories: a second lock
//! on a directory of the same disk (clones included) fails with
//! `DirLockError::InUse` while the first guard lives. Locks are not disk
//! state: a lock taken after a crash succeeds, and [`SimIo::restart`]
//! gives a disk with none, as a real restart finds no process holding one.
//!
//! One mutex guards the whole disk: this is test machinery, never on a hot
//! path.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::data::SplitMix64;

use uuidmap_engine::store::dir_lock::DirLock;
use uuidmap_engine::store::error::{DirLockError, FileError};
use uuidmap_engine::store::io::{FileSync, Io, IoFile, MappedFile};

/// A handle to one simulated disk; clones share it.
#[derive(Clone, Default)]
pub struct SimIo {
    disk: Arc<Mutex<Disk>>,
}

/// Decides, from a call's description, whether the power fails there.
type CrashRule = Box<dyn FnMut(&str) -> bool + Send>;

/// Everything on the simulated disk, plus the fault schedule.
#[derive(Default)]
struct Disk {
    /// File contents by inode number.
    inodes: HashMap<u64, Inode>,
    /// The namespace the running process sees.
    current: BTreeMap<PathBuf, u64>,
    /// The namespace a power loss leaves behind.
    durable: BTreeMap<PathBuf, u64>,
    /// Directories made by `create_dir_all` (always durable).
    dirs: BTreeSet<PathBuf>,
    /// The inode number the next `create` uses.
    next_inode: u64,
    /// Mutating calls still allowed before the crash; `None`: no crash planned.
    crash_after: Option<u64>,
    /// A planned crash by call: the first counted call whose description
    /// this accepts crashes.
    crash_when: Option<CrashRule>,
    /// Set by the crashing call; from then on every call fails.
    crashed: bool,
    /// The description of the call that crashed.
    crashed_in: Option<String>,
    /// Bound on the total length of current files; `None`: unbounded.
    capacity: Option<u64>,
    /// `IoFile::sync` calls still allowed to succeed before one fails with
    /// EIO; `None`: none planned.
    sync_failure_after: Option<u64>,
    /// Mutating or syncing calls made so far (including failed ones).
    ops: u64,
    /// Directories locked by `lock_dir`, with the PID recorded for the
    /// holder (always this process's: the simulated disk lives in one).
    locks: BTreeMap<PathBuf, u32>,
}

/// One file's contents.
#[derive(Clone, Default)]
struct Inode {
    /// What reads see.
    current: Vec<u8>,
    /// What survives a power loss (before the pending changes).
    durable: Vec<u8>,
    /// Changes since the last sync, in order; a power loss applies each or
    /// not (a write possibly torn to a prefix).
    pending: Vec<Change>,
}

/// The disk's sector size: a write inside one sector lands whole or not at
/// all.
const SECTOR: usize = 512;

/// An unsynced change to a file.
#[derive(Clone)]
enum Change {
    /// `bytes` written at offset `at`.
    Write { at: usize, bytes: Vec<u8> },
    /// The length set to this.
    Resize(usize),
}

impl Inode {
    fn empty() -> Inode {
        Inode::default()
    }

    /// Makes the current bytes durable.
    fn sync(&mut self) {
        for change in self.pending.drain(..) {
            apply(&mut self.durable, &change, usize::MAX);
        }
    }

    /// A failed fsync: the pending writes will never reach the disk, though
    /// reads still see them.
    fn forget_pending(&mut self) {
        self.pending.clear();
    }

    /// Changes the length of the current bytes (zero-filling growth).
    fn resize(&mut self, len: usize) {
        self.current.resize(len, 0);
        self.pending.push(Change::Resize(len));
    }

    /// Writes `buf` at `at` into the current bytes (zero-filling a gap).
    fn write(&mut self, at: usize, buf: &[u8]) {
        let end = at + buf.len();
        if self.current.len() < end {
            self.current.resize(end, 0);
        }
        self.current[at..end].copy_from_slice(buf);
        self.pending.push(Change::Write {
            at,
            bytes: buf.to_vec(),
        });
    }

    /// The bytes a power loss leaves, with choices drawn from `rng`.
    fn after_power_loss(&self, rng: &mut SplitMix64) -> Vec<u8> {
        let mut bytes = self.durable.clone();
        for change in &self.pending {
            let keep = match change {
                Change::Resize(_) => {
                    if rng.next_u64().is_multiple_of(2) {
                        0
                    } else {
                        usize::MAX
                    }
                }
                Change::Write { at, bytes: b }
                    if at / SECTOR == (at + b.len()).max(1).saturating_sub(1) / SECTOR =>
                {
                    if rng.next_u64().is_multiple_of(2) {
                        0
                    } else {
                        usize::MAX
                    }
                }
                Change::Write { bytes: b, .. } => match rng.next_u64() % 4 {
                    0 => 0,
                    1 => usize::MAX,
                    _ => (rng.next_u64() % (b.len() as u64 + 1)) as usize,
                },
            };
            if keep > 0 {
                apply(&mut bytes, change, keep);
            }
        }
        bytes
    }
}

/// Applies `change` to `bytes`, a write only for its first `keep` bytes.
fn apply(bytes: &mut Vec<u8>, change: &Change, keep: usize) {
    match change {
        Change::Resize(len) => bytes.resize(*len, 0),
        Change::Write { at, bytes: b } => {
            let b = &b[..keep.min(b.len())];
            let end = at + b.len();
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            bytes[*at..end].copy_from_slice(b);
        }
    }
}

/// A file of the simulated disk open for appending.
struct SimFile {
    /// The disk it lives on.
    disk: Arc<Mutex<Disk>>,
    /// Its inode (stays valid if the file is renamed or removed).
    inode: u64,
    /// Where the next write goes.
    len: u64,
}

/// A directory lock on the simulated disk: dropping it frees the entry.
struct SimDirLock {
    /// The disk whose lock table holds the entry.
    disk: Arc<Mutex<Disk>>,
    /// The locked directory.
    dir: PathBuf,
}

impl Drop for SimDirLock {
    fn drop(&mut self) {
        lock(&self.disk).locks.remove(&self.dir);
    }
}

/// The error every call returns once the simulated process has crashed.
fn crash_error() -> io::Error {
    io::Error::other("simulated crash")
}

fn disk_full() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file on the simulated disk", path.display()),
    )
}

impl SimIo {
    /// An empty disk with no fault planned.
    pub fn new() -> SimIo {
        SimIo::default()
    }

    /// Plans a crash: `Some(k)` lets `k` more mutating or syncing calls
    /// succeed and makes every call after them fail. `None` cancels the plan
    /// (a crash that already happened stays).
    pub fn set_crash_after(&self, ops: Option<u64>) {
        self.lock().crash_after = ops;
    }

    /// Plans a crash by call: the first mutating or syncing call whose
    /// description `rule` accepts fails, and every call after it. A call
    /// is described as its name and path: `create P`, `open_write P`,
    /// `write P`, `set_len P`, `sync P`, `rename FROM -> TO`, `remove P`,
    /// `sync_dir D`, `truncate P` (a file's path is its current name).
    pub fn set_crash_when(&self, rule: impl FnMut(&str) -> bool + Send + 'static) {
        self.lock().crash_when = Some(Box::new(rule));
    }

    /// Whether the simulated process has crashed.
    pub fn crashed(&self) -> bool {
        self.lock().crashed
    }

    /// The call the power failed in (its description, as
    /// [`SimIo::set_crash_when`] gives it), once crashed.
    pub fn crashed_in(&self) -> Option<String> {
        self.lock().crashed_in.clone()
    }

    /// Plans a failed fsync: `Some(k)` lets `k` more `IoFile::sync` calls
    /// succeed; the next one fails with EIO and forgets the file's unsynced
    /// writes (module docs). `None` cancels the plan.
    pub fn set_sync_failure_after(&self, syncs: Option<u64>) {
        self.lock().sync_failure_after = syncs;
    }

    /// Whether a failed fsync planned by [`SimIo::set_sync_failure_after`]
    /// has yet to happen.
    pub fn sync_failure_planned(&self) -> bool {
        self.lock().sync_failure_after.is_some()
    }

    /// Bounds the total bytes of all files in the current namespace
    /// (`None`: unbounded).
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.lock().capacity = bytes;
    }

    /// Total bytes of the files in the current namespace (what
    /// [`SimIo::set_capacity`] bounds).
    pub fn used_bytes(&self) -> u64 {
        self.lock().used()
    }

    /// Mutating or syncing calls made so far (to plan a crash at each of
    /// them in turn).
    pub fn op_count(&self) -> u64 {
        self.lock().ops
    }

    /// The disk as a power loss now would leave it, as a new disk with no
    /// crash planned (the capacity stays): only the durable namespace, each
    /// file its durable bytes plus a prefix, chosen from `seed`, of what was
    /// appended since its last sync. This disk is left as it is.
    pub fn restart(&self, seed: u64) -> SimIo {
        let disk = self.lock();
        let mut rng = SplitMix64(seed);
        let mut inodes = HashMap::new();
        let live: BTreeSet<u64> = disk.durable.values().copied().collect();
        for ino in live {
            let bytes = disk.inodes[&ino].after_power_loss(&mut rng);
            let inode = Inode {
                current: bytes.clone(),
                durable: bytes,
                pending: Vec::new(),
            };
            inodes.insert(ino, inode);
        }
        let after = Disk {
            inodes,
            current: disk.durable.clone(),
            durable: disk.durable.clone(),
            dirs: disk.dirs.clone(),
            next_inode: disk.next_inode,
            crash_after: None,
            crash_when: None,
            crashed: false,
            crashed_in: None,
            capacity: disk.capacity,
            sync_failure_after: None,
            ops: 0,
            locks: BTreeMap::new(),
        };
        SimIo {
            disk: Arc::new(Mutex::new(after)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        lock(&self.disk)
    }
}

fn lock(disk: &Mutex<Disk>) -> MutexGuard<'_, Disk> {
    // A panicking test thread must not hide the disk from the others.
    disk.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Disk {
    /// Fails if the process is dead (for calls that do not count).
    fn alive(&self) -> io::Result<()> {
        if self.crashed {
            Err(crash_error())
        } else {
            Ok(())
        }
    }

    /// Counts one mutating call, described by `call`; fails if the
    /// process is, or now becomes, dead.
    fn step(&mut self, call: impl FnOnce(&Disk) -> String) -> io::Result<()> {
        self.alive()?;
        self.ops += 1;
        let planned = self.crash_when.is_some() || self.crash_after == Some(0);
        let described = planned.then(|| call(self));
        let by_rule = match (&mut self.crash_when, &described) {
            (Some(rule), Some(what)) => rule(what),
            _ => false,
        };
        let by_count = match self.crash_after {
            Some(0) => true,
            Some(k) => {
                self.crash_after = Some(k - 1);
                false
            }
            None => false,
        };
        if by_rule || by_count {
            self.crashed = true;
            self.crash_after = None;
            self.crash_when = None;
            self.crashed_in = described;
            Err(crash_error())
        } else {
            Ok(())
        }
    }

    /// A file's current name, for a call's description.
    fn name_of(&self, ino: u64) -> String {
        self.current
            .iter()
            .find(|&(_, &i)| i == ino)
            .map_or_else(|| "(unnamed)".to_owned(), |(p, _)| p.display().to_string())
    }

    /// Total length of the files in the current namespace.
    fn used(&self) -> u64 {
        let live: BTreeSet<u64> = self.current.values().copied().collect();
        live.iter()
            .map(|ino| self.inodes[ino].current.len() as u64)
            .sum()
    }

    /// Fails with ENOSPC if `growth` more bytes do not fit.
    fn reserve(&self, growth: u64) -> io::Result<()> {
        match self.capacity {
            Some(cap) if growth > 0 && self.used() + growth > cap => Err(disk_full()),
            _ => Ok(()),
        }
    }

    fn inode_of(&self, path: &Path) -> io::Result<u64> {
        self.current
            .get(path)
            .copied()
            .ok_or_else(|| not_found(path))
    }

    fn dir_exists(&self, dir: &Path) -> bool {
        dir.as_os_str().is_empty() || self.dirs.contains(dir)
    }
}

/// The directory holding `path` ("" for a bare name).
fn parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new(""))
}

impl Io for SimIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        disk.alive()?;
        for ancestor in dir.ancestors() {
            if !ancestor.as_os_str().is_empty() {
                disk.dirs.insert(ancestor.to_path_buf());
            }
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let disk = self.lock();
        disk.alive()?;
        if !disk.dir_exists(dir) {
            return Err(not_found(dir));
        }
        Ok(disk
            .current
            .keys()
            .filter(|path| parent(path) == dir)
            .filter_map(|path| path.file_name()?.to_str().map(str::to_owned))
            .collect())
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        let mut disk = self.lock();
        disk.step(|_| format!("create {}", path.display()))?;
        if !disk.dir_exists(parent(path)) {
            return Err(not_found(parent(path)));
        }
        if disk.current.contains_key(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: file exists", path.display()),
            ));
        }
        let ino = disk.next_inode;
        disk.next_inode += 1;
        disk.inodes.insert(ino, Inode::empty());
        disk.current.insert(path.to_path_buf(), ino);
        Ok(Box::new(SimFile {
            disk: Arc::clone(&self.disk),
            inode: ino,
            len: 0,
        }))
    }

    fn open_write(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        let mut disk = self.lock();
        disk.step(|_| format!("open_write {}", path.display()))?;
        let ino = disk.inode_of(path)?;
        let len = disk.inodes[&ino].current.len() as u64;
        Ok(Box::new(SimFile {
            disk: Arc::clone(&self.disk),
            inode: ino,
            len,
        }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let disk = self.lock();
        disk.alive()?;
        let ino = disk.inode_of(path)?;
        Ok(disk.inodes[&ino].current.clone())
    }

    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let disk = self.lock();
        disk.alive()?;
        let ino = disk.inode_of(path)?;
        let bytes = &disk.inodes[&ino].current;
        let start = (offset as usize).min(bytes.len());
        let end = start.saturating_add(len).min(bytes.len());
        Ok(bytes[start..end].to_vec())
    }

    fn file_len(&self, path: &Path) -> io::Result<u64> {
        let disk = self.lock();
        disk.alive()?;
        let ino = disk.inode_of(path)?;
        Ok(disk.inodes[&ino].current.len() as u64)
    }

    fn map_private(&self, path: &Path) -> io::Result<MappedFile> {
        let disk = self.lock();
        disk.alive()?;
        let ino = disk.inode_of(path)?;
        Ok(MappedFile::heap_copy(&disk.inodes[&ino].current))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        disk.step(|_| format!("rename {} -> {}", from.display(), to.display()))?;
        let ino = disk.inode_of(from)?;
        if !disk.dir_exists(parent(to)) {
            return Err(not_found(parent(to)));
        }
        disk.current.remove(from);
        disk.current.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        disk.step(|_| format!("remove {}", path.display()))?;
        disk.inode_of(path)?;
        disk.current.remove(path);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        disk.step(|_| format!("sync_dir {}", dir.display()))?;
        if !disk.dir_exists(dir) {
            return Err(not_found(dir));
        }
        let Disk {
            current, durable, ..
        } = &mut *disk;
        durable.retain(|path, _| parent(path) != dir);
        for (path, ino) in current.iter() {
            if parent(path) == dir {
                durable.insert(path.clone(), *ino);
            }
        }
        Ok(())
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut disk = self.lock();
        disk.step(|_| format!("truncate {}", path.display()))?;
        let ino = disk.inode_of(path)?;
        let old = disk.inodes[&ino].current.len() as u64;
        disk.reserve(len.saturating_sub(old))?;
        let inode = disk.inodes.get_mut(&ino).expect("inode of a current path");
        inode.resize(len as usize);
        inode.sync();
        Ok(())
    }

    fn lock_dir(&self, dir: &Path) -> Result<DirLock, DirLockError> {
        let mut disk = self.lock();
        // Not a disk write: does not count towards a planned crash.
        disk.alive()
            .map_err(|e| FileError::new("locking", dir, e))?;
        if !disk.dir_exists(dir) {
            return Err(FileError::new("locking", dir, not_found(dir)).into());
        }
        if let Some(&pid) = disk.locks.get(dir) {
            return Err(DirLockError::InUse {
                dir: dir.to_path_buf(),
                pid: Some(pid),
            });
        }
        disk.locks.insert(dir.to_path_buf(), std::process::id());
        let held = SimDirLock {
            disk: Arc::clone(&self.disk),
            dir: dir.to_path_buf(),
        };
        Ok(DirLock::new(dir, held))
    }
}

/// A sync-only handle on a [`SimFile`] (for the pipeline's sync thread).
struct SimFileSync {
    disk: Arc<Mutex<Disk>>,
    inode: u64,
}

impl FileSync for SimFileSync {
    fn sync(&self) -> io::Result<()> {
        sync_inode(&self.disk, self.inode)
    }
}

/// Fsyncs the file `inode` (with the fault schedule's crash and EIO).
fn sync_inode(disk: &Mutex<Disk>, inode: u64) -> io::Result<()> {
    let mut disk = lock(disk);
    disk.step(|d| format!("sync {}", d.name_of(inode)))?;
    let fail = match disk.sync_failure_after {
        Some(0) => {
            disk.sync_failure_after = None;
            true
        }
        Some(k) => {
            disk.sync_failure_after = Some(k - 1);
            false
        }
        None => false,
    };
    let inode = disk.inodes.get_mut(&inode).expect("an open file's inode");
    if fail {
        inode.forget_pending();
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    inode.sync();
    Ok(())
}

impl IoFile for SimFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        let was_dead = disk.crashed;
        if let Err(e) = disk.step(|d| format!("write {}", d.name_of(self.inode))) {
            if !was_dead {
                // The power failed during this write: it reached the page
                // cache but not the disk; a restart may keep a prefix.
                self.len = place(&mut disk, self.inode, self.len, buf);
            }
            return Err(e);
        }
        let end = self.len + buf.len() as u64;
        let old = disk.inodes[&self.inode].current.len() as u64;
        disk.reserve(end.saturating_sub(old))?;
        self.len = place(&mut disk, self.inode, self.len, buf);
        Ok(())
    }

    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        let was_dead = disk.crashed;
        if let Err(e) = disk.step(|d| format!("write {}", d.name_of(self.inode))) {
            if !was_dead {
                place(&mut disk, self.inode, offset, buf);
            }
            return Err(e);
        }
        let end = offset + buf.len() as u64;
        let old = disk.inodes[&self.inode].current.len() as u64;
        disk.reserve(end.saturating_sub(old))?;
        place(&mut disk, self.inode, offset, buf);
        self.len = self.len.max(end);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        sync_inode(&self.disk, self.inode)
    }

    fn syncer(&self) -> io::Result<Arc<dyn FileSync>> {
        Ok(Arc::new(SimFileSync {
            disk: Arc::clone(&self.disk),
            inode: self.inode,
        }))
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        disk.step(|d| format!("set_len {}", d.name_of(self.inode)))?;
        let old = disk.inodes[&self.inode].current.len() as u64;
        disk.reserve(len.saturating_sub(old))?;
        disk.inodes
            .get_mut(&self.inode)
            .expect("an open file's inode")
            .resize(len as usize);
        self.len = len;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

/// Writes `buf` at offset `at` into inode `ino` (no checks); returns the
/// offset after it.
fn place(disk: &mut Disk, ino: u64, at: u64, buf: &[u8]) -> u64 {
    let inode = disk.inodes.get_mut(&ino).expect("an open file's inode");
    inode.write(at as usize, buf);
    at + buf.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk_with_dir() -> (SimIo, PathBuf) {
        let sim = SimIo::new();
        let dir = PathBuf::from("/data");
        sim.create_dir_all(&dir).unwrap();
        (sim, dir)
    }

    /// A file created, written, synced and named durably.
    fn durable_file(sim: &SimIo, dir: &Path, name: &str, bytes: &[u8]) -> Box<dyn IoFile> {
        let mut f = sim.create(&dir.join(name)).unwrap();
        f.write_all(bytes).unwrap();
        f.sync().unwrap();
        sim.sync_dir(dir).unwrap();
        f
    }

    #[test]
    fn unsynced_appends_are_lost_or_torn_to_a_prefix() {
        let (sim, dir) = disk_with_dir();
        // The unsynced tail crosses a sector boundary (bytes 500..1000).
        let durable = vec![b'd'; 500];
        let mut f = durable_file(&sim, &dir, "a", &durable);
        let tail: Vec<u8> = (0..500).map(|i| i as u8 | 1).collect();
        f.write_all(&tail).unwrap();
        let full = [durable.clone(), tail].concat();
        let mut seen_lengths = BTreeSet::new();
        for seed in 0..200 {
            let after = sim.restart(seed).read(&dir.join("a")).unwrap();
            assert!(after.len() >= 500, "the synced bytes survive");
            assert_eq!(
                after[..],
                full[..after.len()],
                "a prefix of what was written"
            );
            seen_lengths.insert(after.len());
        }
        assert!(
            seen_lengths.contains(&500),
            "sometimes nothing unsynced survives"
        );
        assert!(
            seen_lengths.contains(&full.len()),
            "sometimes all of it does"
        );
        assert!(seen_lengths.len() > 3, "and sometimes part of it");
    }

    #[test]
    fn a_write_inside_one_sector_lands_whole_or_not_at_all() {
        let (sim, dir) = disk_with_dir();
        let mut f = durable_file(&sim, &dir, "a", &[0; 64]);
        f.write_at(24, &[7; 20]).unwrap();
        for seed in 0..100 {
            let after = sim.restart(seed).read(&dir.join("a")).unwrap();
            let slot = &after[24..44];
            assert!(slot == [7; 20] || slot == [0; 20], "{slot:?}");
        }
    }

    #[test]
    fn synced_bytes_survive_every_restart() {
        let (sim, dir) = disk_with_dir();
        let mut f = durable_file(&sim, &dir, "a", b"one");
        f.write_all(b"two").unwrap();
        f.sync().unwrap();
        for seed in 0..20 {
            assert_eq!(sim.restart(seed).read(&dir.join("a")).unwrap(), b"onetwo");
        }
    }

    #[test]
    fn a_new_file_is_lost_without_sync_dir_even_if_synced() {
        let (sim, dir) = disk_with_dir();
        let mut f = sim.create(&dir.join("a")).unwrap();
        f.write_all(b"x").unwrap();
        f.sync().unwrap();
        let after = sim.restart(1);
        assert!(after.list(&dir).unwrap().is_empty());
        sim.sync_dir(&dir).unwrap();
        assert_eq!(sim.restart(1).list(&dir).unwrap(), vec!["a".to_string()]);
    }

    #[test]
    fn an_unsynced_rename_is_lost_and_sync_dir_makes_it_durable() {
        let (sim, dir) = disk_with_dir();
        durable_file(&sim, &dir, "tmp", b"new");
        durable_file(&sim, &dir, "live", b"old");
        sim.rename(&dir.join("tmp"), &dir.join("live")).unwrap();
        assert_eq!(sim.read(&dir.join("live")).unwrap(), b"new");

        let lost = sim.restart(7);
        assert_eq!(lost.read(&dir.join("live")).unwrap(), b"old");
        assert_eq!(lost.read(&dir.join("tmp")).unwrap(), b"new");

        sim.sync_dir(&dir).unwrap();
        let kept = sim.restart(7);
        assert_eq!(kept.read(&dir.join("live")).unwrap(), b"new");
        assert!(kept.read(&dir.join("tmp")).is_err());
    }

    #[test]
    fn an_unsynced_removal_is_lost() {
        let (sim, dir) = disk_with_dir();
        durable_file(&sim, &dir, "a", b"x");
        sim.remove(&dir.join("a")).unwrap();
        assert!(sim.read(&dir.join("a")).is_err());
        assert_eq!(sim.restart(3).read(&dir.join("a")).unwrap(), b"x");
        sim.sync_dir(&dir).unwrap();
        assert!(sim.restart(3).read(&dir.join("a")).is_err());
    }

    #[test]
    fn unsynced_changes_land_independently_and_synced_ones_are_kept() {
        let (sim, dir) = disk_with_dir();
        let mut f = durable_file(&sim, &dir, "a", b"abcdef");
        f.set_len(2).unwrap();
        f.write_all(b"XY").unwrap();
        assert_eq!(sim.read(&dir.join("a")).unwrap(), b"abXY");
        let outcomes: BTreeSet<Vec<u8>> = (0..200)
            .map(|seed| sim.restart(seed).read(&dir.join("a")).unwrap())
            .collect();
        // Each unsynced change lands or not, independently (the write
        // possibly torn).
        for possible in [&b"abcdef"[..], b"ab", b"abXY", b"abXYef"] {
            assert!(outcomes.contains(possible), "{possible:?} in {outcomes:?}");
        }
        for outcome in &outcomes {
            assert!(outcome.starts_with(b"ab"), "{outcome:?}");
        }
        f.sync().unwrap();
        assert_eq!(sim.restart(0).read(&dir.join("a")).unwrap(), b"abXY");
        sim.truncate(&dir.join("a"), 1).unwrap();
        assert_eq!(sim.restart(0).read(&dir.join("a")).unwrap(), b"a");
    }

    #[test]
    fn a_failed_fsync_forgets_the_pending_writes_for_ever() {
        let (sim, dir) = disk_with_dir();
        let mut f = durable_file(&sim, &dir, "a", b"one");
        f.write_all(b"two").unwrap();
        sim.set_sync_failure_after(Some(0));
        let err = f.sync().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert_eq!(sim.read(&dir.join("a")).unwrap(), b"onetwo", "reads see it");
        f.write_all(b"three").unwrap();
        f.sync().unwrap();
        for seed in 0..20 {
            let after = sim.restart(seed).read(&dir.join("a")).unwrap();
            assert_eq!(after, b"one\0\0\0three", "the failed bytes never land");
        }
    }

    #[test]
    fn an_overwrite_lands_or_not_after_a_power_loss() {
        let (sim, dir) = disk_with_dir();
        let mut f = durable_file(&sim, &dir, "a", b"0000");
        f.write_at(1, b"ab").unwrap();
        f.write_all(b"xy").unwrap();
        assert_eq!(sim.read(&dir.join("a")).unwrap(), b"0ab0xy");
        let outcomes: BTreeSet<Vec<u8>> = (0..200)
            .map(|seed| sim.restart(seed).read(&dir.join("a")).unwrap())
            .collect();
        assert!(outcomes.contains(&b"0000"[..]));
        assert!(outcomes.contains(&b"0ab0xy"[..]));
        assert!(outcomes.contains(&b"0000xy"[..]), "the later write alone");
        f.sync().unwrap();
        assert_eq!(sim.restart(0).read(&dir.join("a")).unwrap(), b"0ab0xy");
    }

    #[test]
    fn a_crash_by_call_fails_the_first_call_the_rule_accepts() {
        let (sim, dir) = disk_with_dir();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        sim.set_crash_when(move |what| {
            log.lock().unwrap().push(what.to_owned());
            what.starts_with("rename") && what.ends_with("/data/b")
        });
        let mut f = sim.create(&dir.join("a")).unwrap();
        f.write_all(b"x").unwrap();
        f.sync().unwrap();
        sim.rename(&dir.join("a"), &dir.join("c")).unwrap();
        assert!(!sim.crashed());
        let err = sim.rename(&dir.join("c"), &dir.join("b")).unwrap_err();
        assert_eq!(err.to_string(), "simulated crash");
        assert_eq!(
            sim.crashed_in().as_deref(),
            Some("rename /data/c -> /data/b")
        );
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "create /data/a",
                "write /data/a",
                "sync /data/a",
                "rename /data/a -> /data/c",
                "rename /data/c -> /data/b",
            ]
        );
        assert!(sim.sync_dir(&dir).is_err(), "every call after it fails");
        assert_eq!(sim.restart(0).crashed_in(), None);
    }

    #[test]
    fn after_the_planned_crash_every_call_fails() {
        let (sim, dir) = disk_with_dir();
        sim.set_crash_after(Some(2));
        let mut f = sim.create(&dir.join("a")).unwrap();
        f.write_all(b"x").unwrap();
        assert!(!sim.crashed());
        let err = f.sync().unwrap_err();
        assert_eq!(err.to_string(), "simulated crash");
        assert!(sim.crashed());
        assert!(sim.read(&dir.join("a")).is_err(), "reads fail too");
        assert!(sim.list(&dir).is_err());
        assert!(f.write_all(b"y").is_err());
        let after = sim.restart(0);
        assert!(!after.crashed());
        assert!(
            after.list(&dir).unwrap().is_empty(),
            "the name was never made durable"
        );
    }

    #[test]
    fn the_crashing_write_may_leave_a_prefix() {
        let (sim, dir) = disk_with_dir();
        let mut f = durable_file(&sim, &dir, "a", b"");
        sim.set_crash_after(Some(0));
        assert!(f.write_all(&[1; 1500]).is_err());
        let lengths: BTreeSet<usize> = (0..100)
            .map(|seed| sim.restart(seed).read(&dir.join("a")).unwrap().len())
            .collect();
        assert!(lengths.contains(&1500) && lengths.len() > 2);
    }

    #[test]
    fn a_full_disk_writes_nothing_then_resumes_when_space_returns() {
        let (sim, dir) = disk_with_dir();
        sim.set_capacity(Some(10));
        let mut f = sim.create(&dir.join("a")).unwrap();
        f.write_all(b"12345678").unwrap();
        let err = f.write_all(b"abc").unwrap_err();
        assert!(uuidmap_engine::store::error::is_disk_full(&err));
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(
            sim.read(&dir.join("a")).unwrap(),
            b"12345678",
            "nothing written"
        );
        assert_eq!(f.len(), 8);
        assert!(f.set_len(11).is_err(), "extending counts too");
        f.write_all(b"ab").unwrap();
        sim.set_capacity(Some(20));
        f.write_all(b"cd").unwrap();
        assert_eq!(sim.read(&dir.join("a")).unwrap(), b"12345678abcd");
    }

    #[test]
    fn removing_a_file_frees_its_space() {
        let (sim, dir) = disk_with_dir();
        sim.set_capacity(Some(4));
        durable_file(&sim, &dir, "a", b"1234");
        let mut b = sim.create(&dir.join("b")).unwrap();
        assert!(b.write_all(b"x").is_err());
        sim.remove(&dir.join("a")).unwrap();
        b.write_all(b"x").unwrap();
    }

    #[test]
    fn map_private_and_file_len_see_current_bytes() {
        let (sim, dir) = disk_with_dir();
        let mut f = sim.create(&dir.join("a")).unwrap();
        f.write_all(b"hello").unwrap();
        assert_eq!(sim.file_len(&dir.join("a")).unwrap(), 5);
        assert_eq!(
            sim.map_private(&dir.join("a")).unwrap().as_slice(),
            b"hello"
        );
    }

    #[test]
    fn a_directory_lock_excludes_a_second_until_dropped_and_a_restart_has_none() {
        let (sim, dir) = disk_with_dir();
        let held = sim.lock_dir(&dir).unwrap();
        let clone = sim.clone();
        match clone.lock_dir(&dir) {
            Err(DirLockError::InUse { dir: d, pid }) => {
                assert_eq!((d, pid), (dir.clone(), Some(std::process::id())));
            }
            other => panic!("a second lock on a locked directory: {other:?}"),
        }
        assert!(
            sim.list(&dir).unwrap().is_empty(),
            "the lock is no file on the disk"
        );
        let after_crash = sim.restart(0);
        after_crash
            .lock_dir(&dir)
            .expect("a restarted disk has no locks");
        drop(held);
        sim.lock_dir(&dir).expect("free once the guard is dropped");
        assert!(sim.lock_dir(Path::new("/nowhere")).is_err());
    }

    #[test]
    fn create_refuses_an_existing_name_and_a_missing_directory() {
        let (sim, dir) = disk_with_dir();
        durable_file(&sim, &dir, "a", b"");
        let exists = sim.create(&dir.join("a")).err().unwrap();
        assert_eq!(exists.kind(), io::ErrorKind::AlreadyExists);
        let missing = sim.create(Path::new("/nowhere/a")).err().unwrap();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }
}
