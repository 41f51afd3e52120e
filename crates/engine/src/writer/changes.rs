//! [`ChangeReader`]: the applied write batches after an LSN, read back
//! from the log, for change streams (Watch).
//!
//! - **A single node**: every record of its WAL is a batch that was
//!   applied, so the reader returns each, LSN after LSN.
//! - **A replica group member**: its WAL is the Raft log, whose records
//!   include entries that changed nothing: a new leader's blank entry,
//!   membership changes, the writer's gates and confirmations (no ops), and
//!   *void* batches (a break in the proposal chain: the writer's module
//!   docs). The reader applies the writer's own rule
//!   ([`ProposalChain::applies`]) to each record, starting from a point
//!   where the chain is known (a snapshot's point, or the log's start), and
//!   returns only the batches the writer applied. Their LSNs are then not
//!   consecutive.
//!
//! Only records up to an LSN the caller knows is applied are read
//! (`upto`): on a member those are committed, so no truncation of the
//! log's suffix ever changes them.

use super::proposal_chain::ProposalChain;
use crate::store::wal::{EntryKind, WalFollower};
use crate::store::{Op, WalFollowError};

/// Reads the applied batches after an LSN (module docs).
pub struct ChangeReader {
    follower: WalFollower,
    /// A member's chain, as of the last record read (`None`: a single
    /// node, whose every record was applied).
    chain: Option<ProposalChain>,
    /// Records up to this LSN are read only to follow the chain.
    after: u64,
}

impl ChangeReader {
    /// A single node's reader: `follower` starts at the first batch wanted.
    pub fn single(follower: WalFollower) -> ChangeReader {
        ChangeReader {
            follower,
            chain: None,
            after: 0,
        }
    }

    /// A member's reader of the batches after `after`: `follower` starts
    /// right after a point where the chain stood at `chain`, at or before
    /// `after + 1`.
    pub fn member(follower: WalFollower, chain: ProposalChain, after: u64) -> ChangeReader {
        ChangeReader {
            follower,
            chain: Some(chain),
            after,
        }
    }

    /// The next LSN to read: a batch returned next has this LSN or a
    /// later one.
    pub fn next_lsn(&self) -> u64 {
        self.follower.next_lsn()
    }

    /// The next applied batch up to `upto` (applied), or `None` when the
    /// records up to `upto` hold no more (errors as
    /// [`WalFollower::next_record`]).
    pub fn next_batch(&mut self, upto: u64) -> Result<Option<(u64, &[Op])>, WalFollowError> {
        loop {
            let Some((lsn, ops)) = self.follower.next_record(upto)? else {
                return Ok(None);
            };
            let op_count = ops.len();
            let applied = match &mut self.chain {
                None => true,
                Some(chain) => {
                    let head = self.follower.last_head();
                    head.kind == EntryKind::Normal && chain.applies(head.term, head.seq, op_count)
                }
            };
            if applied && lsn > self.after {
                return Ok(Some((lsn, self.follower.last_ops())));
            }
        }
    }
}
