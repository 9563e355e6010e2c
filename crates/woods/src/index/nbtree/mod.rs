//! `nbtree`: the Nested B-tree (Zeighami and Wong, PVLDB 2020; `specs/nbtree.md`), final
//! (Sec. 5) version, de-amortized through the index contract.
//!
//! A B-tree of structural nodes (s-nodes, fanout f, kept in memory and persisted through the
//! manifest) in which every non-root s-node owns one d-tree: an immutable run of the substrate
//! with its bloom filter. The root's d-tree is the Db's memtables: the active memtable is the
//! spec's buffer A, the frozen one handed to [`Index::absorb`] its Z, and σ is
//! `memtable_bytes` × c ([`NbTreeParams::sigma_memtables`], 1 by default). That holds while
//! the root has children; while the root is a leaf (the tree's first σ of data) it also owns
//! an on-disk d-tree, into which each Z is merged, and which splits at its byte midpoint under
//! a new root once it passes σ (Fig. 2). With c > 1 a non-leaf root also owns up to 2c root
//! runs, one per absorbed memtable (its *park*), and a job drains the runs together once they
//! hold σ, paced over the next c memtables (`docs/engine.md`). A job drains
//! Z into the root's children, then follows the final version's
//! `HandleFullSNode` down one path: split the oversized leaf children, or flush the σ smallest
//! live entries of the largest child into its children (lazy removal: only a live-start
//! pointer advances) and recurse there; on the way back up split every node with more than f
//! children. See [`policy`] for the decisions and `docs/engine.md` for the mapping and the work
//! bound.
//!
//! De-amortization: the job is a state machine advanced by `work(budget)`; a merge into a child
//! is itself a [`job::Pipe`] that moves a key at a time and then finishes its d-trees (index
//! levels, filter, header) in steps of at most [`job::FINISH_STEP_UNITS`], charged as work and
//! kept between calls, so no call does more than its budget plus one key, one chunk write per
//! output, one finishing step and one commit. `debt()` is an upper bound of what the job has
//! left ([`policy`]), finishing included ([`policy::finish_bound`]: per key its bloom probes
//! and filter bits, a sixteenth of the units for the index levels, and 5 pages per d-tree), so
//! the Db's pacing finishes it before the active memtable fills. Each step that changes the tree has
//! one commit point: new d-trees written, the data file synced, the manifest committed (s-tree,
//! d-tree metadata, live pointers and the job cursor), a new immutable [`version::Version`]
//! published. The root's drain is one commit for all children, and only it advances
//! `durable_seq`: a child committed alone would hold writes whose log records a power cut may
//! have lost, and recovery would not be a prefix.
//!
//! Parallelism: the children merges of one flush are independent (a deep flush finds its cut
//! from the parent d-tree's subtree totals first, [`flush_cut`]), and so are the splits of a
//! node's oversized leaves, so each of these steps is a [`Batch`] whose
//! parts concurrent `work` callers (the Db's background threads) step one each, outside the
//! job's lock; the batch commits once, when every part is built.

mod check;
mod iter;
mod job;
pub mod policy;
pub mod version;

#[cfg(test)]
mod tests;

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use self::job::{child_bounds, live_iter, Counted, Moved, MovedState, Outcome, Pipe, Route};
use self::policy::{
    granule, job_bound, leaf_oversized, merge_cost, rest_bound, settle, Action, Shape,
};
use self::version::{
    decode_meta, encode_meta, height_of, node_at, replace_at, units, Cursor, DTree, Observed,
    Phase, SNode, Version,
};
use super::committer::{
    extent_difference, Commits, Committer, DataSync, Durable, Versions, WithCommitter,
};
use super::{Epoch, Index, IndexContext, IndexStats};
use crate::entry::{Entry, Kind};
use crate::error::{Error, Result};
use crate::manifest::Commit;
use crate::memtable::Memtable;
use crate::merge::EntryIter;
use crate::options::NbTreeParams;
use crate::run::{LazyRun, Run, RunOptions};
use crate::storage::{Extent, PageFile, Purpose, PAGE_SIZE};

/// Pages a d-tree builder allocates and writes at a time (256 KiB: large sequential writes,
/// spec P7, and the most one `work` call writes beyond its budget per output).
pub const CHUNK_PAGES: u64 = 64;

#[derive(Default)]
struct Counters {
    absorbs: AtomicU64,
    jobs: AtomicU64,
    jobs_resumed: AtomicU64,
    job_steps: AtomicU64,
    flushes: AtomicU64,
    deep_flushes: AtomicU64,
    child_merges: AtomicU64,
    /// Steps of a batch's part that began while another caller was stepping a part.
    parallel_steps: AtomicU64,
    leaf_splits: AtomicU64,
    /// Leaf splits done in a flush's merge into the leaf (counted in `leaf_splits` too).
    leaf_splits_in_merge: AtomicU64,
    node_splits: AtomicU64,
    root_splits: AtomicU64,
    stale_dropped: AtomicU64,
    units_moved: AtomicU64,
    /// Pages written by d-tree finishes: index levels, filter and header (not data pages).
    finish_pages: AtomicU64,
    /// The most pages one step of a d-tree's finish wrote (handed to the page file: up to a
    /// 64-page chunk, which may hold the last data pages too, or a few filter pages), and the
    /// longest such step took (microseconds). A finish is many steps, paced as any work.
    max_finish_pages: AtomicU64,
    max_finish_us: AtomicU64,
    work_calls: AtomicU64,
    /// Times a fresh bound of a job's remaining work came out above what was left of the
    /// bound it started with (the bound is meant to make this impossible).
    bound_misses: AtomicU64,
    max_call_units: AtomicU64,
    max_call_pages: AtomicU64,
    commits: AtomicU64,
    max_commit_us: AtomicU64,
    /// Memtables written as root runs (c > 1).
    parks: AtomicU64,
    /// Drains of the root's runs (c > 1; counted in `flushes` too).
    drains: AtomicU64,
}

/// The Nested B-tree's state, shared with the thread that commits it.
pub struct Tree {
    ctx: IndexContext,
    params: NbTreeParams,
    shape: Shape,
    current: Versions<Version>,
    /// A frozen memtable absorbed but not yet taken up by a job, and its work bound.
    pending: Mutex<Option<(Arc<Memtable>, u64)>>,
    job: Mutex<Option<Job>>,
    /// Upper bound of the work left (0: ready for the next memtable).
    debt: AtomicU64,
    /// What the last durable commit covers (the published version's `seq` once committed).
    durable: AtomicU64,
    /// The last committed version: it keeps every extent it reaches allocated, and through its
    /// epoch every extent retired since, until a newer commit is durable.
    committed: Mutex<Committed>,
    committer: Committer,
    counters: Counters,
    /// Callers stepping a batch's part now.
    stepping: AtomicU64,
    /// What the flushes' merges into leaves read and what their compaction dropped, with the
    /// older batches' share halved at each batch: [`Tree::leaf_route`]'s prediction.
    leaf_drops: Mutex<(f64, f64)>,
    /// With c > 1 (σ = c memtables, a non-leaf root): a frozen memtable absorbed but not yet
    /// written as a root run, its park bound, and the memtables k over which the drain in
    /// flight is paced from its absorb on (its share: ⌈what the drain has left ÷ k⌉).
    park_pending: Mutex<Option<(Arc<Memtable>, u64, u64)>>,
    /// The frozen memtable being written as a root run (locked only under the job's lock).
    park: Mutex<Option<Park>>,
    /// Bound of what the park in progress has left (0: none).
    park_left: AtomicU64,
    /// Bound of what the job in flight has left (0: none), as of its last step.
    job_left: AtomicU64,
    /// What the job in flight may still have left when the active memtable fills: the drain of
    /// the root's runs is paced over the memtables that arrive while it runs (0 with c = 1).
    allow: AtomicU64,
    /// Root runs the drain in flight takes (0: no drain in flight).
    draining: AtomicU64,
    /// The bound of the last drain of the root's runs when it started.
    drain_bound: AtomicU64,
}

/// A frozen memtable on its way to becoming a root run (σ a multiple c > 1 of the memtable).
struct Park {
    mem: Arc<Memtable>,
    pipe: Pipe,
    bound: u64,
}

/// The last committed version and the extents its d-trees reach.
struct Committed {
    /// Held, so that what it reaches stays allocated.
    _version: Arc<Version>,
    extents: std::collections::HashSet<Extent>,
}

/// The Nested B-tree index: [`Tree`] and the thread that makes its versions durable (data file
/// sync and manifest commit), so that no step of the job, and no writer paying debt, waits for
/// an fsync.
pub type NbTree = WithCommitter<Tree>;

/// The root's drain, before it commits.
enum RootPhase {
    /// The root is a leaf: merge Z into its d-tree.
    Absorb,
    /// Merge Z into each child whose interval holds some of it (a [`Batch`]), committed
    /// together at the end; the route of a merge into a leaf may split it
    /// ([`Tree::leaf_route`]).
    Flush { receivers: Vec<(usize, Route)> },
}

/// The step the job's one pipe is doing.
enum StepKind {
    RootAbsorb,
    SplitNode,
}

/// The children merges of one flush, the root's drain of Z or a deep flush of a node's σ
/// smallest live entries: each reads its own interval of the parent and its own child, so
/// they are independent, and every `work` caller steps a different one (on as many threads
/// as the Db runs in the background). They commit together once all are built.
struct Batch {
    kind: BatchKind,
    parts: Vec<Arc<Part>>,
}

