//! The parsers of the options' own value types: each is a `FromStr`, so
//! a flag, its variable and its TOML key are read by the same code and
//! fail with the same message.

use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use std::net::SocketAddr;

use super::{Peer, default_text};

/// `--peers`: members separated by commas, each `ID=RAFT_ADDR@CLIENT_URL`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peers(pub Vec<Peer>);

impl FromStr for Peers {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let peers = parse_id_list(
            s,
            "is not a peer",
            "ID=RAFT_ADDR@CLIENT_URL, for example 2=10.0.0.2:7880@http://10.0.0.2:7878",
            |id, rest| {
                let (raft_addr, client_url) = rest.split_once('@').ok_or("no `@`")?;
                check_host_port(raft_addr)?;
                check_url(client_url)?;
                Ok(Peer {
                    id,
                    raft_addr: raft_addr.to_string(),
                    client_url: client_url.to_string(),
                })
            },
        )?;
        Ok(Peers(peers.into_iter().map(|(_, peer)| peer).collect()))
    }
}

/// `--raft-dial`: `ID=HOST:PORT` items separated by commas, in the order
/// given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaftDial(pub Vec<(u64, String)>);

impl FromStr for RaftDial {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let dial = parse_id_list(
            s,
            "is not an address to dial",
            "ID=HOST:PORT, for example 2=127.0.0.1:17890",
            |_, addr| {
                let addr = addr.trim();
                check_host_port(addr)?;
                Ok(addr.to_string())
            },
        )?;
        Ok(RaftDial(dial))
    }
}

/// `--etcd`: etcd's client URLs, separated by commas.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdEndpoints(pub Vec<String>);

impl FromStr for EtcdEndpoints {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let urls: Vec<String> = s
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect();
        if urls.is_empty() {
            return Err("no etcd URL given: write http://HOST:PORT[,http://HOST:PORT...]".into());
        }
        for u in &urls {
            check_url(u)?;
        }
        Ok(EtcdEndpoints(urls))
    }
}

/// Parses `ID=REST` items separated by commas (empty items skipped), in
/// the order given: each id a node id (a number from 1), no id twice, and
/// `rest` made into a `T` by `item` (an error says why not). An error
/// names the item, says `what` it is not and why, and how to write one
/// (`form`).
fn parse_id_list<T>(
    s: &str,
    what: &str,
    form: &str,
    item: impl Fn(u64, &str) -> Result<T, String>,
) -> Result<Vec<(u64, T)>, String> {
    let mut out: Vec<(u64, T)> = Vec::new();
    for text in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = |why: &str| format!("{text:?} {what} ({why}): write {form}");
        let (id, rest) = text.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| bad("the id is not a number"))?;
        if id == 0 {
            return Err(bad("node ids start at 1"));
        }
        let value = item(id, rest).map_err(|why| bad(&why))?;
        if out.iter().any(|(i, _)| *i == id) {
            return Err(bad("this id is given twice"));
        }
        out.push((id, value));
    }
    Ok(out)
}

/// `host:port`, with a port.
pub(super) fn check_host_port(addr: &str) -> Result<(), String> {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(format!("{addr:?} is not host:port")),
    }
}

/// An `http://` or `https://` URL.
pub(super) fn check_url(url: &str) -> Result<(), String> {
    match url.split_once("://") {
        Some(("http" | "https", rest)) if !rest.is_empty() => Ok(()),
        _ => Err(format!("{url:?} is not an http:// or https:// URL")),
    }
}

/// A TOML value read as the flag's text would be: a string as it is, a
/// number or a boolean as it is written. So each option has one parser,
/// its `FromStr`, and one error message for both spellings.
pub(super) fn as_flag_text<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: FromStr,
    T::Err: std::fmt::Display,
{
    #[derive(Deserialize)]
    #[serde(untagged, expecting = "a string, a number or true/false")]
    enum Scalar {
        Text(String),
        Integer(i64),
        Float(f64),
        Bool(bool),
    }
    let text = match Scalar::deserialize(d)? {
        Scalar::Text(t) => t,
        Scalar::Integer(n) => n.to_string(),
        Scalar::Float(x) => x.to_string(),
        Scalar::Bool(b) => b.to_string(),
    };
    text.parse()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("{e}")))
}

/// A switch: `on` or `off` (also `true` or `false`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnOff(pub bool);

impl FromStr for OnOff {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" | "true" => Ok(OnOff(true)),
            "off" | "false" => Ok(OnOff(false)),
            _ => Err(format!("{s:?} is not a switch: give `on` or `off`")),
        }
    }
}

/// `--max-replay-ms`: milliseconds, or `off` (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxReplay(pub Option<Duration>);

impl FromStr for MaxReplay {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") {
            return Ok(MaxReplay(None));
        }
        s.parse::<u64>()
            .map(|ms| MaxReplay(Some(Duration::from_millis(ms))))
            .map_err(|_| format!("{s:?} is not a budget: give milliseconds (500) or `off`"))
    }
}

/// `--snapshot-interval`: a duration, or `off` (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotInterval(pub Option<Duration>);

impl FromStr for SnapshotInterval {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") {
            return Ok(SnapshotInterval(None));
        }
        let unit_at = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (number, unit) = s.split_at(unit_at);
        let scale = match unit {
            "" | "s" => 1,
            "m" => 60,
            "h" => 3600,
            _ => 0,
        };
        match number.parse::<u64>() {
            Ok(n) if scale > 0 => Ok(SnapshotInterval(Some(Duration::from_secs(
                n.saturating_mul(scale),
            )))),
            _ => Err(format!(
                "{s:?} is not an interval: give seconds (600), a number with a unit \
                 (90s, 10m, 1h), or `off`"
            )),
        }
    }
}

/// The value of `--metrics-listen`: an address, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsListen(pub Option<SocketAddr>);

impl FromStr for MetricsListen {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(MetricsListen(None));
        }
        s.parse().map(|a| MetricsListen(Some(a))).map_err(|_| {
            format!(
                "{s:?} is neither an address like {} nor `off`",
                default_text("metrics_listen")
            )
        })
    }
}
