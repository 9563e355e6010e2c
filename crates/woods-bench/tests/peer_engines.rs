//! The same small scenario against every peer adapter (feature `peers`), as the conformance
//! suite does for woods' index kinds: puts, overwrites and deletes from several threads, gets
//! and scans checked against a model, drain and close, then a reopen that must see the same
//! data. A tiny run through the bench's child process is in `child_runs.rs`, which runs every
//! engine this build knows.
#![cfg(feature = "peers")]

use std::collections::BTreeMap;
use std::path::Path;
use std::thread;

use woods_bench::engine::{self, known_engines, Engine, EngineConfig, PEER_ENGINES};
use woods_bench::metrics::ProcIo;

const KEYS: u64 = 2000;
const THREADS: u64 = 2;

fn key(i: u64) -> Vec<u8> {
    // 24 bytes like the bench's keys, ordered differently from i.
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes();
    [h, h, h].concat()
}

fn value(i: u64, round: u8) -> Vec<u8> {
    (0..100).map(|b| (i as u8) ^ b ^ round).collect()
}

fn cfg() -> EngineConfig {
    EngineConfig::new(2 << 20, true)
}

/// The model after the scenario: every key written, odd keys overwritten, every tenth deleted.
fn expected() -> BTreeMap<Vec<u8>, Vec<u8>> {
    (0..KEYS)
        .filter(|i| i % 10 != 0)
        .map(|i| (key(i), value(i, u8::from(i % 2 == 1))))
        .collect()
}

fn write_scenario(db: &dyn Engine) {
    // Two client threads on one shared engine, as with --threads 2.
    thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for i in (t..KEYS).step_by(THREADS as usize) {
                    db.put(&key(i), &value(i, 0)).unwrap();
                }
                for i in (t..KEYS).step_by(THREADS as usize) {
                    if i % 2 == 1 {
                        db.put(&key(i), &value(i, 1)).unwrap();
                    }
                    if i % 10 == 0 {
                        db.delete(&key(i)).unwrap();
                    }
                }
            });
        }
    });
}

fn check_reads(name: &str, db: &dyn Engine, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for i in 0..KEYS {
        let got = db.get(&key(i)).unwrap();
        assert_eq!(got.as_ref(), model.get(&key(i)), "{name}: get of key {i}");
    }
    assert_eq!(db.get(b"absent").unwrap(), None, "{name}: absent key");

    // Whole data set from the first key.
    let mut seen = Vec::new();
    let n = db
        .scan(&[], usize::MAX, &mut |k, v| {
            seen.push((k.to_vec(), v.to_vec()))
        })
        .unwrap();
    assert_eq!(n, model.len(), "{name}: full scan count");
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(seen, want, "{name}: full scan in key order");

    // A seek to an existing key, one to a deleted key, a limit, and a seek past the end.
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    let mut got = Vec::new();
    let n = db
        .scan(keys[100], 7, &mut |k, _| got.push(k.to_vec()))
        .unwrap();
    assert_eq!(n, 7, "{name}: limit");
    let want: Vec<Vec<u8>> = keys[100..107].iter().map(|k| k.to_vec()).collect();
    assert_eq!(got, want, "{name}: seek to a key");
    let deleted = key(10);
    let first_after = model
        .range(deleted.clone()..)
        .next()
        .map(|(k, _)| k.clone());
    let mut got = Vec::new();
    db.scan(&deleted, 1, &mut |k, _| got.push(k.to_vec()))
        .unwrap();
    assert_eq!(
        got.first().cloned(),
        first_after,
        "{name}: seek to a deleted key"
    );
    assert_eq!(
        db.scan(&[0xff; 32], 5, &mut |_, _| {}).unwrap(),
        0,
        "{name}: past the end"
    );
    assert_eq!(
        db.scan(&[], 0, &mut |_, _| {}).unwrap(),
        0,
        "{name}: limit 0"
    );
}

fn run(name: &str, dir: &Path) {
    let model = expected();
    let mut db = engine::open(name, dir, &cfg()).unwrap();
    assert_eq!(db.name(), name);
    assert!(
        !db.direct_io() || name == "rocksdb",
        "{name}: only RocksDB has direct I/O"
    );
    write_scenario(db.as_ref());
    check_reads(name, db.as_ref(), &model);
    db.drain().unwrap();
    let own = db.counters();
    if let (Some(all), Some(wal)) = (own.written, own.wal_written) {
        assert!(wal <= all, "{name}: WAL bytes within all written bytes");
    }
    if let Some(wal) = own.wal_written {
        if name == "leveldb" {
            // Every put and delete went through the log: at least its payload.
            assert!(wal >= (KEYS + KEYS / 2) * 124, "{name}: WAL bytes {wal}");
        }
    }
    db.close().unwrap();

    // Reopened (the way every bench phase starts), the data is all there.
    let db = engine::open(name, dir, &cfg()).unwrap();
    check_reads(name, db.as_ref(), &model);
    db.close().unwrap();
}

