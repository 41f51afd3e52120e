//! The RESP port over TLS, with the server's own certificate, and with
//! client certificates required when the server requires them.

use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use uuidmap_server::tls::TlsFiles;
use uuidmap_testkit::server::pki::{Ca, Leaf, write};

use super::{Conn, RespServer};

/// A TLS client trusting `ca`, presenting `identity` when given.
fn connector(ca: &Ca, identity: Option<&Leaf>) -> TlsConnector {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some(leaf) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(leaf.cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).unwrap(),
            )
            .unwrap(),
    };
    TlsConnector::from(Arc::new(config))
}

/// `PING` over TLS through `connector`: the answer's bytes, or why there
/// were none.
async fn ping(server: &RespServer, connector: &TlsConnector) -> Result<Vec<u8>, String> {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tls.write_all(&Conn::encode(&[b"PING"]))
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = vec![0u8; 64];
    let n = tls
        .read(&mut answer)
        .await
        .map_err(|e| format!("read: {e}"))?;
    answer.truncate(n);
    Ok(answer)
}

/// A server whose TLS files are signed by a new CA; with `client_ca`,
/// it requires client certificates signed by that CA too.
async fn tls_server(dir: &std::path::Path, client_ca: bool) -> (Ca, RespServer) {
    let ca = Ca::new("uuidmap RESP test CA");
    let leaf = ca.server();
    let files = TlsFiles {
        cert: write(dir, "server.pem", &leaf.cert),
        key: write(dir, "server.key", &leaf.key),
        client_ca: client_ca.then(|| write(dir, "ca.pem", &ca.pem)),
    };
    let server = RespServer::start(&dir.join("data"), |c| c.tls = Some(files)).await;
    (ca, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_port_serves_tls_with_the_servers_certificate_and_plaintext_gets_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, s) = tls_server(dir.path(), false).await;
    assert_eq!(ping(&s, &connector(&ca, None)).await.unwrap(), b"+PONG\r\n");
    // A client that does not trust the CA does not get in.
    let stranger = Ca::new("another CA");
    assert!(ping(&s, &connector(&stranger, None)).await.is_err());
    // Plaintext RESP is not answered: the port speaks TLS only.
    let mut plain = TcpStream::connect(s.addr).await.unwrap();
    plain.write_all(&Conn::encode(&[b"PING"])).await.unwrap();
    let mut answer = vec![0u8; 64];
    let n = plain.read(&mut answer).await.unwrap_or(0);
    assert!(!answer[..n].starts_with(b"+PONG"), "{:?}", &answer[..n]);
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_a_client_with_a_certificate_gets_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, s) = tls_server(dir.path(), true).await;
    let without = ping(&s, &connector(&ca, None)).await;
    assert!(without.is_err(), "{without:?}");
    let client = ca.client();
    assert_eq!(
        ping(&s, &connector(&ca, Some(&client))).await.unwrap(),
        b"+PONG\r\n"
    );
    s.stop().await.unwrap();
}
