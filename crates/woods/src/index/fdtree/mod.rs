//! `fdtree`: the FD-tree of Li, He, Yang, Luo and Yi (PVLDB 2010), specs/fdtree.md.
//!
//! The head tree `L0` is the Db's memtables (its index entries) plus, in memory, one external
//! fence per page of `L1` ([`version::Version::head`]). Below it, the levels `L1..Ll` are runs
//! built with the substrate's [`RunBuilder`](crate::run::RunBuilder) in fenced mode: entries in
//! (key, class) order, an external fence per page of the next level (the first key of that page, the empty key for
//! page 0: the MIN fence), and an internal fence at slot 0 of every page that would start
//! with an entry, so that every page of a non-lowest level starts with a fence (Invariant 1).
//! The lowest level holds no fences. Capacities are `|L_i| = k^i·|L0|` items, fences counted;
//! `k` comes from the cost model ([`cost::choose_k`]) unless set, and is kept in the metadata.
//!
//! A point search ([`FdTree::get`]) reads one page per level: in each it finds the last item
//! with a key at or below the search key, collects that key's entries scanning backward, and
//! follows the first fence it meets to the next level. A key whose versions continue from the
//! previous page (header bit `CONT_PREV`, spec pitfall 3) is looked up in that level through the
//! run's own index instead. Deletes are woods' tombstones (the spec's filter entries): a merge
//! cancels the versions a tombstone hides unless a live snapshot needs them, and drops the
//! tombstone itself only in the lowest level. Merges: [`job`].
//!
//! Two ways to pay (the kind's `deamortized` parameter): plain, where the whole cascade is one
//! unit of work (the Db does not pace this kind: the insert that finds the head tree full
//! waits for the cascade, the paper's amortized tree), and de-amortized (spec §4.8 with
//! corrections 2 and 3), where the cascade, planned when the head tree is absorbed, is done in
//! steps of the budget the Db's debt pacing gives: the active memtable is the second head tree
//! `L'_0`, every entry put into it (deletes included) pays its share, the merge finishes before
//! `L'_0` fills, and `L'_0` never holds fences: the new head fences are installed with the new
//! levels in one version switch. No insert then does more than one step of merge work: about
//! `max(memtable_bytes / 256, 16 KiB)` of entries moved, written in requests of 16 pages
//! ([`Tree::chunk_pages`]) behind the step, two at most in flight, or finishes one run (its
//! last chunk): at most `step + 48 pages` written, plus the index pages and header
//! of a run when the step finishes one (tested by `deamortized_work_is_bounded_per_call`), or
//! opens one input level: its index path read and one 16-page request of its first pages
//! asked for, not waited for (`opening_a_cascade_reads_one_level_a_call`).
//!
//! A finished cascade is published at once (readers and the next cascade use it) and made
//! durable by the index's committer thread ([`super::committer`]: a data file sync, then one
//! manifest commit of whatever version is published then), as `nbtree` and `stbe` do, so that
//! no `work` call, and so no writer paying debt, ever syncs. Until a commit that no longer
//! names an extent is durable, the last committed version keeps it allocated.

pub mod check;
pub mod cost;
pub mod job;
pub mod version;

#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use self::job::{capacity, Job, Sizing, STEP_KINDS};
use self::version::{decode_meta, encode_meta, open_levels, Level, Version};
use super::committer::{
    extent_difference, Commits, Committer, DataSync, Durable, Versions, WithCommitter,
};
use super::{Epoch, Index, IndexContext, IndexStats};
use crate::entry::{Entry, Kind};
use crate::error::{Error, Result};
use crate::manifest::Commit;
use crate::memtable::Memtable;
use crate::merge::EntryIter;
use crate::options::FdTreeParams;
use crate::run::{RunIter, AUX_CONT_PREV};
use crate::storage::{Extent, PageFile, Purpose, PAGE_SIZE};

