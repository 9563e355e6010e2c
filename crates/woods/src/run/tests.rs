//! Round trips against a sorted model, corruption, and allocator accounting.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::format::Node;
use super::iter::Cursor;
use super::*;
use crate::cache::Cache;
use crate::entry::codec::{self, Reader};
use crate::storage::{Allocator, FaultFs, FaultPlan, Fs, IoCounters, OpenMode, PAGE_BODY};
use crate::testutil::seed;

const DATA: &str = "/db/data";

fn store() -> (FaultFs, Arc<PageFile>) {
    store_with(Cache::new(1 << 20))
}

fn store_with(cache: Cache) -> (FaultFs, Arc<PageFile>) {
    let fs = FaultFs::new();
    fs.create_dir_all(Path::new("/db")).unwrap();
    let file = fs
        .open(
            Path::new(DATA),
            OpenMode {
                create: true,
                direct: false,
            },
        )
        .unwrap();
    let pf = PageFile::new(
        file,
        cache,
        Allocator::new(1),
        Arc::new(IoCounters::default()),
    );
    (fs, Arc::new(pf))
}

fn opts() -> RunOptions {
    RunOptions {
        bloom_bits_per_key: 10,
        purpose: Purpose::Flush,
        extent_pages: 64,
    }
}

/// A sorted model: random keys with several versions, merges, deletes, big values.
fn model(rng: &mut SmallRng, n: usize) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::with_capacity(n);
    let mut seen = BTreeSet::new();
    let mut big = n >= 1000;
    while out.len() < n {
        let klen = if rng.gen_ratio(1, 200) {
            MAX_KEY
        } else {
            rng.gen_range(1..=64)
        };
        // Small alphabet so that keys share prefixes and collide.
        let key: Vec<u8> = (0..klen).map(|_| rng.gen_range(b'a'..=b'h')).collect();
        let versions = rng.gen_range(1..=4).min(n - out.len());
        for _ in 0..versions {
            let seq = rng.gen_range(1..1_000_000_000u64);
            if !seen.insert((key.clone(), seq)) {
                continue;
            }
            let kind = match rng.gen_range(0..10) {
                0..=5 => Kind::Put,
                6..=7 => Kind::Merge,
                _ => Kind::Delete,
            };
            let vlen = if kind == Kind::Delete {
                0
            } else if big {
                big = false;
                MAX_VALUE_LEN
            } else if rng.gen_ratio(1, 100) {
                5 * 1024
            } else {
                rng.gen_range(0..=300)
            };
            let value: Vec<u8> = (0..vlen).map(|_| rng.gen()).collect();
            out.push(Entry::new(&key, seq, kind, &value));
        }
    }
    out.sort_by(|a, b| cmp_entries(&a.key, a.seq, &b.key, b.seq));
    out
}

const MAX_KEY: usize = crate::MAX_KEY_LEN;

fn build(pf: &Arc<PageFile>, entries: &[Entry], o: RunOptions) -> Arc<Run> {
    let mut b = RunBuilder::new(pf.clone(), o);
    for e in entries {
        b.add(e).unwrap();
    }
    assert_eq!(b.entries(), entries.len() as u64);
    let meta = b.finish().unwrap();
    assert_eq!(meta.entries, entries.len() as u64);
    let mut buf = Vec::new();
    meta.encode(&mut buf);
    let mut r = Reader::new(&buf, "test");
    assert_eq!(RunMeta::decode(&mut r).unwrap(), meta);
    assert!(r.is_empty());
    Arc::new(Run::open(pf.clone(), meta).unwrap())
}

fn model_get(m: &[Entry], key: &[u8], max_seq: u64) -> Vec<Entry> {
    let mut out = Vec::new();
    for e in m.iter().filter(|e| &*e.key == key && e.seq <= max_seq) {
        out.push(e.clone());
        if e.kind != Kind::Merge {
            break;
        }
    }
    out
}

fn in_range(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let above = match lo {
        Bound::Unbounded => true,
        Bound::Included(l) => k >= l.as_slice(),
        Bound::Excluded(l) => k > l.as_slice(),
    };
    let below = match hi {
        Bound::Unbounded => true,
        Bound::Included(h) => k <= h.as_slice(),
        Bound::Excluded(h) => k < h.as_slice(),
    };
    above && below
}

fn collect(it: RunIter) -> Vec<Entry> {
    it.map(|e| e.unwrap()).collect()
}

fn random_bound(rng: &mut SmallRng, m: &[Entry]) -> Bound<Vec<u8>> {
    let key = if !m.is_empty() && rng.gen_bool(0.5) {
        m[rng.gen_range(0..m.len())].key.to_vec()
    } else {
        (0..rng.gen_range(1..8))
            .map(|_| rng.gen_range(b'a'..=b'h'))
            .collect()
    };
    match rng.gen_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key),
        _ => Bound::Excluded(key),
    }
}

fn verify(run: &Arc<Run>, m: &[Entry], rng: &mut SmallRng, ranges: usize) {
    assert_eq!(run.check().unwrap(), m.len() as u64);
    // Full scans, both directions.
    let all = collect(run.iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::Merge));
    assert!(all == m, "forward scan differs from the model");
    let mut rev = collect(run.iter(Bound::Unbounded, Bound::Unbounded, true, Purpose::UserRead));
    rev.reverse();
    assert!(rev == m, "reverse scan differs from the model");
    // Ranges with every bound kind.
    for _ in 0..ranges {
        let lo = random_bound(rng, m);
        let hi = random_bound(rng, m);
        let want: Vec<Entry> = m
            .iter()
            .filter(|e| in_range(&e.key, &lo, &hi))
            .cloned()
            .collect();
        for purpose in [Purpose::UserRead, Purpose::Merge] {
            let got = collect(run.iter(lo.clone(), hi.clone(), false, purpose));
            assert!(
                got == want,
                "forward {purpose:?} range {lo:?}..{hi:?}: {} entries, model {}",
                got.len(),
                want.len()
            );
        }
        let mut got = collect(run.iter(lo.clone(), hi.clone(), true, Purpose::UserRead));
        got.reverse();
        assert!(
            got == want,
            "reverse range {lo:?}..{hi:?}: {} entries, model {}",
            got.len(),
            want.len()
        );
    }
    // Point reads of present and absent keys at various snapshots.
    for _ in 0..ranges * 20 {
        let key: Vec<u8> = if !m.is_empty() && rng.gen_bool(0.7) {
            m[rng.gen_range(0..m.len())].key.to_vec()
        } else {
            (0..rng.gen_range(1..10))
                .map(|_| rng.gen_range(b'a'..=b'i'))
                .collect()
        };
        for max_seq in [u64::MAX, rng.gen_range(0..1_000_000_000), 0] {
            let mut got = Vec::new();
            run.get(&key, max_seq, &mut got).unwrap();
            assert!(
                got == model_get(m, &key, max_seq),
                "get {key:?} at {max_seq}"
            );
        }
        let rank = m.partition_point(|e| *e.key < *key.as_slice()) as u64;
        assert_eq!(run.rank(&key).unwrap(), rank, "rank of {key:?}");
    }
}

#[test]
fn empty_run_round_trip() {
    let (_fs, pf) = store();
    let run = build(&pf, &[], opts());
    assert_eq!(run.meta().height, 0);
    assert_eq!(run.meta().pages(), 1);
    let mut rng = SmallRng::seed_from_u64(seed());
    verify(&run, &[], &mut rng, 5);
    for e in run.extents().to_vec() {
        pf.alloc().release(e);
    }
    assert_eq!(pf.alloc().free_pages(), pf.alloc().end() - 1);
}

#[test]
fn single_entry_round_trip() {
    let (_fs, pf) = store();
    let m = vec![Entry::new(b"k", 7, Kind::Put, b"v")];
    let run = build(&pf, &m, opts());
    assert_eq!(run.meta().height, 1);
    let mut rng = SmallRng::seed_from_u64(seed());
    verify(&run, &m, &mut rng, 5);
    let mut out = Vec::new();
    run.get(b"k", 6, &mut out).unwrap();
    assert!(out.is_empty());
    run.get(b"k", 7, &mut out).unwrap();
    assert_eq!(out, m);
}

