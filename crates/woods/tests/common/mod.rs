//! Shared pieces of the conformance suite: per-kind small parameters, the model, seeds.

#![allow(dead_code)]

pub mod generations;
pub mod sync_hook;
pub mod wal_damage;

use std::sync::Arc;

use woods::db::BackgroundGate;
use woods::{
    BTreeParams, BoaParams, Db, FdTreeParams, FlushPolicy, IamParams, IndexKind, InsertBuffer,
    LsmParams, MergeOperator, NbTreeParams, Options, PbtParams, StbeParams,
};

/// Appends operands to the value: the suite's merge operator.
pub struct Append;

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

/// Every index kind, with node and run sizes scaled down so structure code runs constantly.
pub fn kinds() -> Vec<IndexKind> {
    vec![
        IndexKind::BTree(BTreeParams::default()),
        // The adaptive policy; a buffer of a quarter of the suite's 256 KiB cache, one 64 KiB
        // memtable: every absorb past the first makes a drain. `buffered_kinds` has the others.
        buffered(FlushPolicy::Adaptive),
        IndexKind::Lsm(LsmParams {
            table_bytes: 16 << 10,
            level1_bytes: 64 << 10,
            size_ratio: 4,
            ..LsmParams::default()
        }),
        // Dynamic level targets: the same sizes, L1 at least a table.
        IndexKind::Lsm(LsmParams {
            table_bytes: 16 << 10,
            level1_bytes: 64 << 10,
            size_ratio: 4,
            dynamic_level_bytes: true,
            ..LsmParams::default()
        }),
        // σ is the suite's 64 KiB memtable times WOODS_NBTREE_SIGMA, the default c = 8 unless
        // set, so that the suite tests what a user gets (the root's runs, parks and paced
        // drains); WOODS_NBTREE_SIGMA=1 tests the tree with σ = the memtable, deeper at the
        // suite's sizes, as the nbtree unit tests do. f = 3 (the paper's).
        IndexKind::NbTree(NbTreeParams {
            sigma_memtables: std::env::var("WOODS_NBTREE_SIGMA")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(NbTreeParams::default().sigma_memtables),
            ..NbTreeParams::default()
        }),
        IndexKind::Stbe(StbeParams {
            fanout: 4,
            dead_percent: 25,
            node_bytes: 128 << 10,
            ..StbeParams::default()
        }),
        // t = 3 (spec §7 invariant 4: small t so that splits happen), C_t the suite's 64 KiB
        // memtable; `iam` chooses m and k from the suite's 256 KiB cache.
        IndexKind::Lsa(IamParams {
            fanout: 3,
            ..IamParams::default()
        }),
        IndexKind::Iam(IamParams {
            fanout: 3,
            ..IamParams::default()
        }),
        // k = 3 over the suite's 64 KiB memtable (|L0| = 819 entries): cascades to L2 and L3
        // and new levels within a few hundred kilobytes.
        IndexKind::FdTree(FdTreeParams {
            ratio: 3,
            ..FdTreeParams::default()
        }),
        IndexKind::FdTree(FdTreeParams {
            ratio: 3,
            deamortized: true,
            ..FdTreeParams::default()
        }),
        // Half the suite's 256 KiB cache as PBT-Buffer: a switch every memtable or two, and
        // partition merges all the time.
        IndexKind::Pbt(PbtParams {
            buffer_percent: 50,
            write_pages: 8,
            max_partitions: 4,
            ..PbtParams::default()
        }),
        // λ = 4: three runs a level, so the suite's 64 KiB memtables cascade to level 4 and
        // below within a few megabytes. Point-only: the suite checks it by lookups.
        IndexKind::Boa(BoaParams {
            lambda: 4,
            extent_pages: 8,
            ..BoaParams::default()
        }),
    ]
}

/// `btree` with an insertion buffer flushed by `policy`.
pub fn buffered(policy: FlushPolicy) -> IndexKind {
    IndexKind::BTree(BTreeParams {
        insert_buffer: Some(InsertBuffer {
            policy,
            ..InsertBuffer::default()
        }),
        ..BTreeParams::default()
    })
}

/// The buffered `btree` under every flush policy (`btree-buffered:POLICY`; the default,
/// adaptive, is `btree-buffered` and in [`kinds`] too).
pub fn buffered_kinds() -> Vec<IndexKind> {
    FlushPolicy::ALL.into_iter().map(buffered).collect()
}

