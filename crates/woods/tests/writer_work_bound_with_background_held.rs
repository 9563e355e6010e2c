//! No write does more index work than its documented share (docs/engine.md, *The writer's
//! bound*) while the background threads are held back on purpose (`Options::background_gate`,
//! a gate the threads wait at before each step: no sleep), for `nbtree` and `fdtree-d`.
//!
//! Found by reading (issue 25, item 1): with background threads, a writer behind the pacing
//! schedule waited at most 1 ms a write for the threads and went on, so when they fell behind
//! (or, here, were held back) the writer that found the memtable full ran the rest of the whole
//! job inline (`make_room` worked until `debt()` was 0), and the fdtree-d runs saw writers wait
//! up to 7.6 s. Now a writer still behind the schedule after its wait does its share itself,
//! so the job is done by the rotation whatever the threads do.

mod common;

use woods::storage::{Purpose, PAGE_SIZE};
use woods::{Db, FdTreeParams, IndexKind, NbTreeParams};

/// The memtable of the runs: 1 MiB, so that one job is many steps.
const MEMTABLE: u64 = 1 << 20;
/// The Db's pacing step: `max(memtable_bytes / 256, 16 KiB)`.
const STEP: u64 = 16 << 10;
/// One write's size in the memtable's accounting: an 8-byte key, a 16-byte value, 64 bytes.
const WRITE: u64 = 8 + 16 + 64;

struct Run {
    /// The most data pages (flush and merge) written during one put.
    put_pages: u64,
    stats: woods::Stats,
}

/// Puts `n` random keys with one background thread held at its gate throughout.
fn held_back(kind: IndexKind, n: u64, seed: u64) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let (opts, gate) = common::held_back_options(kind, MEMTABLE);
    let db = Db::open(dir.path(), opts).expect("open");
    let written = |db: &Db| {
        let io = db.stats().io;
        io.written(Purpose::Flush) + io.written(Purpose::Merge)
    };
    let mut x = seed;
    let mut put_pages = 0;
    for i in 0..n {
        // splitmix64: random keys, replayable from the seed.
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let k = (z ^ (z >> 31)).to_be_bytes();
        let before = written(&db);
        db.put(k, [i.to_le_bytes(), i.to_be_bytes()].concat())
            .expect("put");
        put_pages = put_pages.max((written(&db) - before).div_ceil(PAGE_SIZE as u64));
    }
    let stats = db.stats();
    gate.open();
    db.close().expect("close");
    Run { put_pages, stats }
}

/// The documented bound of one write's own work, in the index's units: twice the schedule's
/// slope (the largest debt a schedule started from, over the memtable less its last sixteenth)
/// times the write's size, plus three steps.
fn work_bound(s: &woods::Stats) -> u64 {
    let slope = s.schedule_debt_max.div_ceil(MEMTABLE - MEMTABLE / 16);
    2 * slope * WRITE + 3 * STEP
}

fn check(name: &str, kind: IndexKind, n: u64, slop_pages: u64) {
    let seed = common::seed(name);
    let Run { put_pages, stats } = held_back(kind, n, seed);
    let bound = work_bound(&stats);
    // Data pages are at least half full: a unit written is at most 2 bytes of pages; and the
    // write may also see complete the `slop_pages` that earlier work left buffered or in
    // flight (the put's own calls never leave more than that behind them either).
    let page_bound = (2 * bound).div_ceil(PAGE_SIZE as u64) + slop_pages;
    eprintln!(
        "{name}: {} switches, height {}, largest schedule debt {}, largest write work {} \
         units (bound {bound}), most pages in one put {put_pages} (bound {page_bound}), \
         {} stalls, longest {:?}",
        stats.memtable_switches,
        stats.index.height,
        stats.schedule_debt_max,
        stats.write_work_max,
        stats.stalls,
        stats.stall_max
    );
    assert!(stats.memtable_switches >= 4, "too few rotations to test");
    assert!(
        stats.write_work_max <= bound,
        "{name}: a write did {} units of index work (bound {bound}); WOODS_SEED={seed}",
        stats.write_work_max
    );
    assert!(
        put_pages <= page_bound,
        "{name}: a put wrote {put_pages} pages (bound {page_bound}); WOODS_SEED={seed}"
    );
}

#[test]
fn nbtree_writer_does_only_its_share_while_background_is_held() {
    // 60,000 writes of 88 bytes: five memtables, height 3.
    let n = 60_000 * common::scale();
    // Work may leave 2 x 2 chunk writes of 64 pages in flight and its builders hold 2 x 64
    // pages more (docs/engine.md, nbtree, *One `work(b)` call*).
    check(
        "nbtree_writer_does_only_its_share_while_background_is_held",
        IndexKind::NbTree(NbTreeParams {
            sigma_memtables: 1,
            ..NbTreeParams::default()
        }),
        n,
        6 * 64,
    );
}

#[test]
fn nbtree_sigma_2_writer_does_only_its_share_while_background_is_held() {
    // σ = 2 memtables (root runs, drains paced over two memtables): 150,000 writes, 13
    // memtables, so that several drains of the root's runs run while writers pay for them.
    let n = 150_000 * common::scale();
    check(
        "nbtree_sigma_2_writer_does_only_its_share_while_background_is_held",
        IndexKind::NbTree(NbTreeParams {
            sigma_memtables: 2,
            ..NbTreeParams::default()
        }),
        n,
        6 * 64,
    );
}

#[test]
fn fdtree_d_writer_does_only_its_share_while_background_is_held() {
    let n = 60_000 * common::scale();
    // Three 16-page requests and a finished run's index pages and header (docs/fdtree.md,
    // *Payment*).
    check(
        "fdtree_d_writer_does_only_its_share_while_background_is_held",
        IndexKind::FdTree(FdTreeParams {
            ratio: 3,
            deamortized: true,
            ..FdTreeParams::default()
        }),
        n,
        3 * 16 + 8,
    );
}
