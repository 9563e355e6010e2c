//! Trunk nodes: pivots (the children's lower bounds), child pointers with per-child start
//! indexes, and branch references, oldest first, numbered logically from `base` so that
//! dropping old branches or replacing a batch by its compaction output is a well-defined remap
//! of the start indexes (spec §2.7).
//!
//! Nodes are immutable once published: an edit copies the nodes on its path (`Arc::make_mut`)
//! and publishes a new root, so readers of older versions are never disturbed.

use std::sync::Arc;

use super::branch::{Branch, Key};

/// A reference from a node to a branch. `batch` is the pending compaction the reference
/// belongs to (the id of the flush that brought it), or 0 once settled: a compaction output,
/// a memtable branch in the root, or a batch that needed no compaction.
#[derive(Clone, Debug)]
pub struct BranchRef {
    pub branch: Arc<Branch>,
    pub batch: u64,
}

/// A child pointer and the logical index of the parent's first branch still live for it.
#[derive(Clone, Debug)]
pub struct Child {
    pub node: Arc<Node>,
    pub start: u64,
}

/// A trunk node; a leaf has no children (all its branches are live).
#[derive(Clone, Debug)]
pub struct Node {
    /// Unique id (persisted); splits give new pieces new ids except the first.
    pub id: u64,
    /// 0 for leaves; a node's height never changes.
    pub height: u32,
    /// Smallest key of the node's range (empty: unbounded below).
    pub lo: Key,
    /// End of the node's range, exclusive (`None`: unbounded).
    pub hi: Option<Key>,
    /// Logical number of `branches[0]`.
    pub base: u64,
    /// Branch references, oldest first.
    pub branches: Vec<BranchRef>,
    /// Children in key order; `children[0].node.lo == lo`, and each child's range ends where
    /// the next one's starts (the pivots are the children's lower bounds).
    pub children: Vec<Child>,
    /// Leaves: estimated units of data that newer versions in the leaf shadow (space
    /// reclamation).
    pub dead: u64,
}

impl Node {
    /// An empty node.
    pub fn new(id: u64, height: u32, lo: Key, hi: Option<Key>) -> Node {
        Node {
            id,
            height,
            lo,
            hi,
            base: 0,
            branches: Vec::new(),
            children: Vec::new(),
            dead: 0,
        }
    }

    pub fn is_leaf(&self) -> bool {
        self.height == 0
    }

    /// One past the logical number of the newest branch.
    pub fn end(&self) -> u64 {
        self.base + self.branches.len() as u64
    }

    pub fn hi(&self) -> Option<&[u8]> {
        self.hi.as_deref()
    }

