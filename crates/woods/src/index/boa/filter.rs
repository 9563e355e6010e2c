//! The refined routing filter of one level (spec §1.5): a sorted list of (prefix P_ℓ(K),
//! sketch) pairs, one per distinct (prefix, check character, run) of the level, prefixes
//! delta-encoded; a pivot table, indexed by the prefix's top bits, giving the byte offset
//! where each pivot's entries start; and a restart at every pivot boundary (the first entry
//! after it is a delta from the pivot's first prefix), so that a lookup decodes only its
//! pivot's entries. The sketch is the check character C_ℓ(K) and the run index.
//!
//! Entries are ordered by prefix, then by run index descending, so a lookup returns the runs
//! that may hold a key newest first (spec correction 2). A merge into a level rewrites its
//! filter sequentially: the old list and the new run's stream, both in prefix order, are
//! merged ([`FilterBuilder`]), as §1.5's update says.
//!
//! Encoding of one entry: the prefix delta as a LEB128 varint, then the sketch
//! `check << run_bits | run` in `sketch_bytes` little-endian bytes. The persisted form is in
//! `docs/format.md` (boa routing filter).

use std::sync::Arc;

use crate::entry::codec::{self, Reader};
use crate::error::{Error, Result};
use crate::storage::{AlignedBuf, Charge, Extent, PageFile, Purpose, PAGE_BODY, PAGE_SIZE};

/// The persisted filter's first bytes.
const MAGIC: &[u8; 4] = b"BOAF";
/// Version byte of the persisted filter.
const FORMAT: u8 = 1;
/// Entries a pivot covers, about: a lookup decodes this many entries.
const PER_PIVOT: u64 = 8;
/// The widest prefix a filter uses.
pub const MAX_PREFIX_BITS: u32 = 56;
/// log₂(β/λ): a level's prefixes get this many bits beyond log₂(λ · run entries), so β = 8λ
/// rather than the spec's β = λ. Each bit halves the prefix false positives (k/β per level, so
/// k/(8λ), and k/(8λ²) after the check character); it costs almost no filter space, because
/// the delta varints are byte-aligned: at β = λ a full level's deltas average about 1 and use
/// a byte each anyway, at 8λ they average about 8 and still fit a byte (a level holding one
/// run, deltas near 128, pays up to a second byte on some entries). Measured at 200,000
/// records (docs/results/boa.md): absent-key lookups read 0.084 pages at β = λ over three
/// levels, above issue 22's 0.05.
pub const BETA_BITS: u32 = 3;

/// The shape of a level's filter, fixed when the level's first run arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Bits of P_ℓ(K): log₂ of β times the expected run size, β = 2^[`BETA_BITS`] · λ.
    pub prefix_bits: u32,
    /// Bits of the check character.
    pub check_bits: u32,
    /// Bits of a run index (log₂ λ).
    pub run_bits: u32,
}

impl Shape {
    /// The shape for runs of about `run_entries` entries with growth factor 2^`run_bits`.
    pub fn for_runs(run_entries: u64, run_bits: u32, check_bits: u32) -> Shape {
        let size_bits = 64 - run_entries.max(2).saturating_sub(1).leading_zeros();
        Shape {
            prefix_bits: (size_bits + run_bits + BETA_BITS).min(MAX_PREFIX_BITS),
            check_bits,
            run_bits,
        }
    }

    fn sketch_bytes(&self) -> usize {
        (self.check_bits + self.run_bits).div_ceil(8) as usize
    }
}

/// One filter entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sketch {
    /// P_ℓ(K).
    pub prefix: u64,
    /// C_ℓ(K).
    pub check: u16,
    /// The run (0 oldest) holding a key with this prefix and check character.
    pub run: u8,
}

/// A level's routing filter, in memory; its bytes are charged to the cache's budget while it
/// lives ([`RoutingFilter::charged`]).
#[derive(Debug)]
pub struct RoutingFilter {
    shape: Shape,
    /// Pivot p's entries start at `pivots[p]`; `pivots[n]` is the data's length.
    pivots: Vec<u32>,
    pivot_bits: u32,
    data: Vec<u8>,
    entries: u64,
    /// The memory charged to the cache (none in tests built without a store).
    charge: Option<Charge>,
}

