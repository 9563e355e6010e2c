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
#[derive(Clone, Debug, PartialEq, Eq)]
struct MemKey {
    key: Arc<[u8]>,
    seq: u64,
}

impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_entries(&self.key, self.seq, &other.key, other.seq)
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

    pub fn insert(&self, key: &[u8], seq: u64, kind: Kind, value: &[u8]) {
        let b = (key.len() + value.len()) as u64;
        self.bytes.fetch_add(b + ENTRY_OVERHEAD, AtOrd::Relaxed);
        self.user_bytes.fetch_add(b, AtOrd::Relaxed);
        self.min_seq.fetch_min(seq, AtOrd::Relaxed);
        self.max_seq.fetch_max(seq, AtOrd::Relaxed);
        if kind == Kind::Merge {
            self.has_merge.store(true, AtOrd::Relaxed);
        }
        self.map.insert(
            MemKey {
                key: Arc::from(key),
                seq,
            },
            (kind, Arc::from(value)),
        );
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
        let start = MemKey {
            key: Arc::from(key),
            seq: max_seq,
        };
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
        Bound::Included(k) => Bound::Included(MemKey {
            key: Arc::from(k),
            seq: MAX_SEQ + 1,
        }),
        Bound::Excluded(k) => Bound::Excluded(MemKey {
            key: Arc::from(k),
            seq: 0,
        }),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn to_mem_hi(b: Bound<Vec<u8>>) -> Bound<MemKey> {
    match b {
        Bound::Included(k) => Bound::Included(MemKey {
            key: Arc::from(k),
            seq: 0,
        }),
        Bound::Excluded(k) => Bound::Excluded(MemKey {
            key: Arc::from(k),
            seq: MAX_SEQ + 1,
        }),
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
            let k = MemKey {
                key: last.key.clone(),
                seq: last.seq,
            };
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
}
