//! uuidmap's client: a client of a running uuidmap server (`uuidmap.v1`).
//! The `uuidmap get | put | del | scan | stats | snapshot` commands of the
//! binary are built on it. It depends on the protocol crate only, never on
//! the index, the engine or the server.
//!
//! - `error`: [`ClientError`].
//!
//! Connection: `http://host:port` for plaintext, `https://host:port` for
//! TLS, which needs the CA that signed the server's certificate
//! (`tls_ca`; the system's roots are not used) and, for a server that
//! requires client certificates (mTLS), a client certificate and key. A
//! token, when given, is sent with every call as `authorization: Bearer
//! <token>`. The connection is made eagerly, so a server that is not
//! running is reported at [`Client::connect`], naming the address.
//!
//! Deadlines: every unary call carries `timeout` as its gRPC deadline
//! (`grpc-timeout`), so the server gives up on it too. A scan has no
//! deadline (it can take as long as the index is big); only its connection
//! is bounded by `timeout`.
//!
//! Layering: depends on the protocol crate (`uuidmap-proto`) only.

#![warn(missing_docs, unreachable_pub)]

pub mod error;

use std::path::{Path, PathBuf};
use std::time::Duration;

use prost::bytes::Bytes;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use uuid::Uuid;
use uuidmap_proto::error_chain::error_chain;

pub use error::ClientError;

use pb::uuid_map_admin_client::UuidMapAdminClient;
use pb::uuid_map_client::UuidMapClient;
use uuidmap_proto::v1 as pb;

/// The default server address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7878";

/// How to reach a server.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// `http://host:port` or `https://host:port`.
    pub server: String,
    /// Bearer token sent with every call.
    pub token: Option<String>,
    /// PEM of the CA that signed the server's certificate (https only).
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for servers that require one (mTLS).
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// Bound of the connection and of each unary call.
    pub timeout: Duration,
}

