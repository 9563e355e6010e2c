//! Positioned descent through a run's tree, and the lazy range iterator built on it.

use std::ops::Bound;
use std::sync::Arc;

use super::format::{Fence, Node};
use super::{Readahead, Run};
use crate::entry::{Entry, MAX_SEQ};
use crate::error::Result;
use crate::merge::within_hi;
use crate::storage::Purpose;

/// A position in the tree: one (node, item index) per level, root first, leaf last. The leaf
/// index may equal the leaf's count (just past its last entry).
#[derive(Default)]
pub(crate) struct Cursor {
    path: Vec<(Node, usize)>,
    /// Data pages read ahead by forward moves of scans that are not user reads.
    ahead: Readahead,
    /// The leaf a forward move left last, when it spills into the next one
    /// ([`super::format::AUX_SPILL`]): the first bytes of the next leaf's first value, at hand
    /// when the window read ahead no longer holds it.
    spilled: Option<Node>,
}

impl Cursor {
    /// The leaf node and index, when the cursor is at an entry.
    pub(crate) fn leaf(&self) -> Option<(&Node, usize)> {
        self.path
            .last()
            .filter(|(n, i)| n.level == 0 && *i < n.count)
            .map(|(n, i)| (n, *i))
    }

    /// Empties the path (dropping its pages), keeping its room for the next seek. User reads
    /// leave the read-ahead state untouched, so a point lookup's cursor can be reused.
    pub(crate) fn clear(&mut self) {
        self.path.clear();
        self.spilled = None;
    }

    /// The leaf before the current one, if a forward move left it and it spills.
    pub(crate) fn spilled(&self) -> Option<&Node> {
        self.spilled.as_ref()
    }

    /// The read-ahead window of forward moves (blob values are taken from it too).
    pub(crate) fn ahead(&self) -> &Readahead {
        &self.ahead
    }

    /// Positions at the first entry at or after `(key, seq)` in entry order (or past the end of
    /// the leaf where it would be).
    pub(crate) fn seek(&mut self, run: &Run, key: &[u8], seq: u64, purpose: Purpose) -> Result<()> {
        self.seek_in(run, key, seq, purpose, None)
    }

    /// [`Cursor::seek`] for a forward range scan bounded above by `hi` (with a user read, its
    /// first data page is read with the next when the scan may go on into it,
    /// [`Run::leaf_for`]).
    pub(crate) fn seek_scan(
        &mut self,
        run: &Run,
        key: &[u8],
        purpose: Purpose,
        hi: &Bound<Vec<u8>>,
    ) -> Result<()> {
        self.seek_in(run, key, FIRST_SEQ, purpose, Some(hi))
    }

    fn seek_in(
        &mut self,
        run: &Run,
        key: &[u8],
        seq: u64,
        purpose: Purpose,
        scan: Option<&Bound<Vec<u8>>>,
    ) -> Result<()> {
        self.path.clear();
        let Some(mut node) = run.root_node(purpose)? else {
            return Ok(());
        };
        while node.level > 0 {
            // Last child whose first entry is at or before the target (child 0 if none).
            let i = node.upper_bound(key, seq)?.saturating_sub(1);
            let child = if purpose == Purpose::UserRead {
                run.leaf_for(&node, i, key, scan)?
            } else {
                run.child_node_ahead(&node, i, purpose, &mut self.ahead)?
            };
            self.path.push((node, i));
            node = child;
        }
        let i = node.lower_bound(key, seq)?;
        self.path.push((node, i));
        Ok(())
    }

    /// Positions at the first entry of the run.
    pub(crate) fn seek_first(&mut self, run: &Run, purpose: Purpose) -> Result<()> {
        self.path.clear();
        if let Some(node) = run.root_node(purpose)? {
            self.descend(run, node, false, purpose)?;
        }
        Ok(())
    }

    /// Reads the index path to the run's first data page and asks for the read-ahead window
    /// that starts there, without waiting for it ([`Run::prefetch_child`]); the path is kept,
    /// and [`Cursor::resume_first`] ends the descent where this one stopped.
    pub(crate) fn prefetch_first(&mut self, run: &Run, purpose: Purpose) -> Result<()> {
        self.path.clear();
        let Some(mut node) = run.root_node(purpose)? else {
            return Ok(());
        };
        while node.level > 1 {
            let child = run.child_node(&node, 0, purpose)?;
            self.path.push((node, 0));
            node = child;
        }
        if node.level == 1 && purpose != Purpose::UserRead {
            run.prefetch_child(&node, 0, purpose, &mut self.ahead)?;
        }
        self.path.push((node, 0));
        Ok(())
    }

    /// After [`Cursor::prefetch_first`]: positions at the first entry of the run, reading its
    /// first data page from the window asked for then.
    pub(crate) fn resume_first(&mut self, run: &Run, purpose: Purpose) -> Result<()> {
        match self.path.pop() {
            None => Ok(()),
            Some((node, _)) if node.level == 0 => {
                self.path.push((node, 0));
                Ok(())
            }
            Some((node, _)) => self.descend(run, node, false, purpose),
        }
    }

