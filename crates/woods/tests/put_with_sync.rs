//! `Db::put_with`, `Db::delete_with` and `Db::merge_with` write one entry with the durability
//! asked for: a `Sync` write survives a killed process and a power cut once it is
//! acknowledged, and without the write-ahead log it is refused, as `write_with` refuses it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use woods::storage::{FaultFs, Fs};
use woods::{Db, Durability, Error, Options};

fn key(i: u64) -> Vec<u8> {
    format!("sync-{i:08}").into_bytes()
}

/// The child side of `put_with_sync_survives_a_process_kill`: writes keys with
/// `put_with(.., Sync)` and reports each acknowledgement on stdout until killed.
#[test]
fn put_with_child() {
    let Ok(dir) = std::env::var("WOODS_PUT_WITH_DIR") else {
        return; // only meaningful when spawned by the test below
    };
    let db = Db::open(&dir, common::small_options(&common::kind("lsm"))).expect("child open");
    let mut out = std::io::stdout().lock();
    for i in 0.. {
        db.put_with(key(i), i.to_le_bytes(), Durability::Sync)
            .expect("child put_with");
        writeln!(out, "ack {i}").expect("stdout");
        out.flush().expect("flush stdout");
    }
}

/// SIGKILL a child that writes with `put_with(.., Sync)`: every acknowledged write is there
/// after reopening.
#[test]
fn put_with_sync_survives_a_process_kill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "put_with_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WOODS_PUT_WITH_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let mut last = None;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(n) = line.strip_prefix("ack ") {
            let i: u64 = n.trim().parse().expect("ack number");
            last = Some(i);
            if i >= 200 {
                break;
            }
        }
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap child");
    let last = last.expect("the child acknowledged no write");
    let db = Db::open(dir.path(), common::small_options(&common::kind("lsm"))).expect("reopen");
    for i in 0..=last {
        assert_eq!(
            db.get(key(i)).expect("get"),
            Some(i.to_le_bytes().to_vec()),
            "acknowledged write {i} of {last} lost by the kill"
        );
    }
    db.close().expect("close");
}

/// A fault-injecting file system and the suite's small options for `kind` on it.
fn on_fault_fs(kind: &woods::IndexKind) -> (FaultFs, Options) {
    let fs = FaultFs::new();
    let opts = Options {
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        ..common::small_options(kind)
    };
    (fs, opts)
}

/// A power cut right after `put_with`, `delete_with` or `merge_with` with `Sync` keeps the
/// write, for every kind: each is the last write before its cut, and nothing else syncs the
/// log after it (no flush, no close). With `Buffered` instead, each of them is lost.
#[test]
fn sync_writes_of_one_entry_survive_a_power_cut() {
    for kind in common::kinds() {
        let name = kind.name();
        let (fs, opts) = on_fault_fs(&kind);
        let dir = Path::new("/db");
        let db = Db::open(dir, opts.clone()).expect("open");
        db.put("gone", "soon").expect("put");
        db.put("ctr", "a").expect("put");
        db.sync().expect("sync");
        type Write = fn(&Db) -> woods::Result<()>;
        type Read = fn(&Db) -> Option<Vec<u8>>;
        let steps: [(&str, Write, Read, Option<&[u8]>); 3] = [
            (
                "put_with",
                |db| db.put_with("k", "v", Durability::Sync),
                |db| db.get("k").expect("get"),
                Some(b"v"),
            ),
            (
                "delete_with",
                |db| db.delete_with("gone", Durability::Sync),
                |db| db.get("gone").expect("get"),
                None,
            ),
            (
                "merge_with",
                |db| db.merge_with("ctr", "b", Durability::Sync),
                |db| db.get("ctr").expect("get"),
                Some(b"ab"),
            ),
        ];
        let mut db = db;
        for (what, write, read, want) in steps {
            write(&db).unwrap_or_else(|e| panic!("{name}: {what}: {e}"));
            fs.power_cut();
            drop(db);
            db = Db::open(dir, opts.clone()).expect("reopen");
            assert_eq!(
                read(&db).as_deref(),
                want,
                "{name}: {what} lost by a power cut"
            );
        }
        db.close().expect("close");
    }
}

/// An empty batch written with `Sync` syncs the log: the `Buffered` writes before it survive a
/// power cut, for every kind (before, it returned at once and a power cut lost them: found by
/// the `db_model` fuzz target). With `Buffered` it syncs nothing.
#[test]
fn an_empty_sync_batch_makes_the_writes_before_it_durable() {
    for kind in common::kinds() {
        let name = kind.name();
        let (fs, opts) = on_fault_fs(&kind);
        let dir = Path::new("/db");
        let db = Db::open(dir, opts.clone()).expect("open");
        db.put("k0", vec![7u8; 12_032]).expect("put");
        db.put("k1", "v").expect("put");
        db.write_with(&woods::WriteBatch::new(), Durability::Sync)
            .expect("empty sync batch");
        db.put("k2", "lost").expect("put");
        db.write_with(&woods::WriteBatch::new(), Durability::Buffered)
            .expect("empty buffered batch");
        fs.power_cut();
        drop(db);
        let db = Db::open(dir, opts).expect("reopen");
        assert_eq!(
            db.get("k0").expect("get"),
            Some(vec![7u8; 12_032]),
            "{name}"
        );
        assert_eq!(
            db.get("k1").expect("get").as_deref(),
            Some(&b"v"[..]),
            "{name}"
        );
        assert_eq!(
            db.get("k2").expect("get"),
            None,
            "{name}: nothing synced k2"
        );
        db.close().expect("close");
    }
}

/// Without the log a `Sync` write of one entry is refused and not applied; a `Buffered` one
/// is applied.
#[test]
fn put_with_sync_needs_the_log() {
    let fs = FaultFs::new();
    let db = Db::open(
        Path::new("/db"),
        Options {
            wal: false,
            fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
            ..common::small_options(&common::kind("btree"))
        },
    )
    .expect("open");
    for r in [
        db.put_with("k", "v", Durability::Sync),
        db.delete_with("k", Durability::Sync),
        db.merge_with("k", "v", Durability::Sync),
    ] {
        match r {
            Err(Error::InvalidOption(m)) => assert!(m.contains("Options::wal"), "{m}"),
            other => panic!("a Sync write without the log: {other:?}"),
        }
    }
    assert_eq!(db.get("k").expect("get"), None);
    db.put_with("k", "v", Durability::Buffered)
        .expect("put_with Buffered");
    assert_eq!(db.get("k").expect("get"), Some(b"v".to_vec()));
    db.close().expect("close");
}
