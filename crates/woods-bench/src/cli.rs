//! `woods bench`: arguments, the parent's loop over engines, the table and the JSON file.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser};
use serde::{Deserialize, Serialize};

use crate::cgroup::{self, CgroupParent, Enforcement};
use crate::child::{child_main_with, run_in_child_with, ChildFailure, ChildSetup};
use crate::engine::{self, BenchError, EngineConfig, ExtraEngines};
use crate::machine::{self, Machine};
use crate::output;
use crate::report;
use crate::workload::{Distribution, EngineResult, Phase, RunSpec, Workload};

/// Records of the smoke run (`woods bench` without --records).
pub const SMOKE_RECORDS: u64 = 200_000;
/// Operations of each phase that is not a load, without --ops (and of the smoke run).
pub const DEFAULT_OPS: u64 = 50_000;
/// What a memory cgroup allows an engine's child beyond the budget, by default: this,
/// [`ALLOWANCE_PER_THREAD`] per client thread and the bench's byte per record
/// ([`RunSpec::capacity`]). It holds the bench itself (with a 1 MiB budget a woods child's
/// group peaks at 1.5 to 3 MiB, budget included) and each engine's fixed costs outside the
/// caches it is told to size (RocksDB's group peaks 17 to 20 MiB above its budget), with room
/// to spare; docs/benchmarks.md has the measurements.
pub const DEFAULT_ALLOWANCE: u64 = 32 << 20;
/// The default allowance's share per client thread (a stack, two latency histograms, an
/// allocator arena's first pages): measured at about 270 KiB for woods.
pub const ALLOWANCE_PER_THREAD: u64 = 512 << 10;

pub const BENCH_HELP: &str = "\
Run every engine through the same workloads, each engine in a child process of its own, and \
print a table of figures per phase and of ratios to the first engine.

Workloads (--workloads, in the order given; the first must be a load; NAME:OPS gives a phase its \
own operation count, the others run --ops):
  fillseq       load records 0..N in key order (db_bench keys; with --hashed-keys, the records sorted by their hashed keys: a bulk load)
  fillrandom    load records 0..N, each once, in uniformly random key order (db_bench keys)
  fillmixed     load records 0..N, each once: --sequential-percent P of the inserts extend an ascending run (records 0..N*P/100, the low end of the key space), evenly interleaved with the others' inserts in uniformly random order (db_bench keys; SplinterDB's locality sweep)
  overwrite     puts of new versions of records chosen uniformly at random (with --distribution \
zipfian or latest, from that distribution over the records loaded)
  readrandom    gets of records chosen uniformly at random; with --miss-ratio R, a share R of \
