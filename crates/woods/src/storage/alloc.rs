//! The page allocator: hands out contiguous page ranges (extents) and takes them back.
//!
//! What is allocated is persisted by the manifest (as the extents each commit adds and frees),
//! and the allocator is rebuilt from it on open. The reuse rule of DESIGN.md is the caller's:
//! an index releases an extent only after the manifest record that frees it is synced and no
//! version, snapshot or iterator can reach it (see [`crate::index::Retired`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::{File, PAGE_SIZE};

/// The smallest extent worth punching out of the file when it is released.
pub const PUNCH_MIN_PAGES: u64 = 8;

/// Released extents are punched out of the file only once the free pages not yet punched
/// exceed this fraction (1/`PUNCH_RESERVE_DIVISOR`) of the allocated pages; then the highest
/// of them are punched until half that is left. The rest stay allocated in the file and are
/// written again in place: a direct write into a hole allocates blocks under the file's
/// exclusive lock (blocking every read of the file meanwhile), and each punch waits for all
/// direct I/O in flight on the file.
pub const PUNCH_RESERVE_DIVISOR: u64 = 16;

/// A run of contiguous pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[doc(hidden)]
pub struct Extent {
    pub start: u64,
    pub pages: u64,
}

impl Extent {
    pub fn end(&self) -> u64 {
        self.start + self.pages
    }
}

#[derive(Debug)]
struct State {
    /// Free ranges: start -> length, coalesced.
    free: BTreeMap<u64, u64>,
    /// First page past the end of everything ever allocated.
    end: u64,
    free_pages: u64,
    /// Free ranges released since punching started and not punched out of the file (a subset
    /// of `free`; adjacent ranges are not merged): the reserve reused in place.
    unpunched: BTreeMap<u64, u64>,
    unpunched_pages: u64,
}

impl State {
    /// Forgets `[start, start + pages)` from the unpunched set (it is allocated, or about to be
    /// punched).
    /// Takes `start..start + pages` out of the unpunched reserve; returns the parts of it that
    /// were kept there (still holding their old blocks in the file).
    fn take_unpunched(&mut self, start: u64, pages: u64) -> Vec<Extent> {
        let end = start + pages;
        let hit: Vec<(u64, u64)> = self
            .unpunched
            .range(..end)
            .rev()
            .take_while(|(&s, &l)| s + l > start)
            .map(|(&s, &l)| (s, l))
            .collect();
        let mut kept = Vec::new();
        for (s, l) in hit {
            let (a, b) = (s.max(start), (s + l).min(end));
            kept.push(Extent {
                start: a,
                pages: b - a,
            });
            self.unpunched.remove(&s);
            self.unpunched_pages -= l;
            if s < start {
                self.unpunched.insert(s, start - s);
                self.unpunched_pages += start - s;
            }
            if s + l > end {
                self.unpunched.insert(end, s + l - end);
                self.unpunched_pages += s + l - end;
            }
        }
        kept
    }

    /// Takes `e`, which lies inside one free range, out of the free space.
    fn carve_free(&mut self, e: Extent) {
        let Some((&fs, &fl)) = self.free.range(..=e.start).next_back() else {
            debug_assert!(false, "carving {e:?}, which is not free");
            return;
        };
        debug_assert!(fs + fl >= e.end(), "carving {e:?} from free {fs}+{fl}");
        self.free.remove(&fs);
        if fs < e.start {
            self.free.insert(fs, e.start - fs);
        }
        if fs + fl > e.end() {
            self.free.insert(e.end(), fs + fl - e.end());
        }
        self.free_pages -= e.pages;
    }

