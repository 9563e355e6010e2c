//! Without background threads, a write that `lsm`'s L0 slowdown rule delays works off a step of
//! the compaction it waits for instead of sleeping: nobody else would do that work while it
//! slept. Found in `woods bench --background-threads 0`: with L0 held at the slowdown for whole
//! memtables, each write slept LevelDB's millisecond and a random load ran at about 900 writes a
//! second (21,984 sleeps in 25 seconds under strace).

mod common;

use woods::{Db, IndexKind, LsmParams, Options};

#[test]
fn a_delayed_write_works_instead_of_sleeping() {
    let seed = common::seed("lsm_slowdown_without_background_threads");
    let n = 60_000 * common::scale();
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        index: Some(IndexKind::Lsm(LsmParams {
            table_bytes: 64 << 10,
            level1_bytes: 256 << 10,
            l0_compaction_trigger: 2,
            l0_slowdown: 3,
            l0_stop: 12,
            ..LsmParams::default()
        })),
        cache_bytes: 4 << 20,
        memtable_bytes: 64 << 10,
        background_threads: 0,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts).expect("open");
    let mut x = seed;
    let mut key = |i: u64| {
        // splitmix64: random keys, replayable from the seed; the record number after them.
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        [(z ^ (z >> 31)).to_be_bytes(), i.to_be_bytes()].concat()
    };
    let keys: Vec<Vec<u8>> = (0..n).map(&mut key).collect();
    for (i, k) in keys.iter().enumerate() {
        db.put(k, (i as u64).to_le_bytes()).expect("put");
    }
    let s = db.stats();
    let w = |k: &str| s.waits.get(k).copied().unwrap_or(0);
    eprintln!(
        "{} writes, {} memtables, stalls {}, slowdown steps {}, slowdown sleeps {}, largest \
         write work {}; WOODS_SEED={seed}",
        s.writes,
        s.memtable_switches,
        s.stalls,
        w("slowdown_works"),
        w("slowdown_sleeps"),
        s.write_work_max,
    );
    assert!(
        w("slowdown_works") > 0,
        "L0 never reached the slowdown: the test tests nothing; WOODS_SEED={seed}"
    );
    assert_eq!(
        w("slowdown_sleeps"),
        0,
        "a write slept with no thread to do the work; WOODS_SEED={seed}"
    );
    // A step a delayed write: L0 leaves the slowdown within a few writes each time it enters.
    assert!(
        w("slowdown_works") < n / 20,
        "{} of {n} writes met the slowdown; WOODS_SEED={seed}",
        w("slowdown_works")
    );
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            db.get(k).expect("get").as_deref(),
            Some(&(i as u64).to_le_bytes()[..]),
            "record {i}; WOODS_SEED={seed}"
        );
    }
    db.check().expect("check");
    db.close().expect("close");
}
