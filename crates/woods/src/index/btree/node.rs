//! B+-tree page formats: leaves of versioned entries, internal nodes of separators.
//!
//! Leaf body: `type u8 = 1, pad u8, count u16`, then per entry `kind u8 (bit 7: value out of
//! line), seq u64, key_len u16, key`, then either `value_len u32, value` or `blob_start u64,
//! value_len u32`. Internal body: `type u8 = 2, pad u8, count u16`, then per child
//! `child u64, sep_seq u64, sep_key_len u16, sep_key`: the separator is the child's first
//! entry, or, where the entry before that one in the tree has another key, that entry's key with
//! the sequence number [`SEP_ALL`], which sorts before every version of the key (so that every
//! version of a key, the later ones too, is routed to the child that holds it).

use std::cmp::Ordering;
use std::sync::Arc;

use crate::entry::codec::Reader;
use crate::entry::{Entry, Kind};
use crate::error::{Error, Result};
use crate::storage::{Extent, PAGE_BODY};

pub const LEAF: u8 = 1;
pub const INTERNAL: u8 = 2;
/// A separator's sequence number where its child begins a key (the entry before it has another
/// key): above every sequence number, so that the separator sorts before every version of its key,
/// those written later included. A separator at the key's own first entry would send a newer
/// version of the key to the child on its left, and the older ones would stay in the right one,
/// for good (found by `woods bench aging`: an aged tree held 2.03 entries for each live one).
pub const SEP_ALL: u64 = crate::entry::MAX_SEQ + 1;
const HEADER: usize = 4;
/// Entries whose key + value exceed this keep the value in blob pages, so that every page holds
/// at least three maximal entries.
pub const INLINE_MAX: usize = 1300;
const BLOB_FLAG: u8 = 0x80;

/// A value as a leaf holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Inline(Arc<[u8]>),
    /// Out-of-line value: contiguous pages from `start`, `len` bytes.
    Blob {
        start: u64,
        len: u32,
    },
}

impl Val {
    pub fn blob_extent(&self) -> Option<Extent> {
        match self {
            Val::Blob { start, len } => Some(Extent {
                start: *start,
                pages: blob_pages(*len as usize),
            }),
            Val::Inline(_) => None,
        }
    }
}

/// Pages a blob of `len` bytes occupies.
pub fn blob_pages(len: usize) -> u64 {
    len.div_ceil(PAGE_BODY).max(1) as u64
}

#[derive(Clone, Debug)]
pub struct LeafEntry {
    pub key: Arc<[u8]>,
    pub seq: u64,
    pub kind: Kind,
    pub val: Val,
}

