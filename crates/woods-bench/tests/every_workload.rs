//! Every workload on woods at a tiny scale, in this process: each phase does the operations
//! it should, in the mix it should, and every answer is checked (a run with a wrong answer
//! fails, so passing runs are the engine agreeing with the bench's expectations).

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use woods_bench::engine::EngineConfig;
use woods_bench::workload::{run, Distribution, EngineResult, Phase, RunSpec, Workload};

const RECORDS: u64 = 2000;

/// The bench compares woods' written bytes with the process's (/proc/self/io): tests that run
/// engines in this process take turns.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn spec(dir: &Path, engine: &str, phases: &[(Workload, u64)]) -> RunSpec {
    let phases = phases
        .iter()
        .map(|&(workload, ops)| Phase { workload, ops })
        .collect();
    let config = EngineConfig::new(1 << 20, true);
    let dir = dir.join(engine.replace(':', "-"));
    RunSpec {
        seed: 5,
        ..RunSpec::new(engine, dir, config, phases, RECORDS)
    }
}

fn phase(r: &EngineResult, n: usize) -> &woods_bench::workload::PhaseResult {
    &r.phases[n]
}

/// fillmixed loads every record once with the sequential share asked for, whatever it is; a
/// sequential read then finds each of them (readseq skips none with db_bench keys).
#[test]
fn fillmixed_loads_every_record() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    for (n, percent) in [0.0, 50.0, 99.0, 100.0].into_iter().enumerate() {
        let mut s = spec(
            &tmp.path().join(n.to_string()),
            "woods:lsm",
            &[(Workload::FillMixed, 0), (Workload::ReadSeq, 5000)],
        );
        s.sequential_percent = percent;
        let r = run(&s).unwrap_or_else(|e| panic!("{percent}%: {e}"));
        let fill = phase(&r, 0);
        assert_eq!((fill.ops, fill.mix.puts), (RECORDS, RECORDS), "{percent}%");
        let seq = phase(&r, 1);
        assert_eq!((seq.ops, seq.checked), (RECORDS, RECORDS), "{percent}%");
    }
    let mut bad = spec(tmp.path(), "woods:lsm", &[(Workload::FillMixed, 0)]);
    bad.sequential_percent = 101.0;
    let e = run(&bad).expect_err("101% is refused");
    assert!(e.to_string().contains("--sequential-percent"), "{e}");
}

#[test]
fn db_bench_workloads() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    for engine in ["woods:btree", "woods:lsm"] {
        let mut s = spec(
            tmp.path(),
            engine,
            &[
                (Workload::FillSeq, 0),
                (Workload::ReadSeq, 5000),
                (Workload::SeekRandom, 300),
                (Workload::ReadRandom, 1000),
                (Workload::Overwrite, 800),
                (Workload::DeleteRandom, 500),
                (Workload::ReadRandom, 1000),
                (Workload::ReadSeq, 5000),
                (Workload::SeekRandom, 300),
                (Workload::FillRandom, 0),
                (Workload::ReadSeq, 5000),
            ],
        );
        s.miss_ratio = 0.25;
        s.seek_nexts = 7;
        let r = run(&s).unwrap_or_else(|e| panic!("{engine}: {e}"));
        let fill = phase(&r, 0);
        assert_eq!((fill.ops, fill.mix.puts), (RECORDS, RECORDS));
        assert_eq!(fill.user_bytes, RECORDS * 124);
        assert_eq!(fill.live_user_bytes, RECORDS * 124);
        assert!(fill.write_amp.is_some() || fill.proc_written.is_none());
        assert!(fill.read_bytes_per_op.is_none());

        // A sequential read of more entries than there are stops at the end: every record once.
        let seq = phase(&r, 1);
        assert_eq!((seq.ops, seq.checked, seq.mix.scans), (RECORDS, RECORDS, 1));
        assert_eq!(seq.user_bytes, 0);
        assert!(seq.write_amp.is_none());

        let seek = phase(&r, 2);
        assert_eq!((seek.ops, seek.mix.scans), (300, 300));
        // Each seek reads 1 + 7 entries, fewer only near the end of the records.
        assert!(seek.mix.scanned > 300 * 7 && seek.mix.scanned <= 300 * 8);
        assert_eq!(seek.checked, seek.mix.scanned);

        // Misses: about a quarter, every one answered "not found".
        let read = phase(&r, 3);
        assert_eq!((read.ops, read.mix.reads, read.checked), (1000, 1000, 1000));
        assert!((150..350).contains(&read.mix.not_found), "{:?}", read.mix);
        assert!(read.read_bytes_per_op.is_some() || read.proc_read.is_none());

        assert_eq!(phase(&r, 4).mix.puts, 800);
        let del = phase(&r, 5);
        assert_eq!(del.mix.deletes, 500);
        assert_eq!(del.user_bytes, 500 * 24);
        // Some deletes hit records deleted before: fewer than 500 records are gone.
        let live = del.live_user_bytes / 124;
        assert!((RECORDS - 500..RECORDS).contains(&live), "{live}");

        // Deleted records are "not found" now, on top of the misses.
        let read2 = phase(&r, 6);
        assert!(
            read2.mix.not_found > read.mix.not_found + 100,
            "{:?}",
            read2.mix
        );
        // The sequential read meets exactly the records left.
        assert_eq!(phase(&r, 7).ops, live);
        assert_eq!(phase(&r, 8).mix.scans, 300);

        // fillrandom rewrites every record (deleted ones come back).
        let refill = phase(&r, 9);
        assert_eq!(refill.mix.puts, RECORDS);
        assert_eq!(refill.live_user_bytes, RECORDS * 124);
        assert_eq!(phase(&r, 10).ops, RECORDS);
    }
}

