//! [`ReadIndex`]: the read index a linearizable read waits for on a member
//! that cannot answer from its lease (a follower, a leader whose lease
//! lapsed or that was deposed, one just elected). README.md, "Read
//! consistency", and docs/replication.md, section 6, give the design.
//!
//! # Protocol
//!
//! A *round* asks the leader this member knows of for its read index.
//! While the leader's read lease holds, its Raft service answers at once
//! with its applied LSN, loaded after the lease check: the rule of its own
//! lease reads (`RaftService::lease_read_index`). Otherwise the leader
//! (openraft's `get_read_linearizer(ReadPolicy::ReadIndex)`) sends a
//! heartbeat round and answers once a majority acknowledged it, with its
//! commit index (at least its own first entry of the term). Either way no
//! other leader can have acknowledged anything then that is not at or
//! before that index. On the leader itself the round is a local call; elsewhere it
//! is the Raft service's `ReadIndex` RPC. The member then waits until its
//! applied LSN (= the Raft log index: every entry, blank and membership
//! ones too, advances the watermark) reaches the index, and reads: the
//! read reflects every write acknowledged before the round began.
//!
//! # Batching
//!
//! One round is in flight at a time per member, run by one task. A read
//! that arrives while a round is in flight waits for the *next* round (the
//! one in flight may have got its index before the read arrived, and need
//! not order after it); one round serves every read waiting when it
//! starts. In atomics: `started` counts rounds begun; a read loads it
//! (`s`) and needs round `s + 1`, which begins only after that load;
//! it raises `wanted` to `s + 1`, wakes the task ([`Notify`]: a wake-up
//! before the task waits is kept), and waits on a [`watch`] of the last
//! finished round until its number reaches `s + 1`. The task begins a
//! round whenever `wanted` exceeds the last one finished. No lock is taken
//! by a read beyond the watch's own.
//!
//! # Failures
//!
//! No leader known, a leader that cannot be reached within
//! [`ROUND_TIMEOUT`], one that says it no longer leads, or one that could
//! not confirm its leadership with a majority: every read of that round
//! gets the [`ReadIndexError`], which says which leader this member knows
//! of (the server sends it as `uuidmap-leader`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use openraft::error::{LinearizableReadError, RaftError};
use openraft::storage::RaftStateMachine;
use openraft::{Raft, ReadPolicy};
use tokio::sync::{Notify, watch};
use tonic::transport::Channel;
use uuidmap_engine::writer::LeaderHint;
use uuidmap_proto::raft::v1 as pb;
use uuidmap_proto::raft::v1::raft_client::RaftClient;

use crate::UuidmapRaft;
use crate::identity::INCARNATION_HEADER;

/// How long one round waits for the leader's answer.
pub const ROUND_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a linearizable read got no read index.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadIndexError {
    /// No leader is known (an election may be under way).
    #[error(
        "this member cannot serve a linearizable read: it knows no leader of its replica group \
         (an election may be under way); retry in a moment, or read with consistency `stale`"
    )]
    NoLeader,
    /// The member asked no longer leads (or never did).
    #[error(
        "this member cannot serve a linearizable read: the member it took for the leader no \
         longer leads{}; retry",
        describe(.leader)
    )]
    NotLeader {
        /// The leader the asked member knows of.
        leader: Option<LeaderHint>,
    },
    /// The leader did not answer.
    #[error(
        "this member cannot serve a linearizable read: the leader{} did not give its read \
         index ({reason}); retry, or read from the leader",
        describe(&Some(.leader.clone()))
    )]
    LeaderUnreachable {
        /// The leader asked.
        leader: LeaderHint,
        /// What went wrong.
        reason: String,
    },
    /// The leader could not confirm with a majority that it still leads.
    #[error(
        "this member cannot serve a linearizable read: the leader{} could not confirm with a \
         majority that it still leads ({reason}); retry in a moment",
        describe(.leader)
    )]
    NoQuorum {
        /// The leader asked.
        leader: Option<LeaderHint>,
        /// openraft's words.
        reason: String,
    },
    /// This member's Raft is stopping.
    #[error("this member is stopping; read from another member")]
    Stopping,
}

