//! `uuidmap serve` as a child process, as an operator runs it: started on
//! an ephemeral port, stopped with SIGTERM or killed with SIGKILL, its
//! stderr (the log) kept for the assertions.
// Each test binary uses a different part of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a start or a stop may take before the test gives up.
const PATIENCE: Duration = Duration::from_secs(60);

/// `uuidmap serve` over `dir` on an ephemeral loopback port, metrics off,
/// with no `UUIDMAP_*` variable from the test's environment.
pub fn serve_command(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uuidmap"));
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "off",
    ])
    .arg("--data-dir")
    .arg(dir);
    clear_uuidmap_env(&mut cmd);
    cmd
}

/// A member of a replica group on loopback, as `uuidmap serve --node-id`
/// runs it: fsync `always`, metrics off, clients on `port`, Raft on
/// `raft_addr`, the other members as `peers` (`(id, raft_addr,
/// client_url)`), and `--cluster-init` if `init`; no `UUIDMAP_*` variable
/// from the test's environment.
pub fn member_command(
    id: u64,
    port: u16,
    raft_addr: &str,
    peers: impl IntoIterator<Item = (u64, String, String)>,
    dir: &Path,
    init: bool,
) -> Command {
    member_command_at("127.0.0.1", id, port, raft_addr, peers, dir, init)
}

/// [`member_command`] with clients on `host:port` (`--insecure` unless
/// `host` is loopback: no TLS in these tests).
pub fn member_command_at(
    host: &str,
    id: u64,
    port: u16,
    raft_addr: &str,
    peers: impl IntoIterator<Item = (u64, String, String)>,
    dir: &Path,
    init: bool,
) -> Command {
    let peers: Vec<String> = peers
        .into_iter()
        .map(|(id, raft, url)| format!("{id}={raft}@{url}"))
        .collect();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uuidmap"));
    cmd.args(["serve", "--metrics-listen", "off", "--fsync", "always"])
        .args(["--listen", &format!("{host}:{port}")])
        .args(["--node-id", &id.to_string()])
        .args(["--raft-listen", raft_addr])
        .args(["--peers", &peers.join(",")])
        .arg("--data-dir")
        .arg(dir);
    if init {
        cmd.arg("--cluster-init");
    }
    if !host.starts_with("127.") {
        // Plaintext on the namespaces' own bridge: the rig's hosts.
        cmd.args(["--insecure", "--raft-insecure"]);
    }
    clear_uuidmap_env(&mut cmd);
    cmd
}

/// Removes every `UUIDMAP_*` variable the test itself runs with.
pub fn clear_uuidmap_env(cmd: &mut Command) {
    for (k, _) in std::env::vars() {
        if k.starts_with("UUIDMAP_") {
            cmd.env_remove(k);
        }
    }
}

/// A running `uuidmap serve`.
pub struct ServeChild {
    pub child: Child,
    /// The gRPC address it reported.
    pub addr: SocketAddr,
    /// Its stderr so far.
    log: Arc<Mutex<String>>,
    /// Set once stderr is closed (the process has ended).
    closed: mpsc::Receiver<()>,
}

impl ServeChild {
    /// Starts `cmd` and waits for its "serving" line.
    pub fn start(mut cmd: Command) -> ServeChild {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning uuidmap serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (lines_tx, lines) = mpsc::channel();
        let (closed_tx, closed) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push_str(&format!("{line}\n"));
                let _ = lines_tx.send(line);
            }
            let _ = closed_tx.send(());
        });
        let deadline = Instant::now() + PATIENCE;
        let addr = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line.contains("serving uuidmap.v1") => {
                    let addr = line
                        .split_whitespace()
                        .find_map(|field| field.strip_prefix("addr="))
                        .and_then(|a| a.parse().ok());
                    break addr.unwrap_or_else(|| panic!("no address in {line:?}"));
                }
                Ok(_) => continue,
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("uuidmap serve did not start:\n{}", log.lock().unwrap());
                }
            }
        };
        ServeChild {
            child,
            addr,
            log,
            closed,
        }
    }

    /// `http://<addr>`, for the client commands.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGTERM, then its exit status and whole log.
    pub fn stop(mut self) -> (ExitStatus, String) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) takes plain integers and touches no memory of
        // ours; the child is not reaped yet, so the PID is still its own.
        let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(sent, 0, "SIGTERM to {pid}");
        let status = wait_for(&mut self.child);
        // The log is complete once stderr closes.
        let _ = self.closed.recv_timeout(PATIENCE);
        (status, self.log())
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, …) to it.
    pub fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) takes plain integers and touches no memory of
        // ours; the child is not reaped yet, so the PID is still its own.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(sent, 0, "signal {signal} to {pid}");
    }

    /// SIGKILL: the process dies at once, as in a crash.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// Runs `cmd` to its end (killing it after a minute), with its stderr.
pub fn run_to_exit(mut cmd: Command) -> (ExitStatus, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning uuidmap");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let status = wait_for(&mut child);
    (status, reader.join().unwrap())
}

/// Waits for `child` to exit; kills it and fails if it takes a minute.
fn wait_for(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("uuidmap did not exit within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a client command (`get`, `put`, ...) against `url`: exit code,
/// stdout, stderr.
pub fn client(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uuidmap"));
    clear_uuidmap_env(&mut cmd);
    let out = cmd
        .args(args)
        .args(["--server", url])
        .output()
        .expect("running the uuidmap client");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
