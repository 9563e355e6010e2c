//! The adapter trait every benchmarked engine implements, and the registry that opens one by
//! its command-line name (`woods:btree`, `woods:lsm`, and with the `peers` feature `rocksdb`,
//! `leveldb`, `lmdb`, `fjall`, `redb`).

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnCounters {
    /// Every byte the engine says it wrote (write-ahead log included), if it counts them.
    pub written: Option<u64>,
    /// Bytes written to the write-ahead log.
    pub wal_written: Option<u64>,
    /// Bytes read from the device to serve user reads, if the engine counts them.
    pub user_read: Option<u64>,
}

/// One engine behind the benchmark: opened in a directory with an [`EngineConfig`], then
/// driven by the workloads. Every adapter writes with its write-ahead log on and not synced
/// per write, compression off.
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
    /// `put`: write-ahead log on, not synced.
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
}

/// Every engine name this build knows, woods index kinds first.
pub fn known_engines() -> Vec<String> {
    let mut names: Vec<String> = ::woods::IndexKind::all()
        .iter()
        .map(|k| format!("woods:{}", k.name()))
        .collect();
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

/// Checks an engine name without opening anything.
pub fn check_name(name: &str) -> BenchResult<()> {
    if known_engines().iter().any(|n| n == name) {
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
        known_engines().join(", ")
    )))
}

/// Opens the engine called `name` in `dir` (created if needed).
pub fn open(name: &str, dir: &Path, cfg: &EngineConfig) -> BenchResult<Box<dyn Engine>> {
    check_name(name)?;
    if let Some(kind) = name.strip_prefix("woods:") {
        return Ok(Box::new(woods::WoodsEngine::open(kind, dir, cfg)?));
    }
    #[cfg(feature = "peers")]
    match name {
        "rocksdb" => return Ok(Box::new(rocksdb::RocksDbEngine::open(dir, cfg)?)),
        "leveldb" => return Ok(Box::new(leveldb::LevelDbEngine::open(dir, cfg)?)),
        "lmdb" => return Ok(Box::new(lmdb::LmdbEngine::open(dir, cfg)?)),
        "fjall" => return Ok(Box::new(fjall::FjallEngine::open(dir, cfg)?)),
        "redb" => return Ok(Box::new(redb::RedbEngine::open(dir, cfg)?)),
        _ => {}
    }
    Err(BenchError::new(format!("no adapter for engine {name:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_the_budget() {
        for b in [1u64 << 20, 16 << 20, 512 << 20, 4 << 30] {
            let s = EngineConfig {
                memory_bytes: b,
                direct_io: true,
            }
            .split();
            assert_eq!(s.cache_bytes + 2 * s.write_buffer_bytes, b, "{b}");
            assert!(s.write_buffer_bytes <= 32 << 20);
        }
    }

    #[test]
    fn names() {
        assert!(check_name("woods:btree").is_ok());
        assert!(check_name("woods:lsm").is_ok());
        assert!(check_name("woods:nope").is_err());
        assert_eq!(known_engines()[..2], woods_engines()[..]);
    }
}
