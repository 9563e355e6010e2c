//! `boa`: the refined bundle of arrays (specs/hashing-aging-insert-buffers.md §1.4–§1.5,
//! §1.11, with its corrections), an external-memory hash index for point operations.
//!
//! Keys are hashed with a seeded 128-bit hash to a fingerprint ([`hash`]). Levels 1, 2, ...
//! each hold at most λ − 1 runs; a run is a substrate run ([`crate::run`]) whose keys are the
//! fingerprint's high half (big-endian) followed by the user key, so it is sorted by
//! fingerprint and its index pages are the bucket offset index of Lemma 3's notes: a probe
//! reads one data page once the (cached) index pages are in memory. Every level has one
//! refined routing filter ([`filter`]) that names, for a key's prefix and check character,
//! the runs of the level that may hold it. Filters are read at open and kept in memory,
//! charged to the cache's budget.
//!
//! A frozen memtable, sorted by fingerprint, becomes the newest run of level 1; when level 1
//! is full the chain of full levels is merged bottom up, each level's λ − 1 runs into one run
//! of the next ([`policy`]). Flushes and merges are [`job::Job`]s done in bounded `work` steps,
//! and the merges a full level 1 needs are debt, so writers are paced while they run rather
//! than waiting for a whole merge. A lookup goes level by level, newest first, and within a
//! level through the runs its filter names, newest first; it stops at the first Put or
//! Delete (correction 2: a run holds one version per key and snapshot stripe, and runs are
//! visited in decreasing index) and collects Merge operands until then.
//!
//! Point-only: [`Index::iter`] returns [`Error::Unsupported`].

pub mod filter;
pub mod hash;
pub mod job;
pub mod policy;
pub mod version;

#[cfg(test)]
mod tests;

use std::collections::{HashSet, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use self::filter::Routed;
use self::hash::{run_key, split_run_key, Fingerprint};
use self::job::{Job, Setup};
use self::policy::{choose, full_chain, Choice};
use self::version::{encode_meta, Level, MetaState, Version};
use super::committer::{
    extent_difference, Commits, Committer, DataSync, Durable, Versions, WithCommitter,
};
use super::{Index, IndexContext, IndexStats};
use crate::entry::{Entry, Kind};
use crate::error::{Error, Result};
use crate::index::lsm::version::Table;
use crate::manifest::Commit;
use crate::memtable::Memtable;
use crate::merge::EntryIter;
use crate::options::BoaParams;
use crate::run::Run;
use crate::storage::{Extent, PageFile, Purpose, PAGE_SIZE};

#[derive(Default)]
struct Counters {
    absorbs: AtomicU64,
    flushes: AtomicU64,
    merges: AtomicU64,
    bytes_flushed: AtomicU64,
    bytes_merged: AtomicU64,
    filter_bytes_written: AtomicU64,
    lookups: AtomicU64,
    probes: AtomicU64,
    empty_probes: AtomicU64,
    prefix_matches: AtomicU64,
    commits: AtomicU64,
    commit_max_micros: AtomicU64,
}

/// The BOA's state, shared with the thread that commits it.
pub struct Tree {
    ctx: IndexContext,
    params: BoaParams,
    current: Versions<Version>,
    /// Frozen memtables waiting to become level-1 runs, oldest first.
    queue: Mutex<VecDeque<Arc<Memtable>>>,
    /// The flush or merge in progress; one at a time.
    job: Mutex<Option<Job>>,
    /// Units the job in progress has done (read by `debt` without the job's lock).
    progress: AtomicU64,
    meta: Mutex<MetaState>,
    /// The fingerprint seed (`meta.seed`, which never changes after open): read by every
    /// lookup without the lock.
    seed: u64,
    /// What the last durable commit covers.
    durable: AtomicU64,
    /// The last committed version and the extents it names: its runs stay allocated until a
    /// newer commit is durable.
    committed: Mutex<Committed>,
    /// Filter extents replaced in memory, released once a durable commit no longer names them
    /// (filters are read only at open, so no reader holds them).
    retired_filters: Mutex<Vec<Extent>>,
    committer: Committer,
    counters: Counters,
}

struct Committed {
    /// Held, so that what it reaches stays allocated.
    _version: Arc<Version>,
    extents: HashSet<Extent>,
}

/// The BOA index: [`Tree`] and the thread that makes its versions durable.
pub type Boa = WithCommitter<Tree>;

/// Every extent a version names: its runs' and its filters'.
fn extents_of(v: &Version) -> HashSet<Extent> {
    let mut out = HashSet::new();
    for l in &v.levels {
        for t in &l.runs {
            out.extend(t.meta().extents.iter().copied());
        }
        out.extend(l.filter_at.map(|(e, _)| e));
    }
    out
}

/// A seed for a new database's fingerprints: the clock and the process, mixed.
fn new_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    crate::filter::hash64_seeded(t, &std::process::id().to_le_bytes())
}

