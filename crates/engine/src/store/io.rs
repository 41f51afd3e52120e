//! The file-system calls the store makes, behind a trait, so that tests can
//! swap in a simulated disk that crashes and loses what was not made durable
//! (see `sim_io`).
//!
//! # What we assume of the disk
//!
//! - `IoFile::sync` (fdatasync) makes the file's bytes written so far durable.
//!   Bytes written but not synced may be lost, or survive in part, after a
//!   power loss: each unsynced write may be lost, land whole, or land in
//!   part, independently of the others (the page cache writes pages back in
//!   any order). A write inside one 512-byte sector is atomic: it lands
//!   whole or not at all (the WAL's synced-end slots rely on it). A
//!   `kill -9` loses nothing written: the kernel has it.
//! - A failed fsync may have dropped the dirty pages it was to write and
//!   marked them clean (Linux does): a later fsync that succeeds proves
//!   nothing about them. So a failed WAL fsync is fatal for that file.
//! - Creating, renaming or removing a directory entry is durable only after
//!   `Io::sync_dir` on that directory. `rename` itself is atomic: after a crash
//!   the name refers to the old file or the new one, never to a mix.
//! - Nothing but this process writes into the data directory (its lock,
//!   `Io::lock_dir`, keeps other uuidmap processes out); in particular a
//!   snapshot file is never modified in place once renamed into place (it is
//!   mapped copy-on-write while the server runs, and Linux lets changes made
//!   to a file show through the clean pages of a private mapping).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use super::dir_lock::DirLock;
use super::error::DirLockError;

/// File-system operations of the store. Paths are absolute or relative to the
/// process's working directory, as given.
pub trait Io: Send + Sync + 'static {
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names (not paths) of the entries of `dir`, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates a new, empty file for appending; fails if it already exists.
    fn create(&self, path: &Path) -> io::Result<Box<dyn IoFile>>;
    /// Opens an existing file for writing (the WAL's spare file); appends
    /// go at its end.
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn IoFile>>;
    /// The whole contents of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The contents of a file from byte `offset` on (empty if the file is
    /// shorter): lets a reader that follows a growing file read only what
    /// is new.
    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
        let mut data = self.read(path)?;
        data.drain(..data.len().min(offset as usize));
        Ok(data)
    }
    /// At most `len` bytes of a file from byte `offset` on (fewer at its
    /// end): lets a reader of a preallocated WAL file read its records
    /// without its zero-filled rest.
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut data = self.read_from(path, offset)?;
        data.truncate(len);
        Ok(data)
    }
    /// The length of a file in bytes.
    fn file_len(&self, path: &Path) -> io::Result<u64>;
    /// The whole file, mapped privately: writes to the mapping stay in this
    /// process's memory and never reach the file.
    fn map_private(&self, path: &Path) -> io::Result<MappedFile>;
    /// Renames `from` to `to`, replacing `to` if it exists (atomically).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the creations, renames and removals in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Cuts a file to `len` bytes and makes the new length durable.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Takes the exclusive lock on the data directory `dir` (see
    /// `dir_lock`); it lasts until the guard is dropped. The default is the
    /// real file system's lock, `flock` on `<dir>/LOCK`; a simulated disk
    /// keeps its own.
    fn lock_dir(&self, dir: &Path) -> Result<DirLock, DirLockError> {
        super::dir_lock::lock_os_dir(dir)
    }
}

/// Takes the exclusive lock on the data directory `dir` (which must
/// exist) through `io`, or says who holds it. Hold the guard for as long as
/// you write the directory.
pub fn lock_data_dir(io: &dyn Io, dir: &Path) -> Result<DirLock, DirLockError> {
    io.lock_dir(dir)
}

/// A file open for appending.
pub trait IoFile: Send {
    /// Appends all of `buf` at the end of the file.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Writes `buf` at `offset`, over what is there and past the end if it
    /// reaches there (the WAL's records in a preallocated file, and its
    /// synced-end slots). Not durable until `sync`; after a crash before
    /// it, the old bytes, the new ones or (for a write that crosses a
    /// sector) a mix may be there.
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes every byte written so far durable (fdatasync).
    fn sync(&mut self) -> io::Result<()>;
    /// A second handle on the same file that can only sync it, for a
    /// thread that fsyncs one group while the writer writes the next (see
    /// `writer::sync_thread`). Its `sync` makes durable at least every byte
    /// written through this handle before the call began; bytes written
    /// while it runs may or may not be included.
    fn syncer(&self) -> io::Result<Arc<dyn FileSync>>;
    /// Cuts (or extends with zeros) the file to `len` bytes; the next write
    /// goes at `len`. Not durable until `sync`.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// The file's length as this handle has written it.
    fn len(&self) -> u64;
    /// Whether the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A handle that only syncs a file (see [`IoFile::syncer`]).
pub trait FileSync: Send + Sync {
    /// Makes the file's bytes written so far durable (fdatasync).
    fn sync(&self) -> io::Result<()>;
}

/// A whole file mapped into memory privately (copy-on-write), or, for the
/// simulated disk, a private heap copy of it. Either way the bytes are
/// page-aligned and stay at the same address while the value lives, even if
/// the value itself moves.
pub struct MappedFile {
    inner: Mapping,
}

enum Mapping {
    /// A private file mapping: clean pages are shared with the page cache and
    /// are copied only when written.
    Mmap(memmap2::MmapMut),
    /// A heap copy (simulated disks); `len` bytes of the page-aligned words.
    Heap { words: Box<[PageWords]>, len: usize },
}

/// 4 KiB of heap memory, page-aligned, for heap-backed mappings.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct PageWords([u64; 512]);

impl MappedFile {
    /// A page-aligned private heap copy of `bytes` (for simulated disks).
    pub fn heap_copy(bytes: &[u8]) -> MappedFile {
        let pages = bytes.len().div_ceil(4096).max(1);
        let mut words = vec![PageWords([0; 512]); pages].into_boxed_slice();
        let dst: &mut [u8] = bytemuck::cast_slice_mut(pages_as_words(&mut words));
        dst[..bytes.len()].copy_from_slice(bytes);
        MappedFile {
            inner: Mapping::Heap {
                words,
                len: bytes.len(),
            },
        }
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.inner {
            Mapping::Mmap(m) => m,
            Mapping::Heap { words, len } => {
                let words: &[u64] = bytemuck::cast_slice(pages_as_words_ref(words));
                &bytemuck::cast_slice(words)[..*len]
            }
        }
    }

