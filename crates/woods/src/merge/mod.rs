//! Versioned k-way merging: combines sorted entry streams, resolves what a reader at a sequence
//! number sees, and decides which versions a reorganisation keeps.

mod concat;
mod prime;

pub use self::concat::{parts_meeting, range_meets, within_hi, Concat, Parts};
pub use self::prime::{prime, start_pool};

use std::cmp::Ordering;
use std::collections::binary_heap::PeekMut;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::entry::{cmp_entries, Entry, Kind, MAX_VALUE_LEN};
use crate::error::{Error, Result};
use crate::options::MergeOperator;

/// A stream of entries in entry order (or exactly reversed).
pub type EntryIter = Box<dyn Iterator<Item = Result<Entry>> + Send>;

struct HeapItem {
    entry: Entry,
    src: usize,
    reverse: bool,
}

impl PartialEq for HeapItem {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for HeapItem {}
impl PartialOrd for HeapItem {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for HeapItem {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: invert so the smallest (forward) or largest (reverse) pops.
        let o = cmp_entries(
            &self.entry.key,
            self.entry.seq,
            &other.entry.key,
            other.entry.seq,
        );
        let o = if self.reverse { o } else { o.reverse() };
        // Equal (key, seq) in both directions: the higher source pops first, and the copy that
        // pops first is the one kept (see `MergeIter`).
        o.then(self.src.cmp(&other.src))
    }
}

/// Merges sorted streams into one; an entry present in several streams (same key and sequence
/// number, as when a memtable is read while the index already holds it) comes out once, and the
/// copy that comes out is the one from the highest-numbered source, in either direction.
///
/// Callers number sources newest first (memtables, then the index), so the index's copy wins:
/// it may differ from the memtable's, as when a reorganisation folded Merge operands onto their
/// base into a Put that keeps the newest operand's sequence number. The memtable's Merge would
/// lose that base.
pub struct MergeIter {
    sources: Vec<EntryIter>,
    heap: BinaryHeap<HeapItem>,
    reverse: bool,
    started: bool,
    /// A source's error met while skipping copies after an entry: returned by the next call.
    error: Option<Error>,
    failed: bool,
}

impl MergeIter {
    pub fn new(sources: Vec<EntryIter>, reverse: bool) -> MergeIter {
        MergeIter {
            sources,
            heap: BinaryHeap::new(),
            reverse,
            started: false,
            error: None,
            failed: false,
        }
    }

    fn pull(&mut self, src: usize) -> Result<()> {
        if let Some(r) = self.sources[src].next() {
            self.heap.push(HeapItem {
                entry: r?,
                src,
                reverse: self.reverse,
            });
        }
        Ok(())
    }

