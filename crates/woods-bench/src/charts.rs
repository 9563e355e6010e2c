//! Charts of a run as SVG files (plotters' SVG backend, no fonts needed: the text is SVG text):
//! throughput over time, the latency percentile spectrum, ops/s bars and write-amplification
//! bars, each for one phase with every engine in it; and plain lines ([`lines`]) for `woods
//! bench aging`.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report;
use crate::workload::PhaseResult;

/// Width and height of every chart in pixels.
pub const SIZE: (u32, u32) = (960, 540);

/// One engine's figures of the phase a chart is about.
pub struct Series<'a> {
    pub engine: &'a str,
    /// The engine's position in the run: it picks the engine's color in every chart.
    pub index: usize,
    pub phase: &'a PhaseResult,
}

/// Matplotlib's tab10: distinct, and kind to the common color blindnesses.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The color of the engine at position `index` of the run.
pub fn color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

type ChartResult = Result<(), String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// A count with k/M suffix: 950, 12.5k, 3.20M.
fn count(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v.abs() >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v.abs() >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// The percentile at x = 1/(1 − q) of the spectrum's axis: 1 → 0%, 10 → 90%, 1000 → 99.9%.
pub fn percentile_label(x: f64) -> String {
    if x <= 1.0 {
        return "0%".into();
    }
    let p = 100.0 * (1.0 - 1.0 / x);
    let decimals = (x.log10().round() as i64 - 2).max(0) as usize;
    format!("{p:.decimals$}%")
}

/// The smallest power of ten at or above `v` (and at least 10).
fn decade_above(v: f64) -> f64 {
    10f64.powf(v.max(10.0).log10().ceil())
}

/// The largest power of ten at or below `v`.
fn decade_below(v: f64) -> f64 {
    10f64.powf(v.max(1.0).log10().floor())
}

/// One engine's operations per second over the phase, as a step line: each whole second at
/// its count, the last partial one at its count ÷ its length. Returns the points and where
/// the operations ended.
fn rate_steps(p: &PhaseResult) -> Vec<(f64, f64)> {
    let mut pts = Vec::with_capacity(p.per_second.len() * 2);
    let n = p.per_second.len();
    for (i, &c) in p.per_second.iter().enumerate() {
        let from = i as f64;
        let mut len = 1.0;
        if i + 1 == n && p.ops_secs > from && p.ops_secs < from + 1.0 {
            len = p.ops_secs - from;
            // A sliver of a second would show a meaningless spike or dip.
            if len < 0.25 && n > 1 {
                break;
            }
        }
        let rate = c as f64 / len;
        pts.push((from, rate));
        pts.push((from + len, rate));
    }
    pts
}

/// A chart on `root` with linear axes from 0 to `x_max` and `y_max`, in every chart's layout.
fn linear<'a>(
    root: &DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
    title: &str,
    x_max: f64,
    y_max: f64,
) -> Result<
    ChartContext<
        'a,
        SVGBackend<'a>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    String,
