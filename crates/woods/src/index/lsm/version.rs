//! Tables, versions and the persisted metadata of the `lsm` index.
//!
//! A [`Version`] is an immutable list of tables per level, shared by readers as
//! `Arc<Version>`. A table removed by a compaction is marked obsolete once the manifest
//! record that frees it is committed; its extents go back to the allocator only when the
//! last version (and so the last reader or iterator) holding it is dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use super::compaction::TableRange;
use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::run::{Run, RunMeta};
use crate::storage::{PageFile, PAGE_SIZE};

/// Levels of the tree, L0..L6 as in LevelDB.
pub const NUM_LEVELS: usize = 7;

/// Version byte of the encoded metadata.
const META_VERSION: u8 = 1;

/// One table: an immutable run with an id, at some level. Tables read from the manifest are
/// opened (header and filter read) on first use, as LevelDB's table cache does, so that a
/// damaged table fails the reads that need it rather than the whole open.
pub struct Table {
    /// Unique, increasing id.
    pub id: u64,
    /// Bytes on disk (whole pages).
    pub bytes: u64,
    meta: RunMeta,
    run: OnceLock<Arc<Run>>,
    obsolete: AtomicBool,
    store: Arc<PageFile>,
}

impl Table {
    /// Wraps a run just built as table `id`.
    pub fn new(id: u64, run: Run, store: Arc<PageFile>) -> Arc<Table> {
        let t = Table::from_meta(id, run.meta().clone(), store);
        let _ = t.run.set(Arc::new(run));
        Arc::new(t)
    }

    /// A table known from the metadata only; its run is opened on first use.
    pub fn from_meta(id: u64, meta: RunMeta, store: Arc<PageFile>) -> Table {
        let bytes = meta.pages() * PAGE_SIZE as u64;
        Table {
            id,
            bytes,
            meta,
            run: OnceLock::new(),
            obsolete: AtomicBool::new(false),
            store,
        }
    }

    /// The run's metadata.
    pub fn meta(&self) -> &RunMeta {
        &self.meta
    }

    /// The open run (opened now if it was not yet).
    pub fn run(&self) -> Result<&Arc<Run>> {
        if let Some(r) = self.run.get() {
            return Ok(r);
        }
        let run = Arc::new(Run::open(self.store.clone(), self.meta.clone())?);
        Ok(self.run.get_or_init(|| run))
    }

    /// Marks the table as no longer reachable from the committed metadata (or never committed):
    /// its extents are released when the last holder drops it.
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            for e in &self.meta.extents {
                self.store.alloc().release(*e);
            }
        }
    }
}

