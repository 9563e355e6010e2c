//! Branches: the substrate's immutable runs (static B+-trees with a quotient filter), shared by
//! reference between trunk nodes, with the size samples the flush policy estimates from.
//!
//! A branch's reference count is its `Arc`'s: one per trunk-node reference in every version
//! still alive (the published one, the last committed one, readers' and tasks' snapshots), plus
//! the holds of in-flight tasks and iterators. Its extents go back to the allocator when the
//! last reference drops, which, because the last committed trunk holds a reference, is only
//! after a manifest commit that no longer lists it is durable and no reader can reach it
//! (DESIGN.md's reuse rule).

use std::sync::{Arc, OnceLock};

use crate::entry::Entry;
use crate::error::Result;
use crate::memtable::ENTRY_OVERHEAD;
use crate::run::{Run, RunMeta};
use crate::storage::{PageFile, Purpose};

/// A key as trunk nodes hold it (pivots, ranges, sample points).
pub type Key = Arc<[u8]>;

/// The accounting unit of sizes: key + value + the memtable's per-entry overhead, so that a
/// full memtable is `memtable_bytes` units.
pub fn entry_units(e: &Entry) -> u64 {
    e.user_bytes() as u64 + ENTRY_OVERHEAD
}

/// Units of `entries` entries holding `user_bytes` bytes of keys and values.
pub fn units(entries: u64, user_bytes: u64) -> u64 {
    user_bytes.saturating_add(entries.saturating_mul(ENTRY_OVERHEAD))
}

/// Most points a sample keeps (between half and all of this after thinning).
const SAMPLE_POINTS: usize = 128;

/// Where a branch's data lies in key space: points `(key, units before key)` in key order,
/// so that the units of any key range are estimated without reading the branch.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    points: Vec<(Key, u64)>,
    total: u64,
    /// The largest key, when known: everything lies at or below it.
    max: Option<Key>,
}

impl Sample {
    /// A sample from points (ascending keys, non-decreasing units), the branch's total and its
    /// largest key.
    pub fn new(points: Vec<(Key, u64)>, total: u64, max: Option<Key>) -> Sample {
        Sample { points, total, max }
    }

    /// Estimated units of the entries with key below `key` (`None`: all of them).
    pub fn below(&self, key: Option<&[u8]>) -> u64 {
        let Some(key) = key else {
            return self.total;
        };
        if self.max.as_ref().is_some_and(|m| key > m.as_ref()) {
            return self.total;
        }
        let i = self.points.partition_point(|(k, _)| k.as_ref() < key);
        if i < self.points.len() && self.points[i].0.as_ref() == key {
            return self.points[i].1;
        }
        if i == 0 {
            return 0;
        }
        // Between point i-1 and the next one: half of that segment.
        let lo = self.points[i - 1].1;
        let hi = self.points.get(i).map_or(self.total, |p| p.1);
        lo + (hi.saturating_sub(lo)) / 2
    }

    /// Estimated units in `[lo, hi)` (`hi` `None`: unbounded).
    pub fn between(&self, lo: &[u8], hi: Option<&[u8]>) -> u64 {
        let a = if lo.is_empty() {
            0
        } else {
            self.below(Some(lo))
        };
        self.below(hi).saturating_sub(a)
    }

    /// The points with the units of the segment each starts, restricted to `[lo, hi)`.
    pub fn segments(&self, lo: &[u8], hi: Option<&[u8]>) -> Vec<(Key, u64)> {
        let mut out = Vec::new();
        for (i, (k, c)) in self.points.iter().enumerate() {
            let next = self.points.get(i + 1).map_or(self.total, |p| p.1);
            if k.as_ref() >= lo && hi.is_none_or(|h| k.as_ref() < h) {
                out.push((k.clone(), next.saturating_sub(*c)));
            }
        }
        out
    }

    /// Total units of the branch.
    pub fn total(&self) -> u64 {
        self.total
    }
}

/// Builds a [`Sample`] while a branch is written, at no I/O: a point every `step` units, at a
/// key boundary, with the step doubling (and every other point dropped) whenever the points
/// fill up.
#[derive(Debug)]
pub struct Sampler {
    points: Vec<(Key, u64)>,
    step: u64,
    next_at: u64,
    cum: u64,
    last: Option<Key>,
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler {
            points: Vec::new(),
            step: 4096,
            next_at: 0,
            cum: 0,
            last: None,
        }
    }
}

