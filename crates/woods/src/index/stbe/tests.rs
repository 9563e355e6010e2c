//! Structure tests of the spec's §6, driving the index directly (memtables, `absorb`, `work`
//! steps) against a `BTreeMap` model: reference counts, key-range containment, bounded branches
//! per node after every step, compaction results equal to their inputs (every key reads the
//! same before and after each install), pointer-only flushes, concurrent work with readers,
//! recovery from the persisted trunk, and allocated pages equal to reachable ones at rest.
//! Randomized tests print their seed; `WOODS_SEED` replays one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::branch::Branch;
use super::edit::{Claims, Editor};
use super::node::Node;
use super::*;
use crate::cache::Cache;
use crate::entry::{Entry, Kind};
use crate::index::{Index, IndexContext, Snapshots};
use crate::manifest::Manifest;
use crate::memtable::Memtable;
use crate::merge::{resolve, MergeIter, Resolver};
use crate::options::{MergeOperator, StbeParams};
use crate::run::{Run, RunBuilder, RunOptions};
use crate::storage::{Allocator, FaultFs, Fs, IoCounters, OpenMode, PageFile, PAGE_SIZE};

/// The shared seed of the crate's randomized tests, printed with the test's name.
fn seed(test: &str) -> u64 {
    let s = crate::testutil::seed();
    eprintln!("{test}: seed {s} (replay with WOODS_SEED={s})");
    s
}

/// A page store on an in-memory file system.
pub(crate) fn scratch_store() -> Arc<PageFile> {
    let fs = FaultFs::new();
    fs.create_dir_all(Path::new("/s")).expect("mkdir");
    let file = fs
        .open(
            Path::new("/s/data"),
            OpenMode {
                create: true,
                direct: false,
            },
        )
        .expect("open");
    Arc::new(PageFile::new(
        file,
        Cache::new(1 << 20),
        Allocator::new(1),
        Arc::new(IoCounters::default()),
    ))
}

/// A branch holding `keys` (one Put each), built in `store`.
pub(crate) fn branch_of(store: &Arc<PageFile>, id: u64, keys: &[&str]) -> Arc<Branch> {
    let mut b = RunBuilder::new(store.clone(), RunOptions::default());
    let mut keys: Vec<&str> = keys.to_vec();
    keys.sort();
    for (i, k) in keys.iter().enumerate() {
        b.add(&Entry::new(k.as_bytes(), 1000 + i as u64, Kind::Put, b"v"))
            .expect("add");
    }
    let run = Run::from_builder(b).expect("build");
    let mut s = branch::Sampler::default();
    for k in &keys {
        s.add(&Entry::new(k.as_bytes(), 1, Kind::Put, b"v"));
    }
    Branch::new(id, run, s.finish(), store.clone())
}

/// Appends operands: the merge operator of these tests.
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

/// An index on an in-memory file system with a manifest, fed memtables by hand.
struct Harness {
    fs: FaultFs,
    ctx: IndexContext,
    params: StbeParams,
    index: Stbe,
    mem: Arc<Memtable>,
    seq: u64,
    model: BTreeMap<Vec<u8>, Vec<u8>>,
    memtable_bytes: u64,
    /// Units of one work step, and whether the trunk is checked after every step (tests of
    /// larger loads take larger steps and check at the end).
    step: u64,
    check_steps: bool,
}

fn small_params(fanout: u32) -> StbeParams {
    StbeParams {
        fanout,
        ..StbeParams::default()
    }
}

impl Harness {
    fn new(params: StbeParams, memtable_bytes: u64) -> Harness {
        let fs = FaultFs::new();
        let dir = Path::new("/db");
        let io = Arc::new(IoCounters::default());
        let manifest = Manifest::create(
            Arc::new(fs.clone()),
            dir,
            PAGE_SIZE as u32,
            64,
            Vec::new(),
            io.clone(),
        )
        .expect("manifest");
        let file = fs
            .open(
                &dir.join("data"),
                OpenMode {
                    create: true,
                    direct: false,
                },
            )
            .expect("data file");
        let store = Arc::new(PageFile::new(
            file,
            Cache::new(4 << 20),
            Allocator::new(1),
            io,
        ));
        let ctx = IndexContext {
            store,
            manifest: Arc::new(manifest),
            snapshots: Arc::new(Snapshots::default()),
            merge_op: Some(Arc::new(Append)),
            dir: dir.to_path_buf(),
            memtable_bytes,
        };
        let index = Stbe::open(ctx.clone(), params.clone(), &[], 0).expect("open");
        Harness {
            fs,
            ctx,
            params,
            index,
            mem: Arc::new(Memtable::new(0)),
            seq: 0,
            model: BTreeMap::new(),
            memtable_bytes,
            step: 4096,
            check_steps: true,
        }
    }

