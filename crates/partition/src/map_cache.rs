//! `MapCache`: the cluster's map held in memory and kept current by an etcd
//! watch, read on the hot path without a lock or an etcd call.
//!
//! A background task reads the whole map (`EtcdMap::load`), then watches
//! the cluster's prefix from the next revision and reads it again after
//! each change (the map changes only on moves and registrations: rare).
//! When etcd cannot be reached the last view stays in place and the task
//! retries each second; [`MapCache::etcd_error`] says what failed. A view
//! only ever replaces an older one (higher table version or revision), so
//! a slow reload never brings back a table a newer one replaced.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use etcd_client::WatchOptions;
use tokio::task::JoinHandle;

use crate::{ClusterView, EtcdMap, PartitionError};

/// The map, current as of the last change etcd told us of.
#[derive(Debug)]
pub struct MapCache {
    map: EtcdMap,
    view: ArcSwap<ClusterView>,
    /// The last failure to reach etcd, until a call succeeds again.
    etcd_error: Mutex<Option<String>>,
    /// Wakes waiters when a newer view is stored.
    changed: tokio::sync::watch::Sender<i64>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl MapCache {
    /// A cache of `map`, loaded once now if etcd answers, then kept
    /// current by a watch. With `require_first_load`, a failure of the
    /// first load is returned (a client that cannot route without it); a
    /// member starts with an empty view instead and refuses keys until the
    /// first load succeeds.
    pub async fn start(
        map: EtcdMap,
        require_first_load: bool,
    ) -> Result<Arc<MapCache>, PartitionError> {
        let first = map.load().await;
        let (view, error) = match first {
            Ok(v) => (v, None),
            Err(e) if require_first_load => return Err(e),
            Err(e) => (ClusterView::default(), Some(e.to_string())),
        };
        let (changed, _) = tokio::sync::watch::channel(view.revision);
        let cache = Arc::new(MapCache {
            map,
            view: ArcSwap::from_pointee(view),
            etcd_error: Mutex::new(error),
            changed,
            task: Mutex::new(None),
        });
        let task = tokio::spawn(watch_loop(Arc::downgrade(&cache)));
        *cache.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        Ok(cache)
    }

    /// The current view (no lock, no etcd call).
    pub fn view(&self) -> Arc<ClusterView> {
        self.view.load_full()
    }

    /// Whether `view` is the current view (no lock, no reference count).
    pub fn is_current(&self, view: &Arc<ClusterView>) -> bool {
        Arc::ptr_eq(&*self.view.load(), view)
    }

    /// Changes whenever a newer view is stored (its value: the view's etcd
    /// revision).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<i64> {
        self.changed.subscribe()
    }

    /// The etcd the map lives in.
    pub fn etcd(&self) -> &EtcdMap {
        &self.map
    }

    /// Why etcd could not be reached, while it cannot.
    pub fn etcd_error(&self) -> Option<String> {
        self.etcd_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads the map from etcd now (after a refusal that named a newer
    /// table version than ours) and returns the newest view.
    pub async fn refresh(&self) -> Result<Arc<ClusterView>, PartitionError> {
        match self.map.load().await {
            Ok(v) => {
                self.set_error(None);
                self.offer(v);
                Ok(self.view())
            }
            Err(e) => {
                self.set_error(Some(e.to_string()));
                Err(e)
            }
        }
    }

    /// Waits until the view's revision is at least `revision`, or `limit`
    /// passes; returns the view then.
    pub async fn wait_for_revision(&self, revision: i64, limit: Duration) -> Arc<ClusterView> {
        let mut rx = self.changed.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|r| *r >= revision)).await;
        self.view()
    }

    fn set_error(&self, e: Option<String>) {
        *self.etcd_error.lock().unwrap_or_else(|p| p.into_inner()) = e;
    }

    /// Stores `v` unless the view in place is newer.
    fn offer(&self, v: ClusterView) {
        let v = Arc::new(v);
        self.view.rcu(|cur| {
            if (v.version, v.revision) >= (cur.version, cur.revision) {
                Arc::clone(&v)
            } else {
                Arc::clone(cur)
            }
        });
        let revision = self.view.load().revision;
        self.changed.send_if_modified(|r| {
            let newer = revision > *r;
            *r = revision.max(*r);
            newer
        });
    }
}

impl Drop for MapCache {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }
}

/// Load, watch from the next revision, load again on each change; on any
/// failure wait a second and start over. Ends when the cache is dropped.
async fn watch_loop(cache: Weak<MapCache>) {
    loop {
        let Some(c) = cache.upgrade() else { return };
        let map = c.map.clone();
        let from = match c.refresh().await {
            Ok(v) => v.revision + 1,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the partition map; retrying each second");
                drop(c);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        drop(c);
        let options = WatchOptions::new().with_prefix().with_start_revision(from);
        let mut stream = match map.client().watch(map.prefix(), Some(options)).await {
            Ok(s) => s,
            Err(e) => {
                if let Some(c) = cache.upgrade() {
                    c.set_error(Some(e.to_string()));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            match stream.message().await {
                Ok(Some(r)) if r.canceled() => {
                    tracing::info!(reason = r.cancel_reason(), "etcd ended the map's watch");
                    break;
                }
                Ok(Some(r)) if r.events().is_empty() => continue,
                Ok(Some(_)) => {
                    let Some(c) = cache.upgrade() else { return };
                    if let Err(e) = c.refresh().await {
                        tracing::warn!(error = %e, "cannot read the partition map after a change");
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    if let Some(c) = cache.upgrade() {
                        c.set_error(Some(e.to_string()));
                    }
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
