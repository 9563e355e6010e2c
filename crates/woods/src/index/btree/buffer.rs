//! The `btree` kind's insertion buffer (issue 23 item 1, `specs/hashing-aging-insert-buffers.md`
//! §3.4 and §3.6): what it holds in memory, how it is kept durable, and how reads see it.
//!
//! Absorbed memtables become the buffer's entries: in memory one sorted vector (entry order,
//! [`cmp_entries`]), on disk small sorted runs named in the tree's metadata, so that the log
//! can be released as soon as a memtable is in a run. A full buffer flushes the entries of
//! one leaf at a time into the tree ([`super::bins`] chooses the leaf); the flushed entries
//! stay in the runs, and the commit that makes the new tree durable records *markers*: the
//! ranges of positions, below a sequence-number watermark, whose entries are in the tree. A
//! reopen skips what the markers cover. When markers or runs grow past a bound, the buffer's
//! remaining entries are rewritten as one run and the markers are dropped.
//!
//! Every buffered version of a key is newer than every version of it in the tree (a flush
//! takes all buffered versions of the keys in a leaf's range), so a read takes the buffer's
//! versions first and goes on into the tree.
//!
//! [`cmp_entries`]: crate::entry::cmp_entries

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

use crate::entry::codec::{self, Reader};
use crate::entry::{cmp_entries, Entry};
use crate::error::{Error, Result};
use crate::memtable::ENTRY_OVERHEAD;
use crate::merge::EntryIter;
use crate::run::{Run, RunMeta};
use crate::storage::{PageFile, Purpose};

/// Markers kept before the buffer is rewritten as one run: the tree's metadata, which holds
/// them, is rewritten whole by every commit.
pub(crate) const MAX_MARKERS: usize = 64;
/// Runs kept before an absorb rewrites the buffer with the new memtable as one run.
pub(crate) const MAX_RUNS: usize = 8;

/// A position in entry order: a key and a sequence number (newer first).
#[derive(Clone, Debug)]
pub(crate) struct Pos {
    pub key: Arc<[u8]>,
    pub seq: u64,
}

impl Pos {
    /// The position before every entry (keys are never empty): the first leaf's bin.
    pub fn min() -> Pos {
        Pos {
            key: Arc::from(&[][..]),
            seq: u64::MAX,
        }
    }
    /// The position of `e`.
    pub fn of(e: &Entry) -> Pos {
        Pos {
            key: e.key.clone(),
            seq: e.seq,
        }
    }
    /// The position of a child's separator: where its leaf begins.
    pub fn of_child(c: &super::node::Child) -> Pos {
        Pos {
            key: c.key.clone(),
            seq: c.seq,
        }
    }
}

impl PartialEq for Pos {
    fn eq(&self, o: &Pos) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Pos {}
impl PartialOrd for Pos {
    fn partial_cmp(&self, o: &Pos) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pos {
    fn cmp(&self, o: &Pos) -> Ordering {
        cmp_entries(&self.key, self.seq, &o.key, o.seq)
    }
}

/// Entries of the buffer's runs at positions in `[lo, hi)` (`hi` None: to the end) with a
/// sequence number at most `watermark` are in the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Marker {
    pub lo: Pos,
    pub hi: Option<Pos>,
    pub watermark: u64,
}

impl Marker {
    pub fn covers(&self, e: &Entry) -> bool {
        e.seq <= self.watermark
            && cmp_entries(&e.key, e.seq, &self.lo.key, self.lo.seq) != Ordering::Less
            && self
                .hi
                .as_ref()
                .is_none_or(|h| cmp_entries(&e.key, e.seq, &h.key, h.seq) == Ordering::Less)
    }
}

/// What the tree's metadata says of the buffer: its runs and markers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BufferMeta {
    pub runs: Vec<RunMeta>,
    pub markers: Vec<Marker>,
}

fn put_pos(out: &mut Vec<u8>, p: &Pos) {
    codec::put_bytes(out, &p.key);
    codec::put_varint(out, p.seq);
}

fn get_pos(r: &mut Reader) -> Result<Pos> {
    let key: Arc<[u8]> = Arc::from(r.bytes()?);
    Ok(Pos {
        key,
        seq: r.varint()?,
    })
}

impl BufferMeta {
    /// Appends the encoding (`docs/format.md`, btree metadata version 2).
    pub fn encode(&self, out: &mut Vec<u8>) {
        codec::put_varint(out, self.runs.len() as u64);
        for r in &self.runs {
            r.encode(out);
        }
        codec::put_varint(out, self.markers.len() as u64);
        for m in &self.markers {
            put_pos(out, &m.lo);
            match &m.hi {
                Some(h) => {
                    out.push(1);
                    put_pos(out, h);
                }
                None => out.push(0),
            }
            codec::put_varint(out, m.watermark);
        }
    }