#[test]
fn ycsb_workloads() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    for engine in ["woods:btree", "woods:lsm"] {
        let s = spec(
            tmp.path(),
            engine,
            &[
                (Workload::YcsbLoad, 0),
                (Workload::YcsbA, 1000),
                (Workload::YcsbB, 1000),
                (Workload::YcsbC, 1000),
                (Workload::YcsbF, 1000),
                (Workload::YcsbD, 1000),
                (Workload::YcsbE, 300),
                (Workload::ReadSeq, 10_000),
                (Workload::ReadRandom, 500),
            ],
        );
        let r = run(&s).unwrap_or_else(|e| panic!("{engine}: {e}"));
        assert_eq!(phase(&r, 0).mix.puts, RECORDS);
        let share = |n: u64, of: u64, p: f64| {
            let x = n as f64 / of as f64;
            assert!((x - p).abs() < 0.06, "{n} of {of}, expected about {p}");
        };
        let a = phase(&r, 1);
        assert_eq!(a.distribution, Some(Distribution::Zipfian));
        assert_eq!(a.mix.reads + a.mix.puts, 1000);
        share(a.mix.puts, 1000, 0.5);
        assert_eq!(a.checked, a.mix.reads);
        assert_eq!(a.mix.not_found, 0);
        let b = phase(&r, 2);
        share(b.mix.puts, 1000, 0.05);
        let c = phase(&r, 3);
        assert_eq!((c.mix.reads, c.checked, c.mix.puts), (1000, 1000, 0));
        assert!(c.write_amp.is_none());
        let f = phase(&r, 4);
        share(f.mix.read_modify_writes, 1000, 0.5);
        assert_eq!(f.mix.reads + f.mix.read_modify_writes, 1000);
        // A read-modify-write's get is checked too.
        assert_eq!(f.checked, 1000);
        assert_eq!(f.user_bytes, f.mix.read_modify_writes * 124);
        let d = phase(&r, 5);
        assert_eq!(d.distribution, Some(Distribution::Latest));
        share(d.mix.inserts, 1000, 0.05);
        assert_eq!(d.live_user_bytes, (RECORDS + d.mix.inserts) * 124);
        let e = phase(&r, 6);
        share(e.mix.scans, 300, 0.95);
        assert_eq!(e.mix.scans + e.mix.inserts, 300);
        // Scan lengths are uniform in 1..=100: about 50 entries a scan.
        let mean = e.mix.scanned as f64 / e.mix.scans as f64;
        assert!((35.0..65.0).contains(&mean), "{mean}");
        assert_eq!(e.checked, e.mix.scanned);
        // The inserts of D and E are records like the loaded ones.
        let total = RECORDS + d.mix.inserts + e.mix.inserts;
        assert_eq!(phase(&r, 7).ops, total);
        assert_eq!(phase(&r, 8).mix.not_found, 0);
    }
}