    /// Adds `e` to the free space, coalescing it with its neighbours.
    fn insert_free(&mut self, e: Extent) {
        let mut start = e.start;
        let mut len = e.pages;
        if let Some((&ps, &pl)) = self.free.range(..start).next_back() {
            debug_assert!(
                ps + pl <= start,
                "double free of pages {start}..{}",
                start + len
            );
            if ps + pl == start {
                self.free.remove(&ps);
                start = ps;
                len += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(e.end())) {
            self.free.remove(&e.end());
            len += nl;
        }
        self.free.insert(start, len);
        self.free_pages += e.pages;
    }

    /// The unpunched ranges to punch now (taken out of the free space until they are punched):
    /// the highest, until half the reserve is left, once the reserve is exceeded.
    fn over_reserve(&mut self, first_page: u64) -> Vec<Extent> {
        // Saturating: a store may be handed extents it never allocated (a test decodes
        // metadata into a scratch store, whose copies release their extents there), which it
        // keeps as free space past its end.
        let allocated = self.end.saturating_sub(first_page + self.free_pages);
        let reserve = allocated / PUNCH_RESERVE_DIVISOR;
        if self.unpunched_pages <= reserve {
            return Vec::new();
        }
        let mut out = Vec::new();
        while self.unpunched_pages > reserve / 2 {
            let Some((&start, &pages)) = self.unpunched.iter().next_back() else {
                break;
            };
            out.push(self.take_for_punch(Extent { start, pages }));
        }
        out
    }

    /// Takes the unpunched range `e` out of the kept set and out of the free space, to be
    /// punched ([`Allocator::punch_and_free`] gives it back).
    fn take_for_punch(&mut self, e: Extent) -> Extent {
        self.take_unpunched(e.start, e.pages);
        self.carve_free(e);
        e
    }
}

/// Free-space map over the data file's pages.
///
/// Once [`Allocator::punch_holes_in`] names the data file, every released extent (and every
/// range free when it is called) is punched out of the file, so that freed space goes back to the
/// file system as RocksDB's deleted table files do, instead of staying allocated inside the file.
/// A release happens only when the reuse rule allows the pages to be overwritten, so a hole is
/// never where a reader or the last synced manifest could look.
#[doc(hidden)]
pub struct Allocator {
    state: Mutex<State>,
    first_page: u64,
    punch: OnceLock<Arc<dyn File>>,
    punch_stopped: AtomicBool,
    punched_pages: AtomicU64,
    punch_failures: AtomicU64,
}

impl fmt::Debug for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocator")
            .field("state", &*self.state.lock())
            .field("first_page", &self.first_page)
            .field("punched_pages", &self.punched_pages)
            .finish()
    }
}

impl Allocator {
    /// An allocator for a new file whose pages below `first_page` are reserved (the header).
    pub fn new(first_page: u64) -> Allocator {
        Allocator::with_state(
            State {
                free: BTreeMap::new(),
                end: first_page,
                free_pages: 0,
                unpunched: BTreeMap::new(),
                unpunched_pages: 0,
            },
            first_page,
        )
    }

    /// Rebuilds the allocator from the set of allocated extents (in any order, non-overlapping).
    pub fn from_allocated(first_page: u64, allocated: &[Extent]) -> Allocator {
        let mut sorted: Vec<Extent> = allocated.iter().copied().filter(|e| e.pages > 0).collect();
        sorted.sort();
        let mut free = BTreeMap::new();
        let mut free_pages = 0;
        let mut pos = first_page;
        for e in &sorted {
            if e.start > pos {
                free.insert(pos, e.start - pos);
                free_pages += e.start - pos;
            }
            pos = pos.max(e.end());
        }
        Allocator::with_state(
            State {
                free,
                end: pos,
                free_pages,
                unpunched: BTreeMap::new(),
                unpunched_pages: 0,
            },
            first_page,
        )
    }

    fn with_state(state: State, first_page: u64) -> Allocator {
        Allocator {
            state: Mutex::new(state),
            first_page,
            punch: OnceLock::new(),
            punch_stopped: AtomicBool::new(false),
            punched_pages: AtomicU64::new(0),
            punch_failures: AtomicU64::new(0),
        }
    }

    /// From now on, punches released extents out of `file` (the data file these pages are of),
    /// starting with the ranges free now.
    pub fn punch_holes_in(&self, file: Arc<dyn File>) {
        if self.punch.set(file).is_err() {
            return;
        }
        // Under the lock, so that none of these ranges is allocated and written meanwhile.
        let s = self.state.lock();
        for (&start, &pages) in &s.free {
            self.punch(Extent { start, pages });
        }
    }

    /// Punches out the free ranges kept unpunched (they were released under the reuse rule),
    /// then nothing more, for good: the index is closing, and the extents its structures give
    /// back as they are dropped are still what the last manifest names.
    pub fn stop_punching(&self) {
        self.punch_reserve();
        self.punch_stopped.store(true, Ordering::Release);
    }

    /// Punches out the free ranges kept unpunched (the database is idle: nothing is about to
    /// reuse them), so that the file occupies on the device what is allocated.
    pub fn punch_reserve(&self) {
        if !self.punching() {
            return;
        }
        let kept: Vec<Extent> = {
            let mut s = self.state.lock();
            let kept: Vec<Extent> = s
                .unpunched
                .iter()
                .map(|(&start, &pages)| Extent { start, pages })
                .collect();
            kept.into_iter().map(|e| s.take_for_punch(e)).collect()
        };
        self.punch_and_free(kept);
    }

