//! The resumable parts of a job: a [`Pipe`] merges sorted sources into one or two new d-trees a
//! key at a time, then finishes them (index levels, filter, header) in bounded steps, so that
//! `work(budget)` can stop after any key or finishing step and resume on the next call with
//! the same builders and input iterators; [`Moved`] counts what a deep flush moves into a
//! child; [`Counted`] counts what a pipe reads.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::version::{units, DTree};
use crate::entry::Entry;
use crate::error::Result;
use crate::merge::{Compactor, EntryIter, MergeIter};
use crate::options::MergeOperator;
use crate::run::{Run, RunBuilder, RunOptions};
use crate::storage::{PageFile, Purpose, PAGE_SIZE};

/// The most units one step of a pipe's finish is given (and so the most pages it writes
/// beyond a chunk: four).
pub const FINISH_STEP_UNITS: u64 = 4 * PAGE_SIZE as u64;

/// What a finishing step of a pipe charges at least, as a share of what it was given: a step
/// that only builds the filter (no page) does CPU work, which the builder prices at 8 bytes a
/// probe, here an eighth of that (a byte a probe).
const FINISH_CPU_SHARE: u64 = 8;

/// Units of one entry: key, value and the memtable's per-entry overhead.
pub fn entry_units(e: &Entry) -> u64 {
    units(1, e.user_bytes() as u64)
}

/// Adds the units of every entry that passes to a shared counter: what a pipe has read.
pub struct Counted<I> {
    inner: I,
    units: Arc<AtomicU64>,
}

impl<I> Counted<I> {
    pub fn new(inner: I, units: Arc<AtomicU64>) -> Self {
        Counted { inner, units }
    }
}

impl<I: Iterator<Item = Result<Entry>>> Iterator for Counted<I> {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        let r = self.inner.next();
        if let Some(Ok(e)) = &r {
            self.units.fetch_add(entry_units(e), Ordering::Relaxed);
        }
        r
    }
}

/// What the parent's side of a deep flush moved into one child, shared between its [`Moved`]
/// iterator (inside the pipe) and the job (which reads it when the flush commits).
#[derive(Default, Debug)]
pub struct MovedState {
    pub units: u64,
    pub entries: u64,
    pub bytes: u64,
    last_key: Option<Arc<[u8]>>,
    group_units: u64,
    /// The largest key group moved.
    pub max_group: u64,
}

/// The parent side of a deep flush into one child: its live entries in the child's interval
/// below the flush's cut (found beforehand, `flush_cut`, so that all versions of a key move
/// together), counted into a [`MovedState`] as they pass.
pub struct Moved<I> {
    inner: I,
    state: Arc<Mutex<MovedState>>,
}

impl<I> Moved<I> {
    pub fn new(inner: I, state: Arc<Mutex<MovedState>>) -> Self {
        Moved { inner, state }
    }
}

impl<I: Iterator<Item = Result<Entry>>> Iterator for Moved<I> {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        let r = self.inner.next();
        let mut st = self.state.lock();
        match &r {
            Some(Ok(e)) => {
                if st.last_key.as_ref().is_none_or(|k| **k != *e.key) {
                    st.max_group = st.max_group.max(st.group_units);
                    st.group_units = 0;
                    st.last_key = Some(e.key.clone());
                }
                let u = entry_units(e);
                st.units += u;
                st.entries += 1;
                st.bytes += e.user_bytes() as u64;
                st.group_units += u;
            }
            None => st.max_group = st.max_group.max(st.group_units),
            Some(Err(_)) => {}
        }
        r
    }
}

/// Where a pipe's output goes.
#[derive(Clone, Debug)]
pub enum Route {
    /// One new d-tree.
    One,
    /// Keys below the key to the first d-tree, the others to the second (a non-leaf split).
    AtKey(Arc<[u8]>),
    /// Split at the byte midpoint of `total` units: the first key whose versions end past
    /// half goes to the second d-tree and so does everything after it (a leaf split; with
    /// entries of one size this is the paper's median, entry ⌊len/2⌋).
    Half(u64),
}

