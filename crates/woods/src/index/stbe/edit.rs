//! Edits of the trunk: incorporation of a memtable branch into the root, the flush cascade
//! (spec §3.3–3.4), preemptive splits and merges of trunk nodes (§3.6), and the installation
//! of finished compactions (§3.5 with corrections 1 and 2).
//!
//! Every edit runs on a mutable root under the index's edit lock and copies the nodes it
//! changes (`Arc::make_mut`): readers keep the version they hold. Everything here is pointer
//! and reference-count work, no I/O beyond loading a branch's size sample the first time it is
//! needed; merging data is left to tasks, which the edit announces as [`Effects`].

use std::collections::HashSet;
use std::sync::Arc;

use super::branch::{Branch, Key};
use super::node::{BranchRef, Child, Node};
use super::policy::{
    choose_flush, choose_internal_merge, choose_leaf, choose_leaf_merge, choose_split,
    ChildSummary, FlushChoice, LeafChoice, LeafSummary, Limits,
};

/// Id counters persisted with the trunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ids {
    /// Next trunk node id.
    pub node: u64,
    /// Next batch id (0 means "settled").
    pub batch: u64,
}

impl Ids {
    pub fn node(&mut self) -> u64 {
        self.node += 1;
        self.node - 1
    }
    pub fn batch(&mut self) -> u64 {
        self.batch += 1;
        self.batch - 1
    }
}

/// Leaves held by tasks: `full` by a running whole-leaf compaction (not split, its prefix not
/// touched), `frozen` by a pending merge (no flush into it, not split).
#[derive(Clone, Debug, Default)]
pub struct Claims {
    pub full: HashSet<u64>,
    pub frozen: HashSet<u64>,
}

impl Claims {
    pub fn holds(&self, leaf: u64) -> bool {
        self.full.contains(&leaf) || self.frozen.contains(&leaf)
    }
}

/// A batch of branch references a flush brought to a node: it must be compacted there.
#[derive(Clone, Debug)]
pub struct NewBatch {
    pub batch: u64,
    pub height: u32,
    pub lo: Key,
    pub hi: Option<Key>,
    pub inputs: Vec<Arc<Branch>>,
}

/// What an edit asks of the scheduler, and what it did (counters).
#[derive(Debug, Default)]
pub struct Effects {
    pub batches: Vec<NewBatch>,
    /// Leaves (id, lower bound) to compact whole.
    pub full: Vec<(u64, Key)>,
    /// Leaf pairs (left id, right id, left's lower bound) frozen for a merge.
    pub merges: Vec<(u64, u64, Key)>,
    pub flushes: u64,
    pub trivial_flushes: u64,
    pub splits: u64,
    pub merges_done: u64,
    pub root_splits: u64,
    /// Units of branches flushes moved by reference alone (no compaction in the child).
    pub moved_units: u64,
}

impl Effects {
    /// Whether the edit changed the trunk's structure or references.
    pub fn changed(&self) -> bool {
        self.flushes + self.trivial_flushes + self.splits + self.merges_done > 0
            || !self.batches.is_empty()
            || !self.merges.is_empty()
    }
}

/// One edit of the trunk.
pub struct Editor<'a> {
    pub limits: &'a Limits,
    pub ids: &'a mut Ids,
    pub claims: &'a mut Claims,
    pub out: Effects,
}

/// The children a flush loop found it could not flush into now.
type Blocked = HashSet<u64>;

/// For each branch, whether its key span `[min, max]` meets no other branch's.
fn alone(branches: &[Arc<Branch>]) -> Vec<bool> {
    let mut order: Vec<usize> = (0..branches.len()).collect();
    order.sort_by(|&a, &b| branches[a].meta().min_key.cmp(&branches[b].meta().min_key));
    let mut out = vec![true; branches.len()];
    // The largest max key among the branches before each in min-key order.
    let mut reach: Option<&[u8]> = None;
    for (j, &i) in order.iter().enumerate() {
        let m = branches[i].meta();
        if reach.is_some_and(|r| r >= m.min_key.as_slice()) {
            out[i] = false;
            // The earlier branches reaching this far overlap it too.
            for &e in &order[..j] {
                if branches[e].meta().max_key.as_slice() >= m.min_key.as_slice() {
                    out[e] = false;
                }
            }
        }
        if reach.is_none_or(|r| r < m.max_key.as_slice()) {
            reach = Some(m.max_key.as_slice());
        }
    }
    out
}

