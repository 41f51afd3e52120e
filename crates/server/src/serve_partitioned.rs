//! Serving one group's partitions of a partitioned cluster (`--etcd`,
//! README "Partitions", docs/partitions.md).
//!
//! At start the server reads the cluster's map from etcd and keeps it
//! current with a watch (`MapCache`), and registers its client URL under
//! its group with an etcd lease (`Registration`). The data service then
//! checks every key against the map (`Ownership`) before the index sees
//! it.
//!
//! etcd down at start: the server starts anyway, refuses keys until it has
//! read the table (`UNAVAILABLE`, saying why), and registers in the
//! background once etcd answers, saying so in the log. A name another
//! server holds (a second single node of the same group) stops the start.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use uuidmap_partition::{EtcdMap, MapCache, Ownership, PartitionError, Registration};

use uuidmap_engine::writer::DurableIndex;

use crate::ServeError;
use crate::config::PartitionOptions;
use crate::partition_upkeep;

/// A server's place in its partitioned cluster.
pub(crate) struct Partitioned {
    ownership: Ownership,
    registration: Arc<Mutex<Option<Registration>>>,
    /// Registers in the background when etcd was down at start.
    registering: Option<JoinHandle<()>>,
    /// The fence and the drop of moved partitions (`partition_upkeep`).
    upkeep: Vec<JoinHandle<()>>,
}

impl Partitioned {
    /// Joins the cluster `options` name, serving `durable`'s index.
    pub(crate) async fn start(
        options: &PartitionOptions,
        durable: &Arc<DurableIndex>,
        member: Option<crate::ClusterView>,
    ) -> Result<Partitioned, ServeError> {
        let map = EtcdMap::connect(&options.etcd, &options.cluster)
            .await
            .map_err(ServeError::Partitions)?;
        let cache = MapCache::start(map.clone(), false)
            .await
            .map_err(ServeError::Partitions)?;
        if let Some(e) = cache.etcd_error() {
            tracing::warn!(
                error = %e,
                "cannot read the partition map from etcd: refusing every key until it can"
            );
        } else if cache.view().table.is_none() {
            tracing::warn!(
                cluster = %options.cluster,
                "the cluster has no partition table yet (`uuidmap cluster partitions init`): \
                 refusing every key until it has"
            );
        }
        let registration = Arc::new(Mutex::new(None));
        let registering = match register(&map, options).await {
            Ok(r) => {
                *registration.lock().await = Some(r);
                None
            }
            Err(e @ PartitionError::Etcd { .. }) => {
                tracing::warn!(
                    error = %e,
                    "cannot register in etcd now; serving on and retrying each second"
                );
                Some(tokio::spawn(register_later(
                    map,
                    options.clone(),
                    Arc::clone(&registration),
                )))
            }
            Err(e) => return Err(ServeError::Partitions(e)),
        };
        tracing::info!(
            group = %options.group,
            cluster = %options.cluster,
            url = %options.advertise_url,
            "serving the group's partitions"
        );
        let ownership = Ownership::new(cache, options.group.clone());
        let upkeep = vec![
            tokio::spawn(partition_upkeep::fence_on_change(
                ownership.clone(),
                Arc::clone(durable),
                member.map(|view| {
                    let tail: Arc<dyn Fn() -> Option<u64> + Send + Sync> =
                        Arc::new(move || view().last_log_index);
                    tail
                }),
            )),
            tokio::spawn(partition_upkeep::drop_foreign_on_change(
                ownership.clone(),
                Arc::clone(durable),
            )),
        ];
        Ok(Partitioned {
            ownership,
            registration,
            registering,
            upkeep,
        })
    }

    /// The check the data service applies to every key.
    pub(crate) fn ownership(&self) -> Ownership {
        self.ownership.clone()
    }

    /// Leaves the cluster: the registration ends now rather than at its
    /// lease's expiry, so clients stop sending here at once.
    pub(crate) async fn stop(self) {
        if let Some(task) = self.registering {
            task.abort();
        }
        for task in self.upkeep {
            task.abort();
        }
        if let Some(r) = self.registration.lock().await.take()
            && let Err(e) = r.end().await
        {
            tracing::warn!(error = %e, "could not end the registration in etcd; it expires");
        }
    }
}

async fn register(map: &EtcdMap, o: &PartitionOptions) -> Result<Registration, PartitionError> {
    Registration::start(map, &o.group, &o.member, &o.advertise_url, o.lease_ttl).await
}

/// Registers once etcd answers; gives up (with an error in the log) on
/// anything but etcd being unreachable.
async fn register_later(
    map: EtcdMap,
    options: PartitionOptions,
    slot: Arc<Mutex<Option<Registration>>>,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        match register(&map, &options).await {
            Ok(r) => {
                tracing::info!("registered in etcd");
                *slot.lock().await = Some(r);
                return;
            }
            Err(PartitionError::Etcd { .. }) => continue,
            Err(e) => {
                tracing::error!(error = %e, "cannot register in etcd; clients will not find this server");
                return;
            }
        }
    }
}
