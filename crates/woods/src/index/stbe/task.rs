//! Resumable builds of branches: the packed branch of a memtable (incorporation) and the
//! output of a compaction. A [`Build`] keeps its merge iterator, version resolver and
//! [`RunBuilder`] between `work` calls, so that a compaction of any size is done in steps of a
//! bounded number of input bytes, by whichever thread calls `work` next.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::branch::{entry_units, Branch, Key, Sample, Sampler};
use crate::entry::Entry;
use crate::error::Result;
use crate::filter::{hash64, FilterSpec};
use crate::merge::{Compactor, EntryIter, MergeIter};
use crate::options::MergeOperator;
use crate::run::{Run, RunBuilder, RunOptions};
use crate::storage::{PageFile, Purpose};

/// Counts the units of the entries an input stream yields (the work a step did).
struct Counted {
    inner: EntryIter,
    units: Arc<AtomicU64>,
}

impl Iterator for Counted {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        let e = self.inner.next();
        if let Some(Ok(e)) = &e {
            self.units.fetch_add(entry_units(e), Ordering::Relaxed);
        }
        e
    }
}

/// A branch read within key ranges, one after another in key order: one merge source.
struct Ranges {
    run: Arc<Run>,
    /// Pages per read-ahead request.
    readahead: u64,
    ranges: std::vec::IntoIter<(Key, Option<Key>)>,
    current: Option<crate::run::RunIter>,
}

impl Iterator for Ranges {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        loop {
            if let Some(it) = &mut self.current {
                match it.next() {
                    Some(r) => return Some(r),
                    None => self.current = None,
                }
            }
            let (lo, hi) = self.ranges.next()?;
            self.current = Some(self.run.iter_with_readahead(
                bound_lo(&lo),
                hi.map_or(std::ops::Bound::Unbounded, |h| {
                    std::ops::Bound::Excluded(h.to_vec())
                }),
                false,
                Purpose::Merge,
                self.readahead,
            ));
        }
    }
}

/// Key ranges `[lo, hi)` (`hi` `None`: unbounded), sorted.
pub type KeyRanges = Vec<(Key, Option<Key>)>;

/// A compaction input: a branch and the ranges of it to read.
pub type Source = (Arc<Branch>, KeyRanges);

/// The lower bound of a range starting at `lo` (empty: unbounded).
pub fn bound_lo(lo: &[u8]) -> std::ops::Bound<Vec<u8>> {
    if lo.is_empty() {
        std::ops::Bound::Unbounded
    } else {
        std::ops::Bound::Included(lo.to_vec())
    }
}

/// Sorts ranges and joins those that touch or overlap.
pub fn coalesce(mut ranges: KeyRanges) -> KeyRanges {
    ranges.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: Vec<(Key, Option<Key>)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        if let Some(last) = out.last_mut() {
            let touches = last.1.as_ref().is_none_or(|h| lo.as_ref() <= h.as_ref());
            if touches {
                if last.1.is_some() && hi.as_ref().is_none_or(|h| Some(h) > last.1.as_ref()) {
                    last.1 = hi;
                }
                continue;
            }
        }
        out.push((lo, hi));
    }
    out
}

/// Dead-data estimate of a leaf's batch compaction: what a whole-leaf compaction would drop.
/// Every tombstone of the output counts (a whole-leaf compaction drops it); so does the older
/// version each output key shadows, estimated by looking every `PROBE_EVERY`-th key up in the
/// filters of the leaf's older branches (a hit: the key overwrites or deletes older data
/// there; false positives about 1/256) and sizing what it shadows as the key's own entry (a
/// tombstone: an average entry of the older branches).
pub struct Probe {
    older: Vec<Arc<Branch>>,
    avg_old: u64,
    seen: u64,
    probes: u64,
    hits: u64,
    out_units: u64,
    tomb_units: u64,
    shadow_units: u64,
}

const PROBE_EVERY: u64 = 16;

impl Probe {
    pub fn new(older: Vec<Arc<Branch>>) -> Probe {
        let (units, entries) = older.iter().fold((0u64, 0u64), |(u, n), b| {
            (u + b.units(), n + b.meta().entries)
        });
        Probe {
            older,
            avg_old: units.checked_div(entries).unwrap_or(0),
            seen: 0,
            probes: 0,
            hits: 0,
            out_units: 0,
            tomb_units: 0,
            shadow_units: 0,
        }
    }

