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
