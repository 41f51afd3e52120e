//! Servers of a partitioned cluster over a [`TestEtcd`](crate::etcd::TestEtcd).

use std::path::Path;
use std::time::Duration;

use tokio::net::TcpListener;
use uuidmap_server::config::PartitionOptions;

use super::{TestServer, config};

/// A single node serving `group`'s partitions of cluster `cluster` in the
/// etcd at `etcd`, over `dir`, with the tests' [`config`] and a 2 s lease.
pub async fn start_partitioned(dir: &Path, etcd: &str, cluster: &str, group: &str) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut c = config(dir);
    c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    c.partitions = Some(PartitionOptions {
        etcd: vec![etcd.to_owned()],
        cluster: cluster.to_owned(),
        group: group.parse().expect("a valid group name"),
        member: "single".into(),
        advertise_url: format!("http://{addr}"),
        lease_ttl: Duration::from_secs(2),
    });
    TestServer::start_bound(c, listener, None).await
}
