//! `Db::check` reports what it counted under names that say what they count: `live_keys` is
//! the number of keys with a value (what a scan returns), whatever the index kind and however
//! far reorganisation has gone; the version counts are every stored version, in the memtables
//! and in the index. Until issue 18 it returned one number, the index's versions, which users
//! took for a key count.

mod common;

use woods::Db;

#[test]
fn check_counts_live_keys_versions_and_pages() {
    for kind in common::kinds() {
        let name = kind.name();
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), common::small_options(&kind)).expect("open");
        let empty = db.check().expect("check of an empty database");
        assert_eq!(
            (
                empty.live_keys,
                empty.index_versions,
                empty.memtable_versions
            ),
            (0, 0, 0),
            "{name}: {empty:?}"
        );
        assert!(empty.file_pages >= 1, "{name}: the header page: {empty:?}");

        // 100 puts, 20 of them overwritten, 10 deleted, 5 merged onto: 135 versions, 90 keys.
        for i in 0..100u32 {
            db.put(format!("key-{i:03}"), b"first").expect("put");
        }
        for i in 0..20u32 {
            db.put(format!("key-{i:03}"), b"second").expect("put");
        }
        for i in 90..100u32 {
            db.delete(format!("key-{i:03}")).expect("delete");
        }
        for i in 40..45u32 {
            db.merge(format!("key-{i:03}"), b"+").expect("merge");
        }
        let r = db.check().expect("check before a flush");
        assert_eq!(r.live_keys, 90, "{name}: {r:?}");
        assert_eq!(r.seq, 135, "{name}: {r:?}");
        assert_eq!(
            r.memtable_versions, 135,
            "{name}: all in the memtable: {r:?}"
        );
        assert_eq!(
            r.index_versions, 0,
            "{name}: nothing in the index yet: {r:?}"
        );
        assert_eq!(r.memtables, 1, "{name}: {r:?}");

        db.flush().expect("flush");
        let r = db.check().expect("check after a flush");
        assert_eq!(r.live_keys, 90, "{name}: {r:?}");
        assert_eq!(r.memtable_versions, 0, "{name}: {r:?}");
        // Every kind keeps at least one version of each key with a value, and at most every
        // version written.
        assert!(
            (90..=135).contains(&r.index_versions),
            "{name}: index versions: {r:?}"
        );
        assert!(
            r.used_pages() > 1 && r.used_pages() + r.free_pages == r.file_pages,
            "{name}: pages: {r:?}"
        );
        db.close().expect("close");

        let db = Db::open(dir.path(), common::small_options(&kind)).expect("reopen");
        let again = db.check().expect("check after reopening");
        assert_eq!(again.live_keys, 90, "{name}: {again:?}");
        db.close().expect("close");
    }
}
