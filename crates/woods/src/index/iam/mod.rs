//! `lsa` and `iam`: the LSA-tree and the IAM-tree of IamDB (specs/lsa-iam-tree.md, with its
//! corrections), one implementation with two rules.
//!
//! Levels L1..Ln hold nodes with disjoint key ranges; a node is one append region of the data
//! file (an MSTable: data from the front, metadata from the back, a hole between) holding
//! sorted sequences newest first, each a run with its own bloom filter. The memtable is L0.
//! A full node is flushed into the nodes of the next level its range overlaps (§3.4): moved
//! down by metadata when it overlaps none, else its sequences are merged into one stream, cut
//! between the children (P4, P5), and each child's part is appended as a new sequence (LSA;
//! IAM's append levels), appended or merged by the k rule (IAM's mixed level `L_m`), or merged
//! into one sequence (IAM's merge levels); a full leaf is merged and cut into new leaves of
//! `C_t / leaf_split_div` (P13). A node with `2t` children is split instead (§3.6); a level
//! with more than `t^i` nodes combines one (§3.7); the leaf level grows a level below when it
//! holds `t^n` nodes. IAM chooses `m` and `k` at run time from the cache budget (§3.8).
//!
//! LSA is IAM with every level appending: the two kinds differ only in [`Mode`].
//!
//! Every step ends by publishing a new version (readers hold an `Arc<Version>`); the index's
//! committer thread ([`super::committer`]) makes whatever version is published durable, a data
//! file sync and then one manifest commit, so that no `work` call, and no writer paying debt,
//! syncs. Appends never write below a published cursor of a region (published cursors are at
//! or past committed ones), so old versions stay valid while work runs, and the last committed
//! version keeps every file and sequence it names allocated until a newer commit is durable.

pub mod iter;
mod job;
pub mod node;
pub mod policy;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use self::node::{decode_meta, encode_meta, MetaState, Node, NodeFile, Seq, Version};
use self::policy::Class;
use super::committer::{Commits, Committer, DataSync, Durable, Versions, WithCommitter};
use super::{Index, IndexContext, IndexStats};
use crate::entry::{Entry, Kind};
use crate::error::{Error, Result};
use crate::manifest::Commit;
use crate::memtable::Memtable;
use crate::merge::EntryIter;
use crate::options::IamParams;
use crate::run::{Region, Run, RunBuilder, RunOptions};
use crate::storage::{Extent, PageFile, Purpose, PAGE_SIZE};

/// Which rule the tree follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every level appends (the LSA-tree).
    Lsa,
    /// Append levels, the mixed level and merge levels (the IAM-tree).
    Iam,
}

/// A frozen memtable waiting for its flush, with its smallest and largest key and the work
/// its flush was estimated at when it was absorbed ([`IamTree::flush_estimate`]).
type Queued = (Arc<Memtable>, Vec<u8>, Vec<u8>, u64);

/// A node being written by [`Iam::write_nodes`]: its file, builder, first and last key, and
/// user bytes so far.
type Open = (Arc<NodeFile>, RunBuilder, Vec<u8>, Vec<u8>, u64);

/// Most levels whose written bytes are counted separately.
const MAX_LEVELS: usize = 16;

#[derive(Default)]
struct Counters {
    absorbs: AtomicU64,
    memtable_flushes: AtomicU64,
    flushes: AtomicU64,
    appends: AtomicU64,
    merges: AtomicU64,
    leaf_splits: AtomicU64,
    moves: AtomicU64,
    splits: AtomicU64,
    combines: AtomicU64,
    grows: AtomicU64,
    /// Commits the committer thread made, and the longest (data sync and manifest commit).
    commits: AtomicU64,
    commit_max_micros: AtomicU64,
    /// Times the debt of full internal nodes rose at a publication, by the step that
    /// published ([`RISE_CAUSES`]), and the largest rise: work that appeared after the
    /// memtable's pacing schedule started.
    debt_rises: [AtomicU64; 6],
    debt_rise_max: AtomicU64,
    /// The most work units a job did beyond the input bytes its debt counted (what `debt`
    /// did not show while the job ran: merged children, run finishing).
    job_units_beyond_input_max: AtomicU64,
    /// The longest a `work` call waited for the job's lock (a step in another thread), and
    /// the longest call that found nothing to do but ask for a commit.
    job_lock_wait_max_micros: AtomicU64,
    idle_call_max_micros: AtomicU64,
}

/// The steps whose publication may raise the debt, as [`Counters::debt_rises`] names them.
const RISE_CAUSES: [&str; 6] = ["mem", "flush", "split", "combine", "move", "grow"];

/// What published a version, for [`Counters::debt_rises`].
#[derive(Clone, Copy)]
enum Cause {
    Mem = 0,
    Flush = 1,
    Split = 2,
    Combine = 3,
    Move = 4,
    Grow = 5,
}

/// One step of work (§3.2), chosen from a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Idle,
    Grow,
    Combine { d: usize, i: usize },
    FlushMem,
    Flush { d: usize, i: usize },
    Split { d: usize, i: usize },
}

