//! RocksDB through the `rocksdb` crate, linked to the system's librocksdb (Debian's
//! librocksdb-dev 7.8.3; `.cargo/config.toml` sets `ROCKSDB_LIB_DIR`). Every setting is
//! listed in `docs/benchmarks.md`.
//!
//! `bench/rocksdb-current` compiles this same file against the newest `rocksdb` crate (RocksDB
//! built from source) as the engine `rocksdb-current`: it reaches the bench through `super::`
//! and `crate::metrics` only, and calls nothing that the two crate versions spell differently.

use std::path::Path;
use std::thread;
use std::time::Duration;

use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, DBCompressionType, Options, WriteOptions, DB,
};

use super::{rocksdb_log_version, BenchError, BenchResult, Engine, EngineConfig, OwnCounters};
use crate::metrics::direct_io_supported;

/// A RocksDB database with the benchmark's settings.
pub struct RocksDbEngine {
    /// The command-line name (`rocksdb`, or `rocksdb-current` for the source build).
    name: &'static str,
    db: Option<DB>,
    /// Kept for its statistics object, which the database shares.
    opts: Options,
    write_opts: WriteOptions,
    direct_io: bool,
    /// From the LOG RocksDB wrote on open.
    version: Option<String>,
    /// Keeps the block cache alive as long as the database.
    _cache: Cache,
}

/// Bytes of memory RocksDB holds per byte of block-cache capacity once the cache is full, with
/// direct reads of 4 KiB blocks (7.8.3 and 11.8.1 alike; each cached block seems to keep the
/// aligned buffer of its direct read, two or three pages, while the cache charges the block's
/// size): a 96 MiB block cache took 234-236 MiB of resident memory in uniform reads, a 74 MiB
/// one 157-181 MiB (docs/benchmarks.md). The adapter divides the cache share by it, so that
/// RocksDB's memory, like every engine's, is the budget.
pub const ROCKSDB_CACHE_OVERHEAD: f64 = 2.4;

/// Environment variable that replaces [`ROCKSDB_CACHE_OVERHEAD`], to measure it again.
pub const ROCKSDB_CACHE_OVERHEAD_ENV: &str = "WOODS_BENCH_ROCKSDB_CACHE_OVERHEAD";

/// The block cache RocksDB gets for a cache share of `share` bytes.
pub fn rocksdb_block_cache_bytes(share: u64) -> u64 {
    let factor = std::env::var(ROCKSDB_CACHE_OVERHEAD_ENV)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|f| *f >= 1.0)
        .unwrap_or(ROCKSDB_CACHE_OVERHEAD);
    (share as f64 / factor) as u64
}

fn err(what: &str, e: rocksdb::Error) -> BenchError {
    BenchError::new(format!("rocksdb {what}: {e}"))
}