#[derive(Default)]
struct Counters {
    absorbs: AtomicU64,
    merges: AtomicU64,
    /// Cascades that ended at each level (index 0: L1).
    ended_at: Mutex<Vec<u64>>,
    levels_added: AtomicU64,
    entries_merged: AtomicU64,
    fallback_reads: AtomicU64,
    largest_step: AtomicU64,
    /// Bytes of the runs written for each level by the cascades (index 0: L1): where the
    /// write amplification comes from.
    level_bytes: Mutex<Vec<u64>>,
    /// Items (entries and fences) the cascades read and wrote, and the time spent in them:
    /// the measured cost of moving one item, which the cost model's device constants stand for.
    items_read: AtomicU64,
    items_written: AtomicU64,
    merge_micros: AtomicU64,
    /// The longest `work` call and the most bytes one wrote, by [`job::STEP_KINDS`].
    step_max_micros: [AtomicU64; 5],
    step_max_bytes: [AtomicU64; 5],
    /// The most work units a cascade did beyond its estimate (debt then reads 1 until it
    /// is published, and the Db's pacing no longer charges writers for what is left).
    estimate_overrun: AtomicU64,
    /// Commits the committer thread made, and the longest (data sync and manifest commit).
    commits: AtomicU64,
    commit_max_micros: AtomicU64,
    /// The longest a `work` call waited for the cascade's lock (a step in another thread),
    /// and the longest call that found no cascade and only asked for a commit.
    job_lock_wait_max_micros: AtomicU64,
    idle_call_max_micros: AtomicU64,
}

/// The last committed version and the extents its levels reach.
struct Committed {
    /// Held, so that what it reaches stays allocated.
    _version: Arc<Version>,
    extents: HashSet<Extent>,
}

/// The FD-tree's state, shared with the thread that commits it.
pub struct Tree {
    ctx: IndexContext,
    params: FdTreeParams,
    /// k and |L0| in items, as resolved when the tree was created.
    k: u64,
    l0: u64,
    current: Versions<Version>,
    /// The absorbed head tree waiting for its cascade.
    queued: Mutex<Option<Arc<Memtable>>>,
    /// The cascade under way (one at a time; held while a step runs).
    job: Mutex<Option<Job>>,
    /// Work units left: 0 when ready for the next memtable.
    debt: AtomicU64,
    /// What the last durable commit covers.
    durable: AtomicU64,
    /// The last committed version: it keeps every extent it reaches allocated, and through its
    /// epoch every extent retired since, until a newer commit is durable.
    committed: Mutex<Committed>,
    committer: Committer,
    counters: Counters,
}

/// The FD-tree index: [`Tree`] and the thread that makes its versions durable.
pub type FdTree = WithCommitter<Tree>;

impl FdTree {
    /// [`Index::work`]; without `wait`, `None` at once when another thread holds the job
    /// ([`Index::work_unless_busy`]).
    fn work_as(&self, budget: u64, wait: bool) -> Result<Option<u64>> {
        self.committer.error()?;
        let locking = std::time::Instant::now();
        let Some(mut slot) = crate::index::lock_job(&self.job, wait) else {
            return Ok(None);
        };
        let c = &self.counters;
        c.job_lock_wait_max_micros
            .fetch_max(locking.elapsed().as_micros() as u64, Ordering::Relaxed);
        if slot.is_none() && self.queued.lock().is_none() {
            drop(slot);
            let r = self.committer.idle_work();
            c.idle_call_max_micros
                .fetch_max(locking.elapsed().as_micros() as u64, Ordering::Relaxed);
            return r.map(Some);
        }
        let started = std::time::Instant::now();
        let wrote = self.merge_written();
        let r = self.run_job(&mut slot, budget);
        let micros = started.elapsed().as_micros() as u64;
        c.merge_micros.fetch_add(micros, Ordering::Relaxed);
        if r.is_err() {
            if let Some(job) = slot.take() {
                job.abort();
            }
        }
        crate::pause::point("fdtree.work.before_debt");
        self.refresh_debt(&slot);
        let (n, kind) = r?;
        c.largest_step.fetch_max(n, Ordering::Relaxed);
        c.step_max_micros[kind].fetch_max(micros, Ordering::Relaxed);
        let wrote = self.merge_written().saturating_sub(wrote);
        c.step_max_bytes[kind].fetch_max(wrote, Ordering::Relaxed);
        Ok(Some(n))
    }

