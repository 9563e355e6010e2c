//! `stbe`: the size-tiered Bε-tree of SplinterDB (seed 004 ch. 3,
//! `specs/stbe-tree-splinterdb.md`).
//!
//! A *trunk* of nodes with pivots, child pointers and branch references (with a start index
//! per child) sits over *branches*, the substrate's immutable runs with a quotient filter,
//! shared by reference between nodes and read only inside each node's key range
//! ([`node`], [`branch`]). A frozen memtable is bulk-built into packed branches, one per
//! sequential run it holds and one per stretch of keys between them ([`runs`]), which become
//! the root's newest ([`Stbe::absorb`], [`task`]); flushes move branch *references*
//! down the trunk when a node holds too much live data for its children (T1) or too many live
//! branches for one child (T2) ([`policy`], [`edit`]); each node then compacts only the batch
//! it received (flush-then-compact) less the branches that overlap no other branch of it and
//! lie inside the node (they stay as they are), in the background or in writers' paced steps.
//! Internal nodes are split preemptively when a flush reaches them; a leaf is split once its
//! settled branches pass the leaf target (a flushed batch counts when its compaction installs),
//! at the next flush into it or install in it; both are merged when small.
//!
//! Concurrency: readers load the published trunk version (an `Arc`) and take no lock. Edits
//! (incorporations, flushes, splits, merges, installs) copy the nodes they change and publish
//! a new version under one short edit lock; they do no I/O. The long work — building the
//! memtable branch and compactions — runs outside it as resumable [`task`]s: several threads
//! (the Db's background workers and paced writers) each claim a different task and run it in
//! parallel, one bounded step per `work` call. Each version change becomes durable by a
//! manifest commit of the whole trunk ([`meta`]) after a sync of the data file: after every
//! incorporation, and when the index is otherwise idle.

pub mod branch;
pub mod edit;
pub mod meta;
pub mod node;
pub mod policy;
pub mod read;
pub mod runs;
pub mod scan;
pub mod task;

pub mod check;

#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use self::branch::{Branch, Key};
use self::edit::{Claims, Editor, Effects, Ids};
use self::node::{Child, Node};
use self::policy::Limits;
use self::scan::ScanDebt;
use self::task::{coalesce, Build, BuildOptions, KeyRanges, Probe, Source};
use super::committer::{Commits, Committer, DataSync, Durable, Versions, WithCommitter};
use super::{Index, IndexContext, IndexStats};
use crate::entry::Entry;
use crate::error::Result;
use crate::manifest::Commit;
use crate::memtable::Memtable;
use crate::merge::EntryIter;
use crate::options::StbeParams;
use crate::storage::{Extent, PageFile, Purpose};

/// Compactions that may be open (started, holding read-ahead buffers and a builder) at once;
/// more wait unstarted, so memory stays bounded however far behind compaction falls.
const MAX_OPEN_JOBS: usize = 3;

/// Trunk heights whose batch compactions are counted apart (`woods stats`).
const HEIGHTS: usize = 4;

/// The least work one `work` call does when there is any (16 KiB, the Db's smallest step).
const MIN_STEP_UNITS: u64 = 16 << 10;

/// One published shape of the trunk.
pub struct Version {
    pub root: Arc<Node>,
    /// Every memtable up to this sequence number is in the trunk.
    pub incorporated: u64,
    /// Id counters at publication (persisted with the trunk).
    pub ids: Ids,
    /// Publication number.
    pub gen: u64,
}

#[derive(Default)]
struct Counters {
    absorbs: AtomicU64,
    incorporations: AtomicU64,
    flushes: AtomicU64,
    trivial_flushes: AtomicU64,
    compactions: AtomicU64,
    full_compactions: AtomicU64,
    splits: AtomicU64,
    root_splits: AtomicU64,
    merges: AtomicU64,
    /// Leaves scans made due for a path flush and for a whole compaction too ([`scan`]), and
    /// the edits that acted on them.
    scan_flushes: AtomicU64,
    scan_wholes: AtomicU64,
    scan_edits: AtomicU64,
    /// Tasks dropped before they started: their batch had moved on (flushed further down
    /// before it was compacted) or their leaf was gone.
    skipped: AtomicU64,
    /// Compactions whose output could not be installed (wasted work).
    discarded: AtomicU64,
    commits: AtomicU64,
    bytes_incorporated: AtomicU64,
    bytes_compacted: AtomicU64,
    /// Of `bytes_compacted`: batch compactions by the height of the nodes they ran in (the
    /// last slot counts every height from it up), whole-leaf compactions, leaf merges.
    bytes_compacted_at: [AtomicU64; HEIGHTS],
    bytes_full_compacted: AtomicU64,
    bytes_merged: AtomicU64,
    /// Branches memtables were built into, and units flushes moved by reference alone.
    pieces: AtomicU64,
    units_moved: AtomicU64,
    /// Longest times, in microseconds: a whole `work` call, a commit (sync + manifest), the
    /// edit lock held by one edit, a branch's finish (index levels, filter, header).
    max_work_us: AtomicU64,
    max_commit_us: AtomicU64,
    max_edit_us: AtomicU64,
    max_finish_us: AtomicU64,
}

fn note_max(a: &AtomicU64, since: std::time::Instant) {
    a.fetch_max(since.elapsed().as_micros() as u64, Ordering::Relaxed);
}

/// A compaction waiting or under way.
#[derive(Clone, Debug)]
enum TaskKind {
    /// The batch a flush brought to the nodes at `height` in `[lo, hi)`.
    Batch {
        batch: u64,
        height: u32,
        lo: Key,
        hi: Option<Key>,
        inputs: Vec<Arc<Branch>>,
    },
    /// Every branch of leaf `leaf` (lower bound `lo`): tombstones dropped.
    Full { leaf: u64, lo: Key },
    /// Every branch of the frozen neighbours `left` and `right` under the parent holding `lo`.
    Merge { left: u64, right: u64, lo: Key },
}