    /// A pointer to the first byte, valid for writes of `len()` bytes while
    /// `self` lives (it does not move when `self` does).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match &mut self.inner {
            Mapping::Mmap(m) => m.as_mut_ptr(),
            Mapping::Heap { words, .. } => words.as_mut_ptr().cast(),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match &self.inner {
            Mapping::Mmap(m) => m.len(),
            Mapping::Heap { len, .. } => *len,
        }
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Asks the kernel to read the whole mapping ahead (before a checksum
    /// pass touches every page). A hint; failure is ignored.
    pub fn will_need(&self) {
        if let Mapping::Mmap(m) = &self.inner {
            let _ = m.advise(memmap2::Advice::WillNeed);
        }
    }
}

fn pages_as_words(pages: &mut [PageWords]) -> &mut [u64] {
    // PageWords is `repr(C)` around `[u64; 512]` with no padding (4096 bytes,
    // align 4096), so a slice of them is a slice of u64.
    let len = pages.len() * 512;
    // SAFETY: same memory, same lifetime, u64 has no invalid bit patterns and
    // a smaller alignment; the length covers exactly the pages.
    unsafe { std::slice::from_raw_parts_mut(pages.as_mut_ptr().cast(), len) }
}

fn pages_as_words_ref(pages: &[PageWords]) -> &[u64] {
    let len = pages.len() * 512;
    // SAFETY: as in `pages_as_words`, for a shared borrow.
    unsafe { std::slice::from_raw_parts(pages.as_ptr().cast(), len) }
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsIo;

/// An appendable file of the real file system.
struct OsFile {
    file: File,
    len: u64,
}

impl Io for OsIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        Ok(Box::new(OsFile { file, len: 0 }))
    }

    fn open_write(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        use std::io::Seek;
        let mut file = OpenOptions::new().write(true).open(path)?;
        let len = file.seek(io::SeekFrom::End(0))?;
        Ok(Box::new(OsFile { file, len }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(offset))?;
        let mut data = Vec::with_capacity(len.min(1 << 20));
        file.take(len as u64).read_to_end(&mut data)?;
        Ok(data)
    }

    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(offset))?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)?;
        Ok(data)
    }

    fn file_len(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::metadata(path)?.len())
    }

    fn map_private(&self, path: &Path) -> io::Result<MappedFile> {
        let file = File::open(path)?;
        if file.metadata()?.len() == 0 {
            // mmap of length 0 is an error; an empty file maps to nothing.
            return Ok(MappedFile::heap_copy(&[]));
        }
        // SAFETY: a private mapping never writes the file. The file may not be
        // truncated or modified by anyone while mapped (see the module's disk
        // assumptions: snapshot files are immutable once in place).
        let map = unsafe { memmap2::MmapOptions::new().map_copy(&file)? };
        Ok(MappedFile {
            inner: Mapping::Mmap(map),
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        file.sync_all()
    }
}

/// A duplicate descriptor of an [`OsFile`], used only to fsync it.
struct OsFileSync(File);

impl FileSync for OsFileSync {
    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }
}

impl IoFile for OsFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.file.write_all(buf) {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                // A short write may have left part of `buf` behind; find out
                // where the file really ends so a rollback knows.
                if let Ok(m) = self.file.metadata() {
                    self.len = m.len();
                }
                Err(e)
            }
        }
    }

    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(buf, offset)?;
        self.len = self.len.max(offset + buf.len() as u64);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn syncer(&self) -> io::Result<Arc<dyn FileSync>> {
        Ok(Arc::new(OsFileSync(self.file.try_clone()?)))
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        use std::io::Seek;
        self.file.set_len(len)?;
        self.file.seek(io::SeekFrom::Start(len))?;
        self.len = len;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}
