//! The WAL as recovery relies on it, on the simulated disk: what was
//! committed is what replay returns; torn tails are cut and corruption is
//! refused (or cut, when asked); a crash never loses an fsynced group nor
//! leaves a log replay refuses; a full disk fails a commit cleanly.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use uuid::Uuid;

use uuidmap_engine::store::wal::{
    self, HEADER_LEN, Preallocate, ReplayOptions, ReplayOutcome, WalCursor, WalOptions, WalWriter,
};
use uuidmap_engine::store::{Io, Op, WalCorrupt, WalReadError};
use uuidmap_index::Key;
use uuidmap_testkit_io::SimIo;

type Batch = Vec<Op>;
type Record = (u64, Batch);

fn dir() -> PathBuf {
    PathBuf::from("/data")
}

fn new_disk() -> SimIo {
    let sim = SimIo::new();
    sim.create_dir_all(&dir()).unwrap();
    sim
}

fn op_strategy() -> impl Strategy<Value = Op> {
    (1u128..500, 1u128..500, any::<bool>()).prop_map(|(k, v, put)| {
        let key = Uuid::from_u128(k);
        if put {
            Op::Put {
                key: Key::new(key).unwrap(),
                value: Uuid::from_u128(v),
            }
        } else {
            Op::Delete {
                key: Key::new(key).unwrap(),
            }
        }
    })
}

/// Groups of batches, with whether each group's commit fsyncs.
fn groups_strategy(max_groups: usize) -> impl Strategy<Value = Vec<(Vec<Batch>, bool)>> {
    let batch = prop::collection::vec(op_strategy(), 0..4);
    let group = (prop::collection::vec(batch, 1..4), any::<bool>());
    prop::collection::vec(group, 1..max_groups)
}

fn record_len(ops: &[Op]) -> u64 {
    24 + ops
        .iter()
        .map(|op| match op {
            Op::Put { .. } => 33,
            Op::Delete { .. } => 17,
        })
        .sum::<u64>()
}

/// Writes all groups, committing each, then syncs (the header vouching for
/// all but the groups after the last fsync); returns the committed records.
fn write_log(sim: &SimIo, groups: &[(Vec<Batch>, bool)], segment_bytes: u64) -> Vec<Record> {
    write_log_then(sim, groups, segment_bytes, false)
}

/// [`write_log`], then, if `vouch`, one more fsync so that the header
/// vouches for every record (as the writer does when idle).
fn write_log_then(
    sim: &SimIo,
    groups: &[(Vec<Batch>, bool)],
    segment_bytes: u64,
    vouch: bool,
) -> Vec<Record> {
    let io: Arc<dyn Io> = Arc::new(sim.clone());
    // Small files come from zero-filled spares, made on the spot (a huge
    // file size means "never rotate": no spare).
    let preallocate = if segment_bytes <= 1 << 20 {
        Preallocate::Inline
    } else {
        Preallocate::Off
    };
    let mut writer = WalWriter::create(
        io,
        &dir(),
        1,
        WalOptions {
            segment_bytes,
            preallocate,
            ..Default::default()
        },
    )
    .unwrap();
    let mut committed = Vec::new();
    for (batches, sync) in groups {
        for ops in batches {
            let lsn = writer.next_lsn();
            writer.append(lsn, ops);
            committed.push((lsn, ops.clone()));
        }
        writer.commit(*sync).unwrap();
    }
    writer.sync().unwrap();
    if vouch {
        writer.vouch().unwrap();
    }
    committed
}

fn replay_all(
    io: &dyn Io,
    after: u64,
    options: ReplayOptions,
) -> Result<(Vec<Record>, ReplayOutcome), WalReadError> {
    let mut seen = Vec::new();
    let outcome = wal::replay(io, &dir(), after, &options, |lsn, ops| {
        seen.push((lsn, ops.to_vec()))
    })?;
    Ok((seen, outcome))
}

/// Every record from LSN 1 on, through the read-only cursor (safe while a
/// writer is live, unlike replay, which repairs files); fails on a torn tail.
fn read_live(io: &dyn Io) -> Vec<Record> {
    let mut cursor = WalCursor::open(io, &dir(), 1).unwrap();
    let mut read = Vec::new();
    while let Some(rec) = cursor.next_record().unwrap() {
        read.push((rec.lsn, rec.ops.to_vec()));
    }
    assert_eq!(cursor.torn_tail(), None);
    read
}

