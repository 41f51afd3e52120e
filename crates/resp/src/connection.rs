//! One client connection: read what arrived, run every complete command
//! in it in order, write their answers in one write, read again.
//!
//! Pipelining: the answers of the commands that arrived together are
//! written together, in the order of the commands; a command runs only
//! after the one before it has its answer (a write is durable before the
//! next command starts), as Redis does on one connection. Except that
//! plain `SET key value` commands that arrived one after another run as
//! one write batch (`set_run`: one fsync for the run), still before the
//! command that follows them.
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
use crate::set_run::is_plain_set;

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
    // The plain SETs parsed but not run yet: their arguments' places in
    // `input`, at most `--max-write-ops` of them.
    let mut sets: Vec<[Range<usize>; 3]> = Vec::new();
    let max_run = commands.shared.limits.max_write_ops.max(1);
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
                    let buf = &input[start..start + n];
                    if let [name, key, value] = &ranges[..]
                        && is_plain_set([
                            &buf[name.clone()],
                            &buf[key.clone()],
                            &buf[value.clone()],
                        ])
                    {
                        let at = |r: &Range<usize>| start + r.start..start + r.end;
                        sets.push([at(name), at(key), at(value)]);
                        if sets.len() >= max_run {
                            run_sets(commands, &session, &input, &mut sets, &mut output).await;
                        }
                    } else if !ranges.is_empty() {
                        run_sets(commands, &session, &input, &mut sets, &mut output).await;
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
                    run_sets(commands, &session, &input, &mut sets, &mut output).await;
                    protocol_error(&e, &mut output);
                    close = true;
                    break;
                }
            }
        }
        run_sets(commands, &session, &input, &mut sets, &mut output).await;
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

/// Runs the plain SETs whose arguments are `sets` (places in `input`) as
/// one batch, if there are any, and forgets them.
async fn run_sets(
    commands: &Commands,
    session: &Session,
    input: &[u8],
    sets: &mut Vec<[Range<usize>; 3]>,
    output: &mut Vec<u8>,
) {
    if sets.is_empty() {
        return;
    }
    let args: Vec<[&[u8]; 3]> = sets
        .iter()
        .map(|set| set.clone().map(|r| &input[r]))
        .collect();
    commands.execute_sets(session, &args, output).await;
    sets.clear();
}

/// The answer to a request that cannot be framed; the connection closes
/// after it, as Redis closes it.
fn protocol_error(e: &ParseError, output: &mut Vec<u8>) {
    reply::error(output, &format!("ERR {e}"));
}