them look up keys no record has (inside the records' key range), which must be not found
  readmissing   gets of keys no record has (inside the records' key range), chosen uniformly at \
random; each must be not found
  readseq       one iterator per thread from its share of the key space, OPS entries in all
  seekrandom    a seek to a record chosen uniformly at random, then --seek-nexts nexts (with \
--seek-nexts N1,N2,..., the k-th seekrandom phase takes Nk)
  deleterandom  deletes of records chosen uniformly at random
  ycsb-load     YCSB's load: records 0..N in record order (YCSB keys: random key order)
  ycsb-a        50% reads, 50% updates, zipfian
  ycsb-b        95% reads, 5% updates, zipfian
  ycsb-c        100% reads, zipfian
  ycsb-d        95% reads, 5% inserts of new records, latest
  ycsb-e        95% scans (length uniform in 1..100), 5% inserts of new records, zipfian
  ycsb-f        50% reads, 50% read-modify-writes, zipfian
  fd-w-search   the FD-tree paper's W-Search: 80% searches, 10% inserts of new records, 5% deletes, \
5% updates
  fd-w-insert   W-Insert: 20% searches, 50% inserts, 20% deletes, 10% updates
  fd-w-delete   W-Delete: 20% searches, 20% inserts, 50% deletes, 10% updates
  search-insert 50% searches, 50% inserts (the FD-tree paper's Figs. 7 and 10)
Zipfian is YCSB's scrambled zipfian (constant 0.99, hot records scattered by an FNV hash); \
--distribution uniform|zipfian|latest replaces each YCSB workload's own (and overwrite's uniform). The FD-tree mixes \
search (get), update and delete records chosen uniformly among those present at the time, and \
insert records no phase wrote before, whose keys land among the loaded ones: they need \
--hashed-keys (or ycsb-load). Mixed phases also time each kind of operation apart (the table \
after the figures). Without --workloads: fillrandom, overwrite (only with --overwrites M), \
readrandom (unless --ops 0).

Keys: fillseq, fillrandom and fillmixed load db_bench's keys (record i as 8 big-endian bytes, then '0' up \
to --key-size; with --hashed-keys, fillseq and fillrandom write splitmix64(i) in their place, a \
random record order: fillseq then loads the records in ascending key order, fillrandom in \
random key order); ycsb-load loads YCSB's (\"user\" and the decimal of fnvhash64(i), zero-padded \
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
  dev reads/get      read requests the block device under --dir completed from the first \
operation to the last ÷ gets (reads and read-modify-writes), in phases that read; the device \
counts every process, and in phases that write, the engine's merges too: an upper bound
  own reads/get      the engine's own count of device reads for user reads ÷ gets (woods)
  CPU time, per-second throughput, peak RSS (getrusage)
  peak mem           peak memory charged to the engine's cgroup in the phase, page cache \
included
  device WA          (JSON and summary.md, phases that write) bytes the block device under --dir \
wrote in the phase (sectors written in /sys/dev/block/MAJ:MIN/stat, or /proc/diskstats, read \
after syncing the engine's files before it opens and after it closes) ÷ key and value \
bytes. The device counts every process on the machine and the file system's journal, so this is \
an upper bound of WA; a phase where the device wrote less than 95% of what /proc says the \
engine's process wrote is flagged with a WARNING (its WA is then suspect). Without a block \
device (tmpfs, overlayfs) the reason is recorded instead.

Durability: every engine writes its log (LMDB and redb, which have none: commits each write) \
without syncing it per write. --sync syncs every write (load puts, updates, read-modify-writes, \
inserts, deletes) to the device before it returns: woods Durability::Sync, RocksDB and LevelDB \
sync = true, LMDB without NO_SYNC (each commit fdatasyncs), fjall persist(SyncData) after each \
write, redb Durability::Immediate. The table, summary.md and the JSON say whether a run was \
synced.

Memory: every engine gets the same budget, --cache-bytes: a quarter of it (at most 64 MiB) is \
two write buffers, the rest block/page cache. The budget is total memory, OS page cache \
included: where the bench can make memory cgroups (root, cgroup v1 memory controller or cgroup \
v2 with memory delegated), each engine's child runs in a group of its own limited to the budget \
plus --memory-allowance (the bench itself, the engine's fixed costs outside its caches and the \
write-ahead log's pages in the page cache; default 32 MiB + 512 KiB per client thread + 1 byte \
per record + two write buffers); the kernel reclaims the \
group's page cache at the limit and OOM-kills the engine if its own memory exceeds it, which \
is reported as such. The table's memory column says how the budget held and `peak mem` is the \
group's peak per phase. With --no-cgroup, or where no group can be made, the page cache is \
dropped before each phase (if /proc/sys/vm/drop_caches is writable) and engines without \
direct I/O are labelled cache-assisted. The run says at its start which applies. Direct I/O is \
asked for every engine (not with --no-direct-io) and the table says whether it was in effect.

Output: the table on stdout; --json FILE writes every figure; --out DIR writes bench.json, \
summary.md (machine, kernel, file system of --dir, direct I/O, memory enforcement, the command, \
the tables, links to the charts) and SVG charts per phase: throughput-N-PHASE.svg (operations \
completed per second, one line per engine: stalls are dips), latency-N-PHASE.svg (percentile \
spectrum on a 1/(1-p) axis), ops-N-PHASE.svg (ops/s bars) and, for phases that write, \
write-amp-N-PHASE.svg (WA with and without WAL bytes).

With no --records this is a smoke run over all woods index kinds (200,000 records, 50,000 \
reads, a budget of 1/8 of the data), about a minute: it shows the instrument works, it is not a \
result.

Engines: woods:btree, woods:btree-buffered, woods:lsm, woods:nbtree, woods:stbe, woods:lsa, \
woods:iam, woods:fdtree, woods:fdtree-d, woods:pbt (every woods index kind; also \
woods:btree-buffered:POLICY for fullest-leaf, random-ball and golden-gate, and \
woods:nbtree-sC for C in 1, 2, 4, 8: nbtree with σ = C memtables, and woods:iam-mM-kK for M in \
2, 3 and K in 1, 2, 3: iam with its mixed level and k fixed, and woods:fdtree-k10 and \
woods:fdtree-d-k10: fdtree with its capacity ratio k fixed at 10 (lsm's) instead of the cost \
model's, and woods:stbe-bB for B in 4, 6, 8, 12: stbe flushing a child (trigger T2) and compacting \
a leaf whole past B branches instead of 3F = 24, and woods:stbe-fB for B in 4, 8: the flush \
alone, and woods:stbe-sK for K in 0, 64: stbe with scan-driven compaction credited K KiB a branch \
a scan reads (16 by default; 0 off); any of them followed by +whole, \
e.g. woods:lsm+whole: Options::split_entries off, every run entry whole in one page), and with \
the `peers` cargo feature \
rocksdb (Debian's librocksdb 7.8.3), leveldb (Debian's libleveldb 1.23, C API), lmdb (heed), \
fjall and redb; docs/benchmarks.md lists every setting. Only woods and RocksDB do direct I/O: \
the others read through the OS page cache (direct = no; cache-assisted where no memory cgroup \
bounds it). --engine-exe NAME=PATH runs an engine from another bench binary of the same source, \
so that engines no single build links together run in one run: current RocksDB \
(`rocksdb-current=bench/rocksdb-current/target/release/woods-bench-rc`, built by \
scripts/build-rocksdb-current.sh) beside Debian's 7.8.3. An engine name may carry a label, \
ENGINE@LABEL, when --engine-exe names it: the same engine from another build in the same run, \
e.g. `--engines woods:lsm,woods:lsm@before --engine-exe woods:lsm@before=PATH` (a before-and-after \
comparison under the same conditions; results keep the label). PATH takes the bench's arguments \
itself: a bench binary such as woods-bench-rc, or for another build of the woods tool a script \
that runs `exec /path/to/woods bench \"$@\"`.";

/// Arguments of `woods bench`.
#[derive(Args, Clone, Debug, Default)]
pub struct BenchArgs {
    /// Engines to run, comma-separated: woods:KIND for a woods index kind, and with the `peers`
    /// feature rocksdb, leveldb, lmdb, fjall, redb; the first is the baseline of the ratios
    /// [default: every woods index kind].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub engines: Vec<String>,
    /// Peer engines to run after --engines (whose default, every woods index kind, still
    /// applies), comma-separated: `--peers rocksdb,leveldb,lmdb,fjall,redb` compares every
    /// woods index kind with every peer.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub peers: Vec<String>,
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
    /// Percentage of fillmixed's inserts that extend its ascending run (0 to 100).
    #[arg(long, value_name = "P", default_value_t = 50.0)]
    pub sequential_percent: f64,
    /// `next` calls after each seek of seekrandom; N1,N2,... gives the first seekrandom phase
    /// N1, the second N2, and so on (range searches of growing length over one load).
    #[arg(long, value_name = "N", value_delimiter = ',', default_value = "10")]
    pub seek_nexts: Vec<usize>,
    /// Stop each phase after SECS seconds; its figures cover the operations done by then (the
    /// table's ops column says how many). readseq, one scan, is not cut, and a load only when
    /// it is the last phase (the phases after a load need every record): a load too slow to
    /// finish is measured by `--workloads fillrandom --duration SECS`.
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub duration: Option<u64>,
    /// Also keep each phase's mean time per operation over every window of W consecutive
    /// operations (of each client thread), in the JSON and drawn as windows-N-PHASE.svg: the
    /// FD-tree paper's Fig. 6 is windows of 100,000 inserts [default: none].
    #[arg(long, value_name = "W", default_value_t = 0)]
    pub window: u64,
    /// fillseq and fillrandom load hashed keys: splitmix64 of the record as 8 big-endian bytes,
    /// then '0' up to --key-size, so that records inserted later (fd-w-*, search-insert) land
    /// uniformly among the loaded ones, as the FD-tree paper's uniform keys do; fillseq loads
    /// them in ascending key order (a bulk load), fillrandom in random order [default: db_bench
    /// keys, in record order].
    #[arg(long)]
    pub hashed_keys: bool,
    /// Request distribution of every YCSB phase and of overwrite [default: each workload's
    /// own: latest for ycsb-d, zipfian for the other YCSB phases, uniform for overwrite].
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
    /// Sync every write to the device before it returns, in every engine (woods
    /// Durability::Sync, RocksDB and LevelDB sync = true, LMDB without NO_SYNC, fjall
    /// persist(SyncData), redb Durability::Immediate) [default: writes go to the OS, not
    /// synced per write].
    #[arg(long)]
    pub sync: bool,
    /// Write without a write-ahead log, where the engine can (woods `Options::wal = false`,
    /// RocksDB `WriteOptions::disable_wal`; LMDB and redb have none anyway; LevelDB and fjall
    /// cannot, and fail): a bulk load that a crash may lose until the engine's next flush.
    #[arg(long, conflicts_with = "sync")]
    pub no_wal: bool,
    /// Background threads of each woods engine (`Options::background_threads`); 0: the
    /// writing threads do all index work inline, as SplinterDB's evaluation ran. The peers keep
    /// their own settings.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub background_threads: usize,
    /// The most of each woods engine's cache its row cache may take (`Options::row_cache_bytes`;
    /// K, M, G suffixes) [default: woods' own, none]. The peers keep their own settings (none
    /// has a row cache on).
    #[arg(long, value_name = "B", value_parser = parse_size)]
    pub row_cache_bytes: Option<u64>,
    /// The capacity of the `btree-buffered` engines' insertion buffer
    /// (`InsertBuffer::capacity_bytes`; K, M, G suffixes) [default: woods' own, a quarter of the
    /// cache]. Its memory is charged to the engine's cache, so a buffer larger than a quarter
    /// needs a larger --cache-bytes: for runs at many buffered entries per leaf (seed 004 ch. 5).
    #[arg(long, value_name = "B", value_parser = parse_size)]
    pub insert_buffer_bytes: Option<u64>,
    /// Also write every figure as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the results into DIR (made if missing): bench.json (every figure), summary.md
    /// (machine, command, tables, ratios, links to the charts) and SVG charts per phase:
    /// throughput over time, latency percentile spectrum, ops/s bars, and for phases that
    /// write, write-amplification bars.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Do not enforce the memory budget with a memory cgroup: drop the OS page cache before
    /// each phase instead, and label engines without direct I/O cache-assisted.
    #[arg(long)]
    pub no_cgroup: bool,
    /// What each engine's memory cgroup allows beyond the budget: the bench itself, the
    /// engine's fixed costs outside its caches and its write-ahead log's pages in the page
    /// cache (K, M, G suffixes) [default: 32M + 512K per client thread + 1 byte per record +
    /// two write buffers].
    #[arg(long, value_name = "B", value_parser = parse_size)]
    pub memory_allowance: Option<u64>,
    /// Directory for the engines' databases, one subdirectory each, removed after each engine
    /// [default: a new directory under the system's temporary directory]. It must be on the
    /// device being measured (not tmpfs).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep the engines' databases after the run.
    #[arg(long)]
    pub keep: bool,
    /// Run no engine: draw the figures of earlier runs' reports (bench.json), each at x = X or
    /// its record count, one line per engine, into --out as SVG charts and series.md (average,
    /// maximum and p99.99 insertion time, the longest wait woods records, load throughput and
    /// write amplification, average point query time).
    #[arg(long, value_name = "[X=]FILE", num_args = 1..)]
    pub series: Vec<String>,
    /// What x is in --series charts.
    #[arg(long, value_name = "TEXT", default_value = "records")]
    pub x_desc: String,
    /// Run engine NAME with the bench binary at PATH, which must be built from this same
    /// source and take the bench's arguments itself (`woods-bench`, or `woods-bench-rc` of
    /// scripts/build-rocksdb-current.sh for `rocksdb-current=...`), so that engines no single
    /// build can link together run in one run; repeatable.
    #[arg(long = "engine-exe", value_name = "NAME=PATH")]
    pub engine_exe: Vec<String>,
    /// Run the TPC-C-like workload (docs/benchmarks.md) with W warehouses instead of
    /// --workloads: a load, then --tpcc-secs of transactions from one client thread (at most
    /// --ops of them, if given); Table 1's and Table 2's figures per engine [budget default:
    /// 16M].
    #[arg(long, value_name = "W")]
    pub tpcc_warehouses: Option<u32>,
    /// Seconds of transactions of the TPC-C-like workload.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub tpcc_secs: u64,
    /// Run each TPC-C-like engine under `strace`, recording the offset of every write, and draw
    /// Figure 4's chart of page offsets written over time into --out (slows the engines: not
    /// for throughput).
    #[arg(long, requires = "out")]
    pub tpcc_trace: bool,
    /// Internal: run one engine of the TPC-C-like workload as a child process (JSON).
    #[arg(long, hide = true, value_name = "SPEC")]
    pub tpcc_child: Option<String>,
    /// Internal: run one engine as a child process (the spec as JSON).
    #[arg(long, hide = true, value_name = "SPEC")]
    pub child: Option<String>,
    /// Internal: what the parent arranged for the child (JSON).
    #[arg(long, hide = true, value_name = "SETUP")]
    pub child_setup: Option<String>,
    /// A tool that runs instead of the engines' comparison.
    #[command(subcommand)]
    pub tool: Option<BenchTool>,
}

/// `woods bench TOOL`: instruments beside the comparison of engines.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum BenchTool {
    /// Simulate the ball-recycling game of insertion buffers (seed 004 ch. 5): the recycle rate
    /// of each flush policy on fixed bins and in a B-tree with splitting leaves, as markdown.
    Recycle(crate::recycle::RecycleArgs),
    /// Age every ordered woods index kind under clustered churn (seed 004 ch. 4) and compare
    /// its scans with a freshly loaded copy: aging factor and layout score per cycle.
    Aging(crate::aging::AgingArgs),
}

/// The `woods-bench` binary's command line: the bench's arguments, and `--no-direct-io` (which
/// `woods` has as a flag of its own, before `bench`).
#[derive(Parser, Debug)]
#[command(name = "woods-bench", version, about = "Benchmark woods index kinds and peer engines", long_about = BENCH_HELP)]
pub struct StandaloneArgs {
    /// Do not ask the engines for direct I/O.
    #[arg(long)]
    pub no_direct_io: bool,
    #[command(flatten)]
    pub bench: BenchArgs,
}

/// The `woods-bench` binary, with `extra` engines besides the ones this build knows: a binary
/// that adds an engine is `fn main() -> ExitCode { main_with(&[("name", open_it)]) }`. Its
/// children re-execute the current binary (`std::env::current_exe`), so they know the extra
/// engines too. `--help` lists them.
pub fn main_with(extra: ExtraEngines) -> ExitCode {
    let mut cmd = StandaloneArgs::command();
    if !extra.is_empty() {
        let names: Vec<&str> = extra.iter().map(|(n, _)| *n).collect();
        cmd = cmd.long_about(format!(
            "{BENCH_HELP}\n\nEngines this binary adds: {}.",
            names.join(", ")
        ));
    }
    let cli = match StandaloneArgs::from_arg_matches(&cmd.get_matches()) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("woods-bench: error: cannot find this binary to run the engines: {e}");
            return ExitCode::from(2);
        }
    };
    // The child reads direct I/O from its spec, so it needs no flags before `--child`.
    ExitCode::from(run_with_engines(
        &cli.bench,
        !cli.no_direct_io,
        &exe,
        &[],
        extra,
    ))
}

/// `--series`: draws earlier runs' figures into `--out`; the exit status.
fn draw_series(args: &BenchArgs) -> u8 {
    let Some(out) = &args.out else {
        eprintln!("woods bench: error: --series needs --out DIR for its charts");
        return 2;
    };
    let drawn = crate::series::load(&args.series)
        .and_then(|points| crate::series::draw(&points, &args.x_desc, out));
    match drawn {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            0
        }
        Err(e) => {
            eprintln!("woods bench: error: {e}");
            2
        }
    }
}

/// The engine a name runs: the name less its label, if it has one (`woods:lsm@before`).
fn unlabelled(name: &str) -> &str {
    name.split_once('@').map_or(name, |(engine, _)| engine)
}

/// Parses `--engine-exe NAME=PATH` values; each PATH must be an executable file.
fn engine_exes(values: &[String]) -> Result<Vec<(String, PathBuf)>, String> {
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    for v in values {
        let Some((name, path)) = v
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
        else {
            return Err(format!("--engine-exe {v:?}: expected NAME=PATH"));
        };
        let path = PathBuf::from(path);
        let executable = fs::metadata(&path).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        });
        if !executable {
            return Err(format!(
                "--engine-exe {name}={}: not an executable file",
                path.display()
            ));
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(format!("--engine-exe names engine {name:?} twice"));
        }
        out.push((name.to_string(), path));
    }
    Ok(out)
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

/// A phase's time limit in whole seconds, at least 1.
pub fn parse_secs(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s:?} is not a number of seconds (at least 1)")),
    }
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

/// How a run's writes were made durable, for its messages and summary.
pub fn sync_words(sync: bool) -> &'static str {
    if sync {
        "every write SYNCED to the device (--sync)"
    } else {
        "writes not synced per write (--sync not given)"
    }
}

