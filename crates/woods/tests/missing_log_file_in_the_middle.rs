//! Regression (issue 17, "still owed"): a log file missing in the middle of the log ended
//! recovery without an error. With `wal-N+1.log` gone while `wal-N.log` and `wal-N+2.log` are
//! there, and the records the index still needed lost with it, the open stopped at the gap in
//! sequence numbers and silently dropped every acknowledged write after it. No crash or power
//! cut removes a log file whose records the index does not hold (a file's name is durable
//! before its first record, and a retired file is removed only once its records are durable in
//! the index), so the open now refuses with `Error::Corruption` naming the missing file and the
//! sequence numbers at stake; `Db::repair` recovers to the point before the gap and reports
//! what it dropped. Absent file numbers whose records the index holds, or that the sequence
//! numbers pass over without a gap, still open.

mod common;

use std::ops::Range;
use std::path::PathBuf;

use common::wal_damage::{dir, key, options, present, read, WRITES};
use woods::storage::{FaultFs, Fs, OpenMode};
use woods::wal::{list_wal_files, wal_file_path, RECORD_HEADER_LEN, WAL_HEADER_LEN};
use woods::{Db, Error};

/// The log file's header and its records' bytes, one slice a record.
fn records(buf: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut out = Vec::new();
    let mut off = WAL_HEADER_LEN;
    while off + RECORD_HEADER_LEN <= buf.len() {
        let len = u32::from_le_bytes(buf[off + 4..off + 8].try_into().expect("4")) as usize;
        if len == 0 {
            break;
        }
        out.push(buf[off..off + RECORD_HEADER_LEN + len].to_vec());
        off += RECORD_HEADER_LEN + len;
    }
    (buf[..WAL_HEADER_LEN].to_vec(), out)
}

/// Writes log file `number` holding the header and `recs`, synced.
fn write_log(fs: &FaultFs, number: u64, header: &[u8], recs: &[Vec<u8>]) {
    let f = fs
        .open(
            &wal_file_path(&dir(), number),
            OpenMode {
                create: true,
                direct: false,
            },
        )
        .expect("create");
    f.set_len(0).expect("truncate");
    let mut bytes = header.to_vec();
    for r in recs {
        bytes.extend_from_slice(r);
    }
    f.write_all_at(&bytes, 0).expect("write");
    f.sync().expect("sync");
}

/// `WRITES` puts (sequence numbers 1..=WRITES) in one log file, a process kill, then the file's
/// records dealt out to files `n + offset` as `layout` says (`n` the original's number).
fn build(layout: &[(u64, Range<usize>)]) -> (FaultFs, u64) {
    let fs = FaultFs::new();
    let db = Db::open(dir(), options(&fs)).expect("create");
    for i in 1..=WRITES {
        db.put(key(i), vec![i as u8; 40]).expect("put");
    }
    drop(db);
    fs.kill_process();
    let files = list_wal_files(&fs, &dir()).expect("list");
    assert_eq!(files.len(), 1, "the writes fit one log file: {files:?}");
    let n = files[0];
    let (header, recs) = records(&read(&fs, &wal_file_path(&dir(), n)));
    assert_eq!(recs.len() as u64, WRITES);
    fs.remove(&wal_file_path(&dir(), n)).expect("remove");
    for (offset, range) in layout {
        write_log(&fs, n + offset, &header, &recs[range.clone()]);
    }
    fs.sync_dir(&dir()).expect("sync dir");
    (fs, n)
}

#[test]
fn a_missing_log_file_whose_records_the_index_needs_is_refused_and_repair_recovers_before_it() {
    // wal-n: 1..=50, wal-n+1: 51..=100 (then removed), wal-n+2: 101..=150.
    let (fs, n) = build(&[(0, 0..50), (1, 50..100), (2, 100..150)]);
    let missing = wal_file_path(&dir(), n + 1);
    fs.remove(&missing).expect("remove the middle file");
    match Db::open(dir(), options(&fs)) {
        Err(Error::Corruption { what, detail, .. }) => {
            assert!(what.contains(&missing.display().to_string()), "{what}");
            assert!(
                detail.contains("sequence numbers 51 to 100")
                    && detail.contains("50 record(s)")
                    && detail.contains("sequence numbers 101 to 150")
                    && detail.contains("sequence numbers 51 to 150 in all")
                    && detail.contains("missing"),
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
    assert_eq!(report.log_records_dropped, 50, "{report:?}");
    assert_eq!(report.lost_seqs, Some((51, 150)), "{report:?}");
    let after = wal_file_path(&dir(), n + 2);
    assert!(fs.exists(&PathBuf::from(format!("{}.old", after.display()))));
    let db = Db::open(dir(), options(&fs)).expect("open after repair");
    assert_eq!(present(&db), (1..=50).collect::<Vec<_>>());
    db.check().expect("check");
    db.close().expect("close");
    let again = Db::repair(dir(), options(&fs)).expect("repair again");
    assert_eq!(again.log_records_dropped, 0);
    assert_eq!(again.lost_seqs, None);
}

#[test]
fn absent_file_numbers_the_sequence_numbers_pass_over_still_open() {
    // wal-n: 1..=50, wal-n+2: 51..=100, wal-n+4: 101..=150: numbers n+1 and n+3 absent, the
    // records continuing each other across them.
    let (fs, _) = build(&[(0, 0..50), (2, 50..100), (4, 100..150)]);
    let db = Db::open(dir(), options(&fs)).expect("open");
    assert_eq!(present(&db), (1..=WRITES).collect::<Vec<_>>());
    db.check().expect("check");
    db.close().expect("close");
}

#[test]
fn a_retired_file_whose_records_the_index_holds_may_be_gone() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), options(&fs)).expect("create");
    for i in 1..=50 {
        db.put(key(i), vec![i as u8; 40]).expect("put");
    }
    let first = list_wal_files(&fs, &dir()).expect("list");
    let (header, early) = records(&read(&fs, &wal_file_path(&dir(), first[0])));
    assert_eq!(early.len(), 50);
    // Durable in the index, its log retired.
    db.flush().expect("flush");
    for i in 51..=WRITES {
        db.put(key(i), vec![i as u8; 40]).expect("put");
    }
    drop(db);
    fs.kill_process();
    let live = list_wal_files(&fs, &dir()).expect("list");
    let m = *live.last().expect("a live log");
    let (_, late) = records(&read(&fs, &wal_file_path(&dir(), m)));
    assert_eq!(late.len() as u64, WRITES - 50);
    // The durable records back at m (a retired file found again), then m+1 absent, the log
    // resuming at m+2 with the first write the index does not hold.
    fs.remove(&wal_file_path(&dir(), m)).expect("remove");
    write_log(&fs, m, &header, &early);
    write_log(&fs, m + 2, &header, &late);
    fs.sync_dir(&dir()).expect("sync dir");
    let db = Db::open(dir(), options(&fs)).expect("open");
    assert_eq!(present(&db), (1..=WRITES).collect::<Vec<_>>());
    db.close().expect("close");
}

#[test]
fn a_gap_with_every_file_there_is_a_power_cut_hole_and_recovery_stops_there() {
    // wal-n+1 holds no record (a file from before a restart whose unsynced records a power cut
    // lost): every number is there, so the gap is no missing file, and the open stops at it.
    let (fs, _) = build(&[(0, 0..50), (1, 50..50), (2, 100..150)]);
    let db = Db::open(dir(), options(&fs)).expect("open");
    assert_eq!(present(&db), (1..=50).collect::<Vec<_>>());
    db.close().expect("close");
}
