//! TLS on the RESP port: the server's own `--tls-cert` and `--tls-key`,
//! and with `--tls-client-ca` a client certificate signed by that CA is
//! required, as on gRPC (Redis's `tls-port` with `tls-auth-clients yes`).
//! The handshake runs on the connection's task, under [`HANDSHAKE_TIMEOUT`],
//! so a client that never finishes it holds nothing but its own socket.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use uuidmap_server::tls::TlsFiles;

use crate::RespError;

/// How long a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The acceptor for the RESP port from the server's TLS files.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, RespError> {
    let chain = certificates(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| bad_file(&files.key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| unusable(files, &e))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates(ca)? {
                roots.add(cert).map_err(|e| bad_file(ca, &e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| bad_file(ca, &e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| unusable(files, &e))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, RespError> {
    CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| bad_file(path, &e))
}

fn bad_file(path: &Path, e: &dyn std::fmt::Display) -> RespError {
    RespError::Tls(format!("{}: {e}", path.display()))
}

fn unusable(files: &TlsFiles, e: &dyn std::fmt::Display) -> RespError {
    RespError::Tls(format!(
        "the certificate {} and the key {} do not make a TLS identity: {e}",
        files.cert.display(),
        files.key.display()
    ))
}
