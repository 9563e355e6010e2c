//! Range reads (spec §3.10): the s-nodes of one level have disjoint intervals, so each level is
//! one sorted stream of the live parts of its d-trees, read one d-tree after another; the Db
//! merges the streams of all levels, and of each of the root's runs, with its memtables. Each stream holds the version it was
//! made from, so the d-trees it reads stay allocated while it lives.

use std::ops::Bound;
use std::sync::Arc;

use super::version::{DTree, SNode, Version};
use crate::merge::{Concat, EntryIter, Parts};
use crate::storage::Purpose;

/// Whether [a, b) (unbounded where `None`) meets the bounds.
fn interval_meets(
    a: Option<&[u8]>,
    b: Option<&[u8]>,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
) -> bool {
    let below = match (b, lo) {
        (Some(b), Bound::Included(l) | Bound::Excluded(l)) => b <= l.as_slice(),
        _ => false,
    };
    let above = match (a, hi) {
        (Some(a), Bound::Included(h)) => a > h.as_slice(),
        (Some(a), Bound::Excluded(h)) => a >= h.as_slice(),
        _ => false,
    };
    !below && !above
}

/// Whether the live part of `d` may hold keys within the bounds.
fn dtree_meets(d: &DTree, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let m = d.run.meta();
    if m.entries == 0 || d.live_entries == 0 {
        return false;
    }
    let min = match &d.live_start {
        Some(s) if s[..] > m.min_key[..] => &s[..],
        _ => &m.min_key[..],
    };
    let above_lo = match lo {
        Bound::Included(l) => m.max_key.as_slice() >= l.as_slice(),
        Bound::Excluded(l) => m.max_key.as_slice() > l.as_slice(),
        Bound::Unbounded => true,
    };
    let below_hi = match hi {
        Bound::Included(h) => min <= h.as_slice(),
        Bound::Excluded(h) => min < h.as_slice(),
        Bound::Unbounded => true,
    };
    min <= m.max_key.as_slice() && above_lo && below_hi
}

/// Appends, per level (depth), the d-trees whose live parts meet the bounds, in key order.
fn collect(
    n: &SNode,
    depth: usize,
    a: Option<&[u8]>,
    b: Option<&[u8]>,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    levels: &mut Vec<Vec<DTree>>,
) {
    if !interval_meets(a, b, lo, hi) {
        return;
    }
    if levels.len() <= depth {
        levels.resize(depth + 1, Vec::new());
    }
    if let Some(d) = n.dtree.as_ref().filter(|d| dtree_meets(d, lo, hi)) {
        levels[depth].push(d.clone());
    }
    for (i, c) in n.children.iter().enumerate() {
        let ca = if i == 0 { a } else { Some(&n.keys[i - 1][..]) };
        let cb = n.keys.get(i).map(|k| &k[..]).or(b);
        collect(c, depth + 1, ca, cb, lo, hi, levels);
    }
}

/// One source per s-tree level that holds something within the bounds.
pub fn level_sources(
    v: &Arc<Version>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    purpose: Purpose,
) -> Vec<EntryIter> {
    let mut levels = Vec::new();
    collect(&v.root, 0, None, None, &lo, &hi, &mut levels);
    // Each of the root's runs (c > 1) spans the whole key space: a source of its own.
    let runs = v.root.runs.iter().map(|r| vec![DTree::whole(r.clone())]);
    runs.filter(|l| dtree_meets(&l[0], &lo, &hi))
        .chain(levels)
        .filter(|l| !l.is_empty())
        .map(|mut dtrees| -> EntryIter {
            if reverse {
                dtrees.reverse();
            }
            let (v, lo, hi) = (v.clone(), lo.clone(), hi.clone());
            let parts = Parts::Span {
                next: 0,
                end: dtrees.len(),
                reverse: false,
            };
            Box::new(Concat::new(parts, move |i| {
                let _pin = &v;
                let d: &DTree = &dtrees[i];
                Ok(d.run
                    .run()?
                    .iter(d.live_lo(lo.clone()), hi.clone(), reverse, purpose))
            }))
        })
        .collect()
}
