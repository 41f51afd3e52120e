//! A linearizability checker for histories of a key-value store whose keys
//! are independent registers (Put, Delete, Get, CompareAndSet), for the
//! fault tests of a replicated store: did every client see one order of
//! operations, consistent with real time, that a single register allows?
//!
//! # How it checks
//!
//! Keys are independent, so the history is split by key and each key is
//! checked alone (P-compositionality): the histories stay small. For one
//! key it is the Wing–Gong search with Lowe's memoization (as in Knossos
//! and porcupine): build a sequential order one operation at a time, where
//! the next operation may be any not yet placed that was invoked before
//! every unplaced *completed* operation returned (real-time order), and
//! whose recorded result the register gives in the state reached; back
//! off when none fits. A state already explored (the set of operations
//! placed, and the register's value) is not explored again.
//!
//! An operation whose outcome the client never learned (a timeout, a
//! connection cut after sending: `returned: None`) may take effect at any
//! time after its invocation, with whatever result, or never: it is
//! placed when it helps and may be left out at the end.
//!
//! The search is exponential in the worst case (that is the problem's
//! nature); with per-key histories of a few hundred operations and the
//! memo it finishes fast in practice. [`check`] takes a bound on the
//! states it explores and says so when it gives up, rather than hang.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// What a client asked of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Call<V> {
    /// Set the value.
    Put(V),
    /// Remove the value.
    Delete,
    /// Read the value.
    Get,
    /// Set `new` (None: remove) if the value is `expected` (None: absent).
    Cas {
        /// The value it must have.
        expected: Option<V>,
        /// The value it gets.
        new: Option<V>,
    },
}

/// What the client was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ret<V> {
    /// A Put, a Delete, or a CompareAndSet that was applied.
    Done,
    /// A Get's answer.
    Value(Option<V>),
    /// A CompareAndSet refused, with the value the key had.
    CasFailed {
        /// The value it had instead.
        current: Option<V>,
    },
}

/// One operation of a history.
#[derive(Clone, Debug)]
pub struct Op<K, V> {
    /// The key.
    pub key: K,
    /// What was asked.
    pub call: Call<V>,
    /// When it was sent (any clock shared by the clients, e.g. nanoseconds
    /// since the test's start).
    pub invoked: u64,
    /// When the answer came and what it was; `None` when the outcome is
    /// unknown (it may have taken effect, at any time after `invoked`, or
    /// not at all).
    pub returned: Option<(u64, Ret<V>)>,
}

/// Why a history is not linearizable, or could not be checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation<K> {
    /// No order of the key's operations fits both real time and a register.
    NotLinearizable {
        /// The key.
        key: K,
        /// The most operations any order managed to place before it got
        /// stuck, out of `ops`.
        placed: usize,
        /// The key's operations.
        ops: usize,
    },
    /// The search explored `states` states without an answer.
    GaveUp {
        /// The key.
        key: K,
        /// States explored.
        states: usize,
    },
}

/// The register's answer to `call` in state `value`, and the state after.
fn step<V: Copy + Eq>(value: Option<V>, call: Call<V>) -> (Ret<V>, Option<V>) {
    match call {
        Call::Put(v) => (Ret::Done, Some(v)),
        Call::Delete => (Ret::Done, None),
        Call::Get => (Ret::Value(value), value),
        Call::Cas { expected, new } if expected == value => (Ret::Done, new),
        Call::Cas { .. } => (Ret::CasFailed { current: value }, value),
    }
}

