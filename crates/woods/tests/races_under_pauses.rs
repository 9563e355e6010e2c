//! Every kind keeps every acknowledged write while its threads are paused now and then between
//! the steps of its protocols (`woods::pause`, armed for this whole binary): a writer, a reader
//! of the keys acknowledged so far, two background threads and the index's committer, on every
//! kind of the conformance suite; then a flush, a drain, every key read back, and a reopen that
//! must find every key again.
//!
//! The pauses widen windows a few instructions long. Before its fix, `nbtree` lost a memtable
//! here in every run: a thread that finished a job stored a debt of 0 after the Db had handed
//! over the next memtable, and the Db then absorbed another over it (docs/engine.md, *A memtable
//! waiting to be taken up counts in the debt*). Without pauses the same loss showed in about
//! one run in 20 of `dropped_db_leaves_no_thread`.
//!
//! One test in its own binary: the pauses are armed once per process, for every thread in it. A
//! visit pauses one time in two, for up to 300 µs.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use woods::storage::{FaultFs, Fs};
use woods::{Db, Options};

/// Writes per kind: about 15 memtables of the suite's 64 KiB, so that every kind absorbs,
/// reorganises and commits many times while the reader reads.
const WRITES: u64 = 3_000;

fn key(i: u64) -> String {
    // Spread over the key space (not in write order), as random inserts are.
    format!("key{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

fn value(i: u64) -> Vec<u8> {
    let mut v = format!("value of {i}:").into_bytes();
    v.resize(200 + (i % 200) as usize, (i % 251) as u8);
    v
}

/// Reads every key written, `what` naming the moment for the failure's message.
fn check_all(db: &Db, name: &str, what: &str, seed: u64) {
    for i in 0..WRITES {
        let got = db.get(key(i)).expect("get");
        assert!(
            got.as_deref() == Some(value(i).as_slice()),
            "{name}, {what}: write {i} ({}) read back as {}; WOODS_SEED={seed}",
            key(i),
            if got.is_some() {
                "another value"
            } else {
                "missing"
            }
        );
    }
}

#[test]
fn every_kind_keeps_every_write_with_threads_paused_between_steps() {
    let seed = common::seed("races_under_pauses");
    assert!(
        woods::pause::arm(seed, 2, 300),
        "the pause points were armed before the test (WOODS_PAUSES?)"
    );
    // Two databases per kind (more with WOODS_SCALE): the `nbtree` race above showed in about
    // two runs of three with one.
    let rounds = 2 * common::scale();
    for kind in common::kinds() {
        for _ in 0..rounds {
            one_database(&kind, seed);
        }
    }
}

fn one_database(kind: &woods::IndexKind, seed: u64) {
    let name = kind.name();
    let fs = FaultFs::new();
    let opts = Options {
        fs: Some(Arc::new(fs.clone()) as Arc<dyn Fs>),
        background_threads: 2,
        ..common::small_options(kind)
    };
    let db = Db::open(Path::new("/db"), opts.clone()).expect("open");
    let acked = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (db, acked, done) = (&db, &acked, &done);
        let reader = s.spawn(move || {
            let mut rng = SmallRng::seed_from_u64(seed ^ 0x5EED);
            let mut reads = 0u64;
            while !done.load(Ordering::Acquire) {
                let n = acked.load(Ordering::Acquire);
                if n == 0 {
                    std::thread::yield_now();
                    continue;
                }
                let i = rng.gen_range(0..n);
                let got = db.get(key(i)).expect("get");
                assert!(
                    got.as_deref() == Some(value(i).as_slice()),
                    "{name}: acknowledged write {i} of {n} ({}) read as {} while writing; \
                         WOODS_SEED={seed}",
                    key(i),
                    if got.is_some() {
                        "another value"
                    } else {
                        "missing"
                    }
                );
                reads += 1;
            }
            reads
        });
        for i in 0..WRITES {
            db.put(key(i), value(i)).expect("put");
            acked.store(i + 1, Ordering::Release);
        }
        done.store(true, Ordering::Release);
        let reads = reader.join().expect("the reader failed");
        assert!(reads > 0, "{name}: the reader read nothing");
    });
    db.flush().expect("flush");
    db.drain().expect("drain");
    check_all(&db, name, "after flush and drain", seed);
    db.close().expect("close");
    let db = Db::open(Path::new("/db"), opts).expect("reopen");
    check_all(&db, name, "after a reopen", seed);
    db.close().expect("close");
}
