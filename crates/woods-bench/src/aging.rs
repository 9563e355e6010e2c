//! `woods bench aging`: seed 004 chapter 4's aging test adapted to a key-value store
//! (`specs/hashing-aging-insert-buffers.md` §2.3, §2.4, §2.5 item 5 and §4.2).
//!
//! A mail-server-like data set (the chapter's Dovecot workload): keys are (mailbox, message
//! id) as 4 + 8 big-endian bytes, so that one mailbox is one contiguous key range. It is loaded,
//! then churned in cycles at a steady live size: each cycle is `--ops` operations in bursts on
//! one mailbox at a time (a clustered key range, as a git pull touches one directory):
//! inserts append new messages at the mailbox's end, deletes remove random messages of it, and
//! updates rewrite random messages with a value of a new size. Inserts and deletes are equally
//! likely, so the live set stays about the same size.
//!
//! After the load and after every cycle the store is drained (every memtable moved into the
//! index, all background work done) and two scans are timed, each on a cold cache (the store
//! reopened before it) and the fastest of `--repeat` runs: the whole store in key order, and the fixed range of the first `--range-mailboxes`
//! mailboxes. Then the same live contents are copied, in key order, into a new store of the
//! same kind (the "unaged" copy of the chapter, freshly bulk-loaded), which is drained,
//! reopened and scanned the same way, and removed.
//!
//! - *aging factor*: aged scan seconds ÷ fresh scan seconds, per scan;
//! - *layout score*: the share of the scan's data-file read requests that began at the page
//!   right after the previous request (`IoSnapshot::data_reads_contiguous` ÷ `data_reads`), the
//!   chapter's dynamic layout score; 1 is a perfectly sequential scan.
//!
//! Every engine runs in this process, one after the other (not in children as the engines'
//! comparison does): the figures are woods' own, and woods bounds its memory itself.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use woods::storage::IoSnapshot;
use woods::{Db, Options};

use crate::dist::Rng;

/// The ordered index kinds an aging run measures by default.
pub const ORDERED_KINDS: [&str; 9] = [
    "btree",
    "lsm",
    "lsm-dynamic",
    "nbtree",
    "stbe",
    "lsa",
    "iam",
    "fdtree",
    "pbt",
];

/// Arguments of `woods bench aging`.
#[derive(Args, Clone, Debug)]
pub struct AgingArgs {
    /// Index kinds, comma-separated, or the bench's woods variants (`stbe-b8`, `nbtree-s1`)
    /// [default: every ordered kind].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub kinds: Vec<String>,
    /// Mailboxes (clustered key ranges).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub mailboxes: u32,
    /// Messages each mailbox starts with.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub messages: u64,
    /// Churn cycles after the load.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub cycles: u32,
    /// Operations per cycle [default: half the initial messages].
    #[arg(long, value_name = "N")]
    pub ops: Option<u64>,
    /// Smallest value, bytes.
    #[arg(long, value_name = "B", default_value_t = 100)]
    pub value_min: usize,
    /// Largest value, bytes.
    #[arg(long, value_name = "B", default_value_t = 700)]
    pub value_max: usize,
    /// Mailboxes 0..R are the fixed range scan.
    #[arg(long, value_name = "R", default_value_t = 4)]
    pub range_mailboxes: u32,
    /// Cache of each store (K, M, G suffixes).
    #[arg(long, value_name = "B", value_parser = crate::cli::parse_size, default_value = "2M")]
    pub cache_bytes: u64,
    /// Memtable of each store (K, M, G suffixes).
    #[arg(long, value_name = "B", value_parser = crate::cli::parse_size, default_value = "1M")]
    pub memtable_bytes: u64,
    /// Runs of each scan; the fastest counts (the machine's other load only slows a run).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeat: u32,
    /// Seed of the churn and the values.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Directory for the stores [default: a new directory under the system's temporary
    /// directory]; it must be on the device measured.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Also write the markdown tables to FILE, and beside it four charts over the cycles
    /// (FILE's name without extension, then -full.svg, -range.svg, -layout.svg, -reads.svg).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// One timed scan.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Scan {
    /// Seconds from the iterator's creation to its end.
    pub secs: f64,
    /// Entries returned.
    pub entries: u64,
    /// Data-file read requests and those contiguous with the one before.
    pub reads: u64,
    pub contiguous: u64,
    /// Data-file bytes read.
    pub bytes: u64,
}

