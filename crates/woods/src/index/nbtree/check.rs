//! `Index::check` for the NB-tree: every d-tree's `Run::check` plus the structure's invariants
//! (spec §2.5 and §6 items 1–10, with the corrections and in bytes):
//!
//! 1. s-keys strictly ascending inside their node's interval; a leaf has no keys and no
//!    children, a non-leaf with r keys has r + 1 children; the root has no on-disk d-tree once
//!    it has children.
//! 2. at most f children (2f while a job is in flight), at least ⌈f/2⌉ below the root.
//! 3. all leaves at the same depth (the height bound is not checked: deletes shrink n).
//! 4. every d-key (live or stale) of a node, and every s-key below it, inside its interval.
//! 5. a leaf holds at most max(σ, S) + 2G live units (S the most one flush sent, G the largest
//!    key group cut or split: σ and one entry with entries of one size), or one key only; a
//!    leaf root at most σ.
//! 6. every non-leaf sibling group at most max(fσ, (f−1)S) live units between jobs, S more
//!    while a job is in flight (correction 2).
//! 7. `Run::check` of every d-tree; live counts as recorded; no two d-trees share a page.
//! 8. V1: along a key's path, live versions are strictly newer above; no (key, seq) twice.
//! 9. V2: the newest stale version of a key is the newest live version deeper on its path, or
//!    a tombstone dropped at a leaf (correction 3).
//! 10. no key of a leaf d-tree ends in a tombstone (one is kept only above an older version a
//!     live snapshot still reads).
//! 11. the root's runs (σ a multiple c > 1 of the memtable): only on a non-leaf root, newest
//!     first, and all newer than every d-tree below it.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::policy::Shape;
use super::version::{units, DTree, SNode, Version};
use crate::entry::{cmp_entries, Entry, Kind};
use crate::error::{Error, Result};
use crate::storage::{Extent, Purpose};

fn bad(path: &[u32], what: String) -> Error {
    Error::corruption("nbtree", None, format!("s-node {path:?}: {what}"))
}

struct Walk<'a> {
    shape: Shape,
    mid_job: bool,
    v: &'a Version,
    leaf_depth: Option<usize>,
    entries: u64,
    extents: Vec<Extent>,
    /// Per depth, the d-trees in key order with their node's path.
    levels: Vec<Vec<(Vec<u32>, DTree, bool)>>,
}

/// Verifies the tree; returns the number of entries (all versions, stale ones included).
pub fn check(v: &Version, shape: Shape) -> Result<u64> {
    let mut w = Walk {
        shape,
        mid_job: v.cursor.is_some(),
        v,
        leaf_depth: None,
        entries: 0,
        extents: Vec::new(),
        levels: Vec::new(),
    };
    let mut path = Vec::new();
    w.node(&v.root, &mut path, None, None)?;
    w.root_runs()?;
    let depth = w.leaf_depth.unwrap_or(0);
    if depth + 1 != v.height as usize {
        return Err(bad(
            &[],
            format!("height {} but leaves at depth {depth}", v.height),
        ));
    }
    w.extents.sort();
    for p in w.extents.windows(2) {
        if p[0].end() > p[1].start {
            return Err(bad(
                &[],
                format!("extents {:?} and {:?} overlap", p[0], p[1]),
            ));
        }
    }
    versions(&w.levels)?;
    Ok(w.entries)
}

