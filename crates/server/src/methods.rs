//! The one table of the server's RPCs ([`METHODS`]): for each, its service
//! and method, its metric label, its admission class, the role a token
//! needs, and whether its answer streams. Auth (`auth`), admission
//! (`admission`, and `deadline`, which marks writes) and the per-call
//! metrics (`metrics`) all read it, so adding an RPC is one row here.
//!
//! The services' names come from the generated code (`SERVICE_NAME` of each
//! tonic server), so a renamed service cannot leave a stale path behind. A
//! test checks that every method of every service the server registers (as
//! the reflection catalog lists them) has its row.
//!
//! **Resolved once per call.** The outermost layer (`metrics`) looks the
//! path up ([`resolve`]) and leaves the answer in the request's extensions
//! ([`CallMethod`]); the layers inside read it from there ([`of_request`]).
//!
//! **The one fallback** for a path not in the table ([`method`]): it is
//! counted as `unknown`, needs a write token (deny by default; an admin
//! token for a method of the cluster service, whose methods change the
//! group), and is admitted as a write if it names one of our services (a
//! method a newer client knows and this server does not: the scarcest
//! class), free otherwise (tonic answers UNIMPLEMENTED at once).

use tonic_health::pb::health_server;
use tonic_reflection::pb::v1::server_reflection_server as reflection_v1;
use tonic_reflection::pb::v1alpha::server_reflection_server as reflection_v1alpha;

use uuidmap_proto::v1::{uuid_map_admin_server, uuid_map_cluster_server, uuid_map_server};

/// A request class of admission control: each has its own permits and
/// queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Get, BatchGet, Stats, Ping.
    Read = 0,
    /// Put, Delete, CompareAndSet, Write, admin Snapshot.
    Write = 1,
    /// Scan.
    Scan = 2,
}

impl Class {
    /// The metric label and the word in messages.
    pub fn name(self) -> &'static str {
        match self {
            Class::Read => "read",
            Class::Write => "write",
            Class::Scan => "scan",
        }
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What admission does with a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmitAs {
    /// Nothing: health, reflection, anything not ours.
    Free,
    /// A permit of this class.
    Permit(Class),
    /// A long-poll slot (WaitFor, Watch, a Lookup stream).
    LongPoll,
}

/// What a token may do. `Admin` implies `Write`, which implies `Read`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Lookups, scans, waits, watches, stats, the group's status.
    Read = 1,
    /// The reads, the writes and a snapshot.
    Write = 2,
    /// Everything: also the group's membership (the cluster service's
    /// methods but `Status`).
    Admin = 3,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        })
    }
}

/// One RPC of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Method {
    /// The full service name (`package.Service`).
    pub service: &'static str,
    /// The method's name within its service.
    pub method: &'static str,
    /// The `rpc` label of its metrics.
    pub label: &'static str,
    /// Its admission class.
    pub admission: AdmitAs,
    /// The role a token needs to call it; `None`: no token needed.
    pub role: Option<Role>,
    /// Whether its answer is a stream (which then holds the admission
    /// ticket until it ends).
    pub streaming: bool,
}

impl Method {
    /// Whether a call to `path` (`/package.Service/Method`) is this RPC.
    fn is(&self, path: &str) -> bool {
        path.strip_prefix('/')
            .and_then(|p| p.strip_prefix(self.service))
            .and_then(|p| p.strip_prefix('/'))
            == Some(self.method)
    }
}

const DATA: &str = uuid_map_server::SERVICE_NAME;
const ADMIN: &str = uuid_map_admin_server::SERVICE_NAME;
const CLUSTER: &str = uuid_map_cluster_server::SERVICE_NAME;
const HEALTH: &str = health_server::SERVICE_NAME;
const REFLECTION_V1: &str = reflection_v1::SERVICE_NAME;
const REFLECTION_V1ALPHA: &str = reflection_v1alpha::SERVICE_NAME;

/// A row of the table.
const fn rpc(
    service: &'static str,
    method: &'static str,
    label: &'static str,
    admission: AdmitAs,
    role: Option<Role>,
    streaming: bool,
) -> Method {
    Method {
        service,
        method,
        label,
        admission,
        role,
        streaming,
    }
}

const READ: AdmitAs = AdmitAs::Permit(Class::Read);
const WRITE: AdmitAs = AdmitAs::Permit(Class::Write);
const SCAN: AdmitAs = AdmitAs::Permit(Class::Scan);
const R: Option<Role> = Some(Role::Read);
const W: Option<Role> = Some(Role::Write);
const A: Option<Role> = Some(Role::Admin);

