//! [`FaultProxy`]: a TCP proxy between a client and a server that fails
//! the way networks do, on command: it cuts every connection after so many
//! bytes from the server, swallows the next answer and drops its
//! connection (so the client cannot know whether its request was done),
//! blackholes (accepts and never answers), or partitions (drops every
//! connection and refuses new ones until healed); and it delays what it
//! carries, each direction by its own amount (a slower network: every
//! chunk is forwarded once it is that old, in order, without holding up
//! the reads behind it).
//!
//! [`FaultProxy::start`] runs it on the caller's runtime on a loopback
//! port; [`FaultProxy::start_in`] runs it on a thread of its own inside a
//! network namespace of [`crate::netns`], so that it listens and connects
//! as that host.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A proxy in front of `target`; stops when dropped.
pub struct FaultProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    state: Arc<State>,
    /// Stops it: its accept task, or the thread it runs on.
    _stop: Stop,
}

/// How a proxy is stopped when dropped.
enum Stop {
    /// The accept loop on the caller's runtime: aborted.
    Task(JoinHandle<()>),
    /// A thread with a runtime of its own: ends (and with its runtime
    /// every connection) when this sender is dropped.
    Thread(#[allow(dead_code)] tokio::sync::oneshot::Sender<()>),
}

impl Drop for Stop {
    fn drop(&mut self) {
        if let Stop::Task(t) = self {
            t.abort();
        }
    }
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
    /// Delay added to the bytes towards the server, in microseconds.
    delay_to_server_us: AtomicU64,
    /// Delay added to the bytes towards the client, in microseconds.
    delay_to_client_us: AtomicU64,
}

impl State {
    fn new() -> Arc<State> {
        Arc::new(State {
            cut_after: AtomicU64::new(0),
            cut_next_answer: AtomicBool::new(false),
            blackhole: AtomicBool::new(false),
            partitioned: AtomicBool::new(false),
            partitions: tokio::sync::watch::channel(0).0,
            connections: AtomicU64::new(0),
            cuts: AtomicU64::new(0),
            delay_to_server_us: AtomicU64::new(0),
            delay_to_client_us: AtomicU64::new(0),
        })
    }

    async fn serve(self: Arc<State>, listener: TcpListener, target: SocketAddr) {
        while let Ok((client, _)) = listener.accept().await {
            self.connections.fetch_add(1, SeqCst);
            tokio::spawn(relay(client, target, Arc::clone(&self)));
        }
    }
}

impl FaultProxy {
    /// Starts passing everything through to `target`.
    pub async fn start(target: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = State::new();
        let task = tokio::spawn(Arc::clone(&state).serve(listener, target));
        FaultProxy {
            addr,
            state,
            _stop: Stop::Task(task),
        }
    }

    /// Starts one inside the network namespace `ns` (by its `ip netns`
    /// name), listening on `listen` there (port 0: any) and connecting to
    /// `target` from there, on a thread and runtime of its own.
    pub fn start_in(
        ns: &str,
        listen: SocketAddr,
        target: SocketAddr,
    ) -> std::io::Result<FaultProxy> {
        let state = State::new();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (s, ns) = (Arc::clone(&state), ns.to_string());
        std::thread::Builder::new()
            .name(format!("proxy-{ns}"))
            .spawn(move || {
                let started = (|| {
                    crate::netns::enter(&ns)?;
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    let listener = rt.block_on(TcpListener::bind(listen))?;
                    Ok::<_, std::io::Error>((rt, listener))
                })();
                let (rt, listener) = match started {
                    Ok(x) => x,
                    Err(e) => return ready_tx.send(Err(e)).unwrap_or(()),
                };
                let _ = ready_tx.send(listener.local_addr());
                rt.spawn(s.serve(listener, target));
                let _ = rt.block_on(stopped);
            })?;
        let addr = ready.recv().map_err(std::io::Error::other)??;
        Ok(FaultProxy {
            addr,
            state,
            _stop: Stop::Thread(stop),
        })
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

    /// Delays what it carries: `to_server` added to every byte towards
    /// the server, `to_client` towards the client (zero: none). Applies
    /// to the bytes read from then on.
    pub fn delay(&self, to_server: Duration, to_client: Duration) {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.state.delay_to_server_us.store(us(to_server), SeqCst);
        self.state.delay_to_client_us.store(us(to_client), SeqCst);
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
    let (mut client_read, client_write) = client.into_split();
    let (mut server_read, server_write) = server.into_split();
    let to_server = delayed(server_write);
    let up_state = Arc::clone(&state);
    let upstream = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 << 10];
        while let Ok(n @ 1..) = client_read.read(&mut buf).await {
            let due = Instant::now() + us(&up_state.delay_to_server_us);
            if to_server.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
        // Dropping the sender shuts the server's half down once the
        // delayed bytes are written.
    });
    let to_client = delayed(client_write);
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
        let due = Instant::now() + us(&state.delay_to_client_us);
        if to_client.send((due, buf[..n].to_vec())).is_err() {
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

fn us(a: &AtomicU64) -> Duration {
    Duration::from_micros(a.load(SeqCst))
}

/// A writer task for one direction: writes each chunk once it is due, in
/// order; shuts the write half down when the sender is dropped, and ends
/// (dropping the half, which closes it) when a write fails.
fn delayed(mut w: OwnedWriteHalf) -> tokio::sync::mpsc::UnboundedSender<(Instant, Vec<u8>)> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    tokio::spawn(async move {
        while let Some((due, bytes)) = rx.recv().await {
            // Not through the timer when due: it rounds up to the next
            // millisecond, a delay of its own.
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            if w.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    });
    tx
}
