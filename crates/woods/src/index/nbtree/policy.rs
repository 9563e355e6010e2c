//! What the job does next, as a pure function of the s-tree and the cursor (so it is tested
//! without I/O), and the upper bound of the work a job has left, which is the index's debt.
//!
//! The final NB-tree's `HandleFullSNode` (spec §3.5) unrolled into steps:
//!
//! ```text
//! root drain:   Z into the root's children (or, while the root is a leaf, into its d-tree)
//! AfterFlush:   children are leaves  -> LeafSplits
//!               else C* = argmax live |C| (ties: leftmost); |C*| > σ -> Flush(C*)
//!               else                 -> Splits
//! Flush(N):     move N's smallest live entries, `target` units, into its children: one merge
//!               per receiving child, in parallel, one commit (lazy removal: N's live-start
//!               pointer advances)
//! LeafSplits:   split each leaf child of N holding more than σ, each once: one split per
//!               leaf, in parallel, one commit
//! Splits:       up the path: split each node with more than f children (the root: a new root)
//! ```
//!
//! With [`Shape::split_in_merge`] (the default) a flush into a leaf that will surely leave it
//! over σ splits it in that merge, into halves of at most σ, which LeafSplits then passes by:
//! it splits only the leaves a merge could not tell would end up over σ.

use std::sync::Arc;

use super::version::{node_at, Cursor, Phase, SNode};
use crate::error::{Error, Result};
use crate::filter::BloomBuilder;
use crate::memtable::ENTRY_OVERHEAD;
use crate::storage::PAGE_SIZE;

/// The structure's parameters as the policy sees them.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// σ in units (the memtable's size).
    pub sigma: u64,
    /// f, the most children an s-node has between jobs.
    pub fanout: usize,
    /// Whether a flush into a leaf that it will surely fill past σ splits the leaf in that
    /// merge (one read and write of it), rather than in the LeafSplits step after the flush
    /// commits (the paper's order: a second read and write of it). The halves are the same.
    pub split_in_merge: bool,
    /// The d-trees' bloom bits per key (what finishing a d-tree costs depends on it).
    pub bloom_bits: u32,
}

/// What finishing a d-tree costs at most beside what grows with its size: its first and last
/// pages (the last data page, the header), a partly filled page for the filter and for the
/// first index level (those of the levels above are within [`finish_bound`]'s sixteenth), and
/// a page for the finishing steps' rounding (`job::Pipe::step`).
pub const FINISH_DTREE_UNITS: u64 = 5 * PAGE_SIZE as u64;

/// Upper bound of the units that finishing the d-trees (at most `dtrees`) a merge writes from
/// `units` units charges (`job::Pipe::step`: a finishing step is charged the pages it places,
/// 4 KiB each, at least an eighth of what it was given, that is a byte per bloom probe): per key
/// (at most one per 64 units) its probes, its filter bits at 4 KiB a page, and a step; the index
/// levels a sixteenth of the units (an index entry per data page of at least 2 KiB: keys of up
/// to about 80 bytes); [`FINISH_DTREE_UNITS`] per d-tree.
pub fn finish_bound(units: u64, dtrees: u64, shape: Shape) -> u64 {
    let per_key = match shape.bloom_bits {
        0 => 1,
        b => u64::from(BloomBuilder::probes(b)) + u64::from(b).div_ceil(4) + 1,
    };
    units.saturating_mul(per_key) / ENTRY_OVERHEAD
        + units / 16
        + dtrees.saturating_mul(FINISH_DTREE_UNITS)
}

/// The d-trees of a flush into the children of `n`: one per child, two where the children are
/// leaves (a merge may split its leaf).
fn flush_dtrees(n: &SNode, children: usize) -> usize {
    if n.children.first().is_some_and(|c| c.is_leaf()) {
        2 * children
    } else {
        children
    }
}

