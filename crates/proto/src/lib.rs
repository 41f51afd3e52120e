//! uuidmap's wire protocol: the code generated from the workspace's
//! `proto/uuidmap/v1/*.proto` and `proto/uuidmap/raft/v1/raft.proto` (compiled by this crate's `build.rs` with
//! protox, so no system `protoc` is needed): the messages, the tonic servers
//! and clients, the encoded descriptor set for gRPC reflection, and the
//! codec both sides use ([`codec`]), and [`error_chain`] for their messages. The server and client crates build on
//! it; it knows nothing of the index or the engine.

#![warn(missing_docs, unreachable_pub)]

pub mod codec;
pub mod error_chain;

/// Package `uuidmap.v1`: the data service `UuidMap` and the admin service
/// `UuidMapAdmin`.
#[allow(missing_docs, unreachable_pub)]
pub mod v1 {
    tonic::include_proto!("uuidmap.v1");
}

/// Package `uuidmap.raft.v1`: the `Raft` service the members of a replica
/// group call on one another (never served on the client port).
pub mod raft {
    /// Version 1.
    #[allow(missing_docs, unreachable_pub)]
    pub mod v1 {
        tonic::include_proto!("uuidmap.raft.v1");
    }
}

/// The metadata key (in the trailers) of a write refused with `UNAVAILABLE`
/// whose outcome is unknown: `uuidmap-outcome: unknown`. The server sets it
/// when the WAL's fsync failed, because a batch of the failing group may
/// survive the restart. Every other `UNAVAILABLE` means nothing was
/// applied, so a client may send the write again; with this key, only an
/// idempotent one.
pub const OUTCOME_METADATA: &str = "uuidmap-outcome";

/// The value of [`OUTCOME_METADATA`].
pub const OUTCOME_UNKNOWN: &str = "unknown";

/// The key of the metadata a member of a replica group adds to an
/// `UNAVAILABLE` answer to a write it does not lead: the URL the leader's
/// clients use (when the member knows it). Send the write there.
pub const LEADER_METADATA: &str = "uuidmap-leader";

/// With [`LEADER_METADATA`]: the leader's node id, in decimal.
pub const LEADER_ID_METADATA: &str = "uuidmap-leader-id";

/// The metadata key a member adds, instead of [`LEADER_METADATA`], to an
/// `UNAVAILABLE` refusal when it knows no leader: the group is electing
/// one (which takes about an election timeout, hundreds of milliseconds),
/// so a client backs off as for overload rather than retrying at once.
/// Its value is [`ELECTION_NO_LEADER`].
pub const ELECTION_METADATA: &str = "uuidmap-election";

/// The value of [`ELECTION_METADATA`].
pub const ELECTION_NO_LEADER: &str = "no-leader";

/// The metadata key of a refusal by a member of a partitioned cluster
/// whose group does not own a key of the request (`FAILED_PRECONDITION`,
/// nothing done): the group that owns it, as the member's partition table
/// says. Re-read the map (its version is [`TABLE_VERSION_METADATA`]) and
/// send the request to that group.
pub const OWNER_GROUP_METADATA: &str = "uuidmap-owner-group";

/// The metadata key of a partitioned member's refusal
/// ([`OWNER_GROUP_METADATA`], [`MOVING_TO_METADATA`]): the version of the
/// partition table it decided with (an etcd revision; higher is newer).
pub const TABLE_VERSION_METADATA: &str = "uuidmap-table-version";

/// The metadata key of a partitioned member's refusal: the partition
/// (0 to 4095) of the key it refused.
pub const PARTITION_METADATA: &str = "uuidmap-partition";

/// The metadata key of a partitioned member's refusal of a write to a
/// partition that is moving (`UNAVAILABLE`, nothing done; retry after a
/// backoff): the group it is moving to.
pub const MOVING_TO_METADATA: &str = "uuidmap-moving-to";

/// The metadata key a partition move's copy sends with its `Write`s (value
/// `1`): a server of a partitioned cluster takes writes to a partition
/// being copied to its group only with it, and refuses anyone else's as not
/// its group's (a client with an old map). docs/partitions.md, "Moves".
pub const PARTITION_COPY_METADATA: &str = "uuidmap-partition-copy";

/// The encoded `FileDescriptorSet` of the protocol, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/uuidmap_descriptor.bin"));