#[test]
fn large_round_trip_and_allocator() {
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let (_fs, pf) = store();
    let m = model(&mut rng, 50_000);
    let run = build(&pf, &m, opts());
    let meta = run.meta().clone();
    println!(
        "height {} data pages {} pages {} extents {}",
        meta.height,
        meta.data_pages,
        meta.pages(),
        meta.extents.len()
    );
    assert!(meta.height >= 3);
    assert_eq!(
        meta.user_bytes,
        m.iter().map(|e| e.user_bytes() as u64).sum::<u64>()
    );
    assert!(m.iter().all(|e| run.may_contain(&e.key)));
    verify(&run, &m, &mut rng, 40);
    // Reopen without the builder's in-memory state and read again.
    let again = Arc::new(Run::open(pf.clone(), meta.clone()).unwrap());
    verify(&again, &m, &mut rng, 5);
    drop((run, again));
    for e in &meta.extents {
        pf.alloc().release(*e);
    }
    assert_eq!(pf.alloc().free_pages(), pf.alloc().end() - 1);
}

/// Point lookups through the row cache find what the model holds at every sequence number:
/// rows filled by lookups at the newest sequence number answer later ones (no page read), and a
/// lookup older than a row's newest version reads the pages instead.
#[test]
fn row_cache_answers_as_the_pages_do() {
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let (_fs, pf) = store_with(Cache::with_rows(4 << 20, 1 << 20));
    let m = model(&mut rng, 5_000);
    let run = build(&pf, &m, opts());
    let keys: Vec<Arc<[u8]>> = m.iter().map(|e| e.key.clone()).collect();
    let absent: Vec<Vec<u8>> = (0..200)
        .map(|i| format!("zz-absent-{i}").into_bytes())
        .collect();
    let mut out = Vec::new();
    for round in 0..3 {
        for _ in 0..4_000 {
            let key: &[u8] = if rng.gen_ratio(1, 10) {
                &absent[rng.gen_range(0..absent.len())]
            } else {
                &keys[rng.gen_range(0..keys.len())]
            };
            let max_seq = match rng.gen_range(0..3) {
                0 => rng.gen_range(1..1_000_000_000u64),
                _ => u64::MAX,
            };
            out.clear();
            out.push(Entry::new(b"before", 1, Kind::Put, b"kept"));
            run.get(key, max_seq, &mut out).unwrap();
            assert_eq!(&*out[0].key, b"before", "entries already in `out` are kept");
            let want = model_get(&m, key, max_seq);
            assert!(
                out[1..] == want[..],
                "round {round}: {key:?} at {max_seq}: {:?}, model {:?}",
                &out[1..],
                want
            );
        }
    }
    let st = pf.cache().stats();
    println!("row cache: {st:?}");
    assert!(st.row_hits > 5_000, "{st:?}");
    assert!(st.row_bytes > 0 && st.row_bytes <= st.row_capacity_bytes);
    // Lookups answered from rows read no pages, not even from the page cache (a key whose
    // values are small: a row of large values is not kept).
    let hot = m
        .iter()
        .map(|e| e.key.clone())
        .find(|k| {
            m.iter()
                .filter(|e| e.key == *k)
                .all(|e| e.value.len() < 200)
        })
        .unwrap();
    run.get(&hot, u64::MAX, &mut out).unwrap();
    let before = (pf.counters().snapshot().total_read(), pf.cache().stats());
    for _ in 0..100 {
        out.clear();
        run.get(&hot, u64::MAX, &mut out).unwrap();
        assert!(out == model_get(&m, &hot, u64::MAX));
    }
    let after = (pf.counters().snapshot().total_read(), pf.cache().stats());
    assert_eq!(after.0, before.0, "bytes read from the device");
    assert_eq!(
        (after.1.hits, after.1.misses),
        (before.1.hits, before.1.misses),
        "page lookups"
    );
    assert_eq!(after.1.row_hits, before.1.row_hits + 100);
}

#[test]
fn scans_that_are_not_user_reads_read_ahead_and_bypass_the_cache() {
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let (_fs, pf) = store();
    let m = model(&mut rng, 30_000);
    let run = build(&pf, &m, opts());
    let data_pages = run.meta().data_pages;
    assert!(data_pages > 4 * READAHEAD_PAGES, "{data_pages} data pages");
    let reads = |p: Purpose| pf.counters().snapshot().read_ops[p as usize];
    let cached = pf.cache().stats();

    let before = reads(Purpose::Merge);
    let all = collect(run.iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::Merge));
    assert!(all == m, "merge scan differs from the model");
    let ops = reads(Purpose::Merge) - before;
    // One request per extent's worth of data pages (plus the root and index pages, and the
    // blob pages of the scan's first data page, which lie before it), not one per page. The
    // chunks the run was written in bound the windows cut short (adjacent chunks are listed
    // as one extent). A window read ahead that starts at blob pages serves the data page
    // after them: were it dropped, each window would cost a read of its own and one for the
    // blobs (seed 1795694682384061123 made 91 requests so, against a bound of 88).
    let chunks = run.meta().pages().div_ceil(opts().extent_pages);
    let bound = 2 * data_pages.div_ceil(READAHEAD_PAGES) + chunks + 16;
    assert!(
        ops <= bound,
        "{ops} read requests for {data_pages} data pages (bound {bound})"
    );
    assert_eq!(
        pf.cache().stats().misses,
        cached.misses,
        "merge scans bypass the cache"
    );

    let before = reads(Purpose::UserRead);
    let all = collect(run.iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::UserRead));
    assert!(all == m, "user scan differs from the model");
    assert!(reads(Purpose::UserRead) - before >= data_pages);
}

#[test]
fn a_window_read_ahead_serves_the_blobs_before_its_first_data_page() {
    // Every data page has about one blob value, whose page is written just before the data
    // page: half the windows read ahead start at a blob page. Each must still serve the data
    // page after it and that page's blob, so that a merge scan makes one request per window.
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let (_fs, pf) = store();
    let m: Vec<Entry> = (0..20_000u32)
        .map(|i| {
            let len = if rng.gen_ratio(1, 20) { 2000 } else { 200 };
            let value: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            Entry::new(format!("key{i:08}").as_bytes(), 1, Kind::Put, &value)
        })
        .collect();
    let run = build(&pf, &m, opts());
    let pages = run.meta().pages();
    let before = pf.counters().snapshot().read_ops[Purpose::Merge as usize];
    let all = collect(run.iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::Merge));
    assert!(all == m, "merge scan differs from the model (seed {s})");
    let ops = pf.counters().snapshot().read_ops[Purpose::Merge as usize] - before;
    // A request per index page (the scan reads those one at a time), one for the first data
    // page's blob, and one per window, the last of which is read ahead past the data pages.
    // A window that ends with blob pages is followed by one that starts at them: here, where
    // a data page has about one blob, a window moves on by about 63 pages (the bound allows 48).
    let index_pages = index_pages(&run);
    let windows = pages.div_ceil(48) + 1;
    assert!(
        ops <= index_pages + 1 + windows,
        "{ops} read requests for {pages} pages: {index_pages} index pages, {windows} windows \
         (seed {s})"
    );
}

/// The run's index pages (the levels above its data pages), by walking its tree.
fn index_pages(run: &Run) -> u64 {
    let mut level = vec![run.root_node(Purpose::UserRead).unwrap().unwrap()];
    let mut n = 0;
    while level[0].level > 0 {
        n += level.len() as u64;
        let mut below = Vec::new();
        for node in &level {
            for i in 0..node.count {
                below.push(run.child_node(node, i, Purpose::UserRead).unwrap());
            }
        }
        level = below;
    }
    n
}

#[test]
fn smaller_read_ahead_windows_read_the_same() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let m = model(&mut rng, 6000);
    let run = build(&pf, &m, opts());
    let reads = |pf: &Arc<PageFile>| pf.counters().snapshot().read_ops[Purpose::Merge as usize];
    let before = reads(&pf);
    let all: Vec<Entry> = run
        .iter_with_readahead(Bound::Unbounded, Bound::Unbounded, false, Purpose::Merge, 4)
        .map(|e| e.unwrap())
        .collect();
    let small = reads(&pf) - before;
    assert!(all == m, "scan with small windows differs");
    let before = reads(&pf);
    let n = run
        .iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::Merge)
        .count();
    assert_eq!(n, m.len());
    let big = reads(&pf) - before;
    assert!(
        small > 2 * big,
        "{small} requests with 4-page windows, {big} with 64"
    );
}