fn strict() -> ReplayOptions {
    ReplayOptions::default()
}

/// The byte offset of each committed record in its file, by LSN order.
fn record_offsets(io: &dyn Io, committed: &[Record]) -> Vec<(PathBuf, u64)> {
    let files = wal::list_wal_files(io, &dir()).unwrap();
    let mut out = Vec::new();
    let mut offset = 0;
    let mut file = 0;
    for (lsn, ops) in committed {
        if file < files.len() && files[file].first_lsn == *lsn {
            file += 1;
            offset = HEADER_LEN as u64;
        }
        out.push((files[file - 1].path.clone(), offset));
        offset += record_len(ops);
    }
    out
}

fn file_names(io: &dyn Io) -> Vec<PathBuf> {
    wal::list_wal_files(io, &dir())
        .unwrap()
        .into_iter()
        .map(|f| f.path)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn replay_returns_exactly_the_committed_records_across_rotations(
        groups in groups_strategy(30),
        segment_bytes in 40u64..400,
        from in 0usize..100,
    ) {
        let sim = new_disk();
        let committed = write_log(&sim, &groups, segment_bytes);
        let (seen, outcome) = replay_all(&sim, 0, strict()).unwrap();
        prop_assert_eq!(&seen, &committed);
        prop_assert_eq!(outcome.next_lsn, committed.len() as u64 + 1);
        prop_assert_eq!(outcome.torn_bytes, 0);

        // From the middle: exactly the records after that LSN.
        let after = (from % (committed.len() + 1)) as u64;
        let (seen, outcome) = replay_all(&sim, after, strict()).unwrap();
        prop_assert_eq!(&seen[..], &committed[after as usize..]);
        prop_assert_eq!(outcome.first_lsn_seen, committed.get(after as usize).map(|r| r.0));

        // The read-only cursor sees the same.
        let mut cursor = WalCursor::open(&sim, &dir(), after + 1).unwrap();
        let mut read = Vec::new();
        while let Some(rec) = cursor.next_record().unwrap() {
            read.push((rec.lsn, rec.ops.to_vec()));
        }
        prop_assert_eq!(&read[..], &committed[after as usize..]);
        prop_assert_eq!(read_live(&sim), committed);
    }

    #[test]
    fn a_torn_last_record_is_cut_off_and_the_records_before_it_kept(
        groups in groups_strategy(12),
        segment_bytes in 40u64..400,
        cut_at in any::<prop::sample::Index>(),
        zeros in 0u64..40,
    ) {
        let sim = new_disk();
        let committed = write_log(&sim, &groups, segment_bytes);
        let offsets = record_offsets(&sim, &committed);
        let (path, start) = offsets.last().unwrap().clone();
        // A rotation right after the last commit leaves a last file without
        // records; drop it so that the last record is in the last file.
        let newest = file_names(&sim).pop().unwrap();
        if newest != path {
            sim.remove(&newest).unwrap();
            sim.sync_dir(&dir()).unwrap();
        }
        // Where the last record ends (the file may go on in zeros).
        let full = start + record_len(&committed.last().unwrap().1);
        // Cut anywhere inside the last record, then maybe zero-fill.
        let cut = start + cut_at.index((full - start) as usize) as u64;
        // (Zeros that happen to restore the cut-off bytes make the record
        // whole again: not a torn write.)
        let original = sim.read(&path).unwrap();
        prop_assume!(!(zeros >= full - cut && original[cut as usize..].iter().all(|&b| b == 0)));
        let disk = sim.restart(0);
        disk.truncate(&path, cut).unwrap();
        disk.truncate(&path, cut + zeros).unwrap();

        let (seen, outcome) = replay_all(&disk, 0, strict()).unwrap();
        prop_assert_eq!(&seen[..], &committed[..committed.len() - 1]);
        // Nothing but zeros where the record was is the clean end of a
        // preallocated file, not a tear; it is cut off all the same.
        let only_zeros = original[start as usize..cut as usize].iter().all(|&b| b == 0);
        prop_assert_eq!(outcome.torn_bytes, if only_zeros { 0 } else { cut + zeros - start });
        prop_assert_eq!(outcome.next_lsn, committed.len() as u64);
        if start == HEADER_LEN as u64 {
            prop_assert!(disk.file_len(&path).is_err(), "a file left without records is removed");
        } else {
            prop_assert_eq!(disk.file_len(&path).unwrap(), start);
        }
        // The repair is durable and the log is clean now.
        let (again, outcome) = replay_all(&disk.restart(1), 0, strict()).unwrap();
        prop_assert_eq!(again, seen);
        prop_assert_eq!(outcome.torn_bytes, 0);
    }

    #[test]
    fn a_damaged_byte_in_a_file_before_the_last_is_corruption_at_its_record(
        groups in groups_strategy(30),
        segment_bytes in 40u64..200,
        pick in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let sim = new_disk();
        let committed = write_log(&sim, &groups, segment_bytes);
        let files = file_names(&sim);
        prop_assume!(files.len() >= 2);
        let offsets = record_offsets(&sim, &committed);
        // Choose a byte of any file but the last.
        let sizes: Vec<u64> = files[..files.len() - 1]
            .iter()
            .map(|p| sim.file_len(p).unwrap())
            .collect();
        let mut at = pick.index(sizes.iter().sum::<u64>() as usize) as u64;
        let mut which = 0;
        while at >= sizes[which] {
            at -= sizes[which];
            which += 1;
        }
        let path = files[which].clone();
        // The synced-end slots (bytes 24..64) are read only in the last
        // file: damage to them elsewhere loses nothing.
        prop_assume!(!(24..64).contains(&at));
        // The record holding that byte (the header if none).
        let hit = offsets
            .iter()
            .enumerate()
            .filter(|(_, (p, off))| *p == path && *off <= at)
            .map(|(i, (_, off))| (i, *off))
            .next_back();
        let (expected_offset, kept) = match hit {
            Some((i, off)) => (off, i),
            None => (0, offsets.iter().position(|(p, _)| *p == path).unwrap_or(committed.len())),
        };

        let disk = sim.restart(0);
        let mut bytes = disk.read(&path).unwrap();
        bytes[at as usize] ^= flip;
        disk.remove(&path).unwrap();
        disk.create(&path).unwrap().write_all(&bytes).unwrap();

        match replay_all(&disk, 0, strict()) {
            Err(WalReadError::Corrupt(WalCorrupt { path: p, offset, .. })) => {
                prop_assert_eq!(p, path.clone());
                prop_assert_eq!(offset, expected_offset);
            }
            other => prop_assert!(false, "expected Corrupt, got {:?}", other.map(|r| r.1)),
        }

        // With truncate_corrupt: the records before it are kept, the rest is
        // gone for good, and the log can be written again.
        let fix = ReplayOptions {
            truncate_corrupt: true,
            ..ReplayOptions::default()
        };
        let (seen, outcome) = replay_all(&disk, 0, fix).unwrap();
        prop_assert_eq!(&seen[..], &committed[..kept]);
        prop_assert!(outcome.discarded_bytes > 0);
        let later: Vec<PathBuf> = file_names(&disk).into_iter().filter(|p| *p > path).collect();
        prop_assert!(later.is_empty(), "later files removed: {:?}", later);
        let (clean, _) = replay_all(&disk, 0, strict()).unwrap();
        prop_assert_eq!(&clean, &seen);

        let io: Arc<dyn Io> = Arc::new(disk.clone());
        let mut writer = WalWriter::create(io, &dir(), outcome.next_lsn, WalOptions { segment_bytes: 4096, preallocate: Preallocate::Inline, ..Default::default() }).unwrap();
        let more = vec![Op::Delete { key: Key::new(Uuid::from_u128(7)).unwrap() }];
        writer.append(outcome.next_lsn, &more);
        writer.commit(true).unwrap();
        let (after, _) = replay_all(&disk, 0, strict()).unwrap();
        prop_assert_eq!(after.len(), kept + 1);
        prop_assert_eq!(&after[kept], &(kept as u64 + 1, more));
    }

    #[test]
    fn a_damaged_record_the_header_vouches_for_is_corruption_even_the_last(
        groups in groups_strategy(12),
        pick in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let sim = new_disk();
        // Idle long enough for the writer to vouch for every record.
        let committed = write_log_then(&sim, &groups, u64::MAX, true);
        let offsets = record_offsets(&sim, &committed);
        let victim = pick.index(committed.len());
        let (path, start) = offsets[victim].clone();
        // Any byte, the length field included (the header CRC covers it).
        let len = record_len(&committed[victim].1);
        let at = start + (flip as u64 % len);

        let disk = sim.restart(0);
        let mut bytes = disk.read(&path).unwrap();
        bytes[at as usize] ^= flip;
        disk.remove(&path).unwrap();
        disk.create(&path).unwrap().write_all(&bytes).unwrap();
        match replay_all(&disk, 0, strict()) {
            Err(WalReadError::Corrupt(WalCorrupt { path: p, offset, .. })) => {
                prop_assert_eq!(p, path);
                prop_assert_eq!(offset, start);
            }
            other => prop_assert!(false, "expected Corrupt, got {:?}", other.map(|r| r.1)),
        }
    }

    #[test]
    fn after_a_crash_replay_returns_a_prefix_holding_every_fsynced_group(
        groups in groups_strategy(20),
        segment_bytes in 40u64..300,
        crash_after in 0u64..80,
        seed in any::<u64>(),
    ) {
        let sim = new_disk();
        sim.set_crash_after(Some(crash_after));
        let io: Arc<dyn Io> = Arc::new(sim.clone());
        let mut attempted: Vec<Record> = Vec::new();
        let mut must_survive = 0;
        if let Ok(mut writer) = WalWriter::create(io, &dir(), 1, WalOptions { segment_bytes, preallocate: Preallocate::Inline, ..Default::default() }) {
            for (batches, sync) in &groups {
                for ops in batches {
                    let lsn = writer.next_lsn();
                    writer.append(lsn, ops);
                    attempted.push((lsn, ops.clone()));
                }
                match writer.commit(*sync) {
                    Ok(()) if *sync => must_survive = attempted.len(),
                    Ok(()) => {}
                    Err(_) => break,
                }
            }
        }

        let disk = sim.restart(seed);
        let (seen, outcome) = replay_all(&disk, 0, strict()).unwrap();
        prop_assert!(seen.len() >= must_survive, "lost an fsynced group: {} < {}", seen.len(), must_survive);
        prop_assert_eq!(&seen[..], &attempted[..seen.len()]);
        prop_assert_eq!(outcome.next_lsn, seen.len() as u64 + 1);

        // The recovered log can be continued, and reads back whole.
        let io: Arc<dyn Io> = Arc::new(disk.clone());
        let mut writer = WalWriter::create(io, &dir(), outcome.next_lsn, WalOptions { segment_bytes, preallocate: Preallocate::Inline, ..Default::default() }).unwrap();
        let more = vec![Op::Delete { key: Key::new(Uuid::from_u128(9)).unwrap() }];
        writer.append(outcome.next_lsn, &more);
        writer.commit(true).unwrap();
        let (after, _) = replay_all(&disk.restart(seed ^ 1), 0, strict()).unwrap();
        prop_assert_eq!(&after[..seen.len()], &seen[..]);
        prop_assert_eq!(&after[seen.len()..], &[(outcome.next_lsn, more)][..]);
    }

    #[test]
    fn a_full_disk_fails_a_commit_cleanly_and_writes_resume_when_space_returns(
        groups in groups_strategy(30),
        segment_bytes in 40u64..300,
        capacity in 100u64..1500,
        free_after in 1usize..6,
    ) {
        let sim = new_disk();
        sim.set_capacity(Some(capacity));
        let io: Arc<dyn Io> = Arc::new(sim.clone());
        let mut writer = WalWriter::create(io, &dir(), 1, WalOptions { segment_bytes, preallocate: Preallocate::Inline, ..Default::default() }).unwrap();
        let mut committed: Vec<Record> = Vec::new();
        let mut failures = 0;
        for (batches, sync) in &groups {
            let mut group = Vec::new();
            for ops in batches {
                let lsn = writer.next_lsn();
                prop_assert_eq!(lsn, committed.len() as u64 + group.len() as u64 + 1,
                    "a failed group's LSNs are reused");
                writer.append(lsn, ops);
                group.push((lsn, ops.clone()));
            }
            match writer.commit(*sync) {
                Ok(()) => committed.extend(group),
                Err(e) => {
                    prop_assert!(e.is_disk_full(), "{}", e);
                    // Nothing of the failed group is left behind.
                    prop_assert_eq!(&read_live(&sim), &committed);
                    failures += 1;
                    if failures == free_after {
                        sim.set_capacity(None);
                    }
                }
            }
        }
        prop_assert_eq!(&read_live(&sim), &committed);
        if failures >= free_after {
            // Space returned: the next commit succeeds.
            let more = vec![Op::Delete { key: Key::new(Uuid::from_u128(3)).unwrap() }];
            let lsn = writer.next_lsn();
            writer.append(lsn, &more);
            writer.commit(true).unwrap();
            let (seen, _) = replay_all(&sim.restart(0), 0, strict()).unwrap();
            prop_assert_eq!(seen.last(), Some(&(lsn, more)));
        }
    }

    #[test]
    fn remove_covered_keeps_the_newest_file_and_every_file_with_a_later_record(
        groups in groups_strategy(30),
        segment_bytes in 40u64..200,
        upto in 0u64..120,
    ) {
        let sim = new_disk();
        let committed = write_log(&sim, &groups, segment_bytes);
        let before = wal::list_wal_files(&sim, &dir()).unwrap();
        let removed = wal::remove_covered(&sim, &dir(), upto).unwrap();
        let after = wal::list_wal_files(&sim, &dir()).unwrap();
        prop_assert_eq!(before.len() - after.len(), removed);
        prop_assert_eq!(after.last(), before.last(), "the newest file stays");
        for (i, file) in before.iter().enumerate() {
            let gone = !after.contains(file);
            let last_lsn = before.get(i + 1).map(|next| next.first_lsn - 1);
            let covered = last_lsn.is_some_and(|l| l <= upto);
            prop_assert_eq!(gone, covered, "file {:?}", file.path);
        }
        // Removal is durable, and what the snapshot does not cover replays.
        let after_upto = (upto as usize).min(committed.len());
        let (seen, _) = replay_all(&sim.restart(0), after_upto as u64, strict()).unwrap();
        prop_assert_eq!(&seen[..], &committed[after_upto..]);
    }
}

