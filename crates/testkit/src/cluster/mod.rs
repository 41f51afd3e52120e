//! A replica group in one process, for the cluster crate's tests and the
//! Raft benches: [`KvMachine`] (a small state machine whose snapshots are
//! files) and [`Member`] (a member on a loopback port with the product's
//! log store, network and timing); [`ReplicaNode`] (a whole member over
//! the real index).

mod kv_machine;
mod member;
mod replica_node;

pub use kv_machine::{KvMachine, KvSnapshot, KvState};
pub use member::{Member, leader};
pub use replica_node::{ReplicaNode, writable_leader, write_batches};

/// A Raft service served on `listener` (over `tls`, when given) until the
/// sender is used (or dropped); the task ends when it has stopped.
pub(crate) fn serve_raft<S>(
    service: S,
    listener: tokio::net::TcpListener,
    tls: Option<&uuidmap_cluster::raft_tls::RaftTls>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
)
where
    S: tower_service::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let builder = uuidmap_cluster::raft_service::raft_server(tls).expect("the Raft TLS is usable");
    let server = tokio::spawn(async move {
        let mut builder = builder;
        builder
            .add_service(service)
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                async {
                    let _ = stopped.await;
                },
            )
            .await
            .expect("the Raft service runs");
    });
    (stop, server)
}
