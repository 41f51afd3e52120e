//! The request parser: RESP2 requests (an array of bulk strings, as every
//! client sends) and inline commands (a line of words, as typed into
//! `telnet`), read from the connection's buffer without copying.
//!
//! Why our own and not the `redis-protocol` crate: a server parses only
//! one shape (an array of bulk strings), and must refuse a hostile header
//! *before* it buffers what the header announces. `redis-protocol` decodes
//! every frame type into a tree (a `Vec` per array: an allocation per
//! GET) and has no size limits, so it would need this header scan in
//! front of it anyway. This parser records each argument as a range of the
//! buffer into a vector the connection reuses: no allocation per request.
//!
//! Measured (`cargo bench -p uuidmap-resp --bench parse`, BENCHMARKS.md,
//! "The RESP parser against `redis-protocol`"): on redis-benchmark's
//! buffers, each parser handing every request's arguments over as the
//! connection does, this parser takes 28 ns a pipelined `GET <UUID>`
//! (27.8-29.3 over 3 runs), 40 ns a `SET <UUID> <16 bytes>` and 1.07 µs
//! an `MGET` of 100 keys. `redis-protocol` 6.0's fastest decoder
//! (`resp2::decode::decode_range`, ranges of the buffer) takes 73, 93
//! and 1.88 µs: 2.6x, 2.4x and 1.8x as long; its `Bytes` decoder
//! (`decode_bytes_mut`, what its tokio codec uses) 160, 205 and 4.5 µs.
//! Ours is the faster, with its limits checked. Either is small beside
//! the rest of an unpipelined GET (3.3-5.1 µs of server CPU, of which
//! this parser 0.02-0.04 µs: BENCHMARKS.md, "What an unpipelined GET
//! costs, step by step").
//!
//! # Limits (every one checked on the header, before any byte it announces
//! is buffered)
//!
//! - at most [`Limits::max_args`] arguments in a request;
//! - at most [`Limits::max_bulk`] bytes in one argument;
//! - at most [`MAX_LINE`] bytes in a header line, [`Limits::max_bulk`] in
//!   an inline command.
//!
//! A request over a limit, or one that is not RESP, is a [`ParseError`]:
//! the connection answers it with `-ERR Protocol error: ...` and closes, as
//! Redis does (the bytes after it cannot be framed). `*0` and `*-1` (an
//! empty or null array) are skipped without an answer, as Redis does.

use std::ops::Range;

/// The longest header line (`*<count>` or `$<length>`): a sign and 19
/// digits, and room to spare.
pub const MAX_LINE: usize = 32;

/// What a request may hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most arguments (the command name included).
    pub max_args: usize,
    /// Most bytes in one argument, and in one inline command.
    pub max_bulk: usize,
}

/// Why the bytes are not a request this server takes. The connection is
/// closed after the answer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    /// `*<n>` is not a number.
    #[error("Protocol error: invalid multibulk length")]
    BadCount,
    /// `*<n>` over the limit.
    #[error(
        "Protocol error: a request of {count} arguments is over this server's limit of {max} \
         (--max-batch-keys and --max-write-ops bound it)"
    )]
    TooManyArgs {
        /// The count announced.
        count: u64,
        /// The limit.
        max: usize,
    },
    /// An element of the array is not a bulk string.
    #[error("Protocol error: expected '$', got '{got}'")]
    NotBulk {
        /// The byte found instead, shown as a character.
        got: char,
    },
    /// `$<n>` is not a length.
    #[error("Protocol error: invalid bulk length")]
    BadLength,
    /// `$<n>` over the limit.
    #[error(
        "Protocol error: a bulk string of {len} bytes is over this server's limit of {max} \
         (keys and values are UUIDs: 16 raw bytes or 36 characters)"
    )]
    BulkTooLong {
        /// The length announced.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// A bulk string not followed by CRLF.
    #[error("Protocol error: a bulk string is not followed by CRLF")]
    NoCrlf,
    /// A header line without its end within [`MAX_LINE`] bytes.
    #[error("Protocol error: a header line is longer than {MAX_LINE} bytes")]
    LongLine,
    /// An inline command over the limit.
    #[error("Protocol error: too big inline request")]
    LongInline,
}

