//! The Redis side of the load: callers that send `GET key` commands,
//! `depth` at a time (1: no pipelining; 16: what `redis-benchmark -P 16`
//! does), and check every reply against the value loaded. One connection
//! per caller, as Redis clients (and `redis-benchmark -c`) work: RESP has
//! no multiplexing. The protocol itself (encoding, parsing) is the benches'
//! one implementation in `common/redis.rs`; this file only drives it
//! asynchronously.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::data::{Data, Picker};
use crate::load::Caller;
use crate::redis::{ReplyBuf, ReplyRef, parse_reply, write_command};

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
    replies: ReplyBuf,
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
            replies: ReplyBuf::default(),
        })
    }

    /// Reads until a whole reply is buffered, then checks that it is the
    /// value of key `i`.
    async fn check_reply(&mut self, i: usize) -> Result<(), String> {
        loop {
            let parsed = parse_reply(self.replies.unparsed())
                .map_err(|e| format!("Redis GET of key {i}: {e}"))?;
            if let Some((reply, used)) = parsed {
                let expected = self.data.value(i);
                let ok = reply == ReplyRef::Bulk(Some(&expected[..]));
                let answered = (!ok).then(|| format!("{:?}", reply.to_owned()));
                self.replies.consume(used);
                return match answered {
                    None => Ok(()),
                    Some(a) => Err(format!("Redis GET of key {i} answered {a}")),
                };
            }
            let read = self
                .stream
                .read(self.replies.space())
                .await
                .map_err(|e| format!("Redis read failed: {e}"))?;
            if read == 0 {
                return Err("Redis closed the connection".into());
            }
            self.replies.filled(read);
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
            write_command(&mut self.out, &[b"GET", self.data.key(i)])
                .expect("writing to a Vec cannot fail");
        }
        self.stream
            .write_all(&self.out)
            .await
            .map_err(|e| format!("Redis write failed: {e}"))?;
        for k in 0..self.depth {
            self.check_reply(self.positions[k]).await?;
        }
        Ok(self.depth as u64)
    }
}
