//! The `raft-state` file (`store::raft_state`) on the simulated disk
//! (`SimIo`): a crash at every operation, power loss, a failed fsync, a
//! page torn by the device, and a full disk.
//!
//! The property behind every test here: `open` after any of these faults
//! succeeds and returns a state that was really written (or the default a
//! new file holds), never one older than the last state a successful sync
//! made durable; and a file under the name `raft-state` is never damaged.
//! Each write below writes a state of its own, numbered, so the state read
//! back says exactly which write it came from.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use uuidmap_engine::store::raft_state::{
    LogPos, RAFT_STATE_FILE, RaftHardState, RaftStateFile, VoteState,
};
use uuidmap_engine::store::{
    FileSync, Io, IoFile, MappedFile, RaftStateFailed, RaftStateOpenError, StoreError,
};
use uuidmap_testkit_io::SimIo;
use uuidmap_testkit_io::data::SplitMix64;

const DIR: &str = "/data";
/// Power losses tried after each crash (each keeps a different subset of
/// the unsynced writes).
const SEEDS: u64 = 8;

fn disk() -> SimIo {
    let io = SimIo::new();
    io.create_dir_all(Path::new(DIR)).unwrap();
    io
}

fn path() -> PathBuf {
    Path::new(DIR).join(RAFT_STATE_FILE)
}

fn open(io: &SimIo) -> Result<RaftStateFile, RaftStateOpenError> {
    RaftStateFile::open(Arc::new(io.clone()), Path::new(DIR))
}

/// State number `n`: 0 is the default (a new file's), every other one sets
/// every field from `n`, so no two writes write the same state.
fn state(n: u64) -> RaftHardState {
    if n == 0 {
        return RaftHardState::default();
    }
    RaftHardState {
        vote: Some(VoteState {
            term: n,
            node_id: n % 5,
            committed: n % 2 == 1,
        }),
        committed: Some(LogPos {
            term: n,
            index: 100 + n,
        }),
        purged: (!n.is_multiple_of(3)).then_some(LogPos { term: n, index: n }),
        installed_snapshot_lsn: n.is_multiple_of(4).then_some(1000 + n),
        vote_distrusted: false,
    }
}

/// The number of a state [`state`] made; panics on anything else (a state
/// nobody wrote).
/// The mark of a distrusted vote is not part of the number: a torn slot
/// sets it (`a_write_torn_by_the_device_loses_only_that_write_and_distrusts_the_vote_left`).
fn number(s: &RaftHardState) -> u64 {
    let n = s.committed.map_or(0, |c| c.index - 100);
    let unmarked = RaftHardState {
        vote_distrusted: false,
        ..*s
    };
    assert_eq!(unmarked, state(n), "a state that was never written");
    n
}

/// One step of a run.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Write the next state, fsyncing if `true` (a vote) or not (a commit
    /// index).
    Write(bool),
    /// `RaftStateFile::sync`.
    Sync,
}

/// A run of writes from `seed`: mostly unsynced and synced writes, now and
/// then a sync of its own.
fn plan(seed: u64) -> Vec<Step> {
    let mut rng = SplitMix64(seed);
    let len = 8 + rng.next_u64() % 10;
    (0..len)
        .map(|_| match rng.next_u64() % 8 {
            0..=3 => Step::Write(false),
            4..=6 => Step::Write(true),
            _ => Step::Sync,
        })
        .collect()
}

/// What a run did before it stopped.
#[derive(Debug, Default)]
struct Run {
    /// The numbers of the states whose write was begun (the one a crash or
    /// a failure interrupted included: it may have reached the disk).
    begun: Vec<u64>,
    /// The number of the newest state a successful sync made durable (0:
    /// the default, durable once `open` returned).
    durable: u64,
    /// The error that stopped it, if any.
    error: Option<StoreError>,
    /// The open file, if `open` succeeded.
    file: Option<RaftStateFile>,
}

