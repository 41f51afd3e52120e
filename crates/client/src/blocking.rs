//! A blocking facade over [`crate::Client`], for storage daemons that are
//! not async (as the redis crate offers one).
//!
//! [`Client`] owns a small tokio runtime (one worker thread, named
//! `uuidmap-client`) that runs the connections, the batching lanes and the
//! health prober; each call blocks its thread until the async call
//! finishes. Any number of threads may call one client at once (it is
//! `Send + Sync`, and clones share everything): concurrent `get`s are
//! batched as the async client's are. Everything else (retries, deadlines,
//! consistency, monotonic reads) is the async client's.
//!
//! Calling it from inside an async runtime panics (blocking a runtime's
//! thread would stall it): use the async client there.
//!
//! ```no_run
//! # fn main() -> Result<(), uuidmap_client::ClientError> {
//! use uuid::Uuid;
//! use uuidmap_client::Client;
//!
//! let client = Client::builder()
//!     .endpoints(["http://127.0.0.1:7878"])
//!     .build_blocking()?;
//! let file = Uuid::new_v4();
//! client.put(file, Uuid::new_v4())?;
//! assert!(client.get(file)?.is_some());
//! # Ok(()) }
//! ```

use std::sync::Arc;

use tokio::runtime::Runtime;
use uuid::Uuid;
use uuidmap_proto::v1 as pb;

use crate::error::ClientError;
use crate::scan_stream::{ScanOptions, ScanStream};
use crate::write_op::{CasOutcome, WriteOp};

/// The blocking client; see the module doc.
#[derive(Clone, Debug)]
pub struct Client {
    inner: crate::Client,
    runtime: Arc<Runtime>,
}

impl Client {
    /// Builds the runtime, then the client on it (connections are made
    /// when first needed, as [`crate::ClientBuilder::build`] does).
    pub(crate) fn build(builder: crate::ClientBuilder) -> Result<Client, ClientError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("uuidmap-client")
            .enable_all()
            .build()
            .map_err(|e| ClientError::Runtime { why: e.to_string() })?;
        let inner = {
            let _entered = runtime.enter();
            builder.build()?
        };
        Ok(Client {
            inner,
            runtime: Arc::new(runtime),
        })
    }

    /// The async client underneath (for the calls not mirrored here).
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    /// Runs `call` to its end on this thread.
    fn wait<T>(&self, call: impl Future<Output = T>) -> T {
        self.runtime.block_on(call)
    }

    /// [`crate::Client::get`].
    pub fn get(&self, key: Uuid) -> Result<Option<Uuid>, ClientError> {
        self.wait(self.inner.get(key))
    }

    /// [`crate::Client::lookup`].
    pub fn lookup(&self, keys: &[Uuid]) -> Result<Vec<Option<Uuid>>, ClientError> {
        self.wait(self.inner.lookup(keys))
    }

    /// [`crate::Client::get_many`].
    pub fn get_many(&self, keys: &[Uuid]) -> Result<Vec<Option<Uuid>>, ClientError> {
        self.wait(self.inner.get_many(keys))
    }

    /// [`crate::Client::put`].
    pub fn put(&self, key: Uuid, value: Uuid) -> Result<u64, ClientError> {
        self.wait(self.inner.put(key, value))
    }

    /// [`crate::Client::delete`].
    pub fn delete(&self, key: Uuid) -> Result<u64, ClientError> {
        self.wait(self.inner.delete(key))
    }

    /// [`crate::Client::compare_and_set`].
    pub fn compare_and_set(
        &self,
        key: Uuid,
        expected: Option<Uuid>,
        new: Option<Uuid>,
    ) -> Result<CasOutcome, ClientError> {
        self.wait(self.inner.compare_and_set(key, expected, new))
    }

    /// [`crate::Client::write`].
    pub fn write(&self, ops: &[WriteOp]) -> Result<u64, ClientError> {
        self.wait(self.inner.write(ops))
    }

    /// [`crate::Client::wait_for`].
    pub fn wait_for(&self, lsn: u64) -> Result<u64, ClientError> {
        self.wait(self.inner.wait_for(lsn))
    }

    /// [`crate::Client::stats`].
    pub fn stats(&self) -> Result<pb::StatsResponse, ClientError> {
        self.wait(self.inner.stats())
    }

    /// [`crate::Client::scan`], page by page as an iterator (it resumes
    /// by itself, as the async scan does); an error ends it.
    pub fn scan(&self, options: ScanOptions) -> ScanPages {
        ScanPages {
            client: self.clone(),
            scan: self.inner.scan(options),
            done: false,
        }
    }
}

/// The pages of a blocking scan ([`Client::scan`]).
pub struct ScanPages {
    client: Client,
    scan: ScanStream,
    done: bool,
}

impl ScanPages {
    /// The applied LSN when the scan began (`None` before its first page).
    pub fn applied_lsn(&self) -> Option<u64> {
        self.scan.applied_lsn()
    }
}

impl Iterator for ScanPages {
    type Item = Result<crate::ScanPage, ClientError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let page = self.client.wait(self.scan.next_page());
        match page {
            Ok(Some(page)) => Some(Ok(page)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
