//! The server under test as a separate process (`uuidmap serve`, the binary
//! cargo built for this bench), its `/metrics`, and CPU time of any process
//! from `/proc/<pid>/stat`.
//!
//! The server gets a fresh data directory in the system temp dir, a free
//! loopback port for gRPC and another for `/metrics` (never the default
//! 7879, which another server on the machine may hold), and fsync `never`
//! (the reads measured here do not touch the disk; the load is not what is
//! measured). Its log goes to a file in that directory. It is stopped with
//! SIGTERM (graceful: drain, final snapshot), and killed if it does not
//! stop in time or the bench fails.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use uuidmap_testkit::server::{http_get, sample};

/// How long the server may take to answer its first `Ping`.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a graceful stop may take (a final snapshot of 10M is ~1 s).
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `uuidmap serve`.
pub struct OurServer {
    child: Child,
    /// Its loopback port.
    pub port: u16,
    /// Where its `GET /metrics` answers.
    pub metrics: SocketAddr,
    /// Its log.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl OurServer {
    /// Starts `binary serve` with `extra` flags on a free port and a fresh
    /// data directory. Call [`OurServer::wait_ready`] before using it.
    pub fn start(binary: &Path, extra: &[&str]) -> Result<OurServer, String> {
        let dir = tempfile::Builder::new()
            .prefix("uuidmap-bench-server")
            .tempdir()
            .map_err(|e| format!("cannot create a temp dir: {e}"))?;
        // Both held until both are known, so that they differ.
        let free =
            || TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free loopback port: {e}"));
        let (grpc_listener, metrics_listener) = (free()?, free()?);
        let address = |l: &TcpListener| l.local_addr().map_err(|e| e.to_string());
        let port = address(&grpc_listener)?.port();
        let metrics = address(&metrics_listener)?;
        drop((grpc_listener, metrics_listener));
        let log = dir.path().join("server.log");
        let log_file = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new(binary)
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--metrics-listen", &metrics.to_string()])
            .args(["--fsync", "never", "--log-format", "text"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        Ok(OurServer {
            child,
            port,
            metrics,
            log,
            _dir: dir,
        })
    }

    /// Waits until `ping` succeeds (it is called again every 20 ms).
    pub fn wait_ready(&mut self, mut ping: impl FnMut() -> bool) -> Result<Duration, String> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "uuidmap serve exited with {status} while starting; see {}",
                    self.log.display()
                ));
            }
            if ping() {
                return Ok(started.elapsed());
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(format!(
                    "uuidmap serve did not answer Ping within {START_TIMEOUT:?}; see {}",
                    self.log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Entries its scans have examined so far
    /// (`uuidmap_scan_entries_examined_total` on its `/metrics`).
    pub fn scan_entries_examined(&self, runtime: &tokio::runtime::Runtime) -> Result<u64, String> {
        const SERIES: &str = "uuidmap_scan_entries_examined_total";
        let (status, text) = runtime.block_on(http_get(self.metrics, "/metrics"));
        if status != "HTTP/1.1 200 OK" {
            return Err(format!("GET http://{}/metrics: {status}", self.metrics));
        }
        sample(&text, SERIES, &[])
            .map(|v| v as u64)
            .ok_or_else(|| format!("no {SERIES} on http://{}/metrics", self.metrics))
    }

    /// SIGTERM, then waits for it to exit (killed after [`STOP_TIMEOUT`]).
    /// Returns how long the graceful stop took.
    pub fn stop(mut self) -> Result<Duration, String> {
        let started = Instant::now();
        // `kill(1)` rather than libc: no unsafe code for one signal.
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .map_err(|e| format!("cannot run kill: {e}"))?;
        if !sent.success() {
            return Err(format!("kill -TERM {} failed: {sent}", self.child.id()));
        }
        while started.elapsed() < STOP_TIMEOUT {
            if let Ok(Some(status)) = self.child.try_wait() {
                return if status.success() {
                    Ok(started.elapsed())
                } else {
                    Err(format!(
                        "uuidmap serve exited with {status} after SIGTERM; see {}",
                        self.log.display()
                    ))
                };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(format!(
            "uuidmap serve did not stop within {STOP_TIMEOUT:?} of SIGTERM (killed)"
        ))
    }
}

impl Drop for OurServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// User + system CPU time of process `pid` so far (fields 14 and 15 of
/// `/proc/<pid>/stat`, in clock ticks).
pub fn cpu_time(pid: u32) -> Result<Duration, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // The command name (field 2) is in parentheses and may hold spaces;
    // the fields after it are plain. Field 3 (state) is the first of them.
    let rest = stat
        .rsplit_once(')')
        .ok_or_else(|| format!("{path}: no ')' in {stat:?}"))?
        .1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("{path}: field {n} missing or not a number"))
    };
    let ticks = field(14)? + field(15)?;
    Ok(Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64))
}

/// Resident memory of process `pid` (`VmRSS` of `/proc/<pid>/status`).
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux if that fails).
fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}
