//! `EtcdMap`: the cluster's map in etcd, read, written and watched.
//!
//! Keys, under `/uuidmap/<cluster>/`:
//! - `partitions`: the partition table (module `partition_table`). Its
//!   `mod_revision` is the table's version; every change is a compare on
//!   it, so two writers of the table never both win.
//! - `groups/<group>/members/<member>`: a member's client URL, attached to
//!   the member's etcd lease, so it disappears when the member stops
//!   renewing it (`--etcd-lease-ttl`). `<member>` is `node-<ID>` for a
//!   replica group member and `single` for a single node.
//!
//! The table and the members are read in one transaction, so a view is of
//! one revision.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};

use crate::{ClusterView, GroupName, PartitionError, PartitionTable};

/// How long a call to etcd may take before it fails (etcd down must not
/// hang a registration or a CLI command).
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// A cluster's map in etcd.
#[derive(Clone)]
pub struct EtcdMap {
    client: Client,
    endpoints: String,
    cluster: String,
    prefix: String,
}

impl std::fmt::Debug for EtcdMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdMap")
            .field("endpoints", &self.endpoints)
            .field("cluster", &self.cluster)
            .finish()
    }
}

impl EtcdMap {
    /// A handle on cluster `cluster`'s map in the etcd at `endpoints`
    /// (URLs such as `http://127.0.0.1:2379`). Connects lazily: an etcd
    /// that is down fails the first call, not this one.
    pub async fn connect(endpoints: &[String], cluster: &str) -> Result<EtcdMap, PartitionError> {
        if cluster.parse::<GroupName>().is_err() {
            return Err(PartitionError::BadClusterName(cluster.into()));
        }
        let joined = endpoints.join(",");
        let options = ConnectOptions::new()
            .with_connect_timeout(CALL_TIMEOUT)
            .with_timeout(CALL_TIMEOUT)
            .with_keep_alive(Duration::from_secs(5), CALL_TIMEOUT);
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(|source| PartitionError::Etcd {
                endpoints: joined.clone(),
                source,
            })?;
        Ok(EtcdMap {
            client,
            endpoints: joined,
            cluster: cluster.into(),
            prefix: format!("/uuidmap/{cluster}/"),
        })
    }

    /// The cluster's name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The endpoints, as given.
    pub fn endpoints(&self) -> &str {
        &self.endpoints
    }