impl Walk<'_> {
    /// 11: the root's runs (c > 1) only on a non-leaf root, each `Run::check`ed, newest first
    /// (every sequence number of a run above those of the next), and all newer than every
    /// d-tree below the root (V1 for the runs: their data has not been drained yet).
    fn root_runs(&mut self) -> Result<()> {
        let runs = &self.v.root.runs;
        if runs.is_empty() {
            return Ok(());
        }
        if self.v.root.is_leaf() {
            return Err(bad(&[], format!("a leaf root with {} runs", runs.len())));
        }
        let mut below = Vec::new();
        super::version::dtrees(&self.v.root, &mut below);
        let newest_below = below.iter().map(|d| d.run.meta().max_seq).max();
        let mut older: Option<u64> = None;
        for (i, r) in runs.iter().enumerate() {
            let run = r.run()?;
            let m = run.meta();
            let count = run.check()?;
            if count != m.entries || count == 0 {
                return Err(bad(
                    &[],
                    format!("root run {i} of {count} entries, metadata {}", m.entries),
                ));
            }
            self.entries += count;
            self.extents.extend_from_slice(&m.extents);
            if older.is_some_and(|o| o <= m.max_seq) {
                return Err(bad(
                    &[],
                    format!("root run {i} is newer than the one before"),
                ));
            }
            older = Some(m.min_seq);
            if newest_below.is_some_and(|b| b >= m.min_seq) {
                return Err(bad(
                    &[],
                    format!("root run {i} holds versions older than the s-tree's"),
                ));
            }
        }
        Ok(())
    }

    fn node(
        &mut self,
        n: &SNode,
        path: &mut Vec<u32>,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Result<()> {
        let f = self.shape.fanout;
        let depth = path.len();
        let is_root = depth == 0;
        // 1, 2: node shape.
        if n.is_leaf() {
            if !n.keys.is_empty() {
                return Err(bad(path, format!("leaf with {} s-keys", n.keys.len())));
            }
            match self.leaf_depth {
                None => self.leaf_depth = Some(depth),
                Some(d) if d != depth => {
                    return Err(bad(path, format!("leaf at depth {depth}, others at {d}")))
                }
                _ => {}
            }
        } else {
            if n.children.len() != n.keys.len() + 1 || n.keys.is_empty() {
                return Err(bad(
                    path,
                    format!("{} s-keys and {} children", n.keys.len(), n.children.len()),
                ));
            }
            let max = if self.mid_job { 2 * f } else { f };
            if n.children.len() > max {
                return Err(bad(
                    path,
                    format!("{} children, at most {max}", n.children.len()),
                ));
            }
            if !is_root && n.children.len() < f.div_ceil(2) {
                return Err(bad(
                    path,
                    format!("{} children, at least {}", n.children.len(), f.div_ceil(2)),
                ));
            }
            if is_root && n.dtree.is_some() {
                return Err(bad(
                    path,
                    "a root with children owns an on-disk d-tree".into(),
                ));
            }
        }
        for (i, k) in n.keys.iter().enumerate() {
            let above = lo.is_none_or(|l| l < &k[..]);
            let below = hi.is_none_or(|h| &k[..] < h);
            let sorted = i == 0 || n.keys[i - 1] < *k;
            if !(above && below && sorted) {
                return Err(bad(
                    path,
                    format!("s-key {i} out of order or outside the interval"),
                ));
            }
        }
        // 4, 5, 7, 10: the d-tree.
        if let Some(d) = &n.dtree {
            self.dtree(n, d, path, lo, hi)?;
        }
        // 6: the sibling group below a node whose children are not leaves.
        if n.children.first().is_some_and(|c| !c.is_leaf()) {
            let o = &self.v.observed;
            let mut bound = (f as u64 * o.sigma_max).max((f as u64 - 1) * o.max_sent);
            if self.mid_job {
                bound += o.max_sent;
            }
            let group = n.group_units();
            if group > bound {
                return Err(bad(
                    path,
                    format!("children hold {group} live units, bound {bound}"),
                ));
            }
        }
        for (i, c) in n.children.iter().enumerate() {
            let clo = if i == 0 { lo } else { Some(&n.keys[i - 1][..]) };
            let chi = n.keys.get(i).map(|k| &k[..]).or(hi);
            path.push(i as u32);
            self.node(c, path, clo, chi)?;
            path.pop();
        }
        Ok(())
    }

    fn dtree(
        &mut self,
        n: &SNode,
        d: &DTree,
        path: &[u32],
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Result<()> {
        let run = d.run.run()?;
        let m = run.meta();
        let count = run.check()?;
        if count != m.entries || count == 0 {
            return Err(bad(
                path,
                format!("d-tree of {count} entries, metadata {}", m.entries),
            ));
        }
        self.entries += count;
        self.extents.extend_from_slice(&m.extents);
        if lo.is_some_and(|l| m.min_key.as_slice() < l)
            || hi.is_some_and(|h| m.max_key.as_slice() >= h)
        {
            return Err(bad(
                path,
                "d-tree keys outside the s-node's interval".into(),
            ));
        }
        // Live counts and the leaf rules.
        let (mut entries, mut bytes) = (0u64, 0u64);
        let lo_live = match &d.live_start {
            Some(s) => std::ops::Bound::Included(s.to_vec()),
            None => std::ops::Bound::Unbounded,
        };
        let mut last: Option<Entry> = None;
        for e in run.iter(lo_live, std::ops::Bound::Unbounded, false, Purpose::Merge) {
            let e = e?;
            entries += 1;
            bytes += e.user_bytes() as u64;
            if n.is_leaf() {
                if let Some(p) = &last {
                    if p.key != e.key && p.kind == Kind::Delete {
                        return Err(bad(
                            path,
                            format!(
                                "leaf key {:?} ends in a tombstone",
                                &p.key[..p.key.len().min(16)]
                            ),
                        ));
                    }
                }
                last = Some(e);
            }
        }
        if last.as_ref().is_some_and(|p| p.kind == Kind::Delete) {
            return Err(bad(
                path,
                "the last key of a leaf ends in a tombstone".into(),
            ));
        }
        if entries != d.live_entries || bytes != d.live_bytes || entries == 0 {
            return Err(bad(
                path,
                format!(
                    "live part holds {entries} entries / {bytes} bytes, recorded {} / {}",
                    d.live_entries, d.live_bytes
                ),
            ));
        }
        if n.is_leaf() {
            if d.live_start.is_some() {
                return Err(bad(path, "a leaf with a stale part".into()));
            }
            let o = &self.v.observed;
            let live = units(entries, bytes);
            let mut bound = if path.is_empty() {
                o.sigma_max
            } else {
                o.sigma_max.max(o.max_sent) + 2 * o.max_group
            };
            if self.mid_job {
                bound += o.max_sent;
            }
            if live > bound && m.min_key != m.max_key {
                return Err(bad(
                    path,
                    format!("leaf holds {live} live units, bound {bound}"),
                ));
            }
        }
        let depth = path.len();
        if self.levels.len() <= depth {
            self.levels.resize(depth + 1, Vec::new());
        }
        self.levels[depth].push((path.to_vec(), d.clone(), n.is_leaf()));
        Ok(())
    }
}

/// One entry of the level streams, ordered like entries (key ascending, seq descending) with
/// the shallower level first among equals.
struct Item {
    e: Entry,
    depth: usize,
    stale: bool,
    src: usize,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> Ordering {
        cmp_entries(&self.e.key, self.e.seq, &o.e.key, o.e.seq)
            .then(self.depth.cmp(&o.depth))
            .reverse()
    }
}

/// All entries of one level (live and stale), one d-tree after another.
type LevelStream = Box<dyn Iterator<Item = Result<(Entry, bool)>>>;

fn level_stream(dtrees: Vec<(Vec<u32>, DTree, bool)>) -> LevelStream {
    Box::new(dtrees.into_iter().flat_map(|(_, d, _)| {
        let run: Result<Arc<crate::run::Run>> = d.run.run().cloned();
        let it: Box<dyn Iterator<Item = Result<(Entry, bool)>>> = match run {
            Err(e) => Box::new(std::iter::once(Err(e))),
            Ok(run) => Box::new(
                run.iter(
                    std::ops::Bound::Unbounded,
                    std::ops::Bound::Unbounded,
                    false,
                    Purpose::Merge,
                )
                .map(move |r| {
                    r.map(|e| {
                        let stale = !d.is_live(&e.key);
                        (e, stale)
                    })
                }),
            ),
        };
        it
    }))
}

/// 8 and 9: the versions of every key across the levels.
fn versions(levels: &[Vec<(Vec<u32>, DTree, bool)>]) -> Result<()> {
    let mut streams: Vec<LevelStream> = levels.iter().map(|l| level_stream(l.clone())).collect();
    let mut heap = BinaryHeap::new();
    let pull =
        |heap: &mut BinaryHeap<Item>, streams: &mut Vec<LevelStream>, src: usize| -> Result<()> {
            if let Some(r) = streams[src].next() {
                let (e, stale) = r?;
                heap.push(Item {
                    e,
                    depth: src,
                    stale,
                    src,
                });
            }
            Ok(())
        };
    for i in 0..streams.len() {
        pull(&mut heap, &mut streams, i)?;
    }
    let mut group: Vec<Item> = Vec::new();
    loop {
        let next = heap.pop();
        if let Some(it) = &next {
            pull(&mut heap, &mut streams, it.src)?;
        }
        let new_key = match (&next, group.first()) {
            (Some(it), Some(g)) => it.e.key != g.e.key,
            _ => true,
        };
        if new_key && !group.is_empty() {
            key_versions(&group)?;
            group.clear();
        }
        match next {
            Some(it) => group.push(it),
            None => return Ok(()),
        }
    }
}

/// Checks the versions of one key (newest first across levels).
fn key_versions(group: &[Item]) -> Result<()> {
    let key = &group[0].e.key;
    let show = || String::from_utf8_lossy(&key[..key.len().min(24)]).into_owned();
    let err = |what: String| Error::corruption("nbtree", None, format!("key {:?}: {what}", show()));
    let live: Vec<&Item> = group.iter().filter(|i| !i.stale).collect();
    for w in live.windows(2) {
        if w[0].e.seq == w[1].e.seq {
            return Err(err(format!(
                "version {} live at depths {} and {}",
                w[0].e.seq, w[0].depth, w[1].depth
            )));
        }
        if w[0].depth > w[1].depth {
            return Err(err(format!(
                "version {} at depth {} is newer than version {} above it at depth {}",
                w[0].e.seq, w[0].depth, w[1].e.seq, w[1].depth
            )));
        }
    }
    // The newest stale version at each depth against the newest live version deeper.
    let mut depths: Vec<usize> = group.iter().filter(|i| i.stale).map(|i| i.depth).collect();
    depths.dedup();
    for d in depths {
        let Some(newest) = group.iter().find(|i| i.stale && i.depth == d) else {
            continue;
        };
        let deeper = live.iter().find(|i| i.depth > d).map(|i| i.e.seq);
        let ok = match deeper {
            Some(s) if s == newest.e.seq => true,
            Some(s) if s > newest.e.seq => false,
            _ => newest.e.kind == Kind::Delete,
        };
        if !ok {
            return Err(err(format!(
                "stale version {} at depth {d} matches no live version below (newest there {deeper:?})",
                newest.e.seq
            )));
        }
    }
    Ok(())
}
