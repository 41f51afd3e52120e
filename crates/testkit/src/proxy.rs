//! [`FaultProxy`]: a TCP proxy between a client and a server that fails
//! the way networks do, on command: it cuts every connection after so many
//! bytes from the server, swallows the next answer and drops its
//! connection (so the client cannot know whether its request was done),
//! blackholes (accepts and never answers), or partitions (drops every
//! connection and refuses new ones until healed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A proxy on a loopback port in front of `target`; stops when dropped.
pub struct FaultProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

struct State {
    /// Cut each connection once it has carried this many bytes from the
    /// server (0: never).
    cut_after: AtomicU64,
    /// Swallow the next bytes from the server on any connection, then
    /// close that connection.
    cut_next_answer: AtomicBool,
    /// Accept, read and never answer (nor connect to the server).
    blackhole: AtomicBool,
    /// Drop every connection, and each new one at once.
    partitioned: AtomicBool,
    /// Bumped when a partition begins: open relays end.
    partitions: tokio::sync::watch::Sender<u64>,
    connections: AtomicU64,
    cuts: AtomicU64,
}

impl FaultProxy {
    /// Starts passing everything through to `target`.
    pub async fn start(target: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            cut_after: AtomicU64::new(0),
            cut_next_answer: AtomicBool::new(false),
            blackhole: AtomicBool::new(false),
            partitioned: AtomicBool::new(false),
            partitions: tokio::sync::watch::channel(0).0,
            connections: AtomicU64::new(0),
            cuts: AtomicU64::new(0),
        });
        let s = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                s.connections.fetch_add(1, SeqCst);
                tokio::spawn(relay(client, target, Arc::clone(&s)));
            }
        });
        FaultProxy { addr, state, task }
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Cuts every connection (present and future) after `bytes` from the
    /// server; 0 stops cutting.
    pub fn cut_after(&self, bytes: u64) {
        self.state.cut_after.store(bytes, SeqCst);
    }

    /// Swallows the next answer from the server and drops its connection.
    pub fn cut_next_answer(&self) {
        self.state.cut_next_answer.store(true, SeqCst);
    }

    /// New connections get no answer at all while `on`.
    pub fn blackhole(&self, on: bool) {
        self.state.blackhole.store(on, SeqCst);
    }

    /// While `on`, the link is down: every open connection is dropped,
    /// and each new one is closed at once (as a network partition, or a
    /// host that is gone, looks to both ends).
    pub fn partition(&self, on: bool) {
        self.state.partitioned.store(on, SeqCst);
        if on {
            self.state.partitions.send_modify(|n| *n += 1);
        }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state.connections.load(SeqCst)
    }

    /// Connections cut so far.
    pub fn cuts(&self) -> u64 {
        self.state.cuts.load(SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(mut client: TcpStream, target: SocketAddr, state: Arc<State>) {
    let mut partitions = state.partitions.subscribe();
    if state.partitioned.load(SeqCst) {
        return;
    }
    let _ = client.set_nodelay(true);
    if state.blackhole.load(SeqCst) {
        let mut sink = [0u8; 4096];
        while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
        return;
    }
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    });
    let mut carried = 0u64;
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let read = tokio::select! {
            read = server_read.read(&mut buf) => read,
            _ = partitions.changed() => break,
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if state.cut_next_answer.swap(false, SeqCst) {
            state.cuts.fetch_add(1, SeqCst);
            break;
        }
        let limit = state.cut_after.load(SeqCst);
        let n = if limit > 0 && carried + n as u64 >= limit {
            limit.saturating_sub(carried) as usize
        } else {
            n
        };
        if client_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
        carried += n as u64;
        if limit > 0 && carried >= limit {
            state.cuts.fetch_add(1, SeqCst);
            break;
        }
    }
    // Dropping both halves closes the connection both ways.
    upstream.abort();
}
