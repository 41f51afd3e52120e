//! A real server in the test's own runtime, on an ephemeral loopback port,
//! stopped gracefully and asked for its result.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::Channel;
use uuidmap_engine::store::Io;
use uuidmap_engine::writer::FsyncPolicy;
use uuidmap_proto::v1::uuid_map_client::UuidMapClient;
use uuidmap_server::{ServeConfig, ServeError, ServerParts};

/// A running server: where it listens, and how to stop it.
pub struct TestServer {
    /// Where gRPC answers.
    pub addr: SocketAddr,
    /// Where `GET /metrics` answers, when the config turned metrics on.
    pub metrics_addr: Option<SocketAddr>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

/// [`config`]'s `max_batch_keys`: small, so that tests can cross it.
pub const MAX_BATCH_KEYS: usize = 100;
/// [`config`]'s `max_write_ops`.
pub const MAX_WRITE_OPS: usize = 10;
/// [`config`]'s `max_filter_values`.
pub const MAX_FILTER_VALUES: usize = 64;

/// The tests' configuration over `dir`: no fsync (the tests that need it
/// set it), small limits that a test can cross, and a 300 ms wait cap.
pub fn config(dir: &Path) -> ServeConfig {
    let mut c = ServeConfig::new(dir);
    c.fsync = FsyncPolicy::Never;
    c.limits.max_batch_keys = MAX_BATCH_KEYS;
    c.limits.max_write_ops = MAX_WRITE_OPS;
    c.limits.max_wait = Duration::from_millis(300);
    c.limits.max_filter_values = MAX_FILTER_VALUES;
    c
}

impl TestServer {
    /// A server over `dir` with [`config`].
    pub async fn start(dir: &Path) -> TestServer {
        TestServer::start_with(config(dir)).await
    }

    /// A server with its own configuration (its `listen` is ignored; its
    /// `metrics_listen`, e.g. `127.0.0.1:0`, is bound here).
    pub async fn start_with(config: ServeConfig) -> TestServer {
        TestServer::start_on(config, None).await
    }

    /// [`TestServer::start_with`], with the data directory on `io` (a
    /// simulated disk) when given.
    pub async fn start_on(config: ServeConfig, io: Option<Arc<dyn Io>>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        TestServer::start_bound(config, listener, io).await
    }

    /// [`TestServer::start_on`], serving on `listener` (bound by the
    /// caller, so that its address can be in the configuration: a
    /// partitioned server registers it).
    pub async fn start_bound(
        config: ServeConfig,
        listener: TcpListener,
        io: Option<Arc<dyn Io>>,
    ) -> TestServer {
        let addr = listener.local_addr().unwrap();
        let metrics = match config.metrics_listen {
            Some(a) => Some(TcpListener::bind(a).await.unwrap()),
            None => None,
        };
        let metrics_addr = metrics.as_ref().map(|m| m.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let mut parts = ServerParts::new(listener, config).metrics(metrics);
        if let Some(io) = io {
            parts = parts.io(io);
        }
        let task = tokio::spawn(parts.serve(async {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            metrics_addr,
            stop,
            task,
        }
    }

    /// A member of a replica group (`config.cluster` set), serving clients
    /// on `listener` and Raft on `raft` (both bound by the caller, so that
    /// the group's addresses are known before it starts).
    pub async fn start_member(
        config: ServeConfig,
        listener: TcpListener,
        raft: TcpListener,
    ) -> TestServer {
        TestServer::start_member_on(config, listener, raft, None).await
    }

    /// [`TestServer::start_member`], with the data directory on `io` (a
    /// simulated disk) when given.
    pub async fn start_member_on(
        config: ServeConfig,
        listener: TcpListener,
        raft: TcpListener,
        io: Option<Arc<dyn Io>>,
    ) -> TestServer {
        let addr = listener.local_addr().unwrap();
        let metrics = match config.metrics_listen {
            Some(a) => Some(TcpListener::bind(a).await.unwrap()),
            None => None,
        };
        let metrics_addr = metrics.as_ref().map(|m| m.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let mut parts = ServerParts::new(listener, config)
            .raft(raft)
            .metrics(metrics);
        if let Some(io) = io {
            parts = parts.io(io);
        }
        let task = tokio::spawn(parts.serve(async {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            metrics_addr,
            stop,
            task,
        }
    }

    /// Whether the server has stopped (with an error, or after a stop).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// A new HTTP/2 connection to the server.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// The generated client over a new connection.
    pub async fn client(&self) -> UuidMapClient<Channel> {
        UuidMapClient::new(self.channel().await)
    }

    /// Graceful stop; the server's result.
    pub async fn stop(self) -> Result<(), ServeError> {
        let _ = self.stop.send(());
        self.task.await.unwrap()
    }
}
