//! What the chaos tests of a replica group share (`cluster_chaos`, on
//! loopback, and `netns_chaos`, across network namespaces): their
//! settings from the environment, the keys and values they write, the
//! load (writers of fresh keys that keep what was acknowledged; tasks on
//! a few hot keys that record a history of puts, compare-and-sets and
//! reads for the linearizability checker), and reading a member whole.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uuid::Uuid;
use uuidmap_client::{CasOutcome, Client, ClientError, RetryClass, ScanOptions};
use uuidmap_testkit::data::SplitMix64;
use uuidmap_testkit::linearizability::{Call, Op, Ret};

/// Writers of fresh keys, and tasks on the hot keys.
pub(crate) const WRITERS: u64 = 3;
pub(crate) const HOT_TASKS: u64 = 3;
/// Hot keys at a time; a new set every `HOT_ROUND`, so that each key's
/// history stays small enough to check however long the run.
pub(crate) const HOT_KEYS: u64 = 5;
pub(crate) const HOT_ROUND: Duration = Duration::from_secs(10);
/// A value no write uses: a compare-and-set expecting it is a read.
pub(crate) const NEVER: u64 = u64::MAX;
/// How long the group may take to be whole again after a fault.
pub(crate) const SETTLE: Duration = Duration::from_secs(90);

pub(crate) fn fresh_key(writer: u64, i: u64) -> Uuid {
    Uuid::from_u128(
        0xc4a0_0000_0000_0000_0000_0000_0000_0000 | u128::from(writer) << 64 | u128::from(i),
    )
}

pub(crate) fn fresh_value(writer: u64, i: u64) -> Uuid {
    Uuid::from_u128(
        0xc4a1_0000_0000_0000_0000_0000_0000_0000 | u128::from(writer) << 64 | u128::from(i),
    )
}

pub(crate) fn hot_key(round: u64, k: u64) -> Uuid {
    Uuid::from_u128(
        0xc4a2_0000_0000_0000_0000_0000_0000_0000 | u128::from(round) << 64 | u128::from(k),
    )
}

pub(crate) const VALUE_BASE: u128 = 0xc4a3_0000_0000_0000_0000_0000_0000_0000;

pub(crate) fn hot_value(v: u64) -> Uuid {
    Uuid::from_u128(VALUE_BASE | u128::from(v))
}

pub(crate) fn value_id(u: Uuid) -> u64 {
    let n = u.as_u128();
    assert_eq!(
        n & !u128::from(u64::MAX),
        VALUE_BASE,
        "{u} was never written to a hot key"
    );
    n as u64
}

/// The settings of a run, from the environment.
pub(crate) struct Settings {
    pub(crate) secs: u64,
    pub(crate) seed: u64,
}

impl Settings {
    pub(crate) fn from_env() -> Settings {
        let var = |name: &str| {
            std::env::var(name).ok().map(|v| {
                v.trim()
                    .parse::<u64>()
                    .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
            })
        };
        let seed = var("UUIDMAP_CHAOS_SEED").unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
        Settings {
            secs: var("UUIDMAP_CHAOS_SECS").unwrap_or(15),
            seed,
        }
    }
}

/// An acknowledged put of a fresh key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Acked {
    pub(crate) key: Uuid,
    pub(crate) value: Uuid,
    pub(crate) lsn: u64,
    /// When its answer came.
    pub(crate) at: Instant,
}

/// What a write's error says about its outcome.
pub(crate) enum Outcome {
    /// Nothing was done (every attempt was refused before it was logged).
    NotDone,
    /// It may take effect at any time after it was sent, or never.
    Unknown,
}

pub(crate) fn outcome_of(e: &ClientError) -> Outcome {
    match e {
        ClientError::DeadlineExceeded { .. } | ClientError::Undetermined { .. } => Outcome::Unknown,
        ClientError::Overloaded { .. } => Outcome::NotDone,
        e => match e.retry_class() {
            // A write is not retried after a conditional failure: a fast
            // or slow one given back means no attempt was logged.
            RetryClass::Fast | RetryClass::Slow => Outcome::NotDone,
            RetryClass::Conditional | RetryClass::Final => Outcome::Unknown,
        },
    }
}

