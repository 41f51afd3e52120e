//! A real etcd (Debian's `etcd-server`, 3.4) for the partition tests: one
//! member, or a cluster of several, on free loopback ports over a
//! temporary directory, killed when dropped. If etcd is not on PATH,
//! `tools/install-etcd.sh` installs it first (as `.ci/run` does); a test
//! that cannot get one fails saying so, never passes without it.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use uuidmap_partition::{EtcdMap, GroupName, PartitionTable};

/// A running etcd: one member or a cluster.
pub struct TestEtcd {
    /// The first member's client URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// Every member, in name order (`t0`, `t1`, ...).
    members: Vec<EtcdMember>,
    /// `--initial-cluster`: every member's name and peer URL.
    initial_cluster: String,
    /// Holds each member's data directory.
    dir: tempfile::TempDir,
}

/// One etcd process.
struct EtcdMember {
    name: String,
    url: String,
    peer: String,
    /// `None` while killed.
    child: Option<Child>,
}

/// Installs etcd if it is missing (once per process).
fn ensure_installed() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if Command::new("etcd").arg("--version").output().is_ok() {
            return;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/install-etcd.sh");
        let status = Command::new("bash").arg(&script).status();
        assert!(
            matches!(status, Ok(s) if s.success()),
            "etcd is not on PATH and {} could not install it (apt-get install etcd-server \
             etcd-client): {status:?}",
            script.display()
        );
    });
}

impl TestEtcd {
    /// Starts a one-member etcd and waits until it answers.
    pub fn start() -> TestEtcd {
        TestEtcd::start_cluster(1)
    }

    /// Starts an etcd cluster of `n` members and waits until every member
    /// answers.
    pub fn start_cluster(n: usize) -> TestEtcd {
        ensure_installed();
        let members: Vec<EtcdMember> = (0..n)
            .map(|i| EtcdMember {
                name: format!("t{i}"),
                url: format!("http://127.0.0.1:{}", crate::ports::unused_port()),
                peer: format!("http://127.0.0.1:{}", crate::ports::unused_port()),
                child: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = TestEtcd {
            url: members[0].url.clone(),
            members,
            initial_cluster,
            dir: tempfile::tempdir().unwrap(),
        };
        etcd.restart();
        etcd
    }

    /// Every member's client URL.
    pub fn urls(&self) -> Vec<String> {
        self.members.iter().map(|m| m.url.clone()).collect()
    }

    /// Kills every member (SIGKILL): calls fail until
    /// [`TestEtcd::restart`].
    pub fn kill(&mut self) {
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
    }

    /// Kills member `i` (SIGKILL).
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The index of the member that leads, as the members report it
    /// (`etcdctl endpoint status`), within 10 s.
    pub fn leader(&self) -> usize {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            for (i, m) in self.members.iter().enumerate() {
                if m.child.is_none() {
                    continue;
                }
                let out = Command::new("etcdctl")
                    .env("ETCDCTL_API", "3")
                    .args(["--endpoints", &m.url, "endpoint", "status", "-w", "fields"])
                    .output();
                let Ok(out) = out else { continue };
                let text = String::from_utf8_lossy(&out.stdout);
                let field = |name: &str| {
                    text.lines()
                        .find(|l| l.starts_with(&format!("\"{name}\" :")))
                        .and_then(|l| l.split(':').nth(1))
                        .map(|v| v.trim().to_owned())
                };
                if let (Some(id), Some(leader)) = (field("MemberID"), field("Leader"))
                    && id == leader
                {
                    return i;
                }
            }
            assert!(Instant::now() < until, "no etcd leader within 10 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the member that leads (SIGKILL); its index, for
    /// [`TestEtcd::restart`].
    pub fn kill_leader(&mut self) -> usize {
        let i = self.leader();
        self.kill_member(i);
        i
    }

    /// Starts every killed member again over the same directories and
    /// ports, and waits until each answers.
    pub fn restart(&mut self) {
        for i in 0..self.members.len() {
            if self.members[i].child.is_none() {
                self.spawn_member(i);
            }
        }
        for m in &self.members {
            wait_healthy(&m.url);
        }
    }

    fn spawn_member(&mut self, i: usize) {
        let data = self.dir.path().join(&self.members[i].name);
        let m = &mut self.members[i];
        let child = Command::new("etcd")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(data)
            .args(["--listen-client-urls", &m.url])
            .args(["--advertise-client-urls", &m.url])
            .args(["--listen-peer-urls", &m.peer])
            .args(["--initial-advertise-peer-urls", &m.peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd");
        m.child = Some(child);
    }

    /// Makes cluster `cluster`'s partition table, split evenly between
    /// `groups`; the map's handle.
    pub async fn init_partitions(&self, cluster: &str, groups: &[&str]) -> EtcdMap {
        let map = EtcdMap::connect(&self.urls(), cluster)
            .await
            .expect("connect to the test etcd");
        let groups: Vec<GroupName> = groups.iter().map(|g| g.parse().unwrap()).collect();
        map.init(&PartitionTable::even(&groups).unwrap())
            .await
            .expect("make the partition table");
        map
    }

    /// Runs `etcdctl ARGS` against it; its standard output.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.urls().join(",")])
            .args(args)
            .output()
            .expect("run etcdctl");
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Waits until the member at `url` says it is healthy (20 s at most: a
/// cluster member is healthy once a quorum elected a leader).
fn wait_healthy(url: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let healthy = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", url, "endpoint", "health"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if healthy {
            return;
        }
        assert!(
            Instant::now() < until,
            "etcd at {url} did not start in 20 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        self.kill();
    }
}
