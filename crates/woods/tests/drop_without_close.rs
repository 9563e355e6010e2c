//! What dropping a `Db` without `close` keeps, as `Db`'s documentation states it: with the
//! write-ahead log on, every acknowledged write (the next open replays the log); with it off,
//! what `sync` made durable, and not the writes after it that are still in the memtable.

mod common;

use std::path::Path;
use std::sync::Arc;

use woods::storage::{FaultFs, Fs};
use woods::{Db, Options};

fn options(kind: &woods::IndexKind, fs: &FaultFs, wal: bool) -> Options {
    Options {
        wal,
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        ..common::small_options(kind)
    }
}

#[test]
fn a_drop_loses_nothing_acknowledged_with_the_log_on() {
    for kind in common::kinds() {
        let fs = FaultFs::new();
        let dir = Path::new("/db");
        let db = Db::open(dir, options(&kind, &fs, true)).expect("open");
        for i in 0..100u32 {
            db.put(format!("k{i:03}"), b"v").expect("put");
        }
        drop(db);
        let db = Db::open(dir, options(&kind, &fs, true)).expect("reopen");
        let universe = (0..100u32).map(|i| format!("k{i:03}").into_bytes());
        let got = common::contents(&db, universe).expect("contents");
        assert_eq!(got.len(), 100, "{}", kind.name());
        db.close().expect("close");
    }
}

#[test]
fn a_drop_without_the_log_loses_the_writes_after_the_last_sync() {
    for kind in common::kinds() {
        let name = kind.name();
        let fs = FaultFs::new();
        let dir = Path::new("/db");
        let db = Db::open(dir, options(&kind, &fs, false)).expect("open");
        db.put("synced", b"v").expect("put");
        db.sync().expect("sync");
        // Far less than a memtable: no background work moves it into the index.
        db.put("after", b"v").expect("put");
        assert_eq!(db.stats().durable_seq, 1, "{name}");
        drop(db);
        let db = Db::open(dir, options(&kind, &fs, false)).expect("reopen");
        assert_eq!(
            db.get("synced").expect("get"),
            Some(b"v".to_vec()),
            "{name}"
        );
        assert_eq!(db.get("after").expect("get"), None, "{name}");
        db.check().expect("check");
        db.close().expect("close");
    }
}
