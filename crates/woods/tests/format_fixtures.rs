//! On-disk format fixtures: a database of every index kind written by format 2.0, committed
//! under `tests/fixtures/v2.0/`, must keep opening with the same contents; an unknown major
//! version must be refused, and so must the format 1.0 fixtures under `tests/fixtures/v1.0/`
//! (major 2 stamps every page, so its pages are laid out otherwise; docs/format.md).
//!
//! Format 2.1 fixtures (`tests/fixtures/v2.1/`) hold the same contents written by the minor
//! versions added since: manifest minor 1 (a snapshot record every 8 records: each fixture's
//! manifest log has more than 8) and WAL minor 2 (a sync mark after each fsync of the live log:
//! the log left behind holds some).
//!
//! Write the fixtures of kinds that have none yet (committed ones are never rewritten; a new
//! format version goes into a new directory):
//! `cargo test -p woods --test format_fixtures -- --ignored make_fixtures`

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use woods::{Db, Error, Options};

const VERSION: &str = "v2.0";
/// The fixtures of the current minor versions.
const VERSION_2_1: &str = "v2.1";
/// Kinds added after format 2.0's fixtures were written: they have fixtures of the current
/// minor versions only.
const ADDED_AFTER_2_0: [&str; 1] = ["lsm-dynamic"];

fn fixture_dir(kind: &str) -> PathBuf {
    version_dir(VERSION, kind)
}

/// The oldest fixture of a kind: format 2.0's, or for a kind added since, 2.1's.
fn oldest_fixture_dir(kind: &str) -> PathBuf {
    if ADDED_AFTER_2_0.contains(&kind) {
        version_dir(VERSION_2_1, kind)
    } else {
        fixture_dir(kind)
    }
}

fn version_dir(version: &str, kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(version)
        .join(kind)
}

/// What every fixture holds: written in the index, then more in the write-ahead log only.
fn expected() -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for i in 0..3000u32 {
        m.insert(
            format!("fixture-{i:05}").into_bytes(),
            format!("value-{i}").into_bytes(),
        );
    }
    for i in (0..3000u32).step_by(7) {
        m.remove(format!("fixture-{i:05}").as_bytes());
    }
    for i in 0..50u32 {
        m.entry(format!("counter-{i:02}").into_bytes())
            .or_default()
            .extend_from_slice(b"ab");
    }
    for i in 3000..3100u32 {
        m.insert(
            format!("fixture-{i:05}").into_bytes(),
            format!("logged-{i}").into_bytes(),
        );
    }
    m
}

fn options(kind: &woods::IndexKind) -> Options {
    Options {
        direct_io: false,
        ..common::small_options(kind)
    }
}

