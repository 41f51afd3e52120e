//! The options over the config file over the defaults, each checked
//! against its minimum, and the replica group's options against each
//! other.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::option_values::{check_host_port, check_url};
use super::{
    AdmissionLimits, ClusterOptions, ConfigError, DEFAULTED, Limits, MIN_SNAPSHOT_INTERVAL,
    PartitionOptions, ServeArgs, ServeConfig, ServeOptions,
};
use crate::tls::{RaftTlsFiles, TlsFiles};

impl ServeArgs {
    /// The options: the flags (and environment) over the file over the
    /// defaults, checked.
    pub fn resolve(&self) -> Result<ServeConfig, ConfigError> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => ServeOptions::default(),
        };
        self.options.clone().or(file).into_config()
    }
}

impl ServeOptions {
    /// A server configuration: these options over the defaults, each
    /// checked against its minimum.
    pub fn into_config(self) -> Result<ServeConfig, ConfigError> {
        self.check_minimums()?;
        // Checked last, against the listen address and TLS.
        let cluster = ServeOptions {
            node_id: self.node_id,
            raft_listen: self.raft_listen,
            raft_advertise: self.raft_advertise.clone(),
            advertise_url: self.advertise_url.clone(),
            peers: self.peers.clone(),
            cluster_init: self.cluster_init,
            raft_snapshot_entries: self.raft_snapshot_entries,
            raft_keep_entries: self.raft_keep_entries,
            raft_dial: self.raft_dial.clone(),
            raft_tls_cert: self.raft_tls_cert.clone(),
            raft_tls_key: self.raft_tls_key.clone(),
            raft_tls_ca: self.raft_tls_ca.clone(),
            raft_insecure: self.raft_insecure,
            etcd: self.etcd.clone(),
            etcd_cluster: self.etcd_cluster.clone(),
            group: self.group.clone(),
            etcd_lease_ttl: self.etcd_lease_ttl,
            ..ServeOptions::default()
        };
        let o = self.or(ServeOptions::defaults());
        let mut c = ServeConfig {
            listen: o.listen.expect(DEFAULTED),
            data_dir: o.data_dir.expect(DEFAULTED),
            fsync: o.fsync.expect(DEFAULTED),
            insecure: o.insecure.unwrap_or(false),
            tls: tls_files(o.tls_cert, o.tls_key, o.tls_client_ca)?,
            tokens_file: o.tokens_file,
            limits: Limits {
                max_batch_keys: o.max_batch_keys.expect(DEFAULTED),
                max_write_ops: o.max_write_ops.expect(DEFAULTED),
                max_wait: Duration::from_millis(o.max_wait_ms.expect(DEFAULTED)),
                max_filter_values: o.max_filter_values.expect(DEFAULTED),
            },
            admission: AdmissionLimits {
                read_permits: o.read_permits.expect(DEFAULTED),
                read_queue: o.read_queue.expect(DEFAULTED),
                write_permits: o.write_permits.expect(DEFAULTED),
                write_queue: o.write_queue.expect(DEFAULTED),
                scan_permits: o.scan_permits.expect(DEFAULTED),
                scan_queue: o.scan_queue.expect(DEFAULTED),
                max_long_polls: o.max_long_polls.expect(DEFAULTED),
            },
            wal_file_bytes: o.wal_file_bytes.expect(DEFAULTED),
            wal_preallocate: o.wal_preallocate.expect(DEFAULTED),
            wal_overlap_syncs: o.wal_overlap_syncs.expect(DEFAULTED).0,
            runtime_lifo_slot: o.runtime_lifo_slot.expect(DEFAULTED).0,
            snapshot_wal_bytes: o.snapshot_wal_bytes.expect(DEFAULTED),
            snapshot_interval: o.snapshot_interval.expect(DEFAULTED).0,
            max_replay: o.max_replay_ms.expect(DEFAULTED).0,
            stop_grace: Duration::from_millis(o.stop_grace_ms.expect(DEFAULTED)),
            replay_workers: o.replay_workers.expect(DEFAULTED),
            metrics_listen: o.metrics_listen.expect(DEFAULTED).0,
            resp_listen: o.resp_listen,
            cluster: None,
            partitions: None,
        };
        if let Some(every) = c.snapshot_interval
            && every < MIN_SNAPSHOT_INTERVAL
        {
            return Err(ConfigError::TooSmall {
                option: "snapshot_interval",
                min: "1 second".into(),
                value: format!("{} s", every.as_secs()),
                why: "each snapshot writes the whole index; use `off` to turn timed \
                      snapshots off",
            });
        }
        if c.max_replay.is_some_and(|b| b.is_zero()) {
            return Err(ConfigError::TooSmall {
                option: "max_replay_ms",
                min: "1".into(),
                value: "0".into(),
                why: "no restart replays in no time; use `off` to size snapshots by \
                      --snapshot-wal-bytes alone",
            });
        }
        c.cluster = cluster.cluster_options(&c)?;
        c.partitions = cluster.partition_options(&c)?;
        Ok(c)
    }

