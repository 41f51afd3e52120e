//! `Ownership`: what a member of a partitioned cluster may serve.
//!
//! Every request that names keys is checked against the member's cached
//! view before it touches the index: a key of a partition its group does
//! not own is refused ([`Refusal::NotOwned`], naming the owner and the
//! table's version), and a write to a partition fenced for a move is
//! refused as retryable ([`Refusal::Moving`]) until the move flips it. The
//! group a partition is being copied to takes the mover's copy writes to it
//! (marked `partition_copy`), and no other reads or writes: a client that
//! sends it one holds an old map. A request with several keys is refused whole if any key
//! is refused.
//!
//! **The write fence.** A write holds a shared permit
//! ([`Ownership::write_permit`]) from before its check until it is
//! answered. When the member sees a new table, [`Ownership::drain_writes`]
//! takes the permit exclusively: it waits until every write checked under
//! an older table has been answered; the server then waits for what its
//! log held at that moment to be applied (a write answered "outcome
//! unknown" when its leader changed may still commit), and records the new
//! version as fenced ([`Ownership::record_fence`]), with the applied LSN. So once a member reports a fenced version (Stats),
//! no write it accepted under an older table can still be applied, and
//! none to a partition fenced in that table will be. (The permit is a
//! tokio `RwLock`: uncontended but for the moment of a fence, which table
//! changes alone cause.)
//!
//! Why a member can go on while etcd is down: the table changes only by a
//! move, and a move fences the partition in etcd and waits for every
//! member of the source group to report that fence before it flips the
//! owner (docs/partitions.md, "Moves"). A member cut off from etcd
//! therefore cannot lose a partition without having fenced it first.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedRwLockReadGuard, RwLock};

use crate::{GroupName, MapCache, PartitionId, PartitionSet, partition_of};

/// Why a member refuses a key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Another group owns the key's partition.
    #[error(
        "partition {partition} (of key {key}) is owned by group {owner}, not by this group \
         {ours} (partition table version {version}); send it to {owner}"
    )]
    NotOwned {
        /// The key's partition.
        partition: PartitionId,
        /// The key, as text.
        key: String,
        /// The group that owns it.
        owner: GroupName,
        /// This member's group.
        ours: GroupName,
        /// The table version this member decided with.
        version: i64,
    },
    /// A read or write of a partition fenced for its move to another
    /// group.
    #[error(
        "partition {partition} (of key {key}) is moving to group {to} (partition table version \
         {version}); reads and writes of it resume within seconds, at the new owner"
    )]
    Moving {
        /// The key's partition.
        partition: PartitionId,
        /// The key, as text.
        key: String,
        /// Where it is moving.
        to: GroupName,
        /// The table version this member decided with.
        version: i64,
    },
    /// The member has not read the table yet.
    #[error("this member has not read the partition table from etcd yet: {why}")]
    NoTable {
        /// Why (etcd's error, or that there is no table yet).
        why: String,
    },
}

/// A member's ownership check over its cluster's cached map.
#[derive(Clone, Debug)]
pub struct Ownership {
    cache: Arc<MapCache>,
    group: GroupName,
    /// Shared by each write from its check to its answer; taken whole by a
    /// fence (module docs).
    permits: Arc<RwLock<()>>,
    /// The last fence: its table version and the applied LSN then.
    fenced: Arc<Mutex<(i64, u64)>>,
    /// The scans running, by the table version they were planned under.
    scans: Arc<Mutex<BTreeMap<i64, usize>>>,
}

/// A running scan, counted until it is dropped: a partition that moved
/// away keeps its entries until the scans planned before the move end
/// ([`Ownership::wait_for_scans_before`]).
#[derive(Debug)]
pub struct ScanGuard {
    scans: Arc<Mutex<BTreeMap<i64, usize>>>,
    version: i64,
}

impl Drop for ScanGuard {
    fn drop(&mut self) {
        let mut scans = self.scans.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = scans.get_mut(&self.version) {
            *n -= 1;
            if *n == 0 {
                scans.remove(&self.version);
            }
        }
    }
}

/// The partitions a scan may return, as [`Ownership::scan_partitions`]
/// decided them.
#[derive(Debug)]
pub struct ScanPartitions {
    /// The set to filter keys by.
    pub set: PartitionSet,
    /// Keeps the set's entries in place while the scan runs.
    pub guard: ScanGuard,
}

/// A member's counts for `Stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnershipStats {
    /// The table version in use (0: none read yet).
    pub table_version: i64,
    /// The last fenced version, and the applied LSN then.
    pub fenced_version: i64,
    /// The applied LSN when `fenced_version` was fenced.
    pub fence_lsn: u64,
    /// Partitions the group owns.
    pub owned: u32,
    /// Of those, partitions moving away.
    pub moving_out: u32,
    /// Partitions being copied to the group.
    pub moving_in: u32,
}

impl Ownership {
    /// The check for a member of `group`.
    pub fn new(cache: Arc<MapCache>, group: GroupName) -> Ownership {
        Ownership {
            cache,
            group,
            permits: Arc::new(RwLock::new(())),
            fenced: Arc::new(Mutex::new((0, 0))),
            scans: Arc::default(),
        }
    }

    fn scan_guard(&self, version: i64) -> ScanGuard {
        *self
            .scans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(version)
            .or_insert(0) += 1;
        ScanGuard {
            scans: Arc::clone(&self.scans),
            version,
        }
    }

    /// Waits until no scan planned under a table older than `version` is
    /// running (checked every 100 ms).
    pub async fn wait_for_scans_before(&self, version: i64) {
        loop {
            let oldest = self
                .scans
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys()
                .next()
                .copied();
            match oldest {
                Some(v) if v < version => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                _ => return,
            }
        }
    }

