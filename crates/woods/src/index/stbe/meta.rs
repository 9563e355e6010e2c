//! The persisted trunk: the manifest's `index_meta` of an `stbe` index (byte layout in
//! `docs/format.md`). Every commit replaces it whole: id counters, the branch table (id,
//! reference count, run metadata), then the trunk nodes in preorder with their ranges, branch
//! references (with pending batch ids), start indexes and children.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::branch::{Branch, Key};
use super::edit::Ids;
use super::node::{BranchRef, Child, Node};
use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::run::RunMeta;
use crate::storage::PageFile;

/// Version byte of the encoded metadata.
const META_VERSION: u8 = 1;
/// Deepest trunk a decoder accepts (a guard against damaged metadata, not a design limit:
/// a trunk of fanout 2 this deep would hold 2^64 leaves).
const MAX_HEIGHT: u32 = 64;

/// What the metadata holds.
pub struct Decoded {
    pub root: Arc<Node>,
    pub ids: Ids,
    pub next_branch: u64,
}

fn collect<'a>(n: &'a Node, refs: &mut HashMap<u64, (&'a Arc<Branch>, u64)>, order: &mut Vec<u64>) {
    for r in &n.branches {
        let e = refs.entry(r.branch.id).or_insert_with(|| {
            order.push(r.branch.id);
            (&r.branch, 0)
        });
        e.1 += 1;
    }
    for c in &n.children {
        collect(&c.node, refs, order);
    }
}

fn encode_node(n: &Node, out: &mut Vec<u8>) {
    codec::put_varint(out, n.id);
    codec::put_varint(out, u64::from(n.height));
    codec::put_bytes(out, &n.lo);
    match &n.hi {
        Some(h) => {
            out.push(1);
            codec::put_bytes(out, h);
        }
        None => out.push(0),
    }
    codec::put_varint(out, n.base);
    codec::put_varint(out, n.dead);
    codec::put_varint(out, n.branches.len() as u64);
    for r in &n.branches {
        codec::put_varint(out, r.branch.id);
        codec::put_varint(out, r.batch);
    }
    codec::put_varint(out, n.children.len() as u64);
    for c in &n.children {
        codec::put_varint(out, c.start);
        encode_node(&c.node, out);
    }
}

/// Encodes the trunk rooted at `root`.
pub fn encode(root: &Node, ids: Ids, next_branch: u64) -> Vec<u8> {
    let mut out = vec![META_VERSION];
    codec::put_varint(&mut out, ids.node);
    codec::put_varint(&mut out, ids.batch);
    codec::put_varint(&mut out, next_branch);
    let mut refs = HashMap::new();
    let mut order = Vec::new();
    collect(root, &mut refs, &mut order);
    codec::put_varint(&mut out, order.len() as u64);
    for id in order {
        let (b, count) = refs[&id];
        codec::put_varint(&mut out, id);
        codec::put_varint(&mut out, count);
        b.meta().encode(&mut out);
    }
    encode_node(root, &mut out);
    out
}

fn bad(detail: String) -> Error {
    Error::corruption("stbe metadata", None, detail)
}

struct DecodeCtx<'a> {
    branches: &'a HashMap<u64, Arc<Branch>>,
    counted: HashMap<u64, u64>,
    node_ids: HashSet<u64>,
    ids: Ids,
}

