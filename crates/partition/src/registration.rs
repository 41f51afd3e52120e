//! `Registration`: a member's entry in the map, kept alive.
//!
//! The member's client URL is put under its group with an etcd lease, which
//! a task renews every third of its TTL. While etcd cannot be reached the
//! task logs it and tries again each second; the member goes on serving
//! its partitions meanwhile (the table does not change without etcd, so
//! nothing it owns can be taken from it). If the lease expired meanwhile,
//! the task registers the member again with a new one.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::{EtcdMap, GroupName, PartitionError};

/// A member's registration; dropping it stops the renewals (the entry
/// then expires with its lease), [`Registration::end`] removes it at once.
#[derive(Debug)]
pub struct Registration {
    map: EtcdMap,
    key: String,
    lease: tokio::sync::watch::Receiver<i64>,
    task: JoinHandle<()>,
}

impl Registration {
    /// Registers `url` as `group`'s member `member`, with a lease of `ttl`,
    /// and keeps it alive. Fails if etcd cannot be reached now, or another
    /// server holds the name.
    pub async fn start(
        map: &EtcdMap,
        group: &GroupName,
        member: &str,
        url: &str,
        ttl: Duration,
    ) -> Result<Registration, PartitionError> {
        let key = map.member_key(group, member);
        let lease = map.put_member(&key, url, ttl).await?;
        let (tx, rx) = tokio::sync::watch::channel(lease);
        let task = tokio::spawn(keep_alive(
            map.clone(),
            key.clone(),
            url.to_owned(),
            ttl,
            tx,
        ));
        tracing::info!(%key, url, lease, "registered in the partition map");
        Ok(Registration {
            map: map.clone(),
            key,
            lease: rx,
            task,
        })
    }

    /// The etcd key of this member.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Stops the renewals and ends the lease, so the entry goes now.
    pub async fn end(self) -> Result<(), PartitionError> {
        self.task.abort();
        let lease = *self.lease.borrow();
        self.map.revoke(lease).await
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Renews `lease` every third of `ttl`; registers again when it is gone.
async fn keep_alive(
    map: EtcdMap,
    key: String,
    url: String,
    ttl: Duration,
    lease: tokio::sync::watch::Sender<i64>,
) {
    let every = (ttl / 3).max(Duration::from_millis(300));
    let mut failing = false;
    loop {
        let id = *lease.borrow();
        let renewed = async {
            let (mut keeper, mut stream) = map
                .client()
                .lease_keep_alive(id)
                .await
                .map_err(|e| e.to_string())?;
            keeper.keep_alive().await.map_err(|e| e.to_string())?;
            match stream.message().await.map_err(|e| e.to_string())? {
                Some(r) => Ok(r.ttl() > 0),
                None => Err("etcd closed the keep-alive stream".to_owned()),
            }
        }
        .await;
        match renewed {
            Ok(true) => {
                if failing {
                    tracing::info!(%key, "etcd reachable again; registration renewed");
                    failing = false;
                }
                tokio::time::sleep(every).await;
            }
            Ok(false) => {
                tracing::warn!(%key, "the registration's etcd lease expired; registering again");
                match map.put_member(&key, &url, ttl).await {
                    Ok(new) => {
                        let _ = lease.send(new);
                    }
                    Err(e) => {
                        tracing::warn!(%key, error = %e, "could not register again; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(
                        %key,
                        error = %e,
                        "cannot renew the registration in etcd; serving on, retrying each second"
                    );
                    failing = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
