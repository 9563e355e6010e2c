//! Entry points for the fuzz targets under `fuzz/` (not part of the API: hidden, unstable).
//!
//! Every decoder of bytes read from disk is reachable here as a thin wrapper, so that the
//! decoders themselves stay crate-private. Each wrapper only calls the decoder (and, where one
//! exists, its encoder); the properties are asserted by the targets.

use std::path::Path;
use std::sync::Arc;

use crate::cache::Cache;
use crate::entry::codec::Reader;
use crate::error::Result;
use crate::index::btree::node;
use crate::run::format::Node;
use crate::storage::{
    AlignedBuf, Allocator, FaultFs, Fs, IoCounters, OpenMode, PageFile, PAGE_BODY, PAGE_SIZE,
};

pub use crate::filter::Filter;
pub use crate::run::RunMeta;

/// `bytes` as one page body (cut or zero-padded to [`PAGE_BODY`]).
fn page_body(bytes: &[u8]) -> Vec<u8> {
    let mut body = vec![0u8; PAGE_BODY];
    let n = bytes.len().min(PAGE_BODY);
    body[..n].copy_from_slice(&bytes[..n]);
    body
}

/// `bytes` as one whole page (cut or zero-padded to [`PAGE_SIZE`]).
fn page(bytes: &[u8]) -> AlignedBuf {
    let mut buf = AlignedBuf::zeroed(PAGE_SIZE);
    let n = bytes.len().min(PAGE_SIZE);
    buf[..n].copy_from_slice(&bytes[..n]);
    buf
}

/// Decodes `bytes` as a B-tree leaf; on success returns the leaf re-encoded (a page body).
pub fn btree_leaf(bytes: &[u8]) -> Result<Vec<u8>> {
    let entries = node::decode_leaf(&page_body(bytes), 7)?;
    let mut body = vec![0u8; PAGE_BODY];
    node::encode_leaf(&entries, &mut body);
    Ok(body)
}

/// Decodes `bytes` as a B-tree internal node; returns how many children it names.
pub fn btree_internal(bytes: &[u8]) -> Result<usize> {
    let body = page_body(bytes);
    node::node_type(&body, 7)?;
    Ok(node::decode_internal(&body, 7)?.len())
}

/// Reads `bytes` as a B-tree node (of the type its first byte names) in place, as a lookup
/// does: scans its items, reads each (a leaf entry's kind too) and searches it for a position
/// made of the input's first bytes. Returns the item count, and the count the whole-node
/// decoder finds (the two must agree: the in-place reads refuse exactly what the decoder does).
pub fn btree_node_in_place(bytes: &[u8]) -> (Result<usize>, Result<usize>) {
    let body = page_body(bytes);
    let leaf = body[0] != node::INTERNAL;
    let decoded = if leaf {
        node::decode_leaf(&body, 7).map(|l| l.len())
    } else {
        node::decode_internal(&body, 7).map(|c| c.len())
    };
    let mut offs = node::Offsets::default();
    let in_place = offs
        .scan(&body, 7, if leaf { node::LEAF } else { node::INTERNAL })
        .and_then(|view| {
            for i in 0..view.len() {
                let _ = (view.key(i), view.seq(i));
                if leaf {
                    view.kind(i)?;
                    let _ = view.value(i);
                } else {
                    let _ = view.child(i);
                }
            }
            let probe = &bytes[..bytes.len().min(8)];
            let _ = (view.lower_bound(probe, 5), view.upper_bound(probe, 5));
            if !leaf {
                let _ = view.child(view.child_for(probe, 5));
            }
            Ok(view.len())
        });
    (in_place, decoded)
}