    pub fn decode(r: &mut Reader) -> Result<BufferMeta> {
        let bad = |d: String| Error::corruption("btree buffer metadata", None, d);
        let n = r.varint()?;
        if n > r.remaining() as u64 {
            return Err(bad(format!("{n} runs in {} bytes", r.remaining())));
        }
        let mut runs = Vec::with_capacity(n as usize);
        for _ in 0..n {
            runs.push(RunMeta::decode(r)?);
        }
        let n = r.varint()?;
        if n > r.remaining() as u64 {
            return Err(bad(format!("{n} markers in {} bytes", r.remaining())));
        }
        let mut markers = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let lo = get_pos(r)?;
            let hi = match r.u8()? {
                0 => None,
                1 => Some(get_pos(r)?),
                t => return Err(bad(format!("marker bound tag {t}"))),
            };
            markers.push(Marker {
                lo,
                hi,
                watermark: r.varint()?,
            });
        }
        Ok(BufferMeta { runs, markers })
    }
}

/// Bytes of work (and of buffer capacity) one entry stands for: the memtable's accounting.
pub(crate) fn units(e: &Entry) -> u64 {
    (e.key.len() + e.value.len()) as u64 + ENTRY_OVERHEAD
}

/// The buffer's entries as one published version sees them: sorted in entry order, no two
/// with the same key and sequence number.
#[derive(Default)]
pub(crate) struct Buffered {
    pub entries: Vec<Entry>,
    /// The sum of [`units`] over `entries`.
    pub units: u64,
    /// A buffer run that could not be read when the tree opened: the open succeeds, every read
    /// returns this error (the run's entries, newer than the tree's, are unknown), work on the
    /// buffer refuses, and `check` reports it.
    pub damaged: Option<Error>,
}

impl Buffered {
    pub fn new(entries: Vec<Entry>) -> Buffered {
        let units = entries.iter().map(units).sum();
        Buffered {
            entries,
            units,
            damaged: None,
        }
    }

    /// Ok unless a run of the buffer was unreadable at open ([`Buffered::damaged`]).
    pub fn intact(&self) -> Result<()> {
        match &self.damaged {
            Some(e) => Err(e.duplicate()),
            None => Ok(()),
        }
    }

    /// The index of the first entry at or after `p`.
    pub fn lower(&self, p: &Pos) -> usize {
        self.entries
            .partition_point(|e| cmp_entries(&e.key, e.seq, &p.key, p.seq) == Ordering::Less)
    }

    /// Appends the versions of `key` with seq <= `seq`, newest first, up to the first Put or
    /// Delete; returns whether one ended them.
    pub fn versions(&self, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> Result<bool> {
        self.intact()?;
        let at = self
            .entries
            .partition_point(|e| cmp_entries(&e.key, e.seq, key, seq) == Ordering::Less);
        let it = self.entries[at..]
            .iter()
            .take_while(|e| &e.key[..] == key)
            .map(|e| Ok(e.clone()));
        super::tree::collect_versions(it, out)
    }

    /// The entries within the bounds, in entry order or exactly reversed.
    pub fn iter(
        self: &Arc<Self>,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
        reverse: bool,
    ) -> EntryIter {
        let key_at = |e: &Entry, k: &[u8]| e.key[..].cmp(k);
        let start = match lo {
            Bound::Included(k) => self
                .entries
                .partition_point(|e| key_at(e, k) == Ordering::Less),
            Bound::Excluded(k) => self
                .entries
                .partition_point(|e| key_at(e, k) != Ordering::Greater),
            Bound::Unbounded => 0,
        };
        let end = match hi {
            Bound::Included(k) => self
                .entries
                .partition_point(|e| key_at(e, k) != Ordering::Greater),
            Bound::Excluded(k) => self
                .entries
                .partition_point(|e| key_at(e, k) == Ordering::Less),
            Bound::Unbounded => self.entries.len(),
        };
        let end = end.max(start);
        Box::new(SliceIter {
            error: self.damaged.as_ref().map(Error::duplicate),
            buf: self.clone(),
            front: start,
            back: end,
            reverse,
        })
    }
}

/// An iterator over `buf.entries[front..back]`, keeping the buffer alive.
struct SliceIter {
    /// The buffer's damage, yielded first.
    error: Option<Error>,
    buf: Arc<Buffered>,
    front: usize,
    back: usize,
    reverse: bool,
}

impl Iterator for SliceIter {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        if self.front >= self.back {
            return None;
        }
        let i = if self.reverse {
            self.back -= 1;
            self.back
        } else {
            self.front += 1;
            self.front - 1
        };
        Some(Ok(self.buf.entries[i].clone()))
    }
}

