//! A replica group of three `uuidmap serve` processes on three "hosts"
//! (network namespaces on one bridge, `uuidmap_testkit::netns`), with the
//! load in a fourth, under a randomized schedule of faults between them
//! (issue 31's multi-host rig; `tools/cluster-chaos.sh --netns` runs it
//! in release; ignored by `cargo test`: it needs root).
//!
//! - member i listens on its host's address (clients on 7000, Raft on
//!   7100); its Raft calls to member j go through a `FaultProxy` inside
//!   its own namespace (`--raft-dial j=127.0.0.1:720j`), which adds delay
//!   and connects to j as host i does: 1 ms each way at all times (a 2 ms
//!   round trip, as between machines), more on command. Each member's data
//!   directory is a small tmpfs of its own, so that its disk can fill, and
//!   its WAL files are not preallocated (`--wal-preallocate off`): records
//!   written into a file of zeros made earlier would never meet the full
//!   disk;
//! - faults, each counted: SIGKILL of a member (started again 1–3 s
//!   later); SIGSTOP longer than the election timeout, then SIGCONT; its
//!   link to the bridge down (a partition); a one-way drop (iptables in a
//!   member's namespace drops what one peer sends it); 1–5 ms of delay on
//!   every Raft link, each way; its disk full (the tmpfs filled, then
//!   freed); a leader paused while a follower is killed; the whole group
//!   killed and started again. The faults come in rounds, each with every
//!   kind once in a seeded order, until `UUIDMAP_CHAOS_SECS` have passed
//!   and at least `UUIDMAP_CHAOS_ROUNDS` rounds are done (default 1), so
//!   each kind is injected as often as the others;
//! - a supervisor: a member that exits by itself (a full disk stops it)
//!   is started again, and what it said is reported;
//! - the load of `chaos_load`, with real Gets in the hot keys' histories:
//!   `linearizable` reads (the default), sent to each member in turn by
//!   [`any_member_reader`], followers and a deposed leader included.
//!
//! At the end every member is killed and started again (a crash, not a
//! graceful stop), and the test proves: no acknowledged write is lost on
//! any member, no LSN was acknowledged twice, the histories (reads
//! included) are linearizable, and the members' full scans are identical.
//! It prints one line on stdout: `acked=N lost=L linearizable=yes|no
//! reads_checked=R failovers=K failover_p50_ms=P failover_max_ms=M
//! faults=kill:a,stop:b,… disk_stops=D`, where D counts the disk faults
//! that stopped the member (it exited on the failed write, and was
//! started again once the disk had room). Without root or `ip netns` it prints
//! `netns_chaos: SKIPPED: <why>` and returns.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_client::Client;
use uuidmap_testkit::data::SplitMix64;
use uuidmap_testkit::linearizability::{Call, check, without_unseen_unknowns};
use uuidmap_testkit::netns::{self, Hosts};
use uuidmap_testkit::proxy::FaultProxy;

use super::chaos_load::{
    Acked, HOT_TASKS, Reader, SETTLE, Settings, WRITERS, contents, failover, hot_task, ms,
    percentile, whole, write_fresh,
};
use super::serve_child::{ServeChild, member_command_at};

const MEMBERS: usize = 3;
/// The hosts: the members', then the clients'.
const HOSTS: [&str; 4] = ["m1", "m2", "m3", "cl"];
const CLIENT_PORT: u16 = 7000;
const RAFT_PORT: u16 = 7100;
/// Member i's proxy to member j listens on `127.0.0.1:PROXY_PORT + j`
/// in member i's namespace.
const PROXY_PORT: u16 = 7200;
/// Each member's disk (a tmpfs).
const DISK_BYTES: u64 = 512 << 20;
/// Raft entries between snapshots, and kept behind one: bounds the disk.
const SNAPSHOT_ENTRIES: u64 = 20_000;
const KEEP_ENTRIES: u64 = 1_000;
/// The Raft links' delay each way when no delay fault is on.
const BASE_DELAY: Duration = Duration::from_millis(1);
/// The maximum election timeout (`crates/cluster/src/timing.rs`): a pause
/// must be longer.
const ELECTION_MAX: Duration = Duration::from_millis(800);