/// What a lookup found in one level.
#[derive(Debug, Default)]
pub struct Routed {
    /// Entries with the key's prefix (true and false positives).
    pub prefix_matches: u64,
    /// The runs whose entry matched prefix and check character, newest first.
    pub runs: Vec<u8>,
}

impl RoutingFilter {
    /// The filter's shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Entries in the list.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Bytes held in memory (list and pivot table).
    pub fn bytes(&self) -> u64 {
        (self.data.len() + 4 * self.pivots.len()) as u64
    }

    /// Bits of the pivot prefix (the table has 2^pivot_bits + 1 slots).
    pub fn pivot_bits(&self) -> u32 {
        self.pivot_bits
    }

    fn shift(&self) -> u32 {
        self.shape.prefix_bits - self.pivot_bits
    }

    fn bad(&self, d: String) -> Error {
        Error::corruption("boa routing filter", None, d)
    }

    /// Decodes one entry at `r`, `prev` the prefix before it in its pivot.
    fn decode(&self, r: &mut Reader, prev: u64) -> Result<Sketch> {
        let prefix = prev
            .checked_add(r.varint()?)
            .ok_or_else(|| self.bad("prefix delta overflows".into()))?;
        let mut s = 0u64;
        for (i, b) in r.take(self.shape.sketch_bytes())?.iter().enumerate() {
            s |= u64::from(*b) << (8 * i);
        }
        Ok(Sketch {
            prefix,
            check: (s >> self.shape.run_bits) as u16,
            run: (s & ((1 << self.shape.run_bits) - 1)) as u8,
        })
    }

    /// The byte range of pivot `p`'s entries.
    fn pivot_range(&self, p: usize) -> Result<(usize, usize)> {
        match (self.pivots.get(p), self.pivots.get(p + 1)) {
            (Some(&a), Some(&b)) if a <= b && b as usize <= self.data.len() => {
                Ok((a as usize, b as usize))
            }
            _ => Err(self.bad(format!("pivot {p} out of range"))),
        }
    }

    /// The runs that may hold a key with this prefix and check character, newest first
    /// (spec §1.5 lookup: decode the pivot's entries, keep those with the full prefix, then
    /// the check character).
    pub fn route(&self, prefix: u64, check: u16, out: &mut Routed) -> Result<()> {
        out.runs.clear();
        out.prefix_matches = 0;
        let p = (prefix >> self.shift()) as usize;
        let (start, end) = self.pivot_range(p)?;
        let mut r = Reader::new(&self.data[start..end], "boa routing filter");
        let mut prev = (p as u64) << self.shift();
        while !r.is_empty() {
            let e = self.decode(&mut r, prev)?;
            prev = e.prefix;
            if e.prefix > prefix {
                break;
            }
            if e.prefix == prefix {
                out.prefix_matches += 1;
                if e.check == check && out.runs.last() != Some(&e.run) {
                    out.runs.push(e.run);
                }
            }
        }
        Ok(())
    }

    /// Every entry in list order, decoded and checked: sorted by (prefix, run descending),
    /// each in its pivot, each prefix within the prefix bits, each run below `runs`.
    pub fn all(&self, runs: usize) -> Result<Vec<Sketch>> {
        let mut out = Vec::with_capacity(self.entries as usize);
        let shift = self.shift();
        for p in 0..self.pivots.len().saturating_sub(1) {
            let (start, end) = self.pivot_range(p)?;
            let mut r = Reader::new(&self.data[start..end], "boa routing filter");
            let mut prev = (p as u64) << shift;
            while !r.is_empty() {
                let e = self.decode(&mut r, prev)?;
                if (e.prefix >> shift) as usize != p {
                    return Err(self.bad(format!("prefix {:#x} outside pivot {p}", e.prefix)));
                }
                if let Some(last) = out.last() {
                    let last: &Sketch = last;
                    if (last.prefix, std::cmp::Reverse(last.run))
                        > (e.prefix, std::cmp::Reverse(e.run))
                    {
                        return Err(self.bad(format!("entries out of order at {:#x}", e.prefix)));
                    }
                }
                if usize::from(e.run) >= runs {
                    return Err(self.bad(format!("entry routes to run {} of {runs}", e.run)));
                }
                prev = e.prefix;
                out.push(e);
            }
        }
        if out.len() as u64 != self.entries {
            return Err(self.bad(format!(
                "{} entries decoded, {} recorded",
                out.len(),
                self.entries
            )));
        }
        Ok(out)
    }

