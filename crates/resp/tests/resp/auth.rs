//! AUTH with the server's bearer tokens: the role decides, as on gRPC.

use std::net::SocketAddr;

use uuidmap_resp::{RespError, RespFrontEnd};

use super::commands::text;
use super::{Reply, RespServer, ok};

const READ_TOKEN: &str = "read-token-0123456789";
const WRITE_TOKEN: &str = "write-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_need_auth_and_a_read_token_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("read {READ_TOKEN}\nwrite {WRITE_TOKEN}\n")).unwrap();
    let data = dir.path().join("data");
    let s = RespServer::start(&data, |c| c.tokens_file = Some(tokens)).await;
    let mut c = s.connect().await;
    let (k, v) = (text(1), text(2));
    let e = c.call(&[b"GET", &k]).await;
    assert_eq!(e.error(), "NOAUTH Authentication required.");
    let e = c.call(&[b"PING"]).await;
    assert_eq!(e.error(), "NOAUTH Authentication required.");
    let e = c.call(&[b"AUTH", b"not-a-token-at-all"]).await;
    assert!(e.error().starts_with("WRONGPASS"), "{e:?}");
    assert_eq!(c.call(&[b"AUTH", READ_TOKEN.as_bytes()]).await, ok());
    assert_eq!(c.call(&[b"GET", &k]).await, Reply::Bulk(None));
    let e = c.call(&[b"SET", &k, &v]).await;
    assert!(
        e.error().starts_with("NOPERM") && e.error().contains("write"),
        "{e:?}"
    );
    // AUTH <user> <token>: the user name is not checked.
    assert_eq!(
        c.call(&[b"AUTH", b"default", WRITE_TOKEN.as_bytes()]).await,
        ok()
    );
    assert_eq!(c.call(&[b"SET", &k, &v]).await, ok());
    // HELLO 2 AUTH on a new connection.
    let mut c2 = s.connect().await;
    let hello = c2
        .call(&[b"HELLO", b"2", b"AUTH", b"default", READ_TOKEN.as_bytes()])
        .await;
    assert!(!hello.items().is_empty());
    assert_eq!(c2.call(&[b"GET", &k]).await, super::bulk(&v));
    s.stop().await.unwrap();
}

#[test]
fn the_plaintext_port_is_loopback_only_unless_insecure_or_served_with_tls() {
    let mut c = uuidmap_server::ServeConfig::new("d");
    let any: SocketAddr = "0.0.0.0:6380".parse().unwrap();
    assert!(RespFrontEnd::check("127.0.0.1:6380".parse().unwrap(), &c).is_ok());
    assert!(matches!(
        RespFrontEnd::check(any, &c),
        Err(RespError::NotLoopback { .. })
    ));
    c.insecure = true;
    assert!(RespFrontEnd::check(any, &c).is_ok());
    c.insecure = false;
    c.tls = Some(uuidmap_server::tls::TlsFiles {
        cert: "c.pem".into(),
        key: "k.pem".into(),
        client_ca: Some("ca.pem".into()),
    });
    assert!(RespFrontEnd::check(any, &c).is_ok(), "TLS: any address");
}

#[tokio::test]
async fn tls_files_that_make_no_identity_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = uuidmap_server::ServeConfig::new(dir.path());
    c.tls = Some(uuidmap_server::tls::TlsFiles {
        cert: dir.path().join("missing-cert.pem"),
        key: dir.path().join("k.pem"),
        client_ca: None,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = RespFrontEnd::on(listener, &c).err().expect("no identity");
    assert!(matches!(e, RespError::Tls(_)), "{e}");
    assert!(e.to_string().contains("missing-cert.pem"), "{e}");
}
