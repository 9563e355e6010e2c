//! Partition metadata (spec §2.4) and the index metadata the manifest holds.
//!
//! Only PERSISTED partitions are in the manifest (correction 6): the ACTIVE and CLOSING ones
//! live in the PBT-Buffer and are rebuilt from the WAL after a crash. Layout (little-endian):
//!
//! ```text
//! version u8 = 2, root u64, height u32, next_pnum u32, count u32,
//! then per partition, newest first:
//!   pnum u32, max_seq u64, entries u64, leaves u64,
//!   data_count u32, data_count * (start u64, pages u64),
//!   bloom_start u64, bloom_pages u64, bloom_len u32,
//!   min_len u16, min, max_len u16, max
//! ```
//!
//! Version 1 (still read) had one data extent, `data_start u64, data_pages u64`, in place of
//! the list.

use std::sync::Arc;

use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::filter::bloom::Bloom;
use crate::storage::{Extent, PageFile, Purpose, PAGE_BODY, PAGE_SIZE};

/// A closed partition written out: immutable until a merge drops it.
#[derive(Debug)]
pub struct Persisted {
    pub pnum: u32,
    /// Newest sequence number it holds.
    pub max_seq: u64,
    /// Entries (all versions, tombstones and merge operands included).
    pub entries: u64,
    /// Leaf pages.
    pub leaves: u64,
    /// Its leaves and out-of-line values, written in order, in these extents.
    pub data: Vec<Extent>,
    /// Its bloom filter's pages (0 pages: no filter).
    pub bloom_ext: Extent,
    pub bloom_len: u32,
    /// Smallest and largest user key (spec §2.4's partition key range).
    pub min: Arc<[u8]>,
    pub max: Arc<[u8]>,
    pub bloom: Option<Bloom>,
    /// In-process identity for the row cache (never reused: a partition is immutable).
    pub id: u64,
}

/// A fresh in-process partition identity.
pub fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Persisted {
    /// Whether [lo, hi] (user keys, inclusive; `None` unbounded) meets the key range.
    pub fn overlaps(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
        lo.is_none_or(|l| l <= &self.max[..]) && hi.is_none_or(|h| h >= &self.min[..])
    }

    /// Pages its leaves and values take.
    pub fn data_pages(&self) -> u64 {
        self.data.iter().map(|e| e.pages).sum()
    }

    /// Whether pages [start, start + n) lie in one of its data extents.
    pub fn holds(&self, start: u64, n: u64) -> bool {
        self.data
            .iter()
            .any(|e| start >= e.start && start.saturating_add(n) <= e.start + e.pages)
    }

    /// Bytes on disk.
    pub fn bytes(&self) -> u64 {
        (self.data_pages() + self.bloom_ext.pages) * PAGE_SIZE as u64
    }

    /// Extents it owns.
    pub fn extents(&self) -> Vec<Extent> {
        self.data
            .iter()
            .chain([&self.bloom_ext])
            .filter(|e| e.pages > 0)
            .copied()
            .collect()
    }
}

/// The committed part of the index.
pub struct Meta {
    pub root: u64,
    pub height: u32,
    pub next_pnum: u32,
    pub parts: Vec<Arc<Persisted>>,
}

pub fn encode(root: u64, height: u32, next_pnum: u32, parts: &[Arc<Persisted>]) -> Vec<u8> {
    let mut out = vec![2u8];
    codec::put_u64(&mut out, root);
    codec::put_u32(&mut out, height);
    codec::put_u32(&mut out, next_pnum);
    codec::put_u32(&mut out, parts.len() as u32);
    for p in parts {
        codec::put_u32(&mut out, p.pnum);
        for v in [p.max_seq, p.entries, p.leaves] {
            codec::put_u64(&mut out, v);
        }
        codec::put_u32(&mut out, p.data.len() as u32);
        for e in &p.data {
            codec::put_u64(&mut out, e.start);
            codec::put_u64(&mut out, e.pages);
        }
        for v in [p.bloom_ext.start, p.bloom_ext.pages] {
            codec::put_u64(&mut out, v);
        }
        codec::put_u32(&mut out, p.bloom_len);
        for k in [&p.min, &p.max] {
            out.extend_from_slice(&(k.len() as u16).to_le_bytes());
            out.extend_from_slice(k);
        }
    }
    out
}

