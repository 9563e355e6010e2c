//! Point and range reads over one published trunk version (spec §3.7, §3.9). Readers take no
//! lock: a version is immutable and holds every branch it references.

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

use super::branch::Branch;
use super::node::{BranchRef, Node};
use super::scan::ScanDebt;
use super::Version;
use crate::entry::{Entry, Kind};
use crate::error::Result;
use crate::filter::hash64;
use crate::merge::{EntryIter, MergeIter};
use crate::storage::Purpose;

/// Versions of `key` with seq <= `seq`, newest first, up to the first Put or Delete: the
/// branches on the root-to-leaf path live for the path's child, newest first, each checked
/// against its key range and quotient filter before any page is read (the key is hashed once).
pub fn get(v: &Version, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> Result<()> {
    let h = hash64(key);
    let start = out.len();
    // The path is walked once: the first `PREFETCHED` branches it may probe are kept, and
    // their filters' blocks, one cache miss each in filters of megabytes, are prefetched so
    // that they load in parallel instead of one by one as the probes reach them.
    let mut path = OnPath::new(&v.root, key);
    let mut first: [Option<&Branch>; PREFETCHED] = [None; PREFETCHED];
    for (slot, b) in first.iter_mut().zip(path.by_ref()) {
        if let Some(run) = b.opened() {
            run.prefetch_filter(h);
        }
        *slot = Some(b);
    }
    // The slots past the path's end stay empty.
    for b in first.iter().flatten().copied().chain(path) {
        b.run()?.get_hashed(key, h, seq, out)?;
        if out.len() > start && out.last().is_some_and(|e| e.kind != Kind::Merge) {
            return Ok(());
        }
    }
    Ok(())
}

/// Branches a lookup keeps (and prefetches the filters of) before it probes them; a path with
/// more goes on walking after them.
const PREFETCHED: usize = 64;

/// The branches a lookup of `key` probes, in order: each node from the root down, its branches
/// live for the path's child whose key range holds `key`, newest first.
pub(super) struct OnPath<'a> {
    key: &'a [u8],
    /// The node after the current one (`None` past the leaf).
    next: Option<&'a Node>,
    /// The current node's branches not yet given, oldest first.
    refs: std::slice::Iter<'a, BranchRef>,
}

impl<'a> OnPath<'a> {
    pub(super) fn new(root: &'a Node, key: &'a [u8]) -> OnPath<'a> {
        OnPath {
            key,
            next: Some(root),
            refs: [].iter(),
        }
    }
}

impl<'a> Iterator for OnPath<'a> {
    type Item = &'a Branch;

    fn next(&mut self) -> Option<&'a Branch> {
        loop {
            if let Some(r) = self.refs.next_back() {
                let m = r.branch.meta();
                if m.entries > 0
                    && self.key >= m.min_key.as_slice()
                    && self.key <= m.max_key.as_slice()
                {
                    return Some(&r.branch);
                }
                continue;
            }
            let node = self.next.take()?;
            let (refs, next): (&[BranchRef], Option<&Node>) = if node.is_leaf() {
                (&node.branches, None)
            } else {
                let i = node.child_for(self.key);
                let from = node.pos(node.children[i].start);
                (&node.branches[from..], Some(&node.children[i].node))
            };
            self.refs = refs.iter();
            self.next = next;
        }
    }
}

fn cmp_lo(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> Ordering {
    // Lower bounds: which one admits fewer keys is the greater.
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Less,
        (_, Bound::Unbounded) => Ordering::Greater,
        (Bound::Included(x), Bound::Included(y)) | (Bound::Excluded(x), Bound::Excluded(y)) => {
            x.cmp(y)
        }
        (Bound::Included(x), Bound::Excluded(y)) => x.cmp(y).then(Ordering::Less),
        (Bound::Excluded(x), Bound::Included(y)) => x.cmp(y).then(Ordering::Greater),
    }
}

fn cmp_hi(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> Ordering {
    // Upper bounds: which one admits more keys is the greater.
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Greater,
        (_, Bound::Unbounded) => Ordering::Less,
        (Bound::Included(x), Bound::Included(y)) | (Bound::Excluded(x), Bound::Excluded(y)) => {
            x.cmp(y)
        }
        (Bound::Included(x), Bound::Excluded(y)) => x.cmp(y).then(Ordering::Greater),
        (Bound::Excluded(x), Bound::Included(y)) => x.cmp(y).then(Ordering::Less),
    }
}

