//! One client connection: read what arrived, run every complete command
//! in it in order, write their answers in one write, read again.
//!
//! Pipelining: the answers of the commands that arrived together are
//! written together, in the order of the commands; a command runs only
//! after the one before it has its answer (a write is durable before the
//! next command starts), as Redis does on one connection.
//!
//! Memory: the input buffer holds at most one request under the parser's
//! limits plus one read (a request still incomplete past the limit is a
//! protocol error); the output buffer holds the answers of one batch of
//! pipelined commands. Both are reused for the life of the connection.
//!
//! Stop: while it waits for input, a connection watches the server's stop;
//! a command in flight finishes and is answered first.

use std::ops::Range;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::commands::{Commands, Session};
use crate::parser::{self, Limits, ParseError};
use crate::reply;

/// The read size: a read takes what is there, up to this much.
const READ_CHUNK: usize = 16 << 10;

/// Arguments held on the stack: a command with more allocates a vector.
const INLINE_ARGS: usize = 8;

/// Serves `stream` until the client closes it, `QUIT`, a protocol error,
/// or the server's stop.
pub async fn serve(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    commands: &Commands,
    limits: Limits,
    mut session: Session,
    mut stopping: watch::Receiver<bool>,
) {
    let mut input: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut output: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut ranges: Vec<Range<usize>> = Vec::new();
    // The most an incomplete request may hold: its arguments at their
    // limit and their headers.
    let max_pending = limits
        .max_args
        .saturating_mul(limits.max_bulk.min(64) + parser::MAX_LINE)
        .max(limits.max_bulk + parser::MAX_LINE);
    loop {
        let mut start = 0;
        let mut close = false;
        loop {
            match parser::parse(&input[start..], &mut ranges, limits) {
                Ok(Some(n)) => {
                    if !ranges.is_empty() {
                        let buf = &input[start..start + n];
                        run(commands, &mut session, buf, &ranges, &mut output).await;
                    }
                    start += n;
                    if session.quit {
                        close = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    protocol_error(&e, &mut output);
                    close = true;
                    break;
                }
            }
        }
        input.drain(..start);
        if !close && input.len() > max_pending {
            protocol_error(&ParseError::LongInline, &mut output);
            close = true;
        }
        if !output.is_empty() {
            if stream.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
        }
        if close || *stopping.borrow() {
            let _ = stream.shutdown().await;
            return;
        }
        input.reserve(READ_CHUNK);
        tokio::select! {
            read = stream.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            () = stopped(&mut stopping) => {
                let _ = stream.shutdown().await;
                return;
            }
        }
    }
}

/// Resolves once the server's stop has begun (or its sender is gone,
/// which happens only after).
pub async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|s| *s).await;
}

/// Runs the command whose arguments are `ranges` of `buf`.
async fn run(
    commands: &Commands,
    session: &mut Session,
    buf: &[u8],
    ranges: &[Range<usize>],
    output: &mut Vec<u8>,
) {
    if ranges.len() <= INLINE_ARGS {
        let mut args: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
        for (a, r) in args.iter_mut().zip(ranges) {
            *a = &buf[r.clone()];
        }
        commands
            .execute(session, &args[..ranges.len()], output)
            .await;
    } else {
        let args: Vec<&[u8]> = ranges.iter().map(|r| &buf[r.clone()]).collect();
        commands.execute(session, &args, output).await;
    }
}

/// The answer to a request that cannot be framed; the connection closes
/// after it, as Redis closes it.
fn protocol_error(e: &ParseError, output: &mut Vec<u8>) {
    reply::error(output, &format!("ERR {e}"));
}
