//! The test server and small helpers shared by `tests/server*.rs`.
// Each test binary uses a different part of these helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use prost::bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::Channel;
use uuid::Uuid;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap::server::{ServeConfig, ServeError, serve_on};
use uuidmap::writer::FsyncPolicy;

pub struct TestServer {
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

pub const MAX_BATCH_KEYS: usize = 100;
pub const MAX_WRITE_OPS: usize = 10;
pub const MAX_FILTER_VALUES: usize = 64;

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
    pub async fn start(dir: &Path) -> TestServer {
        TestServer::start_with(config(dir)).await
    }

    /// A server with its own configuration (its `listen` is ignored).
    pub async fn start_with(config: ServeConfig) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_on(listener, config, async {
            let _ = stopped.await;
        }));
        TestServer { addr, stop, task }
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    pub async fn client(&self) -> UuidMapClient<Channel> {
        UuidMapClient::new(self.channel().await)
    }

    /// Graceful stop; the server's result.
    pub async fn stop(self) -> Result<(), ServeError> {
        let _ = self.stop.send(());
        self.task.await.unwrap()
    }
}

pub fn b(u: Uuid) -> Bytes {
    Bytes::copy_from_slice(u.as_bytes())
}

pub fn u(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

pub fn put_op(k: Uuid, v: Uuid) -> pb::WriteOp {
    pb::WriteOp {
        op: Some(pb::write_op::Op::Put(pb::PutOp {
            key: b(k),
            value: b(v),
        })),
    }
}