/// Opens the file on `io` and runs `steps` until the first error.
fn run(io: &SimIo, steps: &[Step]) -> Run {
    let mut out = Run::default();
    let mut f = match open(io) {
        Ok(f) => f,
        Err(e) => {
            out.error = Some(e.into());
            return out;
        }
    };
    let mut written = 0;
    for step in steps {
        let result = match *step {
            Step::Write(sync) => {
                let n = out.begun.len() as u64 + 1;
                out.begun.push(n);
                f.write(state(n), sync).map(|()| {
                    written = n;
                    if sync {
                        out.durable = n;
                    }
                })
            }
            Step::Sync => f.sync().map(|()| out.durable = written),
        };
        if let Err(e) = result {
            out.error = Some(e.into());
            break;
        }
    }
    out.file = Some(f);
    out
}

/// After a power loss of `io` with `seed`: `open` succeeds and reads a
/// state `run` began writing (or the default), at least as new as the
/// last one it made durable; then the file takes a synced write that the
/// next power loss keeps. Returns the number of the state read.
fn check_restart(io: &SimIo, seed: u64, run: &Run, context: &str) -> u64 {
    let after = io.restart(seed);
    let mut f = open(&after).unwrap_or_else(|e| panic!("{context}, seed {seed}: {e}"));
    let n = number(f.state());
    assert!(
        n == 0 || run.begun.contains(&n),
        "{context}, seed {seed}: state {n} was never written"
    );
    assert!(
        n >= run.durable,
        "{context}, seed {seed}: read state {n}, but state {} was durable",
        run.durable
    );
    f.write(state(1000), true).unwrap();
    let again = open(&after.restart(seed)).unwrap();
    assert_eq!(number(again.state()), 1000, "{context}, seed {seed}");
    n
}

#[test]
fn a_crash_at_any_operation_keeps_every_synced_state_and_invents_none() {
    let mut crashes = 0;
    for p in 0..12 {
        let steps = plan(p);
        let clean = disk();
        let full = run(&clean, &steps);
        assert!(full.error.is_none(), "{:?}", full.error);
        // Every operation of the run, creation included, is the crash point
        // once; the last crash point lets the whole run finish.
        let total = clean.op_count();
        for k in 0..=total {
            let io = disk();
            io.set_crash_after(Some(k));
            let cut = run(&io, &steps);
            assert_eq!(cut.error.is_some(), k < total, "plan {p}, crash after {k}");
            crashes += u64::from(io.crashed());
            for seed in 0..SEEDS {
                check_restart(&io, seed, &cut, &format!("plan {p}, crash after {k}"));
            }
        }
    }
    assert!(crashes > 200, "only {crashes} crashes");
}

#[test]
fn a_crash_while_creating_leaves_no_file_or_a_whole_one() {
    let clean = disk();
    open(&clean).unwrap();
    let total = clean.op_count();
    let mut outcomes = [0; 2];
    // The last crash point falls after the creation, which then stands.
    for k in 0..=total {
        let io = disk();
        io.set_crash_after(Some(k));
        assert_eq!(open(&io).is_err(), k < total, "crash after {k}");
        for seed in 0..SEEDS {
            let after = io.restart(seed);
            let exists = after.file_len(&path()).is_ok();
            outcomes[usize::from(exists)] += 1;
            let f = open(&after)
                .unwrap_or_else(|e| panic!("crash after {k}, seed {seed}: exists {exists}: {e}"));
            assert_eq!(*f.state(), RaftHardState::default());
            // Whether read or made anew, it is whole and in place now.
            let names = after.list(Path::new(DIR)).unwrap();
            assert_eq!(names, [RAFT_STATE_FILE], "crash after {k}, seed {seed}");
        }
    }
    // Both sides were reached.
    assert!(outcomes[0] > 0 && outcomes[1] > 0, "{outcomes:?}");
}

/// The simulated disk, noting after every call that may change it what a
/// `kill -9` at that moment would leave under the name `raft-state`: its
/// current bytes (the kernel keeps what was written), or nothing.
#[derive(Clone)]
struct Observed {
    disk: SimIo,
    /// One entry per call, in order.
    seen: Arc<Mutex<Vec<Option<Vec<u8>>>>>,
}

impl Observed {
    fn note<T>(&self, result: T) -> T {
        let now = self.disk.read(&path()).ok();
        self.seen.lock().unwrap().push(now);
        result
    }

    fn wrap(&self, file: io::Result<Box<dyn IoFile>>) -> io::Result<Box<dyn IoFile>> {
        let inner = self.note(file)?;
        Ok(Box::new(ObservedFile {
            inner,
            io: self.clone(),
        }))
    }
}

