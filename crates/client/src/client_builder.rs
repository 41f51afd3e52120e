//! [`ClientBuilder`]: the servers, security, deadlines and retry settings
//! of a [`Client`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::token::{ProviderConfig, Token};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use uuidmap_proto::error_chain::error_chain;

use crate::attempt_policy::ReadAttempts;
use crate::budget::{RetryBudget, RetryBudgetConfig};
use crate::client::{Client, Shared};
use crate::endpoint_source::Source;
use crate::endpoints::{self, Endpoints, MakePool, ProbeSettings};
use crate::error::{ClientError, connect_error};
use crate::pool::{Pool, PoolConfig};
use crate::retry::RetryPolicy;

/// Builds a [`Client`]; start from [`Client::builder`].
#[derive(Clone, Debug)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    token: Option<String>,
    token_provider: Option<ProviderConfig>,
    tls_ca: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_system_roots: bool,
    timeout: Duration,
    connect_timeout: Duration,
    /// Whether members the group names are learned (on by default).
    learn_members: bool,
    retry: RetryPolicy,
    budget: RetryBudgetConfig,
    read_your_writes: bool,
    read_attempts: ReadAttempts,
    consistency: crate::ReadConsistency,
    health_interval: Duration,
    resolve_interval: Duration,
    batch_lanes: usize,
    max_batch_keys: usize,
    max_in_flight: usize,
    max_waiting: usize,
    pool: PoolConfig,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            endpoints: Vec::new(),
            token: None,
            token_provider: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            tls_system_roots: false,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            learn_members: true,
            retry: RetryPolicy::default(),
            budget: RetryBudgetConfig::default(),
            read_your_writes: true,
            read_attempts: ReadAttempts::default(),
            consistency: crate::ReadConsistency::Linearizable,
            health_interval: Duration::from_secs(1),
            resolve_interval: Duration::from_secs(30),
            batch_lanes: 4,
            max_batch_keys: 4096,
            max_in_flight: 1024,
            max_waiting: 4096,
            pool: PoolConfig::default(),
        }
    }
}