/// Everything `db` holds: a full scan on an ordered kind; on a point-only kind (which cannot
/// iterate) a lookup of every key of `universe`, the keys the test may have written.
pub fn contents(
    db: &Db,
    universe: impl IntoIterator<Item = Vec<u8>>,
) -> woods::Result<std::collections::BTreeMap<Vec<u8>, Vec<u8>>> {
    if db.index_kind().ordered() {
        return db.iter()?.collect();
    }
    let mut out = std::collections::BTreeMap::new();
    for k in universe {
        if let Some(v) = db.get(&k)? {
            out.insert(k, v);
        }
    }
    Ok(out)
}

/// Keys with a value: counted by a full scan on an ordered kind, by lookups of `universe` on a
/// point-only kind.
pub fn count_live(db: &Db, universe: impl IntoIterator<Item = Vec<u8>>) -> u64 {
    if db.index_kind().ordered() {
        return db.iter().expect("iter").count() as u64;
    }
    universe
        .into_iter()
        .filter(|k| db.get(k).expect("get").is_some())
        .count() as u64
}

/// Asserts that a range read failed with the point-only kind's typed error.
pub fn assert_unsupported(it: woods::Result<woods::DbIter>, what: &str) {
    match it {
        Err(woods::Error::Unsupported { .. }) => {}
        Err(e) => panic!("{what}: a point-only kind's range read failed with {e}"),
        Ok(_) => panic!("{what}: a point-only kind iterated"),
    }
}

pub fn kind(name: &str) -> IndexKind {
    kinds()
        .into_iter()
        .chain(buffered_kinds())
        .find(|k| k.name() == name)
        .unwrap_or_else(|| panic!("no kind {name}"))
}

/// Small memtable and cache (CI scale), with a row cache, so that every read of the suite may
/// be answered from it.
pub fn small_options(kind: &IndexKind) -> Options {
    Options {
        index: Some(kind.clone()),
        cache_bytes: 256 << 10,
        row_cache_bytes: 64 << 10,
        memtable_bytes: 64 << 10,
        merge_operator: Some(Arc::new(Append)),
        ..Options::default()
    }
}

/// A `btree` database in `dir` (1 MiB cache, 256 KiB memtables) holding keys `0..n` (4 bytes
/// big-endian) with 100-byte values of 7s, flushed into the tree; and its options, to reopen it.
pub fn btree_of_keys(dir: &std::path::Path, n: u32) -> (Db, Options) {
    let opts = Options {
        index: Some(IndexKind::from_name("btree").expect("btree")),
        cache_bytes: 1 << 20,
        memtable_bytes: 256 << 10,
        ..Options::default()
    };
    let db = Db::open(dir, opts.clone()).expect("open");
    for i in 0..n {
        db.put(i.to_be_bytes(), [7u8; 100]).expect("put");
    }
    db.flush().expect("flush");
    (db, opts)
}

/// The seed of a randomized test: WOODS_SEED if set, else from the clock; always printed.
pub fn seed(test: &str) -> u64 {
    let s = std::env::var("WOODS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{test}: seed {s} (replay with WOODS_SEED={s})");
    s
}

/// The `i`-th random 8-byte key of `seed` (splitmix64 of the index): random keys, replayable
/// from the seed.
pub fn random_key(seed: u64, i: u64) -> [u8; 8] {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)).to_be_bytes()
}

/// A 16-byte value that names its index `i` (little- then big-endian).
pub fn index_value(i: u64) -> Vec<u8> {
    [i.to_le_bytes(), i.to_be_bytes()].concat()
}

/// Asserts that the writes `0..n` of [`random_key`] and [`index_value`] all read back; `name`
/// and `when` name the test and the moment in the failure's message.
pub fn assert_random_writes(db: &Db, n: u64, seed: u64, name: &str, when: &str) {
    for i in 0..n {
        assert_eq!(
            db.get(random_key(seed, i)).expect("get"),
            Some(index_value(i)),
            "{name}: key {i} lost {when}; WOODS_SEED={seed}"
        );
    }
}

/// Options for `kind` with `memtable_bytes` memtables, a 4 MiB cache and one background thread
/// held at the gate returned (closed: open it to let the thread run), so that the writers do
/// the index's work themselves.
pub fn held_back_options(kind: IndexKind, memtable_bytes: u64) -> (Options, Arc<BackgroundGate>) {
    let gate = BackgroundGate::closed();
    let opts = Options {
        index: Some(kind),
        cache_bytes: 4 << 20,
        memtable_bytes,
        background_threads: 1,
        background_gate: Some(gate.clone()),
        ..Options::default()
    };
    (opts, gate)
}

/// How much larger than CI scale to run (WOODS_SCALE, default 1).
pub fn scale() -> u64 {
    std::env::var("WOODS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}