/// The LSA-tree's or IAM-tree's state, shared with the thread that commits it.
pub struct IamTree {
    ctx: IndexContext,
    params: IamParams,
    mode: Mode,
    /// `C_t`: node capacity in user bytes.
    node_bytes: u64,
    current: Versions<Version>,
    /// Every write up to this sequence number is in the published version (set with it, under
    /// `current`'s lock).
    published_seq: AtomicU64,
    /// The last committed version: it keeps every file and sequence it names allocated.
    committed: Mutex<Arc<Version>>,
    committer: Committer,
    /// Frozen memtables waiting to be flushed into L1, oldest first, with their key ranges.
    queue: Mutex<VecDeque<Queued>>,
    /// The step in progress (one at a time), advanced by `work` in bounded parts.
    job: Mutex<Option<job::Job>>,
    /// Whether a step is in progress (read by `debt` without the job's lock).
    job_active: AtomicBool,
    /// User bytes the step in progress has read of its input.
    job_read: Arc<AtomicU64>,
    /// The step in progress: its estimated work, the part of the queued and full-node
    /// estimates that stands for it, and the work units it has done (read by `debt`).
    job_est: AtomicU64,
    job_counted: AtomicU64,
    job_units: AtomicU64,
    /// Work units done since open (what `work` returned), and where the debt fixed at the
    /// last absorb runs out: `debt` never rises above `budget_end − units_done` while at most
    /// one memtable is queued, so the pacing schedule that starts at an absorb covers every
    /// unit the writers are asked for until the next one.
    units_done: AtomicU64,
    budget_end: AtomicU64,
    meta: Mutex<MetaState>,
    /// The (m, k) computed at the previous step: a new choice is adopted only when two
    /// consecutive evaluations agree (P11's hysteresis).
    pending_mk: Mutex<Option<(u32, u32)>>,
    durable: AtomicU64,
    /// [`IamTree::pending_bytes`] of the current version (computed when it is published, so
    /// that `debt`, which writers call, does not walk the nodes).
    full_debt: AtomicU64,
    counters: Counters,
    /// Bytes written into each level since open (index 0: L1).
    written: [AtomicU64; MAX_LEVELS],
    /// Of those, by the way the level's nodes took them: appended as a node's newest
    /// sequence, and written by a merge (a node's old sequences rewritten with the part of a
    /// flush); the bytes of the old sequences those merges read (what a merge rewrites beyond
    /// its part); and the parts a level took (appends and merges: one per child of a flush),
    /// by the level's class when it took them (append, mixed, merge: m moves with the data).
    appended: [AtomicU64; MAX_LEVELS],
    merged: [AtomicU64; MAX_LEVELS],
    merged_old: [AtomicU64; MAX_LEVELS],
    parts: [[AtomicU64; MAX_LEVELS]; 3],
}

/// The LSA-tree or IAM-tree index: [`IamTree`] and the thread that makes its versions durable.
pub type Iam = WithCommitter<IamTree>;

/// A node written by a step: its range, file and sequences (not yet committed).
struct Written {
    file: Arc<NodeFile>,
    region: Region,
    seq: Arc<Seq>,
    first: Vec<u8>,
    last: Vec<u8>,
}

/// What a step built before its commit: released if the step fails.
#[derive(Clone, Default)]
struct Built {
    files: Vec<Arc<NodeFile>>,
    seqs: Vec<Arc<Seq>>,
}

impl Built {
    fn abandon(&self) {
        for f in &self.files {
            f.mark_obsolete();
        }
        for s in &self.seqs {
            s.mark_obsolete();
        }
    }
}

impl Iam {
    /// Opens the tree from its manifest metadata (empty: a new tree) and starts its committer.
    pub fn open(
        ctx: IndexContext,
        params: IamParams,
        mode: Mode,
        meta: &[u8],
        durable_seq: u64,
    ) -> Result<Iam> {
        let (mut state, version) = if meta.is_empty() {
            (
                MetaState {
                    next_id: 1,
                    ..MetaState::default()
                },
                Version::default(),
            )
        } else {
            decode_meta(meta, &ctx.store)?
        };
        // `C_t` is the one the tree was created with (issue 19 item 2): a reopen with another
        // memtable size keeps it. Metadata of version 1 did not store it: it is taken from the
        // options at that open, as it was then, and stored from the next commit on.
        let node_bytes = match (state.node_bytes, params.node_bytes) {
            (0, 0) => ctx.memtable_bytes.max(16 << 10),
            (0, b) => b,
            (stored, _) => stored,
        };
        state.node_bytes = node_bytes;
        let version = Arc::new(version);
        let tree = IamTree {
            ctx,
            params,
            mode,
            node_bytes,
            current: Versions::new(version.clone()),
            published_seq: AtomicU64::new(durable_seq),
            committed: Mutex::new(version.clone()),
            committer: Committer::default(),
            queue: Mutex::new(VecDeque::new()),
            job: Mutex::new(None),
            job_active: AtomicBool::new(false),
            job_read: Arc::default(),
            job_est: AtomicU64::new(0),
            job_counted: AtomicU64::new(0),
            job_units: AtomicU64::new(0),
            units_done: AtomicU64::new(0),
            budget_end: AtomicU64::new(0),
            meta: Mutex::new(state),
            pending_mk: Mutex::new(None),
            durable: AtomicU64::new(durable_seq),
            full_debt: AtomicU64::new(0),
            counters: Counters::default(),
            written: Default::default(),
            appended: Default::default(),
            merged: Default::default(),
            merged_old: Default::default(),
            parts: Default::default(),
        };
        tree.full_debt
            .store(tree.pending_bytes(&version), Ordering::Relaxed);
        let name = match mode {
            Mode::Lsa => "lsa-commit",
            Mode::Iam => "iam-commit",
        };
        WithCommitter::start(name, tree)
    }
}

impl IamTree {
    fn version(&self) -> Arc<Version> {
        self.current.get()
    }

