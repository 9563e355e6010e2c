//! The memtable's skip list: entries live inline in an arena, inserted lock-free by many
//! threads at once, read without locks.
//!
//! Each entry is one node in an arena chunk: a fixed header (sequence number, lengths, kind,
//! height), the tower of `height` next pointers, then the key and value bytes. A search reads a
//! node's header and key from one place instead of chasing pointers to separately allocated keys,
//! and an insert allocates by bumping an offset instead of calling the allocator three times.
//! Nodes are never removed or moved: the whole arena is freed when the list is dropped, so a
//! pointer to a node stays valid as long as the list lives (readers hold it through an `Arc`).
//!
//! Insertion follows the usual lock-free skip list (as RocksDB's `InlineSkipList`): the node is
//! written completely, then linked level by level from the bottom with a compare-and-swap on its
//! predecessor's next pointer (Release), re-finding the predecessor at that level when another
//! insert got there first. Readers follow next pointers with Acquire loads, so a node they reach
//! is fully written. A node is in the list once it is linked at level 0.

use std::cmp::Ordering;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering as AtOrd};

use parking_lot::Mutex;

use crate::entry::{cmp_entries, Kind};

/// Tallest tower. With a branching factor of 4 this keeps searches logarithmic up to 4^16
/// entries, far beyond any memtable.
pub const MAX_HEIGHT: usize = 16;

/// Arena chunk size for ordinary entries; larger entries get a chunk of their own.
const CHUNK: usize = 256 << 10;

/// A node's fixed header; the tower, the key and the value follow it in the arena.
#[repr(C)]
struct Node {
    /// The key's first 16 bytes, big-endian, zero-padded ([`key_prefix`]): most comparisons of
    /// a search end here, on the cache line the search loads anyway for the next pointers,
    /// without reading the key bytes after the tower.
    /// (Two u64 halves, high first: a u128 would need 16-byte alignment the arena does not give.)
    prefix: [u64; 2],
    seq: u64,
    key_len: u32,
    value_len: u32,
    kind: u8,
    height: u8,
    /// Followed by `height` next pointers.
    tower: [AtomicPtr<Node>; 0],
}

const HEADER: usize = size_of::<Node>();

/// A key's first 16 bytes as two big-endian integers, zero-padded: keys with different
/// prefixes compare as their prefixes do; keys with equal prefixes need the whole comparison (a
/// shorter key padded with zeros has the prefix of a longer one that continues with zeros).
#[inline]
fn key_prefix(key: &[u8]) -> [u64; 2] {
    let mut b = [0u8; 16];
    let n = key.len().min(16);
    b[..n].copy_from_slice(&key[..n]);
    let (hi, lo) = b.split_at(8);
    [
        u64::from_be_bytes(hi.try_into().unwrap_or_default()),
        u64::from_be_bytes(lo.try_into().unwrap_or_default()),
    ]
}

/// Arena bytes one entry takes: header, tower and key and value, rounded to pointer alignment.
fn node_size(height: usize, key_len: usize, value_len: usize) -> usize {
    let raw = HEADER + height * size_of::<AtomicPtr<Node>>() + key_len + value_len;
    raw.next_multiple_of(align_of::<Node>())
}

/// The most arena bytes an entry with this key and value can take (the tallest tower).
pub fn max_node_size(key_len: usize, value_len: usize) -> usize {
    node_size(MAX_HEIGHT, key_len, value_len)
}

impl Node {
    /// # Safety
    /// `n` points to a node written by [`SkipList::insert`] (or the head) of a live list.
    unsafe fn next(n: *const Node, level: usize) -> *mut Node {
        // SAFETY: the caller guarantees a live node; level < its height by the callers' loops.
        unsafe { (*Node::tower(n).add(level)).load(AtOrd::Acquire) }
    }

    /// # Safety
    /// As for [`Node::next`].
    unsafe fn tower(n: *const Node) -> *const AtomicPtr<Node> {
        // SAFETY: the tower starts right after the header, inside the node's allocation.
        unsafe { ptr::addr_of!((*n).tower).cast::<AtomicPtr<Node>>() }
    }

