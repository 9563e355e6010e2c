//! A new database is created only with an index kind: `Options::index` `None` means "the kind
//! the database has", and on a directory holding no database it is `Error::InvalidOption`
//! naming the kinds, with nothing created. Until issue 18 it silently created an `lsm`
//! database, so that a program meaning to reopen one in the wrong directory got an empty
//! database of a kind it never chose.

mod common;

use woods::{Db, Error, IndexKind, Options};

fn assert_names_the_kinds(r: woods::Result<Db>, what: &str) {
    match r {
        Err(Error::InvalidOption(msg)) => {
            for k in IndexKind::all() {
                assert!(msg.contains(k.name()), "{what}: {msg:?} lacks {}", k.name());
            }
            assert!(msg.contains("Options::index"), "{what}: {msg:?}");
        }
        Err(e) => panic!("{what}: expected InvalidOption, got {e}"),
        Ok(_) => panic!("{what}: a database was created without an index kind"),
    }
}

#[test]
fn a_new_database_without_an_index_kind_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // A directory that does not exist: not even the directory is made.
    let missing = tmp.path().join("missing");
    assert_names_the_kinds(Db::open(&missing, Options::default()), "missing directory");
    assert!(!missing.exists(), "the directory was created");
    // An empty directory: no database files appear in it.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    assert_names_the_kinds(Db::open(&empty, Options::default()), "empty directory");
    assert!(!empty.join(woods::manifest::CURRENT_FILE).exists());
    assert!(!empty.join(woods::db::DATA_FILE).exists());
    // Named, the same directory becomes a database of that kind.
    let btree = IndexKind::from_name("btree").expect("btree");
    let db = Db::open(&empty, Options::with_index(btree.clone())).expect("create");
    db.put("k", "v").expect("put");
    db.close().expect("close");
}

#[test]
fn an_existing_database_opens_with_its_own_kind() {
    for kind in common::kinds() {
        let name = kind.name();
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::with_index(kind.clone())).expect("create");
        db.put("k", "v").expect("put");
        db.close().expect("close");
        let db = Db::open(dir.path(), Options::default()).expect("reopen without a kind");
        assert_eq!(db.index_kind(), kind, "{name}");
        assert_eq!(db.get("k").expect("get"), Some(b"v".to_vec()), "{name}");
        db.close().expect("close");
        let other = IndexKind::all()
            .into_iter()
            .find(|k| k.name() != name)
            .expect("another kind");
        match Db::open(dir.path(), Options::with_index(other)) {
            Err(Error::OptionsMismatch { option, .. }) => assert_eq!(option, "index", "{name}"),
            Err(e) => panic!("{name}: expected OptionsMismatch, got {e}"),
            Ok(_) => panic!("{name}: opened with another kind"),
        }
    }
}
