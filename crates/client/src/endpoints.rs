//! The servers a client calls, and which of them to call next.
//!
//! Each endpoint is one server address with a small pool of HTTP/2
//! connections ([`crate::pool`]; tonic channels, which connect when first
//! used and reconnect after a failure). A server given by DNS name is one
//! endpoint per address it resolves to ([`crate::endpoint_source`]). Calls
//! go round the healthy endpoints in turn.
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
//! Lock-free: the list is an `ArcSwap`, replaced whole when a name
//! resolves differently; the state of an endpoint is atomics. An endpoint
//! is known to callers by its `id`, which is never reused, so a failure
//! reported after the list changed cannot land on another endpoint. The
//! same task that probes also resolves names again and closes the pools'
//! idle connections.
//!
//! **Learned members.** A replica group names its leader by client URL
//! (in a refusal, `uuidmap-leader`, and in `UuidMapCluster/Status`). A
//! leader the client was not given becomes an endpoint of its own
//! ([`Endpoints::learn`]): when [`crate::ClientBuilder::connect`] asks the
//! group, and when a refusal names it. Never on a call that was not
//! refused, and at most [`MAX_LEARNED`] of them, so that a member that
//! names nonsense cannot grow the list without bound.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::endpoint_source::Source;
use crate::error::{ClientError, RetryClass};
use crate::latency::Latency;
use crate::pool::Pool;

/// One server address.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// Never reused within a client.
    pub(crate) id: usize,
    /// The URL it connects to: the builder's, or one address of its name.
    pub(crate) url: String,
    /// Which of the builder's servers it is (an index into the sources;
    /// [`LEARNED`]: none, a member the group named).
    source: usize,
    /// The address it was resolved to (`None`: as the builder gave it).
    addr: Option<SocketAddr>,
    pub(crate) pool: Arc<Pool>,
    pessimized: AtomicBool,
    /// Microseconds from the list's start of the last pessimization.
    pessimized_at: AtomicU64,
    /// Its recent answer times (reads), for hedging.
    pub(crate) latency: Latency,
}

/// Makes the pool of a new endpoint: the source, the address it was
/// resolved to (`None`: the source's URL as given), and a connection
/// already made to it, if any.
pub(crate) type MakePool = Box<
    dyn Fn(&Source, Option<SocketAddr>, Option<Channel>) -> Result<Pool, ClientError> + Send + Sync,
>;

/// The servers of one client.
pub(crate) struct Endpoints {
    list: ArcSwap<Vec<Arc<Endpoint>>>,
    /// The servers as the builder gave them.
    sources: Vec<Source>,
    /// When each source was last resolved (`None`: never; addresses are
    /// never resolved).
    resolved_at: Vec<std::sync::Mutex<Option<Instant>>>,
    make_pool: MakePool,
    /// The next endpoint id.
    next_id: AtomicUsize,
    /// Whether members the group names may be learned
    /// (`ClientBuilder::learn_members`).
    pub(crate) learn_members: bool,
    /// Held while an endpoint is learned (rare: never on the hot path), so
    /// that two refusals naming the same leader add it once.
    learning: std::sync::Mutex<()>,
    /// Round-robin position.
    next: AtomicUsize,
    /// The endpoint writes go to first ([`Endpoints::pick_for_write`]):
    /// the one that took the last write, or that a member named as its
    /// replica group's leader (`NO_LEADER`: none known).
    leader: AtomicUsize,
    start: Instant,
}

const NO_LEADER: usize = usize::MAX;

/// The `source` of an endpoint the group named ([`Endpoints::learn`]).
const LEARNED: usize = usize::MAX;

/// The most endpoints a client learns from its group.
pub(crate) const MAX_LEARNED: usize = 16;

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("list", &self.list.load())
            .finish_non_exhaustive()
    }
}

