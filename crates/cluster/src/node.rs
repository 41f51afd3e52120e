//! A member of a replica group, as the group's membership records it.

use std::fmt;

/// A member's addresses. The membership entries of the log carry one per
/// node, so every member learns where the others are from the log itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClusterNode {
    /// Where its Raft service listens (`host:port`), for the other members.
    pub raft_addr: String,
    /// Its client URL (`http://host:port`), which a follower names when it
    /// sends a writer to the leader.
    pub api_url: String,
    /// Its data directory's incarnation ([`crate::identity`]); 0: unknown,
    /// not checked.
    pub incarnation: u64,
    /// Where its Redis-protocol port listens (`host:port`), which a
    /// follower names in `MOVED` for a write; empty: none, or unknown.
    pub resp_addr: String,
}

impl fmt::Display for ClusterNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{raft {}, api {}", self.raft_addr, self.api_url)?;
        if self.incarnation != 0 {
            write!(f, ", incarnation {}", self.incarnation)?;
        }
        if !self.resp_addr.is_empty() {
            write!(f, ", resp {}", self.resp_addr)?;
        }
        write!(f, "}}")
    }
}
