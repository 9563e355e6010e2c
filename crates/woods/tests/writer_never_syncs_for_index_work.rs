//! While background threads exist, no write pays an fsync for the index's work: no put syncs
//! the data file or the manifest, and none removes a log file (whose directory sync follows),
//! for every kind the Db paces whose work commits through a committer thread (`nbtree`, `stbe`,
//! `lsa`, `iam`, `fdtree-d`, `boa`), with the background thread held at its gate throughout
//! (`Options::background_gate`: no sleep), so that the writers do every step of the index's
//! work themselves.
//!
//! Found by measuring (`woods bench`, 500k records, docs/results/nbtree.md, *The writer's bound
//! with the threads behind*): once a writer behind the pacing schedule did its share itself, the
//! step that finished a job ran the job's commit, a data-file sync and a manifest fsync, in the
//! writer's thread (`fdtree-d`'s longest wait 60 -> 308-331 ms, `iam` and `lsa` committed every
//! step so), and a writer's step reaped the log files the index had made durable, removing them
//! and syncing the directory. Now `fdtree` and `iam`/`lsa` publish a finished step and a
//! committer thread of their own makes it durable, as `nbtree` and `stbe` did already, and a
//! writer leaves the log files' removal to the background threads. `boa` committed inside the
//! `work` that finished a flush or a merge (72 index syncs in the writer's puts here) until it
//! got a committer too.
//!
//! The syncs are counted by a file system that wraps the real one and counts, per thread, the
//! syncs of files other than log files and every removal (`common/sync_hook.rs`). (A log file's
//! own syncs are the log's: with the thread held, the writer that rotates creates the next log
//! file itself.)

mod common;

use std::cell::Cell;
use std::sync::Arc;

use common::sync_hook::{Event, SyncHookFs};
use woods::{db::BackgroundGate, Db, IndexKind, Options};

thread_local! {
    /// Syncs of the data file and the manifest made by this thread.
    static INDEX_SYNCS: Cell<u64> = const { Cell::new(0) };
    /// Files this thread removed.
    static REMOVES: Cell<u64> = const { Cell::new(0) };
}

fn bump(c: &'static std::thread::LocalKey<Cell<u64>>) {
    c.with(|n| n.set(n.get() + 1));
}

fn read(c: &'static std::thread::LocalKey<Cell<u64>>) -> u64 {
    c.with(Cell::get)
}

/// The real file system, counting each thread's index syncs and removals.
fn counting() -> SyncHookFs {
    SyncHookFs::new(|e| match e {
        Event::IndexSync => bump(&INDEX_SYNCS),
        Event::Remove => bump(&REMOVES),
    })
}

/// Puts `n` random keys with one background thread held at its gate throughout; returns the
/// index syncs and the removals the writer's puts made, the rotations and the index's stats.
fn held_back(kind: IndexKind, n: u64, seed: u64) -> (u64, u64, woods::Stats) {
    let dir = tempfile::tempdir().expect("tempdir");
    let gate = BackgroundGate::closed();
    let db = Db::open(
        dir.path(),
        Options {
            index: Some(kind),
            fs: Some(Arc::new(counting())),
            cache_bytes: 256 << 10,
            memtable_bytes: 64 << 10,
            background_threads: 1,
            background_gate: Some(gate.clone()),
            ..Options::default()
        },
    )
    .expect("open");
    let (syncs0, removes0) = (read(&INDEX_SYNCS), read(&REMOVES));
    let mut x = seed;
    for i in 0..n {
        // splitmix64: random keys, replayable from the seed.
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let k = (z ^ (z >> 31)).to_be_bytes();
        db.put(k, [i.to_le_bytes(), i.to_be_bytes()].concat())
            .expect("put");
    }
    let syncs = read(&INDEX_SYNCS) - syncs0;
    let removes = read(&REMOVES) - removes0;
    let stats = db.stats();
    gate.open();
    db.close().expect("close");
    (syncs, removes, stats)
}

fn check(kind: IndexKind) {
    let name = format!("writer_never_syncs_for_index_work {}", kind.name());
    let seed = common::seed(&name);
    // 20,000 writes of 88 bytes into 64 KiB memtables: about 25 rotations.
    let n = 20_000 * common::scale();
    let (syncs, removes, stats) = held_back(kind, n, seed);
    eprintln!(
        "{name}: {} switches, {} index syncs and {} removals in the writer's puts, {} commits \
         by the committer",
        stats.memtable_switches,
        syncs,
        removes,
        stats.index.counters.get("commits").copied().unwrap_or(0),
    );
    assert!(stats.memtable_switches >= 10, "too few rotations to test");
    assert_eq!(
        syncs, 0,
        "{name}: the writer synced the data file or the manifest; WOODS_SEED={seed}"
    );
    assert_eq!(
        removes, 0,
        "{name}: the writer removed log files (and synced the directory); WOODS_SEED={seed}"
    );
}

/// The suite's parameters of a kind, by name.
fn kind(name: &str) -> IndexKind {
    common::kinds()
        .into_iter()
        .find(|k| k.name() == name)
        .unwrap_or_else(|| panic!("no kind {name} in the suite"))
}

#[test]
fn fdtree_d_writer_never_syncs_while_threads_exist() {
    check(kind("fdtree-d"));
}

#[test]
fn iam_writer_never_syncs_while_threads_exist() {
    check(kind("iam"));
}

#[test]
fn lsa_writer_never_syncs_while_threads_exist() {
    check(kind("lsa"));
}

#[test]
fn nbtree_writer_never_syncs_while_threads_exist() {
    check(kind("nbtree"));
}

#[test]
fn stbe_writer_never_syncs_while_threads_exist() {
    check(kind("stbe"));
}

#[test]
fn boa_writer_never_syncs_while_threads_exist() {
    check(kind("boa"));
}
