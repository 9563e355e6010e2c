//! `--out DIR`: the JSON, the SVG charts and the markdown summary of a small run of two
//! engines (in this process) are written, are well-formed, and name every engine and phase.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use woods_bench::cli::{BenchReport, MemoryReport};
use woods_bench::engine::EngineConfig;
use woods_bench::machine::Machine;
use woods_bench::output::{self, JSON_FILE, SUMMARY_FILE};
use woods_bench::workload::{self, EngineResult, Phase, RunSpec, Workload};

const ENGINES: [&str; 2] = ["woods:btree", "woods:lsm"];

fn run(dir: &Path, engine: &str) -> EngineResult {
    let phase = |workload, ops| Phase { workload, ops };
    let phases = vec![
        phase(Workload::FillRandom, 0),
        phase(Workload::ReadRandom, 1000),
    ];
    let config = EngineConfig::new(2 << 20, true);
    let dir = dir.join(engine.replace(':', "-"));
    let spec = RunSpec {
        seed: 5,
        ..RunSpec::new(engine, dir, config, phases, 3000)
    };
    workload::run(&spec).unwrap_or_else(|e| panic!("{engine}: {e}"))
}

/// Tags open and close in order (`<a><b/></a>`), text has no stray `<`, and the document is
/// one `<svg>` element: enough to tell a truncated or garbled file.
fn assert_well_formed(text: &str, file: &str) {
    assert!(text.trim_start().starts_with("<svg"), "{file}: not an SVG");
    assert!(text.trim_end().ends_with("</svg>"), "{file}: truncated");
    let mut open: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        let end = rest[at..]
            .find('>')
            .unwrap_or_else(|| panic!("{file}: unclosed tag"));
        let tag = &rest[at + 1..at + end];
        rest = &rest[at + end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') || tag.ends_with('/') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                open.pop().as_deref(),
                Some(name.trim()),
                "{file}: </{name}> closes the wrong element"
            );
        } else {
            let name = tag.split_whitespace().next().unwrap_or("");
            assert!(!name.is_empty(), "{file}: empty tag");
            open.push(name.to_string());
        }
    }
    assert!(open.is_empty(), "{file}: unclosed {open:?}");
}

#[test]
fn out_dir_holds_json_charts_and_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let results: Vec<EngineResult> = ENGINES.iter().map(|e| run(tmp.path(), e)).collect();
    let phases = results[0].spec.phases.clone();
    let rep = BenchReport {
        command: "woods bench --records 3000 --out 'the dir'".into(),
        machine: Machine::probe(tmp.path()),
        memory: MemoryReport {
            why_not: Some("a test".into()),
            ..MemoryReport::default()
        },
        smoke: false,
        records: 3000,
        phases,
        threads: 1,
        miss_ratio: 0.0,
        sequential_percent: 0.0,
        seek_nexts: 10,
        duration_secs: None,
        distribution: None,
        key_size: 24,
        value_size: 100,
        memory_bytes: 2 << 20,
        direct_io_requested: true,
        sync: false,
        no_wal: false,
        hashed_keys: false,
        seed: 5,
        results,
        failures: vec![("woods:nope".into(), "it fell over".into())],
    };
    let out = tmp.path().join("out");
    let written = output::write_dir(&rep, &out).unwrap();
    for p in &written {
        assert!(p.is_file(), "{} was not written", p.display());
    }

    // The JSON reads back with every figure, spectra included.
    let back: BenchReport =
        serde_json::from_str(&fs::read_to_string(out.join(JSON_FILE)).unwrap()).unwrap();
    assert_eq!(back.results.len(), 2);
    assert!(back.results[0].phases[0].latency.spectrum.len() > 100);
    assert!(back.results[0].phases[0].ops_secs > 0.0);

    // Four charts for the load (it writes), three for the reads.
    let svgs: BTreeSet<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".svg"))
        .collect();
    let expected: BTreeSet<String> = [
        "throughput-1-fillrandom.svg",
        "latency-1-fillrandom.svg",
        "ops-1-fillrandom.svg",
        "write-amp-1-fillrandom.svg",
        "throughput-2-readrandom.svg",
        "latency-2-readrandom.svg",
        "ops-2-readrandom.svg",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(svgs, expected);
    for file in &svgs {
        let text = fs::read_to_string(out.join(file)).unwrap();
        assert_well_formed(&text, file);
        for e in ENGINES {
            assert!(text.contains(e), "{file} does not name {e}");
        }
    }

    // The summary: the command, the machine, both tables, the failure, a link to each chart.
    let md = fs::read_to_string(out.join(SUMMARY_FILE)).unwrap();
    assert!(
        md.contains("woods bench --records 3000 --out 'the dir'"),
        "{md}"
    );
    assert!(md.contains("**Machine**"), "{md}");
    assert!(md.contains("**not enforced** (a test)"), "{md}");
    assert!(md.contains("## Ratios to `woods:btree`"), "{md}");
    assert!(md.contains("| woods:lsm | readrandom |"), "{md}");
    assert!(md.contains("`woods:nope`: it fell over"), "{md}");
    assert!(md.contains(&format!("]({JSON_FILE})")), "{md}");
    for file in &svgs {
        assert!(md.contains(&format!("]({file})")), "no link to {file}");
    }
    // The device cross-check: a row per engine for the load (the reads write nothing), each
    // with the device's figure or why there is none, and no shortfall.
    assert!(md.contains("## Write amplification on the device"), "{md}");
    let dev = output::device_table(&rep).unwrap();
    assert_eq!(dev.rows.len(), 2);
    for (row, p) in dev
        .rows
        .iter()
        .zip(rep.results.iter().map(|r| &r.phases[0]))
    {
        assert_eq!(row[1], "fillrandom");
        match (p.device_written, &p.device_unreadable) {
            (Some(_), None) => assert_eq!(row.last().unwrap(), "ok", "{row:?}"),
            (None, Some(why)) => assert_eq!(row.last().unwrap(), why),
            other => panic!("{other:?}"),
        }
        assert!(md.contains(&dev.markdown()), "{md}");
    }
    assert!(md.contains("**Device writes**"), "{md}");
    // Every table row has the header's number of cells.
    for table in md.split("\n\n").filter(|b| b.starts_with("| ")) {
        let cells: Vec<usize> = table.lines().map(|l| l.matches(" | ").count()).collect();
        assert!(cells.iter().all(|&c| c == cells[0]), "{table}");
    }
}