impl Endpoints {
    /// One endpoint per source, or per resolved address of a source that
    /// `resolved` has addresses for; `connected` are connections already
    /// made, by URL (by `ClientBuilder::connect`).
    pub(crate) fn new(
        sources: Vec<Source>,
        resolved: Vec<Option<Vec<SocketAddr>>>,
        make_pool: MakePool,
        mut connected: Vec<(String, Channel)>,
    ) -> Result<Endpoints, ClientError> {
        let endpoints = Endpoints {
            list: ArcSwap::from_pointee(Vec::new()),
            resolved_at: sources
                .iter()
                .map(|_| std::sync::Mutex::new(None))
                .collect(),
            sources,
            make_pool,
            next_id: AtomicUsize::new(0),
            learn_members: true,
            learning: std::sync::Mutex::new(()),
            next: AtomicUsize::new(0),
            leader: AtomicUsize::new(NO_LEADER),
            start: Instant::now(),
        };
        let mut list = Vec::new();
        for (source, addrs) in resolved.into_iter().enumerate() {
            let addrs: Vec<Option<SocketAddr>> = match addrs {
                Some(addrs) if !addrs.is_empty() => {
                    *endpoints.resolved_at[source].lock().expect("not poisoned") =
                        Some(Instant::now());
                    addrs.into_iter().map(Some).collect()
                }
                _ => vec![None],
            };
            for addr in addrs {
                let url = endpoints.url_of(source, addr);
                let ready = connected
                    .iter()
                    .position(|(u, _)| *u == url)
                    .map(|at| connected.swap_remove(at).1);
                list.push(endpoints.endpoint(source, addr, ready)?);
            }
        }
        endpoints.list.store(Arc::new(list));
        Ok(endpoints)
    }

    /// The endpoint of `url`: one the client has (the builder's URL or an
    /// address it resolved to), else a new one, learned from the group
    /// (`None`: not a server URL, or [`MAX_LEARNED`] learned already).
    pub(crate) fn learn(&self, url: &str) -> Option<Arc<Endpoint>> {
        let _one_at_a_time = self.learning.lock().expect("not poisoned");
        let url = url.trim_end_matches('/');
        let known = |list: &[Arc<Endpoint>]| {
            list.iter()
                .find(|e| {
                    e.url.trim_end_matches('/') == url
                        || self
                            .sources
                            .get(e.source)
                            .is_some_and(|s| s.url.trim_end_matches('/') == url)
                })
                .cloned()
        };
        let list = self.list.load_full();
        if let Some(e) = known(&list) {
            return Some(e);
        }
        if !self.learn_members {
            return None;
        }
        if list.iter().filter(|e| e.source == LEARNED).count() >= MAX_LEARNED {
            tracing::warn!(
                url,
                "not learning another member: {MAX_LEARNED} learned already"
            );
            return None;
        }
        let source = Source::parse(url)
            .inspect_err(|e| tracing::warn!(url, %e, "the group named a member by a bad URL"))
            .ok()?;
        let pool = (self.make_pool)(&source, None, None).ok()?;
        let e = Arc::new(Endpoint {
            id: self.next_id.fetch_add(1, Relaxed),
            url: url.to_string(),
            source: LEARNED,
            addr: None,
            pool: Arc::new(pool),
            pessimized: AtomicBool::new(false),
            pessimized_at: AtomicU64::new(0),
            latency: Latency::default(),
        });
        tracing::info!(url, "learned a member of the replica group");
        self.list.rcu(|now| {
            let mut grown = (**now).clone();
            grown.push(e.clone());
            grown
        });
        Some(e)
    }

    fn url_of(&self, source: usize, addr: Option<SocketAddr>) -> String {
        let s = &self.sources[source];
        addr.map_or_else(|| s.url.clone(), |a| s.address_url(a))
    }

    fn endpoint(
        &self,
        source: usize,
        addr: Option<SocketAddr>,
        ready: Option<Channel>,
    ) -> Result<Arc<Endpoint>, ClientError> {
        let pool = (self.make_pool)(&self.sources[source], addr, ready)?;
        Ok(Arc::new(Endpoint {
            id: self.next_id.fetch_add(1, Relaxed),
            url: self.url_of(source, addr),
            source,
            addr,
            pool: Arc::new(pool),
            pessimized: AtomicBool::new(false),
            pessimized_at: AtomicU64::new(0),
            latency: Latency::default(),
        }))
    }

