//! fjall, the Rust LSM-tree engine, with its `lsm-tree` crate (no lz4 feature, so no
//! compression code is built). Every setting is listed in `docs/benchmarks.md`.

use std::path::Path;
use std::thread;
use std::time::Duration;

use fjall::config::{BloomConstructionPolicy, CompressionPolicy, FilterPolicy, FilterPolicyEntry};
use fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{BenchError, BenchResult, Engine, EngineConfig, OwnCounters};

/// How long fjall must stay idle (no flush queued or running, no compaction running, none
/// completed) before the drain believes it is done: its compactions are scheduled through a
/// queue that shows nothing between a request and its start.
const QUIET_POLLS: u32 = 5;
const POLL: Duration = Duration::from_millis(20);

/// A fjall database with one keyspace and the benchmark's settings.
pub struct FjallEngine {
    db: Database,
    ks: Keyspace,
    /// `--sync`: `Database::persist(PersistMode::SyncData)` after every write.
    sync: bool,
}

/// The most memtables fjall holds at once: the active one and 4 sealed (`local_backpressure`
/// halts writers at 4 sealed).
const FJALL_MEMTABLES: u64 = 5;

fn err(what: &str, e: fjall::Error) -> BenchError {
    BenchError::new(format!("fjall {what}: {e}"))
}

impl FjallEngine {
    /// Opens (or creates) a fjall database in `dir` with one keyspace: the journal on and
    /// written to the OS after every write but not synced, compression off, 10 bits/key bloom
    /// filters on every level, memtables of a fifth of the budget's two write buffers (fjall
    /// may hold five) and a block cache of the rest. With `cfg.sync` every write is followed by
    /// `Database::persist(PersistMode::SyncData)` (an `fdatasync` of the journal; fjall has no
    /// per-write sync option). fjall has no direct I/O.
    pub fn open(dir: &Path, cfg: &EngineConfig) -> BenchResult<FjallEngine> {
        if cfg.no_wal {
            return Err(BenchError::new(
                "fjall cannot write without its write-ahead log (--no-wal)",
            ));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| BenchError::new(format!("creating {}: {e}", dir.display())))?;
        let split = cfg.split();
        let db = Database::builder(dir)
            .cache_size(split.cache_bytes)
            .manual_journal_persist(false)
            .open()
            .map_err(|e| err("open", e))?;
        // fjall keeps writing while up to 4 sealed memtables wait for their flush (it halts
        // writers at 4), so it may hold 5 memtables at once: each gets a fifth of the two
        // write buffers every engine's budget has, or it outgrows the budget (at 20M records
        // 5 x 32 MiB with the cache OOM-killed it in its memory cgroup).
        let memtable = (2 * split.write_buffer_bytes / FJALL_MEMTABLES).max(1 << 20);
        let ks = db
            .keyspace("bench", move || {
                KeyspaceCreateOptions::default()
                    .max_memtable_size(memtable)
                    .manual_journal_persist(false)
                    .filter_policy(FilterPolicy::all(FilterPolicyEntry::Bloom(
                        BloomConstructionPolicy::BitsPerKey(10.0),
                    )))
                    .data_block_compression_policy(CompressionPolicy::all(CompressionType::None))
                    .index_block_compression_policy(CompressionPolicy::all(CompressionType::None))
            })
            .map_err(|e| err("keyspace", e))?;
        Ok(FjallEngine {
            db,
            ks,
            sync: cfg.sync,
        })
    }

    /// With `--sync`, makes the journal durable: the write before it returns with it.
    fn persist(&self) -> BenchResult<()> {
        if self.sync {
            self.db
                .persist(PersistMode::SyncData)
                .map_err(|e| err("persist", e))?;
        }
        Ok(())
    }

    fn busy(&self) -> bool {
        self.db.outstanding_flushes() > 0
            || self.db.active_compactions() > 0
            || self.ks.sealed_memtable_count() > 0
    }
}

impl Engine for FjallEngine {
    fn name(&self) -> String {
        "fjall".into()
    }

    fn direct_io(&self) -> bool {
        false
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.ks.insert(key, value).map_err(|e| err("insert", e))?;
        self.persist()
    }

    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        self.ks
            .get(key)
            .map(|v| v.map(|v| v.to_vec()))
            .map_err(|e| err("get", e))
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.ks.remove(key).map_err(|e| err("remove", e))?;
        self.persist()
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
        let mut n = 0;
        for guard in self.ks.range(start..).take(limit) {
            let (k, v) = guard.into_inner().map_err(|e| err("next", e))?;
            visit(&k, &v);
            n += 1;
        }
        Ok(n)
    }

    fn drain(&mut self) -> BenchResult<()> {
        // Flush the memtable into a table and wait for it (fjall's only flush call; it is
        // public but undocumented). Each flush queues compaction requests; wait until they
        // have run and nothing has moved for a while.
        self.ks
            .rotate_memtable_and_wait()
            .map_err(|e| err("flush", e))?;
        let mut quiet = 0;
        let mut completed = self.db.compactions_completed();
        while quiet < QUIET_POLLS {
            thread::sleep(POLL);
            let now = self.db.compactions_completed();
            if self.busy() || now != completed {
                quiet = 0;
                completed = now;
            } else {
                quiet += 1;
            }
        }
        Ok(())
    }

    fn counters(&self) -> OwnCounters {
        OwnCounters::default()
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        let FjallEngine { db, ks, .. } = *self;
        drop(ks);
        // Dropping the database stops and joins its workers and syncs the journal.
        drop(db);
        Ok(())
    }
}