enum BatchKind {
    /// The root's drain of Z.
    Root,
    /// A deep flush of the node at the cursor's path: its live entries below `cut` move down
    /// (`None`: all of them).
    Flush { cut: Option<Arc<[u8]>> },
    /// The splits of the oversized leaf children of the node at the cursor's path.
    LeafSplits,
}

/// One child's merge in a [`Batch`].
struct Part {
    child: usize,
    /// A flush's merge into a leaf (what it drops feeds [`Tree::leaf_route`]'s prediction).
    into_leaf: bool,
    /// What the parent's side moved (a deep flush).
    moved: Option<Arc<Mutex<MovedState>>>,
    /// Locked by the caller stepping it, never while that caller waits for the job's lock.
    state: Mutex<PartState>,
    /// Set (under the job's lock) by the caller that claimed the part until its step ends, so
    /// that a second caller takes another part rather than wait for this one.
    claimed: AtomicBool,
}

enum PartState {
    Merging(Box<Pipe>),
    Built(Box<Outcome>),
    /// Failed or given up by an abort; its builders released what they held.
    Dropped,
}

/// A part's new d-tree(s), as its batch commits them: the child, and what the parent's side
/// moved (a deep flush).
type BuiltPart = (usize, Outcome, Option<Arc<Mutex<MovedState>>>);

/// The d-trees a commit replaces, and the d-trees of the halves of the leaves it splits.
type Placed = (Vec<Arc<LazyRun>>, Vec<Arc<LazyRun>>);

/// What a `work` caller takes up next in a batch.
enum Claim {
    /// A part still merging: one nobody has claimed if there is one (`true`: this caller
    /// claimed it, and gives it up after its step).
    Part(Arc<Part>, bool),
    /// Every part is built: the batch can commit.
    Built,
    /// A part failed: the batch must start again.
    Failed,
}

/// Counts a caller in [`Tree::step_part`] while it is there.
struct Stepping<'a>(&'a AtomicU64);

