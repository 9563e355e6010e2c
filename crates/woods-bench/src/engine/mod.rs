//! The adapter trait every benchmarked engine implements, and the registry that opens one by
//! its command-line name (`woods:btree`, `woods:lsm`, and with the `peers` feature `rocksdb`,
//! `leveldb`, `lmdb`, `fjall`, `redb`). Another binary can add engines of its own (the `_with`
//! functions and [`crate::cli::main_with`]): `bench/rocksdb-current` adds current RocksDB.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

#[cfg(feature = "peers")]
pub mod fjall;
#[cfg(feature = "peers")]
pub mod leveldb;
#[cfg(feature = "peers")]
pub mod lmdb;
#[cfg(feature = "peers")]
pub mod redb;
#[cfg(feature = "peers")]
pub mod rocksdb;
pub mod woods;

/// The peer engines (cargo feature `peers`) by command-line name, in the order they are listed.
pub const PEER_ENGINES: [&str; 5] = ["rocksdb", "leveldb", "lmdb", "fjall", "redb"];

/// What failed in an engine or a workload.
#[derive(Debug)]
pub struct BenchError(pub String);

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

impl BenchError {
    pub fn new(msg: impl Into<String>) -> BenchError {
        BenchError(msg.into())
    }
}

pub type BenchResult<T> = Result<T, BenchError>;

/// How an engine is opened: the same for every engine in a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineConfig {
    /// Total memory the engine may use for caching: its block or page cache plus its write
    /// buffers (memtables). See [`EngineConfig::split`].
    pub memory_bytes: u64,
    /// Ask for direct I/O where the engine supports it.
    pub direct_io: bool,
    /// Sync every write to the device before it returns (`--sync`): each adapter's strongest
    /// per-write durability, listed in `docs/benchmarks.md`. Off: the write-ahead log is
    /// written to the OS, not synced.
    #[serde(default)]
    pub sync: bool,
    /// Write without a write-ahead log (`--no-wal`: a bulk load whose writes reach the device
    /// only with the engine's own flushes), where the engine can; an adapter that cannot refuses
    /// to open.
    #[serde(default)]
    pub no_wal: bool,
    /// woods' `Options::background_threads` (`--background-threads`; the peers keep their own
    /// background threads). `None`: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_threads: Option<usize>,
    /// woods' `Options::row_cache_bytes` (`--row-cache-bytes`). `None`: woods' default (none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_cache_bytes: Option<u64>,
    /// The `btree-buffered` kinds' `InsertBuffer::capacity_bytes` (`--insert-buffer-bytes`).
    /// `None`: woods' default (a quarter of the cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insert_buffer_bytes: Option<u64>,
    /// The index size the run plans for (its record count): what the `fdtree` kinds' cost model
    /// chooses k for (`FdTreeParams::expected_entries`). `None`: woods' default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_entries: Option<u64>,
}

/// How a memory budget is divided between write buffers and the read cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemorySplit {
    /// Bytes of one write buffer (memtable); two may exist at once (active and being flushed).
    pub write_buffer_bytes: u64,
    /// Bytes of the block or page cache: the budget less both write buffers.
    pub cache_bytes: u64,
}

impl EngineConfig {
    /// A budget of `memory_bytes`, direct I/O as asked, the write-ahead log on and not synced
    /// per write, woods' default background thread.
    pub fn new(memory_bytes: u64, direct_io: bool) -> EngineConfig {
        EngineConfig {
            memory_bytes,
            direct_io,
            sync: false,
            no_wal: false,
            background_threads: None,
            row_cache_bytes: None,
            insert_buffer_bytes: None,
            expected_entries: None,
        }
    }

    /// A quarter of the budget, at most 64 MiB, goes to the two write buffers; the rest is
    /// cache. Every engine gets the same split so that none buys reads with write memory.
    pub fn split(&self) -> MemorySplit {
        let buffers = (self.memory_bytes / 4).clamp(128 << 10, 64 << 20);
        let write_buffer_bytes = buffers / 2;
        let cache_bytes = self.memory_bytes.saturating_sub(buffers).max(64 << 10);
        MemorySplit {
            write_buffer_bytes,
            cache_bytes,
        }
    }
}

