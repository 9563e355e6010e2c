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

use std::path::{Path, PathBuf};
use std::sync::Arc;

use woods::manifest::{CURRENT_FILE, SNAPSHOT_EVERY};
use woods::storage::{FaultFs, Fs, OpenMode};
use woods::{Db, Error, IndexKind, Options};

const KEYS: u32 = 600;
const GENERATIONS: u32 = 2 * SNAPSHOT_EVERY as u32 + 2;

fn options(kind: &IndexKind, fs: &FaultFs) -> Options {
    Options {
        wal: false,
        background_threads: 0,
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        ..common::small_options(kind)
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(generation: u32, i: u32) -> Vec<u8> {
    let mut v = format!("gen{generation:02}-key{i:05}-").into_bytes();
    v.resize(60 + (i % 90) as usize, b'a' + (generation % 26) as u8);
    v
}

/// The live manifest log: (start, framed length, tag) of every record after the header.
fn records(fs: &FaultFs, log: &Path) -> Vec<(u64, u64, u8)> {
    let f = fs.open(log, OpenMode::default()).expect("open the log");
    let mut buf = vec![0u8; f.len().expect("len") as usize];
    f.read_exact_at(&mut buf, 0).expect("read the log");
    let mut out = Vec::new();
    let mut off = 32;
    while off + 8 < buf.len() {
        let len = u32::from_le_bytes(buf[off + 4..off + 8].try_into().expect("4 bytes")) as usize;
        out.push((off as u64, 8 + len as u64, buf[off + 8]));
        off += 8 + len;
    }
    out
}

fn live_log(fs: &FaultFs, dir: &Path) -> PathBuf {
    let path = dir.join(CURRENT_FILE);
    let f = fs.open(&path, OpenMode::default()).expect("CURRENT");
    let mut buf = vec![0u8; f.len().expect("len") as usize];
    f.read_exact_at(&mut buf, 0).expect("read CURRENT");
    dir.join(String::from_utf8(buf).expect("utf-8").trim_end())
}

fn newest_state_survives_a_damaged_record(kind: &IndexKind) {
    let name = kind.name();
    let fs = FaultFs::new();
    let dir = PathBuf::from("/db");
    let db = Db::open(&dir, options(kind, &fs)).expect("create");
    for g in 1..=GENERATIONS {
        for i in 0..KEYS {
            db.put(key(i), value(g, i)).expect("put");
        }
        db.flush().expect("flush");
    }
    fs.kill_process();
    drop(db);
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
