//! Unit tests of the structure (spec §8): one page read per level for a search, counted by
//! the cache; fences and invariants valid after every merge (the check) with an oracle;
//! Property 1; a merge's result equal to its merged inputs; deletes cancelling to nothing;
//! versions kept for snapshots across pages (CONT_PREV); recovery; the de-amortization bound.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::merge::{Compactor, MergeIter};
use crate::storage::{FaultFs, PAGE_SIZE};
use crate::testutil::{fault_ctx, reopen_fault_ctx, seed};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

struct Harness {
    fs: FaultFs,
    ctx: IndexContext,
    tree: FdTree,
    params: FdTreeParams,
    seq: u64,
    /// Largest bytes written by one `work` call, and the largest number of calls a cascade took.
    max_step_bytes: u64,
    max_calls: u64,
}

const MEMTABLE: u64 = 64 << 10;

fn params(k: u32, deamortized: bool) -> FdTreeParams {
    FdTreeParams {
        ratio: k,
        deamortized,
        head_entries: 200,
        ..FdTreeParams::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:08}").into_bytes()
}

/// Batch `c` of 150 puts whose keys scatter over the key space (records `150c + 1..=150c + 150`,
/// multiplied by a prime modulo another): small head trees, so that cascades reach L3 soon.
fn small_scattered_batch(c: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    (1..=150)
        .map(|i| {
            (
                key((c * 150 + i).wrapping_mul(7919) % 1_000_003),
                Some(vec![1u8; 8]),
            )
        })
        .collect()
}

/// Batch `c` of 300 puts whose keys scatter over the key space (records `300c..300c + 300`,
/// multiplied by a prime modulo another).
fn scattered_batch(c: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    (0..300)
        .map(|i| {
            (
                key((c * 300 + i).wrapping_mul(104_729) % 1_000_003),
                Some(vec![4u8; 8]),
            )
        })
        .collect()
}

impl Harness {
    fn new(p: FdTreeParams) -> Harness {
        let fs = FaultFs::new();
        let ctx = fault_ctx(&fs, MEMTABLE);
        let tree = FdTree::open(ctx.clone(), p.clone(), &[], 0).expect("open");
        Harness {
            fs,
            ctx,
            tree,
            params: p,
            seq: 0,
            max_step_bytes: 0,
            max_calls: 0,
        }
    }

    fn reopen(&mut self) {
        // As a crash would: nothing more is committed by the index being replaced (its
        // committer could otherwise commit after the manifest is read, and the new index
        // allocate what that commit names).
        self.tree.stop();
        let (ctx, state) = reopen_fault_ctx(&self.fs, MEMTABLE);
        self.ctx = ctx;
        self.tree = FdTree::open(
            self.ctx.clone(),
            self.params.clone(),
            &state.index_meta,
            state.durable_seq,
        )
        .expect("reopen");
    }

    /// A head tree of `ops` (key, Some(value) or None for a delete), applied to `model` too.
    fn head_tree(
        &mut self,
        ops: &[(Vec<u8>, Option<Vec<u8>>)],
        model: &mut Model,
    ) -> Arc<Memtable> {
        let mem = Arc::new(Memtable::new(0));
        for (k, v) in ops {
            self.seq += 1;
            match v {
                Some(v) => {
                    mem.insert(k, self.seq, Kind::Put, v);
                    model.insert(k.clone(), v.clone());
                }
                None => {
                    mem.insert(k, self.seq, Kind::Delete, b"");
                    model.remove(k);
                }
            }
        }
        mem
    }

    /// Absorbs one head tree of `ops` (key, Some(value) or None for a delete), then works the
    /// cascade off as the Db would, `budget` units a call.
    fn absorb(&mut self, ops: &[(Vec<u8>, Option<Vec<u8>>)], model: &mut Model, budget: u64) {
        let mem = self.head_tree(ops, model);
        assert_eq!(self.tree.debt(), 0);
        self.tree.absorb(mem).expect("absorb");
        let mut calls = 0;
        while self.tree.debt() > 0 {
            let before = self.ctx.store.counters().snapshot().total_written();
            self.tree.work(budget).expect("work");
            let wrote = self.ctx.store.counters().snapshot().total_written() - before;
            self.max_step_bytes = self.max_step_bytes.max(wrote);
            calls += 1;
            assert!(calls < 1_000_000, "the cascade does not end");
        }
        self.max_calls = self.max_calls.max(calls);
        // The committer thread makes the published cascade durable.
        self.tree.committer().wait().expect("commit");
        assert!(self.tree.durable_seq() >= self.seq);
    }

