//! A manifest that loses its last commits rolls the database back to an older state, whose
//! pages later work may have freed and written again: every page carries a checksum of its
//! number and body, so such a page checked clean and the index read it as its own (issue 17,
//! item 5; the corruption sweep saw `btree` read wrong values this way after a byte flip in the
//! manifest's last record). Pages now carry a stamp (incarnation, commit) that the page file
//! checks against the rollback points the manifest records: reaching a rewritten page is
//! `Error::Corruption` ("stale page"), never a wrong value.
//!
//! The scenario, for every kind, without the write-ahead log (so that what the database holds is
//! exactly its index): every key is overwritten in each generation and each generation made
//! durable (`Db::flush`), so each commit frees the previous pages and the next generation's work
//! writes into them. Then the log loses its last `m` commits the way a crash and a bit flip do
//! it: the last commit's record is cut off (a crash between the data sync and the manifest
//! append) and a byte of the one before it is flipped, which reads as a torn tail. The database
//! opens at an older state; what it reads must then be the database after some prefix of the
//! writes (keys are written in order in each generation, so: keys below some key at one
//! generation, the others at the one before), or the read must fail as corruption.

mod common;

use std::path::Path;

use common::generations::{key, options, records, value};
use woods::storage::{FaultFs, Fs, OpenMode};
use woods::{Db, Error, IndexKind};

const KEYS: u32 = 1_500;
const GENERATIONS: u32 = 10;

fn build(kind: &IndexKind) -> (FaultFs, std::path::PathBuf) {
    common::generations::build(kind, KEYS, GENERATIONS)
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The database after a prefix of the writes: keys below `.1` at generation `.0 + 1`, the
    /// others at generation `.0`.
    Consistent(u32, u32),
    /// Open or a read failed as a stale page.
    Stale,
    /// Open or a read failed as other corruption (a damaged structure the decoders caught).
    OtherCorruption(String),
}

fn read_back(fs: &FaultFs, dir: &Path, kind: &IndexKind) -> Result<Outcome, String> {
    let classify = |e: Error| match e {
        Error::Corruption { ref detail, .. } if detail.contains("stale page") => Ok(Outcome::Stale),
        Error::Corruption { .. } => Ok(Outcome::OtherCorruption(e.to_string())),
        e => Err(format!("not a corruption error: {e}")),
    };
    let db = match Db::open(dir, options(kind, fs)) {
        Ok(db) => db,
        Err(e) => return classify(e),
    };
    let mut gens = Vec::new();
    for i in 0..KEYS {
        let v = match db.get(key(i)) {
            Ok(Some(v)) => v,
            Ok(None) => return Err(format!("key {i} missing")),
            Err(e) => return classify(e),
        };
        let g: u32 = std::str::from_utf8(&v[3..5])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("key {i}: garbage value {:?}", String::from_utf8_lossy(&v)))?;
        if v != value(g, i) {
            return Err(format!("key {i}: wrong value for generation {g}"));
        }
        gens.push(g);
    }
    if let Err(e) = db.check() {
        return classify(e);
    }
    let last = gens[gens.len() - 1];
    let x = gens.iter().take_while(|&&g| g == last + 1).count();
    if let Some(i) = (x..gens.len()).find(|&i| gens[i] != last) {
        return Err(format!(
            "key {i} reads generation {}, after keys at {:?}: no prefix of the writes",
            gens[i],
            &gens[..i.min(8)]
        ));
    }
    Ok(Outcome::Consistent(last, x as u32))
}

/// Cuts the last `m - 1` commit records off the log and flips a byte of the one before them.
fn lose_last_commits(fs: &FaultFs, dir: &Path, m: usize) -> bool {
    let log = dir.join("MANIFEST-000001");
    let deltas: Vec<_> = records(fs, &log)
        .into_iter()
        .filter(|&(_, _, tag)| tag == 2)
        .collect();
    if deltas.len() < m + 1 {
        return false;
    }
    let (start, len, _) = deltas[deltas.len() - m];
    let f = fs.open(&log, OpenMode::default()).expect("open the log");
    f.set_len(start + len).expect("cut the log");
    f.sync().expect("sync the log");
    fs.flip_byte(&log, start + len / 2)
}