impl Scan {
    /// The dynamic layout score: contiguous requests ÷ requests.
    pub fn layout(&self) -> f64 {
        if self.reads == 0 {
            1.0
        } else {
            self.contiguous as f64 / self.reads as f64
        }
    }
}

/// The aged and the fresh store's scans at one point of the run.
#[derive(Clone, Debug, Default)]
pub struct Point {
    pub cycle: u32,
    pub live: u64,
    /// Entries the aged store's index holds (every version and tombstone; its `woods stats`),
    /// which a full scan reads past to return the `live` ones.
    pub held: u64,
    /// The aged store's shape (`woods stats`): its levels, runs or partitions.
    pub shape: Vec<String>,
    pub file_bytes: u64,
    pub aged_full: Scan,
    pub aged_range: Scan,
    pub fresh_full: Scan,
    pub fresh_range: Scan,
}

impl Point {
    /// The full scan's aging factor: aged ÷ fresh seconds.
    pub fn full_factor(&self) -> f64 {
        self.aged_full.secs / self.fresh_full.secs
    }

    /// The range scan's aging factor.
    pub fn range_factor(&self) -> f64 {
        self.aged_range.secs / self.fresh_range.secs
    }
}

fn err(what: &str, e: woods::Error) -> String {
    format!("{what}: {e}")
}

/// The model of the live set: per mailbox, its live message ids and its next id.
struct Model {
    live: Vec<Vec<u64>>,
    next: Vec<u64>,
}

fn key(mailbox: u32, id: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&mailbox.to_be_bytes());
    k[4..].copy_from_slice(&id.to_be_bytes());
    k
}

fn value(rng: &mut Rng, args: &AgingArgs, buf: &mut Vec<u8>) {
    let span = (args.value_max.max(args.value_min) - args.value_min + 1) as u64;
    let len = args.value_min + rng.below(span) as usize;
    buf.clear();
    let fill = rng.next_u64().to_le_bytes();
    buf.extend((0..len).map(|i| fill[i % 8] ^ i as u8));
}

fn options(kind: &str, args: &AgingArgs) -> Result<Options, String> {
    Ok(Options {
        index: Some(crate::engine::woods::named_kind(kind).map_err(|e| err("index kind", e))?),
        cache_bytes: args.cache_bytes,
        memtable_bytes: args.memtable_bytes,
        direct_io: true,
        background_threads: 1,
        ..Options::default()
    })
}

/// Drains `db`, closes it and opens it again (a cold cache).
fn cold(db: Db, dir: &Path, opts: &Options) -> Result<Db, String> {
    db.drain().map_err(|e| err("drain", e))?;
    db.close().map_err(|e| err("close", e))?;
    Db::open(dir, opts.clone()).map_err(|e| err("reopen", e))
}

/// Times a scan of `range` (None: everything), checking ascending keys and the count.
fn scan(db: &Db, range: Option<(Vec<u8>, Vec<u8>)>, expect: u64) -> Result<Scan, String> {
    let before: IoSnapshot = db.stats().io;
    let t = Instant::now();
    let iter = match range {
        Some((lo, hi)) => db.range(lo..hi),
        None => db.iter(),
    }
    .map_err(|e| err("scan", e))?;
    let mut entries = 0u64;
    let mut last: Option<Vec<u8>> = None;
    for item in iter {
        let (k, _v) = item.map_err(|e| err("scan next", e))?;
        if last.as_ref().is_some_and(|l| *l >= k) {
            return Err("scan returned keys out of order".into());
        }
        last = Some(k);
        entries += 1;
    }
    let secs = t.elapsed().as_secs_f64();
    let after = db.stats().io;
    if entries != expect {
        return Err(format!(
            "scan returned {entries} entries, expected {expect}"
        ));
    }
    Ok(Scan {
        secs,
        entries,
        reads: after.data_reads - before.data_reads,
        contiguous: after.data_reads_contiguous - before.data_reads_contiguous,
        bytes: after.total_read() - before.total_read(),
    })
}