impl Boa {
    /// Opens the index from its manifest metadata (empty: a new index, with a new seed).
    pub fn open(
        ctx: IndexContext,
        params: BoaParams,
        meta: &[u8],
        durable_seq: u64,
    ) -> Result<Boa> {
        let max_runs = params.lambda as usize - 1;
        let (state, mut version) = if meta.is_empty() {
            (
                MetaState {
                    seed: new_seed(),
                    next_id: 1,
                },
                Version::default(),
            )
        } else {
            version::decode_meta(&ctx.store, meta, max_runs)?
        };
        version.seq = durable_seq;
        let tree = Tree {
            seed: state.seed,
            ctx,
            params,
            current: Versions::new(Arc::new(Version::default())),
            queue: Mutex::new(VecDeque::new()),
            job: Mutex::new(None),
            progress: AtomicU64::new(0),
            meta: Mutex::new(state),
            durable: AtomicU64::new(durable_seq),
            committed: Mutex::new(Committed {
                _version: Arc::new(Version::default()),
                extents: HashSet::new(),
            }),
            retired_filters: Mutex::new(Vec::new()),
            committer: Committer::default(),
            counters: Counters::default(),
        };
        tree.publish(version);
        // What the manifest holds: committed.
        let (v, generation) = tree.current.published(&tree.committer);
        tree.committer.mark_committed(generation);
        *tree.committed.lock() = Committed {
            extents: extents_of(&v),
            _version: v,
        };
        WithCommitter::start("boa-commit", tree)
    }
}

impl Tree {
    fn version(&self) -> Arc<Version> {
        self.current.get()
    }

    fn max_runs(&self) -> usize {
        self.params.lambda as usize - 1
    }

    fn run_bits(&self) -> u32 {
        self.params.lambda.trailing_zeros()
    }

    /// Makes `v` current (its filters are charged to the cache while they live, whichever
    /// version holds them).
    fn publish(&self, v: Version) {
        self.current.publish(&self.committer, |_| Arc::new(v));
    }

