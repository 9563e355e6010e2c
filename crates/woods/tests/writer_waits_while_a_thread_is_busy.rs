//! A writer behind the pacing schedule while a background thread is busy, and a rotation could
//! still queue the memtable, does no index work itself: it waits for the thread, at most a few
//! milliseconds a write, and the debt the thread has not done by the memtable's end goes with it
//! into the queue (docs/engine.md, *A writer waits while a thread is busy*).
//!
//! Issue 19: after the queued rotation, `iam`'s longest insert was a writer's own pacing step:
//! the thread was between two steps (committing, removing a log file), the writer took the
//! next step, and the device held that step's reads behind a sync (222–308 ms at 2 million
//! records of 1 KiB, `docs/results/lsa-iam.md`). Here the one background thread is held in the
//! removal of a log file (the file system's hook blocks it there, no sleep: a model of a thread
//! the device holds outside a step), while the writer fills two memtables. Before the change
//! the writer, finding the thread made no step in a whole wait, did the index's work itself;
//! now it only waits, and the rotation queues the memtable.

mod common;

use std::sync::Arc;

use common::sync_hook::{Event, SyncHookFs};
use parking_lot::{Condvar, Mutex};
use woods::storage::Fs;
use woods::{Db, Options};

/// The memtable of the runs: 1 MiB, so that one job is many steps.
const MEMTABLE: u64 = 1 << 20;

fn key(i: u64, seed: u64) -> [u8; 8] {
    common::random_key(seed, i)
}

fn value(i: u64) -> Vec<u8> {
    common::index_value(i)
}

/// Whether background threads are held at their next removal, and whether one is there now.
#[derive(Default)]
struct Hold {
    state: Mutex<(bool, bool)>,
    cv: Condvar,
}

impl Hold {
    /// The hook's side: a background thread removing a file waits while the hold is on.
    fn removal(&self) {
        let bg = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("woods-bg-"));
        if !bg {
            return;
        }
        let mut s = self.state.lock();
        if s.0 {
            s.1 = true;
            self.cv.notify_all();
            while s.0 {
                self.cv.wait(&mut s);
            }
        }
    }

    /// Waits until a background thread is held.
    fn wait_held(&self) {
        let mut s = self.state.lock();
        while !s.1 {
            self.cv.wait(&mut s);
        }
    }

    fn release(&self) {
        self.state.lock().0 = false;
        self.cv.notify_all();
    }
}

/// Releases the hold when dropped: before the database, whose drop joins the held thread, also
/// when an assertion fails.
struct Release(Arc<Hold>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.release();
    }
}

fn check(kind: &str) {
    let name = format!("{kind}_writer_waits_while_a_thread_is_busy");
    let seed = common::seed(&name);
    let dir = tempfile::tempdir().expect("tempdir");
    let hold = Arc::new(Hold::default());
    hold.state.lock().0 = true;
    let h = hold.clone();
    let fs = SyncHookFs::new(move |e| {
        if e == Event::Remove {
            h.removal();
        }
    });
    let opts = Options {
        index: Some(common::kind(kind)),
        cache_bytes: 4 << 20,
        memtable_bytes: MEMTABLE,
        background_threads: 1,
        fs: Some(Arc::new(fs) as Arc<dyn Fs>),
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts.clone()).expect("open");
    let release = Release(hold.clone());
    let mut n = 0u64;
    let put_until = |db: &Db, n: &mut u64, switches: u64| {
        while db.stats().memtable_switches < switches {
            db.put(key(*n, seed), value(*n)).expect("put");
            *n += 1;
        }
    };
    // The first memtable goes to the index; the thread does its job, and once the index holds
    // it durably, removes its log file: there it is held.
    put_until(&db, &mut n, 1);
    hold.wait_held();
    // The second memtable's rotation finds no debt and hands it over; its job is the debt the
    // writes into the third owe, with the thread held; the third's rotation finds it left.
    put_until(&db, &mut n, 3);
    let s = db.stats();
    let w = |name: &str| s.waits.get(name).copied().unwrap_or(0);
    eprintln!(
        "{name}: largest write work {} units, {} throttled writes (longest {} µs), {} queued at \
         a rotation (debt then {}), {} stalls; WOODS_SEED={seed}",
        s.write_work_max,
        w("pace_throttles"),
        w("pace_throttle_max_ns") / 1000,
        w("rotation_queues"),
        w("rotation_queue_debt_max"),
        s.stalls,
    );
    assert_eq!(
        s.write_work_max, 0,
        "{name}: a writer did index work while the thread was busy; WOODS_SEED={seed}"
    );
    assert!(
        w("pace_throttles") > 0,
        "{name}: no writer waited for the thread; WOODS_SEED={seed}"
    );
    assert_eq!(
        (w("rotation_queues"), s.stalls),
        (1, 0),
        "{name}: the rotation after the throttled writes did not queue its memtable; \
         WOODS_SEED={seed}"
    );
    let read_all = |db: &Db, when: &str| common::assert_random_writes(db, n, seed, &name, when);
    read_all(&db, "with the thread held");
    drop(release);
    db.close().expect("close");
    let db = Db::open(dir.path(), opts).expect("reopen");
    read_all(&db, "after a reopen");
    db.close().expect("close");
}

#[test]
fn iam_writer_waits_while_a_thread_is_busy() {
    check("iam");
}

#[test]
fn nbtree_writer_waits_while_a_thread_is_busy() {
    check("nbtree");
}

#[test]
fn stbe_writer_waits_while_a_thread_is_busy() {
    check("stbe");
}
