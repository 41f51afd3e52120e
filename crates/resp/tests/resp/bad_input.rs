//! Bad input: answered with an error, never a panic, never memory for
//! what a header only announces; a protocol error closes the connection,
//! as Redis closes it, and the server goes on serving.

use super::{Conn, Reply, RespServer, server};

/// The server still answers a new connection.
async fn still_serves(s: &RespServer) {
    let mut c = s.connect().await;
    assert_eq!(c.call(&[b"PING"]).await, Reply::Simple("PONG".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_or_empty_array_is_skipped_without_an_answer() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    c.send_raw(b"*-1\r\n*0\r\n").await;
    assert_eq!(c.call(&[b"PING"]).await, Reply::Simple("PONG".into()));
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_bulk_or_array_header_is_refused_and_the_connection_closed() {
    let (_dir, s) = server().await;
    for (bytes, says) in [
        (
            &b"*1\r\n$999999999999\r\n"[..],
            "bulk string of 999999999999 bytes",
        ),
        (b"*2\r\n$3\r\nGET\r\n$-5\r\n", "invalid bulk length"),
        (b"*999999999999\r\n", "999999999999 arguments"),
        (b"*1\r\n:12\r\n", "expected '$'"),
        (b"*x\r\n", "invalid multibulk length"),
        (b"*1\r\n$3\r\nGETxx", "not followed by CRLF"),
    ] {
        let mut c = s.connect().await;
        c.send_raw(bytes).await;
        let e = c.read().await.unwrap();
        assert!(e.error().starts_with("ERR Protocol error: "), "{e:?}");
        assert!(e.error().contains(says), "{e:?} should say {says:?}");
        assert_eq!(c.read().await, None, "closed after {bytes:?}");
    }
    still_serves(&s).await;
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_frame_gets_no_answer_and_harms_nothing() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    c.send_raw(b"*2\r\n$3\r\nGET\r\n$36\r\n0123").await;
    drop(c);
    // A long line that never ends is refused once over the limit.
    let mut c = s.connect().await;
    c.send_raw(&vec![b'a'; 70 << 10]).await;
    let e = c.read().await.unwrap();
    assert!(e.error().contains("too big inline request"), "{e:?}");
    assert_eq!(c.read().await, None);
    still_serves(&s).await;
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_is_not_a_uuid_is_an_error_that_says_so_and_the_connection_goes_on() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    let e = c.call(&[b"GET", b"user:1000"]).await;
    assert!(
        e.error().starts_with("ERR the key is not a UUID") && e.error().contains("got 9 bytes"),
        "{e:?}"
    );
    let e = c
        .call(&[b"SET", b"67e55044-10b1-426f-9247-bb680e5fe0c8", b"shard-1"])
        .await;
    assert!(
        e.error().starts_with("ERR the value is not a UUID"),
        "{e:?}"
    );
    let e = c
        .call(&[b"GET", b"00000000-0000-0000-0000-000000000000"])
        .await;
    assert!(e.error().contains("key"), "the nil key is reserved: {e:?}");
    let e = c
        .call(&[b"MGET", b"67e55044-10b1-426f-9247-bb680e5fe0c8", b"x"])
        .await;
    assert!(e.error().contains("not a UUID"), "{e:?}");
    assert_eq!(c.call(&[b"PING"]).await, Reply::Simple("PONG".into()));
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_never_stops_the_server() {
    let (_dir, s) = server().await;
    let garbage: [&[u8]; 6] = [
        b"\x00\x01\x02\r\n",
        b"$5\r\nhello\r\n",
        b"*1\r\n$4\r\nPING\r\n*1\r\n*1\r\n",
        b"*3\r\n$3\r\nSET\r\n$16\r\n0123456789abcdef\r\n$16\r\n",
        b"\r\n\r\n\r\n",
        b"*-99999999999999999999\r\n",
    ];
    for g in garbage {
        let mut c = Conn::connect(s.addr).await;
        c.send_raw(g).await;
        drop(c);
    }
    still_serves(&s).await;
    s.stop().await.unwrap();
}