    /// Reopens the index from what the manifest holds (as after a crash: uncommitted work
    /// and the memtable are lost, the model is rebuilt from what the index returns).
    fn reopen(&mut self) {
        // As a crash would: nothing more is committed by the index being replaced (its
        // committer could otherwise commit after the manifest is read, and the new index
        // allocate what that commit names).
        self.index.stop();
        let st = self.ctx.manifest.state();
        let alloc = Allocator::from_allocated(1, &st.allocated);
        let file = self
            .fs
            .open(
                Path::new("/db/data"),
                OpenMode {
                    create: false,
                    direct: false,
                },
            )
            .expect("data file");
        let store = Arc::new(PageFile::new(
            file,
            Cache::new(4 << 20),
            alloc,
            Arc::new(IoCounters::default()),
        ));
        self.ctx.store = store;
        self.index = Stbe::open(
            self.ctx.clone(),
            self.params.clone(),
            &st.index_meta,
            st.durable_seq,
        )
        .expect("reopen");
    }

    fn write(&mut self, kind: Kind, key: &[u8], value: &[u8]) {
        self.seq += 1;
        self.mem.insert(key, self.seq, kind, value);
        match kind {
            Kind::Put => {
                self.model.insert(key.to_vec(), value.to_vec());
            }
            Kind::Delete => {
                self.model.remove(key);
            }
            Kind::Merge => self
                .model
                .entry(key.to_vec())
                .or_default()
                .extend_from_slice(value),
        }
        if self.mem.bytes() >= self.memtable_bytes {
            self.rotate();
        }
    }

    /// Hands the memtable to the index and works until it is in the trunk (debt 0 for the
    /// queue part), in steps of `step` units, checking the trunk after every step.
    fn rotate(&mut self) {
        let mem = std::mem::replace(&mut self.mem, Arc::new(Memtable::new(0)));
        while self.index.debt() > 0 {
            self.index.work(self.step).expect("work");
            if self.check_steps {
                self.check_structure();
            }
        }
        self.index.absorb(mem).expect("absorb");
        while !self.index.queue.lock().is_empty() {
            self.index.work(self.step).expect("work");
            if self.check_steps {
                self.check_structure();
            }
        }
    }

    /// Every trunk invariant the checker verifies, without reading the branches.
    fn check_structure(&self) {
        let v = self.index.version();
        check::check_trunk(&v, &self.index.limits).expect("trunk invariants");
        let mut refs: HashMap<u64, u64> = HashMap::new();
        fn walk(n: &Node, refs: &mut HashMap<u64, u64>, l: &Limits) {
            assert!(
                n.branches.len() <= l.max_branches,
                "node {} over the cap",
                n.id
            );
            assert!(
                n.children.len() <= l.max_children,
                "node {} over F + H",
                n.id
            );
            for r in &n.branches {
                *refs.entry(r.branch.id).or_insert(0) += 1;
            }
            for c in &n.children {
                walk(&c.node, refs, l);
            }
        }
        walk(&v.root, &mut refs, &self.index.limits);
        // Reference counts: the metadata's round trip checks them against the references.
        let buf = meta::encode(
            &v.root,
            v.ids,
            self.index.next_branch.load(Ordering::Relaxed),
        );
        // Decoded into a scratch store: the copies release their extents there when dropped.
        let d = meta::decode(&buf, &scratch_store()).expect("metadata round trip");
        assert_eq!(branch_set(&d.root).len(), refs.len());
        let set = branch_set(&v.root);
        for (id, n) in &refs {
            let b = &set[id];
            assert!(
                Arc::strong_count(b) as u64 > *n,
                "branch {id}: holds below references"
            );
        }
    }

    /// Works until every incorporated memtable is durable (and so in the manifest).
    fn make_durable(&mut self) {
        for _ in 0..1_000_000 {
            if self.index.awaiting.lock().is_empty() && self.index.queue.lock().is_empty() {
                return;
            }
            self.index.work(4096).expect("work");
        }
        panic!("commits never finished");
    }

    /// Pages allocated in the store and pages the committed trunk's branches hold.
    fn pages(&self) -> (u64, u64) {
        let alloc = self.ctx.store.alloc();
        let used = alloc.end() - alloc.free_pages() - alloc.first_page();
        let reachable = branch_set(&self.index.version().root)
            .values()
            .map(|b| b.meta().pages())
            .sum();
        (used, reachable)
    }

    /// Works until nothing is left to do.
    fn drain(&mut self) {
        for _ in 0..1_000_000 {
            if !self.index.background_work() {
                return;
            }
            self.index.work(self.step.max(8192)).expect("work");
            if self.check_steps {
                self.check_structure();
            }
        }
        panic!("work never finished");
    }

    /// What the Db would read: the unrotated memtable, then the index.
    fn read(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        if !self.mem.get(key, u64::MAX >> 8, &mut out) {
            self.index.get(key, u64::MAX >> 8, &mut out).expect("get");
        }
        let op: Arc<dyn MergeOperator> = Arc::new(Append);
        resolve(key, &out, u64::MAX >> 8, Some(&op))
            .expect("resolve")
            .map(|v| v.to_vec())
    }

