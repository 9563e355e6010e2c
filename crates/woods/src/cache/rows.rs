//! The row cache: what a point lookup found for one key in one immutable run, so that a key read
//! again costs no page read. A page holds some thirty records; under a skewed workload (YCSB's
//! zipfian) the hot records are scattered one per page, and a page cache of a given size holds
//! far fewer of them than a cache of the records themselves (RocksDB's `row_cache` makes the same
//! trade). Measured here it did not pay (docs/engine.md), so `Options::row_cache_bytes` is 0 by
//! default.
//!
//! Entries are keyed by a run's in-process id (assigned when a `Run` is opened or built, never
//! reused) and the key, so an entry can never go stale: a run is immutable, and a run written in its place gets a
//! new id. Entries of runs that are gone age out through CLOCK like any other.
//!
//! The row cache shares its owner's budget: the bytes it holds are taken from what the page
//! cache may hold ([`super::Cache`] counts them as reserved), up to its own capacity.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::entry::Entry;

const SHARDS: usize = 16;

/// Bytes charged per cached row besides its keys and values: the slot (64), its map entry at the
/// table's lowest load (32), the key's and the row's allocations (allocator headers and
/// rounding, the row's reference counts: 64); and per entry, the `Entry` (48) and its key's
/// and value's shared allocations (reference counts and allocator headers: 64). Estimates from
/// the types' sizes and glibc's chunk headers, not measurements.
const ROW_OVERHEAD: usize = 160;
const ENTRY_OVERHEAD: usize = 112;

/// A cached lookup result: the versions [`crate::run::Run::get`] returned for the key at the
/// newest sequence number (possibly none: a filter's false positive).
pub type Row = Arc<[Entry]>;

struct Slot {
    hash: u64,
    run: u64,
    key: Box<[u8]>,
    row: Row,
    size: usize,
    referenced: bool,
}

#[derive(Default)]
struct Shard {
    map: super::U64Map<usize>,
    slots: Vec<Slot>,
    bytes: usize,
    hand: usize,
}

