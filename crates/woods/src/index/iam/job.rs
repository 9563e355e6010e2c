//! Resumable steps (issue 19 item 3): a memtable flush, a node flush, a combine or a split is
//! a [`Job`] planned from one version and advanced by `work(budget)` a bounded amount at a
//! time. Its input stream, its run builders and its half-finished nodes are kept between calls,
//! and the call that completes the last node publishes the job (the committer thread makes it
//! durable), so no caller of `work`, and no writer paying debt, waits for a whole node flush
//! or for a sync.
//!
//! One call of [`Job::advance`] with budget `b` bytes does one of these:
//! - moves entries into run builders until `b` user bytes have passed (plus the entry that
//!   crosses it): at most `⌈b / 4096⌉ + 1` data pages filled, plus the blob pages of one value;
//!   the builders hand whole chunks to the device (`RunOptions::extent_pages`, at most 64
//!   pages), so the pages written in one call may be up to two chunks more than that (the
//!   last chunk of a node whose finish completes in the call, the first of the next node);
//! - or one bounded step of finishing a node's run ([`RunBuilder::finish_step`]): index pages
//!   for about `b` bytes, or the filter hashed for `b / 8` keys; the step that completes the
//!   filter writes the filter's pages and the header (about 1 % of the node's data);
//! - and, when that was the last node, the job's publication (no I/O; the committer thread
//!   syncs the data file and appends the manifest record).
//!
//! A job is planned from the version it started on, which no other step changes while it runs
//! (one job at a time), and readers keep reading that version until the job publishes the
//! next. A failed call abandons the job: what it wrote lies past published region cursors or
//! in extents no version names, as a whole step's failure left it before.

use std::collections::VecDeque;
use std::iter::Peekable;
use std::ops::{Bound, Range};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::iter::node_iter;
use super::node::{Node, NodeFile, Version};
use super::policy::{self, Action};
use super::{Built, IamTree, Open, Written};
use crate::entry::{cmp_entries, Entry};
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::merge::{Compactor, MergeIter};
use crate::run::{Region, RunBuilder};
use crate::storage::{Purpose, PAGE_SIZE};

/// An owned, sendable stream of entries.
pub(super) type Input = Box<dyn Iterator<Item = Result<Entry>> + Send>;

/// A job's input, shared by the parts that cut it among its targets; `read` counts the user
/// bytes taken from it (the job's progress, which `debt` subtracts).
struct Source {
    it: Peekable<Input>,
    read: Arc<AtomicU64>,
}

/// The first and last key a part passed.
#[derive(Default)]
struct Seen {
    first: Option<Arc<[u8]>>,
    last: Option<Arc<[u8]>>,
}

/// The entries of the shared source below `cut` (all that are left when `None`): one target's
/// partition.
struct Part {
    src: Arc<Mutex<Source>>,
    cut: Option<Vec<u8>>,
    seen: Arc<Mutex<Seen>>,
}

impl Iterator for Part {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        let mut src = self.src.lock();
        let below = match src.it.peek()? {
            Ok(e) => self.cut.as_deref().is_none_or(|c| &*e.key < c),
            Err(_) => true,
        };
        if !below {
            return None;
        }
        let r = src.it.next()?;
        if let Ok(e) = &r {
            src.read.fetch_add(e.user_bytes() as u64, Ordering::Relaxed);
            let mut s = self.seen.lock();
            if s.first.is_none() {
                s.first = Some(e.key.clone());
            }
            s.last = Some(e.key.clone());
        }
        Some(r)
    }
}

impl Part {
    /// Whether the part has an entry (or an error) left.
    fn has_data(&self) -> bool {
        let mut src = self.src.lock();
        match src.it.peek() {
            None => false,
            Some(Err(_)) => true,
            Some(Ok(e)) => self.cut.as_deref().is_none_or(|c| &*e.key < c),
        }
    }
}

