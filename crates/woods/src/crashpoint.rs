//! Whitebox crash points, as RocksDB's kill points: named places in every commit protocol
//! (before and after each data sync, manifest append, `CURRENT` switch, log rotation, sync and
//! removal, extent release, hole punch, and the steps of recovery) where a test can stop the
//! process, to check that recovery from exactly there keeps every acknowledged write.
//!
//! `WOODS_CRASH_AT=NAME:N` makes the Nth visit of point `NAME` abort the process (`SIGABRT`: no
//! destructor runs and nothing more is written, while what was written stays in the OS, as after
//! `kill -9`). The variable is read once, at the first visit of any point; unset, a visit costs
//! one atomic load. `crates/woods/tests/crash_points.rs` visits every point of [`POINTS`] for
//! every index kind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Every crash point, in the order of the protocols they belong to.
pub const POINTS: &[&str] = &[
    // The write-ahead log.
    "wal.sync.before",
    "wal.sync.after",
    "wal.rotate.after",
    "wal.prepare.after",
    "wal.retire.after_remove",
    "wal.retire.after_dir_sync",
    // The data file.
    "data.sync.before",
    "data.sync.after",
    "alloc.release",
    "alloc.punch.after",
    // The manifest.
    "manifest.append.after_write",
    "manifest.append.after_sync",
    "manifest.rollover.after_log",
    "manifest.current.after_tmp",
    "manifest.current.after_rename",
    "manifest.rollover.after_current",
    // Opening: the log replayed into the index, its files about to go.
    "open.after_seal",
    "open.replay.after_flush",
];

struct Armed {
    name: String,
    left: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var("WOODS_CRASH_AT").ok()?;
            let (name, n) = spec.rsplit_once(':').unwrap_or((&spec, "1"));
            Some(Armed {
                name: name.to_string(),
                left: AtomicU64::new(n.parse().unwrap_or(1).max(1)),
            })
        })
        .as_ref()
}

/// A crash point: aborts the process here at the visit `WOODS_CRASH_AT` names.
#[inline]
pub fn point(name: &'static str) {
    debug_assert!(
        POINTS.contains(&name),
        "crash point {name} is not in POINTS"
    );
    if let Some(a) = armed() {
        if a.name == name && a.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            eprintln!("woods: stopped at crash point {name}");
            std::process::abort();
        }
    }
}