    /// Opens the tree from its manifest metadata (empty: a new tree) and starts its committer.
    pub fn open(
        ctx: IndexContext,
        params: FdTreeParams,
        meta: &[u8],
        durable_seq: u64,
    ) -> Result<FdTree> {
        let epoch = Epoch::new(ctx.store.clone());
        let (k, l0, levels, head) = if meta.is_empty() {
            let l0 = match params.head_entries {
                0 => (ctx.memtable_bytes / cost::MEMTABLE_ENTRY_BYTES).max(16),
                n => n,
            };
            let k = match params.ratio {
                0 => {
                    let f = cost::fanout();
                    cost::choose_k(
                        &cost::Workload {
                            n: params.expected_entries,
                            l0,
                            f,
                            cache_entries: ctx.store.cache().stats().capacity_pages * f,
                            search_share: f64::from(params.search_percent) / 100.0,
                        },
                        &cost::Device::default(),
                    )
                    .k
                }
                r => u64::from(r),
            };
            (k, l0, Vec::new(), Some(Vec::new()))
        } else {
            let m = decode_meta(meta)?;
            (m.k, m.l0, open_levels(&ctx.store, m.levels), None)
        };
        let version = Arc::new(Version::new(levels, head, epoch, durable_seq));
        let tree = Tree {
            ctx,
            params,
            k,
            l0,
            current: Versions::new(version.clone()),
            queued: Mutex::new(None),
            job: Mutex::new(None),
            debt: AtomicU64::new(0),
            durable: AtomicU64::new(durable_seq),
            committed: Mutex::new(Committed {
                extents: extents_of(&version.levels),
                _version: version,
            }),
            committer: Committer::default(),
            counters: Counters::default(),
        };
        WithCommitter::start("fdtree-commit", tree)
    }
}

/// Every extent of every level.
fn extents_of(levels: &[Arc<Level>]) -> HashSet<Extent> {
    levels
        .iter()
        .flat_map(|l| l.extents().iter().copied())
        .collect()
}

impl Tree {
    /// k, the capacity ratio of adjacent levels.
    pub fn ratio(&self) -> u64 {
        self.k
    }

    /// |L0|, the head tree's capacity in entries.
    pub fn head_entries(&self) -> u64 {
        self.l0
    }

    /// Pages a merge writes in one request: 64 (256 KiB, near the paper's 512 KB unit) in
    /// plain mode; 16 (64 KiB) de-amortized, where a step must not write much more than its
    /// budget (the step's bound, [`FdTree`]'s doc).
    pub fn chunk_pages(&self) -> u64 {
        if self.params.deamortized {
            16
        } else {
            64
        }
    }

    /// Bytes the data file has written for merges (every index's merges: one per Db).
    fn merge_written(&self) -> u64 {
        self.ctx.store.counters().snapshot().written(Purpose::Merge)
    }

    /// The published version.
    pub fn version(&self) -> Arc<Version> {
        self.current.get()
    }

    /// The most work units one call of `work` has done so far.
    pub fn largest_step(&self) -> u64 {
        self.counters.largest_step.load(Ordering::Relaxed)
    }

    /// The debt: the cascade's units left (its commit is no debt: the committer thread makes
    /// a published cascade durable while the next head tree fills).
    ///
    /// Stored under the lock absorb queues under, so that a thread that finished a job cannot
    /// publish its 0 over the debt of a memtable queued meanwhile (the Db would then absorb
    /// another over it).
    fn refresh_debt(&self, job: &Option<Job>) {
        let queued = self.queued.lock();
        let d = match (job, &*queued) {
            (Some(j), _) => j.debt(),
            // Not started yet: the work its plan estimates.
            (None, Some(m)) => Job::estimate(m, &self.version(), self.k, self.l0).max(1),
            (None, None) => 0,
        };
        self.debt.store(d, Ordering::Release);
    }