/// Every RPC the server serves.
pub const METHODS: [Method; 22] = [
    rpc(DATA, "Get", "Get", READ, R, false),
    rpc(DATA, "BatchGet", "BatchGet", READ, R, false),
    // The stream is a long poll; each request takes read permits by its
    // keys, inside the service (`lookup`).
    rpc(DATA, "Lookup", "Lookup", AdmitAs::LongPoll, R, true),
    rpc(DATA, "Put", "Put", WRITE, W, false),
    rpc(DATA, "Delete", "Delete", WRITE, W, false),
    rpc(DATA, "CompareAndSet", "CompareAndSet", WRITE, W, false),
    rpc(DATA, "Write", "Write", WRITE, W, false),
    rpc(DATA, "WaitFor", "WaitFor", AdmitAs::LongPoll, R, false),
    rpc(DATA, "Stats", "Stats", READ, R, false),
    rpc(DATA, "Scan", "Scan", SCAN, R, true),
    rpc(DATA, "Watch", "Watch", AdmitAs::LongPoll, R, true),
    rpc(DATA, "Ping", "Ping", READ, R, false),
    rpc(ADMIN, "Snapshot", "Snapshot", WRITE, W, false),
    rpc(CLUSTER, "Status", "cluster.Status", READ, R, false),
    rpc(CLUSTER, "AddLearner", "cluster.AddLearner", WRITE, A, false),
    rpc(CLUSTER, "Promote", "cluster.Promote", WRITE, A, false),
    rpc(CLUSTER, "Remove", "cluster.Remove", WRITE, A, false),
    rpc(
        CLUSTER,
        "TransferLeader",
        "cluster.TransferLeader",
        WRITE,
        A,
        false,
    ),
    rpc(HEALTH, "Check", "health.Check", AdmitAs::Free, None, false),
    rpc(HEALTH, "Watch", "health.Watch", AdmitAs::Free, None, true),
    rpc(
        REFLECTION_V1,
        "ServerReflectionInfo",
        "reflection.v1.ServerReflectionInfo",
        AdmitAs::Free,
        None,
        true,
    ),
    rpc(
        REFLECTION_V1ALPHA,
        "ServerReflectionInfo",
        "reflection.v1alpha.ServerReflectionInfo",
        AdmitAs::Free,
        None,
        true,
    ),
];

/// The row index [`method`] gives a path not in the table (one past the
/// last row), for tables indexed by RPC.
pub const UNKNOWN: usize = METHODS.len();

/// A method of one of our services that this server does not know.
const UNKNOWN_OURS: Method = rpc("", "", "unknown", WRITE, W, false);
/// A method of the cluster service that is not in the table: it changes
/// the group, unless the table says otherwise.
const UNKNOWN_CLUSTER: Method = rpc("", "", "unknown", WRITE, A, false);
/// Any other path.
const UNKNOWN_OTHER: Method = rpc("", "", "unknown", AdmitAs::Free, W, false);

/// The RPC a call to `path` (`/package.Service/Method`) is, and its row
/// index; for a path not in the table, the fallback (module docs) and
/// [`UNKNOWN`].
pub fn method(path: &str) -> (usize, &'static Method) {
    if let Some(i) = METHODS.iter().position(|m| m.is(path)) {
        return (i, &METHODS[i]);
    }
    let in_cluster = path
        .strip_prefix('/')
        .and_then(|p| p.strip_prefix(CLUSTER))
        .is_some_and(|p| p.starts_with('/'));
    if in_cluster {
        (UNKNOWN, &UNKNOWN_CLUSTER)
    } else if path.starts_with("/uuidmap.") {
        (UNKNOWN, &UNKNOWN_OURS)
    } else {
        (UNKNOWN, &UNKNOWN_OTHER)
    }
}

/// The RPC of a call, as the outermost layer resolved it: carried in the
/// request's extensions so that no layer looks the path up again.
#[derive(Clone, Copy, Debug)]
pub struct CallMethod {
    /// The row index ([`UNKNOWN`] for a path not in the table).
    pub index: usize,
    /// The row, or the fallback.
    pub method: &'static Method,
}

