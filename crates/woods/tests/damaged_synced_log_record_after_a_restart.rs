//! Regression (issue 17, "still owed"): damage to a synced log record, in a log written before
//! the last restart, still ended recovery there without an error: across a restart a bad record
//! with valid ones after it may be a power cut's hole in the unsynced part of the log, and the
//! open could not tell which part the damage was in, so it dropped every write after it,
//! `Sync`-acknowledged ones included. The log now says how far it was synced: after each fsync
//! of the live file the writer appends a sync mark ("bytes before X were durable", WAL format
//! minor 2). A valid mark after the damage proves it lies in bytes synced before the mark was
//! written, which no power cut tears: the open is `Error::Corruption`, in any boot, and
//! `Db::repair` recovers to the point before the damage. A hole after the last mark is still a
//! power cut's and opens at the hole.

mod common;

use std::path::{Path, PathBuf};

use common::wal_damage::{dir, key, options, present, records, WRITES};
use woods::storage::FaultFs;
use woods::wal::{list_wal_files, wal_file_path, RECORD_HEADER_LEN};
use woods::{Db, Durability, Error};

/// Puts 1..=WRITES in one log file, writes 100 and 150 `Sync` (each fsync followed by a sync
/// mark, and the second fsync makes the first mark durable), then a power cut: the machine
/// restarts, and the file is of an earlier boot.
fn build() -> (FaultFs, PathBuf) {
    let fs = FaultFs::new();
    let db = Db::open(dir(), options(&fs)).expect("create");
    for i in 1..=WRITES {
        let d = if i == 100 || i == WRITES {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        db.put_with(key(i), vec![i as u8; 40], d).expect("put");
    }
    drop(db);
    fs.power_cut();
    // The writes fit one log file; a spare file prepared for the next rotation may come back
    // too (its removal at the drop was not synced), holding no record.
    let files = list_wal_files(&fs, &dir()).expect("list");
    assert!(files.len() <= 2, "{files:?}");
    (fs, wal_file_path(&dir(), files[0]))
}

/// The starts of the batches' records: a sync mark's payload is 24 bytes and starts with 12
/// zero bytes (an empty batch of sequence number 0), which no batch of these puts is.
fn batch_starts(fs: &FaultFs, path: &Path) -> Vec<u64> {
    records(fs, path)
        .into_iter()
        .filter(|&(_, len)| len != 24)
        .map(|(off, _)| off)
        .collect()
}

#[test]
fn damage_before_a_sync_mark_in_an_earlier_boots_log_is_refused_and_repaired() {
    let (fs, path) = build();
    let starts = batch_starts(&fs, &path);
    assert_eq!(
        starts.len() as u64,
        WRITES,
        "every write survived: two were Sync"
    );
    // Record 51, well before the mark that follows record 100.
    assert!(fs.flip_byte(&path, starts[50] + RECORD_HEADER_LEN as u64 + 3));
    match Db::open(dir(), options(&fs)) {
        Err(Error::Corruption { what, detail, .. }) => {
            assert!(what.contains(&path.display().to_string()), "{what}");
            assert!(
                detail.contains(&format!("byte {}", starts[50]))
                    && detail.contains("99 valid record(s) follow")
                    && detail.contains("sequence numbers 51 to 150")
                    && detail.contains("synced"),
                "{detail}"
            );
        }
        Err(e) => panic!("expected a corruption error, got {e}"),
        Ok(db) => panic!(
            "the open silently dropped {} writes, Sync-acknowledged ones among them",
            WRITES - present(&db).len() as u64
        ),
    }
    let report = Db::repair(dir(), options(&fs)).expect("repair");
    assert_eq!(report.log_records_dropped, 99, "{report:?}");
    assert_eq!(report.lost_seqs, Some((51, 150)), "{report:?}");
    let db = Db::open(dir(), options(&fs)).expect("open after repair");
    assert_eq!(present(&db), (1..=50).collect::<Vec<_>>());
    db.check().expect("check");
    db.close().expect("close");
}

#[test]
fn damage_after_the_last_durable_sync_mark_in_an_earlier_boots_log_is_a_power_cuts_hole() {
    let (fs, path) = build();
    let starts = batch_starts(&fs, &path);
    // Record 121: after the first mark (record 100's sync), and the second fsync covered it,
    // but its own mark was lost with the power cut: nothing in the file says it was synced.
    assert!(fs.flip_byte(&path, starts[120] + RECORD_HEADER_LEN as u64 + 3));
    let db = Db::open(dir(), options(&fs)).expect("opens at the hole");
    assert_eq!(present(&db), (1..=120).collect::<Vec<_>>());
    db.close().expect("close");
}
