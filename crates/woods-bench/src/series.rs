//! `woods bench --series`: figures of several runs drawn against what sets the runs apart (by
//! default their record counts), one line per engine: the shape of a paper's "time against data
//! size" figures. Each input is a run's `bench.json` (`--json` or `--out`); the output is an SVG
//! chart per figure and `series.md`, a table of every figure.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::charts::{color, SIZE};
use crate::cli::BenchReport;
use crate::report;
use crate::workload::{PhaseResult, Workload};

/// One run of the series: its x and its report.
pub struct Point {
    pub x: f64,
    pub report: BenchReport,
}

/// Which phase of a run a figure is taken from.
#[derive(Clone, Copy)]
enum Pick {
    /// The first phase (a load).
    Load,
    /// The first `readrandom` phase, else the first phase that reads (not an FD-tree mix,
    /// whose inserts and deletes are not point queries).
    Read,
    /// The first `search-insert` phase (the FD-tree paper's Figs. 7 and 10).
    SearchInsert,
}

/// A figure drawn against x.
struct Figure {
    file: &'static str,
    title: &'static str,
    y_desc: &'static str,
    pick: Pick,
    value: fn(&PhaseResult) -> Option<f64>,
    /// How the table shows a value.
    show: fn(f64) -> String,
}

fn figures() -> Vec<Figure> {
    vec![
        Figure {
            file: "insert-mean",
            title: "average insertion time",
            y_desc: "mean latency of a put",
            pick: Pick::Load,
            value: |p| Some(p.latency.mean_ns),
            show: report::ns,
        },
        Figure {
            file: "insert-max",
            title: "maximum insertion time (wall clock)",
            y_desc: "longest put",
            pick: Pick::Load,
            value: |p| Some(p.latency.max_ns as f64),
            show: report::ns,
        },
        Figure {
            file: "insert-max-wait",
            title: "maximum insertion wait for index work or memtable room (as woods records it)",
            y_desc: "longest wait of one put",
            pick: Pick::Load,
            value: |p| Some(p.own.write_waits?.max_ns() as f64),
            show: report::ns,
        },
        Figure {
            file: "insert-p9999",
            title: "99.99th percentile insertion time",
            y_desc: "p99.99 latency of a put",
            pick: Pick::Load,
            value: |p| Some(p.latency.p9999_ns as f64),
            show: report::ns,
        },
        Figure {
            file: "load-throughput",
            title: "load throughput (drain and close included)",
            y_desc: "puts per second",
            pick: Pick::Load,
            value: |p| Some(p.ops_per_sec),
            show: |v| format!("{v:.0}"),
        },
        Figure {
            file: "load-write-amp",
            title: "write amplification of the load",
            y_desc: "device bytes written / user bytes",
            pick: Pick::Load,
            value: |p| p.write_amp,
            show: |v| format!("{v:.2}"),
        },
        Figure {
            file: "query-mean",
            title: "average point query time",
            y_desc: "mean latency of a get",
            pick: Pick::Read,
            value: |p| Some(p.latency.mean_ns),
            show: report::ns,
        },
        Figure {
            file: "search-insert-mean",
            title: "average time per operation, 50% search / 50% insert",
            y_desc: "mean latency of a search or insert",
            pick: Pick::SearchInsert,
            value: |p| Some(p.latency.mean_ns),
            show: report::ns,
        },
        Figure {
            file: "search-insert-insert-max",
            title: "worst insertion time, 50% search / 50% insert",
            y_desc: "longest insert",
            pick: Pick::SearchInsert,
            value: |p| Some(p.latency_by_op.get("insert")?.max_ns as f64),
            show: report::ns,
        },
    ]
}

fn phase(r: &crate::workload::EngineResult, pick: Pick) -> Option<&PhaseResult> {
    match pick {
        Pick::Load => r.phases.first(),
        Pick::Read => r
            .phases
            .iter()
            .find(|p| p.workload == Workload::ReadRandom)
            .or_else(|| {
                r.phases
                    .iter()
                    .find(|p| p.workload.reads() && !p.workload.is_fd_mix())
            }),
        Pick::SearchInsert => r
            .phases
            .iter()
            .find(|p| p.workload == Workload::SearchInsert),
    }
}

/// Reads `[X=]FILE` arguments: a run's report, at x = X or, without it, its record count.
pub fn load(args: &[String]) -> Result<Vec<Point>, String> {
    let mut out = Vec::new();
    for a in args {
        let (x, path) = match a.split_once('=') {
            Some((x, p)) => (
                Some(
                    x.parse::<f64>()
                        .map_err(|_| format!("--series {a}: {x:?} is not a number"))?,
                ),
                p,
            ),
            None => (None, a.as_str()),
        };
        let text =
            fs::read_to_string(path).map_err(|e| format!("--series: reading {path}: {e}"))?;
        let report: BenchReport = serde_json::from_str(&text)
            .map_err(|e| format!("--series: {path} is not a bench report: {e}"))?;
        out.push(Point {
            x: x.unwrap_or(report.records as f64),
            report,
        });
    }
    if out.is_empty() {
        return Err("--series needs at least one report".into());
    }
    out.sort_by(|a, b| a.x.total_cmp(&b.x));
    Ok(out)
}