/// Two sorted streams merged in entry order; of two copies of one version, `a`'s (the newer
/// source) is kept.
pub(super) struct Merge2<A: Iterator<Item = Result<Entry>>, B: Iterator<Item = Result<Entry>>> {
    a: Peekable<A>,
    b: Peekable<B>,
}

impl<A: Iterator<Item = Result<Entry>>, B: Iterator<Item = Result<Entry>>> Iterator
    for Merge2<A, B>
{
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        let order = match (self.a.peek(), self.b.peek()) {
            (None, None) => return None,
            (Some(_), None) | (Some(Err(_)), _) => std::cmp::Ordering::Less,
            (None, Some(_)) | (_, Some(Err(_))) => std::cmp::Ordering::Greater,
            (Some(Ok(x)), Some(Ok(y))) => cmp_entries(&x.key, x.seq, &y.key, y.seq),
        };
        match order {
            std::cmp::Ordering::Less => self.a.next(),
            std::cmp::Ordering::Greater => self.b.next(),
            std::cmp::Ordering::Equal => {
                self.b.next();
                self.a.next()
            }
        }
    }
}

/// Where a task's entries go: nodes written one after another, a new one each time one holds
/// `piece` user bytes (cut only between user keys, correction 5), the first into `into` when
/// given (an append into a child's region), the others into new regions.
pub(super) struct Writer {
    piece: Option<u64>,
    purpose: Purpose,
    into: Option<(Arc<NodeFile>, Region)>,
    cur: Option<Open>,
    /// A full node whose run is being finished in steps.
    sealing: Option<Open>,
    done: Vec<Written>,
}

impl Writer {
    pub(super) fn new(
        piece: Option<u64>,
        purpose: Purpose,
        into: Option<(Arc<NodeFile>, Region)>,
    ) -> Writer {
        Writer {
            piece,
            purpose,
            into,
            cur: None,
            sealing: None,
            done: Vec::new(),
        }
    }

    /// Adds one entry; a node that is full moves to `sealing` (which must be empty).
    fn add(&mut self, tree: &IamTree, e: &Entry, built: &mut Built) -> Result<()> {
        let full = self.cur.as_ref().is_some_and(|(_, _, _, last, bytes)| {
            self.piece.is_some_and(|p| *bytes >= p) && last.as_slice() != &*e.key
        });
        if full {
            self.sealing = self.cur.take();
        }
        let c = match &mut self.cur {
            Some(c) => c,
            None => {
                let store = &tree.ctx.store;
                let (file, region) = match self.into.take() {
                    Some(x) => x,
                    None => {
                        // Its hole stays unwritten until later appends: no old blocks under it.
                        let extent = store.alloc().alloc_sparse(tree.region_pages());
                        let file = NodeFile::new(extent, store.clone());
                        built.files.push(file.clone());
                        (file, Region::new(extent))
                    }
                };
                let b =
                    RunBuilder::in_region(store.clone(), tree.run_options(self.purpose), region);
                self.cur.insert((file, b, e.key.to_vec(), Vec::new(), 0))
            }
        };
        c.1.add(e)?;
        c.4 += e.user_bytes() as u64;
        if c.3.as_slice() != &*e.key {
            c.3 = e.key.to_vec();
        }
        Ok(())
    }

    /// One bounded step of finishing the sealing node; true when it is done (or there is none).
    fn seal_step(&mut self, tree: &IamTree, budget: u64, built: &mut Built) -> Result<bool> {
        let Some(s) = &mut self.sealing else {
            return Ok(true);
        };
        if !s.1.finish_step(budget)? {
            return Ok(false);
        }
        if let Some(open) = self.sealing.take() {
            self.done.push(tree.finish_written(open, built)?);
        }
        Ok(true)
    }

