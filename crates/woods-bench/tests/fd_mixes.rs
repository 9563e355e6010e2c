//! The FD-tree paper's mixes (spec §6.3: W-Search, W-Insert, W-Delete; Figs. 7 and 10's
//! search-insert) on woods at a tiny scale, in this process: each draws its operations in its
//! shares, searches find only records present, inserts create records no phase wrote before,
//! deletes remove present ones, and what the bench expects after each phase is what the engine
//! holds (a sequential read meets exactly the records expected, each with its last value).
//!
//! Seeded from the clock (printed; `WOODS_SEED` replays). Every bound holds for every seed:
//! counts are exact where the single client makes them so, and shares are within 8 standard
//! deviations.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use woods_bench::engine::EngineConfig;
use woods_bench::workload::{run, Distribution, Phase, PhaseResult, RunSpec, Workload};

const RECORDS: u64 = 2000;
const OPS: u64 = 2000;

/// The bench compares woods' written bytes with the process's (/proc/self/io): tests that run
/// engines in this process take turns.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn seed() -> u64 {
    woods_bench::test_seed()
}

/// 8-byte hashed keys and 8-byte values (the paper's key and record id), a 1 MiB budget.
fn spec(dir: &Path, engine: &str, phases: &[(Workload, u64)], seed: u64) -> RunSpec {
    let phases = phases
        .iter()
        .map(|&(workload, ops)| Phase { workload, ops })
        .collect();
    let config = EngineConfig::new(1 << 20, true);
    let dir = dir.join(engine.replace(':', "-"));
    RunSpec {
        seed,
        key_size: 8,
        value_size: 8,
        hashed_keys: true,
        ..RunSpec::new(engine, dir, config, phases, RECORDS)
    }
}

/// Records present after a phase.
fn live(p: &PhaseResult) -> u64 {
    p.live_user_bytes / 16
}

/// `n` of `of` draws is a share `p` within 8 standard deviations.
fn share(what: &str, n: u64, of: u64, p: f64) {
    let mean = of as f64 * p;
    let sd = (of as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (n as f64 - mean).abs() <= 8.0 * sd,
        "{what}: {n} of {of}, expected about {mean}"
    );
}

/// Every mix on fdtree after a load of hashed keys: the shares, exact counts of what each
/// phase did to the records, searches that all hit, and a sequential read after each mix that
/// meets exactly the records present (each with the value last written: every entry is
/// checked).
#[test]
fn each_mix_does_its_shares_and_leaves_the_expected_records() {
    let _serial = serial();
    let seed = seed();
    let tmp = tempfile::tempdir().unwrap();
    // Searches, inserts, deletes, updates.
    let mixes = [
        (Workload::FdWSearch, [0.8, 0.1, 0.05, 0.05]),
        (Workload::FdWInsert, [0.2, 0.5, 0.2, 0.1]),
        (Workload::FdWDelete, [0.2, 0.2, 0.5, 0.1]),
        (Workload::SearchInsert, [0.5, 0.5, 0.0, 0.0]),
    ];
    let mut phases = vec![(Workload::FillRandom, 0)];
    for (w, _) in mixes {
        phases.push((w, OPS));
        phases.push((Workload::ReadSeq, 10 * RECORDS));
    }
    let r = run(&spec(tmp.path(), "woods:fdtree", &phases, seed))
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert_eq!(live(&r.phases[0]), RECORDS);
    let mut present = RECORDS;
    for (n, (w, shares)) in mixes.into_iter().enumerate() {
        let p = &r.phases[1 + 2 * n];
        let name = w.name();
        assert_eq!(p.workload, w);
        assert_eq!(p.distribution, Some(Distribution::Uniform), "{name}");
        let m = &p.mix;
        assert_eq!(p.ops, OPS, "{name}");
        assert_eq!(
            m.reads + m.inserts + m.deletes + m.puts,
            OPS,
            "{name}: {m:?}"
        );
        assert_eq!((m.scans, m.read_modify_writes), (0, 0), "{name}");
        for (what, count, p) in [
            ("searches", m.reads, shares[0]),
            ("inserts", m.inserts, shares[1]),
            ("deletes", m.deletes, shares[2]),
            ("updates", m.puts, shares[3]),
        ] {
            share(&format!("{name} {what} (seed {seed})"), count, OPS, p);
        }
        // One client: every search is of a present record, found with its last value.
        assert_eq!((m.not_found, p.checked), (0, m.reads), "{name}");
        // Each insert adds a record, each delete removes a present one, updates neither.
        present = present + m.inserts - m.deletes;
        assert_eq!(live(p), present, "{name} (seed {seed})");
        assert_eq!(p.user_bytes, (m.inserts + m.puts) * 16 + m.deletes * 8);
        // Each kind of operation timed apart, adding up to the phase.
        let by_op = |op: &str| p.latency_by_op.get(op).map_or(0, |l| l.count);
        assert_eq!(
            [
                by_op("read"),
                by_op("insert"),
                by_op("delete"),
                by_op("update")
            ],
            [m.reads, m.inserts, m.deletes, m.puts],
            "{name}"
        );
        assert_eq!(p.latency.count, OPS, "{name}");
        // The longest operation is the longest of its kind (kinds are kept to 2 digits).
        let max_by_op = p.latency_by_op.values().map(|l| l.max_ns).max().unwrap();
        let max = p.latency.max_ns;
        assert!(
            max_by_op.abs_diff(max) <= max / 100,
            "{name}: {max_by_op} {max}"
        );
        // The engine holds exactly the records expected: a scan of everything meets each
        // present record once (ascending keys, each checked) and no other.
        let seq = &r.phases[2 + 2 * n];
        assert_eq!((seq.ops, seq.checked), (present, present), "after {name}");
    }
}

