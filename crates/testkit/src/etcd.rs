//! A real etcd (Debian's `etcd-server`, 3.4) for the partition tests: one
//! member on free loopback ports over a temporary directory, killed when
//! dropped. If etcd is not on PATH, `tools/install-etcd.sh` installs it
//! first (as `.ci/run` does); a test that cannot get one fails saying so,
//! never passes without it.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use uuidmap_partition::{EtcdMap, GroupName, PartitionTable};

/// A running etcd.
pub struct TestEtcd {
    /// Its client URL (`http://127.0.0.1:PORT`).
    pub url: String,
    client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl TestEtcd {
    /// Starts etcd and waits until it answers.
    pub fn start() -> TestEtcd {
        ensure_installed();
        let mut etcd = TestEtcd {
            url: String::new(),
            client_port: free_port(),
            peer_port: free_port(),
            dir: tempfile::tempdir().unwrap(),
            child: None,
        };
        etcd.url = format!("http://127.0.0.1:{}", etcd.client_port);
        etcd.restart();
        etcd
    }

    /// Kills etcd (SIGKILL): calls fail until [`TestEtcd::restart`].
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again over the same directory and ports, and waits until
    /// it answers.
    pub fn restart(&mut self) {
        self.kill();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new("etcd")
            .args(["--name", "t"])
            .arg("--data-dir")
            .arg(self.dir.path().join("etcd"))
            .args(["--listen-client-urls", &self.url])
            .args(["--advertise-client-urls", &self.url])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("t={peer}")])
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let healthy = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &self.url, "endpoint", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if healthy {
                return;
            }
            assert!(
                Instant::now() < until,
                "etcd at {} did not start in 20 s",
                self.url
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Makes cluster `cluster`'s partition table, split evenly between
    /// `groups`; the map's handle.
    pub async fn init_partitions(&self, cluster: &str, groups: &[&str]) -> EtcdMap {
        let map = EtcdMap::connect(std::slice::from_ref(&self.url), cluster)
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
            .args(["--endpoints", &self.url])
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

impl Drop for TestEtcd {
    fn drop(&mut self) {
        self.kill();
    }
}