    fn name(&self) -> &'static str {
        match self.mode {
            Mode::Lsa => "lsa",
            Mode::Iam => "iam",
        }
    }

    fn t(&self) -> u64 {
        u64::from(self.params.fanout.max(2))
    }

    /// `t^i`, the node threshold of 1-based level `i` (saturating).
    fn threshold(&self, i: usize) -> u64 {
        self.t().checked_pow(i as u32).unwrap_or(u64::MAX)
    }

    fn is_full(&self, n: &Node) -> bool {
        n.data_bytes().saturating_mul(100)
            >= self
                .node_bytes
                .saturating_mul(u64::from(self.params.full_percent))
    }

    /// Leaf pieces after a merge of a full leaf: `C_t / leaf_split_div` (P1: default `C_t/5`
    /// at t = 10, the code's `C_t / ((t+1)/2)`).
    fn leaf_target(&self) -> u64 {
        let div = match self.params.leaf_split_div {
            0 => self.params.fanout.max(2).div_ceil(2),
            d => d,
        };
        (self.node_bytes / u64::from(div.max(1))).max(1)
    }

    /// The (m, k) in force: LSA has no mixed level; IAM before its first choice neither.
    fn mk(&self) -> (u32, u32) {
        let st = *self.meta.lock();
        match self.mode {
            Mode::Lsa => (u32::MAX, 1),
            Mode::Iam if st.m == 0 => (u32::MAX, 1),
            Mode::Iam => (st.m, st.k.max(1)),
        }
    }

    /// Re-evaluates m and k (§3.8) from the levels' data and the cache budget (half the
    /// cache, the spec's `M/2`); fixed overrides win.
    fn update_mk(&self, v: &Version) {
        if self.mode == Mode::Lsa {
            return;
        }
        let d: Vec<u64> = (0..v.levels.len()).map(|j| v.level_bytes(j)).collect();
        let cache = self.ctx.store.cache().stats().capacity_pages * PAGE_SIZE as u64;
        let (mut m, mut k) = policy::choose_mk(&d, cache / 2, self.params.fanout.max(2));
        if self.params.fixed_m != 0 {
            m = self.params.fixed_m;
        }
        if self.params.fixed_k != 0 {
            k = self.params.fixed_k;
        }
        let mut pending = self.pending_mk.lock();
        let mut st = self.meta.lock();
        let fixed = self.params.fixed_m != 0 && self.params.fixed_k != 0;
        if fixed || *pending == Some((m, k)) || st.m == 0 {
            st.m = m;
            st.k = k;
        }
        *pending = Some((m, k));
    }

    fn new_id(&self) -> u64 {
        let mut m = self.meta.lock();
        let id = m.next_id;
        m.next_id += 1;
        id
    }

    fn run_options(&self, purpose: Purpose) -> RunOptions {
        RunOptions {
            bloom_bits_per_key: self.params.bloom_bits_per_key,
            purpose,
            // Chunks no larger than a region, so that the pages that do not fit a region fit
            // the space freed regions leave.
            extent_pages: self.region_pages().clamp(8, 64),
        }
    }

    /// Pages of a new node's region: half of `C_t` (the paper's average node) with room for
    /// the page overhead and the metadata of a few sequences. A node that grows past it
    /// continues in allocated extents (P18 (a)); a region of the whole `C_t` left most of the
    /// data file's address space unwritten holes.
    fn region_pages(&self) -> u64 {
        (self.node_bytes / 2 + self.node_bytes / 8).div_ceil(PAGE_SIZE as u64) + 4
    }

    /// The most pages one `work(budget)` call writes (the [`job`] module's bound) when no
    /// entry is larger than `entry_bytes`: the data pages of `budget` user bytes (counted twice,
    /// for the items' own overhead, which for entries of 16 user bytes or more is less than
    /// their size) and of the entry that crosses it, two chunks builders hand to the device
    /// (a finishing node's last data chunk, the next node's first), and the tail of one node's
    /// run (filter pages for a node of `C_t` bytes of such entries, the index pages of one
    /// finish step, the header). The commit's manifest record is not counted (it is not in the
    /// data file).
    pub fn call_bound_pages(&self, budget: u64, entry_bytes: u64) -> u64 {
        let page = PAGE_SIZE as u64;
        let chunk = self.run_options(Purpose::Merge).extent_pages;
        let keys = self.node_bytes.saturating_mul(2) / 16 + 1;
        // A partition page per `keys_per_partition` keys, and the separators' page(s).
        let per = crate::filter::partitioned::keys_per_partition(self.params.bloom_bits_per_key);
        let filter = keys.div_ceil(per as u64) + 2;
        (budget.div_ceil(page) + entry_bytes.div_ceil(page)) * 2 + 2 * chunk + filter + 2
    }

    /// Adds `bytes` to level `d`'s slot of `counter`.
    fn count_level(counter: &[AtomicU64; MAX_LEVELS], d: usize, bytes: u64) {
        counter[d.min(MAX_LEVELS - 1)].fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts a part taken by level `d`, under the level's class now.
    fn count_part(&self, d: usize) {
        let class = match self.level_class(d) {
            Class::Append => 0,
            Class::Mixed => 1,
            Class::Merge => 2,
        };
        IamTree::count_level(&self.parts[class], d, 1);
    }

    // ---- choosing the next step ----

    /// The next step (§3.2 with P9): grow, combines top-down, the memtable flush once its L1
    /// children are not full, then full internal nodes deepest first (split at `2t`
    /// children).
    fn choose(&self, v: &Version) -> Step {
        let mem = self
            .queue
            .lock()
            .front()
            .map(|(_, lo, hi, _)| (lo.clone(), hi.clone()));
        let n = v.levels.len();
        if n == 0 {
            return if mem.is_some() {
                Step::FlushMem
            } else {
                Step::Idle
            };
        }
        if v.levels[n - 1].len() as u64 >= self.threshold(n) {
            return Step::Grow;
        }
        for d in 0..n - 1 {
            if v.levels[d].len() as u64 > self.threshold(d + 1) {
                if let Some(i) = self.combine_candidate(v, d) {
                    if self.children_ready(v, d, &v.levels[d][i]) {
                        return Step::Combine { d, i };
                    }
                }
            }
        }
        if let Some((lo, hi)) = mem {
            let ready = n == 1
                || v.levels[0][v.overlapping(0, &lo, &hi)]
                    .iter()
                    .all(|c| !self.is_full(c));
            if ready {
                return Step::FlushMem;
            }
        }
        for d in (0..n - 1).rev() {
            for (i, p) in v.levels[d].iter().enumerate() {
                if !self.is_full(p) {
                    continue;
                }
                let children = v.overlapping(d + 1, &p.lo, &p.hi).len() as u64;
                if children >= 2 * self.t() {
                    return Step::Split { d, i };
                }
                if self.children_ready(v, d, p) {
                    return Step::Flush { d, i };
                }
            }
        }
        Step::Idle
    }

    /// A flush of `p` (level `d`) may run: its children are leaves or none is full (§3.4
    /// precondition 2).
    fn children_ready(&self, v: &Version, d: usize, p: &Node) -> bool {
        d + 2 >= v.levels.len()
            || v.levels[d + 1][v.overlapping(d + 1, &p.lo, &p.hi)]
                .iter()
                .all(|c| !self.is_full(c))
    }

    fn combine_candidate(&self, v: &Version, d: usize) -> Option<usize> {
        let nodes = &v.levels[d];
        let n = nodes.len();
        let mut t_cn = Vec::with_capacity(n);
        let mut own = Vec::with_capacity(n);
        let mut bytes = Vec::with_capacity(n);
        for i in 0..n {
            let a = &nodes[i.saturating_sub(1)];
            let b = &nodes[(i + 1).min(n - 1)];
            t_cn.push(v.overlapping(d + 1, &a.lo, &b.hi).len());
            own.push(v.overlapping(d + 1, &nodes[i].lo, &nodes[i].hi).len());
            bytes.push(nodes[i].data_bytes());
        }
        policy::combine_candidate(&t_cn, &own, &bytes, self.params.fanout.max(2))
    }

    /// The estimated work of flushing every full internal node of `v`, in work units.
    fn pending_bytes(&self, v: &Version) -> u64 {
        let n = v.levels.len();
        let mut debt = 0u64;
        for (d, level) in v.levels.iter().enumerate().take(n.saturating_sub(1)) {
            for p in level {
                debt += self.node_estimate(v, d, p);
            }
        }
        debt
    }

    /// The estimated work of flushing node `p` of level `d` when it is full (0 otherwise).
    fn node_estimate(&self, v: &Version, d: usize, p: &Node) -> u64 {
        if !self.is_full(p) {
            return 0;
        }
        self.flush_estimate(v, d + 1, &p.lo, &p.hi, p.data_bytes())
    }

    /// The work units ([`job`]'s: entries moved into builders, by user bytes, and the steps
    /// that finish runs) of a flush of `input` bytes within `[lo, hi]` into level `d` of
    /// `v` (0-based; none: the input becomes new nodes): the input, the data of every child
    /// that merges rather than appends (it passes through the builders again), and the
    /// finishing of the outputs (filter keys at 8 units each, index pages, a page a node:
    /// at most half of what passed for entries of 16 user bytes or more, plus four pages a
    /// node). An upper bound for `debt`: before it, `debt` counted the input alone and showed
    /// 1 for the rest (up to 8.3 MB of units at 500k records, `docs/results/stalls/`).
    fn flush_estimate(&self, v: &Version, d: usize, lo: &[u8], hi: &[u8], input: u64) -> u64 {
        let (m, k) = self.mk();
        let mut merged = 0u64;
        let mut outs = 1u64;
        if let Some(level) = v.levels.get(d) {
            let leaf = d + 1 == v.levels.len();
            for c in &level[v.overlapping(d, lo, hi)] {
                outs += 1;
                let full_leaf = leaf && self.is_full(c);
                if policy::action(d + 1, m, k, c.seqs.len(), full_leaf) != policy::Action::Append {
                    merged += c.data_bytes();
                }
            }
        }
        let moved = input.saturating_add(merged);
        outs += moved / self.leaf_target();
        moved + moved / 2 + outs * 4 * PAGE_SIZE as u64
    }

    /// The work left, as the queue and the published version show it now: every queued
    /// memtable's flush, every full internal node's flush, and the rest of the step in
    /// progress (at least 1 while one is).
    fn real_debt(&self, queue: &VecDeque<Queued>) -> u64 {
        let q: u64 = queue.iter().map(|(_, _, _, e)| *e).sum();
        let all = q + self.full_debt.load(Ordering::Relaxed);
        if !self.job_active.load(Ordering::Acquire) {
            return all;
        }
        let left = self
            .job_est
            .load(Ordering::Relaxed)
            .saturating_sub(self.job_units.load(Ordering::Relaxed))
            .max(1);
        all.saturating_sub(self.job_counted.load(Ordering::Relaxed)) + left
    }

    /// Sets the estimate of the step just planned from `v` (and what the debt counted for it
    /// before).
    fn start_job_estimate(&self, v: &Version, step: Step) {
        let (est, counted) = match step {
            Step::FlushMem => match self.queue.lock().front() {
                Some((m, lo, hi, e)) => (self.flush_estimate(v, 0, lo, hi, m.bytes()), *e),
                None => (0, 0),
            },
            Step::Flush { d, i } | Step::Combine { d, i } => {
                let p = &v.levels[d][i];
                let est = self.flush_estimate(v, d + 1, &p.lo, &p.hi, p.data_bytes());
                (est, self.node_estimate(v, d, p))
            }
            Step::Split { d, i } => {
                let p = &v.levels[d][i];
                let b = p.data_bytes();
                (
                    b + b / 2 + 12 * PAGE_SIZE as u64,
                    self.node_estimate(v, d, p),
                )
            }
            Step::Idle | Step::Grow => (0, 0),
        };
        self.job_units.store(0, Ordering::Relaxed);
        self.job_est.store(est, Ordering::Relaxed);
        self.job_counted.store(counted, Ordering::Relaxed);
    }

    // ---- steps ----

    /// Advances the step in progress by about `budget` bytes, starting the next one when
    /// none is (one at a time); returns the bytes done, 0 when idle. A step that writes
    /// nothing (a move, an empty combine, a level's growth) is done at once.
    #[cfg(test)]
    fn step(&self, budget: u64) -> Result<u64> {
        Ok(self.step_unless_busy(budget, true)?.unwrap_or(0))
    }

    /// [`Index::work`]; without `wait`, `None` at once when another thread holds the job
    /// ([`Index::work_unless_busy`]).
    fn work_as(&self, budget: u64, wait: bool) -> Result<Option<u64>> {
        self.committer.error()?;
        let budget = budget.max(1);
        let mut done = 0u64;
        while done < budget {
            let n = match self.step_unless_busy(budget - done, wait)? {
                Some(n) => n,
                None if done == 0 => return Ok(None),
                None => break,
            };
            if n == 0 {
                break;
            }
            self.units_done.fetch_add(n, Ordering::Relaxed);
            done += n;
        }
        if done == 0 {
            let t = std::time::Instant::now();
            let r = self.committer.idle_work();
            if !matches!(r, Ok(0)) {
                self.counters
                    .idle_call_max_micros
                    .fetch_max(t.elapsed().as_micros() as u64, Ordering::Relaxed);
            }
            return r.map(Some);
        }
        Ok(Some(done))
    }

    /// [`Self::step`]; without `wait`, `None` at once when another thread holds the job.
    fn step_unless_busy(&self, budget: u64, wait: bool) -> Result<Option<u64>> {
        let locking = std::time::Instant::now();
        let Some(slot) = crate::index::lock_job(&self.job, wait) else {
            return Ok(None);
        };
        self.counters
            .job_lock_wait_max_micros
            .fetch_max(locking.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.step_holding(slot, budget).map(Some)
    }

    /// [`Self::step`] with the job's lock held.
    fn step_holding(
        &self,
        mut slot: parking_lot::MutexGuard<'_, Option<job::Job>>,
        budget: u64,
    ) -> Result<u64> {
        if slot.is_none() {
            let v = self.version();
            self.update_mk(&v);
            let step = self.choose(&v);
            let job = match step {
                Step::Idle => return Ok(0),
                Step::Grow => {
                    let mut next = (*v).clone();
                    next.levels.push(Vec::new());
                    self.publish(&v, next, None, &Built::default(), Cause::Grow);
                    self.counters.grows.fetch_add(1, Ordering::Relaxed);
                    return Ok(1);
                }
                Step::FlushMem => self.plan_mem(&v)?,
                Step::Flush { d, i } => self.plan_flush(&v, d, i, false)?,
                Step::Combine { d, i } => self.plan_flush(&v, d, i, true)?,
                Step::Split { d, i } => Some(self.plan_split(&v, d, i)?),
            };
            let Some(job) = job else {
                return match step {
                    Step::Flush { d, i } => self.flush_by_metadata(&v, d, i, false),
                    Step::Combine { d, i } => self.flush_by_metadata(&v, d, i, true),
                    _ => Ok(0),
                };
            };
            self.start_job_estimate(&v, step);
            self.job_active.store(true, Ordering::Release);
            *slot = Some(job);
        }
        let Some(job) = slot.as_mut() else {
            return Ok(0);
        };
        let r = self.advance(job, budget).and_then(|(done, complete)| {
            if !complete {
                return Ok(done);
            }
            match slot.take() {
                Some(job) => {
                    let input = self.job_read.load(Ordering::Relaxed);
                    self.counters
                        .job_units_beyond_input_max
                        .fetch_max(job.units.saturating_sub(input), Ordering::Relaxed);
                    let built = job.built.clone();
                    self.finish_job(job)
                        .inspect_err(|_| built.abandon())
                        .map(|_| done)
                }
                None => Ok(done),
            }
        });
        if r.is_err() {
            if let Some(job) = slot.take() {
                job.built.abandon();
            }
        }
        if slot.is_none() {
            self.job_active.store(false, Ordering::Release);
            self.job_read.store(0, Ordering::Relaxed);
        }
        r
    }

    /// Writes `input` into new nodes, unbounded (outside a job): one when `piece` is `None`,
    /// else a new node each time one holds `piece` user bytes, cut only between user keys
    /// (correction 5). Nothing comes back for an empty input.
    #[cfg(test)]
    fn write_nodes(
        &self,
        input: impl Iterator<Item = Result<Entry>>,
        piece: Option<u64>,
        purpose: Purpose,
        built: &mut Built,
    ) -> Result<Vec<Written>> {
        job::Writer::new(piece, purpose, None).write_all(self, input, built)
    }

    fn finish_written(
        &self,
        (file, b, first, last, _): Open,
        built: &mut Built,
    ) -> Result<Written> {
        let (run, region) = Run::from_builder_in_region(b)?;
        let region = region.ok_or_else(|| Error::InvalidOption("iam: region lost".into()))?;
        let seq = Seq::from_run(run, file.clone());
        built.seqs.push(seq.clone());
        Ok(Written {
            file,
            region,
            seq,
            first,
            last,
        })
    }

    /// A written node as a node of the tree, its range widened to `[lo, hi]`.
    fn node_of(&self, w: Written, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Node {
        let lo = match lo {
            Some(l) if l < w.first.as_slice() => l.to_vec(),
            _ => w.first,
        };
        let hi = match hi {
            Some(h) if h > w.last.as_slice() => h.to_vec(),
            _ => w.last,
        };
        Node {
            id: self.new_id(),
            lo,
            hi,
            region: Some(w.region),
            file: Some(w.file),
            seqs: vec![w.seq],
            bound: 1,
        }
    }

    /// A flush or combine of node `i` of level `d` that writes nothing: an empty node (a
    /// combine drops it) or one whose range overlaps no child, which moves down by metadata
    /// (correction 1) and stays behind as an empty node with its range (a combine removes it).
    fn flush_by_metadata(
        &self,
        v: &Arc<Version>,
        d: usize,
        i: usize,
        combine: bool,
    ) -> Result<u64> {
        let p = v.levels[d][i].clone();
        let mut next = (**v).clone();
        if !p.seqs.is_empty() {
            let at = next.overlapping(d + 1, &p.lo, &p.hi).start;
            let mut moved = (*p).clone();
            moved.bound = 0;
            next.levels[d + 1].insert(at, Arc::new(moved));
            self.counters.moves.fetch_add(1, Ordering::Relaxed);
        }
        if combine {
            next.levels[d].remove(i);
        } else {
            next.levels[d][i] = Arc::new(Node::empty(self.new_id(), p.lo.clone(), p.hi.clone()));
        }
        let cause = if combine { Cause::Combine } else { Cause::Move };
        self.publish(v, next, None, &Built::default(), cause);
        if combine {
            self.counters.combines.fetch_add(1, Ordering::Relaxed);
        }
        Ok(1)
    }

    /// Publishes `next` (readers and the next step see it at once; `durable_seq`: it holds
    /// every write up to there) and asks the committer thread to make it durable. Files and
    /// sequences `old` names and `next` does not are marked obsolete, released once no version
    /// holds them: the last committed version holds those a durable manifest still names.
    fn publish(
        &self,
        old: &Version,
        next: Version,
        durable_seq: Option<u64>,
        built: &Built,
        cause: Cause,
    ) {
        let (old_files, old_seqs) = gather(old);
        let (new_files, new_seqs) = gather(&next);
        let gone_files: Vec<&Arc<NodeFile>> = old_files
            .iter()
            .filter(|(p, _)| !new_files.contains_key(p))
            .map(|(_, f)| f)
            .collect();
        let gone_seqs: Vec<&Arc<Seq>> = old_seqs
            .iter()
            .filter(|(p, _)| !new_seqs.contains_key(p))
            .map(|(_, s)| s)
            .collect();
        // Built but not kept (a part that compacted away): released now.
        let unused = Built {
            files: built
                .files
                .iter()
                .filter(|f| !new_files.contains_key(&(Arc::as_ptr(f) as usize)))
                .cloned()
                .collect(),
            seqs: built
                .seqs
                .iter()
                .filter(|s| !new_seqs.contains_key(&(Arc::as_ptr(s) as usize)))
                .cloned()
                .collect(),
        };
        unused.abandon();
        let full = self.pending_bytes(&next);
        let before = self.full_debt.swap(full, Ordering::Relaxed);
        if full > before {
            let c = &self.counters;
            c.debt_rises[cause as usize].fetch_add(1, Ordering::Relaxed);
            c.debt_rise_max.fetch_max(full - before, Ordering::Relaxed);
        }
        self.current.publish(&self.committer, |_| {
            if let Some(seq) = durable_seq {
                self.published_seq.fetch_max(seq, Ordering::AcqRel);
            }
            Arc::new(next)
        });
        for f in gone_files {
            f.mark_obsolete();
        }
        for s in gone_seqs {
            s.mark_obsolete();
        }
        self.committer.request();
    }

    /// Commits the published version if it is not the committed one (the committer thread):
    /// syncs the data file (a new version may have appended to a region it already named),
    /// then one manifest commit listing the extents of files and sequences it names that the
    /// last commit did not (added) and the other way round (freed). Returns whether it
    /// committed.
    fn commit_published(&self) -> Result<bool> {
        let mut c = self.committed.lock();
        let t = std::time::Instant::now();
        let (v, generation, seq) = self.current.published_with(&self.committer, || {
            self.published_seq.load(Ordering::Acquire)
        });
        if self.committer.is_committed(generation) {
            return Ok(false);
        }
        let (old_files, old_seqs) = gather(&c);
        let (new_files, new_seqs) = gather(&v);
        let mut added: Vec<Extent> = Vec::new();
        let mut freed: Vec<Extent> = Vec::new();
        for (p, f) in &new_files {
            if !old_files.contains_key(p) {
                added.push(f.extent);
            }
        }
        for (p, s) in &new_seqs {
            if !old_seqs.contains_key(p) {
                added.extend(s.overflow());
            }
        }
        for (p, f) in &old_files {
            if !new_files.contains_key(p) {
                freed.push(f.extent);
            }
        }
        for (p, s) in &old_seqs {
            if !new_seqs.contains_key(p) {
                freed.extend(s.overflow());
            }
        }
        let state = *self.meta.lock();
        let commits = Commits::new(
            &self.ctx,
            &self.committer,
            &self.durable,
            &self.counters.commits,
            &self.counters.commit_max_micros,
        );
        let commit = Commit {
            index_meta: encode_meta(&v, &state),
            durable_seq: seq,
            added,
            freed,
        };
        commits.commit(commit, generation, DataSync::Always, t)?;
        *c = v;
        Ok(true)
    }

    /// Verifies one node: its sequences' runs, ranges and per-key order (newest sequence
    /// first, invariant 6), its region cursors and its sequence bound (correction 8).
    fn check_node(&self, d: usize, n: &Node) -> Result<u64> {
        let bad = |s: String| {
            Error::corruption(self.name(), None, format!("L{} node {}: {s}", d + 1, n.id))
        };
        if n.lo > n.hi {
            return Err(bad("range ends before it starts".into()));
        }
        if n.bound > 0 && n.seqs.len() > n.bound as usize {
            return Err(bad(format!(
                "{} sequences, bound {} since its last flush",
                n.seqs.len(),
                n.bound
            )));
        }
        let mut total = 0;
        let mut newest: HashMap<Vec<u8>, u64> = HashMap::new();
        for (j, s) in n.seqs.iter().enumerate() {
            let run = s.open()?;
            let got = run.check()?;
            total += got;
            let m = s.meta();
            if got > 0 && (m.min_key < n.lo || m.max_key > n.hi) {
                return Err(bad(format!(
                    "sequence {j} holds keys outside the node's range"
                )));
            }
            if let Some(r) = &n.region {
                for e in &m.extents {
                    let in_hole = r.front < r.back && e.start < r.back && e.end() > r.front;
                    if r.holds(e) && in_hole {
                        return Err(bad(format!("sequence {j} extent {e:?} lies in the hole")));
                    }
                }
            }
            let mut seen: HashMap<Vec<u8>, u64> = HashMap::new();
            for e in run.iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::Merge) {
                let e = e?;
                if let Some(&newer) = newest.get(&*e.key) {
                    if e.seq >= newer {
                        return Err(bad(format!(
                            "sequence {j} holds a version (seq {}) not older than a newer sequence's ({newer})",
                            e.seq
                        )));
                    }
                }
                let slot = seen.entry(e.key.to_vec()).or_insert(u64::MAX);
                *slot = (*slot).min(e.seq);
            }
            for (k, s) in seen {
                let slot = newest.entry(k).or_insert(u64::MAX);
                *slot = (*slot).min(s);
            }
        }
        Ok(total)
    }

    fn level_class(&self, d: usize) -> Class {
        let (m, _) = self.mk();
        policy::class_of(d + 1, m)
    }
}

/// The files and sequences a version names, by address.
type Named = (HashMap<usize, Arc<NodeFile>>, HashMap<usize, Arc<Seq>>);

fn gather(v: &Version) -> Named {
    let mut files: HashMap<usize, Arc<NodeFile>> = HashMap::new();
    let mut seqs: HashMap<usize, Arc<Seq>> = HashMap::new();
    for n in v.levels.iter().flatten() {
        if let Some(f) = &n.file {
            files.insert(Arc::as_ptr(f) as usize, f.clone());
        }
        for s in &n.seqs {
            seqs.insert(Arc::as_ptr(s) as usize, s.clone());
        }
    }
    (files, seqs)
}

impl Durable for IamTree {
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

impl Index for Iam {
    fn wait_durable(&self, limit: std::time::Duration) -> Result<bool> {
        WithCommitter::wait_durable(self, limit)
    }

    fn absorb(&self, mem: Arc<Memtable>) -> Result<()> {
        self.counters.absorbs.fetch_add(1, Ordering::Relaxed);
        if mem.is_empty() {
            return Ok(());
        }
        let mut it = mem.entries();
        let lo = it.next().map(|e| e.key.to_vec()).unwrap_or_default();
        let hi = it.last().map_or(lo.clone(), |e| e.key.to_vec());
        let est = self.flush_estimate(&self.version(), 0, &lo, &hi, mem.bytes());
        let mut q = self.queue.lock();
        q.push_back((mem, lo, hi, est));
        // The debt of the memtable that starts now: the work left, all of it known here.
        let budget = self.real_debt(&q);
        self.budget_end.store(
            self.units_done
                .load(Ordering::Relaxed)
                .saturating_add(budget),
            Ordering::Relaxed,
        );
        Ok(())
    }

    /// The work left ([`IamTree::real_debt`]: queued memtables' flushes, full internal nodes'
    /// flushes, the rest of the step in progress, each estimated with the children it
    /// merges), but never more than what is left of the debt fixed at the last absorb: work
    /// that appears while a memtable fills (a node a flush made full) is paid from the next
    /// memtable's debt, so the debt never rises above its schedule. Before, it rose 50 times
    /// in a 500k-record load and writers found up to 679 KB of it at the rotation
    /// (`docs/results/stalls/`). With two memtables queued (the work fell a memtable behind)
    /// it is the whole work left, so that no third one is absorbed.
    fn debt(&self) -> u64 {
        let q = self.queue.lock();
        let real = self.real_debt(&q);
        if q.len() >= 2 {
            return real;
        }
        let left = self
            .budget_end
            .load(Ordering::Relaxed)
            .saturating_sub(self.units_done.load(Ordering::Relaxed));
        real.min(left)
    }

    fn background_work(&self) -> bool {
        self.debt() > 0
            || self.choose(&self.version()) != Step::Idle
            || self.dirty()
            || self.committer.busy()
    }

    /// Advances steps until about `budget` bytes were done or nothing is left. A step is
    /// resumable ([`job`]): a call does a bounded part of it, so no caller waits for a whole
    /// flush, split or combine.
    fn work(&self, budget: u64) -> Result<u64> {
        Ok(self.work_as(budget, true)?.unwrap_or(0))
    }

    fn work_unless_busy(&self, budget: u64) -> Result<Option<u64>> {
        self.work_as(budget, false)
    }

    fn durable_seq(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The published version's, read under its lock (set there with it): a memtable's flush
    /// drops the memtable from the queue when it publishes.
    fn published_seq(&self) -> u64 {
        let (_, _, seq) = self.current.published_with(&self.committer, || {
            self.published_seq.load(Ordering::Acquire)
        });
        seq.max(self.durable_seq())
    }

    fn get(&self, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> Result<()> {
        let v = self.version();
        let start = out.len();
        let hash = crate::filter::hash64(key);
        for level in &v.levels {
            let i = level.partition_point(|n| n.hi.as_slice() < key);
            let Some(n) = level.get(i) else { continue };
            if n.lo.as_slice() > key {
                continue;
            }
            // Newest sequence first, each behind its filter (§3.9).
            for s in &n.seqs {
                s.open()?.get_hashed(key, hash, seq, out)?;
                if out.len() > start && out.last().is_some_and(|e| e.kind != Kind::Merge) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn iter(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> Result<Vec<EntryIter>> {
        let v = self.version();
        let mut out: Vec<EntryIter> = Vec::new();
        for level in 0..v.levels.len() {
            out.extend(iter::level(
                v.clone(),
                level,
                lo.clone(),
                hi.clone(),
                reverse,
                Purpose::UserRead,
            ));
        }
        Ok(out)
    }

    fn stats(&self) -> IndexStats {
        let v = self.version();
        let c = &self.counters;
        let mut s = IndexStats::new(self.name(), v.levels.len() as u64, &c.absorbs);
        s.count([
            ("memtable_flushes", &c.memtable_flushes),
            ("flushes", &c.flushes),
            ("appends", &c.appends),
            ("merges", &c.merges),
            ("leaf_splits", &c.leaf_splits),
            ("moves", &c.moves),
            ("splits", &c.splits),
            ("combines", &c.combines),
            ("grows", &c.grows),
            ("commits", &c.commits),
            ("commit_max_micros", &c.commit_max_micros),
            ("debt_rise_max", &c.debt_rise_max),
            ("job_units_beyond_input_max", &c.job_units_beyond_input_max),
            ("job_lock_wait_max_micros", &c.job_lock_wait_max_micros),
            ("idle_call_max_micros", &c.idle_call_max_micros),
        ]);
        for (name, n) in RISE_CAUSES.iter().zip(&c.debt_rises) {
            s.counters
                .insert(format!("debt_rises_{name}"), n.load(Ordering::Relaxed));
        }
        let (m, k) = self.mk();
        let n = v.levels.len();
        if self.mode == Mode::Iam {
            let shown = if m as usize > n { 0 } else { m };
            s.counters.insert("m".into(), u64::from(shown));
            s.counters.insert("k".into(), u64::from(k));
            s.shape.push(if shown == 0 {
                format!("m none (no mixed level: every level appends), k {k}")
            } else {
                format!("m {m} (mixed level L{m}), k {k}")
            });
        } else {
            s.shape.push("m none (LSA: every level appends)".into());
        }
        s.shape.push(format!(
            "C_t {} bytes, t {}, leaf pieces {} bytes",
            self.node_bytes,
            self.t(),
            self.leaf_target()
        ));
        for (d, level) in v.levels.iter().enumerate() {
            let seqs: Vec<usize> = level.iter().map(|n| n.seqs.len()).collect();
            let empty = seqs.iter().filter(|&&x| x == 0).count();
            let total: usize = seqs.iter().sum();
            let max = seqs.iter().copied().max().unwrap_or(0);
            let avg = if level.is_empty() {
                0.0
            } else {
                total as f64 / level.len() as f64
            };
            let bytes: u64 = level.iter().map(|n| n.disk_bytes()).sum();
            let slot = d.min(MAX_LEVELS - 1);
            let written = self.written[slot].load(Ordering::Relaxed);
            // Also a counter, so that the bench's JSON has per-level write amplification.
            s.counters.insert(format!("written_l{}", d + 1), written);
            for (name, c) in [
                ("appended", &self.appended),
                ("merged", &self.merged),
                ("merged_old", &self.merged_old),
                ("parts_append", &self.parts[0]),
                ("parts_mixed", &self.parts[1]),
                ("parts_merge", &self.parts[2]),
            ] {
                s.counters.insert(
                    format!("{name}_l{}", d + 1),
                    c[slot].load(Ordering::Relaxed),
                );
            }
            let role = if d + 1 == n { ", leaf" } else { "" };
            s.shape.push(format!(
                "L{}: {} nodes ({empty} empty, threshold {}), sequences per node {avg:.1} (max {max}), {bytes} bytes, class {}{role}, written {written} bytes since open",
                d + 1,
                level.len(),
                self.threshold(d + 1),
                self.level_class(d).name(),
            ));
        }
        s.counters.insert(
            "nodes".into(),
            v.levels.iter().map(|l| l.len() as u64).sum(),
        );
        for n in v.levels.iter().flatten() {
            for q in &n.seqs {
                s.entries += q.meta().entries;
                s.filter_bytes += q.meta().filter_pages * PAGE_SIZE as u64;
            }
        }
        s
    }

    fn check(&self) -> Result<u64> {
        let v = self.version();
        let bad = |d: String| Error::corruption(self.name(), None, d);
        let mut total = 0;
        let mut extents: Vec<Extent> = Vec::new();
        let mut files: HashSet<usize> = HashSet::new();
        for (d, level) in v.levels.iter().enumerate() {
            for (i, n) in level.iter().enumerate() {
                if i > 0 && level[i - 1].hi >= n.lo {
                    return Err(bad(format!(
                        "L{}: nodes {} and {} overlap or are out of order",
                        d + 1,
                        level[i - 1].id,
                        n.id
                    )));
                }
                total += self.check_node(d, n)?;
                if let Some(f) = &n.file {
                    if !files.insert(Arc::as_ptr(f) as usize) {
                        return Err(bad(format!("node {}'s file is named twice", n.id)));
                    }
                    extents.push(f.extent);
                }
                for s in &n.seqs {
                    extents.extend(s.overflow());
                }
            }
        }
        extents.sort();
        for w in extents.windows(2) {
            if w[0].end() > w[1].start {
                return Err(bad(format!("extents {:?} and {:?} overlap", w[0], w[1])));
            }
        }
        Ok(total)
    }
}