/// Upper bound of a merge (or split) that reads `units` units, writes them into at most
/// `dtrees` d-trees and finishes those.
pub fn merge_cost(units: u64, dtrees: usize, shape: Shape) -> u64 {
    units
        .saturating_mul(2)
        .saturating_add(finish_bound(units, dtrees as u64, shape))
}

/// The next step that does I/O or changes the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Merge the moved part of the node at the cursor's path into its child `child` (the first
    /// child that may receive entries; the job skips children whose interval holds none).
    FlushChild { child: usize },
    /// Split the leaf child `child` of the node at the cursor's path.
    SplitLeaf { child: usize },
    /// Split the node at the cursor's path (the root: it becomes the child of a new root).
    SplitNode,
    /// The job is finished.
    Done,
}

fn bad(what: String) -> Error {
    Error::corruption("nbtree job", None, what)
}

fn node<'a>(root: &'a Arc<SNode>, path: &[u32]) -> Result<&'a Arc<SNode>> {
    node_at(root, path).ok_or_else(|| bad(format!("no s-node at path {path:?}")))
}

/// Whether a leaf of `units` live units should split: over σ, and more than one key in it (a
/// single key's versions cannot be divided).
pub fn leaf_oversized(leaf: &SNode, sigma: u64) -> bool {
    leaf.dtree
        .as_ref()
        .is_some_and(|d| d.live_units() > sigma && d.run.meta().min_key != d.run.meta().max_key)
}

/// The child a flush recurses into: the largest by live size, the leftmost of equals.
pub fn argmax_child(n: &SNode) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for (i, c) in n.children.iter().enumerate() {
        let u = c.live_units();
        if best.is_none_or(|(_, b)| u > b) {
            best = Some((i, u));
        }
    }
    best.map(|(i, _)| i)
}

/// How much a node that received `received` units this job sends on when it is flushed: σ, as
/// in the paper, or what it received if that is more. Flushes cut at key boundaries, so with
/// variable-size entries a node may receive a little more than σ; sending at least as much
/// keeps the sibling groups below from growing by that rounding job after job.
pub fn flush_target(sigma: u64, received: u64) -> u64 {
    sigma.max(received)
}

/// Applies the decisions that need neither I/O nor a commit, from `cursor` on, and returns the
/// cursor where the next step starts and that step.
pub fn settle(root: &Arc<SNode>, mut cursor: Cursor, shape: Shape) -> Result<(Cursor, Action)> {
    loop {
        match cursor.phase.clone() {
            Phase::Flush { target, moved, .. } => {
                if cursor.path.is_empty() {
                    return Err(bad("a flush of the root in the persisted cursor".into()));
                }
                let n = node(root, &cursor.path)?;
                if n.is_leaf() {
                    return Err(bad(format!("flush of leaf {:?}", cursor.path)));
                }
                match &n.dtree {
                    Some(d) if moved < target => {
                        let child = d.live_start.as_ref().map_or(0, |s| n.child_index(s));
                        return Ok((cursor, Action::FlushChild { child }));
                    }
                    _ => cursor.phase = Phase::AfterFlush { sent: moved },
                }
            }
            Phase::AfterFlush { sent } => {
                let n = node(root, &cursor.path)?;
                if n.is_leaf() {
                    return Err(bad(format!("leaf {:?} after a flush", cursor.path)));
                }
                if n.children[0].is_leaf() {
                    cursor.phase = Phase::LeafSplits { next: 0 };
                    continue;
                }
                match argmax_child(n) {
                    Some(i) if n.children[i].live_units() > shape.sigma => {
                        cursor.path.push(i as u32);
                        cursor.phase = Phase::Flush {
                            received: sent,
                            target: flush_target(shape.sigma, sent),
                            moved: 0,
                        };
                    }
                    _ => cursor.phase = Phase::Splits,
                }
            }
            Phase::LeafSplits { next } => {
                let n = node(root, &cursor.path)?;
                match n
                    .children
                    .iter()
                    .enumerate()
                    .skip(next as usize)
                    .find(|(_, c)| c.is_leaf() && leaf_oversized(c, shape.sigma))
                {
                    Some((child, _)) => return Ok((cursor, Action::SplitLeaf { child })),
                    None => cursor.phase = Phase::Splits,
                }
            }
            Phase::Splits => {
                let n = node(root, &cursor.path)?;
                let split = if n.is_leaf() {
                    // Only the root is split as a leaf here (other leaves split in LeafSplits).
                    cursor.path.is_empty() && leaf_oversized(n, shape.sigma)
                } else {
                    n.children.len() > shape.fanout
                };
                if split {
                    return Ok((cursor, Action::SplitNode));
                }
                if cursor.path.pop().is_none() {
                    return Ok((cursor, Action::Done));
                }
            }
        }
    }
}