    /// [`Harness::absorb`], returning for each `work` call the step kind it found
    /// ([`STEP_KINDS`]) and the pages it read: reads are counted when an I/O thread has done
    /// them, so each count waits for the reads handed off so far, and a call is charged with
    /// those it asked for.
    fn absorb_counting_reads(
        &mut self,
        ops: &[(Vec<u8>, Option<Vec<u8>>)],
        model: &mut Model,
        budget: u64,
    ) -> Vec<(usize, u64)> {
        let mem = self.head_tree(ops, model);
        assert_eq!(self.tree.debt(), 0);
        self.tree.absorb(mem).expect("absorb");
        let read = |h: &Harness| {
            while h.ctx.store.io_in_flight() > 0 {
                std::thread::yield_now();
            }
            h.ctx.store.counters().snapshot().total_read() / PAGE_SIZE as u64
        };
        let mut calls = Vec::new();
        while self.tree.debt() > 0 {
            let kind = self.tree.job.lock().as_ref().map_or(0, Job::next_step_kind);
            let before = read(self);
            self.tree.work(budget).expect("work");
            calls.push((kind, read(self) - before));
            assert!(calls.len() < 1_000_000, "the cascade does not end");
        }
        self.tree.committer().wait().expect("commit");
        assert!(self.tree.durable_seq() >= self.seq);
        calls
    }

    fn get(&self, k: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.tree.get(k, u64::MAX >> 8, &mut out).expect("get");
        match out.first() {
            Some(e) if e.kind == Kind::Put => Some(e.value.to_vec()),
            _ => None,
        }
    }

    fn scan(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let sources = self
            .tree
            .iter(Bound::Unbounded, Bound::Unbounded, false)
            .expect("iter");
        let c = Compactor::new(MergeIter::new(sources, false), Vec::new(), true, None);
        c.map(|e| e.expect("entry"))
            .filter(|e| e.kind == Kind::Put)
            .map(|e| (e.key.to_vec(), e.value.to_vec()))
            .collect()
    }

    fn verify(&self, model: &Model, probe: &[Vec<u8>]) {
        self.tree.check().expect("check");
        for k in probe {
            assert_eq!(
                self.get(k),
                model.get(k).cloned(),
                "key {:?}",
                String::from_utf8_lossy(k)
            );
        }
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(self.scan(), want);
    }
}

/// Spec §8 tests 1–5, 7, 8 and 10: random puts, overwrites, deletes (of present and absent
/// keys, and re-inserts) over many cascades and new levels; after every merge the check (order,
/// fences, Invariant 1, capacities) passes and reads agree with the oracle.
fn random_ops(deamortized: bool) {
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let mut h = Harness::new(params(3, deamortized));
    let mut model = Model::new();
    let universe = 3000u64;
    for round in 0..60 {
        let n = rng.gen_range(1..400);
        let ops: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..n)
            .map(|_| {
                let k = key(rng.gen_range(0..universe));
                if rng.gen_bool(0.2) {
                    (k, None)
                } else {
                    let len = if rng.gen_bool(0.01) {
                        5000
                    } else {
                        rng.gen_range(0..40)
                    };
                    (k, Some((0..len).map(|_| rng.gen()).collect()))
                }
            })
            .collect();
        // Sorted and unique within one head tree (a memtable holds one version per seq).
        h.absorb(&ops, &mut model, 4096);
        let probe: Vec<Vec<u8>> = (0..50).map(|_| key(rng.gen_range(0..universe))).collect();
        h.verify(&model, &probe);
        if round % 20 == 19 {
            h.reopen();
            h.verify(&model, &probe);
        }
    }
    assert!(
        h.tree.version().levels.len() >= 3,
        "seed {s}: only {} levels",
        h.tree.version().levels.len()
    );
}

