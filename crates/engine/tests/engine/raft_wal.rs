//! The WAL as a replica group's Raft log (format version 3), on the
//! simulated disk: every entry reads back with its term, kind and body, the
//! log may start at LSN 0 (openraft's first membership entry), and a suffix
//! that was never committed is cut durably: after a crash anywhere in the
//! cut the log is some cut of the old one, never one with a hole, and every
//! entry before the cut point is kept.

use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use uuid::Uuid;

use uuidmap_engine::store::op_bytes::encode_ops;
use uuidmap_engine::store::wal::{
    self, EntryHead, EntryKind, Preallocate, ReplayOptions, WalCursor, WalFollower, WalFormat,
    WalOptions, WalWriter,
};
use uuidmap_engine::store::{Io, Op};
use uuidmap_index::Key;
use uuidmap_testkit_io::SimIo;

fn dir() -> PathBuf {
    PathBuf::from("/data")
}

fn new_disk() -> SimIo {
    let sim = SimIo::new();
    sim.create_dir_all(&dir()).unwrap();
    sim
}

fn options(segment_bytes: u64) -> WalOptions {
    WalOptions {
        segment_bytes,
        preallocate: Preallocate::Inline,
        format: WalFormat::Raft,
    }
}

/// An entry as the log holds it: LSN, head, ops, body bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    lsn: u64,
    head: EntryHead,
    ops: Vec<Op>,
    body: Vec<u8>,
}

fn put(k: u128, v: u128) -> Op {
    Op::Put {
        key: Key::new(Uuid::from_u128(k)).unwrap(),
        value: Uuid::from_u128(v),
    }
}

/// Entry `lsn` of term `term`: the membership at 0, a blank one where a
/// term starts, and normal batches otherwise.
fn entry(lsn: u64, term: u64, first_of_term: bool) -> Entry {
    if lsn == 0 {
        return Entry {
            lsn,
            head: EntryHead {
                term: 0,
                kind: EntryKind::Membership,
                seq: 0,
            },
            ops: vec![],
            body: b"voters: 1".to_vec(),
        };
    }
    if first_of_term {
        return Entry {
            lsn,
            head: EntryHead {
                term,
                kind: EntryKind::Blank,
                seq: 0,
            },
            ops: vec![],
            body: vec![],
        };
    }
    let ops: Vec<Op> = (0..(lsn % 3 + 1))
        .map(|i| put(u128::from(lsn) * 10 + u128::from(i) + 1, u128::from(term)))
        .collect();
    let mut body = Vec::new();
    encode_ops(&mut body, &ops);
    Entry {
        lsn,
        head: EntryHead {
            term,
            kind: EntryKind::Normal,
            seq: lsn * 7,
        },
        ops,
        body,
    }
}

fn append(writer: &mut WalWriter, e: &Entry) {
    writer.append_entry(e.lsn, e.head, e.ops.len() as u32, &e.body);
}

/// Writes entries `0..n` of term 1, a group of 3 at a time, each synced.
fn write_log(sim: &SimIo, n: u64, segment_bytes: u64) -> (WalWriter, Vec<Entry>) {
    let io: Arc<dyn Io> = Arc::new(sim.clone());
    let mut writer = WalWriter::create(io, &dir(), 0, options(segment_bytes)).unwrap();
    let mut written = Vec::new();
    for lsn in 0..n {
        let e = entry(lsn, 1, lsn == 1);
        append(&mut writer, &e);
        written.push(e);
        if lsn % 3 == 2 || lsn + 1 == n {
            writer.commit(true).unwrap();
        }
    }
    (writer, written)
}

/// Every entry from LSN 0 on, through the read-only cursor; panics on
/// corruption and on a torn tail.
fn read_all(io: &dyn Io) -> Vec<Entry> {
    let mut cursor = WalCursor::open(io, &dir(), 0).unwrap();
    let mut read = Vec::new();
    while let Some(rec) = cursor.next_record().unwrap() {
        read.push(Entry {
            lsn: rec.lsn,
            head: rec.head,
            ops: rec.ops.to_vec(),
            body: rec.body.to_vec(),
        });
    }
    assert_eq!(cursor.torn_tail(), None);
    read
}

