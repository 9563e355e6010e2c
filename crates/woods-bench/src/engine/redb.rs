//! redb, the Rust copy-on-write B-tree engine. Every setting, and why, is in
//! `docs/benchmarks.md`.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redb::{Database, Durability, ReadableDatabase, TableDefinition};

use super::{BenchError, BenchResult, Engine, EngineConfig, OwnCounters};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");
/// The database file inside the engine's directory.
const FILE: &str = "bench.redb";
/// How often a put's or delete's commit is `Durability::Immediate` rather than `None`: redb
/// holds what each non-durable commit freed until the next durable one, so that a long run of
/// non-durable commits alone grows its memory without bound (the 20-million-record load was
/// OOM-killed in its 628 MiB cgroup at 8.2 million records). redb's maintainers advise a durable
/// commit every few seconds in that use.
const DURABLE_EVERY: Duration = Duration::from_secs(1);

/// A redb database with one table and the benchmark's settings.
pub struct RedbEngine {
    db: Database,
    /// Every put's and delete's commit is durable (`Immediate`): `--sync`.
    sync: bool,
    opened: Instant,
    /// When the last durable commit began, in milliseconds since `opened`.
    last_durable_ms: AtomicU64,
}

fn err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::new(format!("redb {what}: {e}"))
}

impl RedbEngine {
    /// Opens (or creates) `bench.redb` in `dir` with a cache of the budget's cache share (redb's
    /// one cache holds its write buffer too, at most half of it; at the whole budget, redb's
    /// memory beyond its cache took it past the budget's cgroup). redb has no log: each put is a
    /// write transaction committed with `Durability::None` (nothing synced; see
    /// docs/benchmarks.md for why this is the comparable setting) except one a second, which is
    /// `Durability::Immediate`, or with `cfg.sync` every one `Immediate` (the file synced at
    /// every commit); the drain commits with `Durability::Immediate`. No direct I/O.
    pub fn open(dir: &Path, cfg: &EngineConfig) -> BenchResult<RedbEngine> {
        std::fs::create_dir_all(dir)
            .map_err(|e| BenchError::new(format!("creating {}: {e}", dir.display())))?;
        let db = Database::builder()
            .set_cache_size(cfg.split().cache_bytes as usize)
            .create(dir.join(FILE))
            .map_err(|e| err("open", e))?;
        // The table exists from the start, so that a get before any put finds it empty.
        let tx = db.begin_write().map_err(|e| err("write txn", e))?;
        tx.open_table(TABLE).map_err(|e| err("open table", e))?;
        tx.commit().map_err(|e| err("commit", e))?;
        Ok(RedbEngine {
            db,
            sync: cfg.sync,
            opened: Instant::now(),
            last_durable_ms: AtomicU64::new(0),
        })
    }

    /// The durability of the next put's or delete's commit: `Immediate` with `--sync`, and
    /// once every [`DURABLE_EVERY`]; else `None`.
    fn durability(&self) -> Durability {
        if self.sync {
            return Durability::Immediate;
        }
        let now = self.opened.elapsed().as_millis() as u64;
        let last = self.last_durable_ms.load(Ordering::Relaxed);
        let due = now.saturating_sub(last) >= DURABLE_EVERY.as_millis() as u64;
        if due
            && self
                .last_durable_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            Durability::Immediate
        } else {
            Durability::None
        }
    }

    /// One write transaction: `op` on the table, then a commit of the given durability.
    fn write(
        &self,
        durability: Durability,
        op: impl FnOnce(&mut redb::Table<&[u8], &[u8]>) -> Result<(), redb::StorageError>,
    ) -> BenchResult<()> {
        let mut tx = self.db.begin_write().map_err(|e| err("write txn", e))?;
        tx.set_durability(durability)
            .map_err(|e| err("durability", e))?;
        {
            let mut table = tx.open_table(TABLE).map_err(|e| err("open table", e))?;
            op(&mut table).map_err(|e| err("write", e))?;
        }
        tx.commit().map_err(|e| err("commit", e))
    }

    fn read_table(&self) -> BenchResult<redb::ReadOnlyTable<&'static [u8], &'static [u8]>> {
        let tx = self.db.begin_read().map_err(|e| err("read txn", e))?;
        tx.open_table(TABLE).map_err(|e| err("open table", e))
    }
}

impl Engine for RedbEngine {
    fn name(&self) -> String {
        "redb".into()
    }

    fn direct_io(&self) -> bool {
        false
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.write(self.durability(), |t| t.insert(key, value).map(|_| ()))
    }

    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        let table = self.read_table()?;
        let value = table.get(key).map_err(|e| err("get", e))?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.write(self.durability(), |t| t.remove(key).map(|_| ()))
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
        let table = self.read_table()?;
        let iter = table.range(start..).map_err(|e| err("seek", e))?;
        let mut n = 0;
        for entry in iter.take(limit) {
            let (k, v) = entry.map_err(|e| err("next", e))?;
            visit(k.value(), v.value());
            n += 1;
        }
        Ok(n)
    }

    fn drain(&mut self) -> BenchResult<()> {
        // Nothing runs in the background; an Immediate commit writes and syncs what the
        // non-durable commits left in redb's write buffer.
        self.write(Durability::Immediate, |_| Ok(()))
    }

    fn counters(&self) -> OwnCounters {
        OwnCounters {
            written: None,
            // No write-ahead log: every byte written is the B-tree's.
            wal_written: Some(0),
            user_read: None,
            user_reads: None,
            ..Default::default()
        }
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        self.db.close().map_err(|e| err("close", e))
    }
}