#[test]
fn a_log_starting_after_the_wanted_lsn_is_a_gap() {
    let sim = new_disk();
    let groups: Vec<(Vec<Batch>, bool)> = (0..10)
        .map(|i| {
            (
                vec![vec![Op::Delete {
                    key: Key::new(Uuid::from_u128(i + 1)).unwrap(),
                }]],
                true,
            )
        })
        .collect();
    write_log(&sim, &groups, 60);
    let files = wal::list_wal_files(&sim, &dir()).unwrap();
    assert!(files.len() >= 3);
    sim.remove(&files[0].path).unwrap();
    match replay_all(&sim, 0, strict()) {
        Err(WalReadError::Gap {
            expected, found, ..
        }) => assert_eq!((expected, found), (1, files[1].first_lsn)),
        other => panic!("expected Gap, got {:?}", other.map(|r| r.1)),
    }
    // A snapshot covering the missing records makes the log whole again.
    let (seen, _) = replay_all(&sim, files[1].first_lsn - 1, strict()).unwrap();
    assert_eq!(seen.len() as u64, 11 - files[1].first_lsn);

    // A hole between files is a gap too.
    sim.remove(&files[2].path).unwrap();
    assert!(matches!(
        replay_all(&sim, files[1].first_lsn - 1, strict()),
        Err(WalReadError::Gap { .. })
    ));
}

