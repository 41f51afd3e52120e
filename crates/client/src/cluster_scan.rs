//! `ClusterScan`: every partition of a partitioned cluster scanned once,
//! group by group, with a cursor that names what is left
//! ([`PartitionedClient::scan`]).
//!
//! The scan plans at its first page: each group and the partitions it owns
//! in the map then. It scans the groups one after another, each filtered
//! to its planned partitions (`ScanRequest.partitions`), so every
//! partition is read from one group, in one stream:
//! - a group that no longer owns a planned partition refuses the scan at
//!   its start (`FAILED_PRECONDITION`): before anything of that group was
//!   returned, its partitions are planned again by the current map and
//!   scanned at their new owners. After a page was returned (a stream that
//!   broke and is resumed while a partition moved), the scan fails with
//!   [`ClientError::Routing`] rather than return entries twice.
//! - a partition that moves away from a group after its scan started keeps
//!   its entries there until the scan ends (the server's scan guard), and a
//!   partition that moves to a group already scanned is not read again: it
//!   is planned where it was.
//!
//! So a key present for the whole scan is returned exactly once (as a
//! single group's scan guarantees within its segments).
//!
//! The cursor ([`ClusterScanPage::cursor`]) is text:
//! `uuidmap-cluster-scan 1|GROUP:RANGES:HEX|GROUP:RANGES|...`: the group
//! being scanned, its partitions (`0-10,12`) and its own scan cursor in
//! hex, then the groups still to scan. Empty when the scan is done.

use std::collections::VecDeque;

use prost::bytes::Bytes;
use uuid::Uuid;
use uuidmap_partition::{GroupName, PartitionId};

use crate::reroute::{Reroute, not_owned};
use crate::{ClientError, PartitionedClient, ScanOptions, ScanStream};

/// One page of a [`ClusterScan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterScanPage {
    /// (key, value) pairs.
    pub entries: Vec<(Uuid, Uuid)>,
    /// The group they came from.
    pub group: String,
    /// Resumes after these entries ([`PartitionedClient::resume_scan`]);
    /// empty when the scan is done.
    pub cursor: String,
}

/// Partitions of one group still to scan, and where its scan stands.
#[derive(Clone, Debug)]
struct Planned {
    group: GroupName,
    partitions: Vec<u16>,
    /// Its own scan cursor (empty: not started).
    cursor: Bytes,
}

/// A scan of every partition once (module docs).
pub struct ClusterScan {
    client: PartitionedClient,
    values: Vec<Uuid>,
    /// `None` until planned (at the first page).
    plan: Option<VecDeque<Planned>>,
    /// The front group's stream, and whether it returned a page.
    current: Option<(ScanStream, bool)>,
    replans: usize,
    /// The waits for members behind the map, over the whole scan.
    catch_up: Reroute,
}

const HEADER: &str = "uuidmap-cluster-scan 1";

fn bad_cursor(why: impl std::fmt::Display) -> ClientError {
    ClientError::Routing {
        why: format!("not a cluster scan cursor: {why}"),
    }
}

impl PartitionedClient {
    /// Every entry of the cluster, each partition once (only entries whose
    /// value is one of `values`, unless empty).
    pub fn scan(&self, values: Vec<Uuid>) -> ClusterScan {
        ClusterScan {
            client: self.clone(),
            values,
            plan: None,
            current: None,
            replans: 0,
            catch_up: Reroute::default(),
        }
    }

    /// Resumes a scan after the page whose cursor is `cursor`, with the
    /// same `values`.
    pub fn resume_scan(&self, cursor: &str, values: Vec<Uuid>) -> Result<ClusterScan, ClientError> {
        let mut parts = cursor.split('|');
        if parts.next() != Some(HEADER) {
            return Err(bad_cursor(format!("it does not start with {HEADER:?}")));
        }
        let mut plan = VecDeque::new();
        for part in parts {
            let mut fields = part.split(':');
            let group = fields
                .next()
                .unwrap_or_default()
                .parse::<GroupName>()
                .map_err(bad_cursor)?;
            let partitions = parse_ranges(fields.next().unwrap_or_default())?;
            let cursor = match fields.next() {
                Some(hex) => Bytes::from(parse_hex(hex)?),
                None => Bytes::new(),
            };
            plan.push_back(Planned {
                group,
                partitions,
                cursor,
            });
        }
        Ok(ClusterScan {
            client: self.clone(),
            values,
            plan: Some(plan),
            current: None,
            replans: 0,
            catch_up: Reroute::default(),
        })
    }
}