/// Parses the request at the start of `buf`. On `Ok(Some(n))` the request
/// took `n` bytes and `args` holds its arguments as ranges of `buf` (an
/// empty `args`: a request to skip, `*0` or `*-1` or an empty line);
/// `Ok(None)`: the request is not complete yet (`args` is then
/// meaningless). Never reads past `buf`, never panics, and never
/// reserves room for what a header announces.
pub fn parse(
    buf: &[u8],
    args: &mut Vec<Range<usize>>,
    limits: Limits,
) -> Result<Option<usize>, ParseError> {
    args.clear();
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_array(buf, args, limits),
        Some(_) => parse_inline(buf, args, limits),
    }
}

fn parse_array(
    buf: &[u8],
    args: &mut Vec<Range<usize>>,
    limits: Limits,
) -> Result<Option<usize>, ParseError> {
    let Some((count, mut pos)) = header(buf, 0, ParseError::BadCount)? else {
        return Ok(None);
    };
    if count <= 0 {
        return Ok(Some(pos));
    }
    let count = count as u64;
    if count > limits.max_args as u64 {
        return Err(ParseError::TooManyArgs {
            count,
            max: limits.max_args,
        });
    }
    for _ in 0..count {
        match buf.get(pos) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(&other) => {
                return Err(ParseError::NotBulk {
                    got: char::from(other),
                });
            }
        }
        let Some((len, start)) = header(buf, pos, ParseError::BadLength)? else {
            return Ok(None);
        };
        if len < 0 {
            return Err(ParseError::BadLength);
        }
        let len = len as u64;
        if len > limits.max_bulk as u64 {
            return Err(ParseError::BulkTooLong {
                len,
                max: limits.max_bulk,
            });
        }
        let end = start + len as usize;
        let Some(tail) = buf.get(end..end + 2) else {
            return Ok(None);
        };
        if tail != b"\r\n" {
            return Err(ParseError::NoCrlf);
        }
        args.push(start..end);
        pos = end + 2;
    }
    Ok(Some(pos))
}

/// The number of the header line at `buf[at]` (`*<n>` or `$<n>`) and where
/// the line ends; `None` when the line is not complete.
fn header(buf: &[u8], at: usize, bad: ParseError) -> Result<Option<(i64, usize)>, ParseError> {
    let line = &buf[at + 1..];
    let Some(cr) = line.iter().take(MAX_LINE).position(|&b| b == b'\r') else {
        return if line.len() >= MAX_LINE {
            Err(ParseError::LongLine)
        } else {
            Ok(None)
        };
    };
    match line.get(cr + 1) {
        None => return Ok(None),
        Some(b'\n') => {}
        Some(_) => return Err(bad),
    }
    let n = std::str::from_utf8(&line[..cr])
        .ok()
        .filter(|t| !t.starts_with('+'))
        .and_then(|t| t.parse::<i64>().ok())
        .ok_or(bad)?;
    Ok(Some((n, at + 1 + cr + 2)))
}

