//! The server as a member of a replica group (`--node-id`), end to end
//! through the generated client: a group of one that serves and keeps its
//! data over a restart, three servers whose followers send writes to the
//! leader (UNAVAILABLE with `uuidmap-leader` metadata) and answer reads
//! once they applied the LSN asked for, and data directories refused in
//! the other mode.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tonic::Code;
use uuidmap::server::ServeConfig;
use uuidmap::server::ServeError;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_admin_client::UuidMapAdminClient;
use uuidmap::server::tls::RaftTlsFiles;
use uuidmap_testkit::server::pki::{self, Ca};
use uuidmap_testkit::server::{TestGroup, TestServer, b, cas_req, member_config, put_req, u};

async fn bind() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// `Get` of key `k` on `server`, once it has applied `min_lsn`.
async fn get_at(server: &TestServer, k: u128, min_lsn: u64) -> pb::GetResponse {
    server
        .client()
        .await
        .get(pb::GetRequest {
            key: b(u(k)),
            min_lsn,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

fn put(k: u128, v: u128) -> pb::PutRequest {
    put_req(u(k), u(v))
}

/// Puts until the server takes the write (its group has a leader and it
/// is it), up to 10 s; returns the LSN.
async fn put_when_leading(server: &TestServer, k: u128, v: u128) -> u64 {
    let mut c = server.client().await;
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match c.put(put(k, v)).await {
            Ok(r) => return r.into_inner().lsn,
            Err(s) if s.code() == Code::Unavailable && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(s) => panic!("the write was not taken: {s:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_one_serves_and_keeps_its_data_over_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ((l, a), (r, ra)) = (bind().await, bind().await);
    let server =
        TestServer::start_member(member_config(dir.path(), 1, a, ra, vec![], true), l, r).await;
    let lsn = put_when_leading(&server, 1, 0xa).await;
    let got = get_at(&server, 1, lsn).await;
    assert_eq!(got.value, Some(b(u(0xa))));
    assert!(got.applied_lsn >= lsn);
    let mut c = server.client().await;
    let cas = c
        .compare_and_set(cas_req(u(1), Some(u(0xb)), Some(u(0xc))))
        .await
        .unwrap()
        .into_inner();
    assert!(!cas.applied, "the value is 0xa, not 0xb");
    assert_eq!(cas.current, Some(b(u(0xa))));

    // Its change stream: the put, and nothing for the entries before it
    // (the group's first entries) or for the refused CAS.
    let mut watch = c
        .watch(pb::WatchRequest::default())
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.batches.len(), 1, "{first:?}");
    assert_eq!(first.batches[0].lsn, lsn);
    drop(watch);
    // A snapshot on request: the member's own, with its Raft meta.
    let mut admin = UuidMapAdminClient::new(server.channel().await);
    let snapshot = admin
        .snapshot(pb::SnapshotRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(snapshot.lsn >= lsn && snapshot.entries == 1, "{snapshot:?}");
    server.stop().await.expect("a clean stop");

    // Again on the same directory (new ports; --cluster-init still set,
    // and ignored): the index starts from the snapshot, and the Raft log
    // after it is applied.
    let ((l, a), (r, ra)) = (bind().await, bind().await);
    let server =
        TestServer::start_member(member_config(dir.path(), 1, a, ra, vec![], true), l, r).await;
    let later = put_when_leading(&server, 2, 0xb).await;
    assert!(later > lsn, "LSNs go on: {later} after {lsn}");
    let got = get_at(&server, 1, 0).await;
    assert_eq!(got.value, Some(b(u(0xa))), "kept over the restart");
    server.stop().await.expect("a clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_send_writes_to_the_leader_and_answer_reads_once_applied() {
    let group = TestGroup::start(3).await;
    let leader = group.leader().await;
    let lsn = group
        .member(leader)
        .unwrap()
        .client()
        .await
        .put(put(1, 0xa))
        .await
        .expect("the leader takes the write")
        .into_inner()
        .lsn;
    let urls = group.urls();
    let leader_url = urls[leader].clone();
    for i in 0..3 {
        if i == leader {
            continue;
        }
        let s = group.member(i).unwrap();
        let mut c = s.client().await;
        // A follower hears of the leader with its first heartbeat.
        let until = Instant::now() + Duration::from_secs(10);
        let refusal = loop {
            let e = c.put(put(2, 0xb)).await.unwrap_err();
            assert_eq!(e.code(), Code::Unavailable, "{e:?}");
            if e.metadata().get("uuidmap-leader").is_some() || Instant::now() > until {
                break e;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let md = refusal.metadata();
        assert_eq!(md.get("uuidmap-leader").unwrap(), leader_url.as_str());
        assert_eq!(
            md.get("uuidmap-leader-id").unwrap(),
            (leader + 1).to_string().as_str()
        );
        assert!(md.get("uuidmap-outcome").is_none(), "nothing was logged");
        assert!(
            refusal.message().contains("does not lead"),
            "{}",
            refusal.message()
        );
        // Reads with min_lsn wait until this member applied the write.
        let got = c
            .get(pb::GetRequest {
                key: b(u(1)),
                min_lsn: lsn,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.value, Some(b(u(0xa))));
        assert!(got.applied_lsn >= lsn);
        assert_eq!(
            c.get(pb::GetRequest {
                key: b(u(2)),
                min_lsn: 0,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .value,
            None,
            "the refused write is nowhere"
        );
    }
    group.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_is_served_only_in_the_mode_that_wrote_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    server.client().await.put(put(1, 1)).await.unwrap();
    server.stop().await.unwrap();
    let ((l, a), (r, ra)) = (bind().await, bind().await);
    let member =
        TestServer::start_member(member_config(dir.path(), 1, a, ra, vec![], true), l, r).await;
    let err = member.stop().await.unwrap_err();
    assert!(matches!(err, ServeError::Member(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("a single node's data") && text.contains("without --node-id"),
        "{text}"
    );

    let member_dir = tempfile::tempdir().unwrap();
    let ((l, a), (r, ra)) = (bind().await, bind().await);
    let member = TestServer::start_member(
        member_config(member_dir.path(), 1, a, ra, vec![], true),
        l,
        r,
    )
    .await;
    put_when_leading(&member, 1, 1).await;
    member.stop().await.unwrap();
    let single = TestServer::start(member_dir.path()).await;
    let err = single.stop().await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("replica group member") && text.contains("--node-id"),
        "{text}"
    );
    // Nor do `check` and `repair` read a member's log as a single node's.
    for command in ["check", "repair"] {
        let dir = member_dir.path().to_path_buf();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_uuidmap"))
                .arg(command)
                .arg("--data-dir")
                .arg(dir)
                .env_remove("UUIDMAP_DATA_DIR")
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command}: {out:?}");
        assert!(
            stderr.contains("Raft log of a replica group member"),
            "{command}: {stderr}"
        );
    }
}

/// Member `id`'s Raft TLS files, of `ca`, written in `dir`.
fn raft_tls_files(dir: &std::path::Path, ca: &Ca, id: u64) -> RaftTlsFiles {
    let leaf = ca.raft_node(id);
    RaftTlsFiles {
        cert: pki::write(dir, &format!("node-{id}.pem"), &leaf.cert),
        key: pki::write(dir, &format!("node-{id}.key"), &leaf.key),
        ca: pki::write(dir, "raft-ca.pem", &ca.pem),
    }
}

/// How a member on a non-loopback Raft address fares with `relax` applied
/// to its configuration: `Ok` if it served (and stopped cleanly).
async fn on_every_interface(relax: impl FnOnce(&mut ServeConfig)) -> Result<(), ServeError> {
    let dir = tempfile::tempdir().unwrap();
    let (l, a) = bind().await;
    let raft = TcpListener::bind("0.0.0.0:0").await.unwrap();
    let ra = raft.local_addr().unwrap();
    let mut c = member_config(&dir.path().join("data"), 1, a, ra, vec![], true);
    relax(&mut c);
    TestServer::start_member(c, l, raft).await.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_off_loopback_needs_raft_tls_or_raft_insecure_and_insecure_alone_does_not_do() {
    for relax in [(|_: &mut ServeConfig| {}) as fn(&mut ServeConfig), |c| {
        c.insecure = true
    }] {
        let err = on_every_interface(relax).await.unwrap_err();
        assert!(matches!(err, ServeError::RaftNotLoopback { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("--raft-tls-cert") && msg.contains("--raft-insecure"),
            "{msg}"
        );
    }
    on_every_interface(|c| c.cluster.as_mut().unwrap().raft_insecure = true)
        .await
        .expect("--raft-insecure serves plaintext Raft off loopback");
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::new("raft CA");
    let files = raft_tls_files(certs.path(), &ca, 1);
    on_every_interface(move |c| c.cluster.as_mut().unwrap().tls = Some(files))
        .await
        .expect("Raft TLS serves off loopback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_tls_files_that_do_not_name_the_member_stop_its_start() {
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::new("raft CA");
    let files = raft_tls_files(certs.path(), &ca, 2);
    let err = on_every_interface(move |c| c.cluster.as_mut().unwrap().tls = Some(files))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("node-2.pem") && msg.contains("node 1") && msg.contains("node-2.raft.uuidmap"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_with_raft_tls_serves_and_adds_a_member() {
    use uuidmap_client::Client;
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::new("raft CA");
    for id in 1..=4 {
        raft_tls_files(certs.path(), &ca, id);
    }
    let at = certs.path().to_path_buf();
    let configure = std::sync::Arc::new(move |c: &mut ServeConfig| {
        let cluster = c.cluster.as_mut().unwrap();
        let id = cluster.node_id;
        cluster.tls = Some(RaftTlsFiles {
            cert: at.join(format!("node-{id}.pem")),
            key: at.join(format!("node-{id}.key")),
            ca: at.join("raft-ca.pem"),
        });
    });
    let mut group = TestGroup::start_configured(3, configure).await;
    group.leader().await;
    let client = Client::builder()
        .endpoints(group.urls())
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .unwrap();
    for k in 1..=10u128 {
        client.put(u(k), u(k + 100)).await.unwrap();
    }
    // The new member proves it is node 4 (Identify over TLS), then takes
    // the leader's entries.
    let fourth = group.start_extra().await;
    let (raft, url) = group.addresses(fourth);
    client.add_learner(4, &raft, &url).await.unwrap();
    let m = client.promote(&[4]).await.unwrap();
    assert_eq!(m.voters, vec![1, 2, 3, 4]);
    let got = get_at(group.member(fourth).unwrap(), 7, m.lsn).await;
    assert_eq!(got.value, Some(b(u(107))));
    group.stop().await;
}

async fn cluster_stats(server: &TestServer) -> pb::ClusterStats {
    server
        .client()
        .await
        .stats(pb::StatsRequest {})
        .await
        .unwrap()
        .into_inner()
        .cluster
        .expect("a member says so")
}

/// A member's view of the group once openraft's metrics show `lsn`
/// applied. The engine applies an entry (and serves reads at its LSN)
/// before openraft's core hears back and publishes its metrics, so the
/// raft view may trail a read that already sees the write by a moment.
async fn cluster_stats_applied(server: &TestServer, lsn: u64) -> pb::ClusterStats {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let s = cluster_stats(server).await;
        if s.applied_index >= Some(lsn) || Instant::now() > until {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_cluster_status_show_each_members_view_of_the_group() {
    let group = TestGroup::start(3).await;
    let leader = group.leader().await;
    let urls = group.urls();
    let lsn = group
        .member(leader)
        .unwrap()
        .client()
        .await
        .put(put(3, 3))
        .await
        .unwrap()
        .into_inner()
        .lsn;
    let follower = (leader + 1) % 3;
    // The follower applies the write before it is asked.
    get_at(group.member(follower).unwrap(), 3, lsn).await;
    // The engine's applied LSN covers the write at once.
    for i in [leader, follower] {
        let mut c = group.member(i).unwrap().client().await;
        let s = c.stats(pb::StatsRequest {}).await.unwrap().into_inner();
        assert!(s.applied_lsn >= lsn, "member {}: {s:?}", i + 1);
    }
    let l = cluster_stats_applied(group.member(leader).unwrap(), lsn).await;
    assert_eq!(l.node_id, leader as u64 + 1);
    assert_eq!(l.role, "leader");
    assert_eq!(l.leader_id, Some(l.node_id));
    assert_eq!(l.leader_url.as_deref(), Some(urls[leader].as_str()));
    assert_eq!(l.voters, vec![1, 2, 3]);
    assert!(l.applied_index >= Some(lsn) && l.commit_index >= Some(lsn));
    assert_eq!(l.followers.len(), 2, "{l:?}");
    let f = cluster_stats_applied(group.member(follower).unwrap(), lsn).await;
    assert_eq!(f.role, "follower");
    assert_eq!(f.leader_id, l.leader_id);
    assert!(f.applied_index >= Some(lsn));
    assert!(f.followers.is_empty(), "only the leader tracks progress");
    // Each lists every member with the URL its clients use.
    for s in [&l, &f] {
        let members: Vec<(u64, &str)> = s
            .members
            .iter()
            .map(|m| (m.node_id, m.client_url.as_str()))
            .collect();
        let expected: Vec<(u64, &str)> = (1..=3).zip(urls.iter().map(String::as_str)).collect();
        assert_eq!(members, expected, "node {}", s.node_id);
    }
    // Each member counts the bytes its own log wrote (the write, and the
    // entries before it), as a single node counts its WAL's.
    for i in [leader, follower] {
        let s = group
            .member(i)
            .unwrap()
            .client()
            .await
            .stats(pb::StatsRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(
            s.wal_bytes > 0,
            "member {} wrote no log bytes: {s:?}",
            i + 1
        );
    }

    // The same through the binary.
    let out = tokio::task::spawn_blocking({
        let url = urls[follower].clone();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_uuidmap"))
                .args(["cluster", "status", "--server", &url])
                .env_remove("UUIDMAP_SERVER")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("role") && text.contains("follower"), "{text}");
    assert!(
        text.contains(&format!("leader_url      {}", urls[leader])),
        "{text}"
    );
    group.stop().await;

    // A single node has no group to show.
    let dir = tempfile::tempdir().unwrap();
    let single = TestServer::start(dir.path()).await;
    let mut c = single.client().await;
    let s = c.stats(pb::StatsRequest {}).await.unwrap().into_inner();
    assert!(s.cluster.is_none());
    let url = format!("http://{}", single.addr);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_uuidmap"))
            .args(["cluster", "status", "--server", &url])
            .env_remove("UUIDMAP_SERVER")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("serves as a single node"),
        "{out:?}"
    );
    single.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_transfer_leader_hands_the_leadership_to_the_named_voter() {
    let group = TestGroup::start(3).await;
    let leader = group.leader().await;
    let urls = group.urls();
    let all = urls.join(",");
    let cli = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_uuidmap"))
                .args(&args)
                .env_remove("UUIDMAP_SERVER")
                .output()
                .unwrap()
        })
    };
    let args = |id: usize| {
        [
            "cluster",
            "transfer-leader",
            &id.to_string(),
            "--server",
            &all,
        ]
        .map(String::from)
        .to_vec()
    };
    let itself = cli(args(leader + 1)).await.unwrap();
    assert!(!itself.status.success(), "{itself:?}");
    assert!(
        String::from_utf8_lossy(&itself.stderr).contains("already leads"),
        "{itself:?}"
    );
    let target = (leader + 1) % 3;
    let out = cli(args(target + 1)).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains(&format!("leader_url  {}", urls[target])),
        "{text}"
    );
    let s = cluster_stats(group.member(target).unwrap()).await;
    assert_eq!(s.role, "leader", "{s:?}");
    put_when_leading(group.member(target).unwrap(), 4, 4).await;
    group.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_added_promoted_replaced_and_a_wiped_one_re_added() {
    use uuidmap_client::Client;
    let mut group = TestGroup::start(3).await;
    let leader = group.leader().await;
    let client = Client::builder()
        .endpoints(group.urls())
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .unwrap();
    for k in 1..=20u128 {
        client.put(u(k), u(k + 100)).await.unwrap();
    }

    // A fourth member: added as a learner (caught up when it answers),
    // then promoted.
    let fourth = group.start_extra().await;
    let (raft, url) = group.addresses(fourth);
    let m = client.add_learner(4, &raft, &url).await.unwrap();
    assert_eq!(
        (m.voters.clone(), m.learners.clone()),
        (vec![1, 2, 3], vec![4])
    );
    let m = client.promote(&[4]).await.unwrap();
    assert_eq!(m.voters, vec![1, 2, 3, 4]);
    // It holds what was written before it joined (a read with min_lsn
    // waits until it applied the membership change).
    let got = get_at(group.member(fourth).unwrap(), 7, m.lsn).await;
    assert_eq!(got.value, Some(b(u(107))));
    // Its status, from openraft's metrics, follows the applied change
    // shortly after.
    let on_fourth = Client::builder().endpoints([url.clone()]).build().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let status = on_fourth.cluster_status().await.unwrap();
        if status.voters == vec![1, 2, 3, 4] {
            break;
        }
        assert!(
            Instant::now() < until,
            "it never saw the change: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A follower dies for good; the fifth member replaces it (add, promote,
    // remove the dead one), and writes go on.
    let dead = (leader + 1) % 3;
    group.stop_member(dead).await.unwrap();
    let fifth = group.start_extra().await;
    let (raft5, url5) = group.addresses(fifth);
    client.add_learner(5, &raft5, &url5).await.unwrap();
    client.promote(&[5]).await.unwrap();
    let m = client.remove_members(&[dead as u64 + 1]).await.unwrap();
    assert!(!m.voters.contains(&(dead as u64 + 1)), "{m:?}");
    assert!(m.voters.contains(&5) && m.voters.len() == 4, "{m:?}");
    client.put(u(21), u(121)).await.unwrap();

    // A member that lost its disk is removed; the others take snapshots
    // on request (the admin call), twice, behind which the leader purges
    // its log (up to the older one's point; these members keep 5 entries
    // at least). Added again empty, it catches up by the leader's
    // snapshot.
    let wiped = (0..3).find(|&i| i != leader && i != dead).unwrap();
    let id = wiped as u64 + 1;
    client.remove_members(&[id]).await.unwrap();
    group.wipe_member(wiped).await;
    for round in [22..=30u128, 31..=40] {
        for k in round {
            client.put(u(k), u(k + 100)).await.unwrap();
        }
        for i in [leader, fourth, fifth] {
            let (_, url) = group.addresses(i);
            let one = Client::builder().endpoints([url]).build().unwrap();
            let taken = one.snapshot().await.unwrap();
            assert!(taken.lsn > 0 && taken.entries >= 30, "{taken:?}");
            assert!(
                std::path::Path::new(&taken.path)
                    .with_extension("raft")
                    .exists(),
                "a member's snapshot has its Raft meta file beside it"
            );
        }
    }
    group.restart_member(wiped).await;
    let (raftw, urlw) = group.addresses(wiped);
    client.add_learner(id, &raftw, &urlw).await.unwrap();
    let m = client.promote(&[id]).await.unwrap();
    assert!(m.voters.contains(&id), "{m:?}");
    let got = get_at(group.member(wiped).unwrap(), 21, m.lsn).await;
    assert_eq!(got.value, Some(b(u(121))));
    let got = get_at(group.member(wiped).unwrap(), 40, m.lsn).await;
    assert_eq!(got.value, Some(b(u(140))));
    let installed = std::fs::read_dir(group.dir(wiped))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("snapshot-") && n.ends_with(".raft"))
        .count();
    assert!(installed > 0, "it installed the leader's snapshot");

    // Refusals in words: promoting a node that is not a learner, a node
    // given with a bad address or id; a single node has no group.
    let e = client.promote(&[9]).await.unwrap_err();
    assert!(e.to_string().contains("refused"), "{e}");
    let e = client
        .add_learner(6, "no-port", "http://h:1")
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("INVALID_ARGUMENT") && e.to_string().contains("not host:port"),
        "{e}"
    );
    // A node is asked which node it is before it is added: the member
    // at another's address, or none at all, is refused.
    let e = client.add_learner(6, &raft, &url).await.unwrap_err();
    assert!(
        e.to_string().contains("FAILED_PRECONDITION")
            && e.to_string()
                .contains(&format!("the member at {raft} is node 4")),
        "{e}"
    );
    let e = client
        .add_learner(6, "127.0.0.1:1", "http://127.0.0.1:2")
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("node 6 was not added") && e.to_string().contains("Start it first"),
        "{e}"
    );
    let e = client
        .add_learner(0, "h:1", "http://h:2")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("node ids start at 1"), "{e}");
    let e = client.remove_members(&[]).await.unwrap_err();
    assert!(e.to_string().contains("at least one node"), "{e}");
    group.stop().await;
    let dir = tempfile::tempdir().unwrap();
    let single = TestServer::start(dir.path()).await;
    let c = Client::builder()
        .endpoints([format!("http://{}", single.addr)])
        .build()
        .unwrap();
    let e = c.cluster_status().await.unwrap_err();
    assert!(e.to_string().contains("single node"), "{e}");
    single.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_init_on_a_wiped_member_refuses_to_split_the_group() {
    let mut group = TestGroup::start(3).await;
    group.leader().await;
    // Member 1 made the group; its disk is lost, and it is started again
    // as it was first started, --cluster-init included.
    group.wipe_member(0).await;
    group.set_init(0, true);
    group.restart_member(0).await;
    let err = group.stop_member(0).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("already in a group") && text.contains("uuidmap cluster add"),
        "{text}"
    );
    // The others still take writes.
    group.leader().await;
    group.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_voter_started_again_before_its_removal_is_refused() {
    let mut group = TestGroup::start(3).await;
    let leader = group.leader().await;
    put_when_leading(group.member(leader).unwrap(), 1, 1).await;
    // A follower loses its disk and is started again under its old id,
    // still a voter: it would vote having forgotten what it acknowledged.
    let wiped = (leader + 1) % 3;
    group.wipe_member(wiped).await;
    group.restart_member(wiped).await;
    let err = group.stop_member(wiped).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("lost its data") && text.contains("uuidmap cluster remove"),
        "{text}"
    );
    // So is the next start (the first left no group behind), and the
    // others go on.
    group.restart_member(wiped).await;
    assert!(group.stop_member(wiped).await.is_err());
    put_when_leading(group.member(leader).unwrap(), 2, 2).await;
    group.stop().await;
}