    /// Runs the cascade: all of it in plain mode, about `budget` units de-amortized, where
    /// opening each input level and each step are separate calls (the step that builds the
    /// last level publishes the cascade). Returns the units done and which of [`STEP_KINDS`] the
    /// call was.
    fn run_job(&self, slot: &mut Option<Job>, budget: u64) -> Result<(u64, usize)> {
        let mut kind = slot.as_ref().map_or(0, Job::next_step_kind);
        if slot.is_none() {
            let Some(mem) = self.queued.lock().clone() else {
                return Ok((0, kind));
            };
            *slot = Some(Job::start(
                &self.ctx.store,
                mem,
                self.version(),
                Sizing {
                    k: self.k,
                    l0: self.l0,
                    chunk: self.chunk_pages(),
                },
                self.ctx.snapshots.list(),
                self.ctx.merge_op.clone(),
            )?);
        }
        let Some(job) = slot.as_mut() else {
            return Ok((0, kind));
        };
        let mut done = 0u64;
        if self.params.deamortized {
            if !job.ready() {
                done = job.step(budget.max(1))?.max(1);
            }
            if !job.ready() {
                return Ok((done, kind));
            }
        } else {
            // The whole cascade in this call.
            while !job.ready() {
                done = done.saturating_add(job.step(u64::MAX)?);
            }
            kind = 0;
        }
        if let Some(job) = slot.take() {
            done = done.saturating_add(1);
            self.counters
                .estimate_overrun
                .fetch_max(job.done.saturating_sub(job.total), Ordering::Relaxed);
            self.publish(job);
        }
        Ok((done.max(1), kind))
    }

    /// Publishes a finished cascade (readers and the next cascade see it at once) and asks the
    /// committer thread to make it durable. No I/O: the cascade's pages are written already.
    fn publish(&self, job: Job) {
        let base = job.base.clone();
        let target = job.target;
        let mut levels: Vec<Arc<Level>> = Vec::new();
        let head = if job.emptied() {
            Vec::new()
        } else {
            levels.extend(job.built.iter().rev().cloned());
            levels.extend(base.levels.iter().skip(target).cloned());
            job.pages.clone()
        };
        let retired: Vec<Extent> = base
            .levels
            .iter()
            .take(target)
            .flat_map(|l| l.extents().iter().copied())
            .collect();
        let seq = job.mem.max_seq().max(base.seq);
        let epoch = base.epoch.advance(retired);
        let c = &self.counters;
        c.merges.fetch_add(1, Ordering::Relaxed);
        {
            let mut ended = c.ended_at.lock();
            if ended.len() < target {
                ended.resize(target, 0);
            }
            ended[target - 1] += 1;
        }
        if target > base.levels.len() {
            c.levels_added.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut bytes = c.level_bytes.lock();
            if bytes.len() < target {
                bytes.resize(target, 0);
            }
            // `built` runs from L_target up to L1.
            for (n, l) in job.built.iter().enumerate() {
                let pages: u64 = l.extents().iter().map(|e| e.pages).sum();
                bytes[target - 1 - n] += pages * PAGE_SIZE as u64;
            }
        }
        let read: u64 = base.levels.iter().take(target).map(|l| l.items()).sum();
        c.items_read
            .fetch_add(read + job.mem.len() as u64, Ordering::Relaxed);
        c.items_written.fetch_add(
            job.built.iter().map(|l| l.items()).sum::<u64>(),
            Ordering::Relaxed,
        );
        c.entries_merged
            .fetch_add(job.mem.len() as u64, Ordering::Relaxed);
        let v = Arc::new(Version::new(levels, Some(head), epoch, seq));
        self.current.publish(&self.committer, |_| v);
        {
            let mut q = self.queued.lock();
            if q.as_ref().is_some_and(|m| Arc::ptr_eq(m, &job.mem)) {
                *q = None;
            }
        }
        self.committer.request();
    }

