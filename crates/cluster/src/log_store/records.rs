//! A log entry as a WAL record (format version 3) and back, and openraft's
//! vote and log ids as the `raft-state` file keeps them.
//!
//! A normal entry's record body is its batch's op bytes as they are; a
//! membership entry's is the protobuf `uuidmap.raft.v1.Membership`.

use bytes::Bytes;
use prost::Message;
use uuidmap_engine::store::raft_state::{LogPos, VoteState};
use uuidmap_engine::store::wal::{EntryHead, EntryKind, WalRecord};
use uuidmap_proto::raft::v1 as pb;

use crate::raft_batch::RaftBatch;
use crate::raft_wire::{FromWire, ToWire};
use crate::types::{Entry, EntryPayload, LeaderId, LogId, Membership, Vote, log_id};

/// The record of `entry`: its head, its op count and its body.
pub(crate) fn entry_record(entry: &Entry) -> (EntryHead, u32, Bytes) {
    let term = entry.log_id.leader_id.term;
    match &entry.payload {
        EntryPayload::Normal(batch) => (
            EntryHead {
                term,
                kind: EntryKind::Normal,
                seq: batch.seq(),
            },
            batch.op_count() as u32,
            batch.ops_bytes().clone(),
        ),
        EntryPayload::Blank => (
            EntryHead {
                term,
                kind: EntryKind::Blank,
                seq: 0,
            },
            0,
            Bytes::new(),
        ),
        EntryPayload::Membership(m) => (
            EntryHead {
                term,
                kind: EntryKind::Membership,
                seq: 0,
            },
            0,
            m.to_wire().encode_to_vec().into(),
        ),
    }
}

/// The entry a record of a Raft log holds. A record whose body does not
/// read back is damage the WAL's checksums did not see, reported as an
/// I/O error naming its LSN.
pub(crate) fn record_entry(rec: &WalRecord<'_>) -> std::io::Result<Entry> {
    let bad = |why: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the WAL record of LSN {} in {} is not a Raft entry: {why}",
                rec.lsn,
                rec.path.display()
            ),
        )
    };
    let payload = match rec.head.kind {
        EntryKind::Normal => EntryPayload::Normal(
            RaftBatch::from_bytes(rec.head.seq, Bytes::copy_from_slice(rec.body))
                .map_err(|e| bad(e.to_string()))?,
        ),
        EntryKind::Blank => EntryPayload::Blank,
        EntryKind::Membership => {
            let wire = pb::Membership::decode(rec.body).map_err(|e| bad(e.to_string()))?;
            EntryPayload::Membership(Membership::from_wire(wire).map_err(|e| bad(e.to_string()))?)
        }
    };
    Ok(Entry {
        log_id: log_id(rec.head.term, rec.lsn),
        payload,
    })
}

pub(crate) fn vote_state(v: &Vote) -> VoteState {
    VoteState {
        term: v.leader_id.term,
        node_id: v.leader_id.voted_for,
        committed: v.committed,
    }
}

pub(crate) fn vote_of(v: &VoteState) -> Vote {
    Vote {
        leader_id: LeaderId {
            term: v.term,
            voted_for: v.node_id,
        },
        committed: v.committed,
    }
}

pub(crate) fn log_pos(id: &LogId) -> LogPos {
    LogPos {
        term: id.leader_id.term,
        index: id.index,
    }
}

pub(crate) fn log_id_of(p: &LogPos) -> LogId {
    log_id(p.term, p.index)
}
