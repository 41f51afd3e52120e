//! [`ProposalChain`]: the rule, read from the log alone, by which every
//! replica applies a leader's batch entry only if it continues that
//! leader's chain of proposals (`replica_pipeline`'s module docs, "The
//! proposal chain"); and the proposal numbers it reads: `epoch << 32 | n`,
//! with [`CONFIRM_FLAG`] on a confirmation.

/// The epoch of a proposal number (module docs, and `replica_pipeline`'s).
pub fn proposal_epoch(seq: u64) -> u64 {
    seq >> 32
}

/// Marks the proposal number of a confirmation (`replica_pipeline`'s
/// module docs): an entry
/// with no ops that places refused compare-and-sets in the log.
pub const CONFIRM_FLAG: u64 = 1 << 63;

/// Where the last batch applied sits in its leader's chain of proposals.
/// Every replica keeps the same one, read from the log alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProposalChain {
    /// The term of the last batch applied (0: none yet).
    pub term: u64,
    /// Its proposal number.
    pub seq: u64,
}

impl ProposalChain {
    /// Whether a batch entry of `term` with proposal number `seq` continues
    /// the chain; if it does, the chain moves on to it.
    pub fn admit(&mut self, term: u64, seq: u64) -> bool {
        let (epoch, n) = (seq >> 32, seq & 0xffff_ffff);
        let last = (self.term, self.seq >> 32);
        let continues = if (term, epoch) == last {
            n == (self.seq & 0xffff_ffff) + 1
        } else {
            (term, epoch) > last && n == 1
        };
        if continues {
            (self.term, self.seq) = (term, seq);
        }
        continues
    }

    /// Whether a normal log entry of `term` with proposal number `seq` and
    /// `op_count` ops is applied, moving the chain on if so: the writer's
    /// rule, which a reader of the log follows too (`ChangeReader`). An
    /// entry with no ops (a gate, a confirmation) is no link of the chain.
    pub fn applies(&mut self, term: u64, seq: u64, op_count: usize) -> bool {
        op_count > 0 && self.admit(term, seq)
    }
}
