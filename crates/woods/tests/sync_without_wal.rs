//! With the write-ahead log off (`Options::wal = false`), durability is what `Db::sync`,
//! `Db::flush` and `Db::close` make it, and nothing else claims more. Until this was fixed,
//! `Durability::Sync` was accepted and did nothing (a write acknowledged as synced was lost by a
//! power cut), and `Db::sync` returned at once, leaving every write in the memtable.

mod common;

use std::path::Path;
use std::sync::Arc;

use woods::storage::{FaultFs, Fs};
use woods::{Db, Durability, Error, Options, WriteBatch};

fn options(kind: &woods::IndexKind, fs: &FaultFs) -> Options {
    Options {
        wal: false,
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        ..common::small_options(kind)
    }
}

fn assert_names_the_wal_option(r: woods::Result<()>, what: &str) {
    match r {
        Err(Error::InvalidOption(msg)) => {
            assert!(msg.contains("Options::wal"), "{what}: message {msg:?}")
        }
        Err(e) => panic!("{what}: expected InvalidOption, got {e}"),
        Ok(()) => panic!("{what}: accepted"),
    }
}

#[test]
fn sync_durability_without_the_wal_is_refused_at_open() {
    let fs = FaultFs::new();
    let r = Db::open(
        Path::new("/db"),
        Options {
            durability: Durability::Sync,
            ..options(&common::kind("lsm"), &fs)
        },
    );
    assert_names_the_wal_option(r.map(drop), "open with durability Sync and no WAL");
}

#[test]
fn a_sync_write_without_the_wal_is_refused_and_not_applied() {
    let fs = FaultFs::new();
    let db = Db::open(Path::new("/db"), options(&common::kind("lsm"), &fs)).expect("open");
    let mut b = WriteBatch::new();
    b.put("k", "v");
    assert_names_the_wal_option(db.write_with(&b, Durability::Sync), "a Sync write");
    assert_eq!(db.get("k").expect("get"), None);
    db.write_with(&b, Durability::Buffered)
        .expect("a buffered write");
    assert_eq!(db.get("k").expect("get"), Some(b"v".to_vec()));
    db.close().expect("close");
}

/// `Db::sync` without the log moves the memtables into the index durably: a power cut right
/// after it loses nothing, for every kind.
#[test]
fn sync_without_the_wal_survives_a_power_cut() {
    for kind in common::kinds() {
        let fs = FaultFs::new();
        let dir = Path::new("/db");
        let db = Db::open(dir, options(&kind, &fs)).expect("open");
        for i in 0..200u32 {
            db.put(format!("key-{i:03}"), format!("value-{i}"))
                .expect("put");
        }
        db.sync().expect("sync");
        fs.power_cut();
        drop(db);
        let db = Db::open(
            dir,
            Options {
                index: None,
                ..options(&kind, &fs)
            },
        )
        .expect("reopen");
        let universe = (0..200u32).map(|i| format!("key-{i:03}").into_bytes());
        let got = common::contents(&db, universe).expect("contents");
        assert_eq!(got.len(), 200, "{}: keys after the power cut", kind.name());
        assert_eq!(
            db.get("key-199").expect("get"),
            Some(b"value-199".to_vec()),
            "{}",
            kind.name()
        );
        db.check().expect("check");
        db.close().expect("close");
    }
}
