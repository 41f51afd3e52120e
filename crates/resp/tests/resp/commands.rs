//! Every command, as a Redis client sends it.

use std::collections::HashSet;

use uuid::Uuid;

use super::{Conn, Reply, RespServer, bulk, ok, server};

/// A key's 36-character text form, distinct per `i`.
pub fn text(i: u128) -> Vec<u8> {
    Uuid::from_u128((0x1000 << 112) | i)
        .hyphenated()
        .to_string()
        .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_set_mget_exists_del_and_dbsize_answer_as_redis_does() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    let (k, v, missing) = (text(1), text(2), text(3));
    assert_eq!(c.call(&[b"PING"]).await, Reply::Simple("PONG".into()));
    // `redis-cli --pipe` ends with an ECHO of 20 random bytes and waits
    // for them to come back.
    let marker = [0u8, 0xff, b'\r', b'\n', 7, 200];
    assert_eq!(
        c.call(&[b"ECHO", &marker]).await,
        Reply::Bulk(Some(marker.to_vec()))
    );
    assert_eq!(c.call(&[b"ping", b"hi"]).await, bulk(b"hi"));
    assert_eq!(c.call(&[b"SET", &k, &v]).await, ok());
    assert_eq!(c.call(&[b"GET", &k]).await, bulk(&v));
    // A raw key is answered with the raw value.
    let raw = Uuid::parse_str(std::str::from_utf8(&k).unwrap()).unwrap();
    let raw_v = Uuid::parse_str(std::str::from_utf8(&v).unwrap()).unwrap();
    assert_eq!(
        c.call(&[b"GET", raw.as_bytes()]).await,
        bulk(raw_v.as_bytes())
    );
    assert_eq!(c.call(&[b"GET", &missing]).await, Reply::Bulk(None));
    assert_eq!(
        c.call(&[b"MGET", &k, &missing, raw.as_bytes()]).await,
        Reply::Array(Some(vec![
            bulk(&v),
            Reply::Bulk(None),
            bulk(raw_v.as_bytes())
        ]))
    );
    assert_eq!(c.call(&[b"EXISTS", &k, &k, &missing]).await, Reply::Int(2));
    assert_eq!(c.call(&[b"DBSIZE"]).await, Reply::Int(1));
    assert_eq!(c.call(&[b"DEL", &k, &missing, &k]).await, Reply::Int(1));
    assert_eq!(c.call(&[b"DEL", &k]).await, Reply::Int(0));
    assert_eq!(c.call(&[b"GET", &k]).await, Reply::Bulk(None));
    assert_eq!(c.call(&[b"DBSIZE"]).await, Reply::Int(0));
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_nx_sets_only_an_absent_key_and_xx_only_a_present_one() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    let (k, v1, v2, other) = (text(1), text(2), text(3), text(4));
    assert_eq!(c.call(&[b"SET", &k, &v1, b"NX"]).await, ok());
    assert_eq!(c.call(&[b"SET", &k, &v2, b"nx"]).await, Reply::Bulk(None));
    assert_eq!(c.call(&[b"GET", &k]).await, bulk(&v1));
    assert_eq!(
        c.call(&[b"SET", &other, &v1, b"XX"]).await,
        Reply::Bulk(None)
    );
    assert_eq!(c.call(&[b"EXISTS", &other]).await, Reply::Int(0));
    assert_eq!(c.call(&[b"SET", &k, &v2, b"XX"]).await, ok());
    assert_eq!(c.call(&[b"GET", &k]).await, bulk(&v2));
    let e = c.call(&[b"SET", &k, &v1, b"NX", b"XX"]).await;
    assert_eq!(e.error(), "ERR syntax error");
    let e = c.call(&[b"SET", &k, &v1, b"EX", b"10"]).await;
    assert!(e.error().contains("no expiry"), "{e:?}");
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_ifeq_and_delifeq_move_an_entry_only_from_the_value_expected() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    let (k, shard_a, shard_b, shard_c, absent) = (text(1), text(2), text(3), text(4), text(5));
    assert_eq!(c.call(&[b"SET", &k, &shard_a]).await, ok());
    // A move from the shard it is on applies; one from a stale view does not.
    assert_eq!(
        c.call(&[b"SET", &k, &shard_b, b"IFEQ", &shard_a]).await,
        ok()
    );
    assert_eq!(
        c.call(&[b"SET", &k, &shard_c, b"ifeq", &shard_a]).await,
        Reply::Bulk(None)
    );
    assert_eq!(c.call(&[b"GET", &k]).await, bulk(&shard_b));
    // An absent key stays absent, as in Valkey.
    assert_eq!(
        c.call(&[b"SET", &absent, &shard_a, b"IFEQ", &shard_a])
            .await,
        Reply::Bulk(None)
    );
    assert_eq!(c.call(&[b"EXISTS", &absent]).await, Reply::Int(0));
    // DELIFEQ deletes only the value expected.
    assert_eq!(c.call(&[b"DELIFEQ", &k, &shard_a]).await, Reply::Int(0));
    assert_eq!(c.call(&[b"GET", &k]).await, bulk(&shard_b));
    assert_eq!(c.call(&[b"DELIFEQ", &k, &shard_b]).await, Reply::Int(1));
    assert_eq!(c.call(&[b"GET", &k]).await, Reply::Bulk(None));
    assert_eq!(c.call(&[b"DELIFEQ", &k, &shard_b]).await, Reply::Int(0));
    // Bad shapes get Redis's words.
    let e = c.call(&[b"SET", &k, &shard_a, b"IFEQ"]).await;
    assert_eq!(e.error(), "ERR syntax error");
    let e = c
        .call(&[b"SET", &k, &shard_a, b"NX", b"IFEQ", &shard_b])
        .await;
    assert_eq!(e.error(), "ERR syntax error");
    let e = c
        .call(&[b"SET", &k, &shard_a, b"IFEQ", b"not-a-uuid"])
        .await;
    assert!(e.error().contains("not a UUID"), "{e:?}");
    let e = c.call(&[b"DELIFEQ", &k]).await;
    assert!(e.error().contains("wrong number of arguments"), "{e:?}");
    // A single node has no replicas to wait for: WAIT answers 0 at once.
    let started = std::time::Instant::now();
    assert_eq!(c.call(&[b"WAIT", b"1", b"5000"]).await, Reply::Int(0));
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    let e = c.call(&[b"WAIT", b"1", b"-1"]).await;
    assert_eq!(e.error(), "ERR timeout is negative");
    let e = c.call(&[b"WAIT", b"one", b"0"]).await;
    assert_eq!(e.error(), "ERR value is not an integer or out of range");
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_3_switches_the_connection_to_resp3_and_hello_2_back() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    let (k, v, missing) = (text(1), text(2), text(3));
    assert_eq!(c.call(&[b"SET", &k, &v]).await, ok());
    let Reply::Map(fields) = c.call(&[b"HELLO", b"3"]).await else {
        panic!("HELLO 3 answers a map");
    };
    let proto = fields.iter().position(|f| *f == bulk(b"proto")).unwrap();
    assert_eq!(fields[proto + 1], Reply::Int(3));
    // RESP3's null; everything else reads as in RESP2.
    assert_eq!(c.call(&[b"GET", &missing]).await, Reply::Null);
    assert_eq!(
        c.call(&[b"MGET", &k, &missing]).await,
        Reply::Array(Some(vec![bulk(&v), Reply::Null]))
    );
    assert_eq!(c.call(&[b"SET", &k, &v, b"NX"]).await, Reply::Null);
    assert_eq!(c.call(&[b"CLIENT", b"GETNAME"]).await, Reply::Null);
    assert_eq!(c.call(&[b"EXISTS", &k]).await, Reply::Int(1));
    // Another connection still speaks RESP2.
    let mut other = s.connect().await;
    assert_eq!(other.call(&[b"GET", &missing]).await, Reply::Bulk(None));
    assert!(!c.call(&[b"HELLO", b"2"]).await.items().is_empty());
    assert_eq!(c.call(&[b"GET", &missing]).await, Reply::Bulk(None));
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mset_writes_all_pairs_and_scan_returns_each_key_exactly_once() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    let keys: Vec<Vec<u8>> = (1..=300).map(text).collect();
    // The test kit's limit is 10 operations per write.
    for chunk in keys.chunks(10) {
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        for k in chunk {
            args.push(k);
            args.push(k);
        }
        assert_eq!(c.call(&args).await, ok());
    }
    assert_eq!(c.call(&[b"DBSIZE"]).await, Reply::Int(300));
    let too_many: Vec<&[u8]> = std::iter::once(&b"MSET"[..])
        .chain(keys[..11].iter().flat_map(|k| [&k[..], &k[..]]))
        .collect();
    let e = c.call(&too_many).await;
    assert!(e.error().contains("--max-write-ops"), "{e:?}");
    let want: HashSet<Vec<u8>> = keys.iter().cloned().collect();
    for count in [None, Some(&b"1"[..]), Some(b"7"), Some(b"1000")] {
        let mut cursor = b"0".to_vec();
        let mut got = Vec::new();
        let mut calls = 0;
        loop {
            let mut args: Vec<&[u8]> = vec![b"SCAN", &cursor];
            if let Some(n) = count {
                args.extend([&b"COUNT"[..], n]);
            }
            let r = c.call(&args).await;
            let [next, page] = r.items() else {
                panic!("{r:?}")
            };
            got.extend(page.items().iter().map(|k| k.bytes().to_vec()));
            cursor = next.bytes().to_vec();
            calls += 1;
            if cursor == b"0" {
                break;
            }
        }
        assert_eq!(got.len(), keys.len(), "count {count:?}: each key once");
        assert_eq!(got.into_iter().collect::<HashSet<_>>(), want);
        if count == Some(b"1") {
            assert!(calls > 10, "COUNT 1 pages: {calls} calls");
        }
    }
    // Another connection resumes a cursor without the first one's copy.
    let r = c.call(&[b"SCAN", b"0", b"COUNT", b"5"]).await;
    let next = r.items()[0].bytes().to_vec();
    let mut other = s.connect().await;
    let r2 = other.call(&[b"SCAN", &next, b"COUNT", b"5"]).await;
    assert!(!r2.items()[1].items().is_empty());
    let e = c.call(&[b"SCAN", b"99999999999999999"]).await;
    assert_eq!(e.error(), "ERR invalid cursor");
    let e = c.call(&[b"SCAN", b"0", b"MATCH", b"a*"]).await;
    assert!(e.error().contains("MATCH"), "{e:?}");
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_command_client_select_hello_and_quit_answer_what_clients_expect() {
    let (_dir, s) = server().await;
    let mut c = s.connect().await;
    assert_eq!(c.call(&[b"SET", &text(1), &text(2)]).await, ok());
    let info = c.call(&[b"INFO"]).await;
    let info = std::str::from_utf8(info.bytes()).unwrap().to_string();
    for want in [
        "# Server\r\n",
        "# Keyspace\r\ndb0:keys=1,",
        "# Stats\r\n",
        "entries:1\r\n",
    ] {
        assert!(info.contains(want), "{want:?} in {info}");
    }
    let keyspace = c.call(&[b"INFO", b"keyspace"]).await;
    assert!(
        !std::str::from_utf8(keyspace.bytes())
            .unwrap()
            .contains("# Stats")
    );
    assert_eq!(c.call(&[b"COMMAND", b"COUNT"]).await, Reply::Int(19));
    assert_eq!(c.call(&[b"COMMAND"]).await.items().len(), 19);
    let get = c.call(&[b"COMMAND", b"INFO", b"get", b"nope"]).await;
    assert_eq!(get.items()[0].items()[0], Reply::Simple("get".into()));
    assert_eq!(get.items()[1], Reply::Array(None));
    assert_eq!(
        c.call(&[b"COMMAND", b"DOCS"]).await,
        Reply::Array(Some(vec![]))
    );
    assert_eq!(c.call(&[b"CLIENT", b"SETNAME", b"shard-7"]).await, ok());
    assert_eq!(c.call(&[b"CLIENT", b"GETNAME"]).await, bulk(b"shard-7"));
    assert_eq!(
        c.call(&[b"CLIENT", b"SETINFO", b"LIB-NAME", b"x"]).await,
        ok()
    );
    assert_eq!(c.call(&[b"SELECT", b"0"]).await, ok());
    let e = c.call(&[b"SELECT", b"1"]).await;
    assert_eq!(e.error(), "ERR DB index is out of range");
    let hello = c.call(&[b"HELLO", b"2"]).await;
    let fields = hello.items();
    let proto = fields.iter().position(|f| *f == bulk(b"proto")).unwrap();
    assert_eq!(fields[proto + 1], Reply::Int(2));
    let e = c.call(&[b"HELLO", b"4"]).await;
    assert!(e.error().starts_with("NOPROTO"), "{e:?}");
    let e = c.call(&[b"FLUSHALL", b"ASYNC"]).await;
    assert_eq!(
        e.error(),
        "ERR unknown command 'FLUSHALL', with args beginning with: 'ASYNC' "
    );
    let e = c.call(&[b"GET"]).await;
    assert_eq!(e.error(), "ERR wrong number of arguments for 'get' command");
    assert_eq!(c.call(&[b"QUIT"]).await, ok());
    assert_eq!(c.read().await, None);
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_durable_and_the_same_entry_grpc_serves() {
    let dir = tempfile::tempdir().unwrap();
    let fsync_always = |c: &mut uuidmap_server::ServeConfig| {
        c.fsync = uuidmap_engine::writer::FsyncPolicy::Always;
    };
    let s = RespServer::start(dir.path(), fsync_always).await;
    let (k, v) = (text(1), text(2));
    let mut c = s.connect().await;
    assert_eq!(c.call(&[b"SET", &k, &v]).await, ok());
    // gRPC reads the entry RESP wrote.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", s.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = uuidmap_server::proto::v1::uuid_map_client::UuidMapClient::new(channel);
    let key = Uuid::parse_str(std::str::from_utf8(&k).unwrap()).unwrap();
    let answer = grpc
        .get(uuidmap_server::proto::v1::GetRequest {
            key: key.as_bytes().to_vec().into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let value = Uuid::parse_str(std::str::from_utf8(&v).unwrap()).unwrap();
    assert_eq!(answer.value.as_deref(), Some(&value.as_bytes()[..]));
    drop(c);
    s.stop().await.unwrap();
    let s = RespServer::start(dir.path(), fsync_always).await;
    let mut c: Conn = s.connect().await;
    assert_eq!(c.call(&[b"GET", &k]).await, bulk(&v));
    s.stop().await.unwrap();
}