/// Parses `bytes` as a run's data (`level == 0`) or index page and decodes every item of it,
/// and a data page's spill (the start of the next page's split entry).
pub fn run_page(bytes: &[u8], level: u8) -> Result<usize> {
    let n = Node::parse(7, Arc::new(page(bytes)), level)?;
    if level == 0 {
        n.spill()?;
    }
    for i in 0..n.count {
        n.key_seq(i)?;
        if level == 0 {
            n.data(i)?;
        } else {
            n.index(i)?;
            n.child(i)?;
        }
    }
    if n.count > 0 {
        n.lower_bound(b"m", 5)?;
    }
    Ok(n.count)
}

/// Decodes `bytes` as a run header page.
pub fn run_header(bytes: &[u8]) -> Result<()> {
    crate::run::decode_header(7, &page(bytes)).map(|_| ())
}

/// Decodes `bytes` as run metadata (as an index's manifest metadata holds it).
pub fn run_meta(bytes: &[u8]) -> Result<RunMeta> {
    RunMeta::decode(&mut Reader::new(bytes, "run metadata"))
}

/// Encodes run metadata.
pub fn run_meta_encode(meta: &RunMeta) -> Vec<u8> {
    let mut out = Vec::new();
    meta.encode(&mut out);
    out
}

/// Reads every record framed in `bytes` as the WAL and manifest frame them; returns the
/// payloads up to the first tear.
pub fn wal_records(bytes: &[u8], max_len: u32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut off = 0;
    while let crate::wal::NextRecord::Record(p, next) = crate::wal::next_record(bytes, off, max_len)
    {
        out.push(p.to_vec());
        off = next;
    }
    out
}

/// Frames one record as the WAL writes it.
pub fn frame_record(payload: &[u8]) -> Vec<u8> {
    crate::wal::frame_record(payload)
}

/// Decodes `bytes` as a write batch payload: its first sequence number and its operations
/// (kind byte, key, value).
#[allow(clippy::type_complexity)]
pub fn batch(bytes: &[u8]) -> Result<(u64, Vec<(u8, Vec<u8>, Vec<u8>)>)> {
    let b = crate::batch::decode(bytes)?;
    Ok((
        b.first_seq,
        b.ops.into_iter().map(|(k, a, v)| (k as u8, a, v)).collect(),
    ))
}

/// Encodes a write batch of `(kind byte, key, value)` operations (puts for kind 0, deletes for
/// 1, merges otherwise) starting at sequence `first_seq`; returns the batch's payload and its
/// operations as [`batch`] reads them back.
#[allow(clippy::type_complexity)]
pub fn batch_encode(
    first_seq: u64,
    ops: &[(u8, Vec<u8>, Vec<u8>)],
) -> (Vec<u8>, Vec<(u8, Vec<u8>, Vec<u8>)>) {
    use crate::entry::Kind;
    let mut b = crate::WriteBatch::new();
    let mut want = Vec::new();
    for (k, key, v) in ops {
        match k % 3 {
            0 => {
                b.put(key, v);
                want.push((Kind::Put as u8, key.clone(), v.clone()));
            }
            1 => {
                b.delete(key);
                want.push((Kind::Delete as u8, key.clone(), Vec::new()));
            }
            _ => {
                b.merge(key, v);
                want.push((Kind::Merge as u8, key.clone(), v.clone()));
            }
        }
    }
    (b.encode(first_seq), want)
}

/// Decodes `bytes` as a filter (Bloom or quotient); returns it.
pub fn filter(bytes: &[u8]) -> Result<Filter> {
    Filter::from_bytes(bytes.to_vec())
}

/// Reads `bytes` as a quotient filter the way a run reads one a page at a time: only the header
/// is checked (against the length, a page's payload of slack), and the blocks are whatever
/// follows. Probes each hash; an answer, or an error for bytes it cannot read, never a panic.
pub fn paged_quotient(bytes: &[u8], hashes: &[u64]) -> Result<Vec<bool>> {
    use crate::filter::quotient::{InMemory, Shape};
    let payload = crate::run::format::PAYLOAD as u64;
    let shape = Shape::parse(bytes, bytes.len() as u64 + payload - 1, payload)?;
    let mut src = InMemory::new(bytes, shape);
    hashes.iter().map(|&h| shape.probe(h, &mut src)).collect()
}

