//! Moving a partition between groups, online
//! ([`PartitionedClient::move_partition`], `uuidmap cluster move`).
//!
//! The protocol (docs/partitions.md, "Moves"), run by the mover, which
//! holds no state of its own (a mover that dies leaves the partition
//! marked, and running the move again resumes or calls it off):
//!
//! 1. **Copying.** Mark the partition `SOURCE~TARGET` in etcd (a compare
//!    on the table's version). The source goes on serving it; the target
//!    now takes writes to it. Wait until every target member has fenced
//!    that table (no write it accepted under an older one is pending: its
//!    drop of partitions it no longer held included). "Every member": the
//!    ones registered in etcd and the group's Raft membership, so that a
//!    member restarting, not registered yet, is waited for too.
//! 2. **Copy.** Scan the source, filtered to the partition, and write the
//!    entries to the target; then follow the source's Watch from the
//!    scan's `applied_lsn`, applying the partition's changes, until it has
//!    been quiet for a moment.
//! 3. **Fence.** Mark it `SOURCE>TARGET`. Writes to it are refused from
//!    here (retryable, UNAVAILABLE) until the flip. Wait until every
//!    source member has fenced that table: no write to the partition can
//!    still be applied there.
//! 4. **Reconcile.** Scan the partition on both groups and write the
//!    difference to the target (puts, and deletes of what the source no
//!    longer has). The source's partition is frozen, so afterwards the
//!    target holds exactly what the source holds.
//! 5. **Flip.** Wait until every target member has fenced the fenced
//!    table too (so that none still shows the partition only copying
//!    once the flip is in etcd: its watch tells copy writes from the
//!    owner's by that). Make the target the owner (a compare on the
//!    version), recording the handoff ([`uuidmap_partition::Handoff`]):
//!    the source's writes to the partition are at or below the largest
//!    `fence_lsn` its members reported in step 3, the target's copy at or
//!    below the largest LSN of its copy writes and of its members' fences
//!    in step 1. The source refuses the partition from the moment it sees
//!    the new table, and drops its entries.
//!
//! Any failure before the flip calls the move off (the source keeps the
//! partition; the target drops its copy).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_partition::{GroupName, Handoff, PartitionError, PartitionId};

use crate::{Client, ClientError, PartitionedClient, ScanOptions, WriteOp};

/// How a move runs.
#[derive(Clone, Debug)]
pub struct MoveOptions {
    /// Operations per write batch sent to the target (at most the target's
    /// `--max-write-ops`).
    pub batch: usize,
    /// How long the members of a group may take to fence a new table.
    pub fence_timeout: Duration,
    /// The copy's catch-up ends once the source's Watch has been quiet
    /// this long.
    pub quiet: Duration,
}

impl Default for MoveOptions {
    fn default() -> Self {
        MoveOptions {
            batch: 1000,
            fence_timeout: Duration::from_secs(10),
            quiet: Duration::from_millis(50),
        }
    }
}

/// What a move did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MoveReport {
    /// The partition and its two groups.
    pub partition: u16,
    /// Where it was.
    pub from: String,
    /// Where it is.
    pub to: String,
    /// Entries the copy wrote.
    pub copied: u64,
    /// Changes the catch-up applied.
    pub caught_up: u64,
    /// Puts and deletes the reconcile wrote.
    pub reconciled: u64,
    /// From the fence to the flip: how long writes to it were refused.
    pub blocked: Duration,
    /// The whole move.
    pub total: Duration,
    /// The table version that made the target its owner.
    pub version: i64,
}

fn routing(why: impl std::fmt::Display) -> ClientError {
    ClientError::Routing {
        why: why.to_string(),
    }
}

