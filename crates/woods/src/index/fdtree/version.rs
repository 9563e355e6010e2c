//! Levels, versions and the persisted metadata of the `fdtree` index.
//!
//! A [`Version`] is the published shape: the sorted runs L1..Ll (a [`Level`] each) and the
//! head tree's fences into L1 (in memory: the memtables are the head tree's entries, spec §7
//! pitfall 8's memory-resident head tree). Readers pin a version; the extents a merge retired
//! stay allocated while any version that reaches them is alive ([`Epoch`]).

use std::sync::Arc;

use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::index::Epoch;
use crate::run::{Run, RunMeta};
use crate::storage::{Extent, PageFile, Purpose};

/// Version byte of the encoded metadata.
const META_VERSION: u8 = 1;

/// One level `L_i` (i ≥ 1): a fenced run (or, the lowest, a run without fences).
pub struct Level {
    pub run: Arc<Run>,
    /// Fence items in the run (external and internal); its `entries` count them too.
    pub fences: u64,
}

impl Level {
    /// Items, fences included: what the level's capacity counts (spec §3.1).
    pub fn items(&self) -> u64 {
        self.run.meta().entries
    }

    /// Index entries (all versions), fences not counted.
    pub fn entries(&self) -> u64 {
        self.items().saturating_sub(self.fences)
    }

    /// Data pages: the external fences the level above holds into this one.
    pub fn pages(&self) -> u64 {
        self.run.meta().data_pages
    }

    /// The extents of the run.
    pub fn extents(&self) -> &[Extent] {
        &self.run.meta().extents
    }
}

/// One head-tree fence: the first key of a page of L1 (empty for page 0) and that page.
pub type HeadFence = (Vec<u8>, u64);

/// One published shape of the tree.
pub struct Version {
    /// L1..Ll, top first.
    pub levels: Vec<Arc<Level>>,
    /// The head tree's external fences into L1, one per page of L1, in page order.
    pub head: Arc<Vec<HeadFence>>,
    pub(crate) epoch: Arc<Epoch>,
}

impl Version {
    /// The page of L1 a search for `key` reads: the last head fence with a key at or below it.
    pub fn head_page(&self, key: &[u8]) -> Option<u64> {
        let i = self.head.partition_point(|(k, _)| k.as_slice() <= key);
        i.checked_sub(1).map(|i| self.head[i].1)
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
        l.run.meta().encode(&mut out);
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

/// Opens the levels of decoded metadata and rebuilds the head tree's fences from L1 (one
/// sequential read of L1: the first key of each page).
pub fn open_levels(
    store: &Arc<PageFile>,
    levels: Vec<(u64, RunMeta)>,
) -> Result<(Vec<Arc<Level>>, Vec<HeadFence>)> {
    let mut out = Vec::with_capacity(levels.len());
    for (fences, meta) in levels {
        let run = Arc::new(Run::open(store.clone(), meta)?);
        out.push(Arc::new(Level { run, fences }));
    }
    let head = match out.first() {
        Some(l1) => page_list(&l1.run)?,
        None => Vec::new(),
    };
    Ok((out, head))
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
