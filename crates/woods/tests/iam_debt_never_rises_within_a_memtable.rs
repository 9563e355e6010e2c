//! `iam`'s and `lsa`'s debt, fixed when a memtable is absorbed, covers the work the writers
//! are asked for until the next rotation: it never rises above the pacing schedule while the
//! memtable fills, and the writer that finds the memtable full finds at most what pacing
//! leaves (under a step plus one write's share), with the background thread held at its gate
//! (`Options::background_gate`: no sleep) so that the writer does every unit itself.
//!
//! Found by the stall counters (issue 19, `docs/results/stalls/`): `iam` stalled 37 to 73
//! times a run at rotations (up to 383 ms) in the 500k-record bench. Its debt counted a job's
//! input alone and showed 1 for the rest (the children it merges, the runs it finishes: up to
//! 8.3 MB of units), and rose whenever a flush made a node full (50 times, by up to 2.2 MB),
//! so the pacing schedule missed that work and the writer at the rotation did it.

mod common;

use woods::{Db, IamParams, IndexKind};

/// The memtable of the runs (and `C_t`, the node capacity, which follows it).
const MEMTABLE: u64 = 256 << 10;
/// The Db's pacing step: `max(memtable_bytes / 256, 16 KiB)`.
const STEP: u64 = 16 << 10;
/// One write's size in the memtable's accounting: an 8-byte key, a 16-byte value, 64 bytes.
const WRITE: u64 = 8 + 16 + 64;

fn held_back(name: &str, kind: IndexKind) {
    let seed = common::seed(name);
    let n = 120_000 * common::scale();
    let dir = tempfile::tempdir().expect("tempdir");
    let (opts, gate) = common::held_back_options(kind, MEMTABLE);
    let db = Db::open(dir.path(), opts.clone()).expect("open");
    let mut x = seed;
    let key = |x: &mut u64| {
        // splitmix64: random keys, replayable from the seed.
        *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)).to_be_bytes()
    };
    for i in 0..n {
        db.put(key(&mut x), [i.to_le_bytes(), i.to_be_bytes()].concat())
            .expect("put");
    }
    let s = db.stats();
    let w = |k: &str| s.waits.get(k).copied().unwrap_or(0);
    let slope = s.schedule_debt_max.div_ceil(MEMTABLE - MEMTABLE / 16);
    let left_bound = slope * WRITE + STEP;
    let work_bound = 2 * slope * WRITE + 3 * STEP;
    eprintln!(
        "{name}: {} switches, height {}, largest schedule debt {}, rises {} (largest {}), \
         rotation stalls {}, debt found at a rotation {} (bound {left_bound}), largest write \
         work {} (bound {work_bound}); WOODS_SEED={seed}",
        s.memtable_switches,
        s.index.height,
        s.schedule_debt_max,
        w("schedule_rises"),
        w("schedule_rise_max"),
        w("rotation_stalls"),
        w("rotation_debt_max"),
        s.write_work_max,
    );
    assert!(s.memtable_switches >= 20, "too few rotations to test");
    assert!(s.index.height >= 2, "too few levels to test");
    assert_eq!(
        w("schedule_rises"),
        0,
        "{name}: the debt rose above its schedule within a memtable; WOODS_SEED={seed}"
    );
    assert!(
        w("rotation_debt_max") <= left_bound,
        "{name}: a writer found {} units of debt at a rotation (bound {left_bound}); \
         WOODS_SEED={seed}",
        w("rotation_debt_max")
    );
    assert!(
        s.write_work_max <= work_bound,
        "{name}: a write did {} units of index work (bound {work_bound}); WOODS_SEED={seed}",
        s.write_work_max
    );
    gate.open();
    db.close().expect("close");
    // Everything written reads back after a reopen.
    let db = Db::open(dir.path(), opts).expect("reopen");
    let mut x = seed;
    for i in 0..n {
        let k = key(&mut x);
        let got = db.get(k).expect("get");
        // A later write of the same random key may have replaced it (unlikely with 64 bits).
        assert!(got.is_some(), "key {i} lost; WOODS_SEED={seed}");
    }
    db.close().expect("close");
}

#[test]
fn iam_debt_never_rises_within_a_memtable_and_covers_its_job() {
    held_back(
        "iam_debt_never_rises_within_a_memtable_and_covers_its_job",
        IndexKind::Iam(IamParams::default()),
    );
}

#[test]
fn lsa_debt_never_rises_within_a_memtable_and_covers_its_job() {
    held_back(
        "lsa_debt_never_rises_within_a_memtable_and_covers_its_job",
        IndexKind::Lsa(IamParams::default()),
    );
}
