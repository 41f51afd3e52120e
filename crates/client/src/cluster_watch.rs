//! [`ClusterWatch`]: the changes of every partition-owning group, merged
//! into one stream with one cursor (docs/partitions.md, "A cluster-wide
//! watch").
//!
//! Each group is watched with `owned_only` ([`Client::watch_owned`]): its
//! members send only the changes the group owned when they were made, so
//! a partition move's copy writes and its drop of the moved entries never
//! appear, and each write appears once, from the group that took it. The
//! streams are merged as their batches arrive, with one rule that keeps
//! each key's changes in the order they were made: a batch from a group
//! that touches a partition it owns since a handoff from group `S` at
//! `S`'s LSN `Ls` waits until `S`'s stream has passed `Ls` (every change
//! `S` made to the partition is then delivered). The wait cannot close a
//! cycle: `S` reaches `Ls` before the flip, and the new owner writes only
//! after it.
//!
//! # Cursor
//!
//! [`ClusterWatch::cursor`] names, per group, the last LSN delivered or
//! passed: `g1:1200,g2:877` ([`ClusterCursor`], text through `Display` and
//! `FromStr`). Resuming from it ([`PartitionedClient::watch_from`]) starts
//! each group's watch after its LSN, so no change comes twice and none is
//! skipped; a group the cursor does not name starts from its oldest kept
//! change. The groups are those the map names when the watch starts: a
//! group added later is followed by a watch started (or resumed) after it
//! registered.
//!
//! # Ends
//!
//! A group's stream retries transient failures itself, and a batch that
//! needs a newer map than the client's waits for etcd while it is down. A
//! change no longer
//! kept (the WAL or the table's bounded history of moves no longer covers
//! the cursor) ends the watch with [`ClientError::NotRetained`]: rescan,
//! then watch from the scan's LSNs.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use uuid::Uuid;
use uuidmap_partition::{GroupName, Tenure, partition_of};

use crate::{ClientError, PartitionedClient, WatchBatch, WatchStream};

/// Per group, the last LSN a cluster-wide watch delivered or passed (module
/// docs, "Cursor").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterCursor(pub BTreeMap<GroupName, u64>);

impl fmt::Display for ClusterCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (g, lsn)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{g}:{lsn}")?;
        }
        Ok(())
    }
}

impl FromStr for ClusterCursor {
    type Err = ClientError;

    fn from_str(s: &str) -> Result<Self, ClientError> {
        let bad = |why: String| ClientError::Routing {
            why: format!("not a cluster watch cursor ({s:?}): {why}"),
        };
        let mut groups = BTreeMap::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (g, lsn) = part
                .split_once(':')
                .ok_or_else(|| bad(format!("{part:?} is not GROUP:LSN")))?;
            let g = g.parse::<GroupName>().map_err(|e| bad(e.to_string()))?;
            let lsn = lsn
                .parse::<u64>()
                .map_err(|_| bad(format!("{lsn:?} is not an LSN")))?;
            if groups.insert(g.clone(), lsn).is_some() {
                return Err(bad(format!("group {g} is named twice")));
            }
        }
        Ok(ClusterCursor(groups))
    }
}

/// One group's batch, delivered by a [`ClusterWatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterBatch {
    /// The group that made the changes.
    pub group: GroupName,
    /// The batch's LSN in that group's log.
    pub lsn: u64,
    /// (key, new value; `None`: removed), in batch order.
    pub changes: Vec<(Uuid, Option<Uuid>)>,
}

/// One group's stream and the batch it is holding back.
struct Feed {
    stream: WatchStream,
    /// The next batch, received but not delivered.
    head: Option<WatchBatch>,
    /// The last LSN delivered or passed.
    passed: u64,
    /// The map was read again for `head` (module docs of `next`).
    refreshed: bool,
}

/// The merged stream; see the module docs.
pub struct ClusterWatch {
    client: PartitionedClient,
    feeds: BTreeMap<GroupName, Feed>,
}

impl PartitionedClient {
    /// A cluster-wide watch from now: each group's changes after the LSN
    /// its member reports applied when the watch starts.
    pub async fn watch(&self) -> Result<ClusterWatch, ClientError> {
        let view = self.refresh().await?;
        let mut cursor = ClusterCursor::default();
        for group in groups_of(&view) {
            let applied = self.group_client(&view, &group)?.stats().await?.applied_lsn;
            cursor.0.insert(group, applied);
        }
        self.watch_from(&cursor)
    }