/// Whether `[lo, hi]` admits no key.
fn empty(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
        _ => false,
    }
}

/// A range scan: one leaf at a time, merging the branches on the root-to-leaf path that are
/// live for the path (each read within the leaf's range), forward or exactly reversed.
pub struct StbeIter {
    version: Arc<Version>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    /// Forward: the lower bound of what is left; reverse: the upper bound.
    next: Option<Bound<Vec<u8>>>,
    current: Option<MergeIter>,
    /// Where the branches each leaf's scan reads are charged (scan-driven compaction).
    debt: Option<Arc<ScanDebt>>,
    /// Branches of fewer units are small: not charged, and their first pages (which stay
    /// cached) read in place rather than by the reader threads.
    small: u64,
}

impl StbeIter {
    pub fn new(
        version: Arc<Version>,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
        debt: Option<Arc<ScanDebt>>,
    ) -> StbeIter {
        let next = Some(if reverse { hi.clone() } else { lo.clone() });
        StbeIter {
            version,
            lo,
            hi,
            reverse,
            next,
            current: None,
            small: debt.as_ref().map_or(u64::MAX, |d| d.small_units()),
            debt: debt.filter(|d| d.enabled()),
        }
    }

    /// Opens the leaf holding the next keys; false when the scan is over.
    fn open_next(&mut self) -> bool {
        let Some(at) = self.next.take() else {
            return false;
        };
        let (lo, hi) = if self.reverse {
            (self.lo.clone(), at)
        } else {
            (at, self.hi.clone())
        };
        if empty(&lo, &hi) {
            return false;
        }
        // Descend to the leaf holding the first key of the remaining range (forward) or its
        // last (reverse), collecting each node's live references.
        let mut node: &Node = &self.version.root;
        let mut path: Vec<&[BranchRef]> = Vec::new();
        loop {
            if node.is_leaf() {
                path.push(&node.branches);
                break;
            }
            let i = if self.reverse {
                match &hi {
                    Bound::Unbounded => node.children.len() - 1,
                    Bound::Included(k) => node.child_for(k),
                    Bound::Excluded(k) => {
                        let p = node
                            .children
                            .partition_point(|c| c.node.lo.as_ref() < k.as_slice());
                        if p == 0 {
                            return false;
                        }
                        p - 1
                    }
                }
            } else {
                match &lo {
                    Bound::Unbounded => 0,
                    Bound::Included(k) | Bound::Excluded(k) => node.child_for(k),
                }
            };
            path.push(&node.branches[node.pos(node.children[i].start)..]);
            node = &node.children[i].node;
        }
        let leaf_lo = if node.lo.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Included(node.lo.to_vec())
        };
        let leaf_hi = node
            .hi
            .as_ref()
            .map_or(Bound::Unbounded, |h| Bound::Excluded(h.to_vec()));
        let lo_b = if cmp_lo(&lo, &leaf_lo) == Ordering::Less {
            leaf_lo.clone()
        } else {
            lo.clone()
        };
        let hi_b = if cmp_hi(&hi, &leaf_hi) == Ordering::Greater {
            leaf_hi.clone()
        } else {
            hi.clone()
        };
        // What follows this leaf.
        self.next = if self.reverse {
            match leaf_lo {
                Bound::Unbounded => None,
                Bound::Included(k) => Some(Bound::Excluded(k)),
                Bound::Excluded(_) => None,
            }
        } else {
            match leaf_hi {
                Bound::Unbounded => None,
                Bound::Excluded(k) => Some(Bound::Included(k)),
                Bound::Included(_) => None,
            }
        };
        let in_range = |r: &&BranchRef| {
            let m = r.branch.meta();
            if m.entries == 0 {
                return false;
            }
            let above = match &lo_b {
                Bound::Unbounded => true,
                Bound::Included(k) => m.max_key >= *k,
                Bound::Excluded(k) => m.max_key > *k,
            };
            let below = match &hi_b {
                Bound::Unbounded => true,
                Bound::Included(k) => m.min_key <= *k,
                Bound::Excluded(k) => m.min_key < *k,
            };
            above && below
        };
        let mut sources: Vec<EntryIter> = Vec::new();
        let mut failed = None;
        // Which branches are large: charged to the leaf (scan-driven compaction), and primed.
        let mut large: Vec<bool> = Vec::new();
        for refs in &path {
            for r in refs.iter().filter(in_range) {
                large.push(r.branch.units() >= self.small);
                match r.branch.run() {
                    Ok(run) => sources.push(Box::new(run.iter(
                        lo_b.clone(),
                        hi_b.clone(),
                        self.reverse,
                        Purpose::UserRead,
                    ))),
                    Err(e) => failed = Some(e),
                }
            }
        }
        if let Some(e) = failed {
            sources = vec![Box::new(std::iter::once(Err(e)))];
            self.next = None;
        } else if let Some(debt) = &self.debt {
            // What a compaction of the path rewrites: these branches' data in the leaf's range,
            // above the leaf and in it. From their samples, loaded if need be (a branch known
            // from the trunk metadata reads its sample from its index once; without it, the
            // estimate would be the whole branch, several times the leaf's share).
            let (llo, lhi) = (&node.lo, node.hi());
            let units = |refs: &[&[BranchRef]]| -> u64 {
                refs.iter()
                    .flat_map(|refs| refs.iter().filter(in_range))
                    .map(|r| r.branch.sample().between(llo, lhi))
                    .sum()
            };
            let charged = large.iter().filter(|&&l| l).count();
            debt.charge(node.id, &node.lo, charged, || {
                let (above, own) = path.split_at(path.len() - 1);
                (units(above), units(own))
            });
        }
        // The large branches' first pages are read at once, not one after another; the small
        // ones' (cached, as every scan on their paths reads them) are read in place as the
        // merge starts, so that a path of one large branch and a few small ones hands nothing
        // to the reader threads.
        let sources = prime_large(sources, &large);
        self.current = Some(MergeIter::new(sources, self.reverse));
        true
    }
}

