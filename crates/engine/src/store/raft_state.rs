//! `raft-state`: the small durable state a Raft member keeps beside its
//! WAL: its vote, the last committed and the last purged log ids, and the
//! LSN of the last snapshot installed from a leader. No openraft type
//! appears here; the cluster crate converts.
//!
//! # Protocol
//!
//! The file `<dir>/raft-state` is 8192 bytes: slot 0 at offset 0, slot 1
//! at offset 4096, each 128 bytes holding a whole state, its sequence
//! number `seq` and a CRC (`docs/format.md`, "Raft state"). Slot `seq % 2`
//! holds the state numbered `seq`. [`RaftStateFile::write`] numbers the new
//! state `seq + 1` and writes it with one 128-byte write into slot
//! `(seq + 1) % 2`, the one *not* holding the newest state, then fdatasyncs
//! if asked. A reader takes the valid slot with the higher `seq`. (The WAL
//! header's synced-end slots use the same technique.)
//!
//! A write without a sync (openraft's `save_committed`) is made durable by
//! the next synced write or [`RaftStateFile::sync`]; until then a power
//! loss may keep it or not.
//!
//! One thread owns a `RaftStateFile` (`&mut self` everywhere), and its
//! caller holds the data directory's lock (`dir_lock`).
//!
//! # Invariants
//!
//! - **A write never touches the slot holding the newest state.** So after
//!   a power loss each slot holds what its last fsync left there or a state
//!   written to it later, whole: a slot lies inside one 512-byte sector,
//!   which the disk writes atomically (`io`), and the two slots lie in
//!   different pages, so even a device that tears a page damages one slot
//!   only. Each slot receives increasing `seq`s, so the newest valid slot
//!   is the last state an fsync made durable, or a later one.
//! - **A file under the name `raft-state` is whole.** It is made as
//!   `raft-state.tmp`, both slots written (holding
//!   `RaftHardState::default()`), fsynced, renamed into place and the
//!   directory fsynced; a failed or crashed creation leaves no file under
//!   the name, or a whole one.
//! - **The file never grows after its creation** (its 8192 bytes are
//!   written, not a hole), so a full disk cannot fail a rewrite on a file
//!   system that overwrites in place; a failed creation removes its
//!   temporary file.
//! - **A failed write or fsync fails the file for good.** Linux may drop
//!   the pages of a failed fsync and mark them clean, so a later fsync
//!   that succeeds proves nothing; and a failed write may have left part
//!   of a slot in the page cache. Every later call returns
//!   [`RaftStateFailed`] without touching the disk; the
//!   process restarts and reads what is really there. (openraft stops a
//!   member on any storage error anyway.)
//! - **A slot of another format version is refused, never skipped**
//!   ([`RaftStateOpenError::Version`]): it may hold the newest state, and
//!   a member that forgets its vote can vote twice in one term.
//! - A slot that fails its checks (CRC, magic, layout) is damage: disk
//!   writes cannot tear it. The other slot's state is used, but marked
//!   [`RaftHardState::vote_distrusted`]: the damaged slot may have held a
//!   newer vote, and a vote is a promise, never to be fallen back from.
//!   The next write goes over the damaged slot and carries the mark until
//!   the member clears it. Both damaged is [`RaftStateOpenError::Corrupt`].

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::store::le::{u32_at, u64_at};
use crate::store::{FileError, Io, IoFile, RaftStateFailed, RaftStateOpenError};

/// The file's name in the data directory.
pub const RAFT_STATE_FILE: &str = "raft-state";
/// The name it is created under before it is renamed into place.
const TEMP_NAME: &str = "raft-state.tmp";
/// The slot magic.
const MAGIC: [u8; 8] = *b"UUIDMAPR";
/// The format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes in one slot; it fits one 512-byte sector.
const SLOT_LEN: usize = 128;
/// Where the slots start: in two different 4 KiB pages.
const SLOT_OFFSETS: [usize; 2] = [0, 4096];
/// Bytes in the file: both pages, written at creation.
const FILE_LEN: usize = 8192;
/// Offset of the CRC-32C in a slot, over the bytes before it.
const CRC_AT: usize = SLOT_LEN - 4;

