//! The table `woods bench` prints: one row per engine and phase, then each engine's figures as
//! ratios to the first engine's in the same phase.

use std::fmt::Write as _;

use crate::workload::{EngineResult, PhaseResult};

/// One column: a header and how to get its figure from a phase.
struct Column {
    header: &'static str,
    value: fn(&PhaseResult) -> Option<f64>,
    show: fn(f64) -> String,
    /// Shown in the ratio table.
    ratio: bool,
}

/// A duration in nanoseconds, in the unit that keeps it short.
pub fn ns(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}us", v / 1e3)
    } else {
        format!("{v:.0}ns")
    }
}

/// Bytes with a binary unit.
pub fn bytes(v: f64) -> String {
    if v >= (1u64 << 30) as f64 {
        format!("{:.2}GiB", v / (1u64 << 30) as f64)
    } else if v >= (1u64 << 20) as f64 {
        format!("{:.1}MiB", v / (1u64 << 20) as f64)
    } else if v >= 1024.0 {
        format!("{:.1}KiB", v / 1024.0)
    } else {
        format!("{v:.0}B")
    }
}

fn rate(v: f64) -> String {
    format!("{v:.0}")
}

fn amp(v: f64) -> String {
    format!("{v:.2}")
}

fn secs(v: f64) -> String {
    format!("{v:.1}")
}

fn columns() -> Vec<Column> {
    vec![
        Column {
            header: "ops",
            value: |p| Some(p.ops as f64),
            show: rate,
            ratio: false,
        },
        Column {
            header: "ops/s",
            value: |p| Some(p.ops_per_sec),
            show: rate,
            ratio: true,
        },
        Column {
            header: "p50",
            value: |p| Some(p.latency.p50_ns as f64),
            show: ns,
            ratio: false,
        },
        Column {
            header: "p99",
            value: |p| Some(p.latency.p99_ns as f64),
            show: ns,
            ratio: true,
        },
        Column {
            header: "p99.9",
            value: |p| Some(p.latency.p999_ns as f64),
            show: ns,
            ratio: false,
        },
        Column {
            header: "p99.99",
            value: |p| Some(p.latency.p9999_ns as f64),
            show: ns,
            ratio: true,
        },
        Column {
            header: "max",
            value: |p| Some(p.latency.max_ns as f64),
            show: ns,
            ratio: true,
        },
        Column {
            header: "max wait",
            value: |p| Some(p.own.write_waits?.max_ns() as f64).filter(|_| p.workload.writes()),
            show: ns,
            ratio: true,
        },
        Column {
            header: "WA",
            value: |p| p.write_amp,
            show: amp,
            ratio: true,
        },
        Column {
            header: "WA-WAL",
            value: |p| p.write_amp_no_wal,
            show: amp,
            ratio: true,
        },
        Column {
            header: "own WA",
            value: |p| p.own_write_amp,
            show: amp,
            ratio: false,
        },
        Column {
            header: "space amp",
            value: |p| (p.live_user_bytes > 0).then_some(p.space_amp),
            show: amp,
            ratio: true,
        },
        Column {
            header: "B read/op",
            value: |p| p.read_bytes_per_op,
            show: |v| format!("{v:.0}"),
            ratio: true,
        },
        Column {
            header: "dev reads/get",
            value: |p| p.device_reads_per_get,
            show: |v| format!("{v:.3}"),
            ratio: true,
        },
        Column {
            header: "own reads/get",
            value: |p| p.own_reads_per_get,
            show: |v| format!("{v:.3}"),
            ratio: true,
        },
        Column {
            header: "CPU s",
            value: |p| Some(p.cpu_user_secs + p.cpu_system_secs),
            show: secs,
            ratio: true,
        },
        Column {
            header: "peak RSS",
            value: |p| Some(p.peak_rss_bytes as f64),
            show: bytes,
            ratio: true,
        },
        Column {
            header: "peak mem",
            value: |p| p.memory_peak_bytes.map(|b| b as f64),
            show: bytes,
            ratio: true,
        },
    ]
}

/// The `memory` cell: how the budget held for this engine and phase.
pub fn memory_label(r: &EngineResult, p: &PhaseResult) -> &'static str {
    if r.enforcement.enforced() {
        r.enforcement.name()
    } else if p.cache_assisted || !p.direct_io {
        "cache-assisted"
    } else {
        "not enforced"
    }
}

/// A table: a header and rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Leading columns aligned left in the text table (the others right).
    pub left: usize,
    /// Leading columns of text (aligned left in markdown; the figures after them right).
    pub text: usize,
}

impl Grid {
    /// Columns padded to their widest cell, two spaces apart.
    pub fn text(&self) -> String {
        render(&self.header, &self.rows, self.left)
    }

