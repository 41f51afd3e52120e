//! [`Hosts`]: a few "machines" on one Linux host, for the fault tests of a
//! replica group across hosts: each one a network namespace with its own
//! address, all on one bridge, which lives in a namespace of the rig's own
//! (so the machine's own interfaces and namespaces are never touched).
//!
//! ```text
//!   <rig>-br:  br0 ── h1 ──veth── eth0 in <rig>-h1 (10.231.K.11)
//!                  ├─ h2 ──veth── eth0 in <rig>-h2 (10.231.K.12)
//!                  └─ ...
//! ```
//!
//! - **Names.** Every namespace is `umrig<pid>-<host>`, `<pid>` the test
//!   process's. A set whose process is gone (a run killed before it could
//!   clean up) is removed by the next [`Hosts::create`]; a set of a live
//!   process is left alone, so two runs never remove each other's.
//! - **Addresses.** A private /24, `10.231.K.0/24` with the first `K` that
//!   no interface of the machine's, nor of any namespace on it, uses.
//!   Traffic goes only between the rig's namespaces: no route leads out.
//! - **Clean-up.** [`Hosts`]' `Drop` (a failed or panicking test too)
//!   removes its namespaces (with them go the veths, the bridge, their
//!   firewall rules) and unmounts the tmpfs data directories it mounted.
//! - **Entering.** A process runs inside a host through `ip netns exec`
//!   ([`Hosts::command`]); a thread of the test enters one with `setns(2)`
//!   ([`enter`]), and every socket it makes afterwards belongs to that
//!   host (threads it spawns inherit the namespace).
//!
//! Root only: [`unavailable`] says why the rig cannot run, for a test to
//! skip with that message.

use std::collections::HashSet;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The prefix of every name the rig makes (namespaces, mount points).
const PREFIX: &str = "umrig";

/// Why the rig cannot run here (`None`: it can): not root, or no `ip`
/// with `netns` support.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("the network-namespace rig needs root (ip netns add, mount)".into());
    }
    match Command::new("ip").args(["netns", "list"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`ip netns list` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("no `ip` command (iproute2): {e}")),
    }
}

/// Whether `iptables` can be run (the one-way drops need it).
pub fn have_iptables() -> bool {
    Command::new("iptables")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `program args`, failing with its stderr.
pub fn run(program: &str, args: &[&str]) -> io::Result<()> {
    let out = Command::new(program).args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn output(program: &str, args: &[&str]) -> io::Result<String> {
    let out = Command::new(program).args(args).output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The rig's hosts (module docs). Dropping it removes them.
pub struct Hosts {
    /// `umrig<pid>`: the prefix of its namespaces.
    name: String,
    /// The hosts' names, in order (`h` of `<name>-<h>`).
    hosts: Vec<String>,
    /// The /24's first three octets.
    net: [u8; 3],
    /// The tmpfs mounts made by [`Hosts::tmpfs`], unmounted on drop.
    mounts: Vec<PathBuf>,
}

impl Hosts {
    /// Removes stale sets, then makes the bridge and one host per name
    /// (each a namespace with an address on the bridge, loopback up).
    pub fn create(hosts: &[&str]) -> io::Result<Hosts> {
        remove_stale();
        let name = format!("{PREFIX}{}", std::process::id());
        let net = free_subnet()?;
        let mut rig = Hosts {
            name,
            hosts: Vec::new(),
            net,
            mounts: Vec::new(),
        };
        let br = rig.ns("br");
        run("ip", &["netns", "add", &br])?;
        run("ip", &["-n", &br, "link", "set", "lo", "up"])?;
        run("ip", &["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        run("ip", &["-n", &br, "link", "set", "br0", "up"])?;
        for (i, h) in hosts.iter().enumerate() {
            let ns = rig.ns(h);
            run("ip", &["netns", "add", &ns])?;
            rig.hosts.push(h.to_string());
            let addr = format!("{}/24", rig.addr_at(i));
            let ip = |args: &[&str]| run("ip", &[&["-n", &ns], args].concat());
            run(
                "ip",
                &[
                    "-n", &br, "link", "add", h, "type", "veth", "peer", "name", "eth0", "netns",
                    &ns,
                ],
            )?;
            run("ip", &["-n", &br, "link", "set", h, "master", "br0", "up"])?;
            ip(&["addr", "add", &addr, "dev", "eth0"])?;
            ip(&["link", "set", "eth0", "up"])?;
            ip(&["link", "set", "lo", "up"])?;
        }
        Ok(rig)
    }

    /// The namespace of host `h`.
    pub fn ns(&self, h: &str) -> String {
        format!("{}-{h}", self.name)
    }

    fn index(&self, h: &str) -> usize {
        self.hosts
            .iter()
            .position(|x| x == h)
            .unwrap_or_else(|| panic!("no host {h}"))
    }

    fn addr_at(&self, i: usize) -> Ipv4Addr {
        let [a, b, c] = self.net;
        Ipv4Addr::new(a, b, c, 11 + i as u8)
    }

    /// Host `h`'s address.
    pub fn addr(&self, h: &str) -> Ipv4Addr {
        self.addr_at(self.index(h))
    }

    /// The subnet, `10.231.K.0/24`.
    pub fn subnet(&self) -> String {
        let [a, b, c] = self.net;
        format!("{a}.{b}.{c}.0/24")
    }

    /// `ip netns exec <ns of h> <cmd>`: `cmd` (its program, arguments,
    /// environment and directory) run inside host `h`. `ip` execs the
    /// program, so the child's pid is the program's.
    pub fn command(&self, h: &str, cmd: &Command) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(h)])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        if let Some(d) = cmd.get_current_dir() {
            c.current_dir(d);
        }
        c
    }

    /// Takes host `h`'s link to the bridge down (`up: false`: a
    /// partition, both ways, of everything it sends and receives) or up.
    pub fn link(&self, h: &str, up: bool) -> io::Result<()> {
        let state = if up { "up" } else { "down" };
        run("ip", &["-n", &self.ns("br"), "link", "set", h, state])
    }

    /// Host `h` drops every packet from host `from` (`on`), or stops
    /// dropping (an iptables rule in `h`'s namespace): what `from` sends
    /// is lost, what `h` sends still arrives.
    pub fn drop_from(&self, h: &str, from: &str, on: bool) -> io::Result<()> {
        let src = self.addr(from).to_string();
        let action = if on { "-A" } else { "-D" };
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.ns(h),
                "iptables",
                action,
                "INPUT",
                "-s",
                &src,
                "-j",
                "DROP",
            ],
        )
    }

    /// Mounts a tmpfs of `bytes` at `dir` (a member's small disk, that
    /// can be filled); unmounted when the rig is dropped.
    pub fn tmpfs(&mut self, dir: &Path, bytes: u64) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let size = format!("size={bytes}");
        let d = dir.to_str().expect("a UTF-8 path");
        run("mount", &["-t", "tmpfs", "-o", &size, "tmpfs", d])?;
        self.mounts.push(dir.to_path_buf());
        Ok(())
    }

    /// A directory for the rig's mounts, named after the rig (so that a
    /// stale one is found by [`remove_stale`]).
    pub fn mount_root(&self) -> PathBuf {
        std::env::temp_dir().join(&self.name)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for m in self.mounts.drain(..) {
            if let Err(e) = run("umount", &["-l", m.to_str().unwrap_or_default()]) {
                eprintln!("netns rig: {e}");
            }
        }
        let _ = std::fs::remove_dir_all(self.mount_root());
        for h in self.hosts.iter().map(String::as_str).chain(["br"]) {
            if let Err(e) = run("ip", &["netns", "delete", &self.ns(h)]) {
                eprintln!("netns rig: {e}");
            }
        }
    }
}