    /// Punches `taken` (ranges carved out of the free space) and gives them back to it.
    fn punch_and_free(&self, taken: Vec<Extent>) {
        if taken.is_empty() {
            return;
        }
        for e in &taken {
            self.punch(*e);
        }
        let mut s = self.state.lock();
        for e in taken {
            s.insert_free(e);
        }
    }

    /// Whether released extents are punched (a file is named and punching has not stopped).
    fn punching(&self) -> bool {
        self.punch.get().is_some() && !self.punch_stopped.load(Ordering::Acquire)
    }

    fn punch(&self, e: Extent) {
        let Some(file) = self.punch.get() else {
            return;
        };
        if self.punch_stopped.load(Ordering::Acquire) {
            return;
        }
        if e.pages < PUNCH_MIN_PAGES {
            // A page or two (a B-tree node's copy-on-write): reused soon by `alloc_scattered`,
            // and a syscall per page would cost more than the space is worth.
            return;
        }
        let page = PAGE_SIZE as u64;
        match file.punch_hole(e.start * page, e.pages * page) {
            Ok(()) => self.punched_pages.fetch_add(e.pages, Ordering::Relaxed),
            // Only space is lost: the pages are free either way.
            Err(_) => self.punch_failures.fetch_add(1, Ordering::Relaxed),
        };
        crate::crashpoint::point("alloc.punch.after");
    }

    /// Pages punched out of the file since it was opened, and punches that failed.
    pub fn punch_stats(&self) -> (u64, u64) {
        (
            self.punched_pages.load(Ordering::Relaxed),
            self.punch_failures.load(Ordering::Relaxed),
        )
    }

    /// A contiguous extent of `pages` pages: the lowest free range that fits, else the file's end.
    pub fn alloc(&self, pages: u64) -> Extent {
        self.alloc_keeping(pages).0
    }

    /// [`Allocator::alloc`] for an extent most of which stays unwritten for long (an append
    /// region's hole): the parts of it that came from the reserve kept for reuse in place are
    /// punched out first, so that the file holds no blocks for pages nobody writes. Without it,
    /// `iam`'s regions kept the old blocks of the space they reused under their holes: a third
    /// of the space it used after an overwrite (docs/results/lsa-iam.md).
    pub fn alloc_sparse(&self, pages: u64) -> Extent {
        let (e, kept) = self.alloc_keeping(pages);
        for k in kept {
            self.punch(k);
        }
        e
    }

    /// [`Allocator::alloc`], with the parts of the extent that were kept unpunched.
    fn alloc_keeping(&self, pages: u64) -> (Extent, Vec<Extent>) {
        let mut s = self.state.lock();
        let found = s
            .free
            .iter()
            .find(|(_, &len)| len >= pages)
            .map(|(&st, &len)| (st, len));
        if let Some((start, len)) = found {
            s.free.remove(&start);
            if len > pages {
                s.free.insert(start + pages, len - pages);
            }
            s.free_pages -= pages;
            let kept = s.take_unpunched(start, pages);
            return (Extent { start, pages }, kept);
        }
        // Extend: if the last free range touches the end, use it as the start.
        let mut start = s.end;
        let mut kept = Vec::new();
        if let Some((&st, &len)) = s.free.iter().next_back() {
            if st + len == s.end {
                s.free.remove(&st);
                s.free_pages -= len;
                kept = s.take_unpunched(st, len);
                start = st;
            }
        }
        s.end = start + pages;
        (Extent { start, pages }, kept)
    }

    /// `pages` pages in as few extents as the free space allows (lowest addresses first), so
    /// that structures writing single pages reuse fragmented space instead of growing the file.
    pub fn alloc_scattered(&self, mut pages: u64) -> Vec<Extent> {
        let mut out = Vec::new();
        {
            let mut s = self.state.lock();
            while pages > 0 {
                let Some((&start, &len)) = s.free.iter().next() else {
                    break;
                };
                s.free.remove(&start);
                let take = len.min(pages);
                if len > take {
                    s.free.insert(start + take, len - take);
                }
                s.free_pages -= take;
                s.take_unpunched(start, take);
                pages -= take;
                out.push(Extent { start, pages: take });
            }
        }
        if pages > 0 {
            out.push(self.alloc(pages));
        }
        out
    }

