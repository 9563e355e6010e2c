//! The merge (spec §4.4, Algorithm 3), planned first and done in bounded steps.
//!
//! When the head tree (a frozen memtable) is absorbed, [`plan`] computes where the cascade of
//! Algorithm 3 ends: the first level `L_j` whose merged size (the head tree's entries and
//! those of `L1..L_j`, `L_j`'s external fences, an internal fence per output page) stays under
//! its capacity `k^j·|L0|`, or a new level below the lowest (spec §4.7). This is the "better
//! option" of spec pitfall 6: one (j+1)-way merge writes the new `L_j` (all index entries of
//! `L0..L_j`, versions resolved, with the external fences of `L_j`: `L_{j+1}` does not change),
//! then the fence levels `L_{j-1}..L1` are rebuilt from the new pages, each holding one
//! external fence per page of the level below (Property 1), and the head tree's fences from
//! `L1`'s pages. The result equals the pairwise cascade's; the I/O differs (each level is
//! read and written once rather than once per cascade step). A [`Job`] holds this work
//! between steps so that it can be done in pieces (de-amortized mode, spec §4.8). Its inputs
//! are opened one level a step, each step asking for the level's first pages without waiting
//! for them, so that no step waits for every level's first read (docs/fdtree.md, *Opening a
//! cascade*).

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::Mutex;

use super::version::{HeadFence, Level, Version};
use crate::entry::Entry;
use crate::error::Result;
use crate::memtable::Memtable;
use crate::merge::{Compactor, EntryIter, MergeIter};
use crate::options::MergeOperator;
use crate::run::{Fence, Run, RunBuilder, RunIter, RunOptions};
use crate::storage::{PageFile, Purpose, PAGE_SIZE};

/// Work units (bytes) charged per entry or fence on top of its key and value bytes.
const ITEM_UNITS: u64 = 16;

/// Capacity of `L_i`, `|L0|·k^i` items (fences counted).
pub fn capacity(i: usize, k: u64, l0: u64) -> u64 {
    let mut c = l0;
    for _ in 0..i {
        c = c.saturating_mul(k);
    }
    c
}

/// What a level weighs for planning: index entries and data pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelSize {
    pub entries: u64,
    pub pages: u64,
}

/// The level (1-based) the cascade for a head tree of `mem_entries` entries (about
/// `mem_pages` pages) ends at: the first `j` where `L0..L_j` merged fit under `L_j`'s
/// capacity, counting an internal fence per page as an upper bound; `levels.len() + 1` (a new
/// lowest level) when none does. Pure: the policy, testable without I/O.
pub fn plan(levels: &[LevelSize], mem_entries: u64, mem_pages: u64, k: u64, l0: u64) -> usize {
    let (mut entries, mut pages) = (mem_entries, mem_pages + 1);
    for (j, l) in levels.iter().enumerate() {
        entries += l.entries;
        pages += l.pages;
        let ext = levels.get(j + 1).map_or(0, |below| below.pages);
        if entries + ext + pages < capacity(j + 1, k, l0) {
            return j + 1;
        }
    }
    levels.len() + 1
}

/// What one call of `work` did, by the stage it found the job in: opening a cascade (planning
/// it and opening one input level a call), merging, writing fence levels, finishing a run,
/// publishing (a job whose last level is built; the step that builds it publishes it in the
/// same call now, so that one stays 0).
pub const STEP_KINDS: [&str; 5] = ["start", "merge", "fences", "finish", "publish"];

/// The tree's sizes a job needs: k, |L0| and the pages a merge writes in one request.
#[derive(Clone, Copy, Debug)]
pub struct Sizing {
    pub k: u64,
    pub l0: u64,
    pub chunk: u64,
}

/// External fences met while reading a level that keeps them, for the merge to interleave.
type FenceQueue = Arc<Mutex<VecDeque<HeadFence>>>;

/// The entries of a level read for a merge (the run's own iterator, reading `pages` pages a
/// request: fences are not entries); with a queue, its external fences go there as they are
/// passed, so that by the time the merge emits an entry every fence ordering before it has been
/// queued.
fn level_entries(run: &Arc<Run>, fences: Option<FenceQueue>, pages: u64) -> RunIter {
    let it = run.iter_with_readahead(
        Bound::Unbounded,
        Bound::Unbounded,
        false,
        Purpose::Merge,
        pages,
    );
    match fences {
        None => it,
        Some(q) => it.with_fences(Box::new(move |key: &[u8], f: Fence| {
            if !f.internal {
                q.lock().push_back((key.to_vec(), f.pid));
            }
        })),
    }
}