/// The kinds of fault, by the name the summary counts them under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Kill,
    Stop,
    Link,
    OneWay,
    Delay,
    Disk,
    PauseKill,
    KillAll,
}

const FAULTS: [Fault; 8] = [
    Fault::Kill,
    Fault::Stop,
    Fault::Link,
    Fault::OneWay,
    Fault::Delay,
    Fault::Disk,
    Fault::PauseKill,
    Fault::KillAll,
];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Stop => "stop",
            Fault::Link => "link",
            Fault::OneWay => "oneway",
            Fault::Delay => "delay",
            Fault::Disk => "disk",
            Fault::PauseKill => "pause_kill",
            Fault::KillAll => "kill_all",
        }
    }
}

/// The group on its hosts. Field order is drop order: the processes die
/// first (`Drop`), then the proxies' threads, then the namespaces and
/// mounts go with `hosts`.
struct Rig {
    running: Vec<Option<ServeChild>>,
    /// `proxies[&(i, j)]` carries member i's Raft calls to member j (ids).
    proxies: HashMap<(u64, u64), FaultProxy>,
    /// One client per member, that talks to it alone.
    one: Vec<Client>,
    /// Member i's data directory (its tmpfs).
    dirs: Vec<PathBuf>,
    /// Whether the group is made (member 1 gets --cluster-init before).
    made: bool,
    /// Members that exited by themselves and were started again: what
    /// each said.
    exits: Vec<String>,
    /// Each member's whole log, over every process it ran as (kept for
    /// a failure's evidence).
    logs: Vec<String>,
    hosts: Hosts,
}

impl Drop for Rig {
    /// A failed run leaves no process behind (then `hosts` goes).
    fn drop(&mut self) {
        for c in self.running.iter_mut().flatten() {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
    }
}

fn host(i: usize) -> &'static str {
    HOSTS[i]
}

impl Rig {
    fn new(mut hosts: Hosts) -> Rig {
        let mut dirs = Vec::new();
        for i in 0..MEMBERS {
            let dir = hosts.mount_root().join(host(i));
            hosts.tmpfs(&dir, DISK_BYTES).expect("mounting a tmpfs");
            dirs.push(dir);
        }
        let mut proxies = HashMap::new();
        for i in 0..MEMBERS {
            for j in (0..MEMBERS).filter(|&j| j != i) {
                let listen: SocketAddr = ([127, 0, 0, 1], PROXY_PORT + j as u16 + 1).into();
                let target = SocketAddr::from((hosts.addr(host(j)), RAFT_PORT));
                let p = FaultProxy::start_in(&hosts.ns(host(i)), listen, target)
                    .expect("starting a proxy in a member's namespace");
                proxies.insert((i as u64 + 1, j as u64 + 1), p);
            }
        }
        let one = (0..MEMBERS)
            .map(|i| {
                Client::builder()
                    .endpoints([url(&hosts, i)])
                    .timeout(Duration::from_secs(1))
                    .learn_members(false)
                    .build()
                    .unwrap()
            })
            .collect();
        Rig {
            running: (0..MEMBERS).map(|_| None).collect(),
            proxies,
            one,
            dirs,
            made: false,
            exits: Vec::new(),
            logs: vec![String::new(); MEMBERS],
            hosts,
        }
    }

    fn urls(&self) -> Vec<String> {
        (0..MEMBERS).map(|i| url(&self.hosts, i)).collect()
    }

