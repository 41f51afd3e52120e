//! Handoffs: where a partition's history passed from one group's log to
//! another's, so that a watch can tell a group's own changes to a
//! partition from a move's (docs/partitions.md, "A cluster-wide watch").
//!
//! A group's log holds, for a partition it does not own, writes that are
//! not its own: the mover's copy, written at the target before the flip,
//! and the drop of the partition's entries, written at the source after
//! it. A handoff names the LSNs that separate them. At the flip of
//! partition `P` from `S` to `T`:
//!
//! - `from_last` (`Ls`): every write `S` accepted to `P` is at or below
//!   it in `S`'s log (the largest `fence_lsn` `S`'s members reported for
//!   the fenced table: each drained its writes and waited for its log's
//!   tail first), and the drop comes after it (it waits for the flip);
//! - `to_after` (`Lt`): every copy write and every earlier drop of `P` in
//!   `T`'s log is at or below it (the largest LSN of the copy's writes and
//!   of `T`'s fences when the copy began), and `T` takes writes to `P`
//!   only after the flip, so above it.
//!
//! So group `G` *owned* `P` at LSN `L` when `L` lies in one of `G`'s
//! tenures: from the start, or above `Lt` of a handoff to `G`, up to and
//! including `Ls` of the next handoff from `G`. The history is bounded
//! ([`MAX_HANDOFFS`]); what it forgets raises a per-group *horizon*, at or
//! below which a group's ownership is no longer known.

use std::collections::BTreeMap;

use crate::{GroupName, PartitionId};

/// Handoffs kept; older ones are forgotten, raising the horizons.
pub const MAX_HANDOFFS: usize = 1024;

/// One partition's flip from one group to another, in their LSNs (module
/// docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handoff {
    /// The partition.
    pub partition: PartitionId,
    /// The group that owned it.
    pub from: GroupName,
    /// `Ls`: its last LSN that may hold a write of its own to the partition.
    pub from_last: u64,
    /// The group that owns it since.
    pub to: GroupName,
    /// `Lt`: its writes of its own to the partition are above this LSN.
    pub to_after: u64,
}

/// Whether a group's change to a partition at an LSN was its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tenure {
    /// Its own. `after`: the tenure began with a handoff from this group
    /// at this LSN: a merged stream delivers it after that group's stream
    /// has passed the LSN, so each key's changes keep their order.
    Owned {
        /// The group and LSN the tenure follows (`None`: the first).
        after: Option<(GroupName, u64)>,
    },
    /// A move's write (a copy in, a drop after leaving), or none of its.
    NotOwned,
    /// At or below the group's horizon: the history that would tell was
    /// forgotten.
    Unknown,
}

/// The bounded history of handoffs, oldest first, and the horizons of
/// what was forgotten.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Handoffs {
    list: Vec<Handoff>,
    horizon: BTreeMap<GroupName, u64>,
}

