//! Regression (issue 17, item 1): with `CURRENT` missing (a crash during creation, a careless
//! `rm`, a bad restore), `Db::open` took the create path and truncated `data.woods`: a 13 MB
//! database became an empty one holding one key, and `woods put` exited 0. Now a directory
//! holding woods' files and no `CURRENT` is refused with an error that says what is missing,
//! nothing is written, and `Db::repair` rebuilds the database from the manifest logs there.
//! Also (item 3, at the database level): a manifest damaged in the middle is refused, never
//! silently rolled back.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{kinds, small_options};
use woods::manifest::{manifest_file_name, CURRENT_FILE};
use woods::storage::{FaultFs, FaultPlan, Fs, OpenMode};
use woods::{Db, Error, IndexKind, Options};

type Model = std::collections::BTreeMap<Vec<u8>, Vec<u8>>;

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn options(fs: &FaultFs, kind: &IndexKind) -> Options {
    Options {
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        ..small_options(kind)
    }
}

/// A database with several memtables in the index and some writes in the log only.
fn build(fs: &FaultFs, kind: &IndexKind) -> Model {
    let db = Db::open(dir(), options(fs, kind)).expect("open");
    let mut model = Model::new();
    for i in 0..4_000u32 {
        let k = format!("key-{:05}", (i * 7919) % 3_000).into_bytes();
        let v = format!("value-{i}-{}", "x".repeat((i % 50) as usize)).into_bytes();
        db.put(&k, &v).expect("put");
        model.insert(k, v);
        if i % 1_500 == 1_499 {
            db.flush().expect("flush");
        }
    }
    drop(db); // the last writes stay in the log only
    fs.kill_process();
    model
}

/// Every key the tests write (read back by lookups on a point-only kind such as `boa`).
fn contents(db: &Db) -> Model {
    let universe = (0..3_000u32)
        .map(|i| format!("key-{i:05}").into_bytes())
        .chain([b"k".to_vec()]);
    common::contents(db, universe).expect("contents")
}

fn expect_refused(r: woods::Result<Db>, what: &str) -> String {
    match r {
        Err(Error::Corruption { detail, .. }) => detail,
        Err(e) => panic!("{what}: expected a corruption error, got {e}"),
        Ok(db) => panic!(
            "{what}: opened a damaged directory ({} keys)",
            contents(&db).len()
        ),
    }
}

fn data_len(fs: &FaultFs) -> u64 {
    fs.file_len(&dir().join(woods::db::DATA_FILE))
        .expect("data file")
}

#[test]
fn missing_current_is_refused_untouched_and_repaired() {
    for kind in kinds() {
        let name = kind.name();
        let fs = FaultFs::new();
        let model = build(&fs, &kind);
        fs.remove(&dir().join(CURRENT_FILE)).expect("rm CURRENT");
        let before = data_len(&fs);
        assert!(before > 4096, "{name}: the index wrote nothing");
        for given in [None, Some(kind.clone())] {
            let detail = expect_refused(
                Db::open(
                    dir(),
                    Options {
                        index: given,
                        ..options(&fs, &kind)
                    },
                ),
                name,
            );
            assert!(
                detail.contains("CURRENT") && detail.contains("repair"),
                "{name}: the error does not say what is missing and what to do: {detail}"
            );
        }
        assert_eq!(data_len(&fs), before, "{name}: the data file was touched");

        let report = Db::repair(dir(), options(&fs, &kind)).expect("repair");
        assert!(report.installed_log.is_some(), "{name}: {report:?}");
        assert_eq!(report.lost_commits, 0, "{name}: {report:?}");
        assert_eq!(report.lost_seqs, None, "{name}: {report:?}");
        let db = Db::open(dir(), options(&fs, &kind)).expect("open after repair");
        assert_eq!(contents(&db), model, "{name}: contents after repair");
        db.check().expect("check after repair");
        db.close().expect("close");
        // Repairing a sound database changes nothing.
        let again = Db::repair(dir(), options(&fs, &kind)).expect("second repair");
        assert_eq!(again.installed_log, None, "{name}: {again:?}");
    }
}

#[test]
fn garbled_current_is_refused_and_repaired() {
    let kind = common::kind("lsm");
    let fs = FaultFs::new();
    let model = build(&fs, &kind);
    let f = fs
        .open(&dir().join(CURRENT_FILE), OpenMode::default())
        .expect("CURRENT");
    f.write_all_at(b"MANIFEST-9x9\n", 0).expect("garble");
    drop(f);
    expect_refused(Db::open(dir(), options(&fs, &kind)), "garbled CURRENT");
    Db::repair(dir(), options(&fs, &kind)).expect("repair");
    let db = Db::open(dir(), options(&fs, &kind)).expect("open after repair");
    assert_eq!(contents(&db), model);
}

