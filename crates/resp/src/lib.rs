//! uuidmap's Redis-protocol front end (`uuidmap serve --resp-listen ADDR`):
//! redis-cli, redis-benchmark and any Redis client speak to the index
//! directly. A thin layer beside the gRPC server: it parses RESP, calls
//! what the gRPC handlers call over the same handles
//! ([`Shared`]: the index and its single writer, admission, the read gate,
//! the tokens, the stop), and writes RESP2, or RESP3 after `HELLO 3`. It
//! keeps no state of the map.
//!
//! - `parser`: requests (arrays of bulk strings, inline commands) as
//!   ranges of the connection's buffer, every limit checked on the header;
//! - `reply`: RESP2 answers;
//! - `uuid_arg`: a key or value, 16 raw bytes or 36 characters;
//! - `command_table`: the one table of commands (arity, admission class,
//!   role, metric label);
//! - `commands`: one command from its checks to its answer (reads,
//!   handshake, `SCAN`, `INFO`, `COMMAND`, `CLIENT`);
//! - `write_commands`: `SET` (`NX`/`XX`/`IFEQ`), `DEL`, `DELIFEQ`, `MSET`,
//!   and the redirect a follower answers with;
//! - `segment_scan`: `SCAN`'s 64-bit cursors over the index's exact-once
//!   scan;
//! - `info_text`: `INFO`, the gRPC `Stats` answer as INFO text;
//! - `connection`: one connection, pipelining, the stop;
//! - `resp_tls`: TLS on the port, from the server's own TLS files.
//!
//! Differences from Redis, the commands and the redirect form: README,
//! "The Redis protocol".
//!
//! Metrics: `uuidmap_resp_commands_total{command, outcome}` (`outcome`
//! `ok` or `error`; `command="unknown"` for names not in the table),
//! `uuidmap_resp_command_seconds{command}`, and
//! `uuidmap_resp_connections` (open now). Admission's series count RESP
//! commands with the gRPC calls of their class.

#![warn(missing_docs, unreachable_pub)]

pub mod command_table;
pub mod commands;
pub mod connection;
pub mod info_text;
pub mod parser;
pub mod reply;
pub mod resp_tls;
pub mod segment_scan;
pub mod set_run;
pub mod uuid_arg;
pub mod write_commands;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use uuidmap_server::ServeConfig;
use uuidmap_server::front_end::{FrontEnd, Serving, Shared};

use commands::{Commands, Session};
use connection::stopped;
use parser::Limits;

/// Most bytes in one argument: keys and values are 16 or 36 bytes; a
/// token is at most 4096; room for a client's name or library string.
pub const MAX_BULK: usize = 64 << 10;

/// Why the RESP port cannot be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RespError {
    /// A non-loopback address without TLS or `insecure`.
    #[error(
        "refusing to serve the Redis protocol on {addr}: without TLS it is plaintext, so \
         tokens and entries would cross the network in clear. Give the server --tls-cert and \
         --tls-key (the RESP port then serves TLS too), use a loopback address \
         (127.0.0.1:6380), or set the server `insecure`"
    )]
    NotLoopback {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The server's TLS files do not make a TLS configuration for the
    /// port.
    #[error("cannot serve the Redis protocol over TLS: {0}")]
    Tls(String),
    /// The address could not be bound.
    #[error("cannot listen for the Redis protocol on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The RESP front end, bound and ready to serve beside gRPC
/// ([`uuidmap_server::ServerParts::front_end`]).
pub struct RespFrontEnd {
    listener: TcpListener,
    /// With the server's TLS: every connection's handshake.
    tls: Option<TlsAcceptor>,
}

impl RespFrontEnd {
    /// Checks `addr` against `config` (see [`RespFrontEnd::check`]) and
    /// binds it.
    pub async fn bind(addr: SocketAddr, config: &ServeConfig) -> Result<RespFrontEnd, RespError> {
        RespFrontEnd::check(addr, config)?;
        let tls = RespFrontEnd::tls(config)?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| RespError::Bind { addr, source })?;
        Ok(RespFrontEnd { listener, tls })
    }

    /// Serves on an already bound `listener` (a test's port 0), checked
    /// as [`RespFrontEnd::bind`] checks.
    pub fn on(listener: TcpListener, config: &ServeConfig) -> Result<RespFrontEnd, RespError> {
        let addr = listener.local_addr().map_err(|source| RespError::Bind {
            addr: config.resp_listen.unwrap_or(config.listen),
            source,
        })?;
        RespFrontEnd::check(addr, config)?;
        let tls = RespFrontEnd::tls(config)?;
        Ok(RespFrontEnd { listener, tls })
    }

    /// The rules of the port: it serves TLS when the server does (and
    /// then asks for client certificates when the server does); without
    /// TLS it is plaintext, so loopback only unless `insecure`.
    pub fn check(addr: SocketAddr, config: &ServeConfig) -> Result<(), RespError> {
        if config.tls.is_none() && !addr.ip().is_loopback() && !config.insecure {
            return Err(RespError::NotLoopback { addr });
        }
        Ok(())
    }

    fn tls(config: &ServeConfig) -> Result<Option<TlsAcceptor>, RespError> {
        config.tls.as_ref().map(resp_tls::acceptor).transpose()
    }

    /// Where it listens.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

impl FrontEnd for RespFrontEnd {
    fn serve(self: Box<Self>, shared: Shared) -> Serving {
        Box::pin(accept(self.listener, self.tls, shared))
    }
}

/// Accepts connections until the stop, then waits for them to close.
async fn accept(listener: TcpListener, tls: Option<TlsAcceptor>, shared: Shared) {
    let port = listener.local_addr().map_or(0, |a| a.port());
    let limits = Limits {
        // The longest command: MSET of --max-write-ops pairs, or MGET of
        // --max-batch-keys keys, and its name.
        max_args: 1 + (2 * shared.limits.max_write_ops).max(shared.limits.max_batch_keys),
        max_bulk: MAX_BULK,
    };
    let tokens = shared.tokens.is_some();
    let mut stopping = shared.stopping.clone();
    let commands = Arc::new(Commands::new(shared, port));
    let open = metrics::gauge!("uuidmap_resp_connections");
    let ids = AtomicU64::new(1);
    let mut connections = JoinSet::new();
    tracing::info!(
        port,
        tls = tls.is_some(),
        "serving the Redis protocol (RESP2 and RESP3)"
    );
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _peer)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let commands = Arc::clone(&commands);
                let session = Session::new(ids.fetch_add(1, Ordering::Relaxed), tokens);
                let stop = stopping.clone();
                let open = open.clone();
                open.increment(1.0);
                let tls = tls.clone();
                connections.spawn(async move {
                    match tls {
                        None => connection::serve(stream, &commands, limits, session, stop).await,
                        Some(tls) => {
                            let shake = tls.accept(stream);
                            match tokio::time::timeout(resp_tls::HANDSHAKE_TIMEOUT, shake).await {
                                Ok(Ok(stream)) => {
                                    connection::serve(stream, &commands, limits, session, stop)
                                        .await;
                                }
                                Ok(Err(e)) => tracing::debug!("RESP TLS handshake failed: {e}"),
                                Err(_) => tracing::debug!("RESP TLS handshake timed out"),
                            }
                        }
                    }
                    open.decrement(1.0);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = stopped(&mut stopping) => break,
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}