    /// A GitHub markdown table (figures right-aligned).
    pub fn markdown(&self) -> String {
        let cell = |c: &str| c.replace('|', "\\|");
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| {} |",
            self.header
                .iter()
                .map(|h| cell(h))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let align: Vec<&str> = (0..self.header.len())
            .map(|n| if n < self.text { ":---" } else { "---:" })
            .collect();
        let _ = writeln!(out, "| {} |", align.join(" | "));
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(|c| cell(c)).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out
    }
}

/// Rows under a header, the first `left` columns aligned left, the others right.
fn render(header: &[String], rows: &[Vec<String>], left: usize) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        for (n, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if n > 0 {
                out.push_str("  ");
            }
            if n < left {
                let _ = write!(out, "{cell:<w$}");
            } else {
                let _ = write!(out, "{cell:>w$}");
            }
        }
        out.push('\n');
    };
    line(&mut out, header);
    for row in rows {
        line(&mut out, row);
    }
    out
}

/// The figures table: a row per engine and phase.
pub fn figures(results: &[EngineResult]) -> Grid {
    let cols = columns();
    let mut header = vec![
        "engine".to_string(),
        "phase".into(),
        "direct".into(),
        "memory".into(),
    ];
    header.extend(cols.iter().map(|c| c.header.to_string()));
    let mut rows: Vec<Vec<String>> = Vec::new();
    for r in results {
        for p in &r.phases {
            let mut row = vec![
                r.engine.clone(),
                p.label(),
                if p.direct_io { "yes" } else { "no" }.into(),
                memory_label(r, p).into(),
            ];
            row.extend(cols.iter().map(|c| match (c.value)(p) {
                Some(v) => (c.show)(v),
                None => "-".into(),
            }));
            rows.push(row);
        }
    }
    Grid {
        header,
        rows,
        left: 2,
        text: 4,
    }
}

/// With two engines or more, each later engine's figures as ratios to the first engine's in
/// the same phase (same position, same workload).
pub fn ratios(results: &[EngineResult]) -> Option<Grid> {
    let base = results.first().filter(|_| results.len() >= 2)?;
    let cols = columns();
    let cols: Vec<&Column> = cols.iter().filter(|c| c.ratio).collect();
    let mut header = vec![format!("ratio to {}", base.engine), "phase".into()];
    header.extend(cols.iter().map(|c| c.header.to_string()));
    let mut rows: Vec<Vec<String>> = Vec::new();
    for r in &results[1..] {
        for (n, p) in r.phases.iter().enumerate() {
            let Some(b) = base.phases.get(n).filter(|b| b.workload == p.workload) else {
                continue;
            };
            let mut row = vec![r.engine.clone(), p.label()];
            row.extend(cols.iter().map(|c| match ((c.value)(p), (c.value)(b)) {
                (Some(v), Some(b)) if b != 0.0 => format!("{:.2}x", v / b),
                _ => "-".into(),
            }));
            rows.push(row);
        }
    }
    Some(Grid {
        header,
        rows,
        left: 2,
        text: 2,
    })
}

/// The latency of each kind of operation of the mixed phases apart (YCSB's and the FD-tree
/// mixes): a row per engine, phase and kind. `None` when no phase is mixed.
pub fn latency_by_op(results: &[EngineResult]) -> Option<Grid> {
    let header = [
        "engine", "phase", "op", "count", "mean", "p50", "p99", "p99.9", "max",
    ];
    let mut rows = Vec::new();
    for r in results {
        for p in &r.phases {
            for (op, l) in &p.latency_by_op {
                rows.push(vec![
                    r.engine.clone(),
                    p.label(),
                    op.clone(),
                    l.count.to_string(),
                    ns(l.mean_ns),
                    ns(l.p50_ns as f64),
                    ns(l.p99_ns as f64),
                    ns(l.p999_ns as f64),
                    ns(l.max_ns as f64),
                ]);
            }
        }
    }
    (!rows.is_empty()).then(|| Grid {
        header: header.iter().map(|h| h.to_string()).collect(),
        rows,
        left: 3,
        text: 3,
    })
}

/// The figures table (a row per engine and phase), the latency of each kind of operation of
/// the mixed phases and, with two engines or more, the ratio table against the first engine,
/// phase by phase.
pub fn table(results: &[EngineResult]) -> String {
    let mut out = figures(results).text();
    if let Some(g) = latency_by_op(results) {
        out.push('\n');
        out.push_str(&g.text());
    }
    if let Some(r) = ratios(results) {
        out.push('\n');
        out.push_str(&r.text());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(ns(950.0), "950ns");
        assert_eq!(ns(12_345.0), "12.3us");
        assert_eq!(ns(4_500_000.0), "4.50ms");
        assert_eq!(ns(1.2e9), "1.20s");
        assert_eq!(bytes(3.0 * 1048576.0), "3.0MiB");
    }
}
