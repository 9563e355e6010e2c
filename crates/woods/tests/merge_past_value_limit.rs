//! Regression (issue 17 item 2): Merge operands whose fold is longer than `MAX_VALUE_LEN`.
//!
//! What the bug was: a flush, compaction or B-tree absorb folded a key's operands onto its base
//! with no size limit. The run builder refuses values over 1 MiB, so the flush failed, the
//! database turned read-only, and every reopen replayed the same log into the same failure; the
//! `btree` kind wrote the oversized value and then read it back as a corrupt blob.
//!
//! How it was fixed: a reorganisation that would produce a value over the limit does not fold;
//! it keeps the base and the operands as they are (each within the limit), and reads fold them.
//! Nothing over the limit is ever written, so the on-disk format is unchanged.
//!
//! Each kind, in two parts: operands written through the log only, the process killed, and the
//! log replayed on open into flushes; then operands with flushes, compactions and snapshots
//! between them, a drain, a close and a reopen. The value is read back whole each time and
//! `check` is clean.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{kind, scale, small_options};
use woods::storage::{FaultFs, Fs};
use woods::{Db, IndexKind, Options, MAX_VALUE_LEN};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const KEY: &[u8] = b"big";
/// Operand length: several to a memtable of the suite's 64 KiB, so memtables switch often.
const OPERAND: usize = 20 << 10;

/// Operand `i`: its number, then a byte that differs from its neighbours', so that a lost,
/// doubled or misplaced operand shows.
fn operand(i: u64) -> Vec<u8> {
    let mut v = i.to_be_bytes().to_vec();
    v.resize(OPERAND, (i % 251) as u8);
    v
}

/// Where `got` first differs from `want`, for a message that does not print megabytes.
fn diff(want: &[u8], got: &[u8]) -> String {
    let at = want.iter().zip(got).position(|(a, b)| a != b);
    format!(
        "want {} bytes, got {}; first difference at {:?}",
        want.len(),
        got.len(),
        at
    )
}

/// Every key of `model` through `get`, and the whole database through forward and reverse scans.
fn verify(db: &Db, model: &Model, what: &str) {
    for (k, want) in model {
        let got = db.get(k).unwrap_or_else(|e| panic!("{what}: get: {e}"));
        let got = got.unwrap_or_else(|| panic!("{what}: key {:?} missing", k));
        assert!(got == *want, "{what}: get {:?}: {}", k, diff(want, &got));
    }
    let fwd: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter()
        .unwrap_or_else(|e| panic!("{what}: iter: {e}"))
        .map(|r| r.unwrap_or_else(|e| panic!("{what}: scan: {e}")))
        .collect();
    let mut rev: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter_rev()
        .unwrap_or_else(|e| panic!("{what}: iter_rev: {e}"))
        .map(|r| r.unwrap_or_else(|e| panic!("{what}: reverse scan: {e}")))
        .collect();
    rev.reverse();
    for (how, got) in [("scan", &fwd), ("reverse scan", &rev)] {
        assert_eq!(got.len(), model.len(), "{what}: {how}: key count");
        for ((k, v), (wk, wv)) in got.iter().zip(model) {
            assert!(k == wk, "{what}: {how}: key {:?} for {:?}", k, wk);
            assert!(v == wv, "{what}: {how} {:?}: {}", k, diff(wv, v));
        }
    }
}

fn check(db: &Db, what: &str) {
    db.check().unwrap_or_else(|e| panic!("{what}: check: {e}"));
}

fn open(dir: &Path, opts: &Options, what: &str) -> Db {
    Db::open(dir, opts.clone()).unwrap_or_else(|e| panic!("{what}: open: {e}"))
}

/// Appends operands to [`KEY`] until its value is `until` bytes, with a few small keys between
/// them; `flush_every` > 0 flushes after that many operands.
fn append(db: &Db, model: &mut Model, next: &mut u64, until: usize, flush_every: u64) {
    let name = "append";
    while model.get(KEY).map_or(0, Vec::len) < until {
        let op = operand(*next);
        db.merge(KEY, &op)
            .unwrap_or_else(|e| panic!("{name}: merge {next}: {e}"));
        model
            .entry(KEY.to_vec())
            .or_default()
            .extend_from_slice(&op);
        for j in 0..3 {
            let k = format!("filler-{:06}", (*next * 3 + j) % 500).into_bytes();
            let v = vec![(*next % 256) as u8; 300];
            db.put(&k, &v)
                .unwrap_or_else(|e| panic!("{name}: put {next}: {e}"));
            model.insert(k, v);
        }
        *next += 1;
        if flush_every > 0 && next.is_multiple_of(flush_every) {
            db.flush()
                .unwrap_or_else(|e| panic!("{name}: flush after operand {next}: {e}"));
        }
    }
}