/// Looks the call's path up once and leaves the answer in its extensions
/// for the layers inside; returns it.
pub fn resolve<B>(request: &mut http::Request<B>) -> CallMethod {
    let (index, method) = method(request.uri().path());
    let call = CallMethod { index, method };
    request.extensions_mut().insert(call);
    call
}

/// The RPC of a call: what [`resolve`] left in its extensions, or (for a
/// layer used without the outermost one, as in tests) the path looked up.
pub fn of_request<B>(request: &http::Request<B>) -> &'static Method {
    match request.extensions().get::<CallMethod>() {
        Some(call) => call.method,
        None => method(request.uri().path()).1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reflection::Catalog;

    #[test]
    fn every_method_the_server_registers_has_its_row() {
        let catalog = Catalog::of_server();
        let mut seen = 0;
        for service in catalog.services() {
            for m in &service.methods {
                let path = format!("/{}/{}", service.name, m);
                let (i, row) = method(&path);
                assert_ne!(i, UNKNOWN, "{path} is served but missing from METHODS");
                assert_eq!(
                    (row.service, row.method),
                    (service.name.as_str(), m.as_str())
                );
                seen += 1;
            }
        }
        assert_eq!(seen, METHODS.len(), "METHODS lists an RPC nobody serves");
    }

    #[test]
    fn a_resolved_call_carries_its_row_and_an_unresolved_one_is_looked_up() {
        let mut request = http::Request::new(());
        *request.uri_mut() = "/uuidmap.v1.UuidMap/Put".parse().unwrap();
        assert_eq!(of_request(&request).method, "Put");
        let call = resolve(&mut request);
        assert_eq!(call.method.method, "Put");
        assert_eq!(
            call.index,
            METHODS.iter().position(|m| m.method == "Put").unwrap()
        );
        // The layers inside read the resolved row, not the path again.
        *request.uri_mut() = "/uuidmap.v1.UuidMap/Get".parse().unwrap();
        assert_eq!(of_request(&request).method, "Put");
    }

    #[test]
    fn rows_are_distinct_and_labels_unique() {
        for (i, a) in METHODS.iter().enumerate() {
            for b in &METHODS[i + 1..] {
                assert_ne!((a.service, a.method), (b.service, b.method));
                assert_ne!(a.label, b.label);
            }
        }
    }

    #[test]
    fn the_fallback_denies_by_default() {
        let (i, m) = method("/uuidmap.v1.UuidMap/SomethingNew");
        assert_eq!(i, UNKNOWN);
        assert_eq!((m.label, m.admission, m.role), ("unknown", WRITE, W));
        let (_, m) = method("/some.Other/Thing");
        assert_eq!((m.admission, m.role), (AdmitAs::Free, W));
        // A prefix that only looks like a known service is not one.
        assert_eq!(method("/grpc.health.v1.HealthX/Check").0, UNKNOWN);
        assert_eq!(method("/grpc.health.v1.Health/CheckX").0, UNKNOWN);
        assert_eq!(method("grpc.health.v1.Health/Check").0, UNKNOWN);
        assert_eq!(method("").0, UNKNOWN);
    }

    #[test]
    fn reads_need_a_read_token_writes_a_write_token_and_probes_none() {
        for name in [
            "Get", "BatchGet", "Lookup", "Scan", "WaitFor", "Watch", "Stats", "Ping",
        ] {
            assert_eq!(method(&format!("/{DATA}/{name}")).1.role, R, "{name}");
        }
        for name in ["Put", "Delete", "CompareAndSet", "Write"] {
            assert_eq!(method(&format!("/{DATA}/{name}")).1.role, W, "{name}");
        }
        assert_eq!(method(&format!("/{ADMIN}/Snapshot")).1.role, W);
        assert_eq!(method(&format!("/{HEALTH}/Check")).1.role, None);
    }

    #[test]
    fn membership_changes_need_an_admin_token_and_the_status_a_read_token() {
        for name in ["AddLearner", "Promote", "Remove"] {
            assert_eq!(method(&format!("/{CLUSTER}/{name}")).1.role, A, "{name}");
        }
        assert_eq!(method(&format!("/{CLUSTER}/Status")).1.role, R);
        // A method of the cluster service the table lacks (one added
        // later) needs admin; a look-alike service does not get that rule.
        assert_eq!(method(&format!("/{CLUSTER}/TransferLeader")).1.role, A);
        assert_eq!(method(&format!("/{CLUSTER}X/Status")).1.role, W);
    }
}
