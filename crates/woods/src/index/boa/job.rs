//! A flush or a merge, held between `work` steps so that it is done in bounded pieces.
//!
//! A flush sorts the frozen memtable by fingerprint and writes it as a new run of level 1: the
//! memtable's entries are keyed and sorted in chunks of [`SORT_CHUNK`], a bounded amount per
//! step, and the sorted chunks merged as the run is written; a merge reads every run of a level in one (λ−1)-way merge by fingerprint and writes
//! one run of the next level (spec §1.4 MERGE step 1–2). Either way versions are resolved by
//! the substrate's [`Compactor`] (snapshots keep what they see; tombstones and what they hide
//! are dropped only when the output becomes the oldest data in the store, spec correction 1),
//! and the target level's routing filter is rewritten alongside, in the same pass, from the
//! output's keys (§1.5 update).

use std::ops::Bound;
use std::sync::Arc;

use super::filter::{FilterBuilder, FilterWrite, Shape};
use super::hash::{run_key, split_run_key, Fingerprint, PREFIX_LEN};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::index::lsm::version::Table;
use crate::memtable::{MemIter, Memtable};
use crate::merge::{Compactor, EntryIter, MergeIter};
use crate::options::MergeOperator;
use crate::run::{RunBuilder, RunOptions};
use crate::storage::{PageFile, Purpose, PAGE_SIZE};

/// Work units charged per entry on top of its key and value bytes.
pub const ENTRY_UNITS: u64 = 16;

/// Entries of a flush keyed and sorted as one chunk: a step sorts whole chunks, so this bounds
/// the sorting one `work` call does beyond its budget (a few milliseconds).
pub const SORT_CHUNK: usize = 4096;

/// A flush's sorting charges an entry's units divided by this (hashing and sorting an entry in
/// memory costs a fraction of encoding and writing it), on top of its units as it is written.
const SORT_SHARE: u64 = 8;

/// A flush's input being keyed by fingerprint and sorted, chunk by chunk.
struct Sorting {
    input: MemIter,
    chunks: Vec<Vec<Entry>>,
    /// What the [`Compactor`] over the merged chunks needs.
    snapshots: Vec<u64>,
    bottom: bool,
    merge_op: Option<Arc<dyn MergeOperator>>,
}

/// Where a job's output goes and what it replaces.
pub enum Kind {
    /// A frozen memtable becomes a run of level 1.
    Flush(Arc<Memtable>),
    /// Every run of `level` (0-based) becomes one run of `level + 1`.
    Merge {
        /// The level merged.
        level: usize,
    },
}

/// What the job needs of the index.
pub struct Setup<'a> {
    pub store: &'a Arc<PageFile>,
    pub seed: u64,
    pub check_bits: u32,
    pub run_bits: u32,
    pub extent_pages: u64,
    pub snapshots: Vec<u64>,
    pub merge_op: Option<Arc<dyn MergeOperator>>,
}

/// A flush or merge in progress.
pub struct Job {
    /// Flush or merge.
    pub kind: Kind,
    /// The level (0-based) the output run joins.
    pub target: usize,
    /// The runs the output replaces (a merge's inputs).
    pub inputs: Vec<Arc<Table>>,
    /// The versions to write, resolved; `None` while a flush is still sorting.
    source: Option<Compactor<EntryIter>>,
    sorting: Option<Sorting>,
    builder: Option<RunBuilder>,
    filter: Option<FilterBuilder>,
    /// The input is spent: the steps finish the run, then write the filter.
    spent: bool,
    /// The run's last pages, index and header are written.
    run_done: bool,
    /// The finished filter being written, a few pages a step.
    filter_write: Option<FilterWrite>,
    store: Arc<PageFile>,
    group: Vec<Entry>,
    seed: u64,
    /// Work units of the whole job, and done so far.
    pub total: u64,
    pub done: u64,
}

/// The units of work an entry costs.
pub fn units(e: &Entry) -> u64 {
    (e.key.len() + e.value.len()) as u64 + ENTRY_UNITS
}

