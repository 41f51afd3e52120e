//! The Raft log store under power loss, on the simulated disk: whatever
//! moment the power goes, the store opens again; every append reported
//! flushed (under fsync `always`) and every vote reported saved is there;
//! the log holds no hole and nothing that was never appended, under
//! `never` too, where every unsynced byte may be dropped. Damage inside
//! records that were synced cuts the log just before it and marks the vote
//! distrusted (the group rebuilds the member), also when the power fails
//! during that repair, and a second store on the same directory is
//! refused.

use std::path::PathBuf;
use std::sync::Arc;

use openraft::EntryPayload;
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage};
use openraft::type_config::TypeConfigExt;
use proptest::prelude::*;
use uuid::Uuid;
use uuidmap_cluster::log_store::{LogStoreConfig, WalLogStore};
use uuidmap_cluster::types::{Entry, Vote, log_id};
use uuidmap_cluster::{RaftBatch, UuidmapRaft};
use uuidmap_engine::store::wal::{Preallocate, WalOptions};
use uuidmap_engine::store::{Io, Op};
use uuidmap_index::Key;
use uuidmap_testkit::SimIo;

fn dir() -> PathBuf {
    PathBuf::from("/data")
}

fn config(sim: &SimIo) -> LogStoreConfig {
    config_syncing(sim, true)
}

/// `sync: false` is the `never` policy: an append is flushed once
/// written, and a power loss may drop any of it.
fn config_syncing(sim: &SimIo, sync: bool) -> LogStoreConfig {
    LogStoreConfig {
        io: Arc::new(sim.clone()),
        dir: dir(),
        wal: WalOptions {
            segment_bytes: 1024,
            preallocate: Preallocate::Inline,
            ..WalOptions::default()
        },
        sync,
        tail_entries: 8,
    }
}

fn entry(term: u64, index: u64) -> Entry {
    let op = Op::Put {
        key: Key::new(Uuid::from_u128(u128::from(index) + 1)).unwrap(),
        value: Uuid::from_u128(u128::from(term)),
    };
    Entry {
        log_id: log_id(term, index),
        payload: if index == 0 {
            EntryPayload::Blank
        } else {
            EntryPayload::Normal(RaftBatch::new(index, &[op]))
        },
    }
}

/// One step a member's log goes through.
#[derive(Clone, Debug)]
enum Step {
    /// Append this many entries of the current term.
    Append(u64),
    /// Vote in the next term.
    Vote,
    /// Cut the last this-many entries (a new leader's log differs).
    Cut(u64),
    /// A snapshot this many entries past the log's end was installed:
    /// openraft purges up to it, and the log goes on after it.
    Snapshot(u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            4 => (1u64..6).prop_map(Step::Append),
            1 => Just(Step::Vote),
            1 => (1u64..4).prop_map(Step::Cut),
            1 => (1u64..30).prop_map(Step::Snapshot),
        ],
        1..25,
    )
}

/// What the run knows must survive, and what it attempted.
#[derive(Default)]
struct Known {
    /// The index of `log[0]` (after a snapshot, the entry after it).
    base: u64,
    /// The log as the store holds it (every append that returned), from
    /// `base`.
    log: Vec<Entry>,
    /// Entries `..durable` of `log` were reported flushed (and not cut
    /// since).
    durable: usize,
    /// The last vote reported saved.
    vote: Option<Vote>,
    /// Every entry ever handed to the store, by index, any term.
    attempted: Vec<Vec<Entry>>,
}