impl<'a> Editor<'a> {
    pub fn new(limits: &'a Limits, ids: &'a mut Ids, claims: &'a mut Claims) -> Self {
        Editor {
            limits,
            ids,
            claims,
            out: Effects::default(),
        }
    }

    /// Adds a memtable's branches (key-disjoint pieces, [`super::runs`]) to the root as its
    /// newest and runs the flush cascade (spec §3.2 step 3–4, correction 3: the branches are
    /// in before the cascade starts).
    pub fn incorporate(&mut self, root: &mut Arc<Node>, branches: Vec<Arc<Branch>>) {
        let r = Arc::make_mut(root);
        for branch in branches {
            r.branches.push(BranchRef { branch, batch: 0 });
        }
        self.settle_root(root, None);
    }

    /// Whether the root can take `need` more branches.
    pub fn root_has_room(root: &Node, l: &Limits, need: usize) -> bool {
        root.branches.len() + need <= l.max_branches
    }

    /// The flush cascade from the root, also revisiting the nodes on the way to `focus` (where
    /// a compaction just installed, so that flushes it blocked can go now); then the root is
    /// split if it has more than `F` children (correction 7: the root too).
    pub fn settle_root(&mut self, root: &mut Arc<Node>, focus: Option<&[u8]>) {
        self.settle(Arc::make_mut(root), focus);
        if let Some(pieces) = choose_split(root.children.len(), self.limits) {
            if !self.has_frozen_children(root) {
                let old = root.clone();
                let parts = self.split_internal_node(&old, pieces);
                let mut top = Node::new(self.ids.node(), old.height + 1, Key::from(&b""[..]), None);
                top.children = parts
                    .into_iter()
                    .map(|n| Child {
                        node: Arc::new(n),
                        start: 0,
                    })
                    .collect();
                *root = Arc::new(top);
                self.out.splits += 1;
                self.out.root_splits += 1;
            }
        }
    }

    fn has_frozen_children(&self, n: &Node) -> bool {
        n.children
            .iter()
            .any(|c| self.claims.frozen.contains(&c.node.id))
    }

    /// Settles one internal node: flushes while a trigger holds, schedules leaf merges under a
    /// parent of leaves, then recurses into the children that received branches (and the one
    /// on the way to `focus`).
    pub fn settle(&mut self, x: &mut Node, focus: Option<&[u8]>) {
        if x.is_leaf() {
            return;
        }
        let mut received: HashSet<u64> = HashSet::new();
        self.flush_loop(x, &mut received);
        if x.height == 1 {
            if let Some(k) = focus {
                let i = x.child_for(k);
                self.leaf_policy(x, i, &mut received);
            }
            self.merge_leaves(x, &mut received);
        }
        let mut i = 0;
        while i < x.children.len() {
            let id = x.children[i].node.id;
            let on_focus = focus.is_some_and(|k| x.children[i].node.contains(k));
            if !x.children[i].node.is_leaf() && (received.contains(&id) || on_focus) {
                let child = Arc::make_mut(&mut x.children[i].node);
                self.settle(child, focus.filter(|_| on_focus));
                if child.children.len() > self.limits.max_children {
                    // Only a cascade far out of the ordinary gets here: split now rather
                    // than exceed the child slots.
                    let pieces = child.children.len().div_ceil(self.limits.fanout);
                    let n = self.split_internal(x, i, pieces);
                    i += n;
                    continue;
                }
            }
            i += 1;
        }
        x.drop_dead_prefix();
    }

