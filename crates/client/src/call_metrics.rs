//! What every call counts in the `metrics` crate's recorder, when the
//! application installs one: `uuidmap_client_calls_total{rpc}` when it
//! starts, and its latency (retries and backoffs included) in
//! `uuidmap_client_call_seconds{rpc,outcome}` (`ok` or `error`) when it
//! ends.
//!
//! The `rpc` label is one of a fixed set, spelled out below so that each
//! metric's key is a `static` built by the `metrics` macros: a call pays
//! no allocation for its labels, recorder or not. An RPC missing from the
//! list still counts, through a key built at the call.

use std::time::Duration;

/// Calls `$callback!($args; "Get", "BatchGet", ...)` with every RPC name
/// of the client as a literal.
macro_rules! with_rpcs {
    ($callback:ident!($($args:tt)*)) => {
        $callback!($($args)*;
            "Get", "BatchGet", "Lookup", "Scan", "Watch", "Put", "Delete",
            "CompareAndSet", "Write", "WaitFor", "Stats", "Snapshot", "Ping",
            "cluster.Status", "cluster.AddLearner", "cluster.Promote", "cluster.Remove",
            "cluster.TransferLeader")
    };
}

macro_rules! count_start {
    ($name:expr; $($known:literal),*) => {
        match $name {
            $($known => metrics::counter!("uuidmap_client_calls_total", "rpc" => $known).increment(1),)*
            other => metrics::counter!("uuidmap_client_calls_total", "rpc" => other).increment(1),
        }
    };
}

macro_rules! record_end {
    ($name:expr, $outcome:literal, $secs:expr; $($known:literal),*) => {
        match $name {
            $($known => metrics::histogram!(
                "uuidmap_client_call_seconds", "rpc" => $known, "outcome" => $outcome
            ).record($secs),)*
            other => metrics::histogram!(
                "uuidmap_client_call_seconds", "rpc" => other, "outcome" => $outcome
            ).record($secs),
        }
    };
}

/// A call of `rpc` starts.
pub(crate) fn started(rpc: &'static str) {
    with_rpcs!(count_start!(rpc));
}

/// A call of `rpc` ended after `took`, answered or failed.
pub(crate) fn ended(rpc: &'static str, took: Duration, ok: bool) {
    let secs = took.as_secs_f64();
    if ok {
        with_rpcs!(record_end!(rpc, "ok", secs));
    } else {
        with_rpcs!(record_end!(rpc, "error", secs));
    }
}
