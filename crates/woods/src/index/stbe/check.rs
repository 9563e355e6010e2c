//! `Index::check` and `Index::stats` of the `stbe` index: the trunk invariants of spec §6
//! (ranges, fanout, branch counts, start indexes, batches, reference counts) and every
//! branch's own check; the shape for `woods stats`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::branch::Branch;
use super::node::Node;
use super::policy::Limits;
use super::Version;
use crate::error::{Error, Result};
use crate::index::IndexStats;
use crate::storage::{Extent, PAGE_SIZE};

fn bad(detail: String) -> Error {
    Error::corruption("stbe trunk", None, detail)
}

struct Walk<'a> {
    limits: &'a Limits,
    refs: HashMap<u64, (Arc<Branch>, u64)>,
}

impl Walk<'_> {
    fn node(&mut self, n: &Node, lo: &[u8], hi: Option<&[u8]>, is_root: bool) -> Result<()> {
        let id = n.id;
        if n.lo.as_ref() != lo || n.hi() != hi {
            return Err(bad(format!(
                "node {id}: range differs from its parent's pivots"
            )));
        }
        if hi.is_some_and(|h| h <= lo) {
            return Err(bad(format!("node {id}: empty range")));
        }
        if n.branches.len() > self.limits.max_branches {
            return Err(bad(format!(
                "node {id} holds {} branches, above the cap of {}",
                n.branches.len(),
                self.limits.max_branches
            )));
        }
        if n.children.len() > self.limits.max_children {
            return Err(bad(format!(
                "node {id} has {} children, above F + H = {}",
                n.children.len(),
                self.limits.max_children
            )));
        }
        // Batches are contiguous; every reference has keys in the node's range.
        let mut seen: HashMap<u64, usize> = HashMap::new();
        for (i, r) in n.branches.iter().enumerate() {
            if r.batch != 0 {
                if let Some(&last) = seen.get(&r.batch) {
                    if last + 1 != i {
                        return Err(bad(format!(
                            "node {id}: batch {} is not contiguous",
                            r.batch
                        )));
                    }
                }
                seen.insert(r.batch, i);
            }
            if !r.branch.overlaps(&n.lo, n.hi()) && !is_root {
                return Err(bad(format!(
                    "node {id} references branch {} with no key in its range",
                    r.branch.id
                )));
            }
            self.refs
                .entry(r.branch.id)
                .or_insert_with(|| (r.branch.clone(), 0))
                .1 += 1;
        }
        if n.is_leaf() {
            if !n.children.is_empty() {
                return Err(bad(format!("leaf {id} has children")));
            }
            return Ok(());
        }
        if n.children.is_empty() {
            return Err(bad(format!("internal node {id} has no children")));
        }
        let mut min_start = u64::MAX;
        for (i, c) in n.children.iter().enumerate() {
            if c.node.height + 1 != n.height {
                return Err(bad(format!(
                    "node {id}: child {} at the wrong height",
                    c.node.id
                )));
            }
            if c.start < n.base || c.start > n.end() {
                return Err(bad(format!(
                    "node {id}: child {} starts at {}, outside {}..={}",
                    c.node.id,
                    c.start,
                    n.base,
                    n.end()
                )));
            }
            let p = n.pos(c.start);
            if p > 0 && p < n.branches.len() {
                let (a, b) = (n.branches[p - 1].batch, n.branches[p].batch);
                if a != 0 && a == b {
                    return Err(bad(format!(
                        "node {id}: batch {a} is partly live for child {}",
                        c.node.id
                    )));
                }
            }
            min_start = min_start.min(c.start);
            let (clo, chi) = n.child_range(i);
            if i == 0 && clo != n.lo.as_ref() {
                return Err(bad(format!(
                    "node {id}: first child does not start with it"
                )));
            }
            if chi.is_some_and(|h| h <= clo) {
                return Err(bad(format!("node {id}: pivots out of order")));
            }
            self.node(&c.node, clo, chi, false)?;
        }
        if !n.branches.is_empty() && min_start > n.base {
            return Err(bad(format!(
                "node {id}: its oldest branch is dead for every child but was kept"
            )));
        }
        Ok(())
    }
}