/// Offsets of the fields in a slot (`docs/format.md`).
const VERSION_AT: usize = 8;
const SEQ_AT: usize = 12;
const FLAGS_AT: usize = 20;
const VOTE_TERM_AT: usize = 24;
const VOTE_NODE_AT: usize = 32;
const COMMITTED_AT: usize = 40;
const PURGED_AT: usize = 56;
const SNAPSHOT_LSN_AT: usize = 72;
/// The end of the fields; zeros from here to the CRC.
const FIELDS_END: usize = 80;

/// Flag bits: which `Option`s are present, and the vote's `committed`.
const HAS_VOTE: u8 = 1 << 0;
const VOTE_COMMITTED: u8 = 1 << 1;
const HAS_COMMITTED: u8 = 1 << 2;
const HAS_PURGED: u8 = 1 << 3;
const HAS_SNAPSHOT_LSN: u8 = 1 << 4;
/// The member's vote is not trusted ([`RaftHardState::vote_distrusted`]).
const VOTE_DISTRUSTED: u8 = 1 << 5;
const KNOWN_FLAGS: u8 =
    HAS_VOTE | VOTE_COMMITTED | HAS_COMMITTED | HAS_PURGED | HAS_SNAPSHOT_LSN | VOTE_DISTRUSTED;

/// A log id: the term of the leader that proposed the entry, and its index
/// (our LSN). Ordered by term, then index, as Raft orders log ids.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogPos {
    /// The leader's term.
    pub term: u64,
    /// The entry's index in the log (its LSN).
    pub index: u64,
}

/// A member's vote: for whom in which term, and whether that candidate won
/// (became leader with a quorum's votes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VoteState {
    /// The term of the vote.
    pub term: u64,
    /// The node voted for.
    pub node_id: u64,
    /// Whether a quorum granted it.
    pub committed: bool,
}

/// What a Raft member must remember across restarts besides its log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RaftHardState {
    /// The last vote saved (`None` before the first).
    pub vote: Option<VoteState>,
    /// The last log id known committed (may lag: saved without a sync).
    pub committed: Option<LogPos>,
    /// The last log id purged from the log.
    pub purged: Option<LogPos>,
    /// The LSN of the last snapshot installed from a leader, which the
    /// snapshot file may exceed the WAL by.
    pub installed_snapshot_lsn: Option<u64>,
    /// The vote may be older than one this member gave: a slot of the file
    /// was found damaged, and it may have held the newest state. A vote is
    /// a promise, so a member never falls back to an older one: it votes
    /// for no one and takes no entries until its group has made it a
    /// learner, and it trusts its vote again once promoted back
    /// (`uuidmap_cluster::rejoin`). Set by [`RaftStateFile::open`] on
    /// damage, and carried by every write until the member clears it.
    pub vote_distrusted: bool,
}

/// The open `raft-state` file and the state it holds.
pub struct RaftStateFile {
    /// The file, open for writing its slots.
    file: Box<dyn IoFile>,
    /// Its path, for errors.
    path: PathBuf,
    /// The last state a write of which returned `Ok` (or the state read).
    state: RaftHardState,
    /// Its sequence number: it is in slot `seq % 2`.
    seq: u64,
    /// Whether a slot was written since the last fsync.
    unsynced: bool,
    /// Set by a failed write or fsync: why nothing more is written.
    failed: Option<String>,
}