    /// Returns an extent to the free space. When punching, it is kept allocated in the file
    /// (to be written again in place) while the unpunched free pages are within the reserve
    /// ([`PUNCH_RESERVE_DIVISOR`]); past it, the highest unpunched ranges are punched out, each
    /// taken out of the free space until it is punched (once free, an extent may be allocated
    /// and written at once).
    pub fn release(&self, e: Extent) {
        if e.pages == 0 {
            return;
        }
        crate::crashpoint::point("alloc.release");
        let punching = self.punching();
        let excess = {
            let mut s = self.state.lock();
            s.insert_free(e);
            if !punching {
                return;
            }
            if e.pages >= PUNCH_MIN_PAGES {
                s.unpunched.insert(e.start, e.pages);
                s.unpunched_pages += e.pages;
            }
            // Checked after every release, so the reserve also shrinks with what is allocated.
            s.over_reserve(self.first_page)
        };
        self.punch_and_free(excess);
    }

    /// Free pages kept allocated in the file to be written again in place (not punched out).
    pub fn unpunched_pages(&self) -> u64 {
        self.state.lock().unpunched_pages
    }

    /// Pages in the file (allocated or free), the reserved header included.
    pub fn end(&self) -> u64 {
        self.state.lock().end
    }

    /// Pages currently free below the end.
    pub fn free_pages(&self) -> u64 {
        self.state.lock().free_pages
    }

