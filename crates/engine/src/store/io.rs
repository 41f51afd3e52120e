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
use std::ops::Range;
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
    /// The whole file, read into this process's own memory: what
    /// [`Io::map_private`] gives, but every page already private, so a
    /// first write to a page costs no copy-on-write fault. Recovery takes it
    /// instead of the mapping when the WAL tail would write to most pages
    /// (`snapshot::Load`).
    ///
    /// `ranges` (in file order, apart, inside the file; else
    /// `InvalidInput`) are each read whole by one thread, which calls
    /// `each(i, bytes)` on range `i` at once, while its bytes are still in
    /// that core's cache: a checksum pass fused with the read. By default,
    /// the mapping, then `each` on every range in turn.
    fn read_private(
        &self,
        path: &Path,
        ranges: &[Range<usize>],
        each: &(dyn Fn(usize, &[u8]) + Sync),
    ) -> io::Result<MappedFile> {
        self.map_private(path)?.checked_ranges(ranges, each)
    }
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
    /// are copied only when written. Or anonymous memory the file was read
    /// into (`Io::read_private`).
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

    /// `self`, after `each` on every range of it (the default
    /// [`Io::read_private`]'s part, for a file already in memory).
    fn checked_ranges(
        self,
        ranges: &[Range<usize>],
        each: &(dyn Fn(usize, &[u8]) + Sync),
    ) -> io::Result<MappedFile> {
        for (i, r) in ranges.iter().enumerate() {
            let bytes = self.as_slice().get(r.clone()).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "a range lies outside the file")
            })?;
            each(i, bytes);
        }
        Ok(self)
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

    fn read_private(
        &self,
        path: &Path,
        ranges: &[Range<usize>],
        each: &(dyn Fn(usize, &[u8]) + Sync),
    ) -> io::Result<MappedFile> {
        let file = File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::other("the file is larger than the address space"))?;
        if len == 0 {
            return MappedFile::heap_copy(&[]).checked_ranges(ranges, each);
        }
        // No huge pages while it is read: with the kernel's default
        // `defrag=madvise`, a huge page advised here is compacted for at
        // fault time, which made the read 1.4–2.8× slower (BENCHMARKS.md,
        // issue 38).
        let mut map = memmap2::MmapOptions::new().len(len).map_anon()?;
        read_in_parallel(&file, &mut map, ranges, each)?;
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

/// Reads `file` into `dst` (its whole length) on every available CPU,
/// calling `each` on each of `ranges` as soon as it is read (see
/// [`Io::read_private`]). The work is cut into units in file order: each
/// range whole, and the bytes between ranges in 8 MiB pieces; threads take
/// the next unit in turn. One thread copies from the page cache at about
/// 2–3 GB/s here, so a 4 GB snapshot wants them all. Each unit's pages
/// are faulted in with one call before its read ([`populate_write`]):
/// a page fault per 4 KiB inside the read cost about a sixth of the read
/// at 100M (BENCHMARKS.md, issue 38). (A recovery-time copy, not a hot
/// path: the lock is taken once per unit.)
fn read_in_parallel(
    file: &File,
    dst: &mut [u8],
    ranges: &[Range<usize>],
    each: &(dyn Fn(usize, &[u8]) + Sync),
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    use std::sync::Mutex;
    const PIECE: usize = 8 << 20;
    let len = dst.len();
    let mut units: Vec<(usize, &mut [u8], Option<usize>)> = Vec::new();
    let mut rest = dst;
    let mut at = 0;
    /// Cuts `rest` up to byte `end` of the file into units: one for a
    /// range, 8 MiB pieces between ranges.
    fn cut<'a>(
        units: &mut Vec<(usize, &'a mut [u8], Option<usize>)>,
        rest: &mut &'a mut [u8],
        at: &mut usize,
        end: usize,
        range: Option<usize>,
    ) {
        while *at < end {
            let n = if range.is_some() {
                end - *at
            } else {
                PIECE.min(end - *at)
            };
            let (unit, tail) = std::mem::take(rest).split_at_mut(n);
            units.push((*at, unit, range));
            *rest = tail;
            *at += n;
        }
    }
    for (i, r) in ranges.iter().enumerate() {
        if r.start < at || r.end < r.start || r.end > len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the ranges are not in file order, apart, inside the file",
            ));
        }
        cut(&mut units, &mut rest, &mut at, r.start, None);
        cut(&mut units, &mut rest, &mut at, r.end, Some(i));
        if r.is_empty() {
            each(i, &[]);
        }
    }
    cut(&mut units, &mut rest, &mut at, len, None);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(units.len());
    let units = Mutex::new(units.into_iter());
    let read = || -> io::Result<()> {
        loop {
            let next = units.lock().unwrap_or_else(|e| e.into_inner()).next();
            let Some((offset, buf, range)) = next else {
                return Ok(());
            };
            populate_write(buf);
            file.read_exact_at(buf, offset as u64)?;
            if let Some(i) = range {
                each(i, buf);
            }
        }
    };
    std::thread::scope(|scope| {
        let others: Vec<_> = (1..threads).map(|_| scope.spawn(read)).collect();
        let mine = read();
        others
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .fold(mine, Result::and)
    })
}