    fn summaries(&self, x: &Node, blocked: &Blocked) -> Vec<ChildSummary> {
        (0..x.children.len())
            .map(|i| {
                let id = x.children[i].node.id;
                ChildSummary {
                    live_branches: x.live_for(i).count(),
                    live_units: x.live_units(i),
                    frozen: blocked.contains(&id) || self.claims.frozen.contains(&id),
                }
            })
            .collect()
    }

    /// Flushes from `x` while the policy asks (T1, T2), skipping children that cannot take a
    /// flush now.
    fn flush_loop(&mut self, x: &mut Node, received: &mut HashSet<u64>) {
        let mut blocked = Blocked::new();
        for _ in 0..4 * self.limits.max_children + 4 {
            let choice = choose_flush(&self.summaries(x, &blocked), self.limits);
            let FlushChoice::Flush(list) = choice else {
                break;
            };
            let ids: Vec<u64> = list.iter().map(|&i| x.children[i].node.id).collect();
            let mut any = false;
            for id in ids {
                let Some(i) = x.children.iter().position(|c| c.node.id == id) else {
                    continue;
                };
                if self.flush(x, i, received, true) {
                    any = true;
                } else {
                    blocked.insert(id);
                }
            }
            if !any && blocked.len() >= x.children.len() {
                break;
            }
        }
        x.drop_dead_prefix();
    }

    /// Flushes every branch of `x` live for child `i` into it, by reference (spec §3.4): the
    /// child gets them as one new batch (to compact there), `x` marks them dead for the child.
    /// With `reshape`, the child is then split or merged as the policy says (§3.6). Returns
    /// false when the child cannot take them now (full, or frozen for a merge).
    fn flush(
        &mut self,
        x: &mut Node,
        i: usize,
        received: &mut HashSet<u64>,
        reshape: bool,
    ) -> bool {
        let (lo, hi) = {
            let (l, h) = x.child_range(i);
            (Key::from(l), h.map(Key::from))
        };
        let from = x.pos(x.children[i].start);
        let incoming: Vec<Arc<Branch>> = x.branches[from..]
            .iter()
            .filter(|r| r.branch.overlaps(&lo, hi.as_deref()))
            .map(|r| r.branch.clone())
            .collect();
        if incoming.is_empty() {
            x.children[i].start = x.end();
            return true;
        }
        let cid = x.children[i].node.id;
        if self.claims.frozen.contains(&cid) {
            return false;
        }
        {
            let child = Arc::make_mut(&mut x.children[i].node);
            if child.branches.len() + incoming.len() > self.limits.max_branches
                && !self.make_room(child, incoming.len())
            {
                return false;
            }
            // A branch that lies inside the child and whose key span meets no other incoming
            // branch's needs no compaction: merging it would only copy it. It goes down by
            // reference (a memtable's sequential runs are built as branches of their own for
            // this, [`super::runs`]); the others make the batch the child compacts. The order
            // between the two does not matter: they share no key.
            let alone = alone(&incoming);
            let (moved, rest): (Vec<_>, Vec<_>) = incoming
                .into_iter()
                .zip(alone)
                .partition(|(b, alone)| *alone && b.within(&child.lo, child.hi()));
            for (b, _) in &moved {
                self.out.moved_units += b.units();
                child.branches.push(BranchRef {
                    branch: b.clone(),
                    batch: 0,
                });
            }
            if rest.is_empty() {
                self.out.trivial_flushes += 1;
            } else {
                let batch = self.ids.batch();
                let inputs: Vec<Arc<Branch>> = rest.into_iter().map(|(b, _)| b).collect();
                for b in &inputs {
                    child.branches.push(BranchRef {
                        branch: b.clone(),
                        batch,
                    });
                }
                self.out.batches.push(NewBatch {
                    batch,
                    height: child.height,
                    lo: child.lo.clone(),
                    hi: child.hi.clone(),
                    inputs,
                });
            }
        }
        x.children[i].start = x.end();
        self.out.flushes += 1;
        received.insert(cid);
        if reshape {
            self.reshape_child(x, i, received);
        }
        true
    }

