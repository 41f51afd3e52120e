//! Rounds: every phase of a group runs once per round, and the order rotates
//! from round to round, so that no phase always gets the coldest (first)
//! or the warmest window, and drift on the machine (another build starting,
//! the page cache, the CPU's clock) is spread over the phases instead of
//! landing on one.
//!
//! Round `r` of `rounds` over `len` phases starts at phase
//! `r·len/rounds` when there are fewer rounds than phases (the starts are
//! spread over the list: with 3 rounds of 6 phases, 0, 2 and 4), else at
//! phase `r mod len` (with 3 rounds of 3 phases each phase comes first,
//! second and third once), and goes on in list order, wrapping around.

/// The phase round `round` of `rounds` starts with, among `len`.
pub fn first_phase(round: usize, rounds: usize, len: usize) -> usize {
    if rounds < len {
        round * len / rounds
    } else {
        round % len
    }
}

/// Runs `phases` for `rounds` rounds in the rotating order; returns each
/// phase's results (one per round, in round order), in the order of
/// `phases`. `run` gets the round number and the phase.
pub fn run<P, T>(
    phases: &[P],
    rounds: usize,
    mut run: impl FnMut(usize, &P) -> Result<T, String>,
) -> Result<Vec<Vec<T>>, String> {
    let mut results: Vec<Vec<T>> = phases.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let first = first_phase(round, rounds, phases.len());
        for k in 0..phases.len() {
            let i = (first + k) % phases.len();
            results[i].push(run(round, &phases[i])?);
        }
    }
    Ok(results)
}
