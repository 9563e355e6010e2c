//! A `btree` whose deletes leave leaves under half full takes neighbouring leaves into them
//! (InnoDB's merge threshold: a leaf rewritten under half its fill target takes in the leaves
//! after it under the same parent while the whole fits the target), so that a tree that lost
//! most of its entries does not keep, and make every scan read, as many pages as before.
//!
//! Found by `woods bench aging` (issue 23): the aged tree's leaves held 2.8 entries a page
//! against the fresh copy's 7.7. Without the merges this test's tree keeps every one of its
//! leaves after seven keys in eight are deleted.

mod common;

use woods::Db;

#[test]
fn deleting_most_keys_frees_most_leaves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 20_000u32 * common::scale() as u32;
    let (db, opts) = common::btree_of_keys(dir.path(), n);
    let full = db.check().expect("check");
    assert_eq!(full.live_keys, u64::from(n));
    // Seven keys in eight deleted, spread over every leaf.
    for i in (0..n).filter(|i| i % 8 != 3) {
        db.delete(i.to_be_bytes()).expect("delete");
    }
    db.flush().expect("flush");
    let live = u64::from(n / 8);
    let thin = db.check().expect("check");
    assert_eq!(
        (thin.live_keys, thin.index_versions),
        (live, live),
        "{thin:?}"
    );
    let merges = db.stats().index.counters.get("leaf_merges").copied();
    assert!(merges.is_some_and(|m| m > 0), "leaves merged: {merges:?}");
    // An eighth of the entries in leaves at least half full would need under a quarter of the
    // pages; without merges the tree keeps all of them.
    assert!(
        thin.used_pages() * 10 < full.used_pages() * 3,
        "{} pages in use for {live} keys, {} for {n} ({merges:?} leaves merged)",
        thin.used_pages(),
        full.used_pages()
    );
    db.close().expect("close");
    let db = Db::open(dir.path(), opts).expect("reopen");
    for i in 0..n {
        let want = (i % 8 == 3).then(|| vec![7u8; 100]);
        assert_eq!(db.get(i.to_be_bytes()).expect("get"), want, "key {i}");
    }
    let keys: Vec<u32> = db
        .iter()
        .expect("iter")
        .map(|r| {
            let (k, _) = r.expect("entry");
            u32::from_be_bytes(k[..].try_into().expect("4-byte key"))
        })
        .collect();
    assert_eq!(keys, (0..n).filter(|i| i % 8 == 3).collect::<Vec<_>>());
    assert_eq!(db.check().expect("check").index_versions, live);
}
