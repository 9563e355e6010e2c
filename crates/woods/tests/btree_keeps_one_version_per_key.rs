//! Without snapshots, a `btree` holds one entry for each key with a value and nothing for a
//! deleted one, however its leaves were split: every later version of a key meets the earlier
//! ones in one leaf, where the merge keeps only the newest.
//!
//! Found by `woods bench aging` (issue 23): an aged tree held 2.03 entries for each live one.
//! A separator was the (key, sequence) of its child's first entry, and a newer version of that
//! key sorts before it (sequences descend), so an update or a delete of a leaf's first key went
//! to the leaf on its left, and the older versions stayed in the right leaf for good. Before
//! the fix this test held 11,420 entries for 10,000 live keys. Now a separator where a key
//! begins sorts before every version of it (`btree::node::SEP_ALL`).

mod common;

use woods::Db;

#[test]
fn updates_and_deletes_leave_one_version_per_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 20_000u32 * common::scale() as u32;
    let (db, opts) = common::btree_of_keys(dir.path(), n);
    // Every other key deleted, then every fourth updated to a longer value: the leaves' first
    // keys among them (a few hundred leaves of about 30 entries).
    for i in (0..n).step_by(2) {
        db.delete(i.to_be_bytes()).expect("delete");
    }
    db.flush().expect("flush");
    for i in (1..n).step_by(4) {
        db.put(i.to_be_bytes(), [8u8; 200]).expect("put");
    }
    db.flush().expect("flush");
    let live = u64::from(n / 2);
    let r = db.check().expect("check");
    assert_eq!(r.live_keys, live, "{r:?}");
    assert_eq!(
        r.index_versions, live,
        "entries held beyond one per live key: {r:?}"
    );
    db.close().expect("close");
    // Reopened, the same tree reads back.
    let db = Db::open(dir.path(), opts).expect("reopen");
    for i in 0..n {
        let want: Option<Vec<u8>> = match (i % 2, i % 4) {
            (0, _) => None,
            (_, 1) => Some(vec![8u8; 200]),
            _ => Some(vec![7u8; 100]),
        };
        assert_eq!(db.get(i.to_be_bytes()).expect("get"), want, "key {i}");
    }
    assert_eq!(db.check().expect("check").index_versions, live);
}