impl ReadIndexError {
    /// The leader to name in the refusal, if any.
    pub fn leader(&self) -> Option<&LeaderHint> {
        match self {
            ReadIndexError::NotLeader { leader } | ReadIndexError::NoQuorum { leader, .. } => {
                leader.as_ref()
            }
            ReadIndexError::LeaderUnreachable { leader, .. } => Some(leader),
            ReadIndexError::NoLeader | ReadIndexError::Stopping => None,
        }
    }
}

fn describe(leader: &Option<LeaderHint>) -> String {
    match leader {
        Some(LeaderHint { id, url: Some(url) }) => format!(" (node {id}, at {url})"),
        Some(LeaderHint { id, url: None }) => format!(" (node {id})"),
        None => String::new(),
    }
}

/// The last finished round: its number and what it got.
#[derive(Clone, Debug)]
struct Round {
    number: u64,
    result: Result<u64, ReadIndexError>,
}

/// The counters a read and the round task share (module docs).
#[derive(Debug, Default)]
struct Shared {
    /// Rounds begun (the number of the newest).
    started: AtomicU64,
    /// The highest round number a waiting read needs.
    wanted: AtomicU64,
    /// Wakes the round task.
    wake: Notify,
}

/// A member's read-index rounds (module docs). Cheap to clone.
#[derive(Clone, Debug)]
pub struct ReadIndex {
    shared: Arc<Shared>,
    rounds: watch::Receiver<Round>,
}

impl ReadIndex {
    /// The read index for a read arriving now: from a round that begins
    /// after this call (module docs). Cancel-safe.
    pub async fn read_index(&self) -> Result<u64, ReadIndexError> {
        let need = self.shared.started.load(SeqCst) + 1;
        self.shared.wanted.fetch_max(need, SeqCst);
        self.shared.wake.notify_one();
        let mut rounds = self.rounds.clone();
        let round = rounds
            .wait_for(|r| r.number >= need)
            .await
            .map_err(|_| ReadIndexError::Stopping)?;
        round.result.clone()
    }

    /// Rounds begun so far (`uuidmap_raft_read_index_rounds_total`).
    pub fn rounds(&self) -> u64 {
        self.shared.started.load(SeqCst)
    }
}

/// Where a round gets its read index.
trait RoundSource: Send + 'static {
    /// One round's read index.
    fn fetch(&mut self) -> impl Future<Output = Result<u64, ReadIndexError>> + Send;
}

/// Where a member's round gets its index: its openraft (when it leads)
/// or the leader's Raft service.
struct Source<SM: RaftStateMachine<UuidmapRaft>> {
    raft: Raft<UuidmapRaft, SM>,
    /// Raft addresses to dial instead of the membership's, by node id.
    overrides: Arc<HashMap<u64, String>>,
    /// The Raft port's TLS (`None`: plaintext).
    tls: Option<Arc<crate::raft_tls::RaftTls>>,
    /// The channel to the last leader asked: its id, address and client.
    client: Option<(u64, String, RaftClient<Channel>)>,
}

/// Starts the round task of the member whose openraft is `raft`
/// (`overrides`: as the network's); it ends when every [`ReadIndex`] is
/// gone or it is aborted.
pub fn start<SM>(
    raft: Raft<UuidmapRaft, SM>,
    overrides: Arc<HashMap<u64, String>>,
    tls: Option<Arc<crate::raft_tls::RaftTls>>,
) -> (ReadIndex, tokio::task::JoinHandle<()>)
where
    SM: RaftStateMachine<UuidmapRaft>,
{
    start_with(Source {
        raft,
        overrides,
        tls,
        client: None,
    })
}

/// The round task over `source`, and its handle.
fn start_with(source: impl RoundSource) -> (ReadIndex, tokio::task::JoinHandle<()>) {
    let shared = Arc::new(Shared::default());
    let (tx, rx) = watch::channel(Round {
        number: 0,
        result: Err(ReadIndexError::NoLeader),
    });
    let task = tokio::spawn(run_rounds(shared.clone(), tx, source));
    (ReadIndex { shared, rounds: rx }, task)
}