impl PartitionedClient {
    /// Moves partition `p` to group `to`, online (module docs).
    pub async fn move_partition(
        &self,
        p: PartitionId,
        to: &GroupName,
        options: &MoveOptions,
    ) -> Result<MoveReport, ClientError> {
        let started = Instant::now();
        let view = self.refresh().await?;
        let table = view
            .table
            .clone()
            .ok_or_else(|| routing(PartitionError::NoTable(self.etcd().cluster().into())))?;
        let from = table.get(p).owner.clone();
        if view.member_urls(to).is_empty() {
            return Err(routing(format!(
                "group {to} has no member registered in etcd: start its servers first"
            )));
        }
        // 1. Copying (or resuming a move to the same group).
        let (mut version, mut table) = match &table.get(p).moving_to {
            Some(t) if t == to => (view.version, table.clone()),
            _ => {
                let next = table.with_move(p, to).map_err(routing)?;
                let v = self
                    .etcd()
                    .replace_table(view.version, &next)
                    .await
                    .map_err(routing)?;
                (v, next)
            }
        };
        let result = async {
            tracing::info!(partition = %p, %from, %to, version, "move: copying");
            let target_fenced = self.wait_fenced(to, version, options).await?;
            let view = self
                .cache()
                .wait_for_revision(version, options.fence_timeout)
                .await;
            let source = self.group_client(&view, &from)?;
            let target = self.group_client(&view, to)?;
            // 2. Copy, then catch up.
            let (copied, applied_lsn, copy_lsn) = copy(&source, &target, p, options).await?;
            let (caught_up, catch_up_lsn) =
                catch_up(&source, &target, p, applied_lsn, options).await?;
            tracing::info!(partition = %p, copied, caught_up, "move: copied");
            // 3. Fence.
            let fenced = table.with_fence(p).map_err(routing)?;
            version = self
                .etcd()
                .replace_table(version, &fenced)
                .await
                .map_err(routing)?;
            table = fenced;
            let blocked_from = Instant::now();
            tracing::info!(partition = %p, version, "move: fenced, reads and writes refused until the flip");
            let source_last = self.wait_fenced(&from, version, options).await?;
            // 4. Reconcile.
            let (reconciled, reconcile_lsn) = reconcile(&source, &target, p, options).await?;
            // 5. Flip, once no target member still shows it copying.
            let target_fenced = target_fenced.max(self.wait_fenced(to, version, options).await?);
            let done = table
                .with_move_done(p)
                .map_err(routing)?
                .with_handoff(Handoff {
                    partition: p,
                    from: from.clone(),
                    from_last: source_last,
                    to: to.clone(),
                    to_after: target_fenced
                        .max(copy_lsn)
                        .max(catch_up_lsn)
                        .max(reconcile_lsn),
                });
            let v = self
                .etcd()
                .replace_table(version, &done)
                .await
                .map_err(routing)?;
            Ok(MoveReport {
                partition: p.get(),
                from: from.to_string(),
                to: to.to_string(),
                copied,
                caught_up,
                reconciled,
                blocked: blocked_from.elapsed(),
                total: started.elapsed(),
                version: v,
            })
        }
        .await;
        if result.is_err() {
            // Call it off; the source keeps the partition.
            let off = table.without_move(p);
            if let Err(e) = self.etcd().replace_table(version, &off).await {
                tracing::warn!(error = %e, "could not call the move off: run it again");
            }
        }
        result
    }

