//! TLS (rustls, through tonic's `tls-ring` feature) and client-certificate
//! verification (mTLS) for the server.
//!
//! - `--tls-cert` (PEM: the server's certificate, then any intermediates)
//!   and `--tls-key` (PEM: its private key, PKCS#8, PKCS#1 or SEC1) turn TLS
//!   on; both or neither.
//! - `--tls-client-ca` (PEM: one or more CA certificates) additionally
//!   requires every client to present a certificate signed by one of them;
//!   a client without one, or with one from another CA, fails the
//!   handshake. It needs TLS on.
//!
//! - `--raft-tls-cert`, `--raft-tls-key` and `--raft-tls-ca` (all three
//!   or none): a replica group member's mTLS on its Raft port, read here
//!   ([`raft_tls`]) and handed to the cluster crate
//!   (`uuidmap_cluster::raft_tls`), which serves and dials with it.
//!
//! The files are read and checked once at start, before the data directory
//! is opened, so a wrong path or a bad file stops the start at once with
//! the file's name. TLS wraps the accepted sockets after the listener has
//! set TCP_NODELAY on them (tonic applies the acceptor to any incoming
//! stream, `serve_with_incoming*` included), so TLS changes nothing there.

use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use uuidmap_proto::error_chain::error_chain;

/// The PEM files of the server's TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key of the leaf certificate.
    pub key: PathBuf,
    /// When set: CA certificates that client certificates must chain to
    /// (mTLS, required).
    pub client_ca: Option<PathBuf>,
}

/// The PEM files of a member's Raft TLS (`--raft-tls-*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftTlsFiles {
    /// The member's certificate chain, leaf first (SAN DNS name
    /// `node-<ID>.raft.uuidmap`).
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The Raft CA: its peers' certificates must chain to it.
    pub ca: PathBuf,
}

/// TLS files that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The file could not be read.
    #[error("cannot read the {what} {path}: {source}")]
    Read {
        /// What the file is for (e.g. "TLS certificate").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not the PEM it should be.
    #[error("the {what} {path} is not usable: {why}")]
    Pem {
        /// What the file is for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The Raft TLS files cannot serve this member (the certificate
    /// names another node, the key does not match, ...).
    #[error("the Raft TLS files ({cert}, {key}, {ca}) cannot be used: {source}")]
    Raft {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// The CA file.
        ca: PathBuf,
        /// What is wrong.
        source: uuidmap_cluster::raft_tls::RaftTlsError,
    },
    /// rustls refused the combination (e.g. the key does not match the
    /// certificate, or an unsupported key type).
    #[error("cannot set up TLS with the certificate {cert} and the key {key}: {why}")]
    Unusable {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's reason.
        why: String,
    },
}

impl TlsError {
    /// The flags that name the files this error is about, for a hint.
    pub fn flags(&self) -> &'static str {
        let raft = match self {
            TlsError::Read { what, .. } | TlsError::Pem { what, .. } => what.starts_with("Raft"),
            TlsError::Raft { .. } => true,
            TlsError::Unusable { .. } => false,
        };
        if raft {
            "--raft-tls-cert, --raft-tls-key and --raft-tls-ca"
        } else {
            "--tls-cert, --tls-key and --tls-client-ca"
        }
    }
}

const CERT: &str = "TLS certificate";
const KEY: &str = "TLS private key";
const CLIENT_CA: &str = "client CA certificate";
const RAFT_CERT: &str = "Raft TLS certificate";
const RAFT_KEY: &str = "Raft TLS private key";
const RAFT_CA: &str = "Raft CA certificate";

/// Reads and checks member `node_id`'s Raft TLS files: the material its
/// Raft service serves and dials with.
pub fn raft_tls(
    node_id: u64,
    files: &RaftTlsFiles,
) -> Result<uuidmap_cluster::raft_tls::RaftTls, TlsError> {
    let cert = read(RAFT_CERT, &files.cert)?;
    certificates(RAFT_CERT, &files.cert, &cert)?;
    let key = read(RAFT_KEY, &files.key)?;
    private_key(RAFT_KEY, &files.key, &key)?;
    let ca = read(RAFT_CA, &files.ca)?;
    certificates(RAFT_CA, &files.ca, &ca)?;
    uuidmap_cluster::raft_tls::RaftTls::new(node_id, cert, key, ca).map_err(|source| {
        TlsError::Raft {
            cert: files.cert.clone(),
            key: files.key.clone(),
            ca: files.ca.clone(),
            source,
        }
    })
}