/// What an install needs to know about the snapshot its task started from.
enum Install {
    Batch {
        batch: u64,
        height: u32,
        lo: Key,
        hi: Option<Key>,
        inputs: HashSet<u64>,
    },
    Full {
        leaf: u64,
        lo: Key,
        prefix: Vec<u64>,
    },
    Merge {
        left: u64,
        right: u64,
        lo: Key,
        left_refs: Vec<u64>,
        right_refs: Vec<u64>,
    },
}

struct Job {
    build: Build,
    install: Install,
}

struct TaskEntry {
    kind: TaskKind,
    /// A thread holds the task (its job is taken out meanwhile).
    busy: bool,
    job: Option<Box<Job>>,
    /// Estimated input units, and those consumed.
    units: u64,
    done: u64,
}

/// Everything edits change, under the edit lock.
struct State {
    root: Arc<Node>,
    incorporated: u64,
    gen: u64,
    ids: Ids,
    claims: Claims,
    tasks: BTreeMap<u64, TaskEntry>,
    next_task: u64,
    full_scheduled: HashSet<u64>,
    /// Batches whose compaction has started.
    running_batches: HashSet<u64>,
    open_jobs: usize,
}

/// The memtable being built into branches: one per piece between the keys where its
/// sequential runs begin and end ([`runs`]), one piece after another.
struct Incorporation {
    mem: Arc<Memtable>,
    /// Where the pieces are cut, ascending.
    cuts: Vec<Key>,
    /// The piece being built (`cuts.len() + 1` pieces in all).
    piece: usize,
    build: Option<Build>,
    /// The branches of the pieces finished so far (an empty piece gives none).
    branches: Vec<Arc<Branch>>,
    /// Every piece is built.
    built: bool,
}

struct Committed {
    _version: Arc<Version>,
    branches: HashMap<u64, Arc<Branch>>,
}

/// The STBε-tree index: its state, shared with the committer thread.
pub struct Shared {
    ctx: IndexContext,
    params: StbeParams,
    limits: Limits,
    current: Versions<Version>,
    state: Mutex<State>,
    queue: Mutex<VecDeque<Arc<Memtable>>>,
    inc: Mutex<Option<Incorporation>>,
    committed: Mutex<Committed>,
    next_branch: AtomicU64,
    durable: AtomicU64,
    /// Units of queued memtables not yet consumed by their build.
    queue_units: AtomicU64,
    /// Estimated input units of compactions not yet done.
    pending_units: AtomicU64,
    /// The root is full: the next incorporation waits for compactions.
    root_blocked: AtomicBool,
    /// Compaction units owed before the next memtable may be absorbed (set at each absorb).
    obligation: AtomicU64,
    /// The last sequence numbers of the memtables in the trunk whose commit is not yet
    /// durable, oldest first (only the numbers: a memtable's memory goes with its
    /// publication, [`Index::published_seq`]).
    awaiting: Mutex<VecDeque<u64>>,
    /// The scans' charges against leaves (scan-driven compaction).
    scan: Arc<ScanDebt>,
    committer: Committer,
    counters: Counters,
    /// Tests: every branch written, with what wrote it and its size sample (to tell which
    /// keys were rewritten where).
    #[cfg(test)]
    written: Mutex<Vec<(Written, u64, branch::Sample)>>,
}

/// What wrote a branch (tests).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Written {
    Incorporation,
    Batch(u32),
    Full,
    Merge,
}

/// The STBε-tree index: [`Shared`] and the thread that makes its versions durable (data file
/// sync and manifest commit), so that no writer's paced step waits for an fsync.
pub type Stbe = WithCommitter<Shared>;

fn branch_set(root: &Node) -> HashMap<u64, Arc<Branch>> {
    let mut out = HashMap::new();
    fn walk(n: &Node, out: &mut HashMap<u64, Arc<Branch>>) {
        for r in &n.branches {
            out.entry(r.branch.id).or_insert_with(|| r.branch.clone());
        }
        for c in &n.children {
            walk(&c.node, out);
        }
    }
    walk(root, &mut out);
    out
}

/// The trunk of a new index: a root over one empty leaf, so that the root is never a leaf and
/// never compacted (spec §3.4 step 4).
fn new_trunk() -> (Arc<Node>, Ids) {
    let everything = Key::from(&b""[..]);
    let leaf = Node::new(1, 0, everything.clone(), None);
    let mut root = Node::new(0, 1, everything, None);
    root.children.push(Child {
        node: Arc::new(leaf),
        start: 0,
    });
    (Arc::new(root), Ids { node: 2, batch: 1 })
}

impl Stbe {
    /// Opens the index from its manifest metadata (empty: a new index). Pending batch
    /// compactions are re-derived from the batch ids the references carry, and leaves over
    /// their limits get whole-leaf compactions.
    pub fn open(
        ctx: IndexContext,
        params: StbeParams,
        meta: &[u8],
        durable_seq: u64,
    ) -> Result<Stbe> {
        let (root, ids, next_branch) = if meta.is_empty() {
            let (r, i) = new_trunk();
            (r, i, 1)
        } else {
            let d = meta::decode(meta, &ctx.store)?;
            (d.root, d.ids, d.next_branch)
        };
        let limits = Limits::new(&params, ctx.memtable_bytes);
        let version = Arc::new(Version {
            root: root.clone(),
            incorporated: durable_seq,
            ids,
            gen: 0,
        });
        let committed = Committed {
            _version: version.clone(),
            branches: branch_set(&root),
        };
        let scan = Arc::new(ScanDebt::new(
            params.scan_credit_bytes,
            limits.memtable_units,
        ));
        let index = Shared {
            ctx,
            params,
            limits,
            current: Versions::new(version),
            state: Mutex::new(State {
                root,
                incorporated: durable_seq,
                gen: 0,
                ids,
                claims: Claims::default(),
                tasks: BTreeMap::new(),
                next_task: 1,
                full_scheduled: HashSet::new(),
                running_batches: HashSet::new(),
                open_jobs: 0,
            }),
            queue: Mutex::new(VecDeque::new()),
            inc: Mutex::new(None),
            committed: Mutex::new(committed),
            next_branch: AtomicU64::new(next_branch),
            durable: AtomicU64::new(durable_seq),
            queue_units: AtomicU64::new(0),
            pending_units: AtomicU64::new(0),
            root_blocked: AtomicBool::new(false),
            obligation: AtomicU64::new(0),
            awaiting: Mutex::new(VecDeque::new()),
            scan,
            committer: Committer::default(),
            counters: Counters::default(),
            #[cfg(test)]
            written: Mutex::new(Vec::new()),
        };
        index.rederive_tasks();
        WithCommitter::start("stbe-commit", index)
    }
}

