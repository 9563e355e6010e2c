//! Spec §6's properties, driven on the index without a Db (the Db's conformance suite covers
//! the rest): the paper's Figure 2 example, model equivalence with switches, evictions,
//! merges and crash recovery, the write pattern, and `check` on a broken partition.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use rand::{Rng, SeedableRng};

use super::{Pbt, State};
use crate::entry::{Entry, Kind};
use crate::index::{Index, IndexContext};
use crate::memtable::Memtable;
use crate::merge::{resolve, MergeIter, Resolver};
use crate::options::{MergeOperator, PbtParams};
use crate::storage::{FaultFs, Purpose, PAGE_SIZE};
use crate::testutil::{fault_ctx, reopen_fault_ctx, seed};

/// Every version ever written: key -> seq -> (kind, value).
type Model = BTreeMap<Vec<u8>, BTreeMap<u64, (Kind, Vec<u8>)>>;

struct Append;

impl MergeOperator for Append {
    fn name(&self) -> &str {
        "append"
    }
    fn full_merge(&self, _key: &[u8], base: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
        let mut v = base.map(|b| b.to_vec()).unwrap_or_default();
        for o in operands {
            v.extend_from_slice(o);
        }
        v
    }
}

fn ctx(fs: &FaultFs) -> IndexContext {
    let mut c = fault_ctx(fs, 64 << 10);
    c.merge_op = Some(Arc::new(Append));
    c
}

fn reopen(fs: &FaultFs, params: &PbtParams) -> Pbt {
    let (mut c, state) = reopen_fault_ctx(fs, 64 << 10);
    c.merge_op = Some(Arc::new(Append));
    Pbt::open(c, params.clone(), &state.index_meta, state.durable_seq).expect("reopen")
}

fn memtable(ops: &[(Vec<u8>, u64, Kind, Vec<u8>)]) -> Arc<Memtable> {
    let m = Memtable::new(0);
    for (k, s, kind, v) in ops {
        m.insert(k, *s, *kind, v);
    }
    Arc::new(m)
}

/// Works until the index owes nothing (and, with `flush`, holds everything durably).
fn settle(idx: &Pbt, flush: bool) {
    for _ in 0..100_000 {
        if flush {
            idx.request_flush();
        }
        let done = idx.work(16 << 10).expect("work");
        if done == 0 && idx.debt() == 0 {
            return;
        }
    }
    panic!("the index does not settle");
}

fn scan(
    idx: &Pbt,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    seq: u64,
    rev: bool,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let sources = idx.iter(lo, hi, rev).expect("iter");
    let merged: crate::merge::EntryIter = Box::new(MergeIter::new(sources, rev));
    Resolver::new(
        merged,
        seq,
        Some(Arc::new(Append) as Arc<dyn MergeOperator>),
        rev,
    )
    .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).expect("scan"))
    .collect()
}

fn get(idx: &Pbt, key: &[u8], seq: u64) -> Option<Vec<u8>> {
    let mut out: Vec<Entry> = Vec::new();
    idx.get(key, seq, &mut out).expect("get");
    let op: Arc<dyn MergeOperator> = Arc::new(Append);
    resolve(key, &out, seq, Some(&op))
        .expect("resolve")
        .map(|v| v.to_vec())
}

fn state(idx: &Pbt) -> Arc<State> {
    idx.state()
}

fn counter(idx: &Pbt, name: &str) -> u64 {
    idx.stats().counters.get(name).copied().unwrap_or(0)
}

