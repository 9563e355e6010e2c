//! The memtable: a concurrent sorted write buffer (a lock-free skip list). Writers insert while
//! readers read; when it reaches `memtable_bytes` it is frozen and handed to the index.

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtOrd};
use std::sync::Arc;

use crossbeam_skiplist::SkipMap;

use crate::entry::{cmp_entries, Entry, Kind, MAX_SEQ};
use crate::error::Result;

/// Key of the skip list: user key plus sequence number, ordered like entries.
///
/// `prefix` holds the key's first 16 bytes, big-endian and zero-padded, so that most
/// comparisons during a skip-list search are one integer comparison in the node itself rather
/// than a `memcmp` behind a pointer (a cache miss per level). Differing prefixes order exactly as
/// the keys do: at the first differing byte either both keys have a real byte, or the shorter
/// key's padding zero meets a non-zero byte of a key it is a proper prefix of.
#[derive(Clone, Debug, PartialEq, Eq)]
struct MemKey {
    prefix: u128,
    key: Arc<[u8]>,
    seq: u64,
}

impl MemKey {
    fn new(key: Arc<[u8]>, seq: u64) -> MemKey {
        MemKey {
            prefix: key_prefix(&key),
            key,
            seq,
        }
    }
}

fn key_prefix(key: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = key.len().min(16);
    b[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(b)
}

impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| cmp_entries(&self.key, self.seq, &other.key, other.seq))
    }
}

impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Per-entry bookkeeping charged against `memtable_bytes` on top of key and value. Write
/// batches charge the same, so that a batch's size is the room it takes in the memtable.
pub const ENTRY_OVERHEAD: u64 = 64;

/// The room one entry takes in a memtable.
pub fn entry_room(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64 + ENTRY_OVERHEAD
}

/// The concurrent sorted write buffer.
pub struct Memtable {
    map: SkipMap<MemKey, (Kind, Arc<[u8]>)>,
    bytes: AtomicU64,
    user_bytes: AtomicU64,
    min_seq: AtomicU64,
    max_seq: AtomicU64,
    has_merge: AtomicBool,
    /// The WAL file holding this memtable's writes.
    wal_number: u64,
}

impl Memtable {
    pub fn new(wal_number: u64) -> Memtable {
        Memtable {
            map: SkipMap::new(),
            bytes: AtomicU64::new(0),
            user_bytes: AtomicU64::new(0),
            min_seq: AtomicU64::new(u64::MAX),
            max_seq: AtomicU64::new(0),
            has_merge: AtomicBool::new(false),
            wal_number,
        }
    }

    /// Inserts an entry and charges its room.
    pub fn insert(&self, key: &[u8], seq: u64, kind: Kind, value: &[u8]) {
        self.reserve(entry_room(key, value), (key.len() + value.len()) as u64);
        self.insert_reserved(key, seq, kind, value);
    }

    /// Charges `bytes` of room (entries' key, value and [`ENTRY_OVERHEAD`]) and `user_bytes`
    /// (keys and values) ahead of [`Memtable::insert_reserved`] calls that will fill it. The Db
    /// reserves a batch's room while it holds the writer lock, so that concurrent writers
    /// inserting outside the lock never overfill the memtable.
    pub fn reserve(&self, bytes: u64, user_bytes: u64) {
        self.bytes.fetch_add(bytes, AtOrd::Relaxed);
        self.user_bytes.fetch_add(user_bytes, AtOrd::Relaxed);
    }

    /// Inserts an entry whose room [`Memtable::reserve`] charged. Many threads may insert at
    /// once (the skip list is lock-free).
    pub fn insert_reserved(&self, key: &[u8], seq: u64, kind: Kind, value: &[u8]) {
        self.min_seq.fetch_min(seq, AtOrd::Relaxed);
        self.max_seq.fetch_max(seq, AtOrd::Relaxed);
        if kind == Kind::Merge {
            self.has_merge.store(true, AtOrd::Relaxed);
        }
        self.map
            .insert(MemKey::new(Arc::from(key), seq), (kind, Arc::from(value)));
    }

    /// Approximate memory charged (keys, values and per-entry overhead).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(AtOrd::Relaxed)
    }
    pub fn user_bytes(&self) -> u64 {
        self.user_bytes.load(AtOrd::Relaxed)
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn max_seq(&self) -> u64 {
        self.max_seq.load(AtOrd::Relaxed)
    }
    pub fn min_seq(&self) -> u64 {
        self.min_seq.load(AtOrd::Relaxed)
    }
    pub fn has_merge(&self) -> bool {
        self.has_merge.load(AtOrd::Relaxed)
    }
    pub fn wal_number(&self) -> u64 {
        self.wal_number
    }

    /// Versions of `key` with seq <= `max_seq`, newest first, up to and including the first Put
    /// or Delete.
    pub fn get(&self, key: &[u8], max_seq: u64, out: &mut Vec<Entry>) -> bool {
        let start = MemKey::new(Arc::from(key), max_seq);
        for e in self.map.range(start..) {
            if &*e.key().key != key {
                break;
            }
            let (kind, value) = e.value();
            out.push(Entry {
                key: e.key().key.clone(),
                seq: e.key().seq,
                kind: *kind,
                value: value.clone(),
            });
            if *kind != Kind::Merge {
                return true;
            }
        }
        false
    }

    /// Every entry in order (for building a run from a frozen memtable).
    pub fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        self.map.iter().map(|e| {
            let (kind, value) = e.value();
            Entry {
                key: e.key().key.clone(),
                seq: e.key().seq,
                kind: *kind,
                value: value.clone(),
            }
        })
    }

    /// An owning iterator over all versions with keys within the bounds, forward or reversed.
    pub fn iter(
        self: &Arc<Self>,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> MemIter {
        MemIter {
            mem: self.clone(),
            lo: to_mem_lo(lo),
            hi: to_mem_hi(hi),
            buf: Vec::new(),
            done: false,
            reverse,
        }
    }
}

