//! A replica group of three `uuidmap serve` processes under a randomized
//! fault schedule, with load from the client crate the whole time
//! (issue 15's chaos run; `tools/cluster-chaos.sh` runs it for 5 minutes
//! in release, `cargo test` for about 15 seconds):
//!
//! - every Raft link i→j goes through its own `FaultProxy` (member i is
//!   started with `--raft-dial j=<proxy i→j>`), client ports are direct;
//! - faults, one at a time: the leader or a follower killed with SIGKILL
//!   and started again 1–3 s later; the leader or a follower cut off from
//!   both others for 2–5 s; a follower removed, its directory emptied,
//!   started empty, added as a learner (it catches up by the leader's
//!   snapshot: members snapshot every 200 entries and keep 50) and
//!   promoted. The first round has every kind, in a seeded order; then
//!   random ones until `UUIDMAP_CHAOS_SECS` (default 15) have passed;
//! - writers put fresh keys and keep what was acknowledged; other tasks
//!   put, compare-and-set and read a few hot keys (a read is a
//!   compare-and-set that cannot match, answered by the leader with the
//!   value) and record what they were told, unknown outcomes included;
//! - failover: after each leader kill or cut, the time until a write is
//!   acknowledged again, by a member other than the old leader.
//!
//! At the end every member is stopped and started again, and the test
//! proves: no acknowledged write is lost on any member, no LSN was
//! acknowledged twice, the hot keys' histories are linearizable, and the
//! three members hold the same contents. It prints one line on stdout:
//! `acked=N lost=L linearizable=yes|no failovers=K failover_p50_ms=P
//! failover_max_ms=M`. `UUIDMAP_CHAOS_SEED` replays a schedule (the seed
//! is printed on stderr); the timing of the load is not replayed.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_client::Client;
use uuidmap_testkit::data::SplitMix64;
use uuidmap_testkit::linearizability::{check, without_unseen_unknowns};
use uuidmap_testkit::proxy::FaultProxy;

use super::chaos_load::{
    Acked, HOT_TASKS, SETTLE, Settings, WRITERS, cas_reader, contents, failover, hot_task, ms,
    percentile, whole, write_fresh,
};
use super::dead_addr;
use super::serve_child::{ServeChild, member_command};

/// Raft log entries between a member's snapshots, and kept behind one:
/// small, so that a member added again empty catches up by snapshot.
const SNAPSHOT_ENTRIES: u64 = 200;
const KEEP_ENTRIES: u64 = 50;

/// A member's fixed places: its ports stay the same across restarts.
struct Node {
    id: u64,
    port: u16,
    raft_port: u16,
    dir: tempfile::TempDir,
}

impl Node {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn raft_addr(&self) -> String {
        format!("127.0.0.1:{}", self.raft_port)
    }
}

/// The group: its members, which of them run, and the proxies between
/// them (`proxies[&(i, j)]` carries member i's calls to member j).
struct Rig {
    nodes: Vec<Node>,
    running: Vec<Option<ServeChild>>,
    proxies: HashMap<(u64, u64), FaultProxy>,
    /// One client per member, that talks to it alone.
    one: Vec<Client>,
    /// Whether the group is made (member 1 is given --cluster-init only
    /// before).
    made: bool,
}

impl Drop for Rig {
    /// A failed run leaves no process behind.
    fn drop(&mut self) {
        for c in self.running.iter_mut().flatten() {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
    }
}

impl Rig {
    async fn new() -> Rig {
        let nodes: Vec<Node> = (1..=3)
            .map(|id| Node {
                id,
                port: dead_addr().port(),
                raft_port: dead_addr().port(),
                dir: tempfile::tempdir().unwrap(),
            })
            .collect();
        let mut proxies = HashMap::new();
        for i in &nodes {
            for j in nodes.iter().filter(|j| j.id != i.id) {
                let target = j.raft_addr().parse().unwrap();
                proxies.insert((i.id, j.id), FaultProxy::start(target).await);
            }
        }
        let one = nodes
            .iter()
            .map(|n| {
                Client::builder()
                    .endpoints([n.url()])
                    .timeout(Duration::from_secs(1))
                    .learn_members(false)
                    .build()
                    .unwrap()
            })
            .collect();
        Rig {
            running: nodes.iter().map(|_| None).collect(),
            nodes,
            proxies,
            one,
            made: false,
        }
    }

    fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// `uuidmap serve` for member `i`: its peers by their real Raft
    /// addresses (the membership), dialled through its own proxies.
    fn command(&self, i: usize) -> std::process::Command {
        let n = &self.nodes[i];
        let others = || self.nodes.iter().filter(|p| p.id != n.id);
        let dial: Vec<String> = others()
            .map(|p| format!("{}={}", p.id, self.proxies[&(n.id, p.id)].addr))
            .collect();
        let mut cmd = member_command(
            n.id,
            n.port,
            &n.raft_addr(),
            others().map(|p| (p.id, p.raft_addr(), p.url())),
            n.dir.path(),
            n.id == 1 && !self.made,
        );
        cmd.args(["--raft-dial", &dial.join(",")])
            .args(["--raft-snapshot-entries", &SNAPSHOT_ENTRIES.to_string()])
            .args(["--raft-keep-entries", &KEEP_ENTRIES.to_string()]);
        cmd
    }

    /// Starts member `i` on its directory (and waits until it serves).
    async fn start(&mut self, i: usize) {
        assert!(self.running[i].is_none(), "member {} runs", i + 1);
        let cmd = self.command(i);
        let child = tokio::task::spawn_blocking(move || ServeChild::start(cmd))
            .await
            .unwrap();
        self.running[i] = Some(child);
    }

    /// SIGKILL.
    fn kill(&mut self, i: usize) {
        self.running[i].take().expect("running").kill();
    }

    /// SIGTERM; fails the test unless it exits cleanly.
    async fn stop(&mut self, i: usize) {
        let child = self.running[i].take().expect("running");
        let (status, log) = tokio::task::spawn_blocking(move || child.stop())
            .await
            .unwrap();
        assert!(
            status.success(),
            "member {} stopped with {status}:\n{log}",
            i + 1
        );
    }

    /// Cuts member `id` off from both others, both ways (`on`), or heals.
    fn isolate(&self, id: u64, on: bool) {
        for ((i, j), p) in &self.proxies {
            if *i == id || *j == id {
                p.partition(on);
            }
        }
    }

    fn heal_all(&self) {
        for p in self.proxies.values() {
            p.partition(false);
        }
    }

