//! End-to-end tests of the client SDK (`uuidmap_client`) against real
//! servers: failover between endpoints, the retry budget, deadlines,
//! overload (`retries`); auto-batching (`batching`); what a broken network
//! does to scans, puts and compare-and-sets (`faults`, through
//! `uuidmap_testkit::proxy::FaultProxy`); watches that resume, the
//! follower's recipe and Write batches (`streams`); a server process
//! killed with SIGKILL and restarted under load (`chaos`); a replica
//! group whose leader stops (`group`), a group of three processes
//! whose leader is killed with SIGKILL under write load (`group_kill`),
//! and a group of three processes under a randomized schedule of kills,
//! partitions and a wipe-and-re-add (`cluster_chaos`, the short run of
//! `tools/cluster-chaos.sh`); a client that learns its group's leader
//! (`discovery`); a follower whose WAL was damaged, rebuilt from its
//! group (`damaged_member`, ignored: the figure of
//! `tools/bench-damaged-member.sh`); a group across network namespaces under kills, with
//! pauses, one-way drops, delay, full disks and real reads (`netns_chaos`,
//! ignored: root only, `tools/cluster-chaos.sh --netns`); the load both
//! share (`chaos_load`); a partitioned cluster of two groups over a real
//! etcd, with partitions moved under load (`partitions`), and two groups of
//! three with leaders stopped and etcd killed during moves
//! (`partition_groups`, ignored).

mod batching;
mod blocking;
mod chaos;
mod chaos_load;
mod cluster_chaos;
mod damaged_member;
mod discovery;
mod faults;
mod group;
mod group_kill;
mod hedging;
mod monotonic;
mod netns_chaos;
mod partition_groups;
mod partitions;
mod retries;
#[path = "../serve_child/mod.rs"]
mod serve_child;
mod streams;
mod token_refresh;

use std::net::SocketAddr;
use std::time::Duration;

use uuid::Uuid;
use uuidmap_client::{Backoff, Client, ClientBuilder, Jitter, RetryPolicy};

/// An address where nothing listens, handed out once in this process
/// (so also a port to give a child server).
fn dead_addr() -> SocketAddr {
    uuidmap_testkit::ports::unused_addr()
}

fn url(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

fn key(i: u64) -> Uuid {
    Uuid::from_u128(0xc1_0000_0000_0000_0000_0000_0000_0000 | u128::from(i + 1))
}

/// A builder with quick retries (1-4 ms), for tests that count them.
fn quick(endpoints: impl IntoIterator<Item = String>) -> ClientBuilder {
    let fast = Backoff {
        base: Duration::from_millis(1),
        cap: Duration::from_millis(4),
        jitter: Jitter::Full,
    };
    Client::builder().endpoints(endpoints).retry(RetryPolicy {
        fast,
        slow: Backoff {
            jitter: Jitter::Equal,
            ..fast
        },
        max_attempts: 100,
    })
}
