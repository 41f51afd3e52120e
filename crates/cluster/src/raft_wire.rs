//! Conversions between openraft's messages (in our type configuration) and
//! the protobuf messages of the `uuidmap.raft.v1` service
//! (`proto/uuidmap/raft/v1/raft.proto`).
//!
//! Every type on the wire is converted explicitly; openraft's `serde`
//! feature is off. Going to the wire cannot fail ([`ToWire`]); coming from
//! it can ([`FromWire`]): a member running other code, or a damaged
//! message, gets a [`WireError`] that names the message and the field, and
//! the Raft service answers it with `INVALID_ARGUMENT`. An absent `LogId`
//! is openraft's `None`; an absent `Vote` where one is required is an error.

use std::collections::{BTreeMap, BTreeSet};

use uuidmap_proto::raft::v1 as pb;

use crate::node::ClusterNode;
use crate::raft_batch::RaftBatch;
use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, Entry, EntryPayload, LeaderId, LogId, Membership,
    SnapshotMeta, SnapshotResponse, StoredMembership, TransferLeaderError, TransferLeaderRequest,
    Vote, VoteRequest, VoteResponse, log_id,
};
use uuidmap_engine::writer::ProposalChain;

pub use crate::wire_error::WireError;

/// A value that has a protobuf form.
pub trait ToWire {
    /// Its protobuf message.
    type Wire;
    /// The message that carries it.
    fn to_wire(&self) -> Self::Wire;
}

/// A value that can be read back from its protobuf form.
pub trait FromWire: Sized {
    /// Its protobuf message.
    type Wire;
    /// The value the message carries, or what is wrong with it.
    fn from_wire(wire: Self::Wire) -> Result<Self, WireError>;
}

fn required<T>(
    value: Option<T>,
    message: &'static str,
    field: &'static str,
) -> Result<T, WireError> {
    value.ok_or(WireError::Missing { message, field })
}

fn log_id_to_wire(id: &Option<LogId>) -> Option<pb::LogId> {
    id.as_ref().map(ToWire::to_wire)
}

fn log_id_from_wire(id: Option<pb::LogId>) -> Option<LogId> {
    id.map(|id| log_id(id.term, id.index))
}

impl ToWire for LogId {
    type Wire = pb::LogId;
    fn to_wire(&self) -> pb::LogId {
        pb::LogId {
            term: self.leader_id.term,
            index: self.index,
        }
    }
}

impl ToWire for Vote {
    type Wire = pb::Vote;
    fn to_wire(&self) -> pb::Vote {
        pb::Vote {
            term: self.leader_id.term,
            node_id: self.leader_id.voted_for,
            committed: self.committed,
        }
    }
}

impl FromWire for Vote {
    type Wire = pb::Vote;
    fn from_wire(v: pb::Vote) -> Result<Self, WireError> {
        Ok(Vote {
            leader_id: LeaderId {
                term: v.term,
                voted_for: v.node_id,
            },
            committed: v.committed,
        })
    }
}

fn vote_from_wire(
    v: Option<pb::Vote>,
    message: &'static str,
    field: &'static str,
) -> Result<Vote, WireError> {
    Vote::from_wire(required(v, message, field)?)
}

impl ToWire for ClusterNode {
    type Wire = pb::Node;
    fn to_wire(&self) -> pb::Node {
        pb::Node {
            raft_addr: self.raft_addr.clone(),
            api_url: self.api_url.clone(),
            incarnation: self.incarnation,
            resp_addr: self.resp_addr.clone(),
        }
    }
}

impl FromWire for ClusterNode {
    type Wire = pb::Node;
    fn from_wire(n: pb::Node) -> Result<Self, WireError> {
        Ok(ClusterNode {
            raft_addr: n.raft_addr,
            api_url: n.api_url,
            incarnation: n.incarnation,
            resp_addr: n.resp_addr,
        })
    }
}