    /// Where each entry of pivot `p` can be decoded from: the restart points, for tests.
    #[cfg(test)]
    pub fn pivot_entries(&self, p: usize) -> Result<Vec<Sketch>> {
        let (start, end) = self.pivot_range(p)?;
        let mut r = Reader::new(&self.data[start..end], "boa routing filter");
        let mut prev = (p as u64) << self.shift();
        let mut out = Vec::new();
        while !r.is_empty() {
            let e = self.decode(&mut r, prev)?;
            prev = e.prefix;
            out.push(e);
        }
        Ok(out)
    }

    /// Passes bytes `from..to` of the persisted form's body (header, pivot table, list; the
    /// crc32c of all of it follows) to `put`, a piece at a time, never as one copy: a full
    /// level's filter is tens of MiB at 50 million records, and a copy of it beside the filter
    /// went past the memory budget.
    fn emit(&self, from: u64, to: u64, put: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let piv_end = (HEADER + 4 * self.pivots.len()) as u64;
        let to = to.min(piv_end + self.data.len() as u64);
        let mut pos = from;
        let mut tmp = Vec::new();
        while pos < to {
            tmp.clear();
            if pos < HEADER as u64 {
                tmp.extend_from_slice(MAGIC);
                tmp.push(FORMAT);
                for b in [
                    self.shape.prefix_bits,
                    self.shape.check_bits,
                    self.shape.run_bits,
                    self.pivot_bits,
                ] {
                    tmp.push(b as u8);
                }
                codec::put_u64(&mut tmp, self.entries);
                codec::put_u64(&mut tmp, self.data.len() as u64);
                let e = to.min(HEADER as u64);
                put(&tmp[pos as usize..e as usize])?;
                pos = e;
            } else if pos < piv_end {
                let first = (pos - HEADER as u64) / 4;
                let skip = ((pos - HEADER as u64) % 4) as usize;
                let e = to.min(piv_end).min(pos + (PIVOT_CHUNK * 4) as u64);
                let last = (e - HEADER as u64).div_ceil(4);
                for p in &self.pivots[first as usize..last as usize] {
                    codec::put_u32(&mut tmp, *p);
                }
                put(&tmp[skip..skip + (e - pos) as usize])?;
                pos = e;
            } else {
                let e = to;
                put(&self.data[(pos - piv_end) as usize..(e - piv_end) as usize])?;
                pos = e;
            }
        }
        Ok(())
    }

    /// Bytes of the persisted form's body (all but the checksum).
    fn body_len(&self) -> u64 {
        (HEADER + 4 * self.pivots.len() + self.data.len()) as u64
    }

