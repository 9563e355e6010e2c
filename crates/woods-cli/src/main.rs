//! `woods`: the command-line tool of the woods storage engine.

mod load;
mod report;
mod stress;

use std::fmt;
use std::io::{self, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use woods::{Db, IndexKind, Options};
use woods_cli::encoding;

const ENCODING_HELP: &str = "\
Keys and values:
  KEY, VALUE, --from and --to are taken as UTF-8 text, except that an argument starting with
  `0x` is hex: `0x68690a` is the three bytes \"hi\\n\", `0x` alone is the empty string. (To use
  text that starts with `0x`, give it in hex.) Output prints a key or value as text when it is
  valid UTF-8 without control characters (tab, newline, ...) and does not start with `0x`, and
  as `0x` + lowercase hex otherwise, so every printed key or value can be given back as input.

Byte sizes (--cache-bytes, --memtable-bytes) accept a K, M or G suffix (powers of 1024).

Exit status: 0 on success; 1 when `get` finds no value or `verify` finds a bad record;
2 on any error (bad arguments, a database error, an I/O error), with the message on stderr.";

const REPAIR_HELP: &str = "\
Rebuild a database whose CURRENT file or manifest log is damaged or missing, from the manifest
logs that are in DB. Opening such a database fails with an error that says what is missing:
woods never creates a new database over one (a directory holding data.woods, MANIFEST-* or
wal-* files but no CURRENT).

Repair reads every manifest log without trusting CURRENT, each to the newest state it can reach,
and tries their states newest first (most commits): the first whose index checks clean against
the data file is written as a new manifest log, which CURRENT then names; the other logs are
renamed *.old and kept for inspection. Only manifest files are written. A log damaged in the
middle gives its newest state when a snapshot record follows the damage (one is written every 8
records), else the state before the damage: the commits after it are reported lost, and so are
writes that neither the kept index nor the write-ahead log holds. When no manifest log can be
read and the data file holds only its header (a creation cut short), an empty manifest is
written and the write-ahead log is replayed by the next open. A write-ahead log damaged in the
middle (valid records after a damaged one, which an open refuses) is recovered to the point
before the damage, the dropped records reported and the original files kept as wal-*.log.old. A
database that opens, checks clean and whose log replays whole is left untouched.

Prints what it found and did, one line each, then a summary; exit status 0 when the database
opens afterwards, 2 when it cannot be repaired: no state checks clean (damage in the data file
itself, or every state older than pages written since), and the directory is left as it was.";

