//! `woods bench`: arguments, the parent's loop over engines, the table and the JSON file.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::child::{child_main, run_in_child};
use crate::engine::{self, EngineConfig};
use crate::report;
use crate::workload::{EngineResult, RunSpec, Workload};

/// Records of the smoke run (`woods bench` without --records).
pub const SMOKE_RECORDS: u64 = 200_000;
/// Lookups of the smoke run (without --reads).
pub const SMOKE_READS: u64 = 50_000;

pub const BENCH_HELP: &str = "\
Run every engine through the same workloads, each engine in a child process of its own, and \
print a table of figures and of ratios to the first engine.

Workloads, in this order: fillrandom (records 0..N, one put each: N distinct keys in uniformly \
random order), overwrite (only with --overwrites M: M puts of new values to records chosen \
uniformly at random), readrandom (M gets of records chosen uniformly at random, all hits; every \
value is checked and a wrong or missing value fails the run). Each phase opens the engine, runs, \
and for writes drains all background work (flushes, compactions) and closes the engine before \
its figures are taken: load throughput counts the whole cost of the writes.

Record i's key is a seeded 64-bit hash of i repeated to --key-size bytes; its value is \
--value-size bytes of a seeded stream (the records of `woods load`).

Figures per engine and phase (all in the JSON file; the table shows the load and read ones):
  ops/s              operations ÷ seconds from the first operation to the end of drain + close
  put/get latency    every operation timed into an HDR histogram: p50, p99, p99.9, p99.99, max
  WA                 write amplification: device bytes written by the engine's process \
(write_bytes − cancelled_write_bytes of /proc/self/io) ÷ (records × (key + value))
  WA-WAL             the same less the engine's own count of write-ahead-log bytes
  own WA             the engine's own count of bytes written ÷ user bytes
  space amp          bytes allocated under the engine's directory ÷ (records × (key + value))
  B read/get         device bytes read (/proc/self/io read_bytes) per lookup
  CPU time, per-second throughput, peak RSS (getrusage)

Memory: every engine gets the same budget, --cache-bytes: a quarter of it (at most 64 MiB) is \
two write buffers, the rest block/page cache. Direct I/O is asked for every engine (not with \
--no-direct-io) and the table says whether it was in effect. The budget is not yet enforced by a \
memory cgroup, so engines without direct I/O can use the OS page cache beyond it.

With no --records this is a smoke run over all woods index kinds (200,000 records, 50,000 \
reads, a budget of 1/8 of the data), about a minute: it shows the instrument works, it is not a \
result.