impl ToWire for Membership {
    type Wire = pb::Membership;
    fn to_wire(&self) -> pb::Membership {
        pb::Membership {
            configs: self
                .get_joint_config()
                .iter()
                .map(|ids| pb::NodeIds {
                    ids: ids.iter().copied().collect(),
                })
                .collect(),
            nodes: self.nodes().map(|(id, n)| (*id, n.to_wire())).collect(),
        }
    }
}

impl FromWire for Membership {
    type Wire = pb::Membership;
    fn from_wire(m: pb::Membership) -> Result<Self, WireError> {
        let configs: Vec<BTreeSet<u64>> = m
            .configs
            .into_iter()
            .map(|c| c.ids.into_iter().collect())
            .collect();
        let nodes = m
            .nodes
            .into_iter()
            .map(|(id, n)| Ok((id, ClusterNode::from_wire(n)?)))
            .collect::<Result<BTreeMap<_, _>, WireError>>()?;
        Membership::new(configs, nodes).map_err(|e| WireError::Membership(e.to_string()))
    }
}

impl ToWire for Entry {
    type Wire = pb::Entry;
    fn to_wire(&self) -> pb::Entry {
        let payload = match &self.payload {
            EntryPayload::Blank => pb::entry::Payload::Blank(pb::Blank {}),
            EntryPayload::Normal(batch) => pb::entry::Payload::Batch(pb::Batch {
                seq: batch.seq(),
                ops: batch.ops_bytes().clone(),
            }),
            EntryPayload::Membership(m) => pb::entry::Payload::Membership(m.to_wire()),
        };
        pb::Entry {
            log_id: Some(self.log_id.to_wire()),
            payload: Some(payload),
        }
    }
}

impl FromWire for Entry {
    type Wire = pb::Entry;
    fn from_wire(e: pb::Entry) -> Result<Self, WireError> {
        let id = required(e.log_id, "Entry", "log_id")?;
        let payload = match required(e.payload, "Entry", "payload")? {
            pb::entry::Payload::Blank(_) => EntryPayload::Blank,
            pb::entry::Payload::Batch(b) => {
                EntryPayload::Normal(RaftBatch::from_bytes(b.seq, b.ops)?)
            }
            pb::entry::Payload::Membership(m) => {
                EntryPayload::Membership(Membership::from_wire(m)?)
            }
        };
        Ok(Entry {
            log_id: log_id(id.term, id.index),
            payload,
        })
    }
}

impl ToWire for VoteRequest {
    type Wire = pb::VoteRequest;
    fn to_wire(&self) -> pb::VoteRequest {
        pb::VoteRequest {
            vote: Some(self.vote.to_wire()),
            last_log_id: log_id_to_wire(&self.last_log_id),
            leadership_transfer: self.leadership_transfer,
        }
    }
}

impl FromWire for VoteRequest {
    type Wire = pb::VoteRequest;
    fn from_wire(r: pb::VoteRequest) -> Result<Self, WireError> {
        let mut req = VoteRequest::new(
            vote_from_wire(r.vote, "VoteRequest", "vote")?,
            log_id_from_wire(r.last_log_id),
        );
        req.leadership_transfer = r.leadership_transfer;
        Ok(req)
    }
}

impl ToWire for VoteResponse {
    type Wire = pb::VoteResponse;
    fn to_wire(&self) -> pb::VoteResponse {
        pb::VoteResponse {
            vote: Some(self.vote.to_wire()),
            vote_granted: self.vote_granted,
            last_log_id: log_id_to_wire(&self.last_log_id),
        }
    }
}

impl FromWire for VoteResponse {
    type Wire = pb::VoteResponse;
    fn from_wire(r: pb::VoteResponse) -> Result<Self, WireError> {
        Ok(VoteResponse::new(
            vote_from_wire(r.vote, "VoteResponse", "vote")?,
            log_id_from_wire(r.last_log_id),
            r.vote_granted,
        ))
    }
}