    /// The endpoint whose id is `id`, if it is still in the list.
    pub(crate) fn by_id(&self, id: usize) -> Option<Arc<Endpoint>> {
        self.list.load().iter().find(|e| e.id == id).cloned()
    }

    /// The endpoint at position `i` of the current list (the builder's
    /// order, a name's addresses in a row), if there is one.
    pub(crate) fn at(&self, i: usize) -> Option<Arc<Endpoint>> {
        self.list.load().get(i).cloned()
    }

    /// The endpoints now.
    pub(crate) fn snapshot(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.list.load_full()
    }

    /// The endpoint for the next attempt: the next healthy one in turn
    /// other than `avoid` (the id of the one that just failed), else that
    /// one if it is healthy, else the one pessimized longest ago.
    pub(crate) fn pick(&self, avoid: Option<usize>) -> Arc<Endpoint> {
        let list = self.list.load();
        let n = list.len();
        let start = self.next.fetch_add(1, Relaxed);
        let healthy = (0..n)
            .map(|i| &list[(start + i) % n])
            .find(|e| Some(e.id) != avoid && !e.pessimized.load(Relaxed));
        if let Some(e) = healthy {
            return e.clone();
        }
        if let Some(e) = list
            .iter()
            .find(|e| Some(e.id) == avoid && !e.pessimized.load(Relaxed))
        {
            return e.clone();
        }
        list.iter()
            .min_by_key(|e| e.pessimized_at.load(Relaxed))
            .expect("at least one endpoint")
            .clone()
    }

    /// A healthy endpoint other than `id` for a hedge (the next one after
    /// it in the list), without moving the turn of [`Endpoints::pick`], so
    /// that hedges do not skew which member the next calls go to.
    pub(crate) fn pick_other(&self, id: usize) -> Option<Arc<Endpoint>> {
        let list = self.list.load();
        let n = list.len();
        let at = list.iter().position(|e| e.id == id).unwrap_or(0);
        (1..n)
            .map(|i| &list[(at + i) % n])
            .find(|e| e.id != id && !e.pessimized.load(Relaxed))
            .cloned()
    }

    /// The endpoint for the next attempt of a write: the leader, when one
    /// is known, healthy and not `avoid`; else as [`Endpoints::pick`].
    pub(crate) fn pick_for_write(&self, avoid: Option<usize>) -> Arc<Endpoint> {
        let leader = self.leader.load(Relaxed);
        if leader != NO_LEADER && Some(leader) != avoid {
            let list = self.list.load();
            if let Some(e) = list
                .iter()
                .find(|e| e.id == leader && !e.pessimized.load(Relaxed))
            {
                return e.clone();
            }
        }
        self.pick(avoid)
    }

    /// The URL of the endpoint writes go to first (`None`: none known).
    pub(crate) fn leader_url(&self) -> Option<String> {
        let leader = self.leader.load(Relaxed);
        let list = self.list.load();
        list.iter().find(|e| e.id == leader).map(|e| e.url.clone())
    }

    /// `e` took a write: writes go there first from now on.
    pub(crate) fn took_write(&self, e: &Endpoint) {
        if self.leader.load(Relaxed) != e.id {
            self.leader.store(e.id, Relaxed);
        }
    }

    /// A member named `url` as its group's leader: writes go to the
    /// endpoint of that URL first, learned if this client has none
    /// ([`Endpoints::learn`]). True if it has one now.
    pub(crate) fn leader_named(&self, url: &str) -> bool {
        match self.learn(url) {
            Some(e) => {
                if self.leader.swap(e.id, Relaxed) != e.id {
                    tracing::debug!(leader = %e.url, "writes go to the named leader");
                }
                true
            }
            None => false,
        }
    }