    /// Correction 12: makes room for `need` more references in a full child by flushing from
    /// it (its own triggers first, then the children holding back its oldest branches, so that
    /// they die and drop). Leaves can only wait for their compactions.
    fn make_room(&mut self, c: &mut Node, need: usize) -> bool {
        let fits = |c: &Node| c.branches.len() + need <= self.limits.max_branches;
        if c.is_leaf() {
            return fits(c);
        }
        self.settle(c, None);
        let mut received = HashSet::new();
        while !fits(c) {
            c.drop_dead_prefix();
            if fits(c) {
                break;
            }
            let olds: Vec<u64> = (0..c.children.len())
                .filter(|&g| c.children[g].start <= c.base && c.live_for(g).next().is_some())
                .map(|g| c.children[g].node.id)
                .collect();
            let mut any = false;
            for id in olds {
                if let Some(g) = c.children.iter().position(|ch| ch.node.id == id) {
                    any |= self.flush(c, g, &mut received, true);
                }
            }
            if !any {
                break;
            }
        }
        c.drop_dead_prefix();
        for id in received {
            if let Some(g) = c.children.iter().position(|ch| ch.node.id == id) {
                if !c.children[g].node.is_leaf() {
                    self.settle(Arc::make_mut(&mut c.children[g].node), None);
                }
            }
        }
        fits(c)
    }

    /// After a flush into child `i`: split an internal child with more than `F` children,
    /// merge one with fewer than `F/2`, and apply the leaf policy to a leaf.
    fn reshape_child(&mut self, x: &mut Node, i: usize, received: &mut HashSet<u64>) {
        if x.children[i].node.is_leaf() {
            self.leaf_policy(x, i, received);
            return;
        }
        let fanout = x.children[i].node.children.len();
        if let Some(pieces) = choose_split(fanout, self.limits) {
            if !self.has_frozen_children(&x.children[i].node) {
                let n = self.split_internal(x, i, pieces);
                for c in &x.children[i..i + n] {
                    received.insert(c.node.id);
                }
            }
            return;
        }
        let fanouts: Vec<usize> = x.children.iter().map(|c| c.node.children.len()).collect();
        if let Some(j) = choose_internal_merge(&fanouts, i, self.limits) {
            if let Some(id) = self.merge_internal(x, i.min(j), received) {
                received.insert(id);
            }
        }
    }

    /// The leaf policy for leaf child `i` of `x`: split it (sharing its branches) or schedule
    /// a whole-leaf compaction.
    fn leaf_policy(&mut self, x: &mut Node, i: usize, received: &mut HashSet<u64>) {
        let leaf = &x.children[i].node;
        if !leaf.is_leaf() {
            return;
        }
        let s = LeafSummary {
            slots: leaf.leaf_slots(),
            units: leaf.settled_units(),
            dead: leaf.dead,
            claimed: self.claims.holds(leaf.id),
        };
        match choose_leaf(&s, self.limits) {
            LeafChoice::Nothing => {}
            LeafChoice::Compact => self.out.full.push((leaf.id, leaf.lo.clone())),
            LeafChoice::Split(k) => {
                let n = self.split_leaf(x, i, k);
                for c in &x.children[i..i + n] {
                    received.insert(c.node.id);
                }
                // A piece may still hold too many branches.
                for j in i..i + n {
                    let p = &x.children[j].node;
                    let s = LeafSummary {
                        slots: p.leaf_slots(),
                        units: p.settled_units(),
                        dead: p.dead,
                        claimed: false,
                    };
                    if choose_leaf(&s, self.limits) == LeafChoice::Compact {
                        self.out.full.push((p.id, p.lo.clone()));
                    }
                }
            }
        }
    }

    /// Up to `k - 1` keys splitting a leaf into pieces of about equal estimated size, from its
    /// branches' samples.
    fn split_keys(leaf: &Node, k: usize) -> Vec<Key> {
        let mut segs: Vec<(Key, u64)> = Vec::new();
        for r in &leaf.branches {
            segs.extend(r.branch.sample().segments(&leaf.lo, leaf.hi()));
        }
        segs.sort_by(|a, b| a.0.cmp(&b.0));
        let total: u64 = segs.iter().map(|s| s.1).sum();
        let mut keys: Vec<Key> = Vec::new();
        let mut cum = 0u64;
        let mut j = 1u64;
        for (key, u) in &segs {
            if j as usize >= k {
                break;
            }
            if cum >= total * j / k as u64 {
                let above = keys
                    .last()
                    .map_or(key.as_ref() > leaf.lo.as_ref(), |l| key > l);
                if above && leaf.hi().is_none_or(|h| key.as_ref() < h) {
                    keys.push(key.clone());
                }
                j += 1;
            }
            cum += u;
        }
        keys
    }

