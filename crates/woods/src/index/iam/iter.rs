//! Read sources over one pinned version: each level read as one stream that visits its nodes
//! in key order (or reversed), opening each node's sequences lazily and merging them (§3.10).

use std::ops::Bound;
use std::sync::Arc;

use super::node::{Node, Version};
use crate::error::Result;
use crate::merge::{parts_meeting, Concat, EntryIter, MergeIter};
use crate::storage::Purpose;

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

/// One level as a stream: its nodes one after another, holding the version; `None` when no
/// node of the level meets the bounds.
pub fn level(
    version: Arc<Version>,
    level: usize,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    purpose: Purpose,
) -> Option<EntryIter> {
    let nodes = version.levels.get(level)?;
    // Nodes without sequences are among those found, and yield nothing.
    let todo = parts_meeting(nodes, reverse, &lo, &hi, |n| (&n.lo[..], &n.hi[..]))?;
    Some(Box::new(Concat::new(todo, move |i| {
        node_iter(&version.levels[level][i], &lo, &hi, reverse, purpose)
    })))
}