    fn scan(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut srcs: Vec<crate::merge::EntryIter> =
            vec![Box::new(self.mem.iter(lo.clone(), hi.clone(), reverse))];
        srcs.extend(self.index.iter(lo, hi, reverse).expect("iter"));
        let op: Arc<dyn MergeOperator> = Arc::new(Append);
        Resolver::new(
            Box::new(MergeIter::new(srcs, reverse)),
            u64::MAX >> 8,
            Some(op),
            reverse,
        )
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).expect("scan"))
        .collect()
    }

    fn assert_matches_model(&self, ctx: &str) {
        let got = self.scan(Bound::Unbounded, Bound::Unbounded, false);
        let want: Vec<(Vec<u8>, Vec<u8>)> = self
            .model
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got.len(), want.len(), "{ctx}: scan length");
        assert!(got == want, "{ctx}: scan differs from the model");
        for (k, v) in self.model.iter().step_by(7) {
            assert_eq!(self.read(k).as_ref(), Some(v), "{ctx}: get {k:?}");
        }
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("k{:08}", i.wrapping_mul(0x9E37_79B9) % 100_000_000).into_bytes()
}

#[test]
fn flush_is_pointer_only_and_refcounts_follow_references() {
    let store = scratch_store();
    let limits = Limits::new(&small_params(2), 1 << 20);
    let a = branch_of(&store, 1, &["a", "c", "e", "g"]);
    let b = branch_of(&store, 2, &["b", "d", "f", "h"]);
    let c = branch_of(&store, 3, &["d", "e"]);
    let (mut root, mut ids) = new_trunk();
    let mut claims = Claims::default();
    // Split the single leaf first so the root has two children.
    {
        let r = Arc::make_mut(&mut root);
        let leaf = Arc::make_mut(&mut r.children[0].node);
        leaf.branches.push(node::BranchRef {
            branch: a.clone(),
            batch: 0,
        });
    }
    let written = store.counters().snapshot().total_written();
    let mut ed = Editor::new(&limits, &mut ids, &mut claims);
    ed.incorporate(&mut root, vec![b.clone()]);
    ed.incorporate(&mut root, vec![c.clone()]);
    // Two branches in the root: no trigger holds yet.
    assert_eq!(ed.out.flushes, 0);
    // Force T2 by flushing through the policy with a tiny limit.
    let tiny = Limits {
        flush_branches: 0,
        ..limits
    };
    let mut ed = Editor::new(&tiny, &mut ids, &mut claims);
    ed.settle_root(&mut root, None);
    assert_eq!(ed.out.flushes, 1, "{:?}", ed.out);
    assert_eq!(
        store.counters().snapshot().total_written(),
        written,
        "a flush wrote pages"
    );
    // b and c moved to the leaf (by reference), as one batch to compact (they overlap), and
    // were dropped from the root.
    assert!(root.branches.is_empty());
    let leaf = &root.children[0].node;
    assert_eq!(leaf.branches.len(), 3);
    assert_eq!(
        Arc::strong_count(&b),
        3,
        "one reference from the leaf, one from the batch's task, one held here"
    );
    assert_eq!(ed.out.batches.len(), 1);
    assert_eq!(ed.out.batches[0].inputs.len(), 2);
    assert!(leaf.branches[1].batch != 0 && leaf.branches[1].batch == leaf.branches[2].batch);
    // Two disjoint branches inside the leaf's range need no compaction.
    let d = branch_of(&store, 4, &["x1", "x2"]);
    let e = branch_of(&store, 5, &["y1"]);
    let mut ed = Editor::new(&tiny, &mut ids, &mut claims);
    ed.incorporate(&mut root, vec![d]);
    ed.incorporate(&mut root, vec![e]);
    assert_eq!(ed.out.trivial_flushes, ed.out.flushes);
    assert!(ed.out.batches.is_empty());
    assert!(root.children[0].node.branches[3..]
        .iter()
        .all(|r| r.batch == 0));
    // A batch where one branch overlaps no other: that one moves by reference alone (a
    // sequential run's piece), the two that overlap each other are compacted.
    let f = branch_of(&store, 6, &["m1", "m2"]);
    let g = branch_of(&store, 7, &["n1", "p1"]);
    let k = branch_of(&store, 8, &["o1", "q1"]);
    let mut ed = Editor::new(&tiny, &mut ids, &mut claims);
    ed.incorporate(&mut root, vec![g.clone(), f.clone(), k.clone()]);
    assert_eq!(
        (ed.out.flushes, ed.out.trivial_flushes),
        (1, 0),
        "{:?}",
        ed.out
    );
    let inputs: Vec<u64> = ed
        .out
        .batches
        .iter()
        .flat_map(|b| b.inputs.iter().map(|x| x.id))
        .collect();
    assert_eq!(inputs, vec![7, 8], "{:?}", ed.out);
    assert_eq!(ed.out.moved_units, f.units());
    let leaf = &root.children[0].node;
    let tail: Vec<(u64, bool)> = leaf.branches[leaf.branches.len() - 3..]
        .iter()
        .map(|r| (r.branch.id, r.batch == 0))
        .collect();
    assert_eq!(tail, vec![(6, true), (7, false), (8, false)]);
}