/// `history` without the operations whose outcome is unknown and that
/// constrain nothing: reads, and writes of a value no other operation
/// saw or expected. Such a write, had it taken effect, was overwritten
/// by a put before anything depended on it, so leaving it out ("never
/// took effect", which an unknown outcome allows) changes no verdict;
/// it only spares the checker the orders that place it. (It assumes every
/// value is written once.)
pub fn without_unseen_unknowns<K, V>(history: Vec<Op<K, V>>) -> Vec<Op<K, V>>
where
    K: Clone + Eq + Hash,
    V: Copy + Eq + Hash,
{
    let mut seen: HashSet<(K, V)> = HashSet::new();
    for op in &history {
        if let Call::Cas {
            expected: Some(e), ..
        } = op.call
        {
            seen.insert((op.key.clone(), e));
        }
        if let Some((_, Ret::Value(Some(v)) | Ret::CasFailed { current: Some(v) })) = op.returned {
            seen.insert((op.key.clone(), v));
        }
    }
    history
        .into_iter()
        .filter(|op| {
            op.returned.is_some()
                || match op.call {
                    Call::Put(v) | Call::Cas { new: Some(v), .. } => {
                        seen.contains(&(op.key.clone(), v))
                    }
                    Call::Get => false,
                    Call::Delete | Call::Cas { new: None, .. } => true,
                }
        })
        .collect()
}

/// Checks every key's history (the keys start absent), exploring at most
/// `max_states` states per key.
pub fn check<K, V>(history: &[Op<K, V>], max_states: usize) -> Result<(), Violation<K>>
where
    K: Clone + Eq + Hash,
    V: Copy + Eq + Hash,
{
    let mut by_key: HashMap<K, Vec<&Op<K, V>>> = HashMap::new();
    for op in history {
        by_key.entry(op.key.clone()).or_default().push(op);
    }
    for (key, ops) in by_key {
        check_key(&ops, max_states).map_err(|failure| match failure {
            KeyFailure::Stuck { placed } => Violation::NotLinearizable {
                key: key.clone(),
                placed,
                ops: ops.len(),
            },
            KeyFailure::GaveUp { states } => Violation::GaveUp {
                key: key.clone(),
                states,
            },
        })?;
    }
    Ok(())
}

enum KeyFailure {
    Stuck { placed: usize },
    GaveUp { states: usize },
}

/// A set of operations, by index.
type Placed = Vec<u64>;

fn is_placed(placed: &Placed, i: usize) -> bool {
    placed[i / 64] & (1 << (i % 64)) != 0
}

fn flip(placed: &mut Placed, i: usize) {
    placed[i / 64] ^= 1 << (i % 64);
}

