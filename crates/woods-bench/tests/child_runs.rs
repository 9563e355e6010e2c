//! Every engine of this build through fillrandom, overwrite and readrandom in child processes
//! of the `woods-bench` binary, with a few thousand records: the counts add up and the JSON
//! parses. (A smoke test of the instrument; figures from it mean nothing.)

use std::path::Path;
use std::process::Command;

use woods_bench::child::run_in_child;
use woods_bench::engine::{known_engines, EngineConfig};
use woods_bench::workload::{EngineResult, Phase, RunSpec, Workload};

const RECORDS: u64 = 3000;
const READS: u64 = 1000;
const OVERWRITES: u64 = 500;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_woods-bench"))
}

fn check(r: &EngineResult, engine: &str) {
    assert_eq!(r.engine, engine);
    let names: Vec<Workload> = r.phases.iter().map(|p| p.workload).collect();
    assert_eq!(
        names,
        [
            Workload::FillRandom,
            Workload::Overwrite,
            Workload::ReadRandom
        ]
    );
    let load = r.phase(Workload::FillRandom).unwrap();
    assert_eq!(load.ops, RECORDS);
    assert_eq!(load.latency.count, RECORDS);
    assert_eq!(load.user_bytes, RECORDS * 124);
    assert_eq!(load.per_second.iter().sum::<u64>(), RECORDS);
    assert!(load.ops_per_sec > 0.0);
    assert!(load.latency.p50_ns <= load.latency.p99_ns);
    assert!(load.latency.p99_ns <= load.latency.max_ns);
    assert!(load.disk_bytes > 0, "{engine}: nothing on disk");
    assert!(load.peak_rss_bytes > 0);
    let over = r.phase(Workload::Overwrite).unwrap();
    assert_eq!(over.ops, OVERWRITES);
    let read = r.phase(Workload::ReadRandom).unwrap();
    assert_eq!(read.ops, READS);
    assert_eq!(read.checked, READS, "{engine}: every read is checked");
    assert_eq!(read.latency.count, READS);
}

#[test]
fn every_engine_in_a_child() {
    let tmp = tempfile::tempdir().unwrap();
    for engine in known_engines() {
        let phases = vec![
            Phase {
                workload: Workload::FillRandom,
                ops: 0,
            },
            Phase {
                workload: Workload::Overwrite,
                ops: OVERWRITES,
            },
            Phase {
                workload: Workload::ReadRandom,
                ops: READS,
            },
        ];
        let config = EngineConfig::new(2 << 20, true);
        let dir = tmp.path().join(engine.replace(':', "-"));
        let spec = RunSpec {
            seed: 11,
            ..RunSpec::new(&engine, dir, config, phases, RECORDS)
        };
        let r = run_in_child(exe(), &[], &spec).unwrap();
        check(&r, &engine);
    }
}

#[test]
fn ycsb_scans_and_deletes_in_children() {
    let tmp = tempfile::tempdir().unwrap();
    let phase = |workload, ops| Phase { workload, ops };
    // Point-only woods kinds (boa) refuse scans; every other engine scans.
    let ordered = |engine: &str| {
        engine
            .strip_prefix("woods:")
            .and_then(|k| woods::IndexKind::from_name(k).ok())
            .is_none_or(|k| k.ordered())
    };
    for engine in known_engines().into_iter().filter(|e| ordered(e)) {
        let phases = vec![
            phase(Workload::YcsbLoad, 0),
            phase(Workload::YcsbA, 400),
            phase(Workload::YcsbE, 100),
            phase(Workload::ReadSeq, 5000),
            phase(Workload::DeleteRandom, 200),
            phase(Workload::ReadRandom, 400),
            phase(Workload::SeekRandom, 50),
        ];
        let config = EngineConfig::new(2 << 20, true);
        let dir = tmp.path().join(engine.replace(':', "-"));
        let spec = RunSpec {
            threads: 2,
            miss_ratio: 0.2,
            seek_nexts: 5,
            seed: 4,
            ..RunSpec::new(&engine, dir, config, phases, 1000)
        };
        let r = run_in_child(exe(), &[], &spec).unwrap_or_else(|e| panic!("{engine}: {e}"));
        let e = r.phase(Workload::YcsbE).unwrap();
        assert_eq!(e.checked, e.mix.scanned, "{engine}");
        assert!(e.mix.scanned > e.mix.scans, "{engine}");
        let read = r.phase(Workload::ReadRandom).unwrap();
        assert_eq!(read.checked, 400, "{engine}");
        assert!(read.mix.not_found >= 80, "{engine}: {:?}", read.mix);
        assert_eq!(r.phases.len(), 7);
    }
}

