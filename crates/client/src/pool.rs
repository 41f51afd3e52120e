//! [`Pool`]: the HTTP/2 connections to one endpoint.
//!
//! The connections form a stack: a call takes the topmost one with room
//! (fewer than `streams` calls and streams on it), so the hot connection at
//! the top carries the load, and a connection below it is made only when
//! the ones above are full. When load falls, the lower connections go
//! idle; the health task closes those idle for longer than `idle_timeout`
//! (never the top one). So the pool grows with load and shrinks back
//! without oscillating, as a LIFO pool of sessions does (the brief's lesson
//! 4), and a burst does not leave connections open for ever.
//!
//! Lock-free: a connection's channel is swapped atomically (`arc-swap`);
//! its load and last use are atomics. A lease counts one call or stream on
//! its connection until dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use tonic::transport::{Channel, Endpoint};

/// How many connections, and how full each may get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// The most connections to one endpoint.
    pub connections: usize,
    /// Calls and streams on a connection before the next one is used.
    pub streams: usize,
    /// How long a connection below the top may stay idle before it is
    /// closed.
    pub idle_timeout: Duration,
}

impl Default for PoolConfig {
    /// 2 connections of 100 streams; idle ones closed after 60 s.
    fn default() -> Self {
        PoolConfig {
            connections: 2,
            streams: 100,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

struct Connection {
    channel: ArcSwapOption<Channel>,
    /// Leases out now.
    load: AtomicUsize,
    /// Microseconds from the pool's start when the last lease ended.
    last_used: AtomicU64,
}

/// The connections to one endpoint.
pub(crate) struct Pool {
    endpoint: Endpoint,
    connections: Box<[Connection]>,
    streams: usize,
    start: Instant,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("open", &self.open())
            .field("load", &self.load())
            .finish()
    }
}

/// One call or stream on a connection, counted until dropped.
pub(crate) struct Lease {
    pool: Arc<Pool>,
    slot: usize,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let c = &self.pool.connections[self.slot];
        c.last_used
            .store(self.pool.start.elapsed().as_micros() as u64, Relaxed);
        c.load.fetch_sub(1, Relaxed);
    }
}

impl Pool {
    /// A pool for `endpoint`; `connected`, if given, is its first
    /// connection, already made.
    pub(crate) fn new(endpoint: Endpoint, config: PoolConfig, connected: Option<Channel>) -> Pool {
        let connections: Box<[Connection]> = (0..config.connections.max(1))
            .map(|i| Connection {
                channel: ArcSwapOption::new(if i == 0 {
                    connected.clone().map(Arc::new)
                } else {
                    None
                }),
                load: AtomicUsize::new(0),
                last_used: AtomicU64::new(0),
            })
            .collect();
        Pool {
            endpoint,
            connections,
            streams: config.streams.max(1),
            start: Instant::now(),
        }
    }

    /// A channel for one call or stream, and its lease.
    pub(crate) fn lease(self: &Arc<Pool>) -> (Channel, Lease) {
        let mut slot = 0;
        let mut least = usize::MAX;
        for (i, c) in self.connections.iter().enumerate() {
            let load = c.load.load(Relaxed);
            if load < self.streams {
                slot = i;
                break;
            }
            if load < least {
                (slot, least) = (i, load);
            }
        }
        let c = &self.connections[slot];
        c.load.fetch_add(1, Relaxed);
        let lease = Lease {
            pool: Arc::clone(self),
            slot,
        };
        let channel = match c.channel.load_full() {
            Some(channel) => Channel::clone(&channel),
            None => {
                let fresh = Arc::new(self.endpoint.connect_lazy());
                // Another caller may have made one meanwhile: use whichever
                // is in place.
                let before = c
                    .channel
                    .compare_and_swap(&None::<Arc<Channel>>, Some(fresh.clone()));
                match &*before {
                    Some(theirs) => Channel::clone(theirs),
                    None => Channel::clone(&fresh),
                }
            }
        };
        (channel, lease)
    }

    /// Closes the connections below the top that have had no lease for
    /// `idle_timeout`; how many were closed.
    pub(crate) fn close_idle(&self, idle_timeout: Duration) -> usize {
        let now = self.start.elapsed().as_micros() as u64;
        let idle = idle_timeout.as_micros() as u64;
        let mut closed = 0;
        for c in self.connections.iter().skip(1) {
            if c.load.load(Relaxed) == 0
                && now.saturating_sub(c.last_used.load(Relaxed)) >= idle
                && c.channel.swap(None).is_some()
            {
                closed += 1;
            }
        }
        closed
    }

    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        self.connections
            .iter()
            .filter(|c| c.channel.load().is_some())
            .count()
    }

    /// Leases out now, per connection.
    pub(crate) fn load(&self) -> Vec<usize> {
        self.connections
            .iter()
            .map(|c| c.load.load(Relaxed))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(connections: usize, streams: usize) -> Arc<Pool> {
        let endpoint = Endpoint::from_static("http://127.0.0.1:1");
        Arc::new(Pool::new(
            endpoint,
            PoolConfig {
                connections,
                streams,
                idle_timeout: Duration::ZERO,
            },
            None,
        ))
    }

    #[tokio::test]
    async fn calls_fill_the_top_connection_before_the_next_and_spill_to_the_least_loaded() {
        let p = pool(3, 2);
        let leases: Vec<_> = (0..5).map(|_| p.lease().1).collect();
        assert_eq!(p.load(), [2, 2, 1]);
        assert_eq!(p.open(), 3);
        // All full: the least loaded takes the next.
        let more: Vec<_> = (0..2).map(|_| p.lease().1).collect();
        // The last had room on the third; then all are full and the
        // least loaded (the first of them) takes it.
        assert_eq!(p.load(), [3, 2, 2]);
        drop((leases, more));
        assert_eq!(p.load(), [0, 0, 0]);
    }

    #[tokio::test]
    async fn when_load_falls_the_top_connection_takes_it_all_and_the_rest_close() {
        let p = pool(3, 2);
        let burst: Vec<_> = (0..6).map(|_| p.lease().1).collect();
        assert_eq!(p.open(), 3);
        drop(burst);
        // Calls one at a time all go to the top connection.
        for _ in 0..10 {
            let (_, lease) = p.lease();
            assert_eq!(lease.slot, 0);
        }
        assert_eq!(p.close_idle(Duration::ZERO), 2);
        assert_eq!(p.open(), 1, "the top connection stays");
        // A connection with a lease out is not closed.
        let held: Vec<_> = (0..3).map(|_| p.lease().1).collect();
        assert_eq!(p.close_idle(Duration::ZERO), 0);
        drop(held);
    }
}