    /// A cluster-wide watch after `cursor` (module docs, "Cursor").
    pub fn watch_from(&self, cursor: &ClusterCursor) -> Result<ClusterWatch, ClientError> {
        let view = self.view();
        let mut feeds = BTreeMap::new();
        let mut groups = groups_of(&view);
        groups.extend(cursor.0.keys().cloned());
        for group in groups {
            let after = cursor.0.get(&group).copied().unwrap_or(0);
            let client = self.group_client(&view, &group)?;
            feeds.insert(
                group,
                Feed {
                    stream: client.watch_owned(after),
                    head: None,
                    passed: after,
                    refreshed: false,
                },
            );
        }
        Ok(ClusterWatch {
            client: self.clone(),
            feeds,
        })
    }
}

/// Every group the map names: owners and registered groups.
fn groups_of(view: &uuidmap_partition::ClusterView) -> std::collections::BTreeSet<GroupName> {
    let mut groups: std::collections::BTreeSet<GroupName> = view.groups.keys().cloned().collect();
    if let Some(t) = &view.table {
        groups.extend(t.owners().into_keys());
    }
    groups
}

/// Reads the map again, waiting for etcd as long as it is down (a batch
/// that needs the newer map waits meanwhile).
async fn refresh(client: &PartitionedClient) {
    while let Err(e) = client.refresh().await {
        tracing::warn!(error = %e, "cluster watch: cannot read the map; retrying");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Whether a batch may be delivered now.
enum Ready {
    Yes,
    /// It waits for another group's stream to pass an LSN.
    Waits,
    /// The map does not show this group owning a change it sent: read it
    /// again first.
    Stale,
}

impl ClusterWatch {
    /// Where the watch stands (module docs, "Cursor").
    pub fn cursor(&self) -> ClusterCursor {
        ClusterCursor(
            self.feeds
                .iter()
                .map(|(g, f)| (g.clone(), f.passed))
                .collect(),
        )
    }

    /// The next batch of changes, from any group; waits as long as it
    /// takes.
    pub async fn next(&mut self) -> Result<ClusterBatch, ClientError> {
        loop {
            if let Some(batch) = self.deliverable().await {
                return Ok(batch);
            }
            // Nothing to deliver: receive from every group with no head.
            let waiting: Vec<_> = self
                .feeds
                .iter_mut()
                .filter(|(_, f)| f.head.is_none())
                .map(|(g, f)| {
                    let g = g.clone();
                    Box::pin(async move { (g, f.stream.next().await) })
                })
                .collect();
            if waiting.is_empty() {
                drop(waiting);
                // Every head waits: they wait for each other only if the
                // map is wrong; read it and decide again, a moment later.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                refresh(&self.client).await;
                continue;
            }
            let ((group, received), _, _) = futures_util::future::select_all(waiting).await;
            let feed = self.feeds.get_mut(&group).expect("a feed of this watch");
            feed.head = Some(received?);
            feed.refreshed = false;
        }
    }

    /// Delivers a head that is ready, passing over heads with no change.
    async fn deliverable(&mut self) -> Option<ClusterBatch> {
        loop {
            let mut stale = None;
            let mut ready = None;
            for (g, f) in &self.feeds {
                let Some(head) = &f.head else { continue };
                match self.ready(g, head) {
                    Ready::Yes => {
                        ready = Some(g.clone());
                        break;
                    }
                    Ready::Stale if !f.refreshed => stale = Some(g.clone()),
                    // Read again already: the member's table decided it
                    // was the group's own, and it is.
                    Ready::Stale => {
                        ready = Some(g.clone());
                        break;
                    }
                    Ready::Waits => {}
                }
            }
            if let Some(g) = ready {
                let feed = self.feeds.get_mut(&g).expect("found above");
                let head = feed.head.take().expect("found above");
                feed.passed = head.lsn;
                if head.changes.is_empty() {
                    continue;
                }
                return Some(ClusterBatch {
                    group: g,
                    lsn: head.lsn,
                    changes: head.changes,
                });
            }
            let g = stale?;
            refresh(&self.client).await;
            if let Some(f) = self.feeds.get_mut(&g) {
                f.refreshed = true;
            }
        }
    }

    /// Whether `group`'s batch `head` may be delivered (module docs).
    fn ready(&self, group: &GroupName, head: &WatchBatch) -> Ready {
        let view = self.client.view();
        let Some(table) = &view.table else {
            return Ready::Stale;
        };
        for (key, _) in &head.changes {
            let p = partition_of(key.as_bytes());
            match table
                .handoffs()
                .tenure(p, group, head.lsn, &table.get(p).owner)
            {
                Tenure::Owned { after: None } => {}
                Tenure::Owned {
                    after: Some((from, lsn)),
                } => {
                    if self.feeds.get(&from).is_some_and(|f| f.passed < lsn) {
                        return Ready::Waits;
                    }
                }
                Tenure::NotOwned | Tenure::Unknown => return Ready::Stale,
            }
        }
        Ready::Yes
    }
}