/// Whether a run's writes went through a write-ahead log, for its messages and summary.
pub fn wal_words(no_wal: bool) -> &'static str {
    if no_wal {
        "NO write-ahead log (--no-wal)"
    } else {
        "write-ahead log on"
    }
}

/// How the memory budget was given and held.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct MemoryReport {
    /// cgroup v1, cgroup v2 or none.
    pub enforcement: Enforcement,
    /// What each engine's cgroup allowed beyond the budget (the bench itself).
    pub allowance_bytes: u64,
    /// The budget's split: the cache, and one of the two write buffers.
    pub cache_bytes: u64,
    pub write_buffer_bytes: u64,
    /// Why no cgroup enforced it.
    pub why_not: Option<String>,
    /// Without a cgroup: whether the page cache was dropped before each phase.
    pub page_cache_dropped: bool,
}

/// The JSON file: the run's settings and every engine's figures.
#[derive(Serialize, Deserialize, Debug)]
pub struct BenchReport {
    /// The command line of the run.
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub machine: Machine,
    #[serde(default)]
    pub memory: MemoryReport,
    /// True for the default smoke run: not a result.
    pub smoke: bool,
    pub records: u64,
    /// The phases in order, with their operation counts (loads: the records).
    pub phases: Vec<Phase>,
    pub threads: usize,
    pub miss_ratio: f64,
    /// fillmixed's sequential share (absent from reports of earlier versions).
    #[serde(default)]
    pub sequential_percent: f64,
    pub seek_nexts: usize,
    /// `--duration`: each phase stopped after this many seconds (absent: run to the end).
    #[serde(default)]
    pub duration_secs: Option<u64>,
    pub distribution: Option<Distribution>,
    pub key_size: usize,
    pub value_size: usize,
    pub memory_bytes: u64,
    pub direct_io_requested: bool,
    /// `--sync`: every write of every engine was synced to the device before it returned.
    #[serde(default)]
    pub sync: bool,
    /// `--no-wal`: the engines wrote without their write-ahead logs.
    #[serde(default)]
    pub no_wal: bool,
    /// `--hashed-keys`: the db_bench loads wrote hashed keys.
    #[serde(default)]
    pub hashed_keys: bool,
    pub seed: u64,
    pub results: Vec<EngineResult>,
    /// Engines that failed, with why.
    pub failures: Vec<(String, String)>,
}