#[test]
fn uniform_distribution_and_threads() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec(
        tmp.path(),
        "woods:lsm",
        &[
            (Workload::YcsbLoad, 0),
            (Workload::YcsbA, 2000),
            (Workload::YcsbD, 2000),
            (Workload::YcsbE, 400),
            (Workload::YcsbF, 2000),
            (Workload::ReadSeq, 10_000),
        ],
    );
    s.threads = 4;
    s.distribution = Some(Distribution::Uniform);
    let r = run(&s).unwrap();
    for p in &r.phases[1..5] {
        assert_eq!(p.distribution, Some(Distribution::Uniform));
        assert_eq!(p.threads, 4);
    }
    assert_eq!(phase(&r, 1).ops, 2000);
    let inserts = phase(&r, 2).mix.inserts + phase(&r, 3).mix.inserts;
    // Four clients each read their quarter of the key space to its end: every record is met
    // at least once.
    assert!(phase(&r, 5).ops >= RECORDS + inserts);

    let mut s = spec(
        tmp.path(),
        "woods:btree",
        &[
            (Workload::FillRandom, 0),
            (Workload::Overwrite, 1000),
            (Workload::DeleteRandom, 300),
            (Workload::ReadRandom, 2000),
            (Workload::SeekRandom, 200),
            (Workload::ReadSeq, 3000),
        ],
    );
    s.threads = 3;
    s.miss_ratio = 0.5;
    let r = run(&s).unwrap();
    assert_eq!(phase(&r, 0).mix.puts, RECORDS);
    assert_eq!(phase(&r, 3).checked, 2000);
    assert_eq!(phase(&r, 4).mix.scans, 200);
}

#[test]
fn bad_specs_are_refused() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let check = |s: RunSpec, what: &str| {
        let e = run(&s).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    };
    check(
        spec(tmp.path(), "woods:lsm", &[(Workload::ReadRandom, 10)]),
        "start with a load",
    );
    check(
        spec(
            tmp.path(),
            "woods:lsm",
            &[(Workload::FillSeq, 0), (Workload::YcsbLoad, 0)],
        ),
        "one key format",
    );
    let mut s = spec(tmp.path(), "woods:lsm", &[(Workload::YcsbLoad, 0)]);
    s.key_size = 23;
    check(s, "at least 24");
    let mut s = spec(
        tmp.path(),
        "woods:lsm",
        &[(Workload::YcsbLoad, 0), (Workload::YcsbE, 10)],
    );
    s.value_size = 8;
    check(s, "too small to scan");
    let mut s = spec(tmp.path(), "woods:lsm", &[(Workload::FillSeq, 0)]);
    s.miss_ratio = 1.5;
    check(s, "--miss-ratio");
    let mut s = spec(tmp.path(), "woods:lsm", &[(Workload::FillSeq, 0)]);
    s.threads = 0;
    check(s, "--threads");
}

#[test]
fn small_keys_and_values() {
    // 8-byte db_bench keys (misses past the last record) and values too small to name their
    // record (checked by trying the versions a record may hold).
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec(
        tmp.path(),
        "woods:lsm",
        &[
            (Workload::FillSeq, 0),
            (Workload::Overwrite, 500),
            (Workload::ReadRandom, 500),
            (Workload::SeekRandom, 100),
            (Workload::YcsbF, 500),
        ],
    );
    s.key_size = 8;
    s.value_size = 4;
    s.miss_ratio = 0.3;
    let r = run(&s).unwrap();
    assert_eq!(phase(&r, 2).checked, 500);
    assert!(phase(&r, 2).mix.not_found > 50);
    assert_eq!(phase(&r, 4).checked, 500);
}

/// readmissing looks up only keys no record has: every get is not found (a found one fails the
/// run), and woods' own count of user-read device reads per get is recorded.
#[test]
fn readmissing_finds_nothing_and_counts_reads_per_get() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    for engine in ["woods:lsm", "woods:boa"] {
        let s = spec(
            tmp.path(),
            engine,
            &[(Workload::YcsbLoad, 0), (Workload::ReadMissing, 2000)],
        );
        let r = run(&s).unwrap_or_else(|e| panic!("{engine}: {e}"));
        let miss = phase(&r, 1);
        assert_eq!(miss.ops, 2000, "{engine}");
        assert_eq!(
            (miss.mix.reads, miss.mix.not_found, miss.checked),
            (2000, 2000, 2000),
            "{engine}"
        );
        let own = miss.own_reads_per_get.expect("woods counts its reads");
        assert!(
            (0.0..1.0).contains(&own),
            "{engine}: {own} reads per absent key"
        );
    }
}