impl ToWire for AppendEntriesRequest {
    type Wire = pb::AppendEntriesRequest;
    fn to_wire(&self) -> pb::AppendEntriesRequest {
        pb::AppendEntriesRequest {
            vote: Some(self.vote.to_wire()),
            prev_log_id: log_id_to_wire(&self.prev_log_id),
            entries: self.entries.iter().map(ToWire::to_wire).collect(),
            leader_commit: log_id_to_wire(&self.leader_commit),
        }
    }
}

impl FromWire for AppendEntriesRequest {
    type Wire = pb::AppendEntriesRequest;
    fn from_wire(r: pb::AppendEntriesRequest) -> Result<Self, WireError> {
        Ok(AppendEntriesRequest {
            vote: vote_from_wire(r.vote, "AppendEntriesRequest", "vote")?,
            prev_log_id: log_id_from_wire(r.prev_log_id),
            entries: r
                .entries
                .into_iter()
                .map(Entry::from_wire)
                .collect::<Result<_, _>>()?,
            leader_commit: log_id_from_wire(r.leader_commit),
        })
    }
}

impl ToWire for AppendEntriesResponse {
    type Wire = pb::AppendEntriesResponse;
    fn to_wire(&self) -> pb::AppendEntriesResponse {
        use pb::append_entries_response::{Outcome, PartialSuccess};
        let outcome = match self {
            AppendEntriesResponse::Success => Outcome::Success(pb::Blank {}),
            AppendEntriesResponse::PartialSuccess(matching) => {
                Outcome::PartialSuccess(PartialSuccess {
                    matching: log_id_to_wire(matching),
                })
            }
            AppendEntriesResponse::Conflict => Outcome::Conflict(pb::Blank {}),
            AppendEntriesResponse::HigherVote(v) => Outcome::HigherVote(v.to_wire()),
        };
        pb::AppendEntriesResponse {
            outcome: Some(outcome),
        }
    }
}

impl FromWire for AppendEntriesResponse {
    type Wire = pb::AppendEntriesResponse;
    fn from_wire(r: pb::AppendEntriesResponse) -> Result<Self, WireError> {
        use pb::append_entries_response::Outcome;
        Ok(
            match required(r.outcome, "AppendEntriesResponse", "outcome")? {
                Outcome::Success(_) => AppendEntriesResponse::Success,
                Outcome::PartialSuccess(p) => {
                    AppendEntriesResponse::PartialSuccess(log_id_from_wire(p.matching))
                }
                Outcome::Conflict(_) => AppendEntriesResponse::Conflict,
                Outcome::HigherVote(v) => AppendEntriesResponse::HigherVote(Vote::from_wire(v)?),
            },
        )
    }
}

impl ToWire for SnapshotResponse {
    type Wire = pb::SnapshotResponse;
    fn to_wire(&self) -> pb::SnapshotResponse {
        pb::SnapshotResponse {
            vote: Some(self.vote.to_wire()),
        }
    }
}

impl FromWire for SnapshotResponse {
    type Wire = pb::SnapshotResponse;
    fn from_wire(r: pb::SnapshotResponse) -> Result<Self, WireError> {
        Ok(SnapshotResponse::new(vote_from_wire(
            r.vote,
            "SnapshotResponse",
            "vote",
        )?))
    }
}

impl ToWire for TransferLeaderRequest {
    type Wire = pb::TransferLeaderRequest;
    fn to_wire(&self) -> pb::TransferLeaderRequest {
        pb::TransferLeaderRequest {
            from_leader: Some(self.from_leader().to_wire()),
            to_node_id: *self.to_node_id(),
            last_log_id: self.last_log_id().map(ToWire::to_wire),
        }
    }
}

impl FromWire for TransferLeaderRequest {
    type Wire = pb::TransferLeaderRequest;
    fn from_wire(r: pb::TransferLeaderRequest) -> Result<Self, WireError> {
        Ok(TransferLeaderRequest::new(
            vote_from_wire(r.from_leader, "TransferLeaderRequest", "from_leader")?,
            r.to_node_id,
            log_id_from_wire(r.last_log_id),
        ))
    }
}

