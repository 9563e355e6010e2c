//! The buffer pool: a CLOCK cache of verified pages, bounded by `cache_bytes`, sharded so that
//! concurrent readers rarely meet on one lock. A page handed out is an `Arc`; holding it pins the
//! bytes (eviction only drops the cache's reference). A hit takes its shard's lock once and
//! copies nothing; its counters live in the shard, so that readers share no counter either.
//! A miss reads into the buffer of the page the shard evicted last, when no reader still held
//! it ([`Cache::probe`]): a lookup that misses allocates nothing, and the pages alive in a shard
//! are its frames and at most one such spare.
//!
//! Pages come in two classes ([`PageClass`]). Index pages (a run's index pages, a B-tree's inner
//! nodes) are read by every lookup that passes through them; data pages mostly once. Index
//! pages are kept in preference, up to half of each shard ([`index_share`]): while they hold no
//! more than that, a data page coming in evicts a data page, so that a stream of data pages
//! read once (uniform lookups, a scan) cannot push them out, as RocksDB's high-priority pool
//! keeps index and filter blocks (`cache_index_and_filter_blocks_with_high_priority`). Past
//! their share, index pages evict each other, and any page coming in evicts an index page
//! until they are back within it: they may fill a cache that data pages do not want, never
//! more than half of one that data pages want.
//!
//! Memory an index keeps outside the cache because it must (the filters of open runs) is
//! charged to it with [`Cache::reserve`]: the pages the cache holds shrink by as much, so that
//! `cache_bytes` bounds pages and filters together, as RocksDB's block cache bounds data,
//! index and filter blocks when it holds them all. The row cache ([`rows`]) lives inside the same
//! budget: the bytes it holds are taken from the pages.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::storage::{AlignedBuf, PAGE_SIZE};

pub mod rows;

pub use rows::{Row, RowCache};

/// CLOCK: from `hand`, clears reference bits until an unreferenced item comes round, leaves
/// `hand` past it and returns its index (`items` is not empty). The page cache and the row cache
/// evict with it.
fn clock_victim<T>(
    items: &mut [T],
    hand: &mut usize,
    referenced: fn(&mut T) -> &mut bool,
) -> usize {
    loop {
        let i = *hand % items.len();
        *hand = (i + 1) % items.len();
        let r = referenced(&mut items[i]);
        if !*r {
            return i;
        }
        *r = false;
    }
}

/// CLOCK over the frames of one class (`index` or not; one at least is there).
fn clock_victim_of(frames: &mut [Frame], hand: &mut usize, index: bool) -> usize {
    loop {
        let i = *hand % frames.len();
        *hand = (i + 1) % frames.len();
        let f = &mut frames[i];
        if f.index != index {
            continue;
        }
        if !f.referenced {
            return i;
        }
        f.referenced = false;
    }
}

/// Hashes the `u64` keys of the caches' maps (page numbers, keys' hashes) with splitmix64's
/// finalizer: a few instructions where the standard library's SipHash, built to resist chosen
/// keys that these maps never see, took about 4% of a lookup's instructions (callgrind, `lsm`).
#[derive(Default, Clone, Copy)]
pub(crate) struct U64Hasher(u64);

impl Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by u64 keys; FNV-1a keeps any other use correct.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
        }
    }

    fn write_u64(&mut self, x: u64) {
        let mut z = x ^ self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.0 = z ^ (z >> 31);
    }
}

/// A map from `u64` keys hashed with [`U64Hasher`].
pub(crate) type U64Map<V> = HashMap<u64, V, BuildHasherDefault<U64Hasher>>;

/// A page as the cache holds it: `PAGE_SIZE` aligned bytes, checksum verified.
pub type PageRef = Arc<AlignedBuf>;

const SHARDS: usize = 16;

/// How much a page is worth keeping, as its reader says ([`Cache::insert_as`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageClass {
    /// A page most lookups that read it read once (data pages, leaves, blob pages): evicted
    /// first.
    Data,
    /// A page every lookup through its run or tree passes (a run's index pages, a B-tree's
    /// inner nodes): kept in preference to data pages, within [`index_share`] of the cache.
    Index,
}

