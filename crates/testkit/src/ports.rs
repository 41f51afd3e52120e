//! Loopback ports for servers a test starts as child processes.
//!
//! A test that hands a port to a child (`uuidmap serve --listen`, etcd)
//! must pick it before the child binds it. Binding port 0 and releasing
//! it is not enough: the kernel may hand the same free port to the next
//! `bind(0)` (two members of one group were once given one port), or to
//! another test's listener in between. So the ports handed out here come
//! from just below the kernel's ephemeral range (which `bind(0)` and
//! outgoing connections draw from, so nothing else in the test process
//! takes them), each one once per process, and each checked free by a
//! bind when handed out.

use std::net::{SocketAddr, TcpListener};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// How many ports below the ephemeral range are used.
const SPAN: u32 = 12_000;

/// A loopback port that nothing listens on now, handed out once in this
/// process and outside the range `bind(0)` draws from.
pub fn unused_port() -> u16 {
    let (low, span) = *window();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Each process starts at its own place in the window, so that two test
    // binaries run one after the other do not hand out the ports a child
    // of the first may still hold.
    let start = std::process::id() % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = low + (start + n) % span;
        let port = u16::try_from(port).expect("the window is below 65536");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {low}..{}", low + span);
}

/// `127.0.0.1:<unused_port()>`: an address where nothing listens.
pub fn unused_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], unused_port()))
}

/// The ports below the kernel's ephemeral range: `(first, how many)`.
fn window() -> &'static (u32, u32) {
    static WINDOW: OnceLock<(u32, u32)> = OnceLock::new();
    WINDOW.get_or_init(|| {
        let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
            .unwrap_or(32_768);
        let first = low.saturating_sub(SPAN).max(1_024);
        assert!(
            low > first + 100,
            "the ephemeral port range starts at {low}: too low to keep ports below it"
        );
        (first, low - first)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_outside_the_ephemeral_range() {
        let (low, span) = *window();
        let ports: Vec<u16> = (0..200).map(|_| unused_port()).collect();
        let distinct: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
        for &p in &ports {
            assert!((low..low + span).contains(&u32::from(p)), "{p}");
        }
        // Whatever the kernel gives bind(0) is never one of them.
        let any: Vec<TcpListener> = (0..200)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        for l in &any {
            assert!(!ports.contains(&l.local_addr().unwrap().port()));
        }
        // And a handed-out port can be bound by whoever it was given to.
        TcpListener::bind(("127.0.0.1", ports[0])).unwrap();
    }
}