    /// # Safety
    /// As for [`Node::next`]; not the head.
    unsafe fn key<'a>(n: *const Node) -> &'a [u8] {
        // SAFETY: key bytes follow the tower, `key_len` of them, written before the node was
        // published and never changed after.
        unsafe {
            let p = Node::tower(n).add((*n).height as usize).cast::<u8>();
            std::slice::from_raw_parts(p, (*n).key_len as usize)
        }
    }

    /// # Safety
    /// As for [`Node::key`].
    unsafe fn value<'a>(n: *const Node) -> &'a [u8] {
        // SAFETY: value bytes follow the key; see `key`.
        unsafe {
            let p = Node::tower(n)
                .add((*n).height as usize)
                .cast::<u8>()
                .add((*n).key_len as usize);
            std::slice::from_raw_parts(p, (*n).value_len as usize)
        }
    }
}

/// One entry as the list holds it, borrowed for as long as the list lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRef<'a> {
    pub key: &'a [u8],
    pub seq: u64,
    pub kind: Kind,
    pub value: &'a [u8],
}

/// A position in the list: a node (never the head), borrowed from the list for `'a`.
///
/// The lifetime is what makes positions safe to hand out: a node lives exactly as long as its
/// list's arena, and a `Pos<'a>` can only be made from a `&'a SkipList` (or from another
/// `Pos<'a>`, whose node's successors are nodes of the same list), so the borrow checker refuses
/// any use of a position after its list is dropped, or moved. A position may be given to
/// another list's methods: they only read the node through it, and the results borrow no
/// longer than both lists do. A position cannot outlive its list:
///
/// ```compile_fail,E0505
/// use woods::entry::Kind;
/// use woods::memtable::skiplist::SkipList;
/// let list = SkipList::new();
/// list.insert(b"key", 1, Kind::Put, b"value", 1);
/// let pos = list.first().expect("one entry");
/// drop(list); // frees the arena the node lives in
/// let freed = SkipList::new();
/// let _ = freed.get(pos).key; // would read freed memory
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Pos<'a> {
    node: *const Node,
    list: PhantomData<&'a SkipList>,
}

// SAFETY: a Pos is a shared borrow of a published node, which is immutable except for its
// atomic next pointers, in a list that is itself `Sync`: as `&'a Node` would be.
unsafe impl Send for Pos<'_> {}
// SAFETY: see `Send`.
unsafe impl Sync for Pos<'_> {}

impl<'a> Pos<'a> {
    /// # Safety
    /// `node` is a published node (not the head) of a list borrowed for `'a`.
    unsafe fn new(node: *const Node) -> Pos<'a> {
        Pos {
            node,
            list: PhantomData,
        }
    }

    /// The position without its lifetime, for a holder that keeps the list alive by other means
    /// (an iterator owning its memtable). It can only be used again through the `unsafe`
    /// [`SkipList::attach`].
    pub(crate) fn detach(self) -> RawPos {
        RawPos(self.node)
    }
}

/// A [`Pos`] without its lifetime ([`Pos::detach`]): it gives no access on its own.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct RawPos(*const Node);

// SAFETY: a RawPos is an address only; reading through it needs `SkipList::attach`, whose caller
// guarantees the list is alive.
unsafe impl Send for RawPos {}
// SAFETY: see `Send`.
unsafe impl Sync for RawPos {}

/// One arena chunk: its memory and how much of it is handed out. An allocation bumps the
/// chunk's own counter, so a thread still allocating from a chunk another thread has replaced
/// only takes what is left in it, never memory of another chunk.
struct Chunk {
    /// `words` zeroed u64s from a leaked boxed slice, freed on drop.
    base: *mut u64,
    words: usize,
    used: AtomicUsize,
}

impl Chunk {
    fn new(bytes: usize) -> Box<Chunk> {
        let mem: Box<[u64]> = vec![0u64; bytes.div_ceil(8)].into_boxed_slice();
        let words = mem.len();
        Box::new(Chunk {
            base: Box::into_raw(mem).cast::<u64>(),
            words,
            used: AtomicUsize::new(0),
        })
    }