    /// Waits until every member of `group` reports a fenced table version
    /// of at least `version`: every member registered in etcd, and every
    /// member of the group's Raft membership as its members report it (a
    /// member that is restarting, or has not registered yet, may still
    /// hold an older table; it must fence too). Returns the largest
    /// `fence_lsn` they reported.
    async fn wait_fenced(
        &self,
        group: &GroupName,
        version: i64,
        options: &MoveOptions,
    ) -> Result<u64, ClientError> {
        let mut fence_lsn = 0;
        let until = Instant::now() + options.fence_timeout;
        let mut urls: std::collections::BTreeSet<String> =
            self.view().member_urls(group).into_iter().collect();
        let mut checked = std::collections::BTreeSet::new();
        let mut clients = HashMap::new();
        while let Some(url) = urls.iter().find(|u| !checked.contains(*u)).cloned() {
            if !clients.contains_key(&url) {
                let client = self.template().clone().endpoints([&url]).build()?;
                clients.insert(url.clone(), client);
            }
            let stats = clients[&url].stats().await.ok();
            if let Some(c) = stats.as_ref().and_then(|s| s.cluster.as_ref()) {
                urls.extend(c.members.iter().map(|m| m.client_url.clone()));
            }
            let (fenced, lsn) = stats
                .and_then(|s| s.partitions)
                .map_or((0, 0), |p| (p.fenced_version, p.fence_lsn));
            if fenced >= version {
                fence_lsn = fence_lsn.max(lsn);
                checked.insert(url);
                continue;
            }
            if Instant::now() > until {
                return Err(routing(format!(
                    "member {url} of group {group} has not fenced table version {version} \
                     within {:?} (it reports {fenced}); the move is called off",
                    options.fence_timeout
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(fence_lsn)
    }
}

/// Writes `ops` to `target` in batches; the largest LSN they took (0:
/// none written).
async fn write_all(target: &Client, ops: &[WriteOp], batch: usize) -> Result<u64, ClientError> {
    let mut last = 0;
    for chunk in ops.chunks(batch.max(1)) {
        last = last.max(target.idempotent().write_copy(chunk).await?);
    }
    Ok(last)
}

/// The partition's entries on `client`.
async fn scan_partition(
    client: &Client,
    p: PartitionId,
) -> Result<(HashMap<Uuid, Uuid>, u64), ClientError> {
    let mut scan = client.scan(ScanOptions {
        partitions: vec![p.get()],
        ..ScanOptions::default()
    });
    let mut entries = HashMap::new();
    let mut applied = 0;
    while let Some(page) = scan.next_page().await? {
        applied = page.applied_lsn;
        entries.extend(page.entries);
    }
    Ok((entries, applied))
}

/// Copies the partition; the entries written, the source's applied LSN
/// when its scan began, and the largest LSN the copy took at the target.
async fn copy(
    source: &Client,
    target: &Client,
    p: PartitionId,
    options: &MoveOptions,
) -> Result<(u64, u64, u64), ClientError> {
    let (entries, applied) = scan_partition(source, p).await?;
    let ops: Vec<WriteOp> = entries
        .into_iter()
        .map(|(key, value)| WriteOp::Put { key, value })
        .collect();
    let lsn = write_all(target, &ops, options.batch).await?;
    Ok((ops.len() as u64, applied, lsn))
}

/// Follows the source's changes to the partition after `after`, up to the
/// source's applied LSN when it starts (writes go on meanwhile: the
/// reconcile takes the rest), or until the Watch is quiet; how many it
/// applied, and the largest LSN they took at the target.
async fn catch_up(
    source: &Client,
    target: &Client,
    p: PartitionId,
    after: u64,
    options: &MoveOptions,
) -> Result<(u64, u64), ClientError> {
    let until = source.stats().await?.applied_lsn;
    let mut watch = source.watch(after);
    let mut applied = 0;
    let mut lsn = 0;
    while let Ok(batch) = tokio::time::timeout(options.quiet, watch.next()).await {
        let batch = batch?;
        let last = batch.lsn >= until;
        let ops: Vec<WriteOp> = batch
            .changes
            .into_iter()
            .filter(|(k, _)| uuidmap_partition::partition_of(k.as_bytes()) == p)
            .map(|(key, value)| match value {
                Some(value) => WriteOp::Put { key, value },
                None => WriteOp::Delete { key },
            })
            .collect();
        applied += ops.len() as u64;
        lsn = lsn.max(write_all(target, &ops, options.batch).await?);
        if last {
            break;
        }
    }
    Ok((applied, lsn))
}

/// Makes the target's copy equal to the source's (frozen) partition; the
/// operations it wrote, and the largest LSN they took.
async fn reconcile(
    source: &Client,
    target: &Client,
    p: PartitionId,
    options: &MoveOptions,
) -> Result<(u64, u64), ClientError> {
    let ((want, _), (have, _)) =
        tokio::try_join!(scan_partition(source, p), scan_partition(target, p))?;
    let mut ops: Vec<WriteOp> = want
        .iter()
        .filter(|(k, v)| have.get(k) != Some(v))
        .map(|(&key, &value)| WriteOp::Put { key, value })
        .collect();
    ops.extend(
        have.keys()
            .filter(|k| !want.contains_key(k))
            .map(|&key| WriteOp::Delete { key }),
    );
    let lsn = write_all(target, &ops, options.batch).await?;
    Ok((ops.len() as u64, lsn))
}
