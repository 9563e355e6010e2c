//! The STBε-tree's decisions as pure functions of a node's shape (spec §3.3, §3.5, §3.6):
//! each returns data, so the policy is tested without I/O. The edit code measures a node
//! (estimates, counts, claims) into a summary and does what the choice says.

use crate::options::StbeParams;

/// The limits of one tree: the parameters resolved against the Db's memtable size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Target fanout `F`.
    pub fanout: usize,
    /// Most children a node may hold, `F + H`.
    pub max_children: usize,
    /// Hard cap on branch references per node.
    pub max_branches: usize,
    /// T2: live branches for one child that make its parent flush it.
    pub flush_branches: usize,
    /// T1: live units of a node that make it flush its fullest child.
    pub node_units: u64,
    /// Leaf size target (units).
    pub leaf_units: u64,
    /// Branch slots that make a leaf compact whole.
    pub leaf_branches: usize,
    /// Dead percentage that makes a leaf compact whole.
    pub dead_percent: u64,
    /// Units of one memtable (the spec's `m`).
    pub memtable_units: u64,
}

impl Limits {
    /// The limits for `p` with memtables of `memtable_bytes`.
    pub fn new(p: &StbeParams, memtable_bytes: u64) -> Limits {
        Limits {
            fanout: p.fanout as usize,
            max_children: (p.fanout + p.fanout_slack) as usize,
            max_branches: p.max_branches as usize,
            flush_branches: p.flush_branches() as usize,
            node_units: p.node_bytes(memtable_bytes),
            leaf_units: p.leaf_bytes(memtable_bytes),
            leaf_branches: p.leaf_branches() as usize,
            dead_percent: u64::from(p.dead_percent),
            memtable_units: memtable_bytes,
        }
    }
}

/// What a parent knows about one child when deciding flushes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChildSummary {
    /// The parent's branches live for the child.
    pub live_branches: usize,
    /// Estimated units of those branches within the child's range.
    pub live_units: u64,
    /// The child cannot take a flush now (frozen for a merge).
    pub frozen: bool,
}

/// A flush decision for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlushChoice {
    /// No trigger holds.
    Nothing,
    /// Flush these children (positions), in this order.
    Flush(Vec<usize>),
}

/// Spec §3.3: every child with more than `flush_branches` live branches (T2); otherwise, if
/// the node holds more than `node_units` live units (T1), the child with the most live units.
/// Frozen children are skipped.
pub fn choose_flush(children: &[ChildSummary], l: &Limits) -> FlushChoice {
    let t2: Vec<usize> = children
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.frozen && c.live_branches > l.flush_branches)
        .map(|(i, _)| i)
        .collect();
    if !t2.is_empty() {
        return FlushChoice::Flush(t2);
    }
    let total: u64 = children.iter().map(|c| c.live_units).sum();
    if total <= l.node_units {
        return FlushChoice::Nothing;
    }
    children
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.frozen && c.live_branches > 0)
        .max_by_key(|(i, c)| (c.live_units, std::cmp::Reverse(*i)))
        .map_or(FlushChoice::Nothing, |(i, _)| FlushChoice::Flush(vec![i]))
}

/// What the policy knows about a leaf.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeafSummary {
    /// Settled branches plus one per pending batch.
    pub slots: usize,
    /// Estimated units of its settled branches within its range (pending batches excluded).
    pub units: u64,
    /// Estimated dead units among them.
    pub dead: u64,
    /// A whole-leaf compaction or merge holds the leaf: it may not be split now.
    pub claimed: bool,
}

/// A decision about a leaf after a flush reached it or a compaction installed in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafChoice {
    Nothing,
    /// Split into this many pieces of about equal estimated size (spec §3.6: during the
    /// flush, on estimates, sharing the branches).
    Split(usize),
    /// Compact every branch of the leaf into one, dropping tombstones (spec §3.5 "leaves";
    /// also space reclamation, P8).
    Compact,
}

/// Spec §3.6 and §3.5: split a leaf whose live estimate passes the target into
/// `⌈live / target⌉` pieces; otherwise compact it whole when it holds more than
/// `leaf_branches` slots or its dead share passes `dead_percent`.
pub fn choose_leaf(s: &LeafSummary, l: &Limits) -> LeafChoice {
    if s.claimed {
        return LeafChoice::Nothing;
    }
    let live = s.units.saturating_sub(s.dead);
    if live > l.leaf_units {
        let pieces = live
            .div_ceil(l.leaf_units.max(1))
            .clamp(2, l.max_children as u64);
        return LeafChoice::Split(pieces as usize);
    }
    if s.slots > l.leaf_branches
        || (s.slots > 1 && s.dead.saturating_mul(100) > s.units.saturating_mul(l.dead_percent))
    {
        return LeafChoice::Compact;
    }
    LeafChoice::Nothing
}

/// Spec §3.6: an internal node is split when a flush reaches it holding more than `F`
/// children, into `⌈children / F⌉` nodes of at most `F` children (correction 7). Returns the
/// number of pieces, or `None`.
pub fn choose_split(children: usize, l: &Limits) -> Option<usize> {
    (children > l.fanout).then(|| children.div_ceil(l.fanout))
}