impl RocksDbEngine {
    /// Opens (or creates) a RocksDB database in `dir`: WAL on and not synced per write (synced
    /// with `cfg.sync`: `WriteOptions::set_sync(true)` for every put and delete),
    /// compression off, a 10 bits/key bloom filter, index and filter blocks in the block cache,
    /// two write buffers of the budget's write-buffer share, the rest block cache, and direct
    /// I/O for reads, flushes and compactions when asked for and the file system allows it.
    pub fn open(name: &'static str, dir: &Path, cfg: &EngineConfig) -> BenchResult<RocksDbEngine> {
        std::fs::create_dir_all(dir)
            .map_err(|e| BenchError::new(format!("creating {}: {e}", dir.display())))?;
        let direct_io = cfg.direct_io && direct_io_supported(dir);
        let split = cfg.split();

        let cache = Cache::new_lru_cache(rocksdb_block_cache_bytes(split.cache_bytes) as usize);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        // Filters and index blocks count against the same budget as data blocks. They are
        // partitioned (RocksDB's advice for caching them): a whole-file filter of a 64 MiB
        // table is about 600 KiB, and a cache smaller than the filters would read one per
        // lookup; partitions are read 4 KiB at a time, under a pinned top level.
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
        table.set_partition_filters(true);
        table.set_metadata_block_size(4096);
        table.set_pin_top_level_index_and_filter(true);

        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(DBCompressionType::None);
        opts.set_write_buffer_size(split.write_buffer_bytes as usize);
        opts.set_max_write_buffer_number(2);
        opts.set_use_direct_reads(direct_io);
        opts.set_use_direct_io_for_flush_and_compaction(direct_io);
        // For the WAL byte count (write amplification without the log).
        opts.enable_statistics();
        opts.set_block_based_table_factory(&table);

        let db = DB::open(&opts, dir).map_err(|e| err("open", e))?;
        let mut write_opts = WriteOptions::default();
        write_opts.set_sync(cfg.sync);
        // `--no-wal`: RocksDB's own bulk-load setting; the memtable flush is what persists.
        write_opts.disable_wal(cfg.no_wal);
        Ok(RocksDbEngine {
            name,
            db: Some(db),
            opts,
            write_opts,
            direct_io,
            version: rocksdb_log_version(dir),
            _cache: cache,
        })
    }

    fn db(&self) -> &DB {
        self.db.as_ref().expect("the database is open until close")
    }

    fn property(&self, name: &str) -> BenchResult<u64> {
        self.db()
            .property_int_value(name)
            .map_err(|e| err(name, e))
            .map(|v| v.unwrap_or(0))
    }

    /// A ticker from the statistics dump (`rocksdb.wal.bytes COUNT : 123`).
    fn ticker(&self, name: &str) -> Option<u64> {
        let text = self.opts.get_statistics()?;
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.trim_start();
            rest.strip_prefix("COUNT :")?.trim().parse().ok()
        })
    }
}

impl Engine for RocksDbEngine {
    fn name(&self) -> String {
        self.name.into()
    }

    fn direct_io(&self) -> bool {
        self.direct_io
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.db()
            .put_opt(key, value, &self.write_opts)
            .map_err(|e| err("put", e))
    }

    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        self.db().get(key).map_err(|e| err("get", e))
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.db()
            .delete_opt(key, &self.write_opts)
            .map_err(|e| err("delete", e))
    }

    fn scan(
        &self,
        start: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> BenchResult<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let mut it = self.db().raw_iterator();
        if start.is_empty() {
            it.seek_to_first();
        } else {
            it.seek(start);
        }
        let mut n = 0;
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            visit(k, v);
            n += 1;
            if n == limit {
                break;
            }
            it.next();
        }
        it.status().map_err(|e| err("iterator", e))?;
        Ok(n)
    }

    fn drain(&mut self) -> BenchResult<()> {
        self.db().flush().map_err(|e| err("flush", e))?;
        // The C API of 7.8 has no WaitForCompact: poll until nothing is pending or running.
        loop {
            let busy = self.property("rocksdb.compaction-pending")?
                + self.property("rocksdb.num-running-compactions")?
                + self.property("rocksdb.num-running-flushes")?
                + self.property("rocksdb.mem-table-flush-pending")?;
            if busy == 0 {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn counters(&self) -> OwnCounters {
        let wal = self.ticker("rocksdb.wal.bytes");
        let flush = self.ticker("rocksdb.flush.write.bytes");
        let compact = self.ticker("rocksdb.compact.write.bytes");
        let written = match (wal, flush, compact) {
            (Some(w), Some(f), Some(c)) => Some(w + f + c),
            _ => None,
        };
        OwnCounters {
            written,
            wal_written: wal,
            user_read: None,
            user_reads: None,
            ..Default::default()
        }
    }

    fn close(mut self: Box<Self>) -> BenchResult<()> {
        // Dropping the handle closes the database and joins its background threads.
        drop(self.db.take());
        Ok(())
    }

    fn version(&self) -> Option<String> {
        self.version.clone()
    }
}
