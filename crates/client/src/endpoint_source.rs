//! Where endpoints come from: the servers as the builder was given them
//! ([`Source`]), and the addresses a DNS name resolves to.
//!
//! A server given by IP address is one endpoint. A server given by a DNS
//! name becomes one endpoint *per address* the name resolves to, so that a
//! name in front of a replica group spreads calls over every replica and a
//! dead replica is pessimized alone, not the whole name. Such an endpoint
//! connects to its address, and still says the name to the server: as the
//! HTTP/2 `:authority`, and to TLS as the name the server's certificate
//! must carry.
//!
//! The name is resolved when the client connects ([`ClientBuilder::connect`]),
//! or, after [`ClientBuilder::build`] (which must not block), by the health
//! prober right away; until then the name is one endpoint that tonic
//! resolves at each connection. The prober resolves it again every
//! `resolve_interval`, and at once when every address of the name is
//! pessimized (the replicas may have moved). An address that stays keeps
//! its endpoint (its connections and health); a new one gets a new
//! endpoint; one that is gone is dropped once its calls finish. A failed
//! or empty resolution keeps the endpoints the name had.
//!
//! [`ClientBuilder::connect`]: crate::ClientBuilder::connect
//! [`ClientBuilder::build`]: crate::ClientBuilder::build

use std::net::{IpAddr, SocketAddr};

use tonic::transport::Uri;

use crate::error::ClientError;

/// One server as the builder was given it.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    /// The URL as given.
    pub(crate) url: String,
    /// `http` or `https`.
    scheme: String,
    /// The host as written (a name, or an address without brackets).
    host: String,
    /// The port, given or the scheme's default.
    port: u16,
    /// Whether `host` is a DNS name (else an IP address).
    is_name: bool,
}

impl Source {
    /// Parses a server URL (`http://host:port` or `https://…`).
    pub(crate) fn parse(url: &str) -> Result<Source, ClientError> {
        let bad = |why: &str| ClientError::BadServer {
            server: url.to_string(),
            why: why.to_string(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: tonic::codegen::http::uri::InvalidUri| bad(&e.to_string()))?;
        let scheme = uri
            .scheme_str()
            .ok_or_else(|| bad("no scheme: give http:// or https://"))?;
        if scheme != "http" && scheme != "https" {
            return Err(bad("the scheme must be http or https"));
        }
        let host = uri.host().ok_or_else(|| bad("no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        Ok(Source {
            url: url.to_string(),
            scheme: scheme.to_string(),
            is_name: host.parse::<IpAddr>().is_err(),
            host,
            port,
        })
    }

    /// Whether the server was given by DNS name.
    pub(crate) fn is_name(&self) -> bool {
        self.is_name
    }

    /// The name (or address) the server is known by: what TLS checks the
    /// certificate against.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// The URL that connects to `addr` (IPv6 in brackets).
    pub(crate) fn address_url(&self, addr: SocketAddr) -> String {
        format!("{}://{}", self.scheme, addr)
    }

    /// The addresses the name resolves to, sorted, without repeats.
    pub(crate) async fn resolve(&self) -> std::io::Result<Vec<SocketAddr>> {
        let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .collect();
        addrs.sort();
        addrs.dedup();
        Ok(addrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses_are_told_apart() {
        let name = Source::parse("http://uuidmap.internal:7878").unwrap();
        assert!(name.is_name());
        assert_eq!(name.host(), "uuidmap.internal");
        let v4 = Source::parse("http://10.0.0.1:7878").unwrap();
        assert!(!v4.is_name());
        let v6 = Source::parse("https://[::1]:7878").unwrap();
        assert!(!v6.is_name());
        assert_eq!(v6.host(), "::1");
        let default_port = Source::parse("https://uuidmap.internal").unwrap();
        assert_eq!(
            default_port.address_url("[fd00::7]:443".parse().unwrap()),
            "https://[fd00::7]:443"
        );
        for bad in ["not a url", "ftp://host:1", "127.0.0.1:7878"] {
            assert!(
                matches!(Source::parse(bad), Err(ClientError::BadServer { .. })),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn localhost_resolves_to_loopback_addresses() {
        let s = Source::parse("http://localhost:7878").unwrap();
        let addrs = s.resolve().await.unwrap();
        assert!(!addrs.is_empty());
        assert!(
            addrs
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 7878)
        );
    }
}
