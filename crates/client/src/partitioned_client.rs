//! `PartitionedClient`: one client for a partitioned cluster, many replica
//! groups behind one map in etcd (README "Partitions").
//!
//! It reads the map from etcd once and keeps it current with a watch
//! (`uuidmap_partition::MapCache`); each call hashes its keys to their
//! partitions ([`uuidmap_partition::partition_of`]), finds each one's
//! group in the cached table, and sends the keys to that group through a
//! [`Client`] of the group's registered members (built from the template
//! [`ClientBuilder`], so retries, leaders, deadlines and read-your-writes
//! work per group as for one group). A call never waits on etcd unless a
//! member refuses a key as not its group's: then the map is read again and
//! the call routed again, up to [`MAX_REROUTES`] times, or, when the member
//! is the one behind the map, the call waits for it to catch up
//! (`reroute`, up to [`MEMBER_CATCH_UP`](crate::MEMBER_CATCH_UP)).
//!
//! Multi-key reads ([`PartitionedClient::get_many`]) are split by group,
//! sent to the groups at once, and merged back in the caller's order.
//! A write batch ([`PartitionedClient::write`]) must stay within one group:
//! groups share no log, so a batch across two would not be atomic.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use uuid::Uuid;
use uuidmap_partition::{
    ClusterView, EtcdMap, GroupName, MapCache, PartitionError, PartitionId, partition_of,
};

use crate::reroute::Reroute;
use crate::{Client, ClientBuilder, ClientError, WriteOp};

/// Each group's client, with the member URLs it was built for.
type GroupClients = HashMap<GroupName, (Vec<String>, Client)>;

/// The routes of one view of the map: each partition's group's client,
/// ready, so that routing a key is a hash and two array reads.
struct Routes {
    /// The view they were made for; stale once the cache holds another.
    view: Arc<ClusterView>,
    /// Per partition: its group's index in `clients` ([`UNROUTABLE`]: the
    /// group has no registered member).
    by_partition: Vec<u16>,
    clients: Vec<Client>,
}

/// [`Routes::by_partition`] of a partition whose group has no member.
const UNROUTABLE: u16 = u16::MAX;

/// A client of a partitioned cluster (module docs).
#[derive(Clone)]
pub struct PartitionedClient {
    cache: Arc<MapCache>,
    template: Arc<ClientBuilder>,
    groups: Arc<ArcSwap<GroupClients>>,
    routes: Arc<ArcSwapOption<Routes>>,
}

fn routing(e: PartitionError) -> ClientError {
    ClientError::Routing { why: e.to_string() }
}

impl PartitionedClient {
    /// A client of cluster `cluster` whose map is in the etcd at
    /// `etcd` (client URLs); each group's client is built from `template`
    /// (its endpoints are ignored: they come from the map). Fails if etcd
    /// cannot be read now.
    pub async fn connect(
        etcd: &[String],
        cluster: &str,
        template: ClientBuilder,
    ) -> Result<PartitionedClient, ClientError> {
        let map = EtcdMap::connect(etcd, cluster).await.map_err(routing)?;
        let cache = MapCache::start(map, true).await.map_err(routing)?;
        Ok(PartitionedClient {
            cache,
            template: Arc::new(template),
            groups: Arc::default(),
            routes: Arc::default(),
        })
    }

    /// The map's cache.
    pub(crate) fn cache(&self) -> &MapCache {
        &self.cache
    }

    /// The map in etcd.
    pub fn etcd(&self) -> &EtcdMap {
        self.cache.etcd()
    }

    /// The builder each group's client is made from.
    pub(crate) fn template(&self) -> &ClientBuilder {
        &self.template
    }

    /// The map as this client last read it.
    pub fn view(&self) -> Arc<ClusterView> {
        self.cache.view()
    }

    /// Reads the map from etcd now.
    pub async fn refresh(&self) -> Result<Arc<ClusterView>, ClientError> {
        self.cache.refresh().await.map_err(routing)
    }

    /// [`PartitionedClient::refresh`], for a reroute.
    async fn reread(&self) -> Result<(), ClientError> {
        self.refresh().await.map(drop)
    }