    /// Commits the published version if it is not the committed one (the committer thread):
    /// syncs the data file when the version has new levels, then one manifest commit of the
    /// levels, listing the extents they reach that the last commit did not (added) and the
    /// other way round (freed). Returns whether it committed.
    fn commit_published(&self) -> Result<bool> {
        let mut c = self.committed.lock();
        let t = std::time::Instant::now();
        let (v, generation) = self.current.published(&self.committer);
        if self.committer.is_committed(generation) {
            return Ok(false);
        }
        let now = extents_of(&v.levels);
        let (added, freed) = extent_difference(&c.extents, &now);
        let commits = Commits::new(
            &self.ctx,
            &self.committer,
            &self.durable,
            &self.counters.commits,
            &self.counters.commit_max_micros,
        );
        let commit = Commit {
            index_meta: encode_meta(self.k, self.l0, &v.levels),
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

    /// Appends the versions of `key` visible at `seq` found in level `i` of `v`, reading the
    /// page `pid` (one page; the run's index when the key continues from the page before);
    /// returns the page to read in the next level and whether the search is over.
    fn probe(
        &self,
        v: &Version,
        i: usize,
        pid: u64,
        key: &[u8],
        seq: u64,
        out: &mut Vec<Entry>,
    ) -> Result<(Option<u64>, bool)> {
        let level = &v.levels[i];
        let lowest = i + 1 == v.levels.len();
        let run = level.run()?;
        let node = run.data_page(pid)?;
        // Items at or before (key, 0) are those with a key at or below `key`.
        let mut j = node.upper_bound(key, 0)?;
        let mut group: Vec<usize> = Vec::new();
        let mut next = None;
        while j > 0 {
            j -= 1;
            let item = node.data(j)?;
            if let Some(f) = item.fence {
                next = Some(f.pid);
                break;
            }
            if item.key == key {
                group.push(j);
            } else if lowest {
                break;
            }
        }
        if !lowest && next.is_none() {
            return Err(Error::corruption(
                "fdtree",
                Some(pid),
                format!(
                    "L{}: page without a fence before the search position",
                    i + 1
                ),
            ));
        }
        // The first entry of the page is in the group and the page continues the key of the
        // page before: the group may start there.
        let continued = node.aux & AUX_CONT_PREV != 0 && {
            let first_entry =
                (0..node.count).find(|&s| node.data(s).is_ok_and(|d| d.fence.is_none()));
            first_entry.is_some_and(|s| group.contains(&s))
        };
        if continued {
            self.counters.fallback_reads.fetch_add(1, Ordering::Relaxed);
            let start = out.len();
            run.get(key, seq, out)?;
            let done = out.len() > start && out.last().is_some_and(|e| e.kind != Kind::Merge);
            return Ok((next, done));
        }
        for &s in group.iter().rev() {
            let item = node.data(s)?;
            if item.seq > seq {
                continue;
            }
            let e = run.item_entry(pid, &item, Purpose::UserRead)?;
            let stop = e.kind != Kind::Merge;
            out.push(e);
            if stop {
                return Ok((next, true));
            }
        }
        Ok((next, false))
    }
}

/// A level's iterator holding the version it reads (its pages stay allocated meanwhile).
struct Pinned {
    _v: Arc<Version>,
    it: RunIter,
}

impl Iterator for Pinned {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        self.it.next()
    }
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

impl Index for FdTree {
    fn wait_durable(&self, limit: std::time::Duration) -> Result<bool> {
        WithCommitter::wait_durable(self, limit)
    }

    fn absorb(&self, mem: Arc<Memtable>) -> Result<()> {
        self.counters.absorbs.fetch_add(1, Ordering::Relaxed);
        if mem.is_empty() {
            return Ok(());
        }
        {
            let mut queued = self.queued.lock();
            // The Db absorbs only at a debt of 0, which a queued memtable never leaves.
            if queued.is_some() {
                return Err(Error::corruption(
                    "fdtree absorb",
                    None,
                    "a memtable handed over while the last one still waits to be merged",
                ));
            }
            *queued = Some(mem);
        }
        self.refresh_debt(&None);
        Ok(())
    }

    fn debt(&self) -> u64 {
        self.debt.load(Ordering::Acquire)
    }

    fn work(&self, budget: u64) -> Result<u64> {
        Ok(self.work_as(budget, true)?.unwrap_or(0))
    }

    fn work_unless_busy(&self, budget: u64) -> Result<Option<u64>> {
        self.work_as(budget, false)
    }

    fn durable_seq(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The published version's: a merge's publication drops its memtable (`queued`, the job's).
    fn published_seq(&self) -> u64 {
        self.version().seq.max(self.durable_seq())
    }

    fn background_work(&self) -> bool {
        self.debt() > 0 || self.dirty() || self.committer.busy()
    }

    /// Spec §4.1: the head fence for `key`, then one page per level following fences, newest
    /// level first, until a Put or Delete.
    fn get(&self, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> Result<()> {
        let v = self.version();
        let Some(mut pid) = v.head_page(key)? else {
            return Ok(());
        };
        for i in 0..v.levels.len() {
            let (next, done) = self.probe(&v, i, pid, key, seq, out)?;
            if done {
                return Ok(());
            }
            match next {
                Some(p) => pid = p,
                None => break,
            }
        }
        Ok(())
    }

    /// One sorted source per level that holds entries, all from one version. Deviation: each
    /// level is positioned through its run's own index, not by the fence span of the level
    /// above (spec §4.2). A level of fences only (every level above the one a cascade ended at,
    /// until head-tree merges refill it) has nothing for a reader, and a scan of it would read
    /// it to its end looking for an entry: it gets no source.
    fn iter(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> Result<Vec<EntryIter>> {
        let v = self.version();
        let mut out: Vec<EntryIter> = Vec::with_capacity(v.levels.len());
        for l in v.levels.iter().filter(|l| l.entries() > 0) {
            out.push(Box::new(Pinned {
                _v: v.clone(),
                it: l
                    .run()?
                    .iter(lo.clone(), hi.clone(), reverse, Purpose::UserRead),
            }));
        }
        Ok(out)
    }

    fn stats(&self) -> IndexStats {
        let v = self.version();
        let c = &self.counters;
        let mut s = IndexStats::new(self.kind_name(), v.levels.len() as u64, &c.absorbs);
        s.count([
            ("merges", &c.merges),
            ("levels_added", &c.levels_added),
            ("entries_merged", &c.entries_merged),
            ("cont_prev_lookups", &c.fallback_reads),
            ("largest_step_units", &c.largest_step),
            ("merge_items_read", &c.items_read),
            ("merge_items_written", &c.items_written),
            ("merge_micros", &c.merge_micros),
            ("commits", &c.commits),
            ("commit_max_micros", &c.commit_max_micros),
            ("job_lock_wait_max_micros", &c.job_lock_wait_max_micros),
            ("idle_call_max_micros", &c.idle_call_max_micros),
        ]);
        for (i, n) in c.ended_at.lock().iter().enumerate() {
            s.counters
                .insert(format!("cascades_ending_at_L{}", i + 1), *n);
        }
        for (i, name) in STEP_KINDS.iter().enumerate() {
            let micros = c.step_max_micros[i].load(Ordering::Relaxed);
            let bytes = c.step_max_bytes[i].load(Ordering::Relaxed);
            s.counters
                .insert(format!("largest_step_micros_{name}"), micros);
            s.counters
                .insert(format!("largest_step_bytes_{name}"), bytes);
        }
        s.counters.insert(
            "largest_estimate_overrun_units".into(),
            c.estimate_overrun.load(Ordering::Relaxed),
        );
        for (i, n) in c.level_bytes.lock().iter().enumerate() {
            s.counters.insert(format!("bytes_written_L{}", i + 1), *n);
        }
        s.shape.push(format!(
            "k {} (|L_i| = k^i·|L0|), f {} entries of 16 bytes a page, {}",
            self.k,
            cost::fanout(),
            if self.params.deamortized {
                "de-amortized"
            } else {
                "plain"
            }
        ));
        s.shape.push(format!(
            "L0: head tree, capacity {} entries (the memtables) + {} fences into L1",
            self.l0,
            v.levels.first().map_or(0, |l| l.pages())
        ));
        for (i, l) in v.levels.iter().enumerate() {
            let lowest = i + 1 == v.levels.len();
            s.shape.push(format!(
                "L{}: {} items / capacity {}{} ({} entries, {} fences), {} pages",
                i + 1,
                l.items(),
                capacity(i + 1, self.k, self.l0),
                if lowest { " (lowest)" } else { "" },
                l.entries(),
                l.fences,
                l.pages()
            ));
            s.entries += l.entries();
        }
        s
    }

    fn check(&self) -> Result<u64> {
        check::check(&self.version(), self.k, self.l0)
    }
}

impl Tree {
    fn kind_name(&self) -> &'static str {
        if self.params.deamortized {
            "fdtree-d"
        } else {
            "fdtree"
        }
    }
}
