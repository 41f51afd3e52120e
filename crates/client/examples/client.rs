//! The client SDK against a running server: put, get (auto-batched),
//! lookup, compare-and-set with its two failures, and a filtered scan.
//!
//! ```sh
//! cargo run --release -- serve &
//! cargo run --release -p uuidmap-client --example client -- http://127.0.0.1:7878
//! ```

use std::time::Duration;

use uuid::Uuid;
use uuidmap_client::{CasOutcome, Client, ClientError, ScanOptions};

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let server = std::env::args()
        .nth(1)
        .unwrap_or_else(|| uuidmap_client::DEFAULT_SERVER.to_string());
    let client = Client::builder()
        .endpoints([server])
        .timeout(Duration::from_secs(2))
        .build()?;

    // Ten files on one shard.
    let shard = Uuid::new_v4();
    let files: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    for f in &files {
        client.put(*f, shard).await?;
    }
    println!(
        "put 10 files on shard {shard}; last LSN {}",
        client.written_lsn()
    );

    // Read-your-writes: these see the puts above on any endpoint.
    assert_eq!(client.get(files[0]).await?, Some(shard));
    let found = client.lookup(&files).await?;
    assert!(found.iter().all(|v| *v == Some(shard)));
    println!("get and lookup see all 10");

    // Move one file, only if it is still where we put it.
    let new_shard = Uuid::new_v4();
    let moved = client
        .compare_and_set(files[0], Some(shard), Some(new_shard))
        .await?;
    println!("moved {} to {new_shard}: {moved:?}", files[0]);
    match client
        .compare_and_set(files[0], Some(shard), Some(Uuid::new_v4()))
        .await
    {
        Ok(CasOutcome::Mismatch { current }) => {
            println!("a second move from {shard} finds {current:?}: nothing changed")
        }
        Err(ClientError::Undetermined { current, .. }) => {
            println!("the answer was lost; the file is now on {current:?}")
        }
        other => println!("unexpected: {other:?}"),
    }

    // Every file still on `shard` (the scan resumes by itself after a
    // transient failure).
    let mut scan = client.scan(ScanOptions {
        values: vec![shard],
        ..Default::default()
    });
    let mut on_shard = 0;
    while let Some(page) = scan.next_page().await? {
        on_shard += page.entries.len();
    }
    println!("{on_shard} files are still on {shard}");
    println!("client counters: {:?}", client.counters());
    Ok(())
}
