//! The s-tree (structural nodes with their d-trees), the job cursor, and the persisted metadata
//! of the `nbtree` index.
//!
//! A [`Version`] is immutable and shared by readers as `Arc<Version>`. A job step builds the
//! next version by path copying (the s-tree holds about n/σ nodes, so this is cheap), commits
//! it through the manifest and publishes it; the d-trees a step replaces are released through
//! the version's [`Epoch`] once no reader can reach them.

use std::ops::Bound;
use std::sync::Arc;

use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::index::Epoch;
use crate::memtable::ENTRY_OVERHEAD;
use crate::run::{LazyRun, RunMeta};
use crate::storage::PageFile;

/// Version byte of the encoded metadata: 1 without root runs (the layout from before σ could
/// be a multiple of the memtable, still written then), 2 with them.
const META_VERSION: u8 = 1;
const META_VERSION_RUNS: u8 = 2;

/// Most root runs a decoder accepts (c is at most 64, and a root holds at most 2c runs).
pub const MAX_ROOT_RUNS: u64 = 256;

/// Deepest s-tree a decoder accepts: far beyond any real tree (a height of 64 at f = 3 holds
/// 2^63 d-trees), so that corrupt metadata cannot recurse without bound.
pub const MAX_HEIGHT: usize = 64;

/// The size measure of the whole index: what an entry costs in the memtable (key, value and
/// the memtable's per-entry overhead), so that σ (`memtable_bytes`) means the same in the root
/// buffer and in every d-tree, and work is counted in the same unit as the Db's pacing.
pub fn units(entries: u64, user_bytes: u64) -> u64 {
    user_bytes.saturating_add(entries.saturating_mul(ENTRY_OVERHEAD))
}

/// One d-tree: an immutable run and its live part (lazy removal, spec §3.5(c)). Entries with
/// keys below `live_start` were moved down by flushes and are stale; they stay in the run until
/// the node is next rebuilt.
#[derive(Clone)]
pub struct DTree {
    pub run: Arc<LazyRun>,
    /// First live key; `None`: the whole run is live.
    pub live_start: Option<Arc<[u8]>>,
    /// Live entries (all versions).
    pub live_entries: u64,
    /// Key and value bytes of the live entries.
    pub live_bytes: u64,
}

impl DTree {
    /// A d-tree whose whole run is live.
    pub fn whole(run: Arc<LazyRun>) -> DTree {
        let m = run.meta();
        DTree {
            live_entries: m.entries,
            live_bytes: m.user_bytes,
            run,
            live_start: None,
        }
    }

    /// Live size in [`units`].
    pub fn live_units(&self) -> u64 {
        units(self.live_entries, self.live_bytes)
    }

    /// `lo` raised to the live start: the lower bound of a read of the live part.
    pub fn live_lo(&self, lo: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
        match (&self.live_start, lo) {
            (None, lo) => lo,
            (Some(s), Bound::Unbounded) => Bound::Included(s.to_vec()),
            (Some(s), Bound::Included(l) | Bound::Excluded(l)) if s[..] > l[..] => {
                Bound::Included(s.to_vec())
            }
            (Some(_), lo) => lo,
        }
    }

    /// Whether `key` lies in the live part.
    pub fn is_live(&self, key: &[u8]) -> bool {
        self.live_start.as_ref().is_none_or(|s| key >= &s[..])
    }
}

/// A structural node. A leaf has no keys and no children; a non-leaf with r keys has r + 1
/// children, child i holding the keys in `[keys[i-1], keys[i])`. The root's d-tree is the Db's
/// memtables; the root owns an on-disk d-tree only while it is a leaf (the tree is one node).
/// With σ a multiple c > 1 of the memtable, a non-leaf root also owns `runs`: one per absorbed
/// memtable not yet drained into its children (the rest of its d-tree, on disk).
#[derive(Clone, Default)]
pub struct SNode {
    pub keys: Vec<Arc<[u8]>>,
    pub children: Vec<Arc<SNode>>,
    pub dtree: Option<DTree>,
    /// The root's runs, newest first (empty below the root, and with c = 1).
    pub runs: Vec<Arc<LazyRun>>,
}

