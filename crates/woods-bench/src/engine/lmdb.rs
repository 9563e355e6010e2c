//! LMDB through the `heed` crate (which compiles LMDB's C source; no system library). Every
//! setting, and why, is in `docs/benchmarks.md`.

use std::ops::Bound;
use std::path::Path;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, WithoutTls};

use super::{BenchError, BenchResult, Engine, EngineConfig, OwnCounters};

/// The memory map's size: address space only (the file grows as pages are written), so it is
/// set far above any run's data rather than from the record count.
const MAP_BYTES: usize = 1 << 40;

/// An LMDB environment with one unnamed database and the benchmark's settings.
pub struct LmdbEngine {
    /// Read transactions without thread-local storage, so that any client thread may open
    /// one whatever else it holds.
    env: Env<WithoutTls>,
    db: Database<'static, Bytes, Bytes>,
}

fn err(what: &str, e: heed::Error) -> BenchError {
    BenchError::new(format!("lmdb {what}: {e}"))
}

impl LmdbEngine {
    /// Opens (or creates) an LMDB environment in `dir`. LMDB has no log: each put or delete is
    /// its own write transaction, committed with `NO_SYNC` (written to the file, not synced),
    /// which survives a process crash but not a power cut, like the other engines' unsynced
    /// log. With `cfg.sync` there is no `NO_SYNC`: every commit `fdatasync`s the file before it
    /// returns. No read-ahead (random reads of a data set larger than memory). Its cache is the
    /// OS page cache through the memory map: no direct I/O, and the budget cannot be applied.
    pub fn open(dir: &Path, cfg: &EngineConfig) -> BenchResult<LmdbEngine> {
        std::fs::create_dir_all(dir)
            .map_err(|e| BenchError::new(format!("creating {}: {e}", dir.display())))?;
        let mut opts = EnvOpenOptions::new().read_txn_without_tls();
        opts.map_size(MAP_BYTES).max_dbs(1);
        let flags = if cfg.sync {
            EnvFlags::NO_READ_AHEAD
        } else {
            EnvFlags::NO_SYNC | EnvFlags::NO_READ_AHEAD
        };
        // SAFETY: NO_SYNC gives up durability across a system crash (not memory safety); the
        // drain syncs before any figure is taken. NO_READ_AHEAD only changes madvise.
        unsafe {
            opts.flags(flags);
        }
        // SAFETY: the environment's files are used by this process only, through this one
        // handle, and nothing else modifies them while it is open.
        let env = unsafe { opts.open(dir) }.map_err(|e| err("open", e))?;
        let wtxn = env.write_txn().map_err(|e| err("write txn", e))?;
        let db = env
            .create_databases_and_commit(wtxn, |dbs, wtxn| {
                dbs.create_database::<Bytes, Bytes>(wtxn, None)
                    .map(CommitOrAbort::<_, ()>::Commit)
            })
            .map_err(|e| err("create database", e))?;
        let CommitOrAbort::Commit(db) = db else {
            return Err(BenchError::new("lmdb create database: aborted"));
        };
        Ok(LmdbEngine { env, db })
    }

    fn write(
        &self,
        what: &str,
        op: impl FnOnce(&mut heed::RwTxn) -> heed::Result<()>,
    ) -> BenchResult<()> {
        let mut wtxn = self.env.write_txn().map_err(|e| err("write txn", e))?;
        op(&mut wtxn).map_err(|e| err(what, e))?;
        wtxn.commit().map_err(|e| err("commit", e))
    }
}

impl Engine for LmdbEngine {
    fn name(&self) -> String {
        "lmdb".into()
    }

    fn direct_io(&self) -> bool {
        false
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.write("put", |wtxn| self.db.put(wtxn, key, value))
    }

    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        let rtxn = self.env.read_txn().map_err(|e| err("read txn", e))?;
        let value = self.db.get(&rtxn, key).map_err(|e| err("get", e))?;
        Ok(value.map(<[u8]>::to_vec))
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.write("delete", |wtxn| self.db.delete(wtxn, key).map(|_| ()))
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
        let rtxn = self.env.read_txn().map_err(|e| err("read txn", e))?;
        // LMDB refuses a zero-length key, even to seek with.
        let from = if start.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Included(start)
        };
        let range: (Bound<&[u8]>, Bound<&[u8]>) = (from, Bound::Unbounded);
        let iter = self.db.range(&rtxn, &range).map_err(|e| err("seek", e))?;
        let mut n = 0;
        for entry in iter.take(limit) {
            let (k, v) = entry.map_err(|e| err("next", e))?;
            visit(k, v);
            n += 1;
        }
        Ok(n)
    }

    fn drain(&mut self) -> BenchResult<()> {
        // Nothing runs in the background; what NO_SYNC left unsynced goes to the device, so
        // that the load figures include it as they include the others' flushes.
        self.env.force_sync().map_err(|e| err("sync", e))
    }

    fn counters(&self) -> OwnCounters {
        OwnCounters {
            written: None,
            // No write-ahead log: every byte written is the B+-tree's.
            wal_written: Some(0),
            user_read: None,
            user_reads: None,
            ..Default::default()
        }
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        let LmdbEngine { env, db: _ } = *self;
        // The environment closes when its last handle goes; wait for that.
        env.prepare_for_closing().wait();
        Ok(())
    }
}