/// The round task (module docs).
async fn run_rounds(shared: Arc<Shared>, tx: watch::Sender<Round>, mut source: impl RoundSource) {
    let mut finished = 0;
    loop {
        if shared.wanted.load(SeqCst) <= finished {
            tokio::select! {
                () = shared.wake.notified() => {}
                () = tx.closed() => return,
            }
            continue;
        }
        let number = shared.started.fetch_add(1, SeqCst) + 1;
        let result = source.fetch().await;
        finished = number;
        tx.send_replace(Round { number, result });
    }
}

impl<SM: RaftStateMachine<UuidmapRaft>> RoundSource for Source<SM> {
    fn fetch(&mut self) -> impl Future<Output = Result<u64, ReadIndexError>> + Send {
        self.fetch_once()
    }
}

impl<SM: RaftStateMachine<UuidmapRaft>> Source<SM> {
    /// One round: the leader's read index.
    async fn fetch_once(&mut self) -> Result<u64, ReadIndexError> {
        let (me, leader, node) = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow_watched();
            let node = m
                .current_leader
                .and_then(|id| m.membership_config.membership().get_node(&id).cloned());
            (m.id, m.current_leader, node)
        };
        let Some(leader) = leader else {
            return Err(ReadIndexError::NoLeader);
        };
        if leader == me {
            return leader_read_index(&self.raft).await;
        }
        let hint = LeaderHint {
            id: leader,
            url: node.as_ref().map(|n| n.api_url.clone()),
        };
        let Some(node) = node else {
            return Err(ReadIndexError::LeaderUnreachable {
                leader: hint,
                reason: "its address is not in the membership this member knows".into(),
            });
        };
        let addr = self
            .overrides
            .get(&leader)
            .cloned()
            .unwrap_or_else(|| node.raft_addr.clone());
        let unreachable = |reason: String| ReadIndexError::LeaderUnreachable {
            leader: hint.clone(),
            reason,
        };
        let client = match &self.client {
            Some((id, a, c)) if *id == leader && *a == addr => c.clone(),
            _ => {
                let c = client_to(&addr, leader, self.tls.as_deref()).map_err(&unreachable)?;
                self.client = Some((leader, addr.clone(), c.clone()));
                c
            }
        };
        let mut request = tonic::Request::new(pb::ReadIndexRequest {});
        request.set_timeout(ROUND_TIMEOUT);
        if node.incarnation != 0 {
            request.metadata_mut().insert(
                INCARNATION_HEADER,
                tonic::metadata::MetadataValue::from(node.incarnation),
            );
        }
        let mut client = client;
        let answer = match tokio::time::timeout(ROUND_TIMEOUT, client.read_index(request)).await {
            Err(_) => return Err(unreachable(format!("no answer within {ROUND_TIMEOUT:?}"))),
            Ok(Err(status)) => {
                return Err(unreachable(format!(
                    "it answered {:?}: {}",
                    status.code(),
                    status.message()
                )));
            }
            Ok(Ok(answer)) => answer.into_inner(),
        };
        match answer.outcome {
            Some(pb::read_index_response::Outcome::ReadIndex(index)) => Ok(index),
            Some(pb::read_index_response::Outcome::Refused(refused)) => {
                let leader = (refused.leader_id != 0).then(|| LeaderHint {
                    id: refused.leader_id,
                    url: self.url_of(refused.leader_id),
                });
                Err(ReadIndexError::NotLeader { leader })
            }
            None => Err(unreachable("it answered without an outcome".into())),
        }
    }

    /// Node `id`'s client URL in the membership this member knows.
    fn url_of(&self, id: u64) -> Option<String> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow_watched();
        m.membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.api_url.clone())
    }
}

