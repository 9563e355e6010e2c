//! Writing partitions and editing the tree they hang from.
//!
//! [`ExtentWriter`] lays a partition's pages out in order, in extents of about `write_pages`
//! pages it allocates as it goes, and writes them in runs of `write_pages` (spec §3.8 step 3: "all leaf pages sequentially"). [`TreeEdit`] then
//! replaces the leaf children of a partition's key range in the copy-on-write tree: only the
//! inner nodes on the paths to that range are rewritten, to fresh pages (correction 7), which
//! are the paper's "some modified inner nodes" of Figure 4.

use std::collections::HashSet;
use std::sync::Arc;

use crate::error::Result;
use crate::index::btree::node::{
    blob_pages, decode_internal, decode_leaf, encode_leaf, node_type, Child, LeafEntry, Val,
    BODY_ROOM, INLINE_MAX, INTERNAL,
};
use crate::index::btree::tree::write_nodes;
use crate::storage::{AlignedBuf, Extent, PageFile, Purpose, PAGE_BODY, PAGE_SIZE};

/// Writes pages in order, `chunk` pages per write request, into extents it allocates as it
/// goes, `chunk` pages at a time (more for a run that must be contiguous: a large value, a
/// bloom filter). A partition's output never needs one free gap of its whole size, which would
/// rarely be found while its merge inputs are still allocated and so would grow the file; an
/// allocation adjacent to the previous one extends it, so on a file with room at the end the
/// output is still one extent.
pub struct ExtentWriter {
    /// Extents allocated so far, in write order; the last one is being filled (its pages past
    /// `cur_used` are allocated but unused until [`ExtentWriter::finish`] gives them back).
    pub exts: Vec<Extent>,
    cur_used: u64,
    buf: AlignedBuf,
    in_buf: usize,
    chunk: usize,
    purpose: Purpose,
    /// Write requests issued and pages written.
    pub writes: u64,
    pub pages: u64,
}

impl ExtentWriter {
    pub fn new(chunk: usize, purpose: Purpose) -> ExtentWriter {
        let chunk = chunk.max(1);
        ExtentWriter {
            exts: Vec::new(),
            cur_used: 0,
            buf: AlignedBuf::zeroed(chunk * PAGE_SIZE),
            in_buf: 0,
            chunk,
            purpose,
            writes: 0,
            pages: 0,
        }
    }

    /// Pages handed out so far.
    pub fn used(&self) -> u64 {
        self.pages + self.in_buf as u64
    }

    /// Makes room for `k` contiguous pages at the end of the last extent: its unused tail is
    /// given back and a fresh allocation of at least `chunk` pages is taken, extending the
    /// last extent where it is adjacent (then the buffered pages stay buffered).
    fn ensure(&mut self, store: &PageFile, k: u64) -> Result<()> {
        if let Some(last) = self.exts.last() {
            if last.pages - self.cur_used >= k {
                return Ok(());
            }
        }
        if let Some(last) = self.exts.last_mut() {
            let tail = last.pages - self.cur_used;
            if tail > 0 {
                store.alloc().release(Extent {
                    start: last.start + self.cur_used,
                    pages: tail,
                });
                last.pages = self.cur_used;
            }
        }
        let new = store.alloc().alloc(k.max(self.chunk as u64));
        if let Some(last) = self.exts.last_mut() {
            if last.start + last.pages == new.start {
                last.pages += new.pages;
                return Ok(());
            }
        }
        self.flush(store)?;
        if self.exts.last().is_some_and(|l| l.pages == 0) {
            self.exts.pop();
        }
        self.exts.push(new);
        self.cur_used = 0;
        Ok(())
    }

    /// The next page, filled by `fill` (its body); returns its page number.
    pub fn page(&mut self, store: &PageFile, fill: impl FnOnce(&mut [u8])) -> Result<u64> {
        self.ensure(store, 1)?;
        let Some(last) = self.exts.last() else {
            return Err(crate::error::Error::corruption(
                "pbt",
                None,
                "no extent to write a page into".to_string(),
            ));
        };
        let page = last.start + self.cur_used;
        let at = self.in_buf * PAGE_SIZE;
        self.buf[at..at + PAGE_SIZE].fill(0);
        fill(&mut self.buf[at..at + PAGE_BODY]);
        self.in_buf += 1;
        self.cur_used += 1;
        if self.in_buf == self.chunk {
            self.flush(store)?;
        }
        Ok(page)
    }