    /// Splits leaf child `i` into up to `k` leaves that share its branches (each keeps those
    /// with keys in its range). Returns the number of children now in its place.
    fn split_leaf(&mut self, x: &mut Node, i: usize, k: usize) -> usize {
        let leaf = x.children[i].node.clone();
        if self.claims.holds(leaf.id) {
            return 1;
        }
        let keys = Self::split_keys(&leaf, k);
        if keys.is_empty() {
            return 1;
        }
        let total = leaf.leaf_units().max(1);
        let mut pieces = Vec::with_capacity(keys.len() + 1);
        for j in 0..=keys.len() {
            let lo = if j == 0 {
                leaf.lo.clone()
            } else {
                keys[j - 1].clone()
            };
            let hi = if j == keys.len() {
                leaf.hi.clone()
            } else {
                Some(keys[j].clone())
            };
            let id = if j == 0 { leaf.id } else { self.ids.node() };
            let mut p = Node::new(id, 0, lo, hi);
            p.branches = leaf
                .branches
                .iter()
                .filter(|r| r.branch.overlaps(&p.lo, p.hi()))
                .cloned()
                .collect();
            let units = p.leaf_units();
            p.dead = (u128::from(leaf.dead) * u128::from(units) / u128::from(total)) as u64;
            pieces.push(p);
        }
        let start = x.children[i].start;
        let n = pieces.len();
        x.children.splice(
            i..=i,
            pieces.into_iter().map(|p| Child {
                node: Arc::new(p),
                start,
            }),
        );
        self.out.splits += 1;
        n
    }

    /// The pieces of splitting internal node `c` into `pieces` nodes of about equal fanout
    /// (correction 7); each keeps the branches with keys in its range and the start indexes of
    /// its children.
    fn split_internal_node(&mut self, c: &Node, pieces: usize) -> Vec<Node> {
        let n = c.children.len();
        let pieces = pieces.clamp(1, n.max(1));
        let mut out = Vec::with_capacity(pieces);
        let mut from = 0;
        for j in 0..pieces {
            let to = from + (n - from) / (pieces - j);
            let group = &c.children[from..to];
            let lo = group[0].node.lo.clone();
            let hi = match c.children.get(to) {
                Some(next) => Some(next.node.lo.clone()),
                None => c.hi.clone(),
            };
            let id = if j == 0 { c.id } else { self.ids.node() };
            let mut p = Node::new(id, c.height, lo, hi);
            p.base = c.base;
            p.branches = c.branches.clone();
            p.children = group.to_vec();
            let (plo, phi) = (p.lo.clone(), p.hi.clone());
            p.remove_refs(|_, r| !r.branch.overlaps(&plo, phi.as_deref()));
            p.drop_dead_prefix();
            out.push(p);
            from = to;
        }
        out
    }

    /// Splits internal child `i` of `x` into `pieces`; each piece's start index in `x` is the
    /// split child's. Returns the number of children now in its place.
    fn split_internal(&mut self, x: &mut Node, i: usize, pieces: usize) -> usize {
        let c = x.children[i].node.clone();
        let parts = self.split_internal_node(&c, pieces);
        let start = x.children[i].start;
        let n = parts.len();
        x.children.splice(
            i..=i,
            parts.into_iter().map(|p| Child {
                node: Arc::new(p),
                start,
            }),
        );
        self.out.splits += 1;
        n
    }