/// The most leaf children of `x` that can exceed σ once `x` sends them `m` units in total:
/// the leaves closest to σ are filled first. Returns how many and their live units together.
fn leaves_that_may_split(x: &SNode, m: u64, sigma: u64) -> (usize, u64) {
    let mut need: Vec<(u64, u64)> = x
        .children
        .iter()
        .map(|c| {
            let live = c.live_units();
            ((sigma + 1).saturating_sub(live), live)
        })
        .collect();
    need.sort_unstable();
    let (mut used, mut k, mut units) = (0u64, 0usize, 0u64);
    for (deficit, live) in need {
        if used + deficit > m {
            break;
        }
        used += deficit;
        k += 1;
        units += live;
    }
    (k, units)
}

/// Upper bound, in units read plus written, of what a job does below a non-root node `x` that
/// receives up to `incoming` more units and whose parent sends `base` in total (which sets
/// x's flush target): flushing x if it then holds more than σ, splitting its oversized leaf
/// children or (the worst case over its children) recursing into one, and splitting x itself
/// if it can end up with more than f children. `g` is the largest key group a cut may add to
/// a target. Returns the bound and whether x may split.
pub fn descent_bound(x: &SNode, incoming: u64, base: u64, g: u64, shape: Shape) -> (u64, bool) {
    if x.is_leaf() {
        return (0, false);
    }
    let lx = x.live_units().saturating_add(incoming);
    if lx <= shape.sigma {
        return (0, false);
    }
    let m = lx.min(flush_target(shape.sigma, base).saturating_add(g));
    let flush = merge_cost(
        m + x.group_units(),
        flush_dtrees(x, x.children.len()),
        shape,
    );
    let (below, gains) = below_bound(x, m, m, g, shape);
    let may_split = x.children.len() + gains > shape.fanout;
    // x keeps at most what it did not send, and a split reads and writes that.
    let own = if may_split {
        merge_cost(lx - lx.min(shape.sigma), 2, shape)
    } else {
        0
    };
    (flush + below + own, may_split)
}

/// The work after `x` sent up to `m` units to its children (whose parent's send total, the
/// children's flush base, is `base`): leaf splits, or the worst recursion. Returns the bound and
/// how many children x may gain.
fn below_bound(x: &SNode, m: u64, base: u64, g: u64, shape: Shape) -> (u64, usize) {
    if x.children.first().is_some_and(|c| c.is_leaf()) {
        let (k, units) = leaves_that_may_split(x, m, shape.sigma);
        // Leaves split in the flush's merges cost nothing more than the flush; the bound
        // still counts a split after it for each, as a merge cannot know beforehand whether
        // compaction will leave its leaf over σ.
        let cost = if k == 0 {
            0
        } else {
            merge_cost(m + units, 2 * k, shape)
        };
        (cost, k)
    } else {
        let mut worst = 0;
        let mut split = false;
        for c in &x.children {
            let (b, s) = descent_bound(c, m, base, g, shape);
            worst = worst.max(b);
            split |= s;
        }
        (worst, usize::from(split))
    }
}