    /// Takes note of a failure of a call on `e`; true if it is now
    /// pessimized.
    pub(crate) fn failed(&self, e: &Endpoint, class: RetryClass, from_transport: bool) -> bool {
        let unreachable = match class {
            RetryClass::Fast => true,
            RetryClass::Conditional => from_transport,
            RetryClass::Slow | RetryClass::Final => false,
        };
        if unreachable {
            e.pessimized_at
                .store(self.start.elapsed().as_micros() as u64, Relaxed);
            if !e.pessimized.swap(true, Relaxed) {
                tracing::debug!(endpoint = %e.url, "endpoint pessimized");
                metrics::counter!("uuidmap_client_pessimized_total").increment(1);
            }
        }
        unreachable
    }

    /// `e` did not answer an attempt within its timeout: a member that
    /// accepts connections and never answers costs one attempt timeout,
    /// not every call's deadline, so it is pessimized as an unreachable
    /// one is (and probed until it answers again).
    pub(crate) fn timed_out(&self, e: &Endpoint) {
        self.failed(e, RetryClass::Fast, true);
    }

    /// Whether `e` is pessimized now.
    pub(crate) fn is_pessimized(&self, e: &Endpoint) -> bool {
        e.pessimized.load(Relaxed)
    }

    /// Takes note of an answer from `e`.
    pub(crate) fn succeeded(&self, e: &Endpoint) {
        if e.pessimized.load(Relaxed) && e.pessimized.swap(false, Relaxed) {
            tracing::debug!(endpoint = %e.url, "endpoint answers again");
        }
    }

    /// Replaces the endpoints of `source` with one per address of `addrs`,
    /// keeping the endpoint (connections, health) of each address that
    /// stays. Nothing changes when `addrs` is empty.
    pub(crate) fn refresh(&self, source: usize, addrs: &[SocketAddr]) {
        *self.resolved_at[source].lock().expect("not poisoned") = Some(Instant::now());
        if addrs.is_empty() {
            return;
        }
        let old = self.list.load_full();
        let mut list = Vec::with_capacity(old.len() + addrs.len());
        let mut changed = false;
        for e in old.iter() {
            if e.source != source || e.addr.is_some_and(|a| addrs.contains(&a)) {
                list.push(e.clone());
            } else {
                tracing::debug!(endpoint = %e.url, "endpoint gone from its name's addresses");
                changed = true;
            }
        }
        // New addresses go where the source's endpoints are, in order.
        let at = list
            .iter()
            .rposition(|e| e.source == source)
            .map(|p| p + 1)
            .or_else(|| {
                old.iter()
                    .position(|e| e.source == source)
                    .map(|p| p.min(list.len()))
            })
            .unwrap_or(list.len());
        let mut added = Vec::new();
        for &addr in addrs {
            if list
                .iter()
                .any(|e| e.source == source && e.addr == Some(addr))
            {
                continue;
            }
            match self.endpoint(source, Some(addr), None) {
                Ok(e) => {
                    tracing::debug!(endpoint = %e.url, "new address of a name");
                    added.push(e);
                }
                Err(error) => tracing::debug!(%error, "cannot make an endpoint"),
            }
        }
        changed |= !added.is_empty();
        if !changed {
            return;
        }
        list.splice(at..at, added);
        if list.is_empty() {
            // Never leave no endpoint: keep the old ones (unreachable).
            return;
        }
        self.list.store(Arc::new(list));
    }

    /// The names to resolve now: never resolved yet, resolved longer ago
    /// than `every`, or with every address pessimized.
    fn due(&self, every: Duration) -> Vec<usize> {
        let list = self.list.load();
        (0..self.sources.len())
            .filter(|&s| self.sources[s].is_name())
            .filter(|&s| {
                let last = *self.resolved_at[s].lock().expect("not poisoned");
                let stale = last.is_none_or(|t| t.elapsed() >= every);
                let mut mine = list.iter().filter(|e| e.source == s).peekable();
                let all_down = mine.peek().is_some() && mine.all(|e| e.pessimized.load(Relaxed));
                stale || all_down
            })
            .collect()
    }
}

