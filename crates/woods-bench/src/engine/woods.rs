//! The woods adapter: one per [`woods::IndexKind`].

use std::path::Path;

use woods::storage::Purpose;
use woods::{Db, Durability, IndexKind, Options};

use super::{BenchError, BenchResult, Engine, EngineConfig, OwnCounters, WriteWaits};

/// A woods database with one index kind.
pub struct WoodsEngine {
    db: Db,
    kind: String,
}

/// A woods variant's index kind ([`crate::engine::WOODS_VARIANTS`] but the `btree-buffered`
/// policies, which `IndexKind::from_name` knows); `None` for any other name.
fn variant(kind: &str) -> Option<IndexKind> {
    // The paper's build: no partition merge (issue 21's reproduction runs it beside the
    // default).
    if kind == "pbt-nomerge" {
        return Some(IndexKind::Pbt(woods::PbtParams {
            max_partitions: 0,
            ..Default::default()
        }));
    }
    // `nbtree-sC`: σ = C memtables (`NbTreeParams::sigma_memtables`), for comparing C in one
    // run.
    if let Some(c) = kind
        .strip_prefix("nbtree-s")
        .and_then(|c| c.parse::<u32>().ok())
    {
        return Some(IndexKind::NbTree(woods::NbTreeParams {
            sigma_memtables: c,
            ..Default::default()
        }));
    }
    // `stbe-bB`: trigger T2 and the whole-leaf compaction at B branches
    // (`StbeParams::flush_branches`, `leaf_branches`; 3F = 24 by default); `stbe-fB`: T2
    // alone. For the trade of branches a scan opens against write amplification (issue 24
    // item 3).
    for (prefix, leaf) in [("stbe-b", true), ("stbe-f", false)] {
        if let Some(b) = kind
            .strip_prefix(prefix)
            .and_then(|b| b.parse::<u32>().ok())
        {
            return Some(IndexKind::Stbe(woods::StbeParams {
                flush_branches: b,
                leaf_branches: if leaf { b } else { 0 },
                ..Default::default()
            }));
        }
    }
    // `stbe-sK`: scan-driven compaction credited K KiB a branch read (`StbeParams::
    // scan_credit_bytes`; 16 by default, 0 off), for comparing it in one run (issue 24 item 3).
    if let Some(k) = kind
        .strip_prefix("stbe-s")
        .and_then(|k| k.parse::<u64>().ok())
    {
        return Some(IndexKind::Stbe(woods::StbeParams {
            scan_credit_bytes: k << 10,
            ..Default::default()
        }));
    }
    // `fdtree-kK`, `fdtree-d-kK`: the capacity ratio k fixed (`FdTreeParams::ratio`) instead
    // of the cost model's, for the paper's comparison at one tuning (its LSM-tree shares the
    // FD-tree's k; `fdtree-k10` takes the `lsm` kind's ratio).
    if let Some((deamortized, k)) = fixed_fd_k(kind) {
        return Some(IndexKind::FdTree(woods::FdTreeParams {
            deamortized,
            ratio: k,
            ..Default::default()
        }));
    }
    // `iam-mM-kK`: the mixed level and its k fixed (`IamParams::fixed_m`, `fixed_k`), for the
    // paper's Table 3 (the effect of k with the mixed level held in place).
    let (m, k) = fixed_mk(kind)?;
    Some(IndexKind::Iam(woods::IamParams {
        fixed_m: m,
        fixed_k: k,
        ..Default::default()
    }))
}

/// A woods index kind or one of the bench's variants by name, with its default parameters
/// (`woods bench aging` takes the same names).
pub fn named_kind(kind: &str) -> woods::Result<IndexKind> {
    match variant(kind) {
        Some(index) => Ok(index),
        None => IndexKind::from_name(kind),
    }
}

/// The index kind of engine `kind` (its name after `woods:`), with what the run's settings
/// give it: the `fdtree` kinds' planned size, the `btree-buffered` kinds' buffer capacity.
fn index_kind(kind: &str, cfg: &EngineConfig) -> BenchResult<IndexKind> {
    let mut index = named_kind(kind).map_err(|e| err("index kind", e))?;
    if let (IndexKind::FdTree(p), Some(n)) = (&mut index, cfg.expected_entries) {
        // The cost model plans k for the run's size, not woods' default 10^8 entries.
        p.expected_entries = n.max(1);
    }
    if let (IndexKind::BTree(p), Some(n)) = (&mut index, cfg.insert_buffer_bytes) {
        if let Some(b) = &mut p.insert_buffer {
            b.capacity_bytes = n;
        }
    }
    Ok(index)
}