    /// Writes the pages buffered so far (one request: they are contiguous in the last extent).
    pub fn flush(&mut self, store: &PageFile) -> Result<()> {
        if self.in_buf == 0 {
            return Ok(());
        }
        let Some(last) = self.exts.last() else {
            return Ok(());
        };
        let start = last.start + self.cur_used - self.in_buf as u64;
        let len = self.in_buf * PAGE_SIZE;
        store.write(start, &mut self.buf[..len], self.purpose)?;
        self.writes += 1;
        self.pages += self.in_buf as u64;
        self.in_buf = 0;
        Ok(())
    }

    /// Writes what is buffered and gives back the unused tail of the last extent; the
    /// extents then hold exactly the pages written.
    pub fn finish(&mut self, store: &PageFile) -> Result<()> {
        self.flush(store)?;
        if let Some(last) = self.exts.last_mut() {
            let tail = last.pages - self.cur_used;
            if tail > 0 {
                store.alloc().release(Extent {
                    start: last.start + self.cur_used,
                    pages: tail,
                });
                last.pages = self.cur_used;
            }
            if last.pages == 0 {
                self.exts.pop();
                self.cur_used = self.exts.last().map_or(0, |l| l.pages);
            }
        }
        Ok(())
    }

    /// Gives back every page allocated (on a failure: nothing committed refers to them).
    pub fn release_all(&mut self, store: &PageFile) {
        for e in self.exts.drain(..) {
            if e.pages > 0 {
                store.alloc().release(e);
            }
        }
        self.cur_used = 0;
        self.in_buf = 0;
    }

    /// Writes one leaf (its large values first, to the pages before it); returns its child.
    pub fn leaf(&mut self, store: &PageFile, entries: &[LeafEntry]) -> Result<Child> {
        let mut out: Vec<LeafEntry> = Vec::with_capacity(entries.len());
        for e in entries {
            let mut e = e.clone();
            if let Val::Inline(v) = &e.val {
                if e.key.len() + v.len() > INLINE_MAX {
                    let v = v.clone();
                    self.ensure(store, blob_pages(v.len()))?;
                    let mut start = None;
                    for chunk in v.chunks(PAGE_BODY) {
                        let p = self.page(store, |b| b[..chunk.len()].copy_from_slice(chunk))?;
                        start.get_or_insert(p);
                    }
                    let start = match start {
                        Some(s) => s,
                        None => self.page(store, |_| {})?,
                    };
                    e.val = Val::Blob {
                        start,
                        len: v.len() as u32,
                    };
                }
            }
            out.push(e);
        }
        let page = self.page(store, |b| encode_leaf(&out, b))?;
        Ok(Child {
            key: out[0].key.clone(),
            seq: out[0].seq,
            page,
        })
    }

    /// Writes `bytes` into the following pages, contiguous; returns the extent they take.
    pub fn bytes(&mut self, store: &PageFile, bytes: &[u8]) -> Result<Extent> {
        let mut next = 0;
        Ok(self
            .bytes_step(store, bytes, &mut next, u64::MAX)?
            .unwrap_or(Extent { start: 0, pages: 0 }))
    }

    /// [`ExtentWriter::bytes`] a few pages at a time (a filter written in bounded steps but
    /// read back as one extent): writes at most `max_pages` more of them, from page `*next` of
    /// `bytes` (0 at the first call, which makes room for all of them contiguous); returns
    /// their extent once the last is written.
    pub fn bytes_step(
        &mut self,
        store: &PageFile,
        bytes: &[u8],
        next: &mut usize,
        max_pages: u64,
    ) -> Result<Option<Extent>> {
        let n = bytes.len().div_ceil(PAGE_BODY);
        if n == 0 {
            return Ok(None);
        }
        if *next == 0 {
            self.ensure(store, n as u64)?;
        }
        let mut last = 0;
        for c in bytes
            .chunks(PAGE_BODY)
            .skip(*next)
            .take(max_pages.max(1) as usize)
        {
            last = self.page(store, |b| b[..c.len()].copy_from_slice(c))?;
            *next += 1;
        }
        Ok((*next == n).then(|| Extent {
            start: last + 1 - n as u64,
            pages: n as u64,
        }))
    }
}

/// A copy-on-write edit of the tree's inner nodes.
pub struct TreeEdit<'a> {
    store: &'a PageFile,
    target: usize,
    purpose: Purpose,
    /// Pages this edit wrote (reachable from no commit yet).
    fresh: HashSet<u64>,
    /// Pages of the committed tree it replaced (freed by the commit).
    pub freed: Vec<Extent>,
    pub pages_written: u64,
}