/// `sources` in order, those flagged in `large` primed ([`crate::merge::prime`]).
fn prime_large(sources: Vec<EntryIter>, large: &[bool]) -> Vec<EntryIter> {
    if sources.len() != large.len() || !large.contains(&true) {
        // Nothing to prime (or the error source of a failed open).
        return sources;
    }
    if !large.contains(&false) {
        return crate::merge::prime(sources);
    }
    let (mut big, mut rest) = (Vec::new(), Vec::new());
    for (s, &l) in sources.into_iter().zip(large) {
        if l {
            big.push(s);
        } else {
            rest.push(s);
        }
    }
    let (mut big, mut rest) = (crate::merge::prime(big).into_iter(), rest.into_iter());
    large
        .iter()
        .filter_map(|&l| if l { big.next() } else { rest.next() })
        .collect()
}

impl Iterator for StbeIter {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        loop {
            if let Some(it) = &mut self.current {
                match it.next() {
                    Some(Err(e)) => {
                        self.next = None;
                        self.current = None;
                        return Some(Err(e));
                    }
                    Some(ok) => return Some(ok),
                    None => self.current = None,
                }
            }
            if !self.open_next() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(tag: u8, n: u8) -> EntryIter {
        Box::new((0..n).map(move |i| Ok(Entry::new(&[tag, i], u64::from(i), Kind::Put, &[tag]))))
    }

    #[test]
    fn primed_and_unprimed_sources_keep_their_order_and_entries() {
        let counts = [3u8, 0, 5, 1, 4, 2, 6];
        for large in [
            vec![true; 7],
            vec![false; 7],
            vec![true, false, true, true, false, true, false],
            vec![false, true, false, false, true, false, true],
        ] {
            let sources = counts
                .iter()
                .enumerate()
                .map(|(t, &n)| source(t as u8, n))
                .collect();
            let got: Vec<Vec<Vec<u8>>> = prime_large(sources, &large)
                .into_iter()
                .map(|s| s.map(|e| e.expect("entry").key.to_vec()).collect())
                .collect();
            let want: Vec<Vec<Vec<u8>>> = counts
                .iter()
                .enumerate()
                .map(|(t, &n)| (0..n).map(|i| vec![t as u8, i]).collect())
                .collect();
            assert_eq!(got, want, "flags {large:?}");
        }
    }
}
