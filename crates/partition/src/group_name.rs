//! A replica group's name in a partitioned cluster.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::PartitionError;

/// The longest group name.
pub const MAX_GROUP_NAME: usize = 32;

/// A group's name: 1 to 32 characters of `a-z`, `0-9` and `-`, starting
/// with a letter or digit. It is a path segment of the map's etcd keys and
/// a word of the partition table's text, so nothing else is allowed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupName(Arc<str>);

impl GroupName {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for GroupName {
    type Err = PartitionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = !s.is_empty()
            && s.len() <= MAX_GROUP_NAME
            && !s.starts_with('-')
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if ok {
            Ok(GroupName(s.into()))
        } else {
            Err(PartitionError::BadGroupName(s.to_owned()))
        }
    }
}

impl fmt::Display for GroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_path_safe_words() {
        for good in ["a", "g1", "shard-07", &"x".repeat(32)] {
            assert_eq!(good.parse::<GroupName>().unwrap().as_str(), good);
        }
        for bad in ["", "-a", "A", "a/b", "a b", "a>b", &"x".repeat(33), "é"] {
            let e = bad.parse::<GroupName>().unwrap_err().to_string();
            assert!(e.contains("group name"), "{bad:?}: {e}");
        }
    }
}
