//! Pipelined commands: sent in one write, answered in order.

use super::commands::text;
use super::{Conn, Reply, bulk, ok, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_commands_are_answered_in_order() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    let mut batch = Vec::new();
    for i in 1..=100u128 {
        batch.extend(Conn::encode(&[b"SET", &text(i), &text(i + 1000)]));
        batch.extend(Conn::encode(&[b"GET", &text(i)]));
        batch.extend(Conn::encode(&[b"GET", &text(i + 5000)]));
    }
    batch.extend(Conn::encode(&[b"DBSIZE"]));
    c.send_raw(&batch).await;
    for i in 1..=100u128 {
        assert_eq!(c.read().await.unwrap(), ok(), "SET {i}");
        assert_eq!(c.read().await.unwrap(), bulk(&text(i + 1000)), "GET {i}");
        assert_eq!(
            c.read().await.unwrap(),
            Reply::Bulk(None),
            "GET missing {i}"
        );
    }
    assert_eq!(c.read().await.unwrap(), Reply::Int(100));
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_split_across_writes_is_answered_once_complete() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    let set = Conn::encode(&[b"SET", &text(1), &text(2)]);
    let ping = Conn::encode(&[b"PING"]);
    for b in set.iter().chain(&ping) {
        c.send_raw(&[*b]).await;
    }
    assert_eq!(c.read().await.unwrap(), ok());
    assert_eq!(c.read().await.unwrap(), Reply::Simple("PONG".into()));
    // An inline command, as typed into telnet.
    c.send_raw(b"PING\r\n").await;
    assert_eq!(c.read().await.unwrap(), Reply::Simple("PONG".into()));
    s.stop().await.unwrap();
}

/// The applied LSN, from `INFO stats`.
async fn applied_lsn(c: &mut Conn) -> u64 {
    let info = c.call(&[b"INFO", b"stats"]).await;
    let text = std::str::from_utf8(info.bytes()).unwrap().to_string();
    text.lines()
        .find_map(|l| l.strip_prefix("applied_lsn:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Plain SETs pipelined one after another are one write batch (one LSN
/// per `--max-write-ops` of them),
/// each answered as alone and in order: a bad one gets its error and is
/// left out, a key set twice keeps the later value, and the command after
/// the run sees every write of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_plain_sets_are_one_batch_answered_one_by_one() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    let before = applied_lsn(&mut c).await;
    let mut batch = Vec::new();
    for i in 1..=50u128 {
        batch.extend(Conn::encode(&[b"SET", &text(i), &text(i + 1000)]));
    }
    batch.extend(Conn::encode(&[b"SET", b"not-a-uuid", &text(7)]));
    batch.extend(Conn::encode(&[b"set", &text(1), &text(4242)]));
    batch.extend(Conn::encode(&[b"GET", &text(1)]));
    batch.extend(Conn::encode(&[b"DBSIZE"]));
    c.send_raw(&batch).await;
    for i in 1..=50u128 {
        assert_eq!(c.read().await.unwrap(), ok(), "SET {i}");
    }
    let bad = c.read().await.unwrap();
    assert!(bad.error().contains("not a UUID"), "{bad:?}");
    assert_eq!(c.read().await.unwrap(), ok(), "the second SET of key 1");
    assert_eq!(
        c.read().await.unwrap(),
        bulk(&text(4242)),
        "the later value"
    );
    assert_eq!(c.read().await.unwrap(), Reply::Int(50));
    // Runs of at most --max-write-ops (10 in the test kit): the 52 SETs
    // are 6 batches, one more for each time the server's read split them.
    let batches = applied_lsn(&mut c).await - before;
    assert!(
        (6..=10).contains(&batches),
        "52 pipelined SETs took {batches} batches"
    );
    // A SET with an option breaks a run: it decides on what the run wrote.
    let mut batch = Vec::new();
    batch.extend(Conn::encode(&[b"SET", &text(60), &text(1)]));
    batch.extend(Conn::encode(&[b"SET", &text(60), &text(2), b"NX"]));
    batch.extend(Conn::encode(&[b"SET", &text(61), &text(3)]));
    c.send_raw(&batch).await;
    assert_eq!(c.read().await.unwrap(), ok());
    assert_eq!(c.read().await.unwrap(), Reply::Bulk(None), "NX saw the run");
    assert_eq!(c.read().await.unwrap(), ok());
    assert_eq!(c.call(&[b"GET", &text(60)]).await, bulk(&text(1)));
    s.stop().await.unwrap();
}