fn scenario(kind: IndexKind) {
    let name = kind.name().to_string();
    let fs = FaultFs::new();
    let dir = PathBuf::from("/db");
    let opts = Options {
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        ..small_options(&kind)
    };
    let reopen = Options {
        index: None,
        ..opts.clone()
    };
    let target = 3 * MAX_VALUE_LEN * scale() as usize;
    let mut model = Model::new();
    let mut next = 0u64;

    // Part 1: every operand only in the log (a memtable large enough for all of them), the
    // process killed, and the log replayed on open into the small memtables and their flushes.
    let db = open(
        &dir,
        &Options {
            memtable_bytes: 64 << 20,
            ..opts.clone()
        },
        &name,
    );
    db.put(KEY, b"base").expect("put base");
    model.insert(KEY.to_vec(), b"base".to_vec());
    append(&db, &mut model, &mut next, target, 0);
    fs.kill_process();
    drop(db);
    let what = format!("{name}: after replaying a log of operands past the value limit");
    let db = open(&dir, &reopen, &what);
    verify(&db, &model, &what);
    db.drain().unwrap_or_else(|e| panic!("{what}: drain: {e}"));
    verify(&db, &model, &what);
    check(&db, &what);
    db.close().unwrap_or_else(|e| panic!("{what}: close: {e}"));

    // Part 2: more operands with flushes (and the compactions they cause) between them, and
    // snapshots below and above the limit that must keep reading what they read when taken.
    let db = open(&dir, &reopen, &name);
    db.put(KEY, b"new base").expect("put new base");
    model.insert(KEY.to_vec(), b"new base".to_vec());
    append(&db, &mut model, &mut next, MAX_VALUE_LEN / 2, 4);
    let below = (db.snapshot(), model.clone());
    append(&db, &mut model, &mut next, MAX_VALUE_LEN * 3 / 2, 4);
    let above = (db.snapshot(), model.clone());
    append(&db, &mut model, &mut next, target, 4);
    let what = format!("{name}: with flushes past the value limit");
    db.drain().unwrap_or_else(|e| panic!("{what}: drain: {e}"));
    verify(&db, &model, &what);
    check(&db, &what);
    for (label, (snap, want)) in [("below", &below), ("above", &above)] {
        let got = snap
            .get(KEY)
            .unwrap_or_else(|e| panic!("{what}: snapshot {label}: {e}"))
            .unwrap_or_default();
        let want = &want[KEY];
        assert!(
            got == *want,
            "{what}: snapshot {label} the limit: {}",
            diff(want, &got)
        );
    }
    drop((below, above));
    // With the snapshots gone, reorganisations may fold everything that fits.
    append(&db, &mut model, &mut next, target + MAX_VALUE_LEN / 4, 4);
    db.drain().unwrap_or_else(|e| panic!("{what}: drain: {e}"));
    check(&db, &what);
    db.close().unwrap_or_else(|e| panic!("{what}: close: {e}"));
    let what = format!("{name}: reopened after a close");
    let db = open(&dir, &reopen, &what);
    verify(&db, &model, &what);
    check(&db, &what);
    db.close().unwrap_or_else(|e| panic!("{what}: close: {e}"));
    eprintln!(
        "merge_past_value_limit[{name}]: {next} operands, value of {} bytes",
        model[KEY].len()
    );
}

#[test]
fn btree() {
    scenario(kind("btree"));
}

#[test]
fn lsm() {
    scenario(kind("lsm"));
}

#[test]
fn nbtree() {
    scenario(kind("nbtree"));
}

#[test]
fn stbe() {
    scenario(kind("stbe"));
}

#[test]
fn pbt() {
    scenario(kind("pbt"));
}