#[test]
fn every_peer_is_registered() {
    let known = known_engines();
    for p in PEER_ENGINES {
        assert!(known.iter().any(|k| k == p), "{p} missing from {known:?}");
        engine::check_name(p).unwrap();
    }
}

#[test]
fn rocksdb_passes_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    run("rocksdb", tmp.path());
}

#[test]
fn leveldb_passes_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    run("leveldb", tmp.path());
}

#[test]
fn lmdb_passes_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    run("lmdb", tmp.path());
}

#[test]
fn fjall_passes_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    run("fjall", tmp.path());
}

#[test]
fn redb_passes_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    run("redb", tmp.path());
}

#[test]
fn leveldb_drain_leaves_no_compaction_pending() {
    // Enough data for several memtables and a level-0 compaction with a 2 MiB budget.
    let tmp = tempfile::tempdir().unwrap();
    let mut db = engine::open("leveldb", tmp.path(), &cfg()).unwrap();
    for i in 0..40_000 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    db.drain().unwrap();
    db.close().unwrap();
    // After the drain the memtable is in a table: no log holds data that a reopen would have
    // to flush (and count against the next phase).
    let logs: u64 = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert_eq!(
        logs, 0,
        "the drain flushed the memtable; the current log is empty"
    );
}

/// Puts and deletes of one thread for the sync test.
const SYNCED_PUTS: u64 = 200;
const SYNCED_DELETES: u64 = 50;

/// Bytes the calling thread dirtied (`/proc/thread-self/io` `write_bytes`) while it put
/// [`SYNCED_PUTS`] records and deleted [`SYNCED_DELETES`] of them into a fresh `name` in
/// `dir`, with `--sync` or without; then checks the data survived a reopen.
fn thread_dirtied(name: &str, dir: &Path, sync: bool) -> u64 {
    let cfg = EngineConfig { sync, ..cfg() };
    let mut db = engine::open(name, dir, &cfg).unwrap();
    let before = ProcIo::this_thread().expect("no /proc/thread-self/io");
    for i in 0..SYNCED_PUTS {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    for i in 0..SYNCED_DELETES {
        db.delete(&key(i * 2)).unwrap();
    }
    let after = ProcIo::this_thread().unwrap();
    db.drain().unwrap();
    db.close().unwrap();
    let db = engine::open(name, dir, &cfg).unwrap();
    for i in 0..SYNCED_PUTS {
        let want = (i % 2 == 1 || i >= SYNCED_DELETES * 2).then(|| value(i, 0));
        assert_eq!(
            db.get(&key(i)).unwrap(),
            want,
            "{name} (sync {sync}): key {i}"
        );
    }
    db.close().unwrap();
    after.write_bytes - before.write_bytes
}

/// `--sync` makes every put and delete reach the device before it returns, in every peer. The
/// evidence is the kernel's own count of the pages the writing thread dirtied: a synced write
/// leaves the page it appended to (the log's, or the tree's and meta page's for LMDB and redb)
/// clean, so the next write dirties a whole page again, at least a page per write; unsynced,
/// the same writes append to pages that stay dirty, a few pages in all. The count is the
/// thread's, so neither other processes nor the engine's background threads add to it.
#[test]
fn sync_writes_reach_the_device_one_by_one() {
    let page = 4096;
    let writes = SYNCED_PUTS + SYNCED_DELETES;
    for name in PEER_ENGINES {
        let tmp = tempfile::tempdir().unwrap();
        let synced = thread_dirtied(name, &tmp.path().join("synced"), true);
        if synced == 0 {
            eprintln!("{name}: no page writes counted: the directory is on tmpfs; not checked");
            continue;
        }
        let unsynced = thread_dirtied(name, &tmp.path().join("unsynced"), false);
        assert!(
            synced >= writes * page,
            "{name}: {writes} synced writes dirtied only {synced} bytes"
        );
        assert!(
            unsynced < writes * page / 4,
            "{name}: {writes} unsynced writes dirtied {unsynced} bytes, as if synced"
        );
    }
}

/// `--no-wal`: RocksDB writes no log bytes and keeps every write through its flush at close;
/// LMDB and redb have no log anyway; LevelDB and fjall cannot run without theirs and refuse.
#[test]
fn no_wal_is_kept_or_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        no_wal: true,
        ..cfg()
    };
    for name in ["rocksdb", "lmdb", "redb"] {
        let dir = tmp.path().join(name);
        let db = engine::open(name, &dir, &cfg).unwrap();
        write_scenario(db.as_ref());
        let mut db = db;
        db.drain().unwrap();
        if let Some(wal) = db.counters().wal_written {
            assert_eq!(wal, 0, "{name}: {wal} log bytes without a log");
        }
        db.close().unwrap();
        let db = engine::open(name, &dir, &cfg).unwrap();
        check_reads(name, db.as_ref(), &expected());
        db.close().unwrap();
    }
    for name in ["leveldb", "fjall"] {
        let e = engine::open(name, &tmp.path().join(name), &cfg).err();
        assert!(
            e.is_some_and(|e| e.to_string().contains("--no-wal")),
            "{name} opened without its log"
        );
    }
}