impl ClientOptions {
    /// Plaintext to `server`, no token, 10 s timeout.
    pub fn new(server: impl Into<String>) -> Self {
        ClientOptions {
            server: server.into(),
            token: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Adds the bearer token to every call.
#[derive(Clone, Debug)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl Interceptor for BearerToken {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

type Authed = InterceptedService<Channel, BearerToken>;

/// A connection to a server.
#[derive(Clone, Debug)]
pub struct Client {
    data: UuidMapClient<Authed>,
    admin: UuidMapAdminClient<Authed>,
    timeout: Duration,
}

/// One message of a scan: entries and where to resume after them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanPage {
    /// (key, value) pairs.
    pub entries: Vec<(Uuid, Uuid)>,
    /// Resumes after these entries; empty when the split is done.
    pub cursor: Bytes,
}

impl Client {
    /// Connects (eagerly) as `options` say.
    pub async fn connect(options: &ClientOptions) -> Result<Client, ClientError> {
        let server = options.server.clone();
        let endpoint =
            Endpoint::from_shared(server.clone()).map_err(|e| ClientError::BadServer {
                server: server.clone(),
                why: e.to_string(),
            })?;
        let https = endpoint.uri().scheme_str() == Some("https");
        let mut endpoint = endpoint
            .connect_timeout(options.timeout)
            .tcp_nodelay(true)
            .initial_connection_window_size(16 << 20)
            .initial_stream_window_size(4 << 20);
        if let Some(tls) = tls_config(options, https)? {
            endpoint = endpoint.tls_config(tls).map_err(|e| ClientError::Connect {
                server: server.clone(),
                why: error_chain(&e),
            })?;
        }
        let token = options
            .token
            .as_deref()
            .map(|t| MetadataValue::try_from(format!("Bearer {t}")))
            .transpose()
            .map_err(|_| ClientError::BadToken)?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| connect_error(&server, &e))?;
        let bearer = BearerToken(token);
        Ok(Client {
            data: UuidMapClient::with_interceptor(channel.clone(), bearer.clone()),
            admin: UuidMapAdminClient::with_interceptor(channel, bearer),
            timeout: options.timeout,
        })
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        r.set_timeout(self.timeout);
        r
    }

    /// The value of `key`, or `None`.
    pub async fn get(&mut self, key: Uuid) -> Result<Option<Uuid>, ClientError> {
        let r = self.request(pb::GetRequest {
            key: bytes_of(key),
            min_lsn: 0,
        });
        let answer = self.data.get(r).await.map_err(status("Get"))?.into_inner();
        answer.value.map(|v| uuid_of("Get", &v)).transpose()
    }

    /// Sets `key` to `value`; the write's LSN.
    pub async fn put(&mut self, key: Uuid, value: Uuid) -> Result<u64, ClientError> {
        let r = self.request(pb::PutRequest {
            key: bytes_of(key),
            value: bytes_of(value),
        });
        Ok(self
            .data
            .put(r)
            .await
            .map_err(status("Put"))?
            .into_inner()
            .lsn)
    }

    /// Removes `key` (whether or not present); the write's LSN.
    pub async fn delete(&mut self, key: Uuid) -> Result<u64, ClientError> {
        let r = self.request(pb::DeleteRequest { key: bytes_of(key) });
        Ok(self
            .data
            .delete(r)
            .await
            .map_err(status("Delete"))?
            .into_inner()
            .lsn)
    }

    /// The server's figures.
    pub async fn stats(&mut self) -> Result<pb::StatsResponse, ClientError> {
        let r = self.request(pb::StatsRequest {});
        Ok(self
            .data
            .stats(r)
            .await
            .map_err(status("Stats"))?
            .into_inner())
    }

    /// Takes a snapshot now; answers once it is durable.
    pub async fn snapshot(&mut self) -> Result<pb::SnapshotResponse, ClientError> {
        let r = self.request(pb::SnapshotRequest {});
        Ok(self
            .admin
            .snapshot(r)
            .await
            .map_err(status("Snapshot"))?
            .into_inner())
    }

    /// Starts (or resumes, with `request.cursor`) a scan.
    pub async fn scan(&mut self, request: pb::ScanRequest) -> Result<ScanStream, ClientError> {
        let stream = self
            .data
            .scan(tonic::Request::new(request))
            .await
            .map_err(status("Scan"))?
            .into_inner();
        Ok(ScanStream { stream })
    }
}

/// The messages of a scan.
pub struct ScanStream {
    stream: tonic::Streaming<pb::ScanResponse>,
}

impl ScanStream {
    /// The next page; `None` at the end of the stream.
    pub async fn next(&mut self) -> Result<Option<ScanPage>, ClientError> {
        let Some(message) = self.stream.message().await.map_err(status("Scan"))? else {
            return Ok(None);
        };
        Ok(Some(ScanPage {
            entries: unpack_entries(&message.entries)?,
            cursor: message.cursor,
        }))
    }
}

/// Packed entries (n×32 bytes: key then value) as pairs.
pub fn unpack_entries(packed: &[u8]) -> Result<Vec<(Uuid, Uuid)>, ClientError> {
    if !packed.len().is_multiple_of(32) {
        return Err(ClientError::BadResponse {
            rpc: "Scan",
            why: format!(
                "entries must be whole 32-byte entries, but they are {} bytes long",
                packed.len()
            ),
        });
    }
    Ok(packed
        .chunks_exact(32)
        .map(|e| {
            let key = Uuid::from_bytes(e[..16].try_into().expect("16 bytes"));
            let value = Uuid::from_bytes(e[16..].try_into().expect("16 bytes"));
            (key, value)
        })
        .collect())
}

fn bytes_of(u: Uuid) -> Bytes {
    Bytes::copy_from_slice(u.as_bytes())
}

fn uuid_of(rpc: &'static str, bytes: &[u8]) -> Result<Uuid, ClientError> {
    <[u8; 16]>::try_from(bytes)
        .map(Uuid::from_bytes)
        .map_err(|_| ClientError::BadResponse {
            rpc,
            why: format!("a UUID of {} bytes", bytes.len()),
        })
}

fn status(rpc: &'static str) -> impl Fn(tonic::Status) -> ClientError {
    move |status| ClientError::Status { rpc, status }
}

fn read_pem(what: &'static str, path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|source| ClientError::ReadFile {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// The TLS configuration the options ask for, checked against the scheme.
fn tls_config(
    options: &ClientOptions,
    https: bool,
) -> Result<Option<ClientTlsConfig>, ClientError> {
    let any_tls_option =
        options.tls_ca.is_some() || options.tls_cert.is_some() || options.tls_key.is_some();
    if !https {
        if any_tls_option {
            return Err(ClientError::TlsWithoutHttps {
                server: options.server.clone(),
            });
        }
        return Ok(None);
    }
    let Some(ca) = &options.tls_ca else {
        return Err(ClientError::NoTlsCa {
            server: options.server.clone(),
        });
    };
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read_pem(ClientError::TLS_CA, ca)?));
    match (&options.tls_cert, &options.tls_key) {
        (Some(cert), Some(key)) => {
            tls = tls.identity(Identity::from_pem(
                read_pem(ClientError::CLIENT_CERT, cert)?,
                read_pem(ClientError::CLIENT_KEY, key)?,
            ));
        }
        (None, None) => {}
        _ => {
            return Err(ClientError::HalfClientIdentity);
        }
    }
    Ok(Some(tls))
}

/// Names a refused connection plainly; otherwise the whole cause.
fn connect_error(server: &str, e: &tonic::transport::Error) -> ClientError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return ClientError::Refused {
                server: server.to_string(),
            };
        }
        source = cause.source();
    }
    ClientError::Connect {
        server: server.to_string(),
        why: error_chain(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_entries_unpack_in_order_and_a_partial_entry_is_an_error() {
        let mut packed = Vec::new();
        for (k, v) in [(1u128, 10u128), (2, 20)] {
            packed.extend_from_slice(Uuid::from_u128(k).as_bytes());
            packed.extend_from_slice(Uuid::from_u128(v).as_bytes());
        }
        let e = unpack_entries(&packed).unwrap();
        assert_eq!(
            e,
            vec![
                (Uuid::from_u128(1), Uuid::from_u128(10)),
                (Uuid::from_u128(2), Uuid::from_u128(20))
            ]
        );
        packed.pop();
        let err = unpack_entries(&packed).unwrap_err().to_string();
        assert!(err.contains("63 bytes"), "{err}");
    }

    #[test]
    fn tls_options_must_fit_the_scheme() {
        let mut o = ClientOptions::new("http://127.0.0.1:1");
        o.tls_ca = Some("ca.pem".into());
        let e = tls_config(&o, false).unwrap_err().to_string();
        assert!(e.contains("not https://"), "{e}");
        let o = ClientOptions::new("https://127.0.0.1:1");
        let e = tls_config(&o, true).unwrap_err().to_string();
        assert!(e.contains("no CA certificate") && !e.contains("--"), "{e}");
    }
}
