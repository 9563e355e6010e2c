//! The memtable: a concurrent sorted write buffer. Writers insert while readers read; when it
//! reaches `memtable_bytes` it is frozen and handed to the index.
//!
//! Entries live inline in the arena of a lock-free skip list ([`skiplist`]): an insert copies
//! the key and value into the arena (no allocation per entry), many writers insert at once, and
//! the whole arena goes when the memtable is dropped.

pub mod skiplist;

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtOrd};
use std::sync::Arc;

use self::skiplist::{Pos, RawPos, SkipList, MAX_HEIGHT};
use crate::entry::{Entry, Kind};
use crate::error::Result;

/// Per-entry bookkeeping charged against `memtable_bytes` on top of key and value. Write
/// batches charge the same, so that a batch's size is the room it takes in the memtable. It is
/// more than a skip-list node's average overhead (a 24-byte header, 1.33 tower pointers on
/// average and alignment: about 38 bytes), so the memory a memtable takes stays below what it
/// is charged, chunk slack aside.
pub const ENTRY_OVERHEAD: u64 = 64;

/// The room one entry takes in a memtable.
pub fn entry_room(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64 + ENTRY_OVERHEAD
}

/// The tower height of the entry with sequence number `seq`: 1 plus the number of zero bit
/// pairs in a hash of it, so heights follow the skip list's branching factor of 4. Sequence
/// numbers are unique, and a hash of them is as good a coin as a random generator, with no
/// state to share between writers.
fn height(seq: u64) -> usize {
    let mut x = seq.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    1 + ((x.trailing_zeros() / 2) as usize).min(MAX_HEIGHT - 1)
}

/// The concurrent sorted write buffer.
pub struct Memtable {
    list: SkipList,
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
            list: SkipList::new(),
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
    /// once; no two entries may have the same key and sequence number.
    pub fn insert_reserved(&self, key: &[u8], seq: u64, kind: Kind, value: &[u8]) {
        self.min_seq.fetch_min(seq, AtOrd::Relaxed);
        self.max_seq.fetch_max(seq, AtOrd::Relaxed);
        if kind == Kind::Merge {
            self.has_merge.store(true, AtOrd::Relaxed);
        }
        self.list.insert(key, seq, kind, value, height(seq));
    }