/// A lazily connected client of node `target`'s Raft service at `addr`
/// (over the Raft port's TLS when set, checking the target's name).
fn client_to(
    addr: &str,
    target: u64,
    tls: Option<&crate::raft_tls::RaftTls>,
) -> Result<RaftClient<Channel>, String> {
    let endpoint = crate::network::endpoint(addr, target, tls)
        .map_err(|e| format!("its Raft address {addr:?} is not usable: {e}"))?;
    Ok(RaftClient::new(
        endpoint
            .connect_timeout(ROUND_TIMEOUT)
            .tcp_nodelay(true)
            .connect_lazy(),
    ))
}

/// The read index of the member whose openraft is `raft`, if it leads:
/// openraft confirms its leadership with a heartbeat round acknowledged by
/// a majority (ReadIndex, not openraft's lease), then gives its commit
/// index. The Raft service's `ReadIndex` handler answers with it when its
/// own read lease does not hold.
pub async fn leader_read_index<SM>(raft: &Raft<UuidmapRaft, SM>) -> Result<u64, ReadIndexError>
where
    SM: RaftStateMachine<UuidmapRaft>,
{
    let hint = |id: Option<u64>, node: Option<&crate::ClusterNode>| {
        id.map(|id| LeaderHint {
            id,
            url: node.map(|n| n.api_url.clone()),
        })
    };
    let started = Instant::now();
    match raft.get_read_linearizer(ReadPolicy::ReadIndex).await {
        Ok(linearizer) => Ok(linearizer.read_log_id().log_id().index),
        Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f))) => {
            Err(ReadIndexError::NotLeader {
                leader: hint(f.leader_id, f.leader_node.as_ref()),
            })
        }
        Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(q))) => {
            let metrics = raft.metrics();
            let id = metrics.borrow_watched().id;
            Err(ReadIndexError::NoQuorum {
                leader: Some(LeaderHint { id, url: None }),
                reason: format!("{q}, after {:?}", started.elapsed()),
            })
        }
        Err(RaftError::Fatal(_)) => Err(ReadIndexError::Stopping),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    /// A source whose rounds say when they begin and end when the test
    /// gives them their index.
    struct Scripted {
        began: mpsc::UnboundedSender<()>,
        indexes: mpsc::UnboundedReceiver<u64>,
    }

    impl RoundSource for Scripted {
        fn fetch(&mut self) -> impl Future<Output = Result<u64, ReadIndexError>> + Send {
            let _ = self.began.send(());
            async move { self.indexes.recv().await.ok_or(ReadIndexError::Stopping) }
        }
    }

    #[tokio::test]
    async fn a_read_arriving_during_a_round_waits_for_the_next_and_one_round_serves_all_waiting() {
        let (began_tx, mut began) = mpsc::unbounded_channel();
        let (give, indexes) = mpsc::unbounded_channel();
        let (reads, _task) = start_with(Scripted {
            began: began_tx,
            indexes,
        });
        let first = tokio::spawn({
            let reads = reads.clone();
            async move { reads.read_index().await }
        });
        let round_begins = async |began: &mut mpsc::UnboundedReceiver<()>| {
            tokio::time::timeout(Duration::from_secs(5), began.recv())
                .await
                .expect("a round begins for a waiting read")
                .unwrap();
        };
        round_begins(&mut began).await;
        // Round 1 is in flight: these arrive during it.
        let late: Vec<_> = (0..50)
            .map(|_| {
                let reads = reads.clone();
                tokio::spawn(async move { reads.read_index().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        give.send(10).unwrap();
        assert_eq!(first.await.unwrap(), Ok(10));
        // Round 1's index (possibly from before they arrived) serves none
        // of them: a second round begins, and serves them all.
        round_begins(&mut began).await;
        for r in &late {
            assert!(
                !r.is_finished(),
                "a late read took the earlier round's index"
            );
        }
        give.send(20).unwrap();
        for r in late {
            assert_eq!(r.await.unwrap(), Ok(20));
        }
        assert_eq!(reads.rounds(), 2, "51 reads, two rounds");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(began.try_recv().is_err(), "no round without a read");
    }
}
