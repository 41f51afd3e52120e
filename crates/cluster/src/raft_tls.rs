//! mTLS on the Raft port, and the node id a member's certificate proves.
//!
//! With [`RaftTls`] set, a member serves its Raft service only to callers
//! that present a certificate of the Raft CA (the handshake refuses any
//! other), and dials its peers over TLS, presenting its own certificate
//! and verifying theirs against the same CA.
//!
//! **The node id is bound to the certificate.** Member N's certificate
//! carries the SAN DNS name `node-N.raft.uuidmap` ([`node_name`]), and
//! serves both as a server and as a client certificate (extended key
//! usages `serverAuth` and `clientAuth`).
//!
//! - The dialer verifies that the peer it dials for node N presents N's
//!   name: rustls checks the server certificate against the name given to
//!   tonic's `ClientTlsConfig::domain_name`, whatever the address dialed,
//!   so this holds through a `--raft-dial` proxy too.
//! - The server reads the caller's certificate, takes its node id from
//!   the SAN ([`node_in_certificate`]), and refuses (`PERMISSION_DENIED`)
//!   a caller that is not a member (voter or learner) of the membership it
//!   knows, and a call whose claimed sender (a vote's candidate, an
//!   append's or a snapshot's leader, a transfer's leader) is not that
//!   node (`authorize_caller`, `check_sender`). A member in no group yet accepts any node of the
//!   CA: it must be added by a leader it does not know yet. `Identify`
//!   answers any node of the CA.
//!
//! Why a DNS name rather than a URI SAN (`uuidmap://raft/node/N`): rustls
//! verifies a server certificate against a DNS name and nothing else, so
//! the dialer's check needs no verifier of our own; and `openssl req
//! -addext subjectAltName=DNS:...` makes it in one line. The `.uuidmap`
//! suffix is not a public top-level domain, so no public CA issues it; the
//! Raft CA should be one of its own, used for nothing else.
//!
//! The incarnation check ([`crate::identity`]) is separate and unchanged:
//! it tells a replaced directory apart, where the certificate tells the
//! node apart.

use std::collections::BTreeSet;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};
use tonic::{Request, Status};

/// The DNS suffix of the members' certificate names.
pub const NAME_SUFFIX: &str = ".raft.uuidmap";

/// The SAN DNS name member `id`'s certificate carries:
/// `node-<id>.raft.uuidmap`.
pub fn node_name(id: u64) -> String {
    format!("node-{id}{NAME_SUFFIX}")
}

/// The node id in a name of the form [`node_name`] makes, if it is one.
fn node_of_name(name: &str) -> Option<u64> {
    let digits = name
        .to_ascii_lowercase()
        .strip_prefix("node-")?
        .strip_suffix(NAME_SUFFIX)?
        .to_string();
    // Digits only: `+1` or `01` would name node 1 twice.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    digits.parse().ok().filter(|&id| id != 0)
}

/// Why a certificate names no node.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CertNodeError {
    /// The certificate does not parse as X.509.
    #[error("the certificate is not a valid X.509 certificate: {0}")]
    Malformed(String),
    /// No SAN DNS name of the form `node-<ID>.raft.uuidmap`.
    #[error(
        "the certificate names no member: it needs the SAN DNS name node-<ID>{NAME_SUFFIX} \
         (README, \"Security\")"
    )]
    NoNode,
    /// Two different node names.
    #[error("the certificate names two members, nodes {0} and {1}: a member's names one")]
    TwoNodes(u64, u64),
}

/// The node id the certificate `der` names (its SAN DNS name
/// `node-<ID>.raft.uuidmap`). The certificate's chain is not checked
/// here: the TLS handshake did that.
pub fn node_in_certificate(der: &[u8]) -> Result<u64, CertNodeError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| CertNodeError::Malformed(e.to_string()))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| CertNodeError::Malformed(e.to_string()))?
        .ok_or(CertNodeError::NoNode)?;
    let mut found = None;
    for name in &san.value.general_names {
        let x509_parser::extensions::GeneralName::DNSName(dns) = name else {
            continue;
        };
        match (found, node_of_name(dns)) {
            (_, None) => {}
            (None, Some(id)) => found = Some(id),
            (Some(a), Some(b)) if a != b => return Err(CertNodeError::TwoNodes(a, b)),
            (Some(_), Some(_)) => {}
        }
    }
    found.ok_or(CertNodeError::NoNode)
}

/// A member's Raft TLS material, read and checked (the server crate reads
/// the files; `--raft-tls-cert`, `--raft-tls-key`, `--raft-tls-ca`).
#[derive(Clone)]
pub struct RaftTls {
    /// This member's certificate chain (PEM), leaf first.
    cert: Vec<u8>,
    /// Its private key (PEM).
    key: Vec<u8>,
    /// The Raft CA (PEM): the peers' certificates must chain to it.
    ca: Vec<u8>,
}