/// An inline command: words separated by spaces, up to `\n` (a `\r`
/// before it is dropped). Quotes are not interpreted.
fn parse_inline(
    buf: &[u8],
    args: &mut Vec<Range<usize>>,
    limits: Limits,
) -> Result<Option<usize>, ParseError> {
    let Some(nl) = buf.iter().take(limits.max_bulk).position(|&b| b == b'\n') else {
        return if buf.len() >= limits.max_bulk {
            Err(ParseError::LongInline)
        } else {
            Ok(None)
        };
    };
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut start = None;
    let ends = std::iter::once((line.len(), b' '));
    for (i, b) in line.iter().copied().enumerate().chain(ends) {
        match (b == b' ' || b == b'\t', start) {
            (true, Some(s)) => {
                if args.len() == limits.max_args {
                    return Err(ParseError::TooManyArgs {
                        count: args.len() as u64 + 1,
                        max: limits.max_args,
                    });
                }
                args.push(s..i);
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    Ok(Some(nl + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIMITS: Limits = Limits {
        max_args: 8,
        max_bulk: 64,
    };

    /// A parsed request's arguments, copied, and the bytes it took.
    type Words = (Vec<Vec<u8>>, usize);

    fn words(buf: &[u8]) -> Result<Option<Words>, ParseError> {
        let mut args = Vec::new();
        Ok(parse(buf, &mut args, LIMITS)?
            .map(|n| (args.iter().map(|r| buf[r.clone()].to_vec()).collect(), n)))
    }

    #[test]
    fn an_array_of_bulk_strings_is_a_request_and_its_length_is_what_it_took() {
        let req = b"*2\r\n$3\r\nGET\r\n$4\r\nk\r\nx\r\n*1\r\n";
        let (args, n) = words(req).unwrap().unwrap();
        assert_eq!(args, vec![b"GET".to_vec(), b"k\r\nx".to_vec()]);
        assert_eq!(&req[n..], b"*1\r\n");
    }

    #[test]
    fn every_prefix_of_a_request_is_incomplete() {
        let req = b"*3\r\n$3\r\nSET\r\n$2\r\nab\r\n$0\r\n\r\n";
        for end in 0..req.len() {
            assert_eq!(words(&req[..end]), Ok(None), "{end}");
        }
        assert!(words(req).unwrap().is_some());
    }

    #[test]
    fn empty_and_null_arrays_are_skipped() {
        assert_eq!(words(b"*0\r\n"), Ok(Some((vec![], 4))));
        assert_eq!(words(b"*-1\r\n"), Ok(Some((vec![], 5))));
    }

    #[test]
    fn headers_over_the_limits_are_refused_before_their_bytes_arrive() {
        assert_eq!(
            words(b"*9\r\n"),
            Err(ParseError::TooManyArgs { count: 9, max: 8 })
        );
        assert_eq!(
            words(b"*1\r\n$999999999999\r\n"),
            Err(ParseError::BulkTooLong {
                len: 999_999_999_999,
                max: 64
            })
        );
        assert_eq!(words(b"*1\r\n$-1\r\n"), Err(ParseError::BadLength));
        assert_eq!(words(b"*x\r\n"), Err(ParseError::BadCount));
        assert_eq!(words(b"*+1\r\n"), Err(ParseError::BadCount));
        assert_eq!(
            words(b"*1\r\n:1\r\n"),
            Err(ParseError::NotBulk { got: ':' })
        );
        assert_eq!(words(b"*1\r\n$1\r\nab\r\n"), Err(ParseError::NoCrlf));
        assert_eq!(words(&[b'*'; 40]), Err(ParseError::LongLine));
        assert_eq!(words(&[b'a'; 64]), Err(ParseError::LongInline));
    }

    #[test]
    fn an_inline_command_is_split_on_spaces() {
        let (args, n) = words(b"PING  hello\r\nrest").unwrap().unwrap();
        assert_eq!(args, vec![b"PING".to_vec(), b"hello".to_vec()]);
        assert_eq!(n, 13);
        assert_eq!(words(b"\r\n"), Ok(Some((vec![], 2))));
        assert_eq!(words(b"PING"), Ok(None));
    }

    proptest! {
        /// Any bytes: an answer, never a panic, and what a request took is
        /// within the buffer.
        #[test]
        fn any_bytes_parse_or_fail_without_panicking(buf in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut args = Vec::new();
            if let Ok(Some(n)) = parse(&buf, &mut args, LIMITS) {
                prop_assert!(n <= buf.len());
                prop_assert!(args.len() <= LIMITS.max_args);
                for r in &args {
                    prop_assert!(r.end <= n && r.len() <= LIMITS.max_bulk);
                }
            }
        }

        /// Any bytes after a valid header: the same guarantees.
        #[test]
        fn requests_with_random_tails_never_panic(
            n in 0usize..12,
            tail in proptest::collection::vec(any::<u8>(), 0..128),
        ) {
            let mut buf = format!("*{n}\r\n$").into_bytes();
            buf.extend_from_slice(&tail);
            let mut args = Vec::new();
            let _ = parse(&buf, &mut args, LIMITS);
        }
    }
}