    fn entry(&mut self, e: &Entry, new_key: bool) {
        let u = entry_units(e);
        self.out_units += u;
        if e.kind == crate::entry::Kind::Delete {
            self.tomb_units += u;
        }
        if !new_key {
            return;
        }
        self.shadow_units += if e.kind == crate::entry::Kind::Delete {
            self.avg_old
        } else {
            u
        };
        self.seen += 1;
        if self.older.is_empty() || !self.seen.is_multiple_of(PROBE_EVERY) {
            return;
        }
        self.probes += 1;
        let h = hash64(&e.key);
        let key: &[u8] = &e.key;
        let hit = self.older.iter().any(|b| {
            let m = b.meta();
            key >= m.min_key.as_slice()
                && key <= m.max_key.as_slice()
                && b.run().is_ok_and(|r| r.may_contain_hashed(key, h))
        });
        if hit {
            self.hits += 1;
        }
    }

    /// Estimated dead units per unit of output (may exceed 1: shadowed data lies in the older
    /// branches).
    pub fn share(&self) -> f64 {
        if self.out_units == 0 {
            return 0.0;
        }
        let hit = if self.probes == 0 {
            0.0
        } else {
            self.hits as f64 / self.probes as f64
        };
        let dead = self.tomb_units as f64 + hit * self.shadow_units as f64;
        (dead / self.out_units as f64).min(4.0)
    }
}

/// How outputs are written.
#[derive(Clone, Copy, Debug)]
pub struct BuildOptions {
    pub remainder_bits: u32,
    pub extent_pages: u64,
    pub purpose: Purpose,
    /// Read-ahead pages of all the sources of a merge together.
    pub readahead_pages: u64,
}

/// A merge source whose first entry has been read (its first read-ahead window loaded).
struct Primed {
    first: Option<Option<Result<Entry>>>,
    inner: EntryIter,
}

impl Primed {
    fn prime(&mut self) {
        if self.first.is_none() {
            self.first = Some(self.inner.next());
        }
    }
}

impl Iterator for Primed {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        match self.first.take() {
            Some(first) => first,
            None => self.inner.next(),
        }
    }
}

/// Budget units one source's first read costs: a read-ahead window of a run.
const PRIME_UNITS: u64 = crate::run::READAHEAD_PAGES * crate::storage::PAGE_SIZE as u64;

/// What the merge is made of once every source is primed.
struct Pending {
    sources: Vec<Primed>,
    primed: usize,
    snapshots: Vec<u64>,
    bottom: bool,
    merge_op: Option<Arc<dyn MergeOperator>>,
}

/// A branch being built from a sorted input, in steps.
pub struct Build {
    /// The sources of a compaction until each has read its first window (a step primes
    /// about a budget's worth of them, so that starting a merge of many branches is spread
    /// over steps too).
    pending: Option<Pending>,
    input: Compactor<Counted>,
    consumed: Arc<AtomicU64>,
    builder: RunBuilder,
    sampler: Sampler,
    last_key: Option<Key>,
    probe: Option<Probe>,
    /// The input has ended.
    finished: bool,
    /// The branch is written (its finish done too).
    complete: bool,
}

impl Build {
    /// A build of `input` (entry order, all versions), keeping the versions live snapshots need
    /// (`bottom`: nothing older exists below, so tombstones and merge operands without a base
    /// may be resolved).
    pub fn new(
        store: Arc<PageFile>,
        input: EntryIter,
        snapshots: Vec<u64>,
        bottom: bool,
        merge_op: Option<Arc<dyn MergeOperator>>,
        opts: BuildOptions,
        probe: Option<Probe>,
    ) -> Build {
        let consumed = Arc::new(AtomicU64::new(0));
        let counted = Counted {
            inner: input,
            units: consumed.clone(),
        };
        let run_opts = RunOptions {
            bloom_bits_per_key: 0,
            purpose: opts.purpose,
            extent_pages: opts.extent_pages,
        };
        let spec = FilterSpec::Quotient {
            remainder_bits: opts.remainder_bits,
        };
        Build {
            pending: None,
            input: Compactor::new(counted, snapshots, bottom, merge_op),
            consumed,
            builder: RunBuilder::with_filter(store, run_opts, spec),
            sampler: Sampler::default(),
            last_key: None,
            probe,
            finished: false,
            complete: false,
        }
    }