#[derive(Parser)]
#[command(
    name = "woods",
    version,
    about = "Command-line tool of the woods embedded key-value storage engine",
    long_about = "Command-line tool of the woods embedded key-value storage engine.\n\n\
        Every command works on a database directory DB. `put` and `load` create the database when \
        DB is absent or holds none of woods' files; every other command needs an existing one. \
        A damaged database (woods' files without a CURRENT file) is never created over: \
        `woods repair DB` rebuilds it. The index kind (btree, btree-buffered[:POLICY], lsm, lsm-dynamic, nbtree, stbe, lsa, iam, fdtree, fdtree-d, pbt or boa) \
        is fixed when a database is created and read from the database afterwards.",
    after_help = ENCODING_HELP
)]
struct Cli {
    /// Do not use direct I/O for the data file (by default it is used where the file system
    /// supports it; where it does not, a warning says so).
    #[arg(long, global = true)]
    no_direct_io: bool,

    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Set KEY to VALUE (creates the database if DB holds none).
    #[command(after_help = ENCODING_HELP)]
    Put {
        /// Database directory.
        db: PathBuf,
        /// Key (text, or hex after `0x`).
        key: String,
        /// Value (text, or hex after `0x`).
        value: String,
        /// Index kind when creating the database: btree, btree-buffered[:POLICY], lsm, lsm-dynamic, nbtree, stbe, lsa, iam, fdtree, fdtree-d, pbt or boa [default
        /// for a new database: lsm]. For an existing database it must match the stored kind if
        /// given.
        #[arg(long, value_name = "KIND")]
        index: Option<String>,
    },
    /// Print the value of KEY (exit status 1 if it has none).
    #[command(after_help = ENCODING_HELP)]
    Get {
        /// Database directory.
        db: PathBuf,
        /// Key (text, or hex after `0x`).
        key: String,
    },
    /// Delete KEY (deleting an absent key is not an error).
    #[command(visible_alias = "delete", after_help = ENCODING_HELP)]
    Del {
        /// Database directory.
        db: PathBuf,
        /// Key (text, or hex after `0x`).
        key: String,
    },
    /// Print the entries of a key range as `key<TAB>value` lines, in key order.
    #[command(after_help = ENCODING_HELP)]
    Scan {
        /// Database directory.
        db: PathBuf,
        /// First key of the range (inclusive) [default: the smallest key].
        #[arg(long, value_name = "KEY")]
        from: Option<String>,
        /// End of the range (exclusive) [default: past the largest key].
        #[arg(long, value_name = "KEY")]
        to: Option<String>,
        /// Print the range in descending key order (from just below --to down to --from).
        #[arg(long)]
        reverse: bool,
        /// Print at most N entries.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
    /// Print the database's statistics: index shape, counters, device I/O by purpose, cache,
    /// direct I/O, pacing and stalls.
    #[command(
        long_about = "Print the database's statistics: index kind and shape lines, index \
        counters, write counters, device I/O (bytes and operations read and written, per purpose: \
        wal, flush, merge, user_read, manifest), syncs, the page cache, whether direct I/O is in \
        effect, memtables, file size and pages, pacing delays and stalls.\n\n\
        Counters (I/O, writes, pacing, stalls) count from when this command opened the database, \
        so they show the work of opening it (log replay); `woods load` prints the figures of a \
        load in its summary line."
    )]
    Stats {
        /// Database directory.
        db: PathBuf,
    },
    /// Verify every page checksum and structural invariant of the index and count the live keys;
    /// prints what it counted and `ok`.
    #[command(
        long_about = "Verify every page checksum and structural invariant of the index \
        (after opening the database, which replays its write-ahead log into the index), then \
        scan every key once. Prints what it counted, one line each: `live keys` (keys with a \
        value), `index versions` (every version the index holds: puts, deletions and merge operands, \
        as many as reorganisation has not dropped yet), `memtable versions` and `pages` (in \
        use, free, in the data file); then `ok`, and exits 0. On a failed check it prints the \
        error and exits 2."
    )]
    Check {
        /// Database directory.
        db: PathBuf,
    },
    /// Rebuild a database whose CURRENT file or manifest log is damaged or missing, from the
    /// manifest logs that are there.
    #[command(long_about = REPAIR_HELP)]
    Repair {
        /// Database directory.
        db: PathBuf,
        /// Index kind the database was created with: needed only when no manifest log and no
        /// data file header can be read (a creation cut short).
        #[arg(long, value_name = "KIND")]
        index: Option<String>,
    },
    /// Write generated records 0..N, one put each, acknowledging them on stdout.
    #[command(long_about = load::LOAD_HELP)]
    Load(LoadArgs),
    /// Check that the database holds exactly the generated records 0..k, for some k <= N.
    #[command(long_about = load::VERIFY_HELP)]
    Verify(GenArgs),
    /// Random point lookups of generated records; prints lookups/s and bytes read per lookup.
    #[command(long_about = load::READ_HELP)]
    Read(ReadArgs),
    /// Benchmark woods' index kinds (and peer engines) under the same workloads; without
    /// arguments, a one-minute smoke run.
    #[command(long_about = woods_bench::cli::BENCH_HELP)]
    Bench(Box<woods_bench::cli::BenchArgs>),
    /// Crash test: rounds of writer and reader threads killed at random and restarted, the
    /// database checked against an expected state after every kill.
    #[command(long_about = stress::STRESS_HELP)]
    Stress(stress::StressArgs),
    /// One round of `woods stress` (run by `woods stress` itself).
    #[command(hide = true)]
    StressChild(stress::child::ChildArgs),
}