impl fmt::Debug for RaftStateFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaftStateFile")
            .field("path", &self.path)
            .field("state", &self.state)
            .field("seq", &self.seq)
            .field("unsynced", &self.unsynced)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl RaftStateFile {
    /// Opens `<dir>/raft-state`, or creates it holding
    /// `RaftHardState::default()` if it does not exist (module docs: a
    /// crash never leaves a half-made file under the name). The state
    /// read is [`RaftStateFile::state`]. `dir` must exist.
    pub fn open(io: Arc<dyn Io>, dir: &Path) -> Result<RaftStateFile, RaftStateOpenError> {
        let path = dir.join(RAFT_STATE_FILE);
        let bytes = match io.read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return create(&*io, dir, path),
            Err(e) => return Err(FileError::new("reading the Raft state file", &path, e).into()),
        };
        let (seq, state) = decode_file(&path, &bytes)?;
        let file = io
            .open_write(&path)
            .map_err(|e| FileError::new("opening the Raft state file for writing", &path, e))?;
        Ok(RaftStateFile {
            file,
            path,
            state,
            seq,
            unsynced: false,
            failed: None,
        })
    }

    /// The newest state: the last one written, or the one read at open.
    /// Written is not durable: see [`RaftStateFile::write`].
    pub fn state(&self) -> &RaftHardState {
        &self.state
    }

    /// Writes `state` into the slot not holding the newest state, then
    /// fdatasyncs if `sync` (openraft's `save_vote` syncs; its
    /// `save_committed` does not, and is made durable by the next synced
    /// write or [`RaftStateFile::sync`]). Any failure fails the file for
    /// good (module docs).
    pub fn write(&mut self, state: RaftHardState, sync: bool) -> Result<(), RaftStateFailed> {
        self.check_failed()?;
        let seq = self.seq + 1;
        let slot = encode_slot(seq, &state);
        let at = SLOT_OFFSETS[(seq % 2) as usize] as u64;
        if let Err(e) = self.file.write_at(at, &slot) {
            return Err(self.fail("writing the Raft state file", e));
        }
        self.unsynced = true;
        if sync {
            self.sync()?;
        }
        self.seq = seq;
        self.state = state;
        Ok(())
    }

    /// Makes every state written so far durable (one fdatasync, if any was
    /// written since the last). A failure fails the file for good.
    pub fn sync(&mut self) -> Result<(), RaftStateFailed> {
        self.check_failed()?;
        if !self.unsynced {
            return Ok(());
        }
        if let Err(e) = self.file.sync() {
            return Err(self.fail("fsyncing the Raft state file", e));
        }
        self.unsynced = false;
        Ok(())
    }

    /// Fails the file for good (module docs) and returns the error.
    fn fail(&mut self, action: &'static str, e: io::Error) -> RaftStateFailed {
        let cause = FileError::new(action, &self.path, e).to_string();
        tracing::error!(
            file = %self.path.display(),
            "{cause}: no more Raft state is written (a failed write or fsync may have lost it \
             silently); restart to recover from what is on disk"
        );
        self.failed = Some(cause);
        self.check_failed().expect_err("just failed")
    }

    fn check_failed(&self) -> Result<(), RaftStateFailed> {
        match &self.failed {
            None => Ok(()),
            Some(cause) => Err(RaftStateFailed {
                path: self.path.clone(),
                cause: cause.clone(),
            }),
        }
    }
}

/// Creates `path` holding the default state in both slots: written as
/// `raft-state.tmp`, fsynced, renamed, directory fsynced. On failure
/// removes the temporary file (best effort: a leftover is replaced by the
/// next attempt).
fn create(io: &dyn Io, dir: &Path, path: PathBuf) -> Result<RaftStateFile, RaftStateOpenError> {
    let temp = dir.join(TEMP_NAME);
    if io.file_len(&temp).is_ok() {
        io.remove(&temp)
            .map_err(|e| FileError::new("removing the leftover", &temp, e))?;
    }
    let mut file = io
        .create(&temp)
        .map_err(|e| FileError::new("creating the Raft state file", &temp, e))?;
    let made = file
        .write_all(&initial_file())
        .map_err(|e| FileError::new("writing the new Raft state file", &temp, e))
        .and_then(|()| {
            file.sync()
                .map_err(|e| FileError::new("fsyncing the new Raft state file", &temp, e))
        })
        .and_then(|()| {
            io.rename(&temp, &path)
                .map_err(|e| FileError::new("renaming into place the Raft state file", &path, e))
        })
        .and_then(|()| {
            io.sync_dir(dir)
                .map_err(|e| FileError::new("syncing the data directory", dir, e))
        });
    if let Err(e) = made {
        let _ = io.remove(&temp);
        return Err(e.into());
    }
    Ok(RaftStateFile {
        file,
        path,
        state: RaftHardState::default(),
        seq: 1,
        unsynced: false,
        failed: None,
    })
}

/// A new file's bytes: the default state as `seq` 0 in slot 0 and as
/// `seq` 1 in slot 1 (both valid from the start, so a damaged slot is
/// always damage), zeros elsewhere.
fn initial_file() -> Vec<u8> {
    let mut bytes = vec![0u8; FILE_LEN];
    for (seq, &at) in SLOT_OFFSETS.iter().enumerate() {
        bytes[at..at + SLOT_LEN]
            .copy_from_slice(&encode_slot(seq as u64, &RaftHardState::default()));
    }
    bytes
}

