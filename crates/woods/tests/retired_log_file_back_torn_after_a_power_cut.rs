//! Regression (issue 17, item 4): Sync-acknowledged writes could be lost on a power cut.
//! Retiring a log file (its memtable durable in the index) removed it without a directory fsync,
//! so a power cut could bring the file back, its name kept and its never-synced contents torn;
//! replay then stopped at the tear and deleted every later log file, Sync-acknowledged records
//! included. Now the removal is made durable, and a tear in a log file that is not the last
//! ends that file only: the sequence numbers decide what continues the log.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use woods::storage::{FaultFs, Fs, OpenMode};
use woods::wal::{wal_file_path, WAL_FORMAT_MAJOR, WAL_MAGIC};
use woods::{Db, Durability, IndexKind, Options, WriteBatch};

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn options(fs: &FaultFs, kind: &IndexKind) -> Options {
    Options {
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        // No background thread: nothing else syncs the directory (a thread preparing the next
        // log file would), so the test sees exactly what retirement makes durable.
        background_threads: 0,
        ..common::small_options(kind)
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:05}").into_bytes()
}

/// Writes 300 buffered records into the first log file, flushes them into the index (which
/// retires that file), then 50 Sync-acknowledged records into the second file. Returns the
/// first file's number.
fn write_and_retire(db: &Db) -> u64 {
    for i in 0..300 {
        db.put(key(i), b"buffered").expect("put");
    }
    db.flush().expect("flush");
    for i in 300..350 {
        let mut b = WriteBatch::new();
        b.put(key(i), b"synced");
        db.write_with(&b, Durability::Sync).expect("sync write");
    }
    1
}

fn check_all_present(db: &Db, name: &str) {
    for i in 0..350 {
        let want: &[u8] = if i < 300 { b"buffered" } else { b"synced" };
        assert_eq!(
            db.get(key(i)).expect("get").as_deref(),
            Some(want),
            "{name}: record {i} lost"
        );
    }
}

#[test]
fn a_retired_log_file_does_not_come_back_after_a_power_cut() {
    for kind in common::kinds() {
        let name = kind.name();
        let fs = FaultFs::new();
        let db = Db::open(dir(), options(&fs, &kind)).expect("open");
        let retired = write_and_retire(&db);
        assert!(
            !fs.exists(&wal_file_path(&dir(), retired)),
            "{name}: the flush did not retire the first log file"
        );
        fs.power_cut();
        drop(db);
        assert!(
            !fs.exists(&wal_file_path(&dir(), retired)),
            "{name}: the retired log file came back after a power cut"
        );
        let db = Db::open(dir(), options(&fs, &kind)).expect("reopen");
        check_all_present(&db, name);
    }
}

/// The older file, back with a torn record (as when the OS wrote back part of it), must not
/// hide the Sync-acknowledged records of the file after it.
#[test]
fn a_torn_older_log_file_does_not_hide_synced_records_after_it() {
    for kind in common::kinds() {
        let name = kind.name();
        let fs = FaultFs::new();
        let db = Db::open(dir(), options(&fs, &kind)).expect("open");
        let retired = write_and_retire(&db);
        fs.power_cut();
        drop(db);
        let path = wal_file_path(&dir(), retired);
        let f = fs
            .open(
                &path,
                OpenMode {
                    create: true,
                    direct: false,
                },
            )
            .expect("recreate");
        let mut bytes = WAL_MAGIC.to_vec();
        bytes.extend_from_slice(&WAL_FORMAT_MAJOR.to_le_bytes());
        bytes.extend_from_slice(&[0; 6]);
        bytes.extend_from_slice(&0xdead_beef_u32.to_le_bytes()); // a wrong checksum
        bytes.extend_from_slice(&20u32.to_le_bytes());
        bytes.extend_from_slice(&[0xab; 12]); // and a short payload
        f.write_all_at(&bytes, 0).expect("write torn file");
        f.sync().expect("sync");
        fs.sync_dir(&dir()).expect("sync dir");
        drop(f);
        let db = Db::open(dir(), options(&fs, &kind)).expect("reopen");
        check_all_present(&db, name);
        db.check().expect("check");
        db.close().expect("close");
        // And again: what open made of the torn file is durable and replays the same.
        fs.power_cut();
        let db = Db::open(dir(), options(&fs, &kind)).expect("reopen twice");
        check_all_present(&db, name);
    }
}