/// Spec §3.6: an internal (non-root) node with fewer than `F/2` children is merged with a
/// sibling when a flush reaches it. Returns the sibling to merge with (the smaller
/// neighbour), or `None`.
pub fn choose_internal_merge(fanouts: &[usize], i: usize, l: &Limits) -> Option<usize> {
    if fanouts.len() < 2 || fanouts[i] * 2 >= l.fanout {
        return None;
    }
    let left = i.checked_sub(1);
    let right = (i + 1 < fanouts.len()).then_some(i + 1);
    match (left, right) {
        (Some(a), Some(b)) => Some(if fanouts[a] <= fanouts[b] { a } else { b }),
        (Some(a), None) => Some(a),
        (None, Some(b)) => Some(b),
        (None, None) => None,
    }
}

/// Leaves under one parent that should merge: the first adjacent unclaimed pair whose live
/// estimates together are at most three quarters of the leaf target (a split leaves pieces
/// of more than half the target each, so a pair merges only after it lost a quarter of its
/// data, and a merged leaf is not split again at once). Returns the left one's position.
pub fn choose_leaf_merge(leaves: &[LeafSummary], l: &Limits) -> Option<usize> {
    (0..leaves.len().saturating_sub(1)).find(|&i| {
        let (a, b) = (&leaves[i], &leaves[i + 1]);
        !a.claimed
            && !b.claimed
            && a.units.saturating_sub(a.dead) + b.units.saturating_sub(b.dead)
                <= l.leaf_units / 4 * 3
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::new(
            &StbeParams {
                fanout: 4,
                ..StbeParams::default()
            },
            1000,
        )
    }

    fn child(live_branches: usize, live_units: u64) -> ChildSummary {
        ChildSummary {
            live_branches,
            live_units,
            frozen: false,
        }
    }

    #[test]
    fn resolved_limits() {
        let l = limits();
        assert_eq!(
            (
                l.fanout,
                l.max_children,
                l.flush_branches,
                l.node_units,
                l.leaf_units
            ),
            (4, 14, 12, 4000, 2000)
        );
        assert_eq!((l.leaf_branches, l.max_branches), (12, 84));
    }

    #[test]
    fn t2_flushes_every_child_over_the_branch_limit() {
        let l = limits();
        let cs = [child(13, 10), child(3, 3000), child(20, 5)];
        assert_eq!(choose_flush(&cs, &l), FlushChoice::Flush(vec![0, 2]));
        let mut frozen = cs;
        frozen[0].frozen = true;
        assert_eq!(choose_flush(&frozen, &l), FlushChoice::Flush(vec![2]));
    }

    #[test]
    fn t1_flushes_the_fullest_child() {
        let l = limits();
        assert_eq!(
            choose_flush(&[child(2, 1000), child(2, 1000)], &l),
            FlushChoice::Nothing
        );
        assert_eq!(
            choose_flush(&[child(2, 1500), child(3, 2600), child(1, 10)], &l),
            FlushChoice::Flush(vec![1])
        );
        // Ties go to the leftmost.
        assert_eq!(
            choose_flush(&[child(2, 2500), child(3, 2500)], &l),
            FlushChoice::Flush(vec![0])
        );
        let mut cs = [child(2, 1500), child(3, 2600)];
        cs[1].frozen = true;
        assert_eq!(choose_flush(&cs, &l), FlushChoice::Flush(vec![0]));
    }

    #[test]
    fn leaves_split_compact_or_wait() {
        let l = limits();
        let s = |slots, units, dead| LeafSummary {
            slots,
            units,
            dead,
            claimed: false,
        };
        assert_eq!(choose_leaf(&s(3, 1900, 0), &l), LeafChoice::Nothing);
        assert_eq!(choose_leaf(&s(3, 2100, 0), &l), LeafChoice::Split(2));
        assert_eq!(choose_leaf(&s(3, 7000, 0), &l), LeafChoice::Split(4));
        // Dead data does not count towards a split, and compacts the leaf.
        assert_eq!(choose_leaf(&s(3, 3000, 1600), &l), LeafChoice::Compact);
        assert_eq!(choose_leaf(&s(13, 500, 0), &l), LeafChoice::Compact);
        assert_eq!(choose_leaf(&s(1, 500, 400), &l), LeafChoice::Nothing);
        let mut c = s(13, 9000, 0);
        c.claimed = true;
        assert_eq!(choose_leaf(&c, &l), LeafChoice::Nothing);
    }

    #[test]
    fn splits_and_merges_of_internal_nodes() {
        let l = limits();
        assert_eq!(choose_split(4, &l), None);
        assert_eq!(choose_split(5, &l), Some(2));
        assert_eq!(choose_split(9, &l), Some(3));
        assert_eq!(choose_internal_merge(&[1, 4, 3], 0, &l), Some(1));
        assert_eq!(choose_internal_merge(&[3, 1, 2], 1, &l), Some(2));
        assert_eq!(choose_internal_merge(&[3, 2, 2], 1, &l), None);
        assert_eq!(choose_internal_merge(&[1], 0, &l), None);
    }

    #[test]
    fn small_neighbouring_leaves_merge() {
        let l = limits();
        let s = |units| LeafSummary {
            slots: 1,
            units,
            dead: 0,
            claimed: false,
        };
        assert_eq!(choose_leaf_merge(&[s(1400), s(200), s(1400)], &l), None);
        assert_eq!(choose_leaf_merge(&[s(1400), s(200), s(1300)], &l), Some(1));
        let mut c = [s(100), s(100)];
        c[1].claimed = true;
        assert_eq!(choose_leaf_merge(&c, &l), None);
    }
}
