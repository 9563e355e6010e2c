//! Unit tests of the `btree` kind's insertion buffer that look inside it: what one leaf flush
//! takes from the buffer, and that a reopen from the manifest finds the buffer again.

use std::sync::Arc;

use super::buffer::Pos;
use super::buffer_policy::FlushPolicy;
use super::node::{decode_internal, node_type, INTERNAL};
use super::tree::child_for;
use super::BTree;
use crate::entry::{Entry, Kind};
use crate::index::Index;
use crate::memtable::Memtable;
use crate::merge::resolve;
use crate::options::{BTreeParams, InsertBuffer};
use crate::storage::{FaultFs, Purpose};
use crate::testutil::{fault_ctx, reopen_fault_ctx, seed};

fn params(policy: FlushPolicy, capacity_bytes: u64) -> BTreeParams {
    BTreeParams {
        insert_buffer: Some(InsertBuffer {
            policy,
            capacity_bytes,
        }),
        ..BTreeParams::default()
    }
}

fn splitmix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn key(i: u64) -> String {
    format!("key{i:08}")
}

/// A memtable of `n` puts of random keys below `keys`, sequence numbers from `*seq + 1`;
/// `model` learns each key's newest value.
fn memtable(n: u64, keys: u64, rng: &mut u64, seq: &mut u64, model: &mut Model) -> Arc<Memtable> {
    let mem = Memtable::new(0);
    for _ in 0..n {
        *seq += 1;
        let k = key(splitmix(rng) % keys);
        let v = format!("value {seq} of {k}");
        mem.insert(k.as_bytes(), *seq, Kind::Put, v.as_bytes());
        model.insert(k, v);
    }
    Arc::new(mem)
}

type Model = std::collections::BTreeMap<String, String>;

/// A tree with an insertion buffer of `capacity` bytes under `policy`, on a fresh in-memory
/// file system, after `rounds` memtables of `n` puts of random keys below `keys`, each worked
/// off. Returns the file system, the tree, the last sequence number and the model.
fn loaded(
    policy: FlushPolicy,
    capacity: u64,
    rng: &mut u64,
    (rounds, n, keys): (u32, u64, u64),
) -> (FaultFs, BTree, u64, Model) {
    let fs = FaultFs::new();
    let ctx = fault_ctx(&fs, 64 << 10);
    let tree = BTree::open(ctx, params(policy, capacity), &[], 0).expect("open");
    let (mut seq, mut model) = (0, Model::new());
    for _ in 0..rounds {
        tree.absorb(memtable(n, keys, rng, &mut seq, &mut model))
            .expect("absorb");
        while tree.debt() > 0 {
            tree.work(16 << 10).expect("work");
        }
    }
    (fs, tree, seq, model)
}

/// The (key, sequence number) of every entry in the tree's buffer, in its order.
fn buffered(tree: &BTree) -> Vec<(Arc<[u8]>, u64)> {
    tree.version()
        .buffer
        .entries
        .iter()
        .map(|e| (e.key.clone(), e.seq))
        .collect()
}

/// The leaf page of the tree at (`root`, `height`) whose range holds `e`, found by descending
/// the tree (independently of the buffer's bins).
fn leaf_of(tree: &BTree, root: u64, height: u32, e: &Entry) -> u64 {
    let mut page = root;
    for _ in 1..height {
        let body = tree.ctx.store.read(page, Purpose::Merge).expect("read");
        assert_eq!(node_type(&body, page).expect("type"), INTERNAL);
        let kids = decode_internal(&body, page).expect("internal");
        page = kids[child_for(&kids, &e.key, e.seq)].page;
    }
    page
}

fn holds(tree: &BTree, model: &Model, seq: u64) {
    for (k, v) in model {
        let mut out = Vec::new();
        tree.get(k.as_bytes(), seq, &mut out).expect("get");
        let got = resolve(k.as_bytes(), &out, seq, None).expect("resolve");
        assert_eq!(got.as_deref(), Some(v.as_bytes()), "key {k}");
    }
}

