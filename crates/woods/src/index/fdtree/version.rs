//! Levels, versions and the persisted metadata of the `fdtree` index.
//!
//! A [`Version`] is the published shape: the sorted runs L1..Ll (a [`Level`] each) and the
//! head tree's fences into L1 (in memory: the memtables are the head tree's entries, spec §7
//! pitfall 8's memory-resident head tree). Readers pin a version; the extents a merge retired
//! stay allocated while any version that reaches them is alive ([`Epoch`]).

use std::sync::{Arc, OnceLock};

use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::index::Epoch;
use crate::run::{LazyRun, Run, RunMeta};
use crate::storage::{Extent, PageFile, Purpose};

/// Version byte of the encoded metadata.
const META_VERSION: u8 = 1;

/// One level `L_i` (i ≥ 1): a fenced run (or, the lowest, a run without fences). A level read
/// from the manifest is opened on first use, so that a damaged run fails the reads that need
/// it, not the whole open.
pub struct Level {
    lazy: LazyRun,
    /// Fence items in the run (external and internal); its `entries` count them too.
    pub fences: u64,
}

impl Level {
    /// A level just built.
    pub fn built(run: Run, fences: u64) -> Level {
        Level {
            lazy: LazyRun::from_run(run),
            fences,
        }
    }

    /// A level known from its metadata.
    pub fn from_meta(store: Arc<PageFile>, meta: RunMeta, fences: u64) -> Level {
        Level {
            lazy: LazyRun::new(store, meta),
            fences,
        }
    }

    /// The open run (opened now if it was not yet).
    pub fn run(&self) -> Result<&Arc<Run>> {
        self.lazy.run()
    }

    /// The run's metadata.
    pub fn meta(&self) -> &RunMeta {
        self.lazy.meta()
    }

    /// Items, fences included: what the level's capacity counts (spec §3.1).
    pub fn items(&self) -> u64 {
        self.meta().entries
    }

    /// Index entries (all versions), fences not counted.
    pub fn entries(&self) -> u64 {
        self.items().saturating_sub(self.fences)
    }

    /// Data pages: the external fences the level above holds into this one.
    pub fn pages(&self) -> u64 {
        self.meta().data_pages
    }

    /// The extents of the run.
    pub fn extents(&self) -> &[Extent] {
        &self.meta().extents
    }
}

/// One head-tree fence: the first key of a page of L1 (empty for page 0) and that page.
pub type HeadFence = (Vec<u8>, u64);

/// One published shape of the tree.
pub struct Version {
    /// L1..Ll, top first.
    pub levels: Vec<Arc<Level>>,
    /// The head tree's external fences into L1, one per page of L1, in page order (read from
    /// L1 on first use after an open).
    head: OnceLock<Arc<Vec<HeadFence>>>,
    pub(crate) epoch: Arc<Epoch>,
    /// Every write up to this sequence number is in the levels (durable once a commit of this
    /// version is).
    pub seq: u64,
}

impl Version {
    /// A version whose head fences are known (`None`: read from L1 when first needed).
    pub fn new(
        levels: Vec<Arc<Level>>,
        head: Option<Vec<HeadFence>>,
        epoch: Arc<Epoch>,
        seq: u64,
    ) -> Version {
        let cell = OnceLock::new();
        if let Some(h) = head {
            let _ = cell.set(Arc::new(h));
        }
        Version {
            levels,
            head: cell,
            epoch,
            seq,
        }
    }

    /// The head tree's fences into L1.
    pub fn head(&self) -> Result<&Arc<Vec<HeadFence>>> {
        if let Some(h) = self.head.get() {
            return Ok(h);
        }
        let list = match self.levels.first() {
            Some(l1) => page_list(l1.run()?)?,
            None => Vec::new(),
        };
        Ok(self.head.get_or_init(|| Arc::new(list)))
    }

    /// The page of L1 a search for `key` reads: the last head fence with a key at or below it.
    pub fn head_page(&self, key: &[u8]) -> Result<Option<u64>> {
        let head = self.head()?;
        let i = head.partition_point(|(k, _)| k.as_slice() <= key);
        Ok(i.checked_sub(1).map(|i| head[i].1))
    }
}

/// The tree's persisted state: k and |L0| as first resolved, and the levels.
pub struct Meta {
    pub k: u64,
    pub l0: u64,
    pub levels: Vec<(u64, RunMeta)>,
}

/// Encodes the metadata (layout in docs/format.md, "fdtree index metadata").
pub fn encode_meta(k: u64, l0: u64, levels: &[Arc<Level>]) -> Vec<u8> {
    let mut out = vec![META_VERSION];
    codec::put_varint(&mut out, k);
    codec::put_varint(&mut out, l0);
    codec::put_varint(&mut out, levels.len() as u64);
    for l in levels {
        codec::put_varint(&mut out, l.fences);
        l.meta().encode(&mut out);
    }
    out
}

/// Decodes what [`encode_meta`] wrote.
pub fn decode_meta(buf: &[u8]) -> Result<Meta> {
    let bad = |d: String| Error::corruption("fdtree metadata", None, d);
    let mut r = Reader::new(buf, "fdtree metadata");
    let v = r.u8()?;
    if v != META_VERSION {
        return Err(bad(format!("unknown version {v}")));
    }
    let k = r.varint()?;
    let l0 = r.varint()?;
    if k < 2 || l0 == 0 {
        return Err(bad(format!("k {k} or |L0| {l0} impossible")));
    }
    let n = r.varint()?;
    if n > 64 {
        return Err(bad(format!("{n} levels")));
    }
    let mut levels = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let fences = r.varint()?;
        let meta = RunMeta::decode(&mut r)?;
        if fences > meta.entries {
            return Err(bad(format!(
                "{fences} fences in a run of {} items",
                meta.entries
            )));
        }
        levels.push((fences, meta));
    }
    if !r.is_empty() {
        return Err(bad(format!("{} stray bytes", r.remaining())));
    }
    Ok(Meta { k, l0, levels })
}

/// The levels of decoded metadata, opened on first use; the head tree's fences are rebuilt
/// from L1 (one sequential read of L1: the first key of each page) when first needed.
pub fn open_levels(store: &Arc<PageFile>, levels: Vec<(u64, RunMeta)>) -> Vec<Arc<Level>> {
    levels
        .into_iter()
        .map(|(fences, meta)| Arc::new(Level::from_meta(store.clone(), meta, fences)))
        .collect()
}

/// The first key of every data page of `run` and its page number, page 0's key replaced by
/// the empty key (the MIN fence, spec pitfall 4).
pub fn page_list(run: &Arc<Run>) -> Result<Vec<HeadFence>> {
    let mut list = Vec::with_capacity(run.meta().data_pages as usize);
    for node in run.data_pages(Purpose::Merge) {
        let node = node?;
        let key = if list.is_empty() {
            Vec::new()
        } else {
            node.data(0)?.key.to_vec()
        };
        list.push((key, node.page));
    }
    Ok(list)
}