#[test]
fn randomized_against_model() {
    let seed = seed("randomized_against_model");
    let mut rng = SmallRng::seed_from_u64(seed);
    let fanout = rng.gen_range(2..=4);
    let mut h = Harness::new(small_params(fanout), 16 << 10);
    let keys = 3_000u64;
    let ops = 60_000u64;
    for i in 0..ops {
        let k = key(rng.gen_range(0..keys));
        match rng.gen_range(0..100) {
            0..=64 => {
                let v = vec![rng.gen::<u8>(); rng.gen_range(0..60)];
                h.write(Kind::Put, &k, &v);
            }
            65..=84 => h.write(Kind::Delete, &k, b""),
            _ => h.write(Kind::Merge, &k, format!("+{i}").as_bytes()),
        }
        if i % 5_000 == 4_999 {
            h.assert_matches_model(&format!("seed {seed} op {i}"));
        }
    }
    h.rotate();
    h.drain();
    h.assert_matches_model(&format!("seed {seed} drained"));
    h.index.check().expect("check");
    let s = h.index.stats();
    eprintln!(
        "seed {seed}: height {}, counters {:?}",
        s.height, s.counters
    );
    for c in ["flushes", "compactions", "splits"] {
        assert!(s.counters[c] > 0, "seed {seed}: no {c}: {:?}", s.counters);
    }
    assert!(s.height >= 3, "seed {seed}: height {}", s.height);
}