    /// Memory charged (keys, values and per-entry overhead).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(AtOrd::Relaxed)
    }
    /// Memory the entries take in the skip list's arena, and the arena's chunks.
    pub fn arena_bytes(&self) -> (u64, u64) {
        (self.list.used_bytes(), self.list.reserved_bytes())
    }
    pub fn user_bytes(&self) -> u64 {
        self.user_bytes.load(AtOrd::Relaxed)
    }
    pub fn len(&self) -> usize {
        self.list.len()
    }
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
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

    fn entry(&self, p: Pos<'_>) -> Entry {
        let e = self.list.get(p);
        Entry::new(e.key, e.seq, e.kind, e.value)
    }

    /// Versions of `key` with seq <= `max_seq`, newest first, up to and including the first Put
    /// or Delete.
    pub fn get(&self, key: &[u8], max_seq: u64, out: &mut Vec<Entry>) -> bool {
        let mut at = self.list.seek(key, max_seq);
        while let Some(p) = at {
            let e = self.list.get(p);
            if e.key != key {
                break;
            }
            out.push(Entry::new(e.key, e.seq, e.kind, e.value));
            if e.kind != Kind::Merge {
                return true;
            }
            at = self.list.next(p);
        }
        false
    }

    /// Every entry in order (for building a run from a frozen memtable).
    pub fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        std::iter::successors(self.list.first(), |&p| self.list.next(p)).map(|p| self.entry(p))
    }

    /// Every entry's key, sequence number and room ([`entry_room`]) in entry order, borrowed
    /// from the list (no copy): for planning how a frozen memtable is built.
    pub fn key_seqs(&self) -> impl Iterator<Item = (&[u8], u64, u64)> + '_ {
        std::iter::successors(self.list.first(), |&p| self.list.next(p)).map(|p| {
            let e = self.list.get(p);
            (e.key, e.seq, entry_room(e.key, e.value))
        })
    }

    /// The entries and their key and value bytes in each interval that the sorted `keys` cut
    /// the key space into: `[keys[i-1], keys[i])` is interval `i`, and there are
    /// `keys.len() + 1`. One walk of the list, reading lengths only.
    pub fn interval_sizes(&self, keys: &[Arc<[u8]>]) -> Vec<(u64, u64)> {
        let mut out = vec![(0u64, 0u64); keys.len() + 1];
        let mut i = 0;
        let mut at = self.list.first();
        while let Some(p) = at {
            let e = self.list.get(p);
            while i < keys.len() && e.key >= &keys[i][..] {
                i += 1;
            }
            out[i].0 += 1;
            out[i].1 += (e.key.len() + e.value.len()) as u64;
            at = self.list.next(p);
        }
        out
    }

    /// An owning iterator over all versions with keys within the bounds, forward or reversed.
    pub fn iter(
        self: &Arc<Self>,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> MemIter {
        let l = &self.list;
        let pos = if reverse {
            match &hi {
                Bound::Included(k) => l.seek_before(&successor(k), u64::MAX),
                Bound::Excluded(k) => l.seek_before(k, u64::MAX),
                Bound::Unbounded => l.last(),
            }
        } else {
            match &lo {
                Bound::Included(k) => l.seek(k, u64::MAX),
                Bound::Excluded(k) => l.seek(&successor(k), u64::MAX),
                Bound::Unbounded => l.first(),
            }
        };
        MemIter {
            mem: self.clone(),
            pos: pos.map(Pos::detach),
            end: if reverse { lo } else { hi },
            reverse,
        }
    }
}

/// The smallest key after `k`: `k` followed by a zero byte.
fn successor(k: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(k.len() + 1);
    s.extend_from_slice(k);
    s.push(0);
    s
}

/// Iterator over a memtable's entries in a key range, in entry order or exactly reversed. It
/// holds the memtable, so its position in the skip list stays valid.
pub struct MemIter {
    mem: Arc<Memtable>,
    /// A position in `mem`'s list: `mem` keeps the list alive as long as this iterator.
    pos: Option<RawPos>,
    /// The bound on the side it moves towards.
    end: Bound<Vec<u8>>,
    reverse: bool,
}

impl Iterator for MemIter {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        let l = &self.mem.list;
        // SAFETY: `pos` was detached from a position of this very list, which `self.mem` keeps
        // alive (nodes are never freed before their list).
        let p = unsafe { l.attach(self.pos?) };
        let key = l.get(p).key;
        let inside = match (&self.end, self.reverse) {
            (Bound::Unbounded, _) => true,
            (Bound::Included(k), false) => key <= &k[..],
            (Bound::Excluded(k), false) => key < &k[..],
            (Bound::Included(k), true) => key >= &k[..],
            (Bound::Excluded(k), true) => key > &k[..],
        };
        if !inside {
            self.pos = None;
            return None;
        }
        let e = self.mem.entry(p);
        let pos = if self.reverse { l.prev(p) } else { l.next(p) };
        self.pos = pos.map(Pos::detach);
        Some(Ok(e))
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

    /// An iterator keeps its memtable, and so the skip-list nodes its position points at,
    /// alive after every other handle is gone.
    #[test]
    fn an_iterator_outlives_the_handle_it_came_from() {
        let m = Arc::new(Memtable::new(1));
        for (i, k) in [b"a", b"b", b"c"].iter().enumerate() {
            m.insert(*k, i as u64 + 1, Kind::Put, &[b'0' + i as u8; 100]);
        }
        let mut it = m.iter(Bound::Unbounded, Bound::Unbounded, false);
        let first = it.next().and_then(|e| e.ok()).map(|e| e.key.to_vec());
        drop(m);
        let rest: Vec<Vec<u8>> = it.filter_map(|e| e.ok()).map(|e| e.key.to_vec()).collect();
        assert_eq!(first.as_deref(), Some(&b"a"[..]));
        assert_eq!(rest, vec![b"b".to_vec(), b"c".to_vec()]);
    }