impl Io for Observed {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.note(self.disk.create_dir_all(dir))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.disk.list(dir)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        self.wrap(self.disk.create(path))
    }
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        self.wrap(self.disk.open_write(path))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.disk.read(path)
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        self.disk.file_len(path)
    }
    fn map_private(&self, path: &Path) -> io::Result<MappedFile> {
        self.disk.map_private(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.note(self.disk.rename(from, to))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.note(self.disk.remove(path))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.note(self.disk.sync_dir(dir))
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.note(self.disk.truncate(path, len))
    }
}

struct ObservedFile {
    inner: Box<dyn IoFile>,
    io: Observed,
}

impl IoFile for ObservedFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.io.note(self.inner.write_all(buf))
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.io.note(self.inner.write_at(offset, buf))
    }
    fn sync(&mut self) -> io::Result<()> {
        self.io.note(self.inner.sync())
    }
    fn syncer(&self) -> io::Result<Arc<dyn FileSync>> {
        self.inner.syncer()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.io.note(self.inner.set_len(len))
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

#[test]
fn a_kill_at_any_moment_leaves_no_file_or_a_whole_one() {
    let io = Observed {
        disk: disk(),
        seen: Arc::default(),
    };
    let mut f = RaftStateFile::open(Arc::new(io.clone()), Path::new(DIR)).unwrap();
    for n in 1..=4 {
        f.write(state(n), n.is_multiple_of(2)).unwrap();
    }
    f.sync().unwrap();
    let seen = io.seen.lock().unwrap().clone();
    let mut numbers = Vec::new();
    for (i, bytes) in seen.iter().enumerate() {
        let Some(bytes) = bytes else { continue };
        // What the next process would open: the file as it is now.
        let next = disk();
        next.create(&path()).unwrap().write_all(bytes).unwrap();
        let read = open(&next).unwrap_or_else(|e| panic!("after call {i}: {e}"));
        numbers.push(number(read.state()));
    }
    assert!(numbers.is_sorted(), "{numbers:?}");
    assert_eq!(numbers.first(), Some(&0));
    assert_eq!(numbers.last(), Some(&4));
}

#[test]
fn a_failed_fsync_fails_the_file_for_good_and_the_disk_keeps_a_written_state() {
    let mut failures = 0;
    for p in 0..12 {
        let steps = plan(100 + p);
        let clean = disk();
        run(&clean, &steps);
        // One fsync fails in turn, the first being creation's.
        let syncs = 1 + steps
            .iter()
            .filter(|s| matches!(s, Step::Write(true) | Step::Sync))
            .count() as u64;
        for j in 0..syncs {
            let io = disk();
            io.set_sync_failure_after(Some(j));
            let mut failed = run(&io, &steps);
            let context = format!("plan {p}, fsync {j} fails");
            let Some(error) = &failed.error else {
                // Every fsync after the last write found nothing to sync.
                assert!(io.sync_failure_planned(), "{context}");
                continue;
            };
            failures += 1;
            let message = error.to_string();
            assert!(
                message.contains(&*path().to_string_lossy()),
                "{context}: {message}"
            );
            match &failed.file {
                None => assert!(j == 0, "{context}: open failed: {message}"),
                Some(_) => assert!(
                    matches!(error, StoreError::RaftStateFailed(_)) && message.contains("restart"),
                    "{context}: {message}"
                ),
            }
            if let Some(f) = &mut failed.file {
                // Refused for good, without touching the disk, though its
                // next fsync would succeed.
                let ops = io.op_count();
                for n in [500, 501] {
                    // Failed for good: `write` fails only that way.
                    let later: RaftStateFailed =
                        f.write(state(n), n.is_multiple_of(2)).unwrap_err();
                    assert_eq!(later.path, path(), "{later}");
                    assert!(f.sync().is_err(), "{context}");
                }
                assert_eq!(io.op_count(), ops, "{context}: the disk was touched");
            }
            let last = failed.begun.last().copied().unwrap_or(0);
            for seed in 0..SEEDS {
                let n = check_restart(&io, seed, &failed, &context);
                assert!(n <= last, "{context}: state {n} is after the failed write");
            }
        }
    }
    assert!(failures > 50, "only {failures} failed fsyncs");
}

#[test]
fn a_write_torn_by_the_device_loses_only_that_write_and_distrusts_the_vote_left() {
    let io = disk();
    let mut f = open(&io).unwrap();
    let mut before = io.read(&path()).unwrap();
    for n in 1..=8 {
        f.write(state(n), n.is_multiple_of(3)).unwrap();
        let now = io.read(&path()).unwrap();
        assert_eq!(now.len(), 8192, "the file never grows");
        let changed: Vec<usize> = (0..2)
            .filter(|page| before[page * 4096..][..4096] != now[page * 4096..][..4096])
            .collect();
        assert_eq!(changed.len(), 1, "write {n} changed pages {changed:?}");
        // The device tears that page: its first sector half old, half
        // garbage. The page the write left alone still holds state n - 1.
        let mut torn = now.clone();
        let page = changed[0] * 4096;
        for (i, b) in torn[page + 40..page + 512].iter_mut().enumerate() {
            *b = i as u8;
        }
        let other = disk();
        let mut file = other.create(&path()).unwrap();
        file.write_all(&torn).unwrap();
        let read = open(&other).unwrap();
        assert_eq!(number(read.state()), n - 1, "write {n} torn");
        // The torn slot held a newer vote than the one left: never fall
        // back to the older one silently.
        assert!(read.state().vote_distrusted, "write {n} torn");
        before = now;
    }
}

#[test]
fn a_full_disk_at_creation_fails_clearly_and_leaves_no_file() {
    for capacity in [0, 1, 4096, 8191] {
        let io = disk();
        io.set_capacity(Some(capacity));
        let error = open(&io).unwrap_err();
        let message = error.to_string();
        assert!(error.is_disk_full(), "{message}");
        assert!(message.contains("disk is full"), "{message}");
        assert!(message.contains(RAFT_STATE_FILE), "{message}");
        assert!(
            io.list(Path::new(DIR)).unwrap().is_empty(),
            "capacity {capacity}: debris left: {:?}",
            io.list(Path::new(DIR))
        );
        for seed in 0..SEEDS {
            let after = io.restart(seed);
            assert!(after.list(Path::new(DIR)).unwrap().is_empty());
        }
        // Once there is room, the file is made.
        io.set_capacity(Some(8192));
        assert_eq!(*open(&io).unwrap().state(), RaftHardState::default());
    }
}

#[test]
fn a_full_disk_does_not_stop_rewrites() {
    let io = disk();
    let mut f = open(&io).unwrap();
    io.set_capacity(Some(io.used_bytes()));
    for n in 1..=20 {
        f.write(state(n), n.is_multiple_of(2)).unwrap();
    }
    f.sync().unwrap();
    for seed in 0..SEEDS {
        assert_eq!(number(open(&io.restart(seed)).unwrap().state()), 20);
    }
}

#[test]
fn a_leftover_temporary_file_is_replaced() {
    let io = disk();
    let temp = Path::new(DIR).join("raft-state.tmp");
    let mut debris = io.create(&temp).unwrap();
    debris.write_all(&[0xee; 3000]).unwrap();
    debris.sync().unwrap();
    io.sync_dir(Path::new(DIR)).unwrap();
    let f = open(&io).unwrap();
    assert_eq!(*f.state(), RaftHardState::default());
    assert_eq!(io.list(Path::new(DIR)).unwrap(), [RAFT_STATE_FILE]);
    assert_eq!(io.read(&path()).unwrap().len(), 8192);
}

#[test]
fn a_damaged_file_is_refused_and_left_as_it_is() {
    let io = disk();
    let mut f = open(&io).unwrap();
    f.write(state(1), true).unwrap();
    drop(f);
    let mut bytes = io.read(&path()).unwrap();
    bytes[7] ^= 1;
    bytes[4096 + 30] ^= 0x80;
    io.remove(&path()).unwrap();
    let mut file = io.create(&path()).unwrap();
    file.write_all(&bytes).unwrap();
    let error = open(&io).unwrap_err();
    assert!(
        matches!(error, RaftStateOpenError::Corrupt { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(message.contains(&*path().to_string_lossy()), "{message}");
    assert!(message.contains("vote"), "{message}");
    // Not made anew over it: the damage stays for an operator to see.
    assert_eq!(io.read(&path()).unwrap(), bytes);
}
