//! Nodes, node files, versions and the persisted metadata of the `lsa` and `iam` kinds.
//!
//! A node (specs/lsa-iam-tree.md §2.2) has a key range and zero or more sorted sequences,
//! newest first, all in one append region of the data file (its MSTable, §2.3): each sequence
//! is a run appended into the region's hole by [`crate::run::RunBuilder::in_region`]. A node is
//! immutable; a flush into it publishes a new node sharing its file and older sequences. The
//! region's extent is owned by a [`NodeFile`] and released once no version holds it after the
//! committed metadata stopped naming it; a sequence's pages that did not fit the hole are
//! owned by the sequence the same way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::run::{LazyRun, Region, Run, RunMeta};
use crate::storage::{Extent, PageFile};

/// Version byte of the encoded metadata (2: `C_t` stored; 1, which lacks it, is still read).
const META_VERSION: u8 = 2;

/// The extent of a node's append region; released when obsolete and dropped.
pub struct NodeFile {
    pub extent: Extent,
    obsolete: AtomicBool,
    store: Arc<PageFile>,
}

impl NodeFile {
    pub fn new(extent: Extent, store: Arc<PageFile>) -> Arc<NodeFile> {
        Arc::new(NodeFile {
            extent,
            obsolete: AtomicBool::new(false),
            store,
        })
    }

    /// No committed metadata names the file any more (or it never was committed).
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }
}

impl Drop for NodeFile {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            self.store.alloc().release(self.extent);
        }
    }
}

/// One sorted sequence of a node: a run in the node's region (plus extents that did not fit).
pub struct Seq {
    pub run: LazyRun,
    file: Arc<NodeFile>,
    obsolete: AtomicBool,
}

impl Seq {
    pub fn new(run: LazyRun, file: Arc<NodeFile>) -> Arc<Seq> {
        Arc::new(Seq {
            run,
            file,
            obsolete: AtomicBool::new(false),
        })
    }

    pub fn from_run(run: Run, file: Arc<NodeFile>) -> Arc<Seq> {
        Seq::new(LazyRun::from_run(run), file)
    }

    pub fn meta(&self) -> &RunMeta {
        self.run.meta()
    }

    pub fn open(&self) -> Result<&Arc<Run>> {
        self.run.run()
    }

    /// The run's extents outside its node's region (the hole was too small for them).
    pub fn overflow(&self) -> impl Iterator<Item = Extent> + '_ {
        let r = self.file.extent;
        self.meta()
            .extents
            .iter()
            .copied()
            .filter(move |e| !(e.start >= r.start && e.end() <= r.end()))
    }

    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    pub fn file(&self) -> &Arc<NodeFile> {
        &self.file
    }
}

impl Drop for Seq {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) || self.file.obsolete.load(Ordering::Acquire) {
            let extents: Vec<Extent> = self.overflow().collect();
            for e in extents {
                self.file.store.alloc().release(e);
            }
        }
    }
}

/// One node: a key range and its sequences (newest first) in one append region.
#[derive(Clone)]
pub struct Node {
    /// Unique id (for stats and messages).
    pub id: u64,
    pub lo: Vec<u8>,
    pub hi: Vec<u8>,
    /// The region with its committed cursors; `None` for an empty node (spec P6).
    pub region: Option<Region>,
    pub file: Option<Arc<NodeFile>>,
    /// Sequences, newest first.
    pub seqs: Vec<Arc<Seq>>,
    /// The most sequences the node may hold: set by the rule of the last flush it received
    /// (1 merge, k mixed), 0 when unbounded (append levels, or moved since: correction 8).
    pub bound: u32,
}

impl Node {
    /// An empty node over `[lo, hi]`.
    pub fn empty(id: u64, lo: Vec<u8>, hi: Vec<u8>) -> Node {
        Node {
            id,
            lo,
            hi,
            region: None,
            file: None,
            seqs: Vec::new(),
            bound: 0,
        }
    }

    /// User bytes (keys and values) of all sequences: the data size the spec's "full" and
    /// `D_j` count (P3).
    pub fn data_bytes(&self) -> u64 {
        self.seqs.iter().map(|s| s.meta().user_bytes).sum()
    }

    /// Bytes on disk (pages of all sequences).
    pub fn disk_bytes(&self) -> u64 {
        self.seqs
            .iter()
            .map(|s| s.meta().pages() * crate::storage::PAGE_SIZE as u64)
            .sum()
    }

    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.lo.as_slice() <= hi && lo <= self.hi.as_slice()
    }
}

/// One published shape of the tree: levels L1..Ln (index 0 is L1), nodes sorted by range.
#[derive(Clone, Default)]
pub struct Version {
    pub levels: Vec<Vec<Arc<Node>>>,
}