impl SNode {
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }

    /// Live size of the node's d-tree in [`units`] (0 without one).
    pub fn live_units(&self) -> u64 {
        self.dtree.as_ref().map_or(0, DTree::live_units)
    }

    /// The child whose interval holds `key`: the number of s-keys at or below it (spec
    /// correction 8).
    pub fn child_index(&self, key: &[u8]) -> usize {
        self.keys.partition_point(|k| &k[..] <= key)
    }

    /// Live size of all children together (the sibling group below this node).
    pub fn group_units(&self) -> u64 {
        self.children.iter().map(|c| c.live_units()).sum()
    }

    /// Size of the root's runs in [`units`].
    pub fn runs_units(&self) -> u64 {
        self.runs
            .iter()
            .map(|r| units(r.meta().entries, r.meta().user_bytes))
            .sum()
    }
}

/// What a job is doing, as far as it survives a crash (spec correction 6). The root's drain is
/// not here: until it commits, the frozen memtable is still in the log, and a crash replays it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Moving the smallest live entries of the node at the path into its children, child by
    /// child, until `moved` reaches `target` (`received` is what the node took this job).
    Flush {
        received: u64,
        target: u64,
        moved: u64,
    },
    /// The node at the path has just sent `sent` units to its children: next, split oversized
    /// leaf children or flush the largest child.
    AfterFlush { sent: u64 },
    /// Splitting every leaf child of the node at the path that holds more than σ, from child
    /// `next` on. Each leaf splits at most once per job (its halves are not looked at again),
    /// so the node has at most 2f children and one split of it leaves at most f in each half.
    LeafSplits { next: u32 },
    /// Going back up the path, splitting every node with more than f children.
    Splits,
}

/// The position of a job: a path of child positions from the root, and a phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub path: Vec<u32>,
    pub phase: Phase,
}

impl Cursor {
    /// The root, splitting its oversized leaf children first: where a job goes after the
    /// root's drain.
    pub fn at_root() -> Cursor {
        Cursor {
            path: Vec::new(),
            phase: Phase::Splits,
        }
    }
}

/// Figures the structure's size bounds depend on, persisted because they are historical: the
/// largest σ the tree was built with, the most one s-node sent in one flush (the root: a
/// frozen memtable), and the largest key group (all versions of one key) a flush cut or a split
/// met. With entries of one size they are σ, σ and one entry, and the bounds are the paper's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub sigma_max: u64,
    pub max_sent: u64,
    pub max_group: u64,
}

impl Observed {
    pub fn merge(&mut self, other: &Observed) {
        self.sigma_max = self.sigma_max.max(other.sigma_max);
        self.max_sent = self.max_sent.max(other.max_sent);
        self.max_group = self.max_group.max(other.max_group);
    }
}

/// One published shape of the tree.
pub struct Version {
    pub root: Arc<SNode>,
    /// Levels of the s-tree (1: the root is a leaf).
    pub height: u32,
    /// The committed position of the job in flight, if one is (`None` between jobs).
    pub cursor: Option<Cursor>,
    pub observed: Observed,
    /// Every write up to this sequence number is in the tree (Z's last, after the root's drain).
    pub seq: u64,
    pub(super) _epoch: Arc<Epoch>,
}

/// The node at `path` (child positions from the root).
pub fn node_at<'a>(root: &'a Arc<SNode>, path: &[u32]) -> Option<&'a Arc<SNode>> {
    let mut n = root;
    for &i in path {
        n = n.children.get(i as usize)?;
    }
    Some(n)
}

/// A copy of the tree with the node at `path` replaced by `new` (the nodes on the path are
/// copied, everything else shared).
pub fn replace_at(root: &Arc<SNode>, path: &[u32], new: SNode) -> Result<Arc<SNode>> {
    let Some((&first, rest)) = path.split_first() else {
        return Ok(Arc::new(new));
    };
    let child = root
        .children
        .get(first as usize)
        .ok_or_else(|| bad_path(path))?;
    let replaced = replace_at(child, rest, new)?;
    let mut copy = (**root).clone();
    copy.children[first as usize] = replaced;
    Ok(Arc::new(copy))
}