/// Raft TLS material that cannot serve this member.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RaftTlsError {
    /// The certificate holds no usable leaf.
    #[error("the Raft certificate holds no PEM certificate")]
    NoCertificate,
    /// The leaf names no member, or another one.
    #[error("the Raft certificate cannot serve node {node_id}: {why}")]
    WrongNode {
        /// This member's id.
        node_id: u64,
        /// What the certificate names instead.
        why: String,
    },
    /// rustls refused the certificate, key or CA.
    #[error("the Raft TLS certificate, key or CA is not usable: {0}")]
    Unusable(String),
}

impl RaftTls {
    /// The material of member `node_id`: its certificate chain, its key
    /// and the Raft CA, as PEM. Refuses a certificate that does not name
    /// `node_id` ([`node_name`]): its peers would refuse it.
    pub fn new(
        node_id: u64,
        cert: Vec<u8>,
        key: Vec<u8>,
        ca: Vec<u8>,
    ) -> Result<RaftTls, RaftTlsError> {
        let leaf = CertificateDer::pem_slice_iter(&cert)
            .next()
            .and_then(Result::ok)
            .ok_or(RaftTlsError::NoCertificate)?;
        let wrong = |why: String| RaftTlsError::WrongNode { node_id, why };
        match node_in_certificate(&leaf) {
            Ok(id) if id == node_id => {}
            Ok(id) => {
                return Err(wrong(format!(
                    "it names node {id} ({}), not {}",
                    node_name(id),
                    node_name(node_id)
                )));
            }
            Err(e) => return Err(wrong(e.to_string())),
        }
        let tls = RaftTls { cert, key, ca };
        // Build both sides once now, so that a key that does not match its
        // certificate stops the start here.
        tonic::transport::Server::builder()
            .tls_config(tls.server_config())
            .map_err(|e| RaftTlsError::Unusable(uuidmap_proto::error_chain::error_chain(&e)))?;
        tonic::transport::Endpoint::from_static("https://127.0.0.1:1")
            .tls_config(tls.client_config(node_id))
            .map_err(|e| RaftTlsError::Unusable(uuidmap_proto::error_chain::error_chain(&e)))?;
        Ok(tls)
    }

    /// The server side: this member's certificate, and a client
    /// certificate of the Raft CA required of every caller.
    pub fn server_config(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
            .client_auth_optional(false)
    }

    /// The client side, dialing node `target`: the peer must present a
    /// certificate of the Raft CA for [`node_name`]`(target)`; this member
    /// presents its own.
    pub fn client_config(&self, target: u64) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key))
            .domain_name(node_name(target))
    }
}

impl std::fmt::Debug for RaftTls {
    // Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftTls").finish_non_exhaustive()
    }
}

/// The node id the caller's certificate proves, or the refusal. With TLS
/// on, the handshake already refused a caller without a certificate of
/// the CA; one that still has none here is refused all the same.
pub(crate) fn caller_node<T>(request: &Request<T>) -> Result<u64, Status> {
    let certs = request.peer_certs().ok_or_else(|| {
        Status::unauthenticated(
            "this member's Raft port takes only callers with a member certificate of its Raft \
             CA (mTLS), and this call came without one",
        )
    })?;
    let leaf = certs.first().ok_or_else(|| {
        Status::unauthenticated("the caller presented no certificate to the Raft port")
    })?;
    node_in_certificate(leaf)
        .map_err(|e| Status::permission_denied(format!("refusing a Raft call: the caller's {e}")))
}

/// Decides who may call (module docs): the caller's node, if it is in
/// `members`, the membership this member knows (empty: in no group yet).
pub(crate) fn authorize_caller<T>(
    request: &Request<T>,
    members: &BTreeSet<u64>,
) -> Result<u64, Status> {
    let node = caller_node(request)?;
    if !members.is_empty() && !members.contains(&node) {
        return Err(Status::permission_denied(format!(
            "refusing a Raft call from node {node} (its certificate names {}): it is not a \
             member of this group (members {members:?}). Add it with `uuidmap cluster add` \
             first",
            node_name(node)
        )));
    }
    Ok(node)
}

/// Refuses a message whose claimed sender (`claimed`: a vote's candidate,
/// the leader of an append, a snapshot or a transfer) is not `caller`,
/// the node its certificate proves.
pub(crate) fn check_sender(caller: u64, claimed: u64) -> Result<(), Status> {
    if claimed == caller {
        return Ok(());
    }
    Err(Status::permission_denied(format!(
        "refusing a Raft call that claims to come from node {claimed}: the caller's \
         certificate is node {caller}'s ({}), and a member may speak only for itself",
        node_name(caller)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_node_name_form_names_a_node() {
        assert_eq!(node_of_name("node-1.raft.uuidmap"), Some(1));
        assert_eq!(node_of_name("NODE-42.Raft.Uuidmap"), Some(42));
        for bad in [
            "node-0.raft.uuidmap",
            "node-01.raft.uuidmap",
            "node-+1.raft.uuidmap",
            "node-.raft.uuidmap",
            "node-1.raft.uuidmap.evil",
            "xnode-1.raft.uuidmap",
            "node-1.other.uuidmap",
            "node-99999999999999999999.raft.uuidmap",
            "localhost",
        ] {
            assert_eq!(node_of_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn node_name_round_trips() {
        for id in [1, 7, u64::MAX] {
            assert_eq!(node_of_name(&node_name(id)), Some(id));
        }
    }
}