impl<'a> TreeEdit<'a> {
    pub fn new(store: &'a PageFile, fill_percent: u32, purpose: Purpose) -> TreeEdit<'a> {
        TreeEdit {
            store,
            target: BODY_ROOM * fill_percent as usize / 100,
            purpose,
            fresh: HashSet::new(),
            freed: Vec::new(),
            pages_written: 0,
        }
    }

    /// Pages written by this edit, for the manifest commit.
    pub fn added(&self) -> Vec<Extent> {
        self.fresh
            .iter()
            .map(|&start| Extent { start, pages: 1 })
            .collect()
    }

    fn drop_page(&mut self, page: u64) {
        let e = Extent {
            start: page,
            pages: 1,
        };
        if self.fresh.remove(&page) {
            self.store.alloc().release(e);
        } else {
            self.freed.push(e);
        }
    }

    fn pack(&mut self, children: Vec<Child>) -> Result<Vec<Child>> {
        let (store, fresh) = (self.store, &mut self.fresh);
        let mut alloc = || {
            let page = store.alloc().alloc(1).start;
            fresh.insert(page);
            page
        };
        let out = write_nodes(store, &children, self.target, self.purpose, &mut alloc)?;
        self.pages_written += out.len() as u64;
        Ok(out)
    }

    /// Replaces the leaves whose keys lie in `[lo, hi)` (tree keys; a partition's range) by
    /// `new` (leaf children in order, all within the range) in the tree at `root` of
    /// `height`; returns the new root and height (0, 0: empty).
    pub fn apply(
        &mut self,
        root: u64,
        height: u32,
        lo: &[u8],
        hi: &[u8],
        new: &[Child],
    ) -> Result<(u64, u32)> {
        let (mut level, mut h) = if root == 0 {
            (new.to_vec(), 1)
        } else {
            // A root leaf's key decides whether it goes; above, the one root covers everything.
            let (key, seq) = if height <= 1 {
                let leaf = decode_leaf(&self.store.read(root, self.purpose)?, root)?;
                match leaf.first() {
                    Some(e) => (e.key.clone(), e.seq),
                    None => (Arc::from(&[][..]), 0),
                }
            } else {
                (Arc::from(&[][..]), 0)
            };
            let top = vec![Child {
                key,
                seq,
                page: root,
            }];
            (self.edit(top, height.max(1), lo, hi, new)?, height.max(1))
        };
        while level.len() > 1 {
            level = self.pack(level)?;
            h += 1;
        }
        // Collapse a root with a single child.
        while h > 1 && !level.is_empty() {
            let page = level[0].page;
            let body = self.store.read(page, self.purpose)?;
            if node_type(&body, page)? != INTERNAL {
                break;
            }
            let kids = decode_internal(&body, page)?;
            if kids.len() != 1 {
                break;
            }
            self.drop_page(page);
            level = kids;
            h -= 1;
        }
        Ok(match level.first() {
            Some(c) => (c.page, h),
            None => (0, 0),
        })
    }

    /// The edit at one level: `children` are nodes of `height` (1: leaves); returns what
    /// replaces them, of the same height.
    fn edit(
        &mut self,
        children: Vec<Child>,
        height: u32,
        lo: &[u8],
        hi: &[u8],
        new: &[Child],
    ) -> Result<Vec<Child>> {
        let inside = |k: &[u8]| k >= lo && k < hi;
        if height == 1 {
            let mut out: Vec<Child> = children.into_iter().filter(|c| !inside(&c.key)).collect();
            if let Some(first) = new.first() {
                let at = out.partition_point(|c| c.key[..] < first.key[..]);
                out.splice(at..at, new.iter().cloned());
            }
            return Ok(out);
        }
        // Child i covers keys from its separator (the first child: from the start) to the next.
        let n = children.len();
        let target = new.first().map(|f| {
            children[1..]
                .partition_point(|c| c.key[..] <= f.key[..])
                .min(n - 1)
        });
        let mut out = Vec::with_capacity(n + 2);
        for (i, c) in children.iter().enumerate() {
            let starts_before_hi = i == 0 || c.key[..] < *hi;
            let ends_after_lo = i + 1 == n || children[i + 1].key[..] > *lo;
            if (starts_before_hi && ends_after_lo) || target == Some(i) {
                let body = self.store.read(c.page, self.purpose)?;
                let kids = decode_internal(&body, c.page)?;
                self.drop_page(c.page);
                let give: &[Child] = if target == Some(i) { new } else { &[] };
                let sub = self.edit(kids, height - 1, lo, hi, give)?;
                out.extend(self.pack(sub)?);
            } else {
                out.push(c.clone());
            }
        }
        Ok(out)
    }
}