/// Where a job stands.
enum Stage {
    /// Opening the inputs, one level a step: the level's run (its header, on first use after
    /// an open), the index path to its first data page, and the read of its first pages, asked
    /// for and not waited for (the merge's first step finds them read). The head tree is in
    /// memory: its iterator is the first source.
    Open {
        /// The head tree's entries, then those of each level opened so far.
        sources: Vec<EntryIter>,
        fences: FenceQueue,
        snapshots: Vec<u64>,
        merge_op: Option<Arc<dyn MergeOperator>>,
    },
    /// Merging the head tree and `L1..L_j` into the new `L_j`.
    Merge {
        input: Box<Compactor<MergeIter>>,
        fences: FenceQueue,
        group: Vec<Entry>,
        out: RunBuilder,
    },
    /// Writing the external fences of fence level `level` (over the level built last).
    Fences {
        level: usize,
        pos: usize,
        out: RunBuilder,
    },
    /// Finishing the run of `level` (index pages, header).
    Finish { level: usize, out: RunBuilder },
    /// Every level is built: ready to commit.
    Ready,
    /// Everything cancelled out (a merge into the lowest level left nothing): the tree is
    /// empty.
    Empty,
}

/// One cascade: the head tree `mem` merged down to `target`.
pub struct Job {
    pub mem: Arc<Memtable>,
    pub base: Arc<Version>,
    /// `j`, 1-based: the level the cascade ends at (`base.levels.len() + 1`: a new level).
    pub target: usize,
    /// Whether the new `L_j` is the lowest level (no fences; tombstones may go).
    pub bottom: bool,
    /// Estimated work units of the whole job, and those done.
    pub total: u64,
    pub done: u64,
    stage: Stage,
    /// Pages the builders allocate and write at a time.
    chunk: u64,
    /// Levels built, `L_j` first, then `L_{j-1}`, ... up to `L1`.
    pub built: Vec<Arc<Level>>,
    /// The page list of the level built last (page 0's key empty): the next level's fences.
    pub pages: Vec<HeadFence>,
    store: Arc<PageFile>,
}

fn builder(store: &Arc<PageFile>, fenced: bool, chunk: u64) -> RunBuilder {
    let mut b = RunBuilder::new(
        store.clone(),
        RunOptions {
            // The paper's FD-tree has no filters: a miss reads one page per level (§8 test 12).
            bloom_bits_per_key: 0,
            purpose: Purpose::Merge,
            extent_pages: chunk,
        },
    );
    if fenced {
        b.set_fenced();
    }
    b.record_pages();
    b
}

/// Pages a head tree's entries take in a run, about.
fn mem_pages(mem: &Memtable) -> u64 {
    (mem.user_bytes() + mem.len() as u64 * 20) / PAGE_SIZE as u64
}

/// Units a step that opens an input level charges (it reads the level's index path and asks
/// for one request of its first pages).
const OPEN_STEP_UNITS: u64 = PAGE_SIZE as u64;

/// Units a step that finishes a run charges at most (a run's last chunk, index pages and
/// header are written by steps of this many units).
const FINISH_STEP_UNITS: u64 = 4 * PAGE_SIZE as u64;

/// The work units of a cascade to `target`, an upper bound of what its steps charge (the Db's
/// pacing schedule is this debt worked off as the next head tree fills: an estimate below the
/// work leaves the rest to the insert that finds that head tree full). Every entry and fence
/// read moved once; the fence levels rebuilt above `L_target` (one fence per page of the level
/// below: under two per page of the new `L_target` in all); each run finished, in steps of
/// [`FINISH_STEP_UNITS`] with the index pages it writes; and each input level opened
/// ([`OPEN_STEP_UNITS`]).
fn units(mem: &Memtable, base: &Version, target: usize) -> u64 {
    let mut total = mem.user_bytes() + ITEM_UNITS * mem.len() as u64;
    let mut pages = mem_pages(mem) + 1;
    for l in base.levels.iter().take(target) {
        total += l.meta().user_bytes + ITEM_UNITS * l.items();
        pages += l.pages();
    }
    // Internal fences and pages closed early (CONT_PREV groups) take room too.
    let pages = pages + pages / 8;
    // A key is at most an entry's key and value: an upper bound of a fence's bytes.
    let key = mem.user_bytes().div_ceil(mem.len().max(1) as u64) + ITEM_UNITS;
    if target > 1 {
        total += 2 * pages * key;
    }
    // Index pages of all the runs: under twice those over L_target's data pages.
    let index_pages = 2 * (pages * (key + 16)).div_ceil(PAGE_SIZE as u64) + target as u64;
    total
        + index_pages * PAGE_SIZE as u64
        + 3 * target as u64 * FINISH_STEP_UNITS
        + target as u64 * OPEN_STEP_UNITS
}

