//! The PBT-Buffer's partitions (spec §2.5 ACTIVE and CLOSING): leaves of the shared node
//! format held in memory, never written before their partition is evicted.
//!
//! A buffered partition is an ordered list of leaves, each a node-format leaf (`LeafEntry`s
//! keyed by the partitioned key, split by the node code's `split_sizes`), so that eviction
//! writes exactly these leaves. The list is copy-on-write at leaf granularity: an absorb step
//! replaces the leaves it touched and publishes a new list, and readers keep the one they took.

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

use super::key::{self, PREFIX};
use crate::entry::{cmp_entries, Entry};
use crate::error::Result;
use crate::index::btree::node::{blob_pages, split_sizes, LeafEntry, Val, BODY_ROOM, INLINE_MAX};
use crate::index::btree::tree::{collect_versions, LeafOrder};

/// One leaf: entries in (tree key, seq descending) order.
pub type Leaf = Arc<Vec<LeafEntry>>;

/// A partition whose leaves are in the PBT-Buffer.
#[derive(Clone, Debug, Default)]
pub struct Buffered {
    pub pnum: u32,
    pub leaves: Vec<Leaf>,
    pub entries: u64,
    /// Pages of out-of-line values its entries will take when written.
    pub blob_pages: u64,
    /// Smallest and largest user key absorbed (only ever widened: spec §5 item 6).
    pub min: Option<Arc<[u8]>>,
    pub max: Option<Arc<[u8]>>,
    /// Newest sequence number of the memtables wholly absorbed.
    pub max_seq: u64,
}

fn is_blob(e: &LeafEntry) -> Option<usize> {
    match &e.val {
        Val::Inline(v) if e.key.len() + v.len() > INLINE_MAX => Some(v.len()),
        _ => None,
    }
}

impl Buffered {
    pub fn new(pnum: u32) -> Buffered {
        Buffered {
            pnum,
            ..Default::default()
        }
    }

    /// Pages it takes in the PBT-Buffer (and will take on disk): leaves and value pages.
    pub fn pages(&self) -> u64 {
        self.leaves.len() as u64 + self.blob_pages
    }

    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }

    /// Whether [lo, hi] (user keys, inclusive; `None` unbounded) meets the key range.
    pub fn overlaps(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
        match (&self.min, &self.max) {
            (Some(min), Some(max)) => {
                lo.is_none_or(|l| l <= &max[..]) && hi.is_none_or(|h| h >= &min[..])
            }
            _ => false,
        }
    }

    /// Index of the leaf whose range holds position (tree key, seq).
    fn leaf_for(&self, key: &[u8], seq: u64) -> usize {
        self.leaves
            .partition_point(|l| cmp_entries(&l[0].key, l[0].seq, key, seq) != Ordering::Greater)
            .saturating_sub(1)
    }

    /// Absorbs `new` (sorted, user keys) into the partition: every version a new entry
    /// (correction 1). Leaves that overflow split at `fill_percent`; returns the splits.
    pub fn absorb(&mut self, new: &[Entry], fill_percent: u32) -> u64 {
        if new.is_empty() {
            return 0;
        }
        let target = BODY_ROOM * fill_percent as usize / 100;
        let mut splits = 0;
        let entries: Vec<LeafEntry> = new
            .iter()
            .map(|e| LeafEntry {
                key: key::tree_key(self.pnum, &e.key),
                seq: e.seq,
                kind: e.kind,
                val: Val::Inline(e.value.clone()),
            })
            .collect();
        for e in &entries {
            if let Some(len) = is_blob(e) {
                self.blob_pages += blob_pages(len);
            }
        }
        let (first, last) = (&new[0].key, &new[new.len() - 1].key);
        if self.min.as_ref().is_none_or(|m| first[..] < m[..]) {
            self.min = Some(first.clone());
        }
        if self.max.as_ref().is_none_or(|m| last[..] > m[..]) {
            self.max = Some(last.clone());
        }
        self.entries += entries.len() as u64;
        if self.leaves.is_empty() {
            self.leaves = pack(entries, target, &mut splits);
            return splits;
        }
        // Group the new entries by the leaf they go to, merge each group into its leaf.
        let mut out: Vec<Leaf> = Vec::with_capacity(self.leaves.len() + 4);
        let mut at = 0; // next new entry
        let mut li = 0;
        while li < self.leaves.len() {
            let end = if li + 1 < self.leaves.len() {
                let n = &self.leaves[li + 1][0];
                at + entries[at..].partition_point(|e| {
                    cmp_entries(&e.key, e.seq, &n.key, n.seq) == Ordering::Less
                })
            } else {
                entries.len()
            };
            if end == at {
                out.push(self.leaves[li].clone());
            } else {
                let merged = merge(&self.leaves[li], &entries[at..end]);
                let parts = pack(merged, target, &mut splits);
                out.extend(parts);
            }
            at = end;
            li += 1;
        }
        self.leaves = out;
        splits
    }

    /// Appends the versions of `key` with seq <= `seq`, newest first, up to the first Put or
    /// Delete; returns whether one ended them.
    pub fn versions(&self, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> bool {
        if self.leaves.is_empty() {
            return false;
        }
        let tk = key::tree_key(self.pnum, key);
        let li = self.leaf_for(&tk, seq);
        let pos = self.leaves[li]
            .partition_point(|e| cmp_entries(&e.key, e.seq, &tk, seq) == Ordering::Less);
        let from = self.leaves[li..].iter().flat_map(|l| l.iter()).skip(pos);
        let mine = from.take_while(|e| e.key[..] == tk[..]);
        // The entries are in memory: collecting them cannot fail.
        collect_versions(mine.map(|e| Ok(to_entry(e))), out).unwrap_or(false)
    }

    /// Checks its invariants: leaves non-empty, within a page, in order, of its partition only.
    pub fn check(&self) -> std::result::Result<u64, String> {
        let mut order = LeafOrder::default();
        for (i, l) in self.leaves.iter().enumerate() {
            order.leaf(l).map_err(|d| format!("leaf {i}: {d}"))?;
            let size: usize = l.iter().map(|e| e.encoded_len()).sum();
            if size > BODY_ROOM {
                return Err(format!("leaf {i} holds {size} bytes, more than a page"));
            }
            for e in l.iter() {
                if !key::in_partition(&e.key, self.pnum) {
                    return Err(format!("leaf {i} holds a key of another partition"));
                }
                let uk = &e.key[PREFIX..];
                if self.min.as_ref().is_none_or(|m| uk < &m[..])
                    || self.max.as_ref().is_none_or(|m| uk > &m[..])
                {
                    return Err(format!("leaf {i}: a key outside the partition's key range"));
                }
            }
        }
        let n = order.count;
        if n != self.entries {
            return Err(format!("{n} entries, the metadata counts {}", self.entries));
        }
        Ok(n)
    }
}

