//! A writer that finds the memtable full while the index still has debt freezes it and goes on
//! into a new one, the frozen memtable readable and queued until the index has no debt left,
//! rather than working off the rest of the debt itself (docs/engine.md, *Write path*): with
//! room for a queued memtable, no rotation is a stall.
//!
//! Issue 19: `iam`'s longest insert was a writer at the rotation working off debt the threads
//! had not done, while the device held them behind a sync (254.8 ms in the 10 GiB load,
//! `docs/results/lsa-iam.md`). Here the one background thread is held at its gate
//! (`Options::background_gate`, no sleep), so the writers pay their pacing shares, and after
//! the first rotation the writes are batches of about 0.42 memtables: the batch that does not
//! fit finds the memtable with more room left than the schedule's margin, where it still
//! allows debt. Before the queue that rotation worked the debt off inline (a stall); now it
//! queues the memtable. The kinds are those whose job the first batch's share does not finish
//! whole (`nbtree`, `stbe`, `boa`); the rotation's code is the Db's, the same for every kind.

mod common;

use woods::{Db, IndexKind, WriteBatch};

/// The memtable of the runs: 1 MiB, so that one job is many steps.
const MEMTABLE: u64 = 1 << 20;

fn key(i: u64, seed: u64) -> [u8; 8] {
    common::random_key(seed, i)
}

fn value(i: u64) -> Vec<u8> {
    common::index_value(i)
}

fn check(name: &str, kind: IndexKind) {
    let seed = common::seed(name);
    let dir = tempfile::tempdir().expect("tempdir");
    let (opts, gate) = common::held_back_options(kind, MEMTABLE);
    let db = Db::open(dir.path(), opts.clone()).expect("open");
    let mut n = 0u64;
    // Single puts until the first memtable is handed to the index: its job is the debt.
    while db.stats().memtable_switches == 0 {
        db.put(key(n, seed), value(n)).expect("put");
        n += 1;
    }
    // Batches of 5,000 writes of 88 bytes in the memtable's accounting (key, value, 64): about
    // 0.42 of a memtable each, so the third does not fit while the schedule still allows debt.
    let mut b = WriteBatch::new();
    while db.stats().memtable_switches == 1 {
        for _ in 0..5_000 {
            b.put(key(n, seed), value(n));
            n += 1;
        }
        db.write(&b).expect("write");
        b.clear();
    }
    let s = db.stats();
    let w = |name: &str| s.waits.get(name).copied().unwrap_or(0);
    eprintln!(
        "{name}: {} queued at a rotation (debt then {}), {} rotation stalls, largest debt a \
         schedule started from {}; WOODS_SEED={seed}",
        w("rotation_queues"),
        w("rotation_queue_debt_max"),
        w("rotation_stalls"),
        s.schedule_debt_max,
    );
    assert_eq!(
        (w("rotation_queues"), w("rotation_stalls")),
        (1, 0),
        "{name}: the rotation that found debt left did not queue its memtable; \
         WOODS_SEED={seed}"
    );
    // Single puts through three more memtables, the thread still held: the writers pay, and
    // the queue is handed over.
    while db.stats().memtable_switches < 5 {
        db.put(key(n, seed), value(n)).expect("put");
        n += 1;
    }
    assert!(db.stats().pending_memtables_max <= woods::db::MAX_PENDING_MEMTABLES);
    // Every write is readable, whether its memtable is active, queued or in the index.
    let read_all = |db: &Db, when: &str| common::assert_random_writes(db, n, seed, name, when);
    read_all(&db, "with the thread held");
    // The thread takes over, the close drains the queue, and everything is in the index.
    gate.open();
    db.close().expect("close");
    let db = Db::open(dir.path(), opts).expect("reopen");
    gate.open();
    read_all(&db, "after a reopen");
    db.close().expect("close");
}

#[test]
fn nbtree_rotation_queues_a_memtable_while_debt_is_left() {
    check(
        "nbtree_rotation_queues_a_memtable_while_debt_is_left",
        common::kind("nbtree"),
    );
}

#[test]
fn stbe_rotation_queues_a_memtable_while_debt_is_left() {
    check(
        "stbe_rotation_queues_a_memtable_while_debt_is_left",
        common::kind("stbe"),
    );
}

#[test]
fn boa_rotation_queues_a_memtable_while_debt_is_left() {
    check(
        "boa_rotation_queues_a_memtable_while_debt_is_left",
        common::kind("boa"),
    );
}