#[test]
fn the_binary_writes_a_table_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("bench.json");
    let engines = known_engines().join(",");
    let out = Command::new(exe())
        .args([
            "--engines",
            &engines,
            "--records",
            "3000",
            "--reads",
            "1000",
        ])
        .args(["--overwrites", "500", "--cache-bytes", "2M", "--seed", "3"])
        .arg("--dir")
        .arg(tmp.path().join("dbs"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ops/s"), "{stdout}");
    assert!(stdout.contains("fillrandom"), "{stdout}");
    assert!(stdout.contains("ratio to woods:btree"), "{stdout}");
    assert!(!stdout.contains("SMOKE RUN"));
    let rep: woods_bench::cli::BenchReport =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(!rep.smoke);
    assert!(rep.failures.is_empty());
    assert_eq!(rep.results.len(), known_engines().len());
    for (r, name) in rep.results.iter().zip(known_engines()) {
        check(r, &name);
    }
    assert!(!tmp.path().join("dbs").join("woods-lsm").exists());
}

#[test]
fn a_synced_run_says_so_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let out = Command::new(exe())
        .args(["--engines", "woods:lsm", "--records", "300", "--sync"])
        .args(["--workloads", "fillrandom,deleterandom:50,readrandom:100"])
        .arg("--dir")
        .arg(tmp.path().join("dbs"))
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("SYNCED WRITES (--sync)"), "{stdout}");
    assert!(stderr.contains("every write SYNCED"), "{stderr}");
    let rep: woods_bench::cli::BenchReport = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join(woods_bench::output::JSON_FILE)).unwrap(),
    )
    .unwrap();
    assert!(rep.sync);
    let r = &rep.results[0];
    assert!(r.spec.config.sync, "the child was told to sync");
    // The child synced: woods' own count has a sync per put of the load and per delete.
    let load = r.phase(Workload::FillRandom).unwrap();
    assert!(load.own.syncs.unwrap() >= 300, "{:?}", load.own);
    let del = r.phase(Workload::DeleteRandom).unwrap();
    assert!(del.own.syncs.unwrap() >= 50, "{:?}", del.own);
    // Phases that write have a device figure or the reason they have none; reads have neither.
    for p in [load, del] {
        assert!(
            p.device_written.is_some() != p.device_unreadable.is_some(),
            "{p:?}"
        );
    }
    let read = r.phase(Workload::ReadRandom).unwrap();
    assert_eq!(
        (read.device_written, &read.device_unreadable),
        (None, &None)
    );
    let md = std::fs::read_to_string(out_dir.join(woods_bench::output::SUMMARY_FILE)).unwrap();
    assert!(md.contains("**Synced writes** (`--sync`)"), "{md}");
    assert!(md.contains("**every write synced**"), "{md}");
    assert!(md.contains("## Write amplification on the device"), "{md}");
    assert!(md.contains("| woods:lsm | deleterandom |"), "{md}");
}