impl ClientBuilder {
    /// The servers to call (`http://host:port` or `https://host:port`).
    /// A host may be a DNS name: it is one endpoint per address it
    /// resolves to (a name in front of several replicas spreads the calls
    /// and loses only a dead replica's), resolved again every
    /// [`resolve_interval`](ClientBuilder::resolve_interval) and when all
    /// its addresses fail. Replaces any given before.
    pub fn endpoints<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.endpoints = urls.into_iter().map(Into::into).collect();
        self
    }

    /// Whether `https://` servers may be checked against the system's
    /// trusted roots (off by default: a metadata master's certificate is
    /// usually signed by a private CA, given with
    /// [`ClientBuilder::tls_ca`]). With both, either vouches. The roots
    /// are read from the platform's store when the client is built.
    pub fn tls_system_roots(mut self, on: bool) -> Self {
        self.tls_system_roots = on;
        self
    }

    /// A bearer token sent with every call.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// A token that can change: `provider` is asked when the client is
    /// built (an error then fails the build), again once the token is
    /// `refresh` old, and at once when a server answers `UNAUTHENTICATED`
    /// (the call is then sent once more with the new token, if it
    /// changed). Replaces [`ClientBuilder::token`].
    pub fn token_provider(
        mut self,
        provider: impl crate::TokenProvider,
        refresh: Duration,
    ) -> Self {
        self.token_provider = Some(ProviderConfig {
            provider: Arc::new(provider),
            refresh,
        });
        self
    }

    /// The PEM of the CA that signed the servers' certificates (https).
    pub fn tls_ca(mut self, pem: impl Into<PathBuf>) -> Self {
        self.tls_ca = Some(pem.into());
        self
    }

    /// A client certificate and its key (PEM), for servers that require
    /// one (mTLS).
    pub fn tls_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls_cert = Some(cert.into());
        self.tls_key = Some(key.into());
        self
    }

    /// A client certificate or key given alone (an error at build, named
    /// as such): what `ClientOptions` carries.
    pub(crate) fn tls_identity_parts(
        mut self,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Self {
        self.tls_cert = cert;
        self.tls_key = key;
        self
    }

    /// The default deadline of a call, retries included (10 s). Sent to the
    /// server as `grpc-timeout`; override per call with
    /// [`Client::with_timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether the client learns members of a replica group it was not
    /// given (its leader, named by the group: on by default). Off: it
    /// talks only to the servers given, as a tool pinned to one member
    /// must.
    pub fn learn_members(mut self, on: bool) -> Self {
        self.learn_members = on;
        self
    }

    /// The bound of one connection attempt (5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How failed calls are retried ([`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The retry budget ([`RetryBudgetConfig::default`]).
    pub fn retry_budget(mut self, budget: RetryBudgetConfig) -> Self {
        self.budget = budget;
        self
    }

    /// Whether reads are monotonic and wait for this client's own writes
    /// (on by default): each read carries the highest LSN the client has
    /// seen ([`Client::seen_lsn`](crate::Client::seen_lsn): its writes,
    /// and the `applied_lsn` of every answer) as its `min_lsn`, so that a
    /// read answered by a member further behind waits for it rather than
    /// going back in time.
    pub fn read_your_writes(mut self, on: bool) -> Self {
        self.read_your_writes = on;
        self
    }

    /// The most one attempt of a read (`get`, `lookup`, `get_unary`,
    /// `get_many`) may take, whatever the call's deadline (still capped by
    /// it). An endpoint that lets an attempt time out is pessimized and the
    /// read tried on another. By default an attempt may take a quarter of
    /// the call's deadline ([`ClientBuilder::attempt_timeout_fraction`]).
    /// Writes are not cut short: a write's attempt that timed out has an
    /// unknown outcome.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.read_attempts.fixed = Some(timeout);
        self
    }

    /// The part of a call's deadline one attempt of a read may take (0.25;
    /// 1.0: the whole deadline, so a silent member costs it all). Replaces
    /// a fixed [`ClientBuilder::attempt_timeout`]. Values outside (0, 1]
    /// are clamped into it.
    pub fn attempt_timeout_fraction(mut self, fraction: f64) -> Self {
        self.read_attempts.fixed = None;
        self.read_attempts.fraction = if fraction.is_nan() {
            1.0
        } else {
            fraction.clamp(0.01, 1.0)
        };
        self
    }

    /// Whether unary reads (`get_unary`, `get_many`) are hedged (on by
    /// default): one that has waited longer than 95 % of its endpoint's
    /// recent answers goes to a second member too, the first answer wins
    /// and the other is cancelled. Each hedge takes a token from the retry
    /// budget; with none left, no hedge is sent.
    pub fn hedging(mut self, on: bool) -> Self {
        self.read_attempts.hedging = on;
        self
    }

    /// The consistency of this client's reads (Get, BatchGet, Lookup,
    /// Scan) unless a call asks for another
    /// ([`Client::with_consistency`]): linearizable by default.
    pub fn consistency(mut self, consistency: crate::ReadConsistency) -> Self {
        self.consistency = consistency;
        self
    }

    /// How often pessimized endpoints are probed (1 s).
    pub fn health_interval(mut self, interval: Duration) -> Self {
        self.health_interval = interval;
        self
    }

    /// How often a server given by DNS name is resolved again (30 s; also
    /// at once, at the next probe, when every address of it fails).
    pub fn resolve_interval(mut self, interval: Duration) -> Self {
        self.resolve_interval = interval;
        self
    }

    /// Auto-batching of [`Client::get`]: how many batches may be in flight
    /// at once (4), and the most keys in one (4096). Keep `max_keys` within
    /// the server's `max_batch_keys` (65536 unless set): a batch over it is
    /// refused whole, for every caller in it.
    pub fn batching(mut self, lanes: usize, max_keys: usize) -> Self {
        self.batch_lanes = lanes.max(1);
        self.max_batch_keys = max_keys.max(1);
        self
    }

    /// The most attempts in flight at once (1024), and the most callers
    /// that wait for one (4096). A caller over the limit waits, newest
    /// first (a LIFO queue: under overload the callers that have waited
    /// longest are the likeliest to have given up), until its deadline;
    /// one over both limits fails at once with [`ClientError::Overloaded`].
    pub fn max_in_flight(mut self, calls: usize, waiting: usize) -> Self {
        self.max_in_flight = calls.max(1);
        self.max_waiting = waiting;
        self
    }

    /// The connections to each endpoint ([`PoolConfig::default`]: 2 of 100
    /// streams, idle ones closed after 60 s).
    pub fn connections(mut self, pool: PoolConfig) -> Self {
        self.pool = pool;
        self
    }

    /// The client. Connections are made when first needed, so a server
    /// that is down is not an error here; use [`ClientBuilder::connect`] to
    /// find out at once. Must be called within a tokio runtime (the health
    /// prober is a task).
    pub fn build(self) -> Result<Client, ClientError> {
        let sources = self.sources()?;
        let unresolved = vec![None; sources.len()];
        self.make(sources, unresolved, Vec::new())
    }

    /// A blocking client ([`crate::blocking::Client`]) with a runtime of
    /// its own; call it outside any async runtime.
    pub fn build_blocking(self) -> Result<crate::blocking::Client, ClientError> {
        crate::blocking::Client::build(self)
    }

    /// The client, once a connection to at least one endpoint is made: an
    /// error names the first endpoint's failure when none can be reached.
    /// A server given by DNS name is resolved here first, and each of its
    /// addresses tried.
    pub async fn connect(self) -> Result<Client, ClientError> {
        let sources = self.sources()?;
        let mut first_error = None;
        let mut connected = Vec::new();
        let mut resolved = Vec::with_capacity(sources.len());
        for source in &sources {
            // A name that does not resolve is tried as given: the
            // connection's own error then says why.
            let addrs = if source.is_name() {
                tokio::time::timeout(self.connect_timeout, source.resolve())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .filter(|addrs| !addrs.is_empty())
            } else {
                None
            };
            let urls: Vec<(Option<SocketAddr>, String)> = match &addrs {
                Some(addrs) => addrs
                    .iter()
                    .map(|&a| (Some(a), source.address_url(a)))
                    .collect(),
                None => vec![(None, source.url.clone())],
            };
            for (addr, url) in urls {
                match self.endpoint(source, addr)?.connect().await {
                    Ok(channel) => connected.push((url, channel)),
                    Err(e) => {
                        first_error.get_or_insert_with(|| connect_error(&url, &e));
                    }
                }
            }
            resolved.push(addrs);
        }
        if connected.is_empty() {
            return Err(first_error.unwrap_or(ClientError::NoEndpoints));
        }
        let timeout = self.connect_timeout;
        let client = self.make(sources, resolved, connected)?;
        // A replica group's leader may be a member it was not given.
        client.learn_leader(timeout).await;
        Ok(client)
    }

    /// The servers as given, parsed.
    fn sources(&self) -> Result<Vec<Source>, ClientError> {
        if self.endpoints.is_empty() {
            return Err(ClientError::NoEndpoints);
        }
        self.endpoints.iter().map(|u| Source::parse(u)).collect()
    }

    fn make(
        self,
        sources: Vec<Source>,
        resolved: Vec<Option<Vec<SocketAddr>>>,
        connected: Vec<(String, Channel)>,
    ) -> Result<Client, ClientError> {
        let token = Arc::new(match &self.token_provider {
            Some(p) => Token::provided(p.provider.clone(), p.refresh)?,
            None => Token::fixed(self.token.as_deref())?,
        });
        let builder = self.clone();
        let make_pool: MakePool = Box::new(move |source, addr, ready| {
            Ok(Pool::new(
                builder.endpoint(source, addr)?,
                builder.pool,
                ready,
            ))
        });
        let mut endpoints = Endpoints::new(sources, resolved, make_pool, connected)?;
        endpoints.learn_members = self.learn_members;
        let endpoints = Arc::new(endpoints);
        tokio::spawn(endpoints::probe(
            Arc::downgrade(&endpoints),
            ProbeSettings {
                interval: self.health_interval,
                timeout: self.connect_timeout,
                idle_timeout: self.pool.idle_timeout,
                resolve_every: self.resolve_interval,
            },
        ));
        let client = Client::new(Shared::new(
            endpoints,
            token,
            self.timeout,
            self.retry,
            RetryBudget::new(self.budget),
            self.read_your_writes,
            self.read_attempts,
            self.batch_lanes,
            self.max_batch_keys,
            uuidmap_index::sync::LifoSemaphore::new(self.max_in_flight, self.max_waiting),
        ));
        Ok(client.with_consistency(self.consistency))
    }

    /// The tonic endpoint for `source`, or for one address of its name,
    /// with the product's windows and this builder's TLS. An address of a
    /// name still names the server by its name: as the `:authority`, and
    /// to TLS as the name the certificate must carry.
    fn endpoint(&self, source: &Source, addr: Option<SocketAddr>) -> Result<Endpoint, ClientError> {
        let url = match addr {
            Some(a) => source.address_url(a),
            None => source.url.clone(),
        };
        let url = url.as_str();
        let endpoint =
            Endpoint::from_shared(url.to_string()).map_err(|e| ClientError::BadServer {
                server: url.to_string(),
                why: e.to_string(),
            })?;
        let endpoint = match addr {
            Some(_) => {
                let origin = source.url.parse().map_err(|_| ClientError::BadServer {
                    server: source.url.clone(),
                    why: "not a URL".to_string(),
                })?;
                endpoint.origin(origin)
            }
            None => endpoint,
        };
        let https = endpoint.uri().scheme_str() == Some("https");
        let mut endpoint = endpoint
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            // Finds a dead connection under a stream that waits (a watch).
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true)
            .initial_connection_window_size(16 << 20)
            .initial_stream_window_size(4 << 20);
        if let Some(mut tls) = self.tls_config(url, https)? {
            if addr.is_some() {
                tls = tls.domain_name(source.host());
            }
            endpoint = endpoint.tls_config(tls).map_err(|e| ClientError::Connect {
                server: url.to_string(),
                why: error_chain(&e),
            })?;
        }
        Ok(endpoint)
    }

    /// The TLS configuration the options ask for, checked against the
    /// scheme.
    fn tls_config(&self, url: &str, https: bool) -> Result<Option<ClientTlsConfig>, ClientError> {
        let any_tls_option =
            self.tls_ca.is_some() || self.tls_cert.is_some() || self.tls_key.is_some();
        if !https {
            if any_tls_option {
                return Err(ClientError::TlsWithoutHttps {
                    server: url.to_string(),
                });
            }
            return Ok(None);
        }
        let mut tls = ClientTlsConfig::new();
        if self.tls_system_roots {
            tls = tls.with_native_roots();
        }
        match &self.tls_ca {
            Some(ca) => {
                tls = tls.ca_certificate(Certificate::from_pem(read_pem(ClientError::TLS_CA, ca)?));
            }
            None if self.tls_system_roots => {}
            None => {
                return Err(ClientError::NoTlsCa {
                    server: url.to_string(),
                });
            }
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                tls = tls.identity(Identity::from_pem(
                    read_pem(ClientError::CLIENT_CERT, cert)?,
                    read_pem(ClientError::CLIENT_KEY, key)?,
                ));
            }
            (None, None) => {}
            _ => return Err(ClientError::HalfClientIdentity),
        }
        Ok(Some(tls))
    }
}