/// The two scans of one store, the whole store and the fixed range, each the fastest of
/// `--repeat` runs, each run on a cold cache (the store reopened before it). Returns the store
/// reopened.
fn scans(
    mut db: Db,
    dir: &Path,
    opts: &Options,
    model: &Model,
    args: &AgingArgs,
) -> Result<(Db, Scan, Scan), String> {
    let total: u64 = model.live.iter().map(|l| l.len() as u64).sum();
    let r = args.range_mailboxes.min(args.mailboxes);
    let in_range: u64 = model.live[..r as usize]
        .iter()
        .map(|l| l.len() as u64)
        .sum();
    let bounds = (key(0, 0).to_vec(), key(r, 0).to_vec());
    let (mut full, mut range): (Option<Scan>, Option<Scan>) = (None, None);
    let faster = |best: Option<Scan>, s: Scan| Some(best.filter(|b| b.secs <= s.secs).unwrap_or(s));
    for _ in 0..args.repeat.max(1) {
        db = cold(db, dir, opts)?;
        full = faster(full, scan(&db, None, total)?);
        db = cold(db, dir, opts)?;
        range = faster(range, scan(&db, Some(bounds.clone()), in_range)?);
    }
    Ok((db, full.unwrap_or_default(), range.unwrap_or_default()))
}