impl ToWire for Result<(), TransferLeaderError> {
    type Wire = pb::TransferLeaderResponse;
    fn to_wire(&self) -> pb::TransferLeaderResponse {
        use pb::transfer_leader_response::{LogNotFlushed, Refused, VoteChanged};
        let refused = match self {
            Ok(()) => None,
            Err(TransferLeaderError::VoteChanged { expected, actual }) => {
                Some(Refused::VoteChanged(VoteChanged {
                    expected: Some(expected.to_wire()),
                    actual: Some(actual.to_wire()),
                }))
            }
            Err(TransferLeaderError::LogNotFlushed { expected, actual }) => {
                Some(Refused::LogNotFlushed(LogNotFlushed {
                    expected: log_id_to_wire(expected),
                    actual: log_id_to_wire(actual),
                }))
            }
        };
        pb::TransferLeaderResponse { refused }
    }
}

impl FromWire for Result<(), TransferLeaderError> {
    type Wire = pb::TransferLeaderResponse;
    fn from_wire(r: pb::TransferLeaderResponse) -> Result<Self, WireError> {
        use pb::transfer_leader_response::Refused;
        Ok(match r.refused {
            None => Ok(()),
            Some(Refused::VoteChanged(v)) => Err(TransferLeaderError::VoteChanged {
                expected: vote_from_wire(v.expected, "VoteChanged", "expected")?,
                actual: vote_from_wire(v.actual, "VoteChanged", "actual")?,
            }),
            Some(Refused::LogNotFlushed(l)) => Err(TransferLeaderError::LogNotFlushed {
                expected: log_id_from_wire(l.expected),
                actual: log_id_from_wire(l.actual),
            }),
        })
    }
}

/// A snapshot as the first message of `InstallSnapshot` describes it: the
/// sender's vote, openraft's meta, and our file's length and largest
/// capture LSN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// The sending leader's vote.
    pub vote: Vote,
    /// The last entry wholly in the file (its smallest capture LSN) and the
    /// membership in force there.
    pub meta: SnapshotMeta,
    /// The file's length in bytes.
    pub file_len: u64,
    /// The file's largest capture LSN: a node that installs it answers
    /// reads once it has applied this far.
    pub snapshot_lsn: u64,
    /// The proposal chain at `meta.last_log_id`.
    pub chain: ProposalChain,
}

impl ToWire for SnapshotHeader {
    type Wire = pb::SnapshotMeta;
    fn to_wire(&self) -> pb::SnapshotMeta {
        let m = &self.meta.last_membership;
        pb::SnapshotMeta {
            vote: Some(self.vote.to_wire()),
            last_log_id: log_id_to_wire(&self.meta.last_log_id),
            last_membership_log_id: log_id_to_wire(m.log_id()),
            last_membership: Some(m.membership().to_wire()),
            file_len: self.file_len,
            snapshot_lsn: self.snapshot_lsn,
            chain_term: self.chain.term,
            chain_seq: self.chain.seq,
        }
    }
}

impl FromWire for SnapshotHeader {
    type Wire = pb::SnapshotMeta;
    fn from_wire(m: pb::SnapshotMeta) -> Result<Self, WireError> {
        let membership = match m.last_membership {
            Some(w) => Membership::from_wire(w)?,
            None => Membership::default(),
        };
        Ok(SnapshotHeader {
            vote: vote_from_wire(m.vote, "SnapshotMeta", "vote")?,
            meta: SnapshotMeta {
                last_log_id: log_id_from_wire(m.last_log_id),
                last_membership: StoredMembership::new(
                    log_id_from_wire(m.last_membership_log_id),
                    membership,
                ),
            },
            file_len: m.file_len,
            snapshot_lsn: m.snapshot_lsn,
            chain: ProposalChain {
                term: m.chain_term,
                seq: m.chain_seq,
            },
        })
    }
}