#[test]
fn random_ops_plain_match_the_oracle_and_keep_the_invariants() {
    random_ops(false);
}

#[test]
fn random_ops_deamortized_match_the_oracle_and_keep_the_invariants() {
    random_ops(true);
}

/// Spec §8 test 12 (with correction 6): with unique keys and no deletes a search reads exactly
/// one page per level for a miss and i pages for a hit in L_i, counted by the page cache.
#[test]
fn search_reads_one_page_per_level() {
    let mut h = Harness::new(params(4, false));
    let mut model = Model::new();
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let mut keys: Vec<u64> = (0..20_000).map(|i| i * 2).collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.gen_range(0..=i));
    }
    for chunk in keys.chunks(150) {
        let ops: Vec<_> = chunk
            .iter()
            .map(|&i| (key(i), Some(b"v".to_vec())))
            .collect();
        h.absorb(&ops, &mut model, u64::MAX);
    }
    let v = h.tree.version();
    let levels = v.levels.len();
    assert!(levels >= 3, "only {levels} levels");
    // Which level holds each key.
    let mut at = BTreeMap::new();
    for (i, l) in v.levels.iter().enumerate() {
        for e in
            l.run()
                .expect("run")
                .iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::Merge)
        {
            at.insert(e.expect("entry").key.to_vec(), i + 1);
        }
    }
    let reads = || {
        let c = h.ctx.store.cache().stats();
        c.hits + c.misses
    };
    let mut seen_levels = std::collections::BTreeSet::new();
    for _ in 0..500 {
        let i = rng.gen_range(0..40_001u64);
        let k = key(i);
        let before = reads();
        let got = h.get(&k);
        let pages = reads() - before;
        match at.get(&k) {
            Some(&lv) => {
                assert_eq!(got.as_deref(), Some(&b"v"[..]));
                assert_eq!(
                    pages, lv as u64,
                    "seed {s}: hit in L{lv} read {pages} pages"
                );
                seen_levels.insert(lv);
            }
            None => {
                assert_eq!(got, None);
                assert_eq!(pages, levels as u64, "seed {s}: a miss read {pages} pages");
            }
        }
    }
    assert!(seen_levels.len() >= 2, "hits only in {seen_levels:?}");
}

/// Spec §8 test 6 (Property 1, plain mode): right after a cascade ending at L_j, every level
/// above holds only external fences, one per page of the level below.
#[test]
fn levels_above_a_cascade_hold_only_fences() {
    let mut h = Harness::new(params(3, false));
    let mut model = Model::new();
    let mut deep = 0;
    for c in 0..80 {
        let ops = small_scattered_batch(c);
        let before = h.tree.counters.ended_at.lock().clone();
        h.absorb(&ops, &mut model, u64::MAX);
        let after = h.tree.counters.ended_at.lock().clone();
        let j = (0..after.len())
            .find(|&i| after[i] > before.get(i).copied().unwrap_or(0))
            .expect("a cascade")
            + 1;
        let v = h.tree.version();
        for i in 0..j - 1 {
            let (l, below) = (&v.levels[i], &v.levels[i + 1]);
            assert_eq!(
                l.entries(),
                0,
                "L{} holds entries after a cascade to L{j}",
                i + 1
            );
            assert_eq!(
                l.items(),
                below.pages(),
                "L{} fences vs pages of L{}",
                i + 1,
                i + 2
            );
        }
        assert_eq!(v.head().expect("head").len() as u64, v.levels[0].pages());
        if j >= 3 {
            deep += 1;
        }
    }
    assert!(deep > 0, "no cascade reached L3");
}