/// The paper's Figure 2 (spec §3.7, with corrections 3 and 11): an index on column x, entries
/// keyed (x, tuple). Partition 0 (closed, with a bloom filter) holds (2, A) and (4, B);
/// partition 1 (newest, in the buffer) holds the update of B from 4 to 2: an anti-record
/// (a Delete of (4, B)) and (2, B). The bloom filter's hash is fixed (`hash64`, part of the
/// format), so T6's bloom skip is deterministic.
#[test]
fn figure_2_example() {
    let fs = FaultFs::new();
    let params = PbtParams::default();
    let idx = Pbt::open(ctx(&fs), params, &[], 0).expect("open");
    let k = |x: u8, t: u8| vec![x, t];
    idx.absorb(memtable(&[
        (k(2, b'A'), 1, Kind::Put, b"row A".to_vec()),
        (k(4, b'B'), 2, Kind::Put, b"row B".to_vec()),
    ]))
    .expect("absorb");
    settle(&idx, true);
    idx.absorb(memtable(&[
        (k(4, b'B'), 3, Kind::Delete, Vec::new()),
        (k(2, b'B'), 4, Kind::Put, b"row B".to_vec()),
    ]))
    .expect("absorb");
    settle(&idx, false);
    let st = state(&idx);
    assert_eq!(st.persisted.len(), 1, "partition 0 is persisted");
    assert_eq!(
        st.active.entries, 2,
        "partition 1 is the buffered ACTIVE one"
    );
    // Both key ranges are [2, 4] (anti-records count: correction 11).
    assert_eq!(&st.persisted[0].min[..], &k(2, b'A')[..]);
    assert_eq!(&st.persisted[0].max[..], &k(4, b'B')[..]);
    assert_eq!(st.active.min.as_deref(), Some(&k(2, b'B')[..]));
    assert_eq!(st.active.max.as_deref(), Some(&k(4, b'B')[..]));
    let x = |v: u8| (Bound::Included(vec![v]), Bound::Excluded(vec![v + 1]));

    // T1: count x = 2 gives 2 (B from partition 1, A from partition 0).
    let (lo, hi) = x(2);
    assert_eq!(scan(&idx, lo, hi, 10, false).len(), 2);
    // T2: count x = 4 gives 0: (4, B) is cancelled by partition 1's anti-record.
    let (lo, hi) = x(4);
    assert_eq!(scan(&idx, lo, hi, 10, false).len(), 0);
    // T3: the range 2 <= x <= 4: A and B (at x = 2), in order both ways.
    let all = scan(
        &idx,
        Bound::Included(vec![2]),
        Bound::Included(vec![4, 0xff]),
        10,
        false,
    );
    assert_eq!(
        all,
        vec![
            (k(2, b'A'), b"row A".to_vec()),
            (k(2, b'B'), b"row B".to_vec())
        ]
    );
    let mut rev = scan(
        &idx,
        Bound::Included(vec![2]),
        Bound::Included(vec![4, 0xff]),
        10,
        true,
    );
    rev.reverse();
    assert_eq!(rev, all);

    let io = idx.ctx.store.counters().clone();
    let reads = || io.snapshot().read(Purpose::UserRead);
    let (r0, probes0, range0) = (
        reads(),
        counter(&idx, "partition_probes"),
        counter(&idx, "range_skips"),
    );
    // T4: x = 5 lies outside both ranges: no partition probed, no read.
    assert_eq!(get(&idx, &k(5, b'A'), 10), None);
    assert_eq!(counter(&idx, "partition_probes"), probes0);
    assert_eq!(counter(&idx, "range_skips"), range0 + 1);
    // T5: one tuple with x = 2: (2, B) found in the buffer, no read.
    assert_eq!(get(&idx, &k(2, b'B'), 10), Some(b"row B".to_vec()));
    // T6: x = 3 is in both ranges; partition 1 is searched in memory, partition 0 skipped by
    // its bloom filter.
    let bloom0 = counter(&idx, "bloom_skips");
    assert_eq!(get(&idx, &k(3, b'A'), 10), None);
    assert_eq!(
        counter(&idx, "bloom_skips"),
        bloom0 + 1,
        "bloom negative for (3, A)"
    );
    assert_eq!(counter(&idx, "partition_probes"), probes0);
    assert_eq!(reads(), r0, "T4 to T6 read nothing");
    // The old version stays visible below the update's sequence number.
    assert_eq!(get(&idx, &k(4, b'B'), 2), Some(b"row B".to_vec()));
    assert_eq!(idx.check().expect("check"), 4);
}

