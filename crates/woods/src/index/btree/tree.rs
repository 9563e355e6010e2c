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
    LeafEntry, NodeView, Offsets, Val, ValRef, INTERNAL, LEAF, SEP_ALL,
};
use crate::cache::{PageClass, PageRef};
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
    /// The (key, seq) the item sits at.
    fn position(&self) -> (&Arc<[u8]>, u64);
    /// The separator of a node whose first item is `items[at]`, `at > 0`: by default that
    /// item's position (an internal node's first child already carries the separator its
    /// subtree was given).
    fn separator(items: &[Self], at: usize) -> (Arc<[u8]>, u64) {
        let (key, seq) = items[at].position();
        (key.clone(), seq)
    }
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
    /// Where the leaf begins a key, the key with [`SEP_ALL`]; where it begins among one key's
    /// versions (an older snapshot keeps several), the first one's position.
    fn separator(items: &[Self], at: usize) -> (Arc<[u8]>, u64) {
        let e = &items[at];
        match items[at - 1].key == e.key {
            true => (e.key.clone(), e.seq),
            false => (e.key.clone(), SEP_ALL),
        }
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
/// (separator, page), in order: the first node's separator is its first item's position (what
/// comes before the items decides whether it may be [`SEP_ALL`]: the caller's), the others'
/// [`NodeItem::separator`].
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
        let (key, seq) = match at {
            0 => {
                let (key, seq) = part[0].position();
                (key.clone(), seq)
            }
            _ => T::separator(items, at),
        };
        at += g;
        let page = alloc();
        let mut buf = AlignedBuf::zeroed(PAGE_SIZE);
        T::encode(part, &mut buf[..PAGE_BODY]);
        store.write(page, &mut buf, purpose)?;
        out.push(Child { key, seq, page });
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

/// Index of the child whose subtree holds position (key, seq) (the tests' reference for
/// [`NodeView::child_for`]).
#[cfg(test)]
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

/// How far [`TreeReader::take_versions`] got in one leaf.
enum Taken {
    /// A Put or Delete ended the versions (true), or a later key did (false).
    Ended(bool),
    /// The leaf ended first; the seq of the last version taken, if any.
    LeafEnd(Option<u64>),
}

impl TreeReader {
    /// A leaf (or blob) page, cached as data.
    fn page(&self, page: u64) -> Result<PageRef> {
        self.store.read(page, Purpose::UserRead)
    }
    /// An internal node's page, which every descent below it passes: cached as an index page.
    fn inner(&self, page: u64) -> Result<PageRef> {
        self.store
            .read_as(page, Purpose::UserRead, PageClass::Index)
    }
    fn leaf(&self, page: u64) -> Result<Vec<LeafEntry>> {
        decode_leaf(&self.page(page)?, page)
    }
    fn internal(&self, page: u64) -> Result<Vec<Child>> {
        decode_internal(&self.inner(page)?, page)
    }
    /// Entry `e` of leaf page `leaf`, with its value.
    fn value(&self, e: &LeafEntry, leaf: u64) -> Result<Entry> {
        leaf_entry(&self.store, e, leaf, Purpose::UserRead)
    }

    /// Item `i` of `leaf` as an entry with key `key`, its value copied out of the page (or read
    /// from its blob pages).
    fn entry_at(&self, leaf: &NodeView, i: usize, key: &[u8]) -> Result<Entry> {
        let value = match leaf.value(i) {
            ValRef::Inline(v) => Arc::from(v),
            ValRef::Blob { start, len } => {
                read_blob(&self.store, leaf.page(), start, len, Purpose::UserRead)?
            }
        };
        Ok(Entry {
            key: Arc::from(key),
            seq: leaf.seq(i),
            kind: leaf.kind(i)?,
            value,
        })
    }

    /// Appends the versions of `key` with seq <= `seq`, newest first, up to the first Put or
    /// Delete; returns whether one ended them (false: only Merge operands, or none). The
    /// entries carry `found_key` as their key (`key` itself, or the user key where `key`
    /// carries a partition prefix).
    ///
    /// Every node on the way is searched in place in its cached page ([`NodeView`]): nothing
    /// is allocated but the entries handed back. A key's versions that go on past the end of
    /// a leaf are followed into the next leaf, found as the leftmost leaf of the subtree just
    /// right of the descent's path; past that one, the descent starts again from the root at
    /// the position after the last version taken.
    pub fn versions(
        &self,
        key: &[u8],
        seq: u64,
        found_key: &[u8],
        out: &mut Vec<Entry>,
    ) -> Result<bool> {
        if self.root == 0 {
            return Ok(false);
        }
        let mut offs = Offsets::default();
        let mut from = seq;
        loop {
            let mut page = self.root;
            // The subtree just right of the path at its deepest node that has one, and its
            // height: where the next leaf begins.
            let mut right = None;
            for h in (2..=self.height).rev() {
                let buf = self.inner(page)?;
                let node = offs.scan(&buf, page, INTERNAL)?;
                let i = node.child_for(key, from);
                if i + 1 < node.len() {
                    right = Some((node.child(i + 1), h - 1));
                }
                page = node.child(i);
            }
            let buf = self.page(page)?;
            let leaf = offs.scan(&buf, page, LEAF)?;
            let at = leaf.lower_bound(key, from);
            if let Taken::Ended(ended) = self.take_versions(&leaf, at, key, found_key, out)? {
                return Ok(ended);
            }
            let Some((mut page, h)) = right else {
                return Ok(false);
            };
            for _ in 1..h {
                let buf = self.inner(page)?;
                page = offs.scan(&buf, page, INTERNAL)?.child(0);
            }
            let buf = self.page(page)?;
            let leaf = offs.scan(&buf, page, LEAF)?;
            if leaf.is_empty() {
                return Err(Error::corruption("btree", Some(page), "empty leaf"));
            }
            match self.take_versions(&leaf, 0, key, found_key, out)? {
                Taken::Ended(ended) => return Ok(ended),
                Taken::LeafEnd(Some(last)) if last < from => match last.checked_sub(1) {
                    Some(next) => from = next,
                    None => return Ok(false),
                },
                Taken::LeafEnd(_) => {
                    return Err(Error::corruption(
                        "btree",
                        Some(page),
                        "entries out of order across leaves",
                    ))
                }
            }
        }
    }

    /// Appends the versions of `key` in `leaf` from item `at` on (see [`Self::versions`]).
    fn take_versions(
        &self,
        leaf: &NodeView,
        at: usize,
        key: &[u8],
        found_key: &[u8],
        out: &mut Vec<Entry>,
    ) -> Result<Taken> {
        for i in at..leaf.len() {
            if leaf.key(i) != key {
                return Ok(Taken::Ended(false));
            }
            let e = self.entry_at(leaf, i, found_key)?;
            let stop = e.kind != Kind::Merge;
            out.push(e);
            if stop {
                return Ok(Taken::Ended(true));
            }
        }
        Ok(Taken::LeafEnd(
            (at < leaf.len()).then(|| leaf.seq(leaf.len() - 1)),
        ))
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
            // A separator that holds every version of its key: the leaf before holds none.
            let before = order.last.as_ref().map(|(k, _)| k.clone());
            order.leaf(&leaf).map_err(|d| bad(d.into()))?;
            if let Some((k, s)) = sep {
                let at_first = cmp_entries(&leaf[0].key, leaf[0].seq, k, s).is_eq();
                if !at_first && (s != SEP_ALL || leaf[0].key[..] != *k) {
                    return Err(bad(
                        "separator is neither the child's first entry nor its key's".into(),
                    ));
                }
                if s == SEP_ALL && before.is_some_and(|b| b[..] == *k) {
                    return Err(bad(
                        "separator holds every version of its key, but the leaf before holds one"
                            .into(),
                    ));
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
///
/// It holds the leaf it is in as the cached page and its items' offsets, and decodes an entry
/// only when it hands it out; of each internal node on its path it keeps the children's page
/// numbers alone.
pub(crate) struct LeafCursor {
    tree: Arc<TreeReader>,
    /// Per internal level from the root: its children's pages, and which one the path takes.
    stack: Vec<(Vec<u64>, usize)>,
    /// The leaf the cursor is in (none in an empty tree); `offs` holds its items' offsets.
    leaf: Option<PageRef>,
    offs: Offsets,
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
            leaf: None,
            offs: Offsets::default(),
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
        let (key, seq): (&[u8], u64) = if !reverse {
            match &c.lo {
                Bound::Included(k) => (k, MAX_SEQ + 1),
                Bound::Excluded(k) => (k, 0),
                Bound::Unbounded => (&[], MAX_SEQ + 1),
            }
        } else {
            match &c.hi {
                Bound::Included(k) => (k, 0),
                Bound::Excluded(k) => (k, MAX_SEQ + 1),
                Bound::Unbounded => (&[0xff; crate::MAX_KEY_LEN + 1], 0),
            }
        };
        let mut page = c.tree.root;
        for _ in 1..c.tree.height {
            let buf = c.tree.inner(page)?;
            let node = c.offs.scan(&buf, page, INTERNAL)?;
            let i = node.child_for(key, seq);
            let kids: Vec<u64> = (0..node.len()).map(|j| node.child(j)).collect();
            page = kids[i];
            c.stack.push((kids, i));
        }
        let buf = c.tree.page(page)?;
        let leaf = c.offs.scan(&buf, page, LEAF)?;
        let pos = if !reverse {
            let mut pos = leaf.lower_bound(key, seq);
            // Skip an excluded lower bound's versions.
            if let Bound::Excluded(k) = &c.lo {
                while pos < leaf.len() && leaf.key(pos) == &k[..] {
                    pos += 1;
                }
            }
            pos
        } else {
            // pos = number of entries at or before the seek position; next returns leaf[pos-1].
            let mut pos = leaf.upper_bound(key, seq);
            if let Bound::Excluded(k) = &c.hi {
                while pos > 0 && leaf.key(pos - 1) == &k[..] {
                    pos -= 1;
                }
            }
            pos
        };
        c.pos = pos;
        c.leaf = Some(buf);
        c.leaf_page = page;
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
                    let mut page = children[n];
                    let depth = self.tree.height as usize - 1;
                    while self.stack.len() < depth {
                        let buf = self.tree.inner(page)?;
                        let node = self.offs.scan(&buf, page, INTERNAL)?;
                        let kids: Vec<u64> = (0..node.len()).map(|j| node.child(j)).collect();
                        // An internal node has a child: the scan checked.
                        let idx = if self.reverse { kids.len() - 1 } else { 0 };
                        page = kids[idx];
                        self.stack.push((kids, idx));
                    }
                    let buf = self.tree.page(page)?;
                    let n = self.offs.scan(&buf, page, LEAF)?.len();
                    self.leaf = Some(buf);
                    self.leaf_page = page;
                    self.pos = if self.reverse { n } else { 0 };
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

    /// The entry at `pos` of the current leaf (moving on past it), or `None` past the bounds.
    fn take(&mut self) -> Option<Result<Entry>> {
        let idx = if self.reverse { self.pos - 1 } else { self.pos };
        let buf = self.leaf.as_ref()?;
        let leaf = self.offs.view(buf, self.leaf_page, true);
        let key = leaf.key(idx);
        if !self.in_bounds(key) {
            self.done = true;
            return None;
        }
        let e = self.tree.entry_at(&leaf, idx, key);
        if self.reverse {
            self.pos -= 1;
        } else {
            self.pos += 1;
        }
        Some(e)
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
                self.pos < self.offs.len()
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
            return self.take();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::FaultFs;
    use crate::testutil::fault_ctx;

    /// Builds a tree of `entries` (in entry order) with nodes of about `target` bytes; returns
    /// its reader.
    fn build(entries: &[LeafEntry], target: usize) -> TreeReader {
        let fs = FaultFs::new();
        let store = fault_ctx(&fs, 1 << 20).store;
        let mut alloc = || store.alloc().alloc(1).start;
        let mut level =
            write_nodes(&store, entries, target, Purpose::Merge, &mut alloc).expect("leaves");
        let mut height = 1;
        while level.len() > 1 {
            level = write_nodes(&store, &level, target, Purpose::Merge, &mut alloc)
                .expect("internal level");
            height += 1;
        }
        TreeReader {
            root: level[0].page,
            height,
            store: store.clone(),
            _pin: Arc::new(()),
        }
    }

    /// What [`TreeReader::versions`] must find: the entries of `key` at or below `seq`, up to
    /// the first Put or Delete.
    fn expected(entries: &[LeafEntry], key: &[u8], seq: u64) -> (Vec<(u64, Kind)>, bool) {
        let mut out = Vec::new();
        for e in entries.iter().filter(|e| &e.key[..] == key && e.seq <= seq) {
            out.push((e.seq, e.kind));
            if e.kind != Kind::Merge {
                return (out, true);
            }
        }
        (out, false)
    }

    /// A key's versions that span many leaves (small nodes, long merge chains) are all found,
    /// from any snapshot: the step into the next leaf and the descents again from the root.
    #[test]
    fn versions_across_leaves_are_all_found() {
        let seed = crate::testutil::seed();
        let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(seed);
        use rand::Rng;
        for _ in 0..10 {
            let mut entries = Vec::new();
            for k in 0..rng.gen_range(1..30u32) {
                let versions = if rng.gen_bool(0.3) {
                    rng.gen_range(1..80)
                } else {
                    1
                };
                for v in 0..versions {
                    let kind = match rng.gen_range(0..10) {
                        0 => Kind::Delete,
                        1 | 2 => Kind::Put,
                        _ => Kind::Merge,
                    };
                    entries.push(LeafEntry {
                        key: Arc::from(format!("key{k:03}").into_bytes()),
                        seq: 1000 - 2 * v as u64,
                        kind,
                        val: Val::Inline(Arc::from(vec![v as u8; rng.gen_range(0..40)])),
                    });
                }
            }
            let target = rng.gen_range(100..400);
            let tree = build(&entries, target);
            for k in 0..31u32 {
                let key = format!("key{k:03}").into_bytes();
                for seq in [0, 500, 900, 950, 997, 998, 999, 1000, 1001, MAX_SEQ] {
                    let mut out = Vec::new();
                    let ended = tree
                        .versions(&key, seq, b"found", &mut out)
                        .expect("versions");
                    let got: Vec<(u64, Kind)> = out.iter().map(|e| (e.seq, e.kind)).collect();
                    assert_eq!(
                        (got, ended),
                        expected(&entries, &key, seq),
                        "key{k:03} at {seq}, nodes of {target} bytes, height {}",
                        tree.height
                    );
                    assert!(out.iter().all(|e| &e.key[..] == b"found"));
                }
            }
        }
    }
}