    /// The persisted form in one vector (tests).
    #[cfg(test)]
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.body_len() as usize + 4);
        self.emit(0, self.body_len(), &mut |b| {
            out.extend_from_slice(b);
            Ok(())
        })?;
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Decodes [`RoutingFilter::encode`]'s bytes (tests).
    #[cfg(test)]
    pub fn decode_bytes(buf: &[u8]) -> Result<RoutingFilter> {
        let mut at = 0usize;
        RoutingFilter::decode_with(buf.len() as u64, |out| {
            let end = at + out.len();
            let src = buf.get(at..end).ok_or_else(|| {
                Error::corruption("boa routing filter", None, format!("ends at {}", buf.len()))
            })?;
            out.copy_from_slice(src);
            at = end;
            Ok(())
        })
    }

    /// Decodes the persisted form of `len` bytes, read a piece at a time from `read` (which
    /// fills the buffer it is given), checking the header, the sizes against `len` before
    /// anything is allocated, the pivot table and the checksum (the entries are checked by
    /// [`RoutingFilter::all`]).
    fn decode_with(
        len: u64,
        mut read: impl FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<RoutingFilter> {
        let bad = |d: String| Error::corruption("boa routing filter", None, d);
        if len < (HEADER + 4) as u64 {
            return Err(bad(format!("{len} bytes")));
        }
        let mut crc = 0u32;
        let mut body = |out: &mut [u8]| {
            read(out)?;
            crc = crc32c::crc32c_append(crc, out);
            Ok::<(), Error>(())
        };
        let mut head = [0u8; HEADER];
        body(&mut head)?;
        let mut r = Reader::new(&head, "boa routing filter");
        if r.take(4)? != MAGIC || r.u8()? != FORMAT {
            return Err(bad("not a routing filter of format 1".into()));
        }
        let shape = Shape {
            prefix_bits: u32::from(r.u8()?),
            check_bits: u32::from(r.u8()?),
            run_bits: u32::from(r.u8()?),
        };
        let pivot_bits = u32::from(r.u8()?);
        if shape.prefix_bits > MAX_PREFIX_BITS
            || pivot_bits > shape.prefix_bits
            || pivot_bits > 30
            || !(1..=16).contains(&shape.check_bits)
            || !(1..=8).contains(&shape.run_bits)
        {
            return Err(bad(format!("shape {shape:?}, pivot bits {pivot_bits}")));
        }
        let entries = r.u64()?;
        let data_len = r.u64()?;
        let n = (1usize << pivot_bits) + 1;
        if ((HEADER + 4 + n * 4) as u64).checked_add(data_len) != Some(len) {
            return Err(bad(format!(
                "{n} pivots and {data_len} bytes of entries in {len} bytes"
            )));
        }
        let mut pivots = Vec::with_capacity(n);
        let mut chunk = vec![0u8; PIVOT_CHUNK * 4];
        while pivots.len() < n {
            let k = (n - pivots.len()).min(PIVOT_CHUNK);
            body(&mut chunk[..k * 4])?;
            for b in chunk[..k * 4].chunks_exact(4) {
                let p = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                if pivots.last().is_some_and(|&l| p < l) || u64::from(p) > data_len {
                    return Err(bad(format!("pivot table out of order at {}", pivots.len())));
                }
                pivots.push(p);
            }
        }
        if pivots.first() != Some(&0) || pivots.last().map(|&l| u64::from(l)) != Some(data_len) {
            return Err(bad("pivot table does not span the entries".into()));
        }
        let mut data = vec![0u8; data_len as usize];
        body(&mut data)?;
        let mut stored = [0u8; 4];
        read(&mut stored)?;
        if crc != u32::from_le_bytes(stored) {
            return Err(bad("checksum mismatch".into()));
        }
        Ok(RoutingFilter {
            shape,
            pivots,
            pivot_bits,
            data,
            entries,
            charge: None,
        })
    }

    /// Charges the filter's memory to `store`'s cache for as long as it lives (whichever
    /// version, reader or commit keeps it).
    pub fn charged(mut self, store: &Arc<PageFile>) -> RoutingFilter {
        self.charge = Some(store.charge(held(&self.data, &self.pivots)));
        self
    }

    /// Reads a filter written by [`FilterWrite`], [`CHUNK_PAGES`] pages at a time,
    /// and charges it to `store`'s cache.
    pub fn read(store: &Arc<PageFile>, ext: Extent, len: u64) -> Result<RoutingFilter> {
        let bad = |d: String| Error::corruption("boa routing filter", Some(ext.start), d);
        let first = store.alloc().first_page();
        let end = store.alloc().end();
        if ext.pages == 0
            || len > ext.pages * PAGE_BODY as u64
            || ext.start < first
            || ext.start.checked_add(ext.pages).is_none_or(|e| e > end)
        {
            return Err(bad(format!(
                "{len} bytes in pages {}+{} (file pages {first}..{end})",
                ext.start, ext.pages
            )));
        }
        let mut r = PageReader {
            store,
            ext,
            next: 0,
            buf: AlignedBuf::default(),
            pages: 0,
            page: 0,
            off: 0,
        };
        let f = RoutingFilter::decode_with(len, |out| r.read(out))?;
        Ok(f.charged(store))
    }
}

/// Bytes a filter's list and pivot table hold in memory (their capacity, which is what is
/// allocated).
fn held(data: &Vec<u8>, pivots: &Vec<u32>) -> u64 {
    (data.capacity() + 4 * pivots.capacity()) as u64
}

/// Pivots encoded or decoded at a time.
const PIVOT_CHUNK: usize = 1024;
/// Bytes of the persisted form's header: magic, format, four shape bytes, entries, list bytes.
const HEADER: usize = 4 + 1 + 4 + 8 + 8;
/// Pages a filter's write or read moves at a time (1 MiB).
const CHUNK_PAGES: usize = 256;

