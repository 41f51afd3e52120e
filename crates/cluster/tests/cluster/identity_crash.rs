//! Power loss while a member's identity (`member-id`) is written: on the
//! simulated disk, the power fails at each mutating call in turn, the
//! unsynced bytes are dropped, and the directory is opened again. The file
//! is never left damaged (a start never refuses for a torn `member-id`),
//! and an identity once returned is the one every later start reads.

use std::path::Path;

use uuidmap_cluster::identity::load_or_create;
use uuidmap_engine::store::Io;
use uuidmap_testkit::SimIo;

const DIR: &str = "/data";

fn fresh() -> SimIo {
    let sim = SimIo::new();
    sim.create_dir_all(Path::new(DIR)).unwrap();
    sim
}

#[test]
fn a_power_cut_while_the_identity_is_written_leaves_it_whole_or_absent() {
    let whole = fresh();
    let first = whole.op_count();
    let written = load_or_create(&whole, Path::new(DIR), 5).unwrap();
    let steps = whole.op_count() - first;
    assert!(steps >= 4, "create, write, sync, rename, sync_dir: {steps}");
    // Once returned, it survives the power loss, whatever of the
    // unsynced bytes the disk kept.
    for seed in 0..8 {
        assert_eq!(
            load_or_create(&whole.restart(seed), Path::new(DIR), 5).unwrap(),
            written,
            "seed {seed}"
        );
    }

    for cut in 0..steps {
        for seed in 0..4 {
            let sim = fresh();
            sim.set_crash_after(Some(cut));
            let before = load_or_create(&sim, Path::new(DIR), 5);
            assert!(sim.crashed(), "cut {cut}: the power never failed");
            let after = load_or_create(&sim.restart(seed), Path::new(DIR), 5)
                .unwrap_or_else(|e| panic!("cut {cut} ({:?}): {e}", sim.crashed_in()));
            assert_eq!(after.node_id, 5);
            if let Ok(before) = before {
                assert_eq!(after, before, "cut {cut}: a returned identity was lost");
            }
        }
    }
}
