//! TLS and mTLS end to end: certificates made in the test (rcgen), the real
//! server, tonic clients with and without the right certificates.

use std::path::Path;
use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap::server::tls::TlsFiles;
use uuidmap::server::{ServeError, serve_on};
use uuidmap_testkit::server::pki::{Ca, write};
use uuidmap_testkit::server::{TestServer, b, config, raw_call, u};

/// A TLS server signed by `ca`, requiring client certificates from
/// `client_ca` when given.
async fn tls_server(dir: &Path, ca: &Ca, client_ca: Option<&Ca>) -> TestServer {
    let leaf = ca.server();
    let mut c = config(&dir.join("data"));
    c.tls = Some(TlsFiles {
        cert: write(dir, "server.pem", &leaf.cert),
        key: write(dir, "server.key", &leaf.key),
        client_ca: client_ca.map(|ca| write(dir, "clients-ca.pem", &ca.pem)),
    });
    TestServer::start_with(c).await
}

/// Connects over TLS trusting `trust`, presenting `identity` if given.
async fn tls_channel(
    server: &TestServer,
    trust: &Ca,
    identity: Option<&uuidmap_testkit::server::pki::Leaf>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&trust.pem));
    if let Some(id) = identity {
        tls = tls.identity(Identity::from_pem(&id.cert, &id.key));
    }
    Channel::from_shared(format!("https://127.0.0.1:{}", server.addr.port()))
        .unwrap()
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
}

/// A Put then a Get on `channel`; the first error.
async fn round_trip(channel: Channel) -> Result<(), tonic::Status> {
    let mut c = UuidMapClient::new(channel);
    let lsn = c
        .put(pb::PutRequest {
            key: b(u(7)),
            value: b(u(70)),
        })
        .await?
        .into_inner()
        .lsn;
    let got = c
        .get(pb::GetRequest {
            key: b(u(7)),
            min_lsn: lsn,
            ..Default::default()
        })
        .await?
        .into_inner();
    assert_eq!(got.value, Some(b(u(70))));
    Ok(())
}

/// True if a connection and a call on it both succeed.
async fn works(channel: Result<Channel, tonic::transport::Error>) -> bool {
    match channel {
        Ok(ch) => round_trip(ch).await.is_ok(),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_is_served_and_a_plaintext_client_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("uuidmap test CA");
    let server = tls_server(dir.path(), &ca, None).await;

    round_trip(tls_channel(&server, &ca, None).await.unwrap())
        .await
        .unwrap();

    // Plaintext HTTP/2 to the TLS port: the connection or the call fails.
    let plain = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await;
    assert!(
        !works(plain).await,
        "a plaintext client was served over TLS"
    );

    // A client that trusts another CA refuses the server's certificate.
    let other = Ca::new("another CA");
    assert!(!works(tls_channel(&server, &other, None).await).await);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_serves_only_clients_with_a_certificate_from_the_client_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("server CA");
    let clients = Ca::new("clients CA");
    let server = tls_server(dir.path(), &ca, Some(&clients)).await;

    let good = clients.client();
    assert!(
        works(tls_channel(&server, &ca, Some(&good)).await).await,
        "a client certificate signed by the client CA was refused"
    );
    assert!(
        !works(tls_channel(&server, &ca, None).await).await,
        "a client without a certificate was served"
    );
    let stranger = Ca::new("a stranger's CA").client();
    assert!(
        !works(tls_channel(&server, &ca, Some(&stranger)).await).await,
        "a client certificate from another CA was served"
    );
    // The server is still fine after the refused handshakes.
    assert!(works(tls_channel(&server, &ca, Some(&good)).await).await);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn bad_tls_files_stop_the_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("CA");
    let leaf = ca.server();
    let other = ca.server();
    let cert = write(dir.path(), "server.pem", &leaf.cert);
    let key = write(dir.path(), "server.key", &leaf.key);
    let garbage = write(dir.path(), "garbage.pem", "this is not PEM\n");
    let wrong_key = write(dir.path(), "other.key", &other.key);

    let start = |tls: TlsFiles| {
        let mut c = config(&dir.path().join("data"));
        c.tls = Some(tls);
        async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            serve_on(listener, c, async {}).await.unwrap_err()
        }
    };
    let cases = [
        (
            TlsFiles {
                cert: dir.path().join("missing.pem"),
                key: key.clone(),
                client_ca: None,
            },
            "missing.pem",
        ),
        (
            TlsFiles {
                cert: garbage.clone(),
                key: key.clone(),
                client_ca: None,
            },
            "garbage.pem",
        ),
        (
            TlsFiles {
                cert: cert.clone(),
                key: garbage.clone(),
                client_ca: None,
            },
            "garbage.pem",
        ),
        (
            TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: Some(garbage.clone()),
            },
            "client CA certificate",
        ),
        (
            TlsFiles {
                cert: cert.clone(),
                key: wrong_key,
                client_ca: None,
            },
            "other.key",
        ),
    ];
    for (files, named) in cases {
        let e = start(files).await;
        assert!(matches!(e, ServeError::Tls(_)), "{e:?}");
        assert!(e.to_string().contains(named), "{named}: {e}");
    }
    assert!(!dir.path().join("data").exists(), "refused before recovery");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_certificate_on_the_client_port_writes_but_cannot_change_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("server CA");
    // One CA for the Raft port and the clients: a member's certificate
    // (clientAuth) is then a valid client certificate too.
    let raft_ca = Ca::new("raft CA");
    let server = tls_server(dir.path(), &ca, Some(&raft_ca)).await;
    let member = raft_ca.raft_node(2);
    let channel = tls_channel(&server, &ca, Some(&member)).await.unwrap();
    round_trip(channel.clone())
        .await
        .expect("a client certificate alone grants write");
    for path in [
        "/uuidmap.v1.UuidMapCluster/AddLearner",
        "/uuidmap.v1.UuidMapCluster/Promote",
        "/uuidmap.v1.UuidMapCluster/Remove",
    ] {
        let status = raw_call(&channel, path, tonic::Request::new(Vec::new()))
            .await
            .expect_err(path);
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{path}");
        assert!(
            status.message().contains("admin role") && status.message().contains("--tokens-file"),
            "{}",
            status.message()
        );
    }
    // Status is a read: past auth, a single node says it is in no group.
    let status = raw_call(
        &channel,
        "/uuidmap.v1.UuidMapCluster/Status",
        tonic::Request::new(Vec::new()),
    )
    .await
    .expect_err("a single node is in no group");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    server.stop().await.unwrap();
}
