//! A replica group whose members each serve the Redis protocol: a
//! follower sends a write to the leader's RESP port, which the membership
//! records, so a client that follows `MOVED` lands its write.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use uuidmap_resp::RespFrontEnd;
use uuidmap_server::{ServeError, ServerParts};
use uuidmap_testkit::server::group_member_config;

use super::commands::text;
use super::{Conn, Reply, bulk, ok};

/// A member: its RESP port, and how to stop it.
struct Member {
    resp: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

async fn any() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

/// Three members on loopback, each with a RESP port its membership entry
/// names; member 1 makes the group.
async fn start_group(dirs: &[tempfile::TempDir]) -> Vec<Member> {
    let mut listeners = Vec::new();
    for _ in dirs {
        listeners.push((any().await, any().await, any().await));
    }
    let addrs: Vec<(SocketAddr, SocketAddr)> = listeners
        .iter()
        .map(|(g, r, _)| (g.local_addr().unwrap(), r.local_addr().unwrap()))
        .collect();
    let mut members = Vec::new();
    for (i, (grpc, raft, resp)) in listeners.into_iter().enumerate() {
        let mut config = group_member_config(dirs[i].path(), i, &addrs);
        let resp_addr = resp.local_addr().unwrap();
        config.resp_listen = Some(resp_addr);
        config.cluster.as_mut().unwrap().resp_advertise = resp_addr.to_string();
        let front_end = RespFrontEnd::on(resp, &config).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let parts = ServerParts::new(grpc, config)
            .raft(raft)
            .front_end(Box::new(front_end));
        let task = tokio::spawn(parts.serve(async {
            let _ = stopped.await;
        }));
        members.push(Member {
            resp: resp_addr,
            stop,
            task,
        });
    }
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_sends_a_write_to_the_leaders_resp_port_and_it_lands_there() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let members = start_group(&dirs).await;
    let (k, v) = (text(1), text(2));
    // Until a leader is known, a member answers CLUSTERDOWN; then each
    // follower names the leader's RESP port.
    let until = Instant::now() + Duration::from_secs(20);
    let (leader, moved) = loop {
        let mut leader = None;
        let mut moved = Vec::new();
        for (i, m) in members.iter().enumerate() {
            match Conn::connect(m.resp).await.call(&[b"SET", &k, &v]).await {
                Reply::Simple(s) if s == "OK" => leader = Some(i),
                Reply::Error(e) if e.starts_with("MOVED ") => moved.push(e),
                Reply::Error(e) if e.starts_with("CLUSTERDOWN ") => {}
                other => panic!("member {} answered {other:?}", i + 1),
            }
        }
        if let Some(l) = leader
            && moved.len() == 2
        {
            break (l, moved);
        }
        assert!(Instant::now() < until, "no leader: {moved:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let expected = format!("MOVED 0 {}", members[leader].resp);
    assert_eq!(moved, vec![expected.clone(), expected], "not the RESP port");
    // A client that follows the redirect writes there, and every member
    // then reads the write.
    let target: SocketAddr = moved[0]["MOVED 0 ".len()..].parse().unwrap();
    let v2 = text(3);
    let mut on_leader = Conn::connect(target).await;
    assert_eq!(on_leader.call(&[b"SET", &k, &v2]).await, ok());
    // WAIT: both followers come to hold the write (a majority already did
    // when it was answered); a follower refuses WAIT, as a Redis replica.
    assert_eq!(
        on_leader.call(&[b"WAIT", b"2", b"5000"]).await,
        Reply::Int(2)
    );
    let follower = members.iter().find(|m| m.resp != target).unwrap();
    let e = Conn::connect(follower.resp)
        .await
        .call(&[b"WAIT", b"1", b"100"])
        .await;
    assert!(e.error().contains("replica"), "{e:?}");
    for m in &members {
        assert_eq!(
            Conn::connect(m.resp).await.call(&[b"GET", &k]).await,
            bulk(&v2)
        );
    }
    for m in members {
        let _ = m.stop.send(());
        m.task.await.unwrap().unwrap();
    }
}