/// Spec §6 items 1, 10, 11, 14, 17: random puts, deletes and merges over few keys (so that
/// keys are deleted and put again across many switches), with switches, evictions, merges,
/// snapshots and crashes at random points, against a model of every version.
#[test]
fn model_with_switches_merges_and_crashes() {
    let seed = seed();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let scale: u64 = std::env::var("WOODS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let fs = FaultFs::new();
    let params = PbtParams {
        buffer_percent: 5,
        write_pages: 4,
        max_partitions: 3,
        ..PbtParams::default()
    };
    let mut idx = Pbt::open(ctx(&fs), params.clone(), &[], 0).expect("open");
    // Every version ever written: key -> seq -> (kind, value); and the memtables (the WAL).
    let mut model: Model = BTreeMap::new();
    let mut wal: Vec<Arc<Memtable>> = Vec::new();
    let mut seq = 0u64;
    let keys = 300u64;
    let key = |i: u64| format!("k{:05}", i).into_bytes();
    let want = |model: &Model, k: &[u8], at: u64| {
        let vs: Vec<Entry> = model
            .get(k)
            .map(|m| {
                m.iter()
                    .rev()
                    .map(|(s, (kind, v))| Entry::new(k, *s, *kind, v))
                    .collect()
            })
            .unwrap_or_default();
        let op: Arc<dyn MergeOperator> = Arc::new(Append);
        resolve(k, &vs, at, Some(&op))
            .expect("resolve")
            .map(|v| v.to_vec())
    };
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let snapshot_at = 50u64;
    idx.ctx.snapshots.acquire(snapshot_at);
    for round in 0..40 * scale {
        let mut ops = Vec::new();
        let n = rng.gen_range(1..400);
        for _ in 0..n {
            seq += 1;
            let i = rng.gen_range(0..keys);
            let (kind, v) = match rng.gen_range(0..10) {
                0..=5 => (Kind::Put, vec![b'v'; rng.gen_range(1..200)]),
                6 | 7 => (Kind::Delete, Vec::new()),
                8 => (Kind::Merge, format!("+{seq}").into_bytes()),
                _ => (Kind::Put, vec![b'L'; rng.gen_range(2000..9000)]),
            };
            model
                .entry(key(i))
                .or_default()
                .insert(seq, (kind, v.clone()));
            ops.push((key(i), seq, kind, v));
        }
        let mem = memtable(&ops);
        wal.push(mem.clone());
        idx.absorb(mem).expect("absorb");
        // Some work, all of it, or all of it made durable.
        match rng.gen_range(0..4) {
            0 => {
                for _ in 0..rng.gen_range(0..5) {
                    idx.work(rng.gen_range(1..32 << 10)).expect("work");
                }
                settle(&idx, false);
            }
            1 => settle(&idx, true),
            _ => settle(&idx, false),
        }
        if rng.gen_range(0..6) == 0 {
            // Crash: what is not durable is lost, and the WAL above durable_seq replays.
            let durable = idx.durable_seq();
            for (k, v) in idx.stats().counters {
                *totals.entry(k).or_insert(0) += v;
            }
            drop(idx);
            idx = reopen(&fs, &params);
            idx.ctx.snapshots.acquire(snapshot_at);
            for m in &wal {
                if m.max_seq() > durable {
                    idx.absorb(m.clone()).expect("replay");
                }
            }
            settle(&idx, false);
        }
        for at in [seq, snapshot_at.min(seq)] {
            for _ in 0..50 {
                let k = key(rng.gen_range(0..keys));
                assert_eq!(
                    get(&idx, &k, at),
                    want(&model, &k, at),
                    "seed {seed} round {round} key {:?} at {at}",
                    String::from_utf8_lossy(&k)
                );
            }
        }
        let lo = key(rng.gen_range(0..keys));
        let hi = key(rng.gen_range(0..keys));
        let rev = rng.gen_bool(0.5);
        let mut got = scan(
            &idx,
            Bound::Included(lo.clone()),
            Bound::Excluded(hi.clone()),
            seq,
            rev,
        );
        if rev {
            got.reverse();
        }
        let expect: Vec<(Vec<u8>, Vec<u8>)> = model
            .range(lo.clone()..)
            .take_while(|(k, _)| k[..] < hi[..])
            .filter_map(|(k, _)| want(&model, k, seq).map(|v| (k.clone(), v)))
            .collect();
        assert_eq!(got, expect, "seed {seed} round {round} scan");
        idx.check()
            .unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
    }
    for (k, v) in idx.stats().counters {
        *totals.entry(k).or_insert(0) += v;
    }
    eprintln!("pbt model: {totals:?}");
    for c in [
        "switches",
        "evictions",
        "merges",
        "bloom_skips",
        "range_skips",
    ] {
        assert!(
            totals.get(c).copied().unwrap_or(0) > 0,
            "seed {seed}: no {c}: {totals:?}"
        );
    }
}

/// Spec §6 item 9: no page of a buffered partition is written before its eviction, and an
/// eviction writes every page of the partition once, in runs of `write_pages`, into one
/// extent; only the inner nodes above it are written besides.
#[test]
fn eviction_writes_each_leaf_once_in_runs() {
    let fs = FaultFs::new();
    let params = PbtParams {
        write_pages: 16,
        max_partitions: 0,
        ..PbtParams::default()
    };
    let idx = Pbt::open(ctx(&fs), params, &[], 0).expect("open");
    let io = idx.ctx.store.counters().clone();
    let mut seq = 0;
    for m in 0..3u64 {
        let ops: Vec<_> = (0..300u64)
            .map(|i| {
                seq += 1;
                let k = format!("key{:08}", (i * 7919 + m) % 100_000).into_bytes();
                (k, seq, Kind::Put, vec![b'x'; 100])
            })
            .collect();
        idx.absorb(memtable(&ops)).expect("absorb");
        settle(&idx, false);
    }
    let data_written =
        |s: &crate::storage::IoSnapshot| s.written(Purpose::Flush) + s.written(Purpose::Merge);
    assert_eq!(
        data_written(&io.snapshot()),
        0,
        "buffered leaves were written"
    );
    assert_eq!(state(&idx).persisted.len(), 0);
    let leaves = state(&idx).active.leaves.len() as u64;
    settle(&idx, true);
    let st = state(&idx);
    let p = &st.persisted[0];
    assert_eq!(p.leaves, leaves);
    let pages = p.data_pages() + p.bloom_ext.pages;
    assert_eq!(counter(&idx, "evicted_pages"), pages);
    assert_eq!(counter(&idx, "eviction_writes"), pages.div_ceil(16));
    let s = io.snapshot();
    let inner = counter(&idx, "inner_pages_written");
    assert_eq!(
        s.written(Purpose::Flush),
        (pages + inner) * PAGE_SIZE as u64
    );
    assert!(
        inner <= 2,
        "{inner} inner pages for one partition of {leaves} leaves"
    );
    assert_eq!(idx.durable_seq(), seq);
    idx.check().expect("check");
}

/// `check` verifies the partition invariants: a partition whose recorded key range misses keys
/// it holds is corruption, found on the leaf.
#[test]
fn check_finds_a_key_outside_its_partition_range() {
    let fs = FaultFs::new();
    let params = PbtParams::default();
    let idx = Pbt::open(ctx(&fs), params.clone(), &[], 0).expect("open");
    let ops: Vec<_> = (0..50u64)
        .map(|i| {
            (
                format!("k{i:03}").into_bytes(),
                i + 1,
                Kind::Put,
                b"v".to_vec(),
            )
        })
        .collect();
    idx.absorb(memtable(&ops)).expect("absorb");
    settle(&idx, true);
    idx.check().expect("check of a sound index");
    let st = state(&idx);
    let mut parts = st.persisted.clone();
    let p = &parts[0];
    let narrowed = super::meta::Persisted {
        pnum: p.pnum,
        max_seq: p.max_seq,
        entries: p.entries,
        leaves: p.leaves,
        data: p.data.clone(),
        bloom_ext: p.bloom_ext,
        bloom_len: p.bloom_len,
        min: p.min.clone(),
        max: Arc::from(&b"k010"[..]),
        bloom: p.bloom.clone(),
        id: super::meta::next_id(),
    };
    parts[0] = Arc::new(narrowed);
    let mut next = st.with();
    next.persisted = parts;
    idx.publish(next);
    let e = idx
        .check()
        .expect_err("a key outside the partition's range");
    assert!(e.to_string().contains("key range"), "{e}");
}

/// Regression (`conformance pbt::space` grew the file): a partition's pages were one allocation
/// of its whole size, which a merge rarely found free while its inputs were still allocated,
/// so it went to the file's end. Written `write_pages` at a time, it fills smaller free gaps,
/// and a large value or a bloom filter stays contiguous.
#[test]
fn a_partition_fills_free_gaps_smaller_than_itself() {
    let fs = FaultFs::new();
    let c = ctx(&fs);
    let store = &c.store;
    let mut gaps = Vec::new();
    for _ in 0..4 {
        gaps.push(store.alloc().alloc(16));
        store.alloc().alloc(1);
    }
    for g in gaps {
        store.alloc().release(g);
    }
    let end = store.alloc().end();
    let mut w = super::write::ExtentWriter::new(16, Purpose::Merge);
    let mut pages = Vec::new();
    for i in 0..40u8 {
        pages.push(w.page(store, |b| b[0] = i).expect("page"));
    }
    // 8 pages are left in the third gap: a 10-page run goes past it, whole.
    let run = w
        .bytes(store, &vec![7u8; 10 * crate::storage::PAGE_BODY])
        .expect("bytes");
    w.finish(store).expect("finish");
    assert_eq!(run.pages, 10);
    assert!(
        w.exts
            .iter()
            .any(|e| run.start >= e.start && run.start + run.pages <= e.start + e.pages),
        "the run {run:?} is not inside one extent of {:?}",
        w.exts
    );
    let data: u64 = w.exts.iter().map(|e| e.pages).sum();
    assert_eq!(data, 50, "{:?}", w.exts);
    assert_eq!(w.pages, 50);
    // The first 40 pages went into the first gaps; only the run's allocation grew the file.
    assert!(pages.iter().all(|&p| p < end), "{pages:?} past {end}");
    assert!(
        store.alloc().end() <= end + 16,
        "the file grew to {}",
        store.alloc().end()
    );
    assert!(w.writes <= 5, "{} writes for 50 pages", w.writes);
    for (i, &p) in pages.iter().enumerate() {
        assert_eq!(store.read(p, Purpose::Merge).expect("read")[0], i as u8);
    }
}

/// A forced partition merge (more than twice `max_partitions` persisted: its bytes are debt)
/// runs in bounded steps: no `work` call writes more than a couple of `write_pages` runs of
/// it, but the swap, which writes only the inner nodes over the merged partition's leaves.
/// (Run whole in one call, as it once was, one writer's pacing share wrote 222 MB of it.)
#[test]
fn no_work_call_writes_more_than_a_bounded_part_of_a_forced_merge() {
    let seed = seed();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let fs = FaultFs::new();
    let off = PbtParams {
        write_pages: 8,
        max_partitions: 0,
        ..PbtParams::default()
    };
    let idx = Pbt::open(ctx(&fs), off, &[], 0).expect("open");
    let mut model = BTreeMap::new();
    let mut seq = 0;
    for _ in 0..6 {
        let ops: Vec<_> = (0..2000)
            .map(|_| {
                seq += 1;
                let k = format!("key{:08}", rng.gen_range(0..20_000u32)).into_bytes();
                let v = format!("{seq:0100}").into_bytes();
                model.insert(k.clone(), v.clone());
                (k, seq, Kind::Put, v)
            })
            .collect();
        idx.absorb(memtable(&ops)).expect("absorb");
        settle(&idx, true);
    }
    let parts = state(&idx).persisted.len();
    let inputs: u64 = state(&idx).persisted.iter().map(|p| p.bytes()).sum();
    drop(idx);
    let write_pages = 8u64;
    let params = PbtParams {
        write_pages: write_pages as u32,
        max_partitions: 2,
        ..PbtParams::default()
    };
    let idx = reopen(&fs, &params);
    assert!(parts > 4, "{parts} partitions: the merge is not forced");
    assert!(idx.debt() > 0, "a forced merge is not debt");
    let io = idx.ctx.store.counters().clone();
    let (mut calls, mut most, mut swaps) = (0u64, 0u64, 0u64);
    while idx.debt() > 0 {
        let before = io.snapshot().written(Purpose::Merge);
        let inner = counter(&idx, "inner_pages_written");
        let merges = counter(&idx, "merges");
        assert!(
            idx.work(4 << 10).expect("work") > 0,
            "debt but no work done"
        );
        let wrote = io.snapshot().written(Purpose::Merge) - before;
        calls += 1;
        if counter(&idx, "merges") > merges {
            // The swap: the tree's inner nodes only, a few over hundreds of leaves.
            let inner = counter(&idx, "inner_pages_written") - inner;
            assert_eq!(
                wrote,
                inner * PAGE_SIZE as u64,
                "the swap wrote more than inner nodes"
            );
            assert!(inner <= 16, "the swap wrote {inner} inner pages");
            swaps += 1;
        } else {
            most = most.max(wrote);
        }
        assert!(calls < 100_000, "the merge does not end (seed {seed})");
    }
    let bound = (2 * write_pages + 1) * PAGE_SIZE as u64;
    assert!(
        most <= bound,
        "a call of 4 KiB wrote {most} bytes of a merge of {inputs} bytes, over {bound} \
         (seed {seed})"
    );
    assert!(swaps >= 1, "no merge swapped in");
    assert!(
        calls > inputs / bound,
        "{calls} calls for {inputs} bytes of inputs"
    );
    let st = state(&idx);
    assert!(
        st.persisted.len() <= 4,
        "{} partitions left",
        st.persisted.len()
    );
    idx.check().expect("check");
    for (k, v) in model.iter().step_by(7) {
        assert_eq!(get(&idx, k, seq).as_ref(), Some(v), "seed {seed}");
    }
}