fn bad_path(path: &[u32]) -> Error {
    Error::corruption("nbtree", None, format!("no s-node at path {path:?}"))
}

/// Height of the tree under `root` along its leftmost path.
pub fn height_of(root: &SNode) -> u32 {
    let mut h = 1;
    let mut n = root;
    while let Some(c) = n.children.first() {
        h += 1;
        n = c;
    }
    h
}

/// Every d-tree of the tree, in pre-order.
pub fn dtrees(root: &SNode, out: &mut Vec<DTree>) {
    if let Some(d) = &root.dtree {
        out.push(d.clone());
    }
    for c in &root.children {
        dtrees(c, out);
    }
}

/// Encodes the metadata (layout in `docs/format.md`): version byte, observed figures, height,
/// the s-tree in pre-order, the job cursor, then (version 2 only) the root's runs.
pub fn encode_meta(
    root: &SNode,
    height: u32,
    observed: &Observed,
    cursor: Option<&Cursor>,
) -> Vec<u8> {
    let version = if root.runs.is_empty() {
        META_VERSION
    } else {
        META_VERSION_RUNS
    };
    let mut out = vec![version];
    codec::put_varint(&mut out, observed.sigma_max);
    codec::put_varint(&mut out, observed.max_sent);
    codec::put_varint(&mut out, observed.max_group);
    codec::put_varint(&mut out, u64::from(height));
    encode_node(root, &mut out);
    match cursor {
        None => out.push(0),
        Some(c) => {
            let (tag, args): (u8, Vec<u64>) = match &c.phase {
                Phase::Flush {
                    received,
                    target,
                    moved,
                } => (1, vec![*received, *target, *moved]),
                Phase::AfterFlush { sent } => (2, vec![*sent]),
                Phase::LeafSplits { next } => (3, vec![u64::from(*next)]),
                Phase::Splits => (4, vec![]),
            };
            out.push(tag);
            codec::put_varint(&mut out, c.path.len() as u64);
            for &i in &c.path {
                codec::put_varint(&mut out, u64::from(i));
            }
            for a in args {
                codec::put_varint(&mut out, a);
            }
        }
    }
    if !root.runs.is_empty() {
        codec::put_varint(&mut out, root.runs.len() as u64);
        for r in &root.runs {
            r.meta().encode(&mut out);
        }
    }
    out
}

const HAS_DTREE: u8 = 1;
const HAS_LIVE_START: u8 = 2;

fn encode_node(n: &SNode, out: &mut Vec<u8>) {
    codec::put_varint(out, n.keys.len() as u64);
    for k in &n.keys {
        codec::put_bytes(out, k);
    }
    let mut flags = 0;
    if let Some(d) = &n.dtree {
        flags |= HAS_DTREE;
        if d.live_start.is_some() {
            flags |= HAS_LIVE_START;
        }
    }
    out.push(flags);
    if let Some(d) = &n.dtree {
        d.run.meta().encode(out);
        if let Some(s) = &d.live_start {
            codec::put_bytes(out, s);
        }
        codec::put_varint(out, d.live_entries);
        codec::put_varint(out, d.live_bytes);
    }
    for c in &n.children {
        encode_node(c, out);
    }
}

/// What the metadata holds.
pub struct Decoded {
    pub root: Arc<SNode>,
    pub height: u32,
    pub observed: Observed,
    pub cursor: Option<Cursor>,
}