    /// Whether `key` lies in the node's range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.lo.as_ref() && self.hi().is_none_or(|h| key < h)
    }

    /// The child whose range holds `key` (the node must be internal and hold `key`).
    pub fn child_for(&self, key: &[u8]) -> usize {
        self.children
            .partition_point(|c| c.node.lo.as_ref() <= key)
            .saturating_sub(1)
    }

    /// The range of child `i`.
    pub fn child_range(&self, i: usize) -> (&[u8], Option<&[u8]>) {
        let hi = match self.children.get(i + 1) {
            Some(c) => Some(c.node.lo.as_ref()),
            None => self.hi(),
        };
        (self.children[i].node.lo.as_ref(), hi)
    }

    /// Position in `branches` of logical index `start` (clamped to the list).
    pub fn pos(&self, start: u64) -> usize {
        (start.saturating_sub(self.base) as usize).min(self.branches.len())
    }

    /// The references live for child `i`: at or after its start, with keys in its range.
    pub fn live_for(&self, i: usize) -> impl Iterator<Item = &BranchRef> {
        let (lo, hi) = self.child_range(i);
        self.branches[self.pos(self.children[i].start)..]
            .iter()
            .filter(move |r| r.branch.overlaps(lo, hi))
    }

    /// Estimated units live for child `i`.
    pub fn live_units(&self, i: usize) -> u64 {
        let (lo, hi) = self.child_range(i);
        self.live_for(i)
            .map(|r| r.branch.sample().between(lo, hi))
            .sum()
    }

    /// Estimated units of a leaf's branches within its range.
    pub fn leaf_units(&self) -> u64 {
        self.branches
            .iter()
            .map(|r| r.branch.sample().between(&self.lo, self.hi()))
            .sum()
    }

    /// [`Node::leaf_units`] without I/O (see [`Branch::units_between`]): for bookkeeping.
    pub fn units_estimate(&self) -> u64 {
        self.branches
            .iter()
            .map(|r| r.branch.units_between(&self.lo, self.hi()))
            .sum()
    }

    /// Estimated units of a leaf's settled branches (compaction outputs) within its range:
    /// what its split and merge decisions use, since a pending batch's share of data that
    /// overwrites older versions is only known once it is compacted.
    pub fn settled_units(&self) -> u64 {
        self.branches
            .iter()
            .filter(|r| r.batch == 0)
            .map(|r| r.branch.sample().between(&self.lo, self.hi()))
            .sum()
    }

    /// Branch slots a leaf's policy counts: settled branches plus one per pending batch.
    pub fn leaf_slots(&self) -> usize {
        let mut n = 0;
        let mut last = 0;
        for r in &self.branches {
            if r.batch == 0 || r.batch != last {
                n += 1;
            }
            last = r.batch;
        }
        n
    }

    /// Removes the references for which `gone(position, ref)` holds, remapping the children's
    /// start indexes so that every remaining reference keeps its liveness.
    pub fn remove_refs(
        &mut self,
        mut gone: impl FnMut(usize, &BranchRef) -> bool,
    ) -> Vec<BranchRef> {
        let mut removed_at: Vec<u64> = Vec::new();
        let mut kept = Vec::with_capacity(self.branches.len());
        let mut removed = Vec::new();
        for (i, r) in std::mem::take(&mut self.branches).into_iter().enumerate() {
            if gone(i, &r) {
                removed_at.push(self.base + i as u64);
                removed.push(r);
            } else {
                kept.push(r);
            }
        }
        self.branches = kept;
        if !removed_at.is_empty() {
            for c in &mut self.children {
                let before = removed_at.partition_point(|&p| p < c.start) as u64;
                c.start -= before;
            }
        }
        removed
    }

    /// Moves each child's start past whole batches (or settled references) none of whose
    /// branches has keys in the child's range: they can never matter to it. A start never
    /// lands inside a batch, so no batch is ever partly live for a child.
    pub fn advance_starts(&mut self) {
        for i in 0..self.children.len() {
            let (lo, hi) = self.child_range(i);
            let (lo, hi) = (Key::from(lo), hi.map(Key::from));
            let mut p = self.pos(self.children[i].start);
            while p < self.branches.len() {
                let mut q = p + 1;
                let batch = self.branches[p].batch;
                if batch != 0 {
                    while q < self.branches.len() && self.branches[q].batch == batch {
                        q += 1;
                    }
                }
                if self.branches[p..q]
                    .iter()
                    .any(|r| r.branch.overlaps(&lo, hi.as_deref()))
                {
                    break;
                }
                p = q;
            }
            self.children[i].start = self.base + p as u64;
        }
    }

    /// Drops the oldest references while they are dead for every child (internal nodes).
    pub fn drop_dead_prefix(&mut self) -> usize {
        if self.is_leaf() || self.children.is_empty() {
            return 0;
        }
        self.advance_starts();
        let min = self
            .children
            .iter()
            .map(|c| c.start)
            .min()
            .unwrap_or(self.base);
        let n = self.pos(min);
        if n == 0 {
            return 0;
        }
        self.branches.drain(..n);
        self.base += n as u64;
        n
    }

    /// Positions of the references of pending batch `batch` (empty if none).
    pub fn batch_positions(&self, batch: u64) -> Vec<usize> {
        self.branches
            .iter()
            .enumerate()
            .filter(|(_, r)| r.batch == batch)
            .map(|(i, _)| i)
            .collect()
    }

    /// Replaces the references of batch `batch` (contiguous) by `output` (settled), or drops
    /// them when `output` is `None`. Children for which the batch was live stay live for the
    /// output; children past it keep their place.
    pub fn replace_batch(&mut self, batch: u64, output: Option<Arc<Branch>>) -> bool {
        let pos = self.batch_positions(batch);
        let Some(&first) = pos.first() else {
            return false;
        };
        let last = first + pos.len() - 1;
        if pos[pos.len() - 1] != last {
            return false;
        }
        let keep_first = output.is_some();
        self.remove_refs(|i, _| i > first && i <= last || (i == first && !keep_first));
        if let Some(b) = output {
            self.branches[first] = BranchRef {
                branch: b,
                batch: 0,
            };
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::stbe::tests::{branch_of, scratch_store};

    #[test]
    fn remove_refs_and_dead_prefix_keep_liveness() {
        let store = scratch_store();
        // Logical 10..16, all with keys everywhere; children start at 10, 12 and 16.
        let mut n = Node::new(1, 1, Key::from(&b""[..]), None);
        n.base = 10;
        for i in 0..6 {
            n.branches.push(BranchRef {
                branch: branch_of(&store, i, &["a", "n", "z"]),
                batch: 0,
            });
        }
        for (k, s) in [("a", 10u64), ("m", 12), ("t", 16)] {
            let c = Node::new(100 + s, 0, Key::from(k.as_bytes()), None);
            n.children.push(Child {
                node: Arc::new(c),
                start: s,
            });
        }
        let removed = n.remove_refs(|i, _| i == 1 || i == 3);
        assert_eq!(removed.len(), 2);
        let starts: Vec<u64> = n.children.iter().map(|c| c.start).collect();
        assert_eq!(starts, vec![10, 11, 14]);
        assert_eq!(n.end(), 14);
        assert_eq!(n.drop_dead_prefix(), 0);
        n.children[0].start = 12;
        assert_eq!(n.drop_dead_prefix(), 1);
        assert_eq!(n.base, 11);
        // A batch replaced by its output keeps the liveness of the children around it.
        n.branches[1].batch = 7;
        n.branches[2].batch = 7;
        let out = branch_of(&store, 50, &["b"]);
        assert!(n.replace_batch(7, Some(out)));
        assert_eq!(n.branches.len(), 2);
        assert_eq!(n.branches[1].branch.id, 50);
    }

    #[test]
    fn starts_skip_batches_that_miss_the_child() {
        let store = scratch_store();
        let mut n = Node::new(1, 1, Key::from(&b""[..]), None);
        // Batch 3 = two branches with keys only below "m"; then a settled one everywhere.
        for (i, (keys, batch)) in [
            (&["a", "b"][..], 3u64),
            (&["c"][..], 3),
            (&["a", "x"][..], 0),
        ]
        .into_iter()
        .enumerate()
        {
            n.branches.push(BranchRef {
                branch: branch_of(&store, i as u64, keys),
                batch,
            });
        }
        for k in ["a", "m"] {
            n.children.push(Child {
                node: Arc::new(Node::new(
                    u64::from(k.as_bytes()[0]),
                    0,
                    Key::from(k.as_bytes()),
                    None,
                )),
                start: 0,
            });
        }
        n.advance_starts();
        let starts: Vec<u64> = n.children.iter().map(|c| c.start).collect();
        assert_eq!(
            starts,
            vec![0, 2],
            "the batch lies below m: dead for the second child"
        );
    }
}