/// `fdtree-kK` and `fdtree-d-kK` (K at least 2) as (de-amortized, K).
fn fixed_fd_k(kind: &str) -> Option<(bool, u32)> {
    let (deamortized, k) = match kind.strip_prefix("fdtree-d-k") {
        Some(k) => (true, k),
        None => (false, kind.strip_prefix("fdtree-k")?),
    };
    let k = k.parse::<u32>().ok()?;
    (k >= 2).then_some((deamortized, k))
}

/// `iam-mM-kK` (both at least 1) as (M, K).
fn fixed_mk(kind: &str) -> Option<(u32, u32)> {
    let (m, k) = kind.strip_prefix("iam-m")?.split_once("-k")?;
    let (m, k) = (m.parse::<u32>().ok()?, k.parse::<u32>().ok()?);
    (m >= 1 && k >= 1).then_some((m, k))
}

fn err(what: &str, e: woods::Error) -> BenchError {
    BenchError::new(format!("woods {what}: {e}"))
}

impl WoodsEngine {
    /// Opens (or creates) a woods database of index kind `kind` (`btree`, `lsm`; `pbt-nomerge`:
    /// `pbt` with partition merge off, `PbtParams::max_partitions` 0; `nbtree-sC`: `nbtree`
    /// with σ = C memtables; `stbe-bB`: `stbe` flushing a child and compacting a leaf whole
    /// past B branches; `stbe-fB`: flushing past B; `iam-mM-kK`: `iam` with m = M and k = K fixed; `fdtree-kK`,
    /// `fdtree-d-kK`: `fdtree` (de-amortized) with k = K fixed; any of them followed
    /// by `+whole`: `Options::split_entries` off) in `dir`. The
    /// budget's write-buffer share sets `memtable_bytes` (two may exist), the rest the page
    /// cache; the write-ahead log is on with buffered durability, as for every engine, or with
    /// `cfg.sync` `Durability::Sync`: every put and delete syncs the log before it returns; with
    /// `cfg.no_wal` there is no log (`Options::wal = false`).
    pub fn open(name: &str, dir: &Path, cfg: &EngineConfig) -> BenchResult<WoodsEngine> {
        let (kind, whole) = match name.strip_suffix(super::WHOLE_SUFFIX) {
            Some(k) => (k, true),
            None => (name, false),
        };
        let index = index_kind(kind, cfg)?;
        let split = cfg.split();
        let opts = Options {
            index: Some(index),
            cache_bytes: split.cache_bytes,
            row_cache_bytes: cfg.row_cache_bytes.unwrap_or(0),
            memtable_bytes: split.write_buffer_bytes,
            split_entries: !whole,
            direct_io: cfg.direct_io,
            wal: !cfg.no_wal,
            background_threads: cfg.background_threads.unwrap_or(1),
            durability: if cfg.sync {
                Durability::Sync
            } else {
                Durability::Buffered
            },
            ..Options::default()
        };
        let db = Db::open(dir, opts).map_err(|e| err("open", e))?;
        Ok(WoodsEngine {
            db,
            kind: name.to_string(),
        })
    }
}

impl Engine for WoodsEngine {
    fn name(&self) -> String {
        format!("woods:{}", self.kind)
    }