/// A byte stream into the page bodies from `start` on, written a chunk of pages at a time.
struct PageWriter {
    store: Arc<PageFile>,
    start: u64,
    purpose: Purpose,
    buf: AlignedBuf,
    /// Pages written before the chunk in `buf`.
    pages: u64,
    /// Bytes of the stream in `buf` (page bodies, in page order).
    off: usize,
}

impl PageWriter {
    fn put(&mut self, mut b: &[u8]) -> Result<()> {
        while !b.is_empty() {
            let (page, at) = (self.off / PAGE_BODY, self.off % PAGE_BODY);
            let n = (PAGE_BODY - at).min(b.len());
            let i = page * PAGE_SIZE + at;
            self.buf[i..i + n].copy_from_slice(&b[..n]);
            self.off += n;
            b = &b[n..];
            if self.off == CHUNK_PAGES * PAGE_BODY {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Writes the pages the chunk has begun.
    fn flush(&mut self) -> Result<()> {
        let n = self.off.div_ceil(PAGE_BODY);
        if n == 0 {
            return Ok(());
        }
        self.store.write(
            self.start + self.pages,
            &mut self.buf[..n * PAGE_SIZE],
            self.purpose,
        )?;
        self.pages += n as u64;
        self.off = 0;
        self.buf[..n * PAGE_SIZE].fill(0);
        Ok(())
    }
}

/// A finished filter being written into a fresh extent in bounded steps, so that a `work` call
/// finishing a merge writes a few pages of it, not all of it: at 50 million records a level's
/// filter is 91 MB, and a paced writer that finished a merge waited 3.4 s for its write.
pub struct FilterWrite {
    filter: RoutingFilter,
    ext: Unkept,
    w: PageWriter,
    /// Bytes of the persisted form written (body, then checksum).
    at: u64,
    crc: u32,
}

/// An extent freed on drop unless kept: the caller's once [`FilterWrite::into_parts`] hands it
/// over.
struct Unkept {
    store: Arc<PageFile>,
    ext: Extent,
    kept: bool,
}

impl Drop for Unkept {
    fn drop(&mut self) {
        if !self.kept {
            self.store.alloc().release(self.ext);
        }
    }
}

impl FilterWrite {
    /// Allocates the extent of `filter`'s persisted form; [`FilterWrite::step`] writes it.
    pub fn new(filter: RoutingFilter, store: &Arc<PageFile>, purpose: Purpose) -> FilterWrite {
        let pages = (filter.body_len() + 4).div_ceil(PAGE_BODY as u64);
        let ext = store.alloc().alloc(pages);
        FilterWrite {
            filter,
            ext: Unkept {
                store: store.clone(),
                ext,
                kept: false,
            },
            w: PageWriter {
                store: store.clone(),
                start: ext.start,
                purpose,
                buf: AlignedBuf::zeroed(CHUNK_PAGES * PAGE_SIZE),
                pages: 0,
                off: 0,
            },
            at: 0,
            crc: 0,
        }
    }

    /// Bytes of the persisted form.
    pub fn bytes(&self) -> u64 {
        self.filter.body_len() + 4
    }

    /// Bytes of the persisted form written so far.
    pub fn written(&self) -> u64 {
        self.at
    }

    /// Writes the next pages, about `budget` bytes' worth (at least one, at most
    /// [`CHUNK_PAGES`]); true once the whole form is written. Each step writes whole pages
    /// (the last may be partial), so the next begins at a page's start.
    pub fn step(&mut self, budget: u64) -> Result<bool> {
        let len = self.bytes();
        let body = len - 4;
        if self.at == len {
            return Ok(true);
        }
        let pages = budget
            .div_ceil(PAGE_SIZE as u64)
            .clamp(1, CHUNK_PAGES as u64);
        let end = (self.at + pages * PAGE_BODY as u64).min(len);
        let (crc, w) = (&mut self.crc, &mut self.w);
        if self.at < body {
            self.filter.emit(self.at, end.min(body), &mut |b| {
                *crc = crc32c::crc32c_append(*crc, b);
                w.put(b)
            })?;
        }
        if end > body {
            let c = crc.to_le_bytes();
            w.put(&c[(self.at.max(body) - body) as usize..(end - body) as usize])?;
        }
        w.flush()?;
        self.at = end;
        Ok(end == len)
    }

    /// The filter, its extent and its byte length (once every step is done).
    pub fn into_parts(self) -> (RoutingFilter, Extent, u64) {
        let len = self.bytes();
        let FilterWrite {
            filter, mut ext, ..
        } = self;
        ext.kept = true;
        (filter, ext.ext, len)
    }
}

/// A byte stream out of the page bodies of an extent, read a chunk of pages at a time.
struct PageReader<'a> {
    store: &'a PageFile,
    ext: Extent,
    /// Pages of the extent read so far.
    next: u64,
    buf: AlignedBuf,
    /// Pages in `buf`, the one being read, and the offset in its body.
    pages: usize,
    page: usize,
    off: usize,
}

impl PageReader<'_> {
    fn read(&mut self, mut out: &mut [u8]) -> Result<()> {
        while !out.is_empty() {
            if self.off == PAGE_BODY {
                self.page += 1;
                self.off = 0;
            }
            if self.page == self.pages {
                let n = (self.ext.pages - self.next).min(CHUNK_PAGES as u64) as usize;
                if n == 0 {
                    return Err(Error::corruption(
                        "boa routing filter",
                        Some(self.ext.start),
                        format!("runs past its {} pages", self.ext.pages),
                    ));
                }
                self.buf = self
                    .store
                    .read_many(self.ext.start + self.next, n, Purpose::Merge)?;
                self.next += n as u64;
                (self.pages, self.page, self.off) = (n, 0, 0);
            }
            let k = (PAGE_BODY - self.off).min(out.len());
            let i = self.page * PAGE_SIZE + self.off;
            out[..k].copy_from_slice(&self.buf[i..i + k]);
            self.off += k;
            out = &mut out[k..];
        }
        Ok(())
    }
}

/// Reads a filter's entries in list order, one at a time.
struct Cursor {
    f: Arc<RoutingFilter>,
    pos: usize,
    pivot: usize,
    prev: u64,
}

impl Cursor {
    fn new(f: Arc<RoutingFilter>) -> Cursor {
        Cursor {
            f,
            pos: 0,
            pivot: 0,
            prev: 0,
        }
    }