/// Checks that `pem` holds a private key.
fn private_key(what: &'static str, path: &Path, pem: &[u8]) -> Result<(), TlsError> {
    PrivateKeyDer::from_pem_slice(pem)
        .map(drop)
        .map_err(|e| TlsError::Pem {
            what,
            path: path.to_path_buf(),
            why: format!(
                "no PEM private key found ({e}); expected a `-----BEGIN PRIVATE KEY-----` block"
            ),
        })
}

/// Reads and checks the files; the tonic TLS configuration they make.
pub fn server_config(files: &TlsFiles) -> Result<ServerTlsConfig, TlsError> {
    let cert = read(CERT, &files.cert)?;
    certificates(CERT, &files.cert, &cert)?;
    let key = read(KEY, &files.key)?;
    private_key(KEY, &files.key, &key)?;
    let mut config = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
    if let Some(ca_path) = &files.client_ca {
        let ca = read(CLIENT_CA, ca_path)?;
        certificates(CLIENT_CA, ca_path, &ca)?;
        config = config
            .client_ca_root(Certificate::from_pem(ca))
            .client_auth_optional(false);
    }
    // Build it once now, so that a key that does not match its certificate
    // stops the start here rather than after recovery.
    tonic::transport::Server::builder()
        .tls_config(config.clone())
        .map_err(|e| TlsError::Unusable {
            cert: files.cert.clone(),
            key: files.key.clone(),
            why: error_chain(&e),
        })?;
    Ok(config)
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// Checks that `pem` holds at least one certificate and nothing malformed.
fn certificates(what: &'static str, path: &Path, pem: &[u8]) -> Result<usize, TlsError> {
    let bad = |why: String| TlsError::Pem {
        what,
        path: path.to_path_buf(),
        why,
    };
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|e| bad(format!("a certificate block is malformed: {e}")))?;
        n += 1;
    }
    if n == 0 {
        return Err(bad(
            "it holds no PEM certificate; expected a `-----BEGIN CERTIFICATE-----` block".into(),
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path, cert: &str, key: &str) -> TlsFiles {
        let c = dir.join("cert.pem");
        let k = dir.join("key.pem");
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        TlsFiles {
            cert: c,
            key: k,
            client_ca: None,
        }
    }

    #[test]
    fn a_raft_file_is_named_with_the_raft_flags() {
        let dir = tempfile::tempdir().unwrap();
        let f = RaftTlsFiles {
            cert: dir.path().join("node-1.pem"),
            key: dir.path().join("node-1.key"),
            ca: dir.path().join("raft-ca.pem"),
        };
        let e = raft_tls(1, &f).unwrap_err();
        assert!(
            e.to_string().contains("node-1.pem") && e.to_string().contains("Raft TLS certificate"),
            "{e}"
        );
        assert!(e.flags().starts_with("--raft-tls-cert"));
        let f = TlsFiles {
            cert: dir.path().join("nope.pem"),
            key: dir.path().join("key.pem"),
            client_ca: None,
        };
        assert!(
            server_config(&f)
                .unwrap_err()
                .flags()
                .starts_with("--tls-cert")
        );
    }

    #[test]
    fn a_missing_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = TlsFiles {
            cert: dir.path().join("nope.pem"),
            key: dir.path().join("key.pem"),
            client_ca: None,
        };
        let e = server_config(&f).unwrap_err().to_string();
        assert!(
            e.contains("nope.pem") && e.contains("TLS certificate"),
            "{e}"
        );
    }

    #[test]
    fn a_file_without_pem_blocks_is_named_with_what_was_expected() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path(), "not a certificate\n", "nor a key\n");
        let e = server_config(&f).unwrap_err().to_string();
        assert!(
            e.contains("cert.pem") && e.contains("BEGIN CERTIFICATE"),
            "{e}"
        );
    }
}