/// Verifies the trunk's own invariants (ranges and pivots, heights, fanout, branch counts,
/// start indexes, batches, every reference inside its node's range); returns each branch with
/// its number of references.
pub fn check_trunk(v: &Version, limits: &Limits) -> Result<HashMap<u64, (Arc<Branch>, u64)>> {
    let mut w = Walk {
        limits,
        refs: HashMap::new(),
    };
    if v.root.height == 0 || !v.root.lo.is_empty() || v.root.hi.is_some() {
        return Err(bad("the root is a leaf or does not cover every key".into()));
    }
    w.node(&v.root, b"", None, true)?;
    Ok(w.refs)
}

/// Verifies the trunk's invariants and every branch (checksums, order, filter); returns the
/// entries (all versions) of the distinct branches.
pub fn check(v: &Version, limits: &Limits) -> Result<u64> {
    let refs = check_trunk(v, limits)?;
    let w = Walk { limits, refs };
    let mut total = 0u64;
    let mut extents: Vec<(Extent, u64)> = Vec::new();
    let mut ids: Vec<&u64> = w.refs.keys().collect();
    ids.sort();
    for id in ids {
        let (b, count) = &w.refs[id];
        if Arc::strong_count(b) < *count as usize {
            return Err(bad(format!("branch {id}: fewer holds than references")));
        }
        let run = b.run()?;
        let n = run.check()?;
        if n != b.meta().entries {
            return Err(bad(format!(
                "branch {id} holds {n} entries, its metadata {}",
                b.meta().entries
            )));
        }
        if n > 0 && !run.has_quotient_filter() {
            return Err(bad(format!("branch {id} has no quotient filter")));
        }
        total += n;
        extents.extend(b.meta().extents.iter().map(|e| (*e, *id)));
    }
    extents.sort();
    for p in extents.windows(2) {
        if p[0].0.end() > p[1].0.start {
            return Err(bad(format!(
                "branches {} and {} share pages ({:?}, {:?})",
                p[0].1, p[1].1, p[0].0, p[1].0
            )));
        }
    }
    Ok(total)
}

/// Per trunk level: nodes, branch references (total and most in a node), pending batch
/// references, and the most branches live for one child.
#[derive(Default)]
struct Level {
    nodes: u64,
    refs: u64,
    max_refs: u64,
    pending: u64,
    max_live: u64,
    children: u64,
}

/// The shape of a version for `stats()`.
pub fn shape(v: &Version, _limits: &Limits) -> IndexStats {
    let mut levels: BTreeMap<u32, Level> = BTreeMap::new();
    let mut branches: HashMap<u64, Arc<Branch>> = HashMap::new();
    fn walk(n: &Node, levels: &mut BTreeMap<u32, Level>, branches: &mut HashMap<u64, Arc<Branch>>) {
        let l = levels.entry(n.height).or_default();
        l.nodes += 1;
        l.refs += n.branches.len() as u64;
        l.max_refs = l.max_refs.max(n.branches.len() as u64);
        l.pending += n.branches.iter().filter(|r| r.batch != 0).count() as u64;
        l.children += n.children.len() as u64;
        for i in 0..n.children.len() {
            l.max_live = l.max_live.max(n.live_for(i).count() as u64);
        }
        for r in &n.branches {
            branches
                .entry(r.branch.id)
                .or_insert_with(|| r.branch.clone());
        }
        for c in &n.children {
            walk(&c.node, levels, branches);
        }
    }
    walk(&v.root, &mut levels, &mut branches);
    let mut s = IndexStats {
        kind: "stbe".into(),
        height: u64::from(v.root.height) + 1,
        ..Default::default()
    };
    for (h, l) in levels.iter().rev() {
        let what = if *h == 0 {
            "leaves".to_string()
        } else if *h == v.root.height {
            "root".to_string()
        } else {
            format!("height {h}")
        };
        s.shape.push(format!(
            "{what}: {} nodes, {} children, {} branch refs (max {} in a node, {} pending), max {} live for a child",
            l.nodes, l.children, l.refs, l.max_refs, l.pending, l.max_live
        ));
    }
    let bytes: u64 = branches.values().map(|b| b.meta().pages()).sum::<u64>() * PAGE_SIZE as u64;
    s.shape.push(format!(
        "{} distinct branches, {bytes} bytes",
        branches.len()
    ));
    for b in branches.values() {
        s.entries += b.meta().entries;
        s.filter_bytes += b.meta().filter_pages * PAGE_SIZE as u64;
    }
    s.counters.insert("branches".into(), branches.len() as u64);
    s.counters
        .insert("trunk_nodes".into(), levels.values().map(|l| l.nodes).sum());
    s
}