/// The line a run's engine result belongs to: the engine, and its load workload where the
/// series has the engine under more than one (a B-tree bulk-loaded by `fillseq` beside one
/// grown by `fillrandom` are two lines).
fn line_name(points: &[Point], r: &crate::workload::EngineResult) -> String {
    let load = |r: &crate::workload::EngineResult| r.phases.first().map(|p| p.workload);
    let mut loads: Vec<Workload> = points
        .iter()
        .flat_map(|p| &p.report.results)
        .filter(|o| o.engine == r.engine)
        .filter_map(load)
        .collect();
    loads.sort_by_key(|w| w.name());
    loads.dedup();
    match load(r) {
        Some(w) if loads.len() > 1 => format!("{} ({})", r.engine, w.name()),
        _ => r.engine.clone(),
    }
}

/// Every engine's (x, value) points of a figure, engines in order of first appearance.
fn lines(points: &[Point], f: &Figure) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut order: Vec<String> = Vec::new();
    let mut by: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for p in points {
        for r in &p.report.results {
            let name = line_name(points, r);
            if !order.contains(&name) {
                order.push(name.clone());
            }
            if let Some(v) = phase(r, f.pick).and_then(f.value) {
                by.entry(name).or_default().push((p.x, v));
            }
        }
    }
    order
        .into_iter()
        .filter_map(|e| by.remove(&e).map(|pts| (e, pts)))
        .collect()
}

/// Draws every figure into `out` (made if missing) with x described by `x_desc`; returns the
/// files written (the charts of figures no engine has are skipped) and `series.md`.
pub fn draw(points: &[Point], x_desc: &str, out: &Path) -> Result<Vec<PathBuf>, String> {
    fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let engines: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for p in points {
            for r in &p.report.results {
                let name = line_name(points, r);
                if !v.contains(&name) {
                    v.push(name);
                }
            }
        }
        v
    };
    let mut files = Vec::new();
    let mut md = String::new();
    let _ = writeln!(md, "# Series: {} runs against {x_desc}\n", points.len());
    for p in points {
        let _ = writeln!(md, "- x = {}: `{}`", p.x, p.report.command);
    }
    for f in figures() {
        let ls = lines(points, &f);
        if ls.is_empty() {
            continue;
        }
        let path = out.join(format!("{}.svg", f.file));
        chart(&path, &f, x_desc, &ls, &engines)?;
        files.push(path);
        let _ = writeln!(md, "\n## {}\n\n![{}]({}.svg)\n", f.title, f.title, f.file);
        let _ = write!(md, "| {x_desc} |");
        for (e, _) in &ls {
            let _ = write!(md, " {e} |");
        }
        let _ = write!(md, "\n|---|");
        for _ in &ls {
            let _ = write!(md, "---:|");
        }
        md.push('\n');
        // A row per x: runs at the same x (engines run apart) share one.
        let mut xs: Vec<f64> = points.iter().map(|p| p.x).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        for x in xs {
            let _ = write!(md, "| {x} |");
            for (_, pts) in &ls {
                match pts.iter().find(|(px, _)| *px == x) {
                    Some((_, v)) => {
                        let _ = write!(md, " {} |", (f.show)(*v));
                    }
                    None => md.push_str(" - |"),
                }
            }
            md.push('\n');
        }
    }
    let summary = out.join("series.md");
    fs::write(&summary, md).map_err(|e| format!("writing {}: {e}", summary.display()))?;
    files.push(summary);
    Ok(files)
}

/// Log-log line chart of one figure, an engine's color as in the runs' own charts (its place in
/// the first run that has it).
fn chart(
    path: &Path,
    f: &Figure,
    x_desc: &str,
    lines: &[(String, Vec<(f64, f64)>)],
    engines: &[String],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let all = lines.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    // Room around the points on log axes (and a range for a single point).
    let (x0, x1) = ((x0 / 1.3).max(1e-9), (x1 * 1.3).max(x0 * 2.0));
    let (y0, y1) = ((y0 / 2.0).max(1e-9), (y1 * 3.0).max(y0 * 2.0));
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut c = ChartBuilder::on(&root)
        .caption(f.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(|e| err(&e))?;
    let show = f.show;
    c.configure_mesh()
        .x_desc(x_desc)
        .y_desc(f.y_desc)
        .y_label_formatter(&|v| show(*v))
        .x_label_formatter(&|v| {
            if *v >= 1e6 {
                format!("{}M", v / 1e6)
            } else if *v >= 1e3 {
                format!("{}k", v / 1e3)
            } else {
                format!("{v}")
            }
        })
        .draw()
        .map_err(|e| err(&e))?;
    for (engine, pts) in lines {
        let i = engines.iter().position(|e| e == engine).unwrap_or(0);
        let col = color(i);
        c.draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(engine.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
        c.draw_series(pts.iter().map(|&p| Circle::new(p, 4, col.filled())))
            .map_err(|e| err(&e))?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
