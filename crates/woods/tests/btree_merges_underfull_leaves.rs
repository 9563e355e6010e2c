//! A `btree` whose deletes leave leaves under half full takes neighbouring leaves into them
//! (InnoDB's merge threshold: a leaf rewritten under half its fill target takes in the leaves
//! after it under the same parent while the whole fits the target), so that a tree that lost
//! most of its entries does not keep, and make every scan read, as many pages as before.
//!
//! Found by `woods bench aging` (issue 23): the aged tree's leaves held 2.8 entries a page
//! against the fresh copy's 7.7. Without the merges this test's tree keeps every one of its
//! leaves after seven keys in eight are deleted.

mod common;

use std::collections::BTreeMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
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

/// Merges under a snapshot that keeps older versions across leaf boundaries, in the plain and
/// the buffered tree under every policy (whose bins must follow the leaves taken in): waves of
/// deletes thin the tree out and updates rewrite what is left, and after each wave the tree
/// checks, the snapshot reads the state it was taken at, and the database reads the model.
#[test]
fn merges_keep_a_snapshots_versions_and_the_buffers_bins() {
    let mut kinds = vec![common::kind("btree")];
    kinds.extend(common::buffered_kinds());
    for kind in kinds {
        let name = kind.name();
        let seed = common::seed(&format!("merges under a snapshot [{name}]"));
        let mut rng = SmallRng::seed_from_u64(seed);
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), common::small_options(&kind)).expect("open");
        let n = 6_000u32 * common::scale() as u32;
        let mut model: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        for i in 0..n {
            let v = vec![b'a'; 60 + (i % 40) as usize];
            db.put(i.to_be_bytes(), &v).expect("put");
            model.insert(i, v);
        }
        db.flush().expect("flush");
        let snap = db.snapshot();
        let at_snap = model.clone();
        for wave in 0..4u8 {
            for i in 0..n {
                match rng.gen_range(0..8) {
                    0..=3 => {
                        db.delete(i.to_be_bytes()).expect("delete");
                        model.remove(&i);
                    }
                    4 if model.contains_key(&i) => {
                        let v = vec![b'b' + wave; 20 + (i % 90) as usize];
                        db.put(i.to_be_bytes(), &v).expect("put");
                        model.insert(i, v);
                    }
                    _ => {}
                }
            }
            db.flush().expect("flush");
            db.check()
                .unwrap_or_else(|e| panic!("{name} wave {wave}: {e}"));
            let now: Vec<(u32, Vec<u8>)> = db
                .iter()
                .expect("iter")
                .map(|r| {
                    let (k, v) = r.expect("entry");
                    (u32::from_be_bytes(k[..].try_into().expect("key")), v)
                })
                .collect();
            let want: Vec<(u32, Vec<u8>)> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
            assert!(
                now == want,
                "{name} wave {wave}: the database differs from the model"
            );
            for i in (0..n).step_by(7) {
                let got = snap.get(i.to_be_bytes()).expect("snapshot get");
                assert_eq!(got.as_ref(), at_snap.get(&i), "{name} wave {wave}: key {i}");
            }
        }
        let merges = db.stats().index.counters.get("leaf_merges").copied();
        assert!(
            merges.is_some_and(|m| m > 0),
            "{name}: leaves merged {merges:?}"
        );
        drop(snap);
        db.close().expect("close");
    }
}
