//! The read side of a copy-on-write B+-tree of [`node`](super::node) pages: descending to a
//! leaf, cursors over the leaves in either direction, point lookups of a key's versions, and
//! the structural check. Both the `btree` kind and the `pbt` kind (whose keys carry a partition
//! prefix) read their trees through this module, so that there is one node implementation; the
//! pieces both also use outside a tree on disk (collecting a key's versions, the order check of
//! leaves, writing a level of nodes) are the free functions and [`LeafOrder`] here.

use std::any::Any;
use std::collections::VecDeque;
use std::iter::Peekable;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::Mutex;

use super::node::{
    blob_pages, decode_internal, decode_leaf, encode_internal, encode_leaf, split_sizes, Child,
    LeafEntry, Val,
};
use crate::entry::{cmp_entries, Entry, Kind, MAX_SEQ, MAX_VALUE_LEN};
use crate::error::{Error, Result};
use crate::memtable::{MemIter, Memtable};
use crate::storage::{AlignedBuf, PageFile, Purpose, PAGE_BODY, PAGE_SIZE};

/// Appends `versions` (one key's, newest first) to `out` up to and including the first Put or
/// Delete; returns whether one ended them (false: only Merge operands, or none).
pub(crate) fn collect_versions(
    versions: impl Iterator<Item = Result<Entry>>,
    out: &mut Vec<Entry>,
) -> Result<bool> {
    for e in versions {
        let e = e?;
        let stop = e.kind != Kind::Merge;
        out.push(e);
        if stop {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The frozen memtables handed to a tree kind by `absorb` and not yet merged, oldest first;
/// the merge takes the front one and pops it when done.
#[derive(Default)]
pub(crate) struct MemQueue(Mutex<VecDeque<Arc<Memtable>>>);

impl MemQueue {
    /// Queues `mem`; an empty memtable has nothing to merge and is durable as soon as the
    /// ones before it are, so it is not queued.
    pub fn push(&self, mem: Arc<Memtable>) {
        if !mem.is_empty() {
            self.0.lock().push_back(mem);
        }
    }

    /// The oldest memtable, and an iterator over all of it.
    pub fn front(&self) -> Option<(Arc<Memtable>, Peekable<MemIter>)> {
        let mem = self.0.lock().front().cloned()?;
        let input = mem
            .iter(Bound::Unbounded, Bound::Unbounded, false)
            .peekable();
        Some((mem, input))
    }

    /// Drops the oldest memtable, merged.
    pub fn pop(&self) {
        self.0.lock().pop_front();
    }

    /// Bytes queued less `done()` (what the merge of the front one has taken), and at least 1
    /// while any memtable is queued.
    pub fn debt(&self, done: impl FnOnce() -> u64) -> u64 {
        let q = self.0.lock();
        if q.is_empty() {
            return 0;
        }
        let d: u64 = q.iter().map(|m| m.bytes()).sum();
        d.saturating_sub(done()).max(1)
    }
}

/// The order check of a sequence of leaves: each non-empty, every entry after the one before
/// it in (key, seq descending) order, across leaf boundaries too.
#[derive(Default)]
pub(crate) struct LeafOrder {
    last: Option<(Arc<[u8]>, u64)>,
    /// Entries seen so far.
    pub count: u64,
}

impl LeafOrder {
    /// Checks the next leaf; the error says what is wrong with it.
    pub fn leaf(&mut self, leaf: &[LeafEntry]) -> std::result::Result<(), &'static str> {
        if leaf.is_empty() {
            return Err("empty leaf");
        }
        for e in leaf {
            if let Some((lk, ls)) = &self.last {
                if cmp_entries(lk, *ls, &e.key, e.seq) != std::cmp::Ordering::Less {
                    return Err("entries out of order");
                }
            }
            self.last = Some((e.key.clone(), e.seq));
            self.count += 1;
        }
        Ok(())
    }
}

/// What a node holds: leaf entries or internal children, each starting at a (key, seq).
pub(crate) trait NodeItem: Sized {
    fn encoded_len(&self) -> usize;
    /// The (key, seq) the item sits at: a node's separator is its first item's.
    fn position(&self) -> (&Arc<[u8]>, u64);
    /// Encodes a node of `items` into a page body.
    fn encode(items: &[Self], body: &mut [u8]);
}

impl NodeItem for LeafEntry {
    fn encoded_len(&self) -> usize {
        LeafEntry::encoded_len(self)
    }
    fn position(&self) -> (&Arc<[u8]>, u64) {
        (&self.key, self.seq)
    }
    fn encode(items: &[Self], body: &mut [u8]) {
        encode_leaf(items, body)
    }
}

impl NodeItem for Child {
    fn encoded_len(&self) -> usize {
        Child::encoded_len(self)
    }
    fn position(&self) -> (&Arc<[u8]>, u64) {
        (&self.key, self.seq)
    }
    fn encode(items: &[Self], body: &mut [u8]) {
        encode_internal(items, body)
    }
}

/// Splits `items` into nodes filled to about `target` bytes ([`split_sizes`]) and writes each,
/// one page per write request, to the page `alloc` gives it; returns the nodes as children
/// (first item's position, page), in order.
pub(crate) fn write_nodes<T: NodeItem>(
    store: &PageFile,
    items: &[T],
    target: usize,
    purpose: Purpose,
    alloc: &mut dyn FnMut() -> u64,
) -> Result<Vec<Child>> {
    let sizes: Vec<usize> = items.iter().map(|c| c.encoded_len()).collect();
    let groups = split_sizes(&sizes, target);
    let mut out = Vec::with_capacity(groups.len());
    let mut at = 0;
    for g in groups {
        let part = &items[at..at + g];
        at += g;
        let page = alloc();
        let mut buf = AlignedBuf::zeroed(PAGE_SIZE);
        T::encode(part, &mut buf[..PAGE_BODY]);
        store.write(page, &mut buf, purpose)?;
        let (key, seq) = part[0].position();
        out.push(Child {
            key: key.clone(),
            seq,
            page,
        });
    }
    Ok(out)
}

/// Reads the out-of-line value of `len` bytes at pages from `start`, which leaf page `leaf`
/// points to. The pointer comes from disk: a length above the value limit, or pages outside the
/// file, are corruption of that leaf.
pub(crate) fn read_blob(
    store: &PageFile,
    leaf: u64,
    start: u64,
    len: u32,
    purpose: Purpose,
) -> Result<Arc<[u8]>> {
    let len = len as usize;
    if len > MAX_VALUE_LEN {
        return Err(Error::corruption(
            "btree leaf",
            Some(leaf),
            format!("blob value of {len} bytes exceeds the value limit of {MAX_VALUE_LEN}"),
        ));
    }
    let n = blob_pages(len);
    let first = store.alloc().first_page();
    let end = store.alloc().end();
    if start < first || start.checked_add(n).is_none_or(|e| e > end) {
        return Err(Error::corruption(
            "btree leaf",
            Some(leaf),
            format!("blob pages {start}+{n} lie outside the file's pages {first}..{end}"),
        ));
    }
    let buf = store.read_many(start, n as usize, purpose)?;
    let mut out = Vec::with_capacity(len);
    for i in 0..n as usize {
        let body = &buf[i * PAGE_SIZE..i * PAGE_SIZE + PAGE_BODY];
        let take = (len - out.len()).min(PAGE_BODY);
        out.extend_from_slice(&body[..take]);
    }
    Ok(Arc::from(out))
}

/// Entry `e` of leaf page `leaf`, with its value (read from blob pages if out of line).
pub(crate) fn leaf_entry(
    store: &PageFile,
    e: &LeafEntry,
    leaf: u64,
    purpose: Purpose,
) -> Result<Entry> {
    let value = match &e.val {
        Val::Inline(v) => v.clone(),
        Val::Blob { start, len } => read_blob(store, leaf, *start, *len, purpose)?,
    };
    Ok(Entry {
        key: e.key.clone(),
        seq: e.seq,
        kind: e.kind,
        value,
    })
}

/// Index of the child whose subtree holds position (key, seq).
pub(crate) fn child_for(children: &[Child], key: &[u8], seq: u64) -> usize {
    let n = children
        .partition_point(|c| cmp_entries(&c.key, c.seq, key, seq) != std::cmp::Ordering::Greater);
    n.saturating_sub(1)
}

/// One published tree as readers see it: its root and height (root 0: empty), the page store,
/// and whatever keeps its pages allocated while a reader holds it (the kind's version).
pub(crate) struct TreeReader {
    pub root: u64,
    pub height: u32,
    pub store: Arc<PageFile>,
    pub _pin: Arc<dyn Any + Send + Sync>,
}

impl TreeReader {
    fn leaf(&self, page: u64) -> Result<Vec<LeafEntry>> {
        decode_leaf(&self.store.read(page, Purpose::UserRead)?, page)
    }
    fn internal(&self, page: u64) -> Result<Vec<Child>> {
        decode_internal(&self.store.read(page, Purpose::UserRead)?, page)
    }
    /// Entry `e` of leaf page `leaf`, with its value.
    fn value(&self, e: &LeafEntry, leaf: u64) -> Result<Entry> {
        leaf_entry(&self.store, e, leaf, Purpose::UserRead)
    }

    /// Descends to the leaf holding position (key, seq); the path is left in `stack`.
    fn leaf_for(&self, key: &[u8], seq: u64, stack: &mut Vec<(Vec<Child>, usize)>) -> Result<u64> {
        let mut page = self.root;
        for _ in 1..self.height {
            let children = self.internal(page)?;
            let i = child_for(&children, key, seq);
            page = children[i].page;
            stack.push((children, i));
        }
        Ok(page)
    }

    /// Appends the versions of `key` with seq <= `seq`, newest first, up to the first Put or
    /// Delete; returns whether one ended them (false: only Merge operands, or none).
    pub fn versions(self: &Arc<Self>, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> Result<bool> {
        if self.root == 0 {
            return Ok(false);
        }
        let mut stack = Vec::new();
        let leaf_page = self.leaf_for(key, seq, &mut stack)?;
        let mut cur = LeafCursor {
            tree: self.clone(),
            stack,
            leaf: self.leaf(leaf_page)?,
            leaf_page,
            pos: 0,
            reverse: false,
            lo: Bound::Included(key.to_vec()),
            hi: Bound::Included(key.to_vec()),
            done: false,
        };
        cur.pos = cur
            .leaf
            .partition_point(|e| cmp_entries(&e.key, e.seq, key, seq) == std::cmp::Ordering::Less);
        collect_versions(cur, out)
    }

    /// Walks every node of the tree, checking separators against their children's first
    /// entries and the order of all entries; `leaf` sees each leaf page and its entries.
    pub fn check(&self, leaf: &mut dyn FnMut(u64, &[LeafEntry]) -> Result<()>) -> Result<u64> {
        if self.root == 0 {
            return Ok(0);
        }
        let mut order = LeafOrder::default();
        self.check_node(self.root, self.height, None, &mut order, leaf)?;
        Ok(order.count)
    }

    fn check_node(
        &self,
        page: u64,
        height: u32,
        sep: Option<(&[u8], u64)>,
        order: &mut LeafOrder,
        visit: &mut dyn FnMut(u64, &[LeafEntry]) -> Result<()>,
    ) -> Result<()> {
        let bad = |d: String| Error::corruption("btree", Some(page), d);
        if height <= 1 {
            let leaf = self.leaf(page)?;
            order.leaf(&leaf).map_err(|d| bad(d.into()))?;
            if let Some((k, s)) = sep {
                if cmp_entries(&leaf[0].key, leaf[0].seq, k, s) != std::cmp::Ordering::Equal {
                    return Err(bad("separator differs from the child's first entry".into()));
                }
            }
            for e in &leaf {
                if let Val::Blob { .. } = e.val {
                    self.value(e, page)?;
                }
            }
            return visit(page, &leaf);
        }
        let kids = self.internal(page)?;
        if let Some((k, s)) = sep {
            if cmp_entries(&kids[0].key, kids[0].seq, k, s) != std::cmp::Ordering::Equal {
                return Err(bad("separator differs from the child's first entry".into()));
            }
        }
        for c in &kids {
            self.check_node(c.page, height - 1, Some((&c.key, c.seq)), order, visit)?;
        }
        Ok(())
    }
}

/// Cursor over the leaves of one version, forward or backward.
pub(crate) struct LeafCursor {
    tree: Arc<TreeReader>,
    stack: Vec<(Vec<Child>, usize)>,
    leaf: Vec<LeafEntry>,
    /// The page `leaf` was read from.
    leaf_page: u64,
    pos: usize,
    reverse: bool,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    done: bool,
}

impl LeafCursor {
    /// A cursor over the entries within the bounds, from the low end (or, `reverse`, the
    /// high end).
    pub fn new(
        reader: Arc<TreeReader>,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> Result<LeafCursor> {
        let mut c = LeafCursor {
            tree: reader,
            stack: Vec::new(),
            leaf: Vec::new(),
            leaf_page: 0,
            pos: 0,
            reverse,
            lo,
            hi,
            done: false,
        };
        if c.tree.root == 0 {
            c.done = true;
            return Ok(c);
        }
        // Seek position in entry order.
        let (key, seq): (Vec<u8>, u64) = if !reverse {
            match &c.lo {
                Bound::Included(k) => (k.clone(), MAX_SEQ + 1),
                Bound::Excluded(k) => (k.clone(), 0),
                Bound::Unbounded => (Vec::new(), MAX_SEQ + 1),
            }
        } else {
            match &c.hi {
                Bound::Included(k) => (k.clone(), 0),
                Bound::Excluded(k) => (k.clone(), MAX_SEQ + 1),
                Bound::Unbounded => (vec![0xff; crate::MAX_KEY_LEN + 1], 0),
            }
        };
        let mut page = c.tree.root;
        for _ in 1..c.tree.height {
            let children = c.tree.internal(page)?;
            let i = child_for(&children, &key, seq);
            page = children[i].page;
            c.stack.push((children, i));
        }
        c.leaf = c.tree.leaf(page)?;
        c.leaf_page = page;
        if !reverse {
            c.pos = c.leaf.partition_point(|e| {
                cmp_entries(&e.key, e.seq, &key, seq) == std::cmp::Ordering::Less
            });
            // Skip an excluded lower bound's versions.
            if let Bound::Excluded(k) = &c.lo {
                let k = k.clone();
                while c.pos < c.leaf.len() && *c.leaf[c.pos].key == k[..] {
                    c.pos += 1;
                }
            }
        } else {
            // pos = number of entries at or before the seek position; next returns leaf[pos-1].
            c.pos = c.leaf.partition_point(|e| {
                cmp_entries(&e.key, e.seq, &key, seq) != std::cmp::Ordering::Greater
            });
            if let Bound::Excluded(k) = &c.hi {
                let k = k.clone();
                while c.pos > 0 && *c.leaf[c.pos - 1].key == k[..] {
                    c.pos -= 1;
                }
            }
        }
        Ok(c)
    }

    /// Moves to the next leaf in the cursor's direction; false at the end.
    fn advance_leaf(&mut self) -> Result<bool> {
        loop {
            let Some((children, i)) = self.stack.last_mut() else {
                return Ok(false);
            };
            let next = if self.reverse {
                i.checked_sub(1)
            } else {
                Some(*i + 1).filter(|&n| n < children.len())
            };
            match next {
                Some(n) => {
                    *i = n;
                    let mut page = children[n].page;
                    let depth = self.tree.height as usize - 1;
                    while self.stack.len() < depth {
                        let kids = self.tree.internal(page)?;
                        let idx = if self.reverse { kids.len() - 1 } else { 0 };
                        page = kids[idx].page;
                        self.stack.push((kids, idx));
                    }
                    self.leaf = self.tree.leaf(page)?;
                    self.leaf_page = page;
                    self.pos = if self.reverse { self.leaf.len() } else { 0 };
                    return Ok(true);
                }
                None => {
                    self.stack.pop();
                }
            }
        }
    }

    fn in_bounds(&self, key: &[u8]) -> bool {
        if !self.reverse {
            match &self.hi {
                Bound::Included(h) => key <= &h[..],
                Bound::Excluded(h) => key < &h[..],
                Bound::Unbounded => true,
            }
        } else {
            match &self.lo {
                Bound::Included(l) => key >= &l[..],
                Bound::Excluded(l) => key > &l[..],
                Bound::Unbounded => true,
            }
        }
    }
}

impl Iterator for LeafCursor {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        loop {
            if self.done {
                return None;
            }
            let have = if self.reverse {
                self.pos > 0
            } else {
                self.pos < self.leaf.len()
            };
            if !have {
                match self.advance_leaf() {
                    Ok(true) => continue,
                    Ok(false) => {
                        self.done = true;
                        return None;
                    }
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            }
            let idx = if self.reverse { self.pos - 1 } else { self.pos };
            if !self.in_bounds(&self.leaf[idx].key) {
                self.done = true;
                return None;
            }
            if self.reverse {
                self.pos -= 1;
            } else {
                self.pos += 1;
            }
            return Some(self.tree.value(&self.leaf[idx], self.leaf_page));
        }
    }
}