fn decode_node(
    r: &mut Reader,
    d: &mut DecodeCtx,
    lo_want: &[u8],
    height_want: Option<u32>,
    depth: u32,
) -> Result<Node> {
    let id = r.varint()?;
    let height = u32::try_from(r.varint()?).map_err(|_| bad("height out of range".into()))?;
    if id >= d.ids.node || !d.node_ids.insert(id) {
        return Err(bad(format!(
            "node id {id} repeated or not below {}",
            d.ids.node
        )));
    }
    if height > MAX_HEIGHT || depth > MAX_HEIGHT || height_want.is_some_and(|h| h != height) {
        return Err(bad(format!("node {id} at height {height} out of place")));
    }
    let lo: Key = Key::from(r.bytes()?);
    let hi: Option<Key> = match r.u8()? {
        0 => None,
        1 => Some(Key::from(r.bytes()?)),
        t => return Err(bad(format!("node {id}: bad bound tag {t}"))),
    };
    if lo.as_ref() != lo_want {
        return Err(bad(format!(
            "node {id}: range does not match its parent's pivots"
        )));
    }
    if hi.as_ref().is_some_and(|h| h.as_ref() <= lo.as_ref()) {
        return Err(bad(format!("node {id}: empty range")));
    }
    let mut n = Node::new(id, height, lo, hi);
    n.base = r.varint()?;
    n.dead = r.varint()?;
    let nrefs = r.varint()?;
    if nrefs > r.remaining() as u64 / 2 {
        return Err(bad(format!(
            "node {id}: {nrefs} references in {} bytes",
            r.remaining()
        )));
    }
    for _ in 0..nrefs {
        let bid = r.varint()?;
        let batch = r.varint()?;
        let branch = d
            .branches
            .get(&bid)
            .ok_or_else(|| bad(format!("node {id} references unknown branch {bid}")))?;
        if batch >= d.ids.batch {
            return Err(bad(format!(
                "node {id}: batch {batch} not below {}",
                d.ids.batch
            )));
        }
        *d.counted.entry(bid).or_insert(0) += 1;
        n.branches.push(BranchRef {
            branch: branch.clone(),
            batch,
        });
    }
    n.base
        .checked_add(n.branches.len() as u64)
        .ok_or_else(|| bad(format!("node {id}: branch numbers overflow")))?;
    let nchildren = r.varint()?;
    if height == 0 && nchildren != 0 {
        return Err(bad(format!("leaf {id} has children")));
    }
    if height > 0 && nchildren == 0 {
        return Err(bad(format!("internal node {id} has no children")));
    }
    if nchildren > r.remaining() as u64 / 4 {
        return Err(bad(format!(
            "node {id}: {nchildren} children in {} bytes",
            r.remaining()
        )));
    }
    let mut child_lo: Key = n.lo.clone();
    for i in 0..nchildren {
        let start = r.varint()?;
        if start < n.base || start > n.end() {
            return Err(bad(format!(
                "node {id}: child start {start} outside {}..={}",
                n.base,
                n.end()
            )));
        }
        // Each child starts where the previous one ends; the last ends with the node.
        let child = decode_node(r, d, &child_lo, Some(height - 1), depth + 1)?;
        if i + 1 == nchildren && child.hi != n.hi {
            return Err(bad(format!(
                "node {id}: last child does not end with the node"
            )));
        }
        if let Some(h) = &child.hi {
            child_lo = h.clone();
        } else if i + 1 != nchildren {
            return Err(bad(format!(
                "node {id}: an unbounded child is not the last"
            )));
        }
        n.children.push(Child {
            node: Arc::new(child),
            start,
        });
    }
    Ok(n)
}

/// Decodes metadata written by [`encode`]; branches are opened lazily.
pub fn decode(buf: &[u8], store: &Arc<PageFile>) -> Result<Decoded> {
    let mut r = Reader::new(buf, "stbe metadata");
    let v = r.u8()?;
    if v != META_VERSION {
        return Err(bad(format!("unknown version {v}")));
    }
    let ids = Ids {
        node: r.varint()?,
        batch: r.varint()?,
    };
    let next_branch = r.varint()?;
    let nb = r.varint()?;
    if nb > r.remaining() as u64 / 4 {
        return Err(bad(format!("{nb} branches in {} bytes", r.remaining())));
    }
    let mut branches: HashMap<u64, Arc<Branch>> = HashMap::with_capacity(nb as usize);
    let mut refcounts: HashMap<u64, u64> = HashMap::with_capacity(nb as usize);
    let mut metas: Vec<(u64, RunMeta)> = Vec::with_capacity(nb as usize);
    let mut extents: Vec<(crate::storage::Extent, u64)> = Vec::new();
    for _ in 0..nb {
        let id = r.varint()?;
        let refs = r.varint()?;
        let meta = RunMeta::decode(&mut r)?;
        if id >= next_branch || refcounts.contains_key(&id) {
            return Err(bad(format!(
                "branch id {id} repeated or not below {next_branch}"
            )));
        }
        extents.extend(meta.extents.iter().map(|e| (*e, id)));
        metas.push((id, meta));
        refcounts.insert(id, refs);
    }
    if extents
        .iter()
        .any(|(e, _)| e.pages == 0 || e.start.checked_add(e.pages).is_none())
    {
        return Err(bad("an extent is empty or overflows".into()));
    }
    // Distinct branches never share a page (a branch releases its extents when dropped).
    extents.sort();
    for w in extents.windows(2) {
        if w[0].0.pages == 0 || w[0].0.end() > w[1].0.start {
            return Err(bad(format!(
                "branches {} and {} share pages or hold an empty extent",
                w[0].1, w[1].1
            )));
        }
    }
    for (id, meta) in metas {
        branches.insert(id, Arc::new(Branch::from_meta(id, meta, store.clone())));
    }
    let mut d = DecodeCtx {
        branches: &branches,
        counted: HashMap::new(),
        node_ids: HashSet::new(),
        ids,
    };
    let root = decode_node(&mut r, &mut d, b"", None, 0)?;
    if root.height == 0 || root.hi.is_some() {
        return Err(bad("the root is a leaf or does not cover every key".into()));
    }
    if !r.is_empty() {
        return Err(bad(format!("{} trailing bytes", r.remaining())));
    }
    for (id, want) in &refcounts {
        let got = d.counted.get(id).copied().unwrap_or(0);
        if got != *want || got == 0 {
            return Err(bad(format!(
                "branch {id}: reference count {want} recorded, {got} references found"
            )));
        }
    }
    // Every check passed: the branches are the trunk's, and free their pages when dropped.
    for b in branches.values() {
        b.own();
    }
    Ok(Decoded {
        root: Arc::new(root),
        ids,
        next_branch,
    })
}