    /// Spec §3.6 / correction 2: merges internal children `a` and `a + 1` of `x`. Both first
    /// get every branch of `x` live for them (so their start indexes are equal), then are
    /// drained (every live branch flushed to their children) so that their branch lists are
    /// empty; then their children are concatenated, and the result split again if it has more
    /// than `F` children. Returns the merged node's id, or `None` when a flush could not go.
    fn merge_internal(
        &mut self,
        x: &mut Node,
        a: usize,
        received: &mut HashSet<u64>,
    ) -> Option<u64> {
        if a + 1 >= x.children.len() {
            return None;
        }
        let ids = [x.children[a].node.id, x.children[a + 1].node.id];
        for id in ids {
            let i = x.children.iter().position(|c| c.node.id == id)?;
            if !self.flush(x, i, received, false) {
                return None;
            }
        }
        for id in ids {
            let i = x.children.iter().position(|c| c.node.id == id)?;
            let c = Arc::make_mut(&mut x.children[i].node);
            let gids: Vec<u64> = c.children.iter().map(|g| g.node.id).collect();
            let mut got = HashSet::new();
            for gid in gids {
                if let Some(g) = c.children.iter().position(|ch| ch.node.id == gid) {
                    if c.live_for(g).next().is_some() && !self.flush(c, g, &mut got, true) {
                        return None;
                    }
                }
            }
            c.drop_dead_prefix();
            for gid in got {
                if let Some(g) = c.children.iter().position(|ch| ch.node.id == gid) {
                    if !c.children[g].node.is_leaf() {
                        self.settle(Arc::make_mut(&mut c.children[g].node), None);
                    }
                }
            }
            if !c.branches.is_empty() {
                return None;
            }
        }
        let a = x.children.iter().position(|c| c.node.id == ids[0])?;
        if x.children.get(a + 1).map(|c| c.node.id) != Some(ids[1]) {
            return None;
        }
        let (left, right) = (x.children[a].node.clone(), x.children[a + 1].node.clone());
        let mut m = Node::new(
            self.ids.node(),
            left.height,
            left.lo.clone(),
            right.hi.clone(),
        );
        m.children = left
            .children
            .iter()
            .chain(right.children.iter())
            .map(|c| Child {
                node: c.node.clone(),
                start: 0,
            })
            .collect();
        let start = x.end();
        let parts = match choose_split(m.children.len(), self.limits) {
            Some(p) => self.split_internal_node(&m, p),
            None => vec![m],
        };
        let id = parts[0].id;
        x.children.splice(
            a..=a + 1,
            parts.into_iter().map(|p| Child {
                node: Arc::new(p),
                start,
            }),
        );
        self.out.merges_done += 1;
        Some(id)
    }

    /// Under a parent of leaves: freezes the first pair of small neighbouring leaves for a
    /// merge, after flushing the parent's live branches to both (correction 2). The merge
    /// itself is a task: both leaves compacted into one branch, then swapped for one leaf.
    fn merge_leaves(&mut self, x: &mut Node, received: &mut HashSet<u64>) {
        let leaves: Vec<LeafSummary> = x
            .children
            .iter()
            .map(|c| LeafSummary {
                slots: c.node.leaf_slots(),
                units: c.node.settled_units(),
                dead: c.node.dead,
                claimed: self.claims.holds(c.node.id),
            })
            .collect();
        let Some(i) = choose_leaf_merge(&leaves, self.limits) else {
            return;
        };
        let ids = [x.children[i].node.id, x.children[i + 1].node.id];
        for id in ids {
            let Some(j) = x.children.iter().position(|c| c.node.id == id) else {
                return;
            };
            if !self.flush(x, j, received, false) {
                return;
            }
        }
        let (Some(a), Some(b)) = (
            x.children.iter().position(|c| c.node.id == ids[0]),
            x.children.iter().position(|c| c.node.id == ids[1]),
        ) else {
            return;
        };
        let end = x.end();
        x.children[a].start = end;
        x.children[b].start = end;
        self.claims.frozen.insert(ids[0]);
        self.claims.frozen.insert(ids[1]);
        self.out
            .merges
            .push((ids[0], ids[1], x.children[a].node.lo.clone()));
    }

