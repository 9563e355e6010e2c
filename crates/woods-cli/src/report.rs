//! `woods stats` and `woods check`: the library's `Stats` and `CheckReport` in readable form.

use std::io::{self, Write};
use std::time::Duration;

use woods::storage::Purpose;
use woods::{CheckReport, IndexKind, Stats};

/// Bytes with a binary unit, plus the exact count when it is large.
fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {} ({b} B)", UNITS[u])
}

fn dur(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.3} s")
    } else {
        format!("{:.3} ms", s * 1e3)
    }
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "n/a".into()
    } else {
        format!("{:.3}", a as f64 / b as f64)
    }
}

/// `woods check`'s report: what was counted, one line each, then `ok`.
pub fn print_check(r: &CheckReport) -> io::Result<()> {
    let mut o = io::stdout().lock();
    writeln!(
        o,
        "live keys          {} (at sequence number {})",
        r.live_keys, r.seq
    )?;
    writeln!(
        o,
        "index versions     {} (every version the index holds: puts, deletions, merge operands)",
        r.index_versions
    )?;
    writeln!(
        o,
        "memtable versions  {} ({} memtable(s))",
        r.memtable_versions, r.memtables
    )?;
    writeln!(
        o,
        "pages              {} in use, {} free, {} in the data file",
        r.used_pages(),
        r.free_pages,
        r.file_pages
    )?;
    writeln!(o, "ok")
}

pub fn print_stats(kind: &IndexKind, s: &Stats) -> io::Result<()> {
    let mut o = io::stdout().lock();
    writeln!(o, "index (counters since open)")?;
    writeln!(o, "  kind              {} ({kind:?})", kind.name())?;
    writeln!(o, "  height            {}", s.index.height)?;
    writeln!(o, "  entries           {}", s.index.entries)?;
    writeln!(o, "  absorbs           {}", s.index.absorbs)?;
    writeln!(o, "  filter bytes      {}", bytes(s.index.filter_bytes))?;
    for (name, v) in &s.index.counters {
        writeln!(o, "  {name:<17} {v}")?;
    }
    if !s.index.shape.is_empty() {
        writeln!(o, "  shape")?;
        for line in &s.index.shape {
            writeln!(o, "    {line}")?;
        }
    }

    writeln!(o, "writes (since open)")?;
    writeln!(o, "  writes            {}", s.writes)?;
    writeln!(o, "  user bytes        {}", bytes(s.user_bytes))?;
    writeln!(o, "  last seq          {}", s.last_seq)?;
    writeln!(o, "  durable seq       {} (in the index)", s.durable_seq)?;
    writeln!(
        o,
        "  memtables         {} holding {}",
        s.memtables,
        bytes(s.memtable_bytes)
    )?;
    writeln!(o, "  memtable switches {}", s.memtable_switches)?;
    let wal = s.io.written(Purpose::Wal);
    let total = s.io.total_written();
    writeln!(
        o,
        "  write amp         {} ({} without WAL)",
        ratio(total, s.user_bytes),
        ratio(total.saturating_sub(wal), s.user_bytes)
    )?;

    writeln!(o, "pacing and stalls (since open)")?;
    writeln!(
        o,
        "  pacing delays     {} total {} max {}",
        s.pacing_delays,
        dur(s.pacing_total),
        dur(s.pacing_max)
    )?;
    writeln!(
        o,
        "  stalls            {} total {} max {}",
        s.stalls,
        dur(s.stall_total),
        dur(s.stall_max)
    )?;
    writeln!(
        o,
        "  write's own work  max {} units (largest schedule debt {})",
        s.write_work_max, s.schedule_debt_max
    )?;

    writeln!(o, "device I/O (since open)")?;
    writeln!(
        o,
        "  {:<10} {:>14} {:>10} {:>14} {:>10}",
        "purpose", "read bytes", "reads", "written bytes", "writes"
    )?;
    for p in Purpose::ALL {
        let i = p as usize;
        writeln!(
            o,
            "  {:<10} {:>14} {:>10} {:>14} {:>10}",
            p.name(),
            s.io.read_bytes[i],
            s.io.read_ops[i],
            s.io.write_bytes[i],
            s.io.write_ops[i]
        )?;
    }
    writeln!(
        o,
        "  {:<10} {:>14} {:>10} {:>14} {:>10}",
        "total",
        s.io.total_read(),
        s.io.read_ops.iter().sum::<u64>(),
        total,
        s.io.write_ops.iter().sum::<u64>()
    )?;
    writeln!(o, "  syncs             {}", s.io.syncs)?;
    writeln!(
        o,
        "  direct I/O        {}",
        if s.direct_io {
            "in effect"
        } else {
            "not in effect"
        }
    )?;

    writeln!(o, "cache")?;
    let c = &s.cache;
    writeln!(
        o,
        "  capacity          {} pages ({}), of which filters of open runs take {}",
        c.capacity_pages,
        bytes(c.capacity_pages * woods::storage::PAGE_SIZE as u64),
        bytes(c.reserved_bytes)
    )?;
    if c.paged_filters > 0 {
        writeln!(
            o,
            "  paged filters     {} (runs whose filter did not fit half the cache: a lookup reads its page)",
            c.paged_filters
        )?;
    }
    let rate = |hits: u64, misses: u64| {
        if hits + misses == 0 {
            "n/a".to_string()
        } else {
            format!("{:.1}%", 100.0 * hits as f64 / (hits + misses) as f64)
        }
    };
    writeln!(
        o,
        "  hits              {} misses {} (hit rate {})",
        c.hits,
        c.misses,
        rate(c.hits, c.misses)
    )?;
    writeln!(o, "  evictions         {}", c.evictions)?;
    writeln!(
        o,
        "  index pages       {} held, {} evicted (kept before data pages, within half)",
        c.index_pages, c.index_evictions
    )?;
    if c.row_capacity_bytes > 0 {
        writeln!(
            o,
            "  row cache         {} of at most {} (taken from the pages); hits {} misses {} (hit rate {})",
            bytes(c.row_bytes),
            bytes(c.row_capacity_bytes),
            c.row_hits,
            c.row_misses,
            rate(c.row_hits, c.row_misses)
        )?;
    }

    writeln!(o, "file")?;
    writeln!(o, "  size              {}", bytes(s.file_bytes))?;
    writeln!(
        o,
        "  pages             {} ({} free, {} of them kept for reuse in place; {} freed since open punched out of the file)",
        s.file_pages, s.free_pages, s.unpunched_pages, s.punched_pages
    )?;
    Ok(())
}
