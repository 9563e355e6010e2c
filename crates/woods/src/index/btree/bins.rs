//! The insertion buffer's bins: the tree's leaves, each named by its first position (the
//! first leaf by [`Pos::min`]), with how many buffered entries wait for it, kept up to date as
//! entries arrive and leaves are flushed and split, so that a policy of
//! [`buffer_policy`](super::buffer_policy) decides in logarithmic time instead of a pass over
//! the buffer.
//!
//! The decisions are those of the pure functions in `buffer_policy` (the unit tests below
//! check them against each other): fullest leaf from an index of bins by count, golden gate
//! from the set of non-empty bins and the cursor, random ball as the bin of a uniformly random
//! buffered entry not yet flushed (the same distribution as `random_ball`'s ball counted in
//! key order), adaptive from an [`IidTest`] fed each absorbed entry's bin in sequence order
//! (the order the inserts arrived in, not the memtable's key order).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use super::buffer::Pos;
use super::buffer_policy::{FlushPolicy, IidTest, DEFAULT_IID_WINDOW};
use crate::entry::Entry;

/// Leaves with their buffered counts, and the state each policy keeps.
pub(crate) struct Bins {
    policy: FlushPolicy,
    /// Every leaf's first position (the first leaf's: [`Pos::min`]) -> buffered entries.
    leaves: BTreeMap<Pos, u64>,
    nonempty: BTreeSet<Pos>,
    by_count: BTreeSet<(Reverse<u64>, Pos)>,
    /// Golden gate's cursor: the first position after the leaf flushed last (None: wrap).
    cursor: Option<Pos>,
    iid: IidTest<Pos>,
    rng: u64,
    /// Flushes decided by golden gate (adaptive: while the test passed).
    pub gg_choices: u64,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Bins {
    /// Bins over the leaves starting at `starts` (ascending; the first is taken as
    /// [`Pos::min`], and an empty list stands for the empty tree's one leaf-to-be).
    pub fn new(policy: FlushPolicy, starts: Vec<Pos>, seed: u64) -> Bins {
        let mut leaves: BTreeMap<Pos, u64> = starts.into_iter().skip(1).map(|p| (p, 0)).collect();
        leaves.insert(Pos::min(), 0);
        Bins {
            policy,
            leaves,
            nonempty: BTreeSet::new(),
            by_count: BTreeSet::new(),
            cursor: None,
            iid: IidTest::new(DEFAULT_IID_WINDOW),
            rng: seed,
            gg_choices: 0,
        }
    }

    /// The leaf (its bin) whose range holds position `p`.
    pub fn bin_of(&self, p: &Pos) -> Pos {
        self.leaves
            .range(..=p)
            .next_back()
            .map_or_else(Pos::min, |(k, _)| k.clone())
    }

    /// The first position of the leaf after `bin` (None: `bin` is the last).
    pub fn next_leaf(&self, bin: &Pos) -> Option<Pos> {
        self.leaves
            .range((Bound::Excluded(bin), Bound::Unbounded))
            .next()
            .map(|(k, _)| k.clone())
    }

    fn set_count(&mut self, bin: &Pos, to: u64) {
        let Some(c) = self.leaves.get_mut(bin) else {
            return;
        };
        let from = std::mem::replace(c, to);
        if from > 0 {
            self.by_count.remove(&(Reverse(from), bin.clone()));
        }
        if to > 0 {
            self.by_count.insert((Reverse(to), bin.clone()));
            self.nonempty.insert(bin.clone());
        } else {
            self.nonempty.remove(bin);
        }
    }

    /// Counts newly buffered entries (in entry order) in their leaves' bins, and shows the
    /// adaptive policy's test their bins in the order they were written.
    pub fn add(&mut self, entries: &[Entry]) {
        let mut arrivals: Vec<(u64, Pos)> = Vec::with_capacity(entries.len());
        let mut i = 0;
        while i < entries.len() {
            let bin = self.bin_of(&Pos::of(&entries[i]));
            let next = self.next_leaf(&bin);
            // The entries up to the next leaf's start share this bin.
            let mut j = i;
            while j < entries.len() && next.as_ref().is_none_or(|n| Pos::of(&entries[j]) < *n) {
                if self.policy == FlushPolicy::Adaptive {
                    arrivals.push((entries[j].seq, bin.clone()));
                }
                j += 1;
            }
            let c = self.leaves.get(&bin).copied().unwrap_or(0);
            self.set_count(&bin, c + (j - i) as u64);
            i = j;
        }
        arrivals.sort_by_key(|a| a.0);
        for (_, bin) in arrivals {
            self.iid.observe(bin);
        }
    }

    /// Which leaf the policy flushes now, or None when nothing is buffered. `buf` and
    /// `flushed` are the buffer and which of its entries the drain has taken already (for
    /// random ball's draw).
    pub fn choose(&mut self, buf: &[Entry], flushed: &[bool]) -> Option<Pos> {
        if self.nonempty.is_empty() {
            return None;
        }
        let gg = match self.policy {
            FlushPolicy::GoldenGate => true,
            FlushPolicy::Adaptive => self.iid.verdict(self.leaves.len() as u64).iid,
            _ => false,
        };
        if gg {
            self.gg_choices += 1;
            let at = match &self.cursor {
                Some(c) => self.nonempty.range(c..).next(),
                None => None,
            };
            return at.or(self.nonempty.first()).cloned();
        }
        match self.policy {
            FlushPolicy::FullestLeaf => self.by_count.first().map(|(_, p)| p.clone()),
            _ => self.random_ball(buf, flushed),
        }
    }

    /// The bin of a uniformly random entry of `buf` not yet flushed.
    fn random_ball(&mut self, buf: &[Entry], flushed: &[bool]) -> Option<Pos> {
        if buf.is_empty() {
            return None;
        }
        let n = buf.len() as u64;
        for _ in 0..64 {
            let i = (splitmix(&mut self.rng) % n) as usize;
            if !flushed[i] {
                return Some(self.bin_of(&Pos::of(&buf[i])));
            }
        }
        // Mostly flushed: the first unflushed entry from a random point (near uniform).
        let start = (splitmix(&mut self.rng) % n) as usize;
        (0..buf.len())
            .map(|k| (start + k) % buf.len())
            .find(|&i| !flushed[i])
            .map(|i| self.bin_of(&Pos::of(&buf[i])))
    }

    /// Records that `bin` was flushed: its count drops to zero and golden gate's cursor moves
    /// past it.
    pub fn take(&mut self, bin: &Pos) {
        self.set_count(bin, 0);
        self.cursor = self.next_leaf(bin);
    }

    /// Replaces the leaf whose range held `first` (a position the flush wrote into it, or the
    /// leaf's own start) by leaves starting at `out` (empty: the leaf emptied, or was taken
    /// into the leaf before it, and is gone). A flushed leaf holds no buffered entries any
    /// more, so every new bin starts at zero; a leaf taken in gives its count to the bin that
    /// now covers it.
    pub fn replace_leaf(&mut self, first: &Pos, out: &[Pos]) {
        let old = self.bin_of(first);
        let count = self.leaves.get(&old).copied().unwrap_or(0);
        self.set_count(&old, 0);
        self.leaves.remove(&old);
        let was_first = old == Pos::min();
        for (i, p) in out.iter().enumerate() {
            let p = if i == 0 && was_first {
                Pos::min()
            } else {
                p.clone()
            };
            self.leaves.insert(p, 0);
        }
        if was_first && out.is_empty() {
            // The next leaf becomes the first: its bin is renamed.
            if let Some((next, c)) = self.leaves.pop_first() {
                self.nonempty.remove(&next);
                self.by_count.remove(&(Reverse(c), next));
                self.leaves.insert(Pos::min(), 0);
                self.set_count(&Pos::min(), c);
            } else {
                self.leaves.insert(Pos::min(), 0);
            }
        }
        if count > 0 {
            // A leaf taken into the one before it (`BTree::apply_leaves`): its buffered
            // entries now belong to that leaf's bin. (A flushed leaf holds none.)
            let bin = self.bin_of(first);
            let c = self.leaves.get(&bin).copied().unwrap_or(0);
            self.set_count(&bin, c + count);
        }
    }

    /// Leaves (bins, empty or not).
    pub fn leaves(&self) -> usize {
        self.leaves.len()
    }

    #[cfg(test)]
    /// Leaves with buffered entries, in key order, with their counts (for tests and stats).
    pub fn nonempty_counts(&self) -> Vec<(Pos, u64)> {
        self.nonempty
            .iter()
            .map(|p| (p.clone(), self.leaves.get(p).copied().unwrap_or(0)))
            .collect()
    }

    #[cfg(test)]
    /// Golden gate's cursor.
    pub fn cursor(&self) -> Option<&Pos> {
        self.cursor.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::entry::Kind;
    use crate::index::btree::buffer_policy::{choose, BufferView};

    fn pos(k: u32) -> Pos {
        Pos {
            key: Arc::from(&k.to_be_bytes()[..]),
            seq: 1,
        }
    }
    fn entry(k: u32, seq: u64) -> Entry {
        Entry {
            key: Arc::from(&k.to_be_bytes()[..]),
            seq,
            kind: Kind::Put,
            value: Arc::from(&b"v"[..]),
        }
    }

    /// The incremental decisions of fullest leaf and golden gate equal the pure functions'
    /// over the same buffer, flush after flush.
    #[test]
    fn incremental_choices_equal_the_pure_policies() {
        for policy in [FlushPolicy::FullestLeaf, FlushPolicy::GoldenGate] {
            let starts: Vec<Pos> = (0..50).map(|i| pos(i * 100)).collect();
            let mut bins = Bins::new(policy, starts, 7);
            let mut rng = 12345u64;
            let mut buf: Vec<Entry> = (0..400)
                .map(|s| entry((splitmix(&mut rng) % 5000) as u32, s + 10))
                .collect();
            buf.sort_by(|a, b| crate::entry::cmp_entries(&a.key, a.seq, &b.key, b.seq));
            bins.add(&buf);
            let flushed = vec![false; buf.len()];
            for _ in 0..30 {
                let view_bins = bins.nonempty_counts();
                let want = choose(
                    policy,
                    &BufferView {
                        bins: &view_bins,
                        cursor: bins.cursor(),
                        ball: 0,
                        iid: false,
                    },
                );
                let got = bins.choose(&buf, &flushed);
                assert_eq!(got, want, "{policy:?}");
                let Some(b) = got else { break };
                bins.take(&b);
            }
        }
    }

    #[test]
    fn a_split_leaf_gives_empty_bins_and_an_emptied_first_leaf_passes_its_name_on() {
        let mut bins = Bins::new(FlushPolicy::FullestLeaf, vec![pos(0), pos(10), pos(20)], 1);
        bins.add(&[entry(5, 1), entry(12, 2), entry(25, 3), entry(26, 4)]);
        assert_eq!(bins.choose(&[], &[]), Some(pos(20)));
        bins.take(&pos(20));
        bins.replace_leaf(&pos(25), &[pos(20), pos(24)]);
        assert_eq!(bins.leaves(), 4);
        assert_eq!(bins.bin_of(&pos(30)), pos(24));
        bins.take(&Pos::min());
        bins.replace_leaf(&pos(5), &[]);
        assert_eq!(bins.bin_of(&pos(1)), Pos::min());
        assert_eq!(bins.leaves(), 3);
        let counts: Vec<u64> = bins.nonempty_counts().iter().map(|c| c.1).collect();
        assert_eq!(
            counts,
            vec![1],
            "the former second leaf's entry, now under the first"
        );
    }
}
