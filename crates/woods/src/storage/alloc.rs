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

/// A run of contiguous pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
}

/// Free-space map over the data file's pages.
///
/// Once [`Allocator::punch_holes_in`] names the data file, every released extent (and every
/// range free when it is called) is punched out of the file, so that freed space goes back to the
/// file system as RocksDB's deleted table files do, instead of staying allocated inside the file.
/// A release happens only when the reuse rule allows the pages to be overwritten, so a hole is
/// never where a reader or the last synced manifest could look.
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

    /// Punches nothing more, for good: the index is closing, and the extents its structures
    /// give back as they are dropped are still what the last manifest names.
    pub fn stop_punching(&self) {
        self.punch_stopped.store(true, Ordering::Release);
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
            return Extent { start, pages };
        }
        // Extend: if the last free range touches the end, use it as the start.
        let mut start = s.end;
        if let Some((&st, &len)) = s.free.iter().next_back() {
            if st + len == s.end {
                s.free.remove(&st);
                s.free_pages -= len;
                start = st;
            }
        }
        s.end = start + pages;
        Extent { start, pages }
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
                pages -= take;
                out.push(Extent { start, pages: take });
            }
        }
        if pages > 0 {
            out.push(self.alloc(pages));
        }
        out
    }

    /// Returns an extent to the free space (punched out of the file first, if punching: once
    /// the extent is free it may be allocated and written at once).
    pub fn release(&self, e: Extent) {
        if e.pages == 0 {
            return;
        }
        self.punch(e);
        let mut s = self.state.lock();
        let mut start = e.start;
        let mut len = e.pages;
        if let Some((&ps, &pl)) = s.free.range(..start).next_back() {
            debug_assert!(
                ps + pl <= start,
                "double free of pages {start}..{}",
                start + len
            );
            if ps + pl == start {
                s.free.remove(&ps);
                start = ps;
                len += pl;
            }
        }
        if let Some(&nl) = s.free.get(&(e.end())) {
            s.free.remove(&e.end());
            len += nl;
        }
        s.free.insert(start, len);
        s.free_pages += e.pages;
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
    fn released_and_initially_free_ranges_are_punched() {
        let m = PUNCH_MIN_PAGES;
        let a = Allocator::from_allocated(
            1,
            &[Extent {
                start: 1 + m,
                pages: m,
            }],
        );
        let holes = Arc::new(Holes::default());
        a.punch_holes_in(holes.clone());
        let p = PAGE_SIZE as u64;
        assert_eq!(
            *holes.0.lock(),
            vec![(p, m * p)],
            "the gap below the extent"
        );
        let x = a.alloc(m + 3);
        let y = a.alloc(1);
        assert!(holes.0.lock().len() == 1, "allocating punches nothing");
        a.release(x);
        a.release(y);
        a.release(Extent {
            start: 1 + m,
            pages: m,
        });
        assert_eq!(
            holes.0.lock()[1..],
            [(x.start * p, (m + 3) * p), ((1 + m) * p, m * p)],
            "each release of at least PUNCH_MIN_PAGES, as released"
        );
        assert_eq!(a.punch_stats(), (m + (m + 3) + m, 0));
        let z = a.alloc(m);
        a.stop_punching();
        a.release(z);
        assert_eq!(holes.0.lock().len(), 3, "nothing is punched once stopped");
        assert_eq!(a.alloc(m), z, "the extent is free all the same");
    }
}