async fn run(store: &mut WalLogStore, steps: &[Step], known: &mut Known) -> Result<(), String> {
    let mut term = 1;
    for step in steps {
        match *step {
            Step::Append(n) => {
                let from = known.base + known.log.len() as u64;
                let entries: Vec<Entry> = (from..from + n).map(|i| entry(term, i)).collect();
                for e in &entries {
                    let i = e.log_id.index as usize;
                    if known.attempted.len() <= i {
                        known.attempted.resize(i + 1, Vec::new());
                    }
                    known.attempted[i].push(e.clone());
                }
                let (tx, rx) = UuidmapRaft::oneshot();
                store
                    .append(entries.clone(), IOFlushed::signal(tx))
                    .await
                    .map_err(|e| e.to_string())?;
                known.log.extend(entries);
                rx.await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
                known.durable = known.log.len();
            }
            Step::Vote => {
                term += 1;
                let vote = Vote::new(term, 1);
                store.save_vote(&vote).await.map_err(|e| e.to_string())?;
                known.vote = Some(vote);
            }
            Step::Cut(n) => {
                let keep = known.log.len().saturating_sub(n as usize);
                if keep == 0 && known.base > 0 {
                    continue; // never below a snapshot
                }
                let last = keep.checked_sub(1).map(|i| known.log[i].log_id);
                // Until the cut is done, a crash may leave the old suffix.
                known.durable = known.durable.min(keep);
                store
                    .truncate_after(last)
                    .await
                    .map_err(|e| e.to_string())?;
                known.log.truncate(keep);
                term += 1;
            }
            Step::Snapshot(past) => {
                let upto = known.base + known.log.len() as u64 + (past - 1);
                store
                    .purge(log_id(term, upto))
                    .await
                    .map_err(|e| e.to_string())?;
                // Nothing before the snapshot is asked for again.
                known.base = upto + 1;
                known.log.clear();
                known.durable = 0;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_power_loss_anywhere_keeps_what_was_reported_durable(
        steps in steps(),
        crash_after in 0u64..300,
        sync in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let sim = SimIo::new();
            sim.create_dir_all(&dir()).unwrap();
            let mut known = Known::default();
            if let Ok(mut store) = WalLogStore::open(config_syncing(&sim, sync)) {
                sim.set_crash_after(Some(crash_after));
                let _ = run(&mut store, &steps, &mut known).await;
            }
            let disk = sim.restart(seed);
            let mut store = WalLogStore::open(config_syncing(&disk, sync))
                .map_err(|e| TestCaseError::fail(format!("the store does not open: {e}")))?;
            let mut reader = store.get_log_reader().await;
            let vote = reader.read_vote().await.unwrap();
            if let Some(saved) = known.vote {
                prop_assert!(vote.is_some_and(|v| v >= saved), "lost vote {saved}: {vote:?}");
            }
            let state = store.get_log_state().await.unwrap();
            let start = state.last_purged_log_id.map_or(0, |p| p.index + 1);
            let end = state.last_log_id.map_or(0, |l| l.index + 1);
            let log = reader.try_get_log_entries(start..end).await.unwrap();
            prop_assert_eq!(log.len() as u64, end - start.min(end), "a hole in the log");
            // What was reported durable after the last snapshot is there
            // (a purge that did not reach the disk leaves older entries in
            // front of it, which is allowed).
            // Without fsyncs nothing appended is promised to survive; what
            // does must still be a log with no hole and nothing invented.
            let durable = if sync { &known.log[..known.durable] } else { &[] };
            if let Some(first) = durable.first() {
                let at = log.iter().position(|e| e.log_id == first.log_id);
                let Some(at) = at else {
                    return Err(TestCaseError::fail(format!(
                        "lost flushed entry {}", first.log_id
                    )));
                };
                prop_assert!(log.len() >= at + durable.len(), "lost flushed entries");
                prop_assert_eq!(&log[at..at + durable.len()], durable);
            }
            let len = end as usize;
            for e in &log {
                let i = e.log_id.index as usize;
                prop_assert!(
                    known.attempted.get(i).is_some_and(|a| a.contains(e)),
                    "entry {i} was never appended: {e:?}"
                );
            }
            // And the log goes on.
            let (tx, rx) = UuidmapRaft::oneshot();
            let next = entry(99, len as u64);
            store.append(vec![next.clone()], IOFlushed::signal(tx)).await.unwrap();
            rx.await.unwrap().unwrap();
            let got = reader.try_get_log_entries(len as u64..len as u64 + 1).await.unwrap();
            prop_assert_eq!(got, vec![next]);
            Ok(())
        })?;
    }
}

/// A synced log of `n + 3` entries in two groups (the second lands in the
/// newest file) and a vote; then, if `stop`, the store stops; if not, it
/// stays idle for a while and the power goes while it runs. Returns the
/// disk as the power loss (or the stop) left it.
fn filled(n: u64, stop: bool) -> SimIo {
    let sim = SimIo::new();
    sim.create_dir_all(&dir()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut store = WalLogStore::open(config(&sim)).unwrap();
        for range in [0..n, n..n + 3] {
            let (tx, rx) = UuidmapRaft::oneshot();
            store
                .append(
                    range.map(|i| entry(1, i)).collect::<Vec<_>>(),
                    IOFlushed::signal(tx),
                )
                .await
                .unwrap();
            rx.await.unwrap().unwrap();
        }
        store.save_vote(&Vote::new(2, 1)).await.unwrap();
        if stop {
            drop(store);
            sim.restart(1)
        } else {
            // Idle for well over `VOUCH_AFTER_IDLE`.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let disk = sim.restart(1);
            drop(store);
            disk
        }
    })
}