impl Job {
    /// A flush of `mem` into level 1, whose current state is `level`. Its steps first key the
    /// memtable's entries by fingerprint and sort them, [`SORT_CHUNK`] at a time; the chunks
    /// are then merged by key and sequence number (a key's versions straddling two chunks
    /// come out newest first) as the run is written.
    pub fn flush(
        s: &Setup,
        mem: Arc<Memtable>,
        level: &super::version::Level,
        bottom: bool,
    ) -> Result<Job> {
        let entries = mem.len() as u64;
        // Units of every entry (key and value bytes plus ENTRY_UNITS), and their sorting share.
        let units_all = mem.user_bytes() + ENTRY_UNITS * entries;
        let total = units_all + units_all / SORT_SHARE;
        let input = mem.iter(Bound::Unbounded, Bound::Unbounded, false);
        let mut job = Job::new(
            s,
            Kind::Flush(mem),
            0,
            Vec::new(),
            Box::new(std::iter::empty()),
            level,
            entries,
            total,
            bottom,
        )?;
        job.source = None;
        job.sorting = Some(Sorting {
            input,
            chunks: Vec::new(),
            snapshots: s.snapshots.clone(),
            bottom,
            merge_op: s.merge_op.clone(),
        });
        Ok(job)
    }

    /// A merge of every run of `levels[level]` into a run of the next level.
    pub fn merge(
        s: &Setup,
        level: usize,
        inputs: Vec<Arc<Table>>,
        next: &super::version::Level,
        bottom: bool,
    ) -> Result<Job> {
        let mut sources: Vec<EntryIter> = Vec::with_capacity(inputs.len());
        for t in &inputs {
            sources.push(Box::new(t.run()?.iter(
                Bound::Unbounded,
                Bound::Unbounded,
                false,
                Purpose::Merge,
            )));
        }
        let entries: u64 = inputs.iter().map(|t| t.meta().entries).sum();
        let total: u64 = inputs
            .iter()
            .map(|t| t.meta().user_bytes + ENTRY_UNITS * t.meta().entries)
            .sum();
        let source: EntryIter = Box::new(MergeIter::new(sources, false));
        Job::new(
            s,
            Kind::Merge { level },
            level + 1,
            inputs,
            source,
            next,
            entries,
            total,
            bottom,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        s: &Setup,
        kind: Kind,
        target: usize,
        inputs: Vec<Arc<Table>>,
        source: EntryIter,
        target_level: &super::version::Level,
        entries: u64,
        total: u64,
        bottom: bool,
    ) -> Result<Job> {
        if let Some(d) = &target_level.damage {
            // Adding a run needs the level's old entries; a rebuild from its runs is not built.
            return Err(Error::corruption(
                "boa routing filter",
                target_level.filter_at.map(|(e, _)| e.start),
                format!("level {} cannot take a run: {d}", target + 1),
            ));
        }
        let run = u8::try_from(target_level.runs.len())
            .map_err(|_| Error::corruption("boa", None, "a level of over 255 runs"))?;
        let shape = Shape::for_runs(entries, s.run_bits, s.check_bits);
        let mut filter = FilterBuilder::new(target_level.filter.as_ref(), shape, run, entries)?;
        filter.charge_to(s.store);
        let purpose = match kind {
            Kind::Flush(_) => Purpose::Flush,
            Kind::Merge { .. } => Purpose::Merge,
        };
        let opts = RunOptions {
            bloom_bits_per_key: 0,
            purpose,
            extent_pages: s.extent_pages,
        };
        Ok(Job {
            kind,
            target,
            inputs,
            source: Some(
                Compactor::new(source, s.snapshots.clone(), bottom, s.merge_op.clone())
                    .with_key_prefix(PREFIX_LEN),
            ),
            sorting: None,
            builder: Some(RunBuilder::new(s.store.clone(), opts)),
            filter: Some(filter),
            spent: false,
            run_done: false,
            filter_write: None,
            store: s.store.clone(),
            group: Vec::new(),
            seed: s.seed,
            total,
            done: 0,
        })
    }

    /// Tests: the chunks a flush has sorted so far; `None` once its input is sorted (or for a
    /// merge).
    #[cfg(test)]
    pub fn sorted_chunks(&self) -> Option<usize> {
        self.sorting.as_ref().map(|s| s.chunks.len())
    }

    /// What the job's writes count as.
    pub fn purpose(&self) -> Purpose {
        match self.kind {
            Kind::Flush(_) => Purpose::Flush,
            Kind::Merge { .. } => Purpose::Merge,
        }
    }

    /// Sorts whole chunks of a flush's input until `budget` units are spent (each entry
    /// charged its units / [`SORT_SHARE`]); once the input is spent, the chunks' merge becomes
    /// the job's source. Returns the units charged.
    fn sort_step(&mut self, budget: u64) -> Result<u64> {
        let Some(sorting) = self.sorting.as_mut() else {
            return Ok(0);
        };
        let mut did = 0u64;
        while did < budget.max(1) {
            let mut chunk = Vec::with_capacity(SORT_CHUNK);
            for r in sorting.input.by_ref().take(SORT_CHUNK) {
                let e = r?;
                let fp = Fingerprint::of(self.seed, &e.key);
                did += units(&e) / SORT_SHARE;
                chunk.push(Entry {
                    key: Arc::from(run_key(&fp, &e.key)),
                    ..e
                });
            }
            if chunk.is_empty() {
                let Some(done) = self.sorting.take() else {
                    break;
                };
                let chunks: Vec<EntryIter> = done
                    .chunks
                    .into_iter()
                    .map(|c| Box::new(c.into_iter().map(Ok)) as EntryIter)
                    .collect();
                let merged: EntryIter = Box::new(MergeIter::new(chunks, false));
                self.source = Some(
                    Compactor::new(merged, done.snapshots, done.bottom, done.merge_op)
                        .with_key_prefix(PREFIX_LEN),
                );
                break;
            }
            // A stable sort: a key's versions, newest first in the memtable, stay so.
            chunk.sort_by(|a, b| a.key.cmp(&b.key));
            sorting.chunks.push(chunk);
        }
        Ok(did)
    }

    /// Moves about `budget` units of entries to the output (a flush first sorts its input in
    /// steps of the same budget); once the input is spent, finishes the run and writes the
    /// level's new filter in steps of about `budget` bytes (a step finishing a 45-million-entry
    /// merge wrote its 91 MB filter at once, 3.4 s in a paced writer's put); `true` once the
    /// run and its filter are written.
    pub fn step(&mut self, budget: u64) -> Result<bool> {
        if self.spent {
            return self.finish_step(budget);
        }
        if self.sorting.is_some() {
            let did = self.sort_step(budget)?;
            self.done += did;
            if self.sorting.is_some() || did >= budget.max(1) {
                return Ok(false);
            }
        }
        let Some(source) = self.source.as_mut() else {
            return Err(Error::InvalidOption(
                "boa: a job without input stepped".into(),
            ));
        };
        let mut did = 0u64;
        while did < budget.max(1) {
            let Some(r) = source.next_group(&mut self.group) else {
                self.done += did;
                self.spent = true;
                return Ok(false);
            };
            r?;
            let Some(first) = self.group.first() else {
                continue;
            };
            let Some((hi, key)) = split_run_key(&first.key) else {
                return Err(Error::corruption(
                    "boa run",
                    None,
                    "a key without fingerprint",
                ));
            };
            let fp = Fingerprint::of(self.seed, key);
            if fp.hi != hi {
                return Err(Error::corruption(
                    "boa run",
                    None,
                    format!(
                        "key of {} bytes stored under another fingerprint",
                        key.len()
                    ),
                ));
            }
            let (Some(builder), Some(filter)) = (self.builder.as_mut(), self.filter.as_mut())
            else {
                return Err(Error::InvalidOption("boa: a finished job stepped".into()));
            };
            let shape = filter.shape();
            filter.add(
                fp.prefix(shape.prefix_bits),
                fp.check(self.target, shape.check_bits),
            )?;
            for e in &self.group {
                builder.add(e)?;
                did += units(e);
            }
        }
        self.done += did;
        Ok(false)
    }

    /// A step after the input is spent: the run's finishing (index pages, header), then the
    /// filter's pages; true once both are written (at once for a run that kept no entry).
    fn finish_step(&mut self, budget: u64) -> Result<bool> {
        let Some(builder) = self.builder.as_mut() else {
            return Err(Error::InvalidOption("boa: a finished job stepped".into()));
        };
        if builder.entries() == 0 {
            return Ok(true);
        }
        if !self.run_done {
            self.run_done = builder.finish_step(budget)?;
            // A finishing step that does not complete spent about its budget.
            self.done += if self.run_done {
                PAGE_SIZE as u64
            } else {
                budget
            };
            return Ok(false);
        }
        let purpose = self.purpose();
        let w = match &mut self.filter_write {
            Some(w) => w,
            None => {
                let Some(fb) = self.filter.take() else {
                    return Err(Error::InvalidOption("boa: a filter finished twice".into()));
                };
                self.filter_write
                    .insert(FilterWrite::new(fb.finish()?, &self.store, purpose))
            }
        };
        let before = w.written();
        let done = w.step(budget)?;
        self.done += w.written() - before;
        Ok(done)
    }

    /// The finished output: the run builder (finished, or with no entries: every input
    /// compacted away) and the written filter (none for a run without entries).
    pub fn take_output(&mut self) -> Option<(RunBuilder, Option<FilterWrite>)> {
        Some((self.builder.take()?, self.filter_write.take()))
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some(b) = self.builder.take() {
            b.abandon();
        }
    }
}
