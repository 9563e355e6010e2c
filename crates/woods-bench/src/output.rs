//! `--out DIR`: everything a run measured, as files: `bench.json` (every figure), SVG charts
//! per phase, and `summary.md`, which a person reads first: the machine, the command, how the
//! memory budget held, the tables, and the charts.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use crate::charts::{self, Series};
use crate::cli::BenchReport;
use crate::report;
use crate::workload::Workload;

/// The JSON file's name in the output directory.
pub const JSON_FILE: &str = "bench.json";
/// The summary's name in the output directory.
pub const SUMMARY_FILE: &str = "summary.md";

/// A chart that was written: its file name (in the output directory) and what it shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartFile {
    pub file: String,
    pub title: String,
}

/// The charts of one phase.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhaseCharts {
    /// `ycsb-a` (phase 2).
    pub heading: String,
    pub charts: Vec<ChartFile>,
}

/// The engines that ran phase `n` (every engine that did not fail), each with its phase.
fn phase_series(rep: &BenchReport, n: usize, w: Workload) -> Vec<Series<'_>> {
    rep.results
        .iter()
        .enumerate()
        .filter_map(|(index, r)| {
            let phase = r.phases.get(n).filter(|p| p.workload == w)?;
            Some(Series {
                engine: &r.engine,
                index,
                phase,
            })
        })
        .collect()
}

/// Writes every chart of the run into `dir`: for each phase, throughput over time, the
/// latency spectrum and ops/s bars, and for phases that write, write-amplification bars.
pub fn write_charts(rep: &BenchReport, dir: &Path) -> Result<Vec<PhaseCharts>, String> {
    let mut out = Vec::new();
    let Some(first) = rep.results.first() else {
        return Ok(out);
    };
    for (n, p) in first.phases.iter().enumerate() {
        let w = p.workload;
        let series = phase_series(rep, n, w);
        let tag = format!("{}-{}", n + 1, w.name());
        let mut pc = PhaseCharts {
            heading: format!("Phase {}: {}", n + 1, p.label()),
            charts: Vec::new(),
        };
        type Draw = fn(&Path, &str, &[Series]) -> Result<(), String>;
        let mut kinds: Vec<(&str, String, Draw)> = vec![
            (
                "throughput",
                format!("{}: operations completed per second", w.name()),
                charts::throughput,
            ),
            (
                "latency",
                format!("{}: latency by percentile", w.name()),
                charts::latency,
            ),
            (
                "ops",
                format!("{}: operations per second", w.name()),
                charts::ops_per_sec,
            ),
        ];
        if w.writes() {
            kinds.push((
                "write-amp",
                format!("{}: write amplification", w.name()),
                charts::write_amp,
            ));
        }
        if series.iter().any(|s| !s.phase.window_mean_ns.is_empty()) {
            kinds.push((
                "windows",
                format!("{}: mean time per operation by window", w.name()),
                charts::windows,
            ));
        }
        for (kind, title, draw) in kinds {
            let file = format!("{kind}-{tag}.svg");
            let path = dir.join(&file);
            draw(&path, &title, &series).map_err(|e| format!("drawing {}: {e}", path.display()))?;
            pc.charts.push(ChartFile { file, title });
        }
        out.push(pc);
    }
    Ok(out)
}