/// Decodes `bytes` as one manifest record payload.
pub fn manifest_record(bytes: &[u8]) -> Result<()> {
    crate::manifest::decode_record(bytes).map(|_| ())
}

/// Loads `bytes` as a whole manifest log, refusing damage (`salvage == false`, as opening a
/// database does) or keeping the state before it (as `woods repair` does).
pub fn manifest_log(bytes: &[u8], salvage: bool) -> Result<()> {
    let on_damage = if salvage {
        crate::manifest::OnDamage::Salvage
    } else {
        crate::manifest::OnDamage::Refuse
    };
    crate::manifest::load_log("MANIFEST-000001", bytes, on_damage).map(|_| ())
}

/// A fault-injecting file system with a directory `/db` holding `files` (name, contents).
pub fn fault_fs_with(files: &[(&str, &[u8])]) -> Result<FaultFs> {
    let fs = FaultFs::new();
    let dir = Path::new("/db");
    fs.create_dir_all(dir)?;
    for (name, data) in files {
        let f = fs.open(
            &dir.join(name),
            OpenMode {
                create: true,
                direct: false,
            },
        )?;
        f.write_all_at(data, 0)?;
        f.sync()?;
    }
    fs.sync_dir(dir)?;
    Ok(fs)
}

/// Opens the manifest of `/db` in `fs` as opening a database does.
pub fn manifest_open(fs: &FaultFs) -> Result<()> {
    crate::manifest::Manifest::open(
        Arc::new(fs.clone()),
        Path::new("/db"),
        Arc::new(IoCounters::default()),
    )
    .map(|_| ())
}

/// Replays the WAL files of `/db` in `fs`; returns how many records each file held.
pub fn wal_replay(fs: &FaultFs) -> Result<usize> {
    let r = crate::wal::replay(fs, Path::new("/db"), &IoCounters::default())?;
    Ok(r.records.len())
}

/// The name of WAL file `number`.
pub fn wal_file_name(number: u64) -> String {
    crate::wal::wal_file_path(Path::new(""), number)
        .to_string_lossy()
        .into_owned()
}

/// Checks `bytes` as the data file's header page and reads the configuration it holds.
pub fn data_header(bytes: &[u8]) -> Result<()> {
    crate::db::header_config(&page(bytes)).map(|_| ())
}

/// A page file over an empty data file in `/db` of a fresh fault-injecting file system: what
/// index metadata decoders are handed (a reference to any page fails to read).
fn empty_store() -> Result<Arc<PageFile>> {
    let fs = fault_fs_with(&[])?;
    let file = fs.open(
        Path::new("/db/data"),
        OpenMode {
            create: true,
            direct: false,
        },
    )?;
    Ok(Arc::new(PageFile::new(
        file,
        Cache::new(1 << 20),
        Allocator::new(1),
        Arc::new(IoCounters::default()),
    )))
}

/// Decodes `bytes` as the index metadata of kind `kind` (0 LSM, 1 nb-tree, 2 STBE; the B-tree's
/// is a page number pair, decoded by its `open`).
pub fn index_meta(kind: u8, bytes: &[u8]) -> Result<()> {
    match kind % 3 {
        0 => crate::index::lsm::version::decode_meta(bytes).map(|_| ()),
        1 => crate::index::nbtree::version::decode_meta(bytes, &empty_store()?).map(|_| ()),
        _ => crate::index::stbe::meta::decode(bytes, &empty_store()?).map(|_| ()),
    }
}

/// Starts the process-wide reader pool of scans ahead of the first input, so that libFuzzer's
/// per-input leak check does not count the pool's threads (alive until the process ends) as
/// memory leaked by the input that first scanned.
pub fn start_reader_pool() {
    crate::merge::start_pool();
}