    fn next(&mut self) -> Result<Option<Sketch>> {
        let shift = self.f.shift();
        loop {
            let (_, end) = match self.f.pivot_range(self.pivot) {
                Ok(r) => r,
                Err(_) if self.pivot + 1 >= self.f.pivots.len() => return Ok(None),
                Err(e) => return Err(e),
            };
            if self.pos < end {
                let mut r = Reader::new(&self.f.data[self.pos..end], "boa routing filter");
                let e = self.f.decode(&mut r, self.prev)?;
                self.pos = end - r.remaining();
                self.prev = e.prefix;
                return Ok(Some(e));
            }
            self.pivot += 1;
            self.prev = (self.pivot as u64) << shift;
        }
    }
}

/// Builds a level's new filter: the old filter's entries merged with a new run's stream
/// (spec §1.5 update), written sequentially. The new run has the highest index, so at equal
/// prefixes its entries come first.
pub struct FilterBuilder {
    shape: Shape,
    pivot_bits: u32,
    old: Option<Cursor>,
    peeked: Option<Sketch>,
    run: u8,
    pivots: Vec<u32>,
    pivot: usize,
    prev: u64,
    data: Vec<u8>,
    entries: u64,
    last_new: Option<Sketch>,
    /// The memory of `data` and `pivots`, charged to the cache ([`FilterBuilder::charge_to`]).
    charge: Option<Charge>,
}

impl FilterBuilder {
    /// A builder adding run `run` to a level whose current filter is `old` (`None`: the level
    /// is empty and takes `shape`), sized for about `new_entries` more entries.
    pub fn new(
        old: Option<&Arc<RoutingFilter>>,
        shape: Shape,
        run: u8,
        new_entries: u64,
    ) -> Result<FilterBuilder> {
        let shape = old.map_or(shape, |f| f.shape());
        let total = old.map_or(0, |f| f.entries()) + new_entries;
        let want = 63 - (total / PER_PIVOT).max(1).leading_zeros();
        let pivot_bits = want.min(shape.prefix_bits).min(24);
        let mut b = FilterBuilder {
            shape,
            pivot_bits,
            old: old.map(|f| Cursor::new(f.clone())),
            peeked: None,
            run,
            pivots: vec![0; (1 << pivot_bits) + 1],
            pivot: 0,
            prev: 0,
            // About what the list will take (the old list's bytes, a byte of delta and the
            // sketch per new entry, an eighth more), so that it seldom grows by doubling: a
            // doubling holds the old and the new buffer at once.
            data: Vec::with_capacity(
                (old.map_or(0, |f| f.data.len() as u64)
                    + new_entries * (shape.sketch_bytes() as u64 + 1)
                    + new_entries / 8)
                    .min(1 << 40) as usize,
            ),
            entries: 0,
            last_new: None,
            charge: None,
        };
        b.advance_old()?;
        Ok(b)
    }

