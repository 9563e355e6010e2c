//! A database overwritten generation by generation, without the write-ahead log, for the
//! manifest-damage tests (`stale_page_after_rollback`, `repair_keeps_the_newest_manifest_state`):
//! every key is written in each generation and each generation made durable, so that each
//! commit frees the pages of the one before and later work writes into them. The database then
//! holds exactly its index, and its manifest log is read record by record.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use woods::manifest::CURRENT_FILE;
use woods::storage::{FaultFs, Fs, OpenMode};
use woods::{Db, IndexKind, Options};

/// The kind's small options on `fs`, without the log or background threads.
pub fn options(kind: &IndexKind, fs: &FaultFs) -> Options {
    Options {
        wal: false,
        background_threads: 0,
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        ..super::small_options(kind)
    }
}

/// Key `i`.
pub fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Key `i`'s value in `generation`: it names both, and its length varies with `i`.
pub fn value(generation: u32, i: u32) -> Vec<u8> {
    let mut v = format!("gen{generation:02}-key{i:05}-").into_bytes();
    v.resize(60 + (i % 90) as usize, b'a' + (generation % 26) as u8);
    v
}

/// Creates `/db` on a fresh `FaultFs`, writes keys `0..keys` in generations `1..=generations`
/// (each made durable with `Db::flush`), and ends with a process kill (nothing more written).
pub fn build(kind: &IndexKind, keys: u32, generations: u32) -> (FaultFs, PathBuf) {
    let fs = FaultFs::new();
    let dir = PathBuf::from("/db");
    let db = Db::open(&dir, options(kind, &fs)).expect("create");
    for g in 1..=generations {
        for i in 0..keys {
            db.put(key(i), value(g, i)).expect("put");
        }
        db.flush().expect("flush");
    }
    fs.kill_process();
    drop(db);
    (fs, dir)
}

/// The manifest log `log`: (start, framed length, tag) of every record after its header.
pub fn records(fs: &FaultFs, log: &Path) -> Vec<(u64, u64, u8)> {
    let f = fs.open(log, OpenMode::default()).expect("open the log");
    let mut buf = vec![0u8; f.len().expect("len") as usize];
    f.read_exact_at(&mut buf, 0).expect("read the log");
    let mut out = Vec::new();
    let mut off = 32;
    while off + 8 < buf.len() {
        let len = u32::from_le_bytes(buf[off + 4..off + 8].try_into().expect("4 bytes")) as usize;
        out.push((off as u64, 8 + len as u64, buf[off + 8]));
        off += 8 + len;
    }
    out
}

/// The manifest log `CURRENT` names.
pub fn live_log(fs: &FaultFs, dir: &Path) -> PathBuf {
    let path = dir.join(CURRENT_FILE);
    let f = fs.open(&path, OpenMode::default()).expect("CURRENT");
    let mut buf = vec![0u8; f.len().expect("len") as usize];
    f.read_exact_at(&mut buf, 0).expect("read CURRENT");
    dir.join(String::from_utf8(buf).expect("utf-8").trim_end())
}
