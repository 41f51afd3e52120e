//! `SET` (with `NX`, `XX` or Valkey's `IFEQ`), `DEL`, Valkey's `DELIFEQ`
//! and `MSET`: each one batch through
//! the single writer (`WriteHandle::write`, the call gRPC's `Write` makes),
//! answered once the batch is applied and durable under the server's
//! `--fsync`.
//!
//! Redis answers `DEL` with the number of keys removed and `SET XX` only if
//! the key exists; our writes do not report what they replaced. So both
//! read the current values and write compare-and-sets expecting them: the
//! batch applies only if no key changed meanwhile, else it is decided again
//! with the values the writer reports (at most [`MAX_RETRIES`] times).
//!
//! `SET key value IFEQ old` and `DELIFEQ key old` are the compare-and-set
//! of the Redis protocol, as Valkey spells it (8.1 and 9.0): one
//! `CompareAndSet` each, decided by the writer (by the leader at propose
//! time, in a group), so a rebalancing job can move an entry through a
//! Redis client as safely as through gRPC. Both leave an absent key
//! absent, as Valkey's do.
//!
//! `WAIT numreplicas timeout` answers how many followers hold every write
//! applied when it was called (the connection's own among them: a write
//! is answered once applied, and a connection runs one command at a
//! time), waiting up to `timeout` ms for `numreplicas` of them, as Redis
//! counts replicas that acknowledged the connection's writes. A single
//! node has none (0 at once); a follower refuses it, as a Redis replica
//! does.

use uuid::Uuid;
use uuidmap_engine::writer::{Key, LeaderHint, WriteError, WriteOp};
use uuidmap_server::front_end::Shared;

use crate::reply;
use crate::uuid_arg::{parse_key, parse_value};

/// How many times a compare-and-set batch is decided again after the keys
/// it expected changed.
pub const MAX_RETRIES: usize = 16;

/// Why a write command wrote nothing, as its RESP error text.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The writer refused the batch.
    #[error("{}", write_refusal(.0))]
    Write(#[from] WriteError),
    /// The keys changed under a compare-and-set batch [`MAX_RETRIES`]
    /// times in a row.
    #[error(
        "ERR the keys changed under the command {MAX_RETRIES} times in a row; nothing was \
         written: retry"
    )]
    Contended,
}

/// The RESP error for a refused write. A follower's refusal names the
/// leader as `MOVED 0 <host:port>` (README, "The Redis protocol").
pub fn write_refusal(e: &WriteError) -> String {
    match e {
        WriteError::NotLeader { leader } => match leader.as_ref().and_then(leader_address) {
            Some(addr) => format!("MOVED 0 {addr}"),
            None => "CLUSTERDOWN this member does not lead and no leader is known yet (an \
                     election is under way): retry"
                .to_string(),
        },
        WriteError::TooLarge { len, max } => format!(
            "ERR a write of {len} operations is over the server's limit of {max} \
             (--max-write-ops): split it"
        ),
        e => format!("ERR {e}"),
    }
}

/// `host:port` of the leader's client URL (`http://host:port`).
fn leader_address(leader: &LeaderHint) -> Option<&str> {
    let url = leader.url.as_deref()?;
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let addr = rest.split('/').next().unwrap_or(rest);
    (!addr.is_empty()).then_some(addr)
}

/// Submits `ops`; `Ok` once applied and durable. A follower's refusal
/// names the leader's Redis-protocol address (`redis://host:port`) when
/// the membership records one, else its gRPC URL.
pub(crate) async fn submit(shared: &Shared, ops: Vec<WriteOp>) -> Result<(), WriteError> {
    match shared.durable.writes().write(ops).await {
        Ok(_) => Ok(()),
        Err(WriteError::NotLeader {
            leader: Some(mut hint),
        }) => {
            if let Some(addr) = shared.cluster.as_ref().and_then(|view| {
                let status = view();
                status
                    .member_resp_addrs
                    .into_iter()
                    .find_map(|(id, addr)| (id == hint.id).then_some(addr))
            }) {
                hint.url = Some(format!("redis://{addr}"));
            }
            Err(WriteError::NotLeader { leader: Some(hint) })
        }
        Err(e) => Err(e),
    }
}

/// Refuses a batch over `--max-write-ops` before any work, as gRPC does.
fn check_size(shared: &Shared, len: usize, out: &mut Vec<u8>) -> bool {
    let max = shared.limits.max_write_ops;
    if len > max {
        reply::error(out, &write_refusal(&WriteError::TooLarge { len, max }));
        return false;
    }
    true
}