/// A range scan right after a cascade that ended at L_j (j >= 3) reads nothing of the levels
/// above L_j: they hold fences only, and a scan of one would read it to its end looking for an
/// entry. It touches no more pages than the same scan of L_j's run alone, and returns what the
/// model holds from its start.
#[test]
fn a_scan_reads_nothing_of_levels_that_hold_only_fences() {
    let mut h = Harness::new(params(3, false));
    let mut model = Model::new();
    for round in 0..200 {
        let ops = small_scattered_batch(round);
        h.absorb(&ops, &mut model, u64::MAX);
        let v = h.tree.version();
        let with_entries: Vec<usize> = (0..v.levels.len())
            .filter(|&i| v.levels[i].entries() > 0)
            .collect();
        if with_entries.first().is_none_or(|&i| i < 2) {
            continue;
        }
        // L1 and L2 hold fences only.
        let lj = with_entries[0];
        let from = key(500_000);
        let sources = h
            .tree
            .iter(Bound::Included(from.clone()), Bound::Unbounded, false)
            .expect("iter");
        assert_eq!(sources.len(), with_entries.len(), "round {round}");
        let accesses = || {
            let c = h.ctx.store.cache().stats();
            c.hits + c.misses
        };
        let take = |sources: Vec<EntryIter>| -> Vec<Vec<u8>> {
            MergeIter::new(sources, false)
                .take(5)
                .map(|e| e.expect("entry").key.to_vec())
                .collect()
        };
        let before = accesses();
        let got = take(sources);
        let tree_pages = accesses() - before;
        let want: Vec<Vec<u8>> = model
            .range(from.clone()..)
            .take(5)
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(got, want, "round {round}");
        if with_entries.len() == 1 {
            let run = v.levels[lj].run().expect("run").clone();
            let alone: Vec<EntryIter> = vec![Box::new(run.iter(
                Bound::Included(from),
                Bound::Unbounded,
                false,
                Purpose::UserRead,
            ))];
            let before = accesses();
            assert_eq!(take(alone), want);
            let alone_pages = accesses() - before;
            assert!(
                tree_pages <= alone_pages,
                "round {round}: the scan touched {tree_pages} pages, L{} alone {alone_pages}",
                lj + 1
            );
            return;
        }
    }
    panic!("no cascade left L1 and L2 with fences only and one level below");
}

/// Spec §8 test 8 / §4.5: a merge that reaches the lowest level drops tombstones with what
/// they hide; deleting everything empties the tree (no level is left, correction 4 for the
/// levels above is moot), and the check passes all along.
#[test]
fn deleting_everything_empties_the_tree() {
    let mut h = Harness::new(params(3, false));
    let mut model = Model::new();
    for c in 0..6u64 {
        let ops: Vec<_> = (0..150)
            .map(|i| (key(c * 150 + i), Some(vec![2u8; 8])))
            .collect();
        h.absorb(&ops, &mut model, u64::MAX);
    }
    assert!(h.tree.version().levels.len() >= 2);
    for c in 0..6u64 {
        let ops: Vec<_> = (0..150).map(|i| (key(c * 150 + i), None)).collect();
        h.absorb(&ops, &mut model, u64::MAX);
        h.verify(&model, &[key(c * 150)]);
    }
    // Push the tombstones down until they meet their values at the bottom.
    for i in 0..200u64 {
        if h.tree.version().levels.iter().all(|l| l.entries() == 0) {
            break;
        }
        h.absorb(&[(key(10_000 + i), None)], &mut model, u64::MAX);
    }
    h.verify(&model, &[]);
    assert!(
        h.tree.version().levels.iter().all(|l| l.entries() == 0),
        "tombstones never reached the bottom"
    );
}