    /// `size` bytes of this chunk, if it has them.
    fn bump(&self, size: usize) -> Option<*mut u8> {
        let off = self.used.fetch_add(size, AtOrd::Relaxed);
        let cap = self.words * 8;
        // The counter may run past the capacity; only offsets below it are handed out, each
        // once (fetch_add returns distinct offsets).
        (off <= cap && size <= cap - off)
            // SAFETY: off + size <= cap: inside the chunk's allocation.
            .then(|| unsafe { self.base.cast::<u8>().add(off) })
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: `base` and `words` are the boxed slice leaked in `new`, freed once here.
        unsafe {
            drop(Box::from_raw(ptr::slice_from_raw_parts_mut(
                self.base, self.words,
            )));
        }
    }
}

/// Memory of the skip list: chunks bumped atomically, a new one made under a lock.
struct Arena {
    /// Every chunk (kept until the arena drops). Boxed: `current` points at a chunk's counter,
    /// which must not move when the vector grows.
    #[allow(clippy::vec_box)]
    chunks: Mutex<Vec<Box<Chunk>>>,
    /// The chunk ordinary allocations bump (one of `chunks`).
    current: AtomicPtr<Chunk>,
    /// Bytes of all chunks.
    reserved: AtomicU64,
}

impl Arena {
    fn new() -> Arena {
        Arena {
            chunks: Mutex::new(Vec::new()),
            current: AtomicPtr::new(ptr::null_mut()),
            reserved: AtomicU64::new(0),
        }
    }

    /// `size` bytes (a multiple of 8), 8-aligned and zeroed, valid until the arena drops.
    fn alloc(&self, size: usize) -> *mut u8 {
        debug_assert_eq!(size % 8, 0);
        if size <= CHUNK / 4 {
            let c = self.current.load(AtOrd::Acquire);
            // SAFETY: `current` is null or points to a chunk owned by `chunks`, never freed
            // before the arena.
            if let Some(p) = unsafe { c.as_ref() }.and_then(|c| c.bump(size)) {
                return p;
            }
        }
        self.alloc_slow(size)
    }

    #[cold]
    fn alloc_slow(&self, size: usize) -> *mut u8 {
        let mut chunks = self.chunks.lock();
        if size > CHUNK / 4 {
            // A large entry: a chunk of its own, leaving the current one in use.
            let c = Chunk::new(size);
            let p = c.bump(size);
            self.reserved.fetch_add(size as u64, AtOrd::Relaxed);
            chunks.push(c);
            return p.unwrap_or_else(|| unreachable!("a chunk of exactly this size"));
        }
        // Another thread may have added a chunk while we waited for the lock.
        let cur = self.current.load(AtOrd::Acquire);
        // SAFETY: as in `alloc`.
        if let Some(p) = unsafe { cur.as_ref() }.and_then(|c| c.bump(size)) {
            return p;
        }
        let c = Chunk::new(CHUNK);
        let p = c.bump(size);
        self.reserved.fetch_add(CHUNK as u64, AtOrd::Relaxed);
        let cp: *const Chunk = &*c;
        chunks.push(c);
        self.current.store(cp.cast_mut(), AtOrd::Release);
        p.unwrap_or_else(|| unreachable!("a fresh chunk has room for a quarter of it"))
    }
}

/// A concurrent skip list of entries ordered by key ascending, then sequence number
/// descending (the order of [`cmp_entries`]). No two entries may share a key and sequence
/// number.
pub struct SkipList {
    arena: Arena,
    head: *mut Node,
    /// Tallest tower in use (at least 1).
    height: AtomicUsize,
    len: AtomicUsize,
    /// Arena bytes taken by entries (their nodes).
    used: AtomicU64,
}

// SAFETY: all shared state is atomics or behind the arena's lock; nodes are written before they
// are published with Release and read with Acquire, and never freed before the list.
unsafe impl Send for SkipList {}
// SAFETY: see `Send`.
unsafe impl Sync for SkipList {}

impl Default for SkipList {
    fn default() -> Self {
        SkipList::new()
    }
}