/// Fills the file system of `dir` with a file `name` until it has no
/// space left; the bytes written. Removing the file frees them.
pub fn fill(dir: &Path, name: &str) -> io::Result<u64> {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join(name))?;
    let chunk = vec![0xa5u8; 1 << 20];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => return Err(e),
        }
    }
    // Whatever the page cache held must reach the tmpfs too.
    let _ = f.sync_all();
    Ok(written)
}

/// Moves the calling thread into host `ns`'s network namespace (by name,
/// as `ip netns` keeps it): the sockets it makes from then on, and the
/// threads it spawns, belong to that host.
pub fn enter(ns: &str) -> io::Result<()> {
    let f = std::fs::File::open(Path::new("/var/run/netns").join(ns))?;
    // SAFETY: setns(2) on a file descriptor we own (open for the call)
    // with CLONE_NEWNET only changes this thread's network namespace; it
    // touches no memory of ours. Other threads are unaffected.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Removes the namespaces and mounts of rigs whose process is gone.
pub fn remove_stale() {
    let alive = |name: &str| {
        name.strip_prefix(PREFIX)
            .and_then(|r| r.split(['-', '/']).next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| Path::new("/proc").join(pid.to_string()).exists())
    };
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    for point in mounts.lines().filter_map(|l| l.split(' ').nth(1)) {
        let Some(name) = Path::new(point)
            .components()
            .find_map(|c| c.as_os_str().to_str().filter(|s| s.starts_with(PREFIX)))
        else {
            continue;
        };
        if !alive(name) {
            eprintln!("netns rig: unmounting {point}, left by a run that was killed");
            let _ = run("umount", &["-l", point]);
        }
    }
    for ns in namespaces() {
        if ns.starts_with(PREFIX) && !alive(&ns) {
            eprintln!("netns rig: removing namespace {ns}, left by a run that was killed");
            let _ = run("ip", &["netns", "delete", &ns]);
        }
    }
}

fn namespaces() -> Vec<String> {
    output("ip", &["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// The first `10.231.K.0/24` that no address on the machine (in its own
/// namespace or any other) falls in.
fn free_subnet() -> io::Result<[u8; 3]> {
    let mut used: HashSet<[u8; 3]> = HashSet::new();
    let mut listings = vec![output("ip", &["-4", "-o", "addr"])?];
    for ns in namespaces() {
        listings.push(output("ip", &["-n", &ns, "-4", "-o", "addr"])?);
    }
    for l in listings.iter().flat_map(|s| s.lines()) {
        let mut words = l.split_whitespace();
        while let Some(w) = words.next() {
            if w == "inet"
                && let Some(a) = words.next()
                && let Ok(ip) = a.split('/').next().unwrap_or("").parse::<Ipv4Addr>()
            {
                let [a, b, c, _] = ip.octets();
                used.insert([a, b, c]);
            }
        }
    }
    (0..=255u8)
        .map(|k| [10, 231, k])
        .find(|n| !used.contains(n))
        .ok_or_else(|| io::Error::other("no free /24 in 10.231.0.0/16"))
}