/// Copies `aged`'s contents in key order into a new store at `dir` and scans it cold.
fn fresh_copy(
    aged: &Db,
    dir: &Path,
    opts: &Options,
    model: &Model,
    args: &AgingArgs,
) -> Result<(Scan, Scan), String> {
    let _ = fs::remove_dir_all(dir);
    let db = Db::open(dir, opts.clone()).map_err(|e| err("open fresh", e))?;
    for item in aged.iter().map_err(|e| err("copy", e))? {
        let (k, v) = item.map_err(|e| err("copy next", e))?;
        db.put(&k, &v).map_err(|e| err("fresh put", e))?;
    }
    let (db, full, range) = scans(db, dir, opts, model, args)?;
    db.close().map_err(|e| err("close fresh", e))?;
    fs::remove_dir_all(dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
    Ok((full, range))
}

/// One cycle of churn: `ops` operations in bursts of 1 to 32 on one mailbox.
fn churn(
    db: &Db,
    model: &mut Model,
    rng: &mut Rng,
    ops: u64,
    args: &AgingArgs,
) -> Result<(), String> {
    let mut done = 0;
    let mut buf = Vec::new();
    while done < ops {
        let mb = rng.below(u64::from(args.mailboxes)) as usize;
        let burst = (1 + rng.below(32)).min(ops - done);
        for _ in 0..burst {
            let r = rng.below(100);
            let live = &mut model.live[mb];
            if r < 35 || live.is_empty() {
                let id = model.next[mb];
                model.next[mb] += 1;
                value(rng, args, &mut buf);
                db.put(key(mb as u32, id), &buf)
                    .map_err(|e| err("put", e))?;
                live.push(id);
            } else if r < 70 {
                let at = rng.below(live.len() as u64) as usize;
                let id = live.swap_remove(at);
                db.delete(key(mb as u32, id))
                    .map_err(|e| err("delete", e))?;
            } else {
                let at = rng.below(live.len() as u64) as usize;
                value(rng, args, &mut buf);
                db.put(key(mb as u32, live[at]), &buf)
                    .map_err(|e| err("update", e))?;
            }
        }
        done += burst;
    }
    Ok(())
}

/// Runs the aging workload on one kind; a point per measurement.
pub fn run_kind(kind: &str, base: &Path, args: &AgingArgs) -> Result<Vec<Point>, String> {
    let opts = options(kind, args)?;
    let aged_dir = base.join(format!("{kind}-aged"));
    let fresh_dir = base.join(format!("{kind}-fresh"));
    let _ = fs::remove_dir_all(&aged_dir);
    let mut rng = Rng::new(args.seed, 0xA6E);
    let mut model = Model {
        live: vec![Vec::new(); args.mailboxes as usize],
        next: vec![0; args.mailboxes as usize],
    };
    let mut db = Db::open(&aged_dir, opts.clone()).map_err(|e| err("open", e))?;
    if !db.stats().direct_io {
        eprintln!(
            "woods bench aging: WARNING: {kind}: no direct I/O; scans read the OS page cache"
        );
    }
    // The load: messages arrive round robin over the mailboxes.
    let mut buf = Vec::new();
    for id in 0..args.messages {
        for mb in 0..args.mailboxes {
            value(&mut rng, args, &mut buf);
            db.put(key(mb, id), &buf).map_err(|e| err("load", e))?;
            model.live[mb as usize].push(id);
            model.next[mb as usize] = id + 1;
        }
    }
    let ops = args
        .ops
        .unwrap_or(args.messages * u64::from(args.mailboxes) / 2);
    let mut points = Vec::new();
    for cycle in 0..=args.cycles {
        if cycle > 0 {
            churn(&db, &mut model, &mut rng, ops, args)?;
        }
        let (reopened, aged_full, aged_range) = scans(db, &aged_dir, &opts, &model, args)?;
        db = reopened;
        let st = db.stats();
        let (fresh_full, fresh_range) = fresh_copy(&db, &fresh_dir, &opts, &model, args)?;
        let p = Point {
            cycle,
            live: aged_full.entries,
            held: st.index.entries,
            shape: st.index.shape.clone(),
            file_bytes: st.file_bytes,
            aged_full,
            aged_range,
            fresh_full,
            fresh_range,
        };
        eprintln!(
            "woods bench aging: {kind} cycle {cycle}: full {:.3}s vs fresh {:.3}s ({:.2}x, layout {:.2} vs {:.2}), range {:.3}s vs {:.3}s ({:.2}x)",
            p.aged_full.secs,
            p.fresh_full.secs,
            p.full_factor(),
            p.aged_full.layout(),
            p.fresh_full.layout(),
            p.aged_range.secs,
            p.fresh_range.secs,
            p.range_factor(),
        );
        points.push(p);
    }
    db.close().map_err(|e| err("close", e))?;
    fs::remove_dir_all(&aged_dir).map_err(|e| format!("removing {}: {e}", aged_dir.display()))?;
    Ok(points)
}

/// Runs `woods bench aging`: the tables on stdout (and `--out`); the exit status.
pub fn main(args: &AgingArgs) -> u8 {
    let kinds: Vec<String> = if args.kinds.is_empty() {
        ORDERED_KINDS.iter().map(|k| k.to_string()).collect()
    } else {
        args.kinds.clone()
    };
    let (base, made) = match &args.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("woods-aging-{}", std::process::id())),
            true,
        ),
    };
    if let Err(e) = fs::create_dir_all(&base) {
        eprintln!("woods bench aging: error: creating {}: {e}", base.display());
        return 2;
    }
    // The report's folder, before minutes of runs rather than after them.
    if let Some(parent) = args.out.as_ref().and_then(|o| o.parent()) {
        if let Err(e) = fs::create_dir_all(parent) {
            eprintln!(
                "woods bench aging: error: creating {}: {e}",
                parent.display()
            );
            return 2;
        }
    }
    let mut md = String::new();
    md.push_str(&format!(
        "# woods bench aging\n\n{} mailboxes x {} messages, values {}..={} bytes, {} cycles of {} operations, cache {}, memtable {}, range scan = mailboxes 0..{}, seed {}, direct I/O\n\n",
        args.mailboxes,
        args.messages,
        args.value_min,
        args.value_max,
        args.cycles,
        args.ops.unwrap_or(args.messages * u64::from(args.mailboxes) / 2),
        crate::report::bytes(args.cache_bytes as f64),
        crate::report::bytes(args.memtable_bytes as f64),
        args.range_mailboxes,
        args.seed
    ));
    let mut summary = String::from(
        "## Last cycle\n\n| kind | full aging factor | range aging factor | layout aged | layout fresh | pages/request aged | pages/request fresh | file MiB |\n|---|---|---|---|---|---|---|---|\n",
    );
    let mut failed = false;
    let mut runs: Vec<(usize, &str, Vec<Point>)> = Vec::new();
    for (index, kind) in kinds.iter().enumerate() {
        match run_kind(kind, &base, args) {
            Ok(points) => {
                md.push_str(&table(kind, &points));
                if let Some(p) = points.last() {
                    summary.push_str(&format!(
                        "| {kind} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} |\n",
                        p.full_factor(),
                        p.range_factor(),
                        p.aged_full.layout(),
                        p.fresh_full.layout(),
                        pages_per_request(&p.aged_full),
                        pages_per_request(&p.fresh_full),
                        p.file_bytes as f64 / (1 << 20) as f64,
                    ));
                }
                runs.push((index, kind, points));
            }
            Err(e) => {
                eprintln!("woods bench aging: {kind} failed: {e}");
                md.push_str(&format!("## {kind}\n\nFAILED: {e}\n\n"));
                failed = true;
            }
        }
    }
    md.push_str(&summary);
    print!("{md}");
    let _ = std::io::stdout().flush();
    if let Some(out) = &args.out {
        if let Err(e) = fs::write(out, &md) {
            eprintln!("woods bench aging: error: writing {}: {e}", out.display());
            return 2;
        }
        if let Err(e) = charts(out, &runs) {
            eprintln!("woods bench aging: error: {e}");
            return 2;
        }
    }
    if made {
        let _ = fs::remove_dir_all(&base);
    }
    u8::from(failed)
}