    /// The shape of the filter being built.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Charges the builder's memory to `store`'s cache from now on, as it grows, and the
    /// finished filter's after it.
    pub fn charge_to(&mut self, store: &Arc<PageFile>) {
        self.charge = Some(store.charge(self.held()));
    }

    /// Bytes the builder holds.
    fn held(&self) -> u64 {
        held(&self.data, &self.pivots)
    }

    fn advance_old(&mut self) -> Result<()> {
        self.peeked = match &mut self.old {
            Some(c) => c.next()?,
            None => None,
        };
        if let Some(o) = self.peeked {
            if o.run >= self.run {
                return Err(Error::corruption(
                    "boa routing filter",
                    None,
                    format!("entry routes to run {} of {}", o.run, self.run),
                ));
            }
        }
        Ok(())
    }

    fn push(&mut self, e: Sketch) -> Result<()> {
        let shift = self.shape.prefix_bits - self.pivot_bits;
        let p = (e.prefix >> shift) as usize;
        let bad = |d: String| Error::corruption("boa routing filter", None, d);
        if p + 1 >= self.pivots.len() || p < self.pivot {
            return Err(bad(format!("prefix {:#x} out of order or range", e.prefix)));
        }
        if p != self.pivot {
            for q in self.pivot + 1..=p {
                self.pivots[q] = self.data.len() as u32;
            }
            self.pivot = p;
            self.prev = (p as u64) << shift;
        }
        let delta = e
            .prefix
            .checked_sub(self.prev)
            .ok_or_else(|| bad(format!("prefix {:#x} out of order", e.prefix)))?;
        codec::put_varint(&mut self.data, delta);
        let s = (u64::from(e.check) << self.shape.run_bits) | u64::from(e.run);
        self.data
            .extend_from_slice(&s.to_le_bytes()[..self.shape.sketch_bytes()]);
        self.prev = e.prefix;
        self.entries += 1;
        let held = self.held();
        if let Some(c) = self.charge.as_mut().filter(|c| c.bytes() != held) {
            c.set(held);
        }
        Ok(())
    }

    /// Adds the new run's entry for a key (keys arrive in fingerprint order); an entry equal to
    /// the previous one adds nothing.
    pub fn add(&mut self, prefix: u64, check: u16) -> Result<()> {
        let e = Sketch {
            prefix,
            check,
            run: self.run,
        };
        if self.last_new == Some(e) {
            return Ok(());
        }
        if self.last_new.is_some_and(|l| l.prefix > prefix) {
            return Err(Error::InvalidOption(format!(
                "boa: filter entries out of order at prefix {prefix:#x}"
            )));
        }
        self.last_new = Some(e);
        while let Some(o) = self.peeked {
            if o.prefix >= prefix {
                break;
            }
            self.push(o)?;
            self.advance_old()?;
        }
        self.push(e)
    }

    /// The finished filter.
    pub fn finish(mut self) -> Result<RoutingFilter> {
        while let Some(o) = self.peeked {
            self.push(o)?;
            self.advance_old()?;
        }
        let len = self.data.len() as u32;
        for q in self.pivot + 1..self.pivots.len() {
            self.pivots[q] = len;
        }
        Ok(RoutingFilter {
            shape: self.shape,
            pivots: self.pivots,
            pivot_bits: self.pivot_bits,
            data: self.data,
            entries: self.entries,
            charge: self.charge,
        })
    }
}