/// Decodes metadata written by [`encode_meta`]; runs are not opened (see [`LazyRun`]).
pub fn decode_meta(buf: &[u8], store: &Arc<PageFile>) -> Result<Decoded> {
    let bad = |d: String| Error::corruption("nbtree metadata", None, d);
    let mut r = Reader::new(buf, "nbtree metadata");
    let v = r.u8()?;
    if v != META_VERSION && v != META_VERSION_RUNS {
        return Err(bad(format!("unknown version {v}")));
    }
    let observed = Observed {
        sigma_max: r.varint()?,
        max_sent: r.varint()?,
        max_group: r.varint()?,
    };
    let height = r.varint()?;
    if height == 0 || height > MAX_HEIGHT as u64 {
        return Err(bad(format!("height {height}")));
    }
    let mut root = decode_node(&mut r, store, 1)?;
    let found = height_of(&root);
    if u64::from(found) != height {
        return Err(bad(format!(
            "height {height} recorded, the s-tree has {found} levels"
        )));
    }
    let cursor = match r.u8()? {
        0 => None,
        tag @ 1..=4 => {
            let n = r.varint()?;
            if n >= height {
                return Err(bad(format!("cursor path of {n} steps in {height} levels")));
            }
            let mut path = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let i = u32::try_from(r.varint()?)
                    .map_err(|_| bad("cursor path step out of range".into()))?;
                path.push(i);
            }
            let phase = match tag {
                1 => Phase::Flush {
                    received: r.varint()?,
                    target: r.varint()?,
                    moved: r.varint()?,
                },
                2 => Phase::AfterFlush { sent: r.varint()? },
                3 => Phase::LeafSplits {
                    next: u32::try_from(r.varint()?)
                        .map_err(|_| bad("leaf split position out of range".into()))?,
                },
                _ => Phase::Splits,
            };
            if node_at(&root, &path).is_none() {
                return Err(bad(format!("cursor path {path:?} leads to no s-node")));
            }
            Some(Cursor { path, phase })
        }
        t => return Err(bad(format!("unknown cursor tag {t}"))),
    };
    if v == META_VERSION_RUNS {
        let n = r.varint()?;
        if n == 0 || n > MAX_ROOT_RUNS || root.is_leaf() {
            return Err(bad(format!(
                "{n} root runs (a {} root)",
                if root.is_leaf() { "leaf" } else { "non-leaf" }
            )));
        }
        let mut runs = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let meta = RunMeta::decode(&mut r)?;
            runs.push(Arc::new(LazyRun::new(store.clone(), meta)));
        }
        Arc::make_mut(&mut root).runs = runs;
    }
    if !r.is_empty() {
        return Err(bad(format!("{} trailing bytes", r.remaining())));
    }
    Ok(Decoded {
        root,
        height: height as u32,
        observed,
        cursor,
    })
}

fn decode_node(r: &mut Reader, store: &Arc<PageFile>, depth: usize) -> Result<Arc<SNode>> {
    let bad = |d: String| Error::corruption("nbtree metadata", None, d);
    if depth > MAX_HEIGHT {
        return Err(bad(format!("s-tree deeper than {MAX_HEIGHT} levels")));
    }
    let nkeys = r.varint()?;
    if nkeys > r.remaining() as u64 {
        return Err(bad(format!("{nkeys} s-keys in {} bytes", r.remaining())));
    }
    let mut keys = Vec::with_capacity(nkeys as usize);
    for _ in 0..nkeys {
        keys.push(Arc::<[u8]>::from(r.bytes()?));
    }
    let flags = r.u8()?;
    if flags & !(HAS_DTREE | HAS_LIVE_START) != 0 || flags == HAS_LIVE_START {
        return Err(bad(format!("s-node flags {flags:#x}")));
    }
    let dtree = if flags & HAS_DTREE != 0 {
        let meta = RunMeta::decode(r)?;
        let live_start = if flags & HAS_LIVE_START != 0 {
            Some(Arc::<[u8]>::from(r.bytes()?))
        } else {
            None
        };
        let live_entries = r.varint()?;
        let live_bytes = r.varint()?;
        if live_entries > meta.entries || live_bytes > meta.user_bytes {
            return Err(bad(format!(
                "{live_entries} live entries / {live_bytes} bytes in a run of {} / {}",
                meta.entries, meta.user_bytes
            )));
        }
        Some(DTree {
            run: Arc::new(LazyRun::new(store.clone(), meta)),
            live_start,
            live_entries,
            live_bytes,
        })
    } else {
        None
    };
    let mut children = Vec::new();
    if nkeys > 0 {
        for _ in 0..=nkeys {
            children.push(decode_node(r, store, depth + 1)?);
        }
    }
    Ok(Arc::new(SNode {
        keys,
        children,
        dtree,
        runs: Vec::new(),
    }))
}
