//! A de-amortized FD-tree (`fdtree-d`, spec §4.8) makes no insert write more than one step of
//! merge pages, counted through the Db (writers doing the merge work themselves: no background
//! thread), not only per `work` call.
//!
//! The first measured run (docs/results/fdtree.md) cut the worst insert only 11 times where
//! the paper cut it 80–2500 times. The cascade's estimated work, which the Db's pacing spreads
//! over the next head tree, was below what its steps charged (fence levels and run finishing
//! were left out), so its debt read 1 while work was left, pacing stopped charging writers, and
//! the insert that found the next head tree full did the rest of the cascade inline: half of
//! the rotations stalled, up to 264 ms. The estimate is now an upper bound of the work, and the
//! commit is a step of its own.

mod common;

use woods::storage::{Purpose, PAGE_SIZE};
use woods::{Db, FdTreeParams, IndexKind, Options};

/// The Db's pacing step: `max(memtable_bytes / 256, 16 KiB)` of merge work.
const STEP: u64 = 16 << 10;

/// The documented bound of one step (docs/fdtree.md, *Payment*): its budget of entries, plus
/// three 16-page write requests (two in flight and the run being finished), plus a finished
/// run's index pages and header.
const BOUND: u64 = STEP + (3 * 16 + 8) * PAGE_SIZE as u64;

/// Inserts `n` entries (8-byte keys in a scrambled order, 8-byte values) and returns the most
/// merge bytes written during one put, and the Db's stall count.
fn largest_put(deamortized: bool, n: u64) -> (u64, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(
        dir.path(),
        Options {
            index: Some(IndexKind::FdTree(FdTreeParams {
                ratio: 3,
                deamortized,
                ..FdTreeParams::default()
            })),
            cache_bytes: 256 << 10,
            memtable_bytes: 64 << 10,
            background_threads: 0,
            ..Options::default()
        },
    )
    .expect("open");
    let merged = |db: &Db| db.stats().io.written(Purpose::Merge);
    let mut largest = 0;
    for i in 0..n {
        // A permutation of 0..2^32 (odd multiplier): random order, no repeats.
        let k = (i.wrapping_mul(2_654_435_761) & 0xffff_ffff).to_be_bytes();
        let before = merged(&db);
        db.put(k, i.to_le_bytes()).expect("put");
        largest = largest.max(merged(&db) - before);
    }
    // Stalls for a job, not waits for a commit at the cap on frozen memtables (a slow host's).
    let s = db.stats();
    let stalls = s.stalls - s.waits["commit_waits"];
    db.close().expect("close");
    (largest, stalls)
}

#[test]
fn no_deamortized_insert_writes_more_than_one_step() {
    // 819 entries a head tree, k = 3: cascades into L1..L4 and new levels.
    let n = 60_000 * common::scale();
    let (plain, _) = largest_put(false, n);
    let (de, stalls) = largest_put(true, n);
    eprintln!(
        "largest put: plain {plain} bytes, de-amortized {de} (bound {BOUND}), {stalls} stalls"
    );
    assert!(
        de <= BOUND,
        "a de-amortized insert wrote {de} merge bytes (bound {BOUND})"
    );
    assert_eq!(
        stalls, 0,
        "de-amortized inserts waited at a memtable rotation"
    );
    // Plain mode: the insert that fills the head tree waits for the whole cascade.
    assert!(
        plain > 4 * BOUND,
        "plain's largest insert wrote only {plain} bytes"
    );
}