Engines: woods:btree, woods:lsm (every woods index kind), and with the `peers` cargo feature \
rocksdb (Debian's librocksdb 7.8.3, see docs/benchmarks.md for every setting).";

/// Arguments of `woods bench`.
#[derive(Args, Clone, Debug, Default)]
pub struct BenchArgs {
    /// Engines to run, comma-separated; the first is the baseline of the ratios [default: every
    /// woods index kind].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub engines: Vec<String>,
    /// Number of records N loaded by fillrandom [default: a smoke run's 200000].
    #[arg(long, value_name = "N")]
    pub records: Option<u64>,
    /// Number of lookups of readrandom [default: 50000; 0 skips readrandom].
    #[arg(long, value_name = "M")]
    pub reads: Option<u64>,
    /// Number of puts of an overwrite phase between the load and the reads [default: none].
    #[arg(long, value_name = "M", default_value_t = 0)]
    pub overwrites: u64,
    /// Key size in bytes (at least 8).
    #[arg(long, value_name = "K", default_value_t = 24)]
    pub key_size: usize,
    /// Value size in bytes.
    #[arg(long, value_name = "V", default_value_t = 100)]
    pub value_size: usize,
    /// Memory budget of each engine: cache plus write buffers (K, M, G suffixes) [default: 1/8
    /// of N × (K + V), at least 1M].
    #[arg(long, value_name = "B", value_parser = parse_size)]
    pub cache_bytes: Option<u64>,
    /// Seed of the keys, values and lookup order.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Also write every figure as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Directory for the engines' databases, one subdirectory each, removed after each engine
    /// [default: a new directory under the system's temporary directory]. It must be on the
    /// device being measured (not tmpfs).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep the engines' databases after the run.
    #[arg(long)]
    pub keep: bool,
    /// Internal: run one engine as a child process (the spec as JSON).
    #[arg(long, hide = true, value_name = "SPEC")]
    pub child: Option<String>,
}

/// A byte count with an optional K/M/G suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a byte count (e.g. 65536, 64K, 16M)"))?;
    n.checked_mul(mul)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// The JSON file: the run's settings and every engine's figures.
#[derive(Serialize, Deserialize, Debug)]
pub struct BenchReport {
    /// True for the default smoke run: not a result.
    pub smoke: bool,
    pub records: u64,
    pub reads: u64,
    pub overwrites: u64,
    pub key_size: usize,
    pub value_size: usize,
    pub memory_bytes: u64,
    pub direct_io_requested: bool,
    pub seed: u64,
    pub results: Vec<EngineResult>,
    /// Engines that failed, with why.
    pub failures: Vec<(String, String)>,
}

/// Runs `woods bench`. `exe` and `prefix` re-execute this binary in bench mode for the
/// children (`woods bench ...` has prefix `["bench"]`). Returns the exit status: 0, 1 when an
/// engine failed (its error printed), 2 for bad arguments.
pub fn run(args: &BenchArgs, direct_io: bool, exe: &Path, prefix: &[OsString]) -> u8 {
    if let Some(spec) = &args.child {
        return child_main(spec);
    }
    match run_parent(args, direct_io, exe, prefix) {
        Ok(ok) => {
            if ok {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("woods bench: error: {e}");
            2
        }
    }
}

fn run_parent(
    args: &BenchArgs,
    direct_io: bool,
    exe: &Path,
    prefix: &[OsString],
) -> Result<bool, String> {
    let smoke = args.records.is_none();
    let records = args.records.unwrap_or(SMOKE_RECORDS);
    let reads = args.reads.unwrap_or(SMOKE_READS);
    if records == 0 {
        return Err("--records must be at least 1".into());
    }
    crate::gen::RecordGen::new(args.key_size, args.value_size, args.seed)?;
    let engines = if args.engines.is_empty() {
        engine::woods_engines()
    } else {
        args.engines.clone()
    };
    for e in &engines {
        engine::check_name(e).map_err(|e| e.to_string())?;
    }
    let data = records * (args.key_size + args.value_size) as u64;
    let memory_bytes = args.cache_bytes.unwrap_or((data / 8).max(1 << 20));
    let config = EngineConfig {
        memory_bytes,
        direct_io,
    };
    let split = config.split();
    let mut workloads = vec![Workload::FillRandom];
    if args.overwrites > 0 {
        workloads.push(Workload::Overwrite);
    }
    if reads > 0 {
        workloads.push(Workload::ReadRandom);
    }
    let (base, made_base) = match &args.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("woods-bench-{}", std::process::id())),
            true,
        ),
    };
    fs::create_dir_all(&base).map_err(|e| format!("creating {}: {e}", base.display()))?;

    let mut err = std::io::stderr();
    if smoke {
        let _ = writeln!(
            err,
            "woods bench: SMOKE RUN (no --records given): it shows the instrument works; its \
             figures are not a result"
        );
    }
    let _ = writeln!(
        err,
        "woods bench: {records} records of {}+{} bytes ({}), {reads} reads, {} overwrites; \
         memory budget {} per engine (cache {}, write buffers 2 x {}), direct I/O {}, seed {}, \
         databases under {}",
        args.key_size,
        args.value_size,
        report::bytes(data as f64),
        args.overwrites,
        report::bytes(memory_bytes as f64),
        report::bytes(split.cache_bytes as f64),
        report::bytes(split.write_buffer_bytes as f64),
        if direct_io { "requested" } else { "off" },
        args.seed,
        base.display()
    );

    let mut results = Vec::new();
    let mut failures = Vec::new();
    for name in &engines {
        let dir = base.join(name.replace(':', "-"));
        let _ = fs::remove_dir_all(&dir);
        let spec = RunSpec {
            engine: name.clone(),
            dir: dir.clone(),
            config: config.clone(),
            workloads: workloads.clone(),
            records,
            reads,
            overwrites: args.overwrites,
            key_size: args.key_size,
            value_size: args.value_size,
            seed: args.seed,
            progress: true,
        };
        let _ = writeln!(err, "== {name}");
        match run_in_child(exe, prefix, &spec) {
            Ok(r) => {
                for p in &r.phases {
                    let _ = writeln!(
                        err,
                        "  {name} {}: {} ops in {:.2} s, {:.0} ops/s, direct I/O {}",
                        p.workload.name(),
                        p.ops,
                        p.secs,
                        p.ops_per_sec,
                        if p.direct_io { "on" } else { "off" }
                    );
                }
                results.push(r);
            }
            Err(e) => {
                let _ = writeln!(err, "woods bench: {name} FAILED: {e}");
                failures.push((name.clone(), e.to_string()));
            }
        }
        if !args.keep {
            let _ = fs::remove_dir_all(&dir);
        }
    }
    if made_base && !args.keep {
        let _ = fs::remove_dir(&base);
    }

    let mut out = std::io::stdout().lock();
    if smoke {
        let _ = writeln!(out, "SMOKE RUN: not a result (run with --records for one)");
    }
    let _ = write!(out, "{}", report::table(&results));
    if results
        .iter()
        .any(|r| r.phases.iter().any(|p| p.proc_written == Some(0)))
    {
        let _ = writeln!(
            out,
            "note: /proc/self/io counted no device writes: the directory is probably on tmpfs, \
             so WA is meaningless; use --dir on the device to measure"
        );
    }
    for (name, why) in &failures {
        let _ = writeln!(out, "{name}: FAILED: {why}");
    }
    if let Some(path) = &args.json {
        let rep = BenchReport {
            smoke,
            records,
            reads,
            overwrites: args.overwrites,
            key_size: args.key_size,
            value_size: args.value_size,
            memory_bytes,
            direct_io_requested: direct_io,
            seed: args.seed,
            results,
            failures: failures.clone(),
        };
        let text = serde_json::to_string_pretty(&rep).map_err(|e| e.to_string())?;
        fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(failures.is_empty())
}