/// `SET key value [NX|XX|IFEQ old]`.
pub async fn set(shared: &Shared, args: &[&[u8]], out: &mut Vec<u8>, resp3: bool) {
    let (key, value) = match (parse_key(args[1]), parse_value(args[2])) {
        (Ok((k, _)), Ok(v)) => (k, v),
        (Err(e), _) | (_, Err(e)) => return reply::error(out, &e.to_string()),
    };
    let mut nx = false;
    let mut xx = false;
    let mut if_eq = None;
    let mut opts = args[3..].iter();
    while let Some(opt) = opts.next() {
        if opt.eq_ignore_ascii_case(b"NX") {
            nx = true;
        } else if opt.eq_ignore_ascii_case(b"XX") {
            xx = true;
        } else if opt.eq_ignore_ascii_case(b"IFEQ") {
            let Some(old) = opts.next() else {
                return reply::error(out, "ERR syntax error");
            };
            match parse_value(old) {
                Ok(old) => if_eq = Some(old),
                Err(e) => return reply::error(out, &e.to_string()),
            }
        } else if [&b"EX"[..], b"PX", b"EXAT", b"PXAT", b"KEEPTTL", b"GET"]
            .iter()
            .any(|o| opt.eq_ignore_ascii_case(o))
        {
            return reply::error(
                out,
                "ERR uuidmap keeps no expiry and SET answers no old value: EX, PX, EXAT, PXAT, \
                 KEEPTTL and GET are not supported",
            );
        } else {
            return reply::error(out, "ERR syntax error");
        }
    }
    if u8::from(nx) + u8::from(xx) + u8::from(if_eq.is_some()) > 1 {
        return reply::error(out, "ERR syntax error");
    }
    let outcome = if let Some(old) = if_eq {
        compare_and_set(shared, key, old, Some(value)).await
    } else if nx {
        let op = WriteOp::CompareAndSet {
            key,
            expected: None,
            new: Some(value),
        };
        match submit(shared, vec![op]).await {
            Ok(()) => Ok(true),
            Err(WriteError::CasMismatch { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    } else if xx {
        replace_existing(shared, key, value).await
    } else {
        let op = WriteOp::Put { key, value };
        submit(shared, vec![op])
            .await
            .map(|()| true)
            .map_err(Refusal::from)
    };
    match outcome {
        Ok(true) => reply::simple(out, "OK"),
        Ok(false) => reply::null(out, resp3),
        Err(e) => reply::error(out, &e.to_string()),
    }
}

/// How often `WAIT` looks at the followers' progress again.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(2);

/// `WAIT numreplicas timeout`: the followers whose log holds the applied
/// LSN, once `numreplicas` do or after `timeout` ms (0: `--max-wait-ms`,
/// where Redis waits forever).
pub async fn wait(shared: &Shared, args: &[&[u8]], out: &mut Vec<u8>) {
    let integer = |a: &[u8]| std::str::from_utf8(a).ok()?.parse::<i64>().ok();
    let (Some(wanted), Some(timeout_ms)) = (integer(args[1]), integer(args[2])) else {
        return reply::error(out, "ERR value is not an integer or out of range");
    };
    if timeout_ms < 0 {
        return reply::error(out, "ERR timeout is negative");
    }
    let Some(view) = shared.cluster.as_ref() else {
        return reply::integer(out, 0);
    };
    let lsn = shared.durable.watermark().current();
    let max = shared.limits.max_wait;
    let timeout = match timeout_ms {
        0 => max,
        ms => std::time::Duration::from_millis(ms as u64).min(max),
    };
    let until = tokio::time::Instant::now() + timeout;
    loop {
        let status = view();
        if status.role.as_str() != "leader" {
            return reply::error(out, "ERR WAIT cannot be used with replica instances");
        }
        let holding = status
            .followers
            .iter()
            .filter(|f| f.matched.is_some_and(|m| m >= lsn))
            .count() as i64;
        if holding >= wanted || tokio::time::Instant::now() >= until {
            return reply::integer(out, holding);
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
}

/// One compare-and-set: `key` from `expected` to `new`; `Ok(false)` if
/// its value is not `expected` (or it has none).
async fn compare_and_set(
    shared: &Shared,
    key: Key,
    expected: Uuid,
    new: Option<Uuid>,
) -> Result<bool, Refusal> {
    let op = WriteOp::CompareAndSet {
        key,
        expected: Some(expected),
        new,
    };
    match submit(shared, vec![op]).await {
        Ok(()) => Ok(true),
        Err(WriteError::CasMismatch { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// `DELIFEQ key old`: 1 if `key` held `old` and no longer has a value, 0
/// if it held something else or nothing.
pub async fn del_if_eq(shared: &Shared, args: &[&[u8]], out: &mut Vec<u8>) {
    let (key, old) = match (parse_key(args[1]), parse_value(args[2])) {
        (Ok((k, _)), Ok(v)) => (k, v),
        (Err(e), _) | (_, Err(e)) => return reply::error(out, &e.to_string()),
    };
    match compare_and_set(shared, key, old, None).await {
        Ok(deleted) => reply::integer(out, i64::from(deleted)),
        Err(e) => reply::error(out, &e.to_string()),
    }
}

/// `SET XX`: sets `key` only if it has a value; `Ok(false)` if it has none.
async fn replace_existing(shared: &Shared, key: Key, value: Uuid) -> Result<bool, Refusal> {
    let mut current = shared.durable.index().get(key.as_uuid());
    for _ in 0..MAX_RETRIES {
        let Some(expected) = current else {
            return Ok(false);
        };
        let op = WriteOp::CompareAndSet {
            key,
            expected: Some(expected),
            new: Some(value),
        };
        match submit(shared, vec![op]).await {
            Ok(()) => return Ok(true),
            Err(WriteError::CasMismatch { current: now, .. }) => current = now,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Refusal::Contended)
}

/// `DEL key [key ...]`: the number of keys that had a value and no longer
/// have one (a key named twice counts once).
pub async fn del(shared: &Shared, args: &[&[u8]], out: &mut Vec<u8>) {
    if !check_size(shared, args.len() - 1, out) {
        return;
    }
    let mut keys = Vec::with_capacity(args.len() - 1);
    for a in &args[1..] {
        match parse_key(a) {
            Ok((k, _)) => keys.push(k),
            Err(e) => return reply::error(out, &e.to_string()),
        }
    }
    keys.sort_unstable();
    keys.dedup();
    let index = shared.durable.index();
    let mut present: Vec<(Key, Uuid)> = keys
        .iter()
        .filter_map(|k| index.get(k.as_uuid()).map(|v| (*k, v)))
        .collect();
    drop(index);
    for _ in 0..MAX_RETRIES {
        if present.is_empty() {
            return reply::integer(out, 0);
        }
        let ops = present
            .iter()
            .map(|&(key, v)| WriteOp::CompareAndSet {
                key,
                expected: Some(v),
                new: None,
            })
            .collect();
        match submit(shared, ops).await {
            Ok(()) => return reply::integer(out, present.len() as i64),
            Err(WriteError::CasMismatch { index, current, .. }) => match current {
                Some(now) => present[index].1 = now,
                None => {
                    present.remove(index);
                }
            },
            Err(e) => return reply::error(out, &write_refusal(&e)),
        }
    }
    reply::error(out, &Refusal::Contended.to_string());
}

/// `MSET key value [key value ...]`: one batch of puts, all or none.
pub async fn mset(shared: &Shared, args: &[&[u8]], out: &mut Vec<u8>) {
    let pairs = &args[1..];
    if !pairs.len().is_multiple_of(2) {
        return reply::error(out, "ERR wrong number of arguments for 'mset' command");
    }
    if !check_size(shared, pairs.len() / 2, out) {
        return;
    }
    let mut ops = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks_exact(2) {
        match (parse_key(pair[0]), parse_value(pair[1])) {
            (Ok((key, _)), Ok(value)) => ops.push(WriteOp::Put { key, value }),
            (Err(e), _) | (_, Err(e)) => return reply::error(out, &e.to_string()),
        }
    }
    match submit(shared, ops).await {
        Ok(()) => reply::simple(out, "OK"),
        Err(e) => reply::error(out, &write_refusal(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_names_the_leader_as_moved_host_port() {
        let hint = |url: Option<&str>| WriteError::NotLeader {
            leader: Some(LeaderHint {
                id: 2,
                url: url.map(str::to_string),
            }),
        };
        assert_eq!(
            write_refusal(&hint(Some("http://10.0.0.2:7878"))),
            "MOVED 0 10.0.0.2:7878"
        );
        assert_eq!(
            write_refusal(&hint(Some("https://db2.example:7878/"))),
            "MOVED 0 db2.example:7878"
        );
        // The leader's RESP port, when the membership records it.
        assert_eq!(
            write_refusal(&hint(Some("redis://10.0.0.2:6380"))),
            "MOVED 0 10.0.0.2:6380"
        );
        assert!(write_refusal(&hint(None)).starts_with("CLUSTERDOWN "));
        let none = WriteError::NotLeader { leader: None };
        assert!(write_refusal(&none).starts_with("CLUSTERDOWN "));
    }
}