    /// Writes all of `input` (no bound: for building nodes outside a job).
    #[cfg(test)]
    pub(super) fn write_all(
        mut self,
        tree: &IamTree,
        input: impl Iterator<Item = Result<Entry>>,
        built: &mut Built,
    ) -> Result<Vec<Written>> {
        for e in input {
            let e = e?;
            self.add(tree, &e, built)?;
            self.seal_step(tree, u64::MAX, built)?;
        }
        self.sealing = self.cur.take();
        self.seal_step(tree, u64::MAX, built)?;
        Ok(self.done)
    }
}

/// What a task's written nodes become.
enum Then {
    /// New L1 nodes from a memtable that overlapped no node: ranges widened to its range.
    Fresh { lo: Vec<u8>, hi: Vec<u8> },
    /// A child's part appended to it as its newest sequence.
    Append { child: Arc<Node>, bound: u32 },
    /// A child merged with its part into one sequence, or cut into several nodes.
    Merge { child: Arc<Node>, bound: u32 },
    /// One half of a split: its children's range, widened by its records, clipped to the
    /// split node's range.
    Half {
        lo: Vec<u8>,
        hi: Vec<u8>,
        clip: (Vec<u8>, Vec<u8>),
    },
}

/// One target of a job: its input, where it goes, what it becomes.
struct Task {
    input: Option<Input>,
    out: Writer,
    then: Then,
    seen: Arc<Mutex<Seen>>,
}

/// A child of a flush, planned; its task is made when the job reaches it (whether its part
/// holds data is known only once the parts before it are consumed).
struct Child {
    child: Arc<Node>,
    cut: Option<Vec<u8>>,
    action: Action,
    bound: u32,
    /// The widest range its part may cover (for the tombstone rule).
    part: (Vec<u8>, Vec<u8>),
    leaf: bool,
}

enum Todo {
    Child(Child),
    Ready(Box<Task>),
}

/// What the job does to the tree at its commit, besides replacing `range` of level `level`
/// with its outputs.
pub(super) enum Parent {
    /// The flush of the oldest queued memtable.
    Mem(Arc<Memtable>),
    /// The flush of node `i` of level `d` (emptied, or removed by a combine).
    Node { d: usize, i: usize, combine: bool },
    /// The split of a node (its position is `range`).
    Split,
}

/// A step in progress.
pub(super) struct Job {
    base: Arc<Version>,
    level: usize,
    range: Range<usize>,
    parent: Parent,
    src: Arc<Mutex<Source>>,
    todo: VecDeque<Todo>,
    outs: Vec<Arc<Node>>,
    pub(super) built: Built,
    /// Bytes of the runs written.
    bytes: u64,
    /// Work units done so far (what `advance` returned).
    pub(super) units: u64,
}

impl IamTree {
    fn source(&self, input: Input) -> Arc<Mutex<Source>> {
        self.job_read.store(0, Ordering::Relaxed);
        Arc::new(Mutex::new(Source {
            it: input.peekable(),
            read: self.job_read.clone(),
        }))
    }

    fn part(src: &Arc<Mutex<Source>>, cut: Option<Vec<u8>>) -> Part {
        Part {
            src: src.clone(),
            cut,
            seen: Arc::default(),
        }
    }

    /// The flush of the oldest queued memtable into L1 (the flush of `L_0`, §3.4); `None`
    /// when the queue is empty.
    pub(super) fn plan_mem(&self, v: &Arc<Version>) -> Result<Option<Job>> {
        let Some((mem, lo, hi, _)) = self.queue.lock().front().cloned() else {
            return Ok(None);
        };
        let stream = Compactor::new(
            mem.iter(Bound::Unbounded, Bound::Unbounded, false),
            self.ctx.snapshots.list(),
            false,
            self.ctx.merge_op.clone(),
        );
        let src = self.source(Box::new(stream));
        let children = v.overlapping(0, &lo, &hi);
        let todo = if children.is_empty() {
            // No children: the memtable becomes a node of L1 (§3.3, `Ch = ∅`).
            let part = Self::part(&src, None);
            let seen = part.seen.clone();
            VecDeque::from([Todo::Ready(Box::new(Task {
                input: Some(Box::new(part)),
                out: Writer::new(None, Purpose::Flush, None),
                then: Then::Fresh { lo, hi },
                seen,
            }))])
        } else {
            self.plan_children(v, 0, children.clone(), &lo, &hi)
        };
        Ok(Some(Job {
            base: v.clone(),
            level: 0,
            range: children,
            parent: Parent::Mem(mem),
            src,
            todo,
            outs: Vec::new(),
            built: Built::default(),
            bytes: 0,
            units: 0,
        }))
    }

