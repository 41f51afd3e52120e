//! The blocking facade: plain threads, no runtime of the caller's, call
//! one client at once; writes, batched reads, a compare-and-set's outcome
//! and a scan all work as the async client's do.

use uuidmap_client::{CasOutcome, Client, ScanOptions};
use uuidmap_testkit::server::TestServer;

use super::{key, url};

#[test]
fn threads_without_a_runtime_share_a_blocking_client() {
    // The server runs on a runtime of its own, as another process would.
    let server_rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = server_rt.block_on(TestServer::start(dir.path()));

    let client = Client::builder()
        .endpoints([url(server.addr)])
        .build_blocking()
        .unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                for i in t * 100..(t + 1) * 100 {
                    client.put(key(i), key(i + 1)).unwrap();
                    assert_eq!(client.get(key(i)).unwrap(), Some(key(i + 1)));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // (The test server takes at most 100 keys a request.)
    let keys: Vec<_> = (300..400).map(key).collect();
    let found = client.lookup(&keys).unwrap();
    assert!(found.iter().zip(300..).all(|(v, i)| *v == Some(key(i + 1))));

    assert_eq!(
        client.compare_and_set(key(0), Some(key(7)), None).unwrap(),
        CasOutcome::Mismatch {
            current: Some(key(1))
        }
    );
    assert!(
        client
            .compare_and_set(key(0), Some(key(1)), None)
            .unwrap()
            .applied()
    );
    let scanned: usize = client
        .scan(ScanOptions::default())
        .map(|page| page.unwrap().entries.len())
        .sum();
    assert_eq!(scanned, 399);

    drop(client);
    server_rt.block_on(server.stop()).unwrap();
}
