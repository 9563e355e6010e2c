//! End to end: many small memtables of random puts, deletes and overwrites against a
//! `BTreeMap` model, over a fault-injecting file system, then a reopen from the manifest.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::merge::{resolve, Resolver};
use crate::storage::FaultFs;
use crate::testutil::{fault_ctx, reopen_fault_ctx, seed};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn params() -> LsmParams {
    LsmParams {
        table_bytes: 16 << 10,
        size_ratio: 2,
        level1_bytes: 32 << 10,
        l0_compaction_trigger: 2,
        l0_slowdown: 4,
        l0_stop: 6,
        bloom_bits_per_key: 10,
        dynamic_level_bytes: false,
    }
}

fn new_ctx(fs: &FaultFs) -> IndexContext {
    fault_ctx(fs, 64 << 10)
}

fn reopen_ctx(fs: &FaultFs) -> (IndexContext, crate::manifest::ManifestState) {
    reopen_fault_ctx(fs, 64 << 10)
}

fn get(lsm: &Lsm, key: &[u8], seq: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    lsm.get(key, seq, &mut out).unwrap();
    resolve(key, &out, seq, None).unwrap().map(|v| v.to_vec())
}

fn scan(sources: Vec<EntryIter>, seq: u64, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    let merged: EntryIter = Box::new(MergeIter::new(sources, reverse));
    Resolver::new(merged, seq, None, reverse)
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect()
}