/// The new d-trees a finished pipe made.
pub struct Outcome {
    pub left: Option<Run>,
    pub right: Option<Run>,
    /// The first key of `right` (the s-key of a split).
    pub split_key: Option<Arc<[u8]>>,
    /// The largest key group written (see [`super::version::Observed`]).
    pub max_group: u64,
    /// Units read, and written (what compaction kept of them).
    pub read: u64,
    pub written: u64,
}

/// A merge (or a split) in progress: sorted sources, versions compacted per key, written into
/// one or two run builders. Everything it holds is owned, so it is kept in the job between
/// `work` calls.
pub struct Pipe {
    input: Compactor<MergeIter>,
    read: Arc<AtomicU64>,
    written: u64,
    route: Route,
    left: RunBuilder,
    right: Option<RunBuilder>,
    left_units: u64,
    to_right: bool,
    split_key: Option<Arc<[u8]>>,
    max_group: u64,
    /// The current key's kept versions (one vector reused for every key).
    group: Vec<Entry>,
    /// Whether the input is exhausted (the builders are being finished).
    exhausted: bool,
    /// Units charged for finishing steps.
    finishing: u64,
    /// The most pages one finishing step wrote, and the longest one took (microseconds).
    max_step_pages: u64,
    max_step_us: u64,
}