impl Shared {
    /// The published version.
    pub fn version(&self) -> Arc<Version> {
        self.current.get()
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn rederive_tasks(&self) {
        let mut st = self.state.lock();
        let mut batches: BTreeMap<u64, edit::NewBatch> = BTreeMap::new();
        let mut leaves: Vec<(u64, Key)> = Vec::new();
        fn walk(
            n: &Node,
            batches: &mut BTreeMap<u64, edit::NewBatch>,
            leaves: &mut Vec<(u64, Key)>,
            l: &Limits,
        ) {
            for r in n.branches.iter().filter(|r| r.batch != 0) {
                let e = batches.entry(r.batch).or_insert_with(|| edit::NewBatch {
                    batch: r.batch,
                    height: n.height,
                    lo: n.lo.clone(),
                    hi: n.hi.clone(),
                    inputs: Vec::new(),
                });
                if n.lo < e.lo {
                    e.lo = n.lo.clone();
                }
                if e.hi.is_some() && (n.hi.is_none() || n.hi > e.hi) {
                    e.hi = n.hi.clone();
                }
                if !e.inputs.iter().any(|b| b.id == r.branch.id) {
                    e.inputs.push(r.branch.clone());
                }
            }
            // Leaves over a limit that only reading their branches would tell (size, dead
            // share) are handled when a flush or an install next reaches them; their slots
            // are known without I/O.
            if n.is_leaf() && n.leaf_slots() > l.leaf_branches {
                leaves.push((n.id, n.lo.clone()));
            }
            for c in &n.children {
                walk(&c.node, batches, leaves, l);
            }
        }
        let root = st.root.clone();
        walk(&root, &mut batches, &mut leaves, &self.limits);
        let fx = Effects {
            batches: batches.into_values().collect(),
            full: leaves,
            ..Effects::default()
        };
        self.apply_effects(&mut st, fx);
    }

    /// How a branch of about `units` is written: in chunks of a quarter of its size, at
    /// least 8 pages and at most `extent_pages`, so that small branches do not leave holes
    /// that full-size chunks cannot reuse.
    ///
    /// A merge's read-ahead windows share a budget of half a memtable (2 MiB at most, 64 KiB at
    /// least): compaction buffers scale with the memory the Db is given.
    fn build_options(&self, purpose: Purpose, units: u64) -> BuildOptions {
        let page = crate::storage::PAGE_SIZE as u64;
        let pages = units / page / 4;
        BuildOptions {
            remainder_bits: self.params.filter_remainder_bits,
            extent_pages: pages.clamp(8, u64::from(self.params.extent_pages).max(8)),
            purpose,
            readahead_pages: (self.limits.memtable_units / page / 2).clamp(16, 512),
        }
    }

    /// The build of piece `piece` of `mem` (the keys between the cuts around it).
    fn piece_build(&self, mem: &Arc<Memtable>, cuts: &[Key], piece: usize) -> Build {
        let lo = match piece.checked_sub(1).and_then(|i| cuts.get(i)) {
            Some(k) => Bound::Included(k.to_vec()),
            None => Bound::Unbounded,
        };
        let hi = match cuts.get(piece) {
            Some(k) => Bound::Excluded(k.to_vec()),
            None => Bound::Unbounded,
        };
        let input: EntryIter = Box::new(mem.iter(lo, hi, false));
        Build::new(
            self.ctx.store.clone(),
            input,
            self.ctx.snapshots.list(),
            false,
            self.ctx.merge_op.clone(),
            self.build_options(Purpose::Flush, mem.bytes()),
            None,
        )
    }

    fn new_branch(&self, run: crate::run::Run, sample: branch::Sample) -> Arc<Branch> {
        let id = self.next_branch.fetch_add(1, Ordering::Relaxed);
        Branch::new(id, run, sample, self.ctx.store.clone())
    }

    /// Runs `f` as one edit of a copy of the trunk, with the state's claims (kept whatever
    /// `f` does): returns what `f` returned, the edit's effects, and the edited root and ids,
    /// which the caller [adopts](Shared::adopt) or drops.
    fn edit<T>(
        &self,
        st: &mut State,
        f: impl FnOnce(&mut Editor, &mut Arc<Node>) -> T,
    ) -> (T, Effects, Arc<Node>, Ids) {
        let mut root = st.root.clone();
        let mut ids = st.ids;
        let mut claims = std::mem::take(&mut st.claims);
        let mut ed = Editor::new(&self.limits, &mut ids, &mut claims);
        let r = f(&mut ed, &mut root);
        let fx = std::mem::take(&mut ed.out);
        st.claims = claims;
        (r, fx, root, ids)
    }

    /// Makes an edit's root and ids the state's, turns its effects into tasks, and publishes.
    fn adopt(&self, st: &mut State, fx: Effects, root: Arc<Node>, ids: Ids) {
        st.ids = ids;
        st.root = root;
        self.apply_effects(st, fx);
        self.publish(st);
    }

    /// Publishes the state's trunk as the current version.
    fn publish(&self, st: &mut State) {
        st.gen += 1;
        let v = Arc::new(Version {
            root: st.root.clone(),
            incorporated: st.incorporated,
            ids: st.ids,
            gen: st.gen,
        });
        self.current.publish(&self.committer, |_| v);
    }

    /// Turns an edit's effects into tasks and counters.
    fn apply_effects(&self, st: &mut State, fx: Effects) {
        let c = &self.counters;
        c.flushes.fetch_add(fx.flushes, Ordering::Relaxed);
        c.trivial_flushes
            .fetch_add(fx.trivial_flushes, Ordering::Relaxed);
        c.splits.fetch_add(fx.splits, Ordering::Relaxed);
        c.root_splits.fetch_add(fx.root_splits, Ordering::Relaxed);
        c.merges.fetch_add(fx.merges_done, Ordering::Relaxed);
        c.units_moved.fetch_add(fx.moved_units, Ordering::Relaxed);
        let add = |st: &mut State, kind: TaskKind, units: u64| {
            let id = st.next_task;
            st.next_task += 1;
            st.tasks.insert(
                id,
                TaskEntry {
                    kind,
                    busy: false,
                    job: None,
                    units,
                    done: 0,
                },
            );
            self.pending_units.fetch_add(units, Ordering::Relaxed);
        };
        for b in fx.batches {
            let units = b
                .inputs
                .iter()
                .map(|x| x.units_between(&b.lo, b.hi.as_deref()))
                .sum();
            add(
                st,
                TaskKind::Batch {
                    batch: b.batch,
                    height: b.height,
                    lo: b.lo,
                    hi: b.hi,
                    inputs: b.inputs,
                },
                units,
            );
        }
        for (leaf, lo) in fx.full {
            if st.full_scheduled.insert(leaf) {
                let units = Editor::node_at(&st.root, 0, &lo).map_or(0, Node::units_estimate);
                add(st, TaskKind::Full { leaf, lo }, units);
            }
        }
        for (left, right, lo) in fx.merges {
            let units = Editor::node_at(&st.root, 1, &lo).map_or(0, |p| {
                p.children
                    .iter()
                    .filter(|c| c.node.id == left || c.node.id == right)
                    .map(|c| c.node.units_estimate())
                    .sum()
            });
            add(st, TaskKind::Merge { left, right, lo }, units);
        }
    }

    /// Removes a finished or abandoned task, returning its leftover units and claims.
    fn remove_task(&self, st: &mut State, id: u64) {
        if let Some(t) = st.tasks.remove(&id) {
            self.sub_pending(t.units.saturating_sub(t.done));
            match &t.kind {
                TaskKind::Batch { batch, .. } => {
                    st.running_batches.remove(batch);
                }
                TaskKind::Full { leaf, .. } => {
                    st.full_scheduled.remove(leaf);
                    st.claims.full.remove(leaf);
                }
                TaskKind::Merge { left, right, .. } => {
                    st.claims.frozen.remove(left);
                    st.claims.frozen.remove(right);
                }
            }
        }
    }

    // ------------------------------------------------------------------ incorporation

    /// One step of building the oldest queued memtable into a branch and, once built, adding
    /// it to the root (then the cascade and a commit). Returns the units of work done.
    fn step_incorporation(&self, budget: u64) -> Result<u64> {
        match self.inc.try_lock() {
            Some(guard) => self.step_incorporation_with(guard, budget),
            None => Ok(0),
        }
    }

    /// [`Shared::step_incorporation`], waiting for a thread that holds the build.
    fn step_incorporation_blocking(&self, budget: u64) -> Result<u64> {
        let guard = self.inc.lock();
        self.step_incorporation_with(guard, budget)
    }

    fn step_incorporation_with(
        &self,
        mut guard: parking_lot::MutexGuard<'_, Option<Incorporation>>,
        budget: u64,
    ) -> Result<u64> {
        if guard.is_none() {
            let Some(mem) = self.queue.lock().front().cloned() else {
                return Ok(0);
            };
            let cuts = runs::cuts(
                mem.key_seqs(),
                &runs::RunRules::for_memtable(self.limits.memtable_units),
            );
            *guard = Some(Incorporation {
                mem,
                cuts,
                piece: 0,
                build: None,
                branches: Vec::new(),
                built: false,
            });
        }
        let Some(inc) = guard.as_mut() else {
            return Ok(0);
        };
        let mut done = 0;
        while !inc.built && done < budget {
            let build = match &mut inc.build {
                Some(b) => b,
                None => inc
                    .build
                    .insert(self.piece_build(&inc.mem, &inc.cuts, inc.piece)),
            };
            // A failed step took entries from the memtable's iterator, and a failed finish
            // consumed the build: the incorporation starts again from the memtable rather than
            // go on without them (the Db is read-only after the error anyway, and the manifest
            // commits nothing once the page file's write failed).
            let (n, finished) = match build.step(budget - done) {
                Ok(r) => r,
                Err(e) => {
                    *guard = None;
                    return Err(e);
                }
            };
            done += n.max(1);
            self.sub_queue_units(n);
            if !finished {
                return Ok(done);
            }
            if let Some(b) = inc.build.take() {
                let t = std::time::Instant::now();
                let out = match b.finish() {
                    Ok(out) => out.map(|(run, sample)| self.new_branch(run, sample)),
                    Err(e) => {
                        *guard = None;
                        return Err(e);
                    }
                };
                note_max(&self.counters.max_finish_us, t);
                if let Some(b) = out {
                    let bytes = b.meta().pages() * crate::storage::PAGE_SIZE as u64;
                    self.counters
                        .bytes_incorporated
                        .fetch_add(bytes, Ordering::Relaxed);
                    #[cfg(test)]
                    self.written
                        .lock()
                        .push((Written::Incorporation, bytes, b.sample().clone()));
                    inc.branches.push(b);
                }
            }
            inc.piece += 1;
            inc.built = inc.piece > inc.cuts.len();
        }
        if !inc.built {
            return Ok(done);
        }
        let built = inc.branches.clone();
        {
            let mut st = self.state.lock();
            let t = std::time::Instant::now();
            let need = built.len();
            if need > 0 && !Editor::root_has_room(&st.root, &self.limits, need) {
                // Room comes when compactions below let the root flush.
                self.root_blocked.store(true, Ordering::Relaxed);
                let ((), fx, root, ids) = self.edit(&mut st, |ed, root| ed.settle_root(root, None));
                if fx.changed() {
                    self.adopt(&mut st, fx, root, ids);
                }
                if !Editor::root_has_room(&st.root, &self.limits, need) {
                    return Ok(done);
                }
            }
            self.root_blocked.store(false, Ordering::Relaxed);
            self.counters
                .pieces
                .fetch_add(need as u64, Ordering::Relaxed);
            let ((), fx, root, ids) = self.edit(&mut st, |ed, root| {
                if need > 0 {
                    ed.incorporate(root, built);
                } else {
                    ed.settle_root(root, None);
                }
            });
            st.incorporated = st.incorporated.max(inc.mem.max_seq());
            self.adopt(&mut st, fx, root, ids);
            note_max(&self.counters.max_edit_us, t);
        }
        // Still holding the build slot: a thread that takes it next must not find this
        // memtable at the front of the queue and build it again.
        let mem = inc.mem.clone();
        self.awaiting.lock().push_back(mem.max_seq());
        {
            let mut q = self.queue.lock();
            if q.front().is_some_and(|m| Arc::ptr_eq(m, &mem)) {
                q.pop_front();
            }
        }
        *guard = None;
        drop(guard);
        self.request_commit();
        self.counters.incorporations.fetch_add(1, Ordering::Relaxed);
        Ok(done.max(1))
    }

    fn sub_pending(&self, n: u64) {
        for a in [&self.pending_units, &self.obligation] {
            let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
        }
    }

    fn sub_queue_units(&self, n: u64) {
        let _ = self
            .queue_units
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }

    // ------------------------------------------------------------------ compaction tasks

    /// Whether an unstarted task can start now: `Some(false)` to skip it for now, `None` to
    /// drop it (its nodes are gone).
    fn runnable(&self, st: &State, kind: &TaskKind) -> Option<bool> {
        match kind {
            TaskKind::Batch {
                batch,
                height,
                lo,
                hi,
                ..
            } => {
                let holders = Editor::batch_holders(&st.root, *batch, *height, lo, hi.as_deref());
                if holders.is_empty() {
                    return None;
                }
                let claimed = holders.iter().any(|k| {
                    Editor::node_at(&st.root, *height, k).is_some_and(|n| st.claims.holds(n.id))
                });
                Some(!claimed)
            }
            TaskKind::Full { leaf, lo } => {
                let n = Editor::node_at(&st.root, 0, lo)?;
                if n.id != *leaf || st.claims.frozen.contains(leaf) {
                    return None;
                }
                Some(
                    !n.branches
                        .iter()
                        .any(|r| st.running_batches.contains(&r.batch)),
                )
            }
            TaskKind::Merge { left, right, lo } => {
                let p = Editor::node_at(&st.root, 1, lo)?;
                let a = p.children.iter().position(|c| c.node.id == *left)?;
                let b = p.children.get(a + 1).filter(|c| c.node.id == *right)?;
                let busy = p.children[a]
                    .node
                    .branches
                    .iter()
                    .chain(b.node.branches.iter())
                    .any(|r| st.running_batches.contains(&r.batch));
                Some(!busy)
            }
        }
    }

    /// Takes a snapshot of what a task compacts (under the edit lock) and claims what it
    /// needs. Returns the sources, the install record, bottom, and the probe's older branches.
    #[allow(clippy::type_complexity)]
    fn snapshot(
        &self,
        st: &mut State,
        kind: &TaskKind,
    ) -> Option<(Vec<Source>, Install, bool, Option<Vec<Arc<Branch>>>)> {
        match kind {
            TaskKind::Batch {
                batch,
                height,
                lo,
                hi,
                inputs,
            } => {
                let holders = Editor::batch_holders(&st.root, *batch, *height, lo, hi.as_deref());
                let mut ranges: KeyRanges = Vec::new();
                let mut held: HashSet<u64> = HashSet::new();
                let mut older: HashMap<u64, Arc<Branch>> = HashMap::new();
                for k in &holders {
                    let n = Editor::node_at(&st.root, *height, k)?;
                    let pos = n.batch_positions(*batch);
                    let first = *pos.first()?;
                    for &p in &pos {
                        held.insert(n.branches[p].branch.id);
                    }
                    if n.is_leaf() {
                        ranges.push((n.lo.clone(), n.hi.clone()));
                        for r in &n.branches[..first] {
                            older.entry(r.branch.id).or_insert_with(|| r.branch.clone());
                        }
                    } else {
                        let at = n.base + first as u64;
                        for i in 0..n.children.len() {
                            if n.children[i].start <= at {
                                let (clo, chi) = n.child_range(i);
                                ranges.push((Key::from(clo), chi.map(Key::from)));
                            }
                        }
                    }
                }
                let ranges = coalesce(ranges);
                let sources: Vec<Source> = inputs
                    .iter()
                    .filter(|b| held.contains(&b.id))
                    .map(|b| (b.clone(), ranges.clone()))
                    .collect();
                st.running_batches.insert(*batch);
                Some((
                    sources,
                    Install::Batch {
                        batch: *batch,
                        height: *height,
                        lo: lo.clone(),
                        hi: hi.clone(),
                        inputs: held,
                    },
                    false,
                    (*height == 0).then(|| older.into_values().collect()),
                ))
            }
            TaskKind::Full { leaf, lo } => {
                let n = Editor::node_at(&st.root, 0, lo)?;
                let range = vec![(n.lo.clone(), n.hi.clone())];
                let sources = n
                    .branches
                    .iter()
                    .map(|r| (r.branch.clone(), range.clone()))
                    .collect();
                let prefix = n.branches.iter().map(|r| r.branch.id).collect();
                st.claims.full.insert(*leaf);
                Some((
                    sources,
                    Install::Full {
                        leaf: *leaf,
                        lo: lo.clone(),
                        prefix,
                    },
                    true,
                    None,
                ))
            }
            TaskKind::Merge { left, right, lo } => {
                let p = Editor::node_at(&st.root, 1, lo)?;
                let a = p.children.iter().position(|c| c.node.id == *left)?;
                let (l, r) = (&p.children[a].node, &p.children.get(a + 1)?.node);
                let mut sources = Vec::new();
                for n in [l, r] {
                    let range = vec![(n.lo.clone(), n.hi.clone())];
                    for b in &n.branches {
                        sources.push((b.branch.clone(), range.clone()));
                    }
                }
                let ids = |n: &Node| n.branches.iter().map(|r| r.branch.id).collect();
                Some((
                    sources,
                    Install::Merge {
                        left: *left,
                        right: *right,
                        lo: lo.clone(),
                        left_refs: ids(l),
                        right_refs: ids(r),
                    },
                    true,
                    None,
                ))
            }
        }
    }

    /// Picks a task and runs one step of it: starts it if needed, merges up to `budget` units,
    /// and installs it when done. `None` when no task can run now.
    fn step_task(&self, budget: u64) -> Result<Option<u64>> {
        let (id, job) = {
            let mut st = self.state.lock();
            let started = st
                .tasks
                .iter()
                .find(|(_, t)| !t.busy && t.job.is_some())
                .map(|(&id, _)| id);
            let pick = match started {
                Some(id) => Some(id),
                None if st.open_jobs < MAX_OPEN_JOBS => {
                    let mut found = None;
                    let mut dead = Vec::new();
                    let ids: Vec<u64> = st
                        .tasks
                        .iter()
                        .filter(|(_, t)| !t.busy)
                        .map(|(&id, _)| id)
                        .collect();
                    for id in ids {
                        let kind = st.tasks[&id].kind.clone();
                        match self.runnable(&st, &kind) {
                            None => dead.push(id),
                            Some(true) => {
                                found = Some(id);
                                break;
                            }
                            Some(false) => {}
                        }
                    }
                    for id in dead {
                        self.remove_task(&mut st, id);
                        self.counters.skipped.fetch_add(1, Ordering::Relaxed);
                    }
                    found
                }
                None => None,
            };
            let Some(id) = pick else {
                return Ok(None);
            };
            let Some(t) = st.tasks.get_mut(&id) else {
                return Ok(None);
            };
            t.busy = true;
            let job = t.job.take();
            let kind = t.kind.clone();
            match job {
                Some(j) => (id, Ok(j)),
                None => match self.snapshot(&mut st, &kind) {
                    Some(snap) => {
                        st.open_jobs += 1;
                        (id, Err(snap))
                    }
                    None => {
                        self.remove_task(&mut st, id);
                        self.counters.skipped.fetch_add(1, Ordering::Relaxed);
                        return Ok(Some(1));
                    }
                },
            }
        };
        let mut job = match job {
            Ok(j) => j,
            Err((sources, install, bottom, older)) => {
                // Outside the lock: the snapshot list is taken after the inputs were fixed.
                let probe = older.map(Probe::new);
                let units: u64 = sources
                    .iter()
                    .map(|(b, rs)| {
                        rs.iter()
                            .map(|(lo, hi)| b.sample().between(lo, hi.as_deref()))
                            .sum::<u64>()
                    })
                    .sum();
                let build = Build::compaction(
                    self.ctx.store.clone(),
                    &sources,
                    self.ctx.snapshots.list(),
                    bottom,
                    self.ctx.merge_op.clone(),
                    self.build_options(Purpose::Merge, units),
                    probe,
                );
                match build {
                    Ok(build) => Box::new(Job { build, install }),
                    Err(e) => {
                        let mut st = self.state.lock();
                        st.open_jobs -= 1;
                        self.remove_task(&mut st, id);
                        return Err(e);
                    }
                }
            }
        };
        let before = job.build.consumed();
        let step = job.build.step(budget);
        let (n, finished) = match step {
            Ok(x) => x,
            Err(e) => {
                let mut st = self.state.lock();
                st.open_jobs -= 1;
                self.remove_task(&mut st, id);
                return Err(e);
            }
        };
        // Pending units count input still to merge (priming and finishing are not input).
        let merged = job.build.consumed() - before;
        self.sub_pending(merged);
        if !finished {
            let mut st = self.state.lock();
            if let Some(t) = st.tasks.get_mut(&id) {
                t.done += merged;
                t.job = Some(job);
                t.busy = false;
            }
            return Ok(Some(n.max(1)));
        }
        let Job { build, install } = *job;
        let share = build.dead_share();
        let t = std::time::Instant::now();
        let finish = build.finish();
        note_max(&self.counters.max_finish_us, t);
        let output = match finish {
            Ok(o) => o.map(|(run, sample)| self.new_branch(run, sample)),
            Err(e) => {
                let mut st = self.state.lock();
                st.open_jobs -= 1;
                self.remove_task(&mut st, id);
                return Err(e);
            }
        };
        let written = output
            .as_ref()
            .map_or(0, |b| b.meta().pages() * crate::storage::PAGE_SIZE as u64);
        #[cfg(test)]
        let record = output.as_ref().map(|b| {
            let w = match &install {
                Install::Batch { height, .. } => Written::Batch(*height),
                Install::Full { .. } => Written::Full,
                Install::Merge { .. } => Written::Merge,
            };
            (w, written, b.sample().clone())
        });
        let c = &self.counters;
        let by_kind = match &install {
            Install::Batch { height, .. } => {
                &c.bytes_compacted_at[(*height as usize).min(HEIGHTS - 1)]
            }
            Install::Full { .. } => &c.bytes_full_compacted,
            Install::Merge { .. } => &c.bytes_merged,
        };
        let mut st = self.state.lock();
        st.open_jobs -= 1;
        if let Some(t) = st.tasks.get_mut(&id) {
            t.done += merged;
        }
        self.remove_task(&mut st, id);
        let installed = self.install(&mut st, install, output, share);
        if installed {
            c.bytes_compacted.fetch_add(written, Ordering::Relaxed);
            by_kind.fetch_add(written, Ordering::Relaxed);
            #[cfg(test)]
            self.written.lock().extend(record);
        } else {
            self.counters.discarded.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(n.max(1)))
    }

    /// Installs a finished compaction, then settles the paths to where it went.
    fn install(
        &self,
        st: &mut State,
        install: Install,
        output: Option<Arc<Branch>>,
        share: f64,
    ) -> bool {
        let t = std::time::Instant::now();
        let (ok, fx, root, ids) = self.edit(st, |ed, root| {
            let (ok, focus, counter) = match install {
                Install::Batch {
                    batch,
                    height,
                    lo,
                    hi,
                    inputs,
                } => {
                    let keys = ed.install_batch(
                        root,
                        batch,
                        height,
                        &lo,
                        hi.as_deref(),
                        &inputs,
                        output,
                        share,
                    );
                    (!keys.is_empty(), keys, &self.counters.compactions)
                }
                Install::Full { leaf, lo, prefix } => {
                    let ok = Editor::install_full(root, leaf, &lo, &prefix, output);
                    ed.claims.full.remove(&leaf);
                    (ok, vec![lo], &self.counters.full_compactions)
                }
                Install::Merge {
                    left,
                    right,
                    lo,
                    left_refs,
                    right_refs,
                } => {
                    let ok =
                        ed.install_merge(root, left, right, &lo, &left_refs, &right_refs, output);
                    ed.claims.frozen.remove(&left);
                    ed.claims.frozen.remove(&right);
                    if ok {
                        ed.out.merges_done += 1;
                    }
                    (ok, vec![lo], &self.counters.merges)
                }
            };
            if ok {
                if !std::ptr::eq(counter, &self.counters.merges) {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                for k in &focus {
                    ed.settle_root(root, Some(k));
                }
            }
            ok
        });
        self.adopt(st, fx, root, ids);
        note_max(&self.counters.max_edit_us, t);
        ok
    }

    // ------------------------------------------------------------------ durability

    /// Commits the published version if it differs from the last committed one: syncs the
    /// data file, then one manifest commit of the whole trunk listing the extents of branches
    /// it added and freed. Branches the old commit held and the new one does not are released
    /// when their last reader lets go. Returns whether it committed.
    fn commit_published(&self) -> Result<bool> {
        let mut c = self.committed.lock();
        let t = std::time::Instant::now();
        let (v, generation) = self.current.published(&self.committer);
        if self.committer.is_committed(generation) {
            return Ok(false);
        }
        let now = branch_set(&v.root);
        let extents = |b: &Arc<Branch>| b.meta().extents.clone();
        let added: Vec<Extent> = now
            .iter()
            .filter(|(id, _)| !c.branches.contains_key(id))
            .flat_map(|(_, b)| extents(b))
            .collect();
        let freed: Vec<Extent> = c
            .branches
            .iter()
            .filter(|(id, _)| !now.contains_key(id))
            .flat_map(|(_, b)| extents(b))
            .collect();
        let commits = Commits::new(
            &self.ctx,
            &self.committer,
            &self.durable,
            &self.counters.commits,
            &self.counters.max_commit_us,
        );
        let commit = Commit {
            index_meta: meta::encode(&v.root, v.ids, self.next_branch.load(Ordering::Relaxed)),
            durable_seq: v.incorporated,
            added,
            freed,
        };
        commits.commit(commit, generation, DataSync::Always, t)?;
        c.branches = now;
        c._version = v.clone();
        Ok(true)
    }

    /// Asks the committer thread for a commit of the published version.
    fn request_commit(&self) {
        self.committer.request();
    }

    fn wait_commit_for(&self, limit: std::time::Duration) -> Result<()> {
        self.committer.wait_for(limit)
    }

    fn commit_error(&self) -> Result<()> {
        self.committer.error()
    }

    /// Units of compaction that may be pending before writers are asked to help.
    fn allowance(&self) -> u64 {
        self.limits.node_units
    }
}

impl Durable for Shared {
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

    /// Lets go of the memtables that are durable now.
    fn after_commit(&self) {
        let durable = self.durable.load(Ordering::Acquire);
        let mut a = self.awaiting.lock();
        while a.front().is_some_and(|&seq| seq <= durable) {
            a.pop_front();
        }
    }
}

impl Index for Stbe {
    fn wait_durable(&self, limit: std::time::Duration) -> Result<bool> {
        WithCommitter::wait_durable(self, limit)
    }

    fn absorb(&self, mem: Arc<Memtable>) -> Result<()> {
        self.counters.absorbs.fetch_add(1, Ordering::Relaxed);
        if mem.is_empty() {
            return Ok(());
        }
        let behind = self
            .pending_units
            .load(Ordering::Relaxed)
            .saturating_sub(self.allowance());
        // The whole backlog beyond the allowance is owed while the next memtable fills, fixed
        // now and paid in proportion to the room writers use (never all at once when the
        // memtable is full). Each memtable makes about one memtable of compaction per level it
        // descends, plus whole-leaf compactions: an obligation capped below that (it was two
        // memtables) let the backlog, and with it space and read amplification, grow without
        // bound whenever background threads fell behind (the conformance space test's file
        // passed 3 times its first size with some 40 memtables' worth pending after a flush).
        self.obligation.store(behind, Ordering::Relaxed);
        self.queue_units
            .fetch_add(mem.bytes().max(1), Ordering::Relaxed);
        self.queue.lock().push_back(mem);
        Ok(())
    }

    /// The queued memtables' units not yet built, plus the compaction obligation set when the
    /// last memtable was absorbed (the whole backlog beyond an allowance of one node's T1 worth,
    /// less what any thread compacted since), or, while the root is full, all pending
    /// compaction units (at most two memtables' worth at a time).
    fn debt(&self) -> u64 {
        self.debt_units()
    }

    fn background_work(&self) -> bool {
        let queued = !self.queue.lock().is_empty() || !self.awaiting.lock().is_empty();
        let tasks = !self.state.lock().tasks.is_empty();
        queued || tasks || self.scan.is_due() || self.dirty()
    }

    /// Builds queued memtables first (they are the debt), then steps compactions, up to
    /// `budget` units of input in all; commits when there was nothing else to do.
    fn work(&self, budget: u64) -> Result<u64> {
        let t = std::time::Instant::now();
        let r = self.work_inner(budget);
        note_max(&self.counters.max_work_us, t);
        r
    }

    fn durable_seq(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The published version's: an incorporation publishes the memtable's branches in the
    /// trunk, and only the memtable's last sequence number waits for the commit (`awaiting`).
    fn published_seq(&self) -> u64 {
        self.version().incorporated.max(self.durable_seq())
    }

    fn get(&self, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> Result<()> {
        read::get(&self.version(), key, seq, out)
    }

    fn iter(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> Result<Vec<EntryIter>> {
        Ok(vec![Box::new(read::StbeIter::new(
            self.version(),
            lo,
            hi,
            reverse,
            Some(self.scan.clone()),
        ))])
    }

    fn stats(&self) -> IndexStats {
        self.stats_inner()
    }

    fn check(&self) -> Result<u64> {
        check::check(&self.version(), &self.limits)
    }
}

impl Shared {
    /// [`Index::debt`].
    fn debt_units(&self) -> u64 {
        let queued = self.queue_units.load(Ordering::Relaxed);
        // Memtables awaiting their commit are no debt: the committer makes them durable
        // without the writers, and a writer's paced step must never wait for an fsync.
        let waiting = !self.queue.lock().is_empty();
        let queued = if queued == 0 && waiting { 1 } else { queued };
        let pending = self.pending_units.load(Ordering::Relaxed);
        let excess = self.obligation.load(Ordering::Relaxed).min(pending);

        // While the root is full the next memtable cannot go in: every compaction is due,
        // but the debt says at most two memtables' worth at a time, so that a writer's paced
        // credit stays a bounded number of steps.
        let blocking = if self.root_blocked.load(Ordering::Relaxed) {
            pending.clamp(1, self.limits.memtable_units.saturating_mul(2))
        } else {
            excess
        };
        queued.saturating_add(blocking)
    }

    /// Scan-driven compaction ([`scan`]): the paths of the leaves that scans made due are
    /// flushed down and their leaves scheduled for whole compaction (one edit; the compactions
    /// run as tasks).
    fn compact_scanned_paths(&self) {
        let due = self.scan.take_due();
        if due.is_empty() {
            return;
        }
        let c = &self.counters;
        let wholes = due.iter().filter(|d| d.whole).count() as u64;
        c.scan_wholes.fetch_add(wholes, Ordering::Relaxed);
        c.scan_flushes
            .fetch_add(due.len() as u64 - wholes, Ordering::Relaxed);
        let mut st = self.state.lock();
        let t = std::time::Instant::now();
        let ((), fx, root, ids) = self.edit(&mut st, |ed, root| {
            for d in &due {
                ed.compact_path(root, &d.lo, d.whole);
            }
        });
        if fx.changed() {
            c.scan_edits.fetch_add(1, Ordering::Relaxed);
            self.adopt(&mut st, fx, root, ids);
        } else if !fx.full.is_empty() {
            // Whole compactions of leaves with nothing above them: no new trunk to publish.
            c.scan_edits.fetch_add(1, Ordering::Relaxed);
            self.apply_effects(&mut st, fx);
        }
        note_max(&self.counters.max_edit_us, t);
    }

    /// [`Index::work`] without the timing.
    fn work_inner(&self, budget: u64) -> Result<u64> {
        self.commit_error()?;
        // A step smaller than this would cost more in setup than it does; the Db's own steps
        // are at least this large.
        let budget = budget.max(MIN_STEP_UNITS);
        self.compact_scanned_paths();
        let mut done = 0u64;
        while done < budget {
            let n = self.step_incorporation(budget - done)?;
            if n > 0 {
                done += n;
                continue;
            }
            match self.step_task(budget - done)? {
                Some(n) => done += n,
                None => break,
            }
        }
        if done > 0 {
            return Ok(done);
        }
        let queued = !self.queue.lock().is_empty();
        if queued {
            // Another thread is building the memtable that is the debt: wait for its step to
            // end and take a step too, rather than spin.
            let n = self.step_incorporation_blocking(budget)?;
            if n > 0 {
                return Ok(n);
            }
        }
        if !self.awaiting.lock().is_empty() || self.dirty() {
            // Nothing else to do: make the trunk durable (the committer does the I/O), and wait
            // for it at most a moment, debt or none: a writer whose debt ended just before its
            // call waited here for a whole commit. Progress all the same: never 0 while a
            // memtable awaits its commit, so a flush, a drain or a close calls again.
            self.request_commit();
            self.wait_commit_for(std::time::Duration::from_millis(1))?;
            return Ok(1);
        }
        if self.debt_units() > 0 {
            // The debt's work is in other threads' hands: let them run.
            std::thread::yield_now();
        }
        Ok(0)
    }

    fn stats_inner(&self) -> IndexStats {
        let v = self.version();
        let c = &self.counters;
        let mut s = check::shape(&v, &self.limits);
        s.absorbs = c.absorbs.load(Ordering::Relaxed);
        s.count([
            ("incorporations", &c.incorporations),
            ("flushes", &c.flushes),
            ("trivial_flushes", &c.trivial_flushes),
            ("compactions", &c.compactions),
            ("full_compactions", &c.full_compactions),
            ("splits", &c.splits),
            ("root_splits", &c.root_splits),
            ("merges", &c.merges),
            ("scan_flushes", &c.scan_flushes),
            ("scan_wholes", &c.scan_wholes),
            ("scan_edits", &c.scan_edits),
            ("skipped", &c.skipped),
            ("discarded", &c.discarded),
            ("commits", &c.commits),
            ("bytes_incorporated", &c.bytes_incorporated),
            ("bytes_compacted", &c.bytes_compacted),
            ("bytes_full_compacted", &c.bytes_full_compacted),
            ("bytes_merged", &c.bytes_merged),
            ("pieces", &c.pieces),
            ("units_moved", &c.units_moved),
            ("max_work_us", &c.max_work_us),
            ("max_commit_us", &c.max_commit_us),
            ("max_edit_us", &c.max_edit_us),
            ("max_finish_us", &c.max_finish_us),
        ]);
        for (h, a) in c.bytes_compacted_at.iter().enumerate() {
            let k = if h + 1 == HEIGHTS {
                format!("bytes_compacted_h{h}_up")
            } else {
                format!("bytes_compacted_h{h}")
            };
            s.counters.insert(k, a.load(Ordering::Relaxed));
        }
        let st = self.state.lock();
        s.counters
            .insert("pending_tasks".into(), st.tasks.len() as u64);
        s.counters.insert(
            "open_tasks".into(),
            st.tasks
                .values()
                .filter(|t| t.job.is_some() || t.busy)
                .count() as u64,
        );
        s.counters.insert("open_jobs".into(), st.open_jobs as u64);
        s.counters.insert(
            "claimed_leaves".into(),
            (st.claims.full.len() + st.claims.frozen.len()) as u64,
        );
        s.counters.insert(
            "pending_units".into(),
            self.pending_units.load(Ordering::Relaxed),
        );
        s
    }
}