    /// A compaction of `sources`: each branch read within its ranges.
    #[allow(clippy::too_many_arguments)]
    pub fn compaction(
        store: Arc<PageFile>,
        sources: &[Source],
        snapshots: Vec<u64>,
        bottom: bool,
        merge_op: Option<Arc<dyn MergeOperator>>,
        opts: BuildOptions,
        probe: Option<Probe>,
    ) -> Result<Build> {
        // The read-ahead windows of one merge, two a source (the one read and the next, read
        // ahead), come to at most `readahead_pages` in all (at least 8 pages a window), however
        // many branches it merges.
        let readahead = (opts.readahead_pages / (2 * sources.len().max(1) as u64))
            .clamp(8, crate::run::READAHEAD_PAGES);
        let mut iters: Vec<Primed> = Vec::with_capacity(sources.len());
        for (b, ranges) in sources {
            let ranges: KeyRanges = ranges
                .iter()
                .filter(|(lo, hi)| b.overlaps(lo, hi.as_deref()))
                .cloned()
                .collect();
            if ranges.is_empty() {
                continue;
            }
            iters.push(Primed {
                first: None,
                inner: Box::new(Ranges {
                    run: b.run()?.clone(),
                    readahead,
                    ranges: ranges.into_iter(),
                    current: None,
                }),
            });
        }
        let empty: EntryIter = Box::new(std::iter::empty());
        let mut build = Build::new(
            store,
            empty,
            Vec::new(),
            bottom,
            merge_op.clone(),
            opts,
            probe,
        );
        build.pending = Some(Pending {
            sources: iters,
            primed: 0,
            snapshots,
            bottom,
            merge_op,
        });
        Ok(build)
    }

    /// Primes sources while the budget lasts; once all are, builds the merge. Returns the
    /// budget spent.
    fn prime(&mut self, budget: u64) -> u64 {
        let Some(p) = &mut self.pending else {
            return 0;
        };
        let mut spent = 0;
        while p.primed < p.sources.len() && spent < budget {
            p.sources[p.primed].prime();
            p.primed += 1;
            spent += PRIME_UNITS;
        }
        if p.primed == p.sources.len() {
            if let Some(p) = self.pending.take() {
                let sources: Vec<EntryIter> = p
                    .sources
                    .into_iter()
                    .map(|s| Box::new(s) as EntryIter)
                    .collect();
                let counted = Counted {
                    inner: Box::new(MergeIter::new(sources, false)),
                    units: self.consumed.clone(),
                };
                self.input = Compactor::new(counted, p.snapshots, p.bottom, p.merge_op);
            }
        }
        spent
    }

    /// Units of input consumed so far.
    pub fn consumed(&self) -> u64 {
        self.consumed.load(Ordering::Relaxed)
    }

    /// Merges input until `budget` more units are consumed, then, once the input has ended,
    /// finishes the branch (index levels, filter, header) in steps of the same budget.
    /// Returns the work done (input units consumed, or the budget spent finishing) and
    /// whether the branch is complete.
    pub fn step(&mut self, budget: u64) -> Result<(u64, bool)> {
        if self.pending.is_some() {
            let spent = self.prime(budget);
            if self.pending.is_some() || spent >= budget {
                return Ok((spent.max(1), false));
            }
        }
        let start = self.consumed();
        while !self.finished && self.consumed() - start < budget {
            match self.input.next() {
                Some(Ok(e)) => {
                    self.builder.add(&e)?;
                    self.sampler.add(&e);
                    let new_key = self.last_key.as_ref().is_none_or(|k| **k != *e.key);
                    if let Some(p) = &mut self.probe {
                        p.entry(&e, new_key);
                    }
                    if new_key {
                        self.last_key = Some(e.key.clone());
                    }
                }
                Some(Err(e)) => return Err(e),
                None => self.finished = true,
            }
        }
        let merged = self.consumed() - start;
        if !self.finished || self.complete {
            return Ok((merged, self.complete));
        }
        if self.builder.entries() == 0 {
            self.complete = true;
            return Ok((merged.max(1), true));
        }
        let left = budget.saturating_sub(merged).max(budget / 4).max(1);
        self.complete = self.builder.finish_step(left)?;
        Ok((merged + left, self.complete))
    }

    /// The dead share the probe measured (0 without one).
    pub fn dead_share(&self) -> f64 {
        self.probe.as_ref().map_or(0.0, Probe::share)
    }

    /// Writes the rest of the branch (index levels, filter, header); `None` when the output
    /// is empty (nothing was written).
    pub fn finish(self) -> Result<Option<(Run, Sample)>> {
        if self.builder.entries() == 0 {
            self.builder.abandon();
            return Ok(None);
        }
        let run = Run::from_builder(self.builder)?;
        Ok(Some((run, self.sampler.finish())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Key {
        Key::from(s.as_bytes())
    }

    #[test]
    fn ranges_coalesce() {
        let r = coalesce(vec![
            (k("m"), Some(k("p"))),
            (k("a"), Some(k("c"))),
            (k("c"), Some(k("f"))),
            (k("x"), None),
            (k("y"), Some(k("z"))),
        ]);
        assert_eq!(
            r,
            vec![
                (k("a"), Some(k("f"))),
                (k("m"), Some(k("p"))),
                (k("x"), None)
            ]
        );
    }
}