#[test]
fn a_raft_log_from_lsn_0_reads_back_every_entry_with_its_term_kind_and_body() {
    let sim = new_disk();
    let (_writer, written) = write_log(&sim, 40, 600);
    assert!(
        wal::list_wal_files(&sim, &dir()).unwrap().len() > 2,
        "the log spans several files"
    );
    assert_eq!(read_all(&sim), written);

    // A follower (Watch) sees the same LSNs, blank and membership entries
    // as batches without changes.
    let mut follower = WalFollower::open(Arc::new(sim.clone()), &dir(), 0).unwrap();
    for e in &written {
        let (lsn, ops) = follower.next_record(39).unwrap().expect("committed");
        assert_eq!((lsn, ops), (e.lsn, &e.ops[..]));
    }

    // Recovery reads it too, after a power loss: every synced entry.
    let disk = sim.restart(7);
    let mut seen = Vec::new();
    let outcome = wal::replay(&disk, &dir(), 0, &ReplayOptions::default(), |lsn, ops| {
        seen.push((lsn, ops.to_vec()))
    })
    .unwrap();
    assert_eq!(outcome.next_lsn, 40);
    let expected: Vec<_> = written[1..]
        .iter()
        .map(|e| (e.lsn, e.ops.clone()))
        .collect();
    assert_eq!(seen, expected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn truncating_a_suffix_keeps_exactly_the_entries_before_it_and_the_log_goes_on(
        n in 1u64..50,
        cut in 0u64..55,
        more in 0u64..8,
        segment_bytes in 300u64..2000,
        seed in any::<u64>(),
    ) {
        let sim = new_disk();
        let (mut writer, written) = write_log(&sim, n, segment_bytes);
        writer.truncate_from(cut).unwrap();
        let kept = cut.min(n);
        prop_assert_eq!(writer.next_lsn(), kept);
        let mut expected: Vec<Entry> = written[..kept as usize].to_vec();
        for lsn in kept..kept + more {
            let e = entry(lsn, 2, lsn == kept);
            append(&mut writer, &e);
            expected.push(e);
        }
        writer.commit(true).unwrap();
        prop_assert_eq!(read_all(&sim), expected.clone());

        // After a power loss the cut and what followed it are all there,
        // and recovery finds nothing to repair.
        let disk = sim.restart(seed);
        prop_assert_eq!(read_all(&disk), expected.clone());
        let outcome = wal::replay(&disk, &dir(), 0, &ReplayOptions::default(), |_, _| {}).unwrap();
        prop_assert_eq!(outcome.torn_bytes, 0);
        prop_assert_eq!(outcome.next_lsn, (kept + more).max(1));
    }

    #[test]
    fn a_crash_anywhere_in_a_cut_leaves_a_cut_of_the_old_log_never_a_hole(
        n in 2u64..40,
        cut_at in 0.0f64..1.0,
        crash_frac in 0.0f64..1.0,
        segment_bytes in 300u64..1500,
        seed in any::<u64>(),
    ) {
        let cut = (cut_at * n as f64) as u64;
        // How many disk operations the cut takes, on a twin disk.
        let twin = new_disk();
        let (mut w, _) = write_log(&twin, n, segment_bytes);
        let before = twin.op_count();
        w.truncate_from(cut).unwrap();
        let ops = twin.op_count() - before;

        let sim = new_disk();
        let (mut writer, written) = write_log(&sim, n, segment_bytes);
        sim.set_crash_after(Some((crash_frac * ops as f64) as u64));
        let finished = writer.truncate_from(cut).is_ok();
        let disk = sim.restart(seed);
        let read = read_all(&disk);

        prop_assert!(read.len() as u64 >= cut, "lost an entry before the cut: {} < {cut}", read.len());
        prop_assert_eq!(&read[..], &written[..read.len()], "not a prefix of the old log");
        if finished {
            prop_assert_eq!(read.len() as u64, cut);
        }
        // Whatever the crash left, the cut can be made again and the log
        // continued.
        let io: Arc<dyn Io> = Arc::new(disk.clone());
        let outcome = wal::replay(&disk, &dir(), 0, &ReplayOptions::default(), |_, _| {}).unwrap();
        let mut writer = WalWriter::create(io, &dir(), outcome.next_lsn.max(read.len() as u64), options(segment_bytes)).unwrap();
        writer.truncate_from(cut).unwrap();
        let e = entry(cut, 3, cut != 0);
        append(&mut writer, &e);
        writer.commit(true).unwrap();
        let mut expected = written[..cut as usize].to_vec();
        expected.push(e);
        prop_assert_eq!(read_all(&disk.restart(seed ^ 1)), expected);
    }
}

#[test]
fn a_single_node_writer_keeps_writing_version_2_files() {
    let sim = new_disk();
    let io: Arc<dyn Io> = Arc::new(sim.clone());
    let mut writer = WalWriter::create(io, &dir(), 1, WalOptions::default()).unwrap();
    writer.append(1, &[put(1, 2)]);
    writer.commit(true).unwrap();
    let file = &wal::list_wal_files(&sim, &dir()).unwrap()[0];
    let bytes = sim.read(&file.path).unwrap();
    assert_eq!(&bytes[8..12], &2u32.to_le_bytes(), "format version 2");
    let mut cursor = WalCursor::open(&sim, &dir(), 1).unwrap();
    let rec = cursor.next_record().unwrap().expect("one record");
    assert_eq!(
        (rec.lsn, rec.head, rec.ops),
        (1, EntryHead::default(), &[put(1, 2)][..])
    );
}

#[test]
fn the_log_goes_on_past_a_hole_a_snapshot_covers_and_a_reader_of_the_hole_is_told() {
    let sim = new_disk();
    let (mut writer, written) = write_log(&sim, 10, 1 << 20);
    // A snapshot up to 49 was installed: the log goes on at 50.
    writer.start_at(50).unwrap();
    assert!(writer.start_at(20).is_err(), "LSNs are never reused");
    let e = entry(50, 4, false);
    append(&mut writer, &e);
    writer.commit(true).unwrap();
    let disk = sim.restart(3);
    let mut cursor = WalCursor::open(&disk, &dir(), 50).unwrap();
    let rec = cursor.next_record().unwrap().expect("entry 50");
    assert_eq!((rec.lsn, rec.head), (50, e.head));
    // From before the hole: the first ten, then the gap is an error.
    let mut cursor = WalCursor::open(&disk, &dir(), 0).unwrap();
    for w in &written {
        assert_eq!(cursor.next_record().unwrap().unwrap().lsn, w.lsn);
    }
    let gap = cursor.next_record().unwrap_err();
    assert!(gap.to_string().contains("missing records"), "{gap}");

    // A writer that starts at once past an empty file removes that file.
    let sim = new_disk();
    let io: Arc<dyn Io> = Arc::new(sim.clone());
    let mut writer = WalWriter::create(io, &dir(), 0, options(1 << 20)).unwrap();
    writer.start_at(7).unwrap();
    let names: Vec<u64> = wal::list_wal_files(&sim, &dir())
        .unwrap()
        .iter()
        .map(|f| f.first_lsn)
        .collect();
    assert_eq!(names, vec![7]);
}