impl<'a> Stepping<'a> {
    fn enter(now: &'a AtomicU64, parallel: &AtomicU64) -> Stepping<'a> {
        if now.fetch_add(1, Ordering::Relaxed) > 0 {
            parallel.fetch_add(1, Ordering::Relaxed);
        }
        Stepping(now)
    }
}

impl Drop for Stepping<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Part {
    fn new(
        child: usize,
        into_leaf: bool,
        moved: Option<Arc<Mutex<MovedState>>>,
        pipe: Pipe,
    ) -> Arc<Part> {
        Arc::new(Part {
            child,
            into_leaf,
            moved,
            state: Mutex::new(PartState::Merging(Box::new(pipe))),
            claimed: AtomicBool::new(false),
        })
    }
}

/// The first key a flush that moves `budget` units of `d`'s live entries leaves behind: it
/// takes the live entries in key order until they weigh `budget`, then the rest of the last
/// key's versions (all versions of a key move together, spec P4); `None` when that is all of
/// them. One descent of the run's index (its subtree totals) and one page past it, so the
/// children's merges need not run in order to find it.
fn flush_cut(d: &DTree, budget: u64) -> Result<Option<Arc<[u8]>>> {
    let run = d.run.run()?;
    let p = Purpose::Merge;
    let before = match &d.live_start {
        Some(s) => {
            let (entries, bytes) = run.rank_bytes(s, p)?;
            units(entries, bytes)
        }
        None => 0,
    };
    let Some(last) = run.key_at_weight(before.saturating_add(budget.max(1)), units, p)? else {
        return Ok(None);
    };
    let mut past = run.iter_with_readahead(Bound::Excluded(last), Bound::Unbounded, false, p, 1);
    Ok(past.next().transpose()?.map(|e| e.key))
}

/// The entries of the live part of `d` in [lo, hi) and their key and value bytes: exact for the
/// bounds flushes use (an inclusive lower and an exclusive upper key), from two descents of its
/// index (their subtree totals).
fn live_between(d: &DTree, lo: Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> Result<(u64, u64)> {
    let run = d.run.run()?;
    let p = Purpose::Merge;
    let below = |k: &[u8]| run.rank_bytes(k, p);
    // The rank of everything up to and including `k`: that of its successor.
    let through = |k: &[u8]| below(&[k, &[0]].concat());
    let first = match d.live_lo(lo) {
        Bound::Unbounded => (0, 0),
        Bound::Included(k) => below(&k)?,
        Bound::Excluded(k) => through(&k)?,
    };
    let end = match hi {
        Bound::Unbounded => (run.meta().entries, run.meta().user_bytes),
        Bound::Excluded(k) => below(k)?,
        Bound::Included(k) => through(k)?,
    };
    Ok((end.0.saturating_sub(first.0), end.1.saturating_sub(first.1)))
}

/// `hi` lowered to exclude `cut` and everything past it.
fn below_cut(hi: Bound<Vec<u8>>, cut: Option<&[u8]>) -> Bound<Vec<u8>> {
    let Some(c) = cut else {
        return hi;
    };
    match hi {
        Bound::Unbounded => Bound::Excluded(c.to_vec()),
        Bound::Excluded(h) | Bound::Included(h) if c <= h.as_slice() => Bound::Excluded(c.to_vec()),
        hi => hi,
    }
}

impl Batch {
    /// Called under the job's lock.
    fn claim(&self) -> Claim {
        let mut busy = None;
        for p in &self.parts {
            match p.state.try_lock().as_deref() {
                Some(PartState::Merging(_)) if !p.claimed.load(Ordering::Relaxed) => {
                    p.claimed.store(true, Ordering::Relaxed);
                    return Claim::Part(p.clone(), true);
                }
                Some(PartState::Merging(_)) | None => {
                    busy.get_or_insert_with(|| p.clone());
                }
                Some(PartState::Built(_)) => {}
                Some(PartState::Dropped) => return Claim::Failed,
            }
        }
        // Every part still merging is claimed: wait for one (stepping it next).
        busy.map_or(Claim::Built, |p| Claim::Part(p, false))
    }

    fn holds(&self, part: &Arc<Part>) -> bool {
        self.parts.iter().any(|p| Arc::ptr_eq(p, part))
    }
}

/// A job: draining one frozen memtable, or the root's runs (c > 1), or finishing a job found
/// in the manifest on open.
struct Job {
    /// Z, until the root's drain commits.
    mem: Option<Arc<Memtable>>,
    /// The root runs the root's drain takes (c > 1; empty when it drains Z), until it commits.
    drain: Vec<Arc<LazyRun>>,
    root: Option<RootPhase>,
    /// Where the job is after the root's drain.
    cursor: Cursor,
    pipe: Option<(Pipe, StepKind)>,
    /// A flush's children merges in progress (never at the same time as `pipe`).
    batch: Option<Batch>,
    /// Bound of the work left when it was last computed, and the work done since.
    bound: u64,
    done_since: u64,
    observed: Observed,
    /// The node whose flush the counters have counted (a flush spans several steps).
    counted_flush: Option<Vec<u32>>,
    /// The d-trees of the halves of the leaves this job's merges split, which no later merge
    /// or LeafSplits of the job splits again (each leaf splits at most once per job).
    halves: Vec<Arc<LazyRun>>,
}

impl Job {
    /// A job at its start: draining `mem` or the root runs `drain` first when `root` says so,
    /// else resuming at `cursor`, with `bound` the work it has left.
    fn new(
        mem: Option<Arc<Memtable>>,
        drain: Vec<Arc<LazyRun>>,
        root: Option<RootPhase>,
        cursor: Cursor,
        bound: u64,
        observed: Observed,
    ) -> Job {
        Job {
            mem,
            drain,
            root,
            cursor,
            pipe: None,
            batch: None,
            bound,
            done_since: 0,
            observed,
            counted_flush: None,
            halves: Vec::new(),
        }
    }

    fn debt(&self) -> u64 {
        self.bound.saturating_sub(self.done_since).max(1)
    }

    /// Whether `leaf` is a half of a leaf this job's merges split.
    fn split_this_job(&self, leaf: &SNode) -> bool {
        let half = |d: &DTree| self.halves.iter().any(|h| Arc::ptr_eq(h, &d.run));
        leaf.dtree.as_ref().is_some_and(half)
    }
}

/// One commit's changes.
struct Change {
    root: Arc<SNode>,
    retired: Vec<Arc<LazyRun>>,
    durable_seq: Option<u64>,
    /// The cursor after this step (settled before it is persisted).
    cursor: Cursor,
}

fn leaf_with(run: Option<Run>) -> SNode {
    SNode {
        dtree: run.map(|r| DTree::whole(Arc::new(LazyRun::from_run(r)))),
        ..SNode::default()
    }
}

impl NbTree {
    /// Opens the tree from its manifest metadata (empty: a new tree of one empty leaf). A job
    /// the metadata records as in flight is resumed by the next `work` calls.
    pub fn open(
        ctx: IndexContext,
        params: NbTreeParams,
        meta: &[u8],
        durable_seq: u64,
    ) -> Result<NbTree> {
        NbTree::open_with(ctx, params, meta, durable_seq, true)
    }

    /// [`NbTree::open`], choosing whether leaves split in the flush's merges
    /// ([`Shape::split_in_merge`]; `false` is the paper's order, kept for the tests that
    /// compare the two).
    pub(crate) fn open_with(
        ctx: IndexContext,
        params: NbTreeParams,
        meta: &[u8],
        durable_seq: u64,
        split_in_merge: bool,
    ) -> Result<NbTree> {
        let shape = Shape {
            sigma: ctx
                .memtable_bytes
                .max(1)
                .saturating_mul(u64::from(params.sigma_memtables.max(1))),
            fanout: params.fanout.max(3) as usize,
            split_in_merge,
            bloom_bits: params.bloom_bits_per_key,
        };
        let (root, height, mut observed, cursor) = if meta.is_empty() {
            (Arc::new(SNode::default()), 1, Observed::default(), None)
        } else {
            let d = decode_meta(meta, &ctx.store)?;
            (d.root, d.height, d.observed, d.cursor)
        };
        observed.sigma_max = observed.sigma_max.max(shape.sigma);
        let version = Arc::new(Version {
            root,
            height,
            cursor: cursor.clone(),
            observed,
            seq: durable_seq,
            _epoch: Epoch::new(ctx.store.clone()),
        });
        let tree = Tree {
            ctx,
            params,
            shape,
            current: Versions::new(version.clone()),
            pending: Mutex::new(None),
            job: Mutex::new(None),
            debt: AtomicU64::new(0),
            durable: AtomicU64::new(durable_seq),
            committed: Mutex::new(Committed {
                extents: extents_of(&version.root),
                _version: version,
            }),
            committer: Committer::default(),
            counters: Counters::default(),
            stepping: AtomicU64::new(0),
            leaf_drops: Mutex::new((0.0, 0.0)),
            park_pending: Mutex::new(None),
            park: Mutex::new(None),
            park_left: AtomicU64::new(0),
            job_left: AtomicU64::new(0),
            allow: AtomicU64::new(0),
            draining: AtomicU64::new(0),
            drain_bound: AtomicU64::new(0),
        };
        if let Some(cursor) = cursor {
            let v = tree.version();
            settle(&v.root, cursor.clone(), shape)?;
            let bound = rest_bound(&v.root, &cursor, granule(v.observed.max_group), shape);
            let job = Job::new(None, Vec::new(), None, cursor, bound, v.observed);
            tree.debt.store(job.debt(), Ordering::Release);
            tree.job_left.store(job.debt(), Ordering::Relaxed);
            *tree.job.lock() = Some(job);
            tree.counters.jobs_resumed.fetch_add(1, Ordering::Relaxed);
        }
        WithCommitter::start("nbtree-commit", tree)
    }
}

impl Tree {
    fn version(&self) -> Arc<Version> {
        self.current.get()
    }

    /// The parameters the tree runs with.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// c: σ in memtables.
    fn sigma_memtables(&self) -> u64 {
        u64::from(self.params.sigma_memtables.max(1))
    }

    // ---- σ a multiple of the memtable: root runs, parks and paced drains -----------------

    /// Whether the root's runs should drain and no drain is in flight (c > 1).
    fn drain_due(&self) -> bool {
        if self.sigma_memtables() == 1 || self.draining.load(Ordering::Acquire) > 0 {
            return false;
        }
        let v = self.version();
        !v.root.is_leaf() && v.root.runs.len() as u64 >= self.sigma_memtables()
    }

    /// Publishes the index's debt after the job in flight reports `job` left (0: none): with
    /// c = 1 that is the debt; with c > 1 the park's bound and whatever the job has left above
    /// what the drain may still have left when the active memtable fills.
    ///
    /// A memtable absorbed and not yet taken up (by a job or a park) counts in full, whatever
    /// the caller saw: a thread that finished a job publishes its 0 after a concurrent absorb
    /// may have handed over the next memtable, and a debt of 0 then would let the Db absorb
    /// another over it (the waiting one lost, and a later commit's sequence number past it).
    fn set_job_debt(&self, job: u64) {
        self.job_left.store(job, Ordering::Release);
        // Under the locks absorb publishes under, so that neither store hides the other.
        let pp = self.park_pending.lock();
        let waiting = self.pending.lock().as_ref().map_or(0, |p| p.1);
        if self.sigma_memtables() == 1 {
            self.debt.store(job + waiting, Ordering::Release);
            return;
        }
        let pending = pp.as_ref().map_or(0, |p| p.1);
        let park = pending + self.park_left.load(Ordering::Acquire);
        let owed = job.saturating_sub(self.allow.load(Ordering::Acquire));
        self.debt.store(park + waiting + owed, Ordering::Release);
    }

    /// `work`, or with `wait` false `None` when another thread holds the job, or every part of
    /// the job's batch still merging is being stepped by another thread.
    fn work_as(&self, budget: u64, wait: bool) -> Result<Option<u64>> {
        self.committer.error()?;
        let Some(mut slot) = crate::index::lock_job(&self.job, wait) else {
            return Ok(None);
        };
        if self.sigma_memtables() > 1 {
            return self.work_parked(&mut slot, budget.max(1), wait);
        }
        if slot.is_none() {
            let Some((mem, bound)) = self.pending.lock().take() else {
                drop(slot);
                return self.committer.idle_work().map(Some);
            };
            *slot = Some(self.start_job(mem, bound)?);
        }
        let pages_before = self.written_pages();
        let mut done = 0u64;
        // (With several callers the pages count what they all wrote meanwhile: an upper bound.)
        let r = self.run_job(&mut slot, budget.max(1), &mut done, wait);
        self.note_call(done, self.written_pages().saturating_sub(pages_before));
        if r? && done == 0 {
            return Ok(None);
        }
        Ok(Some(done.max(1)))
    }

    /// `work` with c > 1: first the park of an absorbed memtable (its write as a root run),
    /// then the job in flight (a drain of the root's runs, or the job of a memtable absorbed
    /// by a leaf root), then the drain of the root's runs once they hold σ.
    /// `None` as in [`NbTree::work_as`].
    fn work_parked(
        &self,
        slot: &mut MutexGuard<'_, Option<Job>>,
        budget: u64,
        wait: bool,
    ) -> Result<Option<u64>> {
        let pages_before = self.written_pages();
        let mut done = 0u64;
        let r = self.work_parked_steps(slot, budget, &mut done, wait);
        self.note_call(done, self.written_pages().saturating_sub(pages_before));
        crate::pause::point("nbtree.work.before_debt");
        self.set_job_debt(slot.as_ref().map_or(0, Job::debt));
        let busy = r?;
        if done > 0 {
            return Ok(Some(done));
        }
        if busy {
            return Ok(None);
        }
        self.committer.idle_work().map(Some)
    }

    fn work_parked_steps(
        &self,
        slot: &mut MutexGuard<'_, Option<Job>>,
        budget: u64,
        done: &mut u64,
        wait: bool,
    ) -> Result<bool> {
        loop {
            self.step_park(slot, budget, done)?;
            let parked = self.park.lock().is_none();
            if slot.is_none() && parked && self.pending.lock().is_none() && self.drain_due() {
                // Started by the call that commits the park that made it due, whatever budget
                // is left (its finishing steps may have taken all of it), so that its bound
                // is known from here on and the next absorbs pace it.
                **slot = Some(self.start_drain()?);
            }
            if *done >= budget {
                return Ok(false);
            }
            if slot.is_none() {
                let Some((mem, bound)) = self.pending.lock().take() else {
                    return Ok(false);
                };
                // A leaf root takes Z into its d-tree, as with c = 1.
                **slot = Some(self.start_job(mem, bound)?);
            }
            let before = *done;
            if self.run_job(slot, budget, done, wait)? {
                return Ok(true);
            }
            if *done >= budget || (*done == before && slot.is_some()) {
                return Ok(false);
            }
        }
    }

    /// Advances the park of an absorbed memtable (taking up the pending one), and commits it
    /// when its run is written.
    fn step_park(
        &self,
        slot: &MutexGuard<'_, Option<Job>>,
        budget: u64,
        done: &mut u64,
    ) -> Result<()> {
        let mut park = self.park.lock();
        if park.is_none() {
            let Some((mem, bound, k)) = self.park_pending.lock().take() else {
                return Ok(());
            };
            // The drain in flight owes 1/k of what it has left by the time this memtable's
            // successor fills.
            let left = slot.as_ref().map_or(0, Job::debt);
            self.allow
                .store(left - left.div_ceil(k.max(1)), Ordering::Release);
            self.park_left.store(bound, Ordering::Release);
            let read = Arc::new(AtomicU64::new(0));
            let it = mem.iter(Bound::Unbounded, Bound::Unbounded, false);
            let sources = vec![self.counted(it, &read)];
            let pipe = self.pipe(sources, read, false, Route::One, Purpose::Flush);
            *park = Some(Park { mem, pipe, bound });
        }
        let Some(p) = park.as_mut() else {
            return Ok(());
        };
        let before = p.pipe.units();
        let r = p.pipe.step(budget.saturating_sub(*done).max(1));
        *done += p.pipe.units() - before;
        self.park_left.store(
            p.bound.saturating_sub(p.pipe.units()).max(1),
            Ordering::Release,
        );
        let finished = match r {
            Ok(f) => f,
            Err(e) => {
                self.unpark(&mut park);
                return Err(e);
            }
        };
        if !finished {
            return Ok(());
        }
        let Some(p) = park.take() else {
            return Ok(());
        };
        let (mem, bound) = (p.mem.clone(), p.bound);
        let r = self
            .finish_pipe(p.pipe)
            .and_then(|out| self.commit_park(&mem, out));
        match r {
            Ok(()) => {
                self.park_left.store(0, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                // Parked again from the start by the next call (the Db is read-only by then).
                *self.park_pending.lock() = Some((mem, bound, 1));
                self.park_left.store(0, Ordering::Release);
                Err(e)
            }
        }
    }

    /// Gives up the park in progress (its builder releases what it allocated): the memtable
    /// waits to be parked again.
    fn unpark(&self, park: &mut Option<Park>) {
        if let Some(p) = park.take() {
            *self.park_pending.lock() = Some((p.mem, p.bound, 1));
        }
        self.park_left.store(0, Ordering::Release);
    }

    /// Publishes Z's run as the root's newest run, with Z's writes durable once committed.
    fn commit_park(&self, mem: &Memtable, out: Outcome) -> Result<()> {
        if let Some(r) = &out.right {
            job::release(&self.ctx.store, r);
        }
        let Some(run) = out.left else {
            return Err(Error::corruption(
                "nbtree park",
                None,
                "a memtable parked into no run",
            ));
        };
        self.current.publish(&self.committer, |cur| {
            let mut root = (*cur.root).clone();
            root.runs.insert(0, Arc::new(LazyRun::from_run(run)));
            Arc::new(Version {
                root: Arc::new(root),
                height: cur.height,
                cursor: cur.cursor.clone(),
                observed: cur.observed,
                seq: mem.max_seq().max(cur.seq),
                _epoch: cur._epoch.advance(Vec::new()),
            })
        });
        self.committer.request();
        self.counters.job_steps.fetch_add(1, Ordering::Relaxed);
        self.counters.parks.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// A job that drains every root run (together σ, or more after a crash mid-drain) into
    /// the root's children, as one merged input, then goes on as the job of a memtable does
    /// after its root drain.
    fn start_drain(&self) -> Result<Job> {
        let v = self.version();
        let drain = v.root.runs.clone();
        let z = v.root.runs_units();
        let g = granule(v.observed.max_group);
        let leaves = self.shape.split_in_merge && v.root.children[0].is_leaf();
        let mut receivers = Vec::new();
        for i in 0..v.root.children.len() {
            let (lo, hi) = child_bounds(&v.root.keys, i);
            let (mut entries, mut bytes) = (0, 0);
            for r in &drain {
                let (e, b) = live_between(&DTree::whole(r.clone()), lo.clone(), &hi)?;
                entries += e;
                bytes += b;
            }
            if entries == 0 {
                continue;
            }
            let route = if leaves {
                self.leaf_route(&v.root.children[i], units(entries, bytes), g)
            } else {
                Route::One
            };
            receivers.push((i, route));
        }
        let bound = job_bound(&v.root, z, g, self.shape).max(1);
        self.draining.store(drain.len() as u64, Ordering::Release);
        // Nothing of it is owed in the memtable that is filling now: the next absorbs pace it.
        self.allow.store(bound, Ordering::Release);
        self.drain_bound.store(bound, Ordering::Relaxed);
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        self.counters.drains.fetch_add(1, Ordering::Relaxed);
        Ok(Job::new(
            None,
            drain,
            Some(RootPhase::Flush { receivers }),
            Cursor::at_root(),
            bound,
            v.observed,
        ))
    }

    fn run_options(&self, purpose: Purpose) -> RunOptions {
        RunOptions {
            bloom_bits_per_key: self.params.bloom_bits_per_key,
            purpose,
            extent_pages: CHUNK_PAGES,
        }
    }

    /// The route of a flush's merge of `incoming` more units into `leaf`, `g` the largest key
    /// group expected. The paper splits a leaf that holds more than σ after the flush, at its
    /// byte midpoint. The merge does that split itself when it predicts that the leaf will
    /// hold more than σ and neither half can exceed σ whatever compaction drops (the second
    /// half holds at most what the merge can write past the first, and the first at most half
    /// the prediction), so that LeafSplits, which splits any leaf the merges left over σ,
    /// never splits a half again. It predicts what compaction keeps from what it dropped in
    /// the merges into leaves lately: nothing for unique inserts; overwritten versions and
    /// deleted keys otherwise. A prediction too high splits a leaf holding less than σ (two
    /// valid leaves); one too low leaves the split to LeafSplits.
    fn leaf_route(&self, leaf: &SNode, incoming: u64, g: u64) -> Route {
        if !self.shape.split_in_merge {
            return Route::One;
        }
        let most = leaf.live_units().saturating_add(incoming);
        let (read, dropped) = *self.leaf_drops.lock();
        let kept = if read > 0.0 {
            1.0 - dropped / read
        } else {
            1.0
        };
        let predicted = (most as f64 * kept.clamp(0.0, 1.0)) as u64;
        let second = (most - predicted / 2).saturating_add(g);
        if predicted > self.shape.sigma && second <= self.shape.sigma {
            Route::Half(predicted)
        } else {
            Route::One
        }
    }

    fn counted(
        &self,
        it: impl Iterator<Item = Result<Entry>> + Send + 'static,
        read: &Arc<AtomicU64>,
    ) -> EntryIter {
        Box::new(Counted::new(it, read.clone()))
    }

    fn pipe(
        &self,
        sources: Vec<EntryIter>,
        read: Arc<AtomicU64>,
        bottom: bool,
        route: Route,
        purpose: Purpose,
    ) -> Pipe {
        Pipe::new(
            sources,
            read,
            self.ctx.snapshots.list(),
            bottom,
            self.ctx.merge_op.clone(),
            route,
            &self.ctx.store,
            self.run_options(purpose),
        )
    }

    // ---- the job -------------------------------------------------------------------------

    /// Starts a job for a frozen memtable.
    fn start_job(&self, mem: Arc<Memtable>, bound: u64) -> Result<Job> {
        let v = self.version();
        let root = if v.root.is_leaf() {
            RootPhase::Absorb
        } else if self.shape.split_in_merge && v.root.children[0].is_leaf() {
            // What each leaf receives decides whether its merge splits it: one walk of Z.
            let sizes = mem.interval_sizes(&v.root.keys);
            let g = granule(v.observed.max_group);
            let receivers = (sizes.iter().enumerate())
                .filter(|(_, (entries, _))| *entries > 0)
                .map(|(i, &(entries, bytes))| {
                    (
                        i,
                        self.leaf_route(&v.root.children[i], units(entries, bytes), g),
                    )
                })
                .collect();
            RootPhase::Flush { receivers }
        } else {
            let mut receivers = Vec::new();
            for i in 0..v.root.children.len() {
                let (lo, hi) = child_bounds(&v.root.keys, i);
                if mem.iter(lo, hi, false).next().is_some() {
                    receivers.push((i, Route::One));
                }
            }
            RootPhase::Flush { receivers }
        };
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        self.allow.store(0, Ordering::Relaxed);
        Ok(Job::new(
            Some(mem),
            Vec::new(),
            Some(root),
            Cursor::at_root(),
            bound,
            v.observed,
        ))
    }

    /// Advances the job in `slot` by about `budget` units (one key past it, plus the finish and
    /// commit of a step that ends inside the budget; in a batch, of the part this caller steps,
    /// with the job's lock released meanwhile so that other callers step other parts); clears
    /// the slot when the job is finished. With `wait` false it returns `true`, doing nothing
    /// more, where it would wait for a part another caller is stepping.
    fn run_job(
        &self,
        slot: &mut MutexGuard<'_, Option<Job>>,
        budget: u64,
        done: &mut u64,
        wait: bool,
    ) -> Result<bool> {
        loop {
            let Some(job) = slot.as_mut() else {
                // Another caller finished the job while this one stepped a part.
                return Ok(false);
            };
            // Whatever fails, the job resumes from its last commit (the Db turns read-only
            // on the error anyway): what the failed step built is given back.
            if let Some(batch) = &job.batch {
                match batch.claim() {
                    Claim::Built => {
                        if let Err(e) = self.complete_batch(job) {
                            self.abort(job);
                            return Err(e);
                        }
                    }
                    Claim::Failed => self.abort(job),
                    Claim::Part(_, false) if !wait => return Ok(true),
                    Claim::Part(part, claimed) => {
                        let b = budget.saturating_sub(*done).max(1);
                        let r = MutexGuard::unlocked(slot, || self.step_part(&part, b, claimed));
                        // The batch the part belongs to may have been committed or aborted
                        // meanwhile (another caller's step failed): then its work no longer
                        // counts against the bound, and its failure aborts nothing newer.
                        let current = slot
                            .as_mut()
                            .filter(|j| j.batch.as_ref().is_some_and(|b| b.holds(&part)));
                        match (r, current) {
                            (Ok(did), current) => {
                                *done += did;
                                if let Some(job) = current {
                                    job.done_since += did;
                                }
                            }
                            (Err(e), current) => {
                                if let Some(job) = current {
                                    self.abort(job);
                                }
                                return Err(e);
                            }
                        }
                    }
                }
            } else if let Some((pipe, _)) = job.pipe.as_mut() {
                let before = pipe.units();
                let r = pipe.step(budget.saturating_sub(*done).max(1));
                let did = pipe.units() - before;
                *done += did;
                job.done_since += did;
                let r = match r {
                    Ok(true) => self.complete(job),
                    Ok(false) => Ok(()),
                    Err(e) => Err(e),
                };
                if let Err(e) = r {
                    self.abort(job);
                    return Err(e);
                }
            } else {
                match self.next_step(job) {
                    Ok(true) => {}
                    Ok(false) => {
                        **slot = None;
                        self.counters.jobs.fetch_add(1, Ordering::Relaxed);
                        crate::pause::point("nbtree.work.before_debt");
                        self.set_job_debt(0);
                        return Ok(false);
                    }
                    Err(e) => {
                        self.abort(job);
                        return Err(e);
                    }
                }
            }
            if *done >= budget {
                if let Some(job) = slot.as_ref() {
                    self.set_job_debt(job.debt());
                }
                return Ok(false);
            }
        }
    }

    /// Steps one part of a batch by about `budget` units, outside the job's lock; a part whose
    /// merge ends is finished into its d-tree here too. Returns the units done (0: another
    /// caller finished the part meanwhile).
    fn step_part(&self, part: &Part, budget: u64, claimed: bool) -> Result<u64> {
        let mut st = part.state.lock();
        let r = self.step_part_locked(&mut st, budget);
        if claimed {
            part.claimed.store(false, Ordering::Relaxed);
        }
        r
    }

    fn step_part_locked(&self, st: &mut PartState, budget: u64) -> Result<u64> {
        let PartState::Merging(pipe) = st else {
            return Ok(0);
        };
        let _stepping = Stepping::enter(&self.stepping, &self.counters.parallel_steps);
        let before = pipe.units();
        let r = pipe.step(budget);
        let did = pipe.units() - before;
        match r {
            Ok(false) => return Ok(did),
            Ok(true) => {}
            Err(e) => {
                *st = PartState::Dropped;
                return Err(e);
            }
        }
        if let PartState::Merging(pipe) = std::mem::replace(st, PartState::Dropped) {
            *st = PartState::Built(Box::new(self.finish_pipe(*pipe)?));
        }
        Ok(did)
    }

    /// Sets up the job's next pipe, or commits a step that needs no I/O (leaving no pipe);
    /// returns false when the job is finished.
    fn next_step(&self, job: &mut Job) -> Result<bool> {
        let v = self.version();
        let read = Arc::new(AtomicU64::new(0));
        if let Some(rp) = &job.root {
            let mem = job.mem.clone();
            if mem.is_none() && job.drain.is_empty() {
                return Err(Error::corruption(
                    "nbtree job",
                    None,
                    "root drain without Z or root runs",
                ));
            }
            match rp {
                RootPhase::Absorb => {
                    let Some(mem) = mem else {
                        return Err(Error::corruption(
                            "nbtree job",
                            None,
                            "a leaf root's absorb without Z",
                        ));
                    };
                    let mut sources =
                        vec![self
                            .counted(mem.iter(Bound::Unbounded, Bound::Unbounded, false), &read)];
                    if let Some(d) = &v.root.dtree {
                        let it = live_iter(d, Bound::Unbounded, Bound::Unbounded, Purpose::Merge)?;
                        sources.push(self.counted(it, &read));
                    }
                    let p = self.pipe(sources, read, true, Route::One, Purpose::Flush);
                    job.pipe = Some((p, StepKind::RootAbsorb));
                }
                RootPhase::Flush { receivers } => {
                    let mut parts = Vec::with_capacity(receivers.len());
                    for (child, route) in receivers {
                        let child = *child;
                        let read = Arc::new(AtomicU64::new(0));
                        let c = &v.root.children[child];
                        let (lo, hi) = child_bounds(&v.root.keys, child);
                        let mut sources = Vec::new();
                        if let Some(mem) = &mem {
                            sources
                                .push(self.counted(mem.iter(lo.clone(), hi.clone(), false), &read));
                        }
                        for r in &job.drain {
                            let it = r.run()?.iter(lo.clone(), hi.clone(), false, Purpose::Merge);
                            sources.push(self.counted(it, &read));
                        }
                        if let Some(d) = &c.dtree {
                            sources
                                .push(self.counted(live_iter(d, lo, hi, Purpose::Merge)?, &read));
                        }
                        let p =
                            self.pipe(sources, read, c.is_leaf(), route.clone(), Purpose::Flush);
                        parts.push(Part::new(child, c.is_leaf(), None, p));
                    }
                    self.start_batch(job, BatchKind::Root, parts)?;
                }
            }
            return Ok(true);
        }
        let (cursor, action) = settle(&v.root, job.cursor.clone(), self.shape)?;
        job.cursor = cursor;
        let path = job.cursor.path.clone();
        let node = node_at(&v.root, &path)
            .ok_or_else(|| Error::corruption("nbtree job", None, format!("no s-node at {path:?}")))?
            .clone();
        match action {
            Action::Done => {
                if v.cursor.is_some() {
                    // The committed cursor still names this job: clear it.
                    self.commit(
                        job,
                        Change {
                            root: v.root.clone(),
                            retired: Vec::new(),
                            durable_seq: None,
                            cursor: job.cursor.clone(),
                        },
                    )?;
                }
                Ok(false)
            }
            Action::FlushChild { child } => {
                let Phase::Flush { target, moved, .. } = job.cursor.phase else {
                    return Err(Error::corruption(
                        "nbtree job",
                        None,
                        "flush outside a flush",
                    ));
                };
                let Some(d) = &node.dtree else {
                    return Err(Error::corruption(
                        "nbtree job",
                        None,
                        "flush of an empty d-tree",
                    ));
                };
                if job.counted_flush.as_ref() != Some(&path) {
                    job.counted_flush = Some(path.clone());
                    self.counters.flushes.fetch_add(1, Ordering::Relaxed);
                    self.counters.deep_flushes.fetch_add(1, Ordering::Relaxed);
                }
                // Every child from `child` on whose interval holds live entries of the node
                // below the cut receives them, each in a merge of its own.
                let cut = flush_cut(d, target.saturating_sub(moved))?;
                let mut parts = Vec::new();
                for j in child..node.children.len() {
                    let (lo, hi) = child_bounds(&node.keys, j);
                    if let (Some(c), Bound::Included(l)) = (&cut, &lo) {
                        if l[..] >= c[..] {
                            break;
                        }
                    }
                    let below = below_cut(hi.clone(), cut.as_deref());
                    // Counted from the index, so that no part reads anything before its first
                    // step (a part waiting for a caller holds no buffers).
                    let (entries, bytes) = live_between(d, lo.clone(), &below)?;
                    if entries == 0 {
                        continue;
                    }
                    let c = &node.children[j];
                    let route = if c.is_leaf() && !job.split_this_job(c) {
                        self.leaf_route(c, units(entries, bytes), granule(job.observed.max_group))
                    } else {
                        Route::One
                    };
                    let parent = live_iter(d, lo.clone(), below, Purpose::Merge)?;
                    let read = Arc::new(AtomicU64::new(0));
                    let moved = Arc::new(Mutex::new(MovedState::default()));
                    let mut sources = vec![self.counted(Moved::new(parent, moved.clone()), &read)];
                    if let Some(cd) = &c.dtree {
                        sources.push(self.counted(live_iter(cd, lo, hi, Purpose::Merge)?, &read));
                    }
                    let p = self.pipe(sources, read, c.is_leaf(), route, Purpose::Merge);
                    parts.push(Part::new(j, c.is_leaf(), Some(moved), p));
                }
                if parts.is_empty() {
                    return Err(Error::corruption(
                        "nbtree",
                        None,
                        format!(
                            "s-node {path:?} records {} live entries but none lie at or after child {child}",
                            d.live_entries
                        ),
                    ));
                }
                self.start_batch(job, BatchKind::Flush { cut }, parts)?;
                Ok(true)
            }
            Action::SplitLeaf { child } => {
                // Every oversized leaf from `child` on splits once, each in a part of its own.
                let mut parts = Vec::new();
                for (j, c) in node.children.iter().enumerate().skip(child) {
                    if !c.is_leaf() || !leaf_oversized(c, self.shape.sigma) {
                        continue;
                    }
                    // A half of a split in the flush's merge over σ (a key group larger than
                    // any seen before crossed its midpoint) waits for the next job.
                    if job.split_this_job(c) {
                        continue;
                    }
                    let Some(d) = &c.dtree else {
                        return Err(Error::corruption(
                            "nbtree job",
                            None,
                            "split of an empty leaf",
                        ));
                    };
                    let read = Arc::new(AtomicU64::new(0));
                    let it = live_iter(d, Bound::Unbounded, Bound::Unbounded, Purpose::Merge)?;
                    let sources = vec![self.counted(it, &read)];
                    let route = Route::Half(d.live_units());
                    let p = self.pipe(sources, read, true, route, Purpose::Merge);
                    parts.push(Part::new(j, false, None, p));
                }
                self.start_batch(job, BatchKind::LeafSplits, parts)?;
                Ok(true)
            }
            Action::SplitNode => {
                let route = if node.is_leaf() {
                    Route::Half(node.live_units())
                } else {
                    Route::AtKey(node.keys[node.keys.len() / 2].clone())
                };
                match &node.dtree {
                    Some(d) => {
                        let it = live_iter(d, Bound::Unbounded, Bound::Unbounded, Purpose::Merge)?;
                        let sources = vec![self.counted(it, &read)];
                        let p = self.pipe(sources, read, node.is_leaf(), route, Purpose::Merge);
                        job.pipe = Some((p, StepKind::SplitNode));
                    }
                    None => {
                        let out = Outcome {
                            left: None,
                            right: None,
                            split_key: None,
                            max_group: 0,
                            read: 0,
                            written: 0,
                        };
                        self.complete_split_node(job, &v, out)?;
                    }
                }
                Ok(true)
            }
        }
    }

    /// Starts the batch of `parts`, or commits its step at once when it has none (a root
    /// drain into no child, no leaf to split).
    fn start_batch(&self, job: &mut Job, kind: BatchKind, parts: Vec<Arc<Part>>) -> Result<()> {
        if !parts.is_empty() {
            job.batch = Some(Batch { kind, parts });
            return Ok(());
        }
        match kind {
            BatchKind::Root => self.commit_root_flush(job, Vec::new()),
            BatchKind::Flush { cut } => self.commit_flush(job, cut, Vec::new()),
            BatchKind::LeafSplits => self.commit_leaf_splits(job, Vec::new()),
        }
    }

    /// Finishes the pipe's d-trees and applies its step.
    fn complete(&self, job: &mut Job) -> Result<()> {
        let Some((pipe, kind)) = job.pipe.take() else {
            return Ok(());
        };
        let out = self.finish_pipe(pipe)?;
        job.observed.max_group = job.observed.max_group.max(out.max_group);
        let v = self.version();
        // On failure nothing of the step is committed: the caller aborts, and the next call
        // starts it again.
        self.apply(job, &v, kind, out)
    }

    /// Takes the d-trees of a pipe that [`Pipe::step`] completed (their index levels, filter
    /// and header were written by its finishing steps), counting its work.
    fn finish_pipe(&self, pipe: Pipe) -> Result<Outcome> {
        self.counters
            .units_moved
            .fetch_add(pipe.moved(), Ordering::Relaxed);
        let (step_pages, step_us) = pipe.max_finish_step();
        let out = pipe.finish(&self.ctx.store)?;
        let finished: u64 = [&out.left, &out.right]
            .into_iter()
            .flatten()
            .map(|r| r.meta().pages() - r.meta().data_pages)
            .sum();
        let c = &self.counters;
        c.finish_pages.fetch_add(finished, Ordering::Relaxed);
        c.max_finish_pages.fetch_max(step_pages, Ordering::Relaxed);
        c.max_finish_us.fetch_max(step_us, Ordering::Relaxed);
        Ok(out)
    }

    /// Commits a batch whose parts are all built; on failure, gives their d-trees back and
    /// leaves the job to start the batch again.
    fn complete_batch(&self, job: &mut Job) -> Result<()> {
        let Some(batch) = job.batch.take() else {
            return Ok(());
        };
        let mut built = Vec::with_capacity(batch.parts.len());
        let mut runs = Vec::new();
        let (mut read, mut dropped) = (0u64, 0u64);
        for p in &batch.parts {
            let st = std::mem::replace(&mut *p.state.lock(), PartState::Dropped);
            if let PartState::Built(out) = st {
                job.observed.max_group = job.observed.max_group.max(out.max_group);
                if p.into_leaf {
                    read += out.read;
                    dropped += out.read.saturating_sub(out.written);
                }
                runs.extend(
                    [&out.left, &out.right]
                        .into_iter()
                        .flatten()
                        .flat_map(|r| r.extents().to_vec()),
                );
                built.push((p.child, *out, p.moved.clone()));
            }
        }
        if read > 0 {
            let mut d = self.leaf_drops.lock();
            *d = (d.0 / 2.0 + read as f64, d.1 / 2.0 + dropped as f64);
        }
        let r = if built.len() != batch.parts.len() {
            Err(Error::corruption(
                "nbtree job",
                None,
                "a batch committed with a part not built",
            ))
        } else {
            self.counters
                .child_merges
                .fetch_add(built.len() as u64, Ordering::Relaxed);
            match batch.kind {
                BatchKind::Root => {
                    let built = built.into_iter().map(|(c, out, _)| (c, out)).collect();
                    self.commit_root_flush(job, built)
                }
                BatchKind::Flush { cut } => self.commit_flush(job, cut, built),
                BatchKind::LeafSplits => {
                    let built = built.into_iter().map(|(c, out, _)| (c, out)).collect();
                    self.commit_leaf_splits(job, built)
                }
            }
        };
        if r.is_err() {
            for e in runs {
                self.ctx.store.alloc().release(e);
            }
        }
        r
    }

    /// A deep flush's commit: each receiving child's new d-tree, and the node's live part
    /// starting at `cut` (its d-tree dropped when everything moved down).
    fn commit_flush(
        &self,
        job: &mut Job,
        cut: Option<Arc<[u8]>>,
        built: Vec<BuiltPart>,
    ) -> Result<()> {
        let v = self.version();
        let path = job.cursor.path.clone();
        let node = node_at(&v.root, &path)
            .ok_or_else(|| Error::corruption("nbtree job", None, "flushed node vanished"))?;
        let Some(d) = &node.dtree else {
            return Err(Error::corruption(
                "nbtree job",
                None,
                "flush of an empty d-tree",
            ));
        };
        let mut n = (**node).clone();
        let (mut moved_units, mut moved_entries, mut moved_bytes) = (0u64, 0u64, 0u64);
        let mut outs = Vec::with_capacity(built.len());
        for (child, out, moved) in built {
            if let Some(m) = moved {
                let st = m.lock();
                moved_units += st.units;
                moved_entries += st.entries;
                moved_bytes += st.bytes;
                job.observed.max_group = job.observed.max_group.max(st.max_group);
            }
            outs.push((child, out));
        }
        // The batch gives back whatever it built if this commit fails.
        let (mut retired, halves) = self.place(&mut n, node, outs)?;
        self.split_in_merges(job, halves);
        let live_entries = d.live_entries.checked_sub(moved_entries);
        let live_bytes = d.live_bytes.checked_sub(moved_bytes);
        let (Some(live_entries), Some(live_bytes)) = (live_entries, live_bytes) else {
            return Err(Error::corruption(
                "nbtree",
                None,
                format!("s-node {path:?} moved more than its live part"),
            ));
        };
        if live_entries == 0 || cut.is_none() {
            if live_entries != 0 {
                return Err(Error::corruption(
                    "nbtree",
                    None,
                    format!("s-node {path:?}: {live_entries} live entries past its last child"),
                ));
            }
            // Everything moved down: the whole d-tree is stale.
            retired.push(d.run.clone());
            n.dtree = None;
            self.counters.stale_dropped.fetch_add(1, Ordering::Relaxed);
        } else {
            n.dtree = Some(DTree {
                run: d.run.clone(),
                live_start: cut,
                live_entries,
                live_bytes,
            });
        }
        let mut cursor = job.cursor.clone();
        if let Phase::Flush { moved, .. } = &mut cursor.phase {
            *moved += moved_units;
            job.observed.max_sent = job.observed.max_sent.max(*moved);
        }
        self.commit_node(job, &v, n, retired, cursor)
    }

    /// Notes the halves of the leaves a flush's merges split (`halves`: two d-trees each).
    fn split_in_merges(&self, job: &mut Job, halves: Vec<Arc<LazyRun>>) {
        self.counters
            .leaf_splits_in_merge
            .fetch_add(halves.len() as u64 / 2, Ordering::Relaxed);
        job.halves.extend(halves);
    }

    /// Puts each part's new d-tree(s) in place of its child of `n`, a copy of `node`: one
    /// replaces the child's d-tree; two (a leaf split, in a flush's merge or after it) replace
    /// the leaf by its halves, the first key of the second becoming an s-key. Returns the
    /// d-trees replaced and the halves' d-trees.
    fn place(
        &self,
        n: &mut SNode,
        node: &SNode,
        mut built: Vec<(usize, Outcome)>,
    ) -> Result<Placed> {
        let mut retired = Vec::new();
        let mut halves = Vec::new();
        // From the right, so that the positions of the children still to replace do not move.
        built.sort_unstable_by_key(|(child, _)| std::cmp::Reverse(*child));
        for (child, out) in built {
            let old = node.children.get(child).ok_or_else(|| {
                Error::corruption("nbtree job", None, format!("no child {child} to replace"))
            })?;
            retired.extend(old.dtree.iter().map(|d| d.run.clone()));
            n.children[child] = Arc::new(SNode {
                dtree: leaf_with(out.left).dtree,
                ..(**old).clone()
            });
            match (out.right, out.split_key) {
                (Some(right), Some(key)) if old.is_leaf() => {
                    let right = leaf_with(Some(right));
                    halves.extend(n.children[child].dtree.iter().map(|d| d.run.clone()));
                    halves.extend(right.dtree.iter().map(|d| d.run.clone()));
                    n.children.insert(child + 1, Arc::new(right));
                    n.keys.insert(child, key);
                    self.counters.leaf_splits.fetch_add(1, Ordering::Relaxed);
                }
                // Compaction shrank a split leaf to one d-tree.
                (None, _) => {}
                // Only leaves split in a merge; the batch gives the runs back.
                _ => {
                    return Err(Error::corruption(
                        "nbtree job",
                        None,
                        format!("a merge into child {child} split a non-leaf"),
                    ))
                }
            }
        }
        Ok((retired, halves))
    }

    fn apply(&self, job: &mut Job, v: &Arc<Version>, kind: StepKind, out: Outcome) -> Result<()> {
        match kind {
            StepKind::RootAbsorb => {
                let mem = job.mem.clone();
                let z = mem.as_ref().map_or(0, |m| m.bytes());
                job.observed.max_sent = job.observed.max_sent.max(z);
                let root = leaf_with(out.left);
                let retired: Vec<_> = v.root.dtree.iter().map(|d| d.run.clone()).collect();
                job.root = None;
                self.commit(
                    job,
                    Change {
                        root: Arc::new(root),
                        retired,
                        durable_seq: mem.map(|m| m.max_seq()),
                        cursor: Cursor::at_root(),
                    },
                )?;
                job.mem = None;
                Ok(())
            }
            StepKind::SplitNode => self.complete_split_node(job, v, out),
        }
    }

    /// The leaf splits' commit: each split leaf replaced by its halves (or, when compaction
    /// shrank it to one d-tree, by that one); the job goes on past the last leaf.
    fn commit_leaf_splits(&self, job: &mut Job, built: Vec<(usize, Outcome)>) -> Result<()> {
        let v = self.version();
        let path = job.cursor.path.clone();
        let node = node_at(&v.root, &path)
            .ok_or_else(|| Error::corruption("nbtree job", None, "split parent vanished"))?;
        let mut n = (**node).clone();
        let (retired, _) = self.place(&mut n, node, built)?;
        let next = n.children.len() as u32;
        let cursor = Cursor {
            path,
            phase: Phase::LeafSplits { next },
        };
        self.commit_node(job, &v, n, retired, cursor)
    }

    /// Commits `n` in place of the node at the cursor's path of `v`.
    fn commit_node(
        &self,
        job: &mut Job,
        v: &Version,
        n: SNode,
        retired: Vec<Arc<LazyRun>>,
        cursor: Cursor,
    ) -> Result<()> {
        let root = replace_at(&v.root, &job.cursor.path, n)?;
        self.commit(
            job,
            Change {
                root,
                retired,
                durable_seq: None,
                cursor,
            },
        )
    }

    /// Splits the node at the cursor's path in two (the root: under a new root), its d-tree
    /// already split into `out`.
    fn complete_split_node(&self, job: &mut Job, v: &Arc<Version>, out: Outcome) -> Result<()> {
        let mut cursor = job.cursor.clone();
        let path = cursor.path.clone();
        let node = node_at(&v.root, &path)
            .ok_or_else(|| Error::corruption("nbtree job", None, "split node vanished"))?
            .clone();
        let retired: Vec<_> = node.dtree.iter().map(|d| d.run.clone()).collect();
        let (key, small, large) = if node.is_leaf() {
            // The root leaf (spec Fig. 2): its d-tree split at its middle.
            let left = leaf_with(out.left);
            match (out.right, out.split_key) {
                (Some(right), Some(key)) => {
                    let right = leaf_with(Some(right));
                    (key, left, right)
                }
                (right, _) => {
                    if let Some(r) = right {
                        job::release(&self.ctx.store, &r);
                    }
                    return self.commit_node(job, v, left, retired, cursor);
                }
            }
        } else {
            // Standard B-tree promotion (spec P2): K_M goes up and stays in neither half.
            let m = node.keys.len() / 2;
            let key = node.keys[m].clone();
            let lazy = |r: Option<Run>| r.map(|r| DTree::whole(Arc::new(LazyRun::from_run(r))));
            let small = SNode {
                keys: node.keys[..m].to_vec(),
                children: node.children[..=m].to_vec(),
                dtree: lazy(out.left),
                runs: Vec::new(),
            };
            let large = SNode {
                keys: node.keys[m + 1..].to_vec(),
                children: node.children[m + 1..].to_vec(),
                dtree: lazy(out.right),
                runs: Vec::new(),
            };
            (key, small, large)
        };
        let root = match path.split_last() {
            None => {
                self.counters.root_splits.fetch_add(1, Ordering::Relaxed);
                // The root's runs stay with the root.
                Arc::new(SNode {
                    keys: vec![key],
                    children: vec![Arc::new(small), Arc::new(large)],
                    dtree: None,
                    runs: node.runs.clone(),
                })
            }
            Some((&idx, parent_path)) => {
                self.counters.node_splits.fetch_add(1, Ordering::Relaxed);
                let parent = node_at(&v.root, parent_path).ok_or_else(|| {
                    Error::corruption("nbtree job", None, "split parent vanished")
                })?;
                let mut p = (**parent).clone();
                let i = idx as usize;
                p.children[i] = Arc::new(small);
                p.children.insert(i + 1, Arc::new(large));
                p.keys.insert(i, key);
                cursor.path.pop();
                replace_at(&v.root, parent_path, p)?
            }
        };
        self.commit(
            job,
            Change {
                root,
                retired,
                durable_seq: None,
                cursor,
            },
        )
    }

    /// The root's drain: every receiving child's new d-tree and the durable sequence number in
    /// one commit.
    fn commit_root_flush(&self, job: &mut Job, built: Vec<(usize, Outcome)>) -> Result<()> {
        let v = self.version();
        let mem = job.mem.clone();
        let drained: u64 = (job.drain.iter())
            .map(|r| units(r.meta().entries, r.meta().user_bytes))
            .sum();
        let z = mem.as_ref().map_or(0, |m| m.bytes()) + drained;
        job.observed.max_sent = job.observed.max_sent.max(z);
        let mut root = (*v.root).clone();
        let (mut retired, halves) = self.place(&mut root, &v.root, built)?;
        // The drained runs leave the root in the same commit as their entries reach the
        // children (runs parked meanwhile stay).
        root.runs
            .retain(|r| !job.drain.iter().any(|d| Arc::ptr_eq(d, r)));
        retired.extend(job.drain.iter().cloned());
        self.split_in_merges(job, halves);
        // Past the root's drain (the commit computes the bound of the rest from here on).
        let phase = job.root.take();
        let r = self.commit(
            job,
            Change {
                root: Arc::new(root),
                retired,
                durable_seq: mem.map(|m| m.max_seq()),
                cursor: Cursor {
                    path: Vec::new(),
                    phase: Phase::AfterFlush { sent: z },
                },
            },
        );
        if r.is_err() {
            job.root = phase;
            return r;
        }
        job.mem = None;
        job.drain.clear();
        self.draining.store(0, Ordering::Release);
        Ok(())
    }

    /// Makes a step visible and asks for it to be made durable: the new version (with the
    /// settled cursor) is published at once, and the committer thread syncs the data file and
    /// commits it to the manifest (with whatever steps follow before it gets to it). Replaced
    /// d-trees are released once no reader holds a version that reaches them and a commit that
    /// no longer names them is durable.
    fn commit(&self, job: &mut Job, change: Change) -> Result<()> {
        let (cursor, action) = settle(&change.root, change.cursor, self.shape)?;
        let persisted = (action != Action::Done).then(|| cursor.clone());
        let height = height_of(&change.root);
        let mut observed = job.observed;
        observed.sigma_max = observed.sigma_max.max(self.shape.sigma);
        let freed: Vec<Extent> = change
            .retired
            .iter()
            .flat_map(|r| r.meta().extents.iter().copied())
            .collect();
        self.current.publish(&self.committer, |cur| {
            Arc::new(Version {
                root: change.root,
                height,
                cursor: persisted,
                observed,
                seq: change.durable_seq.unwrap_or(cur.seq),
                _epoch: cur._epoch.advance(freed),
            })
        });
        self.committer.request();
        job.cursor = cursor;
        job.observed = observed;
        self.counters.job_steps.fetch_add(1, Ordering::Relaxed);
        // The work left, from the new shape. It only ever lowers the debt: the Db paces by
        // debt ÷ memtable room, and a debt that rose late in a memtable would ask one writer
        // for much of the job.
        if job.root.is_none() {
            let v = self.version();
            let left = job.bound.saturating_sub(job.done_since);
            let fresh = rest_bound(
                &v.root,
                &job.cursor,
                granule(job.observed.max_group),
                self.shape,
            );
            if fresh > left {
                self.counters.bound_misses.fetch_add(1, Ordering::Relaxed);
            }
            job.bound = left.min(fresh);
            job.done_since = 0;
        }
        Ok(())
    }

    /// Drops the step in progress (its builders release what they allocated); the job resumes
    /// from its last commit.
    fn abort(&self, job: &mut Job) {
        job.pipe = None;
        if let Some(batch) = job.batch.take() {
            for p in &batch.parts {
                // A caller stepping the part holds it until its step ends (it does not wait
                // for the job's lock meanwhile).
                let st = std::mem::replace(&mut *p.state.lock(), PartState::Dropped);
                if let PartState::Built(out) = st {
                    for r in [out.left, out.right].into_iter().flatten() {
                        job::release(&self.ctx.store, &r);
                    }
                }
            }
        }
    }

    /// Commits the published version if it is not the committed one: syncs the data file (when
    /// it has new d-trees), then one manifest commit of the whole s-tree listing the extents it
    /// reaches that the last commit did not (added) and the other way round (freed). Returns
    /// whether it committed.
    fn commit_published(&self) -> Result<bool> {
        let mut c = self.committed.lock();
        let t = std::time::Instant::now();
        let (v, generation) = self.current.published(&self.committer);
        if self.committer.is_committed(generation) {
            return Ok(false);
        }
        let now = extents_of(&v.root);
        let (added, freed) = extent_difference(&c.extents, &now);
        let commits = Commits::new(
            &self.ctx,
            &self.committer,
            &self.durable,
            &self.counters.commits,
            &self.counters.max_commit_us,
        );
        let commit = Commit {
            index_meta: encode_meta(&v.root, v.height, &v.observed, v.cursor.as_ref()),
            durable_seq: v.seq,
            added,
            freed,
        };
        commits.commit(commit, generation, DataSync::WhenAdded, t)?;
        *c = Committed {
            _version: v,
            extents: now,
        };
        Ok(true)
    }

    fn note_call(&self, units: u64, pages: u64) {
        let c = &self.counters;
        c.work_calls.fetch_add(1, Ordering::Relaxed);
        c.max_call_units.fetch_max(units, Ordering::Relaxed);
        c.max_call_pages.fetch_max(pages, Ordering::Relaxed);
    }

    fn written_pages(&self) -> u64 {
        let io = self.ctx.store.counters().snapshot();
        (io.written(Purpose::Flush) + io.written(Purpose::Merge)) / PAGE_SIZE as u64
    }
}

/// Every extent of every d-tree of the tree.
fn extents_of(root: &SNode) -> std::collections::HashSet<Extent> {
    let mut out = std::collections::HashSet::new();
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        if let Some(d) = &n.dtree {
            out.extend(d.run.meta().extents.iter().copied());
        }
        for r in &n.runs {
            out.extend(r.meta().extents.iter().copied());
        }
        stack.extend(n.children.iter().map(|c| &**c));
    }
    out
}

impl Durable for Tree {
    #[cfg(test)]
    fn hold_commit_lock(&self) -> Box<dyn super::committer::Held + '_> {
        Box::new(self.committed.lock())
    }

    fn commit(&self) -> Result<bool> {
        self.commit_published()
    }

    fn committer(&self) -> &Committer {
        &self.committer
    }

    fn store(&self) -> &PageFile {
        &self.ctx.store
    }
}

impl Index for NbTree {
    fn wait_durable(&self, limit: std::time::Duration) -> Result<bool> {
        WithCommitter::wait_durable(self, limit)
    }

    fn absorb(&self, mem: Arc<Memtable>) -> Result<()> {
        self.counters.absorbs.fetch_add(1, Ordering::Relaxed);
        if mem.is_empty() {
            return Ok(());
        }
        // The Db absorbs only at a debt of 0, which a waiting memtable never leaves
        // (`set_job_debt`): one still waiting here would be lost under the new one.
        let pp = self.park_pending.lock();
        let mut pending = self.pending.lock();
        if pp.is_some() || pending.is_some() {
            return Err(Error::corruption(
                "nbtree absorb",
                None,
                "a memtable handed over while the last one still waits to be taken up",
            ));
        }
        let v = self.version();
        if self.sigma_memtables() > 1 && !v.root.is_leaf() {
            // Z becomes a root run: one sequential write of it, read from memory. The drain in
            // flight, if any, owes its share over the memtables left until the root's filling
            // runs reach c (this one included).
            let bound = merge_cost(mem.bytes(), 1, self.shape).max(1);
            let runs = v.root.runs.len() as u64;
            let filling = runs.saturating_sub(self.draining.load(Ordering::Acquire));
            let k = self.sigma_memtables().saturating_sub(filling).max(1);
            let mut pp = pp;
            *pp = Some((mem, bound, k));
            let owed = self.job_left.load(Ordering::Acquire).div_ceil(k);
            self.debt.store(bound + owed, Ordering::Release);
            return Ok(());
        }
        let bound = job_bound(
            &v.root,
            mem.bytes(),
            granule(v.observed.max_group),
            self.shape,
        )
        .max(1);
        *pending = Some((mem, bound));
        self.debt.store(bound, Ordering::Release);
        Ok(())
    }

    /// An upper bound, in units (entry bytes plus 64 per entry) read and written, of the work
    /// the job in flight has left; 0 when there is none.
    fn debt(&self) -> u64 {
        self.debt.load(Ordering::Acquire)
    }

    fn work(&self, budget: u64) -> Result<u64> {
        Ok(self.work_as(budget, true)?.unwrap_or(1))
    }

    /// A writer's pacing share: `None`, at once, when another thread holds the job (a step in
    /// flight), so that the writer waits for that thread's progress rather than for the rest of
    /// its step (the bench's 1.96 s longest `nbtree` wait at 50 million records, c = 8, was a
    /// writer waiting for the job while a background step ran).
    fn work_unless_busy(&self, budget: u64) -> Result<Option<u64>> {
        self.work_as(budget, false)
    }

    fn durable_seq(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The published version's: a job drops Z (`Job::mem`) when its drain is published, and a
    /// park drops its memtable when its run is, so a published memtable holds no memory here.
    fn published_seq(&self) -> u64 {
        self.version().seq.max(self.durable_seq())
    }

    fn background_work(&self) -> bool {
        self.debt() > 0
            || self.dirty()
            || self.committer.busy()
            || self.job_left.load(Ordering::Acquire) > 0
            || self.drain_due()
    }

    /// Top down along the key's path (spec §3.9): each d-tree's live part is searched only
    /// when its bloom filter may hold the key, and the search stops at the first Put or Delete
    /// (a shallower version is never older, V1).
    fn get(&self, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> Result<()> {
        let v = self.version();
        let start = out.len();
        // The root's runs (c > 1), newest first: above everything below the root.
        for r in &v.root.runs {
            r.run()?.get(key, seq, out)?;
            if out.len() > start && out.last().is_some_and(|e| e.kind != Kind::Merge) {
                return Ok(());
            }
        }
        let mut n = &v.root;
        loop {
            if let Some(d) = n.dtree.as_ref().filter(|d| d.is_live(key)) {
                d.run.run()?.get(key, seq, out)?;
                if out.len() > start && out.last().is_some_and(|e| e.kind != Kind::Merge) {
                    return Ok(());
                }
            }
            if n.is_leaf() {
                return Ok(());
            }
            n = &n.children[n.child_index(key)];
        }
    }

    fn iter(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> Result<Vec<EntryIter>> {
        Ok(iter::level_sources(
            &self.version(),
            lo,
            hi,
            reverse,
            Purpose::UserRead,
        ))
    }

    fn stats(&self) -> IndexStats {
        let v = self.version();
        let c = &self.counters;
        let mut s = IndexStats::new("nbtree", u64::from(v.height), &c.absorbs);
        s.count([
            ("jobs", &c.jobs),
            ("jobs_resumed", &c.jobs_resumed),
            ("job_steps", &c.job_steps),
            ("flushes", &c.flushes),
            ("deep_flushes", &c.deep_flushes),
            ("child_merges", &c.child_merges),
            ("parallel_steps", &c.parallel_steps),
            ("leaf_splits", &c.leaf_splits),
            ("leaf_splits_in_merge", &c.leaf_splits_in_merge),
            ("node_splits", &c.node_splits),
            ("root_splits", &c.root_splits),
            ("stale_dtrees_dropped", &c.stale_dropped),
            ("units_moved", &c.units_moved),
            ("finish_pages", &c.finish_pages),
            ("max_finish_pages", &c.max_finish_pages),
            ("max_finish_us", &c.max_finish_us),
            ("work_calls", &c.work_calls),
            ("bound_misses", &c.bound_misses),
            ("max_work_call_units", &c.max_call_units),
            ("max_work_call_pages", &c.max_call_pages),
            ("commits", &c.commits),
            ("max_commit_us", &c.max_commit_us),
            ("parks", &c.parks),
            ("root_drains", &c.drains),
        ]);
        s.shape.push(format!(
            "f {} sigma {} B ({} memtable(s)), root runs {} ({} B), bloom {} bits/key{}",
            self.shape.fanout,
            self.shape.sigma,
            self.sigma_memtables(),
            v.root.runs.len(),
            v.root.runs_units(),
            self.params.bloom_bits_per_key,
            match &v.cursor {
                Some(c) => format!(", job at {:?} {:?}", c.path, c.phase),
                None => String::new(),
            }
        ));
        let mut levels: Vec<LevelShape> = Vec::new();
        level_shapes(&v.root, 0, &mut levels);
        for (i, l) in levels.iter().enumerate() {
            s.shape.push(format!(
                "level {i}: {} s-nodes, {} d-trees, live {} entries / {} B, physical {} entries / {} pages, bloom {} B{}",
                l.nodes,
                l.dtrees,
                l.live_entries,
                l.live_units,
                l.entries,
                l.pages,
                l.filter_bytes,
                if i == 0 { " (root: its d-tree is the memtables)" } else { "" }
            ));
            s.entries += l.entries;
            s.filter_bytes += l.filter_bytes;
        }
        s.counters
            .insert("dtrees".into(), levels.iter().map(|l| l.dtrees).sum());
        s.counters
            .insert("root_runs".into(), v.root.runs.len() as u64);
        for r in &v.root.runs {
            s.entries += r.meta().entries;
            s.filter_bytes += r.meta().filter_pages * PAGE_SIZE as u64;
        }
        s
    }

    fn check(&self) -> Result<u64> {
        check::check(&self.version(), self.shape)
    }
}

/// Sizes of one s-tree level, for `stats`.
#[derive(Default, Clone)]
struct LevelShape {
    nodes: u64,
    dtrees: u64,
    live_entries: u64,
    live_units: u64,
    entries: u64,
    pages: u64,
    filter_bytes: u64,
}

fn level_shapes(n: &SNode, depth: usize, out: &mut Vec<LevelShape>) {
    if out.len() <= depth {
        out.resize(depth + 1, LevelShape::default());
    }
    let l = &mut out[depth];
    l.nodes += 1;
    if let Some(d) = &n.dtree {
        let m = d.run.meta();
        l.dtrees += 1;
        l.live_entries += d.live_entries;
        l.live_units += units(d.live_entries, d.live_bytes);
        l.entries += m.entries;
        l.pages += m.pages();
        l.filter_bytes += m.filter_pages * PAGE_SIZE as u64;
    }
    for c in &n.children {
        level_shapes(c, depth + 1, out);
    }
}
