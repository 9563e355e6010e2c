//! `lsm`: the leveled LSM-tree baseline, following LevelDB's rules.
//!
//! A frozen memtable becomes one level-0 table (L0 tables may overlap, searched newest first).
//! Levels 1..6 hold non-overlapping tables of about `table_bytes`, level L at most
//! `level1_bytes * size_ratio^(L-1)` bytes (`level1_bytes` 0, the default: the bytes of L0 at
//! its compaction trigger, `l0_compaction_trigger * memtable_bytes`, at least LevelDB's 10 MiB). The level with the highest score (L0: tables ÷
//! trigger; deeper: bytes ÷ max bytes) at or above 1 is compacted one table at a time into the
//! next level, or moved there by metadata when nothing overlaps (see [`compaction`]). Every
//! change is committed through the manifest after the page store is synced, then published as
//! a new [`version::Version`]; tables a change removes release their extents once no version
//! holds them. Writers are held back by LevelDB's L0 rules ([`Index::stall`]), not by debt.

pub mod compaction;
pub mod iter;
pub mod version;

#[cfg(test)]
mod tests;

use std::collections::{HashSet, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use self::compaction::{Choice, CompactionPolicy, Leveled};
use self::iter::{table_in_bounds, TableIter};
use self::version::{
    decode_meta, encode_meta, open_version, MetaState, Table, Version, NUM_LEVELS,
};
use super::{Index, IndexContext, IndexStats, Stall};
use crate::entry::{Entry, Kind};
use crate::error::{Error, Result};
use crate::manifest::Commit;
use crate::memtable::Memtable;
use crate::merge::{Compactor, EntryIter, MergeIter};
use crate::options::LsmParams;
use crate::run::{Run, RunBuilder, RunOptions};
use crate::storage::{Extent, Purpose, PAGE_SIZE};

/// Delay per write while L0 is at or above `l0_slowdown` tables (LevelDB: 1 ms).
const SLOWDOWN_MICROS: u64 = 1000;

/// Most pages a table builder allocates and writes at a time.
const TABLE_CHUNK_PAGES: u64 = 64;

#[derive(Default)]
struct Counters {
    absorbs: AtomicU64,
    flushes: AtomicU64,
    compactions: AtomicU64,
    trivial_moves: AtomicU64,
    bytes_flushed: AtomicU64,
    bytes_compacted: AtomicU64,
    /// Bytes written into each level since open (per-level write amplification, IamDB's
    /// Table 4).
    written: [AtomicU64; NUM_LEVELS],
}

/// The leveled LSM-tree index.
pub struct Lsm {
    ctx: IndexContext,
    params: LsmParams,
    policy: Leveled,
    current: RwLock<Arc<Version>>,
    /// Frozen memtables waiting to become L0 tables, oldest first.
    queue: Mutex<VecDeque<Arc<Memtable>>>,
    /// One flush at a time.
    flush_lock: Mutex<()>,
    /// One compaction at a time (it may run beside a flush).
    compact_lock: Mutex<()>,
    /// Compaction pointers and the next table id; held while a change is committed, so that
    /// commits (and version publication) are serialised.
    meta: Mutex<MetaState>,
    durable: AtomicU64,
    counters: Counters,
}

/// A structural change, applied to whatever version is current when it commits.
struct Edit {
    removed: Vec<Arc<Table>>,
    added: Vec<(usize, Arc<Table>)>,
    /// Set by flushes: the new durable sequence number.
    durable_seq: Option<u64>,
    /// New compaction pointer of a level.
    pointer: Option<(usize, Vec<u8>)>,
}

impl Lsm {
    /// Opens the tree from its manifest metadata (empty: a new tree).
    pub fn open(
        ctx: IndexContext,
        params: LsmParams,
        meta: &[u8],
        durable_seq: u64,
    ) -> Result<Lsm> {
        let (state, version) = if meta.is_empty() {
            (MetaState::new(), Version::empty())
        } else {
            let (state, levels) = decode_meta(meta)?;
            (state, open_version(&ctx.store, levels)?)
        };
        Ok(Lsm {
            policy: Leveled::new(&params, ctx.memtable_bytes),
            ctx,
            params,
            current: RwLock::new(Arc::new(version)),
            queue: Mutex::new(VecDeque::new()),
            flush_lock: Mutex::new(()),
            compact_lock: Mutex::new(()),
            meta: Mutex::new(state),
            durable: AtomicU64::new(durable_seq),
            counters: Counters::default(),
        })
    }

    /// Whether some level's score is at least 1: background work beyond flushing is due.
    pub fn compaction_needed(&self) -> bool {
        self.policy.needs_compaction(&self.version().levels)
    }

    fn version(&self) -> Arc<Version> {
        self.current.read().clone()
    }

    fn new_id(&self) -> u64 {
        let mut m = self.meta.lock();
        let id = m.next_id;
        m.next_id += 1;
        id
    }

    fn run_options(&self, purpose: Purpose) -> RunOptions {
        RunOptions {
            bloom_bits_per_key: self.params.bloom_bits_per_key,
            purpose,
            // Chunks no larger than a table, so that the holes freed tables leave can be reused.
            extent_pages: (self.params.table_bytes / PAGE_SIZE as u64).clamp(8, TABLE_CHUNK_PAGES),
        }
    }

    /// Makes `edit` durable (store sync, manifest commit) and publishes the new version.
    fn commit(&self, edit: Edit) -> Result<()> {
        self.ctx.store.sync()?;
        let mut meta = self.meta.lock();
        let removed_ids: Vec<u64> = edit.removed.iter().map(|t| t.id).collect();
        let added_ids: HashSet<u64> = edit.added.iter().map(|(_, t)| t.id).collect();
        let next = self.version().apply(&removed_ids, &edit.added);
        let mut new_meta = meta.clone();
        if let Some((level, p)) = &edit.pointer {
            if let Some(slot) = new_meta.pointers.get_mut(*level) {
                *slot = p.clone();
            }
        }
        let gone: Vec<&Arc<Table>> = edit
            .removed
            .iter()
            .filter(|t| !added_ids.contains(&t.id))
            .collect();
        let freed: Vec<Extent> = gone
            .iter()
            .flat_map(|t| t.meta().extents.iter().copied())
            .collect();
        let added: Vec<Extent> = edit
            .added
            .iter()
            .filter(|(_, t)| !removed_ids.contains(&t.id))
            .flat_map(|(_, t)| t.meta().extents.iter().copied())
            .collect();
        let durable_seq = edit
            .durable_seq
            .unwrap_or_else(|| self.durable.load(Ordering::Acquire));
        self.ctx.manifest.commit(Commit {
            index_meta: encode_meta(&next, &new_meta),
            durable_seq,
            added,
            freed,
        })?;
        *meta = new_meta;
        *self.current.write() = Arc::new(next);
        for t in gone {
            t.mark_obsolete();
        }
        self.durable.store(durable_seq, Ordering::Release);
        Ok(())
    }

    /// Writes `input` (entry order) into tables: one table when `table_bytes` is `None`, else
    /// cut once a table reaches the size or, like LevelDB, once it overlaps too many bytes of
    /// `grandparents`; a key's versions never straddle two tables. Nothing is left allocated
    /// on error.
    fn write_tables(
        &self,
        input: impl Iterator<Item = Result<Entry>>,
        purpose: Purpose,
        table_bytes: Option<u64>,
        grandparents: &[Arc<Table>],
    ) -> Result<Vec<Arc<Table>>> {
        let mut out = Vec::new();
        let r = self.write_tables_into(input, purpose, table_bytes, grandparents, &mut out);
        if let Err(e) = r {
            for t in &out {
                t.mark_obsolete();
            }
            return Err(e);
        }
        Ok(out)
    }

    fn write_tables_into(
        &self,
        input: impl Iterator<Item = Result<Entry>>,
        purpose: Purpose,
        table_bytes: Option<u64>,
        grandparents: &[Arc<Table>],
        out: &mut Vec<Arc<Table>>,
    ) -> Result<()> {
        let store = &self.ctx.store;
        let max_gp = self.policy.max_grandparent_overlap();
        let mut builder: Option<RunBuilder> = None;
        let mut last_key: Option<Arc<[u8]>> = None;
        let (mut gp_index, mut gp_overlap, mut seen_key) = (0usize, 0u64, false);
        for e in input {
            let e = e?;
            if last_key.as_ref().is_none_or(|k| **k != *e.key) {
                // LevelDB's ShouldStopBefore.
                while gp_index < grandparents.len()
                    && *e.key > *grandparents[gp_index].meta().max_key
                {
                    if seen_key {
                        gp_overlap += grandparents[gp_index].bytes;
                    }
                    gp_index += 1;
                }
                seen_key = true;
                let gp_cut = gp_overlap > max_gp;
                if gp_cut {
                    gp_overlap = 0;
                }
                let full = builder
                    .as_ref()
                    .is_some_and(|b| table_bytes.is_some_and(|t| b.bytes_so_far() >= t));
                if full || (gp_cut && table_bytes.is_some()) {
                    if let Some(b) = builder.take() {
                        out.push(self.finish_table(b)?);
                    }
                }
                last_key = Some(e.key.clone());
            }
            builder
                .get_or_insert_with(|| RunBuilder::new(store.clone(), self.run_options(purpose)))
                .add(&e)?;
        }
        if let Some(b) = builder.take() {
            if b.entries() > 0 {
                out.push(self.finish_table(b)?);
            } else {
                b.abandon();
            }
        }
        Ok(())
    }

    fn finish_table(&self, b: RunBuilder) -> Result<Arc<Table>> {
        if b.entries() == 0 {
            b.abandon();
            return Err(Error::InvalidOption("lsm: finishing an empty table".into()));
        }
        let run = Run::from_builder(b)?;
        Ok(Table::new(self.new_id(), run, self.ctx.store.clone()))
    }

    /// Turns the oldest queued memtable into an L0 table; `None` when nothing is queued.
    fn flush(&self) -> Result<Option<u64>> {
        let _g = self.flush_lock.lock();
        let Some(mem) = self.queue.lock().front().cloned() else {
            return Ok(None);
        };
        let snapshots = self.ctx.snapshots.list();
        let input = Compactor::new(
            mem.entries().map(Ok),
            snapshots,
            false,
            self.ctx.merge_op.clone(),
        );
        let tables = self.write_tables(input, Purpose::Flush, None, &[])?;
        let bytes: u64 = tables.iter().map(|t| t.bytes).sum();
        let edit = Edit {
            removed: Vec::new(),
            added: tables.into_iter().map(|t| (0, t)).collect(),
            durable_seq: Some(mem.max_seq()),
            pointer: None,
        };
        self.commit(edit)?;
        {
            let mut q = self.queue.lock();
            if q.front().is_some_and(|m| Arc::ptr_eq(m, &mem)) {
                q.pop_front();
            }
        }
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        self.counters.written[0].fetch_add(bytes, Ordering::Relaxed);
        self.counters
            .bytes_flushed
            .fetch_add(bytes, Ordering::Relaxed);
        Ok(Some(bytes.max(1)))
    }

    /// Runs one compaction (or trivial move) if some level's score is at least 1; returns the
    /// bytes written (1 for a move), 0 when there was nothing to do.
    fn compact(&self) -> Result<u64> {
        let _g = self.compact_lock.lock();
        let v = self.version();
        let pointers = self.meta.lock().pointers.clone();
        match self.policy.choose(&v.levels, &pointers) {
            Choice::DoNothing => Ok(0),
            Choice::Move {
                level,
                table,
                pointer,
            } => {
                let Some(t) = v.levels.get(level).and_then(|l| l.get(table)).cloned() else {
                    return Ok(0);
                };
                let edit = Edit {
                    removed: vec![t.clone()],
                    added: vec![(level + 1, t)],
                    durable_seq: None,
                    pointer: Some((level, pointer)),
                };
                self.commit(edit)?;
                self.counters.trivial_moves.fetch_add(1, Ordering::Relaxed);
                Ok(1)
            }
            Choice::Merge {
                level,
                inputs,
                next,
                bottom,
                pointer,
            } => {
                let pick = |lv: usize, pos: &[usize]| -> Vec<Arc<Table>> {
                    v.levels.get(lv).map_or(Vec::new(), |l| {
                        pos.iter().filter_map(|&i| l.get(i).cloned()).collect()
                    })
                };
                let mut removed = pick(level, &inputs);
                removed.extend(pick(level + 1, &next));
                // L0 tables overlap: one source each. A level >= 1 is one source whose tables
                // are read one after another (LevelDB's concatenating iterator), so the merge
                // heap and the read-ahead buffers stay small however many tables it spans.
                let mut sources: Vec<EntryIter> = Vec::new();
                if level == 0 {
                    for t in &removed[..inputs.len()] {
                        sources.push(Box::new(TableIter::new(
                            v.clone(),
                            t,
                            Bound::Unbounded,
                            Bound::Unbounded,
                            false,
                            Purpose::Merge,
                        )?));
                    }
                } else {
                    sources.push(Box::new(iter::tables(
                        v.clone(),
                        level,
                        inputs.clone(),
                        Purpose::Merge,
                    )));
                }
                sources.push(Box::new(iter::tables(
                    v.clone(),
                    level + 1,
                    next.clone(),
                    Purpose::Merge,
                )));
                let snapshots = self.ctx.snapshots.list();
                let merged = Compactor::new(
                    MergeIter::new(sources, false),
                    snapshots,
                    bottom,
                    self.ctx.merge_op.clone(),
                );
                let grandparents: &[Arc<Table>] = v.levels.get(level + 2).map_or(&[], |l| &l[..]);
                let tables = self.write_tables(
                    merged,
                    Purpose::Merge,
                    Some(self.params.table_bytes),
                    grandparents,
                )?;
                let bytes: u64 = tables.iter().map(|t| t.bytes).sum();
                let edit = Edit {
                    removed,
                    added: tables.into_iter().map(|t| (level + 1, t)).collect(),
                    durable_seq: None,
                    pointer: Some((level, pointer)),
                };
                self.commit(edit)?;
                self.counters.compactions.fetch_add(1, Ordering::Relaxed);
                if let Some(w) = self.counters.written.get(level + 1) {
                    w.fetch_add(bytes, Ordering::Relaxed);
                }
                self.counters
                    .bytes_compacted
                    .fetch_add(bytes, Ordering::Relaxed);
                Ok(bytes.max(1))
            }
        }
    }
}

impl Index for Lsm {
    fn absorb(&self, mem: Arc<Memtable>) -> Result<()> {
        self.counters.absorbs.fetch_add(1, Ordering::Relaxed);
        if mem.is_empty() {
            return Ok(());
        }
        self.queue.lock().push_back(mem);
        Ok(())
    }

    /// Bytes of memtables waiting to be flushed to L0 (compactions are not debt).
    fn debt(&self) -> u64 {
        let q = self.queue.lock();
        if q.is_empty() {
            0
        } else {
            q.iter().map(|m| m.bytes()).sum::<u64>().max(1)
        }
    }

    fn background_work(&self) -> bool {
        self.debt() > 0 || self.compaction_needed()
    }

    /// Flushes a queued memtable if there is one (the priority), else runs one compaction.
    /// The budget is not split: LevelDB compacts a whole table at a time.
    fn work(&self, _budget: u64) -> Result<u64> {
        if let Some(done) = self.flush()? {
            return Ok(done);
        }
        self.compact()
    }

    fn durable_seq(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    fn get(&self, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> Result<()> {
        let v = self.version();
        let start = out.len();
        let done = |out: &Vec<Entry>| {
            out.len() > start && out.last().is_some_and(|e| e.kind != Kind::Merge)
        };
        for t in &v.levels[0] {
            t.run()?.get(key, seq, out)?;
            if done(out) {
                return Ok(());
            }
        }
        for level in v.levels.iter().skip(1) {
            let i = level.partition_point(|t| t.meta().max_key.as_slice() < key);
            if let Some(t) = level.get(i) {
                if t.meta().min_key.as_slice() <= key {
                    t.run()?.get(key, seq, out)?;
                    if done(out) {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    fn iter(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> Result<Vec<EntryIter>> {
        let v = self.version();
        let mut out: Vec<EntryIter> = Vec::new();
        for t in v.levels[0].iter().filter(|t| table_in_bounds(t, &lo, &hi)) {
            out.push(Box::new(TableIter::new(
                v.clone(),
                t,
                lo.clone(),
                hi.clone(),
                reverse,
                Purpose::UserRead,
            )?));
        }
        for level in 1..v.levels.len() {
            if let Some(it) = iter::level(
                v.clone(),
                level,
                lo.clone(),
                hi.clone(),
                reverse,
                Purpose::UserRead,
            ) {
                out.push(Box::new(it));
            }
        }
        Ok(out)
    }

    fn stall(&self) -> Stall {
        let l0 = self.current.read().levels[0].len() as u32;
        if l0 >= self.params.l0_stop {
            Stall::Stop
        } else if l0 >= self.params.l0_slowdown {
            Stall::Slowdown(SLOWDOWN_MICROS)
        } else {
            Stall::None
        }
    }

    fn stats(&self) -> IndexStats {
        let v = self.version();
        let c = &self.counters;
        let tables: u64 = v.levels.iter().map(|l| l.len() as u64).sum();
        let name = crate::IndexKind::Lsm(self.params.clone()).name();
        let mut s = IndexStats::new(name, v.height(), &c.absorbs);
        s.count([
            ("flushes", &c.flushes),
            ("compactions", &c.compactions),
            ("trivial_moves", &c.trivial_moves),
            ("bytes_flushed", &c.bytes_flushed),
            ("bytes_compacted", &c.bytes_compacted),
        ]);
        s.counters.insert("tables".into(), tables);
        for (i, l) in v.levels.iter().enumerate() {
            let bytes = v.level_bytes(i);
            let limit = if i == 0 {
                format!("trigger {} tables", self.params.l0_compaction_trigger)
            } else {
                format!("max {:.0} bytes", self.policy.target(&v.levels, i))
            };
            let written = c.written.get(i).map_or(0, |w| w.load(Ordering::Relaxed));
            // Also a counter, so that the bench's JSON has per-level write amplification.
            s.counters.insert(format!("written_l{i}"), written);
            s.shape.push(format!(
                "L{i}: {} tables, {bytes} bytes ({limit}), written {written} bytes since open",
                l.len()
            ));
        }
        for t in v.levels.iter().flatten() {
            s.entries += t.meta().entries;
            s.filter_bytes += t.meta().filter_pages * PAGE_SIZE as u64;
        }
        s
    }

    fn check(&self) -> Result<u64> {
        let v = self.version();
        let bad = |d: String| Error::corruption("lsm", None, d);
        if v.levels.len() != NUM_LEVELS {
            return Err(bad(format!("{} levels", v.levels.len())));
        }
        let mut total = 0u64;
        let mut extents: Vec<Extent> = Vec::new();
        for (level, tables) in v.levels.iter().enumerate() {
            for (i, t) in tables.iter().enumerate() {
                let n = t.run()?.check()?;
                if n != t.meta().entries || n == 0 {
                    return Err(bad(format!(
                        "L{level} table {} holds {n} entries, metadata {}",
                        t.id,
                        t.meta().entries
                    )));
                }
                if t.bytes != t.meta().pages() * PAGE_SIZE as u64 {
                    return Err(bad(format!(
                        "L{level} table {} size differs from its extents",
                        t.id
                    )));
                }
                if level > 0 && i > 0 && tables[i - 1].meta().max_key >= t.meta().min_key {
                    return Err(bad(format!(
                        "L{level} tables {} and {} overlap or are out of order",
                        tables[i - 1].id,
                        t.id
                    )));
                }
                total += n;
                extents.extend_from_slice(&t.meta().extents);
            }
        }
        extents.sort();
        for w in extents.windows(2) {
            if w[0].end() > w[1].start {
                return Err(bad(format!("extents {:?} and {:?} overlap", w[0], w[1])));
            }
        }
        Ok(total)
    }
}