    /// The partitioned cluster's options, checked (`None`: the whole
    /// keyspace).
    fn partition_options(&self, c: &ServeConfig) -> Result<Option<PartitionOptions>, ConfigError> {
        let err = |m: String| Err(ConfigError::Partitions(m));
        let Some(etcd) = &self.etcd else {
            let given = [
                ("--group", self.group.is_some()),
                ("--etcd-cluster", self.etcd_cluster.is_some()),
                ("--etcd-lease-ttl", self.etcd_lease_ttl.is_some()),
            ];
            return match given.iter().find(|(_, on)| *on) {
                Some((flag, _)) => err(format!(
                    "{flag} is an option of a partitioned cluster: give --etcd too, or leave it \
                     out to serve the whole keyspace"
                )),
                None => Ok(None),
            };
        };
        let Some(group) = &self.group else {
            return err(
                "--etcd needs --group: the name of the replica group this server serves \
                 partitions for"
                    .into(),
            );
        };
        let group = group
            .parse::<uuidmap_partition::GroupName>()
            .map_err(|e| ConfigError::Partitions(format!("--group: {e}")))?;
        let cluster = self
            .etcd_cluster
            .clone()
            .unwrap_or_else(|| "uuidmap".into());
        if cluster.parse::<uuidmap_partition::GroupName>().is_err() {
            return err(format!(
                "--etcd-cluster {cluster:?} is not a cluster name: use 1 to 32 of a-z, 0-9 and \
                 '-', not starting with '-'"
            ));
        }
        let ttl = self.etcd_lease_ttl.unwrap_or(10);
        if ttl < 2 {
            return Err(ConfigError::TooSmall {
                option: "etcd_lease_ttl",
                min: "2".into(),
                value: ttl.to_string(),
                why: "a registration renewed every third of its life needs at least a second \
                      between renewals",
            });
        }
        if c.resp_listen.is_some() {
            return err(
                "--resp-listen is not served in a partitioned cluster yet: the Redis port does \
                 not check which group owns a key. Leave out --resp-listen or --etcd"
                    .into(),
            );
        }
        let (member, advertise_url) = match &c.cluster {
            Some(m) => (format!("node-{}", m.node_id), m.advertise_url.clone()),
            None => (
                "single".to_owned(),
                self.client_url(c).map_err(ConfigError::Partitions)?,
            ),
        };
        Ok(Some(PartitionOptions {
            etcd: etcd.0.clone(),
            cluster,
            group,
            member,
            advertise_url,
            lease_ttl: Duration::from_secs(ttl),
        }))
    }

    /// The URL clients reach this server at: --advertise-url, or from
    /// --listen.
    fn client_url(&self, c: &ServeConfig) -> Result<String, String> {
        match &self.advertise_url {
            Some(u) => {
                check_url(u).map_err(|why| format!("--advertise-url: {why}"))?;
                Ok(u.clone())
            }
            None if c.listen.ip().is_unspecified() => Err(format!(
                "--listen {} is every interface: give --advertise-url, the URL clients reach \
                 this server at",
                c.listen
            )),
            None => Ok(format!(
                "{}://{}",
                if c.tls.is_some() { "https" } else { "http" },
                c.listen
            )),
        }
    }