impl Sampler {
    /// Records an entry written to the branch (in entry order).
    pub fn add(&mut self, e: &Entry) {
        let new_key = self.last.as_ref().is_none_or(|k| **k != *e.key);
        if new_key {
            if self.cum >= self.next_at {
                self.points.push((e.key.clone(), self.cum));
                self.next_at = self.cum + self.step;
                if self.points.len() >= SAMPLE_POINTS {
                    let mut i = 0;
                    self.points.retain(|_| {
                        i += 1;
                        i % 2 == 1
                    });
                    self.step *= 2;
                }
            }
            self.last = Some(e.key.clone());
        }
        self.cum += entry_units(e);
    }

    /// The sample of everything added.
    pub fn finish(self) -> Sample {
        Sample::new(self.points, self.cum, self.last)
    }
}

/// One branch: a run with an id (unique and increasing, never reused within a process).
pub struct Branch {
    /// The branch id (persisted in the trunk metadata).
    pub id: u64,
    meta: RunMeta,
    run: OnceLock<Arc<Run>>,
    sample: OnceLock<Sample>,
    store: Arc<PageFile>,
    /// Whether dropping the branch returns its extents to the allocator: set once the branch
    /// is part of a trunk (built, or decoded from metadata that passed every check). A branch
    /// of metadata refused part-way must free nothing: its pages may be in use, and the
    /// allocator may punch what it is given out of the data file.
    owned: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Branch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Branch({}: {} entries)", self.id, self.meta.entries)
    }
}

impl Branch {
    /// A branch just built, with the sample taken while writing it.
    pub fn new(id: u64, run: Run, sample: Sample, store: Arc<PageFile>) -> Arc<Branch> {
        let b = Branch::from_meta(id, run.meta().clone(), store);
        b.own();
        let _ = b.run.set(Arc::new(run));
        let _ = b.sample.set(sample);
        Arc::new(b)
    }