impl Pipe {
    /// A pipe over `sources` (numbered newest first: on an equal key and sequence number the
    /// last source's copy is kept, the deeper one, which a fold may have made more complete).
    /// `read` is the counter the sources were wrapped with ([`Counted`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        sources: Vec<EntryIter>,
        read: Arc<AtomicU64>,
        snapshots: Vec<u64>,
        bottom: bool,
        merge_op: Option<Arc<dyn MergeOperator>>,
        route: Route,
        store: &Arc<PageFile>,
        opts: RunOptions,
    ) -> Pipe {
        let split = !matches!(route, Route::One);
        Pipe {
            input: Compactor::new(MergeIter::new(sources, false), snapshots, bottom, merge_op),
            read,
            written: 0,
            route,
            left: RunBuilder::new(store.clone(), opts),
            right: split.then(|| RunBuilder::new(store.clone(), opts)),
            left_units: 0,
            to_right: false,
            split_key: None,
            max_group: 0,
            group: Vec::new(),
            exhausted: false,
            finishing: 0,
            max_step_pages: 0,
            max_step_us: 0,
        }
    }

    /// The work done so far: units read and written, and those charged for finishing.
    pub fn units(&self) -> u64 {
        self.moved() + self.finishing
    }

    /// Units read and written so far.
    pub fn moved(&self) -> u64 {
        self.read.load(Ordering::Relaxed) + self.written
    }

    /// The most pages one finishing step wrote (handed to the page file, a chunk at a time) and
    /// the longest one took, in microseconds.
    pub fn max_finish_step(&self) -> (u64, u64) {
        (self.max_step_pages, self.max_step_us)
    }

    /// Does about `budget` units of work: moves whole keys until `budget` units have been read
    /// and written in this call or the input is exhausted, then finishes the d-trees in steps
    /// of at most [`FINISH_STEP_UNITS`], each charged the pages it placed (4 KiB a page), at
    /// least an eighth of what it was given, until the call's units reach `budget`. Returns
    /// whether the pipe is complete ([`Pipe::finish`] then writes nothing).
    pub fn step(&mut self, budget: u64) -> Result<bool> {
        let start = self.units();
        if !self.exhausted {
            self.exhausted = self.merge(budget)?;
        }
        while self.exhausted {
            if self.finished() {
                return Ok(true);
            }
            let did = self.units() - start;
            if did >= budget {
                break;
            }
            self.finish_step((budget - did).min(FINISH_STEP_UNITS))?;
        }
        Ok(false)
    }

    /// The builders that make d-trees (an empty one makes none and is not finished).
    fn builders(&mut self) -> impl Iterator<Item = &mut RunBuilder> {
        [Some(&mut self.left), self.right.as_mut()]
            .into_iter()
            .flatten()
            .filter(|b| b.entries() > 0)
    }

    /// Whether every d-tree is finished.
    fn finished(&mut self) -> bool {
        self.builders().all(|b| b.is_complete())
    }

    /// One step of `given` units of the first d-tree not finished yet.
    fn finish_step(&mut self, given: u64) -> Result<()> {
        let t = std::time::Instant::now();
        let Some(b) = self.builders().find(|b| !b.is_complete()) else {
            return Ok(());
        };
        let (placed, written) = (b.pages_placed(), b.pages_written());
        b.finish_step(given)?;
        let placed = b.pages_placed() - placed;
        let written = b.pages_written() - written;
        self.finishing += (placed * PAGE_SIZE as u64)
            .max(given / FINISH_CPU_SHARE)
            .max(1);
        self.max_step_pages = self.max_step_pages.max(written);
        self.max_step_us = self.max_step_us.max(t.elapsed().as_micros() as u64);
        Ok(())
    }

    /// Moves whole keys until `budget` units have been read and written in this call or the
    /// input is exhausted; returns whether it is.
    fn merge(&mut self, budget: u64) -> Result<bool> {
        let start = self.moved();
        while self.moved() - start < budget {
            match self.input.next_group(&mut self.group) {
                None => return Ok(true),
                Some(r) => r?,
            }
            let group = &self.group;
            let Some(first) = group.first() else {
                continue;
            };
            let g: u64 = group.iter().map(entry_units).sum();
            self.max_group = self.max_group.max(g);
            let right = match &self.route {
                Route::One => false,
                Route::AtKey(k) => *first.key >= **k,
                Route::Half(total) => {
                    if !self.to_right && self.left.entries() > 0 && self.left_units + g > total / 2
                    {
                        self.to_right = true;
                    }
                    self.to_right
                }
            };
            let b = match (&mut self.right, right) {
                (Some(r), true) => {
                    if self.split_key.is_none() {
                        self.split_key = Some(first.key.clone());
                    }
                    r
                }
                _ => {
                    self.left_units += g;
                    &mut self.left
                }
            };
            for e in group {
                b.add(e)?;
            }
            self.written += g;
        }
        Ok(false)
    }

    /// The d-trees: builders that [`Pipe::step`] finished return at once (any other is finished
    /// here in one go: index levels, filter, header); an empty one gives no run.
    pub fn finish(self, store: &PageFile) -> Result<Outcome> {
        let finish = |b: RunBuilder| -> Result<Option<Run>> {
            if b.entries() == 0 {
                b.abandon();
                return Ok(None);
            }
            Run::from_builder(b).map(Some)
        };
        let (read, written) = (self.read.load(Ordering::Relaxed), self.written);
        let right = self.right;
        let left = finish(self.left)?;
        let right = match right.map(finish).transpose() {
            Ok(r) => r.flatten(),
            Err(e) => {
                if let Some(l) = &left {
                    release(store, l);
                }
                return Err(e);
            }
        };
        let split_key = if right.is_some() {
            self.split_key
        } else {
            None
        };
        Ok(Outcome {
            left,
            right,
            split_key,
            max_group: self.max_group,
            read,
            written,
        })
    }
}

/// Gives a run that was built but never committed back to the allocator.
pub fn release(store: &PageFile, run: &Run) {
    for e in run.extents() {
        store.alloc().release(*e);
    }
}

/// The live entries of a d-tree within [lo, hi), read for a reorganisation.
pub fn live_iter(
    d: &DTree,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    purpose: Purpose,
) -> Result<crate::run::RunIter> {
    Ok(d.run.run()?.iter(d.live_lo(lo), hi, false, purpose))
}

/// The interval of child `i` of a node with s-keys `keys`: [keys[i-1], keys[i]).
pub fn child_bounds(keys: &[Arc<[u8]>], i: usize) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let lo = if i == 0 {
        Bound::Unbounded
    } else {
        Bound::Included(keys[i - 1].to_vec())
    };
    let hi = keys
        .get(i)
        .map_or(Bound::Unbounded, |k| Bound::Excluded(k.to_vec()));
    (lo, hi)
}
