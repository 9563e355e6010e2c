//! `pbt`: the partitioned B-tree (seed 003, specs/partitioned-btree.md with its corrections).
//!
//! One copy-on-write B+-tree, read and written with the `btree` kind's node code, whose keys
//! are prefixed with a partition number ([`key`]). All writes go to the ACTIVE partition, whose
//! leaves live in the PBT-Buffer ([`buffer`]), a share of the cache reserved for them: each
//! frozen memtable is absorbed wholly into it, every version a new entry. When the buffer has
//! less than a memtable's worth of leaf room left, the partition switches: ACTIVE becomes
//! CLOSING (immutable), a new ACTIVE takes the writes, and the CLOSING partition is evicted in
//! bounded steps: its bloom filter built, its leaves written in order into one extent in large
//! writes ([`write`]), its leaf separators put into the tree (rewriting only the inner nodes on
//! the way), then one manifest edit, after which it is PERSISTED and the WAL below it can go.
//!
//! Reads go newest partition first: ACTIVE and CLOSING in memory, then the persisted ones,
//! each skipped when its key range or bloom filter rules the key out; a lookup ends at the
//! first Put or Delete (Merge operands are collected on through older partitions). Scans give
//! the Db one sorted source per partition, which it merges by sequence number. Partition merge
//! ([`policy::choose_merge`]) rewrites the newest persisted partitions into one, in the
//! background, a bounded step per `work` call ([`Merging`]); it is debt only while partitions
//! pile up past twice `max_partitions`.
//!
//! The index writes no log (correction 6): after a crash ACTIVE starts empty and the Db
//! replays its WAL above `durable_seq`, which rises only when an eviction's manifest edit is
//! synced.

mod buffer;
mod key;
mod meta;
mod policy;
#[cfg(test)]
mod tests;
mod write;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use self::buffer::Buffered;
use self::meta::Persisted;
use self::write::{ExtentWriter, TreeEdit};
use super::btree::node::{Child, LeafEntry, Val, BODY_ROOM};
use super::btree::tree::{LeafCursor, MemQueue, TreeReader};
use super::{Epoch, Index, IndexContext, IndexStats};
use crate::entry::{Entry, Kind};
use crate::error::{Error, Result};
use crate::filter::bloom::{BloomBuilder, BloomFinish};
use crate::manifest::Commit;
use crate::memtable::{MemIter, Memtable, ENTRY_OVERHEAD};
use crate::merge::{Compactor, EntryIter, MergeIter};
use crate::options::PbtParams;
use crate::storage::{Extent, Purpose, PAGE_SIZE};

/// One published state of the index: the committed tree and the partitions, newest first.
struct State {
    root: u64,
    height: u32,
    active: Arc<Buffered>,
    closing: Option<Arc<Buffered>>,
    persisted: Vec<Arc<Persisted>>,
    /// Holds the pages the tree replaced until no reader of an older state remains.
    epoch: Arc<Epoch>,
}

impl State {
    fn with(&self) -> State {
        State {
            root: self.root,
            height: self.height,
            active: self.active.clone(),
            closing: self.closing.clone(),
            persisted: self.persisted.clone(),
            epoch: self.epoch.clone(),
        }
    }
}

/// A memtable being absorbed into ACTIVE.
struct Absorbing {
    mem: Arc<Memtable>,
    input: std::iter::Peekable<MemIter>,
    done: u64,
}

/// The CLOSING partition being written out.
struct Evict {
    part: Arc<Buffered>,
    writer: ExtentWriter,
    next_leaf: usize,
    children: Vec<Child>,
    bloom: Vec<u8>,
    /// Where the bloom filter went: the last pages written, so the data extents are the
    /// writer's less these.
    bloom_ext: Extent,
    /// Every page is written: the commit is left ([`Pbt::finish_evict`]).
    written: bool,
}

/// A partition merge under way, advanced in bounded steps by `work` ([`Pbt::merge_work`]):
/// the k-way merge of its inputs, the leaf being filled, the writer of its extents, and the
/// filter keys so far. Nothing refers to its pages until the swap commits them.
struct Merging {
    inputs: Vec<Arc<Persisted>>,
    input_bytes: u64,
    pnum: u32,
    comp: Compactor<MergeIter>,
    group: Vec<Entry>,
    w: ExtentWriter,
    bloom: Option<BloomBuilder>,
    children: Vec<Child>,
    leaf: Vec<LeafEntry>,
    leaf_bytes: usize,
    min: Option<Arc<[u8]>>,
    max: Option<Arc<[u8]>>,
    entries: u64,
    phase: MergePhase,
}

/// Where a [`Merging`] is: its leaves, its filter's bits, its filter's pages, its swap.
enum MergePhase {
    Leaves,
    Filter(BloomFinish),
    FilterPages {
        w: ExtentWriter,
        next: usize,
        bytes: Vec<u8>,
    },
    Swap {
        bloom: Option<Vec<u8>>,
        bloom_ext: Extent,
    },
}

impl Merging {
    /// Bytes of work left, for `debt` while the merge is forced: the inputs' bytes not yet
    /// rewritten (at least 1 until the swap).
    fn left(&self) -> u64 {
        self.input_bytes
            .saturating_sub(self.w.used() * PAGE_SIZE as u64)
            .max(1)
    }

    /// Gives back every page written (a failure before the swap).
    fn release_all(&mut self, store: &crate::storage::PageFile) {
        self.w.release_all(store);
        if let MergePhase::FilterPages { w, .. } = &mut self.phase {
            w.release_all(store);
        }
    }
}

#[derive(Default)]
struct Job {
    absorb: Option<Absorbing>,
    evict: Option<Evict>,
}