#[test]
fn adjacent_chunks_are_listed_as_one_extent() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let m = model(&mut rng, 5000);
    // A fresh store hands out chunks one after another: the run lists far fewer extents than
    // it wrote chunks (large values get extents of their own, which interrupt the sequence).
    let run = build(
        &pf,
        &m,
        RunOptions {
            extent_pages: 4,
            ..opts()
        },
    );
    let chunks = run.meta().pages() / 4;
    assert!(chunks > 40, "{chunks} chunks");
    assert!(
        (run.meta().extents.len() as u64) * 8 < chunks,
        "{:?}",
        run.meta().extents
    );
    // With a hole in the way, the extents split around it and still read the same. The hole
    // holds two chunks, so that the run's first chunk lands there whatever its values (a hole
    // smaller than a chunk was filled by a large value's pages for most seeds, not all).
    let hole = pf.alloc().alloc(8);
    let other = build(&pf, &m[..10], opts());
    pf.alloc().release(hole);
    let run = build(
        &pf,
        &m,
        RunOptions {
            extent_pages: 4,
            ..opts()
        },
    );
    assert!(run.meta().extents.len() >= 2, "{:?}", run.meta().extents);
    verify(&run, &m, &mut rng, 3);
    drop(other);
}

#[test]
fn from_builder_matches_open() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let m = model(&mut rng, 3000);
    let mut b = RunBuilder::new(
        pf.clone(),
        RunOptions {
            extent_pages: 4,
            ..opts()
        },
    );
    for e in &m {
        b.add(e).unwrap();
    }
    let run = Arc::new(Run::from_builder(b).unwrap());
    verify(&run, &m, &mut rng, 10);
    let reopened = Arc::new(Run::open(pf.clone(), run.meta().clone()).unwrap());
    verify(&reopened, &m, &mut rng, 3);
}

#[test]
fn quotient_filter_runs_read_like_bloom_runs() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let m = model(&mut rng, 4000);
    let spec = crate::filter::FilterSpec::Quotient { remainder_bits: 8 };
    let mut b = RunBuilder::with_filter(pf.clone(), opts(), spec);
    for e in &m {
        b.add(e).unwrap();
    }
    let run = Arc::new(Run::from_builder(b).unwrap());
    assert!(matches!(
        run.filter(),
        Some(crate::filter::Filter::Quotient(_))
    ));
    assert!(run.meta().filter_pages > 0);
    verify(&run, &m, &mut rng, 10);
    // Reopened from its metadata, the filter kind comes from the filter bytes.
    let reopened = Arc::new(Run::open(pf.clone(), run.meta().clone()).unwrap());
    assert!(matches!(
        reopened.filter(),
        Some(crate::filter::Filter::Quotient(_))
    ));
    verify(&reopened, &m, &mut rng, 3);
    assert_eq!(reopened.check().unwrap(), m.len() as u64);
    for e in &m {
        let h = crate::filter::hash64(&e.key);
        assert!(reopened.may_contain_hashed(&e.key, h));
        let (mut a, mut b2) = (Vec::new(), Vec::new());
        reopened.get(&e.key, e.seq, &mut a).unwrap();
        reopened.get_hashed(&e.key, h, e.seq, &mut b2).unwrap();
        assert_eq!(a, b2);
        assert!(!a.is_empty());
    }
}

/// Every page of `run`, in its extents' order, read from the device.
fn pages_of(pf: &PageFile, run: &Run) -> Vec<Vec<u8>> {
    run.meta()
        .extents
        .iter()
        .flat_map(|e| e.start..e.end())
        .map(|p| pf.read_uncached(p, Purpose::Merge).unwrap().to_vec())
        .collect()
}

#[test]
fn finish_in_steps_writes_the_same_run() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let m = model(&mut rng, 20_000);
    for spec in [
        crate::filter::FilterSpec::Bloom { bits_per_key: 10 },
        crate::filter::FilterSpec::Quotient { remainder_bits: 8 },
    ] {
        let build = |steps: bool| {
            let (_fs, pf) = store();
            let mut b = RunBuilder::with_filter(pf.clone(), opts(), spec);
            for e in &m {
                b.add(e).unwrap();
            }
            let mut calls = 0;
            if steps {
                while !b.finish_step(PAGE_SIZE as u64).unwrap() {
                    calls += 1;
                }
            }
            let run = Run::from_builder(b).unwrap();
            let pages = pages_of(&pf, &run);
            (run.meta().clone(), pages, calls, run)
        };
        let (meta_a, pages_a, _, _) = build(false);
        let (meta_b, pages_b, calls, run) = build(true);
        assert_eq!(meta_a, meta_b, "{spec:?}");
        assert!(pages_a == pages_b, "{spec:?}: pages differ");
        // A partitioned bloom filter's bits are set as its partitions fill: its finish
        // writes pages only (a quotient filter's builds the filter in steps too). A step
        // places at most budget / PAGE_SIZE + 1 = 2 pages, and the finish places at least
        // the filter's pages, an index page and the header.
        assert!(
            meta_b.filter_pages >= 3,
            "{spec:?}: a filter of {} pages",
            meta_b.filter_pages
        );
        let least = (meta_b.filter_pages + 2).div_ceil(2);
        assert!(
            calls + 1 >= least,
            "{spec:?}: {} filter pages placed in {} steps",
            meta_b.filter_pages,
            calls + 1
        );
        let run = Arc::new(run);
        verify(&run, &m, &mut rng, 3);
    }
}

/// A finish in steps writes at most about its budget in pages per step, beyond the chunk a
/// step may complete: a filter of many chunks goes out over many steps (before, the step that
/// completed the filter wrote all of it, and the header, at once), into one extent, and the
/// run is the one `finish` writes.
#[test]
fn finish_steps_write_about_their_budget_of_pages() {
    let mut rng = SmallRng::seed_from_u64(seed());
    // Distinct keys (the model's collide), 8 filter bytes each: about 80 filter pages.
    let mut m: Vec<Entry> = (0..40_000u32)
        .map(|i| {
            let value: Vec<u8> = (0..rng.gen_range(0..=40)).map(|_| rng.gen()).collect();
            Entry::new(
                format!("key{i:08}").as_bytes(),
                u64::from(i) + 1,
                Kind::Put,
                &value,
            )
        })
        .collect();
    m.sort_by(|a, b| cmp_entries(&a.key, a.seq, &b.key, b.seq));
    let o = RunOptions {
        bloom_bits_per_key: 64,
        purpose: Purpose::Merge,
        extent_pages: 8,
    };
    let budget = 2 * PAGE_SIZE as u64;
    let most = budget / PAGE_SIZE as u64 + 1 + o.extent_pages;
    let build = |steps: bool| {
        let (_fs, pf) = store();
        let mut b = RunBuilder::new(pf.clone(), o);
        for e in &m {
            b.add(e).unwrap();
        }
        let mut worst = 0;
        if steps {
            loop {
                let before = b.pages_written();
                let done = b.finish_step(budget).unwrap();
                worst = worst.max(b.pages_written() - before);
                if done {
                    break;
                }
            }
            assert!(b.is_complete());
        }
        let run = Run::from_builder(b).unwrap();
        let pages = pages_of(&pf, &run);
        (run.meta().clone(), pages, worst, run)
    };
    let (meta_a, pages_a, _, _) = build(false);
    let (meta_b, pages_b, worst, run) = build(true);
    assert!(
        meta_b.filter_pages > 3 * most,
        "the filter ({} pages) should be many steps' worth",
        meta_b.filter_pages
    );
    assert!(
        worst <= most,
        "a step of {budget} bytes wrote {worst} pages (at most {most}); filter of {} pages",
        meta_b.filter_pages
    );
    assert_eq!(meta_a, meta_b);
    assert!(pages_a == pages_b, "pages differ");
    verify(&Arc::new(run), &m, &mut rng, 3);
}

#[test]
fn no_filter_and_tiny_chunks() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let m = model(&mut rng, 5000);
    let run = build(
        &pf,
        &m,
        RunOptions {
            bloom_bits_per_key: 0,
            purpose: Purpose::Merge,
            extent_pages: 1,
        },
    );
    assert_eq!(run.meta().filter_pages, 0);
    assert!(run.may_contain(b"anything"));
    verify(&run, &m, &mut rng, 10);
    let written = pf.counters().snapshot().written(Purpose::Merge);
    assert_eq!(written, run.meta().pages() * PAGE_SIZE as u64);
}

