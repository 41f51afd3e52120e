//! The server over a failing disk, end to end: the real server on a
//! simulated disk (`SimIo`, given through `ServerParts::io`), called
//! through the generated client. Every write RPC and the admin snapshot
//! answer UNAVAILABLE with a message that says why, nothing refused is
//! applied, reads go on, and writes resume by themselves once space
//! returns.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::Code;
use tonic::transport::Channel;
use uuidmap::server::ServeError;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_admin_client::UuidMapAdminClient;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap_testkit::SimIo;
use uuidmap_testkit::server::{TestServer, b, config, member_config, put_op, u};

type Client = UuidMapClient<Channel>;

async fn start(io: &SimIo) -> TestServer {
    let mut c = config(Path::new("/data"));
    // The disk's capacity is counted to the byte: no spare WAL file.
    c.wal_preallocate = uuidmap::store::wal::Preallocate::Off;
    TestServer::start_on(c, Some(Arc::new(io.clone()))).await
}

async fn put(c: &mut Client, k: u128) -> Result<u64, tonic::Status> {
    c.put(pb::PutRequest {
        key: b(u(k)),
        value: b(u(k + 1000)),
    })
    .await
    .map(|r| r.into_inner().lsn)
}

async fn value(c: &mut Client, k: u128) -> Option<uuid::Uuid> {
    c.get(pb::GetRequest {
        key: b(u(k)),
        min_lsn: 0,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .value
    .map(|v| uuid::Uuid::from_slice(&v).unwrap())
}

/// Every write RPC (and Snapshot) on the failing disk: UNAVAILABLE, with
/// `says` in the message; nothing applied.
async fn every_write_is_unavailable(server: &TestServer, c: &mut Client, says: &str) {
    let check = |rpc: &str, r: Result<(), tonic::Status>| {
        let s = r.expect_err(rpc);
        assert_eq!(s.code(), Code::Unavailable, "{rpc}: {s:?}");
        assert!(s.message().contains(says), "{rpc}: {}", s.message());
    };
    check("Put", put(c, 900).await.map(drop));
    let delete = c.delete(pb::DeleteRequest { key: b(u(1)) }).await;
    check("Delete", delete.map(drop));
    let cas = c
        .compare_and_set(pb::CompareAndSetRequest {
            key: b(u(1)),
            expected: Some(b(u(1001))),
            new_value: Some(b(u(5))),
        })
        .await;
    check("CompareAndSet", cas.map(drop));
    let write = c
        .write(pb::WriteRequest {
            ops: vec![put_op(u(901), u(1)), put_op(u(902), u(1))],
        })
        .await;
    check("Write", write.map(drop));
    let snapshot = UuidMapAdminClient::new(server.channel().await)
        .snapshot(pb::SnapshotRequest {})
        .await;
    check("Snapshot", snapshot.map(drop));
    // Nothing of them was applied; reads are served.
    assert_eq!(
        value(c, 1).await,
        Some(u(1001)),
        "key 1 neither deleted nor moved"
    );
    for k in [900, 901, 902] {
        assert_eq!(value(c, k).await, None, "refused key {k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_makes_writes_and_snapshots_unavailable_keeps_reads_and_recovers() {
    let io = SimIo::new();
    let server = start(&io).await;
    let mut c = server.client().await;
    for k in 1..=20 {
        put(&mut c, k).await.unwrap();
    }
    UuidMapAdminClient::new(server.channel().await)
        .snapshot(pb::SnapshotRequest {})
        .await
        .expect("a snapshot with room to spare");

    // Fill the disk.
    io.set_capacity(Some(io.used_bytes() + 100));
    let mut acked = 20;
    let refused = loop {
        match put(&mut c, acked + 1).await {
            Ok(_) => acked += 1,
            Err(s) => break s,
        }
        assert!(acked < 10_000, "the disk never filled");
    };
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    // Nothing was logged: the outcome is known (not applied), so the
    // answer carries no `uuidmap-outcome: unknown`.
    assert!(
        refused.metadata().get("uuidmap-outcome").is_none(),
        "{refused:?}"
    );
    assert!(
        refused.message().contains("disk is full"),
        "{}",
        refused.message()
    );
    // A refused write leaves no partial record behind, so a smaller one
    // (a delete) might still fit in what is left: leave nothing.
    io.set_capacity(Some(io.used_bytes()));
    every_write_is_unavailable(&server, &mut c, "disk is full").await;
    for k in 1..=acked {
        assert_eq!(value(&mut c, k).await, Some(u(k + 1000)), "key {k}");
    }
    let stats = c.stats(pb::StatsRequest {}).await.unwrap().into_inner();
    assert!(stats.wal_failures >= 5, "{stats:?}");
    assert!(stats.snapshots_failed >= 1, "{stats:?}");

    // Space returns: writes resume without a restart.
    io.set_capacity(None);
    put(&mut c, 900)
        .await
        .expect("writes resume once there is space");
    drop(c);
    server.stop().await.unwrap();

    // Everything acknowledged is there after a restart on the same disk.
    let server = start(&io).await;
    let mut c = server.client().await;
    for k in (1..=acked).chain([900]) {
        assert_eq!(
            value(&mut c, k).await,
            Some(u(k + 1000)),
            "key {k} after restart"
        );
    }
    let stats = c.stats(pb::StatsRequest {}).await.unwrap().into_inner();
    assert_eq!(stats.entries, acked as u64 + 1);
    drop(c);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_fails_every_call_makes_writes_unavailable_and_the_server_still_stops() {
    let io = SimIo::new();
    let server = start(&io).await;
    let mut c = server.client().await;
    put(&mut c, 1).await.unwrap();
    // From now on every write, sync, create or rename fails (an I/O error).
    io.set_crash_after(Some(0));
    every_write_is_unavailable(&server, &mut c, "was not").await;
    drop(c);
    // The final snapshot fails too; the stop still ends, and says so.
    match server.stop().await {
        Err(ServeError::FinalSnapshot(e)) => {
            let message = ServeError::FinalSnapshot(e).to_string();
            assert!(message.contains("Nothing is lost"), "{message}");
        }
        other => panic!("a stop whose final snapshot failed: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_marks_the_outcome_of_the_write_unknown() {
    let io = SimIo::new();
    let mut config = config(Path::new("/data"));
    config.wal_preallocate = uuidmap::store::wal::Preallocate::Off;
    config.fsync = uuidmap::writer::FsyncPolicy::Always;
    let server = TestServer::start_on(config, Some(Arc::new(io.clone()))).await;
    let mut c = server.client().await;
    put(&mut c, 1).await.unwrap();
    io.set_sync_failure_after(Some(0));
    let failed = put(&mut c, 2).await.unwrap_err();
    assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
    assert!(
        failed.message().contains("may or may not survive"),
        "{failed:?}"
    );
    assert_eq!(
        failed
            .metadata()
            .get("uuidmap-outcome")
            .map(|v| v.to_str().unwrap()),
        Some("unknown"),
        "the batch may have reached the disk: a client must not resend it blindly"
    );
    drop(c);
    // The server accepts no more writes; its stop may report the failed
    // final snapshot.
    let _ = server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_on_a_full_disk_says_to_free_space_and_start_again() {
    let io = SimIo::new();
    let server = start(&io).await;
    let mut c = server.client().await;
    put(&mut c, 1).await.unwrap();
    drop(c);
    server.stop().await.unwrap();
    // No room for the new WAL file a start writes.
    io.set_capacity(Some(io.used_bytes()));
    let e = start(&io).await.stop().await.expect_err("no room to start");
    let message = e.to_string();
    assert!(matches!(e, ServeError::Open(_)), "{message}");
    assert!(
        message.contains("disk is full") && message.contains("start again"),
        "{message}"
    );
    // The process exits: nothing resumes by itself.
    assert!(!message.contains("resume"), "{message}");
}

/// A member's Raft log on a full disk: openraft stops on the storage
/// error, and the server stops by itself and says why, instead of serving
/// on with a log it cannot write (a supervisor starts it again once there
/// is room, and it catches up from its group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_raft_log_cannot_be_written_stops_and_says_why() {
    let io = SimIo::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let raft = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (a, ra) = (listener.local_addr().unwrap(), raft.local_addr().unwrap());
    let mut c = member_config(Path::new("/data"), 1, a, ra, vec![], true);
    c.wal_preallocate = uuidmap::store::wal::Preallocate::Off;
    let server = TestServer::start_member_on(c, listener, raft, Some(Arc::new(io.clone()))).await;
    let mut client = server.client().await;
    // The group of one takes writes once it has elected itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = put(&mut client, 1).await {
        assert!(
            Instant::now() < deadline,
            "the member never took a write: {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    io.set_capacity(Some(io.used_bytes()));
    let refused = tokio::time::timeout(Duration::from_secs(10), put(&mut client, 2))
        .await
        .expect("a write on a full disk is answered");
    assert!(
        refused.is_err(),
        "a write the log could not hold was acknowledged"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the member went on serving with a Raft log it cannot write"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(client);
    let e = server
        .stop()
        .await
        .expect_err("the member stopped on an error");
    let message = e.to_string();
    assert!(matches!(e, ServeError::RaftFailed(_)), "{message}");
    assert!(
        message.contains("space") || message.contains("full"),
        "{message}"
    );
}