/// The Wing–Gong search for one key (module docs), iterative so that a
/// long history cannot overflow the stack.
fn check_key<V: Copy + Eq + Hash>(
    ops: &[&Op<impl Sized, V>],
    max_states: usize,
) -> Result<(), KeyFailure> {
    let n = ops.len();
    let ret_time = |i: usize| ops[i].returned.map_or(u64::MAX, |(t, _)| t);
    let completed = ops.iter().filter(|o| o.returned.is_some()).count();
    let mut seen: HashSet<(Placed, Option<V>)> = HashSet::new();
    let mut placed: Placed = vec![0; n.div_ceil(64)];
    // The path so far: which op was placed, and the state before it.
    let mut path: Vec<(usize, Option<V>)> = Vec::new();
    let mut value: Option<V> = None;
    let mut placed_completed = 0;
    let mut most = 0;
    // The next candidate to try at the current depth.
    let mut next = 0;
    loop {
        if placed_completed == completed {
            return Ok(());
        }
        // The earliest return among the unplaced completed ops bounds
        // which ops may go next.
        let horizon = (0..n)
            .filter(|&i| !is_placed(&placed, i))
            .map(ret_time)
            .min()
            .unwrap_or(u64::MAX);
        let mut advanced = false;
        let mut i = next;
        while i < n {
            if !is_placed(&placed, i) && ops[i].invoked <= horizon {
                let (answer, after) = step(value, ops[i].call);
                let fits = ops[i].returned.is_none_or(|(_, r)| r == answer);
                if fits {
                    flip(&mut placed, i);
                    if seen.insert((placed.clone(), after)) {
                        if seen.len() > max_states {
                            return Err(KeyFailure::GaveUp { states: seen.len() });
                        }
                        path.push((i, value));
                        value = after;
                        if ops[i].returned.is_some() {
                            placed_completed += 1;
                        }
                        most = most.max(path.len());
                        next = 0;
                        advanced = true;
                        break;
                    }
                    flip(&mut placed, i);
                }
            }
            i += 1;
        }
        if advanced {
            continue;
        }
        // Back off: undo the last placement and try the op after it.
        let Some((last, before)) = path.pop() else {
            return Err(KeyFailure::Stuck { placed: most });
        };
        flip(&mut placed, last);
        if ops[last].returned.is_some() {
            placed_completed -= 1;
        }
        value = before;
        next = last + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::SplitMix64;

    type H = Vec<Op<u8, u32>>;

    fn op(call: Call<u32>, invoked: u64, returned: u64, ret: Ret<u32>) -> Op<u8, u32> {
        Op {
            key: 0,
            call,
            invoked,
            returned: Some((returned, ret)),
        }
    }

    fn unknown(call: Call<u32>, invoked: u64) -> Op<u8, u32> {
        Op {
            key: 0,
            call,
            invoked,
            returned: None,
        }
    }

    fn ok(h: &H) -> bool {
        check(h, 1_000_000).is_ok()
    }

    #[test]
    fn a_sequential_history_that_a_register_allows_is_linearizable() {
        let h = vec![
            op(Call::Get, 0, 1, Ret::Value(None)),
            op(Call::Put(1), 2, 3, Ret::Done),
            op(Call::Get, 4, 5, Ret::Value(Some(1))),
            op(
                Call::Cas {
                    expected: Some(1),
                    new: Some(2),
                },
                6,
                7,
                Ret::Done,
            ),
            op(
                Call::Cas {
                    expected: Some(1),
                    new: Some(3),
                },
                8,
                9,
                Ret::CasFailed { current: Some(2) },
            ),
            op(Call::Delete, 10, 11, Ret::Done),
            op(Call::Get, 12, 13, Ret::Value(None)),
        ];
        assert!(ok(&h));
    }

    #[test]
    fn a_read_concurrent_with_a_write_may_see_either_value() {
        for seen in [None, Some(1)] {
            let h = vec![
                op(Call::Put(1), 0, 10, Ret::Done),
                op(Call::Get, 5, 6, Ret::Value(seen)),
            ];
            assert!(ok(&h), "{seen:?}");
        }
    }

    #[test]
    fn a_stale_read_after_a_write_returned_is_a_violation() {
        let h = vec![
            op(Call::Put(1), 0, 1, Ret::Done),
            op(Call::Put(2), 2, 3, Ret::Done),
            op(Call::Get, 4, 5, Ret::Value(Some(1))),
        ];
        assert_eq!(
            check(&h, 1_000_000),
            Err(Violation::NotLinearizable {
                key: 0,
                placed: 2,
                ops: 3
            })
        );
    }

    #[test]
    fn two_compare_and_sets_from_one_value_cannot_both_succeed() {
        let cas = |new| Call::Cas {
            expected: Some(1),
            new: Some(new),
        };
        let h = vec![
            op(Call::Put(1), 0, 1, Ret::Done),
            op(cas(2), 2, 10, Ret::Done),
            op(cas(3), 3, 11, Ret::Done),
        ];
        assert!(!ok(&h));
        // One refused, naming the other's value: fine.
        let h = vec![
            op(Call::Put(1), 0, 1, Ret::Done),
            op(cas(2), 2, 10, Ret::Done),
            op(cas(3), 3, 11, Ret::CasFailed { current: Some(2) }),
        ];
        assert!(ok(&h));
    }

    #[test]
    fn an_unknown_outcome_may_take_effect_late_or_never_but_not_flicker() {
        // Never took effect.
        let h = vec![
            unknown(Call::Put(7), 0),
            op(Call::Get, 5, 6, Ret::Value(None)),
        ];
        assert!(ok(&h));
        // Took effect long after it was sent.
        let h = vec![
            unknown(Call::Put(7), 0),
            op(Call::Get, 5, 6, Ret::Value(None)),
            op(Call::Get, 100, 101, Ret::Value(Some(7))),
        ];
        assert!(ok(&h));
        // Seen, then gone with nothing else written: no order allows it.
        let h = vec![
            unknown(Call::Put(7), 0),
            op(Call::Get, 5, 6, Ret::Value(Some(7))),
            op(Call::Get, 10, 11, Ret::Value(None)),
        ];
        assert!(!ok(&h));
        // A value nobody wrote.
        let h = vec![op(Call::Get, 0, 1, Ret::Value(Some(9)))];
        assert!(!ok(&h));
    }

    #[test]
    fn keys_are_checked_apart_and_the_violation_names_its_key() {
        let mut h: H = vec![
            op(Call::Put(1), 0, 1, Ret::Done),
            op(Call::Get, 2, 3, Ret::Value(Some(1))),
        ];
        h.push(Op {
            key: 4,
            call: Call::Get,
            invoked: 2,
            returned: Some((3, Ret::Value(Some(1)))),
        });
        assert!(matches!(
            check(&h, 1_000_000),
            Err(Violation::NotLinearizable { key: 4, .. })
        ));
    }

    /// Histories made by running operations on a real register, each at an
    /// instant inside a random interval that the history records as its
    /// call and return (some answers dropped as unknown), are always
    /// linearizable; changing one recorded answer of a lone read (no other
    /// operation overlaps it) to a value it could not have seen never is.
    #[test]
    fn histories_of_a_real_register_pass_and_a_falsified_read_fails() {
        let mut rng = SplitMix64(42);
        for round in 0..200 {
            let mut value: Option<u32> = None;
            let mut h: H = Vec::new();
            let mut now = 0u64;
            for _ in 0..(8 + round % 24) {
                let call = match rng.next_u64() % 4 {
                    0 => Call::Put((rng.next_u64() % 3) as u32),
                    1 => Call::Delete,
                    2 => Call::Get,
                    _ => Call::Cas {
                        expected: Some((rng.next_u64() % 3) as u32)
                            .filter(|_| !rng.next_u64().is_multiple_of(4)),
                        new: Some((rng.next_u64() % 3) as u32),
                    },
                };
                // The op takes effect at `now`; its interval reaches back
                // and forth around it, so neighbours overlap.
                let invoked = now.saturating_sub(rng.next_u64() % 30);
                let returned = now + rng.next_u64() % 30;
                let (answer, after) = step(value, call);
                value = after;
                let known = !rng.next_u64().is_multiple_of(8);
                h.push(Op {
                    key: 0,
                    call,
                    invoked,
                    returned: known.then_some((returned, answer)),
                });
                now += 10;
            }
            assert!(ok(&h), "round {round}: a real history was refused: {h:?}");
        }
        // A lone read (nothing overlaps it) that saw a value never written.
        let mut h: H = vec![
            op(Call::Put(1), 0, 1, Ret::Done),
            op(Call::Put(2), 2, 3, Ret::Done),
        ];
        h.push(op(Call::Get, 10, 11, Ret::Value(Some(3))));
        assert!(!ok(&h));
    }

    #[test]
    fn the_search_gives_up_at_its_bound_instead_of_hanging() {
        // Many concurrent unknown writes and a read no order explains:
        // the bound stops the search.
        let mut h: H = (0..40).map(|i| unknown(Call::Put(i), 0)).collect();
        h.push(op(Call::Get, 1, 2, Ret::Value(Some(99))));
        assert!(matches!(
            check(&h, 1_000),
            Err(Violation::GaveUp { key: 0, .. })
        ));
    }
}