/// Faults in the whole pages of `buf`, writable, in one call
/// (`MADV_POPULATE_WRITE`, Linux 5.14+), so that a read into fresh
/// anonymous memory copies into present pages rather than taking a page
/// fault for each 4 KiB. Best effort: an older kernel refuses it, and the
/// read faults the pages in as before.
fn populate_write(buf: &mut [u8]) {
    const PAGE: usize = 4096;
    let start = buf.as_mut_ptr() as usize;
    let first = start.next_multiple_of(PAGE);
    let end = (start + buf.len()) & !(PAGE - 1);
    if end <= first {
        return;
    }
    // SAFETY: [first, end) is whole pages inside `buf`, memory this
    // thread holds exclusively (`&mut`); MADV_POPULATE_WRITE only faults
    // its pages in (allocating and zeroing the ones not yet present) and
    // changes no byte that is there already.
    unsafe {
        libc::madvise(
            first as *mut libc::c_void,
            end - first,
            libc::MADV_POPULATE_WRITE,
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of several 8 MiB pieces and a ragged end reads back whole,
    /// byte for byte; each range is handed to `each` once, with its bytes;
    /// writes to the copy never reach the file.
    #[test]
    fn a_file_read_private_is_the_files_bytes_in_memory_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..(3 << 23) + 4099u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        fs::write(&path, &bytes).unwrap();
        // A small range, an empty one, one across two 8 MiB pieces, one
        // at the end.
        let ranges = [
            4096..8192,
            9000..9000,
            (8 << 20) - 100..(9 << 20),
            bytes.len() - 3..bytes.len(),
        ];
        let seen = std::sync::Mutex::new(vec![None; ranges.len()]);
        let each = |i: usize, b: &[u8]| {
            let mut seen = seen.lock().unwrap();
            assert!(seen[i].is_none(), "range {i} handed out twice");
            seen[i] = Some(crate::store::crc32c(b));
        };
        let mut copy = OsIo.read_private(&path, &ranges, &each).unwrap();
        assert_eq!(copy.len(), bytes.len());
        assert!(copy.as_slice() == bytes.as_slice(), "the bytes differ");
        for (i, r) in ranges.iter().enumerate() {
            let want = crate::store::crc32c(&bytes[r.clone()]);
            assert_eq!(seen.lock().unwrap()[i], Some(want), "range {i}");
        }
        // SAFETY: the pointer is valid for writes of `len()` bytes while
        // `copy` lives, and no slice of it is alive.
        unsafe { copy.as_mut_ptr().write(!bytes[0]) };
        assert_eq!(copy.as_slice()[0], !bytes[0]);
        assert_eq!(fs::read(&path).unwrap(), bytes);
        // Ranges out of order, overlapping or past the end are refused.
        for bad in [
            vec![8192..9000, 0..10],
            vec![0..100, 50..200],
            // One range, past the end.
            vec![Range {
                start: 0,
                end: bytes.len() + 1,
            }],
        ] {
            let e = OsIo.read_private(&path, &bad, &|_, _| {}).err().unwrap();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
        // An empty file reads as nothing.
        fs::write(&path, b"").unwrap();
        assert!(
            OsIo.read_private(&path, &[], &|_, _| {})
                .unwrap()
                .is_empty()
        );
    }
}
