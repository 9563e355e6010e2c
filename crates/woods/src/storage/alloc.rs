//! The page allocator: hands out contiguous page ranges (extents) and takes them back.
//!
//! What is allocated is persisted by the manifest (as the extents each commit adds and frees),
//! and the allocator is rebuilt from it on open. The reuse rule of DESIGN.md is the caller's:
//! an index releases an extent only after the manifest record that frees it is synced and no
//! version, snapshot or iterator can reach it (see [`crate::index::Retired`]).

use std::collections::BTreeMap;

use parking_lot::Mutex;

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
#[derive(Debug)]
pub struct Allocator {
    state: Mutex<State>,
    first_page: u64,
}

impl Allocator {
    /// An allocator for a new file whose pages below `first_page` are reserved (the header).
    pub fn new(first_page: u64) -> Allocator {
        Allocator {
            state: Mutex::new(State {
                free: BTreeMap::new(),
                end: first_page,
                free_pages: 0,
            }),
            first_page,
        }
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
        Allocator {
            state: Mutex::new(State {
                free,
                end: pos,
                free_pages,
            }),
            first_page,
        }
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

    /// Returns an extent to the free space.
    pub fn release(&self, e: Extent) {
        if e.pages == 0 {
            return;
        }
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
}
