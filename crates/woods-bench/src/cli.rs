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
use crate::workload::{Distribution, EngineResult, Phase, RunSpec, Workload};

/// Records of the smoke run (`woods bench` without --records).
pub const SMOKE_RECORDS: u64 = 200_000;
/// Operations of each phase that is not a load, without --ops (and of the smoke run).
pub const DEFAULT_OPS: u64 = 50_000;

pub const BENCH_HELP: &str = "\
Run every engine through the same workloads, each engine in a child process of its own, and \
print a table of figures per phase and of ratios to the first engine.

Workloads (--workloads, in the order given; the first must be a load; NAME:OPS gives a phase its \
own operation count, the others run --ops):
  fillseq       load records 0..N in key order (db_bench keys)
  fillrandom    load records 0..N, each once, in uniformly random key order (db_bench keys)
  overwrite     puts of new versions of records chosen uniformly at random
  readrandom    gets of records chosen uniformly at random; with --miss-ratio R, a share R of \
them look up keys no record has (inside the records' key range), which must be not found
  readseq       one iterator per thread from its share of the key space, OPS entries in all
  seekrandom    a seek to a record chosen uniformly at random, then --seek-nexts nexts
  deleterandom  deletes of records chosen uniformly at random
  ycsb-load     YCSB's load: records 0..N in record order (YCSB keys: random key order)
  ycsb-a        50% reads, 50% updates, zipfian
  ycsb-b        95% reads, 5% updates, zipfian
  ycsb-c        100% reads, zipfian
  ycsb-d        95% reads, 5% inserts of new records, latest
  ycsb-e        95% scans (length uniform in 1..100), 5% inserts of new records, zipfian
  ycsb-f        50% reads, 50% read-modify-writes, zipfian
Zipfian is YCSB's scrambled zipfian (constant 0.99, hot records scattered by an FNV hash); \
--distribution uniform|zipfian|latest replaces each YCSB workload's own. Without --workloads: \
fillrandom, overwrite (only with --overwrites M), readrandom (unless --ops 0).

Keys: fillseq and fillrandom load db_bench's keys (record i as 8 big-endian bytes, then '0' up \
to --key-size); ycsb-load loads YCSB's (\"user\" and the decimal of fnvhash64(i), zero-padded \
to --key-size, which must be at least 24). Values: --value-size bytes, a function of the \
record, a version advanced by every write, and the seed. Every get and every scanned entry is \
checked against what the record holds; scans must return ascending keys of existing records \
and, with db_bench keys, skip none. A wrong answer fails the run.

Each phase opens the engine, runs its operations from --threads client threads sharing the \
engine, and for phases that write drains all background work (flushes, compactions) and closes \
the engine before its figures are taken: load throughput counts the whole cost of the writes.

Figures per engine and phase (all in the JSON file):
  ops/s              operations ÷ seconds from the first operation to the end of drain + close
  latency            every operation timed into an HDR histogram: p50, p99, p99.9, p99.99, max
  WA                 write amplification: device bytes written by the engine's process \
(write_bytes − cancelled_write_bytes of /proc/self/io) ÷ key and value bytes written
  WA-WAL             the same less the engine's own count of write-ahead-log bytes
  own WA             the engine's own count of bytes written ÷ user bytes
  space amp          bytes allocated under the engine's directory ÷ (present records × (key + \
value))
  B read/op          device bytes read (/proc/self/io read_bytes) per operation, in phases that \
read
  CPU time, per-second throughput, peak RSS (getrusage)

Memory: every engine gets the same budget, --cache-bytes: a quarter of it (at most 64 MiB) is \
two write buffers, the rest block/page cache. Direct I/O is asked for every engine (not with \
--no-direct-io) and the table says whether it was in effect. The budget is not yet enforced by a \
memory cgroup, so engines without direct I/O can use the OS page cache beyond it.

With no --records this is a smoke run over all woods index kinds (200,000 records, 50,000 \
reads, a budget of 1/8 of the data), about a minute: it shows the instrument works, it is not a \
result.

Engines: woods:btree, woods:lsm (every woods index kind), and with the `peers` cargo feature \
rocksdb (Debian's librocksdb 7.8.3), leveldb (Debian's libleveldb 1.23, C API), lmdb (heed), \
fjall and redb; docs/benchmarks.md lists every setting. Only woods and RocksDB do direct I/O: \
the others read through the OS page cache (direct = no, cache-assisted).";

/// Arguments of `woods bench`.
#[derive(Args, Clone, Debug, Default)]
pub struct BenchArgs {
    /// Engines to run, comma-separated: woods:KIND for a woods index kind, and with the `peers`
    /// feature rocksdb, leveldb, lmdb, fjall, redb; the first is the baseline of the ratios
    /// [default: every woods index kind].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub engines: Vec<String>,
    /// Workloads to run, in order, comma-separated; `NAME:OPS` gives one its own operation
    /// count [default: fillrandom, overwrite with --overwrites, readrandom].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub workloads: Vec<String>,
    /// Number of records N of the loads [default: a smoke run's 200000].
    #[arg(long, value_name = "N")]
    pub records: Option<u64>,
    /// Operations of each phase that is not a load and has no `:OPS` [default: 50000; without
    /// --workloads, 0 skips readrandom].
    #[arg(long, visible_alias = "reads", value_name = "M")]
    pub ops: Option<u64>,
    /// Operations of overwrite phases without `:OPS` [default: --ops]; without --workloads,
    /// M > 0 adds an overwrite phase between the load and the reads.
    #[arg(long, value_name = "M", default_value_t = 0)]
    pub overwrites: u64,
    /// Client threads per engine, sharing it.
    #[arg(long, value_name = "T", default_value_t = 1)]
    pub threads: usize,
    /// Share of readrandom's gets that look up keys no record has (0 to 1).
    #[arg(long, value_name = "R", default_value_t = 0.0)]
    pub miss_ratio: f64,
    /// `next` calls after each seek of seekrandom.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub seek_nexts: usize,
    /// Request distribution of every YCSB phase [default: each workload's own: latest for
    /// ycsb-d, zipfian for the others].
    #[arg(long, value_enum, value_name = "D")]
    pub distribution: Option<Distribution>,
    /// Key size in bytes (at least 8; 24 for YCSB keys).
    #[arg(long, value_name = "K", default_value_t = 24)]
    pub key_size: usize,
    /// Value size in bytes.
    #[arg(long, value_name = "V", default_value_t = 100)]
    pub value_size: usize,
    /// Memory budget of each engine: cache plus write buffers (K, M, G suffixes) [default: 1/8
    /// of N × (K + V), at least 1M].
    #[arg(long, value_name = "B", value_parser = parse_size)]
    pub cache_bytes: Option<u64>,
    /// Seed of the values, the load order and every random choice.
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

/// The phases of a run from the arguments: `--workloads` with per-phase `:OPS`, or the
/// default list.
pub fn phases(args: &BenchArgs) -> Result<Vec<Phase>, String> {
    let ops = args.ops.unwrap_or(DEFAULT_OPS);
    let default_ops = |w: Workload| {
        if w == Workload::Overwrite && args.overwrites > 0 {
            args.overwrites
        } else if w.is_load() {
            0
        } else {
            ops
        }
    };
    if args.workloads.is_empty() {
        let mut p = vec![Phase {
            workload: Workload::FillRandom,
            ops: 0,
        }];
        if args.overwrites > 0 {
            p.push(Phase {
                workload: Workload::Overwrite,
                ops: args.overwrites,
            });
        }
        if ops > 0 {
            p.push(Phase {
                workload: Workload::ReadRandom,
                ops,
            });
        }
        return Ok(p);
    }
    args.workloads
        .iter()
        .map(|item| {
            let (name, count) = match item.split_once(':') {
                Some((n, c)) => (n, Some(c)),
                None => (item.as_str(), None),
            };
            let workload = Workload::from_name(name.trim()).ok_or_else(|| {
                format!(
                    "unknown workload {name:?}; known: {}",
                    Workload::ALL.map(|w| w.name()).join(", ")
                )
            })?;
            let ops = match count {
                Some(c) => c
                    .trim()
                    .parse()
                    .map_err(|_| format!("{item:?}: {c:?} is not an operation count"))?,
                None => default_ops(workload),
            };
            Ok(Phase { workload, ops })
        })
        .collect()
}

/// `fillrandom, readrandom:50000` for a message.
pub fn describe(phases: &[Phase]) -> String {
    phases
        .iter()
        .map(|p| {
            if p.workload.is_load() {
                p.workload.name().to_string()
            } else {
                format!("{}:{}", p.workload.name(), p.ops)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The JSON file: the run's settings and every engine's figures.
#[derive(Serialize, Deserialize, Debug)]
pub struct BenchReport {
    /// True for the default smoke run: not a result.
    pub smoke: bool,
    pub records: u64,
    /// The phases in order, with their operation counts (loads: the records).
    pub phases: Vec<Phase>,
    pub threads: usize,
    pub miss_ratio: f64,
    pub seek_nexts: usize,
    pub distribution: Option<Distribution>,
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
    let phases = phases(args)?;
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
    let spec_for = |name: &str, dir: PathBuf| RunSpec {
        engine: name.to_string(),
        dir,
        config: config.clone(),
        phases: phases.clone(),
        records,
        key_size: args.key_size,
        value_size: args.value_size,
        threads: args.threads,
        miss_ratio: args.miss_ratio,
        seek_nexts: args.seek_nexts,
        distribution: args.distribution,
        seed: args.seed,
        progress: true,
    };
    // The children would find the same mistakes, once per engine.
    spec_for("", PathBuf::new())
        .validate()
        .map_err(|e| e.to_string())?;
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
        "woods bench: {records} records of {}+{} bytes ({}); phases {}; {} client thread(s); \
         memory budget {} per engine (cache {}, write buffers 2 x {}), direct I/O {}, seed {}, \
         databases under {}",
        args.key_size,
        args.value_size,
        report::bytes(data as f64),
        describe(&phases),
        args.threads,
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
        let spec = spec_for(name, dir.clone());
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
        // Only phases that wrote: LMDB, redb and LevelDB write nothing at all while reading.
        .any(|r| {
            r.phases
                .iter()
                .any(|p| p.user_bytes > 0 && p.proc_written == Some(0))
        })
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
            phases: phases
                .iter()
                .map(|p| Phase {
                    workload: p.workload,
                    ops: if p.workload.is_load() { records } else { p.ops },
                })
                .collect(),
            threads: args.threads,
            miss_ratio: args.miss_ratio,
            seek_nexts: args.seek_nexts,
            distribution: args.distribution,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(workloads: &[&str]) -> BenchArgs {
        BenchArgs {
            workloads: workloads.iter().map(|s| s.to_string()).collect(),
            ..BenchArgs::default()
        }
    }

    fn names(p: &[Phase]) -> Vec<(&'static str, u64)> {
        p.iter().map(|p| (p.workload.name(), p.ops)).collect()
    }

    #[test]
    fn default_phases() {
        let a = args(&[]);
        assert_eq!(
            names(&phases(&a).unwrap()),
            [("fillrandom", 0), ("readrandom", DEFAULT_OPS)]
        );
        let a = BenchArgs {
            overwrites: 7,
            ops: Some(0),
            ..args(&[])
        };
        assert_eq!(
            names(&phases(&a).unwrap()),
            [("fillrandom", 0), ("overwrite", 7)]
        );
    }

    #[test]
    fn listed_phases_with_counts() {
        let a = BenchArgs {
            ops: Some(100),
            overwrites: 5,
            ..args(&[
                "ycsb-load",
                "ycsb-a:3000",
                "ycsb-e",
                "overwrite",
                "readseq:9",
            ])
        };
        assert_eq!(
            names(&phases(&a).unwrap()),
            [
                ("ycsb-load", 0),
                ("ycsb-a", 3000),
                ("ycsb-e", 100),
                ("overwrite", 5),
                ("readseq", 9)
            ]
        );
        assert_eq!(
            describe(&phases(&a).unwrap()),
            "ycsb-load, ycsb-a:3000, ycsb-e:100, overwrite:5, readseq:9"
        );
        assert!(phases(&args(&["ycsb-g"]))
            .unwrap_err()
            .contains("unknown workload"));
        assert!(phases(&args(&["ycsb-a:many"]))
            .unwrap_err()
            .contains("not an operation count"));
    }
}