/// The bytes of the slot holding `state` numbered `seq`.
fn encode_slot(seq: u64, state: &RaftHardState) -> [u8; SLOT_LEN] {
    let mut b = [0u8; SLOT_LEN];
    let mut put = |at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(SEQ_AT, seq);
    let mut flags = 0u8;
    if let Some(vote) = state.vote {
        flags |= HAS_VOTE;
        if vote.committed {
            flags |= VOTE_COMMITTED;
        }
        put(VOTE_TERM_AT, vote.term);
        put(VOTE_NODE_AT, vote.node_id);
    }
    if let Some(c) = state.committed {
        flags |= HAS_COMMITTED;
        put(COMMITTED_AT, c.term);
        put(COMMITTED_AT + 8, c.index);
    }
    if let Some(p) = state.purged {
        flags |= HAS_PURGED;
        put(PURGED_AT, p.term);
        put(PURGED_AT + 8, p.index);
    }
    if let Some(lsn) = state.installed_snapshot_lsn {
        flags |= HAS_SNAPSHOT_LSN;
        put(SNAPSHOT_LSN_AT, lsn);
    }
    if state.vote_distrusted {
        flags |= VOTE_DISTRUSTED;
    }
    b[..8].copy_from_slice(&MAGIC);
    b[VERSION_AT..VERSION_AT + 4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[FLAGS_AT] = flags;
    let crc = crate::store::crc32c(&b[..CRC_AT]);
    b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// What one slot holds.
#[derive(Debug, PartialEq, Eq)]
enum Slot {
    /// A state and its sequence number.
    Valid { seq: u64, state: RaftHardState },
    /// A slot of another format version (its CRC and magic check out).
    OtherVersion(u32),
    /// Damage, in words.
    Damaged(String),
}

/// Reads slot `index` (0 or 1) from `b`, the bytes at its offset (short
/// if the file ends early).
fn decode_slot(index: usize, b: &[u8]) -> Slot {
    if b.len() < SLOT_LEN {
        return Slot::Damaged("the file ends inside it".into());
    }
    let b = &b[..SLOT_LEN];
    // The CRC first: a flipped bit in the magic or the version is damage,
    // not another release.
    if crate::store::crc32c(&b[..CRC_AT]) != u32_at(b, CRC_AT) {
        return Slot::Damaged("its checksum does not match".into());
    }
    if b[..8] != MAGIC {
        return Slot::Damaged("it does not start with the magic UUIDMAPR".into());
    }
    let version = u32_at(b, VERSION_AT);
    if version != FORMAT_VERSION {
        return Slot::OtherVersion(version);
    }
    // A checksum that matches over bytes this code would never write means
    // a bug or another writer: the slot is not trusted either way.
    let seq = u64_at(b, SEQ_AT);
    if seq % 2 != index as u64 {
        return Slot::Damaged(format!(
            "it holds sequence number {seq}, which belongs in slot {}",
            seq % 2
        ));
    }
    let flags = b[FLAGS_AT];
    if flags & !KNOWN_FLAGS != 0 || (flags & VOTE_COMMITTED != 0 && flags & HAS_VOTE == 0) {
        return Slot::Damaged(format!("its flags byte {flags:#04x} is not valid"));
    }
    match decode_fields(b, flags) {
        Some(state) => Slot::Valid { seq, state },
        None => Slot::Damaged("bytes that must be zero are not".into()),
    }
}

/// The state in slot bytes `b` whose flags byte is `flags`; `None` if a
/// byte that must be zero (reserved, or of an absent field) is not.
fn decode_fields(b: &[u8], flags: u8) -> Option<RaftHardState> {
    let zero = |range: std::ops::Range<usize>| b[range].iter().all(|&x| x == 0);
    if !zero(FLAGS_AT + 1..VOTE_TERM_AT) || !zero(FIELDS_END..CRC_AT) {
        return None;
    }
    // `Some(present)`, or `None` for an absent field that is not zero.
    let present = |flag: u8, at: usize, len: usize| {
        if flags & flag != 0 {
            Some(true)
        } else {
            zero(at..at + len).then_some(false)
        }
    };
    let log_pos = |at| LogPos {
        term: u64_at(b, at),
        index: u64_at(b, at + 8),
    };
    Some(RaftHardState {
        vote: present(HAS_VOTE, VOTE_TERM_AT, 16)?.then(|| VoteState {
            term: u64_at(b, VOTE_TERM_AT),
            node_id: u64_at(b, VOTE_NODE_AT),
            committed: flags & VOTE_COMMITTED != 0,
        }),
        committed: present(HAS_COMMITTED, COMMITTED_AT, 16)?.then(|| log_pos(COMMITTED_AT)),
        purged: present(HAS_PURGED, PURGED_AT, 16)?.then(|| log_pos(PURGED_AT)),
        installed_snapshot_lsn: present(HAS_SNAPSHOT_LSN, SNAPSHOT_LSN_AT, 8)?
            .then(|| u64_at(b, SNAPSHOT_LSN_AT)),
        vote_distrusted: flags & VOTE_DISTRUSTED != 0,
    })
}

/// The newest state in a whole file's `bytes` and its sequence number
/// (module docs: the valid slot with the higher `seq`; a slot of another
/// version refuses the file).
fn decode_file(path: &Path, bytes: &[u8]) -> Result<(u64, RaftHardState), RaftStateOpenError> {
    let slots = SLOT_OFFSETS.map(|at| bytes.get(at..).unwrap_or_default());
    let slots = [decode_slot(0, slots[0]), decode_slot(1, slots[1])];
    for (index, slot) in slots.iter().enumerate() {
        if let Slot::OtherVersion(version) = *slot {
            return Err(RaftStateOpenError::Version {
                path: path.to_path_buf(),
                slot: index,
                version,
                expected: FORMAT_VERSION,
            });
        }
    }
    let newest = slots
        .iter()
        .filter_map(|slot| match *slot {
            Slot::Valid { seq, state } => Some((seq, state)),
            _ => None,
        })
        .max_by_key(|&(seq, _)| seq);
    let Some(newest) = newest else {
        let reason = |i: usize| match &slots[i] {
            Slot::Damaged(why) => why.clone(),
            _ => unreachable!("no valid slot"),
        };
        return Err(RaftStateOpenError::Corrupt {
            path: path.to_path_buf(),
            reason: format!(
                "neither slot holds a valid state (slot 0 at byte 0: {}; slot 1 at byte 4096: {}; \
                 the file is {} bytes long)",
                reason(0),
                reason(1),
                bytes.len()
            ),
        });
    };
    let (seq, mut state) = newest;
    for (index, slot) in slots.iter().enumerate() {
        if let Slot::Damaged(why) = slot {
            // The damaged slot may have held the newest state, and with it
            // a vote newer than the one left: the vote is not trusted.
            tracing::error!(
                file = %path.display(),
                "slot {index} of the Raft state file is damaged ({why}); it may have held this \
                 member's newest vote, so the member will vote for no one and take no entries \
                 until its group has made it a learner and promoted it again (automatic, with a \
                 leader and a majority up)"
            );
            state.vote_distrusted = true;
        }
    }
    Ok((seq, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_variants() -> Vec<RaftHardState> {
        let votes = [
            None,
            Some(VoteState {
                term: 7,
                node_id: 3,
                committed: false,
            }),
            Some(VoteState {
                term: u64::MAX,
                node_id: 0,
                committed: true,
            }),
        ];
        let positions = [
            None,
            Some(LogPos { term: 0, index: 0 }),
            Some(LogPos {
                term: 9,
                index: u64::MAX,
            }),
        ];
        let lsns = [None, Some(0), Some(1 << 40)];
        let mut all = Vec::new();
        for vote in votes {
            for committed in positions {
                for purged in positions {
                    for installed_snapshot_lsn in lsns {
                        for vote_distrusted in [false, true] {
                            all.push(RaftHardState {
                                vote,
                                committed,
                                purged,
                                installed_snapshot_lsn,
                                vote_distrusted,
                            });
                        }
                    }
                }
            }
        }
        all
    }

    fn state(i: u64) -> RaftHardState {
        RaftHardState {
            vote: Some(VoteState {
                term: i,
                node_id: i % 3,
                committed: i.is_multiple_of(2),
            }),
            committed: Some(LogPos {
                term: i,
                index: 10 * i,
            }),
            purged: None,
            installed_snapshot_lsn: i.is_multiple_of(4).then_some(i),
            vote_distrusted: false,
        }
    }

    /// A file image whose slot 0 holds `a` (numbered `seq_a`) and slot 1
    /// holds `b` (numbered `seq_b`).
    fn image(seq_a: u64, a: &RaftHardState, seq_b: u64, b: &RaftHardState) -> Vec<u8> {
        let mut bytes = vec![0u8; FILE_LEN];
        bytes[..SLOT_LEN].copy_from_slice(&encode_slot(seq_a, a));
        bytes[4096..4096 + SLOT_LEN].copy_from_slice(&encode_slot(seq_b, b));
        bytes
    }

    fn path() -> PathBuf {
        PathBuf::from("/data/raft-state")
    }

    #[test]
    fn every_combination_of_present_fields_round_trips() {
        let all = state_variants();
        assert_eq!(all.len(), 162);
        for (i, s) in all.iter().enumerate() {
            let seq = 2 * i as u64 + 1;
            assert_eq!(
                decode_slot(1, &encode_slot(seq, s)),
                Slot::Valid { seq, state: *s },
                "{s:?}"
            );
        }
    }

    #[test]
    fn the_slot_with_the_higher_seq_wins_whichever_slot_it_is() {
        let (old, new) = (state(1), state(2));
        assert_eq!(
            decode_file(&path(), &image(4, &old, 5, &new)).unwrap(),
            (5, new)
        );
        assert_eq!(
            decode_file(&path(), &image(6, &new, 5, &old)).unwrap(),
            (6, new)
        );
        // Far apart too (no wrap-around logic to get wrong).
        assert_eq!(
            decode_file(&path(), &image(1 << 40, &new, 3, &old)).unwrap(),
            (1 << 40, new)
        );
    }

    #[test]
    fn a_new_file_holds_the_default_state_in_both_slots() {
        let bytes = initial_file();
        assert_eq!(bytes.len(), FILE_LEN);
        assert_eq!(
            decode_slot(0, &bytes),
            Slot::Valid {
                seq: 0,
                state: RaftHardState::default()
            }
        );
        assert_eq!(
            decode_file(&path(), &bytes).unwrap(),
            (1, RaftHardState::default())
        );
    }

    #[test]
    fn every_flipped_bit_of_a_slot_is_detected() {
        let (old, new) = (state(3), state(4));
        let good = image(6, &new, 5, &old);
        for (slot, at) in SLOT_OFFSETS.into_iter().enumerate() {
            for bit in 0..SLOT_LEN * 8 {
                let mut bytes = good.clone();
                bytes[at + bit / 8] ^= 1 << (bit % 8);
                assert!(
                    matches!(decode_slot(slot, &bytes[at..]), Slot::Damaged(_)),
                    "slot {slot}, bit {bit}"
                );
                // The other slot's state is used, its vote distrusted: the
                // damaged slot may have held a newer one.
                let distrusted = |s: RaftHardState| RaftHardState {
                    vote_distrusted: true,
                    ..s
                };
                let expected = if slot == 0 {
                    (5, distrusted(old))
                } else {
                    (6, distrusted(new))
                };
                assert_eq!(
                    decode_file(&path(), &bytes).unwrap(),
                    expected,
                    "slot {slot}, bit {bit}"
                );
                // With the other slot damaged as well, nothing is left.
                let other = SLOT_OFFSETS[1 - slot];
                bytes[other + (bit * 7) % SLOT_LEN] ^= 0x10;
                let err = decode_file(&path(), &bytes).unwrap_err();
                assert!(
                    matches!(err, RaftStateOpenError::Corrupt { .. }),
                    "slot {slot}, bit {bit}: {err}"
                );
            }
        }
    }

    #[test]
    fn the_distrusted_mark_survives_a_write_and_clears_only_when_written_clear() {
        let marked = RaftHardState {
            vote_distrusted: true,
            ..state(4)
        };
        let bytes = image(6, &marked, 5, &state(3));
        assert_eq!(decode_file(&path(), &bytes).unwrap(), (6, marked));
        let cleared = RaftHardState {
            vote_distrusted: false,
            ..marked
        };
        let bytes = image(8, &cleared, 7, &marked);
        assert_eq!(decode_file(&path(), &bytes).unwrap(), (8, cleared));
    }

    #[test]
    fn bytes_outside_the_slots_are_not_read() {
        let mut bytes = image(2, &state(2), 1, &state(1));
        for at in (SLOT_LEN..4096).chain(4096 + SLOT_LEN..FILE_LEN) {
            bytes[at] = 0xa5;
        }
        assert_eq!(decode_file(&path(), &bytes).unwrap(), (2, state(2)));
    }

    #[test]
    fn a_slot_of_another_version_refuses_the_file_even_if_the_other_is_newer() {
        let mut bytes = image(8, &state(8), 7, &state(7));
        let at = 4096;
        bytes[at + VERSION_AT..at + VERSION_AT + 4].copy_from_slice(&2u32.to_le_bytes());
        let crc = crate::store::crc32c(&bytes[at..at + CRC_AT]);
        bytes[at + CRC_AT..at + SLOT_LEN].copy_from_slice(&crc.to_le_bytes());
        let err = decode_file(&path(), &bytes).unwrap_err();
        assert!(
            matches!(
                err,
                RaftStateOpenError::Version {
                    slot: 1,
                    version: 2,
                    expected: 1,
                    ..
                }
            ),
            "{err}"
        );
        let message = err.to_string();
        assert!(message.contains("/data/raft-state"), "{message}");
        assert!(message.contains("another release"), "{message}");
    }

    #[test]
    fn a_checksummed_slot_in_the_wrong_place_or_with_stray_bits_is_not_trusted() {
        let reseal = |b: &mut [u8]| {
            let crc = crate::store::crc32c(&b[..CRC_AT]);
            b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        };
        // An odd seq belongs in slot 1.
        assert!(matches!(
            decode_slot(0, &encode_slot(3, &state(3))),
            Slot::Damaged(_)
        ));
        let bad: [fn(&mut [u8]); 4] = [
            |b| b[FLAGS_AT] |= 1 << 7,        // an unknown flag
            |b| b[FLAGS_AT] = VOTE_COMMITTED, // committed without a vote
            |b| b[PURGED_AT] = 1,             // an absent field not zero
            |b| b[FIELDS_END] = 1,            // the reserved bytes not zero
        ];
        for (i, spoil) in bad.into_iter().enumerate() {
            let mut b = encode_slot(
                2,
                &RaftHardState {
                    purged: None,
                    vote: None,
                    ..state(2)
                },
            );
            spoil(&mut b);
            reseal(&mut b);
            assert!(matches!(decode_slot(0, &b), Slot::Damaged(_)), "case {i}");
        }
    }

    #[test]
    fn a_short_or_empty_file_is_corrupt_and_the_error_says_what_to_do() {
        for len in [0, 100, 4096 + 100] {
            let mut bytes = image(2, &state(2), 1, &state(1));
            bytes.truncate(len);
            let got = decode_file(&path(), &bytes);
            if len > SLOT_LEN {
                // Slot 1 is cut off: it could have held a newer vote.
                let distrusted = RaftHardState {
                    vote_distrusted: true,
                    ..state(2)
                };
                assert_eq!(got.unwrap(), (2, distrusted), "len {len}");
                continue;
            }
            let message = got.unwrap_err().to_string();
            assert!(message.contains("/data/raft-state"), "{message}");
            assert!(message.contains("neither slot"), "{message}");
            assert!(message.contains("remove the node"), "{message}");
        }
    }

    #[test]
    fn writes_alternate_slots_and_reopen_finds_the_last_on_a_real_disk() {
        let tmp = tempfile::tempdir().unwrap();
        let io: Arc<dyn Io> = Arc::new(crate::store::OsIo);
        let mut f = RaftStateFile::open(io.clone(), tmp.path()).unwrap();
        assert_eq!(*f.state(), RaftHardState::default());
        assert!(!tmp.path().join(TEMP_NAME).exists());
        let mut previous = std::fs::read(tmp.path().join(RAFT_STATE_FILE)).unwrap();
        assert_eq!(previous.len(), FILE_LEN);
        for i in 1..=5 {
            f.write(state(i), i.is_multiple_of(2)).unwrap();
            let now = std::fs::read(tmp.path().join(RAFT_STATE_FILE)).unwrap();
            assert_eq!(now.len(), FILE_LEN, "never grows");
            // Slot (i + 1) % 2 is written; the other keeps the previous state.
            let kept = SLOT_OFFSETS[(i % 2) as usize];
            assert_eq!(now[kept..kept + SLOT_LEN], previous[kept..kept + SLOT_LEN]);
            previous = now;
        }
        f.sync().unwrap();
        drop(f);
        let f = RaftStateFile::open(io, tmp.path()).unwrap();
        assert_eq!(*f.state(), state(5));
    }
}