    pub fn first_page(&self) -> u64 {
        self.first_page
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_and_coalesces() {
        let a = Allocator::new(1);
        let x = a.alloc(4);
        let y = a.alloc(4);
        assert_eq!(x, Extent { start: 1, pages: 4 });
        assert_eq!(y, Extent { start: 5, pages: 4 });
        a.release(x);
        a.release(y);
        assert_eq!(a.free_pages(), 8);
        assert_eq!(a.alloc(8), Extent { start: 1, pages: 8 });
        assert_eq!(a.free_pages(), 0);
    }

    #[test]
    fn rebuild_from_allocated() {
        let a = Allocator::from_allocated(
            1,
            &[
                Extent {
                    start: 10,
                    pages: 2,
                },
                Extent { start: 3, pages: 1 },
            ],
        );
        assert_eq!(a.end(), 12);
        assert_eq!(a.free_pages(), 2 + 6);
        let parts = a.alloc_scattered(9);
        assert_eq!(parts.iter().map(|e| e.pages).sum::<u64>(), 9);
        assert_eq!(parts[0], Extent { start: 1, pages: 2 });
        assert_eq!(a.free_pages(), 0);
        assert_eq!(a.end(), 13);
    }

    /// Records the holes punched into it.
    #[derive(Default)]
    struct Holes(Mutex<Vec<(u64, u64)>>);

    impl File for Holes {
        fn read_exact_at(&self, _: &mut [u8], _: u64) -> crate::error::Result<()> {
            Ok(())
        }
        fn read_at(&self, _: &mut [u8], _: u64) -> crate::error::Result<usize> {
            Ok(0)
        }
        fn write_all_at(&self, _: &[u8], _: u64) -> crate::error::Result<()> {
            Ok(())
        }
        fn sync(&self) -> crate::error::Result<()> {
            Ok(())
        }
        fn len(&self) -> crate::error::Result<u64> {
            Ok(0)
        }
        fn set_len(&self, _: u64) -> crate::error::Result<()> {
            Ok(())
        }
        fn is_direct(&self) -> bool {
            false
        }
        fn punch_hole(&self, off: u64, len: u64) -> crate::error::Result<()> {
            self.0.lock().push((off, len));
            Ok(())
        }
    }

    #[test]
    fn released_ranges_are_kept_within_the_reserve_and_punched_past_it() {
        let m = PUNCH_MIN_PAGES;
        let p = PAGE_SIZE as u64;
        let a = Allocator::from_allocated(
            1,
            &[Extent {
                start: 1 + m,
                pages: 16 * 10 * m,
            }],
        );
        let holes = Arc::new(Holes::default());
        a.punch_holes_in(holes.clone());
        assert_eq!(
            *holes.0.lock(),
            vec![(p, m * p)],
            "the gap below the extent, free at the start"
        );
        let big = Extent {
            start: 1 + m,
            pages: 16 * 10 * m,
        };
        // Within the reserve (a sixteenth of what is allocated): kept, and reused in place.
        let x = a.alloc(m + 3);
        let y = a.alloc(1);
        a.release(x);
        a.release(y);
        assert_eq!(
            holes.0.lock().len(),
            1,
            "a release within the reserve punches nothing"
        );
        assert_eq!(
            a.unpunched_pages(),
            m + 3,
            "single pages are never kept for punching"
        );
        assert_eq!(a.alloc(m + 3), x, "the kept range is reused first");
        assert_eq!(a.unpunched_pages(), 0, "allocated pages are no longer kept");
        // An extent allocated sparse (an append region's hole) punches what it takes from the
        // reserve, and nothing else.
        a.release(x);
        assert_eq!(a.unpunched_pages(), m + 3);
        assert_eq!(a.alloc_sparse(m + 3), x, "the kept range is reused first");
        assert_eq!(a.unpunched_pages(), 0);
        assert_eq!(
            holes.0.lock()[1..],
            [(x.start * p, x.pages * p)],
            "the kept blocks under the new extent are punched"
        );
        holes.0.lock().truncate(1);
        let fresh = a.alloc_sparse(m);
        assert_eq!(
            holes.0.lock().len(),
            1,
            "{fresh:?}: nothing kept, nothing punched"
        );
        a.release(fresh);
        a.release(x);
        // Past the reserve: the highest kept ranges are punched out.
        a.release(big);
        assert_eq!(
            holes.0.lock()[1..],
            [
                (x.start * p, x.pages * p),
                (big.start * p, big.pages * p),
                (fresh.start * p, fresh.pages * p)
            ],
            "nothing is allocated: every kept range is punched, highest first"
        );
        assert_eq!(a.unpunched_pages(), 0);
        // x twice: under the sparse extent, then once released for good.
        assert_eq!(
            a.punch_stats(),
            (m + big.pages + 2 * x.pages + fresh.pages, 0)
        );
        let z = a.alloc(m);
        let w = a.alloc(16 * 4 * m);
        a.release(z);
        assert_eq!(a.unpunched_pages(), m);
        a.stop_punching();
        assert_eq!(
            holes.0.lock().last(),
            Some(&(z.start * p, m * p)),
            "stopping punches what was kept"
        );
        let n = holes.0.lock().len();
        a.release(w);
        assert_eq!(holes.0.lock().len(), n, "nothing is punched once stopped");
        assert_eq!(a.alloc(m), z, "the extents are free all the same");
    }

    /// Random allocations and releases: a punch never touches an allocated page, the free and
    /// kept pages add up, and the kept pages stay within the reserve.
    #[test]
    fn punches_never_touch_allocated_pages() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let seed = crate::testutil::seed();
        let mut rng = SmallRng::seed_from_u64(seed);
        let a = Allocator::new(1);
        let holes = Arc::new(Holes::default());
        a.punch_holes_in(holes.clone());
        let mut live: Vec<Extent> = Vec::new();
        for step in 0..20_000 {
            let before = holes.0.lock().len();
            if live.is_empty() || rng.gen_bool(0.55) {
                let pages = if rng.gen_bool(0.2) {
                    rng.gen_range(1..4)
                } else {
                    rng.gen_range(PUNCH_MIN_PAGES..64)
                };
                if rng.gen_bool(0.2) {
                    live.extend(a.alloc_scattered(pages));
                } else {
                    live.push(a.alloc(pages));
                }
            } else {
                let e = live.swap_remove(rng.gen_range(0..live.len()));
                a.release(e);
            }
            let page = PAGE_SIZE as u64;
            for &(off, len) in &holes.0.lock()[before..] {
                let (lo, hi) = (off / page, (off + len) / page);
                for e in &live {
                    assert!(
                        hi <= e.start || lo >= e.end(),
                        "seed {seed} step {step}: punched {lo}..{hi} over allocated {e:?}"
                    );
                }
            }
            let s = a.state.lock();
            let allocated: u64 = live.iter().map(|e| e.pages).sum();
            assert_eq!(
                s.end - 1 - s.free_pages,
                allocated,
                "seed {seed} step {step}"
            );
            assert_eq!(
                s.unpunched.values().sum::<u64>(),
                s.unpunched_pages,
                "seed {seed} step {step}"
            );
            assert!(s.unpunched_pages <= s.free_pages, "seed {seed} step {step}");
            assert!(
                s.unpunched_pages <= allocated / PUNCH_RESERVE_DIVISOR,
                "seed {seed} step {step}: {} pages kept for {allocated} allocated",
                s.unpunched_pages
            );
        }
        let (punched, _) = a.punch_stats();
        assert!(
            punched > 0,
            "seed {seed}: nothing was punched past the reserve"
        );
    }
}