/// The entry as the Db sees it: user key, value in hand.
pub fn to_entry(e: &LeafEntry) -> Entry {
    Entry {
        key: key::user_key(&e.key),
        seq: e.seq,
        kind: e.kind,
        value: match &e.val {
            Val::Inline(v) => v.clone(),
            // Buffered leaves hold every value inline; blobs exist only on disk.
            Val::Blob { .. } => Arc::from(&[][..]),
        },
    }
}

fn merge(old: &[LeafEntry], new: &[LeafEntry]) -> Vec<LeafEntry> {
    let mut out = Vec::with_capacity(old.len() + new.len());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        let take_new = match (old.get(i), new.get(j)) {
            (Some(o), Some(n)) => cmp_entries(&n.key, n.seq, &o.key, o.seq) == Ordering::Less,
            (None, Some(_)) => true,
            _ => false,
        };
        if take_new {
            out.push(new[j].clone());
            j += 1;
        } else {
            out.push(old[i].clone());
            i += 1;
        }
    }
    out
}

/// Splits entries into leaves by the node code's rule.
pub fn pack(entries: Vec<LeafEntry>, target: usize, splits: &mut u64) -> Vec<Leaf> {
    let sizes: Vec<usize> = entries.iter().map(|e| e.encoded_len()).collect();
    let groups = split_sizes(&sizes, target);
    *splits += groups.len().saturating_sub(1) as u64;
    let mut out = Vec::with_capacity(groups.len());
    let mut it = entries.into_iter();
    for g in groups {
        out.push(Arc::new(it.by_ref().take(g).collect()));
    }
    out
}

/// Iterator over a buffered partition's entries within bounds (user keys), either direction.
pub struct BufferIter {
    part: Arc<Buffered>,
    /// Entries before each leaf, and the total at the end.
    offsets: Vec<usize>,
    /// Forward: the next flat index; reverse: one past it.
    at: usize,
    /// The other end: forward, one past the last entry in bounds; reverse, the first.
    end: usize,
    reverse: bool,
}

impl BufferIter {
    pub fn new(part: Arc<Buffered>, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, reverse: bool) -> Self {
        let mut offsets = Vec::with_capacity(part.leaves.len() + 1);
        let mut n = 0;
        for l in &part.leaves {
            offsets.push(n);
            n += l.len();
        }
        offsets.push(n);
        // Flat index of the first entry for which `before` is false (monotone over entries).
        let first_not = |before: &dyn Fn(&LeafEntry) -> bool| -> usize {
            let li = part
                .leaves
                .partition_point(|l| l.last().is_some_and(before));
            match part.leaves.get(li) {
                Some(l) => offsets[li] + l.partition_point(|e| before(e)),
                None => n,
            }
        };
        let start = match &lo {
            Bound::Included(k) => {
                let k = key::tree_key(part.pnum, k);
                first_not(&|e| e.key[..] < k[..])
            }
            Bound::Excluded(k) => {
                let k = key::tree_key(part.pnum, k);
                first_not(&|e| e.key[..] <= k[..])
            }
            Bound::Unbounded => 0,
        };
        let stop = match &hi {
            Bound::Included(k) => {
                let k = key::tree_key(part.pnum, k);
                first_not(&|e| e.key[..] <= k[..])
            }
            Bound::Excluded(k) => {
                let k = key::tree_key(part.pnum, k);
                first_not(&|e| e.key[..] < k[..])
            }
            Bound::Unbounded => n,
        };
        let stop = stop.max(start);
        let (at, end) = if reverse {
            (stop, start)
        } else {
            (start, stop)
        };
        BufferIter {
            part,
            offsets,
            at,
            end,
            reverse,
        }
    }

    fn entry(&self, flat: usize) -> &LeafEntry {
        let li = self.offsets.partition_point(|&o| o <= flat) - 1;
        &self.part.leaves[li][flat - self.offsets[li]]
    }
}

impl Iterator for BufferIter {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        if self.at == self.end {
            return None;
        }
        let flat = if self.reverse {
            self.at -= 1;
            self.at
        } else {
            self.at += 1;
            self.at - 1
        };
        Some(Ok(to_entry(self.entry(flat))))
    }
}