fn bad(detail: String) -> Error {
    Error::corruption("pbt metadata", None, detail)
}

/// Decodes the metadata and reads every partition's bloom filter from its pages.
pub fn decode(meta: &[u8], store: &PageFile) -> Result<Meta> {
    if meta.is_empty() {
        return Ok(Meta {
            root: 0,
            height: 0,
            next_pnum: 0,
            parts: Vec::new(),
        });
    }
    let mut r = Reader::new(meta, "pbt metadata");
    let v = r.u8()?;
    if v != 1 && v != 2 {
        return Err(bad(format!("version {v}")));
    }
    let root = r.u64()?;
    let height = r.u32()?;
    let next_pnum = r.u32()?;
    let n = r.u32()? as usize;
    let mut parts = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let pnum = r.u32()?;
        let max_seq = r.u64()?;
        let entries = r.u64()?;
        let leaves = r.u64()?;
        let data_count = if v == 1 { 1 } else { r.u32()? as usize };
        let mut data = Vec::with_capacity(data_count.min(1 << 16));
        for _ in 0..data_count {
            data.push(Extent {
                start: r.u64()?,
                pages: r.u64()?,
            });
        }
        let bloom_ext = Extent {
            start: r.u64()?,
            pages: r.u64()?,
        };
        let bloom_len = r.u32()?;
        let min_len = r.u16()? as usize;
        let min: Arc<[u8]> = Arc::from(r.take(min_len)?);
        let max_len = r.u16()? as usize;
        let max: Arc<[u8]> = Arc::from(r.take(max_len)?);
        if pnum >= next_pnum {
            return Err(bad(format!(
                "partition {pnum} at or above next_pnum {next_pnum}"
            )));
        }
        if bloom_len as u64 > bloom_ext.pages * PAGE_BODY as u64 {
            return Err(bad(format!(
                "partition {pnum}: bloom of {bloom_len} bytes in {} pages",
                bloom_ext.pages
            )));
        }
        let bloom = if bloom_ext.pages > 0 {
            check_bloom_extent(store, bloom_ext)?;
            // A damaged bloom page loses no data: the partition opens without its filter (every
            // lookup then searches it) and `check` reports the damage.
            match read_bloom(store, bloom_ext, bloom_len) {
                Ok(b) => Some(b),
                Err(Error::Corruption { .. }) => None,
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        parts.push(Arc::new(Persisted {
            pnum,
            max_seq,
            entries,
            leaves,
            data,
            bloom_ext,
            bloom_len,
            min,
            max,
            bloom,
            id: next_id(),
        }));
    }
    Ok(Meta {
        root,
        height,
        next_pnum,
        parts,
    })
}

/// Reads a bloom filter of `len` bytes from the bodies of its pages.
pub fn read_bloom(store: &PageFile, ext: Extent, len: u32) -> Result<Bloom> {
    check_bloom_extent(store, ext)?;
    let buf = store.read_many(ext.start, ext.pages as usize, Purpose::Merge)?;
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..ext.pages as usize {
        let take = (len as usize - out.len()).min(PAGE_BODY);
        out.extend_from_slice(&buf[i * PAGE_SIZE..i * PAGE_SIZE + take]);
    }
    Bloom::from_bytes(out)
}

/// Fails unless a bloom's pages lie inside the file's page range.
fn check_bloom_extent(store: &PageFile, ext: Extent) -> Result<()> {
    let first = store.alloc().first_page();
    let end = store.alloc().end();
    if ext.start < first || ext.start.checked_add(ext.pages).is_none_or(|e| e > end) {
        return Err(bad(format!(
            "bloom pages {}+{} lie outside the file's pages {first}..{end}",
            ext.start, ext.pages
        )));
    }
    Ok(())
}
