//! A follower of a group of three `uuidmap serve` processes whose WAL is
//! damaged while it is down (a byte flipped inside a record it had
//! acknowledged): started again, it cuts its log at the damage, distrusts
//! its vote, is made a learner by the leader, catches up from its group
//! and is promoted back, without an operator (docs/replication.md 8.5).
//!
//! Ignored by `cargo test` (`crates/cluster/tests/cluster/damaged_vote.rs` proves
//! the same protocol in one process, quickly): this is the figure of issue
//! 31, "a member with a damaged WAL serves again within 10 s of its
//! start, for 1M entries". `tools/bench-damaged-member.sh` runs it in
//! release; `UUIDMAP_DAMAGED_ENTRIES` sets the entries (default 1M). It
//! prints one line on stdout: `entries=N cut_lsn=C listening_ms=A
//! reads_ms=R voter_ms=V`, each measured from the member's start: until it
//! answered on its port, until it answered a linearizable Get of the last
//! key written (from its own applied state, which then holds every entry
//! the leader has), and until the leader listed it as a voter again.

use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_client::{Client, WriteOp};
use uuidmap_testkit::wal_damage::flip_bit_in_record;

use super::dead_addr;
use super::serve_child::{ServeChild, member_command};

/// Ops in one Write request (one Raft entry).
const BATCH: u64 = 1_000;

struct Member {
    id: u64,
    port: u16,
    raft_port: u16,
    dir: tempfile::TempDir,
}

impl Member {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn start(&self, all: &[Member]) -> ServeChild {
        let peers = all
            .iter()
            .filter(|p| p.id != self.id)
            .map(|p| (p.id, format!("127.0.0.1:{}", p.raft_port), p.url()));
        ServeChild::start(member_command(
            self.id,
            self.port,
            &format!("127.0.0.1:{}", self.raft_port),
            peers,
            self.dir.path(),
            self.id == 1,
        ))
    }

    fn client(&self) -> Client {
        Client::builder()
            .endpoints([self.url()])
            .learn_members(false)
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    }
}

/// The members' processes, killed when dropped: a failed run leaves none
/// behind.
struct Processes(Vec<Option<ServeChild>>);

impl Drop for Processes {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
    }
}

fn key(i: u64) -> Uuid {
    Uuid::from_u128(0xda_0000_0000_0000_0000_0000_0000_0000 | u128::from(i + 1))
}

fn value(i: u64) -> Uuid {
    Uuid::from_u128(0x7a_0000_0000_0000_0000_0000_0000_0000 | u128::from(i + 1))
}

/// The leader's index among `members`, and its view of the group.
async fn leader(members: &[Member]) -> (usize, Vec<u64>) {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        for (i, m) in members.iter().enumerate() {
            if let Ok(s) = m.client().cluster_status().await
                && s.role == "leader"
            {
                return (i, s.voters);
            }
        }
        assert!(Instant::now() < until, "no leader within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a figure for BENCHMARKS.md: run by tools/bench-damaged-member.sh"]
async fn a_follower_with_a_damaged_wal_serves_again_soon_after_its_start() {
    let entries: u64 = std::env::var("UUIDMAP_DAMAGED_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let members: Vec<Member> = (1..=3)
        .map(|id| Member {
            id,
            port: dead_addr().port(),
            raft_port: dead_addr().port(),
            dir: tempfile::tempdir().unwrap(),
        })
        .collect();
    let mut running = Processes(members.iter().map(|m| Some(m.start(&members))).collect());
    let group = Client::builder()
        .endpoints(members.iter().map(Member::url))
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    // Writable: the group made by --cluster-init elects again once its
    // three voters are in (about half a second without a leader).
    let until = Instant::now() + Duration::from_secs(30);
    while group.put(key(u64::MAX - 1), value(0)).await.is_err() {
        assert!(Instant::now() < until, "the group took no write in 30 s");
    }

    // The entries, a batch per Raft entry, then every member has them all.
    let mut last = 0;
    for start in (0..entries).step_by(BATCH as usize) {
        let ops: Vec<WriteOp> = (start..(start + BATCH).min(entries))
            .map(|i| WriteOp::Put {
                key: key(i),
                value: value(i),
            })
            .collect();
        last = match group.write(&ops).await {
            Ok(lsn) => lsn,
            Err(e) => {
                for (m, r) in members.iter().zip(&running.0) {
                    let log = r.as_ref().unwrap().log();
                    let tail: Vec<&str> = log.lines().rev().take(40).collect();
                    eprintln!("--- member {} (newest first):\n{}", m.id, tail.join("\n"));
                }
                panic!("loading: {e}");
            }
        };
    }
    for m in &members {
        let applied = m.client().with_timeout(Duration::from_secs(60));
        assert!(applied.wait_for(last).await.unwrap() >= last);
    }

    // A follower stops cleanly (its WAL header then vouches for every
    // record), and a record in the middle of its log is damaged.
    let (l, _) = leader(&members).await;
    let f = (l + 1) % members.len();
    let (status, log) = running.0[f].take().unwrap().stop();
    assert!(status.success(), "member {}: {log}", members[f].id);
    let cut_lsn = last / 2;
    flip_bit_in_record(members[f].dir.path(), cut_lsn);
    // The group moves on meanwhile.
    let after = group
        .put(key(entries), value(entries))
        .await
        .expect("two members of three take writes");

    let started = Instant::now();
    running.0[f] = Some(members[f].start(&members));
    let listening = started.elapsed();
    let member = members[f].client();
    let reads = loop {
        if let Ok(Some(v)) = member.get(key(entries)).await {
            assert_eq!(v, value(entries));
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the member did not serve within 120 s:\n{}",
            running.0[f].as_ref().unwrap().log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let voter = loop {
        let (_, voters) = leader(&members).await;
        if voters.contains(&members[f].id) {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the member was not a voter again within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let log = running.0[f].as_ref().unwrap().log();
    assert!(
        log.contains("Raft log is damaged"),
        "the member said nothing of the damage:\n{log}"
    );

    // It holds what the others hold: the entries it cut came back.
    let stats = member.stats().await.unwrap();
    assert!(stats.applied_lsn >= after);
    let (l, _) = leader(&members).await;
    let leader_stats = members[l].client().stats().await.unwrap();
    // The loaded entries, the one written while it was down, the probe.
    assert_eq!(stats.entries, entries + 2);
    assert_eq!(stats.entries, leader_stats.entries);
    let probe: Vec<Uuid> = (0..entries).step_by(997).map(key).collect();
    let got = member.get_many(&probe).await.unwrap();
    for (k, v) in probe.iter().zip(got) {
        let i = (k.as_u128() & 0xffff_ffff) as u64 - 1;
        assert_eq!(v, Some(value(i)), "entry {i}");
    }
    println!(
        "entries={entries} cut_lsn={cut_lsn} listening_ms={} reads_ms={} voter_ms={}",
        listening.as_millis(),
        reads.as_millis(),
        voter.as_millis()
    );
}
