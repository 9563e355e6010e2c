//! Regression (issue 17, repair after manifest damage): with a manifest record damaged in the
//! middle of its log, `Db::repair` kept the state before the damage, losing every later commit,
//! and refused when that older state reached pages that later work had freed and written again
//! (the corruption sweep: a manifest open error was repaired 63 to 108 times per kind and
//! refused otherwise). The manifest now writes a commit as a whole snapshot every
//! `SNAPSHOT_EVERY` records, and repair reads past a damaged record to the snapshot after it:
//! it keeps the newest state, with nothing lost.
//!
//! The scenario, for each kind, without the write-ahead log (what the database holds is its
//! index): every key is overwritten in each generation and each generation made durable, so
//! each commit frees the pages of the one before and later work writes into them (the case in
//! which the older state was refused); then a byte of an early delta record is flipped.

mod common;

use common::generations::{build, key, live_log, options, records, value};
use woods::manifest::SNAPSHOT_EVERY;
use woods::{Db, Error, IndexKind};

const KEYS: u32 = 600;
const GENERATIONS: u32 = 2 * SNAPSHOT_EVERY as u32 + 2;

fn newest_state_survives_a_damaged_record(kind: &IndexKind) {
    let name = kind.name();
    let (fs, dir) = build(kind, KEYS, GENERATIONS);
    let log = live_log(&fs, &dir);
    let recs = records(&fs, &log);
    // The first delta (tag 2) that a snapshot (tag 1) follows.
    let damaged = (1..recs.len())
        .find(|&i| recs[i].2 == 2 && recs[i + 1..].iter().any(|r| r.2 == 1))
        .unwrap_or_else(|| panic!("{name}: no snapshot follows a delta: {recs:?}"));
    let (start, len, _) = recs[damaged];
    assert!(fs.flip_byte(&log, start + len / 2));
    assert!(
        matches!(
            Db::open(&dir, options(kind, &fs)),
            Err(Error::Corruption { .. })
        ),
        "{name}: a log damaged in the middle opened"
    );
    let report = Db::repair(&dir, options(kind, &fs))
        .unwrap_or_else(|e| panic!("{name}: repair refused: {e}"));
    assert_eq!(report.lost_commits, 0, "{name}: {report:#?}");
    assert_eq!(report.lost_seqs, None, "{name}: {report:#?}");
    let db = Db::open(&dir, options(kind, &fs)).expect("open after repair");
    for i in 0..KEYS {
        assert_eq!(
            db.get(key(i)).expect("get"),
            Some(value(GENERATIONS, i)),
            "{name}: key {i} after repair"
        );
    }
    db.check().expect("check after repair");
    // The rebuilt state takes new work and keeps it.
    for i in 0..KEYS {
        db.put(key(i), value(GENERATIONS + 1, i)).expect("put");
    }
    db.close().expect("close");
    let db = Db::open(&dir, options(kind, &fs)).expect("reopen");
    for i in (0..KEYS).step_by(7) {
        assert_eq!(
            db.get(key(i)).expect("get"),
            Some(value(GENERATIONS + 1, i))
        );
    }
    db.check().expect("check after more work");
}

#[test]
fn btree() {
    newest_state_survives_a_damaged_record(&common::kind("btree"));
}

#[test]
fn lsm() {
    newest_state_survives_a_damaged_record(&common::kind("lsm"));
}

#[test]
fn nbtree() {
    newest_state_survives_a_damaged_record(&common::kind("nbtree"));
}

#[test]
fn stbe() {
    newest_state_survives_a_damaged_record(&common::kind("stbe"));
}