/// The buffer `meta` describes: the entries of its runs that no marker covers. A run that
/// reads as corrupt does not refuse the open: the buffer is returned marked
/// [`Buffered::damaged`] (other errors, such as I/O failures, are returned).
pub(crate) fn load(store: &Arc<PageFile>, meta: &BufferMeta) -> Result<Buffered> {
    let mut all = Vec::new();
    let mut damaged = None;
    for m in &meta.runs {
        let read = || -> Result<Vec<Entry>> {
            let run = Arc::new(Run::open(store.clone(), m.clone())?);
            let mut out = Vec::new();
            for e in run.iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::Merge) {
                let e = e?;
                if !meta.markers.iter().any(|k| k.covers(&e)) {
                    out.push(e);
                }
            }
            Ok(out)
        };
        match read() {
            Ok(entries) => all.extend(entries),
            Err(e @ Error::Corruption { .. }) => {
                damaged.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    all.sort_by(|a, b| cmp_entries(&a.key, a.seq, &b.key, b.seq));
    all.dedup_by(|a, b| a.key == b.key && a.seq == b.seq);
    let mut b = Buffered::new(all);
    b.damaged = damaged;
    Ok(b)
}

/// `a` and `b` (each in entry order) merged in entry order.
pub(crate) fn merge_sorted(a: &[Entry], b: &[Entry]) -> Vec<Entry> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if cmp_entries(&a[i].key, a[i].seq, &b[j].key, b[j].seq) == Ordering::Greater {
            out.push(b[j].clone());
            j += 1;
        } else {
            out.push(a[i].clone());
            i += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// The markers that say the entries of `buf` whose `flushed` flag is set are in the tree:
/// one per maximal stretch of flushed entries in entry order, each below `watermark` (at
/// least the newest sequence number in `buf`).
pub(crate) fn markers_for(buf: &[Entry], flushed: &[bool], watermark: u64) -> Vec<Marker> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < buf.len() {
        if !flushed[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < buf.len() && flushed[i] {
            i += 1;
        }
        out.push(Marker {
            lo: Pos::of(&buf[start]),
            hi: buf.get(i).map(Pos::of),
            watermark,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Kind;

    fn e(k: &str, seq: u64) -> Entry {
        Entry {
            key: Arc::from(k.as_bytes()),
            seq,
            kind: Kind::Put,
            value: Arc::from(&b"v"[..]),
        }
    }

    #[test]
    fn markers_cover_exactly_the_flushed_stretches() {
        let buf = vec![e("a", 9), e("a", 3), e("b", 5), e("c", 7), e("d", 1)];
        let flushed = [true, true, false, true, true];
        let m = markers_for(&buf, &flushed, 9);
        assert_eq!(m.len(), 2);
        for (x, f) in buf.iter().zip(flushed) {
            assert_eq!(m.iter().any(|m| m.covers(x)), f, "{x:?}");
        }
        // A newer entry in a flushed stretch is not covered: it came after the watermark.
        assert!(!m.iter().any(|m| m.covers(&e("a", 10))));
        let meta = BufferMeta {
            runs: Vec::new(),
            markers: m,
        };
        let mut out = Vec::new();
        meta.encode(&mut out);
        let back = BufferMeta::decode(&mut Reader::new(&out, "test")).expect("decode");
        assert_eq!(back, meta);
    }

    #[test]
    fn buffer_reads_honour_bounds_and_direction() {
        let b = Arc::new(Buffered::new(vec![
            e("a", 2),
            e("b", 9),
            e("b", 4),
            e("c", 1),
        ]));
        let keys = |lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, rev: bool| -> Vec<(String, u64)> {
            b.iter(&lo, &hi, rev)
                .map(|r| {
                    let x = r.expect("entry");
                    (String::from_utf8_lossy(&x.key).into_owned(), x.seq)
                })
                .collect()
        };
        assert_eq!(
            keys(
                Bound::Excluded(b"a".to_vec()),
                Bound::Included(b"b".to_vec()),
                false
            ),
            vec![("b".into(), 9), ("b".into(), 4)]
        );
        assert_eq!(
            keys(Bound::Unbounded, Bound::Excluded(b"c".to_vec()), true),
            vec![("b".into(), 4), ("b".into(), 9), ("a".into(), 2)]
        );
        let mut out = Vec::new();
        assert!(b.versions(b"b", 5, &mut out).expect("versions"));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].seq, 4);
    }
}