/// Frames of a shard holding `limit` frames that index pages may keep against data pages: half,
/// as RocksDB's default `high_pri_pool_ratio`. None in a shard of one frame.
pub fn index_share(limit: usize) -> usize {
    limit / 2
}

/// The page number of a frame whose page was invalidated (in no map).
const INVALID: u64 = u64::MAX;

struct Frame {
    page: u64,
    data: PageRef,
    referenced: bool,
    /// Holds a [`PageClass::Index`] page.
    index: bool,
}

struct Shard {
    map: U64Map<usize>,
    frames: Vec<Frame>,
    /// Frames this shard may hold when nothing is reserved.
    capacity: usize,
    /// CLOCK's hand over data frames (and over all frames when no index page is held).
    hand: usize,
    /// CLOCK's hand over index frames.
    index_hand: usize,
    /// Frames holding index pages.
    index_frames: usize,
    /// The buffer of a page evicted while nobody else held it, kept for the next miss to read
    /// into ([`Cache::probe`]).
    spare: Option<PageRef>,
    hits: u64,
    misses: u64,
    evictions: u64,
    index_evictions: u64,
}

/// What [`Cache::probe`] found.
pub enum Probe {
    /// The page, cached.
    Hit(PageRef),
    /// Not cached: a whole-page buffer nobody else holds, to read the page into and insert,
    /// when the shard had one spare.
    Miss(Option<PageRef>),
}

/// Cache counters.
#[derive(Clone, Debug, Default)]
pub struct CacheStats {
    /// Pages the cache may hold with nothing reserved (`cache_bytes` / page size).
    pub capacity_pages: u64,
    /// Bytes charged to the cache by [`Cache::reserve`] (filters of open runs).
    pub reserved_bytes: u64,
    /// Open runs whose filter did not fit the half of the cache filters may take whole, and is
    /// read a page at a time through the cache ([`Cache::try_reserve`]).
    pub paged_filters: u64,
    /// Page reads answered from the cache.
    pub hits: u64,
    /// Page reads that went to the device.
    pub misses: u64,
    /// Pages dropped to make room.
    pub evictions: u64,
    /// Index pages ([`PageClass::Index`]) held now.
    pub index_pages: u64,
    /// Index pages dropped to make room (counted in `evictions` too).
    pub index_evictions: u64,
    /// Bytes the row cache may hold (0: no row cache).
    pub row_capacity_bytes: u64,
    /// Bytes the row cache holds (taken from the pages).
    pub row_bytes: u64,
    /// Point lookups answered from the row cache.
    pub row_hits: u64,
    /// Point lookups the row cache could not answer.
    pub row_misses: u64,
}

/// The CLOCK buffer pool.
#[doc(hidden)]
pub struct Cache {
    shards: Vec<Mutex<Shard>>,
    capacity: usize,
    /// Bytes charged by [`Cache::reserve`]; each shard holds fewer frames by its share.
    reserved: AtomicU64,
    /// [`CacheStats::paged_filters`].
    paged_filters: AtomicU64,
    rows: RowCache,
}

impl Cache {
    /// A cache holding at most `bytes / PAGE_SIZE` pages (at least one per shard), without a
    /// row cache.
    pub fn new(bytes: u64) -> Cache {
        Cache::with_rows(bytes, 0)
    }