fn to_mem_lo(b: Bound<Vec<u8>>) -> Bound<MemKey> {
    match b {
        Bound::Included(k) => Bound::Included(MemKey::new(Arc::from(k), MAX_SEQ + 1)),
        Bound::Excluded(k) => Bound::Excluded(MemKey::new(Arc::from(k), 0)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn to_mem_hi(b: Bound<Vec<u8>>) -> Bound<MemKey> {
    match b {
        Bound::Included(k) => Bound::Included(MemKey::new(Arc::from(k), 0)),
        Bound::Excluded(k) => Bound::Excluded(MemKey::new(Arc::from(k), MAX_SEQ + 1)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Iterator over a memtable that refills a small buffer per step, re-seeking from the last key
/// it returned, so it owns no borrow of the skip list.
pub struct MemIter {
    mem: Arc<Memtable>,
    lo: Bound<MemKey>,
    hi: Bound<MemKey>,
    /// Reversed buffer: the next entry to return is at the end.
    buf: Vec<Entry>,
    done: bool,
    reverse: bool,
}

const REFILL: usize = 256;

impl MemIter {
    fn refill(&mut self) {
        let range = self.mem.map.range((self.lo.clone(), self.hi.clone()));
        let take = |e: crossbeam_skiplist::map::Entry<'_, MemKey, (Kind, Arc<[u8]>)>| {
            let (kind, value) = e.value();
            Entry {
                key: e.key().key.clone(),
                seq: e.key().seq,
                kind: *kind,
                value: value.clone(),
            }
        };
        let mut got: Vec<Entry> = if self.reverse {
            range.rev().take(REFILL).map(take).collect()
        } else {
            range.take(REFILL).map(take).collect()
        };
        if got.len() < REFILL {
            self.done = true;
        }
        if let Some(last) = got.last() {
            let k = MemKey::new(last.key.clone(), last.seq);
            if self.reverse {
                self.hi = Bound::Excluded(k);
            } else {
                self.lo = Bound::Excluded(k);
            }
        }
        got.reverse();
        self.buf = got;
    }
}

impl Iterator for MemIter {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        if self.buf.is_empty() && !self.done {
            self.refill();
        }
        self.buf.pop().map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_bounds() {
        let m = Arc::new(Memtable::new(1));
        m.insert(b"a", 1, Kind::Put, b"1");
        m.insert(b"a", 3, Kind::Merge, b"+");
        m.insert(b"ab", 2, Kind::Put, b"2");
        m.insert(b"b", 4, Kind::Delete, b"");
        let mut out = Vec::new();
        m.get(b"a", 10, &mut out);
        assert_eq!(out.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3, 1]);
        out.clear();
        m.get(b"a", 2, &mut out);
        assert_eq!(out.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1]);
        let fwd: Vec<_> = m
            .iter(Bound::Excluded(b"a".to_vec()), Bound::Unbounded, false)
            .map(|e| e.map(|e| e.seq))
            .collect::<Result<_>>()
            .unwrap_or_default();
        assert_eq!(fwd, vec![2, 4]);
        let rev: Vec<_> = m
            .iter(Bound::Unbounded, Bound::Excluded(b"b".to_vec()), true)
            .map(|e| e.map(|e| e.seq))
            .collect::<Result<_>>()
            .unwrap_or_default();
        assert_eq!(rev, vec![2, 1, 3]);
    }

    /// The prefix shortcut orders keys exactly as `cmp_entries` does, including keys that are
    /// proper prefixes of others, keys with zero bytes, and keys longer than the prefix.
    #[test]
    fn prefix_order_is_entry_order() {
        let alphabet: [u8; 4] = [0, 1, b'a', 0xff];
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..3000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 1 + (x % 20) as usize;
            let k: Vec<u8> = (0..len)
                .map(|i| alphabet[((x >> (i * 2 % 60)) & 3) as usize])
                .collect();
            keys.push(k);
        }
        let mk: Vec<MemKey> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| MemKey::new(Arc::from(&k[..]), i as u64 % 3))
            .collect();
        for a in mk.iter().step_by(7) {
            for b in &mk {
                assert_eq!(
                    a.cmp(b),
                    cmp_entries(&a.key, a.seq, &b.key, b.seq),
                    "{:?}/{} vs {:?}/{}",
                    a.key,
                    a.seq,
                    b.key,
                    b.seq
                );
            }
        }
    }
}
