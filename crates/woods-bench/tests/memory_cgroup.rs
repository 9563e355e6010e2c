//! The memory budget enforced by a memory cgroup per engine: a run within it reports the
//! group's peak, an engine over it is reported as OOM-killed, and the groups are removed.
//! Skipped, with the reason printed, where this process cannot make memory cgroups (not root,
//! no memory controller).

use std::path::Path;
use std::process::Command;

use woods_bench::cgroup::{CgroupParent, Enforcement};
use woods_bench::cli::BenchReport;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_woods-bench"))
}

fn cgroups() -> Option<CgroupParent> {
    match CgroupParent::find() {
        Ok(p) => Some(p),
        Err(why) => {
            eprintln!("skipped: no memory cgroup can be made here: {why}");
            None
        }
    }
}

/// Groups this test's runs left behind.
fn leftovers(parent: &CgroupParent, pid: u32) -> Vec<String> {
    let prefix = format!("woods-bench-{pid}-");
    std::fs::read_dir(&parent.dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn engines_run_within_their_cgroup() {
    let Some(parent) = cgroups() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("bench.json");
    let child = Command::new(exe())
        .args(["--engines", "woods:btree,woods:lsm", "--records", "20000"])
        .args([
            "--workloads",
            "ycsb-load,ycsb-a:5000",
            "--cache-bytes",
            "2M",
        ])
        .arg("--dir")
        .arg(tmp.path().join("dbs"))
        .arg("--json")
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("memory budget ENFORCED by cgroup"),
        "{stderr}"
    );
    let rep: BenchReport = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(rep.memory.enforcement, parent.version.enforcement());
    let limit = rep.memory_bytes + rep.memory.allowance_bytes;
    for r in &rep.results {
        assert_eq!(r.enforcement, parent.version.enforcement());
        assert_eq!(r.cgroup_limit_bytes, Some(limit));
        for p in &r.phases {
            let peak = p.memory_peak_bytes.expect("a cgroup's peak");
            assert!(peak > 0 && peak <= limit, "{}: {peak} > {limit}", r.engine);
            assert!(!p.cache_assisted);
        }
    }
    assert!(leftovers(&parent, pid).is_empty());
}

#[test]
fn an_engine_over_its_cgroup_is_reported_oom_killed() {
    let Some(parent) = cgroups() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // 256 KiB in all: the bench's own histograms do not fit, so the child is killed as soon
    // as it starts.
    let child = Command::new(exe())
        .args(["--engines", "woods:lsm", "--records", "3000"])
        .args(["--cache-bytes", "256K", "--memory-allowance", "0"])
        .arg("--dir")
        .arg(tmp.path().join("dbs"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("woods:lsm: FAILED: engine woods:lsm was OOM-KILLED in its memory cgroup"),
        "{stdout}"
    );
    assert!(leftovers(&parent, pid).is_empty());
}

#[test]
fn no_cgroup_says_the_budget_is_not_enforced() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("bench.json");
    let out = Command::new(exe())
        .args([
            "--engines",
            "woods:lsm",
            "--records",
            "3000",
            "--ops",
            "500",
        ])
        .args(["--cache-bytes", "2M", "--no-cgroup"])
        .arg("--dir")
        .arg(tmp.path().join("dbs"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("memory budget NOT ENFORCED"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("not enforced"), "{stdout}");
    let rep: BenchReport = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(rep.memory.enforcement, Enforcement::None);
    assert_eq!(rep.memory.why_not.as_deref(), Some("--no-cgroup"));
    for p in &rep.results[0].phases {
        assert_eq!(p.memory_peak_bytes, None);
        // woods does direct I/O: its data does not ride on the page cache.
        assert_eq!(p.cache_assisted, !p.direct_io);
    }
}
