//! The table `woods bench` prints: one row per engine, then every figure as a ratio to the
//! first engine.

use std::fmt::Write as _;

use crate::workload::{EngineResult, Workload};

/// One column: a header and how to get its figure from a result.
struct Column {
    header: &'static str,
    value: fn(&EngineResult) -> Option<f64>,
    show: fn(f64) -> String,
}

fn load(r: &EngineResult) -> Option<&crate::workload::PhaseResult> {
    r.phase(Workload::FillRandom)
}

fn read(r: &EngineResult) -> Option<&crate::workload::PhaseResult> {
    r.phase(Workload::ReadRandom)
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

fn columns() -> Vec<Column> {
    vec![
        Column {
            header: "load ops/s",
            value: |r| Some(load(r)?.ops_per_sec),
            show: rate,
        },
        Column {
            header: "WA",
            value: |r| load(r)?.write_amp,
            show: amp,
        },
        Column {
            header: "WA-WAL",
            value: |r| load(r)?.write_amp_no_wal,
            show: amp,
        },
        Column {
            header: "own WA",
            value: |r| load(r)?.own_write_amp,
            show: amp,
        },
        Column {
            header: "space amp",
            value: |r| Some(load(r)?.space_amp),
            show: amp,
        },
        Column {
            header: "put p99",
            value: |r| Some(load(r)?.latency.p99_ns as f64),
            show: ns,
        },
        Column {
            header: "put p99.99",
            value: |r| Some(load(r)?.latency.p9999_ns as f64),
            show: ns,
        },
        Column {
            header: "put max",
            value: |r| Some(load(r)?.latency.max_ns as f64),
            show: ns,
        },
        Column {
            header: "read ops/s",
            value: |r| Some(read(r)?.ops_per_sec),
            show: rate,
        },
        Column {
            header: "get p99",
            value: |r| Some(read(r)?.latency.p99_ns as f64),
            show: ns,
        },
        Column {
            header: "B read/get",
            value: |r| read(r)?.read_bytes_per_op,
            show: |v| format!("{v:.0}"),
        },
        Column {
            header: "peak RSS",
            value: |r| {
                r.phases
                    .iter()
                    .map(|p| p.peak_rss_bytes as f64)
                    .reduce(f64::max)
            },
            show: bytes,
        },
    ]
}

fn render(header: &[String], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        let mut first = true;
        for (cell, w) in cells.iter().zip(&widths) {
            if !first {
                out.push_str("  ");
            }
            if first {
                let _ = write!(out, "{cell:<w$}");
            } else {
                let _ = write!(out, "{cell:>w$}");
            }
            first = false;
        }
        out.push('\n');
    };
    line(&mut out, header);
    for row in rows {
        line(&mut out, row);
    }
    out
}

/// The figures table and, with two engines or more, the ratio table against the first.
pub fn table(results: &[EngineResult]) -> String {
    let cols = columns();
    let mut header = vec!["engine".to_string(), "direct".to_string()];
    header.extend(cols.iter().map(|c| c.header.to_string()));
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let direct = r.phases.iter().all(|p| p.direct_io);
            let mut row = vec![r.engine.clone(), if direct { "yes" } else { "no" }.into()];
            row.extend(cols.iter().map(|c| match (c.value)(r) {
                Some(v) => (c.show)(v),
                None => "n/a".into(),
            }));
            row
        })
        .collect();
    let mut out = render(&header, &rows);
    if results.len() >= 2 {
        let base = &results[0];
        let mut header = vec![format!("ratio to {}", base.engine), String::new()];
        header.extend(cols.iter().map(|c| c.header.to_string()));
        let rows: Vec<Vec<String>> = results[1..]
            .iter()
            .map(|r| {
                let mut row = vec![r.engine.clone(), String::new()];
                row.extend(cols.iter().map(|c| match ((c.value)(r), (c.value)(base)) {
                    (Some(v), Some(b)) if b != 0.0 => format!("{:.2}x", v / b),
                    _ => "n/a".into(),
                }));
                row
            })
            .collect();
        out.push('\n');
        out.push_str(&render(&header, &rows));
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