impl LeafEntry {
    pub fn encoded_len(&self) -> usize {
        1 + 8
            + 2
            + self.key.len()
            + match &self.val {
                Val::Inline(v) if self.key.len() + v.len() <= INLINE_MAX => 4 + v.len(),
                _ => 12,
            }
    }
    pub fn from_entry(e: Entry) -> LeafEntry {
        LeafEntry {
            key: e.key,
            seq: e.seq,
            kind: e.kind,
            val: Val::Inline(e.value),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Child {
    pub key: Arc<[u8]>,
    pub seq: u64,
    pub page: u64,
}

impl Child {
    pub fn encoded_len(&self) -> usize {
        8 + 8 + 2 + self.key.len()
    }
}

pub const BODY_ROOM: usize = PAGE_BODY - HEADER;

pub fn node_type(body: &[u8], page: u64) -> Result<u8> {
    match body[0] {
        LEAF | INTERNAL => Ok(body[0]),
        t => Err(Error::corruption(
            "btree",
            Some(page),
            format!("unknown node type {t}"),
        )),
    }
}

pub fn decode_leaf(body: &[u8], page: u64) -> Result<Vec<LeafEntry>> {
    let wrap = |e: Error| match e {
        Error::Corruption { detail, .. } => Error::corruption("btree leaf", Some(page), detail),
        other => other,
    };
    let mut r = Reader::new(&body[..PAGE_BODY], "btree leaf");
    if r.u8().map_err(wrap)? != LEAF {
        return Err(Error::corruption("btree leaf", Some(page), "not a leaf"));
    }
    r.u8().map_err(wrap)?;
    let n = r.u16().map_err(wrap)? as usize;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let kb = r.u8().map_err(wrap)?;
        let kind = Kind::from_u8(kb & !BLOB_FLAG).map_err(wrap)?;
        let seq = r.u64().map_err(wrap)?;
        let klen = r.u16().map_err(wrap)? as usize;
        let key: Arc<[u8]> = Arc::from(r.take(klen).map_err(wrap)?);
        let val = if kb & BLOB_FLAG != 0 {
            let start = r.u64().map_err(wrap)?;
            let len = r.u32().map_err(wrap)?;
            Val::Blob { start, len }
        } else {
            let vlen = r.u32().map_err(wrap)? as usize;
            Val::Inline(Arc::from(r.take(vlen).map_err(wrap)?))
        };
        out.push(LeafEntry {
            key,
            seq,
            kind,
            val,
        });
    }
    Ok(out)
}

/// Encodes a leaf; entries with large inline values must have been given blobs already.
pub fn encode_leaf(entries: &[LeafEntry], body: &mut [u8]) {
    let mut out = Vec::with_capacity(PAGE_BODY);
    out.push(LEAF);
    out.push(0);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for e in entries {
        let blob = matches!(e.val, Val::Blob { .. });
        out.push(e.kind as u8 | if blob { BLOB_FLAG } else { 0 });
        out.extend_from_slice(&e.seq.to_le_bytes());
        out.extend_from_slice(&(e.key.len() as u16).to_le_bytes());
        out.extend_from_slice(&e.key);
        match &e.val {
            Val::Inline(v) => {
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
            }
            Val::Blob { start, len } => {
                out.extend_from_slice(&start.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
        }
    }
    debug_assert!(out.len() <= PAGE_BODY);
    body[..out.len()].copy_from_slice(&out);
}

pub fn decode_internal(body: &[u8], page: u64) -> Result<Vec<Child>> {
    let wrap = |e: Error| match e {
        Error::Corruption { detail, .. } => {
            Error::corruption("btree internal node", Some(page), detail)
        }
        other => other,
    };
    let mut r = Reader::new(&body[..PAGE_BODY], "btree internal node");
    if r.u8().map_err(wrap)? != INTERNAL {
        return Err(Error::corruption(
            "btree internal node",
            Some(page),
            "not an internal node",
        ));
    }
    r.u8().map_err(wrap)?;
    let n = r.u16().map_err(wrap)? as usize;
    if n == 0 {
        return Err(Error::corruption(
            "btree internal node",
            Some(page),
            "no children",
        ));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let child = r.u64().map_err(wrap)?;
        let seq = r.u64().map_err(wrap)?;
        let klen = r.u16().map_err(wrap)? as usize;
        let key: Arc<[u8]> = Arc::from(r.take(klen).map_err(wrap)?);
        out.push(Child {
            key,
            seq,
            page: child,
        });
    }
    Ok(out)
}

pub fn encode_internal(children: &[Child], body: &mut [u8]) {
    let mut out = Vec::with_capacity(PAGE_BODY);
    out.push(INTERNAL);
    out.push(0);
    out.extend_from_slice(&(children.len() as u16).to_le_bytes());
    for c in children {
        out.extend_from_slice(&c.page.to_le_bytes());
        out.extend_from_slice(&c.seq.to_le_bytes());
        out.extend_from_slice(&(c.key.len() as u16).to_le_bytes());
        out.extend_from_slice(&c.key);
    }
    debug_assert!(out.len() <= PAGE_BODY);
    body[..out.len()].copy_from_slice(&out);
}

// ---- in-place search ---------------------------------------------------------------------

/// Bytes of a leaf item before its key: kind, seq, key length.
const LEAF_KEY_AT: usize = 1 + 8 + 2;
/// Bytes of an internal item before its key: child, seq, key length.
const INTERNAL_KEY_AT: usize = 8 + 8 + 2;
/// The fewest bytes a leaf item takes (an empty key and value); an internal item takes more.
const LEAF_ITEM_MIN: usize = LEAF_KEY_AT + 4;
/// Most items a node page can hold; a page whose count says more cannot fit them.
pub const MAX_ITEMS: usize = BODY_ROOM / LEAF_ITEM_MIN;

/// A value as a leaf page holds it, borrowed from the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValRef<'a> {
    Inline(&'a [u8]),
    /// Out-of-line value: contiguous pages from `start`, `len` bytes.
    Blob {
        start: u64,
        len: u32,
    },
}

/// The item offsets of one node page, found by a single pass over the items' lengths: the
/// format has no offset array, and this pass is what lets a lookup binary-search a node in the
/// cached page without decoding (and allocating) its keys and values. Reused across the nodes
/// of a descent; holds nothing of the page itself.
pub struct Offsets {
    at: [u16; MAX_ITEMS + 1],
    n: usize,
}

impl Default for Offsets {
    fn default() -> Self {
        Offsets {
            at: [0; MAX_ITEMS + 1],
            n: 0,
        }
    }
}

impl Offsets {
    /// Finds the items of node page `page` (whose body is `body`), which must be a node of type
    /// `want` ([`LEAF`] or [`INTERNAL`]). Every item is checked to lie inside the body, so that
    /// the view's accessors cannot read past it; what the items hold (a leaf entry's kind, a
    /// blob pointer) is checked where it is read.
    pub fn scan<'a>(&'a mut self, body: &'a [u8], page: u64, want: u8) -> Result<NodeView<'a>> {
        self.n = 0;
        let leaf = want == LEAF;
        let what = if leaf {
            "btree leaf"
        } else {
            "btree internal node"
        };
        let bad = |d: String| Error::corruption(what, Some(page), d);
        let body = body
            .get(..PAGE_BODY)
            .ok_or_else(|| bad(format!("page body of {} bytes", body.len())))?;
        if body[0] != want {
            return Err(bad(if leaf {
                "not a leaf".into()
            } else {
                "not an internal node".into()
            }));
        }
        let n = u16::from_le_bytes([body[2], body[3]]) as usize;
        if !leaf && n == 0 {
            return Err(bad("no children".into()));
        }
        if n > MAX_ITEMS {
            return Err(bad(format!("{n} items cannot fit a page")));
        }
        let u16_at = |i: usize| -> Option<usize> {
            Some(u16::from_le_bytes(body.get(i..i + 2)?.try_into().ok()?) as usize)
        };
        let mut at = HEADER;
        for i in 0..n {
            self.at[i] = at as u16;
            let end = if leaf {
                u16_at(at + LEAF_KEY_AT - 2).and_then(|klen| {
                    let v = at + LEAF_KEY_AT + klen;
                    if body[at] & BLOB_FLAG != 0 {
                        Some(v + 12)
                    } else {
                        let vlen = u32::from_le_bytes(body.get(v..v + 4)?.try_into().ok()?);
                        (v + 4).checked_add(vlen as usize)
                    }
                })
            } else {
                u16_at(at + INTERNAL_KEY_AT - 2).map(|klen| at + INTERNAL_KEY_AT + klen)
            };
            at = end
                .filter(|&e| e <= PAGE_BODY)
                .ok_or_else(|| bad(format!("item {i} of {n} runs past the page")))?;
        }
        self.at[n] = at as u16;
        self.n = n;
        Ok(NodeView {
            body,
            page,
            leaf,
            at: &self.at[..n],
        })
    }

    /// Items of the node last scanned (0 before any, or after a scan that failed).
    pub fn len(&self) -> usize {
        self.n
    }

    /// The view of the page these offsets were last scanned from (`body` and `page` must be
    /// that page's, and `leaf` its type), without scanning it again.
    pub fn view<'a>(&'a self, body: &'a [u8], page: u64, leaf: bool) -> NodeView<'a> {
        NodeView {
            body: &body[..PAGE_BODY],
            page,
            leaf,
            at: &self.at[..self.n],
        }
    }
}

/// One node page as [`Offsets::scan`] found it: its items, read in place. Every accessor
/// reads only within the item the scan bounded, so none can go past the page.
pub struct NodeView<'a> {
    body: &'a [u8],
    page: u64,
    leaf: bool,
    at: &'a [u16],
}

impl<'a> NodeView<'a> {
    /// Items in the node.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Whether the node holds no item (only a corrupt leaf, or an empty tree's root).
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// The page the node was read from.
    pub fn page(&self) -> u64 {
        self.page
    }

    /// Bytes `from..from + N` of the body; within the page by the scan.
    fn bytes<const N: usize>(&self, from: usize) -> [u8; N] {
        let mut b = [0u8; N];
        b.copy_from_slice(&self.body[from..from + N]);
        b
    }

    /// Item `i`'s key, borrowed from the page.
    pub fn key(&self, i: usize) -> &'a [u8] {
        let o = self.at[i] as usize
            + if self.leaf {
                LEAF_KEY_AT
            } else {
                INTERNAL_KEY_AT
            };
        let klen = u16::from_le_bytes(self.bytes(o - 2)) as usize;
        &self.body[o..o + klen]
    }

    /// Item `i`'s sequence number.
    pub fn seq(&self, i: usize) -> u64 {
        let o = self.at[i] as usize + if self.leaf { 1 } else { 8 };
        u64::from_le_bytes(self.bytes(o))
    }

    /// The index of the first item at or after position (key, seq): where a key's versions
    /// with seq <= `seq` begin in a leaf.
    pub fn lower_bound(&self, key: &[u8], seq: u64) -> usize {
        self.at
            .partition_point(|&o| self.cmp_at(o, key, seq) == Ordering::Less)
    }

    /// The number of items at or before position (key, seq).
    pub fn upper_bound(&self, key: &[u8], seq: u64) -> usize {
        self.at
            .partition_point(|&o| self.cmp_at(o, key, seq) != Ordering::Greater)
    }

    fn cmp_at(&self, o: u16, key: &[u8], seq: u64) -> Ordering {
        let o = o as usize;
        let (k, s) = if self.leaf {
            (o + LEAF_KEY_AT, o + 1)
        } else {
            (o + INTERNAL_KEY_AT, o + 8)
        };
        let klen = u16::from_le_bytes(self.bytes(k - 2)) as usize;
        self.body[k..k + klen]
            .cmp(key)
            .then_with(|| seq.cmp(&u64::from_le_bytes(self.bytes(s))))
    }

    /// Child `i`'s page (an internal node's item).
    pub fn child(&self, i: usize) -> u64 {
        debug_assert!(!self.leaf);
        u64::from_le_bytes(self.bytes(self.at[i] as usize))
    }

    /// The child whose subtree holds position (key, seq) (an internal node's).
    pub fn child_for(&self, key: &[u8], seq: u64) -> usize {
        self.upper_bound(key, seq).saturating_sub(1)
    }

    /// Leaf item `i`'s kind; a byte that names none is corruption of the page.
    pub fn kind(&self, i: usize) -> Result<Kind> {
        let kb = self.body[self.at[i] as usize];
        Kind::from_u8(kb & !BLOB_FLAG).map_err(|e| match e {
            Error::Corruption { detail, .. } => {
                Error::corruption("btree leaf", Some(self.page), detail)
            }
            other => other,
        })
    }

    /// Leaf item `i`'s value, borrowed from the page (or where its blob lies).
    pub fn value(&self, i: usize) -> ValRef<'a> {
        let o = self.at[i] as usize;
        let v = o + LEAF_KEY_AT + self.key(i).len();
        if self.body[o] & BLOB_FLAG != 0 {
            ValRef::Blob {
                start: u64::from_le_bytes(self.bytes(v)),
                len: u32::from_le_bytes(self.bytes(v + 8)),
            }
        } else {
            let vlen = u32::from_le_bytes(self.bytes(v)) as usize;
            ValRef::Inline(&self.body[v + 4..v + 4 + vlen])
        }
    }
}

/// Splits items into groups whose encoded sizes fit a page, each filled to about `target`
/// bytes (the last groups are balanced so that none is nearly empty).
///
/// The fill target never cuts a group below two items; only the page size does. Otherwise items
/// larger than half the target (1 KiB separators at a 50 % fill) would each get a node of their
/// own, and a level of internal nodes would be as wide as the level below it: building the root
/// would never end.
pub fn split_sizes(sizes: &[usize], target: usize) -> Vec<usize> {
    let total: usize = sizes.iter().sum();
    if total <= BODY_ROOM {
        return if sizes.is_empty() {
            vec![]
        } else {
            vec![sizes.len()]
        };
    }
    let mut groups = Vec::new();
    let mut cur = 0usize;
    let mut n = 0usize;
    for &s in sizes {
        if (n >= 2 && cur + s > target) || (n > 0 && cur + s > BODY_ROOM) {
            groups.push(n);
            cur = 0;
            n = 0;
        }
        cur += s;
        n += 1;
    }
    if n > 0 {
        groups.push(n);
    }
    // Rebalance the last two groups if the last is small.
    if groups.len() >= 2 {
        let l = groups.len();
        let last_start = sizes.len() - groups[l - 1];
        let prev_start = last_start - groups[l - 2];
        let last_bytes: usize = sizes[last_start..].iter().sum();
        if last_bytes < target / 4 {
            let both = &sizes[prev_start..];
            let half: usize = both.iter().sum::<usize>() / 2;
            let mut acc = 0;
            let mut k = 0;
            while k < both.len() - 1 && acc + both[k] <= half.max(1) {
                acc += both[k];
                k += 1;
            }
            let k = k.max(1);
            let rest: usize = both[k..].iter().sum();
            if acc <= BODY_ROOM && rest <= BODY_ROOM {
                groups[l - 2] = k;
                groups[l - 1] = both.len() - k;
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::{cmp_entries, MAX_KEY_LEN};

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn random_leaf(rng: &mut SmallRng) -> Vec<LeafEntry> {
        let mut out: Vec<LeafEntry> = Vec::new();
        let mut bytes = 0;
        loop {
            // Few distinct keys, so that keys repeat with several versions.
            let key: Vec<u8> = (0..rng.gen_range(1..6))
                .map(|_| rng.gen_range(b'a'..b'e'))
                .collect();
            let kind = [Kind::Put, Kind::Delete, Kind::Merge][rng.gen_range(0..3)];
            let val = if rng.gen_bool(0.1) {
                Val::Blob {
                    start: rng.gen(),
                    len: rng.gen(),
                }
            } else {
                Val::Inline(Arc::from(vec![rng.gen::<u8>(); rng.gen_range(0..200)]))
            };
            let e = LeafEntry {
                key: Arc::from(key),
                seq: rng.gen_range(0..50),
                kind,
                val,
            };
            bytes += e.encoded_len();
            if bytes > BODY_ROOM || out.len() >= 60 {
                break;
            }
            out.push(e);
        }
        out.sort_by(|a, b| cmp_entries(&a.key, a.seq, &b.key, b.seq));
        out.dedup_by(|a, b| a.key == b.key && a.seq == b.seq);
        out
    }

    fn random_internal(rng: &mut SmallRng) -> Vec<Child> {
        let mut out: Vec<Child> = (0..rng.gen_range(1..120))
            .map(|_| Child {
                key: Arc::from(
                    (0..rng.gen_range(0..8))
                        .map(|_| rng.gen_range(b'a'..b'e'))
                        .collect::<Vec<u8>>(),
                ),
                seq: rng.gen_range(0..50),
                page: rng.gen(),
            })
            .collect();
        out.sort_by(|a, b| cmp_entries(&a.key, a.seq, &b.key, b.seq));
        out
    }

    fn random_position(rng: &mut SmallRng) -> (Vec<u8>, u64) {
        let key = (0..rng.gen_range(0..7))
            .map(|_| rng.gen_range(b'a'..b'f'))
            .collect();
        (key, rng.gen_range(0..52))
    }

    fn encoded_leaf(entries: &[LeafEntry]) -> Vec<u8> {
        let mut body = vec![0u8; PAGE_BODY];
        encode_leaf(entries, &mut body);
        body
    }

    fn encoded_internal(children: &[Child]) -> Vec<u8> {
        let mut body = vec![0u8; PAGE_BODY];
        encode_internal(children, &mut body);
        body
    }

    /// The in-place search finds what a binary search over the decoded node finds, and reads
    /// every item as the decoder does.
    #[test]
    fn in_place_search_agrees_with_the_decoder() {
        let seed = crate::testutil::seed();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut offs = Offsets::default();
        for _ in 0..300 {
            let entries = random_leaf(&mut rng);
            let body = encoded_leaf(&entries);
            let decoded = decode_leaf(&body, 9).expect("leaf");
            let view = offs.scan(&body, 9, LEAF).expect("scan");
            assert_eq!(view.len(), decoded.len());
            for (i, e) in decoded.iter().enumerate() {
                assert_eq!(view.key(i), &e.key[..]);
                assert_eq!(view.seq(i), e.seq);
                assert_eq!(view.kind(i).expect("kind"), e.kind);
                let val = match &e.val {
                    Val::Inline(v) => ValRef::Inline(v),
                    Val::Blob { start, len } => ValRef::Blob {
                        start: *start,
                        len: *len,
                    },
                };
                assert_eq!(view.value(i), val);
            }
            for _ in 0..50 {
                let (k, s) = random_position(&mut rng);
                let lower = decoded.partition_point(|e| cmp_entries(&e.key, e.seq, &k, s).is_lt());
                let upper = decoded.partition_point(|e| cmp_entries(&e.key, e.seq, &k, s).is_le());
                assert_eq!(view.lower_bound(&k, s), lower, "{k:?} {s}");
                assert_eq!(view.upper_bound(&k, s), upper, "{k:?} {s}");
            }

            let children = random_internal(&mut rng);
            let body = encoded_internal(&children);
            let view = offs.scan(&body, 9, INTERNAL).expect("scan");
            assert_eq!(view.len(), children.len());
            for (i, c) in children.iter().enumerate() {
                assert_eq!(view.key(i), &c.key[..]);
                assert_eq!(view.seq(i), c.seq);
                assert_eq!(view.child(i), c.page);
            }
            for _ in 0..50 {
                let (k, s) = random_position(&mut rng);
                let want = crate::index::btree::tree::child_for(&children, &k, s);
                assert_eq!(view.child_for(&k, s), want, "{k:?} {s}");
            }
        }
    }

    fn is_corruption(r: &Result<impl std::fmt::Debug>) -> bool {
        matches!(r, Err(Error::Corruption { .. }))
    }

    /// Reads everything a lookup or a cursor can read of a node that scanned, at random
    /// positions too: none of it may panic, and a bad kind byte is corruption.
    fn read_all(view: &NodeView, rng: &mut SmallRng) {
        for i in 0..view.len() {
            let _ = (view.key(i), view.seq(i));
            if view.leaf {
                let k = view.kind(i);
                assert!(k.is_ok() || is_corruption(&k), "{k:?}");
                let _ = view.value(i);
            } else {
                let _ = view.child(i);
            }
        }
        for _ in 0..20 {
            let (k, s) = random_position(rng);
            let (lo, hi) = (view.lower_bound(&k, s), view.upper_bound(&k, s));
            assert!(lo <= view.len() && hi <= view.len());
            if !view.leaf {
                assert!(view.child_for(&k, s) < view.len());
            }
        }
    }

    /// A node cut short (the body slice, or items past the bytes written, the rest of the page
    /// garbage) is corruption or, where the cut only garbled key or value bytes, a node whose
    /// reads stay inside the page; a cut inside an item's header (its key length garbage) is
    /// always corruption.
    #[test]
    fn a_truncated_node_is_corruption_never_a_panic() {
        let seed = crate::testutil::seed();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut offs = Offsets::default();
        for _ in 0..20 {
            let entries = random_leaf(&mut rng);
            let children = random_internal(&mut rng);
            for (body, want, starts) in [
                (
                    encoded_leaf(&entries),
                    LEAF,
                    entries.iter().map(|e| e.encoded_len()).collect::<Vec<_>>(),
                ),
                (
                    encoded_internal(&children),
                    INTERNAL,
                    children.iter().map(|c| c.encoded_len()).collect(),
                ),
            ] {
                for cut in 0..body.len() {
                    assert!(is_corruption(&offs.scan(&body[..cut], 3, want).map(|_| ())));
                }
                let used: usize = HEADER + starts.iter().sum::<usize>();
                // Where each item's header (before its key) lies.
                let mut headers = Vec::new();
                let mut at = HEADER;
                for len in &starts {
                    let key_at = if want == LEAF {
                        LEAF_KEY_AT
                    } else {
                        INTERNAL_KEY_AT
                    };
                    headers.push(at..at + key_at);
                    at += len;
                }
                for cut in HEADER..used {
                    let mut cut_body = body.clone();
                    cut_body[cut..].fill(0xff);
                    let r = offs.scan(&cut_body, 3, want);
                    if headers.iter().any(|h| h.contains(&cut)) {
                        assert!(is_corruption(&r.map(|_| ())), "cut at {cut}");
                        continue;
                    }
                    match r {
                        Ok(view) => read_all(&view, &mut rng),
                        Err(e) => assert!(matches!(e, Error::Corruption { .. }), "{e:?}"),
                    }
                }
            }
        }
    }

    /// Random bytes flipped in valid nodes, and wholly random pages, scan to corruption or to a
    /// node whose every read stays inside the page; the in-place reads refuse exactly the nodes
    /// the whole-node decoder refuses.
    #[test]
    fn garbled_nodes_give_corruption_never_a_panic() {
        let seed = crate::testutil::seed();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut offs = Offsets::default();
        let (mut scanned, mut refused) = (0, 0);
        for round in 0..3000 {
            let (mut body, want) = match round % 3 {
                0 => (encoded_leaf(&random_leaf(&mut rng)), LEAF),
                1 => (encoded_internal(&random_internal(&mut rng)), INTERNAL),
                _ => {
                    let mut b = vec![0u8; PAGE_BODY];
                    rng.fill(&mut b[..]);
                    b[0] = rng.gen_range(1..3);
                    b[2] = rng.gen();
                    b[3] = rng.gen_range(0..2);
                    (b, rng.gen_range(1..3))
                }
            };
            for _ in 0..rng.gen_range(1..9) {
                let at = if rng.gen_bool(0.8) {
                    rng.gen_range(0..64)
                } else {
                    rng.gen_range(0..PAGE_BODY)
                };
                body[at] = rng.gen();
            }
            // The decoder's verdict: the in-place reads must refuse exactly the nodes it does.
            let decoded = if want == LEAF {
                decode_leaf(&body, 3).map(|l| l.len())
            } else {
                decode_internal(&body, 3).map(|c| c.len())
            };
            match offs.scan(&body, 3, want) {
                Ok(view) => {
                    scanned += 1;
                    read_all(&view, &mut rng);
                    let kinds_ok = !view.leaf || (0..view.len()).all(|i| view.kind(i).is_ok());
                    match decoded {
                        Ok(n) => assert!(kinds_ok && n == view.len()),
                        Err(e) => assert!(!kinds_ok, "the decoder refused: {e}"),
                    }
                }
                Err(e) => {
                    refused += 1;
                    assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
                    assert!(
                        decoded.is_err(),
                        "the decoder took what the scan refused: {e}"
                    );
                }
            }
        }
        assert!(
            scanned > 0 && refused > 0,
            "{scanned} scanned, {refused} refused"
        );
    }

    #[test]
    fn a_node_of_the_wrong_type_or_count_is_corruption() {
        let mut offs = Offsets::default();
        let leaf = encoded_leaf(&[LeafEntry {
            key: Arc::from(&b"k"[..]),
            seq: 4,
            kind: Kind::Put,
            val: Val::Inline(Arc::from(&b"v"[..])),
        }]);
        assert!(is_corruption(&offs.scan(&leaf, 1, INTERNAL).map(|_| ())));
        assert!(offs.scan(&leaf, 1, LEAF).is_ok());
        let internal = encoded_internal(&[]);
        assert!(is_corruption(
            &offs.scan(&internal, 1, INTERNAL).map(|_| ())
        ));
        let mut many = leaf.clone();
        many[2..4].copy_from_slice(&(MAX_ITEMS as u16 + 1).to_le_bytes());
        assert!(is_corruption(&offs.scan(&many, 1, LEAF).map(|_| ())));
        let mut bad_kind = leaf;
        bad_kind[HEADER] = 7;
        let view = offs.scan(&bad_kind, 1, LEAF).expect("lengths are intact");
        assert!(is_corruption(&view.kind(0)));
    }

    /// Regression: with separators of the longest keys and a 50 % fill, every internal node held
    /// one child and the root-building loop never ended.
    #[test]
    fn long_items_at_half_fill_still_narrow_the_level() {
        let sep = Child {
            key: Arc::from(vec![7u8; MAX_KEY_LEN]),
            seq: 1,
            page: 1,
        }
        .encoded_len();
        for fill in [50, 60, 75, 90, 100] {
            let target = BODY_ROOM * fill / 100;
            for count in 2..40 {
                let sizes = vec![sep; count];
                let groups = split_sizes(&sizes, target);
                assert_eq!(groups.iter().sum::<usize>(), count);
                assert!(
                    groups.len() < count,
                    "fill {fill}: {count} items in {} groups",
                    groups.len()
                );
                for (i, g) in groups.iter().enumerate() {
                    assert!(g * sep <= BODY_ROOM, "group of {g} does not fit a page");
                    if i + 1 < groups.len() {
                        assert!(*g >= 2, "fill {fill}: group {i} of {count} has {g} item");
                    }
                }
            }
        }
    }
}