    /// Positions just past the last entry of the run (in its last leaf).
    pub(crate) fn seek_end(&mut self, run: &Run, purpose: Purpose) -> Result<()> {
        self.path.clear();
        if let Some(node) = run.root_node(purpose)? {
            self.descend(run, node, true, purpose)?;
            if let Some((n, i)) = self.path.last_mut() {
                *i = n.count;
            }
        }
        Ok(())
    }

    /// Pushes `node` and its leftmost (or rightmost) descendants down to a leaf.
    fn descend(
        &mut self,
        run: &Run,
        mut node: Node,
        rightmost: bool,
        purpose: Purpose,
    ) -> Result<()> {
        loop {
            let i = if rightmost { node.count - 1 } else { 0 };
            if node.level == 0 {
                self.path.push((node, i));
                return Ok(());
            }
            let child = if rightmost {
                run.child_node(&node, i, purpose)?
            } else {
                run.child_node_ahead(&node, i, purpose, &mut self.ahead)?
            };
            self.path.push((node, i));
            node = child;
        }
    }

    /// Moves to the next entry; a leaf index past the end moves into the next leaf. Leaves the
    /// cursor empty past the last entry.
    pub(crate) fn next(&mut self, run: &Run, purpose: Purpose) -> Result<()> {
        if let Some((n, i)) = self.path.last_mut() {
            if *i < n.count {
                *i += 1;
            }
        }
        self.normalize_forward(run, purpose)
    }

    /// Whether the cursor is at the last item of its leaf and every item after it lies above
    /// `hi`: the separator of the next leaf, found in the lowest index node on the path that
    /// has a child after its own, is at most the next leaf's first key and above every key
    /// before it. A forward scan ends there without reading the next leaf.
    pub(crate) fn last_within(&self, hi: &Bound<Vec<u8>>) -> Result<bool> {
        let Some((leaf, i)) = self.path.last() else {
            return Ok(false);
        };
        if *i + 1 != leaf.count || matches!(hi, Bound::Unbounded) {
            return Ok(false);
        }
        let above = self.path[..self.path.len() - 1]
            .iter()
            .rev()
            .find(|(n, j)| j + 1 < n.count);
        let Some((node, j)) = above else {
            // The run's last item: nothing after it to read.
            return Ok(false);
        };
        let (sep, _) = node.key_seq(j + 1)?;
        Ok(!within_hi(sep, hi))
    }

    /// When the leaf index is past the leaf's end, moves to the first entry of the next leaf.
    pub(crate) fn normalize_forward(&mut self, run: &Run, purpose: Purpose) -> Result<()> {
        match self.path.last() {
            Some((n, i)) if *i >= n.count => {}
            _ => return Ok(()),
        }
        if let Some((leaf, _)) = self.path.pop() {
            self.spilled = (leaf.aux & super::format::AUX_SPILL != 0).then_some(leaf);
        }
        while let Some((n, i)) = self.path.last_mut() {
            if *i + 1 < n.count {
                *i += 1;
                let child = run.child_node_ahead(n, *i, purpose, &mut self.ahead)?;
                return self.descend(run, child, false, purpose);
            }
            self.path.pop();
        }
        Ok(())
    }

    /// Moves to the previous entry; leaves the cursor empty before the first entry.
    pub(crate) fn prev(&mut self, run: &Run, purpose: Purpose) -> Result<()> {
        match self.path.last_mut() {
            Some((_, i)) if *i > 0 => {
                *i -= 1;
                return Ok(());
            }
            Some(_) => {}
            None => return Ok(()),
        }
        self.path.pop();
        while let Some((n, i)) = self.path.last_mut() {
            if *i > 0 {
                *i -= 1;
                let child = run.child_node(n, *i, purpose)?;
                return self.descend(run, child, true, purpose);
            }
            self.path.pop();
        }
        Ok(())
    }
}

/// A key and the seq that orders first among that key's versions: seeking to it lands on the
/// newest version of `key` (seqs are at most `MAX_SEQ`).
const FIRST_SEQ: u64 = u64::MAX;
const _: () = assert!(MAX_SEQ < FIRST_SEQ);

/// The smallest key greater than `key`.
fn successor(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    k
}

/// What a [`RunIter`] calls with each fence item it passes (FD-tree levels): the fence's key
/// and what it points to.
pub type FenceSink = Box<dyn FnMut(&[u8], Fence) + Send>;

/// Iterator over a run's entries within key bounds, all versions, forward in entry order or
/// exactly reversed. Reads pages lazily as it moves. After an error it yields nothing more.
/// Fence items are not entries: they are skipped, or handed to a [`FenceSink`]
/// ([`RunIter::with_fences`]).
pub struct RunIter {
    run: Arc<Run>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    purpose: Purpose,
    cursor: Cursor,
    started: bool,
    advance: bool,
    done: bool,
    fences: Option<FenceSink>,
    /// [`RunIter::prefetch`] read the index path to the first data page.
    prefetched: bool,
}