    /// Range iteration in both directions and point reads agree with a sorted model for random
    /// entries and bounds (included, excluded, unbounded, keys present or not).
    #[test]
    fn iter_and_get_match_a_model() {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(crate::testutil::seed());
        let m = Arc::new(Memtable::new(1));
        let mut model: Vec<Entry> = Vec::new();
        for seq in 1..3000u64 {
            let key = format!("k{}", rng.gen_range(0..400u32)).into_bytes();
            let kind = [Kind::Put, Kind::Delete, Kind::Merge][rng.gen_range(0..3)];
            let value = vec![rng.gen(); rng.gen_range(0..30)];
            m.insert(&key, seq, kind, &value);
            model.push(Entry::new(&key, seq, kind, &value));
        }
        model.sort_by(|a, b| crate::entry::cmp_entries(&a.key, a.seq, &b.key, b.seq));
        assert_eq!(m.entries().collect::<Vec<_>>(), model);
        let bound = |rng: &mut SmallRng| -> Bound<Vec<u8>> {
            let k = format!("k{}", rng.gen_range(0..420u32)).into_bytes();
            match rng.gen_range(0..3) {
                0 => Bound::Included(k),
                1 => Bound::Excluded(k),
                _ => Bound::Unbounded,
            }
        };
        for _ in 0..300 {
            let (lo, hi) = (bound(&mut rng), bound(&mut rng));
            let inside = |k: &[u8]| {
                (match &lo {
                    Bound::Included(b) => k >= &b[..],
                    Bound::Excluded(b) => k > &b[..],
                    Bound::Unbounded => true,
                }) && (match &hi {
                    Bound::Included(b) => k <= &b[..],
                    Bound::Excluded(b) => k < &b[..],
                    Bound::Unbounded => true,
                })
            };
            let want: Vec<&Entry> = model.iter().filter(|e| inside(&e.key)).collect();
            for reverse in [false, true] {
                let got: Vec<Entry> = m
                    .iter(lo.clone(), hi.clone(), reverse)
                    .collect::<Result<_>>()
                    .unwrap_or_default();
                let mut w: Vec<Entry> = want.iter().map(|e| (*e).clone()).collect();
                if reverse {
                    w.reverse();
                }
                assert_eq!(got, w, "{lo:?}..{hi:?} reverse {reverse}");
            }
        }
        for _ in 0..100 {
            // Sorted cut keys, present or not, with repeats (an empty interval between them).
            let mut keys: Vec<Arc<[u8]>> = (0..rng.gen_range(0..8))
                .map(|_| Arc::from(format!("k{}", rng.gen_range(0..420u32)).into_bytes()))
                .collect();
            keys.sort();
            let mut want = vec![(0u64, 0u64); keys.len() + 1];
            for e in &model {
                let i = keys.partition_point(|k| k[..] <= e.key[..]);
                want[i].0 += 1;
                want[i].1 += e.user_bytes() as u64;
            }
            assert_eq!(m.interval_sizes(&keys), want, "cut at {keys:?}");
        }
        for _ in 0..300 {
            let key = format!("k{}", rng.gen_range(0..420u32)).into_bytes();
            let at = rng.gen_range(0..3100u64);
            let mut got = Vec::new();
            let found = m.get(&key, at, &mut got);
            let mut want = Vec::new();
            let mut stop = false;
            for e in model.iter().filter(|e| *e.key == key[..] && e.seq <= at) {
                want.push(e.clone());
                if e.kind != Kind::Merge {
                    stop = true;
                    break;
                }
            }
            assert_eq!((found, got), (stop, want));
        }
    }
}