#[derive(Args)]
pub struct ReadArgs {
    #[command(flatten)]
    pub gen: GenArgs,
    /// Number of lookups.
    #[arg(long, value_name = "M", default_value_t = 100_000)]
    pub reads: u64,
    /// Page cache size in bytes [default: the library's, 64M].
    #[arg(long, value_name = "B", value_parser = parse_size)]
    pub cache_bytes: Option<u64>,
}

/// Record shape shared by `load` and `verify`.
#[derive(Args, Clone)]
pub struct GenArgs {
    /// Database directory.
    pub db: PathBuf,
    /// Number of records N (record indices 0..N).
    #[arg(long, value_name = "N")]
    pub records: u64,
    /// Key size in bytes (at least 8).
    #[arg(long, value_name = "K", default_value_t = 16)]
    pub key_size: usize,
    /// Value size in bytes.
    #[arg(long, value_name = "V", default_value_t = 100)]
    pub value_size: usize,
    /// Seed of the generated keys and values.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
}

#[derive(Args)]
pub struct LoadArgs {
    #[command(flatten)]
    pub gen: GenArgs,
    /// Index kind: btree, btree-buffered[:POLICY], lsm, lsm-dynamic, nbtree, stbe, lsa, iam, fdtree, fdtree-d, pbt or boa (must match the stored kind for an existing database).
    #[arg(long, value_name = "KIND")]
    pub index: String,
    /// Write every record with Durability::Sync and acknowledge every record.
    #[arg(long)]
    pub sync: bool,
    /// Page cache size in bytes [default: the library's, 64M].
    #[arg(long, value_name = "B", value_parser = parse_size)]
    pub cache_bytes: Option<u64>,
    /// Memtable size in bytes [default: the library's, 16M].
    #[arg(long, value_name = "B", value_parser = parse_size)]
    pub memtable_bytes: Option<u64>,
}

/// A byte count with an optional K/M/G suffix (powers of 1024).
fn parse_size(s: &str) -> Result<u64, String> {
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

/// What makes a command fail (exit status 2).
pub enum CliError {
    /// The library's error, with what the tool was doing.
    Db(String, woods::Error),
    /// A usage or I/O problem, in words.
    Msg(String),
    /// Standard output was closed by its reader (`woods scan DB | head`): stop quietly.
    BrokenPipe,
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Db(ctx, e) if ctx.is_empty() => write!(f, "{e}"),
            CliError::Db(ctx, e) => write!(f, "{ctx}: {e}"),
            CliError::Msg(m) => f.write_str(m),
            CliError::BrokenPipe => f.write_str("standard output was closed"),
        }
    }
}

impl From<woods::Error> for CliError {
    fn from(e: woods::Error) -> Self {
        CliError::Db(String::new(), e)
    }
}

pub type CliResult<T> = Result<T, CliError>;

/// Adds what the tool was doing to a library error.
pub trait Context<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> CliResult<T>;
}

impl<T> Context<T> for woods::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> CliResult<T> {
        self.map_err(|e| CliError::Db(what(), e))
    }
}

/// Maps a failed write to stdout to an error.
pub fn out_err(e: io::Error) -> CliError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        return CliError::BrokenPipe;
    }
    CliError::Msg(format!("writing to standard output: {e}"))
}

fn parse_input(what: &str, s: &str) -> CliResult<Vec<u8>> {
    encoding::parse_arg(s).map_err(|e| CliError::Msg(format!("bad {what}: {e}")))
}

/// Base options for every command.
pub fn base_options(no_direct_io: bool) -> Options {
    Options {
        direct_io: !no_direct_io,
        ..Options::default()
    }
}

/// Opens a database that must already exist.
pub fn open_existing(path: &Path, opts: Options) -> CliResult<Db> {
    if !path.join(woods::manifest::CURRENT_FILE).exists() {
        let why = if !path.exists() {
            "the directory does not exist"
        } else if !path.is_dir() {
            "it is not a directory"
        } else if holds_database_files(path) {
            // A damaged database: the library's error says what is missing and what to do.
            return Db::open(path, opts).ctx(|| format!("opening {}", path.display()));
        } else {
            "the directory holds no database"
        };
        return Err(CliError::Msg(format!(
            "no woods database at {}: {why}",
            path.display()
        )));
    }
    open_db(path, opts)
}