    fn setup(&self) -> Setup<'_> {
        Setup {
            store: &self.ctx.store,
            seed: self.seed,
            check_bits: self.params.check_bits,
            run_bits: self.run_bits(),
            extent_pages: u64::from(self.params.extent_pages),
            snapshots: self.ctx.snapshots.list(),
            merge_op: self.ctx.merge_op.clone(),
        }
    }

    /// The next job the policy chooses, if any.
    fn start_job(&self) -> Result<Option<Job>> {
        let v = self.version();
        let queued = self.queue.lock().front().cloned();
        let empty = Level::default();
        match choose(&v.run_counts(), self.max_runs(), queued.is_some()) {
            Choice::DoNothing => Ok(None),
            Choice::Flush => {
                let Some(mem) = queued else { return Ok(None) };
                let level = v.levels.first().unwrap_or(&empty);
                let bottom = v.empty_from(0);
                Ok(Some(Job::flush(&self.setup(), mem, level, bottom)?))
            }
            Choice::Merge { level } => {
                let inputs = v.levels.get(level).map_or(Vec::new(), |l| l.runs.clone());
                let next = v.levels.get(level + 1).unwrap_or(&empty);
                let bottom = v.empty_from(level + 1);
                Ok(Some(Job::merge(
                    &self.setup(),
                    level,
                    inputs,
                    next,
                    bottom,
                )?))
            }
        }
    }

    /// Writes the job's run and filter, commits the new version through the manifest and
    /// publishes it.
    fn finish_job(&self, mut job: Job) -> Result<()> {
        let store = &self.ctx.store;
        let Some((builder, written)) = job.take_output() else {
            return Err(Error::InvalidOption("boa: a job finished twice".into()));
        };
        let table = if builder.entries() > 0 {
            let id = {
                let mut m = self.meta.lock();
                m.next_id += 1;
                m.next_id - 1
            };
            Some(Table::new(id, Run::from_builder(builder)?, store.clone()))
        } else {
            builder.abandon();
            None
        };
        let mut filter_at = None;
        let mut filter = None;
        if let Some(t) = &table {
            let Some(w) = written else {
                t.mark_obsolete();
                return Err(Error::InvalidOption(
                    "boa: a run finished without its filter".into(),
                ));
            };
            let (f, ext, len) = w.into_parts();
            filter_at = Some((ext, len));
            filter = Some(Arc::new(f));
        }
        let v = self.version();
        let mut levels = v.levels.clone();
        let mut freed_filters: Vec<Extent> = Vec::new();
        if let job::Kind::Merge { level } = job.kind {
            if let Some(l) = levels.get_mut(level) {
                freed_filters.extend(l.filter_at.map(|(e, _)| e));
                *l = Level::default();
            }
        }
        if let (Some(t), Some(f), Some(at)) = (&table, filter, filter_at) {
            while levels.len() <= job.target {
                levels.push(Level::default());
            }
            let l = &mut levels[job.target];
            freed_filters.extend(l.filter_at.map(|(e, _)| e));
            l.runs.push(t.clone());
            l.filter = Some(f);
            l.filter_at = Some(at);
        }
        while levels.last().is_some_and(|l| l.runs.is_empty()) {
            levels.pop();
        }
        let seq = match &job.kind {
            job::Kind::Flush(m) => m.max_seq(),
            job::Kind::Merge { .. } => v.seq,
        };
        // Published at once; the committer makes it durable. The inputs' extents go back when
        // the last version holding them drops (the committed one among them), the replaced
        // filters' once a durable commit no longer names them.
        self.publish(Version { levels, seq });
        for t in &job.inputs {
            t.mark_obsolete();
        }
        self.retired_filters.lock().extend(freed_filters);
        let bytes = table.as_ref().map_or(0, |t| t.bytes);
        let c = &self.counters;
        c.filter_bytes_written
            .fetch_add(filter_at.map_or(0, |(_, n)| n), Ordering::Relaxed);
        match &job.kind {
            job::Kind::Flush(mem) => {
                let mut q = self.queue.lock();
                if q.front().is_some_and(|m| Arc::ptr_eq(m, mem)) {
                    q.pop_front();
                }
                c.flushes.fetch_add(1, Ordering::Relaxed);
                c.bytes_flushed.fetch_add(bytes, Ordering::Relaxed);
            }
            job::Kind::Merge { .. } => {
                c.merges.fetch_add(1, Ordering::Relaxed);
                c.bytes_merged.fetch_add(bytes, Ordering::Relaxed);
            }
        }
        self.committer.request();
        Ok(())
    }

    /// Looks `key` up in one level: the runs its filter names, newest first. Returns whether
    /// the lookup is done (a Put or Delete found).
    #[allow(clippy::too_many_arguments)]
    fn get_level(
        &self,
        i: usize,
        level: &Level,
        fp: &Fingerprint,
        rk: &[u8],
        key: &Arc<[u8]>,
        seq: u64,
        routed: &mut Routed,
        out: &mut Vec<Entry>,
    ) -> Result<bool> {
        let c = &self.counters;
        match &level.filter {
            Some(f) => {
                let shape = f.shape();
                f.route(
                    fp.prefix(shape.prefix_bits),
                    fp.check(i, shape.check_bits),
                    routed,
                )?;
                c.prefix_matches
                    .fetch_add(routed.prefix_matches, Ordering::Relaxed);
            }
            // A filter damaged on disk: every run of the level, newest first.
            None => {
                routed.runs.clear();
                routed.runs.extend((0..level.runs.len() as u8).rev());
            }
        }
        for &j in &routed.runs {
            let Some(t) = level.runs.get(usize::from(j)) else {
                return Err(Error::corruption(
                    "boa routing filter",
                    None,
                    format!("level {} routes to run {j} of {}", i + 1, level.runs.len()),
                ));
            };
            let start = out.len();
            t.run()?.get(rk, seq, out)?;
            c.probes.fetch_add(1, Ordering::Relaxed);
            if out.len() == start {
                c.empty_probes.fetch_add(1, Ordering::Relaxed);
            }
            for e in &mut out[start..] {
                e.key = key.clone();
            }
            if out.len() > start && out.last().is_some_and(|e| e.kind != Kind::Merge) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Checks one level: each run's pages and order, each key under its own fingerprint, the
    /// filter's list in order, and every key routed by the filter to the run that holds it.
    fn check_level(&self, i: usize, level: &Level, seed: u64) -> Result<u64> {
        let bad = |d: String| Error::corruption("boa", None, d);
        if let Some(d) = &level.damage {
            let page = level.filter_at.map(|(e, _)| e.start);
            return Err(Error::corruption(
                "boa routing filter",
                page,
                format!("level {}: {d}", i + 1),
            ));
        }
        let Some(f) = &level.filter else {
            return if level.runs.is_empty() {
                Ok(0)
            } else {
                Err(bad(format!("level {} has runs and no filter", i + 1)))
            };
        };
        if level.runs.is_empty() || level.runs.len() > self.max_runs() {
            return Err(bad(format!(
                "level {} holds {} runs (1 to {})",
                i + 1,
                level.runs.len(),
                self.max_runs()
            )));
        }
        f.all(level.runs.len())?;
        let shape = f.shape();
        let (mut total, mut sketches) = (0u64, 0u64);
        let mut routed = Routed::default();
        for (j, t) in level.runs.iter().enumerate() {
            let run = t.run()?;
            let n = run.check()?;
            if n != t.meta().entries || n == 0 {
                return Err(bad(format!(
                    "L{} run {} holds {n} entries, metadata {}",
                    i + 1,
                    t.id,
                    t.meta().entries
                )));
            }
            total += n;
            let mut last = None;
            for e in run.iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::Merge) {
                let e = e?;
                let Some((hi, key)) = split_run_key(&e.key) else {
                    return Err(bad(format!(
                        "L{} run {}: a key without fingerprint",
                        i + 1,
                        t.id
                    )));
                };
                let fp = Fingerprint::of(seed, key);
                if fp.hi != hi {
                    return Err(bad(format!(
                        "L{} run {}: a key stored under another fingerprint",
                        i + 1,
                        t.id
                    )));
                }
                let s = (fp.prefix(shape.prefix_bits), fp.check(i, shape.check_bits));
                if last == Some(s) {
                    continue;
                }
                last = Some(s);
                sketches += 1;
                f.route(s.0, s.1, &mut routed)?;
                if !routed.runs.contains(&(j as u8)) {
                    return Err(bad(format!(
                        "L{} filter does not route a key of run {j} (id {}) to it",
                        i + 1,
                        t.id
                    )));
                }
            }
        }
        if sketches != f.entries() {
            return Err(bad(format!(
                "L{} filter holds {} entries, its runs {sketches}",
                i + 1,
                f.entries()
            )));
        }
        Ok(total)
    }
}