    /// A write's permit: take it before [`Ownership::check_writes`] and
    /// keep it until the write is answered.
    pub async fn write_permit(&self) -> OwnedRwLockReadGuard<()> {
        Arc::clone(&self.permits).read_owned().await
    }

    /// The first half of a fence: waits until every write holding a
    /// permit has been answered, then runs `then` while no write can take
    /// one, and returns what it returned.
    pub async fn drain_writes<T>(&self, then: impl FnOnce() -> T) -> T {
        let _all = self.permits.write().await;
        then()
    }

    /// The second half: records table version `version` as fenced, at
    /// applied LSN `lsn`. Versions only move forward.
    pub fn record_fence(&self, version: i64, lsn: u64) {
        let mut fenced = self.fenced.lock().unwrap_or_else(|p| p.into_inner());
        if version > fenced.0 {
            *fenced = (version, lsn);
        }
    }

    /// The counts `Stats` reports.
    pub fn stats(&self) -> OwnershipStats {
        let view = self.cache.view();
        let (fenced_version, fence_lsn) = *self.fenced.lock().unwrap_or_else(|p| p.into_inner());
        let mut s = OwnershipStats {
            table_version: view.version,
            fenced_version,
            fence_lsn,
            ..OwnershipStats::default()
        };
        if let Some(t) = &view.table {
            for p in PartitionId::all() {
                let a = t.get(p);
                if a.owner == self.group {
                    s.owned += 1;
                    s.moving_out += u32::from(a.moving_to.is_some());
                } else if a.moving_to.as_ref() == Some(&self.group) {
                    s.moving_in += 1;
                }
            }
        }
        s
    }

    /// The partitions a scan asking for `requested` may return: with none
    /// requested, those this group owns; else each requested one, which
    /// the group must hold (own, or be being copied: the mover's
    /// reconcile scans the target), or it is refused like a key of it. A
    /// number above 4095 is the caller's to refuse first.
    pub fn scan_partitions(&self, requested: &[u32]) -> Result<ScanPartitions, Refusal> {
        let view = self.cache.view();
        let Some(table) = &view.table else {
            return Err(self.no_table());
        };
        if requested.is_empty() {
            // Owned only: a partition being copied here is not the group's
            // to list yet (its owner lists it).
            let set = PartitionId::all()
                .filter(|p| table.get(*p).owner == self.group)
                .collect();
            let guard = self.scan_guard(view.version);
            return Ok(ScanPartitions { set, guard });
        }
        let mut set = PartitionSet::default();
        for n in requested {
            let p = u16::try_from(*n)
                .ok()
                .and_then(PartitionId::new)
                .expect("the caller refuses partitions above 4095");
            let a = table.get(p);
            if !a.held_by(&self.group) {
                return Err(Refusal::NotOwned {
                    partition: p,
                    key: format!("(a scan of partition {p})"),
                    owner: a.owner.clone(),
                    ours: self.group.clone(),
                    version: view.version,
                });
            }
            set.insert(p);
        }
        let guard = self.scan_guard(view.version);
        Ok(ScanPartitions { set, guard })
    }

    fn no_table(&self) -> Refusal {
        Refusal::NoTable {
            why: self
                .cache
                .etcd_error()
                .unwrap_or_else(|| "the cluster has no partition table yet".into()),
        }
    }

    /// This member's group.
    pub fn group(&self) -> &GroupName {
        &self.group
    }

    /// The map this check reads.
    pub fn cache(&self) -> &Arc<MapCache> {
        &self.cache
    }

    /// Refuses the first of `keys` this member may not read.
    pub fn check_reads(&self, keys: impl IntoIterator<Item = [u8; 16]>) -> Result<(), Refusal> {
        self.check(keys, None)
    }

    /// Refuses the first of `keys` this member may not write; `copy`: the
    /// writes are a move's copy (`WriteRequest.partition_copy`).
    pub fn check_writes(
        &self,
        keys: impl IntoIterator<Item = [u8; 16]>,
        copy: bool,
    ) -> Result<(), Refusal> {
        self.check(keys, Some(copy))
    }

    /// `write`: `None` for reads, else whether the writes are a copy.
    fn check(
        &self,
        keys: impl IntoIterator<Item = [u8; 16]>,
        write: Option<bool>,
    ) -> Result<(), Refusal> {
        let view = self.cache.view();
        let Some(table) = &view.table else {
            return Err(self.no_table());
        };
        for key in keys {
            let partition = partition_of(&key);
            let a = table.get(partition);
            if let Some(copy) = write
                && a.writable_by(&self.group, copy)
            {
                continue;
            }
            if a.owner != self.group || write == Some(true) {
                return Err(Refusal::NotOwned {
                    partition,
                    key: key_text(&key),
                    owner: a.owner.clone(),
                    ours: self.group.clone(),
                    version: view.version,
                });
            }
            // Ours, but fenced for the flip: reads are refused too. Once
            // the flip is in etcd, this member may not have seen it yet,
            // while the new owner takes writes; a read here would return
            // the frozen value after a newer one was acknowledged. (A
            // partition only being copied, `~`, is read and written here
            // as before: no flip comes before every member has fenced.)
            if a.fenced
                && let Some(to) = &a.moving_to
            {
                return Err(Refusal::Moving {
                    partition,
                    key: key_text(&key),
                    to: to.clone(),
                    version: view.version,
                });
            }
        }
        Ok(())
    }
}

/// A key as a UUID's text.
fn key_text(k: &[u8; 16]) -> String {
    let h: String = k.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}