/// Whether `dir` holds woods' files (data file, manifest logs, log files): a database, or the
/// remains of one.
fn holds_database_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name == woods::db::DATA_FILE
                || name.starts_with("MANIFEST-")
                || name.starts_with("wal-")
        })
    })
}

/// Opens a database, creating it if needed.
pub fn open_or_create(path: &Path, opts: Options) -> CliResult<Db> {
    if path.exists() && !path.is_dir() {
        return Err(CliError::Msg(format!(
            "{} exists and is not a directory",
            path.display()
        )));
    }
    open_db(path, opts)
}

/// Opens the database at `path` and, when the file system refused the direct I/O asked for,
/// says so once on stderr: figures read from `stats` or `load` then include the OS page cache.
fn open_db(path: &Path, opts: Options) -> CliResult<Db> {
    let db = Db::open(path, opts).ctx(|| format!("opening {}", path.display()))?;
    if let Some(w) = direct_io_warning(&db, path) {
        eprintln!("{w}");
    }
    Ok(db)
}

/// The warning for a database whose direct I/O fell back to buffered I/O, if it did.
fn direct_io_warning(db: &Db, path: &Path) -> Option<String> {
    db.direct_io_fallback().then(|| {
        format!(
            "woods: warning: the file system of {} refuses direct I/O: the data file is read \
             and written through the OS page cache (--no-direct-io asks for that)",
            path.display()
        )
    })
}

fn close(db: Db) -> CliResult<()> {
    db.close().ctx(|| "closing the database".into())
}

fn run(cli: Cli) -> CliResult<u8> {
    let opts = base_options(cli.no_direct_io);
    match cli.cmd {
        Cmd::Put {
            db,
            key,
            value,
            index,
        } => {
            let k = parse_input("KEY", &key)?;
            let v = parse_input("VALUE", &value)?;
            let index = index.map(|n| IndexKind::from_name(&n)).transpose()?;
            // The library creates nothing without a kind; the tool's default for a new
            // database is lsm.
            let index = match index {
                None if !db.join(woods::manifest::CURRENT_FILE).exists() => {
                    Some(IndexKind::from_name("lsm")?)
                }
                index => index,
            };
            let db = open_or_create(&db, Options { index, ..opts })?;
            db.put(&k, &v).ctx(|| "put".into())?;
            close(db)?;
            Ok(0)
        }
        Cmd::Get { db, key } => {
            let k = parse_input("KEY", &key)?;
            let db = open_existing(&db, opts)?;
            let v = db.get(&k).ctx(|| "get".into())?;
            close(db)?;
            match v {
                Some(v) => {
                    writeln!(io::stdout(), "{}", encoding::display(&v)).map_err(out_err)?;
                    Ok(0)
                }
                None => {
                    eprintln!("woods: key {} not found", encoding::display(&k));
                    Ok(1)
                }
            }
        }
        Cmd::Del { db, key } => {
            let k = parse_input("KEY", &key)?;
            let db = open_existing(&db, opts)?;
            db.delete(&k).ctx(|| "delete".into())?;
            close(db)?;
            Ok(0)
        }
        Cmd::Scan {
            db,
            from,
            to,
            reverse,
            limit,
        } => {
            let lo = match from {
                Some(s) => Bound::Included(parse_input("--from", &s)?),
                None => Bound::Unbounded,
            };
            let hi = match to {
                Some(s) => Bound::Excluded(parse_input("--to", &s)?),
                None => Bound::Unbounded,
            };
            let db = open_existing(&db, opts)?;
            scan(&db, lo, hi, reverse, limit)?;
            close(db)?;
            Ok(0)
        }
        Cmd::Stats { db } => {
            let db = open_existing(&db, opts)?;
            let kind = db.index_kind();
            let stats = db.stats();
            close(db)?;
            report::print_stats(&kind, &stats).map_err(out_err)?;
            Ok(0)
        }
        Cmd::Check { db } => {
            let db = open_existing(&db, opts)?;
            let r = db.check().ctx(|| "check failed".into())?;
            close(db)?;
            report::print_check(&r).map_err(out_err)?;
            Ok(0)
        }
        Cmd::Repair { db, index } => {
            let index = index.map(|n| IndexKind::from_name(&n)).transpose()?;
            let report = Db::repair(&db, Options { index, ..opts })
                .ctx(|| format!("repairing {}", db.display()))?;
            let mut out = io::stdout().lock();
            for note in &report.notes {
                writeln!(out, "{note}").map_err(out_err)?;
            }
            let what = match report.installed_log {
                Some(n) => format!(
                    "repaired: CURRENT names {}",
                    woods::manifest::manifest_file_name(n)
                ),
                None if report.log_records_dropped > 0 => format!(
                    "repaired the write-ahead log: {} record(s) after its damage dropped",
                    report.log_records_dropped
                ),
                None => "nothing to repair".to_string(),
            };
            writeln!(
                out,
                "{what}; {} entries check clean; writes up to sequence number {} in the index, \
                 {} commit(s) lost",
                report.entries, report.durable_seq, report.lost_commits
            )
            .map_err(out_err)?;
            Ok(0)
        }
        Cmd::Load(a) => load::load(&a, opts),
        Cmd::Verify(a) => load::verify(&a, opts),
        Cmd::Read(a) => load::read(&a, opts),
        Cmd::Stress(a) => stress::stress(&a, cli.no_direct_io),
        Cmd::StressChild(a) => Ok(stress::child::run(&a, opts)),
        Cmd::Bench(a) => {
            let exe = std::env::current_exe().map_err(|e| {
                CliError::Msg(format!("cannot find this binary to run engines: {e}"))
            })?;
            Ok(woods_bench::cli::run(
                &a,
                !cli.no_direct_io,
                &exe,
                &["bench".into()],
            ))
        }
    }
}

