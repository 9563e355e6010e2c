//! A closed or dropped `Db` leaves no thread of woods' behind.
//!
//! Found by the `db_model` fuzz target with LeakSanitizer on: the page file's `woods-io`
//! threads were never joined, so after the last `Db` was gone they were still exiting (std's
//! per-thread channel state and glibc's thread-exit state reported as leaks). The page file's
//! I/O queue now joins them when it is dropped. This test lists the process's threads right
//! after each drop; before the fix it found `woods-io` threads there.
//!
//! A joined thread can still be listed for a moment: `pthread_join` returns when the kernel
//! clears the thread's id, early in its exit, and the thread leaves `/proc/self/task` only at the
//! end of that exit. Such a thread has left user space (no destructor of its runs any more, so
//! it holds nothing LeakSanitizer could report) and the kernel marks it exiting (`PF_EXITING` in
//! its flags) before the join can return; the listing leaves it out. A thread never joined is
//! still in user space right after the drop (running its destructors, or waiting on a queue) and
//! is listed. CI met such a lingering `woods-io` once (fdtree, closed) in many runs.
//!
//! One test in its own binary: other tests' databases would have threads of their own.
//! `woods-reader-*` threads are excluded: they are one pool for the whole process
//! (`merge::prime`), started once and shared by every database, not a database's threads.

mod common;

use std::sync::Arc;

use woods::storage::{FaultFs, Fs};
use woods::{Db, Options};

/// The kernel's flag for a task in its exit path (`PF_EXITING`, include/linux/sched.h).
const PF_EXITING: u64 = 0x4;

/// Whether the thread listed at `task` (a `/proc/self/task/TID` directory) is in the kernel's
/// exit path. Its `stat` is `TID (COMM) STATE PPID PGRP SESSION TTY TPGID FLAGS ...`; the name
/// may hold spaces and parentheses, so the fields are counted after the last `)`.
fn exiting(task: &std::path::Path) -> bool {
    let Ok(stat) = std::fs::read_to_string(task.join("stat")) else {
        return true; // gone between the listing and the read
    };
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    stat[close + 1..]
        .split_whitespace()
        .nth(6)
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0)
}

/// The names of this process's threads that belong to a database: the Db's `woods-bg-N`, the
/// page file's `woods-io`, an index's `KIND-commit`. A thread already in the kernel's exit path
/// is left out (see the module's comment).
fn database_threads() -> Vec<String> {
    let mut names = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return names;
    };
    for t in tasks.flatten() {
        // A thread may end between the listing and the read: then it is not there.
        if let Ok(comm) = std::fs::read_to_string(t.path().join("comm")) {
            let name = comm.trim_end().to_string();
            let ours = name.starts_with("woods") && !name.starts_with("woods-reader");
            // An index's committer thread: `fdtree-commit`, `nbtree-commit`, `stbe-commit`...
            if (ours || name.ends_with("-commit")) && !exiting(&t.path()) {
                names.push(name);
            }
        }
    }
    names.sort();
    names
}

/// Writes enough that the index builds runs or nodes on its I/O threads, and reads them back.
fn exercise(db: &Db, name: &str) {
    let value = vec![7u8; 300];
    for i in 0..1500u32 {
        db.put(format!("key{i:06}"), &value).expect("put");
    }
    db.flush().expect("flush");
    db.drain().expect("drain");
    for i in (0..1500u32).step_by(7) {
        assert_eq!(
            db.get(format!("key{i:06}")).expect("get"),
            Some(value.clone()),
            "{name}: key{i:06}"
        );
    }
}

#[test]
fn a_closed_or_dropped_db_leaves_no_thread_behind() {
    assert!(
        database_threads().is_empty(),
        "woods threads before any database: {:?}",
        database_threads()
    );
    let (mut io_seen, mut commit_seen) = (0, 0);
    for kind in common::kinds() {
        let name = kind.name();
        for close in [false, true] {
            let fs = FaultFs::new();
            let opts = Options {
                fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
                background_threads: 2,
                ..common::small_options(&kind)
            };
            let db = Db::open(std::path::Path::new("/db"), opts).expect("open");
            exercise(&db, name);
            let running = database_threads();
            if running.iter().any(|t| t == "woods-io") {
                io_seen += 1;
            }
            if running.iter().any(|t| t.ends_with("-commit")) {
                commit_seen += 1;
            }
            if close {
                db.close().expect("close");
            } else {
                drop(db);
            }
            let left = database_threads();
            assert!(
                left.is_empty(),
                "{name} ({}): threads left after the database was gone: {left:?} (while open: {running:?})",
                if close { "closed" } else { "dropped" }
            );
        }
    }
    // The I/O threads start with the first background read or write: the test must have met them.
    assert!(io_seen > 0, "no kind started its I/O threads");
    assert!(commit_seen > 0, "no kind started a committer thread");
}