    /// Every key of this cluster starts with this.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn table_key(&self) -> String {
        format!("{}partitions", self.prefix)
    }

    fn groups_prefix(&self) -> String {
        format!("{}groups/", self.prefix)
    }

    /// The etcd key of `group`'s member `member`.
    pub fn member_key(&self, group: &GroupName, member: &str) -> String {
        format!("{}{group}/members/{member}", self.groups_prefix())
    }

    fn etcd(&self, source: etcd_client::Error) -> PartitionError {
        PartitionError::Etcd {
            endpoints: self.endpoints.clone(),
            source,
        }
    }

    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    /// Runs `txn`, an etcd failure named with the endpoints.
    async fn txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse, PartitionError> {
        self.client.clone().txn(txn).await.map_err(|e| self.etcd(e))
    }

    /// The map as it is now: the table and every registered member, at one
    /// revision.
    pub async fn load(&self) -> Result<ClusterView, PartitionError> {
        let txn = Txn::new().and_then([
            TxnOp::get(self.table_key(), None),
            TxnOp::get(self.groups_prefix(), Some(GetOptions::new().with_prefix())),
        ]);
        let response = self.txn(txn).await?;
        let mut view = ClusterView {
            revision: response.header().map_or(0, |h| h.revision()),
            ..ClusterView::default()
        };
        let mut gets = response.op_responses().into_iter();
        if let Some(TxnOpResponse::Get(table)) = gets.next()
            && let Some(kv) = table.kvs().first()
        {
            let text = kv.value_str().map_err(|e| self.etcd(e))?;
            view.table = Some(PartitionTable::parse(text)?);
            view.version = kv.mod_revision();
        }
        if let Some(TxnOpResponse::Get(members)) = gets.next() {
            for kv in members.kvs() {
                let key = kv.key_str().map_err(|e| self.etcd(e))?;
                let rest = &key[self.groups_prefix().len()..];
                let bad = |why: &str| PartitionError::BadValue {
                    key: key.into(),
                    why: why.into(),
                };
                let (group, member) = rest
                    .split_once("/members/")
                    .ok_or_else(|| bad("expected groups/<group>/members/<member>"))?;
                let group = group
                    .parse::<GroupName>()
                    .map_err(|e| bad(&e.to_string()))?;
                let url = kv.value_str().map_err(|_| bad("the URL is not UTF-8"))?;
                view.groups
                    .entry(group)
                    .or_default()
                    .insert(member.into(), url.into());
            }
        }
        Ok(view)
    }

    /// Makes the cluster's first table, `table`; refused if there is one.
    /// Returns its version.
    pub async fn init(&self, table: &PartitionTable) -> Result<i64, PartitionError> {
        let key = self.table_key();
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), table.to_text(), None)])
            .or_else([TxnOp::get(key, None)]);
        let response = self.txn(txn).await?;
        let revision = response.header().map_or(0, |h| h.revision());
        if response.succeeded() {
            return Ok(revision);
        }
        let version = match response.op_responses().first() {
            Some(TxnOpResponse::Get(g)) => g.kvs().first().map_or(0, |kv| kv.mod_revision()),
            _ => 0,
        };
        Err(PartitionError::AlreadyInitialized {
            cluster: self.cluster.clone(),
            version,
        })
    }

    /// Replaces the table, if its version is still `expected`. Returns the
    /// new version.
    pub async fn replace_table(
        &self,
        expected: i64,
        table: &PartitionTable,
    ) -> Result<i64, PartitionError> {
        let key = self.table_key();
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                expected,
            )])
            .and_then([TxnOp::put(key, table.to_text(), None)]);
        let response = self.txn(txn).await?;
        if response.succeeded() {
            Ok(response.header().map_or(0, |h| h.revision()))
        } else {
            Err(PartitionError::TableChanged(expected))
        }
    }

    /// Puts `url` at `key` under a new lease of `ttl`, unless another URL
    /// is there (a restarted member finds its own URL, under its old
    /// lease, and takes the key over). Returns the lease.
    pub(crate) async fn put_member(
        &self,
        key: &str,
        url: &str,
        ttl: Duration,
    ) -> Result<i64, PartitionError> {
        let mut client = self.client.clone();
        let ttl = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let lease = client
            .lease_grant(ttl, None)
            .await
            .map_err(|e| self.etcd(e))?
            .id();
        let put = TxnOp::put(key, url, Some(PutOptions::new().with_lease(lease)));
        let txn = Txn::new()
            .when([Compare::version(key, CompareOp::Equal, 0)])
            .and_then([put.clone()])
            .or_else([TxnOp::get(key, None)]);
        let response = client.txn(txn).await.map_err(|e| self.etcd(e))?;
        if response.succeeded() {
            return Ok(lease);
        }
        let theirs = match response.op_responses().first() {
            Some(TxnOpResponse::Get(g)) => g
                .kvs()
                .first()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
            _ => None,
        };
        match theirs {
            Some(theirs) if theirs != url => {
                let _ = client.lease_revoke(lease).await;
                Err(PartitionError::MemberTaken {
                    key: key.into(),
                    url: theirs,
                })
            }
            // Ours (a restart), or gone meanwhile: take it.
            _ => {
                let txn = Txn::new()
                    .when([Compare::value(key, CompareOp::Equal, url)])
                    .and_then([put.clone()])
                    .or_else([TxnOp::get(key, None)]);
                let again = client.txn(txn).await.map_err(|e| self.etcd(e))?;
                if again.succeeded() {
                    Ok(lease)
                } else {
                    // It went away between the two calls: register anew.
                    Box::pin(self.put_member(key, url, Duration::from_secs(ttl as u64))).await
                }
            }
        }
    }

    /// Ends a lease now (its keys go with it).
    pub(crate) async fn revoke(&self, lease: i64) -> Result<(), PartitionError> {
        self.client
            .clone()
            .lease_revoke(lease)
            .await
            .map(drop)
            .map_err(|e| self.etcd(e))
    }
}