    /// A branch known from the trunk metadata: its run is opened, and its sample read from
    /// its index pages, on first use (a damaged branch fails the reads that need it, not the
    /// open). It frees nothing when dropped until [`Branch::own`] is called.
    pub fn from_meta(id: u64, meta: RunMeta, store: Arc<PageFile>) -> Branch {
        Branch {
            id,
            meta,
            run: OnceLock::new(),
            sample: OnceLock::new(),
            store,
            owned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Makes the branch return its extents to the allocator when it is dropped.
    pub fn own(&self) {
        self.owned.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The run's metadata.
    pub fn meta(&self) -> &RunMeta {
        &self.meta
    }

    /// The open run (opened now if it was not yet).
    pub fn run(&self) -> Result<&Arc<Run>> {
        if let Some(r) = self.run.get() {
            return Ok(r);
        }
        let run = Arc::new(Run::open(self.store.clone(), self.meta.clone())?);
        Ok(self.run.get_or_init(|| run))
    }

    /// Whether the run is open (its filter in memory).
    pub fn is_open(&self) -> bool {
        self.run.get().is_some()
    }

    /// The run, if it is open.
    pub fn opened(&self) -> Option<&Arc<Run>> {
        self.run.get()
    }

    fn max_key(&self) -> Option<Key> {
        (self.meta.entries > 0).then(|| Key::from(&self.meta.max_key[..]))
    }

    /// Total units of the branch.
    pub fn units(&self) -> u64 {
        units(self.meta.entries, self.meta.user_bytes)
    }

    /// Whether the branch has keys that may lie in `[lo, hi)`.
    pub fn overlaps(&self, lo: &[u8], hi: Option<&[u8]>) -> bool {
        self.meta.entries > 0
            && self.meta.max_key.as_slice() >= lo
            && hi.is_none_or(|h| self.meta.min_key.as_slice() < h)
    }

    /// Whether every key of the branch lies in `[lo, hi)`.
    pub fn within(&self, lo: &[u8], hi: Option<&[u8]>) -> bool {
        self.meta.entries == 0
            || (self.meta.min_key.as_slice() >= lo
                && hi.is_none_or(|h| self.meta.max_key.as_slice() < h))
    }

    /// Estimated units in `[lo, hi)` without any I/O: from the sample when it is loaded,
    /// else the whole branch's (an over-estimate; for bookkeeping only).
    pub fn units_between(&self, lo: &[u8], hi: Option<&[u8]>) -> u64 {
        match self.sample.get() {
            Some(s) => s.between(lo, hi),
            None => self.units(),
        }
    }

    /// The size sample: from the build, or read once from the run's top index levels; if that
    /// fails, a two-point sample from the metadata (estimates only steer the policy).
    pub fn sample(&self) -> &Sample {
        self.sample.get_or_init(|| {
            self.sample_from_index().unwrap_or_else(|_| {
                let mut points = Vec::new();
                if self.meta.entries > 0 {
                    points.push((Key::from(&self.meta.min_key[..]), 0));
                }
                Sample::new(points, self.units(), self.max_key())
            })
        })
    }

    fn sample_from_index(&self) -> Result<Sample> {
        let run = self.run()?;
        let total = self.units();
        let p = Purpose::Merge;
        let Some(root) = run.root_node(p)? else {
            return Ok(Sample::new(Vec::new(), total, None));
        };
        if root.level == 0 {
            let points = vec![(Key::from(&self.meta.min_key[..]), 0)];
            return Ok(Sample::new(points, total, self.max_key()));
        }
        // The root's children, or their children when the root is narrow.
        let mut nodes = vec![root];
        if nodes[0].level >= 2 && nodes[0].count < SAMPLE_POINTS / 4 {
            let root = nodes.remove(0);
            for i in 0..root.count {
                nodes.push(run.child_node(&root, i, p)?);
            }
        }
        let mut points = Vec::new();
        let mut cum = 0u64;
        for n in &nodes {
            for i in 0..n.count {
                let item = n.index(i)?;
                points.push((Key::from(&item.key[..]), cum));
                cum = cum.saturating_add(units(item.entries, item.bytes));
            }
        }
        Ok(Sample::new(points, total.max(cum), self.max_key()))
    }
}

impl Drop for Branch {
    fn drop(&mut self) {
        if !*self.owned.get_mut() {
            return;
        }
        for e in &self.meta.extents {
            self.store.alloc().release(*e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Kind;

    #[test]
    fn sampler_estimates_ranges() {
        let mut s = Sampler::default();
        let mut total = 0;
        for i in 0..100_000u64 {
            let e = Entry::new(format!("k{i:08}").as_bytes(), i + 1, Kind::Put, &[0u8; 50]);
            total += entry_units(&e);
            s.add(&e);
        }
        let s = s.finish();
        assert_eq!(s.total(), total);
        assert!(s.points.len() <= SAMPLE_POINTS);
        let per = total / 100_000;
        for (a, b) in [
            (0u64, 50_000u64),
            (10_000, 20_000),
            (99_000, 100_000),
            (25_000, 75_123),
        ] {
            let lo = format!("k{a:08}");
            let hi = format!("k{b:08}");
            let est = s.between(lo.as_bytes(), Some(hi.as_bytes()));
            let want = (b - a) * per;
            let err = est.abs_diff(want);
            assert!(err <= total / 50, "[{a}, {b}): {est} vs {want}");
        }
        assert_eq!(s.between(b"", None), total);
        assert_eq!(s.below(Some(b"a")), 0);
        assert_eq!(s.below(Some(b"z")), total);
        let segs = s.segments(b"", None);
        assert_eq!(segs.iter().map(|x| x.1).sum::<u64>(), total);
    }

    #[test]
    fn versions_of_a_key_stay_in_one_segment() {
        let mut s = Sampler::default();
        for i in 0..1000u64 {
            for v in 0..20u64 {
                s.add(&Entry::new(
                    format!("k{i:04}").as_bytes(),
                    100 - v,
                    Kind::Put,
                    &[1; 100],
                ));
            }
        }
        let s = s.finish();
        let keys: Vec<&Key> = s.points.iter().map(|p| &p.0).collect();
        let mut dedup = keys.clone();
        dedup.dedup();
        assert_eq!(keys.len(), dedup.len(), "a key starts two segments");
    }
}
