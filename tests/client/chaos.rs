//! A server process killed with SIGKILL and restarted on the same port,
//! under load from the client: reads never surface an error within their
//! deadline, every acknowledged put survives (fsync always), and a
//! compare-and-set is never applied twice: a model of each writer's
//! counter checks it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use uuid::Uuid;
use uuidmap_client::{CasOutcome, Client, ClientError, RetryClass};

use super::serve_child::{ServeChild, clear_uuidmap_env};
use super::{dead_addr, key};

fn counter_value(n: u64) -> Uuid {
    Uuid::from_u128(0xc0_0000_0000_0000_0000_0000_0000_0000 | u128::from(n + 1))
}

/// `uuidmap serve` on `port` (the same one after a restart), fsync always.
fn start(dir: &std::path::Path, port: u16) -> ServeChild {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_uuidmap"));
    cmd.args(["serve", "--metrics-listen", "off", "--fsync", "always"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir);
    clear_uuidmap_env(&mut cmd);
    ServeChild::start(cmd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_and_restart_under_load_loses_no_acknowledged_write_and_reads_see_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let port = dead_addr().port();
    let mut server = start(dir.path(), port);
    let client = Client::builder()
        .endpoints([format!("http://127.0.0.1:{port}")])
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    for i in 0..100 {
        client.put(key(i), key(i + 1)).await.unwrap();
    }
    let counters: Vec<Uuid> = (0..2).map(|w| key(1_000_000 + w)).collect();
    for c in &counters {
        client.put(*c, counter_value(0)).await.unwrap();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for r in 0..8u64 {
        let (client, stop) = (client.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            let mut reads = 0u64;
            while !stop.load(SeqCst) {
                let i = (r * 7 + reads) % 100;
                let got = if reads.is_multiple_of(2) {
                    client.get(key(i)).await
                } else {
                    client.get_unary(key(i)).await
                };
                assert_eq!(
                    got.unwrap_or_else(|e| panic!("a read failed: {e}")),
                    Some(key(i + 1))
                );
                reads += 1;
            }
            reads
        }));
    }
    // Puts of fresh keys: the acknowledged ones must all survive.
    let putter = {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut i = 10_000;
            while !stop.load(SeqCst) {
                match client.put(key(i), key(i + 1)).await {
                    Ok(_) => acked.push(i),
                    Err(e) => assert_ne!(
                        e.retry_class(),
                        RetryClass::Final,
                        "a put failed for good: {e}"
                    ),
                }
                i += 1;
            }
            acked
        })
    };
    // Counters moved by compare-and-set, one writer each: the model is the
    // value the writer believes is there.
    let mut writers = Vec::new();
    for c in counters.clone() {
        let (client, stop) = (client.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut n = 0u64;
            let mut undetermined = 0;
            while !stop.load(SeqCst) {
                match client
                    .compare_and_set(c, Some(counter_value(n)), Some(counter_value(n + 1)))
                    .await
                {
                    Ok(CasOutcome::Applied { .. }) => n += 1,
                    Err(ClientError::Undetermined { current, .. }) => {
                        undetermined += 1;
                        // Applied once, or not at all: never twice.
                        if current == Some(counter_value(n + 1)) {
                            n += 1;
                        } else {
                            assert_eq!(current, Some(counter_value(n)), "the counter moved by itself");
                        }
                    }
                    Ok(CasOutcome::Mismatch { current }) => {
                        panic!("a compare-and-set was applied behind the writer's back: {current:?} after {n}")
                    }
                    Err(e) => assert_ne!(e.retry_class(), RetryClass::Final, "a compare-and-set failed for good: {e}"),
                }
            }
            (c, n, undetermined)
        }));
    }

    tokio::time::sleep(Duration::from_millis(800)).await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server = start(dir.path(), port);
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.store(true, SeqCst);

    for r in readers {
        assert!(r.await.unwrap() > 0);
    }
    let acked = putter.await.unwrap();
    assert!(!acked.is_empty());
    for i in &acked {
        assert_eq!(
            client.get(key(*i)).await.unwrap(),
            Some(key(i + 1)),
            "acknowledged put {i} lost"
        );
    }
    for w in writers {
        let (c, n, _) = w.await.unwrap();
        assert_eq!(
            client.get(c).await.unwrap(),
            Some(counter_value(n)),
            "the model and the server disagree"
        );
        assert!(n > 0);
    }
    server.stop();
}