fn read_pem(what: &'static str, path: &std::path::Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|source| ClientError::ReadFile {
        what,
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_options_must_fit_the_scheme() {
        let b = ClientBuilder::default().tls_ca("ca.pem");
        let e = b
            .tls_config("http://127.0.0.1:1", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not https://"), "{e}");
        let b = ClientBuilder::default();
        let e = b
            .tls_config("https://127.0.0.1:1", true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no CA certificate") && !e.contains("--"), "{e}");
        let b = ClientBuilder::default().tls_ca("ca.pem");
        let b = ClientBuilder {
            tls_cert: Some("c.pem".into()),
            ..b
        };
        let e = b.tls_config("https://127.0.0.1:1", true);
        // The CA is read first; it does not exist here.
        assert!(e.unwrap_err().to_string().contains("ca.pem"));
        // The system's roots stand in for a CA file.
        let b = ClientBuilder::default().tls_system_roots(true);
        assert!(b.tls_config("https://127.0.0.1:1", true).unwrap().is_some());
    }

    #[tokio::test]
    async fn a_client_needs_an_endpoint_and_a_printable_token() {
        let e = ClientBuilder::default().build().unwrap_err();
        assert!(matches!(e, ClientError::NoEndpoints), "{e}");
        let e = ClientBuilder::default()
            .endpoints(["http://127.0.0.1:1"])
            .token("line\nbreak")
            .build()
            .unwrap_err();
        assert!(matches!(e, ClientError::BadToken), "{e}");
        let e = ClientBuilder::default()
            .endpoints(["not a url"])
            .build()
            .unwrap_err();
        assert!(matches!(e, ClientError::BadServer { .. }), "{e}");
    }
}