#[test]
#[ignore = "writes the committed fixtures"]
fn make_fixtures() {
    for kind in common::kinds() {
        let dir = version_dir(VERSION_2_1, kind.name());
        if dir.exists() {
            continue;
        }
        let db = Db::open(&dir, options(&kind)).expect("create");
        for i in 0..3000u32 {
            db.put(format!("fixture-{i:05}"), format!("value-{i}"))
                .expect("put");
        }
        for i in (0..3000u32).step_by(7) {
            db.delete(format!("fixture-{i:05}")).expect("delete");
        }
        for i in 0..50u32 {
            db.merge(format!("counter-{i:02}"), b"a").expect("merge");
        }
        db.close().expect("close");
        let db = Db::open(&dir, options(&kind)).expect("reopen");
        // The open began a new manifest log: ten commits in it (the same values written again,
        // each tenth flushed), so that it holds more than 8 records and a snapshot among them.
        for i in (0..3000u32).filter(|i| i % 7 != 0) {
            db.put(format!("fixture-{i:05}"), format!("value-{i}"))
                .expect("put");
            if i % 300 == 299 {
                db.flush().expect("flush");
            }
        }
        for i in 0..50u32 {
            db.merge(format!("counter-{i:02}"), b"b").expect("merge");
        }
        for i in 3000..3100u32 {
            // Some Sync writes: each fsync leaves a sync mark in the log.
            let d = if i % 25 == 24 {
                woods::Durability::Sync
            } else {
                woods::Durability::Buffered
            };
            db.put_with(format!("fixture-{i:05}"), format!("logged-{i}"), d)
                .expect("put");
        }
        db.sync().expect("sync");
        drop(db); // leave the last writes in the log only
        let _ = std::fs::remove_file(dir.join("LOCK"));
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from)
        .unwrap_or_else(|e| panic!("fixture {} missing: {e}", from.display()))
    {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

#[test]
fn v1_fixtures_are_refused_naming_both_majors() {
    let mut seen = 0;
    for kind in common::kinds() {
        // Kinds added after format 2.0 have no format 1.0 fixture.
        let v1 = version_dir("v1.0", kind.name());
        if !v1.exists() {
            continue;
        }
        seen += 1;
        let tmp = tempfile::tempdir().expect("tempdir");
        copy_dir(&v1, tmp.path());
        match Db::open(
            tmp.path(),
            Options {
                index: None,
                ..options(&kind)
            },
        ) {
            Err(Error::UnsupportedFormat {
                found_major: 1,
                supported_major: 2,
            }) => {}
            Err(e) => panic!(
                "{}: expected UnsupportedFormat 1 vs 2, got {e}",
                kind.name()
            ),
            Ok(_) => panic!("{}: opened a format 1 database", kind.name()),
        }
    }
    assert!(seen >= 4, "only {seen} format 1.0 fixtures found");
}

#[test]
fn v2_fixtures_open_with_their_contents() {
    for kind in common::kinds() {
        let dir = fixture_dir(kind.name());
        if ADDED_AFTER_2_0.contains(&kind.name()) {
            assert!(
                !dir.exists(),
                "{}: a 2.0 fixture of a later kind",
                kind.name()
            );
            continue;
        }
        opens_with_its_contents(&kind, &dir);
    }
}

/// What a fixture of format 2.1 holds besides its contents: the minor versions it is there for.
fn has_the_minor_versions(dir: &Path) -> Result<(), String> {
    let mut wal_marks = 0;
    let mut manifest_records = 0;
    for e in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
        let e = e.map_err(|e| e.to_string())?;
        let name = e.file_name().to_string_lossy().into_owned();
        let bytes = std::fs::read(e.path()).map_err(|e| e.to_string())?;
        if name.starts_with("wal-") {
            if bytes[10..12] != 2u16.to_le_bytes() {
                return Err(format!("{name}: WAL minor {:?}", &bytes[10..12]));
            }
            wal_marks += bytes.windows(4).filter(|w| w == b"SYNC").count();
        } else if name.starts_with("MANIFEST-") {
            if bytes[10..12] != 1u16.to_le_bytes() {
                return Err(format!("{name}: manifest minor {:?}", &bytes[10..12]));
            }
            let mut off = 32;
            while off + 8 <= bytes.len() {
                let len = u32::from_le_bytes(bytes[off + 4..off + 8].try_into().expect("4"));
                off += 8 + len as usize;
                manifest_records += 1;
            }
        }
    }
    if wal_marks == 0 || manifest_records <= woods::manifest::SNAPSHOT_EVERY {
        return Err(format!(
            "{wal_marks} sync marks, {manifest_records} manifest records"
        ));
    }
    Ok(())
}

#[test]
fn v2_1_fixtures_open_with_their_contents() {
    for kind in common::kinds() {
        let dir = version_dir(VERSION_2_1, kind.name());
        if let Err(e) = has_the_minor_versions(&dir) {
            panic!("{}: the v2.1 fixture is not one: {e}", kind.name());
        }
        opens_with_its_contents(&kind, &dir);
    }
}

/// The kind a fixture was made with: the suite's, but `nbtree`'s fixtures predate σ as a
/// multiple of the memtable (`NbTreeParams::sigma_memtables`, whose default is now 8), so they
/// hold c = 1.
fn as_made(kind: &woods::IndexKind) -> woods::IndexKind {
    match kind {
        woods::IndexKind::NbTree(p) => woods::IndexKind::NbTree(woods::NbTreeParams {
            sigma_memtables: 1,
            ..p.clone()
        }),
        k => k.clone(),
    }
}

fn opens_with_its_contents(kind: &woods::IndexKind, dir: &Path) {
    {
        let kind = kind.clone();
        let tmp = tempfile::tempdir().expect("tempdir");
        copy_dir(dir, tmp.path());
        let db = Db::open(
            tmp.path(),
            Options {
                index: None,
                ..options(&kind)
            },
        )
        .expect("open fixture");
        assert_eq!(db.index_kind(), as_made(&kind));
        let universe = (0..3100u32)
            .map(|i| format!("fixture-{i:05}").into_bytes())
            .chain((0..50u32).map(|i| format!("counter-{i:02}").into_bytes()));
        let got = common::contents(&db, universe).expect("read fixture");
        assert!(
            got == expected(),
            "{}: fixture contents differ",
            kind.name()
        );
        db.check().expect("check");
        db.close().expect("close");
    }
}

#[test]
fn unknown_major_version_is_refused() {
    for kind in common::kinds() {
        // The data file's header.
        let tmp = tempfile::tempdir().expect("tempdir");
        copy_dir(&oldest_fixture_dir(kind.name()), tmp.path());
        let data = tmp.path().join(woods::db::DATA_FILE);
        let mut bytes = std::fs::read(&data).expect("read data file");
        bytes[8..10].copy_from_slice(&99u16.to_le_bytes());
        std::fs::write(&data, bytes).expect("write data file");
        match Db::open(
            tmp.path(),
            Options {
                index: None,
                ..options(&kind)
            },
        ) {
            Err(Error::UnsupportedFormat {
                found_major: 99, ..
            }) => {}
            Err(e) => panic!("{}: expected UnsupportedFormat, got {e}", kind.name()),
            Ok(_) => panic!("{}: opened a database of major version 99", kind.name()),
        }
        // The manifest's header.
        let tmp = tempfile::tempdir().expect("tempdir");
        copy_dir(&oldest_fixture_dir(kind.name()), tmp.path());
        let current = std::fs::read_to_string(tmp.path().join("CURRENT")).expect("CURRENT");
        let manifest = tmp.path().join(current.trim());
        let mut bytes = std::fs::read(&manifest).expect("read manifest");
        bytes[8..10].copy_from_slice(&99u16.to_le_bytes());
        std::fs::write(&manifest, bytes).expect("write manifest");
        match Db::open(
            tmp.path(),
            Options {
                index: None,
                ..options(&kind)
            },
        ) {
            Err(Error::UnsupportedFormat {
                found_major: 99, ..
            }) => {}
            Err(e) => panic!(
                "{}: expected UnsupportedFormat from the manifest, got {e}",
                kind.name()
            ),
            Ok(_) => panic!("{}: opened a manifest of major version 99", kind.name()),
        }
    }
}