/// Runs `woods bench`. `exe` and `prefix` re-execute this binary in bench mode for the
/// children (`woods bench ...` has prefix `["bench"]`). Returns the exit status: 0, 1 when an
/// engine failed (its error printed), 2 for bad arguments.
pub fn run(args: &BenchArgs, direct_io: bool, exe: &Path, prefix: &[OsString]) -> u8 {
    run_with_engines(args, direct_io, exe, prefix, &[])
}

/// Like [`run`], knowing the `extra` engines too: in the parent (names) and in the child (which
/// opens one). `exe` must be a binary that knows them as well, since the children run it.
pub fn run_with_engines(
    args: &BenchArgs,
    direct_io: bool,
    exe: &Path,
    prefix: &[OsString],
    extra: ExtraEngines,
) -> u8 {
    if let Some(spec) = &args.child {
        return child_main_with(spec, args.child_setup.as_deref(), extra);
    }
    if !args.series.is_empty() {
        return draw_series(args);
    }
    match &args.tool {
        Some(BenchTool::Recycle(a)) => return crate::recycle::main(a),
        Some(BenchTool::Aging(a)) => return crate::aging::main(a),
        None => {}
    }
    if let Some(spec) = &args.tpcc_child {
        return crate::tpcc::child_main(spec, extra);
    }
    if let Some(w) = args.tpcc_warehouses {
        return run_tpcc(args, w, direct_io, exe, prefix);
    }
    match run_parent(args, direct_io, exe, prefix, extra) {
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

/// `--tpcc-warehouses W`: the TPC-C-like workload, every engine in a child of its own.
fn run_tpcc(args: &BenchArgs, w: u32, direct_io: bool, exe: &Path, prefix: &[OsString]) -> u8 {
    let engines = match engine_list(args) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("woods bench: error: {e}");
            return 2;
        }
    };
    let mut config = EngineConfig::new(args.cache_bytes.unwrap_or(16 << 20), direct_io);
    config.sync = args.sync;
    config.no_wal = args.no_wal;
    config.background_threads = Some(args.background_threads);
    config.row_cache_bytes = args.row_cache_bytes;
    config.insert_buffer_bytes = args.insert_buffer_bytes;
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("woods-bench-tpcc-{}", std::process::id()))
    });
    crate::tpcc::run_parent(&crate::tpcc::ParentArgs {
        engines,
        warehouses: w,
        secs: args.tpcc_secs,
        max_txns: args.ops.unwrap_or(0),
        config,
        seed: args.seed,
        dir,
        keep: args.keep,
        out: args.out.clone(),
        json: args.json.clone(),
        trace: args.tpcc_trace,
        exe,
        prefix,
    })
}