    /// Scan-driven compaction ([`super::scan`]): flushes every branch live for the leaf holding
    /// `key` into the child on the way to it, node by node from the root (each flush the
    /// ordinary one, its batch compacted where it lands and the child reshaped as the policy
    /// says), then, with `whole`, schedules the leaf's whole compaction, which takes the batch
    /// that reached it too; the cascade then runs as after an install. A child that cannot
    /// take a flush now (full, or frozen for a merge) ends the walk there. A leaf listed twice
    /// is scheduled once (`Shared::apply_effects`).
    pub fn compact_path(&mut self, root: &mut Arc<Node>, key: &[u8], whole: bool) {
        let mut received = HashSet::new();
        self.flush_path(Arc::make_mut(root), key, whole, &mut received);
        self.settle_root(root, Some(key));
    }

    fn flush_path(&mut self, x: &mut Node, key: &[u8], whole: bool, received: &mut HashSet<u64>) {
        if x.is_leaf() {
            return;
        }
        let i = x.child_for(key);
        if x.live_for(i).next().is_some() && !self.flush(x, i, received, true) {
            return;
        }
        // The flush may have split the child.
        let i = x.child_for(key);
        if x.children[i].node.is_leaf() {
            let leaf = &x.children[i].node;
            if whole && leaf.branches.len() > 1 && !self.claims.holds(leaf.id) {
                self.out.full.push((leaf.id, leaf.lo.clone()));
            }
        } else {
            let child = Arc::make_mut(&mut x.children[i].node);
            self.flush_path(child, key, whole, received);
        }
        x.drop_dead_prefix();
    }

    /// Finds, below `root`, the nodes at `height` within `[lo, hi)` that hold references of
    /// pending batch `batch`; returns their lower bounds.
    pub fn batch_holders(
        root: &Node,
        batch: u64,
        height: u32,
        lo: &[u8],
        hi: Option<&[u8]>,
    ) -> Vec<Key> {
        let mut out = Vec::new();
        fn walk(
            n: &Node,
            batch: u64,
            height: u32,
            lo: &[u8],
            hi: Option<&[u8]>,
            out: &mut Vec<Key>,
        ) {
            if n.height == height {
                if n.branches.iter().any(|r| r.batch == batch) {
                    out.push(n.lo.clone());
                }
                return;
            }
            for i in 0..n.children.len() {
                let (clo, chi) = n.child_range(i);
                let overlaps = hi.is_none_or(|h| clo < h) && chi.is_none_or(|ch| lo < ch);
                if overlaps {
                    walk(&n.children[i].node, batch, height, lo, hi, out);
                }
            }
        }
        walk(root, batch, height, lo, hi, &mut out);
        out
    }