#[test]
fn damage_inside_synced_records_cuts_the_log_before_it_and_distrusts_the_vote() {
    // Every seventh byte of the records of a synced log, flipped in turn,
    // in every file, the newest included: the store vouched for the log's
    // end when it went idle (or stopped), so its last group is not taken
    // for a torn tail. A single node refuses such a log; a member's group
    // holds it, so the store cuts it back to the last good entry, and
    // first marks its vote distrusted (it may have acknowledged what it
    // cut: `uuidmap_cluster::rejoin`). (The file header and its slots are
    // the WAL's own tests' business.)
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for stop in [true, false] {
        let disk = filled(40, stop);
        let files = uuidmap_engine::store::wal::list_wal_files(&disk, &dir()).unwrap();
        assert!(files.len() > 1, "the log spans files: {files:?}");
        // Where each record lies: (file, first byte, end, LSN).
        let mut records = Vec::new();
        let mut cursor = uuidmap_engine::store::wal::WalCursor::open(&disk, &dir(), 0).unwrap();
        while let Some(rec) = cursor.next_record().unwrap() {
            records.push((
                rec.path.to_path_buf(),
                rec.offset,
                rec.offset + rec.len,
                rec.lsn,
            ));
        }
        let header = uuidmap_engine::store::wal::HEADER_LEN;
        for file in &files {
            let bytes = disk.read(&file.path).unwrap();
            let end = bytes.len() - bytes.iter().rev().take_while(|&&b| b == 0).count();
            assert!(end > header, "{} holds records", file.path.display());
            for at in (header..end).step_by(7) {
                let lsn = records
                    .iter()
                    .find(|(path, from, to, _)| {
                        *path == file.path && (*from..*to).contains(&(at as u64))
                    })
                    .map(|r| r.3)
                    .expect("every byte after the header is in a record");
                let copy = disk.restart(1);
                let mut damaged = bytes.clone();
                damaged[at] ^= 0x10;
                let mut f = copy.open_write(&file.path).unwrap();
                f.write_at(0, &damaged).unwrap();
                f.sync().unwrap();
                drop(f);
                let context = format!(
                    "byte {at} of {} (entry {lsn}, stop: {stop})",
                    file.path.display()
                );
                let mut store = WalLogStore::open(config(&copy))
                    .unwrap_or_else(|e| panic!("{context}: the log did not open: {e}"));
                assert!(
                    store.vote_trust().distrusted(),
                    "{context}: the vote is still trusted"
                );
                let state = runtime.block_on(store.get_log_state()).unwrap();
                assert_eq!(
                    state.last_log_id.map(|l| l.index),
                    lsn.checked_sub(1),
                    "{context}: the log is not cut just before the damaged entry"
                );
                drop(store);
                // The mark is on the disk before the cut: a power loss
                // right after the open keeps it.
                let again = WalLogStore::open(config(&copy.restart(1))).unwrap();
                assert!(
                    again.vote_trust().distrusted(),
                    "{context}: the mark was not durable"
                );
            }
        }
    }
}

#[test]
fn a_power_loss_anywhere_in_the_repair_of_a_damaged_log_leaves_it_cut_and_distrusted() {
    // The repair writes the distrust mark (fsynced), then cuts the log at
    // the damage and lowers the saved commit index. Whichever of its calls
    // the power fails in, the next open finds either the damage again (and
    // repairs it) or the repair done: the log ends just before the damaged
    // entry and the vote is distrusted. Never a trusted vote over a log
    // that lost acknowledged entries.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let disk = filled(40, true);
    let (path, offset, len, lsn) = {
        let mut cursor = uuidmap_engine::store::wal::WalCursor::open(&disk, &dir(), 20).unwrap();
        let rec = cursor.next_record().unwrap().expect("entry 20 is logged");
        (rec.path.to_path_buf(), rec.offset, rec.len, rec.lsn)
    };
    let damaged = disk.restart(1);
    let mut bytes = damaged.read(&path).unwrap();
    bytes[(offset + len / 2) as usize] ^= 0x10;
    let mut f = damaged.open_write(&path).unwrap();
    f.write_at(0, &bytes).unwrap();
    f.sync().unwrap();
    drop(f);
    // The calls a whole repair makes.
    let clean = damaged.restart(1);
    let before = clean.op_count();
    drop(WalLogStore::open(config(&clean)).unwrap());
    let repair_ops = clean.op_count() - before;
    assert!(repair_ops > 2, "the repair writes: {repair_ops} calls");
    for k in 0..repair_ops {
        for seed in 0..3 {
            let copy = damaged.restart(1);
            copy.set_crash_after(Some(k));
            // It fails or not, as the crash falls; then the power goes.
            drop(WalLogStore::open(config(&copy)));
            let context = format!(
                "power lost after {k} of {repair_ops} calls (seed {seed}), in {:?}",
                copy.crashed_in()
            );
            let after = copy.restart(seed);
            let store = WalLogStore::open(config(&after))
                .unwrap_or_else(|e| panic!("{context}: the log did not open: {e}"));
            assert!(
                store.vote_trust().distrusted(),
                "{context}: the vote is trusted again"
            );
            let mut store = store;
            let state = runtime.block_on(store.get_log_state()).unwrap();
            assert_eq!(
                state.last_log_id.map(|l| l.index),
                Some(lsn - 1),
                "{context}: the log is not cut just before the damaged entry"
            );
        }
    }
}

#[test]
fn a_second_store_on_the_same_directory_is_refused() {
    let sim = SimIo::new();
    sim.create_dir_all(&dir()).unwrap();
    let first = WalLogStore::open(config(&sim)).unwrap();
    let err = WalLogStore::open(config(&sim)).map(|_| ()).unwrap_err();
    assert!(
        matches!(
            err,
            uuidmap_engine::store::StoreError::DirLock(
                uuidmap_engine::store::DirLockError::InUse { .. }
            )
        ),
        "{err}"
    );
    drop(first);
    WalLogStore::open(config(&sim)).expect("free again once the first is gone");
}