fn scan(
    db: &Db,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    limit: Option<u64>,
) -> CliResult<()> {
    if let (Bound::Included(a), Bound::Excluded(b)) = (&lo, &hi) {
        if a >= b {
            return Ok(()); // an empty range
        }
    }
    let limit = limit.unwrap_or(u64::MAX);
    if limit == 0 {
        return Ok(());
    }
    let iter = if reverse {
        db.range_rev((lo, hi))
    } else {
        db.range((lo, hi))
    }
    .ctx(|| "scan".into())?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    let mut n = 0u64;
    for item in iter {
        let (k, v) = item.ctx(|| "scan".into())?;
        let r = writeln!(out, "{}\t{}", encoding::display(&k), encoding::display(&v));
        if let Err(e) = r {
            if e.kind() == io::ErrorKind::BrokenPipe {
                return Ok(()); // the reader has gone (`woods scan DB | head`)
            }
            return Err(out_err(e));
        }
        n += 1;
        if n >= limit {
            break;
        }
    }
    match out.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(out_err(e)),
        _ => Ok(()),
    }
}

fn main() -> ExitCode {
    // Before anything allocates: resident memory then stays near the budgets (woods::heap).
    woods::heap::fix_malloc_mmap_threshold();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(CliError::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("woods: error: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use woods::storage::{FaultFs, Fs};

    /// The warning appears exactly when direct I/O was asked for and refused: the in-memory
    /// file system has none (on real file systems, `tests/direct_io_warning.rs`).
    #[test]
    fn a_refused_direct_io_gets_a_warning() {
        let fs: Arc<dyn Fs> = Arc::new(FaultFs::new());
        let path = Path::new("/db");
        for (direct_io, warned) in [(true, true), (false, false)] {
            let db = Db::open(
                path,
                Options {
                    direct_io,
                    fs: Some(fs.clone()),
                    ..Options::with_index(IndexKind::from_name("lsm").expect("lsm"))
                },
            )
            .expect("open");
            let w = direct_io_warning(&db, path);
            assert_eq!(w.is_some(), warned, "direct_io {direct_io}: {w:?}");
            if let Some(w) = w {
                assert!(w.contains("/db") && w.contains("--no-direct-io"), "{w}");
            }
            db.close().expect("close");
        }
    }
}