fn in_range(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    (match lo {
        Bound::Included(l) => k >= l.as_slice(),
        Bound::Excluded(l) => k > l.as_slice(),
        Bound::Unbounded => true,
    }) && (match hi {
        Bound::Included(h) => k <= h.as_slice(),
        Bound::Excluded(h) => k < h.as_slice(),
        Bound::Unbounded => true,
    })
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Compares every key of the space and full and bounded scans in both directions.
fn verify(lsm: &Lsm, model: &Model, seq: u64, rng: &mut SmallRng, keys: u32) {
    for i in 0..keys {
        let k = key(i);
        assert_eq!(
            get(lsm, &k, seq),
            model.get(&k).cloned(),
            "get {:?} at {seq}",
            String::from_utf8_lossy(&k)
        );
    }
    let all: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let fwd = scan(
        lsm.iter(Bound::Unbounded, Bound::Unbounded, false).unwrap(),
        seq,
        false,
    );
    assert_eq!(fwd, all, "forward scan");
    let mut rev = scan(
        lsm.iter(Bound::Unbounded, Bound::Unbounded, true).unwrap(),
        seq,
        true,
    );
    rev.reverse();
    assert_eq!(rev, all, "reverse scan");
    for _ in 0..20 {
        let a = key(rng.gen_range(0..keys));
        let b = key(rng.gen_range(0..keys));
        let (a, b) = if a <= b { (a, b) } else { (b, a) };
        let lo = if rng.gen() {
            Bound::Included(a)
        } else {
            Bound::Excluded(a)
        };
        let hi = if rng.gen() {
            Bound::Included(b)
        } else {
            Bound::Excluded(b)
        };
        let want: Vec<(Vec<u8>, Vec<u8>)> = all
            .iter()
            .filter(|(k, _)| in_range(k, &lo, &hi))
            .cloned()
            .collect();
        let reverse = rng.gen();
        let mut got = scan(
            lsm.iter(lo.clone(), hi.clone(), reverse).unwrap(),
            seq,
            reverse,
        );
        if reverse {
            got.reverse();
        }
        assert_eq!(got, want, "scan {lo:?}..{hi:?} reverse {reverse}");
    }
}

fn drain(lsm: &Lsm) {
    while lsm.debt() > 0 {
        lsm.work(u64::MAX).unwrap();
    }
}

#[test]
fn random_memtables_against_model_then_reopen() {
    let s = seed();
    let mut rng = SmallRng::seed_from_u64(s);
    let fs = FaultFs::new();
    let ctx = new_ctx(&fs);
    let lsm = Lsm::open(ctx.clone(), params(), &[], 0).unwrap();
    let keys = 3000u32;
    let mut model = Model::new();
    let mut seq = 0u64;
    let mut snapshot: Option<(u64, Model)> = None;
    let mut pinned: Option<(u64, Model, Vec<EntryIter>)> = None;
    let mut max_l0 = 0;
    for round in 0..220 {
        let mem = Arc::new(Memtable::new(0));
        for _ in 0..rng.gen_range(20..80) {
            seq += 1;
            let k = key(rng.gen_range(0..keys));
            if rng.gen_ratio(1, 5) {
                mem.insert(&k, seq, Kind::Delete, b"");
                model.remove(&k);
            } else {
                let len = rng.gen_range(5..120);
                let v: Vec<u8> = (0..len).map(|_| rng.gen_range(b'a'..=b'z')).collect();
                mem.insert(&k, seq, Kind::Put, &v);
                model.insert(k, v);
            }
        }
        assert_eq!(lsm.debt(), 0);
        lsm.absorb(mem.clone()).unwrap();
        assert!(lsm.debt() > 0);
        drain(&lsm);
        assert_eq!(lsm.durable_seq(), seq);
        max_l0 = max_l0.max(lsm.version().levels[0].len());
        let st = lsm.stall();
        let l0 = lsm.version().levels[0].len() as u32;
        assert_eq!(st == Stall::Stop, l0 >= params().l0_stop);
        // Let L0 pile up for a while, then catch up, as a slow background thread would.
        if round % 4 == 3 {
            while lsm.compaction_needed() {
                assert!(lsm.work(u64::MAX).unwrap() > 0);
            }
            assert_eq!(lsm.work(u64::MAX).unwrap(), 0, "idle");
        }
        if round == 90 {
            ctx.snapshots.acquire(seq);
            snapshot = Some((seq, model.clone()));
        }
        if round == 130 {
            pinned = Some((
                seq,
                model.clone(),
                lsm.iter(Bound::Unbounded, Bound::Unbounded, false).unwrap(),
            ));
        }
        if round % 50 == 49 {
            verify(&lsm, &model, seq, &mut rng, keys);
        }
    }
    while lsm.work(u64::MAX).unwrap() > 0 {}
    assert!(!lsm.compaction_needed());
    assert!(max_l0 >= params().l0_compaction_trigger as usize);
    let entries = lsm.check().unwrap();
    let stats = lsm.stats();
    println!("{stats:#?}");
    assert!(stats.height >= 3, "height {}", stats.height);
    assert!(stats.counters["compactions"] > 0 && stats.counters["flushes"] == 220);
    assert_eq!(stats.entries, entries);
    verify(&lsm, &model, seq, &mut rng, keys);

    // An iterator opened long ago reads what it saw then.
    if let Some((pseq, pmodel, sources)) = pinned.take() {
        let got = scan(sources, pseq, false);
        let want: Vec<(Vec<u8>, Vec<u8>)> = pmodel.into_iter().collect();
        assert_eq!(got, want, "pinned iterator");
    }
    // The snapshot still sees its versions.
    if let Some((sseq, smodel)) = &snapshot {
        verify(&lsm, smodel, *sseq, &mut rng, keys);
    }

    // Space: the allocator holds exactly what the manifest lists, which is the tables.
    let state = ctx.manifest.state();
    let manifest_pages: u64 = state.allocated.iter().map(|e| e.pages).sum();
    let table_pages: u64 = lsm
        .version()
        .levels
        .iter()
        .flatten()
        .map(|t| t.meta().pages())
        .sum();
    assert_eq!(manifest_pages, table_pages);
    let a = ctx.store.alloc();
    assert_eq!(
        a.end() - a.first_page() - a.free_pages(),
        table_pages,
        "leaked or early-released pages"
    );

    // Reopen from the manifest alone.
    drop(lsm);
    drop(ctx);
    let (ctx2, state2) = reopen_ctx(&fs);
    let lsm2 = Lsm::open(
        ctx2.clone(),
        params(),
        &state2.index_meta,
        state2.durable_seq,
    )
    .unwrap();
    assert_eq!(lsm2.durable_seq(), seq);
    assert_eq!(lsm2.check().unwrap(), entries);
    verify(&lsm2, &model, seq, &mut rng, keys);
    if let Some((sseq, smodel)) = &snapshot {
        verify(&lsm2, smodel, *sseq, &mut rng, keys);
    }
    // And it goes on working after the reopen.
    let mem = Arc::new(Memtable::new(0));
    for i in 0..200 {
        seq += 1;
        let k = key(i);
        mem.insert(&k, seq, Kind::Delete, b"");
        model.remove(&k);
    }
    lsm2.absorb(mem).unwrap();
    while lsm2.work(u64::MAX).unwrap() > 0 {}
    lsm2.check().unwrap();
    verify(&lsm2, &model, seq, &mut rng, keys);
}

#[test]
fn metadata_round_trip_and_garbage() {
    let fs = FaultFs::new();
    let ctx = new_ctx(&fs);
    let lsm = Lsm::open(ctx.clone(), params(), &[], 0).unwrap();
    let mem = Arc::new(Memtable::new(0));
    mem.insert(b"a", 1, Kind::Put, b"1");
    lsm.absorb(mem).unwrap();
    drain(&lsm);
    let meta = ctx.manifest.state().index_meta;
    let (state, levels) = decode_meta(&meta).unwrap();
    assert_eq!(levels[0].len(), 1);
    assert_eq!(state.next_id, 2);
    for cut in 0..meta.len() {
        assert!(
            decode_meta(&meta[..cut]).is_err(),
            "prefix of {cut} bytes accepted"
        );
    }
    let mut bad = meta.clone();
    bad[0] = 9;
    assert!(decode_meta(&bad).is_err());
}
