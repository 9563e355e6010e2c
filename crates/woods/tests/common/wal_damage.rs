//! Shared pieces of the tests that damage or remove log files (`damaged_log_record_is_not_a_torn_tail`,
//! `damaged_synced_log_record_after_a_restart`, `missing_log_file_in_the_middle`): an `lsm`
//! database in `/db` on a `FaultFs`, keys `key00001`.., and the log's records read back.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use woods::storage::{FaultFs, Fs, OpenMode};
use woods::wal::{RECORD_HEADER_LEN, WAL_HEADER_LEN};
use woods::{Db, IndexKind, Options};

/// Puts each test writes (sequence numbers 1..=WRITES).
pub const WRITES: u64 = 150;

/// The database's directory.
pub fn dir() -> PathBuf {
    PathBuf::from("/db")
}

/// `lsm`'s small options on `fs`.
pub fn options(fs: &FaultFs) -> Options {
    Options {
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        ..super::small_options(&IndexKind::from_name("lsm").expect("kind"))
    }
}

/// Key `i`.
pub fn key(i: u64) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// The whole file at `path`.
pub fn read(fs: &FaultFs, path: &Path) -> Vec<u8> {
    let f = fs.open(path, OpenMode::default()).expect("open");
    let mut buf = vec![0u8; f.len().expect("len") as usize];
    f.read_exact_at(&mut buf, 0).expect("read");
    buf
}

/// Where each record of the log file at `path` starts, and its payload's length (sync marks
/// included), up to the first zero length.
pub fn records(fs: &FaultFs, path: &Path) -> Vec<(u64, usize)> {
    let buf = read(fs, path);
    let mut out = Vec::new();
    let mut off = WAL_HEADER_LEN;
    while off + RECORD_HEADER_LEN <= buf.len() {
        let len = u32::from_le_bytes(buf[off + 4..off + 8].try_into().expect("4")) as usize;
        if len == 0 {
            break;
        }
        out.push((off as u64, len));
        off += RECORD_HEADER_LEN + len;
    }
    out
}

/// The keys `1..=WRITES` the database holds.
pub fn present(db: &Db) -> Vec<u64> {
    (1..=WRITES)
        .filter(|&i| db.get(key(i)).expect("get").is_some())
        .collect()
}