/// The engine's own account of its device writes, where it keeps one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnCounters {
    /// Every byte the engine says it wrote (write-ahead log included), if it counts them.
    pub written: Option<u64>,
    /// Bytes written to the write-ahead log.
    pub wal_written: Option<u64>,
    /// Bytes read from the device to serve user reads, if the engine counts them.
    pub user_read: Option<u64>,
    /// Device reads issued to serve user reads, if the engine counts them (woods: read
    /// requests of purpose `UserRead`).
    #[serde(default)]
    pub user_reads: Option<u64>,
    /// How long writes waited inside the engine for its background work, where it records
    /// that (woods: the Db's stall and pacing counters).
    #[serde(default)]
    pub write_waits: Option<WriteWaits>,
    /// Syncs (fsync or fdatasync) the engine issued, if it counts them (woods: every sync of
    /// its log, manifest, data file and directory).
    #[serde(default)]
    pub syncs: Option<u64>,
    /// The index's own counters at the end of the phase, where the engine has them (woods:
    /// `Stats::index.counters`, e.g. compactions, pacing-relevant maxima such as `max_work_us`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub index: std::collections::BTreeMap<String, u64>,
}

/// What an engine records of the time writes spent waiting for index work or memtable room:
/// woods' stalls (a full memtable, LevelDB's L0 rules for `lsm`) and debt pacing (index work a
/// writer does inline), from `Db::stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteWaits {
    pub stalls: u64,
    pub stall_total_ns: u64,
    pub stall_max_ns: u64,
    pub paced: u64,
    pub pacing_total_ns: u64,
    pub pacing_max_ns: u64,
}

impl WriteWaits {
    /// The longest single wait of either kind.
    pub fn max_ns(&self) -> u64 {
        self.stall_max_ns.max(self.pacing_max_ns)
    }
}