    /// `ip netns exec <host i> uuidmap serve …`.
    fn command(&self, i: usize) -> std::process::Command {
        let id = i as u64 + 1;
        let addr = self.hosts.addr(host(i));
        let peers = (0..MEMBERS).filter(|&j| j != i).map(|j| {
            let a = self.hosts.addr(host(j));
            (
                j as u64 + 1,
                format!("{a}:{RAFT_PORT}"),
                url(&self.hosts, j),
            )
        });
        let dial: Vec<String> = (0..MEMBERS)
            .filter(|&j| j != i)
            .map(|j| format!("{}=127.0.0.1:{}", j + 1, PROXY_PORT + j as u16 + 1))
            .collect();
        let mut cmd = member_command_at(
            &addr.to_string(),
            id,
            CLIENT_PORT,
            &format!("{addr}:{RAFT_PORT}"),
            peers,
            &self.dirs[i],
            id == 1 && !self.made,
        );
        cmd.args(["--raft-dial", &dial.join(",")])
            .args(["--wal-preallocate", "off"])
            .args(["--raft-snapshot-entries", &SNAPSHOT_ENTRIES.to_string()])
            .args(["--raft-keep-entries", &KEEP_ENTRIES.to_string()]);
        self.hosts.command(host(i), &cmd)
    }

    async fn start(&mut self, i: usize) {
        assert!(self.running[i].is_none(), "member {} runs", i + 1);
        let cmd = self.command(i);
        let child = tokio::task::spawn_blocking(move || ServeChild::start(cmd))
            .await
            .unwrap();
        self.running[i] = Some(child);
    }

    fn kill(&mut self, i: usize) {
        let child = self.running[i].take().expect("running");
        self.logs[i].push_str(&child.log());
        child.kill();
    }

    /// Keeps what a failed run leaves for a diagnosis: every member's
    /// whole log and a copy of its data directory (the members are
    /// killed first, so the files are still), under the temp directory.
    /// Returns where.
    fn keep_evidence(&mut self) -> PathBuf {
        let to = std::env::temp_dir().join(format!("netns-chaos-evidence-{}", std::process::id()));
        for i in 0..MEMBERS {
            if self.running[i].is_some() {
                self.kill(i);
            }
            let member = to.join(host(i));
            std::fs::create_dir_all(&member).expect("making the evidence directory");
            std::fs::write(to.join(format!("{}.log", host(i))), &self.logs[i])
                .expect("writing a member's log");
            let copied = std::process::Command::new("cp")
                .arg("-a")
                .arg(format!("{}/.", self.dirs[i].display()))
                .arg(&member)
                .status()
                .expect("running cp");
            assert!(copied.success(), "copying member {}'s directory", i + 1);
        }
        to
    }

    fn signal(&self, i: usize, sig: libc::c_int) {
        self.running[i].as_ref().expect("running").signal(sig);
    }

    /// The supervisor: starts again every member that exited by itself,
    /// and keeps what it said.
    async fn restart_exited(&mut self) {
        for i in 0..MEMBERS {
            let Some(c) = self.running[i].as_mut() else {
                continue;
            };
            let Some(status) = c.child.try_wait().unwrap() else {
                continue;
            };
            let log = c.log();
            self.logs[i].push_str(&log);
            let last: Vec<&str> = log.lines().rev().take(3).collect();
            let what = format!("member {} exited ({status}); last lines: {last:?}", i + 1);
            eprintln!("netns chaos: {what}; starting it again");
            self.exits.push(what);
            self.running[i] = None;
            self.start(i).await;
        }
    }