#[test]
fn the_read_only_cursor_changes_no_file_even_at_a_torn_tail() {
    let sim = new_disk();
    let groups = vec![(
        vec![
            vec![Op::Delete {
                key: Key::new(Uuid::from_u128(1)).unwrap(),
            }];
            3
        ],
        true,
    )];
    write_log(&sim, &groups, u64::MAX);
    let path = file_names(&sim).pop().unwrap();
    let len = sim.file_len(&path).unwrap();
    sim.truncate(&path, len - 5).unwrap();
    let mut cursor = WalCursor::open(&sim, &dir(), 1).unwrap();
    let mut n = 0;
    while cursor.next_record().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 2);
    let torn = cursor.torn_tail().unwrap();
    assert_eq!(torn.file_len - torn.offset, 41 - 5);
    assert_eq!(sim.file_len(&path).unwrap(), len - 5);
}

#[test]
fn a_header_only_last_file_is_removed_and_the_writer_continues_with_the_same_name() {
    let sim = new_disk();
    let io: Arc<dyn Io> = Arc::new(sim.clone());
    drop(
        WalWriter::create(
            io.clone(),
            &dir(),
            1,
            WalOptions {
                segment_bytes: 4096,
                preallocate: Preallocate::Inline,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let (seen, outcome) = replay_all(&sim, 0, strict()).unwrap();
    assert!(seen.is_empty());
    assert_eq!(outcome.next_lsn, 1);
    assert!(file_names(&sim).is_empty());
    let mut writer = WalWriter::create(
        io,
        &dir(),
        1,
        WalOptions {
            segment_bytes: 4096,
            preallocate: Preallocate::Inline,
            ..Default::default()
        },
    )
    .unwrap();
    writer.append(1, &[]);
    writer.commit(true).unwrap();
    assert_eq!(replay_all(&sim, 0, strict()).unwrap().0, vec![(1, vec![])]);
}

#[test]
fn the_writer_refuses_to_replace_a_file_that_holds_records() {
    let sim = new_disk();
    let io: Arc<dyn Io> = Arc::new(sim.clone());
    let mut writer = WalWriter::create(
        io.clone(),
        &dir(),
        1,
        WalOptions {
            segment_bytes: 4096,
            preallocate: Preallocate::Inline,
            ..Default::default()
        },
    )
    .unwrap();
    writer.append(1, &[]);
    writer.commit(true).unwrap();
    let err = WalWriter::create(
        io,
        &dir(),
        1,
        WalOptions {
            segment_bytes: 4096,
            preallocate: Preallocate::Inline,
            ..Default::default()
        },
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("already holds records"), "{err}");
}

#[test]
fn a_real_directory_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let io: Arc<dyn Io> = Arc::new(uuidmap_engine::store::OsIo);
    let mut writer = WalWriter::create(
        io.clone(),
        tmp.path(),
        1,
        WalOptions {
            segment_bytes: 100,
            preallocate: Preallocate::Inline,
            ..Default::default()
        },
    )
    .unwrap();
    let mut committed = Vec::new();
    for i in 1..=20u64 {
        let ops = vec![Op::Put {
            key: Key::new(Uuid::from_u128(i.into())).unwrap(),
            value: Uuid::from_u128(1),
        }];
        writer.append(i, &ops);
        writer.commit(i % 3 == 0).unwrap();
        committed.push((i, ops));
    }
    writer.sync().unwrap();
    let mut seen = Vec::new();
    wal::replay(&*io, tmp.path(), 0, &strict(), |lsn, ops| {
        seen.push((lsn, ops.to_vec()))
    })
    .unwrap();
    assert_eq!(seen, committed);
    assert!(wal::list_wal_files(&*io, tmp.path()).unwrap().len() > 3);
    let _: &Path = writer.current_path();
}

// ---- Preallocated files (the spare) ----

fn put(k: u128) -> Op {
    Op::Put {
        key: Key::new(Uuid::from_u128(k)).unwrap(),
        value: Uuid::from_u128(k + 1),
    }
}

fn preallocated_writer(io: &SimIo, next_lsn: u64, segment_bytes: u64) -> WalWriter {
    let io: Arc<dyn Io> = Arc::new(io.clone());
    let options = WalOptions {
        segment_bytes,
        preallocate: Preallocate::Inline,
        ..Default::default()
    };
    WalWriter::create(io, &dir(), next_lsn, options).unwrap()
}

/// Commits `n` one-put batches, each its own synced group.
fn commit_puts(writer: &mut WalWriter, n: u64) -> Vec<Record> {
    let mut out = Vec::new();
    for _ in 0..n {
        let lsn = writer.next_lsn();
        let ops = vec![put(lsn as u128)];
        writer.append(lsn, &ops);
        writer.commit(true).unwrap();
        out.push((lsn, ops));
    }
    out
}

#[test]
fn a_spare_left_by_one_run_makes_the_next_runs_first_file_and_recovery_cuts_the_zeros() {
    let sim = new_disk();
    let segment = 64 << 10;
    let spare = dir().join(wal::SPARE_NAME);
    let mut writer = preallocated_writer(&sim, 1, segment);
    // The first file of a new directory is left for a spare at once.
    let mut committed = commit_puts(&mut writer, 3);
    assert_eq!(
        sim.file_len(&spare).unwrap(),
        segment,
        "the next spare is ready"
    );
    let newest = file_names(&sim).pop().unwrap();
    assert_eq!(sim.file_len(&newest).unwrap(), segment, "made from a spare");
    committed.extend(commit_puts(&mut writer, 5));
    drop(writer);

    // The read-only cursor reads the records and stops at the zeros, a
    // clean end: no torn tail, nothing changed.
    assert_eq!(read_live(&sim), committed);
    assert_eq!(sim.file_len(&newest).unwrap(), segment);
    // Recovery cuts the zeros off, quietly: the file ends at its records.
    let (seen, outcome) = replay_all(&sim, 0, strict()).unwrap();
    assert_eq!(seen, committed);
    assert_eq!(outcome.torn_bytes, 0);
    let records_end = record_offsets(&sim, &committed).last().unwrap().1
        + record_len(&committed.last().unwrap().1);
    assert_eq!(sim.file_len(&newest).unwrap(), records_end);

    // The next run takes the spare left behind for its first file.
    let mut writer = preallocated_writer(&sim, outcome.next_lsn, segment);
    let first = file_names(&sim).pop().unwrap();
    assert_ne!(first, newest);
    assert_eq!(
        sim.file_len(&first).unwrap(),
        segment,
        "made from the old spare"
    );
    assert_eq!(
        sim.file_len(&spare).unwrap(),
        segment,
        "and a new spare is made"
    );
    committed.extend(commit_puts(&mut writer, 4));
    drop(writer);
    // After a power loss too, every synced record is there.
    let (seen, _) = replay_all(&sim.restart(7), 0, strict()).unwrap();
    assert_eq!(seen, committed);
}

#[test]
fn zeros_where_the_header_says_records_were_synced_are_corruption_not_an_end() {
    let sim = new_disk();
    let mut writer = preallocated_writer(&sim, 1, 64 << 10);
    let committed = commit_puts(&mut writer, 6);
    // The idle vouch: the header now vouches for all six records.
    writer.vouch().unwrap();
    drop(writer);
    let offsets = record_offsets(&sim, &committed);
    let (path, start) = offsets[3].clone();
    // Zero everything from record 4 on, as a lost write would leave a
    // preallocated file: it must not read as the clean end of the log.
    let mut bytes = sim.read(&path).unwrap();
    bytes[start as usize..].fill(0);
    sim.remove(&path).unwrap();
    sim.create(&path).unwrap().write_all(&bytes).unwrap();
    match replay_all(&sim, 0, strict()) {
        Err(WalReadError::Corrupt(WalCorrupt {
            path: p, offset, ..
        })) => {
            assert_eq!((p, offset), (path, start));
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|r| r.1)),
    }
}

#[test]
fn a_torn_write_into_the_zeros_is_still_a_torn_tail() {
    let sim = new_disk();
    let mut writer = preallocated_writer(&sim, 1, 64 << 10);
    let committed = commit_puts(&mut writer, 4);
    drop(writer);
    let newest = file_names(&sim).pop().unwrap();
    // Half a record's bytes past the last one, then zeros again.
    let end = record_offsets(&sim, &committed).last().unwrap().1
        + record_len(&committed.last().unwrap().1);
    let mut bytes = sim.read(&newest).unwrap();
    bytes[end as usize..end as usize + 20].fill(0xab);
    sim.remove(&newest).unwrap();
    sim.create(&newest).unwrap().write_all(&bytes).unwrap();
    let (seen, outcome) = replay_all(&sim, 0, strict()).unwrap();
    assert_eq!(seen, committed);
    assert_eq!(outcome.torn_bytes, bytes.len() as u64 - end);
    assert_eq!(sim.file_len(&newest).unwrap(), end);
}

#[test]
fn the_put_estimate_leaves_out_zeros_and_records_a_snapshot_already_holds() {
    let sim = new_disk();
    let mut writer = preallocated_writer(&sim, 1, 64 << 10);
    commit_puts(&mut writer, 1);
    // The first file is left for the spare: the rest is in one
    // preallocated file of 64 KiB, mostly zeros.
    commit_puts(&mut writer, 9);
    writer.vouch().unwrap(); // as a clean stop does
    drop(writer);
    // Everything after LSN 0: the ten puts, not 64 KiB of zeros as puts.
    let all = wal::estimate_puts(&sim, &dir(), 0).unwrap();
    // (Every byte counts as a put's: ten records of 57 bytes.)
    assert_eq!(all, 10 * 57 / 33);
    // A snapshot at LSN 10 holds every record the newest file vouches for:
    // a restart presizes for none of them (it did for the whole file).
    assert_eq!(wal::estimate_puts(&sim, &dir(), 10).unwrap(), 0);
    // At LSN 5 the file's vouched records go past the snapshot: counted
    // whole, an upper bound.
    let from_five = wal::estimate_puts(&sim, &dir(), 5).unwrap();
    assert!(from_five >= 5, "{from_five}");
}