impl SkipList {
    pub fn new() -> SkipList {
        let arena = Arena::new();
        let head = arena.alloc(node_size(MAX_HEIGHT, 0, 0)).cast::<Node>();
        // SAFETY: fresh, zeroed, aligned memory for a node of MAX_HEIGHT; zeroed next pointers
        // are null.
        unsafe {
            (*head).height = MAX_HEIGHT as u8;
        }
        SkipList {
            arena,
            head,
            height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            used: AtomicU64::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.len.load(AtOrd::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Arena bytes the entries take.
    pub fn used_bytes(&self) -> u64 {
        self.used.load(AtOrd::Relaxed)
    }

    /// Arena bytes allocated (chunks), at least [`SkipList::used_bytes`].
    pub fn reserved_bytes(&self) -> u64 {
        self.arena.reserved.load(AtOrd::Relaxed)
    }

    /// Whether node `n` orders before (`key`, `seq`).
    ///
    /// # Safety
    /// `n` is a published node of this list (not the head).
    unsafe fn before(n: *const Node, key: &[u8], prefix: [u64; 2], seq: u64) -> bool {
        // SAFETY: per the caller.
        unsafe {
            match (*n).prefix.cmp(&prefix) {
                Ordering::Equal => cmp_entries(Node::key(n), (*n).seq, key, seq) == Ordering::Less,
                o => o == Ordering::Less,
            }
        }
    }

    /// At `level`, from `start` (the head or a node ordering before the target), the last node
    /// ordering before (`key`, `seq`) and the one after it (null at the end).
    fn find_splice(
        &self,
        key: &[u8],
        prefix: [u64; 2],
        seq: u64,
        level: usize,
        start: *const Node,
    ) -> (*const Node, *mut Node) {
        let mut prev = start;
        loop {
            // SAFETY: `prev` is the head or a published node; level < its height (the head has
            // every level; a node found at `level` has at least level + 1).
            let next = unsafe { Node::next(prev, level) };
            // SAFETY: non-null next pointers point to published nodes.
            if !next.is_null() && unsafe { SkipList::before(next, key, prefix, seq) } {
                prev = next;
            } else {
                return (prev, next);
            }
        }
    }

    /// Inserts an entry; `height` (1..=MAX_HEIGHT) is its tower's, chosen by the caller at
    /// random with a branching factor of 4. Returns the arena bytes the entry took.
    pub fn insert(&self, key: &[u8], seq: u64, kind: Kind, value: &[u8], height: usize) -> u64 {
        let height = height.clamp(1, MAX_HEIGHT);
        let size = node_size(height, key.len(), value.len());
        let n = self.arena.alloc(size).cast::<Node>();
        // SAFETY: `n` is fresh, zeroed, 8-aligned arena memory of `size` bytes, private to this
        // thread until it is linked below.
        let prefix = key_prefix(key);
        unsafe {
            (*n).prefix = prefix;
            (*n).seq = seq;
            (*n).key_len = key.len() as u32;
            (*n).value_len = value.len() as u32;
            (*n).kind = kind as u8;
            (*n).height = height as u8;
            let kp = Node::tower(n).add(height).cast::<u8>().cast_mut();
            ptr::copy_nonoverlapping(key.as_ptr(), kp, key.len());
            ptr::copy_nonoverlapping(value.as_ptr(), kp.add(key.len()), value.len());
        }
        let mut top = self.height.load(AtOrd::Relaxed);
        while height > top {
            match self
                .height
                .compare_exchange_weak(top, height, AtOrd::Relaxed, AtOrd::Relaxed)
            {
                Ok(_) => break,
                Err(h) => top = h,
            }
        }
        let top = top.max(height);
        // Predecessors and successors at every level, from the top down.
        let mut prev = [self.head.cast_const(); MAX_HEIGHT];
        let mut next = [ptr::null_mut::<Node>(); MAX_HEIGHT];
        let mut at = self.head.cast_const();
        for level in (0..top).rev() {
            let (p, nx) = self.find_splice(key, prefix, seq, level, at);
            prev[level] = p;
            next[level] = nx;
            at = p;
        }
        for level in 0..height {
            loop {
                // SAFETY: `n` has `height` tower slots; prev[level] is the head or a published
                // node of height > level.
                let linked = unsafe {
                    (*Node::tower(n).add(level)).store(next[level], AtOrd::Relaxed);
                    (*Node::tower(prev[level]).add(level)).compare_exchange(
                        next[level],
                        n,
                        AtOrd::Release,
                        AtOrd::Relaxed,
                    )
                };
                if linked.is_ok() {
                    break;
                }
                // Another insert linked a node after prev[level] meanwhile: find our place
                // again from there (everything it passes orders before us).
                let (p, nx) = self.find_splice(key, prefix, seq, level, prev[level]);
                prev[level] = p;
                next[level] = nx;
            }
        }
        self.len.fetch_add(1, AtOrd::Relaxed);
        self.used.fetch_add(size as u64, AtOrd::Relaxed);
        size as u64
    }

    /// The first entry at or after (`key`, `seq`) in list order.
    pub fn seek(&self, key: &[u8], seq: u64) -> Option<Pos<'_>> {
        let mut at = self.head.cast_const();
        let prefix = key_prefix(key);
        let mut found = ptr::null_mut();
        // The list's height is at least 1: the last pass is at level 0.
        for level in (0..self.height.load(AtOrd::Acquire)).rev() {
            (at, found) = self.find_splice(key, prefix, seq, level, at);
        }
        // The successor the level-0 search compared, not `at`'s next pointer loaded again: a
        // node a concurrent writer links after `at` meanwhile may order before (key, seq), and
        // returning it would hide the entry sought (a reader's get then missed a present key).
        // SAFETY: a non-null next pointer of this list (borrowed for the result's lifetime).
        (!found.is_null()).then(|| unsafe { Pos::new(found) })
    }

    /// The last entry ordering before (`key`, `seq`).
    pub fn seek_before(&self, key: &[u8], seq: u64) -> Option<Pos<'_>> {
        let mut at = self.head.cast_const();
        let prefix = key_prefix(key);
        for level in (0..self.height.load(AtOrd::Acquire)).rev() {
            at = self.find_splice(key, prefix, seq, level, at).0;
        }
        // SAFETY: a node of this list other than the head.
        (at != self.head.cast_const()).then(|| unsafe { Pos::new(at) })
    }

    /// The first entry.
    pub fn first(&self) -> Option<Pos<'_>> {
        // SAFETY: the head is live.
        let n = unsafe { Node::next(self.head, 0) };
        // SAFETY: a non-null next pointer of this list.
        (!n.is_null()).then(|| unsafe { Pos::new(n) })
    }