#[test]
fn abandon_and_drop_release_everything() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let m = model(&mut rng, 5000);
    let keep = build(&pf, &m[..100], opts());
    let base_free = pf.alloc().free_pages();
    let mut b = RunBuilder::new(pf.clone(), opts());
    for e in &m {
        b.add(e).unwrap();
    }
    assert!(b.bytes_so_far() > 64 * PAGE_SIZE as u64);
    b.abandon();
    let mut b = RunBuilder::new(pf.clone(), opts());
    for e in &m[..2000] {
        b.add(e).unwrap();
    }
    drop(b);
    assert_eq!(
        pf.alloc().free_pages(),
        pf.alloc().end() - 1 - keep.meta().pages()
    );
    assert!(pf.alloc().free_pages() >= base_free);
    for e in keep.extents() {
        pf.alloc().release(*e);
    }
    assert_eq!(pf.alloc().free_pages(), pf.alloc().end() - 1);
}

#[test]
fn out_of_order_is_rejected() {
    let (_fs, pf) = store();
    let mut b = RunBuilder::new(pf.clone(), opts());
    b.add(&Entry::new(b"b", 5, Kind::Put, b"")).unwrap();
    assert!(matches!(
        b.add(&Entry::new(b"", 1, Kind::Put, b"")),
        Err(Error::InvalidKey { .. })
    ));
    let big = vec![0u8; MAX_VALUE_LEN + 1];
    assert!(matches!(
        b.add(&Entry::new(b"c", 1, Kind::Put, &big)),
        Err(Error::ValueTooLarge { .. })
    ));
    if !cfg!(debug_assertions) {
        assert!(matches!(
            b.add(&Entry::new(b"a", 1, Kind::Put, b"")),
            Err(Error::InvalidOption(_))
        ));
        assert!(matches!(
            b.add(&Entry::new(b"b", 5, Kind::Put, b"")),
            Err(Error::InvalidOption(_))
        ));
        assert!(matches!(
            b.add(&Entry::new(b"b", 6, Kind::Put, b"")),
            Err(Error::InvalidOption(_))
        ));
    }
    b.add(&Entry::new(b"b", 4, Kind::Put, b"")).unwrap();
    assert_eq!(b.finish().unwrap().entries, 2);
}

/// The data page holding the newest version of `key`.
fn leaf_of(run: &Run, key: &[u8]) -> u64 {
    let mut c = Cursor::default();
    c.seek(run, key, u64::MAX, Purpose::Merge).unwrap();
    c.leaf().map(|(n, _): (&Node, usize)| n.page).unwrap()
}

fn corruption_page(e: Error) -> Option<u64> {
    match e {
        Error::Corruption { page, .. } => page,
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn flipped_byte_is_corruption_naming_the_page() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (fs, pf) = store();
    let m = model(&mut rng, 4000);
    let run = build(&pf, &m, opts());
    let key = m[m.len() / 2].key.to_vec();
    let page = leaf_of(&Run::open(pf.clone(), run.meta().clone()).unwrap(), &key);
    // leaf_of read it uncached, so no good copy is in the cache.
    assert!(fs.flip_byte(
        Path::new(DATA),
        page * PAGE_SIZE as u64 + rng.gen_range(0..PAGE_BODY as u64)
    ));
    let mut out = Vec::new();
    assert_eq!(
        corruption_page(run.get(&key, u64::MAX, &mut out).unwrap_err()),
        Some(page)
    );
    let errs: Vec<Error> = run
        .iter(Bound::Unbounded, Bound::Unbounded, false, Purpose::UserRead)
        .filter_map(|r| r.err())
        .collect();
    assert_eq!(errs.len(), 1);
    assert_eq!(
        corruption_page(errs.into_iter().next().unwrap()),
        Some(page)
    );
    let errs: Vec<Error> = run
        .iter(Bound::Unbounded, Bound::Unbounded, true, Purpose::Merge)
        .filter_map(|r| r.err())
        .collect();
    assert_eq!(
        corruption_page(errs.into_iter().next().unwrap()),
        Some(page)
    );
    assert_eq!(corruption_page(run.check().unwrap_err()), Some(page));
}

/// Garbage with a valid checksum (as a bug could write) must give errors, never a panic.
#[test]
fn garbage_pages_never_panic() {
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let (_fs, pf) = store();
    let m = model(&mut rng, 3000);
    let run = build(&pf, &m, opts());
    let pages: Vec<u64> = run
        .extents()
        .iter()
        .flat_map(|e| e.start..e.end())
        .collect();
    for round in 0..200 {
        let page = pages[rng.gen_range(0..pages.len())];
        let old = pf.read_uncached(page, Purpose::Merge).unwrap();
        let mut buf = crate::storage::AlignedBuf::from_slice(&old);
        // Keep the header sometimes so that decoding goes deeper.
        let from = if round % 2 == 0 {
            format::HEADER_LEN
        } else {
            0
        };
        for _ in 0..rng.gen_range(1..20) {
            let i = rng.gen_range(from..PAGE_BODY);
            buf[i] = rng.gen();
        }
        pf.write(page, &mut buf, Purpose::Merge).unwrap();
        let _ = run.check();
        let _ = Run::open(pf.clone(), run.meta().clone()).map(|r| r.check());
        let mut out = Vec::new();
        let key = &m[rng.gen_range(0..m.len())].key;
        let _ = run.get(key, u64::MAX, &mut out);
        let _ = run.rank(key);
        for r in run
            .iter(
                Bound::Included(key.to_vec()),
                Bound::Unbounded,
                rng.gen(),
                Purpose::UserRead,
            )
            .take(500)
        {
            if r.is_err() {
                break;
            }
        }
        pf.write(page, &mut old_copy(&old), Purpose::Merge).unwrap();
    }
    assert_eq!(run.check().unwrap(), m.len() as u64);
}

fn old_copy(b: &[u8]) -> crate::storage::AlignedBuf {
    crate::storage::AlignedBuf::from_slice(b)
}

#[test]
fn rank_matches_subtree_counts() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let m = model(&mut rng, 20_000);
    let run = build(&pf, &m, opts());
    assert_eq!(run.rank(b"").unwrap(), 0);
    assert_eq!(run.rank(&[0xff; 2000]).unwrap(), m.len() as u64);
    let mut keys: Vec<&[u8]> = m.iter().map(|e| &*e.key).collect();
    keys.dedup();
    for k in keys.iter().step_by(97) {
        assert_eq!(
            run.rank(k).unwrap(),
            m.partition_point(|e| &*e.key < *k) as u64
        );
    }
}

/// `rank_bytes` and `key_at_weight` against the entries themselves: the weighted prefix before
/// a key, and the entry at which a prefix first reaches a weight (what a flush's cut needs).
#[test]
fn weighted_rank_and_key_at_weight_match_the_entries() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let m = model(&mut rng, 20_000);
    let run = build(&pf, &m, opts());
    let weight = |n: u64, b: u64| b + 64 * n;
    let mut prefix = Vec::with_capacity(m.len() + 1);
    prefix.push(0u64);
    for e in &m {
        let last = *prefix.last().unwrap();
        prefix.push(last + weight(1, e.user_bytes() as u64));
    }
    let total = *prefix.last().unwrap();
    let p = Purpose::Merge;
    assert_eq!(run.rank_bytes(b"", p).unwrap(), (0, 0));
    let all_bytes: u64 = m.iter().map(|e| e.user_bytes() as u64).sum();
    assert_eq!(
        run.rank_bytes(&[0xff; 2000], p).unwrap(),
        (m.len() as u64, all_bytes)
    );
    for _ in 0..300 {
        let i = rng.gen_range(0..m.len());
        let k = &*m[i].key;
        let before = m.partition_point(|e| &*e.key < k);
        let bytes: u64 = m[..before].iter().map(|e| e.user_bytes() as u64).sum();
        assert_eq!(
            run.rank_bytes(k, p).unwrap(),
            (before as u64, bytes),
            "key {k:?}"
        );
        let target = rng.gen_range(0..=total + 10);
        let want = prefix[1..]
            .iter()
            .position(|&w| w >= target)
            .map(|j| m[j].key.to_vec());
        assert_eq!(
            run.key_at_weight(target, weight, p).unwrap(),
            want,
            "target {target} of {total}"
        );
    }
    assert_eq!(
        run.key_at_weight(total, weight, p).unwrap(),
        Some(m.last().unwrap().key.to_vec())
    );
    assert_eq!(run.key_at_weight(total + 1, weight, p).unwrap(), None);
    // A run of one page (no index level).
    let small = build(&pf, &m[..3], opts());
    let w3: u64 = m[..3]
        .iter()
        .map(|e| weight(1, e.user_bytes() as u64))
        .sum();
    assert_eq!(small.meta().height, 1);
    assert_eq!(
        small.key_at_weight(w3, weight, p).unwrap(),
        Some(m[2].key.to_vec())
    );
    assert_eq!(small.key_at_weight(w3 + 1, weight, p).unwrap(), None);
}