#[derive(Default)]
struct Counters {
    absorbs: AtomicU64,
    splits: AtomicU64,
    switches: AtomicU64,
    evictions: AtomicU64,
    evicted_pages: AtomicU64,
    eviction_writes: AtomicU64,
    inner_pages_written: AtomicU64,
    merges: AtomicU64,
    merged_entries: AtomicU64,
    merge_writes: AtomicU64,
    merge_pages: AtomicU64,
    range_skips: AtomicU64,
    bloom_skips: AtomicU64,
    probes: AtomicU64,
}

/// The partitioned B-tree index.
pub struct Pbt {
    ctx: IndexContext,
    params: PbtParams,
    state: RwLock<Arc<State>>,
    queue: MemQueue,
    job: Mutex<Job>,
    /// The partition merge under way, if any.
    merging: Mutex<Option<Merging>>,
    /// Its [`Merging::left`], readable while a step holds it (0: none).
    merge_left: AtomicU64,
    durable: AtomicU64,
    next_pnum: AtomicU32,
    /// The Db wants everything absorbed made durable ([`Index::request_flush`]).
    flush_wanted: AtomicBool,
    /// PBT-Buffer capacity and a memtable's worth of leaves, in pages.
    buffer_pages: u64,
    room_pages: u64,
    /// Bytes charged to the cache: the PBT-Buffer and the bloom filters.
    reserved: AtomicU64,
    counters: Counters,
}

/// Bytes of work one entry stands for (the memtable's accounting).
fn entry_units(e: &Entry) -> u64 {
    (e.key.len() + e.value.len()) as u64 + ENTRY_OVERHEAD
}

fn corrupt(page: Option<u64>, d: String) -> Error {
    Error::corruption("pbt", page, d)
}

/// The tree-key bounds of partition `pnum` for user-key bounds.
fn partition_bounds(
    pnum: u32,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let tk = |k: &Vec<u8>| key::tree_key(pnum, k).to_vec();
    let lo = match lo {
        Bound::Included(k) => Bound::Included(tk(k)),
        Bound::Excluded(k) => Bound::Excluded(tk(k)),
        Bound::Unbounded => Bound::Included(key::start_of(pnum)),
    };
    let hi = match hi {
        Bound::Included(k) => Bound::Included(tk(k)),
        Bound::Excluded(k) => Bound::Excluded(tk(k)),
        Bound::Unbounded => Bound::Excluded(key::start_of(pnum + 1)),
    };
    (lo, hi)
}

/// The lock, waiting for it with `wait`, else `None` while another thread holds it. (`debt`
/// and `background_work` hold the locks for microseconds between a thread's steps, so some of
/// the writers' "busy" answers are those: a 200 µs wait for the lock was tried, and the busy
/// answers of a 2-million-record load went from 8,376-9,113 to 7,348-8,431, no change in rate
/// or tail: not kept.)
fn lock_unless_busy<T>(m: &Mutex<T>, wait: bool) -> Option<parking_lot::MutexGuard<'_, T>> {
    if wait {
        Some(m.lock())
    } else {
        m.try_lock()
    }
}

fn bound_key(b: &Bound<Vec<u8>>) -> Option<&[u8]> {
    match b {
        Bound::Included(k) | Bound::Excluded(k) => Some(k),
        Bound::Unbounded => None,
    }
}

impl Pbt {
    /// Opens the index from its manifest metadata (empty: a new index).
    pub fn open(
        ctx: IndexContext,
        params: PbtParams,
        meta: &[u8],
        durable_seq: u64,
    ) -> Result<Pbt> {
        let m = meta::decode(meta, &ctx.store)?;
        if m.next_pnum == u32::MAX {
            return Err(corrupt(None, "partition numbers exhausted".into()));
        }
        let capacity = ctx.store.cache().stats().capacity_pages;
        let buffer_pages = (capacity * params.buffer_percent as u64 / 100).max(1);
        let leaf_bytes = (BODY_ROOM * 2 / 3) as u64;
        let room_pages = ctx.memtable_bytes.div_ceil(leaf_bytes) + 1;
        let reserved = buffer_pages * PAGE_SIZE as u64
            + m.parts.iter().map(|p| p.bloom_len as u64).sum::<u64>();
        ctx.store.cache().reserve(reserved);
        let epoch = Epoch::new(ctx.store.clone());
        let state = State {
            root: m.root,
            height: m.height,
            active: Arc::new(Buffered::new(m.next_pnum)),
            closing: None,
            persisted: m.parts,
            epoch,
        };
        Ok(Pbt {
            ctx,
            params,
            state: RwLock::new(Arc::new(state)),
            queue: MemQueue::default(),
            job: Mutex::new(Job::default()),
            merging: Mutex::new(None),
            merge_left: AtomicU64::new(0),
            durable: AtomicU64::new(durable_seq),
            next_pnum: AtomicU32::new(m.next_pnum + 1),
            flush_wanted: AtomicBool::new(false),
            buffer_pages,
            room_pages,
            reserved: AtomicU64::new(reserved),
            counters: Counters::default(),
        })
    }

    fn state(&self) -> Arc<State> {
        self.state.read().clone()
    }

    fn publish(&self, s: State) {
        *self.state.write() = Arc::new(s);
    }

    /// A reader of the tree of state `st`, which it keeps alive.
    fn tree(&self, st: &Arc<State>) -> TreeReader {
        TreeReader {
            root: st.root,
            height: st.height,
            store: self.ctx.store.clone(),
            _pin: st.clone(),
        }
    }

    fn reader(&self, st: &Arc<State>) -> Arc<TreeReader> {
        Arc::new(self.tree(st))
    }

    /// A sorted source over one persisted partition (user keys).
    fn partition_iter(
        reader: Arc<TreeReader>,
        pnum: u32,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
        reverse: bool,
    ) -> Result<EntryIter> {
        let (lo, hi) = partition_bounds(pnum, lo, hi);
        let cur = LeafCursor::new(reader, lo, hi, reverse)?;
        Ok(Box::new(cur.map(move |r| {
            r.and_then(|mut e| {
                if !key::in_partition(&e.key, pnum) {
                    return Err(corrupt(None, format!("a key outside partition {pnum}")));
                }
                e.key = key::user_key(&e.key);
                Ok(e)
            })
        })))
    }