/// Spec §4.4 "merge result equals merged inputs": the new L_j holds exactly what resolving
/// the head tree and the old L1..L_j gives, in order, for plain and de-amortized merges.
#[test]
fn a_merge_result_equals_its_merged_inputs() {
    for deamortized in [false, true] {
        let mut h = Harness::new(params(3, deamortized));
        let mut model = Model::new();
        let mut rng = SmallRng::seed_from_u64(seed());
        for _ in 0..40 {
            let ops: Vec<_> = (0..rng.gen_range(50..300))
                .map(|_| {
                    let k = key(rng.gen_range(0..5000));
                    (
                        k,
                        rng.gen_bool(0.8)
                            .then(|| vec![rng.gen(); rng.gen_range(1..30)]),
                    )
                })
                .collect();
            // The expected result: the old levels and the new head tree, resolved.
            let old = h.tree.version();
            let mem = Arc::new(Memtable::new(0));
            let mut seq = h.seq;
            for (k, v) in &ops {
                seq += 1;
                match v {
                    Some(v) => mem.insert(k, seq, Kind::Put, v),
                    None => mem.insert(k, seq, Kind::Delete, b""),
                }
            }
            let sizes: Vec<_> = old
                .levels
                .iter()
                .map(|l| job::LevelSize {
                    entries: l.entries(),
                    pages: l.pages(),
                })
                .collect();
            let mem_pages = (mem.user_bytes() + mem.len() as u64 * 20) / PAGE_SIZE as u64;
            let j = job::plan(&sizes, mem.len() as u64, mem_pages, h.tree.k, h.tree.l0);
            let bottom = j >= old.levels.len();
            let mut sources: Vec<EntryIter> = vec![Box::new(mem.iter(
                Bound::Unbounded,
                Bound::Unbounded,
                false,
            ))];
            for l in old.levels.iter().take(j) {
                sources.push(Box::new(l.run().expect("run").iter(
                    Bound::Unbounded,
                    Bound::Unbounded,
                    false,
                    Purpose::Merge,
                )));
            }
            let want: Vec<Entry> =
                Compactor::new(MergeIter::new(sources, false), Vec::new(), bottom, None)
                    .map(|e| e.expect("entry"))
                    .collect();
            h.absorb(&ops, &mut model, 2000);
            let new = h.tree.version();
            let got: Vec<Entry> = match new.levels.get(j - 1) {
                Some(l) => l
                    .run()
                    .expect("run")
                    .iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::Merge)
                    .map(|e| e.expect("entry"))
                    .collect(),
                None => Vec::new(),
            };
            assert_eq!(got, want, "merge into L{j} (de-amortized {deamortized})");
            h.verify(&model, &[]);
        }
    }
}

/// Versions a live snapshot needs are kept through merges, also when one key's versions fill
/// several pages (`CONT_PREV`, spec pitfall 3): every snapshot reads its own value.
#[test]
fn snapshot_versions_span_pages_and_stay_readable() {
    let mut h = Harness::new(params(3, false));
    let mut model = Model::new();
    let hot = b"hot".to_vec();
    let mut snaps = Vec::new();
    for round in 0..40u64 {
        let mut ops: Vec<_> = (0..100)
            .map(|i| (key(round * 100 + i), Some(vec![3u8; 8])))
            .collect();
        ops.push((hot.clone(), Some(vec![round as u8; 900])));
        ops.sort();
        h.absorb(&ops, &mut model, u64::MAX);
        h.ctx.snapshots.acquire(h.seq);
        snaps.push((h.seq, round as u8));
        // The merge of the next head tree may only now know of this snapshot.
    }
    h.tree.check().expect("check");
    for (seq, round) in &snaps {
        let mut out = Vec::new();
        h.tree.get(&hot, *seq, &mut out).expect("get");
        assert_eq!(
            out.first().map(|e| e.value.to_vec()),
            Some(vec![*round; 900]),
            "snapshot {seq}"
        );
    }
    assert!(
        h.tree.counters.fallback_reads.load(Ordering::Relaxed) > 0,
        "no page continued a key"
    );
}