/// `summary.md`: what a person reads first.
pub fn summary(rep: &BenchReport, charts: &[PhaseCharts]) -> String {
    let mut s = String::new();
    let m = &rep.machine;
    let _ = writeln!(s, "# woods bench\n");
    if rep.smoke {
        let _ = writeln!(
            s,
            "> **Smoke run** (no `--records`): it shows the instrument works; its figures are \
             not a result.\n"
        );
    }
    if rep.sync {
        let _ = writeln!(
            s,
            "> **Synced writes** (`--sync`): every write of every engine was synced to the \
             device before it returned; compare these figures only with other synced runs.\n"
        );
    }
    if rep.no_wal {
        let _ = writeln!(
            s,
            "> **No write-ahead log** (`--no-wal`): the engines wrote without their logs (a bulk \
             load that a crash may lose); compare these figures only with other such runs.\n"
        );
    }
    let _ = writeln!(s, "```\n{}\n```\n", rep.command);
    let _ = writeln!(
        s,
        "- **Machine**: {} CPUs{}, {}{}",
        m.cpus,
        m.cpu_model
            .as_deref()
            .map_or(String::new(), |c| format!(" ({c})")),
        m.kernel,
        m.memory_bytes.map_or(String::new(), |b| format!(
            ", {} memory",
            report::bytes(b as f64)
        )),
    );
    let _ = writeln!(
        s,
        "- **Databases**: `{}` on {}{}",
        m.dir,
        m.file_system.as_deref().unwrap_or("an unknown file system"),
        match (&m.device, &m.mount_point) {
            (Some(d), Some(p)) => format!(" (`{d}` mounted at `{p}`)"),
            _ => String::new(),
        }
    );
    match (&m.block_device, &m.block_device_why_not) {
        (Some(d), _) => {
            let _ = writeln!(
                s,
                "- **Device writes**: `{d}`, from `{}` (see [Write amplification on the \
                 device](#write-amplification-on-the-device))",
                m.block_device_counts.as_deref().unwrap_or("?")
            );
        }
        (None, Some(why)) => {
            let _ = writeln!(
                s,
                "- **Device writes**: not readable ({why}): WA is from `/proc` only"
            );
        }
        (None, None) => {}
    }
    if let Some(kib) = m.read_ahead_kib {
        let _ = writeln!(
            s,
            "- **Read-ahead**: {kib} KiB on the device{}",
            if kib > crate::machine::LARGE_READ_AHEAD_KIB {
                " (large: engines reading through `mmap`, LevelDB and LMDB, read up to this \
                 much around each page fault; Linux's default is 128 KiB)"
            } else {
                ""
            }
        );
    }
    let names = |direct: bool| -> Vec<String> {
        rep.results
            .iter()
            .filter(|r| r.phases.iter().any(|p| p.direct_io) == direct)
            .map(|r| format!("`{}`", r.engine))
            .collect()
    };
    let (on, off) = (names(true), names(false));
    let _ = writeln!(
        s,
        "- **Direct I/O**: {}; {}",
        if rep.direct_io_requested {
            "requested"
        } else {
            "not requested (`--no-direct-io`)"
        },
        match (on.is_empty(), off.is_empty()) {
            (_, true) if !on.is_empty() => "in effect for every engine".to_string(),
            (true, _) => "in effect for no engine".to_string(),
            _ => format!(
                "in effect for {}; not for {}",
                on.join(", "),
                off.join(", ")
            ),
        }
    );
    let versions: Vec<String> = rep
        .results
        .iter()
        .filter_map(|r| Some(format!("`{}` {}", r.engine, r.version.as_ref()?)))
        .collect();
    if !versions.is_empty() {
        let _ = writeln!(s, "- **Versions**: {}", versions.join("; "));
    }
    let mem = &rep.memory;
    let _ = write!(
        s,
        "- **Memory**: a budget of {} per engine (cache {}, write buffers 2 × {}), ",
        report::bytes(rep.memory_bytes as f64),
        report::bytes(mem.cache_bytes as f64),
        report::bytes(mem.write_buffer_bytes as f64),
    );
    if mem.enforcement.enforced() {
        let _ = writeln!(
            s,
            "**enforced** by a {} memory limit of the budget + an allowance of {} for the \
             bench and the engine's fixed costs, page cache included",
            mem.enforcement.name(),
            report::bytes(mem.allowance_bytes as f64)
        );
    } else {
        let _ = writeln!(
            s,
            "**not enforced** ({}); {}; engines without direct I/O are **cache-assisted**",
            mem.why_not.as_deref().unwrap_or("no cgroup"),
            if mem.page_cache_dropped {
                "the page cache was dropped before each phase"
            } else {
                "the page cache could not be dropped"
            }
        );
    }
    let data = rep.records * (rep.key_size + rep.value_size) as u64;
    let _ = writeln!(
        s,
        "- **Run**: {} records of {} + {} bytes ({}{}); phases {}; {} client thread(s); {}{}{}; \
         seed {}",
        rep.records,
        rep.key_size,
        rep.value_size,
        report::bytes(data as f64),
        if rep.hashed_keys { ", hashed keys" } else { "" },
        crate::cli::describe(&rep.phases),
        rep.threads,
        if rep.sync {
            "**every write synced** to the device (`--sync`)"
        } else {
            "writes not synced per write (no `--sync`)"
        },
        if rep.no_wal {
            "; **no write-ahead log** (`--no-wal`)"
        } else {
            ""
        },
        rep.duration_secs
            .map(|d| format!("; **each phase stopped after {d} s** (`--duration`)"))
            .unwrap_or_default(),
        rep.seed
    );
    let _ = writeln!(
        s,
        "- **Every figure**: [`{JSON_FILE}`]({JSON_FILE}); the columns are explained in \
         `docs/benchmarks.md` and `woods bench --help`\n"
    );
    if !rep.results.is_empty() {
        let _ = writeln!(
            s,
            "## Figures\n\n{}",
            report::figures(&rep.results).markdown()
        );
    }
    if let Some(g) = report::latency_by_op(&rep.results) {
        let _ = writeln!(
            s,
            "## Latency by operation\n\nThe mixed phases' operations timed by kind (`read` is a \
             get, the FD-tree paper's search).\n\n{}",
            g.markdown()
        );
    }
    if let Some(r) = report::ratios(&rep.results) {
        let _ = writeln!(
            s,
            "## Ratios to `{}`\n\nEach engine's figure ÷ the first engine's in the same phase \
             (above 1: more ops/s, or more latency, amplification, CPU or memory).\n\n{}",
            rep.results[0].engine,
            r.markdown()
        );
    }
    if let Some(d) = device_section(rep) {
        let _ = writeln!(s, "{d}");
    }
    if !rep.failures.is_empty() {
        let _ = writeln!(s, "## Failures\n");
        for (name, why) in &rep.failures {
            let _ = writeln!(s, "- `{name}`: {why}");
        }
        let _ = writeln!(s);
    }
    if !charts.is_empty() {
        let _ = writeln!(
            s,
            "## Charts\n\nThroughput: operations completed in each second (stalls are dips); \
             the thick line at 0 is the drain of background work and the close, which ops/s \
             includes. Latency: the percentile spectrum of every operation (HDR histogram), \
             with a 1/(1 − p) axis so that 99%, 99.9%, 99.99% get equal room.\n"
        );
    }
    for pc in charts {
        let _ = writeln!(s, "### {}\n", pc.heading);
        for c in &pc.charts {
            let _ = writeln!(s, "[![{}]({})]({})\n", c.title, c.file, c.file);
        }
    }
    s
}

