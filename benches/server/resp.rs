//! The Redis side of the load: a minimal asynchronous RESP client that sends
//! `GET key` commands, `depth` at a time (1: no pipelining; 16: what
//! `redis-benchmark -P 16` does), and checks every reply against the value
//! loaded. One connection per caller, as Redis clients (and
//! `redis-benchmark -c`) work: RESP has no multiplexing.
//!
//! Replies parsed: bulk strings (`$16\r\n<16 bytes>\r\n`), nil (`$-1`) and
//! errors (`-...`); nothing else is expected from `GET`.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::data::{Data, Picker};
use crate::load::Caller;

/// A caller sending pipelines of `depth` GETs of random loaded keys.
pub struct Gets {
    stream: TcpStream,
    data: Arc<Data>,
    picker: Picker,
    depth: usize,
    /// The keys' positions of the pipeline in flight.
    positions: Vec<usize>,
    /// The encoded commands (reused).
    out: Vec<u8>,
    /// Bytes read and not yet parsed: `input[parsed..filled]`.
    input: Vec<u8>,
    parsed: usize,
    filled: usize,
}

impl Gets {
    /// Connects to `127.0.0.1:port`.
    pub async fn connect(
        port: u16,
        data: Arc<Data>,
        caller: usize,
        depth: usize,
    ) -> Result<Gets, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("cannot connect to Redis on port {port}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let picker = Picker::new(data.len(), caller);
        Ok(Gets {
            stream,
            data,
            picker,
            depth,
            positions: Vec::with_capacity(depth),
            out: Vec::with_capacity(depth * 48),
            input: vec![0; 64 << 10],
            parsed: 0,
            filled: 0,
        })
    }

    /// The next reply's value (`None` for nil), reading more as needed.
    async fn reply(&mut self) -> Result<Option<[u8; 16]>, String> {
        loop {
            if let Some((reply, used)) = parse(&self.input[self.parsed..self.filled])? {
                self.parsed += used;
                return Ok(reply);
            }
            // Keep the unparsed tail at the front, then read after it.
            self.input.copy_within(self.parsed..self.filled, 0);
            self.filled -= self.parsed;
            self.parsed = 0;
            let read = self
                .stream
                .read(&mut self.input[self.filled..])
                .await
                .map_err(|e| format!("Redis read failed: {e}"))?;
            if read == 0 {
                return Err("Redis closed the connection".into());
            }
            self.filled += read;
        }
    }
}

impl Caller for Gets {
    async fn call(&mut self) -> Result<u64, String> {
        self.out.clear();
        self.positions.clear();
        for _ in 0..self.depth {
            let i = self.picker.next();
            self.positions.push(i);
            self.out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$16\r\n");
            self.out.extend_from_slice(self.data.key(i));
            self.out.extend_from_slice(b"\r\n");
        }
        self.stream
            .write_all(&self.out)
            .await
            .map_err(|e| format!("Redis write failed: {e}"))?;
        for k in 0..self.depth {
            let value = self.reply().await?;
            let i = self.positions[k];
            if value != Some(self.data.value(i)) {
                return Err(format!("Redis GET of key {i} answered {value:?}"));
            }
        }
        Ok(self.depth as u64)
    }
}

/// One reply at the front of `buf` and the bytes it took, or `None` if
/// `buf` does not hold all of it yet.
#[allow(clippy::type_complexity)]
fn parse(buf: &[u8]) -> Result<Option<(Option<[u8; 16]>, usize)>, String> {
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let header = &buf[..eol];
    match header.first() {
        Some(b'$') if header == b"$-1" => Ok(Some((None, eol + 2))),
        Some(b'$') if header == b"$16" => {
            let end = eol + 2 + 16 + 2;
            if buf.len() < end {
                return Ok(None);
            }
            let value: [u8; 16] = buf[eol + 2..eol + 18].try_into().expect("16 bytes");
            Ok(Some((Some(value), end)))
        }
        _ => Err(format!(
            "unexpected Redis reply {:?}",
            String::from_utf8_lossy(header)
        )),
    }
}