/// The charts of a run beside its tables `out` (`NAME.md` gives `NAME-full.svg` and so on):
/// per kind over the cycles, the full scan's and the range scan's aging factors (with the
/// issue's target, 1.3), the aged store's layout score, and the pages its full scan reads ÷ the
/// fresh copy's.
fn charts(out: &Path, runs: &[(usize, &str, Vec<Point>)]) -> Result<(), String> {
    type Figure = fn(&Point) -> f64;
    let figures: [(&str, &str, &str, Figure, Option<f64>); 4] = [
        (
            "full",
            "Full scan: aged ÷ fresh seconds",
            "aging factor",
            Point::full_factor,
            Some(1.3),
        ),
        (
            "range",
            "Range scan: aged ÷ fresh seconds",
            "aging factor",
            Point::range_factor,
            Some(1.3),
        ),
        (
            "layout",
            "Layout score of the aged store's full scan",
            "contiguous ÷ read requests",
            |p| p.aged_full.layout(),
            None,
        ),
        (
            "reads",
            "Full scan: aged ÷ fresh read requests",
            "read requests, aged ÷ fresh",
            |p| p.aged_full.reads as f64 / p.fresh_full.reads.max(1) as f64,
            Some(1.3),
        ),
    ];
    let stem = out
        .file_stem()
        .map_or("aging".into(), |s| s.to_string_lossy().into_owned());
    for (name, title, y_desc, figure, mark) in figures {
        let lines: Vec<crate::charts::Line> = runs
            .iter()
            .map(|(index, kind, points)| crate::charts::Line {
                name: kind.to_string(),
                index: *index,
                points: points
                    .iter()
                    .map(|p| (f64::from(p.cycle), figure(p)))
                    .collect(),
            })
            .collect();
        let path = out.with_file_name(format!("{stem}-{name}.svg"));
        crate::charts::lines(&path, title, ("churn cycle", y_desc), &lines, mark)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

fn pages_per_request(s: &Scan) -> f64 {
    s.bytes as f64 / 4096.0 / s.reads.max(1) as f64
}

fn table(kind: &str, points: &[Point]) -> String {
    let mut t = format!(
        "## {kind}\n\n| cycle | live entries | held ÷ live | full s aged | full s fresh | full factor | range s aged | range s fresh | range factor | layout aged | layout fresh | reads aged | reads fresh |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for p in points {
        t.push_str(&format!(
            "| {} | {} | {:.2} | {:.3} | {:.3} | {:.2} | {:.4} | {:.4} | {:.2} | {:.3} | {:.3} | {} | {} |\n",
            p.cycle,
            p.live,
            p.held as f64 / p.live.max(1) as f64,
            p.aged_full.secs,
            p.fresh_full.secs,
            p.full_factor(),
            p.aged_range.secs,
            p.fresh_range.secs,
            p.range_factor(),
            p.aged_full.layout(),
            p.fresh_full.layout(),
            p.aged_full.reads,
            p.fresh_full.reads,
        ));
    }
    t.push('\n');
    if let Some(p) = points.last() {
        t.push_str(&format!(
            "The aged store after cycle {} (`woods stats`):\n\n```\n{}\n```\n\n",
            p.cycle,
            p.shape.join("\n")
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use woods::IndexKind;

    fn small(kind: &str) -> AgingArgs {
        AgingArgs {
            kinds: vec![kind.into()],
            mailboxes: 8,
            messages: 200,
            cycles: 2,
            ops: None,
            value_min: 50,
            value_max: 300,
            range_mailboxes: 2,
            cache_bytes: 256 << 10,
            memtable_bytes: 128 << 10,
            repeat: 1,
            seed: 5,
            dir: None,
            out: None,
        }
    }

    /// The bench's woods variants name kinds here too; an unknown name is an error.
    #[test]
    fn kinds_and_variants_resolve() {
        let args = small("stbe-b4");
        match options("stbe-b4", &args).expect("stbe-b4").index {
            Some(IndexKind::Stbe(p)) => {
                assert_eq!((p.flush_branches, p.leaf_branches), (4, 4));
            }
            other => panic!("stbe-b4 gave {other:?}"),
        }
        match options("lsm-dynamic", &args).expect("lsm-dynamic").index {
            Some(IndexKind::Lsm(p)) => assert!(p.dynamic_level_bytes),
            other => panic!("lsm-dynamic gave {other:?}"),
        }
        assert!(options("no-such-kind", &args).is_err());
    }

    #[test]
    fn a_fresh_copy_scans_sequentially_and_the_counts_follow_the_model() {
        let dir = tempfile::tempdir().unwrap();
        for kind in ["btree", "lsm"] {
            let points = run_kind(kind, dir.path(), &small(kind)).unwrap();
            assert_eq!(points.len(), 3, "{kind}: the load and two cycles");
            assert_eq!(points[0].live, 8 * 200);
            for p in &points {
                assert_eq!(p.aged_full.entries, p.fresh_full.entries);
                assert!(p.aged_range.entries < p.aged_full.entries);
                assert!(p.fresh_full.reads > 0 && p.aged_full.reads > 0);
                // Loaded in key order, a store reads its pages mostly one after the other.
                assert!(p.fresh_full.layout() > 0.6, "{kind}: {p:?}");
                // An index may hold tombstones and old versions besides the live entries
                // (the B-tree too: 1,615 entries for 1,583 live after a cycle here), never
                // fewer than them.
                assert!(p.held >= p.live, "{kind}: {p:?}");
                assert!(!p.shape.is_empty(), "{kind}: {p:?}");
            }
            // The load wrote each key once.
            assert_eq!(points[0].held, points[0].live, "{kind}");
            if kind == "btree" {
                // Copy-on-write leaves rewritten by the churn go wherever the allocator has
                // room: the aged tree's scan jumps where the fresh copy's runs on.
                let last = &points[2];
                assert!(
                    last.aged_full.layout() < last.fresh_full.layout() - 0.1,
                    "{last:?}"
                );
            }
            eprintln!("{kind}: {points:?}");
        }
        // Both stores were removed.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
