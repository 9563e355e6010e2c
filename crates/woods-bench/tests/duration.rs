//! `--duration`: a phase stops at its deadline and its figures count the operations done; a
//! load followed by other phases runs to the end whatever the deadline, since they read its
//! records.

use std::path::Path;
use std::time::Duration;

use woods_bench::engine::EngineConfig;
use woods_bench::workload::{run, Phase, RunSpec, Workload};

/// More operations than any phase does in 0.3 s (tens of seconds at the fastest).
const MANY: u64 = 50_000_000;

fn spec(
    dir: &Path,
    name: &str,
    phases: &[(Workload, u64)],
    records: u64,
    limit: Duration,
) -> RunSpec {
    let phases = phases
        .iter()
        .map(|&(workload, ops)| Phase { workload, ops })
        .collect();
    RunSpec {
        duration: Some(limit),
        ..RunSpec::new(
            "woods:lsm",
            dir.join(name),
            EngineConfig::new(8 << 20, true),
            phases,
            records,
        )
    }
}

fn a_phase_stops_at_its_deadline(tmp: &tempfile::TempDir) {
    let s = spec(
        tmp.path(),
        "reads",
        &[(Workload::FillSeq, 0), (Workload::ReadRandom, MANY)],
        2_000,
        Duration::from_millis(300),
    );
    let r = run(&s).unwrap_or_else(|e| panic!("{e}"));
    let (load, reads) = (&r.phases[0], &r.phases[1]);
    assert_eq!(load.ops, 2_000);
    assert!(
        reads.ops > 0 && reads.ops < MANY,
        "{} reads in a phase cut after 0.3 s",
        reads.ops
    );
    assert_eq!(
        reads.checked, reads.mix.reads,
        "every read done was checked"
    );
    assert_eq!(reads.mix.reads, reads.ops);
}

fn a_last_load_is_cut_and_counts_what_it_inserted(tmp: &tempfile::TempDir) {
    let s = spec(
        tmp.path(),
        "load",
        &[(Workload::FillRandom, 0)],
        MANY,
        Duration::from_millis(300),
    );
    let r = run(&s).unwrap_or_else(|e| panic!("{e}"));
    let load = &r.phases[0];
    assert!(
        load.ops > 0 && load.ops < MANY,
        "{} inserts in a load cut after 0.3 s",
        load.ops
    );
    assert_eq!(load.mix.puts, load.ops);
    assert_eq!(
        load.live_user_bytes,
        load.ops * 124,
        "live records: those inserted"
    );
}

fn a_load_with_phases_after_it_is_not_cut(tmp: &tempfile::TempDir) {
    // A load that takes longer than the limit on any machine this runs on (checked below).
    let records = 200_000;
    let limit = Duration::from_millis(20);
    let s = spec(
        tmp.path(),
        "both",
        &[(Workload::FillRandom, 0), (Workload::ReadRandom, 100)],
        records,
        limit,
    );
    let r = run(&s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.phases[0].ops, records);
    assert!(
        r.phases[0].secs > limit.as_secs_f64(),
        "the load took {} s: too short to show anything",
        r.phases[0].secs
    );
    assert_eq!(r.phases[1].ops, 100);
}

// One test, so that no other test of this process adds to /proc/self/io while a phase runs (the
// bench checks woods' own write counts against it).
#[test]
fn duration_cuts_phases_but_not_a_load_with_phases_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    a_phase_stops_at_its_deadline(&tmp);
    a_last_load_is_cut_and_counts_what_it_inserted(&tmp);
    a_load_with_phases_after_it_is_not_cut(&tmp);
}
