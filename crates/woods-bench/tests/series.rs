//! `--series`: two small runs of two engines at different record counts, then their figures
//! drawn against x: a chart per figure and a table naming every engine at every x.

use std::fs;
use std::path::Path;
use std::process::Command;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_woods-bench"))
}

fn bench(args: &[&str]) -> String {
    let out = Command::new(exe()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn figures_of_runs_against_their_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let t = |p: &str| tmp.path().join(p).display().to_string();
    for (records, json) in [("2000", "small.json"), ("5000", "large.json")] {
        bench(&[
            "--engines",
            "woods:lsm,woods:btree",
            "--records",
            records,
            "--workloads",
            "fillrandom,readrandom:300",
            "--dir",
            &t("dbs"),
            "--json",
            &t(json),
        ]);
    }
    let listed = bench(&[
        "--series",
        &t("small.json"),
        &format!("7000={}", t("large.json")),
        "--x-desc",
        "size",
        "--out",
        &t("series"),
    ]);
    let md = fs::read_to_string(tmp.path().join("series/series.md")).unwrap();
    for f in [
        "insert-mean",
        "insert-max",
        "insert-max-wait",
        "insert-p9999",
        "load-throughput",
        "load-write-amp",
        "query-mean",
    ] {
        let svg = tmp.path().join(format!("series/{f}.svg"));
        let text = fs::read_to_string(&svg).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(text.starts_with("<svg"), "{f}");
        assert!(
            text.contains("woods:lsm") && text.contains("woods:btree"),
            "{f}"
        );
        assert!(listed.contains(&format!("{f}.svg")), "{listed}");
        assert!(md.contains(&format!("({f}.svg)")), "{f} in series.md");
    }
    // One row per x: the record count of the first, the given x of the second.
    assert!(md.contains("| size | woods:lsm | woods:btree |"), "{md}");
    assert!(md.lines().any(|l| l.starts_with("| 2000 |")), "{md}");
    assert!(md.lines().any(|l| l.starts_with("| 7000 |")), "{md}");
    let bad = Command::new(exe())
        .args(["--series", &t("missing.json"), "--out", &t("x")])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("missing.json"));

    // The same engine loaded two ways (a B-tree bulk-loaded by fillseq beside the one grown by
    // fillrandom) is two lines, named by their loads.
    bench(&[
        "--engines",
        "woods:btree",
        "--records",
        "2000",
        "--workloads",
        "fillseq,readrandom:300",
        "--dir",
        &t("dbs"),
        "--json",
        &t("bulk.json"),
    ]);
    bench(&[
        "--series",
        &t("small.json"),
        &t("bulk.json"),
        "--out",
        &t("two-ways"),
    ]);
    let md = fs::read_to_string(tmp.path().join("two-ways/series.md")).unwrap();
    assert!(
        md.contains("| records | woods:lsm | woods:btree (fillrandom) | woods:btree (fillseq) |"),
        "{md}"
    );
    // The two runs share x = 2000: one row of each table holds both, no value missing.
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| 2000 |")).collect();
    assert_eq!(rows.len(), 7, "a row per figure: {md}");
    assert!(rows.iter().all(|r| !r.contains(" - |")), "{md}");
}

/// Runs of the FD-tree paper's 50/50 mix at two sizes: its mean time per operation (Fig. 10)
/// and its worst insert (Fig. 7) against size; the mix is not taken for a point-query figure.
#[test]
fn search_insert_against_size() {
    let tmp = tempfile::tempdir().unwrap();
    let t = |p: &str| tmp.path().join(p).display().to_string();
    for (records, json) in [("2000", "small.json"), ("5000", "large.json")] {
        bench(&[
            "--engines",
            "woods:fdtree,woods:lsm",
            "--records",
            records,
            "--key-size",
            "8",
            "--value-size",
            "8",
            "--hashed-keys",
            "--workloads",
            "fillrandom,search-insert:500",
            "--dir",
            &t("dbs"),
            "--json",
            &t(json),
        ]);
    }
    let listed = bench(&[
        "--series",
        &t("small.json"),
        &t("large.json"),
        "--out",
        &t("series"),
    ]);
    for f in ["search-insert-mean", "search-insert-insert-max"] {
        let text = fs::read_to_string(tmp.path().join(format!("series/{f}.svg")))
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(
            text.contains("woods:fdtree") && text.contains("woods:lsm"),
            "{f}"
        );
        assert!(listed.contains(&format!("{f}.svg")), "{listed}");
    }
    assert!(!tmp.path().join("series/query-mean.svg").exists());
}
