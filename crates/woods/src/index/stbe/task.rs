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
            self.current = Some(self.run.iter(
                bound_lo(&lo),
                hi.map_or(std::ops::Bound::Unbounded, |h| {
                    std::ops::Bound::Excluded(h.to_vec())
                }),
                false,
                Purpose::Merge,
            ));
        }
    }
}

/// The lower bound of a range starting at `lo` (empty: unbounded).
pub fn bound_lo(lo: &[u8]) -> std::ops::Bound<Vec<u8>> {
    if lo.is_empty() {
        std::ops::Bound::Unbounded
    } else {
        std::ops::Bound::Included(lo.to_vec())
    }
}

/// Sorts ranges and joins those that touch or overlap.
pub fn coalesce(mut ranges: Vec<(Key, Option<Key>)>) -> Vec<(Key, Option<Key>)> {
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

/// Dead-data estimate of a leaf compaction: every `PROBE_EVERY`-th new key of the output is
/// looked up in the filters of the leaf's older branches; a hit means the key overwrites or
/// deletes older data there (false positives: about 1/256).
pub struct Probe {
    older: Vec<Arc<Branch>>,
    seen: u64,
    probes: u64,
    hits: u64,
}

const PROBE_EVERY: u64 = 16;

impl Probe {
    pub fn new(older: Vec<Arc<Branch>>) -> Probe {
        Probe {
            older,
            seen: 0,
            probes: 0,
            hits: 0,
        }
    }

    fn key(&mut self, key: &[u8]) {
        self.seen += 1;
        if self.older.is_empty() || self.seen % PROBE_EVERY != 0 {
            return;
        }
        self.probes += 1;
        let h = hash64(key);
        let hit = self.older.iter().any(|b| {
            let m = b.meta();
            key >= m.min_key.as_slice()
                && key <= m.max_key.as_slice()
                && b.run().is_ok_and(|r| r.may_contain_hash(h))
        });
        if hit {
            self.hits += 1;
        }
    }

    /// The share of the output estimated to shadow older data.
    pub fn share(&self) -> f64 {
        if self.probes == 0 {
            0.0
        } else {
            self.hits as f64 / self.probes as f64
        }
    }
}

/// How outputs are written.
#[derive(Clone, Copy, Debug)]
pub struct BuildOptions {
    pub remainder_bits: u32,
    pub extent_pages: u64,
    pub purpose: Purpose,
}

/// A branch being built from a sorted input, in steps.
pub struct Build {
    input: Compactor<Counted>,
    consumed: Arc<AtomicU64>,
    builder: RunBuilder,
    sampler: Sampler,
    last_key: Option<Key>,
    probe: Option<Probe>,
    finished: bool,
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
            input: Compactor::new(counted, snapshots, bottom, merge_op),
            consumed,
            builder: RunBuilder::with_filter(store, run_opts, spec),
            sampler: Sampler::default(),
            last_key: None,
            probe,
            finished: false,
        }
    }

    /// A compaction of `sources`: each branch read within its ranges.
    #[allow(clippy::too_many_arguments)]
    pub fn compaction(
        store: Arc<PageFile>,
        sources: &[(Arc<Branch>, Vec<(Key, Option<Key>)>)],
        snapshots: Vec<u64>,
        bottom: bool,
        merge_op: Option<Arc<dyn MergeOperator>>,
        opts: BuildOptions,
        probe: Option<Probe>,
    ) -> Result<Build> {
        let mut iters: Vec<EntryIter> = Vec::with_capacity(sources.len());
        for (b, ranges) in sources {
            let ranges: Vec<(Key, Option<Key>)> = ranges
                .iter()
                .filter(|(lo, hi)| b.overlaps(lo, hi.as_deref()))
                .cloned()
                .collect();
            if ranges.is_empty() {
                continue;
            }
            iters.push(Box::new(Ranges {
                run: b.run()?.clone(),
                ranges: ranges.into_iter(),
                current: None,
            }));
        }
        let merged: EntryIter = Box::new(MergeIter::new(iters, false));
        Ok(Build::new(
            store, merged, snapshots, bottom, merge_op, opts, probe,
        ))
    }

    /// Units of input consumed so far.
    pub fn consumed(&self) -> u64 {
        self.consumed.load(Ordering::Relaxed)
    }

    /// Merges input until `budget` more units are consumed or the input ends (`true`).
    /// Returns the units consumed in this step.
    pub fn step(&mut self, budget: u64) -> Result<(u64, bool)> {
        let start = self.consumed();
        while !self.finished && self.consumed() - start < budget {
            match self.input.next() {
                Some(Ok(e)) => {
                    self.builder.add(&e)?;
                    self.sampler.add(&e);
                    let new_key = self.last_key.as_ref().is_none_or(|k| **k != *e.key);
                    if new_key {
                        if let Some(p) = &mut self.probe {
                            p.key(&e.key);
                        }
                        self.last_key = Some(e.key.clone());
                    }
                }
                Some(Err(e)) => return Err(e),
                None => self.finished = true,
            }
        }
        Ok((self.consumed() - start, self.finished))
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