    /// The node at `height` whose range holds `key`.
    pub fn node_at<'n>(root: &'n Node, height: u32, key: &[u8]) -> Option<&'n Node> {
        let mut n = root;
        while n.height > height {
            if n.children.is_empty() {
                return None;
            }
            n = &n.children[n.child_for(key)].node;
        }
        (n.height == height).then_some(n)
    }

    /// Applies `f` to the node at `height` holding `key`, copying the path to it.
    pub fn with_node_at<T>(
        root: &mut Arc<Node>,
        height: u32,
        key: &[u8],
        f: impl FnOnce(&mut Node) -> T,
    ) -> Option<T> {
        let mut n = Arc::make_mut(root);
        while n.height > height {
            if n.children.is_empty() {
                return None;
            }
            let i = n.child_for(key);
            n = Arc::make_mut(&mut n.children[i].node);
        }
        (n.height == height).then(|| f(n))
    }

    /// Installs a batch compaction (spec §3.5 step 5, correction 1): in every node at `height`
    /// within `[lo, hi)` still holding the batch, its references, all among `inputs`, are
    /// replaced by `output`. Leaves add `dead_share` of the output's units in their range to
    /// their dead estimate. Returns the lower bounds of the nodes it installed in.
    #[allow(clippy::too_many_arguments)]
    pub fn install_batch(
        &mut self,
        root: &mut Arc<Node>,
        batch: u64,
        height: u32,
        lo: &[u8],
        hi: Option<&[u8]>,
        inputs: &HashSet<u64>,
        output: Option<Arc<Branch>>,
        dead_share: f64,
    ) -> Vec<Key> {
        let holders = Self::batch_holders(root, batch, height, lo, hi);
        let mut done = Vec::new();
        for key in holders {
            let out = output.clone();
            let ok = Self::with_node_at(root, height, &key, |n| {
                let pos = n.batch_positions(batch);
                if pos.windows(2).any(|w| w[1] != w[0] + 1)
                    || pos
                        .iter()
                        .any(|&p| !inputs.contains(&n.branches[p].branch.id))
                {
                    return false;
                }
                if n.is_leaf() {
                    if let Some(b) = &out {
                        let u = b.sample().between(&n.lo, n.hi()) as f64;
                        n.dead = n.dead.saturating_add((u * dead_share) as u64);
                    }
                }
                let out = out.filter(|b| b.overlaps(&n.lo, n.hi()));
                n.replace_batch(batch, out)
            })
            .unwrap_or(false);
            if ok {
                done.push(key);
            }
        }
        done
    }

    /// Installs a whole-leaf compaction: the leaf `id` at `lo` must still begin with the
    /// references `prefix` (by branch id); they are replaced by `output`.
    pub fn install_full(
        root: &mut Arc<Node>,
        id: u64,
        lo: &[u8],
        prefix: &[u64],
        output: Option<Arc<Branch>>,
    ) -> bool {
        match Self::node_at(root, 0, lo) {
            Some(n) if n.id == id && n.lo.as_ref() == lo => {
                let same = n.branches.len() >= prefix.len()
                    && n.branches
                        .iter()
                        .zip(prefix)
                        .all(|(r, &b)| r.branch.id == b);
                if !same {
                    return false;
                }
            }
            _ => return false,
        }
        Self::with_node_at(root, 0, lo, |n| {
            let k = prefix.len();
            n.remove_refs(|i, _| i < k);
            if let Some(b) = output {
                n.branches.insert(
                    0,
                    BranchRef {
                        branch: b,
                        batch: 0,
                    },
                );
            }
            n.dead = 0;
            true
        })
        .unwrap_or(false)
    }

    /// Installs a leaf merge: the frozen neighbours `left` and `right` (whose references must
    /// still be `left_refs` and `right_refs`) are replaced by one leaf holding `output`.
    #[allow(clippy::too_many_arguments)]
    pub fn install_merge(
        &mut self,
        root: &mut Arc<Node>,
        left: u64,
        right: u64,
        lo: &[u8],
        left_refs: &[u64],
        right_refs: &[u64],
        output: Option<Arc<Branch>>,
    ) -> bool {
        let ids = |n: &Node| n.branches.iter().map(|r| r.branch.id).collect::<Vec<_>>();
        let ok = match Self::node_at(root, 1, lo) {
            Some(p) => {
                let a = p.children.iter().position(|c| c.node.id == left);
                matches!(a, Some(a)
                    if p.children.get(a + 1).map(|c| c.node.id) == Some(right)
                        && ids(&p.children[a].node) == left_refs
                        && ids(&p.children[a + 1].node) == right_refs
                        && p.children[a].start == p.children[a + 1].start)
            }
            None => false,
        };
        if !ok {
            return false;
        }
        let id = self.ids.node();
        Self::with_node_at(root, 1, lo, |p| {
            let Some(a) = p.children.iter().position(|c| c.node.id == left) else {
                return false;
            };
            let (l, r) = (&p.children[a].node, &p.children[a + 1].node);
            let mut m = Node::new(id, 0, l.lo.clone(), r.hi.clone());
            if let Some(b) = output {
                m.branches.push(BranchRef {
                    branch: b,
                    batch: 0,
                });
            }
            let start = p.children[a].start;
            p.children.splice(
                a..=a + 1,
                std::iter::once(Child {
                    node: Arc::new(m),
                    start,
                }),
            );
            true
        })
        .unwrap_or(false)
    }
}
