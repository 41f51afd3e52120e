//! A private `redis-server` for the side-by-side figures, and the benches'
//! one RESP implementation: the command encoder and reply parser
//! ([`write_command`], [`parse_reply`], [`ReplyBuf`]) that both the
//! synchronous [`Conn`] here (pipelined bulk loads, one command at a time)
//! and the server bench's asynchronous load (`server/resp.rs`) use; and the
//! process's start, stop and restart.
//!
//! Every server listens on a free loopback port, keeps its files in a
//! directory the caller owns (a temporary one), and is killed when dropped,
//! so a failed bench leaves no server behind.
//!
//! Shared by the durability and server benches, each of which includes it
//! with `#[path = "../common/redis.rs"] mod redis;` and uses a subset of it,
//! hence the `dead_code` allowance below.
#![allow(dead_code)]

use std::io::{self, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `redis-server` binary on `PATH`, if there is one.
pub fn find_server() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
}

/// `redis-server --version`, for the log.
pub fn version(binary: &Path) -> String {
    Command::new(binary)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// A running private server.
pub struct Server {
    child: Child,
    /// Its loopback port.
    pub port: u16,
    /// Its working directory (RDB and AOF files, the log).
    pub dir: PathBuf,
    binary: PathBuf,
    args: Vec<String>,
}

/// How long a server may take to start (or to load a large dump) before the
/// bench gives up on it.
const START_TIMEOUT: Duration = Duration::from_secs(300);

impl Server {
    /// Starts `binary` on a free loopback port with its files in `dir` and
    /// the extra configuration `args` (`--name value` pairs), and waits until
    /// it answers `PING` (after loading any dump in `dir`). Returns the
    /// server and the time from spawning it to its first `PONG`.
    pub fn start(binary: &Path, dir: &Path, args: &[&str]) -> io::Result<(Server, Duration)> {
        let port = free_port()?;
        let mut server = Server {
            child: spawn(binary, dir, port, args)?,
            port,
            dir: dir.to_path_buf(),
            binary: binary.to_path_buf(),
            args: args.iter().map(|s| s.to_string()).collect(),
        };
        let started = Instant::now();
        server.wait_ready(started)?;
        Ok((server, started.elapsed()))
    }

    /// Stops the server without saving and starts it again on the same
    /// directory and port, so that it loads what its files hold. Returns the
    /// time from spawning to the first `PONG` and the connection that got it
    /// (the caller times its first lookup on it).
    pub fn restart(&mut self) -> io::Result<(Duration, Conn)> {
        self.shutdown()?;
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.child = spawn(&self.binary, &self.dir, self.port, &args)?;
        let started = Instant::now();
        let conn = self.wait_ready(started)?;
        Ok((started.elapsed(), conn))
    }

    /// The server's process id (for its CPU time in `/proc/<pid>/stat`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A new connection.
    pub fn connect(&self) -> io::Result<Conn> {
        Conn::open(self.port)
    }

    /// A new connection to the server on `port` (for threads that do not
    /// hold the server).
    pub fn connect_port(port: u16) -> io::Result<Conn> {
        Conn::open(port)
    }

    /// `SHUTDOWN NOSAVE`, then waits for the process to exit.
    pub fn shutdown(&mut self) -> io::Result<()> {
        if let Ok(mut c) = self.connect() {
            // The server closes the connection instead of answering.
            let _ = c.send(&[b"SHUTDOWN", b"NOSAVE"]);
            let _ = c.read_reply();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.child.kill()?;
                self.child.wait()?;
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The last "DB loaded from disk: N seconds" of the server's log: the
    /// load time Redis itself reports.
    pub fn logged_load_seconds(&self) -> Option<f64> {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).ok()?;
        log.lines()
            .filter_map(|l| l.split("DB loaded from disk: ").nth(1))
            .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
            .next_back()
    }

    /// Polls until the server answers `PING` with `PONG` (it answers
    /// `-LOADING` while it loads a dump); returns the connection.
    fn wait_ready(&mut self, started: Instant) -> io::Result<Conn> {
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "redis-server exited with {status} while starting; see {}",
                    self.dir.join("redis.log").display()
                )));
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(io::Error::other("redis-server did not answer PING in time"));
            }
            let Ok(mut conn) = Conn::open(self.port) else {
                std::thread::sleep(Duration::from_micros(500));
                continue;
            };
            loop {
                match conn.command(&[b"PING"])? {
                    Reply::Simple(s) if s == "PONG" => return Ok(conn),
                    Reply::Error(e) if e.starts_with("LOADING") => {
                        std::thread::sleep(Duration::from_micros(500));
                    }
                    other => {
                        return Err(io::Error::other(format!("PING answered {other:?}")));
                    }
                }
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn spawn(binary: &Path, dir: &Path, port: u16, args: &[&str]) -> io::Result<Child> {
    let log = dir.join("redis.log");
    Command::new(binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log)
        .args(["--daemonize", "no", "--protected-mode", "yes"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
}

/// A loopback port nobody listens on right now.
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One RESP reply (arrays are not needed by the commands sent here).
#[derive(Debug)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
}

/// A reply borrowed from the bytes it was parsed from: what the load
/// loops check without allocating.
#[derive(Debug, PartialEq, Eq)]
pub enum ReplyRef<'a> {
    Simple(&'a [u8]),
    Error(&'a [u8]),
    Int(i64),
    Bulk(Option<&'a [u8]>),
}

impl ReplyRef<'_> {
    /// The reply, owned.
    pub fn to_owned(&self) -> Reply {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match *self {
            ReplyRef::Simple(s) => Reply::Simple(text(s)),
            ReplyRef::Error(e) => Reply::Error(text(e)),
            ReplyRef::Int(n) => Reply::Int(n),
            ReplyRef::Bulk(b) => Reply::Bulk(b.map(<[u8]>::to_vec)),
        }
    }
}

/// The one RESP reply parser of the benches: the reply at the front of
/// `buf` and the bytes it takes, or `None` if `buf` does not hold all of
/// it yet.
pub fn parse_reply(buf: &[u8]) -> io::Result<Option<(ReplyRef<'_>, usize)>> {
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let Some((&kind, line)) = buf[..eol].split_first() else {
        return Err(io::Error::other("an empty RESP line"));
    };
    let number = || {
        std::str::from_utf8(line)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
            .ok_or_else(|| {
                io::Error::other(format!(
                    "bad RESP number {:?}",
                    String::from_utf8_lossy(line)
                ))
            })
    };
    let after = eol + 2;
    let reply = match kind {
        b'+' => (ReplyRef::Simple(line), after),
        b'-' => (ReplyRef::Error(line), after),
        b':' => (ReplyRef::Int(number()?), after),
        b'$' => match usize::try_from(number()?) {
            // `$-1`: nil.
            Err(_) => (ReplyRef::Bulk(None), after),
            Ok(len) => {
                let end = after + len + 2;
                if buf.len() < end {
                    return Ok(None);
                }
                (ReplyRef::Bulk(Some(&buf[after..after + len])), end)
            }
        },
        other => {
            return Err(io::Error::other(format!(
                "unexpected RESP type byte {other:#04x}"
            )));
        }
    };
    Ok(Some(reply))
}

/// Bytes read from a connection and not yet parsed, for the sync and the
/// async clients alike: parse from [`ReplyBuf::unparsed`], [`consume`]
/// what a reply took, and read more into [`ReplyBuf::space`].
///
/// [`consume`]: ReplyBuf::consume
pub struct ReplyBuf {
    input: Vec<u8>,
    parsed: usize,
    filled: usize,
}

impl Default for ReplyBuf {
    fn default() -> Self {
        ReplyBuf {
            input: vec![0; 64 << 10],
            parsed: 0,
            filled: 0,
        }
    }
}

impl ReplyBuf {
    /// The bytes read and not yet parsed.
    pub fn unparsed(&self) -> &[u8] {
        &self.input[self.parsed..self.filled]
    }

    /// Marks `n` bytes of [`ReplyBuf::unparsed`] as parsed.
    pub fn consume(&mut self, n: usize) {
        self.parsed += n;
    }

    /// Room to read into, after the unparsed bytes (moved to the front;
    /// the buffer doubles when a reply is larger than it).
    pub fn space(&mut self) -> &mut [u8] {
        self.input.copy_within(self.parsed..self.filled, 0);
        self.filled -= self.parsed;
        self.parsed = 0;
        if self.filled == self.input.len() {
            self.input.resize(self.input.len() * 2, 0);
        }
        &mut self.input[self.filled..]
    }

    /// Marks `n` bytes read into [`ReplyBuf::space`].
    pub fn filled(&mut self, n: usize) {
        self.filled += n;
    }
}

/// A connection: buffered writes, replies parsed by [`parse_reply`].
pub struct Conn {
    stream: TcpStream,
    writer: BufWriter<TcpStream>,
    replies: ReplyBuf,
}

impl Conn {
    fn open(port: u16) -> io::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            writer: BufWriter::with_capacity(1 << 16, stream.try_clone()?),
            stream,
            replies: ReplyBuf::default(),
        })
    }

    /// Sends one command and reads its reply.
    pub fn command(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        self.send(args)?;
        self.read_reply()
    }

    /// Sends one command.
    fn send(&mut self, args: &[&[u8]]) -> io::Result<()> {
        write_command(&mut self.writer, args)?;
        self.writer.flush()
    }

    /// A field of `INFO <section>` (`used_memory`, say).
    pub fn info_field(&mut self, section: &str, field: &str) -> io::Result<Option<String>> {
        let Reply::Bulk(Some(text)) = self.command(&[b"INFO", section.as_bytes()])? else {
            return Err(io::Error::other("INFO did not answer a bulk string"));
        };
        let text = String::from_utf8_lossy(&text).into_owned();
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .map(|v| v.trim().to_string()))
    }

    /// Sends `SET key value` for every pair, pipelined (a second thread
    /// writes while this one reads the replies), and checks that every reply
    /// is `+OK`. Returns the time from the first byte sent to the last reply.
    pub fn pipelined_sets(
        &mut self,
        count: usize,
        pair: impl Fn(usize) -> ([u8; 16], [u8; 16]) + Sync,
    ) -> io::Result<Duration> {
        let started = Instant::now();
        let stream = self.stream.try_clone()?;
        std::thread::scope(|s| {
            let sender = s.spawn(|| -> io::Result<()> {
                let mut out = BufWriter::with_capacity(1 << 20, stream);
                for i in 0..count {
                    let (k, v) = pair(i);
                    write_command(&mut out, &[b"SET", &k, &v])?;
                }
                out.flush()
            });
            for i in 0..count {
                self.with_reply(|reply| match reply {
                    ReplyRef::Simple(b"OK") => Ok(()),
                    other => Err(io::Error::other(format!(
                        "SET number {i} answered {:?}",
                        other.to_owned()
                    ))),
                })?;
            }
            sender.join().expect("RESP sender panicked")
        })?;
        Ok(started.elapsed())
    }

    /// Reads one reply.
    pub fn read_reply(&mut self) -> io::Result<Reply> {
        self.with_reply(|reply| Ok(reply.to_owned()))
    }

    /// Reads one reply and hands it, borrowed, to `f`.
    fn with_reply<T>(&mut self, f: impl FnOnce(ReplyRef<'_>) -> io::Result<T>) -> io::Result<T> {
        loop {
            if let Some((reply, used)) = parse_reply(self.replies.unparsed())? {
                let out = f(reply);
                self.replies.consume(used);
                return out;
            }
            let read = self.stream.read(self.replies.space())?;
            if read == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.replies.filled(read);
        }
    }
}

/// One command as a RESP array of bulk strings (into a socket's buffered
/// writer, or a `Vec<u8>` that an async client sends). No `fmt`: the
/// load's client CPU per command is reported next to Redis's rate, so the
/// encoder stays as cheap as `redis-benchmark`'s.
pub fn write_command(out: &mut impl Write, args: &[&[u8]]) -> io::Result<()> {
    let mut line = [0u8; 24];
    out.write_all(length_line(b'*', args.len(), &mut line))?;
    for a in args {
        out.write_all(length_line(b'$', a.len(), &mut line))?;
        out.write_all(a)?;
        out.write_all(b"\r\n")?;
    }
    Ok(())
}

/// `<kind><n>\r\n`, written at the end of `buf`.
fn length_line(kind: u8, mut n: usize, buf: &mut [u8; 24]) -> &[u8] {
    let mut at = buf.len() - 2;
    buf[at..].copy_from_slice(b"\r\n");
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    at -= 1;
    buf[at] = kind;
    &buf[at..]
}