#[test]
fn shared_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Run>();
    send::<RunIter>();
}

/// An open run's filter is charged to the cache while the run is open, by either way of
/// opening it, and the charge goes with the run.
#[test]
fn open_runs_charge_their_filters_to_the_cache() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let m = model(&mut rng, 3000);
    let reserved = |pf: &PageFile| pf.cache().stats().reserved_bytes;
    let mut b = RunBuilder::new(pf.clone(), opts());
    for e in &m {
        b.add(e).unwrap();
    }
    let built = Run::from_builder(b).unwrap();
    let bloom = built.filter().map(|f| f.as_bytes().len() as u64).unwrap();
    assert!(bloom > 0);
    assert_eq!(reserved(&pf), bloom, "from the builder");
    let again = Run::open(pf.clone(), built.meta().clone()).unwrap();
    assert_eq!(reserved(&pf), 2 * bloom, "opened from its metadata");
    drop(again);
    assert_eq!(reserved(&pf), bloom);
    drop(built);
    assert_eq!(reserved(&pf), 0);
    let none = build(
        &pf,
        &m,
        RunOptions {
            bloom_bits_per_key: 0,
            ..opts()
        },
    );
    assert_eq!(reserved(&pf), 0, "no filter, no charge");
    drop(none);
}

/// A partitioned filter larger than the cache's share for filters is not held in memory: the
/// run keeps its separators, each lookup reads the one filter page its key needs through the
/// cache (as an index page), lookups answer as a run with its filter in memory does, absent
/// keys mostly read no data page, and a filter page that is damaged costs a search, not data.
#[test]
fn a_filter_larger_than_its_share_of_the_cache_is_read_a_page_at_a_time() {
    a_paged_filter(crate::filter::FilterSpec::Bloom { bits_per_key: 10 });
}

/// The same for a quotient filter (`stbe`'s branches): its header stays in memory, and a
/// lookup reads the page holding its key's block.
#[test]
fn a_quotient_filter_larger_than_its_share_of_the_cache_is_read_a_page_at_a_time() {
    a_paged_filter(crate::filter::FilterSpec::Quotient { remainder_bits: 8 });
}

fn a_paged_filter(spec: crate::filter::FilterSpec) {
    let mut rng = SmallRng::seed_from_u64(seed());
    // 16 pages of cache: 8 for filters; the filter below takes 12 to 15 (40,000 keys).
    let (fs, pf) = store_with(Cache::new(16 * PAGE_SIZE as u64));
    let m: Vec<Entry> = (0..40_000u32)
        .map(|i| {
            let key = format!("key-{:08}", i * 2).into_bytes();
            Entry::new(&key, u64::from(i) + 1, Kind::Put, &i.to_le_bytes())
        })
        .collect();
    let reserved = |pf: &PageFile| pf.cache().stats().reserved_bytes;
    let built_in = |pf: &Arc<PageFile>| {
        let mut b = RunBuilder::with_filter(pf.clone(), opts(), spec);
        for e in &m {
            b.add(e).unwrap();
        }
        Arc::new(Run::from_builder(b).unwrap())
    };
    let built = built_in(&pf);
    let meta = built.meta().clone();
    assert!(meta.filter_pages > 8, "{} filter pages", meta.filter_pages);
    assert!(built.filter_is_paged() && built.filter().is_none());
    let index_bytes = reserved(&pf);
    assert!(
        index_bytes > 0 && index_bytes < 1024,
        "{index_bytes} bytes of separators"
    );
    let opened = Arc::new(Run::open(pf.clone(), meta.clone()).unwrap());
    assert!(opened.filter_is_paged());
    assert_eq!(reserved(&pf), 2 * index_bytes, "opened from its metadata");
    assert_eq!(pf.cache().stats().paged_filters, 2);
    let quotient = matches!(spec, crate::filter::FilterSpec::Quotient { .. });
    assert_eq!(opened.has_quotient_filter(), quotient);
    // The same filter in memory (a cache with room for it) says the same for every key.
    let (_fs2, big) = store_with(Cache::new(1 << 20));
    let whole = built_in(&big);
    assert!(!whole.filter_is_paged() && whole.filter().is_some());
    assert_eq!(whole.has_quotient_filter(), quotient);
    for run in [&built, &opened] {
        verify(run, &m, &mut rng, 5);
        for i in 0..4_000u32 {
            let key = format!("key-{:08}", i * 20 + 1).into_bytes();
            assert_eq!(run.may_contain(&key), whole.may_contain(&key), "{key:?}");
        }
    }
    // Absent keys: about 1% (bloom) or 0.35% (quotient) of them go past the filter.
    let data_reads = |pf: &PageFile| pf.counters().snapshot().read(Purpose::UserRead);
    let before = data_reads(&pf);
    let stats = pf.cache().stats();
    let mut out = Vec::new();
    for i in 0..4_000u32 {
        let key = format!("key-{:08}", i * 20 + 1).into_bytes();
        opened.get(&key, u64::MAX, &mut out).unwrap();
    }
    assert!(out.is_empty());
    let after = pf.cache().stats();
    let pages_read = (data_reads(&pf) - before) / PAGE_SIZE as u64;
    println!(
        "4,000 absent keys: {pages_read} pages read, cache hits {} misses {}",
        after.hits - stats.hits,
        after.misses - stats.misses
    );
    assert!(
        after.hits + after.misses - stats.hits - stats.misses >= 4_000,
        "every lookup reads its filter page through the cache"
    );
    // Without the filter nearly every lookup would read a data page (the cache holds few of
    // them); with it, they read filter pages (a partitioned filter's in key order, so mostly
    // cached; a quotient filter's by hash, so a miss in about one lookup of seven here).
    assert!(
        pages_read * 4 < 4_000 && meta.data_pages > 100,
        "{pages_read} pages read for 4,000 absent keys, {} data pages",
        meta.data_pages
    );
    assert_eq!(opened.check().unwrap(), m.len() as u64);
    // A damaged filter page: lookups of its keys search the run and still find them.
    let page = meta.filter_page + 1;
    assert!(fs.flip_byte(Path::new(DATA), page * PAGE_SIZE as u64 + 100));
    pf.cache().invalidate(page);
    let damaged = Arc::new(Run::open(pf.clone(), meta).unwrap());
    for e in &m {
        out.clear();
        damaged.get(&e.key, u64::MAX, &mut out).unwrap();
        assert_eq!(out, std::slice::from_ref(e));
    }
    assert!(damaged.check().is_err());
    drop((built, opened, damaged));
    assert_eq!(reserved(&pf), 0);
    assert_eq!(pf.cache().stats().paged_filters, 0);
}

/// A paged filter whose separators are long spans several pages with its index section: the
/// run reads them back at open (from the last partition's page on) and finds every key.
#[test]
fn a_paged_filter_reads_an_index_section_of_several_pages() {
    let (_fs, pf) = store_with(Cache::new(16 * PAGE_SIZE as u64));
    let prefix = vec![b'x'; 1000];
    let key = |i: u32| [prefix.as_slice(), format!("{i:08}").as_bytes()].concat();
    let m: Vec<Entry> = (0..5_000u32)
        .map(|i| Entry::new(&key(i * 2), u64::from(i) + 1, Kind::Put, b"v"))
        .collect();
    let o = RunOptions {
        bloom_bits_per_key: 64,
        ..opts()
    };
    let meta = build(&pf, &m, o).meta().clone();
    let run = Run::open(pf.clone(), meta.clone()).unwrap();
    assert!(run.filter_is_paged());
    // 10 partitions of 507 keys, each separator about 1,000 bytes: three pages of index.
    let partitions = 5_000u64.div_ceil(partitioned::keys_per_partition(64) as u64);
    assert!(
        meta.filter_pages >= partitions + 2,
        "{} filter pages for {partitions} partitions",
        meta.filter_pages
    );
    let mut out = Vec::new();
    for e in &m {
        out.clear();
        run.get(&e.key, u64::MAX, &mut out).unwrap();
        assert_eq!(out, std::slice::from_ref(e));
    }
    let absent = (0..5_000u32)
        .filter(|&i| run.may_contain(&key(i * 2 + 1)))
        .count();
    assert!(absent < 50, "{absent} of 5,000 absent keys pass the filter");
    assert_eq!(run.check().unwrap(), m.len() as u64);
}

