//! Direct I/O is in effect for the data file wherever it is asked for and the file system can
//! do it, and where it cannot, the fallback to buffered I/O is visible
//! (`Db::direct_io_fallback`) rather than silent. Whether a file system can is probed here as
//! woods decides it: by opening a file with `O_DIRECT`. `Stats::direct_io` reads the flag back
//! from the kernel: with the flag dropped from the open, the first test fails.

mod common;

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use woods::storage::{FaultFs, Fs};
use woods::{Db, Options};

/// Whether the file system of `dir` lets a file be opened with `O_DIRECT` (tmpfs refused it
/// before Linux 6.6).
fn o_direct_works(dir: &Path) -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(dir.join("probe"))
        .is_ok()
}

/// Opens a database in `dir` with `direct_io`, checks that it reads and writes, and returns
/// (`Stats::direct_io`, `Db::direct_io_fallback`).
fn io_in_effect(dir: &Path, direct_io: bool) -> (bool, bool) {
    let db = Db::open(
        dir,
        Options {
            direct_io,
            ..common::small_options(&common::kind("btree"))
        },
    )
    .expect("open");
    for i in 0..500u32 {
        db.put(format!("key-{i:03}"), [7u8; 200]).expect("put");
    }
    db.flush().expect("flush");
    assert_eq!(db.get("key-123").expect("get"), Some(vec![7u8; 200]));
    let got = (db.stats().direct_io, db.direct_io_fallback());
    db.close().expect("close");
    got
}

/// On the file system of the temporary directory: direct I/O exactly when asked for and
/// `O_DIRECT` works there, and a fallback reported exactly when asked for and it does not.
#[test]
fn direct_io_is_in_effect_where_requested_and_possible() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let works = o_direct_works(tmp.path());
    println!("O_DIRECT on {}: {works}", tmp.path().display());
    assert_eq!(
        io_in_effect(&tmp.path().join("direct"), true),
        (works, !works),
        "asked for direct I/O (O_DIRECT works: {works})"
    );
    assert_eq!(
        io_in_effect(&tmp.path().join("buffered"), false),
        (false, false),
        "asked for buffered I/O"
    );
}

/// Where the file system refuses `O_DIRECT`, the database still opens, buffered, and says it
/// fell back: on tmpfs (`/dev/shm`) where its kernel refuses `O_DIRECT` there (before Linux
/// 6.6), and always on the in-memory test file system, which has no direct I/O.
#[test]
fn a_refused_direct_io_is_reported() {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(tmp) = tempfile::tempdir_in(shm) {
            let works = o_direct_works(tmp.path());
            println!("O_DIRECT on {}: {works}", tmp.path().display());
            if !works {
                assert_eq!(io_in_effect(&tmp.path().join("db"), true), (false, true));
            }
        }
    }
    let fs: Arc<dyn Fs> = Arc::new(FaultFs::new());
    for (direct_io, fallback) in [(true, true), (false, false)] {
        let db = Db::open(
            "/db",
            Options {
                direct_io,
                fs: Some(fs.clone()),
                ..common::small_options(&common::kind("lsm"))
            },
        )
        .expect("open");
        assert!(!db.stats().direct_io);
        assert_eq!(db.direct_io_fallback(), fallback, "direct_io {direct_io}");
        db.close().expect("close");
    }
}