    /// Takes the first entry and puts its source's next one in its place (one sift instead of
    /// a pop and a push), or removes it when its source has ended. `None`: every source ended.
    fn take_top(&mut self) -> Option<Result<Entry>> {
        let mut top = self.heap.peek_mut()?;
        match self.sources[top.src].next() {
            Some(Ok(next)) => Some(Ok(std::mem::replace(&mut top.entry, next))),
            Some(Err(e)) => {
                PeekMut::pop(top);
                Some(Err(e))
            }
            None => Some(Ok(PeekMut::pop(top).entry)),
        }
    }
}

impl Iterator for MergeIter {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        if self.failed {
            return None;
        }
        if let Some(e) = self.error.take() {
            self.failed = true;
            return Some(Err(e));
        }
        if !self.started {
            self.started = true;
            for i in 0..self.sources.len() {
                if let Err(e) = self.pull(i) {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        let entry = match self.take_top()? {
            Ok(e) => e,
            Err(e) => {
                self.failed = true;
                return Some(Err(e));
            }
        };
        // Other copies of this version (same key and seq) are the next in order, each source
        // holding at most one in the heap: drop them now, so that nothing need remember the
        // entry returned (no key clone per entry).
        while self
            .heap
            .peek()
            .is_some_and(|t| t.entry.seq == entry.seq && t.entry.key == entry.key)
        {
            if let Some(Err(e)) = self.take_top() {
                self.error = Some(e);
                break;
            }
        }
        Some(Ok(entry))
    }
}

/// What a reader at `seq` sees of one key, given its versions newest first (all versions, any
/// sequence numbers; those above `seq` are skipped). `None`: absent or deleted.
pub fn resolve(
    key: &[u8],
    versions: &[Entry],
    seq: u64,
    merge_op: Option<&Arc<dyn MergeOperator>>,
) -> Result<Option<Arc<[u8]>>> {
    let mut operands: Vec<&[u8]> = Vec::new();
    let mut base: Option<&Arc<[u8]>> = None;
    for v in versions.iter().filter(|v| v.seq <= seq) {
        match v.kind {
            Kind::Put => {
                base = Some(&v.value);
                break;
            }
            Kind::Delete => break,
            Kind::Merge => operands.push(&v.value),
        }
    }
    if operands.is_empty() {
        return Ok(base.cloned());
    }
    let Some(op) = merge_op else {
        return Err(Error::MergeOperator(
            "the database holds Merge entries but no merge operator is configured".into(),
        ));
    };
    operands.reverse();
    Ok(Some(Arc::from(op.full_merge(
        key,
        base.map(|b| &b[..]),
        &operands,
    ))))
}

/// A key and its value as a reader sees them, shared with the entries they came from.
pub type Pair = (Arc<[u8]>, Arc<[u8]>);

/// Turns a merged stream of all versions into what a reader at `seq` sees: one `(key, value)`
/// per live key, in the stream's direction.
pub struct Resolver {
    input: std::iter::Peekable<EntryIter>,
    seq: u64,
    merge_op: Option<Arc<dyn MergeOperator>>,
    reverse: bool,
    group: Vec<Entry>,
}

impl Resolver {
    pub fn new(
        input: EntryIter,
        seq: u64,
        merge_op: Option<Arc<dyn MergeOperator>>,
        reverse: bool,
    ) -> Resolver {
        Resolver {
            input: input.peekable(),
            seq,
            merge_op,
            reverse,
            group: Vec::new(),
        }
    }
}

impl Iterator for Resolver {
    type Item = Result<Pair>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.group.clear();
            let first = match self.input.next()? {
                Ok(e) => e,
                Err(e) => return Some(Err(e)),
            };
            let key = first.key.clone();
            self.group.push(first);
            // An error before the next key is taken here, not left for the next call: the source
            // that failed may hold this key's other versions (a Merge's base), and a key resolved
            // from part of its versions would be a wrong value returned without an error.
            while let Some(r) = self.input.peek() {
                if r.as_ref().is_ok_and(|e| e.key != key) {
                    break;
                }
                match self.input.next() {
                    Some(Ok(e)) => self.group.push(e),
                    Some(Err(e)) => return Some(Err(e)),
                    None => break,
                }
            }
            if self.reverse {
                // A reversed stream gives a key's versions oldest first.
                self.group.reverse();
            }
            match resolve(&key, &self.group, self.seq, self.merge_op.as_ref()) {
                Ok(Some(v)) => return Some(Ok((key, v))),
                Ok(None) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// Which versions of one key a reorganisation keeps, DESIGN.md's rule: per snapshot stripe the
/// newest version (Merge operands folded onto a base in the same stripe, unless the folded value
/// would exceed [`MAX_VALUE_LEN`]: then the operands and their base are kept as they are), and a
/// tombstone only if something older may exist below (`bottom` false) or a kept older version
/// needs hiding.
///
/// `versions` are newest first; `snapshots` ascending live snapshot sequence numbers.
pub fn compact_versions(
    versions: &[Entry],
    snapshots: &[u64],
    bottom: bool,
    merge_op: Option<&Arc<dyn MergeOperator>>,
) -> Result<Vec<Entry>> {
    compact_prefixed_versions(versions, snapshots, bottom, merge_op, 0)
}

/// [`compact_versions`] for entries whose stored key is `prefix` bytes of the structure's own
/// (`boa`'s fingerprint) followed by the user key: the merge operator is given the user key.
pub fn compact_prefixed_versions(
    versions: &[Entry],
    snapshots: &[u64],
    bottom: bool,
    merge_op: Option<&Arc<dyn MergeOperator>>,
    prefix: usize,
) -> Result<Vec<Entry>> {
    let stripe = |seq: u64| snapshots.partition_point(|&s| s < seq);
    let mut out: Vec<Entry> = Vec::with_capacity(2);
    let mut i = 0;
    while i < versions.len() {
        let s = stripe(versions[i].seq);
        let mut j = i;
        while j < versions.len() && stripe(versions[j].seq) == s {
            j += 1;
        }
        let group = &versions[i..j];
        let newest = &group[0];
        if newest.kind != Kind::Merge {
            out.push(newest.clone());
        } else {
            // Merge operands: fold onto a base if this stripe (or, at the bottom with nothing older,
            // nothing at all) provides one and the result fits; otherwise keep the operands (and
            // their base) as they are.
            let base_at = group.iter().position(|v| v.kind != Kind::Merge);
            let nothing_older = j == versions.len() && bottom;
            match (base_at, merge_op) {
                (Some(b), Some(op)) => {
                    let base = (group[b].kind == Kind::Put).then(|| &group[b].value[..]);
                    match fold(op, &group[..b], base, prefix) {
                        Some(folded) => out.push(folded),
                        None => out.extend(group[..=b].iter().cloned()),
                    }
                }
                (None, Some(op)) if nothing_older => match fold(op, group, None, prefix) {
                    Some(folded) => out.push(folded),
                    None => out.extend(group.iter().cloned()),
                },
                (Some(b), None) => out.extend(group[..=b].iter().cloned()),
                _ => out.extend(group.iter().cloned()),
            }
        }
        i = j;
    }
    if bottom {
        // Nothing older exists below: trailing tombstones hide nothing.
        while out.last().is_some_and(|e| e.kind == Kind::Delete) {
            out.pop();
        }
    }
    Ok(out)
}

/// `operands` (one key's Merge entries, newest first) folded onto `base` into a Put that keeps
/// the newest operand's sequence number; `None` when the folded value would be longer than
/// [`MAX_VALUE_LEN`], which no structure stores (a run refuses it, a B-tree blob reads back as
/// corrupt). The caller then keeps the versions as they are, each within the limit, and reads
/// fold them ([`resolve`]): a value of any length the operator makes stays readable, and the
/// database can always flush, compact and reopen. The operator is given the key after its first
/// `prefix` bytes (all of it, should a damaged key be shorter: the structure's own check
/// reports that).
fn fold(
    op: &Arc<dyn MergeOperator>,
    operands: &[Entry],
    base: Option<&[u8]>,
    prefix: usize,
) -> Option<Entry> {
    let newest = operands.first()?;
    let ops: Vec<&[u8]> = operands.iter().rev().map(|v| &v.value[..]).collect();
    let key = newest.key.get(prefix..).unwrap_or(&newest.key);
    let value = op.full_merge(key, base, &ops);
    if value.len() > MAX_VALUE_LEN {
        return None;
    }
    Some(Entry {
        key: newest.key.clone(),
        seq: newest.seq,
        kind: Kind::Put,
        value: Arc::from(value),
    })
}

/// Groups a sorted stream by key and applies [`compact_versions`] to each group.
pub struct Compactor<I: Iterator<Item = Result<Entry>>> {
    input: std::iter::Peekable<I>,
    snapshots: Vec<u64>,
    bottom: bool,
    merge_op: Option<Arc<dyn MergeOperator>>,
    pending: std::collections::VecDeque<Entry>,
    /// Bytes in front of the user key in every entry's key ([`compact_prefixed_versions`]).
    prefix: usize,
}

impl<I: Iterator<Item = Result<Entry>>> Compactor<I> {
    pub fn new(
        input: I,
        snapshots: Vec<u64>,
        bottom: bool,
        merge_op: Option<Arc<dyn MergeOperator>>,
    ) -> Self {
        Compactor {
            input: input.peekable(),
            snapshots,
            bottom,
            merge_op,
            pending: Default::default(),
            prefix: 0,
        }
    }

    /// For entries keyed by `prefix` bytes of the structure's own followed by the user key
    /// (`boa`'s fingerprint): folds give the merge operator the user key.
    pub fn with_key_prefix(mut self, prefix: usize) -> Self {
        self.prefix = prefix;
        self
    }
}

impl<I: Iterator<Item = Result<Entry>>> Compactor<I> {
    /// Reads the versions of the next key from the input and returns what
    /// [`compact_versions`] keeps of them, possibly nothing (a tombstone that met its value at
    /// the bottom); `None` at the end of the input. One call reads one key's versions only, so
    /// a caller working in bounded steps can stop between any two keys, however many keys in a
    /// row compact away to nothing (the [`Iterator`] interface reads on until something is
    /// kept). Entries an interleaved `next` left pending come first. The group replaces what
    /// `out` held (a caller reuses one vector for every key: no allocation per key).
    pub fn next_group(&mut self, out: &mut Vec<Entry>) -> Option<Result<()>> {
        out.clear();
        if !self.pending.is_empty() {
            out.extend(self.pending.drain(..));
            return Some(Ok(()));
        }
        Some(self.next_kept()?.map(|k| match k {
            Kept::One(e) => out.push(e),
            Kept::Many(v) => out.extend(v),
        }))
    }

    /// What is kept of the next key's versions, `None` at the end of the input. A key with one
    /// version that is not a Merge is kept as it is, but a tombstone at the bottom, which hides
    /// nothing (`compact_versions` would decide the same): most keys of a merge take this way,
    /// without a group vector.
    fn next_kept(&mut self) -> Option<Result<Kept>> {
        let first = match self.input.next()? {
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        // A source's error next is no end of the key: it is taken with the group below (and
        // returned), not left for the next call after a group resolved from part of its versions.
        let alone = match self.input.peek() {
            None => true,
            Some(Ok(e)) => e.key != first.key,
            Some(Err(_)) => false,
        };
        if alone && first.kind != Kind::Merge {
            if first.kind == Kind::Delete && self.bottom {
                return Some(Ok(Kept::Many(Vec::new())));
            }
            return Some(Ok(Kept::One(first)));
        }
        let mut group = vec![first];
        loop {
            match self.input.peek() {
                Some(Ok(e)) if e.key == group[0].key => {}
                Some(Err(_)) => {}
                _ => break,
            }
            match self.input.next() {
                Some(Ok(e)) => group.push(e),
                Some(Err(e)) => return Some(Err(e)),
                None => break,
            }
        }
        Some(
            compact_prefixed_versions(
                &group,
                &self.snapshots,
                self.bottom,
                self.merge_op.as_ref(),
                self.prefix,
            )
            .map(Kept::Many),
        )
    }
}

/// What [`Compactor::next_kept`] keeps of one key.
enum Kept {
    One(Entry),
    Many(Vec<Entry>),
}

impl<I: Iterator<Item = Result<Entry>>> Iterator for Compactor<I> {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(Ok(e));
            }
            match self.next_kept()? {
                Ok(Kept::One(e)) => return Some(Ok(e)),
                Ok(Kept::Many(kept)) => self.pending.extend(kept),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Concat;
    impl MergeOperator for Concat {
        fn name(&self) -> &str {
            "concat"
        }
        fn full_merge(&self, _key: &[u8], base: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
            let mut v = base.map(|b| b.to_vec()).unwrap_or_default();
            for o in operands {
                v.extend_from_slice(o);
            }
            v
        }
    }

    fn e(seq: u64, kind: Kind, v: &str) -> Entry {
        Entry::new(b"k", seq, kind, v.as_bytes())
    }

    #[test]
    fn stripes_keep_snapshot_versions() {
        let op: Arc<dyn MergeOperator> = Arc::new(Concat);
        let vs = vec![
            e(9, Kind::Merge, "c"),
            e(7, Kind::Put, "b"),
            e(5, Kind::Delete, ""),
            e(2, Kind::Put, "a"),
        ];
        let kept = compact_versions(&vs, &[6], true, Some(&op)).unwrap_or_default();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(&*kept[0].value, b"bc");
        let kept = compact_versions(&vs, &[3], false, Some(&op)).unwrap_or_default();
        assert_eq!(kept.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![9, 2]);
        let r = resolve(b"k", &vs, 8, Some(&op)).unwrap_or_default();
        assert_eq!(r.as_deref(), Some(&b"b"[..]));
        let r = resolve(b"k", &vs, 6, Some(&op)).unwrap_or_default();
        assert_eq!(r, None);
    }

    /// Regression (issue 17 item 2): a fold longer than `MAX_VALUE_LEN` is not made; the base and
    /// operands stay as they are (with a tombstone base dropped at the bottom, where it hides
    /// nothing), and a read folds them into the whole value. A fold up to the limit is made.
    #[test]
    fn a_fold_past_the_value_limit_keeps_the_versions() {
        let op: Arc<dyn MergeOperator> = Arc::new(Concat);
        let half = "h".repeat(MAX_VALUE_LEN / 2);
        let seqs = |v: &[Entry]| v.iter().map(|e| (e.seq, e.kind)).collect::<Vec<_>>();
        for base in [Kind::Put, Kind::Delete] {
            let vs = vec![
                e(9, Kind::Merge, "x"),
                e(8, Kind::Merge, &half),
                e(7, Kind::Merge, &half),
                e(6, base, "b"),
            ];
            // Within the limit: folded into one Put.
            let fits = &vs[if base == Kind::Put { 2 } else { 1 }..];
            let kept = compact_versions(fits, &[], false, Some(&op)).unwrap_or_default();
            assert_eq!(seqs(&kept), vec![(fits[0].seq, Kind::Put)], "{base:?}");
            for bottom in [false, true] {
                let kept = compact_versions(&vs, &[], bottom, Some(&op)).unwrap_or_default();
                let mut want = seqs(&vs);
                if bottom && base == Kind::Delete {
                    want.pop();
                }
                assert_eq!(seqs(&kept), want, "{base:?} bottom {bottom}");
                let r = resolve(b"k", &kept, 100, Some(&op)).unwrap_or_default();
                let len = MAX_VALUE_LEN + 1 + usize::from(base == Kind::Put);
                assert_eq!(r.map(|v| v.len()), Some(len), "{base:?} bottom {bottom}");
            }
        }
        // Operands alone at the bottom: nothing older to fold onto, and too long to fold.
        let vs = vec![
            e(9, Kind::Merge, "x"),
            e(8, Kind::Merge, &half),
            e(7, Kind::Merge, &half),
        ];
        let kept = compact_versions(&vs, &[], true, Some(&op)).unwrap_or_default();
        assert_eq!(kept, vs);
    }

    /// Regression: a frozen memtable (a lower source) holds Merge operands while the index (the
    /// highest source) already folded them onto their base into a Put with the newest operand's
    /// sequence number. The index's copy must win in both directions, or the base is lost.
    #[test]
    fn equal_versions_take_the_highest_source_both_ways() {
        let op: Arc<dyn MergeOperator> = Arc::new(Concat);
        // Each source in entry order, or exactly reversed.
        let srcs = |reverse: bool| -> Vec<EntryIter> {
            let active: Vec<Result<Entry>> = vec![
                Ok(Entry::new(b"a", 9, Kind::Put, b"A")),
                Ok(Entry::new(b"k", 8, Kind::Merge, b"z")),
            ];
            let frozen: Vec<Result<Entry>> = vec![
                Ok(Entry::new(b"k", 6, Kind::Merge, b"y")),
                Ok(Entry::new(b"k", 5, Kind::Merge, b"x")),
            ];
            let index: Vec<Result<Entry>> = vec![
                Ok(Entry::new(b"a", 1, Kind::Put, b"old")),
                Ok(Entry::new(b"k", 6, Kind::Put, b"basexy")),
                Ok(Entry::new(b"m", 2, Kind::Put, b"M")),
            ];
            [active, frozen, index]
                .into_iter()
                .map(|mut v| -> EntryIter {
                    if reverse {
                        v.reverse();
                    }
                    Box::new(v.into_iter())
                })
                .collect()
        };
        for reverse in [false, true] {
            let merged: Vec<(Vec<u8>, u64, Kind)> = MergeIter::new(srcs(reverse), reverse)
                .map(|e| e.map(|e| (e.key.to_vec(), e.seq, e.kind)))
                .collect::<Result<_>>()
                .unwrap_or_default();
            let k6: Vec<Kind> = merged
                .iter()
                .filter(|(k, s, _)| k == b"k" && *s == 6)
                .map(|e| e.2)
                .collect();
            assert_eq!(k6, vec![Kind::Put], "reverse {reverse}: {merged:?}");
            let resolved: Vec<(Vec<u8>, Vec<u8>)> = Resolver::new(
                Box::new(MergeIter::new(srcs(reverse), reverse)),
                100,
                Some(op.clone()),
                reverse,
            )
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_>>()
            .unwrap_or_default();
            let mut want = vec![
                (b"a".to_vec(), b"A".to_vec()),
                (b"k".to_vec(), b"basexyz".to_vec()),
                (b"m".to_vec(), b"M".to_vec()),
            ];
            if reverse {
                want.reverse();
            }
            assert_eq!(resolved, want, "reverse {reverse}");
        }
    }

    /// A key's versions followed by a source's error (the corruption sweep found it: a scan
    /// over a corrupt page returned a Merge's operands folded without their base, and the
    /// error only after): the unfinished group must not be resolved or compacted, since the
    /// failed source may hold the key's older versions.
    fn merge_then_failure() -> Vec<Result<Entry>> {
        vec![
            Ok(e(9, Kind::Merge, "x")),
            Err(Error::corruption("data file", Some(7), "checksum mismatch")),
            Ok(e(2, Kind::Put, "base")),
        ]
    }

    #[test]
    fn resolver_does_not_fold_a_merge_without_the_base_a_failed_source_held() {
        let op: Arc<dyn MergeOperator> = Arc::new(Concat);
        for reverse in [false, true] {
            let mut input = merge_then_failure();
            if reverse {
                input.swap(0, 2);
            }
            let mut r = Resolver::new(Box::new(input.into_iter()), 100, Some(op.clone()), reverse);
            match r.next() {
                Some(Err(Error::Corruption { page: Some(7), .. })) => {}
                other => panic!("reverse {reverse}: expected the source's error, got {other:?}"),
            }
        }
    }

    #[test]
    fn compactor_does_not_fold_a_merge_without_the_base_a_failed_source_held() {
        let op: Arc<dyn MergeOperator> = Arc::new(Concat);
        let mut c = Compactor::new(merge_then_failure().into_iter(), Vec::new(), true, Some(op));
        match c.next() {
            Some(Err(Error::Corruption { page: Some(7), .. })) => {}
            other => panic!("expected the source's error, got {other:?}"),
        }
    }

    /// `next_group` stops after every key, even one that compacts away to nothing, and gives
    /// the same entries as the iterator.
    #[test]
    fn next_group_is_one_key_at_a_time() {
        let input = || -> Vec<Result<Entry>> {
            vec![
                Ok(Entry::new(b"a", 4, Kind::Delete, b"")),
                Ok(Entry::new(b"a", 1, Kind::Put, b"x")),
                Ok(Entry::new(b"b", 5, Kind::Delete, b"")),
                Ok(Entry::new(b"c", 3, Kind::Put, b"y")),
                Ok(Entry::new(b"c", 2, Kind::Put, b"z")),
            ]
        };
        let mut c = Compactor::new(input().into_iter(), Vec::new(), true, None);
        let mut groups: Vec<Vec<u64>> = Vec::new();
        let mut g = vec![Entry::new(b"stale", 9, Kind::Put, b"")];
        while let Some(r) = c.next_group(&mut g) {
            assert!(r.is_ok());
            groups.push(g.iter().map(|e| e.seq).collect());
        }
        assert_eq!(groups, vec![vec![], vec![], vec![3]]);
        let all: Vec<u64> = Compactor::new(input().into_iter(), Vec::new(), true, None)
            .map(|e| e.map(|e| e.seq).unwrap_or_default())
            .collect();
        assert_eq!(all, vec![3]);
        let kept_with_snapshot: Vec<u64> =
            Compactor::new(input().into_iter(), vec![2], false, None)
                .map(|e| e.map(|e| e.seq).unwrap_or_default())
                .collect();
        assert_eq!(kept_with_snapshot, vec![4, 1, 5, 3, 2]);
    }

    #[test]
    fn merge_dedups_and_orders() {
        let a: Vec<Result<Entry>> = vec![
            Ok(Entry::new(b"a", 2, Kind::Put, b"")),
            Ok(Entry::new(b"c", 1, Kind::Put, b"")),
        ];
        let b: Vec<Result<Entry>> = vec![
            Ok(Entry::new(b"a", 2, Kind::Put, b"")),
            Ok(Entry::new(b"b", 5, Kind::Put, b"")),
        ];
        let m = MergeIter::new(
            vec![Box::new(a.into_iter()), Box::new(b.into_iter())],
            false,
        );
        let keys: Vec<Vec<u8>> = m
            .map(|e| e.map(|e| e.key.to_vec()).unwrap_or_default())
            .collect();
        assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    }

    /// The compactor keeps, key by key, exactly what `compact_versions` keeps for the key's
    /// versions (its one-version shortcut included), for random version chains, snapshots and
    /// bottom or not.
    #[test]
    fn compactor_equals_compact_versions_per_key() {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(crate::testutil::seed());
        let op: Arc<dyn MergeOperator> = Arc::new(Concat);
        for _ in 0..200 {
            let mut seq = 1000u64;
            let mut groups: Vec<Vec<Entry>> = Vec::new();
            for k in 0..rng.gen_range(1..40u32) {
                let key = format!("k{k:03}");
                let n = if rng.gen_bool(0.6) {
                    1
                } else {
                    rng.gen_range(2..5)
                };
                let g: Vec<Entry> = (0..n)
                    .map(|_| {
                        seq -= rng.gen_range(1..5);
                        let kind = [Kind::Put, Kind::Delete, Kind::Merge][rng.gen_range(0..3)];
                        Entry::new(key.as_bytes(), seq, kind, b"v")
                    })
                    .collect();
                groups.push(g);
            }
            let mut snaps: Vec<u64> = (0..rng.gen_range(0..3))
                .map(|_| rng.gen_range(900..1000))
                .collect();
            snaps.sort_unstable();
            let bottom = rng.gen_bool(0.5);
            let merge_op = rng.gen_bool(0.8).then(|| op.clone());
            let mut want = Vec::new();
            for g in &groups {
                want.extend(compact_versions(g, &snaps, bottom, merge_op.as_ref()).unwrap());
            }
            let input = groups.into_iter().flatten().map(Ok);
            let got: Vec<Entry> = Compactor::new(input, snaps, bottom, merge_op)
                .collect::<Result<_>>()
                .unwrap();
            assert_eq!(got, want);
        }
    }
}