/// A creation cut short at every one of its file operations, by a power cut or a process
/// crash: opening again either creates the database (nothing of it was left) or refuses; after
/// a refusal, repair gives an empty database that takes writes.
#[test]
fn creation_cut_short_anywhere_is_created_or_refused_then_repaired() {
    let kind = common::kind("stbe");
    let mut op = 0;
    'ops: loop {
        for power in [false, true] {
            let fs = FaultFs::new();
            fs.set_plan(FaultPlan {
                fail_op: Some(op),
                sticky: true,
            });
            if Db::open(dir(), options(&fs, &kind)).is_ok() {
                assert!(op > 0, "no operation to fail");
                break 'ops; // every operation of the creation has been cut
            }
            if power {
                fs.power_cut();
            } else {
                fs.kill_process();
            }
            let db = match Db::open(dir(), options(&fs, &kind)) {
                Ok(db) => db,
                Err(Error::Corruption { detail, .. }) => {
                    assert!(detail.contains("repair"), "op {op}: {detail}");
                    // Without an index kind, repair reads it from the data file's header, or
                    // says it needs it.
                    let without = Options {
                        index: None,
                        ..options(&fs, &kind)
                    };
                    let opts = match Db::repair(dir(), without.clone()) {
                        Err(Error::InvalidOption(_)) => options(&fs, &kind),
                        Err(e) => panic!("op {op} power {power}: repair: {e}"),
                        Ok(_) => without,
                    };
                    Db::repair(dir(), opts.clone()).expect("repair");
                    Db::open(dir(), opts).expect("open after repair")
                }
                Err(e) => panic!("op {op} power {power}: {e}"),
            };
            assert_eq!(db.index_kind().name(), "stbe", "op {op}");
            assert!(contents(&db).is_empty(), "op {op}");
            db.put(b"k", b"v").expect("put");
            assert_eq!(db.get(b"k").expect("get"), Some(b"v".to_vec()));
            db.close().expect("close");
        }
        op += 1;
    }
}

/// Item 3 at the database level: a bad record in the middle of the live manifest log is an
/// error at open, not a silent return to an older state; repair then either keeps the state
/// before the damage (reporting the commits after it lost) when that state checks clean, or
/// says it cannot.
#[test]
fn manifest_damaged_in_the_middle_is_refused() {
    for kind in kinds() {
        let name = kind.name();
        let fs = FaultFs::new();
        let model = build(&fs, &kind);
        let db = Db::open(dir(), options(&fs, &kind)).expect("reopen");
        db.close().expect("close");
        let log = live_log(&fs);
        let len = fs.file_len(&log).expect("log");
        // The second record (the first delta) starts after the header and the snapshot: find
        // it by its length field, then flip a byte of its payload.
        let f = fs.open(&log, OpenMode::default()).expect("log");
        let mut head = [0u8; 40];
        f.read_exact_at(&mut head, 0).expect("read");
        let snap = u32::from_le_bytes([head[36], head[37], head[38], head[39]]) as u64;
        let delta = 32 + 8 + snap;
        assert!(delta + 20 < len, "{name}: the log holds a single record");
        assert!(fs.flip_byte(&log, delta + 10));
        expect_refused(Db::open(dir(), options(&fs, &kind)), name);
        match Db::repair(dir(), options(&fs, &kind)) {
            Ok(report) => {
                let db = Db::open(dir(), options(&fs, &kind)).expect("open after repair");
                db.check().expect("check after repair");
                // Either a snapshot after the damage gave the newest state, whole, or the
                // state before the damage was kept and the loss reported.
                if report.lost_commits == 0 {
                    assert_eq!(contents(&db), model, "{name}: {report:?}");
                }
            }
            Err(Error::Corruption { .. }) => {}
            Err(e) => panic!("{name}: repair failed with {e}"),
        }
    }
}

fn live_log(fs: &FaultFs) -> PathBuf {
    let f = fs
        .open(&dir().join(CURRENT_FILE), OpenMode::default())
        .expect("CURRENT");
    let mut buf = vec![0u8; fs.file_len(&dir().join(CURRENT_FILE)).expect("len") as usize];
    f.read_exact_at(&mut buf, 0).expect("read CURRENT");
    let name = String::from_utf8(buf).expect("utf-8");
    let path = Path::new("/db").join(name.trim_end());
    assert!(name.starts_with(&manifest_file_name(0)[..9]));
    path
}