    /// Waits until the group is whole: every member runs and answers,
    /// one leads with the three as voters and no learner, the others
    /// follow it, and each is at most a few entries behind. The leader's
    /// index (from 0).
    async fn settle(&self) -> usize {
        let until = Instant::now() + SETTLE;
        loop {
            let last = match self.whole().await {
                Ok(leader) => return leader,
                Err(why) => why,
            };
            if Instant::now() > until {
                for (n, c) in self.nodes.iter().zip(&self.running) {
                    let log = c.as_ref().map_or("(not running)".into(), ServeChild::log);
                    let tail: Vec<&str> = log.lines().rev().take(30).collect();
                    eprintln!("--- member {} (last lines, newest first):", n.id);
                    for l in tail {
                        eprintln!("{l}");
                    }
                }
                panic!("the group is not whole after {SETTLE:?}: {last}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn whole(&self) -> Result<usize, String> {
        let running: Vec<bool> = self.running.iter().map(Option::is_some).collect();
        whole(&self.one, &running).await
    }
}

/// The kinds of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    KillLeader,
    KillFollower,
    CutLeader,
    CutFollower,
    WipeFollower,
}

const FAULTS: [Fault; 5] = [
    Fault::KillLeader,
    Fault::KillFollower,
    Fault::CutLeader,
    Fault::CutFollower,
    Fault::WipeFollower,
];

/// Runs one fault and the recovery from it; if it hit the leader, when
/// and the failover it caused.
async fn run_fault(
    rig: &mut Rig,
    fault: Fault,
    rng: &mut SplitMix64,
    acked: &Mutex<Vec<Acked>>,
    start: Instant,
) -> Option<(Instant, Duration)> {
    let leader = rig.settle().await;
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let follower = followers[(rng.next_u64() % 2) as usize];
    let at = start.elapsed().as_secs_f64();
    match fault {
        Fault::KillLeader | Fault::KillFollower => {
            let i = if fault == Fault::KillLeader {
                leader
            } else {
                follower
            };
            let down = ms(rng, 1000, 3000);
            rig.kill(i);
            let t0 = Instant::now();
            let failed_over = if i == leader {
                Some(failover(&rig.one, i, t0, acked).await)
            } else {
                None
            };
            tokio::time::sleep_until((t0 + down).into()).await;
            rig.start(i).await;
            eprintln!(
                "chaos: {at:6.1} s  {fault:?} {} (down {down:?}){}",
                i + 1,
                failed_over.map_or(String::new(), |f| format!(", failover {f:?}"))
            );
            failed_over.map(|f| (t0, f))
        }
        Fault::CutLeader | Fault::CutFollower => {
            let i = if fault == Fault::CutLeader {
                leader
            } else {
                follower
            };
            let id = i as u64 + 1;
            let cut = ms(rng, 2000, 5000);
            rig.isolate(id, true);
            let t0 = Instant::now();
            let failed_over = if i == leader {
                Some(failover(&rig.one, i, t0, acked).await)
            } else {
                None
            };
            tokio::time::sleep_until((t0 + cut).into()).await;
            rig.isolate(id, false);
            eprintln!(
                "chaos: {at:6.1} s  {fault:?} {id} (cut {cut:?}){}",
                failed_over.map_or(String::new(), |f| format!(", failover {f:?}"))
            );
            failed_over.map(|f| (t0, f))
        }
        Fault::WipeFollower => {
            let id = follower as u64 + 1;
            let t0 = Instant::now();
            let members = Client::builder()
                .endpoints(rig.urls())
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap();
            // Removed first: a member that lost its log must not vote as
            // the member it was.
            change_membership(rig, &members, "remove", id, |v, l| {
                !v.contains(&id) && !l.contains(&id)
            })
            .await;
            rig.kill(follower);
            wipe(rig.nodes[follower].dir.path());
            // The others take two snapshots, well apart, and purge their
            // logs behind them (a member keeps two, and KEEP_ENTRIES
            // entries behind the newer), so that the member added again
            // empty can only catch up by the leader's snapshot.
            for i in (0..3).filter(|&i| i != follower) {
                let first = snapshot_past(&rig.one[i], 3 * KEEP_ENTRIES).await;
                snapshot_past(&rig.one[i], first + 3 * KEEP_ENTRIES).await;
            }
            rig.start(follower).await;
            change_membership(rig, &members, "add_learner", id, |v, l| {
                v.contains(&id) || l.contains(&id)
            })
            .await;
            change_membership(rig, &members, "promote", id, |v, _| v.contains(&id)).await;
            let member = rig.running[follower].as_ref().expect("running");
            let until = Instant::now() + Duration::from_secs(10);
            while !member.log().contains("installed the leader's snapshot") {
                assert!(
                    Instant::now() < until,
                    "member {id}, added again empty, did not install the leader's snapshot:\n{}",
                    member.log()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            eprintln!(
                "chaos: {at:6.1} s  {fault:?} {id} (removed, wiped, added again in {:?})",
                t0.elapsed()
            );
            None
        }
    }
}

/// Has the member `one` talks to take a snapshot once its log is longer
/// than `entries`; the snapshot's LSN.
async fn snapshot_past(one: &Client, entries: u64) -> u64 {
    let until = Instant::now() + SETTLE;
    loop {
        if let Ok(s) = one.cluster_status().await
            && s.last_log_index.unwrap_or(0) > entries
            && let Ok(taken) = one.with_timeout(Duration::from_secs(30)).snapshot().await
        {
            return taken.lsn;
        }
        assert!(
            Instant::now() < until,
            "no snapshot past {entries} entries within {SETTLE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Empties a member's data directory (a lost disk).
fn wipe(dir: &Path) {
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::create_dir(dir).unwrap();
}

/// Makes one membership change (`remove`, `add_learner`, `promote` of
/// member `id`), trying again until the leader's membership `done`
/// (voters, learners): a change may be refused while another is under
/// way, or its answer lost with a leader.
async fn change_membership(
    rig: &Rig,
    members: &Client,
    what: &str,
    id: u64,
    done: impl Fn(&[u64], &[u64]) -> bool,
) {
    let until = Instant::now() + SETTLE;
    let node = &rig.nodes[id as usize - 1];
    loop {
        // The leader's view: the membership in force.
        for c in &rig.one {
            if let Ok(s) = c.cluster_status().await
                && s.role == "leader"
                && done(&s.voters, &s.learners)
            {
                return;
            }
        }
        let answer = match what {
            "remove" => members.remove_members(&[id]).await,
            "add_learner" => {
                members
                    .add_learner(id, &node.raft_addr(), &node.url())
                    .await
            }
            _ => members.promote(&[id]).await,
        };
        if let Err(e) = answer {
            eprintln!("chaos: {what} {id}: {e}; trying again");
        }
        assert!(
            Instant::now() < until,
            "{what} of member {id} not done within {SETTLE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_under_random_faults_loses_no_acknowledged_write_and_stays_linearizable() {
    let settings = Settings::from_env();
    eprintln!(
        "chaos: seed {} (UUIDMAP_CHAOS_SEED={} replays this schedule), faults for {} s",
        settings.seed, settings.seed, settings.secs
    );
    let mut rng = SplitMix64(settings.seed);
    let mut rig = Rig::new().await;
    for i in 0..3 {
        rig.start(i).await;
    }
    rig.made = true;
    rig.settle().await;

    // The load.
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let load = Client::builder()
        .endpoints(rig.urls())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(write_fresh(load.clone(), w, stop.clone())))
        .collect();
    let next_value = Arc::new(AtomicU64::new(1));
    let hot: Vec<_> = (0..HOT_TASKS)
        .map(|t| {
            tokio::spawn(hot_task(
                load.clone(),
                cas_reader(load.clone()),
                SplitMix64(settings.seed ^ (t + 1) << 32),
                next_value.clone(),
                stop.clone(),
                start,
            ))
        })
        .collect();

    // The faults: every kind once, in a seeded order, then random ones.
    let mut schedule = FAULTS.to_vec();
    for i in (1..schedule.len()).rev() {
        schedule.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let probes = Mutex::new(Vec::new());
    let mut leader_faults = Vec::new();
    let mut done = 0;
    loop {
        let fault = if done < schedule.len() {
            schedule[done]
        } else if start.elapsed() < Duration::from_secs(settings.secs) {
            FAULTS[(rng.next_u64() % FAULTS.len() as u64) as usize]
        } else {
            break;
        };
        // A little load with no fault first.
        tokio::time::sleep(ms(&mut rng, 200, 1000)).await;
        leader_faults.extend(run_fault(&mut rig, fault, &mut rng, &probes, start).await);
        done += 1;
    }
    let load_secs = start.elapsed().as_secs_f64();
    stop.store(true, SeqCst);
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    // The longest the writers went without an acknowledgement around each
    // leader fault: from their last one before it to their first one after
    // the failover (the failover as the client crate rides it out).
    let mut acks: Vec<Instant> = acked.iter().map(|a| a.at).collect();
    acks.sort();
    let stalls: Vec<Duration> = leader_faults
        .iter()
        .map(|&(t0, failover)| {
            let end = t0 + failover;
            let first = acks.partition_point(|&a| a <= t0);
            let after = acks.partition_point(|&a| a <= end);
            let mut times = vec![first.checked_sub(1).map_or(t0, |i| acks[i])];
            times.extend(&acks[first..after]);
            times.push(acks.get(after).copied().unwrap_or(end));
            times
                .windows(2)
                .map(|w| w[1] - w[0])
                .max()
                .unwrap_or_default()
        })
        .collect();
    acked.extend(probes.into_inner().unwrap());
    let mut failovers: Vec<Duration> = leader_faults.iter().map(|&(_, f)| f).collect();
    let mut history = Vec::new();
    let mut lsns: Vec<u64> = acked.iter().map(|a| a.lsn).collect();
    for h in hot {
        let (h, l) = h.await.unwrap();
        history.extend(h);
        lsns.extend(l);
    }

    // Everyone healed, stopped and started again.
    rig.heal_all();
    rig.settle().await;
    for i in 0..3 {
        rig.stop(i).await;
    }
    for i in 0..3 {
        rig.start(i).await;
    }
    rig.settle().await;

    // No acknowledged write is lost on any member.
    let last = lsns
        .iter()
        .copied()
        .max()
        .expect("writes were acknowledged");
    let mut lost: HashSet<Uuid> = HashSet::new();
    for (n, c) in rig.nodes.iter().zip(&rig.one) {
        let c = c.with_timeout(Duration::from_secs(60));
        let applied = c.wait_for(last).await.unwrap();
        assert!(
            applied >= last,
            "member {} applied {applied} < {last}",
            n.id
        );
        for chunk in acked.chunks(10_000) {
            let keys: Vec<Uuid> = chunk.iter().map(|a| a.key).collect();
            let got = c.get_many(&keys).await.unwrap();
            for (a, v) in chunk.iter().zip(got) {
                if v != Some(a.value) {
                    eprintln!("chaos: member {} lost {a:?}: it has {v:?}", n.id);
                    lost.insert(a.key);
                }
            }
        }
    }
    // No LSN was acknowledged twice (by two leaders).
    let unique: HashSet<u64> = lsns.iter().copied().collect();
    let twice = lsns.len() - unique.len();
    // The same contents everywhere, once each has applied the whole log.
    let leader = rig.settle().await;
    let end = rig.one[leader]
        .cluster_status()
        .await
        .unwrap()
        .last_log_index
        .unwrap();
    let mut scans = Vec::new();
    for c in &rig.one {
        c.with_timeout(Duration::from_secs(60))
            .wait_for(end)
            .await
            .unwrap();
        scans.push(contents(&c.with_timeout(Duration::from_secs(30))).await);
    }
    // Each hot key's history is linearizable.
    let calls = history.len();
    let known = history.iter().filter(|o| o.returned.is_some()).count();
    let checked = without_unseen_unknowns(history);
    let checked_len = checked.len();
    let verdict = tokio::task::spawn_blocking(move || check(&checked, 2_000_000))
        .await
        .unwrap();

    failovers.sort();
    let (p50, max) = if failovers.is_empty() {
        (0, 0)
    } else {
        (
            percentile(&failovers, 50).as_millis(),
            failovers.last().unwrap().as_millis(),
        )
    };
    eprintln!(
        "chaos: {done} faults over {load_secs:.1} s; {} entries on each member; hot keys: {calls} \
         calls, {known} with a known outcome, {checked_len} checked; across each leader fault in turn, \
         the writers went without an acknowledgement for {stalls:?}",
        scans[0].len()
    );
    println!(
        "acked={} lost={} linearizable={} failovers={} failover_p50_ms={p50} failover_max_ms={max}",
        acked.len(),
        lost.len(),
        if verdict.is_ok() { "yes" } else { "no" },
        failovers.len(),
    );
    assert!(lost.is_empty(), "{} acknowledged writes lost", lost.len());
    assert!(
        max < 10_000,
        "a failover took {max} ms: writes must resume within seconds"
    );
    assert_eq!(twice, 0, "LSNs acknowledged twice");
    verdict.unwrap_or_else(|v| panic!("not linearizable: {v:?}"));
    for (n, s) in rig.nodes.iter().zip(&scans) {
        let differ = scans[0]
            .iter()
            .filter(|(k, v)| s.get(k) != Some(v))
            .chain(s.iter().filter(|(k, _)| !scans[0].contains_key(k)))
            .take(3)
            .collect::<Vec<_>>();
        assert!(
            differ.is_empty(),
            "member {} holds {} entries, member 1 {}; differing: {differ:?}",
            n.id,
            s.len(),
            scans[0].len()
        );
    }
    assert!(
        acked.len() > 100,
        "too few writes went through: {}",
        acked.len()
    );
    assert!(known > 100, "too few hot-key calls went through: {known}");
    for i in 0..3 {
        rig.stop(i).await;
    }
}