/// A lazy run reads nothing until used; a damaged header fails the use, not the creation, and
/// a later use after the damage is repaired opens it.
#[test]
fn lazy_run_opens_on_first_use() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (fs, pf) = store();
    let m = model(&mut rng, 500);
    let run = build(&pf, &m, opts());
    let meta = run.meta().clone();
    let header = meta.root_page;
    let reads = |pf: &PageFile| pf.counters().snapshot().total_read();
    let before = reads(&pf);
    let lazy = LazyRun::new(pf.clone(), meta.clone());
    assert!(!lazy.is_open());
    assert_eq!(reads(&pf), before, "creating a lazy run reads nothing");
    let off = header * PAGE_SIZE as u64 + 20;
    assert!(fs.flip_byte(Path::new(DATA), off));
    assert_eq!(corruption_page(lazy.run().err().unwrap()), Some(header));
    assert!(!lazy.is_open());
    assert!(fs.flip_byte(Path::new(DATA), off));
    let key = m[m.len() / 3].key.clone();
    let mut out = Vec::new();
    lazy.run().unwrap().get(&key, u64::MAX, &mut out).unwrap();
    assert_eq!(out, model_get(&m, &key, u64::MAX));
    assert!(lazy.is_open());
    let built = LazyRun::from_run(Run::open(pf.clone(), meta.clone()).unwrap());
    assert!(built.is_open());
    assert_eq!(built.meta(), &meta);
    fn send_sync<T: Send + Sync>() {}
    send_sync::<LazyRun>();
}

/// Chunks the allocator hands out one after another are listed as one extent: a large run's
/// metadata stays small.
#[test]
fn consecutive_chunks_are_one_extent() {
    let (_fs, pf) = store();
    let mut b = RunBuilder::new(
        pf.clone(),
        RunOptions {
            extent_pages: 8,
            ..opts()
        },
    );
    for i in 0..20_000u32 {
        b.add(&Entry::new(&i.to_be_bytes(), 1, Kind::Put, &[7u8; 40]))
            .unwrap();
    }
    let meta = b.finish().unwrap();
    assert!(meta.pages() > 100, "{} pages", meta.pages());
    assert_eq!(meta.extents.len(), 1, "{:?}", meta.extents);
    let run = Run::open(pf.clone(), meta).unwrap();
    assert_eq!(run.check().unwrap(), 20_000);
}

/// Frees space in 8-page holes: a run built next lands its chunks apart, a window per extent.
fn fragment(pf: &PageFile) {
    let taken: Vec<Extent> = (0..400).map(|_| pf.alloc().alloc(8)).collect();
    for e in taken.iter().step_by(2) {
        pf.alloc().release(*e);
    }
}

#[test]
fn scans_reading_ahead_return_the_model_over_every_range() {
    // Small chunks and windows, so that scans cross many windows and extents and their reads
    // ahead are used, skipped (a seek elsewhere, a value's own extent) or left unused at a
    // range's end.
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let small = RunOptions {
        extent_pages: 8,
        ..opts()
    };
    let m = model(&mut rng, 6000);
    // Free space in holes, so that the run spans several extents whatever its values.
    fragment(&pf);
    let run = build(&pf, &m, small);
    assert!(
        run.extents().len() > 1,
        "the run should span several extents"
    );
    for window in [1, 3, 8] {
        let scan = |lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>| {
            collect(run.iter_with_readahead(lo.clone(), hi.clone(), false, Purpose::Merge, window))
        };
        assert!(
            scan(&Bound::Unbounded, &Bound::Unbounded) == m,
            "full scan with {window}-page windows differs"
        );
        for _ in 0..40 {
            let lo = random_bound(&mut rng, &m);
            let hi = random_bound(&mut rng, &m);
            let want: Vec<Entry> = m
                .iter()
                .filter(|e| in_range(&e.key, &lo, &hi))
                .cloned()
                .collect();
            let got = scan(&lo, &hi);
            assert!(
                got == want,
                "{window}-page windows, range {lo:?}..{hi:?}: {} entries, model {}",
                got.len(),
                want.len()
            );
        }
    }
    // Without values stored apart, a full scan reads every page of the run once at most, plus
    // the one window read ahead past the data.
    let plain: Vec<Entry> = (0..20_000u64)
        .map(|i| {
            let v: Vec<u8> = (0..rng.gen_range(0..=300)).map(|_| rng.gen()).collect();
            Entry::new(format!("k{i:08}").as_bytes(), i + 1, Kind::Put, &v)
        })
        .collect();
    for (window, fragmented) in [(1, false), (3, false), (8, false), (8, true), (3, true)] {
        // A store of its own per scan, so that no earlier scan's read ahead, counted whenever
        // it completes, lands in this one's figure.
        let (_fs, pf) = store();
        if fragmented {
            fragment(&pf);
        }
        let run = build(&pf, &plain, small);
        if fragmented {
            assert!(run.extents().len() > 20, "{} extents", run.extents().len());
        }
        let got = collect(run.iter_with_readahead(
            Bound::Unbounded,
            Bound::Unbounded,
            false,
            Purpose::Merge,
            window,
        ));
        assert!(got == plain, "{window}-page windows: the scan differs");
        while pf.io_in_flight() > 0 {
            std::thread::yield_now();
        }
        let io = pf.counters().snapshot();
        let (read, requests) = (
            io.read_bytes[Purpose::Merge as usize],
            io.read_ops[Purpose::Merge as usize],
        );
        let limit = (run.meta().pages() + window) * PAGE_SIZE as u64;
        assert!(
            read <= limit,
            "{read} bytes read by a scan in {window}-page windows, run and one window {limit}"
        );
        // Every window but the first was read ahead, across extents too; the other reads are
        // of index pages (read a page at a time as the scan descends).
        let ahead = pf.reads_behind();
        let meta = run.meta();
        let index_pages = meta.pages() - meta.data_pages - meta.filter_pages;
        assert!(
            requests - ahead <= 1 + index_pages && ahead > 10,
            "{window}-page windows (fragmented: {fragmented}): {requests} reads, {ahead} of them ahead"
        );
    }
}

#[test]
fn abandoned_and_finished_builders_leave_no_write_in_flight() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let m = model(&mut rng, 4000);
    let small = RunOptions {
        extent_pages: 8,
        ..opts()
    };
    let (_fs, pf) = store();
    for round in 0..20 {
        let mut b = RunBuilder::new(pf.clone(), small);
        let n = if round % 2 == 0 { m.len() } else { m.len() / 3 };
        for e in &m[..n] {
            b.add(e).unwrap();
        }
        // Pages go back to the allocator (and may be handed out again) only once no write into
        // them is in flight; a finished run's pages are all written.
        match round % 3 {
            0 => b.abandon(),
            1 => drop(b),
            _ => {
                let meta = b.finish().unwrap();
                assert_eq!(
                    pf.io_in_flight(),
                    0,
                    "round {round}: finished with writes in flight"
                );
                for e in &meta.extents {
                    pf.alloc().release(*e);
                }
            }
        }
        assert_eq!(
            pf.io_in_flight(),
            0,
            "round {round}: pages released with writes in flight"
        );
    }
}

#[test]
fn a_failed_write_behind_fails_the_build_and_releases_its_pages() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let m = model(&mut rng, 5000);
    for fail_op in [0, 1, 3, 5] {
        let (fs, pf) = store();
        let free = pf.alloc().free_pages();
        fs.set_plan(FaultPlan {
            fail_op: Some(fail_op),
            sticky: false,
        });
        let mut b = RunBuilder::new(
            pf.clone(),
            RunOptions {
                extent_pages: 8,
                ..opts()
            },
        );
        // The failure is reported by whichever call waits for that write: a later add, or
        // finish at the latest.
        let failed = match m.iter().position(|e| b.add(e).is_err()) {
            Some(_) => {
                b.abandon();
                true
            }
            None => b.finish().is_err(),
        };
        assert!(failed, "write {fail_op} failed, and the build did not");
        assert_eq!(fs.injected(), 1);
        assert_eq!(
            pf.alloc().free_pages(),
            pf.alloc().end() - pf.alloc().first_page(),
            "write {fail_op} failed: pages of the failed build are still allocated"
        );
        assert!(pf.alloc().free_pages() >= free);
    }
}

