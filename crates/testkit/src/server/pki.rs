//! Throw-away certificate authorities and certificates for the TLS tests
//! (rcgen), written as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA that can sign leaf certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate, PEM.
    pub pem: String,
}

/// A certificate and its private key, PEM.
pub struct Leaf {
    /// The certificate, PEM.
    pub cert: String,
    /// Its private key, PEM.
    pub key: String,
}

impl Ca {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A server certificate for localhost and 127.0.0.1.
    pub fn server(&self) -> Leaf {
        self.leaf(ExtendedKeyUsagePurpose::ServerAuth, "uuidmap test server")
    }

    /// A client certificate.
    pub fn client(&self) -> Leaf {
        self.leaf(ExtendedKeyUsagePurpose::ClientAuth, "uuidmap test client")
    }

    /// A replica group member's Raft certificate for node `id`: the SAN
    /// DNS name `node-<id>.raft.uuidmap`, usable as a server and as a
    /// client certificate.
    pub fn raft_node(&self, id: u64) -> Leaf {
        self.with_names(
            vec![uuidmap_cluster::raft_tls::node_name(id)],
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            &format!("uuidmap member {id}"),
        )
    }

    /// A member's Raft material for node `id` from this CA.
    pub fn raft_tls(&self, id: u64) -> uuidmap_cluster::raft_tls::RaftTls {
        let leaf = self.raft_node(id);
        uuidmap_cluster::raft_tls::RaftTls::new(
            id,
            leaf.cert.into_bytes(),
            leaf.key.into_bytes(),
            self.pem.clone().into_bytes(),
        )
        .expect("the test CA's member certificate is usable")
    }

    fn leaf(&self, usage: ExtendedKeyUsagePurpose, name: &str) -> Leaf {
        self.with_names(
            vec!["localhost".to_string(), "127.0.0.1".to_string()],
            vec![usage],
            name,
        )
    }

    /// A certificate for the SAN `names` with the extended key `usages`.
    pub fn with_names(
        &self,
        names: Vec<String>,
        usages: Vec<ExtendedKeyUsagePurpose>,
        name: &str,
    ) -> Leaf {
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = usages;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// Writes `contents` to `dir/name`; the path.
pub fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}
