//! [`KvMachine`]: a small state machine for the replica group's tests and
//! benches: a map from key to value, applied from the entries' blind ops,
//! whose snapshots are files (so they travel as the real ones do). The real
//! state machine, over the index, is stage 3 of docs/replication.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use openraft::EntryPayload;
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use uuid::Uuid;
use uuidmap_cluster::snapshot_file::SnapshotFile;
use uuidmap_cluster::types::{CommittedLeaderId, LogId, SnapshotMeta, StoredMembership};
use uuidmap_cluster::{Applied, ClusterNode, UuidmapRaft};
use uuidmap_engine::store::Op;

/// A snapshot of the test machine.
pub type KvSnapshot = Snapshot<CommittedLeaderId, u64, ClusterNode, SnapshotFile>;

/// What a [`KvMachine`] holds.
#[derive(Default)]
pub struct KvState {
    /// The last entry applied.
    pub applied: Option<LogId>,
    /// The last membership applied.
    pub membership: StoredMembership,
    /// The map the entries built.
    pub map: BTreeMap<Uuid, Uuid>,
    /// The newest snapshot, and its file.
    pub snapshot: Option<(SnapshotMeta, PathBuf)>,
}

/// The test machine; clones share the state.
#[derive(Clone)]
pub struct KvMachine {
    /// Its state.
    pub state: Arc<Mutex<KvState>>,
    dir: PathBuf,
}

static FILES: AtomicU64 = AtomicU64::new(0);

impl KvMachine {
    /// A machine keeping its snapshot files in `dir`.
    pub fn new(dir: &Path) -> KvMachine {
        KvMachine {
            state: Arc::default(),
            dir: dir.to_path_buf(),
        }
    }

    /// A copy of the map.
    pub fn map(&self) -> BTreeMap<Uuid, Uuid> {
        self.state.lock().unwrap().map.clone()
    }

    /// The index of the last entry applied.
    pub fn applied_index(&self) -> Option<u64> {
        self.state.lock().unwrap().applied.map(|l| l.index)
    }

    fn file(&self, what: &str) -> PathBuf {
        self.dir.join(format!(
            "kv-{what}-{}.snap",
            FILES.fetch_add(1, Ordering::Relaxed)
        ))
    }
}

fn encode(map: &BTreeMap<Uuid, Uuid>) -> Vec<u8> {
    let mut out = Vec::with_capacity(map.len() * 32);
    for (k, v) in map {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

fn decode(bytes: &[u8]) -> std::io::Result<BTreeMap<Uuid, Uuid>> {
    if !bytes.len().is_multiple_of(32) {
        return Err(std::io::Error::other("a snapshot file of the wrong length"));
    }
    Ok(bytes
        .chunks_exact(32)
        .map(|c| {
            (
                Uuid::from_slice(&c[..16]).unwrap(),
                Uuid::from_slice(&c[16..]).unwrap(),
            )
        })
        .collect())
}

impl RaftSnapshotBuilder<UuidmapRaft> for KvMachine {
    type SnapshotData = SnapshotFile;

    async fn build_snapshot(&mut self) -> Result<KvSnapshot, std::io::Error> {
        let path = self.file("built");
        let mut s = self.state.lock().unwrap();
        std::fs::write(&path, encode(&s.map))?;
        let meta = SnapshotMeta {
            last_log_id: s.applied,
            last_membership: s.membership.clone(),
        };
        s.snapshot = Some((meta.clone(), path.clone()));
        let snapshot_lsn = s.applied.map_or(0, |l| l.index);
        Ok(Snapshot {
            meta,
            snapshot: SnapshotFile {
                path,
                snapshot_lsn,
                chain: Default::default(),
            },
        })
    }
}

impl RaftStateMachine<UuidmapRaft> for KvMachine {
    type SnapshotData = SnapshotFile;
    type SnapshotBuilder = KvMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), std::io::Error> {
        let s = self.state.lock().unwrap();
        Ok((s.applied, s.membership.clone()))
    }

    async fn apply<S>(&mut self, mut entries: S) -> Result<(), std::io::Error>
    where
        S: futures_util::Stream<Item = Result<EntryResponder<UuidmapRaft>, std::io::Error>>
            + Unpin
            + Send,
    {
        let mut ops = Vec::new();
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            {
                let mut s = self.state.lock().unwrap();
                s.applied = Some(entry.log_id);
                match &entry.payload {
                    EntryPayload::Membership(m) => {
                        s.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    }
                    EntryPayload::Normal(batch) => {
                        ops.clear();
                        batch.decode_into(&mut ops);
                        for op in &ops {
                            match *op {
                                Op::Put { key, value } => {
                                    s.map.insert(*key.as_uuid(), value);
                                }
                                Op::Delete { key } => {
                                    s.map.remove(key.as_uuid());
                                }
                            }
                        }
                    }
                    EntryPayload::Blank => {}
                }
            }
            if let Some(r) = responder {
                r.send(Applied {
                    lsn: entry.log_id.index,
                    void: false,
                });
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> KvMachine {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        file: SnapshotFile,
    ) -> Result<(), std::io::Error> {
        let map = decode(&std::fs::read(&file.path)?)?;
        let path = self.file("installed");
        std::fs::rename(&file.path, &path)?;
        let mut s = self.state.lock().unwrap();
        s.map = map;
        s.applied = meta.last_log_id;
        s.membership = meta.last_membership.clone();
        s.snapshot = Some((meta.clone(), path));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<KvSnapshot>, std::io::Error> {
        let s = self.state.lock().unwrap();
        Ok(s.snapshot.clone().map(|(meta, path)| Snapshot {
            snapshot: SnapshotFile {
                path,
                snapshot_lsn: meta.last_log_id.map_or(0, |l| l.index),
                chain: Default::default(),
            },
            meta,
        }))
    }
}
