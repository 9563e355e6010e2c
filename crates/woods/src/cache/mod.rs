//! The buffer pool: a CLOCK cache of verified pages, bounded by `cache_bytes`, sharded so that
//! concurrent readers rarely meet on one lock. A page handed out is an `Arc`; holding it pins the
//! bytes (eviction only drops the cache's reference).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::storage::{AlignedBuf, PAGE_SIZE};

/// A page as the cache holds it: `PAGE_SIZE` aligned bytes, checksum verified.
pub type PageRef = Arc<AlignedBuf>;

const SHARDS: usize = 16;

struct Frame {
    page: u64,
    data: PageRef,
    referenced: bool,
}

struct Shard {
    map: HashMap<u64, usize>,
    frames: Vec<Frame>,
    capacity: usize,
    hand: usize,
}

/// Cache counters.
#[derive(Clone, Debug, Default)]
pub struct CacheStats {
    pub capacity_pages: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

/// The CLOCK buffer pool.
pub struct Cache {
    shards: Vec<Mutex<Shard>>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    capacity: usize,
}

impl Cache {
    /// A cache holding at most `bytes / PAGE_SIZE` pages (at least one per shard).
    pub fn new(bytes: u64) -> Cache {
        let pages = ((bytes / PAGE_SIZE as u64) as usize).max(SHARDS);
        let per = pages / SHARDS;
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    map: HashMap::with_capacity(per),
                    frames: Vec::with_capacity(per),
                    capacity: per,
                    hand: 0,
                })
            })
            .collect();
        Cache {
            shards,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            capacity: per * SHARDS,
        }
    }

    fn shard(&self, page: u64) -> &Mutex<Shard> {
        // Spread neighbouring pages over shards (Fibonacci hashing).
        let h = page.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59;
        &self.shards[h as usize % SHARDS]
    }

    pub fn get(&self, page: u64) -> Option<PageRef> {
        let mut s = self.shard(page).lock();
        if let Some(&i) = s.map.get(&page) {
            let f = &mut s.frames[i];
            f.referenced = true;
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Some(f.data.clone());
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Inserts (or replaces) a page.
    pub fn insert(&self, page: u64, data: PageRef) {
        let mut s = self.shard(page).lock();
        if let Some(&i) = s.map.get(&page) {
            s.frames[i].data = data;
            s.frames[i].referenced = true;
            return;
        }
        if s.frames.len() < s.capacity {
            let i = s.frames.len();
            s.frames.push(Frame {
                page,
                data,
                referenced: true,
            });
            s.map.insert(page, i);
            return;
        }
        // CLOCK: clear reference bits until an unreferenced frame comes round.
        loop {
            let h = s.hand;
            s.hand = (h + 1) % s.capacity;
            if s.frames[h].referenced {
                s.frames[h].referenced = false;
                continue;
            }
            let old = s.frames[h].page;
            s.map.remove(&old);
            s.frames[h] = Frame {
                page,
                data,
                referenced: true,
            };
            s.map.insert(page, h);
            self.evictions.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }

    /// Drops a page if cached (its location is being rewritten or freed).
    pub fn invalidate(&self, page: u64) {
        let mut s = self.shard(page).lock();
        if let Some(i) = s.map.remove(&page) {
            // Leave the frame in place but unreachable and first in line for eviction; its data
            // is replaced by an empty buffer so the memory goes back now.
            s.frames[i].page = u64::MAX;
            s.frames[i].referenced = false;
            s.frames[i].data = Arc::new(AlignedBuf::zeroed(0));
        }
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            capacity_pages: self.capacity as u64,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_hits() {
        let c = Cache::new(64 * PAGE_SIZE as u64);
        for p in 0..1000u64 {
            c.insert(p, Arc::new(AlignedBuf::zeroed(8)));
        }
        let held: usize = (0..1000u64).filter(|&p| c.get(p).is_some()).count();
        assert!(held <= 64, "held {held}");
        assert!(held > 0);
        c.insert(5000, Arc::new(AlignedBuf::zeroed(8)));
        assert!(c.get(5000).is_some());
        c.invalidate(5000);
        assert!(c.get(5000).is_none());
    }
}