/// One flush takes exactly the buffered entries of one leaf of the tree, all of them, and
/// nothing else; after its commit the tree holds them and the buffer does not.
#[test]
fn one_flush_removes_exactly_one_leafs_entries() {
    for policy in FlushPolicy::ALL {
        let s = seed();
        let (_fs, tree, seq, model) = loaded(policy, 48 << 10, &mut { s }, (12, 700, 20_000));
        let v = tree.version();
        assert!(
            v.height >= 2,
            "{policy:?} seed {s}: the tree wants several leaves"
        );
        let before: Vec<Entry> = v.buffer.entries.clone();
        assert!(before.len() > 100, "{policy:?}: buffer of {}", before.len());
        // A capacity one unit below what the buffer holds: the drain flushes one leaf.
        let job = tree
            .plan_drain(&v, v.buffer.units - 1)
            .expect("plan a drain");
        let drain = tree.buf.lock().last_drain.clone();
        assert_eq!(drain.len(), 1, "{policy:?} seed {s}: one leaf flushed");
        let (bin, count) = drain[0].clone();
        let leaf = leaf_of(
            &tree,
            v.root,
            v.height,
            &Entry {
                key: if bin == Pos::min() {
                    before[0].key.clone()
                } else {
                    bin.key.clone()
                },
                seq: if bin == Pos::min() {
                    before[0].seq
                } else {
                    bin.seq
                },
                kind: Kind::Put,
                value: Arc::from(&[][..]),
            },
        );
        let of_leaf: Vec<bool> = before
            .iter()
            .map(|e| leaf_of(&tree, v.root, v.height, e) == leaf)
            .collect();
        let in_leaf = of_leaf.iter().filter(|x| **x).count() as u64;
        assert!(in_leaf > 0);
        assert_eq!(
            count, in_leaf,
            "{policy:?} seed {s}: entries flushed from the leaf"
        );
        let flushed = &job.drain.as_ref().expect("a drain").flushed;
        assert_eq!(
            flushed, &of_leaf,
            "{policy:?} seed {s}: which entries were flushed"
        );
        // Run the job to its commit.
        *tree.job.lock() = Some(job);
        let mut calls = 0;
        while tree.job.lock().is_some() {
            tree.work(4 << 10).expect("work");
            calls += 1;
            assert!(calls < 10_000);
        }
        let kept = buffered(&tree);
        let want: Vec<(Arc<[u8]>, u64)> = before
            .iter()
            .zip(&of_leaf)
            .filter(|(_, f)| !**f)
            .map(|(e, _)| (e.key.clone(), e.seq))
            .collect();
        assert_eq!(
            kept, want,
            "{policy:?} seed {s}: the buffer after the flush"
        );
        holds(&tree, &model, seq);
        tree.check().expect("check");
    }
}

/// The buffer is durable through the manifest: a reopen from what the manifest holds (a
/// crash) finds every absorbed entry, in the buffer or the tree, and the same buffer.
#[test]
fn the_buffer_survives_a_reopen_from_the_manifest() {
    for policy in FlushPolicy::ALL {
        let s = seed();
        let (fs, tree, seq, model) = loaded(policy, 40 << 10, &mut { s }, (30, 400, 5_000));
        let before = buffered(&tree);
        assert!(!before.is_empty());
        assert_eq!(tree.durable_seq(), seq);
        drop(tree);
        let (ctx, state) = reopen_fault_ctx(&fs, 64 << 10);
        let tree = BTree::open(
            ctx,
            params(policy, 40 << 10),
            &state.index_meta,
            state.durable_seq,
        )
        .expect("reopen");
        assert_eq!(
            buffered(&tree),
            before,
            "{policy:?} seed {s}: the buffer after a reopen"
        );
        holds(&tree, &model, seq);
        tree.check().expect("check");
    }
}
