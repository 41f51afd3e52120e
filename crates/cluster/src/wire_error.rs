//! [`WireError`]: a `uuidmap.raft.v1` message that did not convert from
//! the wire (`raft_wire`), or a batch whose ops are malformed (`raft_batch`).

/// A message that did not convert from the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A field that must be set was not.
    #[error("the {message} message has no {field}")]
    Missing {
        /// The message, as the proto file names it.
        message: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A batch's ops are not a sequence of ops.
    #[error("a batch is malformed: {0}")]
    Batch(String),
    /// A membership names a voter without its addresses, or has an empty
    /// voter set.
    #[error("a membership is invalid: {0}")]
    Membership(String),
}