> {
    ChartBuilder::on(root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(err)
}

/// Throughput over time: operations completed in each second of the phase, one line per
/// engine (stalls show as dips to zero), then, at zero, the drain of background work and the
/// close, which the phase's ops/s includes.
pub fn throughput(path: &Path, title: &str, series: &[Series]) -> ChartResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let steps: Vec<Vec<(f64, f64)>> = series.iter().map(|s| rate_steps(s.phase)).collect();
    let x_max = series
        .iter()
        .map(|s| s.phase.secs.max(s.phase.ops_secs))
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let y_max = steps
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(0.0f64, f64::max)
        .max(1.0)
        // Headroom for the legend in the upper right, a line per engine.
        * (1.15 + 0.07 * series.len() as f64);
    let mut chart = linear(&root, title, x_max, y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds from the phase's first operation")
        .y_desc("operations completed per second")
        .y_label_formatter(&|v| count(*v))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;
    for (s, pts) in series.iter().zip(steps) {
        let c = color(s.index);
        let drain = (s.phase.secs - s.phase.ops_secs).max(0.0);
        let label = if drain >= 0.05 {
            format!(
                "{} ({} ops/s; then {:.1} s of drain and close at 0)",
                s.engine,
                count(s.phase.ops_per_sec),
                drain
            )
        } else {
            format!("{} ({} ops/s)", s.engine, count(s.phase.ops_per_sec))
        };
        let end = pts.last().map_or(0.0, |p| p.0);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        if drain >= 0.05 {
            chart
                .draw_series(LineSeries::new(
                    vec![(end, 0.0), (s.phase.secs, 0.0)],
                    c.mix(0.6).stroke_width(5),
                ))
                .map_err(err)?;
        }
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(err)
}

/// Mean time per operation in each window of consecutive operations (`--window`), one line
/// per engine, on a logarithmic axis: the FD-tree paper's Fig. 6, where the merges into the
/// lowest levels stand out as spikes.
pub fn windows(path: &Path, title: &str, series: &[Series]) -> ChartResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let window = series
        .iter()
        .map(|s| s.phase.window_ops)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let x_max = series
        .iter()
        .map(|s| s.phase.window_mean_ns.len())
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * window;
    let all = || {
        series
            .iter()
            .flat_map(|s| s.phase.window_mean_ns.iter().copied())
    };
    let y_max = decade_above(all().fold(0.0f64, f64::max) / 1e3);
    let y_min = decade_below(all().fold(f64::MAX, f64::min).max(1.0) / 1e3).min(y_max / 10.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(format!("operations (windows of {})", count(window)))
        .y_desc("mean time per operation (µs)")
        .x_label_formatter(&|v| count(*v))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;
    for s in series {
        let c = color(s.index);
        let pts: Vec<(f64, f64)> = s
            .phase
            .window_mean_ns
            .iter()
            .enumerate()
            .map(|(i, ns)| ((i as f64 + 0.5) * window, (ns / 1e3).max(y_min)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(err)?
            .label(s.engine.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(err)
}

/// One line of a [`lines`] chart: its name, its color's position, its points.
pub struct Line {
    pub name: String,
    pub index: usize,
    pub points: Vec<(f64, f64)>,
}

/// Lines over linear axes from 0, with a dashed level line at `mark` where given (a target),
/// the legend in the upper left: `woods bench aging`'s figures over its churn cycles.
pub fn lines(
    path: &Path,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    lines: &[Line],
    mark: Option<f64>,
) -> ChartResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let all = || lines.iter().flat_map(|l| l.points.iter().copied());
    let x_max = all().map(|p| p.0).fold(0.0f64, f64::max).max(1.0);
    let y_max = all()
        .map(|p| p.1)
        .chain(mark)
        .fold(0.0f64, f64::max)
        .max(1e-3)
        // Headroom for the legend, a line per series.
        * (1.15 + 0.05 * lines.len() as f64);
    let mut chart = linear(&root, title, x_max, y_max)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_labels((x_max as usize).clamp(1, 10) + 1)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;
    if let Some(m) = mark {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, m), (x_max, m)],
                6,
                4,
                BLACK.mix(0.6).stroke_width(1),
            ))
            .map_err(err)?;
    }
    for l in lines {
        let c = color(l.index);
        chart
            .draw_series(LineSeries::new(l.points.clone(), c.stroke_width(2)))
            .map_err(err)?
            .label(l.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(err)
}

fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    pos: SeriesLabelPosition,
) -> ChartResult
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(err)
}

/// The spectrum's points as (1/(1 − q), latency): up to the quantile where fewer than one
/// operation is left above (the rest is the max, drawn at x = the count).
fn spectrum_points(p: &PhaseResult) -> Vec<(f64, f64)> {
    let l = &p.latency;
    let n = l.count as f64;
    let mut pts: Vec<(f64, f64)> = l
        .spectrum
        .iter()
        .filter(|q| q.q < 1.0 && (1.0 - q.q) * n >= 1.0)
        .map(|q| (1.0 / (1.0 - q.q), q.ns.max(1) as f64))
        .collect();
    if l.count > 0 && pts.last().is_none_or(|last| last.0 < n) {
        pts.push((n.max(1.0), l.max_ns.max(1) as f64));
    }
    pts
}

/// The latency percentile spectrum, as HDR histogram plots it: percentile on x with a
/// 1/(1 − p) log axis (0%, 90%, 99%, 99.9%, ... equally spaced, so the tail gets the room),
/// latency on a log axis on y, one line per engine ending at its max.
pub fn latency(path: &Path, title: &str, series: &[Series]) -> ChartResult {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let pts: Vec<Vec<(f64, f64)>> = series.iter().map(|s| spectrum_points(s.phase)).collect();
    let all = || pts.iter().flatten();
    let x_max = decade_above(all().map(|p| p.0).fold(1.0, f64::max));
    let y_min = decade_below(all().map(|p| p.1).fold(f64::MAX, f64::min).min(1e9));
    let y_max = decade_above(all().map(|p| p.1).fold(1.0, f64::max));
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .margin_right(40)
        .build_cartesian_2d((1.0..x_max).log_scale(), (y_min..y_max).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("percentile (1/(1 - p) scale)")
        .y_desc("latency")
        .x_label_formatter(&|v| percentile_label(*v))
        .y_label_formatter(&|v| report::ns(*v))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;
    for (s, pts) in series.iter().zip(pts) {
        let c = color(s.index);
        let l = &s.phase.latency;
        let label = format!(
            "{} (p50 {}, p99 {}, max {})",
            s.engine,
            report::ns(l.p50_ns as f64),
            report::ns(l.p99_ns as f64),
            report::ns(l.max_ns as f64)
        );
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(err)
}

/// A bar chart: bars grouped by engine.
struct Bars<'a> {
    title: &'a str,
    y_desc: &'a str,
    /// The legend entry of each bar of a group (no legend for one bar).
    names: &'a [&'a str],
    /// `values[e][k]`: engine e's bar k; `None` is left out.
    values: Vec<Vec<Option<f64>>>,
    /// The color of engine e's bar k.
    colors: &'a dyn Fn(usize, usize) -> RGBColor,
    /// The value over a bar and on the y axis.
    show: &'a dyn Fn(f64) -> String,
}

fn bars(path: &Path, series: &[Series], b: Bars) -> ChartResult {
    let Bars {
        title,
        y_desc,
        names,
        values,
        colors,
        show,
    } = b;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let n = series.len().max(1);
    let y_max = values
        .iter()
        .flatten()
        .flatten()
        .fold(0.0f64, |a, &b| a.max(b))
        .max(1e-9)
        * 1.15;
    // Engine e's group spans x = e..e + 1; the labels are drawn under the groups by hand, so
    // the axis itself has none.
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..n as f64, 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .light_line_style(WHITE.mix(0.0))
        .y_desc(y_desc)
        .y_label_formatter(&|v| show(*v))
        .draw()
        .map_err(err)?;
    // Each bar is a slot of its group, at most 1/5 of the width of a group of one bar.
    let group_px = chart.plotting_area().dim_in_pixel().0 as f64 / n as f64;
    let k = names.len().max(1) as f64;
    let slot = (0.8 / k).min(96.0 / group_px.max(1.0));
    let first = 0.5 - slot * k / 2.0;
    let label_style = ("sans-serif", 13)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    for (bar, name) in names.iter().enumerate() {
        let mut rects = Vec::new();
        let mut labels = Vec::new();
        for (e, vals) in values.iter().enumerate() {
            let Some(v) = vals.get(bar).copied().flatten() else {
                continue;
            };
            let x0 = e as f64 + first + slot * bar as f64;
            let x1 = x0 + slot * 0.92;
            rects.push(Rectangle::new(
                [(x0, 0.0), (x1, v)],
                colors(e, bar).filled(),
            ));
            labels.push(((x0 + x1) / 2.0, v));
        }
        let c = colors(0, bar);
        let drawn = chart.draw_series(rects).map_err(err)?;
        if names.len() > 1 {
            drawn
                .label(*name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
        }
        chart
            .draw_series(labels.into_iter().map(|(x, v)| {
                // A few pixels above the bar.
                EmptyElement::at((x, v)) + Text::new(show(v), (0, -4), label_style.clone())
            }))
            .map_err(err)?;
    }
    let under = ("sans-serif", 14)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    chart
        .draw_series(series.iter().enumerate().map(|(e, s)| {
            EmptyElement::at((e as f64 + 0.5, 0.0))
                + Text::new(s.engine.to_string(), (0, 8), under.clone())
        }))
        .map_err(err)?;
    if names.len() > 1 {
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    root.present().map_err(err)
}

/// Operations per second of the phase, a bar per engine in its color.
pub fn ops_per_sec(path: &Path, title: &str, series: &[Series]) -> ChartResult {
    let values: Vec<Vec<Option<f64>>> = series
        .iter()
        .map(|s| vec![Some(s.phase.ops_per_sec)])
        .collect();
    bars(
        path,
        series,
        Bars {
            title,
            y_desc: "operations per second (drain and close included)",
            names: &["ops/s"],
            values,
            colors: &|e, _| color(series[e].index),
            show: &count,
        },
    )
}

/// Write amplification of the phase per engine: all device writes, and without the WAL.
pub fn write_amp(path: &Path, title: &str, series: &[Series]) -> ChartResult {
    let values: Vec<Vec<Option<f64>>> = series
        .iter()
        .map(|s| vec![s.phase.write_amp, s.phase.write_amp_no_wal])
        .collect();
    bars(
        path,
        series,
        Bars {
            title,
            y_desc: "device bytes written / user bytes written",
            names: &["WA (all device writes)", "WA without the WAL"],
            values,
            colors: &|_, bar| {
                if bar == 0 {
                    RGBColor(31, 119, 180)
                } else {
                    RGBColor(158, 202, 225)
                }
            },
            show: &|v| format!("{v:.2}"),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_labels() {
        assert_eq!(percentile_label(1.0), "0%");
        assert_eq!(percentile_label(10.0), "90%");
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
        assert_eq!(percentile_label(1e6), "99.9999%");
    }

    #[test]
    fn counts() {
        assert_eq!(count(950.0), "950");
        assert_eq!(count(1250.0), "1.2k");
        assert_eq!(count(28_411.0), "28k");
        assert_eq!(count(3_200_000.0), "3.20M");
    }
}