impl Job {
    /// The work units the cascade for `mem` over `base` is planned to take.
    pub fn estimate(mem: &Memtable, base: &Version, k: u64, l0: u64) -> u64 {
        let sizes: Vec<LevelSize> = base
            .levels
            .iter()
            .map(|l| LevelSize {
                entries: l.entries(),
                pages: l.pages(),
            })
            .collect();
        units(
            mem,
            base,
            plan(&sizes, mem.len() as u64, mem_pages(mem), k, l0),
        )
    }

    /// Plans the cascade for `mem` over `base`; no I/O: its steps open the inputs, one level
    /// a step.
    pub fn start(
        store: &Arc<PageFile>,
        mem: Arc<Memtable>,
        base: Arc<Version>,
        sizing: Sizing,
        snapshots: Vec<u64>,
        merge_op: Option<Arc<dyn MergeOperator>>,
    ) -> Result<Job> {
        let Sizing { k, l0, chunk } = sizing;
        let sizes: Vec<LevelSize> = base
            .levels
            .iter()
            .map(|l| LevelSize {
                entries: l.entries(),
                pages: l.pages(),
            })
            .collect();
        let target = plan(&sizes, mem.len() as u64, mem_pages(&mem), k, l0);
        let bottom = target >= base.levels.len();
        let sources: Vec<EntryIter> = vec![Box::new(mem.iter(
            Bound::Unbounded,
            Bound::Unbounded,
            false,
        ))];
        let total = units(&mem, &base, target);
        Ok(Job {
            mem,
            base,
            target,
            bottom,
            total,
            done: 0,
            stage: Stage::Open {
                sources,
                fences: Arc::default(),
                snapshots,
                merge_op,
            },
            chunk,
            built: Vec::new(),
            pages: Vec::new(),
            store: store.clone(),
        })
    }

    /// What the job's next step does, as an index of [`STEP_KINDS`].
    pub fn next_step_kind(&self) -> usize {
        match self.stage {
            Stage::Open { .. } => 0,
            Stage::Merge { .. } => 1,
            Stage::Fences { .. } => 2,
            Stage::Finish { .. } => 3,
            Stage::Ready | Stage::Empty => 4,
        }
    }

    /// Whether every level is built (or the tree emptied): the job can commit.
    pub fn ready(&self) -> bool {
        matches!(self.stage, Stage::Ready | Stage::Empty)
    }

    /// Whether the merge left nothing at all.
    pub fn emptied(&self) -> bool {
        matches!(self.stage, Stage::Empty)
    }

    /// The levels the cascade reads (`L1..L_target` that exist).
    fn inputs(&self) -> usize {
        self.base.levels.len().min(self.target)
    }

    /// Whether the next step opens an input level.
    fn opening(&self) -> bool {
        matches!(&self.stage, Stage::Open { sources, .. } if sources.len() <= self.inputs())
    }

    /// Units left (at least 1 while the job is not committed).
    pub fn debt(&self) -> u64 {
        self.total.saturating_sub(self.done).max(1)
    }

    /// Does about `budget` units of work (at least one item or page); returns the units done.
    pub fn step(&mut self, budget: u64) -> Result<u64> {
        let start = self.done;
        let mut left = budget.max(1);
        while left > 0 && !self.ready() {
            let before = self.done;
            let finishing = matches!(self.stage, Stage::Finish { .. });
            let opening = self.opening();
            self.advance(left)?;
            if finishing || opening {
                // At most one run is finished per step: finishing writes the run's last
                // chunk, its index pages and its header, and waits for its writes. At most
                // one level is opened per step, and the merge starts in a later one, when the
                // first pages asked for are read.
                break;
            }
            left = left.saturating_sub(self.done.saturating_sub(before).max(1));
        }
        Ok(self.done.saturating_sub(start))
    }