    /// The last entry.
    pub fn last(&self) -> Option<Pos<'_>> {
        let mut at = self.head.cast_const();
        for level in (0..self.height.load(AtOrd::Acquire)).rev() {
            loop {
                // SAFETY: `at` is the head or a published node of height > level.
                let n = unsafe { Node::next(at, level) };
                if n.is_null() {
                    break;
                }
                at = n;
            }
        }
        // SAFETY: a node of this list other than the head.
        (at != self.head.cast_const()).then(|| unsafe { Pos::new(at) })
    }

    /// The entry after `p`.
    pub fn next<'a>(&self, p: Pos<'a>) -> Option<Pos<'a>> {
        // SAFETY: `p` is a published node of a list borrowed for 'a.
        let n = unsafe { Node::next(p.node, 0) };
        // SAFETY: a non-null next pointer of `p`'s list, which is borrowed for 'a.
        (!n.is_null()).then(|| unsafe { Pos::new(n) })
    }

    /// The entry before `p` (a search: O(log n)).
    pub fn prev<'a>(&'a self, p: Pos<'a>) -> Option<Pos<'a>> {
        let e = self.get(p);
        self.seek_before(e.key, e.seq)
    }

    /// The entry at `p`.
    pub fn get<'a>(&self, p: Pos<'a>) -> EntryRef<'a> {
        // SAFETY: `p` is a published node of a list borrowed for 'a, whose nodes live unchanged
        // (but for their next pointers) as long as it does.
        unsafe {
            EntryRef {
                key: Node::key(p.node),
                seq: (*p.node).seq,
                kind: Kind::from_u8((*p.node).kind).unwrap_or(Kind::Put),
                value: Node::value(p.node),
            }
        }
    }

    /// The position [`Pos::detach`] made `p` from.
    ///
    /// # Safety
    /// `p` was detached from a position of this list (so its node lives as long as the list).
    pub(crate) unsafe fn attach(&self, p: RawPos) -> Pos<'_> {
        // SAFETY: per the caller, a published node of this list, borrowed for the result.
        unsafe { Pos::new(p.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn height_of(seq: u64) -> usize {
        let mut h = 1;
        let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        while h < MAX_HEIGHT && x & 3 == 0 {
            h += 1;
            x >>= 2;
        }
        h
    }

    fn all(l: &SkipList) -> Vec<(Vec<u8>, u64)> {
        let mut out = Vec::new();
        let mut p = l.first();
        while let Some(x) = p {
            let e = l.get(x);
            out.push((e.key.to_vec(), e.seq));
            p = l.next(x);
        }
        out
    }

    #[test]
    fn order_seek_and_reverse_match_a_model() {
        let l = SkipList::new();
        let mut model = BTreeMap::new();
        let mut x: u64 = 0x1234_5678;
        for seq in 1..5000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = format!("k{:04}", x % 700).into_bytes();
            let value = vec![(seq % 251) as u8; (x % 40) as usize];
            l.insert(&key, seq, Kind::Put, &value, height_of(seq));
            model.insert((key, std::cmp::Reverse(seq)), value);
        }
        assert_eq!(l.len(), model.len());
        let want: Vec<(Vec<u8>, u64)> = model.keys().map(|(k, s)| (k.clone(), s.0)).collect();
        assert_eq!(all(&l), want);
        // Values round-trip.
        let mut p = l.first();
        for ((k, s), v) in &model {
            let e = l.get(p.unwrap());
            assert_eq!((e.key, e.seq, e.value), (&k[..], s.0, &v[..]));
            p = l.next(p.unwrap());
        }
        // Backwards from the end.
        let mut back = Vec::new();
        let mut p = l.last();
        while let Some(x) = p {
            let e = l.get(x);
            back.push((e.key.to_vec(), e.seq));
            p = l.prev(x);
        }
        back.reverse();
        assert_eq!(back, want);
        // Seeks land on the first entry at or after the target.
        for probe in ["k0000", "k0350", "k0699", "k9", "a"] {
            for seq in [0, 2500, u64::MAX] {
                let got = l.seek(probe.as_bytes(), seq).map(|p| {
                    let e = l.get(p);
                    (e.key.to_vec(), e.seq)
                });
                let exp = want
                    .iter()
                    .find(|(k, s)| cmp_entries(k, *s, probe.as_bytes(), seq) != Ordering::Less)
                    .cloned();
                assert_eq!(got, exp, "seek {probe} {seq}");
            }
        }
    }

    /// Keys whose 16-byte prefixes tie (zero padding, shared prefixes, lengths around 16) order
    /// bytewise, as if there were no prefix in the header; seeks agree.
    #[test]
    fn keys_with_equal_prefixes_order_bytewise() {
        let mut keys: Vec<Vec<u8>> = vec![
            b"a".to_vec(),
            b"a\0".to_vec(),
            b"a\0\0".to_vec(),
            b"a\x01".to_vec(),
            vec![0],
            vec![0, 0],
            vec![0xff; 16],
            vec![0xff; 17],
            vec![0xff; 15],
        ];
        for tail in [0u8, 1, 0x7f, 0x80, 0xff] {
            let mut k = b"sensor/0001/temp".to_vec();
            assert_eq!(k.len(), 16);
            keys.push(k.clone());
            k.push(tail);
            keys.push(k.clone());
            k.push(tail);
            keys.push(k);
        }
        let l = SkipList::new();
        // Insert in a scrambled order, each key twice (two versions).
        let n = keys.len() as u64;
        for i in 0..2 * n {
            let k = &keys[(i * 7 % n) as usize];
            l.insert(k, i + 1, Kind::Put, b"v", height_of(i + 1));
        }
        let mut want: Vec<(Vec<u8>, u64)> = (0..2 * n)
            .map(|i| (keys[(i * 7 % n) as usize].clone(), i + 1))
            .collect();
        want.sort_by(|a, b| cmp_entries(&a.0, a.1, &b.0, b.1));
        assert_eq!(all(&l), want);
        for probe in &keys {
            let got = l.seek(probe, u64::MAX).map(|p| l.get(p).key.to_vec());
            assert_eq!(got.as_deref(), Some(&probe[..]), "seek {probe:?}");
        }
    }

    /// Readers seeking entries inserted earlier by a concurrent writer always find them (a
    /// reader's descent must never pass a published node).
    #[test]
    fn readers_find_what_a_concurrent_writer_inserted() {
        use std::sync::atomic::{AtomicBool, AtomicU64};
        let l = Arc::new(SkipList::new());
        let done = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let key = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes();
        let readers: Vec<_> = (0..2u64)
            .map(|r| {
                let (l, done, stop) = (l.clone(), done.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut x = r + 1;
                    let mut misses = Vec::new();
                    while !stop.load(AtOrd::Relaxed) {
                        let n = done.load(AtOrd::Acquire);
                        if n == 0 {
                            continue;
                        }
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let i = (x >> 33) % n;
                        let got = l.seek(&key(i), n).map(|p| l.get(p).seq);
                        if got != Some(i + 1) {
                            misses.push((i, n, got));
                        }
                    }
                    misses
                })
            })
            .collect();
        for i in 0..200_000u64 {
            let seq = i + 1;
            l.insert(&key(i), seq, Kind::Put, &[1u8; 8], height_of(seq));
            done.store(i + 1, AtOrd::Release);
        }
        stop.store(true, AtOrd::Relaxed);
        for r in readers {
            let m = r.join().unwrap();
            assert!(
                m.is_empty(),
                "{} misses, first {:?}",
                m.len(),
                &m[..m.len().min(5)]
            );
        }
    }

    #[test]
    fn concurrent_inserts_all_land_in_order() {
        let l = Arc::new(SkipList::new());
        let threads = 4u64;
        let per = 20_000u64;
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for i in 0..per {
                        let seq = i * threads + t + 1;
                        let key = format!("{:08}", seq.wrapping_mul(7919) % 50_000);
                        l.insert(
                            key.as_bytes(),
                            seq,
                            Kind::Put,
                            &seq.to_le_bytes(),
                            height_of(seq),
                        );
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let got = all(&l);
        assert_eq!(got.len() as u64, threads * per);
        assert!(got
            .windows(2)
            .all(|w| cmp_entries(&w[0].0, w[0].1, &w[1].0, w[1].1) == Ordering::Less));
        // Every level is a sorted sublist of level 0 (the towers are consistent).
        for level in 1..MAX_HEIGHT {
            let mut at = l.head.cast_const();
            loop {
                // SAFETY: walking published nodes of a live list.
                let n = unsafe { Node::next(at, level) };
                if n.is_null() {
                    break;
                }
                if at != l.head.cast_const() {
                    // SAFETY: as above.
                    unsafe {
                        assert!(
                            cmp_entries(Node::key(at), (*at).seq, Node::key(n), (*n).seq)
                                == Ordering::Less
                        );
                    }
                }
                at = n;
            }
        }
    }

    #[test]
    fn large_entries_get_their_own_chunk() {
        let l = SkipList::new();
        let big = vec![9u8; 1 << 20];
        l.insert(b"big", 1, Kind::Put, &big, 3);
        l.insert(b"small", 2, Kind::Delete, b"", 1);
        let p = l.first().unwrap();
        assert_eq!(l.get(p).value.len(), 1 << 20);
        assert!(l.get(p).value.iter().all(|&b| b == 9));
        assert_eq!(l.get(l.next(p).unwrap()).kind, Kind::Delete);
        assert!(l.reserved_bytes() >= l.used_bytes());
    }
}
