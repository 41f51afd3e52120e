//! The servers a client calls, and which of them to call next.
//!
//! Each endpoint is one server address with a small pool of HTTP/2
//! connections ([`crate::pool`]; tonic channels, which connect when first
//! used and reconnect after a failure; a DNS name is resolved again at each
//! connection). Calls go round the healthy endpoints in turn.
//!
//! A failure that says the server cannot be reached ([`RetryClass::Fast`]
//! from the transport, or a transport failure after sending) *pessimizes*
//! its endpoint: calls skip it from then on, so a dead server costs at
//! most the one call that found it dead (which is retried elsewhere). It is
//! not evicted: the health prober ([`probe`]) asks each pessimized endpoint
//! `grpc.health.v1.Health/Check` every `health_interval`, and one that
//! answers SERVING is called again. When every endpoint is pessimized,
//! calls go to the one pessimized longest ago, so a cluster that comes back
//! is found even between probes.
//!
//! Lock-free: the list is fixed when the client is built; the state of an
//! endpoint is atomics. The same task that probes also closes the pools'
//! idle connections.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::error::RetryClass;
use crate::pool::Pool;

/// One server.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// As given to the builder.
    pub(crate) url: String,
    pub(crate) pool: Arc<Pool>,
    pessimized: AtomicBool,
    /// Microseconds from the list's start of the last pessimization.
    pessimized_at: AtomicU64,
}

/// The servers of one client.
#[derive(Debug)]
pub(crate) struct Endpoints {
    list: Vec<Endpoint>,
    /// Round-robin position.
    next: AtomicUsize,
    start: Instant,
}

impl Endpoints {
    pub(crate) fn new(list: Vec<(String, Pool)>) -> Endpoints {
        Endpoints {
            list: list
                .into_iter()
                .map(|(url, pool)| Endpoint {
                    url,
                    pool: Arc::new(pool),
                    pessimized: AtomicBool::new(false),
                    pessimized_at: AtomicU64::new(0),
                })
                .collect(),
            next: AtomicUsize::new(0),
            start: Instant::now(),
        }
    }

    pub(crate) fn get(&self, i: usize) -> &Endpoint {
        &self.list[i]
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// The endpoint for the next attempt: the next healthy one in turn
    /// other than `avoid` (the one that just failed), else `avoid` if it is
    /// healthy, else the one pessimized longest ago.
    pub(crate) fn pick(&self, avoid: Option<usize>) -> usize {
        let n = self.list.len();
        let start = self.next.fetch_add(1, Relaxed);
        let healthy = (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| Some(i) != avoid && !self.list[i].pessimized.load(Relaxed));
        if let Some(i) = healthy {
            return i;
        }
        if let Some(i) = avoid
            && !self.list[i].pessimized.load(Relaxed)
        {
            return i;
        }
        (0..n)
            .min_by_key(|&i| self.list[i].pessimized_at.load(Relaxed))
            .expect("at least one endpoint")
    }

    /// Takes note of a failure of a call on endpoint `i`; true if the
    /// endpoint is now pessimized.
    pub(crate) fn failed(&self, i: usize, class: RetryClass, from_transport: bool) -> bool {
        let unreachable = match class {
            RetryClass::Fast => true,
            RetryClass::Conditional => from_transport,
            RetryClass::Slow | RetryClass::Final => false,
        };
        if unreachable {
            let e = &self.list[i];
            e.pessimized_at
                .store(self.start.elapsed().as_micros() as u64, Relaxed);
            if !e.pessimized.swap(true, Relaxed) {
                tracing::debug!(endpoint = %e.url, "endpoint pessimized");
                metrics::counter!("uuidmap_client_pessimized_total").increment(1);
            }
        }
        unreachable
    }

    /// Takes note of an answer from endpoint `i`.
    pub(crate) fn succeeded(&self, i: usize) {
        let e = &self.list[i];
        if e.pessimized.load(Relaxed) && e.pessimized.swap(false, Relaxed) {
            tracing::debug!(endpoint = %e.url, "endpoint answers again");
        }
    }

    /// Whether endpoint `i` is pessimized (for tests and `Client::health`).
    pub(crate) fn is_pessimized(&self, i: usize) -> bool {
        self.list[i].pessimized.load(Relaxed)
    }
}

/// Probes the pessimized endpoints every `interval` until the client is
/// dropped; an endpoint that answers SERVING within `timeout` is healthy
/// again. Also closes the connections idle for `idle_timeout`.
pub(crate) async fn probe(
    endpoints: Weak<Endpoints>,
    interval: Duration,
    timeout: Duration,
    idle_timeout: Duration,
) {
    loop {
        tokio::time::sleep(interval).await;
        let Some(endpoints) = endpoints.upgrade() else {
            return;
        };
        for i in 0..endpoints.len() {
            let e = endpoints.get(i);
            let closed = e.pool.close_idle(idle_timeout);
            if closed > 0 {
                tracing::debug!(endpoint = %e.url, closed, "idle connections closed");
            }
            if !endpoints.is_pessimized(i) {
                continue;
            }
            let (channel, _lease) = e.pool.lease();
            let mut health = HealthClient::new(channel);
            let mut request = tonic::Request::new(HealthCheckRequest {
                service: String::new(),
            });
            request.set_timeout(timeout);
            let serving = tokio::time::timeout(timeout, health.check(request))
                .await
                .ok()
                .and_then(Result::ok)
                .is_some_and(|r| r.into_inner().status() == ServingStatus::Serving);
            if serving {
                endpoints.succeeded(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(n: usize) -> Endpoints {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        Endpoints::new(
            (0..n)
                .map(|i| {
                    let url = format!("http://127.0.0.1:{}", 1 + i);
                    let endpoint = tonic::transport::Endpoint::from_shared(url.clone()).unwrap();
                    (url, Pool::new(endpoint, Default::default(), None))
                })
                .collect(),
        )
    }

    #[test]
    fn calls_go_round_the_healthy_endpoints() {
        let e = endpoints(3);
        let picks: Vec<usize> = (0..6).map(|_| e.pick(None)).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn a_pessimized_endpoint_is_skipped_until_it_answers_again() {
        let e = endpoints(3);
        assert!(e.failed(1, RetryClass::Fast, true));
        for _ in 0..10 {
            assert_ne!(e.pick(None), 1);
        }
        e.succeeded(1);
        assert!((0..3).map(|_| e.pick(None)).any(|i| i == 1));
    }

    #[test]
    fn overload_and_final_answers_do_not_pessimize() {
        let e = endpoints(2);
        assert!(!e.failed(0, RetryClass::Slow, false));
        assert!(!e.failed(0, RetryClass::Final, false));
        // A server's own DEADLINE_EXCEEDED says it is alive.
        assert!(!e.failed(0, RetryClass::Conditional, false));
        assert!(e.failed(0, RetryClass::Conditional, true));
    }

    #[test]
    fn the_retry_goes_elsewhere_and_with_all_down_to_the_oldest_failure() {
        let e = endpoints(2);
        assert_eq!(e.pick(Some(0)), 1);
        assert_eq!(e.pick(Some(0)), 1);
        e.failed(1, RetryClass::Fast, true);
        std::thread::sleep(Duration::from_millis(2));
        e.failed(0, RetryClass::Fast, true);
        assert_eq!(e.pick(None), 1, "pessimized longest ago");
        assert_eq!(e.pick(Some(0)), 1);
    }
}