#[test]
fn a_rolled_back_state_never_reads_a_rewritten_page() {
    for kind in common::kinds() {
        let (built, dir) = build(&kind);
        assert_eq!(
            built
                .list(&dir)
                .expect("list")
                .iter()
                .filter(|n| n.starts_with("MANIFEST-"))
                .count(),
            1,
            "{}: the scenario needs one manifest log",
            kind.name()
        );
        let mut outcomes = Vec::new();
        for m in 2..=6 {
            let fs = built.fork();
            if !lose_last_commits(&fs, &dir, m) {
                continue;
            }
            match read_back(&fs, &dir, &kind) {
                Ok(o) => outcomes.push((m, o)),
                Err(wrong) => panic!(
                    "{}: {} last commits lost: a silently wrong read: {wrong}",
                    kind.name(),
                    m
                ),
            }
        }
        eprintln!("{}: {outcomes:?}", kind.name());
        assert!(!outcomes.is_empty(), "{}: no round ran", kind.name());
        if kind.name() == "btree" {
            // Copy-on-write reuses the freed pages at once: the older states reach them.
            assert!(
                outcomes.iter().any(|(_, o)| *o == Outcome::Stale),
                "btree: no stale page was reached, the scenario does not test the stamps"
            );
        }
    }
}

/// `Db::repair` keeps an older state only when its check reads no page written after it: a log
/// damaged in the middle (valid records after the damage) is refused at open, and repair then
/// tries the state before the damage, which reaches the pages later commits freed and rewrote.
/// Whatever it keeps must read as a prefix of the writes, or it must refuse.
#[test]
fn repair_keeps_no_state_that_reaches_a_rewritten_page() {
    for kind in common::kinds() {
        let (built, dir) = build(&kind);
        let mut outcomes = Vec::new();
        for m in 2..=6 {
            let fs = built.fork();
            let log = dir.join("MANIFEST-000001");
            let deltas: Vec<_> = records(&fs, &log)
                .into_iter()
                .filter(|&(_, _, tag)| tag == 2)
                .collect();
            let (start, len, _) = deltas[deltas.len() - m];
            assert!(fs.flip_byte(&log, start + len / 2));
            assert!(
                matches!(
                    Db::open(&dir, options(&kind, &fs)),
                    Err(Error::Corruption { .. })
                ),
                "{}: a log damaged in the middle opened",
                kind.name()
            );
            let repaired = Db::repair(&dir, options(&kind, &fs));
            let outcome = match &repaired {
                Err(Error::Corruption { detail, .. }) if detail.contains("stale page") => {
                    "refused: stale page".to_string()
                }
                Err(e) => format!("refused: {e}"),
                Ok(_) => match read_back(&fs, &dir, &kind) {
                    Ok(o) => format!("kept: {o:?}"),
                    Err(wrong) => panic!(
                        "{}: repair after damage {m} records from the end kept a state that                          reads wrong: {wrong}",
                        kind.name()
                    ),
                },
            };
            outcomes.push((m, outcome));
        }
        eprintln!("{}: {outcomes:?}", kind.name());
    }
}

/// After the rollback, the database works on: pages written by the new incarnation are
/// accepted, and the history written since reads back whole across a reopen.
#[test]
fn pages_written_after_a_rollback_are_accepted() {
    let kind = common::kind("btree");
    let (fs, dir) = build(&kind);
    // Lose only the last commit: a state the stamps let open (nothing it reaches was rewritten).
    let log = dir.join("MANIFEST-000001");
    let (start, len, tag) = *records(&fs, &log).last().expect("a record");
    assert_eq!(tag, 2, "the last record is a commit");
    assert!(fs.flip_byte(&log, start + len / 2));
    let db = Db::open(&dir, options(&kind, &fs)).expect("open after the rollback");
    for g in [GENERATIONS + 1, GENERATIONS + 2] {
        for i in 0..KEYS {
            db.put(key(i), value(g, i)).expect("put");
        }
        db.flush().expect("flush");
    }
    db.close().expect("close");
    let db = Db::open(&dir, options(&kind, &fs)).expect("reopen");
    for i in 0..KEYS {
        assert_eq!(
            db.get(key(i)).expect("get"),
            Some(value(GENERATIONS + 2, i))
        );
    }
    db.check().expect("check");
}
