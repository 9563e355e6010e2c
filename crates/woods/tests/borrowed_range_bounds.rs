//! `Db::range`, `Db::range_rev` and `Snapshot::range` take borrowed bounds (`&[u8]`, `&str`)
//! as well as owned ones (`Vec<u8>`), and every form reads the same entries, from the
//! memtable and from the index alike. Until issue 18 the bounds had to be `Vec<u8>`:
//! `db.range(key.as_slice()..)` did not compile.

mod common;

use std::ops::Bound;

use woods::{Db, Result};

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn collect(it: Result<woods::DbIter>) -> Pairs {
    it.expect("range").map(|r| r.expect("scan")).collect()
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

/// Keys k0000..k0299: the even ones flushed into the index, the odd ones in the memtable.
fn filled(kind: &woods::IndexKind, dir: &std::path::Path) -> Db {
    let db = Db::open(dir, common::small_options(kind)).expect("open");
    for i in (0..300).step_by(2) {
        db.put(key(i), i.to_le_bytes()).expect("put");
    }
    db.flush().expect("flush");
    for i in (1..300).step_by(2) {
        db.put(key(i), i.to_le_bytes()).expect("put");
    }
    db
}

fn expect(lo: u32, hi: u32) -> Pairs {
    (lo..hi)
        .map(|i| (key(i), i.to_le_bytes().to_vec()))
        .collect()
}

#[test]
fn borrowed_and_owned_bounds_read_the_same_entries() {
    // Point-only kinds (boa) refuse range scans; conformance checks their typed error.
    for kind in common::kinds().into_iter().filter(|k| k.ordered()) {
        let name = kind.name();
        let dir = tempfile::tempdir().expect("tempdir");
        let db = filled(&kind, dir.path());
        let from = key(100);
        let to = key(110);

        // Borrowed: a slice, a byte string as a slice, text.
        assert_eq!(
            collect(db.range(from.as_slice()..)),
            expect(100, 300),
            "{name}"
        );
        assert_eq!(
            collect(db.range(from.as_slice()..to.as_slice())),
            expect(100, 110),
            "{name}"
        );
        assert_eq!(
            collect(db.range(b"k0100".as_slice()..b"k0110")),
            expect(100, 110),
            "{name}"
        );
        assert_eq!(
            collect(db.range("k0100".."k0110")),
            expect(100, 110),
            "{name}"
        );
        assert_eq!(
            collect(db.range("k0100"..="k0110")),
            expect(100, 111),
            "{name}"
        );
        assert_eq!(collect(db.range(..="k0003")), expect(0, 4), "{name}");
        // Owned, as before: a range of `Vec<u8>` and a pair of owned bounds.
        assert_eq!(
            collect(db.range(from.clone()..to.clone())),
            expect(100, 110),
            "{name}"
        );
        assert_eq!(
            collect(db.range((Bound::Excluded(from.clone()), Bound::Included(to.clone())))),
            expect(101, 111),
            "{name}"
        );

        // Descending, and "from this key, the next n".
        let mut rev = expect(100, 110);
        rev.reverse();
        assert_eq!(
            collect(db.range_rev(from.as_slice()..to.as_slice())),
            rev,
            "{name}"
        );
        let next5: Pairs = db
            .range(key(250).as_slice()..)
            .expect("range")
            .take(5)
            .map(|r| r.expect("scan"))
            .collect();
        assert_eq!(next5, expect(250, 255), "{name}");

        // The whole key space: `iter` and `iter_rev` (a bare `..` names no key type).
        assert_eq!(collect(db.iter()), expect(0, 300), "{name}");
        let mut all_rev = expect(0, 300);
        all_rev.reverse();
        assert_eq!(collect(db.iter_rev()), all_rev, "{name}");

        // A snapshot reads borrowed bounds at its own point in time.
        let snap = db.snapshot();
        db.delete(key(105)).expect("delete");
        db.put(key(107), b"new").expect("put");
        assert_eq!(
            collect(snap.range(from.as_slice()..to.as_slice())),
            expect(100, 110),
            "{name}: snapshot"
        );
        assert_eq!(collect(snap.iter()).len(), 300, "{name}: snapshot iter");
        assert_eq!(
            collect(snap.iter_rev()).len(),
            300,
            "{name}: snapshot iter_rev"
        );
        let now = collect(db.range("k0104".."k0108"));
        let want: Pairs = vec![
            (key(104), 104u32.to_le_bytes().to_vec()),
            (key(106), 106u32.to_le_bytes().to_vec()),
            (key(107), b"new".to_vec()),
        ];
        assert_eq!(now, want, "{name}: after the writes");
        drop(snap);
        db.close().expect("close");
    }
}