impl Tree {
    /// [`Index::work`]; without `wait`, `None` at once while another thread holds the job
    /// ([`Index::work_unless_busy`]): a writer's share does not wait through a background
    /// thread's step.
    fn work_as(&self, budget: u64, wait: bool) -> Result<Option<u64>> {
        self.committer.error()?;
        let Some(mut g) = crate::index::lock_job(&self.job, wait) else {
            return Ok(None);
        };
        if g.is_none() {
            *g = self.start_job()?;
            self.progress.store(0, Ordering::Relaxed);
        }
        let Some(job) = g.as_mut() else {
            drop(g);
            return self.committer.idle_work().map(Some);
        };
        let before = job.done;
        let finished = match job.step(budget) {
            Ok(f) => f,
            Err(e) => {
                *g = None;
                self.progress.store(0, Ordering::Relaxed);
                return Err(e);
            }
        };
        let did = job.done - before;
        self.progress.store(job.done, Ordering::Relaxed);
        if finished {
            let job = g.take();
            let r = job.map_or(Ok(()), |j| self.finish_job(j));
            self.progress.store(0, Ordering::Relaxed);
            r?;
        }
        Ok(Some(did.max(1)))
    }

    /// Commits the published version if it is not the committed one (the committer thread):
    /// syncs the data file when the version names new extents, then one manifest commit listing
    /// the extents of runs and filters it names that the last commit did not (added) and the
    /// other way round (freed); then releases the replaced filters no durable commit names.
    /// Returns whether it committed.
    fn commit_published(&self) -> Result<bool> {
        let mut c = self.committed.lock();
        let t = std::time::Instant::now();
        let (v, generation) = self.current.published(&self.committer);
        if self.committer.is_committed(generation) {
            return Ok(false);
        }
        let now = extents_of(&v);
        let (added, freed) = extent_difference(&c.extents, &now);
        let meta = *self.meta.lock();
        let commits = Commits::new(
            &self.ctx,
            &self.committer,
            &self.durable,
            &self.counters.commits,
            &self.counters.commit_max_micros,
        );
        let commit = Commit {
            index_meta: encode_meta(&v, &meta),
            durable_seq: v.seq,
            added,
            freed,
        };
        commits.commit(commit, generation, DataSync::WhenAdded, t)?;
        *c = Committed {
            _version: v,
            extents: now,
        };
        // A retired filter is named by no version published after it retired, so one the
        // durable commit does not name is free on disk too.
        let gone: Vec<Extent> = {
            let mut r = self.retired_filters.lock();
            let (gone, kept) = r.drain(..).partition(|e| !c.extents.contains(e));
            *r = kept;
            gone
        };
        for e in gone {
            self.ctx.store.alloc().release(e);
        }
        Ok(true)
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

impl Index for Boa {
    fn absorb(&self, mem: Arc<Memtable>) -> Result<()> {
        self.counters.absorbs.fetch_add(1, Ordering::Relaxed);
        if mem.is_empty() {
            return Ok(());
        }
        self.queue.lock().push_back(mem);
        Ok(())
    }

    /// Bytes of queued memtables plus the units of the merges the next flush waits for (the
    /// chain of full levels from level 1), less what the job in progress has done.
    fn debt(&self) -> u64 {
        let queued: u64 = self.queue.lock().iter().map(|m| m.bytes()).sum();
        let v = self.version();
        let chain = full_chain(&v.run_counts(), self.max_runs());
        let merges: u64 = v.levels[..chain]
            .iter()
            .map(|l| l.user_bytes() + job::ENTRY_UNITS * l.entries())
            .sum();
        if queued == 0 && chain == 0 {
            return 0;
        }
        (queued + merges)
            .saturating_sub(self.progress.load(Ordering::Relaxed))
            .max(1)
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

    /// The published version's: a flush's publication drops its memtable from the queue.
    fn published_seq(&self) -> u64 {
        self.version().seq.max(self.durable_seq())
    }

    fn background_work(&self) -> bool {
        self.debt() > 0 || self.dirty() || self.committer.busy()
    }

    fn wait_durable(&self, limit: std::time::Duration) -> Result<bool> {
        WithCommitter::wait_durable(self, limit)
    }

    fn get(&self, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> Result<()> {
        self.counters.lookups.fetch_add(1, Ordering::Relaxed);
        let v = self.version();
        if v.levels.is_empty() {
            return Ok(());
        }
        let fp = Fingerprint::of(self.seed, key);
        let rk = run_key(&fp, key);
        let key: Arc<[u8]> = Arc::from(key);
        let mut routed = Routed::default();
        for (i, level) in v.levels.iter().enumerate() {
            if self.get_level(i, level, &fp, &rk, &key, seq, &mut routed, out)? {
                break;
            }
        }
        Ok(())
    }

    /// Point-only: no key order to iterate in.
    fn iter(
        &self,
        _lo: Bound<Vec<u8>>,
        _hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> Result<Vec<EntryIter>> {
        Err(Error::Unsupported {
            what: format!(
                "{} on index kind boa",
                if reverse {
                    "reverse range scan"
                } else {
                    "range scan"
                }
            ),
        })
    }

    fn stats(&self) -> IndexStats {
        let v = self.version();
        let c = &self.counters;
        let mut s = IndexStats::new("boa", v.levels.len() as u64, &c.absorbs);
        s.count([
            ("flushes", &c.flushes),
            ("merges", &c.merges),
            ("bytes_flushed", &c.bytes_flushed),
            ("bytes_merged", &c.bytes_merged),
            ("filter_bytes_written", &c.filter_bytes_written),
            ("lookups", &c.lookups),
            ("runs_probed", &c.probes),
            ("empty_probes", &c.empty_probes),
            ("prefix_matches", &c.prefix_matches),
            ("commits", &c.commits),
            ("commit_max_micros", &c.commit_max_micros),
        ]);
        let runs: u64 = v.levels.iter().map(|l| l.runs.len() as u64).sum();
        s.counters.insert("runs".into(), runs);
        for (i, l) in v.levels.iter().enumerate() {
            let f = l.filter.as_ref();
            s.shape.push(format!(
                "L{}: {} runs (at most {}), {} entries, filter {} bytes, {} entries, prefix {} bits, {} pivots",
                i + 1,
                l.runs.len(),
                self.max_runs(),
                l.entries(),
                f.map_or(0, |f| f.bytes()),
                f.map_or(0, |f| f.entries()),
                f.map_or(0, |f| f.shape().prefix_bits),
                f.map_or(0, |f| 1u64 << f.pivot_bits()),
            ));
            s.entries += l.entries();
        }
        s.filter_bytes = v.filter_bytes();
        let lookups = c.lookups.load(Ordering::Relaxed);
        if lookups > 0 {
            let io = self.ctx.store.counters().snapshot();
            let reads = io.read_ops[Purpose::UserRead as usize];
            let per = |n: u64| n as f64 / lookups as f64;
            s.shape.push(format!(
                "lookups {lookups}: {:.3} runs probed, {:.3} empty probes, {:.3} device reads \
                 ({:.1} KiB) per lookup",
                per(c.probes.load(Ordering::Relaxed)),
                per(c.empty_probes.load(Ordering::Relaxed)),
                per(reads),
                per(io.read(Purpose::UserRead)) / 1024.0,
            ));
        }
        s
    }

    fn check(&self) -> Result<u64> {
        let v = self.version();
        let seed = self.seed;
        let mut total = 0u64;
        let mut extents: Vec<Extent> = Vec::new();
        for (i, level) in v.levels.iter().enumerate() {
            total += self.check_level(i, level, seed)?;
            for t in &level.runs {
                extents.extend_from_slice(&t.meta().extents);
                if t.bytes != t.meta().pages() * PAGE_SIZE as u64 {
                    return Err(Error::corruption(
                        "boa",
                        None,
                        format!("run {} size differs from its extents", t.id),
                    ));
                }
            }
            extents.extend(level.filter_at.map(|(e, _)| e));
        }
        extents.sort();
        for w in extents.windows(2) {
            if w[0].end() > w[1].start {
                return Err(Error::corruption(
                    "boa",
                    None,
                    format!("extents {:?} and {:?} overlap", w[0], w[1]),
                ));
            }
        }
        Ok(total)
    }

    fn point_keys(&self) -> Result<Vec<Vec<u8>>> {
        let v = self.version();
        let mut keys: HashSet<Vec<u8>> = HashSet::new();
        for t in v.levels.iter().flat_map(|l| l.runs.iter()) {
            let run = t.run()?;
            for e in run.iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::Merge) {
                let e = e?;
                if let Some((_, k)) = split_run_key(&e.key) {
                    keys.insert(k.to_vec());
                }
            }
        }
        Ok(keys.into_iter().collect())
    }
}
