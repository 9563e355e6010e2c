//! Regression (issue 17, the known gap of the corruption sweep): a flipped byte in a log record
//! that valid records follow ended recovery there without an error (point-in-time recovery),
//! silently dropping every acknowledged write after it. A crash cannot leave valid records
//! after a bad one (a record is appended only once the one before it is written whole), and a
//! power cut can only where the machine has restarted since the file was written. So an open
//! now refuses such a log written in this boot with `Error::Corruption` naming the file, the
//! offset and the records that follow; `Db::repair` recovers to the point before the damage and
//! reports what it dropped. A bad last record (a torn tail) still opens, and so does a hole
//! found after a power cut (the records after it were never synced, or a sync would have
//! covered the hole too).

mod common;

use std::path::{Path, PathBuf};

use common::wal_damage::{dir, key, options, present, records, WRITES};
use woods::storage::{FaultFs, Fs, OpenMode};
use woods::wal::{list_wal_files, wal_file_path, RECORD_HEADER_LEN};
use woods::{Db, Error};

/// `WRITES` puts (sequence numbers 1..=WRITES), all in the one log file, then a process kill.
fn build() -> (FaultFs, PathBuf) {
    let fs = FaultFs::new();
    let db = Db::open(dir(), options(&fs)).expect("create");
    for i in 1..=WRITES {
        db.put(key(i), vec![i as u8; 40]).expect("put");
    }
    drop(db);
    fs.kill_process();
    let files = list_wal_files(&fs, &dir()).expect("list");
    assert_eq!(files.len(), 1, "the writes fit one log file: {files:?}");
    (fs, wal_file_path(&dir(), files[0]))
}

/// The byte offsets where each record of the log file at `path` starts.
fn record_starts(fs: &FaultFs, path: &Path) -> Vec<u64> {
    records(fs, path).into_iter().map(|(off, _)| off).collect()
}

#[test]
fn a_damaged_record_that_valid_records_follow_is_refused_and_repair_recovers_before_it() {
    let (fs, path) = build();
    let starts = record_starts(&fs, &path);
    assert_eq!(starts.len() as u64, WRITES);
    // Record 51 (sequence number 51): a byte of its payload.
    assert!(fs.flip_byte(&path, starts[50] + RECORD_HEADER_LEN as u64 + 3));
    match Db::open(dir(), options(&fs)) {
        Err(Error::Corruption { what, detail, .. }) => {
            assert!(what.contains(&path.display().to_string()), "{what}");
            assert!(
                detail.contains(&format!("byte {}", starts[50]))
                    && detail.contains("99 valid record(s) follow")
                    && detail.contains("sequence numbers 51 to 150"),
                "{detail}"
            );
        }
        Err(e) => panic!("expected a corruption error, got {e}"),
        Ok(db) => panic!(
            "the open silently dropped {} acknowledged writes",
            WRITES - present(&db).len() as u64
        ),
    }
    let report = Db::repair(dir(), options(&fs)).expect("repair");
    assert_eq!(report.log_records_dropped, 99, "{report:?}");
    assert_eq!(report.lost_seqs, Some((51, 150)), "{report:?}");
    assert!(fs.exists(&PathBuf::from(format!("{}.old", path.display()))));
    let db = Db::open(dir(), options(&fs)).expect("open after repair");
    assert_eq!(present(&db), (1..=50).collect::<Vec<_>>());
    db.check().expect("check");
    db.close().expect("close");
    // Repaired once, the database has nothing left to repair.
    let again = Db::repair(dir(), options(&fs)).expect("repair again");
    assert_eq!(again.log_records_dropped, 0);
    assert_eq!(again.lost_seqs, None);
}

#[test]
fn a_damaged_last_record_is_a_torn_tail() {
    let (fs, path) = build();
    let starts = record_starts(&fs, &path);
    let last = *starts.last().expect("records");
    assert!(fs.flip_byte(&path, last + RECORD_HEADER_LEN as u64 + 1));
    let db = Db::open(dir(), options(&fs)).expect("a torn tail opens");
    assert_eq!(present(&db), (1..WRITES).collect::<Vec<_>>());
}

#[test]
fn after_a_power_cut_a_bad_record_with_valid_ones_after_it_is_point_in_time() {
    let (fs, path) = build();
    let starts = record_starts(&fs, &path);
    // Make the file durable as it is, then damage a record as a power cut would have (its
    // bytes lost), and restart the machine: the records after the hole were never synced
    // (a sync covering them would have covered it), so losing them is what a cut allows.
    let f = fs.open(&path, OpenMode::default()).expect("open");
    f.write_all_at(&[0u8; 8], starts[50]).expect("hole");
    f.sync().expect("sync");
    drop(f);
    fs.power_cut();
    let db = Db::open(dir(), options(&fs)).expect("opens at the hole");
    assert_eq!(present(&db), (1..=50).collect::<Vec<_>>());
}