impl TableRange for Arc<Table> {
    fn min_key(&self) -> &[u8] {
        &self.meta().min_key
    }
    fn max_key(&self) -> &[u8] {
        &self.meta().max_key
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// One published shape of the tree.
pub struct Version {
    /// Tables per level: L0 newest first, levels >= 1 sorted by key and non-overlapping.
    pub levels: Vec<Vec<Arc<Table>>>,
}

impl Version {
    /// An empty tree.
    pub fn empty() -> Version {
        Version {
            levels: vec![Vec::new(); NUM_LEVELS],
        }
    }

    /// Applies an edit: removes the tables with ids in `removed` (any level) and adds `added`
    /// as (level, table); keeps each level in its order.
    pub fn apply(&self, removed: &[u64], added: &[(usize, Arc<Table>)]) -> Version {
        let mut levels: Vec<Vec<Arc<Table>>> = self
            .levels
            .iter()
            .map(|l| {
                l.iter()
                    .filter(|t| !removed.contains(&t.id))
                    .cloned()
                    .collect()
            })
            .collect();
        for (level, t) in added {
            if let Some(l) = levels.get_mut(*level) {
                l.push(t.clone());
            }
        }
        sort_levels(&mut levels);
        Version { levels }
    }

    /// Bytes held by a level.
    pub fn level_bytes(&self, level: usize) -> u64 {
        self.levels
            .get(level)
            .map_or(0, |l| l.iter().map(|t| t.bytes).sum())
    }

    /// Levels in use: one past the deepest non-empty level.
    pub fn height(&self) -> u64 {
        self.levels
            .iter()
            .rposition(|l| !l.is_empty())
            .map_or(0, |i| i as u64 + 1)
    }
}

/// Orders L0 newest first and deeper levels by key.
fn sort_levels(levels: &mut [Vec<Arc<Table>>]) {
    for (i, l) in levels.iter_mut().enumerate() {
        if i == 0 {
            l.sort_by(|a, b| {
                b.meta()
                    .max_seq
                    .cmp(&a.meta().max_seq)
                    .then(b.id.cmp(&a.id))
            });
        } else {
            l.sort_by(|a, b| a.meta().min_key.cmp(&b.meta().min_key));
        }
    }
}

/// What the metadata holds besides the tables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaState {
    /// Next table id to hand out.
    pub next_id: u64,
    /// Per level, the largest key of the last compaction's inputs (empty: start of the level).
    pub pointers: Vec<Vec<u8>>,
}

impl MetaState {
    /// A new tree's state.
    pub fn new() -> MetaState {
        MetaState {
            next_id: 1,
            pointers: vec![Vec::new(); NUM_LEVELS],
        }
    }
}

/// Encodes the index metadata: version byte, next id, level count, and per level the
/// compaction pointer and the tables (id, run metadata).
pub fn encode_meta(v: &Version, m: &MetaState) -> Vec<u8> {
    let mut out = vec![META_VERSION];
    codec::put_varint(&mut out, m.next_id);
    codec::put_varint(&mut out, NUM_LEVELS as u64);
    for level in 0..NUM_LEVELS {
        codec::put_bytes(&mut out, m.pointers.get(level).map_or(&[][..], |p| &p[..]));
        let tables = &v.levels[level];
        codec::put_varint(&mut out, tables.len() as u64);
        for t in tables {
            codec::put_varint(&mut out, t.id);
            t.meta().encode(&mut out);
        }
    }
    out
}

/// Per level, the (id, run metadata) of each table, as the metadata lists them.
pub type LevelMetas = Vec<Vec<(u64, RunMeta)>>;

/// Decodes metadata written by [`encode_meta`].
pub fn decode_meta(buf: &[u8]) -> Result<(MetaState, LevelMetas)> {
    let bad = |d: String| Error::corruption("lsm metadata", None, d);
    let mut r = Reader::new(buf, "lsm metadata");
    let v = r.u8()?;
    if v != META_VERSION {
        return Err(bad(format!("unknown version {v}")));
    }
    let next_id = r.varint()?;
    let n = r.varint()?;
    if n != NUM_LEVELS as u64 {
        return Err(bad(format!("{n} levels, {NUM_LEVELS} expected")));
    }
    let mut state = MetaState {
        next_id,
        pointers: Vec::with_capacity(NUM_LEVELS),
    };
    let mut levels = Vec::with_capacity(NUM_LEVELS);
    for _ in 0..NUM_LEVELS {
        state.pointers.push(r.bytes()?.to_vec());
        let count = r.varint()?;
        if count > r.remaining() as u64 {
            return Err(bad(format!("{count} tables in {} bytes", r.remaining())));
        }
        let mut tables = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let id = r.varint()?;
            if id >= next_id {
                return Err(bad(format!(
                    "table id {id} not below the next id {next_id}"
                )));
            }
            tables.push((id, RunMeta::decode(&mut r)?));
        }
        levels.push(tables);
    }
    if !r.is_empty() {
        return Err(bad(format!("{} trailing bytes", r.remaining())));
    }
    Ok((state, levels))
}

/// The version of decoded metadata (tables are opened on first use).
pub fn open_version(store: &Arc<PageFile>, levels: LevelMetas) -> Result<Version> {
    let mut out: Vec<Vec<Arc<Table>>> = Vec::with_capacity(NUM_LEVELS);
    for tables in levels {
        let mut l = Vec::with_capacity(tables.len());
        for (id, meta) in tables {
            l.push(Arc::new(Table::from_meta(id, meta, store.clone())));
        }
        out.push(l);
    }
    sort_levels(&mut out);
    Ok(Version { levels: out })
}