/// Several clients share the engine: operations may race on a record (a search of a record
/// another client deletes, two deletes of one record), and every answer is still one the
/// record may give; the counts add up.
#[test]
fn mixes_with_several_clients() {
    let _serial = serial();
    let seed = seed();
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec(
        tmp.path(),
        "woods:fdtree-d",
        &[
            (Workload::FillRandom, 0),
            (Workload::SearchInsert, OPS),
            (Workload::FdWDelete, OPS),
            (Workload::ReadSeq, 10 * RECORDS),
        ],
        seed,
    );
    s.threads = 3;
    let r = run(&s).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let si = &r.phases[1].mix;
    assert_eq!(si.reads + si.inserts, OPS);
    assert_eq!((si.deletes, si.puts), (0, 0));
    // Nothing deleted yet: every search hits, every insert is new.
    assert_eq!(si.not_found, 0);
    assert_eq!(live(&r.phases[1]), RECORDS + si.inserts);
    let wd = &r.phases[2].mix;
    assert_eq!(wd.reads + wd.inserts + wd.deletes + wd.puts, OPS);
    // Three clients read each their third of the key space to its end.
    assert!(r.phases[3].ops >= live(&r.phases[2]));
}

/// `fillseq` of hashed keys loads every record once (in ascending key order, a bulk load:
/// `gen::HashedKeyOrder`, whose slices for several clients its unit test cuts), and the mixes
/// run on what it loaded: a scan of everything meets each record once, checked.
#[test]
fn hashed_fillseq_loads_every_record_and_the_mixes_run_on_it() {
    let _serial = serial();
    let seed = seed();
    let tmp = tempfile::tempdir().unwrap();
    let s = spec(
        tmp.path(),
        "woods:btree",
        &[
            (Workload::FillSeq, 0),
            (Workload::ReadSeq, 10 * RECORDS),
            (Workload::FdWInsert, OPS),
            (Workload::ReadSeq, 10 * RECORDS),
        ],
        seed,
    );
    let r = run(&s).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert_eq!((r.phases[0].ops, live(&r.phases[0])), (RECORDS, RECORDS));
    assert_eq!((r.phases[1].ops, r.phases[1].checked), (RECORDS, RECORDS));
    let m = &r.phases[2].mix;
    let present = RECORDS + m.inserts - m.deletes;
    assert_eq!((r.phases[3].ops, r.phases[3].checked), (present, present));
}