    fn alloc_pnum(&self) -> Result<u32> {
        let p = self.next_pnum.fetch_add(1, Ordering::AcqRel);
        if p >= u32::MAX - 1 {
            return Err(corrupt(None, "partition numbers exhausted".into()));
        }
        Ok(p)
    }

    /// Whether ACTIVE must switch now (buffer nearly full, or a flush wants it durable).
    fn switch_due(&self, st: &State) -> bool {
        !st.active.is_empty()
            && (policy::must_switch(st.active.pages(), self.room_pages, self.buffer_pages)
                || self.flush_wanted.load(Ordering::Acquire))
    }

    fn meta_bytes(&self, st: &State, root: u64, height: u32, parts: &[Arc<Persisted>]) -> Vec<u8> {
        let _ = st;
        meta::encode(root, height, self.next_pnum.load(Ordering::Acquire), parts)
    }

    // ---- absorb ------------------------------------------------------------------------

    fn absorb_step(&self, a: &mut Absorbing, budget: u64) -> Result<(u64, bool)> {
        let mut units = 0;
        let mut chunk = Vec::new();
        while chunk.is_empty() || units < budget {
            match a.input.next() {
                Some(Ok(e)) => {
                    units += entry_units(&e);
                    chunk.push(e);
                }
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        let finished = a.input.peek().is_none();
        let st = self.state();
        let mut active = (*st.active).clone();
        let splits = active.absorb(&chunk, self.params.fill_percent);
        if finished {
            active.max_seq = active.max_seq.max(a.mem.max_seq());
        }
        self.counters.splits.fetch_add(splits, Ordering::Relaxed);
        let mut next = st.with();
        next.active = Arc::new(active);
        self.publish(next);
        a.done += units;
        Ok((units, finished))
    }

    // ---- switch and eviction (spec §3.8) -------------------------------------------------

    fn switch(&self) -> Result<()> {
        let st = self.state();
        let pnum = self.alloc_pnum()?;
        let mut next = st.with();
        next.closing = Some(st.active.clone());
        next.active = Arc::new(Buffered::new(pnum));
        self.publish(next);
        self.flush_wanted.store(false, Ordering::Release);
        self.counters.switches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Starts writing out the CLOSING partition: its bloom filter over every entry's key
    /// (tombstones and merge operands included: correction 3), which follows the leaves.
    fn start_evict(&self, part: Arc<Buffered>) -> Evict {
        let mut bloom = Vec::new();
        if self.params.bloom_bits_per_key > 0 {
            let mut b = BloomBuilder::new(self.params.bloom_bits_per_key);
            let mut last: Option<&[u8]> = None;
            for l in &part.leaves {
                for e in l.iter() {
                    if last != Some(&e.key[..]) {
                        b.add_key(&e.key[key::PREFIX..]);
                        last = Some(&e.key[..]);
                    }
                }
            }
            bloom = b.finish();
        }
        Evict {
            writer: ExtentWriter::new(self.params.write_pages as usize, Purpose::Flush),
            part,
            next_leaf: 0,
            children: Vec::new(),
            bloom,
            bloom_ext: Extent { start: 0, pages: 0 },
            written: false,
        }
    }

    /// Writes about `budget` bytes of the partition, whole `write_pages` runs; returns the
    /// bytes and whether every page is written.
    fn evict_step(&self, ev: &mut Evict, budget: u64) -> Result<(u64, bool)> {
        let store = &self.ctx.store;
        let before = ev.writer.used();
        let budget_pages = (budget / PAGE_SIZE as u64).max(self.params.write_pages as u64);
        while ev.next_leaf < ev.part.leaves.len() && ev.writer.used() - before < budget_pages {
            let c = ev.writer.leaf(store, &ev.part.leaves[ev.next_leaf])?;
            ev.children.push(c);
            ev.next_leaf += 1;
        }
        let done = ev.next_leaf == ev.part.leaves.len();
        if done {
            let bloom = std::mem::take(&mut ev.bloom);
            ev.bloom_ext = ev.writer.bytes(store, &bloom)?;
            ev.writer.finish(store)?;
            ev.bloom = bloom;
        }
        Ok(((ev.writer.used() - before) * PAGE_SIZE as u64, done))
    }

    /// Puts the written partition into the tree and commits: one manifest edit.
    fn finish_evict(&self, ev: Evict) -> Result<()> {
        let st = self.state();
        let part = &ev.part;
        let mut edit = TreeEdit::new(&self.ctx.store, self.params.fill_percent, Purpose::Flush);
        let (root, height) = edit.apply(
            st.root,
            st.height,
            &key::start_of(part.pnum),
            &key::start_of(part.pnum + 1),
            &ev.children,
        )?;
        self.ctx.store.sync()?;
        let bloom_ext = ev.bloom_ext;
        let mut data = ev.writer.exts.clone();
        if bloom_ext.pages > 0 {
            // The bloom's pages are the end of the last extent.
            match data.last_mut() {
                Some(l) if l.start + l.pages == bloom_ext.start + bloom_ext.pages => {
                    l.pages -= bloom_ext.pages;
                    if l.pages == 0 {
                        data.pop();
                    }
                }
                _ => {
                    return Err(corrupt(
                        None,
                        "an evicted partition's bloom is not its last pages".into(),
                    ))
                }
            }
        }
        let bloom = if ev.bloom.is_empty() {
            None
        } else {
            Some(crate::filter::bloom::Bloom::from_bytes(ev.bloom.clone())?)
        };
        let p = Arc::new(Persisted {
            pnum: part.pnum,
            max_seq: part.max_seq,
            entries: part.entries,
            leaves: part.leaves.len() as u64,
            data,
            bloom_ext,
            bloom_len: ev.bloom.len() as u32,
            min: part.min.clone().unwrap_or_else(|| Arc::from(&[][..])),
            max: part.max.clone().unwrap_or_else(|| Arc::from(&[][..])),
            bloom,
            id: meta::next_id(),
        });
        let mut parts = Vec::with_capacity(st.persisted.len() + 1);
        parts.push(p.clone());
        parts.extend(st.persisted.iter().cloned());
        let mut added = edit.added();
        added.extend(p.extents());
        let durable_seq = part.max_seq.max(self.durable.load(Ordering::Acquire));
        self.ctx.manifest.commit(Commit {
            index_meta: self.meta_bytes(&st, root, height, &parts),
            durable_seq,
            added,
            freed: edit.freed.clone(),
        })?;
        self.ctx.store.cache().reserve(p.bloom_len as u64);
        self.reserved
            .fetch_add(p.bloom_len as u64, Ordering::Relaxed);
        let epoch = st.epoch.advance(edit.freed.drain(..));
        let mut next = st.with();
        next.root = root;
        next.height = height;
        next.closing = None;
        next.persisted = parts;
        next.epoch = epoch;
        self.publish(next);
        self.durable.store(durable_seq, Ordering::Release);
        let c = &self.counters;
        c.evictions.fetch_add(1, Ordering::Relaxed);
        c.evicted_pages
            .fetch_add(ev.writer.pages, Ordering::Relaxed);
        c.eviction_writes
            .fetch_add(ev.writer.writes, Ordering::Relaxed);
        c.inner_pages_written
            .fetch_add(edit.pages_written, Ordering::Relaxed);
        Ok(())
    }

    // ---- partition merge (spec §3.9) ---------------------------------------------------

    /// Whether partitions piled up past twice `max_partitions` while merges ran behind the
    /// evictions: then the merge is debt, paced like the rest. Without this bound writers
    /// outran a long merge, which kept every partition evicted meanwhile (and their old
    /// versions) allocated until it was done: in `conformance pbt::space`, 30 partitions and
    /// the file at 3.6 times the live data.
    fn merge_forced(&self, st: &State) -> bool {
        let max = self.params.max_partitions as usize;
        max > 0 && st.persisted.len() > 2 * max
    }

    /// How many of the newest persisted partitions the policy merges now.
    fn merge_choice(&self, st: &State) -> Option<usize> {
        let sizes: Vec<u64> = st.persisted.iter().map(|p| p.bytes()).collect();
        policy::choose_merge(&sizes, self.params.max_partitions as usize)
    }

    /// Advances the partition merge by about `budget` bytes, starting one when the policy picks
    /// partitions and none is under way ([`Merging`]); 0 when there is nothing to merge.
    fn merge_work(&self, slot: &mut Option<Merging>, budget: u64) -> Result<u64> {
        if slot.is_none() {
            let st = self.state();
            let Some(n) = self.merge_choice(&st) else {
                return Ok(0);
            };
            *slot = Some(self.start_merge(&st, n)?);
        }
        let Some(m) = slot.as_mut() else {
            return Ok(0);
        };
        let budget_pages = (budget / PAGE_SIZE as u64).max(self.params.write_pages as u64);
        let step = match &mut m.phase {
            MergePhase::Leaves => self.merge_leaves(m, budget_pages),
            MergePhase::Filter(f) => {
                // About as long as writing the budget's pages: a few probes per byte.
                if f.step((budget_pages * PAGE_SIZE as u64) as usize) {
                    self.merge_filter_done(m);
                }
                Ok(budget_pages * PAGE_SIZE as u64)
            }
            MergePhase::FilterPages { .. } => self.merge_filter_pages(m, budget_pages),
            MergePhase::Swap { .. } => {
                let Some(m) = slot.take() else {
                    return Ok(0);
                };
                // On an error its pages are not given back (as for an eviction's commit). Its
                // debt stays 1 through the swap (not every partition's bytes, which `debt`
                // counts before a merge starts), and is 0 once the inputs are gone.
                self.merge_left.store(1, Ordering::Relaxed);
                let r = self.finish_merge(m).map(|p| p.max(1));
                self.merge_left.store(0, Ordering::Relaxed);
                return r;
            }
        };
        match step {
            Ok(units) => {
                self.merge_left.store(m.left(), Ordering::Relaxed);
                Ok(units.max(1))
            }
            Err(e) => {
                // Nothing committed refers to the output: its pages go back, and the merge
                // starts again from the beginning.
                if let Some(mut m) = slot.take() {
                    m.release_all(&self.ctx.store);
                }
                self.merge_left.store(0, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// A merge of the `n` newest persisted partitions into one with a fresh number. Its reader
    /// pins the tree's pages as of now (the epoch), not the state's buffered partitions.
    fn start_merge(&self, st: &Arc<State>, n: usize) -> Result<Merging> {
        let inputs: Vec<Arc<Persisted>> = st.persisted[..n].to_vec();
        let bottom = n == st.persisted.len();
        let reader = Arc::new(TreeReader {
            root: st.root,
            height: st.height,
            store: self.ctx.store.clone(),
            _pin: st.epoch.clone(),
        });
        let mut sources = Vec::with_capacity(inputs.len());
        for p in &inputs {
            sources.push(Self::partition_iter(
                reader.clone(),
                p.pnum,
                &Bound::Unbounded,
                &Bound::Unbounded,
                false,
            )?);
        }
        let comp = Compactor::new(
            MergeIter::new(sources, false),
            self.ctx.snapshots.list(),
            bottom,
            self.ctx.merge_op.clone(),
        );
        let input_bytes = inputs.iter().map(|p| p.bytes()).sum();
        let m = Merging {
            pnum: self.alloc_pnum()?,
            inputs,
            input_bytes,
            comp,
            group: Vec::new(),
            w: ExtentWriter::new(self.params.write_pages as usize, Purpose::Merge),
            bloom: (self.params.bloom_bits_per_key > 0)
                .then(|| BloomBuilder::new(self.params.bloom_bits_per_key)),
            children: Vec::new(),
            leaf: Vec::new(),
            leaf_bytes: 0,
            min: None,
            max: None,
            entries: 0,
            phase: MergePhase::Leaves,
        };
        self.merge_left.store(m.left(), Ordering::Relaxed);
        Ok(m)
    }

    /// Writes the merged stream's leaves, in order, until about `budget_pages` pages are out
    /// (one leaf and its large values past it at most); at the end of the inputs, moves on to
    /// the filter. Returns the bytes written.
    fn merge_leaves(&self, m: &mut Merging, budget_pages: u64) -> Result<u64> {
        let store = &self.ctx.store;
        let before = m.w.used();
        while m.w.used() - before < budget_pages {
            match m.comp.next_group(&mut m.group) {
                None => {
                    if !m.leaf.is_empty() {
                        m.children.push(m.w.leaf(store, &m.leaf)?);
                        m.leaf.clear();
                    }
                    m.w.finish(store)?;
                    m.phase = match m.bloom.take().filter(|_| m.entries > 0) {
                        Some(b) => MergePhase::Filter(b.start_finish()),
                        None => MergePhase::Swap {
                            bloom: None,
                            bloom_ext: Extent { start: 0, pages: 0 },
                        },
                    };
                    break;
                }
                Some(r) => r?,
            }
            if m.group.is_empty() {
                continue;
            }
            let uk = m.group[0].key.clone();
            if let Some(b) = m.bloom.as_mut() {
                b.add_key(&uk);
            }
            if m.min.is_none() {
                m.min = Some(uk.clone());
            }
            m.max = Some(uk);
            for e in m.group.drain(..) {
                let le = LeafEntry {
                    key: key::tree_key(m.pnum, &e.key),
                    seq: e.seq,
                    kind: e.kind,
                    val: Val::Inline(e.value),
                };
                let size = le.encoded_len();
                if !m.leaf.is_empty() && m.leaf_bytes + size > BODY_ROOM {
                    m.children.push(m.w.leaf(store, &m.leaf)?);
                    m.leaf.clear();
                    m.leaf_bytes = 0;
                }
                m.leaf_bytes += size;
                m.leaf.push(le);
                m.entries += 1;
            }
        }
        Ok((m.w.used() - before) * PAGE_SIZE as u64)
    }

    /// Every key's bits are set: the filter's pages come next, in one contiguous extent.
    fn merge_filter_done(&self, m: &mut Merging) {
        let MergePhase::Filter(f) = std::mem::replace(&mut m.phase, MergePhase::Leaves) else {
            return;
        };
        let bytes = f.into_bytes();
        m.phase = MergePhase::FilterPages {
            w: ExtentWriter::new(self.params.write_pages as usize, Purpose::Merge),
            next: 0,
            bytes,
        };
    }

    /// Writes about `budget_pages` more of the filter's pages.
    fn merge_filter_pages(&self, m: &mut Merging, budget_pages: u64) -> Result<u64> {
        let store = &self.ctx.store;
        let MergePhase::FilterPages { w, next, bytes } = &mut m.phase else {
            return Ok(0);
        };
        let before = w.used();
        let done = w.bytes_step(store, bytes, next, budget_pages)?;
        let written = (w.used() - before) * PAGE_SIZE as u64;
        if let Some(bloom_ext) = done {
            w.finish(store)?;
            let bloom = std::mem::take(bytes);
            m.phase = MergePhase::Swap {
                bloom: Some(bloom),
                bloom_ext,
            };
        }
        Ok(written)
    }

    /// Swaps the merged partition in for its inputs in one manifest edit: their key ranges go
    /// from the tree, its leaves come in (rewriting only the inner nodes on the way). Returns
    /// the bytes written.
    fn finish_merge(&self, mut m: Merging) -> Result<u64> {
        let store = &self.ctx.store;
        let MergePhase::Swap { bloom, bloom_ext } =
            std::mem::replace(&mut m.phase, MergePhase::Leaves)
        else {
            return Err(corrupt(
                None,
                "a merge swapped in before its output was written".into(),
            ));
        };
        let (n, pnum, entries) = (m.inputs.len(), m.pnum, m.entries);
        let inputs = &m.inputs;
        let output = match (entries > 0, bloom) {
            (false, _) => {
                m.w.release_all(store);
                None
            }
            (true, bloom) => {
                let (bloom_len, bloom_filter) = match bloom {
                    Some(bytes) => (
                        bytes.len() as u32,
                        Some(crate::filter::bloom::Bloom::from_bytes(bytes)?),
                    ),
                    None => (0, None),
                };
                Some(Arc::new(Persisted {
                    pnum,
                    max_seq: inputs[0].max_seq,
                    entries,
                    leaves: m.children.len() as u64,
                    data: m.w.exts.clone(),
                    bloom_ext,
                    bloom_len,
                    min: m.min.clone().unwrap_or_else(|| Arc::from(&[][..])),
                    max: m.max.clone().unwrap_or_else(|| Arc::from(&[][..])),
                    bloom: bloom_filter,
                    id: meta::next_id(),
                }))
            }
        };
        // Swap: the inputs' key ranges go, the output's comes in, in one manifest edit.
        let _job = self.job.lock();
        let st = self.state();
        let at = st
            .persisted
            .iter()
            .position(|p| Arc::ptr_eq(p, &inputs[0]))
            .filter(|&i| {
                st.persisted.len() >= i + n
                    && st.persisted[i..i + n]
                        .iter()
                        .zip(inputs)
                        .all(|(a, b)| Arc::ptr_eq(a, b))
            })
            .ok_or_else(|| corrupt(None, "merge inputs changed under the merge".into()))?;
        let mut edit = TreeEdit::new(store, self.params.fill_percent, Purpose::Merge);
        let (mut root, mut height) = (st.root, st.height);
        for p in inputs {
            (root, height) = edit.apply(
                root,
                height,
                &key::start_of(p.pnum),
                &key::start_of(p.pnum + 1),
                &[],
            )?;
        }
        if output.is_some() {
            (root, height) = edit.apply(
                root,
                height,
                &key::start_of(pnum),
                &key::start_of(pnum + 1),
                &m.children,
            )?;
        }
        store.sync()?;
        let mut parts: Vec<Arc<Persisted>> = st.persisted[..at].to_vec();
        parts.extend(output.iter().cloned());
        parts.extend(st.persisted[at + n..].iter().cloned());
        let mut added = edit.added();
        let mut freed = edit.freed.clone();
        if let Some(o) = &output {
            added.extend(o.extents());
        }
        for p in inputs {
            freed.extend(p.extents());
        }
        self.ctx.manifest.commit(Commit {
            index_meta: self.meta_bytes(&st, root, height, &parts),
            durable_seq: self.durable.load(Ordering::Acquire),
            added,
            freed: freed.clone(),
        })?;
        let old_bloom: u64 = inputs.iter().map(|p| p.bloom_len as u64).sum();
        let new_bloom = output.as_ref().map_or(0, |o| o.bloom_len as u64);
        self.ctx.store.cache().unreserve(old_bloom);
        self.ctx.store.cache().reserve(new_bloom);
        self.reserved.fetch_add(new_bloom, Ordering::Relaxed);
        self.reserved.fetch_sub(old_bloom, Ordering::Relaxed);
        let epoch = st.epoch.advance(freed);
        let mut next = st.with();
        next.root = root;
        next.height = height;
        next.persisted = parts;
        next.epoch = epoch;
        self.publish(next);
        let c = &self.counters;
        c.merges.fetch_add(1, Ordering::Relaxed);
        c.merged_entries.fetch_add(entries, Ordering::Relaxed);
        c.merge_writes.fetch_add(m.w.writes, Ordering::Relaxed);
        c.merge_pages.fetch_add(m.w.pages, Ordering::Relaxed);
        c.inner_pages_written
            .fetch_add(edit.pages_written, Ordering::Relaxed);
        Ok(edit.pages_written * PAGE_SIZE as u64)
    }

    // ---- work ----------------------------------------------------------------------------

    /// [`Index::work`], and with `wait` false [`Index::work_unless_busy`]: `None` at once when
    /// another thread holds the step this call would advance (the job or the merge), or when
    /// that step is a commit (an eviction's or a merge's swap), which syncs the device: a
    /// writer's pacing share leaves those to the background threads.
    fn work_as(&self, budget: u64, wait: bool) -> Result<Option<u64>> {
        let budget = budget.max(1);
        let Some(mut job) = lock_unless_busy(&self.job, wait) else {
            return Ok(None);
        };
        // 1. Absorb: writers never wait for an eviction to take their memtable.
        if job.absorb.is_none() {
            if let Some((mem, input)) = self.queue.front() {
                job.absorb = Some(Absorbing {
                    mem,
                    input,
                    done: 0,
                });
            }
        }
        if let Some(a) = job.absorb.as_mut() {
            let (units, finished) = self.absorb_step(a, budget)?;
            if finished {
                job.absorb = None;
                self.queue.pop();
                self.counters.absorbs.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(Some(units.max(1)));
        }
        // 2. Evict the CLOSING partition.
        let st = self.state();
        if let Some(closing) = st.closing.clone() {
            if job.evict.is_none() {
                job.evict = Some(self.start_evict(closing));
            }
            let Some(ev) = job.evict.as_mut() else {
                return Ok(Some(0));
            };
            if !ev.written {
                let (units, done) = match self.evict_step(ev, budget) {
                    Ok(r) => r,
                    Err(e) => {
                        // Started again from the first page; this extent was committed nowhere.
                        if let Some(mut ev) = job.evict.take() {
                            ev.writer.release_all(&self.ctx.store);
                        }
                        return Err(e);
                    }
                };
                ev.written = done;
                if !done || !wait {
                    return Ok(Some(units.max(1)));
                }
            } else if !wait {
                // The commit syncs the device, which under the threads' writes took up to 300
                // ms: a writer leaves it to them.
                return Ok(None);
            }
            if let Some(ev) = job.evict.take() {
                // On an error its pages are not given back: the manifest commit may have
                // reached the disk although it reported a failure, and a released extent is
                // punched out (read back as zeros after a reopen). The Db is failed from here,
                // and a reopen rebuilds the free space from the manifest.
                self.finish_evict(ev)?;
            }
            return Ok(Some(1));
        }
        // 3. Switch when the buffer is nearly full or a flush wants ACTIVE durable.
        if self.switch_due(&st) {
            self.switch()?;
            return Ok(Some(1));
        }
        if st.active.is_empty() {
            self.flush_wanted.store(false, Ordering::Release);
        }
        drop(job);
        // 4. Partition merge, a bounded step at a time (in the background unless forced).
        let Some(mut merging) = lock_unless_busy(&self.merging, wait) else {
            return Ok(None);
        };
        if !wait
            && merging
                .as_ref()
                .is_some_and(|m| matches!(m.phase, MergePhase::Swap { .. }))
        {
            // The swap syncs the device (up to 220 ms under the threads' writes, measured at 2
            // million records): a writer leaves it to the threads, as an eviction's commit.
            return Ok(None);
        }
        self.merge_work(&mut merging, budget).map(Some)
    }

    // ---- check ---------------------------------------------------------------------------

    /// Verifies the partition invariants (spec §6 items 3, 4, 6) and every page; returns the
    /// entries held.
    fn check_all(&self) -> Result<u64> {
        let st = self.state();
        let mut total = 0;
        for (what, b) in [
            ("ACTIVE", Some(&st.active)),
            ("CLOSING", st.closing.as_ref()),
        ] {
            if let Some(b) = b {
                total += b
                    .check()
                    .map_err(|d| corrupt(None, format!("{what} partition {}: {d}", b.pnum)))?;
            }
        }
        let mut by_pnum: BTreeMap<u32, (usize, u64, u64)> = BTreeMap::new();
        let next = self.next_pnum.load(Ordering::Acquire);
        for (i, p) in st.persisted.iter().enumerate() {
            if by_pnum.insert(p.pnum, (i, 0, 0)).is_some() {
                return Err(corrupt(None, format!("partition {} listed twice", p.pnum)));
            }
            if p.pnum >= next || Some(p.pnum) == st.closing.as_ref().map(|c| c.pnum) {
                return Err(corrupt(None, format!("partition {} is not closed", p.pnum)));
            }
            if p.min[..] > p.max[..] {
                return Err(corrupt(
                    None,
                    format!("partition {}: min above max", p.pnum),
                ));
            }
        }
        if by_pnum.contains_key(&st.active.pnum) {
            return Err(corrupt(
                None,
                "the ACTIVE partition is also persisted".into(),
            ));
        }
        // Bloom pages: one unreadable at open left its partition without a filter.
        for p in &st.persisted {
            if p.bloom_ext.pages > 0 {
                meta::read_bloom(&self.ctx.store, p.bloom_ext, p.bloom_len)?;
            }
        }
        let reader = self.reader(&st);
        let n = reader.check(&mut |page, leaf| {
            let Some(pnum) = key::pnum_of(&leaf[0].key) else {
                return Err(corrupt(Some(page), "a key without partition number".into()));
            };
            let Some(slot) = by_pnum.get_mut(&pnum) else {
                return Err(corrupt(
                    Some(page),
                    format!("a leaf of unknown partition {pnum}"),
                ));
            };
            let p = &st.persisted[slot.0];
            let within = |s: u64, n: u64| p.holds(s, n);
            if !within(page, 1) {
                return Err(corrupt(
                    Some(page),
                    format!("leaf outside partition {pnum}'s extent"),
                ));
            }
            slot.1 += 1;
            slot.2 += leaf.len() as u64;
            for e in leaf {
                if !key::in_partition(&e.key, pnum) {
                    return Err(corrupt(Some(page), "a leaf holding two partitions".into()));
                }
                let uk = &e.key[key::PREFIX..];
                if uk < &p.min[..] || uk > &p.max[..] {
                    return Err(corrupt(
                        Some(page),
                        format!("a key outside partition {pnum}'s key range"),
                    ));
                }
                if p.bloom.as_ref().is_some_and(|b| !b.may_contain(uk)) {
                    return Err(corrupt(
                        Some(page),
                        format!("partition {pnum}'s bloom filter misses a key"),
                    ));
                }
                if let Val::Blob { start, len } = e.val {
                    if !within(start, crate::index::btree::node::blob_pages(len as usize)) {
                        return Err(corrupt(Some(page), "a value outside its partition".into()));
                    }
                }
            }
            Ok(())
        })?;
        for (pnum, (i, leaves, entries)) in by_pnum {
            let p = &st.persisted[i];
            if leaves != p.leaves || entries != p.entries {
                return Err(corrupt(
                    None,
                    format!(
                        "partition {pnum}: {leaves} leaves and {entries} entries in the tree, \
                         the metadata says {} and {}",
                        p.leaves, p.entries
                    ),
                ));
            }
        }
        Ok(total + n)
    }
}

impl Drop for Pbt {
    fn drop(&mut self) {
        self.ctx
            .store
            .cache()
            .unreserve(self.reserved.load(Ordering::Relaxed));
    }
}

impl Index for Pbt {
    fn absorb(&self, mem: Arc<Memtable>) -> Result<()> {
        self.queue.push(mem);
        Ok(())
    }

    /// Queued memtable bytes not yet absorbed, the unwritten pages of the CLOSING partition
    /// and, when ACTIVE must switch, its pages (correction 9); and a merge of every partition
    /// while more than twice `max_partitions` are persisted ([`Pbt::merge_forced`]): what the
    /// merge under way has left, or every partition's bytes before one starts.
    fn debt(&self) -> u64 {
        let job = self.job.try_lock();
        let mut d = self.queue.debt(|| {
            job.as_ref()
                .and_then(|j| j.absorb.as_ref())
                .map_or(0, |a| a.done)
        });
        let st = self.state();
        if let Some(c) = &st.closing {
            let written = job
                .as_ref()
                .and_then(|j| j.evict.as_ref())
                .map_or(0, |e| e.writer.used());
            d += (c.pages().saturating_sub(written) * PAGE_SIZE as u64).max(1);
        }
        if self.switch_due(&st) {
            d += (st.active.pages() * PAGE_SIZE as u64).max(1);
        }
        if self.merge_forced(&st) {
            d += match self.merge_left.load(Ordering::Relaxed) {
                0 => st.persisted.iter().map(|p| p.bytes()).sum::<u64>().max(1),
                left => left,
            };
        }
        d
    }

    fn work(&self, budget: u64) -> Result<u64> {
        Ok(self.work_as(budget, true)?.unwrap_or(0))
    }

    fn work_unless_busy(&self, budget: u64) -> Result<Option<u64>> {
        self.work_as(budget, false)
    }

    fn background_work(&self) -> bool {
        self.debt() > 0
            || self.merge_choice(&self.state()).is_some()
            || self.merging.try_lock().is_none_or(|m| m.is_some())
    }

    fn request_flush(&self) {
        self.flush_wanted.store(true, Ordering::Release);
    }

    fn durable_seq(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The memtables wholly absorbed into ACTIVE and CLOSING, which wait for their partition's
    /// eviction (bounded by the PBT-Buffer: the switch comes while a memtable's worth of leaf
    /// room is left).
    fn held_seq(&self) -> u64 {
        let st = self.state();
        let closing = st.closing.as_ref().map_or(0, |c| c.max_seq);
        st.active.max_seq.max(closing)
    }

    /// Newest partition first (correction 2), skipping partitions by key range and bloom
    /// filter; ends at the first Put or Delete (correction 3).
    fn get(&self, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> Result<()> {
        let st = self.state();
        for b in [Some(&st.active), st.closing.as_ref()]
            .into_iter()
            .flatten()
        {
            if b.overlaps(Some(key), Some(key)) && b.versions(key, seq, out) {
                return Ok(());
            }
        }
        let mut reader = None;
        // The tree key, `pnum ‖ key`, built in place for each partition probed.
        let mut tree_key = [0u8; key::PREFIX + crate::MAX_KEY_LEN];
        let tree_key_len = key::PREFIX + key.len();
        let Some(user) = tree_key.get_mut(key::PREFIX..tree_key_len) else {
            return Err(Error::InvalidKey { len: key.len() });
        };
        user.copy_from_slice(key);
        let c = &self.counters;
        let hash = crate::filter::bloom::hash64(key);
        let rows = self.ctx.store.cache().rows();
        for p in &st.persisted {
            if !p.overlaps(Some(key), Some(key)) {
                c.range_skips.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if p.bloom.as_ref().is_some_and(|b| !b.may_contain_hash(hash)) {
                c.bloom_skips.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // A partition is immutable: what a lookup at its newest sequence number found is
            // what any lookup at or above that finds.
            if rows.enabled() {
                if let Some(row) = rows.get(p.id, hash, key) {
                    if row.first().is_none_or(|e| e.seq <= seq) {
                        out.extend(row.iter().cloned());
                        if row.last().is_some_and(|e| e.kind != Kind::Merge) {
                            return Ok(());
                        }
                        continue;
                    }
                }
            }
            c.probes.fetch_add(1, Ordering::Relaxed);
            let r = reader.get_or_insert_with(|| self.tree(&st));
            let n0 = out.len();
            tree_key[..key::PREFIX].copy_from_slice(&p.pnum.to_be_bytes());
            let ended = r.versions(&tree_key[..tree_key_len], seq, key, out)?;
            if rows.enabled() && seq >= p.max_seq {
                rows.insert(p.id, hash, key, &out[n0..]);
            }
            if ended {
                return Ok(());
            }
        }
        Ok(())
    }

    /// One sorted source per partition whose key range meets the bounds (spec §3.6's k-way
    /// merge, done by the Db by sequence number).
    fn iter(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> Result<Vec<EntryIter>> {
        let st = self.state();
        let (l, h) = (bound_key(&lo), bound_key(&hi));
        let mut out: Vec<EntryIter> = Vec::new();
        for b in [Some(&st.active), st.closing.as_ref()]
            .into_iter()
            .flatten()
        {
            if b.overlaps(l, h) {
                out.push(Box::new(buffer::BufferIter::new(
                    b.clone(),
                    lo.clone(),
                    hi.clone(),
                    reverse,
                )));
            }
        }
        let reader = self.reader(&st);
        for p in &st.persisted {
            if p.overlaps(l, h) {
                out.push(Self::partition_iter(
                    reader.clone(),
                    p.pnum,
                    &lo,
                    &hi,
                    reverse,
                )?);
            } else {
                self.counters.range_skips.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(out)
    }

    fn stats(&self) -> IndexStats {
        let st = self.state();
        let c = &self.counters;
        let mut s = IndexStats::new("pbt", st.height as u64, &c.absorbs);
        s.count([
            ("splits", &c.splits),
            ("switches", &c.switches),
            ("evictions", &c.evictions),
            ("evicted_pages", &c.evicted_pages),
            ("eviction_writes", &c.eviction_writes),
            ("inner_pages_written", &c.inner_pages_written),
            ("merges", &c.merges),
            ("merged_entries", &c.merged_entries),
            ("merge_writes", &c.merge_writes),
            ("merge_pages", &c.merge_pages),
            ("range_skips", &c.range_skips),
            ("bloom_skips", &c.bloom_skips),
            ("partition_probes", &c.probes),
        ]);
        s.counters
            .insert("partitions".into(), st.persisted.len() as u64);
        s.shape.push(format!(
            "tree height {} root page {}; PBT-Buffer {} of {} pages",
            st.height,
            st.root,
            st.active.pages() + st.closing.as_ref().map_or(0, |c| c.pages()),
            self.buffer_pages
        ));
        let show = |k: &Option<Arc<[u8]>>| {
            k.as_ref()
                .map_or("-".into(), |k| String::from_utf8_lossy(k).into_owned())
        };
        for (what, b) in [
            ("ACTIVE", Some(&st.active)),
            ("CLOSING", st.closing.as_ref()),
        ] {
            if let Some(b) = b {
                s.entries += b.entries;
                s.shape.push(format!(
                    "partition {} {what}: {} entries, {} leaves in the buffer, keys {:?}..{:?}",
                    b.pnum,
                    b.entries,
                    b.leaves.len(),
                    show(&b.min),
                    show(&b.max)
                ));
            }
        }
        for p in &st.persisted {
            s.entries += p.entries;
            s.filter_bytes += p.bloom_len as u64;
            s.shape.push(format!(
                "partition {} PERSISTED: {} entries, {} leaves, {} pages in {} extents from {}, \
                 bloom {} bytes, keys {:?}..{:?}",
                p.pnum,
                p.entries,
                p.leaves,
                p.data_pages(),
                p.data.len(),
                p.data.first().map_or(0, |e| e.start),
                p.bloom_len,
                String::from_utf8_lossy(&p.min),
                String::from_utf8_lossy(&p.max)
            ));
        }
        s
    }

    fn check(&self) -> Result<u64> {
        self.check_all()
    }
}
