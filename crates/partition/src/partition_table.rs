//! The partition table: which group owns each partition, and which
//! partitions are moving to another group.
//!
//! Stored in etcd as one key (`/uuidmap/<cluster>/partitions`, module
//! `etcd_map`) whose value is this text, so that a change of any number of
//! partitions is one atomic write, compared on the key's revision:
//!
//! ```text
//! uuidmap-partitions 1
//! 0-2047 g1
//! 2048-2048 g2~g1
//! 2049-2050 g2>g1
//! 2051-4095 g2
//! ```
//!
//! The first line names the format and its version. Each other line is a
//! run of partitions `FIRST-LAST` (inclusive) and its owner, alone or with
//! a move under way (docs/partitions.md, "Moves"):
//! - `OWNER~TARGET`: being copied to `TARGET`. The owner serves it as
//!   usual; the target takes the mover's writes to it (and no reads).
//! - `OWNER>TARGET`: fenced for the flip. The owner refuses reads and
//!   writes of it (retryable), until the owner becomes `TARGET`.
//!
//! The runs cover `0..4096` in order, with no gap and no overlap; anything
//! else is refused whole, naming the line.
//!
//! Version 2 adds, after the runs, the history of flips that a watch needs
//! ([`Handoffs`], module `handoff`), oldest first:
//!
//! ```text
//! handoff 2048 g2 1500 g1 900
//! horizon g1 300
//! ```
//!
//! `handoff P FROM LS TO LT`: partition `P` passed from `FROM` (its own
//! writes to it at or below LSN `LS`) to `TO` (its own above `LT`).
//! `horizon G L`: what would tell `G`'s ownership at or below `L` was
//! forgotten. A table with no history is written as version 1, which a
//! build from before the history reads too.

use crate::{GroupName, Handoff, Handoffs, PARTITIONS, PartitionError, PartitionId};

/// The first line of the text with no history.
const HEADER: &str = "uuidmap-partitions 1";
/// The first line of the text with the history of handoffs.
const HEADER_2: &str = "uuidmap-partitions 2";

/// Who holds one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The group that serves it.
    pub owner: GroupName,
    /// The group it is moving to, while a move is under way.
    pub moving_to: Option<GroupName>,
    /// With `moving_to`: the move is at its flip, and the owner refuses
    /// writes (`>` in the text; `~` while it is only copied).
    pub fenced: bool,
}

impl Assignment {
    /// Whether `group` may take writes to the partition: its owner unless
    /// fenced, and the group it moves to, for the mover's copy only
    /// (`copy`; anyone else writing there holds an old map).
    pub fn writable_by(&self, group: &GroupName, copy: bool) -> bool {
        if copy {
            self.moving_to.as_ref() == Some(group)
        } else {
            self.owner == *group && !self.fenced
        }
    }

    /// Whether `group` holds the partition's entries: its owner, or the
    /// group it is being copied to.
    pub fn held_by(&self, group: &GroupName) -> bool {
        self.owner == *group || self.moving_to.as_ref() == Some(group)
    }
}

/// Every partition's [`Assignment`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionTable {
    slots: Vec<Assignment>,
    /// The flips that a watch needs to tell a group's own writes from a
    /// move's.
    handoffs: Handoffs,
}