impl Handoffs {
    /// Whether there is no history at all.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty() && self.horizon.is_empty()
    }

    /// The handoffs kept, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Handoff> {
        self.list.iter()
    }

    /// The horizons: per group, the LSN at or below which its ownership is
    /// no longer known.
    pub fn horizons(&self) -> impl Iterator<Item = (&GroupName, u64)> {
        self.horizon.iter().map(|(g, l)| (g, *l))
    }

    /// `group`'s horizon (0: nothing forgotten).
    pub fn horizon(&self, group: &GroupName) -> u64 {
        self.horizon.get(group).copied().unwrap_or(0)
    }

    /// Raises `group`'s horizon to `lsn` (as a forgotten handoff does).
    pub fn raise_horizon(&mut self, group: &GroupName, lsn: u64) {
        let h = self.horizon.entry(group.clone()).or_insert(0);
        *h = (*h).max(lsn);
    }

    /// Adds a handoff, forgetting the oldest beyond [`MAX_HANDOFFS`].
    pub fn push(&mut self, handoff: Handoff) {
        self.list.push(handoff);
        if self.list.len() > MAX_HANDOFFS {
            let old = self.list.remove(0);
            self.raise_horizon(&old.from, old.from_last);
            self.raise_horizon(&old.to, old.to_after);
        }
    }

    /// Whether `group`'s change to `p` at `lsn` was its own, with `owner`
    /// the partition's owner in the current table (module docs). A
    /// partition whose move is under way is still its owner's until the
    /// flip; the caller holds what it cannot decide yet (a fenced
    /// partition at its owner).
    pub fn tenure(&self, p: PartitionId, group: &GroupName, lsn: u64, owner: &GroupName) -> Tenure {
        if lsn <= self.horizon(group) {
            return Tenure::Unknown;
        }
        let mut holder = None::<&GroupName>;
        let mut start: Option<(&Handoff, u64)> = None;
        for h in self.list.iter().filter(|h| h.partition == p) {
            // The tenure `h` ends: `h.from`'s, after `start`, up to Ls.
            if h.from == *group && start.is_none_or(|(_, after)| lsn > after) && lsn <= h.from_last
            {
                return Tenure::Owned {
                    after: start.map(|(s, _)| (s.from.clone(), s.from_last)),
                };
            }
            holder = Some(&h.to);
            start = Some((h, h.to_after));
        }
        // The open tenure: the current owner's.
        let current = holder.unwrap_or(owner);
        if current == group && start.is_none_or(|(_, after)| lsn > after) {
            return Tenure::Owned {
                after: start.map(|(s, _)| (s.from.clone(), s.from_last)),
            };
        }
        Tenure::NotOwned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> GroupName {
        s.parse().unwrap()
    }

    fn p(n: u16) -> PartitionId {
        PartitionId::new(n).unwrap()
    }

    fn handoff(n: u16, from: &str, ls: u64, to: &str, lt: u64) -> Handoff {
        Handoff {
            partition: p(n),
            from: g(from),
            from_last: ls,
            to: g(to),
            to_after: lt,
        }
    }

    #[test]
    fn with_no_handoff_the_owner_owns_everything_and_no_one_else_anything() {
        let h = Handoffs::default();
        assert_eq!(
            h.tenure(p(1), &g("a"), 7, &g("a")),
            Tenure::Owned { after: None }
        );
        assert_eq!(h.tenure(p(1), &g("b"), 7, &g("a")), Tenure::NotOwned);
    }

    #[test]
    fn a_move_there_and_back_splits_each_groups_log_at_its_lsns() {
        let mut h = Handoffs::default();
        // a → b: a's own up to 100; b's copy up to 50, its own above.
        h.push(handoff(1, "a", 100, "b", 50));
        // b → a: b's own up to 80; a's copy and drop up to 300.
        h.push(handoff(1, "b", 80, "a", 300));
        let (a, b) = (g("a"), g("b"));
        let own = |x: &GroupName, l| h.tenure(p(1), x, l, &a);
        assert_eq!(own(&a, 100), Tenure::Owned { after: None });
        assert_eq!(own(&a, 101), Tenure::NotOwned, "a's drop after leaving");
        assert_eq!(own(&a, 300), Tenure::NotOwned, "a's copy coming back");
        assert_eq!(
            own(&a, 301),
            Tenure::Owned {
                after: Some((b.clone(), 80))
            }
        );
        assert_eq!(own(&b, 50), Tenure::NotOwned, "b's copy coming in");
        assert_eq!(
            own(&b, 51),
            Tenure::Owned {
                after: Some((a.clone(), 100))
            }
        );
        assert_eq!(
            own(&b, 80),
            Tenure::Owned {
                after: Some((a.clone(), 100))
            }
        );
        assert_eq!(own(&b, 81), Tenure::NotOwned, "b's drop after leaving");
        // Another partition is untouched by them.
        assert_eq!(h.tenure(p(2), &a, 101, &a), Tenure::Owned { after: None });
    }

    #[test]
    fn a_forgotten_handoff_raises_the_horizons_below_which_nothing_is_known() {
        let mut h = Handoffs::default();
        for i in 0..=MAX_HANDOFFS as u64 {
            h.push(handoff(
                (i % 7) as u16,
                if i % 2 == 0 { "a" } else { "b" },
                10 * i + 5,
                if i % 2 == 0 { "b" } else { "a" },
                10 * i + 3,
            ));
        }
        assert_eq!(h.iter().count(), MAX_HANDOFFS);
        assert_eq!((h.horizon(&g("a")), h.horizon(&g("b"))), (5, 3));
        assert_eq!(h.tenure(p(0), &g("a"), 5, &g("a")), Tenure::Unknown);
        assert_eq!(h.tenure(p(0), &g("b"), 3, &g("a")), Tenure::Unknown);
    }
}