    /// The flush of node `i` of level `d` into its children (§3.4), or its combine (§3.7).
    /// `None` when the node is empty or overlaps no child: that step is metadata only and
    /// the caller does it at once.
    pub(super) fn plan_flush(
        &self,
        v: &Arc<Version>,
        d: usize,
        i: usize,
        combine: bool,
    ) -> Result<Option<Job>> {
        let p = &v.levels[d][i];
        let children = v.overlapping(d + 1, &p.lo, &p.hi);
        if p.seqs.is_empty() || children.is_empty() {
            return Ok(None);
        }
        let src = self.source(self.node_stream(p)?);
        let todo = self.plan_children(v, d + 1, children.clone(), &p.lo, &p.hi);
        Ok(Some(Job {
            base: v.clone(),
            level: d + 1,
            range: children,
            parent: Parent::Node { d, i, combine },
            src,
            todo,
            outs: Vec::new(),
            built: Built::default(),
            bytes: 0,
            units: 0,
        }))
    }

    /// The split of full node `i` of level `d`, which has `2t` or more children, into two
    /// (§3.6 with correction 6): all its sequences merged into one stream, cut at the first
    /// key of the right half's first child, each half one sequence, ranges clipped to P's.
    pub(super) fn plan_split(&self, v: &Arc<Version>, d: usize, i: usize) -> Result<Job> {
        let p = &v.levels[d][i];
        let ch = &v.levels[d + 1][v.overlapping(d + 1, &p.lo, &p.hi)];
        let half = ch.len() / 2;
        let cut = ch[half].lo.clone();
        let src = self.source(self.node_stream(p)?);
        let clip = (p.lo.clone(), p.hi.clone());
        let halves = [
            (Some(cut), ch[0].lo.clone(), ch[half - 1].hi.clone()),
            (None, ch[half].lo.clone(), ch[ch.len() - 1].hi.clone()),
        ];
        let todo = halves
            .into_iter()
            .map(|(cut, lo, hi)| {
                let part = Self::part(&src, cut);
                let seen = part.seen.clone();
                Todo::Ready(Box::new(Task {
                    input: Some(Box::new(part)),
                    out: Writer::new(None, Purpose::Merge, None),
                    then: Then::Half {
                        lo,
                        hi,
                        clip: clip.clone(),
                    },
                    seen,
                }))
            })
            .collect();
        Ok(Job {
            base: v.clone(),
            level: d,
            range: i..i + 1,
            parent: Parent::Split,
            src,
            todo,
            outs: Vec::new(),
            built: Built::default(),
            bytes: 0,
            units: 0,
        })
    }

    /// A node's sequences merged into one stream, shadowed versions dropped where no snapshot
    /// needs them (tombstones kept).
    fn node_stream(&self, p: &Node) -> Result<Input> {
        Ok(Box::new(Compactor::new(
            node_iter(
                p,
                &Bound::Unbounded,
                &Bound::Unbounded,
                false,
                Purpose::Merge,
            )?,
            self.ctx.snapshots.list(),
            false,
            self.ctx.merge_op.clone(),
        )))
    }