impl PartitionTable {
    /// The partitions split between `groups` in contiguous runs of equal
    /// size (the first groups take one more when 4096 does not divide).
    pub fn even(groups: &[GroupName]) -> Result<PartitionTable, PartitionError> {
        if groups.is_empty() {
            return Err(PartitionError::NoGroups);
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = groups.iter().find(|g| !seen.insert(*g)) {
            return Err(PartitionError::DuplicateGroup(dup.clone()));
        }
        let n = groups.len();
        let p = usize::from(PARTITIONS);
        let slots = (0..p)
            .map(|i| Assignment {
                owner: groups[i * n / p].clone(),
                moving_to: None,
                fenced: false,
            })
            .collect();
        Ok(PartitionTable {
            slots,
            handoffs: Handoffs::default(),
        })
    }

    /// Who holds `p`.
    pub fn get(&self, p: PartitionId) -> &Assignment {
        &self.slots[usize::from(p.get())]
    }

    /// Every group that owns at least one partition, with how many.
    pub fn owners(&self) -> std::collections::BTreeMap<GroupName, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for a in &self.slots {
            *counts.entry(a.owner.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Every partition moving, with its assignment.
    pub fn moves(&self) -> impl Iterator<Item = (PartitionId, &Assignment)> {
        PartitionId::all()
            .zip(&self.slots)
            .filter(|(_, a)| a.moving_to.is_some())
    }

    /// The history of flips (module docs).
    pub fn handoffs(&self) -> &Handoffs {
        &self.handoffs
    }

    /// This table with `handoff` added to its history.
    pub fn with_handoff(&self, handoff: Handoff) -> Self {
        let mut next = self.clone();
        next.handoffs.push(handoff);
        next
    }

    /// The table as the text stored in etcd (module docs).
    pub fn to_text(&self) -> String {
        let mut out = String::from(if self.handoffs.is_empty() {
            HEADER
        } else {
            HEADER_2
        });
        out.push('\n');
        let mut first = 0;
        for i in 1..=self.slots.len() {
            if i == self.slots.len() || self.slots[i] != self.slots[first] {
                let a = &self.slots[first];
                out.push_str(&format!("{first}-{} {}", i - 1, a.owner));
                if let Some(t) = &a.moving_to {
                    out.push(if a.fenced { '>' } else { '~' });
                    out.push_str(t.as_str());
                }
                out.push('\n');
                first = i;
            }
        }
        for h in self.handoffs.iter() {
            out.push_str(&format!(
                "handoff {} {} {} {} {}\n",
                h.partition, h.from, h.from_last, h.to, h.to_after
            ));
        }
        for (g, lsn) in self.handoffs.horizons() {
            out.push_str(&format!("horizon {g} {lsn}\n"));
        }
        out
    }

    /// Parses the text stored in etcd (module docs), refusing it whole if
    /// any line is wrong.
    pub fn parse(text: &str) -> Result<PartitionTable, PartitionError> {
        let bad = |line: usize, why: String| PartitionError::BadTable { line, why };
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
        let history = match lines.next() {
            Some((_, HEADER)) => false,
            Some((_, HEADER_2)) => true,
            Some((_, other)) => {
                return Err(bad(
                    1,
                    format!("expected {HEADER:?} or {HEADER_2:?}, found {other:?}"),
                ));
            }
            None => return Err(bad(1, "the table is empty".into())),
        };
        let mut slots: Vec<Assignment> = Vec::with_capacity(usize::from(PARTITIONS));
        let mut handoffs = Handoffs::default();
        for (n, line) in lines.filter(|(_, l)| !l.is_empty()) {
            if history && (line.starts_with("handoff ") || line.starts_with("horizon ")) {
                parse_history(line, &mut handoffs).map_err(|why| bad(n, why))?;
                continue;
            }
            let (range, who) = line
                .split_once(' ')
                .ok_or_else(|| bad(n, format!("expected `FIRST-LAST GROUP`, found {line:?}")))?;
            let (first, last) = range
                .split_once('-')
                .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
                .ok_or_else(|| bad(n, format!("{range:?} is not a range FIRST-LAST")))?;
            if first != slots.len() || last < first || last >= usize::from(PARTITIONS) {
                return Err(bad(
                    n,
                    format!(
                        "the run {first}-{last} does not continue the table at {} (runs cover \
                         0-{} in order)",
                        slots.len(),
                        PARTITIONS - 1
                    ),
                ));
            }
            let (owner, moving_to, fenced) = match who.split_once(['>', '~']) {
                Some((o, t)) => (o, Some(t), who.contains('>')),
                None => (who, None, false),
            };
            let name = |s: &str| s.parse::<GroupName>().map_err(|e| bad(n, e.to_string()));
            let a = Assignment {
                owner: name(owner)?,
                moving_to: moving_to.map(name).transpose()?,
                fenced,
            };
            if a.moving_to.as_ref() == Some(&a.owner) {
                return Err(bad(
                    n,
                    format!("{who:?} moves a partition to its own owner"),
                ));
            }
            slots.resize(last + 1, a);
        }
        if slots.len() != usize::from(PARTITIONS) {
            return Err(bad(
                text.lines().count(),
                format!(
                    "the table ends at partition {}; it must cover 0-{}",
                    slots.len(),
                    PARTITIONS - 1
                ),
            ));
        }
        Ok(PartitionTable { slots, handoffs })
    }

    /// This table with `p` being copied to `to` (refused if it is moving
    /// already or `to` owns it).
    pub fn with_move(&self, p: PartitionId, to: &GroupName) -> Result<Self, PartitionError> {
        let a = self.get(p);
        if &a.owner == to {
            return Err(PartitionError::MoveToOwner(p, to.clone()));
        }
        if let Some(t) = &a.moving_to {
            return Err(PartitionError::AlreadyMoving(p, t.clone()));
        }
        Ok(self.with(p, |a| a.moving_to = Some(to.clone())))
    }

    /// This table with `p`'s move at its flip: the owner refuses writes.
    pub fn with_fence(&self, p: PartitionId) -> Result<Self, PartitionError> {
        if self.get(p).moving_to.is_none() {
            return Err(PartitionError::NotMoving(p));
        }
        Ok(self.with(p, |a| a.fenced = true))
    }

    /// This table with `p`'s move finished: its target owns it.
    pub fn with_move_done(&self, p: PartitionId) -> Result<Self, PartitionError> {
        let to = self
            .get(p)
            .moving_to
            .clone()
            .ok_or(PartitionError::NotMoving(p))?;
        Ok(self.with(p, |a| {
            *a = Assignment {
                owner: to,
                moving_to: None,
                fenced: false,
            }
        }))
    }

    /// This table with `p`'s move called off: its owner keeps it.
    pub fn without_move(&self, p: PartitionId) -> Self {
        self.with(p, |a| {
            a.moving_to = None;
            a.fenced = false;
        })
    }

    fn with(&self, p: PartitionId, f: impl FnOnce(&mut Assignment)) -> Self {
        let mut next = self.clone();
        f(&mut next.slots[usize::from(p.get())]);
        next
    }
}

/// Adds a `handoff` or `horizon` line to `handoffs`.
fn parse_history(line: &str, handoffs: &mut Handoffs) -> Result<(), String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let group = |s: &str| s.parse::<GroupName>().map_err(|e| e.to_string());
    let lsn = |s: &str| s.parse::<u64>().map_err(|_| format!("{s:?} is not an LSN"));
    match words.as_slice() {
        ["handoff", p, from, ls, to, lt] => {
            let partition = p
                .parse::<u16>()
                .ok()
                .and_then(PartitionId::new)
                .ok_or_else(|| format!("{p:?} is not a partition (0-{})", PARTITIONS - 1))?;
            handoffs.push(Handoff {
                partition,
                from: group(from)?,
                from_last: lsn(ls)?,
                to: group(to)?,
                to_after: lsn(lt)?,
            });
            Ok(())
        }
        ["horizon", g, l] => {
            handoffs.raise_horizon(&group(g)?, lsn(l)?);
            Ok(())
        }
        _ => Err(format!(
            "expected `handoff P FROM LS TO LT` or `horizon GROUP LSN`, found {line:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_of_handoffs_round_trips_and_a_table_without_it_stays_version_1() {
        let t = PartitionTable::even(&[g("g1"), g("g2")]).unwrap();
        assert!(t.to_text().starts_with("uuidmap-partitions 1\n"));
        let p = PartitionId::new(7).unwrap();
        let h = t.with_move(p, &g("g2")).unwrap().with_fence(p).unwrap();
        let done = h.with_move_done(p).unwrap().with_handoff(Handoff {
            partition: p,
            from: g("g1"),
            from_last: 1500,
            to: g("g2"),
            to_after: 900,
        });
        let text = done.to_text();
        assert!(text.starts_with("uuidmap-partitions 2\n"), "{text}");
        assert!(text.contains("\nhandoff 7 g1 1500 g2 900\n"), "{text}");
        assert_eq!(PartitionTable::parse(&text).unwrap(), done);
        let mut forgot = text.clone();
        forgot.push_str("horizon g1 40\n");
        assert_eq!(
            PartitionTable::parse(&forgot)
                .unwrap()
                .handoffs()
                .horizon(&g("g1")),
            40
        );
        // A bad history line is refused, naming it.
        let bad = text.replace("handoff 7 g1 1500", "handoff 7 g1 x");
        let e = PartitionTable::parse(&bad).unwrap_err().to_string();
        assert!(e.contains("\"x\" is not an LSN"), "{e}");
        // Version 1 has no history lines.
        let v1 = text.replace("uuidmap-partitions 2", "uuidmap-partitions 1");
        assert!(PartitionTable::parse(&v1).is_err());
    }

    fn g(s: &str) -> GroupName {
        s.parse().unwrap()
    }

    #[test]
    fn an_even_split_round_trips_through_its_text() {
        let t = PartitionTable::even(&[g("a"), g("b"), g("c")]).unwrap();
        assert_eq!(
            t.to_text(),
            "uuidmap-partitions 1\n0-1365 a\n1366-2730 b\n2731-4095 c\n"
        );
        assert_eq!(PartitionTable::parse(&t.to_text()).unwrap(), t);
        let counts = t.owners();
        assert_eq!(counts.values().sum::<usize>(), 4096);
        assert!(counts.values().all(|c| (1365..=1366).contains(c)));
    }

    #[test]
    fn a_move_is_marked_then_flipped() {
        let t = PartitionTable::even(&[g("a"), g("b")]).unwrap();
        let p = PartitionId::new(7).unwrap();
        let copying = t.with_move(p, &g("b")).unwrap();
        assert_eq!(
            copying.to_text(),
            "uuidmap-partitions 1\n0-6 a\n7-7 a~b\n8-2047 a\n2048-4095 b\n"
        );
        let a = copying.get(p);
        assert!(a.writable_by(&g("a"), false) && a.writable_by(&g("b"), true));
        assert!(!a.writable_by(&g("b"), false), "only the mover's copy");
        assert!(!a.writable_by(&g("a"), true), "a copy goes to the target");
        assert!(a.held_by(&g("b")) && !a.held_by(&g("c")));
        let moving = copying.with_fence(p).unwrap();
        assert_eq!(
            moving.to_text(),
            "uuidmap-partitions 1\n0-6 a\n7-7 a>b\n8-2047 a\n2048-4095 b\n"
        );
        assert!(!moving.get(p).writable_by(&g("a"), false), "fenced");
        assert!(moving.get(p).writable_by(&g("b"), true));
        for table in [&copying, &moving] {
            assert_eq!(&PartitionTable::parse(&table.to_text()).unwrap(), table);
        }
        assert_eq!(moving.moves().count(), 1);
        assert!(moving.with_move(p, &g("c")).is_err(), "one move at a time");
        assert_eq!(moving.without_move(p), t, "called off");
        let done = moving.with_move_done(p).unwrap();
        assert_eq!(done.get(p).owner, g("b"));
        assert!(done.with_move_done(p).is_err());
        assert!(done.with_fence(p).is_err());
        assert!(done.with_move(p, &g("b")).is_err(), "to its own owner");
    }

    #[test]
    fn a_bad_table_is_refused_naming_the_line() {
        let cases = [
            ("", 1, "empty"),
            ("uuidmap-partitions 3\n0-4095 a\n", 1, "expected"),
            (
                "uuidmap-partitions 1\n0-4094 a\n",
                2,
                "ends at partition 4095",
            ),
            (
                "uuidmap-partitions 1\n0-10 a\n12-4095 b\n",
                3,
                "does not continue",
            ),
            ("uuidmap-partitions 1\n0-4096 a\n", 2, "does not continue"),
            ("uuidmap-partitions 1\n0-4095\n", 2, "FIRST-LAST GROUP"),
            ("uuidmap-partitions 1\nx-4095 a\n", 2, "not a range"),
            ("uuidmap-partitions 1\n0-4095 A\n", 2, "group name"),
            ("uuidmap-partitions 1\n0-4095 a>a\n", 2, "its own owner"),
            ("uuidmap-partitions 1\n0-4095 a~a\n", 2, "its own owner"),
            ("uuidmap-partitions 1\n0-4095 a~b>c\n", 2, "group name"),
        ];
        for (text, line, why) in cases {
            match PartitionTable::parse(text) {
                Err(PartitionError::BadTable { line: l, why: w }) => {
                    assert_eq!(l, line, "{text:?}: {w}");
                    assert!(w.contains(why), "{text:?}: {w}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_even_split_needs_distinct_groups() {
        assert!(PartitionTable::even(&[]).is_err());
        assert!(PartitionTable::even(&[g("a"), g("a")]).is_err());
    }
}
