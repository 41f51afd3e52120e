//! Our side of the load: the generated tonic client (`uuidmap.v1`) over
//! plaintext HTTP/2 connections to the server process.
//!
//! Callers share a few connections (HTTP/2 multiplexes them; one connection
//! per caller would measure connection handling, not calls): caller i uses
//! connection i mod `connections`. Every answer is checked (the value found
//! is the one loaded), so a fast wrong answer cannot pass.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::bytes::Bytes;
use tonic::transport::{Channel, Endpoint};
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;

use crate::data::{Data, Picker};
use crate::load::Caller;

/// The client's flow-control windows, as large as the server's, so a scan
/// stream is not held to 64 KiB per round trip.
const CONNECTION_WINDOW: u32 = 16 << 20;
const STREAM_WINDOW: u32 = 4 << 20;

/// A client of our server.
pub type Client = UuidMapClient<Channel>;

/// `count` separate HTTP/2 connections to `127.0.0.1:port`.
pub async fn connect(port: u16, count: usize) -> Result<Vec<Client>, String> {
    let mut clients = Vec::with_capacity(count);
    for _ in 0..count {
        let channel = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .map_err(|e| e.to_string())?
            .tcp_nodelay(true)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .initial_stream_window_size(STREAM_WINDOW)
            .connect()
            .await
            .map_err(|e| format!("cannot connect to 127.0.0.1:{port}: {e}"))?;
        clients.push(UuidMapClient::new(channel));
    }
    Ok(clients)
}

/// Whether the server answers `Ping`.
pub async fn ping_once(port: u16) -> bool {
    match connect(port, 1).await {
        Ok(mut c) => c[0].ping(pb::PingRequest {}).await.is_ok(),
        Err(_) => false,
    }
}

/// Writes every entry of `data` with `Write` batches of `batch` puts, two
/// batches in flight (one encoding while the other is applied). Returns
/// the time taken.
pub async fn load(client: &Client, data: &Arc<Data>, batch: usize) -> Result<Duration, String> {
    let started = Instant::now();
    let mut in_flight: Option<tokio::task::JoinHandle<Result<(), String>>> = None;
    for first in (0..data.len()).step_by(batch) {
        let ops = (first..(first + batch).min(data.len()))
            .map(|i| pb::WriteOp {
                op: Some(pb::write_op::Op::Put(pb::PutOp {
                    key: Bytes::copy_from_slice(data.key(i)),
                    value: Bytes::copy_from_slice(&data.value(i)),
                })),
            })
            .collect();
        let mut client = client.clone();
        let sent = tokio::spawn(async move {
            let answer = client
                .write(pb::WriteRequest { ops })
                .await
                .map_err(|s| format!("Write failed: {s}"))?
                .into_inner();
            if answer.applied {
                Ok(())
            } else {
                Err(format!("Write not applied: {answer:?}"))
            }
        });
        if let Some(previous) = in_flight.replace(sent) {
            previous.await.map_err(|e| e.to_string())??;
        }
    }
    if let Some(last) = in_flight {
        last.await.map_err(|e| e.to_string())??;
    }
    Ok(started.elapsed())
}

/// Entries the server holds (`Stats`).
pub async fn entries(client: &Client) -> Result<u64, String> {
    Ok(client
        .clone()
        .stats(pb::StatsRequest {})
        .await
        .map_err(|s| format!("Stats failed: {s}"))?
        .into_inner()
        .entries)
}

/// The empty RPC: the framework's own cost per call.
pub struct Ping {
    client: Client,
}

impl Ping {
    pub fn new(client: Client) -> Ping {
        Ping { client }
    }
}

impl Caller for Ping {
    async fn call(&mut self) -> Result<u64, String> {
        self.client
            .ping(pb::PingRequest {})
            .await
            .map_err(|s| format!("Ping failed: {s}"))?;
        Ok(0)
    }
}