    /// The replica group options, checked (`None`: a single node).
    fn cluster_options(&self, c: &ServeConfig) -> Result<Option<ClusterOptions>, ConfigError> {
        let err = |m: String| Err(ConfigError::Cluster(m));
        let defaults = ServeOptions::defaults();
        let Some(node_id) = self.node_id else {
            let given = [
                ("--raft-listen", self.raft_listen.is_some()),
                ("--raft-advertise", self.raft_advertise.is_some()),
                // A single node of a partitioned cluster registers it.
                (
                    "--advertise-url",
                    self.advertise_url.is_some() && self.etcd.is_none(),
                ),
                ("--peers", self.peers.is_some()),
                ("--cluster-init", self.cluster_init == Some(true)),
                (
                    "--raft-snapshot-entries",
                    self.raft_snapshot_entries.is_some(),
                ),
                ("--raft-keep-entries", self.raft_keep_entries.is_some()),
                ("--raft-dial", self.raft_dial.is_some()),
                ("--raft-tls-cert", self.raft_tls_cert.is_some()),
                ("--raft-tls-key", self.raft_tls_key.is_some()),
                ("--raft-tls-ca", self.raft_tls_ca.is_some()),
                ("--raft-insecure", self.raft_insecure == Some(true)),
            ];
            return match given.iter().find(|(_, on)| *on) {
                Some((flag, _)) => err(format!(
                    "{flag} is an option of a replica group member: give --node-id too, or \
                     leave it out to serve a single node"
                )),
                None => Ok(None),
            };
        };
        if node_id == 0 {
            return err("--node-id must be at least 1".into());
        }
        let Some(raft_listen) = self.raft_listen else {
            return err(format!(
                "member {node_id} needs --raft-listen: the address the other members' Raft \
                 calls reach it on (another port than --listen)"
            ));
        };
        if raft_listen == c.listen {
            return err(format!(
                "--raft-listen and --listen are both {raft_listen}: give the Raft traffic its own \
                 port"
            ));
        }
        let raft_advertise = match &self.raft_advertise {
            Some(a) => {
                check_host_port(a)
                    .map_err(|why| ConfigError::Cluster(format!("--raft-advertise: {why}")))?;
                a.clone()
            }
            None if raft_listen.ip().is_unspecified() => {
                return err(format!(
                    "--raft-listen {raft_listen} is every interface: give --raft-advertise, the \
                     address the other members dial for this one"
                ));
            }
            None => raft_listen.to_string(),
        };
        let advertise_url = self.client_url(c).map_err(ConfigError::Cluster)?;
        let peers = self.peers.clone().unwrap_or_default().0;
        if peers.iter().any(|p| p.id == node_id) {
            return err(format!(
                "--peers names node {node_id}, which is this member (--node-id): list only the \
                 others"
            ));
        }
        let dial = self.raft_dial.clone().unwrap_or_default().0;
        if dial.iter().any(|(id, _)| *id == node_id) {
            return err(format!(
                "--raft-dial names node {node_id}, which is this member (--node-id): a member \
                 does not dial itself"
            ));
        }
        let resp_advertise = match c.resp_listen {
            None => String::new(),
            Some(at) if at.ip().is_unspecified() => {
                let host = url_host(&advertise_url).ok_or_else(|| {
                    ConfigError::Cluster(format!(
                        "--resp-listen {at} is every interface, and --advertise-url \
                         {advertise_url:?} names no host to send Redis clients to"
                    ))
                })?;
                format!("{host}:{}", at.port())
            }
            Some(at) => at.to_string(),
        };
        Ok(Some(ClusterOptions {
            node_id,
            raft_listen,
            raft_advertise,
            advertise_url,
            resp_advertise,
            peers,
            init: self.cluster_init.unwrap_or(false),
            snapshot_entries: self
                .raft_snapshot_entries
                .or(defaults.raft_snapshot_entries)
                .expect(DEFAULTED),
            keep_entries: self
                .raft_keep_entries
                .or(defaults.raft_keep_entries)
                .expect(DEFAULTED),
            dial: dial.into_iter().collect(),
            tls: self.raft_tls_files()?,
            raft_insecure: self.raft_insecure.unwrap_or(false),
        }))
    }

    /// The Raft TLS files: all three or none.
    fn raft_tls_files(&self) -> Result<Option<RaftTlsFiles>, ConfigError> {
        match (&self.raft_tls_cert, &self.raft_tls_key, &self.raft_tls_ca) {
            (Some(cert), Some(key), Some(ca)) => Ok(Some(RaftTlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            })),
            (None, None, None) => Ok(None),
            given => {
                let missing: Vec<&str> = [
                    ("--raft-tls-cert", given.0.is_none()),
                    ("--raft-tls-key", given.1.is_none()),
                    ("--raft-tls-ca", given.2.is_none()),
                ]
                .into_iter()
                .filter_map(|(flag, missing)| missing.then_some(flag))
                .collect();
                Err(ConfigError::Cluster(format!(
                    "--raft-tls-cert, --raft-tls-key and --raft-tls-ca go together (the member's \
                     certificate, its key, and the Raft CA, PEM): give all three or none; \
                     missing {}",
                    missing.join(" and ")
                )))
            }
        }
    }
}

/// The host of `url` (`scheme://host:port/...`), with its brackets for an
/// IPv6 address.
fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let host = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => &authority[..i],
        _ => authority,
    };
    (!host.is_empty()).then_some(host)
}

/// The TLS files, when the combination makes sense.
fn tls_files(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
) -> Result<Option<TlsFiles>, ConfigError> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert,
            key,
            client_ca,
        })),
        (None, None) if client_ca.is_some() => Err(ConfigError::Tls(
            "--tls-client-ca needs TLS on: give --tls-cert and --tls-key too",
        )),
        (None, None) => Ok(None),
        _ => Err(ConfigError::Tls(
            "--tls-cert and --tls-key go together: give both (the certificate chain and its \
             private key, PEM) or neither",
        )),
    }
}

fn read_file(path: &Path) -> Result<ServeOptions, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}