impl RunIter {
    /// Hands every fence item the iterator passes to `sink`, in the order met: going forward,
    /// each fence before the first entry that follows it (an FD-tree merge interleaves the
    /// external fences it keeps this way).
    pub fn with_fences(mut self, sink: FenceSink) -> Self {
        self.fences = Some(sink);
        self
    }

    /// Reads the index path to the run's first data page and asks for the first read-ahead
    /// window, without waiting for it, so that the first entry, read later, costs no wait for
    /// the device (a merge in bounded steps opens its inputs so, one a step, and reads them
    /// in the steps after). Only for a forward scan from the run's start that is not a user
    /// read and has not started; others are left as they are.
    pub fn prefetch(&mut self) -> Result<()> {
        let from_start = !self.reverse && matches!(self.lo, Bound::Unbounded);
        if self.started || self.prefetched || !from_start || self.purpose == Purpose::UserRead {
            return Ok(());
        }
        self.prefetched = true;
        self.cursor.prefetch_first(&self.run, self.purpose)
    }

    /// Caps the pages of one read-ahead request.
    pub(crate) fn set_readahead(&mut self, pages: u64) {
        self.cursor.ahead.max_pages = pages.max(1);
    }

    pub(crate) fn new(
        run: Arc<Run>,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
        purpose: Purpose,
    ) -> Self {
        RunIter {
            run,
            lo,
            hi,
            reverse,
            purpose,
            cursor: Cursor::default(),
            started: false,
            advance: false,
            done: false,
            fences: None,
            prefetched: false,
        }
    }

    fn start(&mut self) -> Result<()> {
        let (run, p) = (&*self.run, self.purpose);
        if !self.reverse {
            match &self.lo {
                Bound::Unbounded if self.prefetched => self.cursor.resume_first(run, p)?,
                Bound::Unbounded => self.cursor.seek_first(run, p)?,
                Bound::Included(k) => self.cursor.seek_scan(run, k, p, &self.hi)?,
                Bound::Excluded(k) => self.cursor.seek_scan(run, &successor(k), p, &self.hi)?,
            }
            self.cursor.normalize_forward(run, p)
        } else {
            match &self.hi {
                Bound::Unbounded => self.cursor.seek_end(run, p)?,
                Bound::Excluded(k) => self.cursor.seek(run, k, FIRST_SEQ, p)?,
                Bound::Included(k) => self.cursor.seek(run, &successor(k), FIRST_SEQ, p)?,
            }
            self.cursor.prev(run, p)
        }
    }

    fn in_bounds(&self, key: &[u8]) -> bool {
        if !self.reverse {
            within_hi(key, &self.hi)
        } else {
            match &self.lo {
                Bound::Unbounded => true,
                Bound::Included(l) => key >= l.as_slice(),
                Bound::Excluded(l) => key > l.as_slice(),
            }
        }
    }

    fn step(&mut self) -> Result<Option<Entry>> {
        loop {
            if !self.started {
                self.started = true;
                self.start()?;
            } else if self.advance {
                if self.reverse {
                    self.cursor.prev(&self.run, self.purpose)?;
                } else if self.fences.is_none() && self.cursor.last_within(&self.hi)? {
                    // The rest lies above the bound: not read.
                    return Ok(None);
                } else {
                    self.cursor.next(&self.run, self.purpose)?;
                }
            }
            self.advance = true;
            let Some((node, i)) = self.cursor.leaf() else {
                return Ok(None);
            };
            let item = node.data(i)?;
            if !self.in_bounds(item.key) {
                return Ok(None);
            }
            // Fences (FD-tree levels) are not entries.
            match (item.fence, &mut self.fences) {
                (None, _) => {
                    return self
                        .run
                        .entry(node.page, &item, self.purpose, Some(&self.cursor))
                        .map(Some)
                }
                (Some(f), Some(sink)) => sink(item.key, f),
                (Some(_), None) => {}
            }
        }
    }
}

impl Iterator for RunIter {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The data pages of a run in order, with all their items (fences included), read ahead in
/// large requests: how an FD-tree check walks a level. After an error it yields nothing more.
pub(crate) struct DataPages {
    run: Arc<Run>,
    purpose: Purpose,
    cursor: Cursor,
    started: bool,
    done: bool,
}

impl DataPages {
    pub(crate) fn new(run: Arc<Run>, purpose: Purpose) -> DataPages {
        DataPages {
            run,
            purpose,
            cursor: Cursor::default(),
            started: false,
            done: false,
        }
    }

    fn step(&mut self) -> Result<Option<Node>> {
        if !self.started {
            self.started = true;
            self.cursor.seek_first(&self.run, self.purpose)?;
        } else {
            if let Some((n, i)) = self.cursor.path.last_mut() {
                *i = n.count;
            }
            self.cursor.normalize_forward(&self.run, self.purpose)?;
        }
        Ok(self.cursor.leaf().map(|(n, _)| n.clone()))
    }
}

impl Iterator for DataPages {
    type Item = Result<Node>;

    fn next(&mut self) -> Option<Result<Node>> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(n)) => Some(Ok(n)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
