//! The WAL-backed Raft log store against openraft's own conformance suite
//! (`openraft::testing::log::Suite`: 44 cases of appends, truncations,
//! purges, votes, log states and start-up), plus what the suite does not
//! ask: the log and the vote survive a reopen, and a cut survives one.
//!
//! The suite needs a state machine beside the store: the testkit's small
//! one (`KvMachine`).

use std::sync::Arc;

use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::{EntryPayload, StorageError};
use tempfile::TempDir;
use uuid::Uuid;
use uuidmap_cluster::log_store::{LogStoreConfig, WalLogStore};
use uuidmap_cluster::types::{Entry, Vote, log_id};
use uuidmap_cluster::{RaftBatch, UuidmapRaft};
use uuidmap_engine::store::wal::{Preallocate, WalOptions};
use uuidmap_engine::store::{Op, OsIo};
use uuidmap_index::Key;
use uuidmap_testkit::cluster::KvMachine;

fn config(dir: &std::path::Path) -> LogStoreConfig {
    config_keeping(dir, uuidmap_cluster::log_store::TAIL_ENTRIES)
}

/// A store that keeps only `tail_entries` in memory, so older reads go to
/// the files.
fn config_keeping(dir: &std::path::Path, tail_entries: usize) -> LogStoreConfig {
    LogStoreConfig {
        io: Arc::new(OsIo),
        dir: dir.to_path_buf(),
        // Small files, so the suite's logs span several.
        wal: WalOptions {
            segment_bytes: 4096,
            preallocate: Preallocate::Inline,
            ..WalOptions::default()
        },
        sync: true,
        tail_entries,
    }
}

struct Builder;

impl StoreBuilder<UuidmapRaft, WalLogStore, KvMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, WalLogStore, KvMachine), StorageError<UuidmapRaft>> {
        let dir = tempfile::tempdir().expect("a temp dir");
        let store = WalLogStore::open(config(dir.path())).expect("a new log store opens");
        let machine = KvMachine::new(dir.path());
        Ok((dir, store, machine))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_log_store_passes_openrafts_conformance_suite() {
    Suite::test_all(Builder)
        .await
        .expect("every case of the suite passes");
}

fn batch_entry(term: u64, index: u64) -> Entry {
    let op = Op::Put {
        key: Key::new(Uuid::from_u128(u128::from(index) + 1)).unwrap(),
        value: Uuid::from_u128(u128::from(term)),
    };
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(RaftBatch::new(index * 10, &[op])),
    }
}

async fn append(store: &mut WalLogStore, entries: Vec<Entry>) {
    let (tx, rx) = UuidmapRaft::oneshot();
    store.append(entries, IOFlushed::signal(tx)).await.unwrap();
    rx.await.unwrap().expect("flushed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_and_the_vote_survive_a_reopen_and_so_does_a_cut() {
    for keep in [uuidmap_cluster::log_store::TAIL_ENTRIES, 16] {
        reopen_keeping(keep).await;
    }
}

/// With `keep` small, reads of older entries come from the files, before
/// the reopen and after it.
async fn reopen_keeping(keep: usize) {
    let dir = tempfile::tempdir().unwrap();
    let vote = Vote::new_committed(3, 2);
    {
        let mut store = WalLogStore::open(config_keeping(dir.path(), keep)).unwrap();
        store.save_vote(&vote).await.unwrap();
        append(&mut store, (0..300).map(|i| batch_entry(1, i)).collect()).await;
        // Committed up to 200: the entries before it may leave memory.
        store.save_committed(Some(log_id(1, 200))).await.unwrap();
        append(&mut store, vec![batch_entry(1, 300)]).await;
        store.truncate_after(Some(log_id(1, 299))).await.unwrap();
        let mut reader = store.get_log_reader().await;
        let early = reader.try_get_log_entries(5..150).await.unwrap();
        assert_eq!(
            early,
            (5..150).map(|i| batch_entry(1, i)).collect::<Vec<_>>()
        );
        // A new leader replaces the suffix from 250 on.
        store.truncate_after(Some(log_id(1, 249))).await.unwrap();
        append(&mut store, (250..260).map(|i| batch_entry(3, i)).collect()).await;
        store.save_committed(Some(log_id(3, 255))).await.unwrap();
        store.purge(log_id(1, 99)).await.unwrap();
    }
    let mut store = WalLogStore::open(config_keeping(dir.path(), keep)).unwrap();
    let mut reader = store.get_log_reader().await;
    assert_eq!(reader.read_vote().await.unwrap(), Some(vote));
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 99)));
    assert_eq!(state.last_log_id, Some(log_id(3, 259)));
    assert_eq!(store.read_committed().await.unwrap(), Some(log_id(3, 255)));
    let entries = reader.try_get_log_entries(100..260).await.unwrap();
    let expected: Vec<Entry> = (100..250)
        .map(|i| batch_entry(1, i))
        .chain((250..260).map(|i| batch_entry(3, i)))
        .collect();
    assert_eq!(entries, expected);
    // The log goes on where it ended.
    append(&mut store, vec![batch_entry(3, 260)]).await;
    assert_eq!(
        reader.try_get_log_entries(260..261).await.unwrap(),
        vec![batch_entry(3, 260)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_jumped_past_a_snapshot_opens_again_from_after_the_hole() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = WalLogStore::open(config(dir.path())).unwrap();
        append(&mut store, (0..10).map(|i| batch_entry(1, i)).collect()).await;
        // A snapshot up to 49 was installed: openraft purges past the end
        // and the log goes on at 50.
        store.purge(log_id(2, 49)).await.unwrap();
        append(&mut store, (50..53).map(|i| batch_entry(2, i)).collect()).await;
    }
    let mut store = WalLogStore::open(config(dir.path())).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(2, 49)));
    assert_eq!(state.last_log_id, Some(log_id(2, 52)));
    let mut reader = store.get_log_reader().await;
    assert_eq!(
        reader.try_get_log_entries(0..60).await.unwrap(),
        (50..53).map(|i| batch_entry(2, i)).collect::<Vec<_>>()
    );
}