/// The key group a cut may add to a flush target: the largest seen so far (a larger one makes
/// one bound low by its size, and is then seen), at least one small entry.
pub fn granule(observed_max_group: u64) -> u64 {
    observed_max_group.max(2 * ENTRY_OVERHEAD)
}

/// Upper bound of a whole job that drains a frozen memtable of `z` units into `root`.
pub fn job_bound(root: &SNode, z: u64, g: u64, shape: Shape) -> u64 {
    if root.is_leaf() {
        // Merge Z into the root's d-tree, then possibly split it in two.
        let total = z + root.live_units();
        let split = if total > shape.sigma {
            merge_cost(total, 2, shape)
        } else {
            0
        };
        return merge_cost(total, 1, shape) + split;
    }
    let dtrees = flush_dtrees(root, root.children.len());
    let flush = merge_cost(z + root.group_units(), dtrees, shape);
    // The root splits without I/O (its d-tree is the memtables).
    flush + below_bound(root, z, z, g, shape).0
}

/// Upper bound of what is left of a job whose cursor (after the root's drain) is `cursor`.
pub fn rest_bound(root: &Arc<SNode>, cursor: &Cursor, g: u64, shape: Shape) -> u64 {
    let Some(n) = node_at(root, &cursor.path) else {
        return 0;
    };
    let (here, gains) = match &cursor.phase {
        Phase::Flush { target, moved, .. } => {
            let m = n
                .live_units()
                .min(target.saturating_sub(*moved).saturating_add(g));
            // Children before the live start have had their part.
            let next = n
                .dtree
                .as_ref()
                .and_then(|d| d.live_start.as_ref())
                .map_or(0, |s| n.child_index(s));
            let receivers = &n.children[next.min(n.children.len())..];
            let rest: u64 = receivers.iter().map(|c| c.live_units()).sum();
            // What the node sends in all: what it moved and at most `m` more.
            let (below, gains) = below_bound(n, m, moved.saturating_add(m), g, shape);
            let flush = merge_cost(m + rest, flush_dtrees(n, receivers.len()), shape);
            (flush + below, gains)
        }
        Phase::AfterFlush { sent } => below_bound(n, 0, *sent, g, shape),
        Phase::LeafSplits { next } => {
            let over: Vec<u64> = n
                .children
                .iter()
                .skip(*next as usize)
                .filter(|c| c.is_leaf() && leaf_oversized(c, shape.sigma))
                .map(|c| c.live_units())
                .collect();
            let cost = match over.len() {
                0 => 0,
                k => merge_cost(over.iter().sum::<u64>(), 2 * k, shape),
            };
            (cost, over.len())
        }
        Phase::Splits => (0, 0),
    };
    // The splits on the way back up: the node at the path may gain `gains` children, each
    // ancestor one; a non-root node that may exceed f is read and written once.
    let mut up = 0u64;
    let mut m = root;
    let mut nodes = vec![];
    for &i in &cursor.path {
        match m.children.get(i as usize) {
            Some(c) => {
                nodes.push(c.clone());
                m = c;
            }
            None => return here,
        }
    }
    if root.is_leaf() && leaf_oversized(root, shape.sigma) {
        up += merge_cost(root.live_units(), 2, shape);
    }
    // Whether the node below on the path may split (and so give its parent a child).
    let mut below_splits = false;
    for (depth, p) in nodes.iter().enumerate().rev() {
        let last = depth + 1 == nodes.len();
        let extra = if last {
            gains
        } else {
            usize::from(below_splits)
        };
        below_splits = p.children.len() + extra > shape.fanout;
        if below_splits {
            let mut live = p.live_units();
            if let (true, Phase::Flush { target, moved, .. }) = (last, &cursor.phase) {
                // It will have moved at least its target, or everything.
                live -= live.min(target.saturating_sub(*moved));
            }
            up += merge_cost(live, 2, shape);
        }
    }
    here + up
}