#[test]
fn help_documents_sync_and_the_device_check() {
    let out = Command::new(exe()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--sync"), "{help}");
    assert!(help.contains("device WA"), "{help}");
}

#[test]
fn unknown_engine_is_a_usage_error() {
    let out = Command::new(exe())
        .args(["--engines", "woods:nope", "--records", "10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown engine"));
}

/// `--engine-exe NAME=PATH` runs that engine's child from another binary (here a script that
/// notes each start and runs this binary), the others from this one; a labelled name
/// (`woods:lsm@other`) runs its engine from the binary named for it, beside the same engine
/// from this one, and its results keep the label.
#[test]
fn engine_from_another_binary() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("started");
    let wrapper = tmp.path().join("other-bench");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
            marker.display(),
            exe().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let json = tmp.path().join("run.json");
    let out = Command::new(exe())
        .args([
            "--engines",
            "woods:btree,woods:lsm,woods:lsm@other",
            "--records",
            "2000",
            "--ops",
            "500",
        ])
        .arg("--engine-exe")
        .arg(format!("woods:btree={}", wrapper.display()))
        .arg("--engine-exe")
        .arg(format!("woods:lsm@other={}", wrapper.display()))
        .arg("--dir")
        .arg(tmp.path().join("dbs"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = std::fs::read_to_string(&marker).expect("the other binary ran");
    // `woods:btree` and `woods:lsm@other` from it (the child told the engine, not the label),
    // `woods:lsm` from this binary.
    let lines: Vec<&str> = started.lines().collect();
    assert_eq!(lines.len(), 2, "two children from it: {started}");
    assert!(lines[0].contains("\"engine\":\"woods:btree\""), "{started}");
    assert!(lines[1].contains("\"engine\":\"woods:lsm\""), "{started}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let engines: Vec<&str> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["engine"].as_str().unwrap())
        .collect();
    assert_eq!(engines, ["woods:btree", "woods:lsm", "woods:lsm@other"]);
    let unnamed = Command::new(exe())
        .args(["--engines", "woods:lsm@other", "--records", "2000"])
        .output()
        .unwrap();
    assert!(!unnamed.status.success());
    assert!(
        String::from_utf8_lossy(&unnamed.stderr).contains("needs --engine-exe woods:lsm@other="),
        "{}",
        String::from_utf8_lossy(&unnamed.stderr)
    );
    let bad = Command::new(exe())
        .args([
            "--engines",
            "woods:lsm",
            "--engine-exe",
            "woods:lsm=/nonexistent",
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not an executable file"));
}

/// A child that dies in a later phase (as one OOM-killed in its memory cgroup does) still gives
/// the phases it finished, with the error; the bench reports both.
#[test]
fn a_child_that_dies_gives_the_phases_it_finished() {
    use woods_bench::child::{run_in_child_with, ChildSetup};

    let tmp = tempfile::tempdir().unwrap();
    let engine = "woods:lsm";
    let phases = vec![
        Phase {
            workload: Workload::FillRandom,
            ops: 0,
        },
        Phase {
            workload: Workload::ReadRandom,
            ops: READS,
        },
        Phase {
            workload: Workload::Overwrite,
            ops: OVERWRITES,
        },
    ];
    let config = EngineConfig::new(2 << 20, true);
    let spec = RunSpec::new(engine, tmp.path().join("lsm"), config, phases, RECORDS);
    let setup = ChildSetup {
        die_before_phase: Some(2),
        ..ChildSetup::default()
    };
    let failure = run_in_child_with(exe(), &[], &spec, &setup, None)
        .expect_err("the child aborts before its third phase");
    let text = failure.to_string();
    assert!(text.contains("killed by signal"), "{text}");
    assert!(text.contains("fillrandom, readrandom"), "{text}");
    let r = failure.finished.expect("the two phases it finished");
    assert_eq!(r.engine, engine);
    let names: Vec<Workload> = r.phases.iter().map(|p| p.workload).collect();
    assert_eq!(names, [Workload::FillRandom, Workload::ReadRandom]);
    assert_eq!(r.phases[0].ops, RECORDS);
    assert_eq!(r.phases[1].checked, READS, "every read is checked");

    // Dying before the first phase gives none.
    let setup = ChildSetup {
        die_before_phase: Some(0),
        ..ChildSetup::default()
    };
    let failure = run_in_child_with(exe(), &[], &spec, &setup, None)
        .expect_err("the child aborts before its first phase");
    assert!(failure.finished.is_none());
}