/// Records left by a loaded run of YCSB keys (24 bytes) interleave too: the mixes run there.
#[test]
fn mixes_run_on_ycsb_keys() {
    let _serial = serial();
    let seed = seed();
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec(
        tmp.path(),
        "woods:lsm",
        &[
            (Workload::YcsbLoad, 0),
            (Workload::FdWInsert, OPS),
            (Workload::ReadSeq, 10 * RECORDS),
        ],
        seed,
    );
    s.key_size = 24;
    s.value_size = 16;
    s.hashed_keys = false;
    let r = run(&s).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let m = &r.phases[1].mix;
    let present = RECORDS + m.inserts - m.deletes;
    assert_eq!(r.phases[1].live_user_bytes, present * 40);
    assert_eq!(r.phases[2].ops, present);
}

/// The mixes refuse db_bench keys (their inserts would all land after the last loaded key),
/// `--hashed-keys` refuses fillmixed, and a mix whose deletes empty the engine fails with a
/// message, not a hang.
#[test]
fn bad_mixes_are_refused() {
    let _serial = serial();
    let seed = seed();
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec(
        tmp.path(),
        "woods:lsm",
        &[(Workload::FillRandom, 0), (Workload::FdWInsert, 10)],
        seed,
    );
    s.hashed_keys = false;
    let e = run(&s).unwrap_err().to_string();
    assert!(e.contains("--hashed-keys"), "{e}");
    let s = spec(tmp.path(), "woods:lsm", &[(Workload::FillMixed, 0)], seed);
    let e = run(&s).unwrap_err().to_string();
    assert!(e.contains("fillmixed"), "{e}");
    // 50 records, 1,000 operations of W-Delete: deletes outnumber inserts by 300 on average
    // (at least 50 with overwhelming odds, 9 standard deviations below the mean), so every
    // record is gone before the end.
    let mut s = spec(
        &tmp.path().join("empty"),
        "woods:lsm",
        &[(Workload::FillRandom, 0), (Workload::FdWDelete, 1000)],
        seed,
    );
    s.records = 50;
    let e = run(&s).unwrap_err().to_string();
    assert!(e.contains("no record is left"), "seed {seed}: {e}");
}

/// Fig. 11's range searches of growing length over one load: `--seek-nexts 1,10,100` gives the
/// first `seekrandom` phase 1 next a seek, the second 10, the third 100; each phase says its
/// length, every entry is checked, and more lengths than phases are refused.
#[test]
fn seekrandom_phases_take_growing_lengths() {
    let _serial = serial();
    let seed = seed();
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec(
        tmp.path(),
        "woods:fdtree",
        &[
            (Workload::FillRandom, 0),
            (Workload::SeekRandom, 50),
            (Workload::SeekRandom, 50),
            (Workload::SeekRandom, 50),
        ],
        seed,
    );
    s.seek_lengths = vec![1, 10, 100];
    let r = run(&s).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    for (p, nexts) in r.phases[1..].iter().zip([1u64, 10, 100]) {
        assert_eq!(p.seek_nexts, Some(nexts as usize));
        assert_eq!(p.label(), format!("seekrandom+{nexts}"));
        assert_eq!((p.ops, p.mix.scans), (50, 50));
        // A seek returns 1 + nexts entries, fewer only within that many of the last key: on
        // average well over half as many.
        let most = 50 * (nexts + 1);
        assert!(
            p.mix.scanned <= most && 2 * p.mix.scanned > most,
            "{nexts}: {} entries (seed {seed})",
            p.mix.scanned
        );
        assert_eq!(p.checked, p.mix.scanned);
    }
    s.seek_lengths = vec![1, 10, 100, 1000];
    let e = run(&s).unwrap_err().to_string();
    assert!(e.contains("--seek-nexts gives 4 lengths"), "{e}");
}