    /// A cache of `bytes` in all, of which the row cache may take up to `row_bytes`.
    pub fn with_rows(bytes: u64, row_bytes: u64) -> Cache {
        let pages = ((bytes / PAGE_SIZE as u64) as usize).max(SHARDS);
        let per = pages / SHARDS;
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    map: U64Map::with_capacity_and_hasher(per, Default::default()),
                    frames: Vec::with_capacity(per),
                    capacity: per,
                    hand: 0,
                    index_hand: 0,
                    index_frames: 0,
                    spare: None,
                    hits: 0,
                    misses: 0,
                    evictions: 0,
                    index_evictions: 0,
                })
            })
            .collect();
        Cache {
            shards,
            capacity: per * SHARDS,
            reserved: AtomicU64::new(0),
            paged_filters: AtomicU64::new(0),
            rows: RowCache::new(row_bytes),
        }
    }

    /// The row cache, whose bytes this cache's pages make room for.
    pub fn rows(&self) -> &RowCache {
        &self.rows
    }

    /// Charges `bytes` of memory held outside the cache to it: it holds that many bytes of pages
    /// fewer (evicting as pages come in) until [`Cache::unreserve`]. Charges beyond the capacity
    /// leave the cache holding no pages.
    pub fn reserve(&self, bytes: u64) {
        self.reserved.fetch_add(bytes, Ordering::Relaxed);
        self.shrink();
    }

    /// Gives frames back in every shard held past its limit, at once: a charge frees the pages'
    /// memory when it is made, not as later pages come in (a merge reading past the cache
    /// brings none, and a filter it builds would otherwise sit beside a full cache).
    fn shrink(&self) {
        for shard in &self.shards {
            let mut s = shard.lock();
            let limit = self.shard_limit(s.capacity);
            if s.frames.len() > limit {
                let gone = Self::shrink_to(&mut s, limit);
                drop(s);
                drop(gone);
            }
        }
    }

    /// Evicts frames of `s` until it holds at most `limit`; returns their pages, to be freed
    /// after the shard's lock is let go.
    fn shrink_to(s: &mut Shard, limit: usize) -> Vec<PageRef> {
        let mut gone_pages = Vec::new();
        while s.frames.len() > limit {
            let victim = Self::victim(s, limit, false);
            let last = s.frames.len() - 1;
            let gone = s.frames.swap_remove(victim);
            s.map.remove(&gone.page);
            Self::count_eviction(s, &gone);
            gone_pages.push(gone.data);
            if victim != last {
                let moved = s.frames[victim].page;
                if moved != INVALID {
                    s.map.insert(moved, victim);
                }
            }
            if s.hand >= s.frames.len() {
                s.hand = 0;
            }
            if s.index_hand >= s.frames.len() {
                s.index_hand = 0;
            }
        }
        gone_pages
    }

    /// [`Cache::reserve`] (frames given back at once, as there) if all charges then stay within
    /// half the cache's bytes (true), else nothing (false): what a run's partitioned filter asks
    /// before it stays in memory whole; a filter refused is read a page at a time through the
    /// cache instead.
    pub fn try_reserve(&self, bytes: u64) -> bool {
        let limit = self.capacity as u64 * PAGE_SIZE as u64 / 2;
        let taken = self
            .reserved
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                r.checked_add(bytes).filter(|&t| t <= limit)
            })
            .is_ok();
        if taken {
            self.shrink();
        }
        taken
    }

    /// Counts an open run whose filter is paged (+1) or such a run closed (-1)
    /// ([`CacheStats::paged_filters`]).
    pub fn count_paged_filter(&self, open: bool) {
        if open {
            self.paged_filters.fetch_add(1, Ordering::Relaxed);
        } else {
            self.paged_filters.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Takes back a charge of [`Cache::reserve`] or [`Cache::try_reserve`].
    pub fn unreserve(&self, bytes: u64) {
        let _ = self
            .reserved
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                Some(r.saturating_sub(bytes))
            });
    }

    /// Frames one shard may hold now: its capacity less its share of the reservations and of the
    /// rows held.
    fn shard_limit(&self, capacity: usize) -> usize {
        let taken = self.reserved.load(Ordering::Relaxed) + self.rows.bytes();
        let reserved_pages = taken / PAGE_SIZE as u64;
        capacity.saturating_sub((reserved_pages / SHARDS as u64) as usize)
    }

    fn shard(&self, page: u64) -> &Mutex<Shard> {
        // Spread neighbouring pages over shards (Fibonacci hashing).
        let h = page.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59;
        &self.shards[h as usize % SHARDS]
    }

    /// The cached page, if any (a hit or a miss in the counters).
    pub fn get(&self, page: u64) -> Option<PageRef> {
        match self.lookup(page, false) {
            Probe::Hit(p) => Some(p),
            Probe::Miss(_) => None,
        }
    }

    /// The cached page, or on a miss the shard's spare buffer (see [`Probe::Miss`]) for the
    /// caller to read the page into and [`insert`](Cache::insert): one lock for both.
    pub fn probe(&self, page: u64) -> Probe {
        self.lookup(page, true)
    }

    fn lookup(&self, page: u64, take_spare: bool) -> Probe {
        let mut s = self.shard(page).lock();
        if let Some(&i) = s.map.get(&page) {
            s.hits += 1;
            let f = &mut s.frames[i];
            f.referenced = true;
            return Probe::Hit(f.data.clone());
        }
        s.misses += 1;
        Probe::Miss(if take_spare { s.spare.take() } else { None })
    }

    /// Inserts (or replaces) a data page ([`PageClass::Data`]).
    pub fn insert(&self, page: u64, data: PageRef) {
        self.insert_as(page, data, PageClass::Data);
    }

    /// Inserts (or replaces) a page of class `class`.
    pub fn insert_as(&self, page: u64, data: PageRef, class: PageClass) {
        self.insert_frame(page, data, class, false);
    }

    /// Whether the cache holds `page`, without counting a hit or a miss.
    pub fn holds(&self, page: u64) -> bool {
        self.shard(page).lock().map.contains_key(&page)
    }

    /// Inserts a data page read ahead of its use, unless the cache holds it: unreferenced, so
    /// that CLOCK's hand takes it at its next pass unless a read uses it first (a page read
    /// ahead that nobody reads displaces no page that was read).
    pub fn insert_ahead(&self, page: u64, data: PageRef) {
        self.insert_frame(page, data, PageClass::Data, true);
    }

    /// [`insert_as`](Cache::insert_as), or with `ahead` [`insert_ahead`](Cache::insert_ahead).
    fn insert_frame(&self, page: u64, data: PageRef, class: PageClass, ahead: bool) {
        let mut s = self.shard(page).lock();
        let limit = self.shard_limit(s.capacity);
        // A shard too small to share keeps every page as data.
        let index = class == PageClass::Index && index_share(limit) > 0;
        if let Some(&i) = s.map.get(&page) {
            if ahead {
                return;
            }
            let was = std::mem::replace(&mut s.frames[i].index, index);
            s.index_frames = s.index_frames + usize::from(index) - usize::from(was);
            s.frames[i].data = data;
            s.frames[i].referenced = true;
            return;
        }
        // Reservations grew (or the rows took room): give frames back until the shard is within
        // its limit again.
        let _gone = Self::shrink_to(&mut s, limit);
        if limit == 0 {
            // Everything is reserved: the page is not kept.
            return;
        }
        let frame = Frame {
            page,
            data,
            referenced: !ahead,
            index,
        };
        if s.frames.len() < limit {
            let i = s.frames.len();
            s.frames.push(frame);
            s.map.insert(page, i);
            s.index_frames += usize::from(index);
            return;
        }
        let h = Self::victim(&mut s, limit, index);
        s.index_frames += usize::from(index);
        let old = s.frames[h].page;
        s.map.remove(&old);
        let mut gone = std::mem::replace(&mut s.frames[h], frame);
        s.map.insert(page, h);
        Self::count_eviction(&mut s, &gone);
        // Only a whole page that no reader holds can be read into again.
        if s.spare.is_none()
            && gone.data.len() == PAGE_SIZE
            && Arc::get_mut(&mut gone.data).is_some()
        {
            s.spare = Some(gone.data);
        } else {
            // Freed after the lock is let go.
            drop(s);
        }
    }

    fn count_eviction(s: &mut Shard, gone: &Frame) {
        s.evictions += 1;
        if gone.index {
            s.index_frames -= 1;
            s.index_evictions += 1;
        }
    }

    /// The frame to give up in a shard of `limit` frames (it has frames), for an index page when
    /// `index`: an index frame while index pages hold more than their share, or hold all of it
    /// and another comes in (or hold every frame); else a data frame. CLOCK within the class.
    fn victim(s: &mut Shard, limit: usize, index: bool) -> usize {
        let share = index_share(limit);
        if s.index_frames == 0 {
            clock_victim(&mut s.frames, &mut s.hand, |f| &mut f.referenced)
        } else if s.index_frames > share
            || (index && s.index_frames >= share)
            || s.index_frames == s.frames.len()
        {
            clock_victim_of(&mut s.frames, &mut s.index_hand, true)
        } else {
            clock_victim_of(&mut s.frames, &mut s.hand, false)
        }
    }

    /// Bytes of page buffers the cache holds now: its frames' and the shards' spares.
    pub fn held_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock();
                let frames: usize = s.frames.iter().map(|f| f.data.len()).sum();
                (frames + s.spare.as_ref().map_or(0, |b| b.len())) as u64
            })
            .sum()
    }

    /// Drops a page if cached (its location is being rewritten or freed).
    pub fn invalidate(&self, page: u64) {
        let mut s = self.shard(page).lock();
        if let Some(i) = s.map.remove(&page) {
            // Leave the frame in place but unreachable and first in line for eviction; its data
            // is replaced by an empty buffer so the memory goes back now.
            s.frames[i].page = INVALID;
            s.frames[i].referenced = false;
            if std::mem::replace(&mut s.frames[i].index, false) {
                s.index_frames -= 1;
            }
            s.frames[i].data = Arc::new(AlignedBuf::zeroed(0));
        }
    }

    /// The counters, summed over the shards.
    pub fn stats(&self) -> CacheStats {
        let (mut hits, mut misses, mut evictions) = (0, 0, 0);
        let (mut index_pages, mut index_evictions) = (0, 0);
        for s in &self.shards {
            let s = s.lock();
            hits += s.hits;
            misses += s.misses;
            evictions += s.evictions;
            index_pages += s.index_frames as u64;
            index_evictions += s.index_evictions;
        }
        CacheStats {
            capacity_pages: self.capacity as u64,
            reserved_bytes: self.reserved.load(Ordering::Relaxed),
            paged_filters: self.paged_filters.load(Ordering::Relaxed),
            hits,
            misses,
            evictions,
            index_pages,
            index_evictions,
            row_capacity_bytes: self.rows.capacity(),
            row_bytes: self.rows.bytes(),
            row_hits: self.rows.hits(),
            row_misses: self.rows.misses(),
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

    /// Readers and writers at once, as the background threads and lookups use it: the page
    /// buffers the cache holds (frames and spares) never exceed its capacity by more than one
    /// page per shard, a spare is read into only by the miss that took it, and every hit
    /// returns the bytes inserted for its page.
    #[test]
    fn concurrent_misses_stay_within_the_budget_plus_a_spare_per_shard() {
        let page = PAGE_SIZE as u64;
        let c = Cache::new(64 * page);
        let bound = 64 * page + SHARDS as u64 * page;
        let threads = 4u64;
        std::thread::scope(|scope| {
            for t in 0..threads {
                let c = &c;
                scope.spawn(move || {
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                    for n in 0..20_000u64 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let p = x % 1_000;
                        match c.probe(p) {
                            Probe::Hit(d) => {
                                assert_eq!(&d[..8], &p.to_le_bytes(), "page {p}: another's bytes");
                            }
                            Probe::Miss(spare) => {
                                let mut d = spare.unwrap_or_else(|| {
                                    Arc::new(AlignedBuf::for_overwrite(PAGE_SIZE))
                                });
                                let buf = Arc::get_mut(&mut d).expect("a spare is nobody else's");
                                buf.fill(0);
                                buf[..8].copy_from_slice(&p.to_le_bytes());
                                // A third of the pages are index pages, so that both classes
                                // evict and are evicted.
                                let class = if p.is_multiple_of(3) {
                                    PageClass::Index
                                } else {
                                    PageClass::Data
                                };
                                c.insert_as(p, d, class);
                            }
                        }
                        if n % 64 == 0 {
                            c.invalidate(x % 1_000);
                        }
                        if n % 1000 == 0 {
                            let held = c.held_bytes();
                            assert!(held <= bound, "{held} bytes held, at most {bound}");
                        }
                    }
                });
            }
        });
        let held = c.held_bytes();
        assert!(held <= bound, "{held} bytes held, at most {bound}");
        let s = c.stats();
        assert_eq!(s.hits + s.misses, threads * 20_000);
        assert!(s.evictions > 0 && s.hits > 0);
        assert!(s.index_evictions > 0 && s.index_evictions < s.evictions);
        assert_counts_agree(&c);
    }

    /// Every shard's count of index frames is the number of its frames holding index pages.
    fn assert_counts_agree(c: &Cache) {
        for (n, s) in c.shards.iter().enumerate() {
            let s = s.lock();
            let index = s.frames.iter().filter(|f| f.index).count();
            assert_eq!(s.index_frames, index, "shard {n}");
        }
    }

    /// Pages `from..` whose shard is `shard`, `n` of them.
    fn pages_of_shard(c: &Cache, shard: usize, from: u64, n: usize) -> Vec<u64> {
        (from..)
            .filter(|&p| std::ptr::eq(c.shard(p), &c.shards[shard]))
            .take(n)
            .collect()
    }

    fn page_bytes(p: u64) -> PageRef {
        Arc::new(AlignedBuf::from_slice(&p.to_le_bytes()))
    }

    fn held(c: &Cache, pages: impl IntoIterator<Item = u64>) -> usize {
        pages
            .into_iter()
            .filter(|&p| {
                c.get(p).is_some_and(|d| {
                    assert_eq!(&d[..8], &p.to_le_bytes(), "page {p} holds another's bytes");
                    true
                })
            })
            .count()
    }

    /// The uniform lookup's case (issue 22's `boa` at 2M records): index pages read by every
    /// lookup, then a long stream of data pages each read once. Index pages within their share
    /// of each shard all stay; without the classes CLOCK would have evicted every one of them.
    #[test]
    fn a_scan_of_data_pages_leaves_the_index_pages_within_their_share() {
        let c = Cache::new(256 * PAGE_SIZE as u64); // 16 frames a shard, 8 of them for index pages
        let share = index_share(16);
        assert_eq!(share, 8);
        let index: Vec<u64> = (0..SHARDS)
            .flat_map(|n| pages_of_shard(&c, n, 0, share))
            .collect();
        for &p in &index {
            c.insert_as(p, page_bytes(p), PageClass::Index);
        }
        // Data pages read once, many times the cache over, and some read again meanwhile.
        for p in 1_000_000..1_010_000u64 {
            c.insert(p, page_bytes(p));
            if p % 7 == 0 {
                let _ = c.get(p);
            }
        }
        assert_eq!(held(&c, index.iter().copied()), index.len());
        let s = c.stats();
        assert_eq!(s.index_pages, index.len() as u64);
        assert_eq!(s.index_evictions, 0);
        // The data pages had the rest of the cache.
        assert_eq!(held(&c, 1_000_000..1_010_000), 256 - index.len());
        assert_counts_agree(&c);
    }

    /// Index pages cannot take the cache from data pages: past their share they evict each
    /// other, and data pages coming in take back what they borrowed while the cache had room.
    #[test]
    fn index_pages_keep_to_their_share_once_data_pages_want_the_room() {
        let c = Cache::new(256 * PAGE_SIZE as u64); // 16 frames a shard
        let share = SHARDS * index_share(16);
        // `n` pages from `from` in each shard.
        let spread = |from: u64, n: usize| -> Vec<u64> {
            (0..SHARDS)
                .flat_map(|s| pages_of_shard(&c, s, from, n))
                .collect()
        };
        // Into an empty cache: index pages may fill it.
        let borrowed = spread(0, 16);
        for &p in &borrowed {
            c.insert_as(p, page_bytes(p), PageClass::Index);
        }
        assert_eq!(c.stats().index_pages, 256);
        // Data pages come in: each evicts an index page until they are within their share.
        let data = spread(100_000, 16);
        for &p in &data {
            c.insert(p, page_bytes(p));
        }
        assert_eq!(c.stats().index_pages as usize, share);
        assert_eq!(held(&c, data.iter().copied()), 256 - share);
        // More index pages than the share: they evict index pages, not data pages.
        let more = spread(200_000, 40);
        for &p in &more {
            c.insert_as(p, page_bytes(p), PageClass::Index);
        }
        assert_eq!(held(&c, data.iter().copied()), 256 - share);
        assert_eq!(held(&c, more.iter().copied()), share);
        assert_counts_agree(&c);
        // A reservation shrinks the shards: index pages give up their excess first.
        c.reserve(128 * PAGE_SIZE as u64); // 8 frames a shard, 4 for index pages
        for &p in &spread(300_000, 1) {
            c.insert(p, page_bytes(p));
        }
        let s = c.stats();
        assert_eq!(s.index_pages as usize, SHARDS * index_share(8), "{s:?}");
        assert_eq!(held(&c, more.iter().copied()), SHARDS * index_share(8));
        assert_counts_agree(&c);
    }

    /// An index page invalidated or replaced leaves the count of index pages right.
    #[test]
    fn invalidating_or_reclassing_an_index_page_keeps_the_count() {
        let c = Cache::new(256 * PAGE_SIZE as u64);
        for p in 0..50u64 {
            c.insert_as(p, page_bytes(p), PageClass::Index);
        }
        for p in 0..10u64 {
            c.invalidate(p);
        }
        for p in 10..20u64 {
            c.insert(p, page_bytes(p));
        }
        assert_eq!(c.stats().index_pages, 30);
        for p in 10..20u64 {
            c.insert_as(p, page_bytes(p), PageClass::Index);
        }
        assert_eq!(c.stats().index_pages, 40);
        assert_counts_agree(&c);
    }

    /// A miss after an eviction reads into the evicted page's buffer, unless a reader still
    /// holds that page.
    #[test]
    fn a_miss_takes_the_buffer_an_eviction_left_unless_a_reader_holds_it() {
        let c = Cache::new((SHARDS * PAGE_SIZE) as u64); // one frame per shard
        let same_shard: Vec<u64> = (0..10_000u64)
            .filter(|&p| std::ptr::eq(c.shard(p), c.shard(0)))
            .take(3)
            .collect();
        let (a, b, d) = (same_shard[0], same_shard[1], same_shard[2]);
        let buf = Arc::new(AlignedBuf::zeroed(PAGE_SIZE));
        let addr = buf.as_ptr();
        c.insert(a, buf);
        c.insert(b, Arc::new(AlignedBuf::zeroed(PAGE_SIZE))); // evicts a
        match c.probe(d) {
            Probe::Miss(Some(spare)) => assert_eq!(spare.as_ptr(), addr),
            _ => panic!("the evicted page's buffer was not handed out"),
        }
        let held = c.get(b).expect("b is cached");
        c.insert(d, Arc::new(AlignedBuf::zeroed(PAGE_SIZE))); // evicts b, which a reader holds
        assert!(matches!(c.probe(a), Probe::Miss(None)));
        drop(held);
    }

    /// A page read ahead goes before the pages read when room is needed, unless a read used it
    /// first (it is then referenced like them); it never replaces a cached page, and `holds`
    /// counts neither a hit nor a miss.
    #[test]
    fn a_page_read_ahead_is_evicted_first_unless_read() {
        let c = Cache::new((2 * SHARDS * PAGE_SIZE) as u64); // two frames per shard
        let same_shard: Vec<u64> = (0..10_000u64)
            .filter(|&p| std::ptr::eq(c.shard(p), c.shard(0)))
            .take(4)
            .collect();
        let (a, b, d, e) = (same_shard[0], same_shard[1], same_shard[2], same_shard[3]);
        let page = |byte: u8| Arc::new(AlignedBuf::from_slice(&[byte; 8]));
        let referenced = |p: u64| {
            let s = c.shard(p).lock();
            s.frames[s.map[&p]].referenced
        };
        c.insert(a, page(1));
        c.insert_ahead(b, page(2));
        c.insert_ahead(a, page(9)); // held: left as it is
        let before = c.stats();
        assert!(c.holds(a) && c.holds(b) && !c.holds(e));
        let after = c.stats();
        assert_eq!((after.hits, after.misses), (before.hits, before.misses));
        assert!(referenced(a) && !referenced(b));
        c.insert(d, page(3)); // wherever CLOCK's hand is, it takes b
        assert!(!c.holds(b) && c.holds(d));
        assert_eq!(&c.get(a).expect("the page read")[..], &[1; 8]);
        // Read ahead, then read: referenced as a page read is.
        c.insert_ahead(e, page(4)); // evicts d or a, whichever the hand reaches unreferenced
        assert!(!referenced(e));
        assert_eq!(&c.get(e).expect("read ahead")[..], &[4; 8]);
        assert!(referenced(e));
    }

    /// Reserved bytes shrink what the cache holds, down to nothing, and come back when
    /// unreserved; hits stay correct throughout.
    #[test]
    fn reservations_shrink_and_restore_the_pages_held() {
        let page = PAGE_SIZE as u64;
        let c = Cache::new(256 * page);
        let fill = |c: &Cache, from: u64| {
            for p in from..from + 1000 {
                c.insert(p, Arc::new(AlignedBuf::from_slice(&p.to_le_bytes())));
            }
        };
        let held = |c: &Cache, from: u64| {
            (from..from + 1000)
                .filter(|&p| {
                    c.get(p).is_some_and(|d| {
                        assert_eq!(&d[..8], &p.to_le_bytes(), "page {p} holds another's bytes");
                        true
                    })
                })
                .count()
        };
        fill(&c, 0);
        assert_eq!(held(&c, 0), 256);
        c.reserve(192 * page);
        fill(&c, 10_000);
        assert!(held(&c, 10_000) <= 64, "{}", held(&c, 10_000));
        assert!(held(&c, 0) == 0, "old pages are evicted as new ones come");
        c.reserve(1000 * page);
        fill(&c, 20_000);
        assert_eq!(held(&c, 20_000), 0, "all reserved: nothing is kept");
        assert_eq!(c.stats().reserved_bytes, 1192 * page);
        c.unreserve(1192 * page);
        fill(&c, 30_000);
        assert_eq!(held(&c, 30_000), 256);
        assert_eq!(c.stats().reserved_bytes, 0);
    }

    /// A reservation frees the pages' memory when it is made: the cache gives frames back at
    /// once, not only as later pages come in (none may: a merge reads past the cache).
    #[test]
    fn a_reservation_gives_pages_back_at_once() {
        let page = PAGE_SIZE as u64;
        let c = Cache::new(256 * page);
        for p in 0..1000u64 {
            c.insert(p, page_bytes(p));
        }
        let before = c.stats().evictions;
        c.reserve(192 * page);
        let gone = c.stats().evictions - before;
        assert!(gone >= 192 - SHARDS as u64, "{gone} pages given back");
        let left = held(&c, 0..1000);
        assert!(left <= 64, "{left} pages held beside a 192-page charge");
        c.unreserve(192 * page);
        // A conditional charge gives frames back the same way.
        for p in 0..1000u64 {
            c.insert(p, page_bytes(p));
        }
        assert!(c.try_reserve(96 * page));
        let left = held(&c, 0..1000);
        assert!(left <= 160, "{left} pages held beside a 96-page charge");
        c.unreserve(96 * page);
    }

    /// `try_reserve` charges only while all charges stay within half the cache, counting the
    /// unconditional ones.
    #[test]
    fn try_reserve_stops_at_half_the_cache() {
        let page = PAGE_SIZE as u64;
        let c = Cache::new(256 * page);
        assert!(c.try_reserve(100 * page));
        assert!(!c.try_reserve(29 * page), "129 pages is past half of 256");
        assert!(c.try_reserve(28 * page));
        assert!(!c.try_reserve(1));
        c.unreserve(28 * page);
        c.reserve(20 * page);
        assert!(!c.try_reserve(9 * page), "the unconditional charge counts");
        assert!(c.try_reserve(8 * page));
        assert_eq!(c.stats().reserved_bytes, 128 * page);
    }

    /// The row cache's bytes come out of the pages' share: rows held shrink the pages held.
    #[test]
    fn rows_held_take_their_bytes_from_the_pages() {
        use crate::entry::{Entry, Kind};
        use crate::filter::hash64;
        let page = PAGE_SIZE as u64;
        let c = Cache::with_rows(256 * page, 128 * page);
        for p in 0..1000u64 {
            c.insert(p, Arc::new(AlignedBuf::zeroed(8)));
        }
        let pages_held = |c: &Cache| (0..100_000u64).filter(|&p| c.get(p).is_some()).count();
        assert_eq!(pages_held(&c), 256);
        let value = [3u8; 200];
        for i in 0..100_000u64 {
            let k = i.to_be_bytes();
            c.rows()
                .insert(1, hash64(&k), &k, &[Entry::new(&k, 1, Kind::Put, &value)]);
        }
        let rows = c.stats().row_bytes;
        assert!(rows > 96 * page && rows <= 128 * page, "{rows}");
        for p in 1000..2000u64 {
            c.insert(p, Arc::new(AlignedBuf::zeroed(8)));
        }
        let held = pages_held(&c) as u64;
        assert!(
            held * page + rows <= 256 * page + 16 * page,
            "{held} pages and {rows} row bytes"
        );
        assert!(held >= 256 - 128 - 16, "{held}");
    }
}