/// One `Get` of a random loaded key.
pub struct Get {
    client: Client,
    data: Arc<Data>,
    picker: Picker,
}

impl Get {
    pub fn new(client: Client, data: Arc<Data>, caller: usize) -> Get {
        let picker = Picker::new(data.len(), caller);
        Get {
            client,
            data,
            picker,
        }
    }
}

impl Caller for Get {
    async fn call(&mut self) -> Result<u64, String> {
        let i = self.picker.next();
        let answer = self
            .client
            .get(pb::GetRequest {
                key: Bytes::copy_from_slice(self.data.key(i)),
                min_lsn: 0,
                ..Default::default()
            })
            .await
            .map_err(|s| format!("Get failed: {s}"))?
            .into_inner();
        if answer.value.as_deref() != Some(&self.data.value(i)[..]) {
            return Err(format!("Get of key {i} answered {:?}", answer.value));
        }
        Ok(1)
    }
}

/// One `BatchGet` of `batch` random loaded keys.
pub struct BatchGet {
    client: Client,
    data: Arc<Data>,
    picker: Picker,
    batch: usize,
    positions: Vec<usize>,
}

impl BatchGet {
    pub fn new(client: Client, data: Arc<Data>, caller: usize, batch: usize) -> BatchGet {
        let picker = Picker::new(data.len(), caller);
        BatchGet {
            client,
            data,
            picker,
            batch,
            positions: Vec::with_capacity(batch),
        }
    }
}

impl Caller for BatchGet {
    async fn call(&mut self) -> Result<u64, String> {
        self.positions.clear();
        let mut keys = Vec::with_capacity(self.batch * 16);
        for _ in 0..self.batch {
            let i = self.picker.next();
            self.positions.push(i);
            keys.extend_from_slice(self.data.key(i));
        }
        let answer = self
            .client
            .batch_get(pb::BatchGetRequest {
                keys: keys.into(),
                min_lsn: 0,
                ..Default::default()
            })
            .await
            .map_err(|s| format!("BatchGet failed: {s}"))?
            .into_inner();
        // Every key was loaded: every bit set. Values are checked for the
        // first and last key only, to keep the client's CPU (which the
        // server shares) on the calls.
        let found: u32 = answer.found.iter().map(|b| b.count_ones()).sum();
        let value = |k: usize| answer.values.get(k * 16..k * 16 + 16);
        let last = self.batch - 1;
        if found as usize != self.batch
            || answer.values.len() != self.batch * 16
            || value(0) != Some(&self.data.value(self.positions[0])[..])
            || value(last) != Some(&self.data.value(self.positions[last])[..])
        {
            return Err(format!(
                "BatchGet of {} loaded keys found {found}",
                self.batch
            ));
        }
        Ok(self.batch as u64)
    }
}

/// What one scan call returned.
pub struct Scanned {
    pub entries: u64,
    pub messages: u64,
}

/// Scans split `split` of `splits` to the end, keeping only the entries
/// whose value is in `values` (n×16 bytes; empty = all).
pub async fn scan(
    mut client: Client,
    split: u32,
    splits: u32,
    values: Bytes,
) -> Result<Scanned, String> {
    let mut stream = client
        .scan(pb::ScanRequest {
            cursor: Bytes::new(),
            split,
            splits,
            values,
            limit: 0,
            min_lsn: 0,
            ..Default::default()
        })
        .await
        .map_err(|s| format!("Scan failed: {s}"))?
        .into_inner();
    let mut scanned = Scanned {
        entries: 0,
        messages: 0,
    };
    while let Some(message) = stream
        .message()
        .await
        .map_err(|s| format!("Scan stream failed: {s}"))?
    {
        if message.entries.len() % 32 != 0 {
            return Err(format!(
                "a Scan message of {} bytes is not whole entries",
                message.entries.len()
            ));
        }
        scanned.entries += message.entries.len() as u64 / 32;
        scanned.messages += 1;
    }
    Ok(scanned)
}