    /// The client of the group that owns `key` in the cached map.
    pub fn client_for(&self, key: Uuid) -> Result<Client, ClientError> {
        let p = usize::from(partition_of(key.as_bytes()).get());
        // The hot path: the routes of the current view.
        if let Some(routes) = &*self.routes.load()
            && self.cache.is_current(&routes.view)
            && let Some(client) = routes.clients.get(usize::from(routes.by_partition[p]))
        {
            return Ok(client.clone());
        }
        let view = self.cache.view();
        let group = view
            .owner_of(key.as_bytes())
            .ok_or_else(|| ClientError::Routing {
                why: format!(
                    "cluster {:?} has no partition table in etcd yet",
                    self.cache.etcd().cluster()
                ),
            })?
            .clone();
        let client = self.group_client(&view, &group)?;
        self.routes.store(Some(Arc::new(self.routes_of(view))));
        Ok(client)
    }

    /// The routes of the current view, made if they are not.
    fn routes(&self) -> Result<Arc<Routes>, ClientError> {
        if let Some(routes) = &*self.routes.load()
            && self.cache.is_current(&routes.view)
        {
            return Ok(Arc::clone(routes));
        }
        let view = self.cache.view();
        if view.table.is_none() {
            return Err(ClientError::Routing {
                why: format!(
                    "cluster {:?} has no partition table in etcd yet",
                    self.cache.etcd().cluster()
                ),
            });
        }
        let routes = Arc::new(self.routes_of(view));
        self.routes.store(Some(Arc::clone(&routes)));
        Ok(routes)
    }

    /// The routes of `view` (a group with no member is unroutable).
    fn routes_of(&self, view: Arc<ClusterView>) -> Routes {
        let mut clients = Vec::new();
        let mut index: HashMap<GroupName, u16> = HashMap::new();
        let mut by_partition = vec![UNROUTABLE; PartitionId::all().count()];
        if let Some(table) = &view.table {
            for p in PartitionId::all() {
                let owner = &table.get(p).owner;
                let i = match index.get(owner) {
                    Some(i) => *i,
                    None => {
                        let i = match self.group_client(&view, owner) {
                            Ok(c) => {
                                clients.push(c);
                                u16::try_from(clients.len() - 1).unwrap_or(UNROUTABLE)
                            }
                            Err(_) => UNROUTABLE,
                        };
                        index.insert(owner.clone(), i);
                        i
                    }
                };
                by_partition[usize::from(p.get())] = i;
            }
        }
        Routes {
            view,
            by_partition,
            clients,
        }
    }

    /// `group`'s client, built (or built again) for its members in `view`.
    pub fn group_client(
        &self,
        view: &ClusterView,
        group: &GroupName,
    ) -> Result<Client, ClientError> {
        // The hot path: the group's client, built for the members the view
        // names (compared in place: no allocation per call).
        let groups = self.groups.load();
        let built = groups.get(group);
        if let Some((built_for, client)) = built
            && built_for.iter().eq(view.members(group))
        {
            return Ok(client.clone());
        }
        let urls = view.member_urls(group);
        if urls.is_empty() {
            return Err(ClientError::Routing {
                why: format!(
                    "group {group} owns the key's partition but has no member registered in etcd \
                     (all stopped, or their leases expired)"
                ),
            });
        }
        let mut client = ClientBuilder::clone(&self.template)
            .endpoints(urls.clone())
            .build()?;
        // The same session as the client it replaces: the group's LSNs go
        // on, and a read must not go back behind what the old one saw
        // (a fresh session would read from a leader that has not applied
        // what a follower showed a moment ago).
        if let Some((_, old)) = built {
            client = client.in_session_of(old);
        }
        self.groups.rcu(|groups| {
            let mut next = HashMap::clone(groups);
            next.insert(group.clone(), (urls.clone(), client.clone()));
            next
        });
        Ok(client)
    }

