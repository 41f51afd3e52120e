//! A replica group of three `uuidmap serve` processes, its leader killed
//! with SIGKILL under write load from the client: another member takes
//! over and writes resume within a few seconds, every acknowledged write
//! is on the members left, and the killed member, started again on its
//! directory, catches up. `UUIDMAP_GROUP_KILLS` (default 1) sets how many
//! leaders are killed in a row, each started again before the next kill.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_client::Client;
use uuidmap_proto::v1 as pb;
use uuidmap_proto::v1::uuid_map_client::UuidMapClient;

use super::serve_child::{ServeChild, member_command};
use super::{dead_addr, key};

struct Member {
    id: u64,
    port: u16,
    raft_port: u16,
    dir: tempfile::TempDir,
}

fn start(m: &Member, all: &[Member]) -> ServeChild {
    let peers = all.iter().filter(|p| p.id != m.id).map(|p| {
        (
            p.id,
            format!("127.0.0.1:{}", p.raft_port),
            format!("http://127.0.0.1:{}", p.port),
        )
    });
    ServeChild::start(member_command(
        m.id,
        m.port,
        &format!("127.0.0.1:{}", m.raft_port),
        peers,
        m.dir.path(),
        m.id == 1,
    ))
}

/// Which member takes writes now (by trying one on each; up to 15 s).
async fn leader(members: &[Member], running: &[Option<ServeChild>]) -> usize {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        for (i, m) in members.iter().enumerate() {
            if running[i].is_none() {
                continue;
            }
            let one = Client::builder()
                .endpoints([format!("http://127.0.0.1:{}", m.port)])
                .timeout(Duration::from_millis(500))
                .build()
                .unwrap();
            if one.delete(key(u64::MAX - 1)).await.is_ok() {
                return i;
            }
        }
        assert!(Instant::now() < until, "no leader within 15 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads `keys` on the member at `port` once it has applied `lsn`.
async fn read_all(port: u16, lsn: u64, keys: &[u64]) -> Vec<Option<Uuid>> {
    let mut c = UuidMapClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();
    let mut out = Vec::new();
    for &k in keys {
        let mut r = tonic::Request::new(pb::GetRequest {
            key: key(k).as_bytes().to_vec().into(),
            min_lsn: lsn,
            ..Default::default()
        });
        r.set_timeout(Duration::from_secs(20));
        let v = c.get(r).await.unwrap().into_inner().value;
        out.push(v.map(|b| Uuid::from_slice(&b).unwrap()));
    }
    out
}

fn dir_of(m: &Member) -> &Path {
    m.dir.path()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_under_load_loses_no_acknowledged_write_and_comes_back() {
    let kills: usize = std::env::var("UUIDMAP_GROUP_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let members: Vec<Member> = (1..=3)
        .map(|id| Member {
            id,
            port: dead_addr().port(),
            raft_port: dead_addr().port(),
            dir: tempfile::tempdir().unwrap(),
        })
        .collect();
    let mut running: Vec<Option<ServeChild>> =
        members.iter().map(|m| Some(start(m, &members))).collect();
    let client = Client::builder()
        .endpoints(
            members
                .iter()
                .map(|m| format!("http://127.0.0.1:{}", m.port)),
        )
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    leader(&members, &running).await;

    // Writers of fresh keys, not marked idempotent: an answer is an
    // acknowledgement; a failure leaves the write's outcome unknown.
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let (client, stop) = (client.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut i = w * 1_000_000;
            while !stop.load(SeqCst) {
                if let Ok(lsn) = client.put(key(i), key(i + 7)).await {
                    acked.push((i, lsn, Instant::now()));
                }
                i += 1;
            }
            acked
        }));
    }

    let mut kill_times = Vec::new();
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let l = leader(&members, &running).await;
        running[l].take().expect("running").kill();
        kill_times.push(Instant::now());
        tokio::time::sleep(Duration::from_millis(3000)).await;
        // Started again on its directory and ports: it rejoins.
        running[l] = Some(start(&members[l], &members));
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, SeqCst);
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }

    // Writes resumed after each kill, within a few seconds.
    for (n, &t) in kill_times.iter().enumerate() {
        let first = acked
            .iter()
            .filter(|(_, _, at)| *at > t)
            .map(|(_, _, at)| at.duration_since(t))
            .min()
            .unwrap_or_else(|| panic!("no write acknowledged after kill {n}"));
        eprintln!("kill {n}: first acknowledged write {first:?} after the kill");
        assert!(first < Duration::from_secs(10), "kill {n}: {first:?}");
    }
    // Every acknowledged write is on every member, the restarted ones
    // included, once each has applied the last acknowledged LSN.
    let last = acked.iter().map(|(_, lsn, _)| *lsn).max().unwrap();
    let keys: Vec<u64> = acked.iter().map(|(k, _, _)| *k).collect();
    for m in &members {
        let got = read_all(m.port, last, &keys).await;
        for (k, v) in keys.iter().zip(got) {
            assert_eq!(
                v,
                Some(key(k + 7)),
                "member {} lost acknowledged key {k}",
                m.id
            );
        }
    }
    eprintln!(
        "{} writes acknowledged over {kills} leader kill(s)",
        acked.len()
    );
    for (m, r) in members.iter().zip(running) {
        let (status, log) = r.expect("running").stop();
        assert!(
            status.success(),
            "member {} ({:?}):\n{log}",
            m.id,
            dir_of(m)
        );
    }
}