/// How often the prober runs, and what for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProbeSettings {
    /// Probe the pessimized endpoints this often.
    pub(crate) interval: Duration,
    /// The health check's timeout.
    pub(crate) timeout: Duration,
    /// Close connections idle this long.
    pub(crate) idle_timeout: Duration,
    /// Resolve names again this often.
    pub(crate) resolve_every: Duration,
}

/// Probes the pessimized endpoints every `interval` until the client is
/// dropped; an endpoint that answers SERVING within `timeout` is healthy
/// again. Also resolves names (at once, then as [`Endpoints::due`] says)
/// and closes the connections idle for `idle_timeout`.
pub(crate) async fn probe(endpoints: Weak<Endpoints>, settings: ProbeSettings) {
    let mut first = true;
    loop {
        if !first {
            tokio::time::sleep(settings.interval).await;
        }
        first = false;
        let Some(endpoints) = endpoints.upgrade() else {
            return;
        };
        for source in endpoints.due(settings.resolve_every) {
            let s = &endpoints.sources[source];
            match tokio::time::timeout(settings.timeout, s.resolve()).await {
                Ok(Ok(addrs)) => endpoints.refresh(source, &addrs),
                Ok(Err(error)) => {
                    tracing::debug!(server = %s.url, %error, "resolving the name failed");
                    endpoints.refresh(source, &[]);
                }
                Err(_) => {
                    tracing::debug!(server = %s.url, "resolving the name timed out");
                    endpoints.refresh(source, &[]);
                }
            }
        }
        for e in endpoints.snapshot().iter() {
            let closed = e.pool.close_idle(settings.idle_timeout);
            if closed > 0 {
                tracing::debug!(endpoint = %e.url, closed, "idle connections closed");
            }
            if !e.pessimized.load(Relaxed) {
                continue;
            }
            let (channel, _lease) = e.pool.lease();
            let mut health = HealthClient::new(channel);
            let mut request = tonic::Request::new(HealthCheckRequest {
                service: String::new(),
            });
            request.set_timeout(settings.timeout);
            let serving = tokio::time::timeout(settings.timeout, health.check(request))
                .await
                .ok()
                .and_then(Result::ok)
                .is_some_and(|r| r.into_inner().status() == ServingStatus::Serving);
            if serving {
                endpoints.succeeded(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make_pool() -> MakePool {
        Box::new(|source: &Source, addr: Option<SocketAddr>, _| {
            let url = addr.map_or_else(|| source.url.clone(), |a| source.address_url(a));
            let endpoint = tonic::transport::Endpoint::from_shared(url).unwrap();
            Ok(Pool::new(endpoint, Default::default(), None))
        })
    }

    fn with(urls: &[&str], resolved: Vec<Option<Vec<SocketAddr>>>) -> Endpoints {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let sources = urls.iter().map(|u| Source::parse(u).unwrap()).collect();
        Endpoints::new(sources, resolved, make_pool(), Vec::new()).unwrap()
    }

    fn endpoints(n: usize) -> Endpoints {
        let urls: Vec<String> = (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 1 + i))
            .collect();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        with(&urls, vec![None; n])
    }

    fn ids(e: &Endpoints) -> Vec<usize> {
        e.snapshot().iter().map(|e| e.id).collect()
    }

    fn urls(e: &Endpoints) -> Vec<String> {
        e.snapshot().iter().map(|e| e.url.clone()).collect()
    }

    #[test]
    fn calls_go_round_the_healthy_endpoints() {
        let e = endpoints(3);
        let picks: Vec<usize> = (0..6).map(|_| e.pick(None).id).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn a_pessimized_endpoint_is_skipped_until_it_answers_again() {
        let e = endpoints(3);
        let one = e.at(1).unwrap();
        assert!(e.failed(&one, RetryClass::Fast, true));
        for _ in 0..10 {
            assert_ne!(e.pick(None).id, 1);
        }
        e.succeeded(&one);
        assert!((0..3).map(|_| e.pick(None).id).any(|i| i == 1));
    }

    #[test]
    fn overload_and_final_answers_do_not_pessimize() {
        let e = endpoints(2);
        let zero = e.at(0).unwrap();
        assert!(!e.failed(&zero, RetryClass::Slow, false));
        assert!(!e.failed(&zero, RetryClass::Final, false));
        // A server's own DEADLINE_EXCEEDED says it is alive.
        assert!(!e.failed(&zero, RetryClass::Conditional, false));
        assert!(e.failed(&zero, RetryClass::Conditional, true));
    }

    #[test]
    fn the_retry_goes_elsewhere_and_with_all_down_to_the_oldest_failure() {
        let e = endpoints(2);
        let (zero, one) = (e.at(0).unwrap(), e.at(1).unwrap());
        assert_eq!(e.pick(Some(0)).id, 1);
        assert_eq!(e.pick(Some(0)).id, 1);
        e.failed(&one, RetryClass::Fast, true);
        std::thread::sleep(Duration::from_millis(2));
        e.failed(&zero, RetryClass::Fast, true);
        assert_eq!(e.pick(None).id, 1, "pessimized longest ago");
        assert_eq!(e.pick(Some(0)).id, 1);
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_name_is_one_endpoint_per_address() {
        let e = with(
            &["http://10.0.0.9:7", "http://replicas.internal:7878"],
            vec![
                None,
                Some(vec![addr("10.0.0.1:7878"), addr("10.0.0.2:7878")]),
            ],
        );
        assert_eq!(
            urls(&e),
            [
                "http://10.0.0.9:7",
                "http://10.0.0.1:7878",
                "http://10.0.0.2:7878"
            ]
        );
        // Not resolved (yet): the name as given, one endpoint.
        let e = with(&["http://replicas.internal:7878"], vec![None]);
        assert_eq!(urls(&e), ["http://replicas.internal:7878"]);
        e.refresh(0, &[addr("10.0.0.1:7878")]);
        assert_eq!(urls(&e), ["http://10.0.0.1:7878"]);
    }

    #[test]
    fn resolving_again_keeps_the_endpoints_of_addresses_that_stay() {
        let e = with(
            &["http://replicas.internal:7878", "http://10.0.0.9:7"],
            vec![
                Some(vec![addr("10.0.0.1:7878"), addr("10.0.0.2:7878")]),
                None,
            ],
        );
        let before = ids(&e);
        let kept = e.at(1).unwrap();
        e.failed(&kept, RetryClass::Fast, true);
        // 10.0.0.1 gone, 10.0.0.2 stays (pessimized, as it was), .3 new.
        e.refresh(0, &[addr("10.0.0.2:7878"), addr("10.0.0.3:7878")]);
        assert_eq!(
            urls(&e),
            [
                "http://10.0.0.2:7878",
                "http://10.0.0.3:7878",
                "http://10.0.0.9:7"
            ]
        );
        let after = ids(&e);
        assert_eq!(
            after[0], before[1],
            "the address that stayed kept its endpoint"
        );
        assert!(e.at(0).unwrap().pessimized.load(Relaxed));
        assert!(!after.contains(&before[0]));
        assert!(after[1] > before[2], "a new id for the new address");
        // A failed or empty resolution changes nothing.
        e.refresh(0, &[]);
        assert_eq!(ids(&e), after);
        // A failure reported by id after the list changed is harmless:
        // the gone endpoint's id is never picked again.
        for _ in 0..6 {
            assert_ne!(e.pick(None).id, before[0]);
        }
    }

    #[test]
    fn names_are_resolved_again_when_stale_or_all_down() {
        let e = with(
            &["http://replicas.internal:7878", "http://10.0.0.9:7"],
            vec![Some(vec![addr("10.0.0.1:7878")]), None],
        );
        assert!(e.due(Duration::from_secs(60)).is_empty(), "fresh, healthy");
        assert_eq!(e.due(Duration::ZERO), [0], "stale; an address is never due");
        e.failed(&e.at(0).unwrap(), RetryClass::Fast, true);
        assert_eq!(e.due(Duration::from_secs(60)), [0], "every address down");
    }
}