/// The phases that write, one row each: what `/proc` and the block device say was written, as
/// bytes and as WA, and whether the device saw at least 95% of what `/proc` counted. `None`
/// when no phase writes.
pub fn device_table(rep: &BenchReport) -> Option<report::Grid> {
    let header = [
        "engine",
        "phase",
        "user bytes",
        "/proc written",
        "device written",
        "WA",
        "device WA",
        "check",
    ];
    let amp = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let size = |v: Option<u64>| v.map_or("-".to_string(), |v| report::bytes(v as f64));
    let mut rows = Vec::new();
    for r in &rep.results {
        for p in r.phases.iter().filter(|p| p.workload.writes()) {
            let check = match (&p.device_warning, &p.device_unreadable, p.device_written) {
                (Some(w), _, _) => format!("**LOW**: {w}"),
                (None, Some(why), _) => why.clone(),
                (None, None, Some(_)) => "ok".to_string(),
                (None, None, None) => "-".to_string(),
            };
            rows.push(vec![
                r.engine.clone(),
                p.workload.name().to_string(),
                report::bytes(p.user_bytes as f64),
                size(p.proc_written),
                size(p.device_written),
                amp(p.write_amp),
                amp(p.device_write_amp),
                check,
            ]);
        }
    }
    (!rows.is_empty()).then(|| report::Grid {
        header: header.iter().map(|h| h.to_string()).collect(),
        rows,
        left: 2,
        text: 2,
    })
}

/// The summary's section on the device cross-check of write amplification.
fn device_section(rep: &BenchReport) -> Option<String> {
    let table = device_table(rep)?;
    let device = rep
        .machine
        .block_device
        .as_deref()
        .map_or("the block device under `--dir`".to_string(), |d| {
            format!("the block device under `--dir`, `{d}`")
        });
    Some(format!(
        "## Write amplification on the device\n\n\
         For each phase that writes, what the engine's process wrote by `/proc/self/io` \
         (`write_bytes` − `cancelled_write_bytes`, the WA of the tables above) and what {device} \
         wrote (sectors written × 512), both from before the engine opened to after it closed, \
         the engine's files synced before each reading. The device also counts every other \
         process's writes and the file system's own (journal, inodes), so its WA is an upper \
         bound of the engine's; the check is that it saw at least {:.0}% of the `/proc` figure \
         (from {} written): less means `/proc` counted writes that never reached the device.\n\n{}",
        100.0 * crate::device::MIN_DEVICE_SHARE,
        report::bytes(crate::device::MIN_CHECKED_BYTES as f64),
        table.markdown()
    ))
}

/// Writes `bench.json`, the charts and `summary.md` into `dir` (made if missing). Returns the
/// paths written.
pub fn write_dir(rep: &BenchReport, dir: &Path) -> Result<Vec<PathBuf>, String> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    let json = serde_json::to_string_pretty(rep).map_err(|e| e.to_string())?;
    let path = dir.join(JSON_FILE);
    fs::write(&path, json).map_err(|e| format!("writing {}: {e}", path.display()))?;
    written.push(path);
    let charts = write_charts(rep, dir)?;
    written.extend(
        charts
            .iter()
            .flat_map(|pc| pc.charts.iter().map(|c| dir.join(&c.file))),
    );
    let path = dir.join(SUMMARY_FILE);
    fs::write(&path, summary(rep, &charts))
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    written.push(path);
    Ok(written)
}