/// Builds `entries` as a run appended into `region`; returns the run and the moved region.
fn build_in_region(
    pf: &Arc<PageFile>,
    entries: &[Entry],
    o: RunOptions,
    region: Region,
) -> (Arc<Run>, Region) {
    let mut b = RunBuilder::in_region(pf.clone(), o, region);
    for e in entries {
        b.add(e).unwrap();
    }
    let (run, region) = Run::from_builder_in_region(b).unwrap();
    (
        Arc::new(run),
        region.expect("a region builder returns its region"),
    )
}

#[test]
fn runs_appended_into_a_region_read_back_with_data_in_front_and_metadata_behind() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let extent = pf.alloc().alloc(4096);
    let end_before = pf.alloc().end();
    let mut region = Region::new(extent);
    let o = RunOptions {
        extent_pages: 16,
        ..opts()
    };
    let mut runs = Vec::new();
    for n in [3000, 1, 0, 2000] {
        let m = model(&mut rng, n);
        let before = region;
        let (run, after) = build_in_region(&pf, &m, o, region);
        // Data pages grow the front, metadata pages the back; nothing outside the region.
        assert!(after.front >= before.front && after.back <= before.back);
        assert!(after.front <= after.back, "cursors crossed: {after:?}");
        assert_eq!(
            run.meta().pages(),
            (after.front - before.front) + (before.back - after.back),
            "run pages are exactly what the cursors moved over"
        );
        for e in run.extents() {
            assert!(region.holds(e), "extent {e:?} outside {region:?}");
            let data = e.end() <= after.front && e.start >= before.front;
            let meta = e.start >= after.back && e.end() <= before.back;
            assert!(data || meta, "extent {e:?} is neither data nor metadata");
        }
        assert!(run.meta().root_page >= after.back, "header is metadata");
        region = after;
        runs.push((run, m));
    }
    assert_eq!(
        pf.alloc().end(),
        end_before,
        "nothing allocated outside the region"
    );
    // Every run still reads back whole once later runs were appended.
    for (run, m) in &runs {
        verify(run, m, &mut rng, 5);
        let reopened = Arc::new(Run::open(pf.clone(), run.meta().clone()).unwrap());
        verify(&reopened, m, &mut rng, 2);
    }
    let mut buf = Vec::new();
    region.encode(&mut buf);
    let mut r = Reader::new(&buf, "test");
    assert_eq!(Region::decode(&mut r).unwrap(), region);
}

#[test]
fn a_run_larger_than_the_hole_continues_in_allocated_extents() {
    let mut rng = SmallRng::seed_from_u64(seed());
    let (_fs, pf) = store();
    let region = Region::new(pf.alloc().alloc(40));
    let m = model(&mut rng, 4000);
    let (run, after) = build_in_region(&pf, &m, opts(), region);
    assert!(after.hole_pages() < 16, "the hole was used: {after:?}");
    assert!(run.extents().iter().any(|e| !region.holds(e)));
    verify(&run, &m, &mut rng, 5);
    // Abandoning a region builder gives back its allocated extents only, never region pages.
    let allocated = |pf: &PageFile| pf.alloc().end() - pf.alloc().free_pages();
    let before = allocated(&pf);
    let mut b = RunBuilder::in_region(pf.clone(), opts(), after);
    for e in &m {
        b.add(e).unwrap();
    }
    assert!(allocated(&pf) > before, "the run overflowed the region");
    b.abandon();
    assert_eq!(allocated(&pf), before);
    verify(&run, &m, &mut rng, 1);
}

#[test]
fn region_decode_refuses_crossed_cursors() {
    let mut buf = Vec::new();
    for v in [100u64, 10, 6, 5] {
        codec::put_varint(&mut buf, v);
    }
    assert!(Region::decode(&mut Reader::new(&buf, "t")).is_err());
}

/// A user read of a run caches its index pages as index pages ([`crate::cache::PageClass`]),
/// which the cache keeps before its data pages, and its data pages as data.
#[test]
fn user_reads_cache_the_index_pages_as_index_pages() {
    let (_fs, pf) = store_with(Cache::new(1 << 20));
    let entries: Vec<Entry> = (0..20_000u64)
        .map(|i| {
            Entry::new(
                format!("key{i:08}").as_bytes(),
                i + 1,
                Kind::Put,
                &[7u8; 100],
            )
        })
        .collect();
    let run = build(&pf, &entries, opts());
    assert!(run.meta().height >= 2, "the run has index pages");
    let mut out = Vec::new();
    for e in &entries {
        out.clear();
        run.get(&e.key, u64::MAX, &mut out).unwrap();
        assert_eq!(out.len(), 1);
    }
    let stats = pf.cache().stats();
    assert_eq!(stats.index_pages, index_pages(&run));
    assert!(stats.misses > stats.index_pages, "data pages were read too");
}

/// Entries of 24-byte keys and values of about 1 KiB (YCSB's records), in key order.
fn quarter_page_entries(rng: &mut SmallRng, n: u32) -> Vec<Entry> {
    (0..n)
        .map(|i| {
            let key = format!("user{:020}", u64::from(i) * 7919);
            let value: Vec<u8> = (0..rng.gen_range(990..=1060)).map(|_| rng.gen()).collect();
            Entry::new(key.as_bytes(), u64::from(i) + 1, Kind::Put, &value)
        })
        .collect()
}

/// Entries of about a quarter of a page: three whole ones fill about 77% of a page, so the
/// builder begins the fourth in the room left and continues it on the next page. The data
/// pages come out at least 95% full (against about 77% without splitting), and every read
/// gives the values back whole: check, gets, scans both ways, through the cache and read ahead.
#[test]
fn quarter_page_entries_split_across_pages_and_fill_them() {
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let (_fs, pf) = store();
    let m = quarter_page_entries(&mut rng, 3000);
    let user: u64 = m.iter().map(|e| e.user_bytes() as u64).sum();
    let split = build(&pf, &m, opts());
    let mut b = RunBuilder::new(pf.clone(), opts());
    b.set_split(false);
    for e in &m {
        b.add(e).unwrap();
    }
    let whole = Arc::new(Run::open(pf.clone(), b.finish().unwrap()).unwrap());
    let fill = |r: &Run| user as f64 / (r.meta().data_pages * PAGE_BODY as u64) as f64;
    assert!(fill(&split) >= 0.95, "split pages {:.3} full", fill(&split));
    assert!(fill(&whole) < 0.80, "whole pages {:.3} full", fill(&whole));
    verify(&split, &m, &mut rng, 20);
    verify(&whole, &m, &mut rng, 5);
    // Most pages begin the next page's first value; the last one never does.
    let spilling = spilling_pages(&pf, &split);
    assert!(
        spilling.len() as u64 * 2 > split.meta().data_pages,
        "{} of {} pages spill",
        spilling.len(),
        split.meta().data_pages
    );
}

/// The data pages of `run` that spill into the next one, with their page bytes.
fn spilling_pages(pf: &PageFile, run: &Run) -> Vec<(u64, Vec<u8>)> {
    run.extents()
        .iter()
        .flat_map(|e| e.start..e.end())
        .filter_map(|page| {
            let b = pf.read_uncached(page, Purpose::Merge).ok()?;
            let h = format::header(page, &b, format::PAGE_DATA).ok()?;
            (h.aux & format::AUX_SPILL != 0).then(|| (page, b.to_vec()))
        })
        .collect()
}

/// A spill whose length or flag disagrees with the split entry that continues it, or a split
/// entry that points at a page that is not the one before, is a corruption error naming a
/// page, for gets, scans and check alike; the run reads back whole once the page is restored.
#[test]
fn a_split_value_that_does_not_match_its_spill_is_corruption() {
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let (_fs, pf) = store();
    let m = quarter_page_entries(&mut rng, 600);
    let run = build(&pf, &m, opts());
    let spilling = spilling_pages(&pf, &run);
    assert!(!spilling.is_empty());
    for (page, old) in spilling.iter().take(6) {
        for damage in 0..2 {
            let mut buf = crate::storage::AlignedBuf::from_slice(old);
            let aux = u32::from_le_bytes(buf[4..8].try_into().unwrap());
            let aux = match damage {
                0 => aux - (1 << 16),          // a byte shorter
                _ => aux & !format::AUX_SPILL, // no spill at all
            };
            buf[4..8].copy_from_slice(&aux.to_le_bytes());
            pf.write(*page, &mut buf, Purpose::Merge).unwrap();
            let fresh = Arc::new(Run::open(pf.clone(), run.meta().clone()).unwrap());
            assert!(corruption_page(fresh.check().unwrap_err()).is_some());
            let errs = fresh
                .iter(
                    Bound::Unbounded,
                    Bound::Unbounded,
                    rng.gen(),
                    Purpose::Merge,
                )
                .filter(|r| r.is_err())
                .count();
            assert_eq!(errs, 1, "page {page}, damage {damage}");
            let gets = m
                .iter()
                .filter(|e| {
                    let mut out = Vec::new();
                    fresh.get(&e.key, u64::MAX, &mut out).is_err()
                })
                .count();
            assert_eq!(gets, 1, "page {page}, damage {damage}");
            pf.write(*page, &mut old_copy(old), Purpose::Merge).unwrap();
        }
    }
    let fresh = Arc::new(Run::open(pf.clone(), run.meta().clone()).unwrap());
    verify(&fresh, &m, &mut rng, 3);
}

