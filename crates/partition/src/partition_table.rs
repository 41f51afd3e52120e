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
//! 2048-2050 g2>g1
//! 2051-4095 g2
//! ```
//!
//! The first line names the format and its version. Each other line is a
//! run of partitions `FIRST-LAST` (inclusive) and its owner, or
//! `OWNER>TARGET` for partitions moving from `OWNER` to `TARGET` (the owner
//! serves reads and refuses writes until the move flips them). The runs
//! cover `0..4096` in order, with no gap and no overlap; anything else is
//! refused whole, naming the line.

use crate::{GroupName, PARTITIONS, PartitionError, PartitionId};

/// The first line of the text.
const HEADER: &str = "uuidmap-partitions 1";

/// Who holds one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The group that serves it.
    pub owner: GroupName,
    /// The group it is moving to, while a move is under way: the owner
    /// refuses writes to it meanwhile.
    pub moving_to: Option<GroupName>,
}

/// Every partition's [`Assignment`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionTable {
    slots: Vec<Assignment>,
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
            })
            .collect();
        Ok(PartitionTable { slots })
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

    /// The table as the text stored in etcd (module docs).
    pub fn to_text(&self) -> String {
        let mut out = String::from(HEADER);
        out.push('\n');
        let mut first = 0;
        for i in 1..=self.slots.len() {
            if i == self.slots.len() || self.slots[i] != self.slots[first] {
                let a = &self.slots[first];
                out.push_str(&format!("{first}-{} {}", i - 1, a.owner));
                if let Some(t) = &a.moving_to {
                    out.push_str(&format!(">{t}"));
                }
                out.push('\n');
                first = i;
            }
        }
        out
    }

    /// Parses the text stored in etcd (module docs), refusing it whole if
    /// any line is wrong.
    pub fn parse(text: &str) -> Result<PartitionTable, PartitionError> {
        let bad = |line: usize, why: String| PartitionError::BadTable { line, why };
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
        match lines.next() {
            Some((_, HEADER)) => {}
            Some((_, other)) => {
                return Err(bad(1, format!("expected {HEADER:?}, found {other:?}")));
            }
            None => return Err(bad(1, "the table is empty".into())),
        }
        let mut slots: Vec<Assignment> = Vec::with_capacity(usize::from(PARTITIONS));
        for (n, line) in lines.filter(|(_, l)| !l.is_empty()) {
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
            let (owner, moving_to) = match who.split_once('>') {
                Some((o, t)) => (o, Some(t)),
                None => (who, None),
            };
            let name = |s: &str| s.parse::<GroupName>().map_err(|e| bad(n, e.to_string()));
            let a = Assignment {
                owner: name(owner)?,
                moving_to: moving_to.map(name).transpose()?,
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
        Ok(PartitionTable { slots })
    }

    /// This table with `p` marked moving to `to` (refused if it is moving
    /// already or `to` owns it).
    pub fn with_move(&self, p: PartitionId, to: &GroupName) -> Result<Self, PartitionError> {
        let a = self.get(p);
        if &a.owner == to {
            return Err(PartitionError::MoveToOwner(p, to.clone()));
        }
        if let Some(t) = &a.moving_to {
            return Err(PartitionError::AlreadyMoving(p, t.clone()));
        }
        let mut next = self.clone();
        next.slots[usize::from(p.get())].moving_to = Some(to.clone());
        Ok(next)
    }

    /// This table with `p`'s move finished: its target owns it.
    pub fn with_move_done(&self, p: PartitionId) -> Result<Self, PartitionError> {
        let a = self.get(p);
        let to = a.moving_to.clone().ok_or(PartitionError::NotMoving(p))?;
        let mut next = self.clone();
        next.slots[usize::from(p.get())] = Assignment {
            owner: to,
            moving_to: None,
        };
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let moving = t.with_move(p, &g("b")).unwrap();
        assert_eq!(
            moving.to_text(),
            "uuidmap-partitions 1\n0-6 a\n7-7 a>b\n8-2047 a\n2048-4095 b\n"
        );
        assert_eq!(PartitionTable::parse(&moving.to_text()).unwrap(), moving);
        assert_eq!(moving.moves().count(), 1);
        assert!(moving.with_move(p, &g("c")).is_err(), "one move at a time");
        let done = moving.with_move_done(p).unwrap();
        assert_eq!(done.get(p).owner, g("b"));
        assert!(done.with_move_done(p).is_err());
        assert!(done.with_move(p, &g("b")).is_err(), "to its own owner");
    }

    #[test]
    fn a_bad_table_is_refused_naming_the_line() {
        let cases = [
            ("", 1, "empty"),
            ("uuidmap-partitions 2\n0-4095 a\n", 1, "expected"),
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