    /// Runs `call` on the client of `key`'s group, routing again after a
    /// refusal as not that group's.
    async fn routed<T, F, Fut>(&self, key: Uuid, call: F) -> Result<T, ClientError>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let mut reroute = Reroute::default();
        loop {
            let client = self.client_for(key)?;
            match call(client).await {
                Err(e)
                    if reroute
                        .again(&e, self.view().version, || self.reread())
                        .await? => {}
                other => return other,
            }
        }
    }

    /// The value of `key`.
    pub async fn get(&self, key: Uuid) -> Result<Option<Uuid>, ClientError> {
        self.routed(key, |c| async move { c.get(key).await }).await
    }

    /// Sets `key` to `value`; the LSN is its group's.
    pub async fn put(&self, key: Uuid, value: Uuid) -> Result<u64, ClientError> {
        self.routed(key, |c| async move { c.put(key, value).await })
            .await
    }

    /// Removes `key`; the LSN is its group's.
    pub async fn delete(&self, key: Uuid) -> Result<u64, ClientError> {
        self.routed(key, |c| async move { c.delete(key).await })
            .await
    }

    /// Sets `key` to `new` if it is `expected` (see
    /// [`Client::compare_and_set`]). A refusal as not the group's did
    /// nothing, so routing it again never applies it twice.
    pub async fn compare_and_set(
        &self,
        key: Uuid,
        expected: Option<Uuid>,
        new: Option<Uuid>,
    ) -> Result<crate::CasOutcome, ClientError> {
        self.routed(key, |c| async move {
            c.compare_and_set(key, expected, new).await
        })
        .await
    }

    /// Applies `ops` atomically in their group. Every key must be in one
    /// group's partitions: a batch across groups is refused here, before
    /// anything is sent.
    pub async fn write(&self, ops: &[WriteOp]) -> Result<u64, ClientError> {
        let Some(first) = ops.first() else {
            return Err(ClientError::Routing {
                why: "an empty write batch".into(),
            });
        };
        let first_key = first.key();
        let view = self.cache.view();
        let group = view.owner_of(first_key.as_bytes()).cloned();
        if let Some(other) = ops
            .iter()
            .find(|op| view.owner_of(op.key().as_bytes()).cloned() != group)
        {
            return Err(ClientError::Routing {
                why: format!(
                    "keys {first_key} and {} are in different groups' partitions ({} and {}): a \
                     batch is atomic only within one group; send one batch per group",
                    other.key(),
                    group.map_or("none".into(), |g| g.to_string()),
                    view.owner_of(other.key().as_bytes())
                        .map_or("none".into(), |g| g.to_string()),
                ),
            });
        }
        self.routed(first_key, |c| async move { c.write(ops).await })
            .await
    }

    /// The values of `keys`, in order: split by group, asked of every group
    /// at once, merged.
    pub async fn get_many(&self, keys: &[Uuid]) -> Result<Vec<Option<Uuid>>, ClientError> {
        let mut reroute = Reroute::default();
        loop {
            match self.get_many_once(keys).await {
                Err(e)
                    if reroute
                        .again(&e, self.view().version, || self.reread())
                        .await? => {}
                other => return other,
            }
        }
    }

    async fn get_many_once(&self, keys: &[Uuid]) -> Result<Vec<Option<Uuid>>, ClientError> {
        let routes = self.routes()?;
        // Each key's group, by its index in the routes.
        let mut groups = Vec::with_capacity(keys.len());
        for k in keys {
            let i = routes.by_partition[usize::from(partition_of(k.as_bytes()).get())];
            if i == UNROUTABLE {
                // The slow path names what is missing.
                return Err(match self.client_for(*k) {
                    Err(e) => e,
                    Ok(_) => ClientError::Routing {
                        why: "the partition map changed while the keys were routed; try again"
                            .into(),
                    },
                });
            }
            groups.push(i);
        }
        // All in one group (one group, or keys that happen to share it):
        // one call, no reordering.
        if let Some(&first) = groups.first()
            && groups.iter().all(|g| *g == first)
        {
            return routes.clients[usize::from(first)].get_many(keys).await;
        }
        let mut by_group: Vec<(Vec<usize>, Vec<Uuid>)> =
            vec![Default::default(); routes.clients.len()];
        for (i, (k, g)) in keys.iter().zip(&groups).enumerate() {
            let slot = &mut by_group[usize::from(*g)];
            slot.0.push(i);
            slot.1.push(*k);
        }
        let calls = by_group
            .into_iter()
            .zip(&routes.clients)
            .filter(|((positions, _), _)| !positions.is_empty())
            .map(|((positions, keys), client)| async move {
                let values = client.get_many(&keys).await?;
                Ok::<_, ClientError>((positions, values))
            });
        let mut out = vec![None; keys.len()];
        for answer in futures_util::future::join_all(calls).await {
            let (positions, values) = answer?;
            for (i, v) in positions.into_iter().zip(values) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}