#[test]
fn concurrent_workers_and_readers_see_every_write() {
    let seed = seed("concurrent_workers_and_readers_see_every_write");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut h = Harness::new(small_params(3), 16 << 10);
    // Stable keys: written once, then only read while the tree reorganises around them.
    let stable: Vec<(Vec<u8>, Vec<u8>)> = (0..2_000u64)
        .map(|i| (format!("s{i:06}").into_bytes(), vec![(i % 251) as u8; 20]))
        .collect();
    for (k, v) in &stable {
        h.write(Kind::Put, k, v);
    }
    h.rotate();
    let index = Arc::new(std::mem::replace(
        &mut h.index,
        Stbe::open(h.ctx.clone(), h.params.clone(), &[], 0).expect("placeholder"),
    ));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (index, stop) = (index.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += index.work(2048).expect("work");
                }
                n
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (index, stop, stable) = (index.clone(), stop.clone(), stable.clone());
            std::thread::spawn(move || {
                let op: Arc<dyn MergeOperator> = Arc::new(Append);
                let mut rounds = 0u64;
                while !stop.load(Ordering::Relaxed) || rounds < 3 {
                    for (k, v) in stable.iter().skip(r).step_by(37) {
                        let mut out = Vec::new();
                        index.get(k, u64::MAX >> 8, &mut out).expect("get");
                        let got = resolve(k, &out, u64::MAX >> 8, Some(&op)).expect("resolve");
                        assert_eq!(got.as_deref(), Some(&v[..]), "key {k:?}");
                    }
                    let srcs = index
                        .iter(
                            Bound::Included(b"s".to_vec()),
                            Bound::Excluded(b"t".to_vec()),
                            r == 1,
                        )
                        .expect("iter");
                    let mut n = 0;
                    for x in Resolver::new(
                        Box::new(MergeIter::new(srcs, r == 1)),
                        u64::MAX >> 8,
                        Some(op.clone()),
                        r == 1,
                    ) {
                        x.expect("scan");
                        n += 1;
                    }
                    assert_eq!(n, stable.len(), "scan saw {n} stable keys");
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    // A writer feeding memtables of other keys, absorbing whenever the index is ready.
    let mut absorbed = index.stats().counters["incorporations"];
    let mut seq = h.seq;
    for round in 0..150u64 {
        let mem = Arc::new(Memtable::new(0));
        for _ in 0..300 {
            seq += 1;
            let k = format!("w{:06}", rng.gen_range(0..5_000u32));
            mem.insert(k.as_bytes(), seq, Kind::Put, &round.to_le_bytes());
        }
        while index.debt() > 0 {
            std::thread::yield_now();
        }
        index.absorb(mem).expect("absorb");
        absorbed += 1;
    }
    while index.background_work() {
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("worker");
    }
    for r in readers {
        assert!(r.join().expect("reader") >= 3);
    }
    let s = index.stats();
    // Every memtable went in exactly once.
    assert_eq!(
        s.counters["incorporations"], absorbed,
        "seed {seed}: {:?}",
        s.counters
    );
    assert!(s.counters["compactions"] > 0, "{:?}", s.counters);
    index.check().expect("check");
}

#[test]
fn reopen_recovers_the_committed_trunk_and_its_pending_compactions() {
    let seed = seed("reopen_recovers_the_committed_trunk_and_its_pending_compactions");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut h = Harness::new(small_params(3), 16 << 10);
    let mut batches_rederived = 0;
    for round in 0..4 {
        for i in 0..8_000u64 {
            let k = key(rng.gen_range(0..4_000));
            if rng.gen_bool(0.1) {
                h.write(Kind::Delete, &k, b"");
            } else if rng.gen_bool(0.1) {
                h.write(Kind::Merge, &k, format!("+{i}").as_bytes());
            } else {
                h.write(Kind::Put, &k, &vec![round as u8; rng.gen_range(1..80)]);
            }
        }
        h.rotate();
        h.make_durable();
        // Whatever compactions are pending or half done are lost with the process. The
        // committed trunk (which may predate installs not yet committed) names every
        // unfinished batch, its branches carrying the batch number, and every leaf over its
        // slot limit: those come back as tasks. A leaf over a limit only its branches'
        // contents tell (size, dead share) is found again when a flush next reaches it.
        h.reopen();
        let st = h.index.state.lock();
        let (mut tagged, mut over) = (BTreeSet::new(), Vec::new());
        fn walk(n: &Node, l: &Limits, tagged: &mut BTreeSet<u64>, over: &mut Vec<u64>) {
            tagged.extend(n.branches.iter().map(|r| r.batch).filter(|&b| b != 0));
            if n.is_leaf() && n.leaf_slots() > l.leaf_branches {
                over.push(n.id);
            }
            for c in &n.children {
                walk(&c.node, l, tagged, over);
            }
        }
        walk(&st.root, &h.index.limits, &mut tagged, &mut over);
        let rederived: BTreeSet<u64> = st
            .tasks
            .values()
            .filter_map(|t| match t.kind {
                TaskKind::Batch { batch, .. } => Some(batch),
                _ => None,
            })
            .collect();
        assert_eq!(
            rederived, tagged,
            "seed {seed}: batch tasks after the reopen against the batches its trunk holds"
        );
        batches_rederived += rederived.len();
        for leaf in over {
            assert!(
                st.full_scheduled.contains(&leaf),
                "seed {seed}: leaf {leaf} is over its slot limit and has no task after the reopen"
            );
        }
        drop(st);
        h.assert_matches_model(&format!("seed {seed} after reopen {round}"));
        h.index.check().expect("check after reopen");
    }
    assert!(
        batches_rederived > 0,
        "seed {seed}: no reopen found a batch to re-derive; the test exercised nothing"
    );
    h.drain();
    h.assert_matches_model(&format!("seed {seed} drained"));
    let (used, reachable) = h.pages();
    assert_eq!(
        used, reachable,
        "seed {seed}: pages allocated but unreachable at rest"
    );
}

#[test]
fn sequential_loads_move_data_down_without_rewriting_it() {
    let mut seq_h = Harness::new(small_params(4), 32 << 10);
    for i in 0..60_000u64 {
        seq_h.write(Kind::Put, format!("q{i:09}").as_bytes(), &[7u8; 40]);
    }
    seq_h.rotate();
    seq_h.drain();
    seq_h.assert_matches_model("sequential");
    let seq_s = seq_h.index.stats();
    let mut rnd_h = Harness::new(small_params(4), 32 << 10);
    for i in 0..60_000u64 {
        rnd_h.write(Kind::Put, &key(i), &[7u8; 40]);
    }
    rnd_h.rotate();
    rnd_h.drain();
    let rnd_s = rnd_h.index.stats();
    let ratio = |s: &IndexStats| {
        s.counters["bytes_compacted"] as f64 / s.counters["bytes_incorporated"] as f64
    };
    eprintln!(
        "compacted / incorporated: sequential {:.2} ({} trivial flushes), random {:.2}",
        ratio(&seq_s),
        seq_s.counters["trivial_flushes"],
        ratio(&rnd_s)
    );
    assert!(
        seq_s.counters["trivial_flushes"] > 10,
        "{:?}",
        seq_s.counters
    );
    assert!(
        ratio(&seq_s) < 0.3,
        "sequential data was rewritten: {:?}",
        seq_s.counters
    );
    assert!(ratio(&rnd_s) > 1.0, "{:?}", rnd_s.counters);
}

/// The bench's `fillmixed` keys: record `i` as 8 big-endian bytes, padded to 24 with '0'.
fn record_key(i: u64) -> Vec<u8> {
    let mut k = i.to_be_bytes().to_vec();
    k.resize(24, b'0');
    k
}

/// Loads records `0..n` as the bench's `fillmixed` does: `percent`% of the inserts extend an
/// ascending run from record 0, evenly interleaved with the others (records above the run) in
/// random order. Returns the drained harness and the user bytes written.
fn load_mixed(n: u64, percent: u64, rng: &mut SmallRng) -> (Harness, u64) {
    let mut h = Harness::new(small_params(8), 256 << 10);
    h.step = 64 << 10;
    h.check_steps = false;
    let seq_n = n * percent / 100;
    let mut random: Vec<u64> = (seq_n..n).collect();
    for i in (1..random.len()).rev() {
        random.swap(i, rng.gen_range(0..=i));
    }
    let (mut next_seq, mut random) = (0u64, random.into_iter());
    let value = [5u8; 100];
    for t in 0..n {
        let sequential = (t + 1) * seq_n / n > t * seq_n / n;
        let i = if sequential {
            next_seq += 1;
            next_seq - 1
        } else {
            random.next().expect("a random record left")
        };
        h.write(Kind::Put, &record_key(i), &value);
    }
    h.rotate();
    h.drain();
    (h, n * (24 + 100))
}

/// Issue 25 item 3: in a load mostly sequential, the random inserts used to spread every
/// memtable's branch over the whole key space, so every flush made a batch that compacted the
/// sequential part with them at every level, and write amplification stayed that of a random
/// load (2.3 to 2.5 in the bench from 0% to 99% sequential). The memtable is now built as a
/// branch per sequential run plus the rest; a run's branch overlaps nothing else in the
/// batches it travels in and moves down by reference. Prints the bytes written by what wrote
/// them and by sequential and random keys (a branch's share below the run's end, from its size
/// sample).
#[test]
fn mixed_loads_move_their_sequential_runs_down_by_reference() {
    let seed = seed("mixed_loads_move_their_sequential_runs_down_by_reference");
    let scale: u64 = std::env::var("WOODS_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let n = 100_000 * scale.max(1);
    let mut wa = Vec::new();
    for percent in [0u64, 90, 99] {
        let mut rng = SmallRng::seed_from_u64(seed ^ percent);
        let (h, user) = load_mixed(n, percent, &mut rng);
        h.assert_matches_model(&format!("seed {seed}, {percent}% sequential"));
        h.check_structure();
        h.index.check().expect("check");
        let s = h.index.stats();
        let written = s.counters["bytes_incorporated"] + s.counters["bytes_compacted"];
        let boundary = record_key(n * percent / 100);
        let mut by: BTreeMap<Written, (f64, f64)> = BTreeMap::new();
        for (w, bytes, sample) in h.index.written.lock().iter() {
            let total = sample.total().max(1) as f64;
            let below = sample.below(Some(&boundary)) as f64 / total;
            let e = by.entry(*w).or_default();
            e.0 += *bytes as f64 * below / user as f64;
            e.1 += *bytes as f64 * (1.0 - below) / user as f64;
        }
        let shown: Vec<String> = by
            .iter()
            .map(|(w, (q, r))| format!("{w:?} {q:.2} seq + {r:.2} random"))
            .collect();
        eprintln!(
            "{percent}% sequential: WA {:.2} ({}), pieces {}, moved {:.2}; {}",
            written as f64 / user as f64,
            shown.join(", "),
            s.counters["pieces"],
            s.counters["units_moved"] as f64 / user as f64,
            s.counters
                .iter()
                .filter(|(k, _)| k.contains("flushes") || k.contains("compactions"))
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let rewritten_seq: f64 = by
            .iter()
            .filter(|(w, _)| **w != Written::Incorporation)
            .map(|(_, (q, _))| q)
            .sum();
        // 0.00 over 30 seeds. (It was 0.10 to 0.20 in one seed of ten while a random key
        // written just before a run's last one took that key into the random piece, which
        // then overlapped every later run: WOODS_SEED=1795826292579248106; `runs.rs` now
        // ends the run after its last key.) The bound leaves room for the last, partial
        // memtable, whose run may be too small to be cut out.
        assert!(
            rewritten_seq < 0.05,
            "seed {seed}, {percent}% sequential: sequential keys rewritten ({rewritten_seq:.2} \
             of the user bytes)"
        );
        wa.push(written as f64 / user as f64);
    }
    // The floor is the memtables' own write (1.18 here: the run format's bytes per entry and
    // a piece's filter and index pages), which the 0.4 at 99% does not allow for.
    assert!(
        wa[1] <= 0.7 * wa[0] && wa[2] <= 0.6 * wa[0],
        "seed {seed}: WA at 0%, 90%, 99% sequential: {wa:?}"
    );
}

#[test]
fn deletes_shrink_and_merge_the_tree() {
    let seed = seed("deletes_shrink_and_merge_the_tree");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut h = Harness::new(small_params(4), 16 << 10);
    let n = 20_000u64;
    for i in 0..n {
        h.write(Kind::Put, &key(i), &[1u8; 50]);
    }
    h.rotate();
    h.drain();
    let before = h.index.stats();
    let mut order: Vec<u64> = (0..n).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    for &i in order.iter().take((n * 95 / 100) as usize) {
        h.write(Kind::Delete, &key(i), b"");
    }
    h.rotate();
    h.drain();
    h.assert_matches_model(&format!("seed {seed}"));
    h.index.check().expect("check");
    let after = h.index.stats();
    eprintln!(
        "seed {seed}: before {} trunk nodes, after {}; counters {:?}",
        before.counters["trunk_nodes"], after.counters["trunk_nodes"], after.counters
    );
    assert!(after.counters["merges"] > 0, "seed {seed}: no merges");
    assert!(after.counters["trunk_nodes"] < before.counters["trunk_nodes"]);
    let (used, reachable) = h.pages();
    assert_eq!(used, reachable, "seed {seed}: leaked pages");
}

#[test]
fn damaged_metadata_is_an_error_never_a_panic() {
    let mut h = Harness::new(small_params(3), 16 << 10);
    for i in 0..20_000u64 {
        h.write(Kind::Put, &key(i % 3_000), &[3u8; 30]);
    }
    h.rotate();
    let v = h.index.version();
    let good = meta::encode(&v.root, v.ids, h.index.next_branch.load(Ordering::Relaxed));
    // Each decode gets a store of its own: its branches release their extents there.
    let decode = |b: &[u8]| meta::decode(b, &scratch_store()).map(|_| ());
    assert!(decode(&good).is_ok());
    for cut in [0, 1, good.len() / 2, good.len() - 1] {
        assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
    }
    let mut bad = good.clone();
    bad.push(0);
    assert!(decode(&bad).is_err(), "trailing byte");
    let mut rng = SmallRng::seed_from_u64(seed("damaged_metadata"));
    let mut refused = 0;
    for _ in 0..3_000 {
        let mut b = good.clone();
        let at = rng.gen_range(0..b.len());
        b[at] ^= 1 << rng.gen_range(0..8);
        if decode(&b).is_err() {
            refused += 1;
        }
    }
    assert!(refused > 1_000, "only {refused} damaged copies refused");
}

/// Every key's value in version `v` (a full scan of the index alone).
fn contents(v: &Arc<Version>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let op: Arc<dyn MergeOperator> = Arc::new(Append);
    let it = read::StbeIter::new(v.clone(), Bound::Unbounded, Bound::Unbounded, false, None);
    Resolver::new(Box::new(it), u64::MAX >> 8, Some(op), false)
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).expect("scan"))
        .collect()
}

#[test]
fn every_install_keeps_every_answer_and_settles_within_the_limits() {
    let seed = seed("every_install_keeps_every_answer_and_settles_within_the_limits");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut h = Harness::new(small_params(3), 16 << 10);
    for i in 0..25_000u64 {
        let k = key(rng.gen_range(0..2_500));
        match rng.gen_range(0..10) {
            0 => h.write(Kind::Delete, &k, b""),
            1 | 2 => h.write(Kind::Merge, &k, format!("+{i}").as_bytes()),
            _ => h.write(Kind::Put, &k, &vec![rng.gen(); rng.gen_range(0..40)]),
        }
    }
    h.rotate();
    // No writes from here on: a compaction (batch, whole leaf, merge), a flush, a split must
    // never change what any key reads.
    let want: Vec<(Vec<u8>, Vec<u8>)> = h
        .model
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut last = h.index.version();
    assert!(contents(&last) == want, "seed {seed}: before compacting");
    let mut changes = 0;
    for _ in 0..1_000_000 {
        if !h.index.background_work() {
            break;
        }
        h.index.work(4096).expect("work");
        let v = h.index.version();
        if v.gen != last.gen {
            changes += 1;
            assert!(
                contents(&v) == want,
                "seed {seed}: version {} reads differently",
                v.gen
            );
            last = v;
        }
    }
    assert!(changes > 2, "seed {seed}: only {changes} versions");
    // Settled: no node holds more than 3F branches live for a child, nor more than F + H
    // children, nor more than the cap of references.
    let l = *h.index.limits();
    fn walk(n: &Node, l: &Limits) {
        assert!(n.branches.len() <= l.max_branches);
        assert!(n.children.len() <= l.max_children);
        for i in 0..n.children.len() {
            assert!(n.live_for(i).count() <= l.flush_branches, "node {}", n.id);
            walk(&n.children[i].node, l);
        }
    }
    walk(&last.root, &l);
    h.index.check().expect("check");
}

/// A memtable's incorporation whose step fails (a page write of its branch) is not resumed:
/// a later call of `work` (as another thread's would be, before the Db turns read-only) builds
/// the memtable again from its start, and nothing is lost. (Before, every later call failed:
/// the run builder refuses to go on after a failure, so the memtable was never incorporated.)
#[test]
fn work_after_a_failed_incorporation_step_loses_none_of_its_entries() {
    use crate::storage::FaultPlan;

    let mut h = Harness::new(small_params(4), 1 << 30);
    for i in 0..4_000 {
        let v = format!("value {i}").repeat(4);
        h.write(Kind::Put, &key(i), v.as_bytes());
    }
    let mem = std::mem::replace(&mut h.mem, Arc::new(Memtable::new(0)));
    h.index.absorb(mem).expect("absorb");
    h.index.work(4096).expect("a first step");
    // The next page write fails.
    h.fs.set_plan(FaultPlan {
        fail_op: Some(0),
        sticky: false,
    });
    let mut failed = false;
    for _ in 0..10_000 {
        if h.index.work(4096).is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "the injected fault went unreported");
    assert_eq!(h.fs.injected(), 1);
    h.make_durable();
    h.assert_matches_model("after the failed step");
    h.reopen();
    h.assert_matches_model("reopened after the failed step");
}

/// Found by the `index_meta` fuzz target: metadata refused part-way (here by a reference-count
/// check, after its branches were made) dropped those branches, and each returned its extents
/// to the allocator, which may punch freed pages out of the data file: refusing corrupt
/// metadata freed pages that could hold data (and an extent at a huge page number overflowed
/// the punch offset). A branch now frees its pages only once the metadata passed every check.
#[test]
fn refused_metadata_frees_no_page() {
    let store = crate::testutil::fault_ctx(&FaultFs::new(), 64 << 10).store;
    let meta: [u8; 42] = [
        0x1, 0x8, 0x1, 0x8, 0x1, 0x3, 0x1, 0x1, 0x3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x8, 0x8, 0x0, 0x1, 0x1, 0x60, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x2, 0x1, 0xef,
        0xdc, 0x1, 0xa, 0xd2, 0x1, 0x1, 0x1, 0x0, 0x0,
    ];
    let free_before = store.alloc().free_pages();
    assert!(super::meta::decode(&meta, &store).is_err());
    assert_eq!(
        store.alloc().free_pages(),
        free_before,
        "refused metadata returned pages to the allocator"
    );
}

/// Loads random keys, then runs short forward and reverse scans from random keys with work
/// between them; returns the mean branches on the scanned paths before and after, the harness
/// and the keys the scans started from.
fn scan_after_load(seed: u64, credit: u64) -> (f64, f64, Harness, Vec<Vec<u8>>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let params = StbeParams {
        fanout: 4,
        scan_credit_bytes: credit,
        ..StbeParams::default()
    };
    let mut h = Harness::new(params, 16 << 10);
    h.step = 64 << 10;
    h.check_steps = false;
    let keys = 20_000u64;
    for i in 0..60_000u64 {
        let k = key(rng.gen_range(0..keys));
        if i % 10 == 9 {
            h.write(Kind::Delete, &k, b"");
        } else {
            h.write(Kind::Put, &k, format!("value {i}").as_bytes());
        }
    }
    h.rotate();
    h.drain();
    let probes: Vec<Vec<u8>> = (0..400).map(|_| key(rng.gen_range(0..keys))).collect();
    // A scan starting at a key reads, in the leaf holding it, the branches a lookup of the key
    // would probe.
    let mean = |v: &Version| {
        let on_path = |k: &Vec<u8>| read::OnPath::new(&v.root, k).count();
        probes.iter().map(on_path).sum::<usize>() as f64 / probes.len() as f64
    };
    let before = mean(&h.index.version());
    short_scans(&mut h, &probes, 20);
    let after = mean(&h.index.version());
    (before, after, h, probes)
}

/// `rounds` rounds of scans of 10 entries from each of `probes`, one in four reversed, with the
/// work they cause done between rounds.
fn short_scans(h: &mut Harness, probes: &[Vec<u8>], rounds: usize) {
    for round in 0..rounds {
        for (j, k) in probes.iter().enumerate() {
            let reverse = (round + j) % 4 == 0;
            let (lo, hi) = if reverse {
                (Bound::Unbounded, Bound::Included(k.clone()))
            } else {
                (Bound::Included(k.clone()), Bound::Unbounded)
            };
            let mut it = h.index.iter(lo, hi, reverse).expect("iter");
            for e in it[0].by_ref().take(10) {
                e.expect("scan");
            }
        }
        h.drain();
        h.check_structure();
    }
}

#[test]
fn scans_compact_the_paths_they_read_and_lose_nothing() {
    let seed = seed("scans_compact_the_paths_they_read_and_lose_nothing");
    let (before, after, mut h, probes) = scan_after_load(seed, 256 << 10);
    let s = h.index.stats();
    eprintln!(
        "seed {seed}: branches a scanned path {before:.2} -> {after:.2}, counters {:?}",
        s.counters
    );
    assert!(
        before >= 3.0,
        "seed {seed}: the load left {before:.2} branches a path: nothing to test"
    );
    for c in ["scan_flushes", "scan_wholes", "scan_edits"] {
        assert!(s.counters[c] > 0, "seed {seed}: no {c}");
    }
    // Every scanned leaf was made due (a few dozen extra reads each); what is left on a path
    // is its leaf's compaction output and what the cascade flushed since.
    assert!(
        after <= 1.5,
        "seed {seed}: {after:.2} branches a scanned path after the scans ({before:.2} before)"
    );
    h.assert_matches_model(&format!("seed {seed} after the scans"));
    h.index.check().expect("check");

    // A memtable of a few entries, flushed early, puts a small branch on every path: the same
    // scans read it from the cache, and no leaf is rewritten for it.
    for i in 0..20 {
        h.write(Kind::Put, &key(i * 997), b"late");
    }
    h.rotate();
    h.drain();
    let due = |h: &Harness| {
        let c = h.index.stats().counters;
        c["scan_flushes"] + c["scan_wholes"]
    };
    let was = due(&h);
    short_scans(&mut h, &probes, 5);
    assert_eq!(due(&h), was, "seed {seed}: a small branch made leaves due");
    h.assert_matches_model(&format!("seed {seed} after the late writes"));

    // Off, the same scans change nothing.
    let (before, after, h, _) = scan_after_load(seed, 0);
    let s = h.index.stats();
    assert_eq!(s.counters["scan_flushes"] + s.counters["scan_wholes"], 0);
    assert_eq!(
        before, after,
        "seed {seed}: scans moved branches with the credit off"
    );
    h.assert_matches_model(&format!("seed {seed} off"));
}