/// One engine behind the benchmark: opened in a directory with an [`EngineConfig`], then
/// driven by the workloads. Every adapter writes with its write-ahead log on and not synced
/// per write (synced per write with [`EngineConfig::sync`]), compression off.
///
/// `put`, `get`, `delete` and `scan` take `&self` and the engine is `Send + Sync`: with
/// `--threads N`, N client threads call them on one shared engine at once, as N clients of one
/// database would. An adapter whose handle is not thread-safe must serialise internally (and
/// say so in `docs/benchmarks.md`).
pub trait Engine: Send + Sync {
    /// The command-line name (`woods:lsm`, `rocksdb`).
    fn name(&self) -> String;
    /// Whether the engine's data files are actually read and written with direct I/O.
    fn direct_io(&self) -> bool;
    /// Writes `value` under `key`, replacing any value it had.
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()>;
    /// The value under `key`, or `None` when it has none (never written, or deleted).
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>>;
    /// Removes `key` (nothing happens when it is absent), with the same write options as
    /// `put`: write-ahead log on, synced only with [`EngineConfig::sync`].
    fn delete(&self, key: &[u8]) -> BenchResult<()>;
    /// One seek and up to `limit - 1` nexts of an iterator: calls `visit(key, value)` for the
    /// entries whose key is at least `start` (from the first key when `start` is empty), in
    /// ascending key order, at most `limit` of them, stopping early at the end of the data.
    /// Returns how many it visited. The slices are only valid during the call; an engine that
    /// can lend them without copying should. No point-in-time view across the scan is needed.
    fn scan(
        &self,
        start: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> BenchResult<usize>;
    /// Moves buffered writes into the engine's files and finishes all background work
    /// (flushes, compactions), returning when the engine is idle.
    fn drain(&mut self) -> BenchResult<()>;
    /// The engine's own counters since it was opened.
    fn counters(&self) -> OwnCounters;
    /// Closes the engine, waiting for whatever it does on close.
    fn close(self: Box<Self>) -> BenchResult<()>;
    /// The engine's library and version, where the adapter can tell (`RocksDB 7.8.3`): the
    /// report names it.
    fn version(&self) -> Option<String> {
        None
    }
}

/// Opens an engine that a binary built on this crate adds to the ones it knows: in `dir`
/// (which [`open_with`] has created) with `cfg`.
pub type EngineOpener = fn(&Path, &EngineConfig) -> BenchResult<Box<dyn Engine>>;

/// Engines a binary adds, by command-line name (see [`crate::cli::main_with`]).
pub type ExtraEngines<'a> = &'a [(&'a str, EngineOpener)];

/// The suffix of a woods engine's name that turns `Options::split_entries` off
/// (`woods:lsm+whole`): every run entry whole in one data page, as before split entries.
pub const WHOLE_SUFFIX: &str = "+whole";

/// woods engines with other parameters than their kind's defaults, known by name but not run
/// by default.
pub const WOODS_VARIANTS: [&str; 24] = [
    "woods:pbt-nomerge",
    "woods:btree-buffered:fullest-leaf",
    "woods:btree-buffered:random-ball",
    "woods:btree-buffered:golden-gate",
    "woods:nbtree-s1",
    "woods:nbtree-s2",
    "woods:nbtree-s4",
    "woods:nbtree-s8",
    "woods:iam-m2-k1",
    "woods:iam-m2-k2",
    "woods:iam-m2-k3",
    "woods:iam-m3-k1",
    "woods:iam-m3-k2",
    "woods:iam-m3-k3",
    "woods:fdtree-k10",
    "woods:fdtree-d-k10",
    "woods:stbe-b4",
    "woods:stbe-b6",
    "woods:stbe-b8",
    "woods:stbe-b12",
    "woods:stbe-f4",
    "woods:stbe-f8",
    "woods:stbe-s0",
    "woods:stbe-s64",
];

/// Every engine name this build knows, woods index kinds first.
pub fn known_engines() -> Vec<String> {
    let mut names: Vec<String> = ::woods::IndexKind::all()
        .iter()
        .map(|k| format!("woods:{}", k.name()))
        .collect();
    names.extend(WOODS_VARIANTS.iter().map(|n| n.to_string()));
    if cfg!(feature = "peers") {
        names.extend(PEER_ENGINES.iter().map(|n| n.to_string()));
    }
    names
}

/// The woods engines (`woods:KIND` for every index kind).
pub fn woods_engines() -> Vec<String> {
    ::woods::IndexKind::all()
        .iter()
        .map(|k| format!("woods:{}", k.name()))
        .collect()
}

/// Every engine name this build knows, then the `extra` ones.
pub fn known_engines_with(extra: ExtraEngines) -> Vec<String> {
    let mut names = known_engines();
    names.extend(extra.iter().map(|(n, _)| n.to_string()));
    names
}

/// Checks an engine name without opening anything.
pub fn check_name(name: &str) -> BenchResult<()> {
    check_name_with(name, &[])
}

/// Like [`check_name`], knowing the `extra` engines too.
pub fn check_name_with(name: &str, extra: ExtraEngines) -> BenchResult<()> {
    // `woods:KIND+whole`: a woods engine with `Options::split_entries` off.
    let base = name
        .strip_suffix(WHOLE_SUFFIX)
        .filter(|b| b.starts_with("woods:"))
        .unwrap_or(name);
    if known_engines_with(extra).iter().any(|n| n == base) {
        return Ok(());
    }
    let hint = if PEER_ENGINES.contains(&name) {
        " (this build has no peer engines: build with `--features peers` after \
         scripts/install-peers.sh)"
    } else {
        ""
    };
    Err(BenchError::new(format!(
        "unknown engine {name:?}{hint}; known: {}",
        known_engines_with(extra).join(", ")
    )))
}

/// Opens the engine called `name` in `dir` (created if needed).
pub fn open(name: &str, dir: &Path, cfg: &EngineConfig) -> BenchResult<Box<dyn Engine>> {
    open_with(name, dir, cfg, &[])
}

/// Like [`open`], knowing the `extra` engines too.
pub fn open_with(
    name: &str,
    dir: &Path,
    cfg: &EngineConfig,
    extra: ExtraEngines,
) -> BenchResult<Box<dyn Engine>> {
    if let Some((_, opener)) = extra.iter().find(|(n, _)| *n == name) {
        std::fs::create_dir_all(dir)
            .map_err(|e| BenchError::new(format!("creating {}: {e}", dir.display())))?;
        return opener(dir, cfg);
    }
    check_name(name)?;
    if let Some(kind) = name.strip_prefix("woods:") {
        return Ok(Box::new(woods::WoodsEngine::open(kind, dir, cfg)?));
    }
    #[cfg(feature = "peers")]
    match name {
        "rocksdb" => return Ok(Box::new(rocksdb::RocksDbEngine::open("rocksdb", dir, cfg)?)),
        "leveldb" => return Ok(Box::new(leveldb::LevelDbEngine::open(dir, cfg)?)),
        "lmdb" => return Ok(Box::new(lmdb::LmdbEngine::open(dir, cfg)?)),
        "fjall" => return Ok(Box::new(fjall::FjallEngine::open(dir, cfg)?)),
        "redb" => return Ok(Box::new(redb::RedbEngine::open(dir, cfg)?)),
        _ => {}
    }
    Err(BenchError::new(format!("no adapter for engine {name:?}")))
}

/// The version RocksDB wrote at the top of its info log (`dir/LOG`, `RocksDB version: 7.8.3`)
/// when it opened the database in `dir`: the version of the library actually linked.
pub fn rocksdb_log_version(dir: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(dir.join("LOG"))
        .ok()?
        .take(64 << 10)
        .read_to_end(&mut head)
        .ok()?;
    let head = String::from_utf8_lossy(&head);
    head.lines().find_map(|l| {
        let (_, v) = l.split_once("RocksDB version: ")?;
        Some(format!("RocksDB {}", v.trim()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_the_budget() {
        for b in [1u64 << 20, 16 << 20, 512 << 20, 4 << 30] {
            let s = EngineConfig::new(b, true).split();
            assert_eq!(s.cache_bytes + 2 * s.write_buffer_bytes, b, "{b}");
            assert!(s.write_buffer_bytes <= 32 << 20);
        }
    }

    #[test]
    fn names() {
        assert!(check_name("woods:btree").is_ok());
        assert!(check_name("woods:lsm").is_ok());
        assert!(check_name("woods:nope").is_err());
        let woods = woods_engines();
        assert_eq!(known_engines()[..woods.len()], woods[..]);
        assert!(check_name("woods:nbtree").is_ok());
        // `+whole` after any woods engine, variants too, and nowhere else.
        assert!(check_name("woods:lsm+whole").is_ok());
        assert!(check_name("woods:iam-m2-k1+whole").is_ok());
        assert!(check_name("woods:nope+whole").is_err());
        assert!(check_name("woods:lsm+whole+whole").is_err());
        assert!(check_name("rocksdb+whole").is_err());
    }

    /// `woods:KIND+whole` opens with split entries off: the same records take about a third
    /// more data pages than with them (24-byte keys and 1 KiB values: three whole entries fill
    /// 77% of a page).
    #[test]
    fn whole_entries_take_more_pages() {
        let pages = |name: &str| {
            let tmp = tempfile::tempdir().unwrap();
            let mut cfg = EngineConfig::new(8 << 20, false);
            cfg.background_threads = Some(0);
            let mut e = open(name, tmp.path(), &cfg).unwrap();
            assert_eq!(e.name(), name);
            for i in 0..2000u32 {
                let key = format!("user{:020}", u64::from(i) * 7919);
                e.put(key.as_bytes(), &[i as u8; 1024]).unwrap();
            }
            e.drain().unwrap();
            e.counters().written.unwrap() - e.counters().wal_written.unwrap()
        };
        let (split, whole) = (pages("woods:lsm"), pages("woods:lsm+whole"));
        assert!(
            whole as f64 > 1.2 * split as f64,
            "data bytes written: {whole} whole, {split} split"
        );
    }

    fn open_lsm(dir: &Path, cfg: &EngineConfig) -> BenchResult<Box<dyn Engine>> {
        open("woods:lsm", dir, cfg)
    }

    #[test]
    fn extra_engines() {
        let extra: ExtraEngines = &[("other:lsm", open_lsm)];
        assert!(check_name("other:lsm").is_err());
        assert!(check_name_with("other:lsm", extra).is_ok());
        assert!(check_name_with("woods:btree", extra).is_ok());
        let e = check_name_with("other:nope", extra).unwrap_err().0;
        assert!(e.ends_with(", other:lsm"), "{e}");
        assert_eq!(known_engines_with(extra).last().unwrap(), "other:lsm");
        let tmp = std::env::temp_dir().join(format!("woods-bench-extra-{}", std::process::id()));
        let cfg = EngineConfig::new(1 << 20, false);
        let e = open_with("other:lsm", &tmp, &cfg, extra).unwrap();
        e.put(b"k", b"v").unwrap();
        assert_eq!(e.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        e.close().unwrap();
        assert!(open_with("other:lsm", &tmp, &cfg, &[]).is_err());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn version_from_rocksdb_log() {
        let tmp = std::env::temp_dir().join(format!("woods-bench-log-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        assert_eq!(rocksdb_log_version(&tmp), None);
        std::fs::write(
            tmp.join("LOG"),
            "2026/11/22-10:00:00.000000 7f0 RocksDB version: 11.8.1\n\
             2026/11/22-10:00:00.000001 7f0 Compile date 2026-08-04\n",
        )
        .unwrap();
        assert_eq!(rocksdb_log_version(&tmp).as_deref(), Some("RocksDB 11.8.1"));
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