    fn direct_io(&self) -> bool {
        self.db.stats().direct_io
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.db.put(key, value).map_err(|e| err("put", e))
    }

    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        self.db.get(key).map_err(|e| err("get", e))
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.db.delete(key).map_err(|e| err("delete", e))
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
        let mut iter = self.db.range(start..).map_err(|e| err("seek", e))?;
        let mut n = 0;
        // Lent pairs, as the other engines' cursors hand them: no copy per pair.
        while n < limit {
            let Some(pair) = iter.next_ref() else {
                break;
            };
            let (k, v) = pair.map_err(|e| err("next", e))?;
            visit(k, v);
            n += 1;
        }
        Ok(n)
    }

    fn drain(&mut self) -> BenchResult<()> {
        self.db.drain().map_err(|e| err("drain", e))
    }

    fn counters(&self) -> OwnCounters {
        let st = self.db.stats();
        let io = st.io;
        let ns = |d: std::time::Duration| d.as_nanos().min(u64::MAX as u128) as u64;
        OwnCounters {
            written: Some(io.total_written()),
            wal_written: Some(io.written(Purpose::Wal)),
            user_read: Some(io.read(Purpose::UserRead)),
            user_reads: Some(io.read_ops[Purpose::UserRead as usize]),
            write_waits: Some(WriteWaits {
                stalls: st.stalls,
                stall_total_ns: ns(st.stall_total),
                stall_max_ns: ns(st.stall_max),
                paced: st.pacing_delays,
                pacing_total_ns: ns(st.pacing_total),
                pacing_max_ns: ns(st.pacing_max),
            }),
            syncs: Some(io.syncs),
            index: {
                // The index's data-file writes (flush and merge purposes): bytes and requests,
                // whose ratio is the average write size (issue 21, Table 2's shape).
                let mut c = st.index.counters;
                let (b, n) = [Purpose::Flush, Purpose::Merge]
                    .iter()
                    .fold((0, 0), |(b, n), &p| {
                        (b + io.write_bytes[p as usize], n + io.write_ops[p as usize])
                    });
                c.insert("io_index_write_bytes".into(), b);
                c.insert("io_index_writes".into(), n);
                // The cache's, to see what the index pages' class keeps.
                let cache = &st.cache;
                c.insert("cache_hits".into(), cache.hits);
                c.insert("cache_misses".into(), cache.misses);
                c.insert("cache_evictions".into(), cache.evictions);
                c.insert("cache_index_pages".into(), cache.index_pages);
                c.insert("cache_index_evictions".into(), cache.index_evictions);
                c.insert("cache_reserved_bytes".into(), cache.reserved_bytes);
                c.insert("cache_paged_filters".into(), cache.paged_filters);
                c.insert("cache_row_bytes".into(), cache.row_bytes);
                c.insert("cache_row_hits".into(), cache.row_hits);
                c.insert("cache_row_misses".into(), cache.row_misses);
                // The Db's waits by cause (rotation, pacing wait, pacing step).
                c.extend(st.waits.into_iter().map(|(k, v)| (format!("db_{k}"), v)));
                c
            },
        }
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        self.db.close().map_err(|e| err("close", e))
    }
}

#[cfg(test)]
mod tests {
    use super::{fixed_fd_k, fixed_mk, index_kind, EngineConfig, IndexKind};

    #[test]
    fn the_insert_buffer_setting_reaches_the_buffered_kinds_only() {
        let mut cfg = EngineConfig::new(16 << 20, false);
        cfg.insert_buffer_bytes = Some(8 << 20);
        let capacity = |name: &str, cfg: &EngineConfig| match index_kind(name, cfg).unwrap() {
            IndexKind::BTree(p) => p.insert_buffer.map(|b| (b.policy.name(), b.capacity_bytes)),
            _ => None,
        };
        assert_eq!(
            capacity("btree-buffered:golden-gate", &cfg),
            Some(("golden-gate", 8 << 20))
        );
        assert_eq!(
            capacity("btree-buffered", &cfg),
            Some(("adaptive", 8 << 20))
        );
        assert_eq!(capacity("btree", &cfg), None);
        assert_eq!(capacity("lsm", &cfg), None);
        cfg.insert_buffer_bytes = None;
        assert_eq!(
            capacity("btree-buffered:random-ball", &cfg),
            Some(("random-ball", 0))
        );
    }

    #[test]
    fn fdtree_variants_name_their_k() {
        assert_eq!(fixed_fd_k("fdtree-k10"), Some((false, 10)));
        assert_eq!(fixed_fd_k("fdtree-d-k10"), Some((true, 10)));
        for bad in [
            "fdtree",
            "fdtree-d",
            "fdtree-k1",
            "fdtree-kx",
            "fdtree-d-k",
            "lsm-k10",
        ] {
            assert_eq!(fixed_fd_k(bad), None, "{bad}");
        }
    }

    #[test]
    fn iam_variants_name_their_m_and_k() {
        assert_eq!(fixed_mk("iam-m2-k3"), Some((2, 3)));
        assert_eq!(fixed_mk("iam-m10-k1"), Some((10, 1)));
        for bad in [
            "iam",
            "iam-m2",
            "iam-m0-k1",
            "iam-m2-k0",
            "iam-m2-kx",
            "lsa-m2-k1",
        ] {
            assert_eq!(fixed_mk(bad), None, "{bad}");
        }
    }
}