/// A lookup of an entry split across two data pages reads both in one device request when the
/// cache holds neither: the entry's whole key is its page's separator, and the page it begins
/// on is the one just before. Counted on a cold cache for every such entry: the index levels,
/// then one request for the two data pages (a shortened separator, or reading the page before
/// only once the entry is found, would take two).
#[test]
fn a_lookup_of_a_split_entry_reads_its_two_pages_in_one_request() {
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let (fs, pf) = store();
    let m = quarter_page_entries(&mut rng, 1200);
    let run = build(&pf, &m, opts());
    let file = fs
        .open(Path::new(DATA), OpenMode::default())
        .expect("open data file");
    let mut checked = 0;
    for (before, _) in spilling_pages(&pf, &run) {
        let Ok(b) = pf.read_uncached(before + 1, Purpose::Merge) else {
            continue;
        };
        let node = Node::parse(before + 1, Arc::new(b), 0).expect("parse");
        let (key, want) = match node.data(0) {
            Ok(item) if matches!(item.value, format::ValueRef::Split { .. }) => {
                let key = item.key.to_vec();
                let want = m
                    .iter()
                    .find(|e| *e.key == *key)
                    .expect("in the model")
                    .clone();
                (key, want)
            }
            _ => continue,
        };
        // A cold cache: a page file of its own over the same file, the run opened on it.
        let cold = Arc::new(PageFile::new(
            file.clone(),
            Cache::new(1 << 20),
            Allocator::new(1),
            Arc::new(IoCounters::default()),
        ));
        let r = Run::open(cold.clone(), run.meta().clone()).expect("open");
        let ops = |pf: &PageFile| pf.counters().snapshot().read_ops[Purpose::UserRead as usize];
        let at = ops(&cold);
        let mut out = Vec::new();
        r.get(&key, u64::MAX, &mut out).expect("get");
        assert_eq!(out, vec![want], "seed {s}: page {}", before + 1);
        let index_levels = u64::from(r.meta().height) - 1;
        assert_eq!(
            ops(&cold) - at,
            index_levels + 1,
            "seed {s}: the lookup of the split entry beginning page {} read {} times",
            before + 1,
            ops(&cold) - at
        );
        checked += 1;
    }
    assert!(checked >= 100, "seed {s}: only {checked} split entries");
}

/// The level-1 nodes of `run`'s tree.
fn level1_nodes(run: &Run) -> Vec<Node> {
    let mut out = Vec::new();
    let mut todo: Vec<Node> = run.root_node(Purpose::Merge).unwrap().into_iter().collect();
    while let Some(node) = todo.pop() {
        let children = 0..node.count;
        match node.level {
            0 => {}
            1 => out.push(node),
            _ => todo.extend(children.map(|i| run.child_node(&node, i, Purpose::Merge).unwrap())),
        }
    }
    out
}

/// A forward scan (a user read) reads its first data page and the next in one device request
/// when the next is right after it in the file and may hold keys within the scan's bound: a
/// scan that goes on into the second page waits for the device once. Counted on a cold cache
/// for scans from the first key of every data page: the index levels, then one request for the
/// two pages (two where the next page is not adjacent). A point lookup of the same key, a scan
/// bounded within the page (up to its last entry, to its end: the next page's separator says
/// that nothing after lies within the bound) and a reverse scan read the one page, and leave
/// the next uncached.
#[test]
fn a_scan_reads_its_first_data_page_with_the_next_in_one_request() {
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let (fs, pf) = store();
    let m: Vec<Entry> = (0..6000)
        .map(|i| {
            let value = vec![i as u8; rng.gen_range(0..=120)];
            // Keys ten apart: separators shorter than the keys (a separator that is a whole
            // key has the page before read with its page instead, `Run::leaf_for`).
            Entry::new(format!("key{:07}", i * 10).as_bytes(), 7, Kind::Put, &value)
        })
        .collect();
    let run = build(&pf, &m, opts());
    let file = fs
        .open(Path::new(DATA), OpenMode::default())
        .expect("open data file");
    let index_levels = u64::from(run.meta().height) - 1;
    let (mut adjacent, mut apart) = (0, 0);
    for parent in level1_nodes(&run) {
        for j in 0..parent.count - 1 {
            let (page, next) = (parent.child(j).unwrap(), parent.child(j + 1).unwrap());
            let node = Node::parse(
                page,
                Arc::new(pf.read_uncached(page, Purpose::Merge).unwrap()),
                0,
            )
            .expect("parse");
            let first = node.data(0).expect("item");
            let key = first.key.to_vec();
            let whole = parent.key_seq(j).unwrap() == (&key[..], u64::MAX);
            if whole || matches!(first.value, format::ValueRef::Split { .. }) {
                // Its lookup reads the page before with it instead.
                continue;
            }
            let last = node.data(node.count - 1).expect("item").key.to_vec();
            let at = m.iter().position(|e| *e.key == *key).expect("in the model");
            let ops = |pf: &PageFile| pf.counters().snapshot().read_ops[Purpose::UserRead as usize];
            // The run opened on a cold cache, and the reads done so far.
            let cold = || {
                let pf = Arc::new(PageFile::new(
                    file.clone(),
                    Cache::new(1 << 20),
                    Allocator::new(1),
                    Arc::new(IoCounters::default()),
                ));
                let r = Arc::new(Run::open(pf.clone(), run.meta().clone()).expect("open"));
                let at = ops(&pf);
                (pf, r, at)
            };

            // The page's entries and the next page's first.
            let (cpf, r, at0) = cold();
            let got: Vec<Entry> = r
                .iter(
                    Bound::Included(key.clone()),
                    Bound::Unbounded,
                    false,
                    Purpose::UserRead,
                )
                .take(node.count + 1)
                .map(|e| e.expect("scan"))
                .collect();
            assert_eq!(
                got,
                m[at..at + node.count + 1],
                "seed {s}: scan from page {page}"
            );
            let want = index_levels + if next == page + 1 { 1 } else { 2 };
            assert_eq!(
                ops(&cpf) - at0,
                want,
                "seed {s}: scan from page {page} (next {next})"
            );
            if next == page + 1 {
                adjacent += 1;
            } else {
                apart += 1;
            }

            // A lookup, a scan that ends within the page and a reverse scan: the one page.
            let (cpf, r, at0) = cold();
            let mut out = Vec::new();
            r.get(&key, u64::MAX, &mut out).expect("get");
            assert_eq!(
                out,
                vec![m[at].clone()],
                "seed {s}: get of page {page}'s first key"
            );
            let in_page: Vec<Entry> = r
                .iter(
                    Bound::Included(key.clone()),
                    Bound::Included(last.clone()),
                    false,
                    Purpose::UserRead,
                )
                .map(|e| e.expect("scan"))
                .collect();
            assert_eq!(
                in_page,
                m[at..at + node.count],
                "seed {s}: page {page} alone"
            );
            let back = r
                .iter(
                    Bound::Unbounded,
                    Bound::Excluded(last.clone()),
                    true,
                    Purpose::UserRead,
                )
                .next()
                .expect("an entry")
                .expect("reverse scan");
            assert_eq!(
                back,
                m[at + node.count - 2],
                "seed {s}: reverse from page {page}'s end"
            );
            assert_eq!(
                ops(&cpf) - at0,
                index_levels + 1,
                "seed {s}: page {page} read alone"
            );
            assert!(
                !cpf.cache().holds(page + 1),
                "seed {s}: page {} cached",
                page + 1
            );
        }
    }
    assert!(
        adjacent >= 50,
        "seed {s}: {adjacent} scans over adjacent pages, {apart} apart"
    );
}