/// The CLOCK cache of lookup results, bounded in bytes.
#[doc(hidden)]
pub struct RowCache {
    shards: Vec<Mutex<Shard>>,
    /// Bytes each shard may hold.
    shard_capacity: usize,
    /// Bytes held by all shards (what the page cache gives up).
    bytes: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Mixes a key's hash with its run's id, so that one key's rows in many runs spread.
fn row_hash(run: u64, key_hash: u64) -> u64 {
    let mut h =
        (key_hash ^ run.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h
}

fn row_size(key: &[u8], row: &[Entry]) -> usize {
    let entries: usize = row
        .iter()
        .map(|e| e.key.len() + e.value.len() + ENTRY_OVERHEAD)
        .sum();
    ROW_OVERHEAD + key.len() + entries
}

impl RowCache {
    /// A row cache of at most `bytes` (0: disabled, every call a no-op).
    pub fn new(bytes: u64) -> RowCache {
        RowCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_capacity: (bytes / SHARDS as u64) as usize,
            bytes: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Whether the cache may hold anything.
    pub fn enabled(&self) -> bool {
        self.shard_capacity > 0
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Bytes the cache may hold.
    pub fn capacity(&self) -> u64 {
        (self.shard_capacity * SHARDS) as u64
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    fn shard(&self, h: u64) -> &Mutex<Shard> {
        &self.shards[(h >> 60) as usize % SHARDS]
    }

    /// The row cached for `key` (whose [`crate::filter::hash64`] is `key_hash`) in run `run`.
    pub fn get(&self, run: u64, key_hash: u64, key: &[u8]) -> Option<Row> {
        if !self.enabled() {
            return None;
        }
        let h = row_hash(run, key_hash);
        let mut s = self.shard(h).lock();
        let found = match s.map.get(&h) {
            Some(&i) if s.slots[i].run == run && *s.slots[i].key == *key => {
                let slot = &mut s.slots[i];
                slot.referenced = true;
                Some(slot.row.clone())
            }
            _ => None,
        };
        drop(s);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Caches `row` as what run `run` holds for `key`. A row larger than an eighth of a shard
    /// (large values) is not kept.
    pub fn insert(&self, run: u64, key_hash: u64, key: &[u8], row: &[Entry]) {
        if !self.enabled() {
            return;
        }
        let size = row_size(key, row);
        if size > self.shard_capacity / 8 {
            return;
        }
        let h = row_hash(run, key_hash);
        let slot = Slot {
            hash: h,
            run,
            key: key.into(),
            row: row.into(),
            size,
            referenced: false,
        };
        let mut s = self.shard(h).lock();
        let before = s.bytes;
        if let Some(&i) = s.map.get(&h) {
            // The same row again (two readers missed at once) or a hash collision: the newer
            // wins.
            Self::remove(&mut s, i);
        }
        while !s.slots.is_empty() && s.bytes + size > self.shard_capacity {
            Self::evict_one(&mut s);
        }
        let i = s.slots.len();
        s.slots.push(slot);
        s.map.insert(h, i);
        s.bytes += size;
        let after = s.bytes;
        drop(s);
        if after >= before {
            self.bytes
                .fetch_add((after - before) as u64, Ordering::Relaxed);
        } else {
            self.bytes
                .fetch_sub((before - after) as u64, Ordering::Relaxed);
        }
    }

    /// Removes slot `i` (the last slot takes its place).
    fn remove(s: &mut Shard, i: usize) {
        let gone = s.slots.swap_remove(i);
        s.map.remove(&gone.hash);
        s.bytes -= gone.size;
        if let Some(moved) = s.slots.get(i) {
            let h = moved.hash;
            s.map.insert(h, i);
        }
        if s.hand >= s.slots.len() {
            s.hand = 0;
        }
    }

    /// CLOCK: clears reference bits until an unreferenced slot comes round and removes it (the
    /// shard has slots).
    fn evict_one(s: &mut Shard) {
        let victim = super::clock_victim(&mut s.slots, &mut s.hand, |r| &mut r.referenced);
        Self::remove(s, victim);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Kind;
    use crate::filter::hash64;

    fn put(key: &[u8], seq: u64, value: &[u8]) -> Entry {
        Entry::new(key, seq, Kind::Put, value)
    }

    #[test]
    fn rows_are_per_run_and_key() {
        let c = RowCache::new(1 << 20);
        let k = b"key".as_slice();
        assert!(c.get(1, hash64(k), k).is_none());
        c.insert(1, hash64(k), k, &[put(k, 5, b"one")]);
        c.insert(2, hash64(k), k, &[]);
        let one = c.get(1, hash64(k), k).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(&*one[0].value, b"one");
        assert!(c.get(2, hash64(k), k).unwrap().is_empty());
        assert!(c.get(3, hash64(k), k).is_none());
        // A key whose hash collides with a cached one's is not taken for it.
        assert!(c.get(1, hash64(k), b"other").is_none());
        assert_eq!((c.hits(), c.misses()), (2, 3));
    }

    /// The bytes held stay within the capacity however much goes in, recently read rows
    /// survive a stream of new ones better than unread ones, and the count of bytes held is the
    /// sum of the rows held.
    #[test]
    fn bounded_and_clock() {
        let cap = 256 << 10;
        let c = RowCache::new(cap);
        let key = |i: u64| i.to_be_bytes();
        let value = [7u8; 100];
        let hot: Vec<u64> = (0..50).collect();
        for i in 0..20_000u64 {
            let k = key(i);
            c.insert(9, hash64(&k), &k, &[put(&k, i, &value)]);
            if i % 10 == 0 {
                for &j in &hot {
                    let k = key(j);
                    if c.get(9, hash64(&k), &k).is_none() {
                        c.insert(9, hash64(&k), &k, &[put(&k, j, &value)]);
                    }
                }
            }
            assert!(c.bytes() <= cap, "{} bytes held", c.bytes());
        }
        let held = |range: std::ops::Range<u64>| {
            range
                .filter(|&i| c.get(9, hash64(&key(i)), &key(i)).is_some())
                .count()
        };
        assert_eq!(held(0..50), 50, "hot rows were evicted");
        assert!(held(50..10_000) < 100);
        let per_row = row_size(&key(0), &[put(&key(0), 0, &value)]) as u64;
        let rows = held(0..20_000) as u64;
        assert_eq!(c.bytes(), rows * per_row);
        assert!(c.bytes() > cap / 2, "{} of {cap} bytes used", c.bytes());
    }

    /// A row replaced by a larger one for the same run and key makes room like a new one.
    #[test]
    fn replaced_rows_stay_within_the_capacity() {
        let cap = 16 * 4096;
        let c = RowCache::new(cap);
        for i in 0..10_000u64 {
            let k = i.to_be_bytes();
            c.insert(1, hash64(&k), &k, &[put(&k, 1, b"small")]);
        }
        for i in 0..10_000u64 {
            let k = i.to_be_bytes();
            c.insert(1, hash64(&k), &k, &[put(&k, 2, &[5u8; 200])]);
            assert!(c.bytes() <= cap, "{} bytes held", c.bytes());
            let row = c.get(1, hash64(&k), &k).expect("the newest row is kept");
            assert_eq!(row[0].seq, 2);
        }
    }

    #[test]
    fn disabled_and_oversized_rows_are_not_kept() {
        let off = RowCache::new(0);
        let k = b"k".as_slice();
        off.insert(1, hash64(k), k, &[put(k, 1, b"v")]);
        assert!(off.get(1, hash64(k), k).is_none());
        assert_eq!((off.hits(), off.misses(), off.bytes()), (0, 0, 0));
        let c = RowCache::new(64 << 10);
        let big = vec![1u8; 4096];
        c.insert(1, hash64(k), k, &[put(k, 1, &big)]);
        assert!(c.get(1, hash64(k), k).is_none());
        assert_eq!(c.bytes(), 0);
    }
}