    /// Waits until the group is whole (`chaos_load::whole`), starting
    /// again members that exited. The leader's index.
    async fn settle(&mut self) -> usize {
        let until = Instant::now() + SETTLE;
        loop {
            self.restart_exited().await;
            let running: Vec<bool> = self.running.iter().map(Option::is_some).collect();
            let last = match whole(&self.one, &running).await {
                Ok(leader) => return leader,
                Err(why) => why,
            };
            if Instant::now() > until {
                for (i, c) in self.running.iter().enumerate() {
                    let log = c.as_ref().map_or("(not running)".into(), ServeChild::log);
                    eprintln!("--- member {} (last lines, newest first):", i + 1);
                    for l in log.lines().rev().take(30) {
                        eprintln!("{l}");
                    }
                }
                panic!("the group is not whole after {SETTLE:?}: {last}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every Raft link's delay, each way.
    fn delay(&self, d: Duration) {
        for p in self.proxies.values() {
            p.delay(d, d);
        }
    }

    /// Every fault healed: links up, no drops, the base delay, no one
    /// paused. A member that exited by itself (a full disk) is left to
    /// `restart_exited`: its process is gone, there is nothing to resume.
    fn heal_all(&mut self) {
        for i in 0..MEMBERS {
            let _ = self.hosts.link(host(i), true);
            for j in (0..MEMBERS).filter(|&j| j != i) {
                // Fails when there is no such rule: nothing to heal.
                let _ = self.hosts.drop_from(host(i), host(j), false);
            }
            if let Some(c) = self.running[i].as_mut()
                && c.running()
            {
                c.signal(libc::SIGCONT);
            }
        }
        self.delay(BASE_DELAY);
    }
}

fn url(hosts: &Hosts, i: usize) -> String {
    format!("http://{}:{CLIENT_PORT}", hosts.addr(host(i)))
}

/// Reads at `linearizable` (the clients' default) from each member in
/// turn, whatever its role: a follower, a member cut off, a leader that
/// was paused and deposed. The histories' Gets all come from here.
fn any_member_reader(one: Vec<Client>) -> Reader {
    let next = Arc::new(AtomicU64::new(0));
    Arc::new(move |key| {
        let member = one[next.fetch_add(1, SeqCst) as usize % one.len()].clone();
        Box::pin(async move { member.get(key).await })
    })
}

/// What one fault did.
struct FaultOutcome {
    /// When it took the leader away while a quorum remained: its start
    /// and the failover it caused.
    failover: Option<(Instant, Duration)>,
    /// A full disk stopped the member.
    stopped: bool,
}

/// Runs one fault and the recovery from it.
async fn run_fault(
    rig: &mut Rig,
    fault: Fault,
    rng: &mut SplitMix64,
    acked: &Mutex<Vec<Acked>>,
    start: Instant,
) -> FaultOutcome {
    let leader = rig.settle().await;
    let followers: Vec<usize> = (0..MEMBERS).filter(|&i| i != leader).collect();
    let follower = followers[(rng.next_u64() % 2) as usize];
    let victim = if rng.next_u64().is_multiple_of(2) {
        leader
    } else {
        follower
    };
    let at = start.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let measure = |rig: &Rig, i: usize| {
        let one = rig.one.clone();
        async move {
            if i == leader {
                Some(failover(&one, i, t0, acked).await)
            } else {
                None
            }
        }
    };
    let mut stopped = false;
    let (failed_over, what) = match fault {
        Fault::Kill => {
            let down = ms(rng, 500, 2000);
            rig.kill(victim);
            let f = measure(rig, victim).await;
            tokio::time::sleep_until((t0 + down).into()).await;
            rig.start(victim).await;
            (f, format!("member {} (down {down:?})", victim + 1))
        }
        Fault::Stop => {
            let paused = ms(rng, ELECTION_MAX.as_millis() as u64 * 6 / 5, 2500);
            rig.signal(victim, libc::SIGSTOP);
            let f = measure(rig, victim).await;
            tokio::time::sleep_until((t0 + paused).into()).await;
            rig.signal(victim, libc::SIGCONT);
            (f, format!("member {} (paused {paused:?})", victim + 1))
        }
        Fault::Link => {
            let cut = ms(rng, 1200, 2500);
            rig.hosts.link(host(victim), false).unwrap();
            let f = measure(rig, victim).await;
            tokio::time::sleep_until((t0 + cut).into()).await;
            rig.hosts.link(host(victim), true).unwrap();
            (f, format!("member {} (link down {cut:?})", victim + 1))
        }
        Fault::OneWay => {
            // The leader stops hearing a follower, or a follower stops
            // hearing the leader: what the other sends is lost.
            let (deaf, from) = if victim == leader {
                (leader, follower)
            } else {
                (follower, leader)
            };
            let cut = ms(rng, 1200, 2500);
            rig.hosts.drop_from(host(deaf), host(from), true).unwrap();
            tokio::time::sleep(cut).await;
            rig.hosts.drop_from(host(deaf), host(from), false).unwrap();
            (
                None,
                format!("member {} drops from {} ({cut:?})", deaf + 1, from + 1),
            )
        }
        Fault::Delay => {
            let d = ms(rng, 1, 6);
            let lasting = ms(rng, 1500, 3000);
            rig.delay(d);
            tokio::time::sleep(lasting).await;
            rig.delay(BASE_DELAY);
            (
                None,
                format!("{d:?} each way on every Raft link for {lasting:?}"),
            )
        }
        Fault::Disk => {
            let before = rig.running[victim].as_ref().map_or(0, |c| c.log().len());
            let dir = rig.dirs[victim].clone();
            let filled = tokio::task::spawn_blocking(move || netns::fill(&dir, "filler"))
                .await
                .unwrap()
                .expect("filling a member's disk");
            let full = ms(rng, 1000, 2500);
            tokio::time::sleep(full).await;
            let exited = rig.running[victim].as_mut().is_some_and(|c| !c.running());
            stopped = exited;
            std::fs::remove_file(rig.dirs[victim].join("filler")).unwrap();
            // What it said meanwhile: its first warnings or errors.
            let log = rig.running[victim]
                .as_ref()
                .map_or(String::new(), |c| c.log());
            let said: Vec<&str> = log
                .get(before..)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .map(|l| l.get(..240).unwrap_or(l))
                .take(2)
                .collect();
            (
                None,
                format!(
                    "{} {} (filled with {} MiB for {full:?}; {}; it said {said:?})",
                    if victim == leader {
                        "leader"
                    } else {
                        "follower"
                    },
                    victim + 1,
                    filled >> 20,
                    if exited {
                        "it exited"
                    } else {
                        "it kept running"
                    }
                ),
            )
        }
        Fault::PauseKill => {
            let down = ms(rng, ELECTION_MAX.as_millis() as u64 * 6 / 5, 2500);
            rig.signal(leader, libc::SIGSTOP);
            rig.kill(follower);
            tokio::time::sleep(down).await;
            rig.signal(leader, libc::SIGCONT);
            rig.start(follower).await;
            (
                None,
                format!(
                    "leader {} paused and member {} killed ({down:?})",
                    leader + 1,
                    follower + 1
                ),
            )
        }
        Fault::KillAll => {
            let down = ms(rng, 500, 2000);
            for i in 0..MEMBERS {
                rig.kill(i);
            }
            tokio::time::sleep(down).await;
            for i in 0..MEMBERS {
                rig.start(i).await;
            }
            (None, format!("all members (down {down:?})"))
        }
    };
    eprintln!(
        "netns chaos: {at:6.1} s  {} {what}{}",
        fault.name(),
        failed_over.map_or(String::new(), |f| format!(", failover {f:?}"))
    );
    FaultOutcome {
        failover: failed_over.map(|f| (t0, f)),
        stopped,
    }
}

#[test]
#[ignore = "needs root and `ip netns`; run by tools/cluster-chaos.sh --netns"]
fn a_group_across_hosts_under_random_faults_loses_no_acknowledged_write_and_stays_linearizable() {
    if let Some(why) = netns::unavailable() {
        println!("netns_chaos: SKIPPED: {why}");
        return;
    }
    let hosts = Hosts::create(&HOSTS).expect("making the rig's namespaces");
    eprintln!(
        "netns chaos: hosts on {} (namespaces {}-*)",
        hosts.subnet(),
        hosts.ns("").trim_end_matches('-')
    );
    let client_ns = hosts.ns("cl");
    // The load runs inside the clients' host: a thread that enters its
    // namespace and builds the runtime there (its workers inherit it).
    let run = std::thread::spawn(move || {
        netns::enter(&client_ns).expect("entering the clients' namespace");
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap()
            .block_on(chaos(hosts));
    });
    if let Err(panic) = run.join() {
        std::panic::resume_unwind(panic);
    }
}

async fn chaos(hosts: Hosts) {
    let settings = Settings::from_env();
    eprintln!(
        "netns chaos: seed {} (UUIDMAP_CHAOS_SEED={} replays this schedule), faults for {} s",
        settings.seed, settings.seed, settings.secs
    );
    let min_rounds: usize = std::env::var("UUIDMAP_CHAOS_ROUNDS")
        .ok()
        .map(|v| v.trim().parse().expect("UUIDMAP_CHAOS_ROUNDS is a number"))
        .unwrap_or(1);
    let mut rng = SplitMix64(settings.seed);
    let mut rig = Rig::new(hosts);
    rig.delay(BASE_DELAY);
    for i in 0..MEMBERS {
        rig.start(i).await;
    }
    rig.made = true;
    rig.settle().await;

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
    let reader = any_member_reader(rig.one.clone());
    let hot: Vec<_> = (0..HOT_TASKS)
        .map(|t| {
            tokio::spawn(hot_task(
                load.clone(),
                reader.clone(),
                SplitMix64(settings.seed ^ (t + 1) << 32),
                next_value.clone(),
                stop.clone(),
                start,
            ))
        })
        .collect();

    let probes = Mutex::new(Vec::new());
    let mut leader_faults = Vec::new();
    let mut counts: BTreeMap<Fault, u64> = FAULTS.iter().map(|&f| (f, 0)).collect();
    let mut done = 0;
    let mut disk_stops = 0;
    // Rounds of every kind once, shuffled; the last round is finished.
    let mut round: Vec<Fault> = Vec::new();
    loop {
        if round.is_empty() {
            let rounds = done / FAULTS.len();
            if rounds >= min_rounds.max(1) && start.elapsed() >= Duration::from_secs(settings.secs)
            {
                break;
            }
            round = FAULTS.to_vec();
            for i in (1..round.len()).rev() {
                round.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
        }
        let fault = round.pop().unwrap();
        tokio::time::sleep(ms(&mut rng, 50, 300)).await;
        let outcome = run_fault(&mut rig, fault, &mut rng, &probes, start).await;
        leader_faults.extend(outcome.failover);
        disk_stops += u64::from(outcome.stopped);
        *counts.get_mut(&fault).unwrap() += 1;
        done += 1;
    }
    let load_secs = start.elapsed().as_secs_f64();
    stop.store(true, SeqCst);
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    acked.extend(probes.into_inner().unwrap());
    let mut failovers: Vec<Duration> = leader_faults.iter().map(|&(_, f)| f).collect();
    let mut history = Vec::new();
    let mut lsns: Vec<u64> = acked.iter().map(|a| a.lsn).collect();
    for h in hot {
        let (h, l) = h.await.unwrap();
        history.extend(h);
        lsns.extend(l);
    }

    // Healed, then a crash of the whole group and a start.
    rig.heal_all();
    rig.settle().await;
    for i in 0..MEMBERS {
        rig.kill(i);
    }
    for i in 0..MEMBERS {
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
    for (i, c) in rig.one.iter().enumerate() {
        let c = c.with_timeout(Duration::from_secs(60));
        let applied = c.wait_for(last).await.unwrap();
        assert!(
            applied >= last,
            "member {} applied {applied} < {last}",
            i + 1
        );
        for chunk in acked.chunks(10_000) {
            let keys: Vec<Uuid> = chunk.iter().map(|a| a.key).collect();
            let got = c.get_many(&keys).await.unwrap();
            for (a, v) in chunk.iter().zip(got) {
                if v != Some(a.value) {
                    eprintln!("netns chaos: member {} lost {a:?}: it has {v:?}", i + 1);
                    lost.insert(a.key);
                }
            }
        }
    }
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
    let calls = history.len();
    let known = history.iter().filter(|o| o.returned.is_some()).count();
    let checked = without_unseen_unknowns(history);
    let reads_checked = checked
        .iter()
        .filter(|o| o.call == Call::Get && o.returned.is_some())
        .count();
    let checked_len = checked.len();
    let (verdict, checked) =
        tokio::task::spawn_blocking(move || (check(&checked, 2_000_000), checked))
            .await
            .unwrap();
    if let Err(uuidmap_testkit::linearizability::Violation::NotLinearizable { key, .. }) = &verdict
    {
        // The key's history, for the report: (invoked, returned) in ms.
        let mut ops: Vec<_> = checked.iter().filter(|o| o.key == *key).collect();
        ops.sort_by_key(|o| o.invoked);
        for o in ops {
            eprintln!(
                "netns chaos: {key} {:.3}..{} {:?} -> {:?}",
                o.invoked as f64 / 1e6,
                o.returned
                    .map_or("?".into(), |(t, _)| format!("{:.3}", t as f64 / 1e6)),
                o.call,
                o.returned.map(|(_, r)| r)
            );
        }
    }

    failovers.sort();
    let (p50, max) = if failovers.is_empty() {
        (0, 0)
    } else {
        (
            percentile(&failovers, 50).as_millis(),
            failovers.last().unwrap().as_millis(),
        )
    };
    let faults: Vec<String> = counts
        .iter()
        .map(|(f, n)| format!("{}:{n}", f.name()))
        .collect();
    eprintln!(
        "netns chaos: {done} faults over {load_secs:.1} s; {} entries on each member; hot keys: \
         {calls} calls, {known} with a known outcome, {checked_len} checked; members that exited \
         by themselves and were started again: {}",
        scans[0].len(),
        rig.exits.len()
    );
    for e in &rig.exits {
        eprintln!("netns chaos:   {e}");
    }
    println!(
        "acked={} lost={} linearizable={} reads_checked={reads_checked} failovers={} \
         failover_p50_ms={p50} failover_max_ms={max} faults={} disk_stops={disk_stops}",
        acked.len(),
        lost.len(),
        if verdict.is_ok() { "yes" } else { "no" },
        failovers.len(),
        faults.join(","),
    );
    assert!(lost.is_empty(), "{} acknowledged writes lost", lost.len());
    assert_eq!(twice, 0, "LSNs acknowledged twice");
    verdict.unwrap_or_else(|v| panic!("not linearizable: {v:?}"));
    for (i, s) in scans.iter().enumerate() {
        let differ = scans[0]
            .iter()
            .filter(|(k, v)| s.get(k) != Some(v))
            .chain(s.iter().filter(|(k, _)| !scans[0].contains_key(k)))
            .take(3)
            .collect::<Vec<_>>();
        if !differ.is_empty() {
            let kept = rig.keep_evidence();
            panic!(
                "member {} holds {} entries, member 1 {}; differing: {differ:?} (the members' logs \
                 and data directories are kept in {})",
                i + 1,
                s.len(),
                scans[0].len(),
                kept.display()
            );
        }
    }
    assert!(
        acked.len() > 100,
        "too few writes went through: {}",
        acked.len()
    );
    assert!(
        reads_checked > 10,
        "too few reads were checked: {reads_checked}"
    );
    for i in 0..MEMBERS {
        rig.kill(i);
    }
}