    /// Plans how a stream within `[lo, hi]` is cut among the nodes `children` of level `d`
    /// and what each child does with its part.
    fn plan_children(
        &self,
        v: &Version,
        d: usize,
        children: Range<usize>,
        lo: &[u8],
        hi: &[u8],
    ) -> VecDeque<Todo> {
        let leaf = d + 1 == v.levels.len();
        let ch: Vec<Arc<Node>> = v.levels[d][children].to_vec();
        // Cuts between adjacent children (P4 for leaves, P5 for internal children).
        let mut cuts: Vec<Vec<u8>> = Vec::with_capacity(ch.len().saturating_sub(1));
        for w in ch.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if leaf {
                cuts.push(policy::middle_key(&a.hi, &b.lo));
            } else {
                let ca = v.overlapping(d + 1, &a.lo, &a.hi).len();
                let cb = v.overlapping(d + 1, &b.lo, &b.hi).len();
                let gap = v.levels[d + 1]
                    .iter()
                    .filter(|g| g.lo > a.hi && g.hi < b.lo)
                    .map(|g| g.lo.as_slice())
                    .collect::<Vec<_>>();
                cuts.push(policy::cut_between(&a.hi, &b.lo, ca, cb, &gap));
            }
        }
        let (m, k) = self.mk();
        ch.iter()
            .enumerate()
            .map(|(j, c)| {
                let cut = cuts.get(j).cloned();
                let part_lo = if j == 0 { lo } else { cuts[j - 1].as_slice() };
                let part_hi = cut.as_deref().unwrap_or(hi);
                let action = policy::action(d + 1, m, k, c.seqs.len(), leaf && self.is_full(c));
                Todo::Child(Child {
                    child: c.clone(),
                    bound: policy::bound_after(d + 1, m, k, action),
                    part: (part_lo.to_vec(), part_hi.to_vec()),
                    cut,
                    action,
                    leaf,
                })
            })
            .collect()
    }

    /// The task of a planned child, once the parts before it are consumed; `None` when its
    /// part is empty (the child stays as it is).
    fn child_task(&self, job: &Job, c: Child) -> Result<std::result::Result<Task, Arc<Node>>> {
        let part = Self::part(&job.src, c.cut);
        if !part.has_data() {
            return Ok(Err(c.child));
        }
        let seen = part.seen.clone();
        if c.action == Action::Append {
            let into = match (&c.child.file, c.child.region) {
                (Some(f), Some(r)) => Some((f.clone(), r)),
                _ => None,
            };
            return Ok(Ok(Task {
                input: Some(Box::new(part)),
                out: Writer::new(None, Purpose::Merge, into),
                then: Then::Append {
                    child: c.child,
                    bound: c.bound,
                },
                seen,
            }));
        }
        // Merge (one sequence) or merge-and-split of a full leaf (§3.3, P13). Tombstones go
        // only where no node below overlaps what the output may cover (correction 4).
        let (plo, phi) = (&c.part.0, &c.part.1);
        let bottom =
            !job.base
                .below_overlaps(job.level, plo.min(&c.child.lo), phi.max(&c.child.hi));
        let old: MergeIter = node_iter(
            &c.child,
            &Bound::Unbounded,
            &Bound::Unbounded,
            false,
            Purpose::Merge,
        )?;
        let piece = match c.action {
            Action::MergeSplit => Some(self.leaf_target()),
            _ if c.leaf => Some(self.node_bytes),
            _ => None,
        };
        let merged = Compactor::new(
            Merge2 {
                a: part.peekable(),
                b: old.peekable(),
            },
            self.ctx.snapshots.list(),
            bottom,
            self.ctx.merge_op.clone(),
        );
        Ok(Ok(Task {
            input: Some(Box::new(merged)),
            out: Writer::new(piece, Purpose::Merge, None),
            then: Then::Merge {
                child: c.child,
                bound: c.bound,
            },
            seen,
        }))
    }

    /// The nodes a finished task's written nodes become.
    fn task_nodes(&self, level: usize, task: Task, bytes: &mut u64) -> Result<Vec<Arc<Node>>> {
        let mut runs = Vec::with_capacity(task.out.done.len());
        let mut task_bytes = 0;
        for w in &task.out.done {
            let run = w.seq.open()?.clone();
            task_bytes += run.meta().pages() * PAGE_SIZE as u64;
            runs.push(run);
        }
        *bytes += task_bytes;
        IamTree::count_level(&self.written, level, task_bytes);
        match &task.then {
            Then::Append { .. } => {
                IamTree::count_level(&self.appended, level, task_bytes);
                self.count_part(level);
            }
            Then::Merge { child, .. } => {
                IamTree::count_level(&self.merged, level, task_bytes);
                IamTree::count_level(&self.merged_old, level, child.disk_bytes());
                self.count_part(level);
            }
            Then::Fresh { .. } | Then::Half { .. } => {}
        }
        let seen = task.seen.lock();
        let widen = |lo: &[u8], hi: &[u8]| -> (Vec<u8>, Vec<u8>) {
            let lo = match &seen.first {
                Some(f) if **f < *lo => f.to_vec(),
                _ => lo.to_vec(),
            };
            let hi = match &seen.last {
                Some(l) if **l > *hi => l.to_vec(),
                _ => hi.to_vec(),
            };
            (lo, hi)
        };
        let mut written = task.out.done;
        let count = written.len();
        Ok(match task.then {
            Then::Fresh { lo, hi } => written
                .into_iter()
                .map(|w| {
                    let mut node = self.node_of(w, Some(&lo), Some(&hi));
                    node.bound = 0;
                    Arc::new(node)
                })
                .collect(),
            Then::Append { child, bound } => {
                let Some(w) = written.pop() else {
                    return Ok(vec![child]);
                };
                let mut node = (*child).clone();
                if child.seqs.is_empty() {
                    node.id = self.new_id();
                }
                (node.lo, node.hi) = widen(&child.lo, &child.hi);
                node.seqs.insert(0, w.seq);
                node.region = Some(w.region);
                node.file = Some(w.file);
                node.bound = bound;
                self.counters.appends.fetch_add(1, Ordering::Relaxed);
                vec![Arc::new(node)]
            }
            Then::Merge { child, bound } => {
                let (lo_seen, hi_seen) = widen(&child.lo, &child.hi);
                let mut out = Vec::with_capacity(count.max(1));
                for (j, w) in written.into_iter().enumerate() {
                    let lo = (j == 0).then_some(lo_seen.as_slice());
                    let hi = (j + 1 == count).then_some(hi_seen.as_slice());
                    let mut node = self.node_of(w, lo, hi);
                    node.bound = bound;
                    out.push(Arc::new(node));
                }
                if out.is_empty() {
                    // Everything compacted away: the child stays as an empty node over its
                    // range.
                    out.push(Arc::new(Node::empty(self.new_id(), lo_seen, hi_seen)));
                }
                if count > 1 {
                    self.counters.leaf_splits.fetch_add(1, Ordering::Relaxed);
                }
                self.counters.merges.fetch_add(1, Ordering::Relaxed);
                out
            }
            Then::Half { lo, hi, clip } => {
                let (lo, hi) = widen(&lo, &hi);
                let (lo, hi) = (lo.max(clip.0), hi.min(clip.1));
                match written.pop() {
                    Some(w) => {
                        let mut node = self.node_of(w, Some(&lo), Some(&hi));
                        node.lo = lo;
                        node.hi = hi;
                        node.bound = 0;
                        vec![Arc::new(node)]
                    }
                    None => vec![Arc::new(Node::empty(self.new_id(), lo, hi))],
                }
            }
        })
    }

    /// Advances `job` by about `budget` user bytes (see the module doc for the bound); returns
    /// the bytes done and whether every node is written (the job is then ready to commit).
    pub(super) fn advance(&self, job: &mut Job, budget: u64) -> Result<(u64, bool)> {
        let budget = budget.max(1);
        let mut spent = 0u64;
        while spent < budget {
            let Some(front) = job.todo.pop_front() else {
                // The last target took everything below no cut: the stream must be exhausted.
                if let Some(r) = job.src.lock().it.next() {
                    r?;
                    return Err(Error::InvalidOption(
                        "iam: flush stream left entries no child took".into(),
                    ));
                }
                job.units = job.units.saturating_add(spent.max(1));
                self.job_units.store(job.units, Ordering::Relaxed);
                return Ok((spent.max(1), true));
            };
            let mut task = match front {
                Todo::Ready(t) => t,
                Todo::Child(c) => match self.child_task(job, c)? {
                    Ok(t) => Box::new(t),
                    Err(child) => {
                        job.outs.push(child);
                        continue;
                    }
                },
            };
            if task.out.sealing.is_some() {
                let left = budget - spent;
                // A finish step that does not complete spent what was left of the call.
                spent = match task.out.seal_step(self, left, &mut job.built)? {
                    true => spent.saturating_add(PAGE_SIZE as u64),
                    false => budget,
                };
                job.todo.push_front(Todo::Ready(task));
                continue;
            }
            if let Some(input) = &mut task.input {
                while spent < budget && task.out.sealing.is_none() {
                    match input.next() {
                        Some(e) => {
                            let e = e?;
                            spent += e.user_bytes() as u64;
                            task.out.add(self, &e, &mut job.built)?;
                        }
                        None => {
                            task.input = None;
                            task.out.sealing = task.out.cur.take();
                            break;
                        }
                    }
                }
                job.todo.push_front(Todo::Ready(task));
                continue;
            }
            let nodes = self.task_nodes(job.level, *task, &mut job.bytes)?;
            job.outs.extend(nodes);
        }
        job.units = job.units.saturating_add(spent);
        self.job_units.store(job.units, Ordering::Relaxed);
        Ok((spent, false))
    }

    /// Publishes a job whose nodes are all written; returns the bytes it wrote.
    pub(super) fn finish_job(&self, job: Job) -> Result<u64> {
        let mut next = (*job.base).clone();
        if next.levels.is_empty() {
            next.levels.push(Vec::new());
        }
        next.levels[job.level].splice(job.range.clone(), job.outs);
        match &job.parent {
            Parent::Mem(_) | Parent::Split => {}
            Parent::Node { d, i, combine } => {
                let p = &job.base.levels[*d][*i];
                if *combine {
                    next.levels[*d].remove(*i);
                } else {
                    next.levels[*d][*i] =
                        Arc::new(Node::empty(self.new_id(), p.lo.clone(), p.hi.clone()));
                }
            }
        }
        let durable = match &job.parent {
            Parent::Mem(mem) => Some(mem.max_seq()),
            _ => None,
        };
        let cause = match &job.parent {
            Parent::Mem(_) => super::Cause::Mem,
            Parent::Node { combine: true, .. } => super::Cause::Combine,
            Parent::Node { .. } => super::Cause::Flush,
            Parent::Split => super::Cause::Split,
        };
        self.publish(&job.base, next, durable, &job.built, cause);
        match &job.parent {
            Parent::Mem(mem) => {
                let mut q = self.queue.lock();
                if q.front().is_some_and(|(m, _, _, _)| Arc::ptr_eq(m, mem)) {
                    q.pop_front();
                }
                self.counters
                    .memtable_flushes
                    .fetch_add(1, Ordering::Relaxed);
            }
            Parent::Node { combine, .. } => {
                self.counters.flushes.fetch_add(1, Ordering::Relaxed);
                if *combine {
                    self.counters.combines.fetch_add(1, Ordering::Relaxed);
                }
            }
            Parent::Split => {
                self.counters.splits.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(job.bytes.max(1))
    }
}
