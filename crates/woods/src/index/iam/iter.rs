//! Read sources over one pinned version: each level read as one stream that visits its nodes
//! in key order (or reversed), opening each node's sequences lazily and merging them (§3.10).

use std::ops::Bound;
use std::sync::Arc;

use super::node::{Node, Version};
use crate::entry::Entry;
use crate::error::Result;
use crate::merge::{EntryIter, MergeIter};
use crate::storage::Purpose;

/// Whether the node's range meets the bounds.
pub fn node_in_bounds(n: &Node, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    if n.seqs.is_empty() {
        return false;
    }
    let above_lo = match lo {
        Bound::Included(l) => n.hi.as_slice() >= l.as_slice(),
        Bound::Excluded(l) => n.hi.as_slice() > l.as_slice(),
        Bound::Unbounded => true,
    };
    let below_hi = match hi {
        Bound::Included(h) => n.lo.as_slice() <= h.as_slice(),
        Bound::Excluded(h) => n.lo.as_slice() < h.as_slice(),
        Bound::Unbounded => true,
    };
    above_lo && below_hi
}

/// The merge of one node's sequences within the bounds. Sources are numbered oldest first, so
/// that of two copies of one version the newest sequence's is kept.
pub fn node_iter(
    node: &Node,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    reverse: bool,
    purpose: Purpose,
) -> Result<MergeIter> {
    let mut sources: Vec<EntryIter> = Vec::with_capacity(node.seqs.len());
    for s in node.seqs.iter().rev() {
        sources.push(Box::new(s.open()?.iter(
            lo.clone(),
            hi.clone(),
            reverse,
            purpose,
        )));
    }
    Ok(MergeIter::new(sources, reverse))
}

/// One level as a stream: its nodes one after another, holding the version.
pub struct LevelIter {
    version: Arc<Version>,
    level: usize,
    /// Positions of the nodes still to visit, in visiting order (reversed when `reverse`).
    todo: Vec<usize>,
    current: Option<MergeIter>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    purpose: Purpose,
    failed: bool,
}

impl LevelIter {
    /// `None` when no node of the level meets the bounds.
    pub fn new(
        version: Arc<Version>,
        level: usize,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
        purpose: Purpose,
    ) -> Option<LevelIter> {
        let nodes = version.levels.get(level)?;
        let mut todo: Vec<usize> = (0..nodes.len())
            .filter(|&i| node_in_bounds(&nodes[i], &lo, &hi))
            .collect();
        if todo.is_empty() {
            return None;
        }
        // Popped from the back.
        if !reverse {
            todo.reverse();
        }
        Some(LevelIter {
            version,
            level,
            todo,
            current: None,
            lo,
            hi,
            reverse,
            purpose,
            failed: false,
        })
    }
}

impl Iterator for LevelIter {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(cur) = &mut self.current {
                match cur.next() {
                    Some(Err(e)) => {
                        self.failed = true;
                        return Some(Err(e));
                    }
                    Some(ok) => return Some(ok),
                    None => self.current = None,
                }
            }
            let i = self.todo.pop()?;
            let node = self.version.levels[self.level][i].clone();
            match node_iter(&node, &self.lo, &self.hi, self.reverse, self.purpose) {
                Ok(it) => self.current = Some(it),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}