impl Version {
    /// The nodes of level `d` overlapping `[lo, hi]`: a contiguous range of positions.
    pub fn overlapping(&self, d: usize, lo: &[u8], hi: &[u8]) -> std::ops::Range<usize> {
        let Some(level) = self.levels.get(d) else {
            return 0..0;
        };
        let a = level.partition_point(|n| n.hi.as_slice() < lo);
        let b = level.partition_point(|n| n.lo.as_slice() <= hi);
        a..b.max(a)
    }

    /// Whether any node below level `d` overlaps `[lo, hi]`.
    pub fn below_overlaps(&self, d: usize, lo: &[u8], hi: &[u8]) -> bool {
        (d + 1..self.levels.len()).any(|j| !self.overlapping(j, lo, hi).is_empty())
    }

    pub fn level_bytes(&self, d: usize) -> u64 {
        self.levels
            .get(d)
            .map_or(0, |l| l.iter().map(|n| n.data_bytes()).sum())
    }
}

/// State persisted beside the levels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaState {
    pub next_id: u64,
    /// The mixed level (1-based; 0 before the first choice) and k in force.
    pub m: u32,
    pub k: u32,
    /// `C_t`, the node capacity the tree was created with (0: not stored, metadata version
    /// 1).
    pub node_bytes: u64,
}

/// Encodes the metadata (layout in `docs/format.md`, "`lsa` and `iam` indexes").
pub fn encode_meta(v: &Version, st: &MetaState) -> Vec<u8> {
    let mut out = vec![META_VERSION];
    codec::put_varint(&mut out, st.next_id);
    codec::put_varint(&mut out, u64::from(st.m));
    codec::put_varint(&mut out, u64::from(st.k));
    codec::put_varint(&mut out, st.node_bytes);
    codec::put_varint(&mut out, v.levels.len() as u64);
    for level in &v.levels {
        codec::put_varint(&mut out, level.len() as u64);
        for n in level {
            codec::put_varint(&mut out, n.id);
            codec::put_bytes(&mut out, &n.lo);
            codec::put_bytes(&mut out, &n.hi);
            codec::put_varint(&mut out, u64::from(n.bound));
            match &n.region {
                None => out.push(0),
                Some(r) => {
                    out.push(1);
                    r.encode(&mut out);
                    codec::put_varint(&mut out, n.seqs.len() as u64);
                    for s in &n.seqs {
                        s.meta().encode(&mut out);
                    }
                }
            }
        }
    }
    out
}

/// Decodes [`encode_meta`]; runs are opened lazily.
pub fn decode_meta(bytes: &[u8], store: &Arc<PageFile>) -> Result<(MetaState, Version)> {
    let bad = |d: String| Error::corruption("iam metadata", None, d);
    let mut r = Reader::new(bytes, "iam metadata");
    let version = r.u8()?;
    if version != 1 && version != META_VERSION {
        return Err(bad(format!("unknown version {version}")));
    }
    let next_id = r.varint()?;
    let small = |v: u64| u32::try_from(v).map_err(|_| bad(format!("{v} out of range")));
    let m = small(r.varint()?)?;
    let k = small(r.varint()?)?;
    let node_bytes = if version >= 2 { r.varint()? } else { 0 };
    let n_levels = r.varint()?;
    if n_levels > 64 {
        return Err(bad(format!("{n_levels} levels")));
    }
    let mut levels = Vec::new();
    for _ in 0..n_levels {
        let count = r.varint()?;
        if count > r.remaining() as u64 {
            return Err(bad(format!("{count} nodes in {} bytes", r.remaining())));
        }
        let mut nodes: Vec<Arc<Node>> = Vec::new();
        for _ in 0..count {
            let id = r.varint()?;
            let lo = r.bytes()?.to_vec();
            let hi = r.bytes()?.to_vec();
            let bound = small(r.varint()?)?;
            let mut node = Node::empty(id, lo, hi);
            node.bound = bound;
            match r.u8()? {
                0 => {}
                1 => {
                    let region = Region::decode(&mut r)?;
                    let file = NodeFile::new(region.extent, store.clone());
                    let seqs = r.varint()?;
                    if seqs > r.remaining() as u64 {
                        return Err(bad(format!("{seqs} sequences in {} bytes", r.remaining())));
                    }
                    for _ in 0..seqs {
                        let meta = RunMeta::decode(&mut r)?;
                        node.seqs
                            .push(Seq::new(LazyRun::new(store.clone(), meta), file.clone()));
                    }
                    node.region = Some(region);
                    node.file = Some(file);
                }
                t => return Err(bad(format!("node {id}: file tag {t}"))),
            }
            if node.lo > node.hi {
                return Err(bad(format!("node {id}: range ends before it starts")));
            }
            if let Some(prev) = nodes.last() {
                if prev.hi >= node.lo {
                    return Err(bad(format!("nodes {} and {id} overlap", prev.id)));
                }
            }
            nodes.push(Arc::new(node));
        }
        levels.push(nodes);
    }
    if !r.is_empty() {
        return Err(bad("trailing bytes".into()));
    }
    Ok((
        MetaState {
            next_id,
            m,
            k,
            node_bytes,
        },
        Version { levels },
    ))
}