    fn advance(&mut self, budget: u64) -> Result<()> {
        let stage = std::mem::replace(&mut self.stage, Stage::Ready);
        self.stage = match stage {
            Stage::Open {
                mut sources,
                fences,
                snapshots,
                merge_op,
            } => {
                // `sources` holds the head tree's iterator and those of L1..L_i.
                let i = sources.len() - 1;
                if i < self.inputs() {
                    let level = self.base.levels[i].clone();
                    let keep = i + 1 == self.target && !self.bottom;
                    let mut it =
                        level_entries(level.run()?, keep.then(|| fences.clone()), self.chunk);
                    it.prefetch()?;
                    sources.push(Box::new(it));
                    self.done = self.done.saturating_add(OPEN_STEP_UNITS);
                }
                if sources.len() <= self.inputs() {
                    Stage::Open {
                        sources,
                        fences,
                        snapshots,
                        merge_op,
                    }
                } else {
                    let merged = MergeIter::new(sources, false);
                    Stage::Merge {
                        input: Box::new(Compactor::new(merged, snapshots, self.bottom, merge_op)),
                        fences,
                        group: Vec::new(),
                        out: builder(&self.store, !self.bottom, self.chunk),
                    }
                }
            }
            Stage::Merge {
                mut input,
                fences,
                mut group,
                mut out,
            } => {
                let mut used = 0u64;
                let mut end = false;
                while used < budget {
                    match input.next_group(&mut group) {
                        None => {
                            end = true;
                            break;
                        }
                        Some(r) => r?,
                    }
                    for e in group.drain(..) {
                        loop {
                            let f = {
                                let mut q = fences.lock();
                                match q.front() {
                                    Some((k, _)) if k.as_slice() <= &e.key[..] => q.pop_front(),
                                    _ => None,
                                }
                            };
                            let Some((k, pid)) = f else { break };
                            used += k.len() as u64 + ITEM_UNITS;
                            out.add_fence(&k, pid)?;
                        }
                        used += e.user_bytes() as u64 + ITEM_UNITS;
                        out.add(&e)?;
                    }
                }
                self.done = self.done.saturating_add(used);
                if end {
                    // The inputs are read to their ends: every fence is queued.
                    let rest: Vec<HeadFence> = fences.lock().drain(..).collect();
                    for (k, pid) in rest {
                        self.done += k.len() as u64 + ITEM_UNITS;
                        out.add_fence(&k, pid)?;
                    }
                    if out.entries() == 0 {
                        out.abandon();
                        Stage::Empty
                    } else {
                        Stage::Finish {
                            level: self.target,
                            out,
                        }
                    }
                } else {
                    Stage::Merge {
                        input,
                        fences,
                        group,
                        out,
                    }
                }
            }
            Stage::Fences {
                level,
                mut pos,
                mut out,
            } => {
                let mut used = 0u64;
                while used < budget && pos < self.pages.len() {
                    let (k, pid) = &self.pages[pos];
                    out.add_fence(k, *pid)?;
                    used += k.len() as u64 + ITEM_UNITS;
                    pos += 1;
                }
                self.done = self.done.saturating_add(used);
                if pos < self.pages.len() {
                    Stage::Fences { level, pos, out }
                } else {
                    Stage::Finish { level, out }
                }
            }
            Stage::Finish { level, mut out } => {
                let finished = out.finish_step(budget)?;
                self.done = self.done.saturating_add(budget.min(FINISH_STEP_UNITS));
                if !finished {
                    Stage::Finish { level, out }
                } else {
                    let fences = out.fences();
                    let mut pages = out.take_page_list();
                    if let Some(first) = pages.first_mut() {
                        first.0.clear();
                    }
                    let run = Run::from_builder(out)?;
                    self.built.push(Arc::new(Level::built(run, fences)));
                    self.pages = pages;
                    if level <= 1 {
                        Stage::Ready
                    } else {
                        Stage::Fences {
                            level: level - 1,
                            pos: 0,
                            out: builder(&self.store, true, self.chunk),
                        }
                    }
                }
            }
            s @ (Stage::Ready | Stage::Empty) => s,
        };
        Ok(())
    }

    /// Gives back the pages of every level built (the job is dropped without committing).
    pub fn abort(self) {
        for l in &self.built {
            for e in l.extents() {
                self.store.alloc().release(*e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_ends_the_cascade_at_the_first_level_that_fits() {
        // k 4, |L0| 100: capacities 400, 1600, 6400 items.
        let l = |entries, pages| LevelSize { entries, pages };
        assert_eq!(plan(&[], 100, 1, 4, 100), 1, "an empty tree gets L1");
        assert_eq!(plan(&[l(100, 2)], 100, 1, 4, 100), 1);
        assert_eq!(
            plan(&[l(300, 3)], 100, 1, 4, 100),
            2,
            "a full lowest level grows the tree"
        );
        // L1 would hold 400 entries and 10 fences into L2: over; L2 then fits.
        assert_eq!(plan(&[l(300, 3), l(1000, 10)], 100, 1, 4, 100), 2);
        assert_eq!(plan(&[l(300, 3), l(1500, 10)], 100, 1, 4, 100), 3);
        // An internal fence per output page counts too.
        assert_eq!(plan(&[l(390, 3)], 0, 8, 4, 100), 2);
    }

    #[test]
    fn capacities_grow_by_k_and_saturate() {
        assert_eq!(capacity(0, 10, 7), 7);
        assert_eq!(capacity(3, 10, 7), 7000);
        assert_eq!(capacity(80, 10, 7), u64::MAX);
    }
}
