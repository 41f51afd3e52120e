//! A token that changes: the client asks its provider again when the
//! server refuses the token it has, and sends the call once more with the
//! new one; a provider that gives nothing at first fails the build.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use uuidmap_client::{Client, ClientError};
use uuidmap_testkit::server::{TestServer, config};

use super::{key, url};

const OLD: &str = "0ld-rotated-token-1c9e7a";
const NEW: &str = "n3w-write-token-5d2b8f";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_renewed_from_the_provider_and_the_call_goes_through() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    // The server knows only the new token: the old one was rotated out.
    std::fs::write(&tokens, format!("write {NEW}\n")).unwrap();
    let mut c = config(&dir.path().join("data"));
    c.tokens_file = Some(tokens);
    let server = TestServer::start_with(c).await;

    // What the provider reads (a file another process renews, in life).
    let current = Arc::new(Mutex::new(OLD.to_string()));
    let asked = Arc::new(Mutex::new(0u32));
    let provider = {
        let (current, asked) = (current.clone(), asked.clone());
        move || {
            *asked.lock().unwrap() += 1;
            Ok::<_, String>(current.lock().unwrap().clone())
        }
    };
    let client = Client::builder()
        .endpoints([url(server.addr)])
        .token_provider(provider, Duration::from_secs(3600))
        .build()
        .unwrap();
    // Still the old token everywhere: refused, and said so.
    let e = client.put(key(1), key(2)).await.unwrap_err();
    assert!(
        e.status()
            .is_some_and(|s| s.code() == tonic::Code::Unauthenticated),
        "{e}"
    );
    // Renewed: the next refusal asks the provider, and the call passes.
    *current.lock().unwrap() = NEW.to_string();
    let before = *asked.lock().unwrap();
    client.put(key(1), key(2)).await.unwrap();
    assert_eq!(*asked.lock().unwrap(), before + 1, "asked once more");
    assert_eq!(client.get(key(1)).await.unwrap(), Some(key(2)));

    // A provider with nothing to give fails the build, in its words.
    let e = Client::builder()
        .endpoints([url(server.addr)])
        .token_provider(
            || Err::<String, _>("the token file is missing".to_string()),
            Duration::from_secs(60),
        )
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::TokenProvider { why } if why.contains("missing")),
        "{e}"
    );
    server.stop().await.unwrap();
}