/// Spec §8 test 14: de-amortized, no work call writes more than about one budget of pages
/// (plus a run's index pages and header), while a plain cascade is one call; both give the
/// same tree.
#[test]
fn deamortized_work_is_bounded_per_call() {
    let budget = 16 << 10;
    let run = |deamortized| {
        let mut h = Harness::new(params(3, deamortized));
        let mut model = Model::new();
        for c in 0..250u64 {
            h.absorb(&scattered_batch(c), &mut model, budget);
        }
        h.verify(&model, &[]);
        h
    };
    let plain = run(false);
    let de = run(true);
    assert_eq!(plain.max_calls, 1);
    assert!(
        de.max_calls > 10,
        "the cascade took only {} calls",
        de.max_calls
    );
    // A step moves at most `budget` bytes of entries, written in requests of
    // `chunk_pages` (16) pages behind the step (a write handed off in one step may complete,
    // and be counted, in the next; at most two are in flight), or finishes one run: its last
    // chunk, index pages and header.
    let bound = budget + (3 * 16 + 8) * PAGE_SIZE as u64;
    assert!(
        de.max_step_bytes <= bound,
        "a step wrote {} bytes",
        de.max_step_bytes
    );
    assert!(
        plain.max_step_bytes >= 5 * de.max_step_bytes,
        "plain's largest call wrote {} bytes, de-amortized {}",
        plain.max_step_bytes,
        de.max_step_bytes
    );
    assert_eq!(plain.scan(), de.scan());
}

/// A writer's pacing share never waits for a step another thread is in the middle of (the
/// bench's longest `fdtree-d` waits, 112 to 250 ms on the loaded host, were writers waiting
/// for the job's lock while a background thread's merge step ran).
#[test]
fn a_writers_share_never_waits_for_a_step_in_another_thread() {
    let mut h = Harness::new(params(3, true));
    let mut model = Model::new();
    let ops: Vec<_> = (0..300u64)
        .map(|i| (key(i * 7 % 300), Some(vec![i as u8; 8])))
        .collect();
    h.absorb(&ops, &mut model, 4096);
    let tree = &h.tree;
    crate::index::assert_share_skips_a_held_job(tree, tree.job.lock());
    h.verify(&model, &[key(1), key(299)]);
}

/// The cascade's start is a bounded step like the others (spec §4.8): a call that opens a
/// cascade reads at most one input level's index path and one request of its first pages
/// (`chunk_pages`), which it asks for and does not wait for, however many and large the levels
/// merged. Before, the one call that started a cascade opened every input level, read each
/// one's first pages (a request of up to 64 pages, waited for, and the next asked for) and then
/// did a merge step: `fdtree-d`'s longest step, 68–98 ms on the loaded host
/// (docs/results/stalls.md, *What is left*).
#[test]
fn opening_a_cascade_reads_one_level_a_call() {
    let budget = 16 << 10;
    let mut h = Harness::new(params(3, true));
    let mut model = Model::new();
    let chunk = h.tree.chunk_pages();
    // The most pages a start call and a merge call read, and the start calls of the
    // cascades that opened three levels or more.
    let (mut start_most, mut merge_most, mut deep) = (0u64, 0u64, 0u64);
    for c in 0..250u64 {
        let ops = scattered_batch(c);
        // The index path of the deepest run: the pages above its data pages.
        let path = h
            .tree
            .version()
            .levels
            .iter()
            .map(|l| l.run().map_or(0, |r| u64::from(r.meta().height)))
            .max()
            .unwrap_or(0)
            .saturating_sub(1);
        let calls = h.absorb_counting_reads(&ops, &mut model, budget);
        let starts: Vec<u64> = calls.iter().filter(|c| c.0 == 0).map(|c| c.1).collect();
        let most = starts.iter().copied().max().unwrap_or(0);
        assert!(
            most <= path + chunk,
            "cascade {c}: a call opening the cascade read {most} pages (index path {path}, \
             requests of {chunk}); its start calls read {starts:?}"
        );
        start_most = start_most.max(most);
        if starts.len() >= 3 {
            deep += 1;
        }
        let merges = calls.iter().filter(|c| c.0 == 1).map(|c| c.1);
        merge_most = merge_most.max(merges.max().unwrap_or(0));
    }
    println!("most pages read: {start_most} by a start call, {merge_most} by a merge call");
    assert!(
        deep >= 10,
        "only {deep} cascades opened three levels or more"
    );
    let probe: Vec<Vec<u8>> = (0..200u64)
        .map(|i| key(i.wrapping_mul(104_729) % 1_000_003))
        .collect();
    h.verify(&model, &probe);
}
