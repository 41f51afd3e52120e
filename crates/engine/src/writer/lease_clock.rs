//! The clocks a leader's read lease is measured on (docs/replication.md,
//! section 6.3).
//!
//! A lease is "a majority acknowledged me less than `lease` ago". openraft
//! stamps acknowledgements with `Instant`, which on Linux is
//! CLOCK_MONOTONIC: it does not advance while the host is suspended. A
//! leader host that sleeps for a minute and wakes would find its lease
//! still running, while the others elected a new leader long ago. So:
//!
//! - the lease's end is kept on **CLOCK_BOOTTIME**, which counts the time
//!   suspended too: a check after a wake-up sees the whole sleep;
//! - an acknowledgement is known only as an age on the monotonic clock.
//!   Turned into a BOOTTIME instant, an age that spans a suspend is too
//!   short by the time slept. The two clocks advance together except
//!   while suspended, so a suspend shows as a jump of `BOOTTIME −
//!   MONOTONIC`. [`SuspendFence`] watches that difference at each lease
//!   update: after a jump, only an acknowledgement stamped after the jump
//!   was seen renews the lease ("lapsed until the next quorum ack").
//!
//! What remains (and is written down in docs/replication.md): the clocks'
//! *rate* drift between hosts, which the lease's margin covers, and a VM
//! paused by its hypervisor without the guest knowing (no clock of the
//! guest sees it; only the margin and the writer's own refusals help).

use std::time::Instant;

/// A jump of `BOOTTIME − MONOTONIC` larger than this is a suspend. The two
/// are read back to back, so without a suspend the difference moves by
/// the time between the two reads (a preemption, at worst a scheduling
/// quantum or two); a real suspend is seconds. A false alarm costs only a
/// lease refused until the next acknowledgement (a heartbeat away).
pub(crate) const SUSPEND_JUMP_NS: u64 = 20_000_000;

/// Nanoseconds on CLOCK_BOOTTIME (since boot, suspends included).
pub(crate) fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call, and CLOCK_BOOTTIME is a clock id every Linux since 2.6.39
    // knows; clock_gettime writes only `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    // A kernel without the clock cannot happen on the Linux we build for;
    // should it, the monotonic clock is the conservative fallback's best.
    if rc != 0 {
        return monotonic_fallback_ns();
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn monotonic_fallback_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Both clocks, read back to back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClockPair {
    /// The monotonic clock (`Instant`, what openraft stamps with).
    pub(crate) mono: Instant,
    /// CLOCK_BOOTTIME, in ns.
    pub(crate) boot_ns: u64,
}

impl ClockPair {
    /// Now, on both clocks.
    pub(crate) fn now() -> ClockPair {
        let mono = Instant::now();
        let boot_ns = boottime_ns();
        ClockPair { mono, boot_ns }
    }
}

/// Detects a suspend between two lease updates and refuses the
/// acknowledgements that may predate it (module docs). Pure logic: the
/// caller gives the clock readings, in ns on a monotonic base of its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SuspendFence {
    /// `boot − mono` at the last observation (`None`: none yet).
    offset_ns: Option<u64>,
    /// An acknowledgement stamped at or before this monotonic time (ns)
    /// may predate a suspend: it renews no lease. 0: no suspend seen.
    fence_mono_ns: u64,
}

impl SuspendFence {
    /// Takes a reading of both clocks (`mono_ns` on the caller's base);
    /// returns whether a suspend happened since the last one.
    pub(crate) fn observe(&mut self, mono_ns: u64, boot_ns: u64) -> bool {
        let offset = boot_ns.wrapping_sub(mono_ns);
        let jumped = self
            .offset_ns
            .is_some_and(|before| offset.wrapping_sub(before) as i64 > SUSPEND_JUMP_NS as i64);
        self.offset_ns = Some(offset);
        if jumped {
            self.fence_mono_ns = mono_ns;
        }
        jumped
    }

    /// Whether an acknowledgement stamped at `ack_mono_ns` (same base) may
    /// renew the lease: it came after the last suspend seen.
    pub(crate) fn admits(&self, ack_mono_ns: u64) -> bool {
        ack_mono_ns > self.fence_mono_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn clocks_that_advance_together_show_no_suspend() {
        let mut f = SuspendFence::default();
        assert!(!f.observe(10 * S, 100 * S));
        assert!(!f.observe(11 * S, 101 * S));
        // Read back to back, a few ms apart at worst.
        assert!(!f.observe(12 * S, 102 * S + 5_000_000));
        assert!(f.admits(1), "no suspend: every acknowledgement counts");
    }

    #[test]
    fn a_suspend_refuses_every_acknowledgement_until_one_after_it() {
        let mut f = SuspendFence::default();
        f.observe(10 * S, 100 * S);
        // 30 s asleep: BOOTTIME moved 31 s, MONOTONIC 1 s.
        assert!(f.observe(11 * S, 131 * S));
        assert!(!f.admits(10 * S), "acknowledged before the suspend");
        assert!(!f.admits(11 * S), "acknowledged when the jump was seen");
        assert!(f.admits(11 * S + 1), "acknowledged after it");
        // The fence stays until another suspend moves it.
        assert!(!f.observe(12 * S, 132 * S));
        assert!(!f.admits(11 * S));
    }

    #[test]
    fn the_first_reading_is_no_suspend() {
        let mut f = SuspendFence::default();
        assert!(!f.observe(5 * S, 500 * S));
    }

    #[test]
    fn boottime_runs_at_least_as_fast_as_instant() {
        let (m0, b0) = (Instant::now(), boottime_ns());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (m1, b1) = (Instant::now(), boottime_ns());
        let mono = (m1 - m0).as_nanos() as i64;
        let boot = (b1 - b0) as i64;
        assert!(
            (boot - mono).abs() < SUSPEND_JUMP_NS as i64,
            "{boot} vs {mono}"
        );
    }
}