/// A writer of fresh keys until `stop`: what was acknowledged.
pub(crate) async fn write_fresh(client: Client, writer: u64, stop: Arc<AtomicBool>) -> Vec<Acked> {
    let mut acked = Vec::new();
    let mut i = 0;
    while !stop.load(SeqCst) {
        i += 1;
        let (key, value) = (fresh_key(writer, i), fresh_value(writer, i));
        match client.put(key, value).await {
            Ok(lsn) => acked.push(Acked {
                key,
                value,
                lsn,
                at: Instant::now(),
            }),
            // Not acknowledged: it need not be there. Pace the next try.
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    acked
}

/// What a hot-key task recorded: its history and the LSNs of its
/// acknowledged writes.
pub(crate) type Recorded = (Vec<Op<Uuid, u64>>, Vec<u64>);

/// How a hot-key task reads a key: the value it has, or why not. One
/// place, so that a test chooses which member answers its reads.
pub(crate) type Reader = Arc<
    dyn Fn(Uuid) -> Pin<Box<dyn Future<Output = Result<Option<Uuid>, ClientError>> + Send>>
        + Send
        + Sync,
>;

/// A read that is a compare-and-set that cannot match (expecting
/// [`NEVER`]): the leader answers it with the value, as linearizable as
/// a write.
pub(crate) fn cas_reader(client: Client) -> Reader {
    Arc::new(move |key| {
        let client = client.clone();
        Box::pin(async move {
            match client
                .compare_and_set(key, Some(hot_value(NEVER)), None)
                .await
            {
                Ok(CasOutcome::Applied { .. }) => panic!("a read's compare-and-set matched"),
                Ok(CasOutcome::Mismatch { current }) => Ok(current),
                Err(e) => Err(e),
            }
        })
    })
}

/// What a hot-key call was answered.
enum Answer {
    /// A write applied, at this LSN.
    Written(u64),
    /// A read's value.
    Read(Option<Uuid>),
    /// A compare-and-set that found this value.
    CasFailed(Option<Uuid>),
}

/// The three calls a recorded history is made of, through whichever
/// client a test drives.
pub(crate) trait HistoryCalls {
    /// A put; its LSN.
    async fn put(&self, key: Uuid, value: Uuid) -> Result<u64, ClientError>;
    /// A compare-and-set.
    async fn compare_and_set(
        &self,
        key: Uuid,
        expected: Option<Uuid>,
        new: Option<Uuid>,
    ) -> Result<CasOutcome, ClientError>;
    /// A read.
    async fn get(&self, key: Uuid) -> Result<Option<Uuid>, ClientError>;
}

/// A replica group's client, its reads through `Reader`.
struct HotCalls {
    client: Client,
    read: Reader,
}

impl HistoryCalls for HotCalls {
    async fn put(&self, key: Uuid, value: Uuid) -> Result<u64, ClientError> {
        self.client.put(key, value).await
    }

    async fn compare_and_set(
        &self,
        key: Uuid,
        expected: Option<Uuid>,
        new: Option<Uuid>,
    ) -> Result<CasOutcome, ClientError> {
        self.client.compare_and_set(key, expected, new).await
    }

    async fn get(&self, key: Uuid) -> Result<Option<Uuid>, ClientError> {
        (self.read)(key).await
    }
}

/// A task on the hot keys until `stop`: puts, compare-and-sets from the
/// value it last saw, and reads (through `read`), each recorded with its
/// call and return times (ns since `start`).
pub(crate) async fn hot_task(
    client: Client,
    read: Reader,
    rng: SplitMix64,
    next_value: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    start: Instant,
) -> Recorded {
    let pick = move |rng: &mut SplitMix64| {
        let round = start.elapsed().as_nanos() as u64 / HOT_ROUND.as_nanos() as u64;
        hot_key(round, rng.next_u64() % HOT_KEYS)
    };
    let calls = HotCalls { client, read };
    record_history(&calls, pick, rng, next_value, stop, start).await
}

/// Calls `calls` one at a time until `stop` on the key `pick` draws: 4 in
/// 10 puts, 3 compare-and-sets from the value last seen, 3 reads, each
/// recorded with its call and return times (ns since `start`) for the
/// linearizability checker; an error whose outcome is unknown is recorded
/// as such, one that was not done is not recorded. Values are
/// `hot_value(n)`, `n` drawn from `next_value`.
pub(crate) async fn record_history(
    calls: &impl HistoryCalls,
    mut pick: impl FnMut(&mut SplitMix64) -> Uuid,
    mut rng: SplitMix64,
    next_value: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    start: Instant,
) -> Recorded {
    let mut history = Vec::new();
    let mut lsns = Vec::new();
    let mut seen: HashMap<Uuid, Option<u64>> = HashMap::new();
    let now = || start.elapsed().as_nanos() as u64;
    while !stop.load(SeqCst) {
        let key = pick(&mut rng);
        let v = next_value.fetch_add(1, SeqCst);
        let expected = seen.get(&key).copied().flatten();
        let call = match rng.next_u64() % 10 {
            0..4 => Call::Put(v),
            4..7 => Call::Cas {
                expected,
                new: Some(v),
            },
            _ => Call::Get,
        };
        let invoked = now();
        let answer = match call {
            Call::Put(v) => calls.put(key, hot_value(v)).await.map(Answer::Written),
            Call::Cas { expected, new } => calls
                .compare_and_set(key, expected.map(hot_value), new.map(hot_value))
                .await
                .map(|outcome| match outcome {
                    CasOutcome::Applied { lsn } => Answer::Written(lsn),
                    CasOutcome::Mismatch { current } => Answer::CasFailed(current),
                }),
            _ => calls.get(key).await.map(Answer::Read),
        };
        let returned = now();
        let returned = match answer {
            Ok(Answer::Written(lsn)) => {
                lsns.push(lsn);
                seen.insert(key, Some(v));
                Some((returned, Ret::Done))
            }
            Ok(Answer::Read(value)) => {
                let value = value.map(value_id);
                seen.insert(key, value);
                Some((returned, Ret::Value(value)))
            }
            Ok(Answer::CasFailed(current)) => {
                let current = current.map(value_id);
                seen.insert(key, current);
                Some((returned, Ret::CasFailed { current }))
            }
            Err(e) => match outcome_of(&e) {
                Outcome::NotDone => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                Outcome::Unknown => None,
            },
        };
        history.push(Op {
            key,
            call,
            invoked,
            returned,
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (history, lsns)
}

/// A number in `lo..hi` (ms) as a duration.
pub(crate) fn ms(rng: &mut SplitMix64, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(lo + rng.next_u64() % (hi - lo))
}

/// Every entry of the member `client` talks to, in key order.
pub(crate) async fn contents(client: &Client) -> BTreeMap<Uuid, Uuid> {
    let mut scan = client.scan(ScanOptions::default());
    let mut all = BTreeMap::new();
    while let Some(page) = scan.next_page().await.unwrap() {
        all.extend(page.entries);
    }
    all
}

pub(crate) fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() - 1) * p / 100]
}

/// Time until a member other than `old` (the leader just killed or cut
/// off) acknowledges a write, from `fault`; the probes' acknowledged
/// writes join `acked`.
pub(crate) async fn failover(
    one: &[Client],
    old: usize,
    fault: Instant,
    acked: &Mutex<Vec<Acked>>,
) -> Duration {
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let probe = |i: usize| {
        let done = &done;
        async move {
            // Asks member `i` alone: it acknowledges only once it leads.
            let c = one[i].with_timeout(Duration::from_millis(300));
            while !done.load(SeqCst) {
                let n = PROBES.fetch_add(1, SeqCst);
                let (key, value) = (fresh_key(1000, n), fresh_value(1000, n));
                match c.put(key, value).await {
                    Ok(lsn) => {
                        let at = Instant::now();
                        done.store(true, SeqCst);
                        acked.lock().unwrap().push(Acked {
                            key,
                            value,
                            lsn,
                            at,
                        });
                        return Some(at - fault);
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
                assert!(
                    fault.elapsed() < SETTLE,
                    "no write acknowledged within {SETTLE:?} after the fault"
                );
            }
            None
        }
    };
    let others: Vec<usize> = (0..one.len()).filter(|&i| i != old).collect();
    let (a, b) = tokio::join!(probe(others[0]), probe(others[1]));
    a.into_iter().chain(b).min().expect("one probe got through")
}

/// Whether the group is whole: every member runs (`running`) and answers
/// (`one[i]` talks to member i+1 alone), one leads with all as voters and
/// no learner, the others follow it, and each is at most a few entries
/// behind. The leader's index (from 0), or what is missing.
pub(crate) async fn whole(one: &[Client], running: &[bool]) -> Result<usize, String> {
    let mut stats = Vec::new();
    for (i, c) in one.iter().enumerate() {
        if !running[i] {
            return Err(format!("member {} is down", i + 1));
        }
        stats.push(
            c.cluster_status()
                .await
                .map_err(|e| format!("member {}: {e}", i + 1))?,
        );
    }
    let leader = stats
        .iter()
        .position(|s| s.role == "leader")
        .ok_or("no member leads")?;
    let l = &stats[leader];
    let all: Vec<u64> = (1..=one.len() as u64).collect();
    if l.voters != all || !l.learners.is_empty() {
        return Err(format!("voters {:?}, learners {:?}", l.voters, l.learners));
    }
    for s in &stats {
        if s.leader_id != Some(l.node_id) || s.term != l.term {
            return Err(format!(
                "member {} follows {:?} in term {}, not {} in term {}",
                s.node_id, s.leader_id, s.term, l.node_id, l.term
            ));
        }
    }
    if l.followers.len() != one.len() - 1
        || l.followers
            .iter()
            .any(|f| f.matched_index.is_none() || f.lag > 500)
    {
        return Err(format!("followers behind: {:?}", l.followers));
    }
    Ok(leader)
}