impl ClusterScan {
    /// The next page; `None` when every partition was scanned.
    pub async fn next_page(&mut self) -> Result<Option<ClusterScanPage>, ClientError> {
        if self.plan.is_none() {
            let view = self.client.view();
            let plan = plan_of(&view, PartitionId::all().map(|p| p.get()))?;
            self.plan = Some(plan);
        }
        loop {
            let Some(front) = self.plan.as_ref().and_then(|p| p.front()).cloned() else {
                return Ok(None);
            };
            if self.current.is_none() {
                let view = self.client.view();
                let client = self.client.group_client(&view, &front.group)?;
                let stream = client.scan(ScanOptions {
                    values: self.values.clone(),
                    partitions: front.partitions.clone(),
                    cursor: front.cursor.clone(),
                    ..ScanOptions::default()
                });
                self.current = Some((stream, false));
            }
            let (stream, delivered) = self.current.as_mut().expect("set above");
            match stream.next_page().await {
                Ok(Some(page)) => {
                    *delivered = true;
                    let plan = self.plan.as_mut().expect("planned");
                    let done = page.cursor.is_empty();
                    if done {
                        plan.pop_front();
                        self.current = None;
                    } else if let Some(f) = plan.front_mut() {
                        f.cursor = page.cursor.clone();
                    }
                    return Ok(Some(ClusterScanPage {
                        entries: page.entries,
                        group: front.group.to_string(),
                        cursor: cursor_text(plan),
                    }));
                }
                Ok(None) => {
                    self.plan.as_mut().expect("planned").pop_front();
                    self.current = None;
                }
                Err(e) if self.catch_up.member_behind(&e, self.client.view().version) => {
                    // The member has not seen the map yet (`reroute`):
                    // ask it again, from where the scan is, once it may
                    // have.
                    self.catch_up.wait().await;
                    self.current = None;
                }
                Err(e) if not_owned(&e) => {
                    let returned = *delivered || !front.cursor.is_empty();
                    if returned || self.replans >= crate::MAX_REROUTES {
                        return Err(ClientError::Routing {
                            why: format!(
                                "a partition of group {} moved while the cluster scan read it \
                                 ({e}); scan again from the start to get every entry once",
                                front.group
                            ),
                        });
                    }
                    // Nothing of this group returned yet: plan its
                    // partitions again, at their owners now.
                    self.replans += 1;
                    self.current = None;
                    let view = self.client.refresh().await?;
                    let plan = self.plan.as_mut().expect("planned");
                    plan.pop_front();
                    let again = plan_of(&view, front.partitions.iter().copied())?;
                    for p in again.into_iter().rev() {
                        plan.push_front(p);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// `partitions` grouped by their owner in `view`, groups in name order.
fn plan_of(
    view: &uuidmap_partition::ClusterView,
    partitions: impl Iterator<Item = u16>,
) -> Result<VecDeque<Planned>, ClientError> {
    let mut by_group: std::collections::BTreeMap<GroupName, Vec<u16>> = Default::default();
    for p in partitions {
        let owner = PartitionId::new(p)
            .and_then(|id| view.owner(id))
            .ok_or_else(|| ClientError::Routing {
                why: "the cluster has no partition table in etcd yet".into(),
            })?;
        by_group.entry(owner.clone()).or_default().push(p);
    }
    Ok(by_group
        .into_iter()
        .map(|(group, partitions)| Planned {
            group,
            partitions,
            cursor: Bytes::new(),
        })
        .collect())
}

fn cursor_text(plan: &VecDeque<Planned>) -> String {
    if plan.is_empty() {
        return String::new();
    }
    let mut out = String::from(HEADER);
    for p in plan {
        out.push('|');
        out.push_str(p.group.as_str());
        out.push(':');
        out.push_str(&ranges_text(&p.partitions));
        if !p.cursor.is_empty() {
            out.push(':');
            out.extend(p.cursor.iter().map(|b| format!("{b:02x}")));
        }
    }
    out
}

fn ranges_text(partitions: &[u16]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < partitions.len() {
        let mut j = i;
        while j + 1 < partitions.len() && partitions[j + 1] == partitions[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            partitions[i].to_string()
        } else {
            format!("{}-{}", partitions[i], partitions[j])
        });
        i = j + 1;
    }
    out.join(",")
}

fn parse_ranges(text: &str) -> Result<Vec<u16>, ClientError> {
    let mut out = Vec::new();
    for item in text.split(',').filter(|s| !s.is_empty()) {
        let (a, b) = item.split_once('-').unwrap_or((item, item));
        let n = |s: &str| {
            s.parse::<u16>()
                .ok()
                .filter(|n| PartitionId::new(*n).is_some())
                .ok_or_else(|| bad_cursor(format!("{s:?} is not a partition")))
        };
        out.extend(n(a)?..=n(b)?);
    }
    Ok(out)
}

fn parse_hex(hex: &str) -> Result<Vec<u8>, ClientError> {
    if !hex.len().is_multiple_of(2) {
        return Err(bad_cursor("odd hex"));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| bad_cursor("bad hex")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_garbage_is_refused() {
        let plan: VecDeque<Planned> = [
            Planned {
                group: "g1".parse().unwrap(),
                partitions: vec![0, 1, 2, 5, 7, 8],
                cursor: Bytes::from_static(&[0xab, 0x01]),
            },
            Planned {
                group: "g2".parse().unwrap(),
                partitions: vec![4095],
                cursor: Bytes::new(),
            },
        ]
        .into();
        let text = cursor_text(&plan);
        assert_eq!(text, "uuidmap-cluster-scan 1|g1:0-2,5,7-8:ab01|g2:4095");
        let parts: Vec<_> = text.split('|').collect();
        assert_eq!(
            parse_ranges(parts[1].split(':').nth(1).unwrap()).unwrap(),
            [0, 1, 2, 5, 7, 8]
        );
        assert_eq!(parse_hex("ab01").unwrap(), [0xab, 0x01]);
        assert!(parse_ranges("4096").is_err());
        assert!(parse_hex("abc").is_err());
        assert!(cursor_text(&VecDeque::new()).is_empty());
    }
}