/// The engines of a run: --engines (default every woods index kind), then --peers, each once.
fn engine_list(args: &BenchArgs) -> Result<Vec<String>, String> {
    let mut engines = if args.engines.is_empty() {
        engine::woods_engines()
    } else {
        args.engines.clone()
    };
    for p in &args.peers {
        if p.starts_with("woods:") {
            return Err(format!(
                "--peers {p}: woods' index kinds go in --engines; --peers names other engines"
            ));
        }
        if engines.contains(p) {
            return Err(format!("engine {p} is named twice"));
        }
        engines.push(p.clone());
    }
    Ok(engines)
}

fn run_parent(
    args: &BenchArgs,
    direct_io: bool,
    exe: &Path,
    prefix: &[OsString],
    extra: ExtraEngines,
) -> Result<bool, String> {
    let smoke = args.records.is_none();
    let records = args.records.unwrap_or(SMOKE_RECORDS);
    let phases = phases(args)?;
    let engines = engine_list(args)?;
    let external = engine_exes(&args.engine_exe)?;
    for e in &engines {
        if !external.iter().any(|(n, _)| n == e) {
            if let Some((_, label)) = e.split_once('@') {
                return Err(format!(
                    "engine {e}: a label (@{label}) names a run of another binary, and needs \
                     --engine-exe {e}=PATH"
                ));
            }
            engine::check_name_with(e, extra).map_err(|e| e.to_string())?;
        }
    }
    let data = records * (args.key_size + args.value_size) as u64;
    let memory_bytes = args.cache_bytes.unwrap_or((data / 8).max(1 << 20));
    let config = EngineConfig {
        memory_bytes,
        direct_io,
        sync: args.sync,
        no_wal: args.no_wal,
        background_threads: Some(args.background_threads),
        row_cache_bytes: args.row_cache_bytes,
        insert_buffer_bytes: args.insert_buffer_bytes,
        expected_entries: Some(records),
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
        sequential_percent: args.sequential_percent,
        seek_nexts: args.seek_nexts.last().copied().unwrap_or(10),
        seek_lengths: if args.seek_nexts.len() > 1 {
            args.seek_nexts.clone()
        } else {
            Vec::new()
        },
        distribution: args.distribution,
        seed: args.seed,
        progress: true,
        duration: args.duration.map(std::time::Duration::from_secs),
        window: args.window,
        hashed_keys: args.hashed_keys,
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
    let machine = Machine::probe(&base);
    let command = machine::command_line();

    // The budget: a memory cgroup per engine where one can be made, else dropped caches.
    let cgroups = if args.no_cgroup {
        Err("--no-cgroup".to_string())
    } else {
        CgroupParent::find()
    };
    let capacity = spec_for("", PathBuf::new()).capacity();
    // Beyond the bench itself: the write-ahead logs' pages in the OS page cache, about one
    // write buffer's worth per memtable (the live log and the one whose memtable is being
    // flushed). Every engine with a log writes it through the page cache and deletes it before
    // the kernel writes it back; no engine can size that, so it is not charged to its budget.
    let allowance = args.memory_allowance.unwrap_or(
        DEFAULT_ALLOWANCE
            + args.threads as u64 * ALLOWANCE_PER_THREAD
            + capacity
            + 2 * split.write_buffer_bytes,
    );
    let limit = memory_bytes + allowance;
    let mut memory = MemoryReport {
        enforcement: Enforcement::None,
        allowance_bytes: allowance,
        cache_bytes: split.cache_bytes,
        write_buffer_bytes: split.write_buffer_bytes,
        why_not: None,
        page_cache_dropped: false,
    };
    let mut err = std::io::stderr();
    if let Some(kib) = machine
        .read_ahead_kib
        .filter(|&k| k > machine::LARGE_READ_AHEAD_KIB)
    {
        let mapped: Vec<&str> = engines
            .iter()
            .map(|e| e.as_str())
            .filter(|e| machine::MMAP_ENGINES.contains(e))
            .collect();
        if !mapped.is_empty() {
            let _ = writeln!(
                err,
                "woods bench: WARNING: the databases' device reads ahead {kib} KiB; {} read \
                 through mmap and read up to that much around each page fault (Linux's \
                 default is 128 KiB: /sys/block/DEV/queue/read_ahead_kb)",
                mapped.join(", ")
            );
        }
    }
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
         memory budget {} per engine (cache {}, write buffers 2 x {}), direct I/O {}, {}, {}, \
         {} background thread(s) per woods engine, seed {}, databases under {} ({})",
        args.key_size,
        args.value_size,
        report::bytes(data as f64),
        describe(&phases),
        args.threads,
        report::bytes(memory_bytes as f64),
        report::bytes(split.cache_bytes as f64),
        report::bytes(split.write_buffer_bytes as f64),
        if direct_io { "requested" } else { "off" },
        sync_words(args.sync),
        wal_words(args.no_wal),
        args.background_threads,
        args.seed,
        base.display(),
        machine
            .file_system
            .as_deref()
            .unwrap_or("unknown file system"),
    );
    match &cgroups {
        Ok(parent) => {
            memory.enforcement = parent.version.enforcement();
            let _ = writeln!(
                err,
                "woods bench: memory budget ENFORCED by {}: each engine runs in a memory cgroup \
                 limited to {} (budget {} + allowance {} for the bench and the engine's fixed \
                 costs), page cache included; groups under {}",
                memory.enforcement.name(),
                report::bytes(limit as f64),
                report::bytes(memory_bytes as f64),
                report::bytes(allowance as f64),
                parent.dir.display()
            );
        }
        Err(why) => {
            memory.why_not = Some(why.clone());
            let dropped = cgroup::can_drop_page_cache();
            memory.page_cache_dropped = dropped.is_ok();
            let _ = writeln!(
                err,
                "woods bench: memory budget NOT ENFORCED (no memory cgroup: {why}); {}; engines \
                 without direct I/O are labelled cache-assisted",
                match &dropped {
                    Ok(()) => "the page cache is dropped before each phase".to_string(),
                    Err(e) => format!("the page cache cannot be dropped either ({e})"),
                }
            );
        }
    }

    let mut results = Vec::new();
    let mut failures = Vec::new();
    for name in &engines {
        let dir = base.join(name.replace(':', "-"));
        let _ = fs::remove_dir_all(&dir);
        // A labelled engine (`woods:lsm@before`) is its engine run by the binary its
        // `--engine-exe` names; its results keep the label.
        let spec = spec_for(unlabelled(name), dir.clone());
        let _ = writeln!(err, "== {name}");
        // An engine of another binary: that binary takes the bench's arguments itself.
        let (exe, prefix): (&Path, &[OsString]) = match external.iter().find(|(n, _)| n == name) {
            Some((_, path)) => (path, &[]),
            None => (exe, prefix),
        };
        match run_engine(
            exe,
            prefix,
            &spec,
            &cgroups,
            limit,
            memory.page_cache_dropped,
        ) {
            Ok(mut r) => {
                r.engine.clone_from(name);
                report_phases(&mut err, name, &r, limit);
                results.push(r);
            }
            Err(f) => {
                let _ = writeln!(err, "woods bench: {name} FAILED: {f}");
                if let Some(mut r) = f.finished {
                    // What it finished is a result: its phases go in the table and the files,
                    // and the failure is listed beside them.
                    r.engine.clone_from(name);
                    report_phases(&mut err, name, &r, limit);
                    results.push(*r);
                }
                failures.push((name.clone(), f.error.to_string()));
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
    if args.sync {
        let _ = writeln!(
            out,
            "SYNCED WRITES (--sync): every write of every engine was synced to the device"
        );
    }
    if args.no_wal {
        let _ = writeln!(
            out,
            "NO WRITE-AHEAD LOG (--no-wal): the engines wrote without their logs"
        );
    }
    let _ = write!(out, "{}", report::table(&results));
    if results.iter().any(|r| {
        r.phases
            .iter()
            .any(|p| p.workload.writes() && p.proc_written == Some(0))
    }) {
        let _ = writeln!(
            out,
            "note: /proc/self/io counted no device writes: the directory is probably on tmpfs, \
             so WA is meaningless; use --dir on the device to measure"
        );
    }
    device_notes(&mut out, &results, &machine);
    if !memory.enforcement.enforced() {
        let _ = writeln!(
            out,
            "note: the memory budget was not enforced ({}); cache-assisted engines may have \
             used the OS page cache beyond it",
            memory.why_not.as_deref().unwrap_or("no cgroup")
        );
    }
    for (name, why) in &failures {
        let _ = writeln!(out, "{name}: FAILED: {why}");
    }
    let rep = BenchReport {
        command,
        machine,
        memory,
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
        sequential_percent: args.sequential_percent,
        seek_nexts: args.seek_nexts.last().copied().unwrap_or(10),
        duration_secs: args.duration,
        distribution: args.distribution,
        key_size: args.key_size,
        value_size: args.value_size,
        memory_bytes,
        direct_io_requested: direct_io,
        sync: args.sync,
        no_wal: args.no_wal,
        hashed_keys: args.hashed_keys,
        seed: args.seed,
        results,
        failures: failures.clone(),
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&rep).map_err(|e| e.to_string())?;
        fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    if let Some(dir) = &args.out {
        output::write_dir(&rep, dir)?;
        let _ = writeln!(
            out,
            "results in {}: {}, {} and the charts",
            dir.display(),
            output::SUMMARY_FILE,
            output::JSON_FILE
        );
    }
    Ok(failures.is_empty())
}

/// The stderr lines of an engine's finished phases: version, then a line a phase.
fn report_phases(err: &mut impl Write, name: &str, r: &EngineResult, limit: u64) {
    if let Some(v) = &r.version {
        let _ = writeln!(err, "  {name}: {v}");
    }
    for p in &r.phases {
        let _ = writeln!(
            err,
            "  {name} {}: {} ops in {:.2} s, {:.0} ops/s, direct I/O {}{}",
            p.workload.name(),
            p.ops,
            p.secs,
            p.ops_per_sec,
            if p.direct_io { "on" } else { "off" },
            p.memory_peak_bytes.map_or(String::new(), |b| format!(
                ", peak memory {} of {}",
                report::bytes(b as f64),
                report::bytes(limit as f64)
            )),
        );
    }
}

/// The device cross-check of write amplification, under the table: a warning for every phase
/// whose device wrote less than /proc says its engine's process wrote, why the device could not
/// be read, or that it saw enough.
fn device_notes(out: &mut impl Write, results: &[EngineResult], machine: &Machine) {
    let writes = || {
        results
            .iter()
            .flat_map(|r| r.phases.iter().map(move |p| (r, p)))
            .filter(|(_, p)| p.workload.writes())
    };
    let mut warned = false;
    for (r, p) in writes() {
        if let Some(w) = &p.device_warning {
            let _ = writeln!(out, "WARNING: {} {}: {w}", r.engine, p.workload.name());
            warned = true;
        }
    }
    if let Some(why) = writes().find_map(|(_, p)| p.device_unreadable.as_ref()) {
        let _ = writeln!(out, "note: no device cross-check of WA: {why}");
    } else if !warned && writes().any(|(_, p)| p.device_written.is_some()) {
        let _ = writeln!(
            out,
            "device cross-check: {} wrote at least {:.0}% of what /proc counted in every phase \
             that wrote {} or more (device WA, an upper bound with other processes' writes, in \
             the JSON and summary.md)",
            machine.block_device.as_deref().unwrap_or("the device"),
            100.0 * crate::device::MIN_DEVICE_SHARE,
            report::bytes(crate::device::MIN_CHECKED_BYTES as f64),
        );
    }
}

/// Runs one engine's child: in a memory cgroup of `limit` bytes made for it when `cgroups`
/// found where to make one (removed after), else dropping the page cache before each phase
/// when `drop_caches`. Labels the result with how its budget held.
fn run_engine(
    exe: &Path,
    prefix: &[OsString],
    spec: &RunSpec,
    cgroups: &Result<CgroupParent, String>,
    limit: u64,
    drop_caches: bool,
) -> Result<EngineResult, ChildFailure> {
    let (result, enforcement, limit) = match cgroups {
        Ok(parent) => {
            let name = format!(
                "woods-bench-{}-{}",
                std::process::id(),
                spec.engine.replace(':', "-")
            );
            let group = parent.create(&name, limit).map_err(|e| {
                BenchError::new(format!(
                    "cannot make its memory cgroup {}: {e}",
                    parent.dir.join(&name).display()
                ))
            })?;
            let setup = ChildSetup {
                wait_for_go: true,
                drop_caches: false,
                cgroup: Some(group.handle()),
                die_before_phase: None,
            };
            let result = run_in_child_with(exe, prefix, spec, &setup, Some(&group));
            let dir = group.dir().to_path_buf();
            if let Err(e) = group.remove() {
                eprintln!("woods bench: warning: cannot remove {}: {e}", dir.display());
            }
            (result, parent.version.enforcement(), Some(limit))
        }
        Err(_) => {
            let setup = ChildSetup {
                wait_for_go: false,
                drop_caches,
                cgroup: None,
                die_before_phase: None,
            };
            let result = run_in_child_with(exe, prefix, spec, &setup, None);
            (result, Enforcement::None, None)
        }
    };
    // The finished phases of a failed child are labelled as a whole run's are.
    let label = |mut r: EngineResult| {
        r.enforcement = enforcement;
        r.cgroup_limit_bytes = limit;
        let enforced = r.enforcement.enforced();
        for p in &mut r.phases {
            p.cache_assisted = !enforced && !p.direct_io;
        }
        r
    };
    result.map(label).map_err(|f| ChildFailure {
        error: f.error,
        finished: f.finished.map(|r| Box::new(label(*r))),
    })
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

    /// --peers come after --engines, whose default (every woods index kind) still applies.
    #[test]
    fn peers_follow_the_engines() {
        let list = |engines: &[&str], peers: &[&str]| {
            engine_list(&BenchArgs {
                engines: engines.iter().map(|s| s.to_string()).collect(),
                peers: peers.iter().map(|s| s.to_string()).collect(),
                ..BenchArgs::default()
            })
        };
        let mut want = engine::woods_engines();
        want.extend(["rocksdb".to_string(), "redb".to_string()]);
        assert_eq!(list(&[], &["rocksdb", "redb"]).unwrap(), want);
        assert_eq!(
            list(&["woods:lsm"], &["leveldb"]).unwrap(),
            ["woods:lsm", "leveldb"]
        );
        assert!(list(&["rocksdb"], &["rocksdb"]).is_err());
        assert!(list(&[], &["woods:lsm"]).unwrap_err().contains("--engines"));
    }

    /// `--seek-nexts` takes one length or a list (one a seekrandom phase); `--hashed-keys` is
    /// a flag.
    #[test]
    fn seek_lengths_and_hashed_keys_parse() {
        let parse = |line: &[&str]| StandaloneArgs::try_parse_from(line).unwrap().bench;
        let a = parse(&["woods-bench"]);
        assert_eq!((a.seek_nexts, a.hashed_keys), (vec![10], false));
        let a = parse(&["woods-bench", "--seek-nexts", "1,10,100", "--hashed-keys"]);
        assert_eq!((a.seek_nexts, a.hashed_keys), (vec![1, 10, 100], true));
        assert!(StandaloneArgs::try_parse_from(["woods-bench", "--seek-nexts", "1,x"]).is_err());
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
