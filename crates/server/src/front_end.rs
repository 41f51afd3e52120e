//! Another protocol's front end beside gRPC (the Redis protocol: the
//! `uuidmap-resp` crate). The server opens the index and builds what its
//! gRPC services share (admission, the read gate, the tokens, the stop
//! signal), then hands the same handles to each front end in
//! [`ServerParts`](crate::ServerParts), so a command that reaches the server
//! by another protocol takes the same permits, reads at the same
//! consistency, is checked against the same tokens and ends with the same
//! stop as a gRPC call. A front end is a thin layer: it decodes, calls the
//! code the gRPC handlers call, and encodes; it keeps no state of the map.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use uuidmap_engine::writer::DurableIndex;

use crate::ClusterView;
use crate::admission::Admission;
use crate::auth::Tokens;
use crate::config::Limits;
use crate::read_gate::ReadGate;

/// What the gRPC services share, handed to a front end when the server
/// starts. Cheap to clone.
#[derive(Clone)]
pub struct Shared {
    /// The index: reads, writes (the single writer), stats.
    pub durable: Arc<DurableIndex>,
    /// The request limits (`--max-batch-keys`, `--max-write-ops`,
    /// `--max-wait-ms`).
    pub limits: Limits,
    /// The admission control every call of every protocol goes through.
    pub admission: Arc<Admission>,
    /// Admits reads at their consistency (a member's lease or read index).
    pub gate: ReadGate,
    /// The bearer tokens and their roles; `None`: no token needed.
    pub tokens: Option<Arc<Tokens>>,
    /// A replica group member's view of its group (`None`: a single node).
    pub cluster: Option<ClusterView>,
    /// Becomes `true` when the server starts stopping: a front end stops
    /// accepting, finishes the command in flight on each connection and
    /// closes it.
    pub stopping: watch::Receiver<bool>,
    /// How long the stop waits for the front end's connections
    /// (`--stop-grace-ms`) before it shuts the index down anyway.
    pub stop_grace: Duration,
}

/// A front end's serving task: it ends once its connections are closed
/// after the stop began.
pub type Serving = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A protocol served beside gRPC, over the same handles.
pub trait FrontEnd: Send {
    /// Starts serving with `shared`; the task returned runs until the
    /// stop, and the server waits for it (at most `stop_grace`) before it
    /// shuts the index down, so that no acknowledged write is lost.
    fn serve(self: Box<Self>, shared: Shared) -> Serving;
}
