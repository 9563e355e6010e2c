//! Immutable sorted runs: the static B+-trees every index kind is built of.
//!
//! A run is bulk-built bottom-up by a [`RunBuilder`] from entries in [`cmp_entries`] order
//! (every version of a key is kept, newest first), written sequentially into extents of the
//! data file, and then opened read-only as a [`Run`] shared by readers. Data pages hold the
//! entries; index pages above them hold, per child, its first key and seq and the number of
//! entries and user bytes beneath it (so runs can be split by rank or size without reading
//! them); values too large to keep three entries a page go to blob pages; an optional filter (bloom,
//! or quotient for the `stbe` index: the filter bytes name their kind)
//! and a header page complete the run. The byte layout is in `docs/format-run.md`.
//!
//! [`cmp_entries`]: crate::entry::cmp_entries

mod builder;
pub(crate) mod format;
mod iter;
mod region;

#[cfg(test)]
mod tests;

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

pub use builder::RunBuilder;
#[cfg(test)]
pub(crate) use builder::WRITES_IN_FLIGHT;
pub(crate) use iter::DataPages;
pub use iter::{FenceSink, RunIter};
pub use region::Region;

use crate::cache::{PageClass, PageRef};
use crate::entry::codec::{self, Reader};
use crate::entry::{cmp_entries, Entry, Kind, MAX_VALUE_LEN};
use crate::error::{Error, Result};
use crate::filter::quotient::{self, Blocks};
use crate::filter::{hash64, partitioned, Filter, PartitionIndex, QuotientShape};
use crate::storage::{AlignedBuf, Extent, PageFile, PendingRead, Purpose, PAGE_SIZE};
use format::{
    at_page, corrupt, header, DataItem, Node, ValueRef, HEADER_LEN, PAGE_BLOB, PAGE_FILTER,
    PAGE_HEADER, PAYLOAD,
};
pub use format::{Fence, AUX_CONT_PREV};

/// Bytes an index kind may put in front of a user key in a run's keys (`boa` orders runs by
/// an 8-byte fingerprint prefix): run keys are up to `MAX_KEY_LEN + KEY_ROOM` bytes.
pub const KEY_ROOM: usize = 8;

/// How a run is built.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Bloom filter bits per distinct key; 0 builds no filter.
    pub bloom_bits_per_key: u32,
    /// What the run's writes are counted as (`Flush` or `Merge`).
    pub purpose: Purpose,
    /// Pages allocated (and written) per chunk while building, e.g. 64.
    pub extent_pages: u64,
}

impl Default for RunOptions {
    /// 10 bloom bits per key, counted as merge writes, 64-page (256 KiB) chunks.
    fn default() -> Self {
        RunOptions {
            bloom_bits_per_key: 10,
            purpose: Purpose::Merge,
            extent_pages: 64,
        }
    }
}

/// What an index keeps (and persists through the manifest) to find and open a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunMeta {
    /// Every extent holding the run's pages (data, blob, index, filter, header).
    pub extents: Vec<Extent>,
    /// The run header page.
    pub root_page: u64,
    /// Levels of the tree: 0 for an empty run, 1 when a single data page is the root.
    pub height: u32,
    /// Entries (all versions).
    pub entries: u64,
    /// Sum of key and value lengths over all entries.
    pub user_bytes: u64,
    /// Data (leaf) pages.
    pub data_pages: u64,
    /// Smallest key (empty for an empty run).
    pub min_key: Vec<u8>,
    /// Largest key (empty for an empty run).
    pub max_key: Vec<u8>,
    /// Smallest sequence number (0 for an empty run).
    pub min_seq: u64,
    /// Largest sequence number (0 for an empty run).
    pub max_seq: u64,
    /// First filter page (0 when there is no filter).
    pub filter_page: u64,
    /// Filter pages, contiguous from `filter_page` (0 when there is no filter).
    pub filter_pages: u64,
}

/// Version byte of the encoded [`RunMeta`].
const META_VERSION: u8 = 1;

impl RunMeta {
    /// Appends the metadata's encoding (for the manifest; layout in `docs/format-run.md`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(META_VERSION);
        codec::put_varint(out, self.extents.len() as u64);
        for e in &self.extents {
            codec::put_varint(out, e.start);
            codec::put_varint(out, e.pages);
        }
        for v in [
            self.root_page,
            u64::from(self.height),
            self.entries,
            self.user_bytes,
            self.data_pages,
        ] {
            codec::put_varint(out, v);
        }
        codec::put_bytes(out, &self.min_key);
        codec::put_bytes(out, &self.max_key);
        for v in [
            self.min_seq,
            self.max_seq,
            self.filter_page,
            self.filter_pages,
        ] {
            codec::put_varint(out, v);
        }
    }

    /// Decodes metadata written by [`RunMeta::encode`].
    pub fn decode(r: &mut Reader) -> Result<RunMeta> {
        let version = r.u8()?;
        if version != META_VERSION {
            return Err(Error::corruption(
                "run metadata",
                None,
                format!("unknown version {version}"),
            ));
        }
        let n = r.varint()?;
        if n > (r.remaining() / 2) as u64 {
            return Err(Error::corruption(
                "run metadata",
                None,
                format!("{n} extents in {} bytes", r.remaining()),
            ));
        }
        let mut extents = Vec::with_capacity(n as usize);
        for _ in 0..n {
            extents.push(Extent {
                start: r.varint()?,
                pages: r.varint()?,
            });
        }
        let root_page = r.varint()?;
        let height = u32::try_from(r.varint()?)
            .map_err(|_| Error::corruption("run metadata", None, "height out of range"))?;
        let entries = r.varint()?;
        let user_bytes = r.varint()?;
        let data_pages = r.varint()?;
        let min_key = r.bytes()?.to_vec();
        let max_key = r.bytes()?.to_vec();
        Ok(RunMeta {
            extents,
            root_page,
            height,
            entries,
            user_bytes,
            data_pages,
            min_key,
            max_key,
            min_seq: r.varint()?,
            max_seq: r.varint()?,
            filter_page: r.varint()?,
            filter_pages: r.varint()?,
        })
    }

    /// Pages the run occupies (the sum over its extents).
    pub fn pages(&self) -> u64 {
        self.extents.iter().map(|e| e.pages).sum()
    }
}

/// The fields of a run header page.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HeaderFields {
    height: u32,
    tree_root: u64,
    entries: u64,
    user_bytes: u64,
    data_pages: u64,
    min_seq: u64,
    max_seq: u64,
    filter_page: u64,
    filter_pages: u64,
    min_key: Vec<u8>,
    max_key: Vec<u8>,
}

pub(crate) fn decode_header(page: u64, buf: &[u8]) -> Result<HeaderFields> {
    let h = header(page, buf, PAGE_HEADER)?;
    let body = buf
        .get(HEADER_LEN..HEADER_LEN + h.aux as usize)
        .ok_or_else(|| {
            corrupt(
                page,
                format!("run header of {} bytes overflows the page", h.aux),
            )
        })?;
    let mut r = Reader::new(body, "run header");
    let inner = |r: &mut Reader| -> Result<HeaderFields> {
        if r.take(8)? != format::MAGIC {
            return Err(corrupt(page, "bad run header magic"));
        }
        let major = r.u16()?;
        let _minor = r.u16()?;
        if major != format::FORMAT_MAJOR {
            return Err(Error::UnsupportedFormat {
                found_major: major,
                supported_major: format::FORMAT_MAJOR,
            });
        }
        Ok(HeaderFields {
            height: r.u32()?,
            tree_root: r.u64()?,
            entries: r.u64()?,
            user_bytes: r.u64()?,
            data_pages: r.u64()?,
            min_seq: r.u64()?,
            max_seq: r.u64()?,
            filter_page: r.u64()?,
            filter_pages: r.u64()?,
            min_key: r.bytes()?.to_vec(),
            max_key: r.bytes()?.to_vec(),
        })
    };
    inner(&mut r).map_err(|e| at_page(e, page))
}

/// The most pages one read-ahead request of a scan covers (256 KiB, an extent by default).
pub const READAHEAD_PAGES: u64 = 64;

/// A scan's read-ahead window: consecutive pages read in one request. From the scan's second
/// window on, the window after the current one is read on the page file's I/O threads while the
/// scan works through the current one, so a scan holds two windows' buffers (briefly three,
/// when the scan skips a window being read ahead).
#[derive(Default)]
pub(crate) struct Readahead {
    start: u64,
    pages: u64,
    /// Most pages one request reads ([`READAHEAD_PAGES`] unless the iterator asked for less;
    /// 0 stands for that default).
    max_pages: u64,
    /// The window's pages, shared with the nodes parsed from them (not copied out).
    buf: PageRef,
    /// The next window, being read.
    next: Option<NextWindow>,
}

struct NextWindow {
    start: u64,
    pages: u64,
    read: PendingRead,
}

/// Whether the window of `pages` pages from `start` holds `page`.
fn window_holds(start: u64, pages: u64, page: u64) -> bool {
    page >= start && page - start < pages
}

impl Readahead {
    fn holds(&self, page: u64) -> bool {
        window_holds(self.start, self.pages, page)
    }

    /// Data page `page`, which the window holds, parsed in place (sharing the window's buffer).
    fn data_node(&self, page: u64) -> Result<Node> {
        let off = (page - self.start) as usize * PAGE_SIZE;
        Node::parse_at(page, self.buf.clone(), off, 0)
    }

    fn max_pages(&self) -> u64 {
        match self.max_pages {
            0 => READAHEAD_PAGES,
            n => n.min(READAHEAD_PAGES),
        }
    }
}

thread_local! {
    /// The cursor of this thread's point lookups, reused so that a lookup allocates neither
    /// its path nor its (unused) read-ahead state: about two allocations per run probed.
    static LOOKUP_CURSOR: std::cell::RefCell<iter::Cursor> =
        std::cell::RefCell::new(iter::Cursor::default());
}

/// An open run: read-only, `Send + Sync`, shared as `Arc<Run>`.
pub struct Run {
    /// This process's name for the run, never reused (the row cache's key).
    id: u64,
    store: Arc<PageFile>,
    meta: RunMeta,
    tree_root: u64,
    filter: Option<RunFilter>,
    /// `meta.extents` sorted by start, for checking that page references stay inside the run.
    sorted: Vec<Extent>,
    /// Bytes of the in-memory filter charged to the store's cache while the run is open.
    charged: u64,
}

/// Where an open run's filter is.
enum RunFilter {
    /// Whole in memory: a bloom or quotient filter, or a partitioned one that fit within the
    /// cache's share for filters ([`crate::cache::Cache::try_reserve`]).
    Loaded(Filter),
    /// A partitioned filter that did not: its separators in memory, and each lookup reads the
    /// one filter page its key needs through the cache, as an index page (first partition at
    /// `meta.filter_page`).
    Paged(PartitionIndex),
    /// A quotient filter that did not: its header in memory, and each lookup reads the page
    /// holding the block its key's quotient falls in (two where the block or the key's run
    /// crosses a page's end) through the cache, as an index page.
    PagedQuotient(QuotientShape),
}

/// A paged quotient filter's blocks, read from the run's filter pages through the cache.
struct FilterPages<'a> {
    run: &'a Run,
    shape: &'a QuotientShape,
    /// The page of the last blocks asked for, when they lie in one page (the usual case: no
    /// copy, no allocation).
    page: Option<PageRef>,
    /// The blocks asked for, copied out of their pages where they cross a page's end.
    buf: Vec<u8>,
}

impl FilterPages<'_> {
    /// Filter page `i` (of the run's filter pages), through the cache.
    fn page(&self, i: u64) -> Result<(u64, PageRef)> {
        let meta = &self.run.meta;
        let page = meta.filter_page + i;
        if i >= meta.filter_pages {
            return Err(corrupt(page, "quotient filter block past its pages"));
        }
        let buf = self
            .run
            .store
            .read_as(page, Purpose::UserRead, PageClass::Index)?;
        Ok((page, buf))
    }
}

impl Blocks for FilterPages<'_> {
    fn blocks(&mut self, first: u64, n: u64) -> Result<&[u8]> {
        let (start, len) = (
            self.shape.block_offset(first),
            n * self.shape.block_bytes() as u64,
        );
        let per = PAYLOAD as u64;
        let short = |page| corrupt(page, "quotient filter block past its page's payload");
        if start / per == (start + len - 1) / per {
            let (page, buf) = self.page(start / per)?;
            let off = (start % per) as usize;
            let buf = self.page.insert(buf);
            return filter_payload(page, buf)?
                .get(off..off + len as usize)
                .ok_or_else(|| short(page));
        }
        self.buf.clear();
        let mut at = start;
        while at < start + len {
            let (page, buf) = self.page(at / per)?;
            let off = (at % per) as usize;
            let take = (PAYLOAD - off).min((start + len - at) as usize);
            let bytes = filter_payload(page, &buf)?
                .get(off..off + take)
                .ok_or_else(|| short(page))?;
            self.buf.extend_from_slice(bytes);
            at += take as u64;
        }
        Ok(&self.buf)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.store.cache().unreserve(self.charged);
        if self.filter_is_paged() {
            self.store.cache().count_paged_filter(false);
        }
    }
}

impl Run {
    /// Opens a run from its metadata: reads the header page (checked against `meta`) and the
    /// bloom filter into memory.
    pub fn open(store: Arc<PageFile>, meta: RunMeta) -> Result<Run> {
        let mut run = Run::assemble(store, meta, format::NO_ROOT, None);
        let page = run.meta.root_page;
        if !run.owns(page, 1) {
            return Err(corrupt(
                page,
                "run header page lies outside the run's extents",
            ));
        }
        let buf = run.store.read_uncached(page, Purpose::UserRead)?;
        let h = decode_header(page, &buf)?;
        let m = &run.meta;
        let expect = HeaderFields {
            height: m.height,
            tree_root: h.tree_root,
            entries: m.entries,
            user_bytes: m.user_bytes,
            data_pages: m.data_pages,
            min_seq: m.min_seq,
            max_seq: m.max_seq,
            filter_page: m.filter_page,
            filter_pages: m.filter_pages,
            min_key: m.min_key.clone(),
            max_key: m.max_key.clone(),
        };
        if h != expect {
            return Err(corrupt(
                page,
                "run header does not match the run's metadata",
            ));
        }
        if h.height > 0 && !run.owns(h.tree_root, 1) {
            return Err(corrupt(
                page,
                format!("tree root {} lies outside the run's extents", h.tree_root),
            ));
        }
        if h.height > u32::from(u8::MAX) {
            return Err(corrupt(
                page,
                format!("tree height {} is impossible", h.height),
            ));
        }
        run.tree_root = h.tree_root;
        // A damaged filter page loses no data: the run opens without its filter (every lookup
        // then searches it) and `check` reports the damage.
        match run.open_filter() {
            Ok(()) => {}
            Err(Error::Corruption { .. }) => {
                run.filter = None;
                run.store.cache().unreserve(run.charged);
                run.charged = 0;
            }
            Err(e) => return Err(e),
        }
        Ok(run)
    }

    /// Reads the filter at open, and charges what of it stays in memory to the cache (see
    /// [`crate::cache::Cache::reserve`]), so that `cache_bytes` bounds the filters of open runs
    /// with the pages. A partitioned filter stays whole in memory while the cache's share for
    /// filters has room for it, else only its separators do (it is read a page at a time);
    /// a bloom or quotient filter is read whole.
    fn open_filter(&mut self) -> Result<()> {
        let (first, n) = (self.meta.filter_page, self.meta.filter_pages);
        if n == 0 {
            return Ok(());
        }
        self.check_filter_extent()?;
        // The first page says the kind; it is the first piece of the whole filter too.
        let head = self.store.read_uncached(first, Purpose::UserRead)?;
        let head = filter_payload(first, &head)?;
        let partitioned = head.first() == Some(&partitioned::KIND_PARTITION);
        let quotient = head.first() == Some(&quotient::KIND_QUOTIENT);
        let whole = n * PAYLOAD as u64;
        // Partitioned and quotient filters can be read a page at a time: whole only if they fit.
        let reserved = partitioned || quotient;
        if reserved && !self.store.cache().try_reserve(whole) {
            let paged = if quotient {
                let shape = QuotientShape::parse(head, whole, PAYLOAD as u64)
                    .map_err(|e| at_page(e, first))?;
                RunFilter::PagedQuotient(shape)
            } else {
                RunFilter::Paged(self.read_partition_index(head)?)
            };
            self.keep_paged(paged);
            return Ok(());
        }
        // Charged (at most `whole`) before the read, for the read's buffers.
        self.charged = if reserved { whole } else { 0 };
        let mut bytes = Vec::with_capacity(n as usize * PAYLOAD);
        bytes.extend_from_slice(head);
        self.read_filter_bytes(&mut bytes, first + 1, n - 1, Purpose::UserRead)?;
        let f = Filter::from_bytes(bytes).map_err(|e| at_page(e, first))?;
        if reserved {
            let bytes = f.as_bytes().len() as u64;
            self.store.cache().unreserve(whole - bytes.min(whole));
        }
        self.keep_loaded(f, reserved);
        Ok(())
    }

    /// Keeps `f` whole in memory, charged to the cache (`reserved`: its bytes already are).
    fn keep_loaded(&mut self, f: Filter, reserved: bool) {
        let bytes = f.as_bytes().len() as u64;
        if !reserved {
            self.store.cache().reserve(bytes);
        }
        self.charged = bytes;
        self.filter = Some(RunFilter::Loaded(f));
    }

    /// Keeps only what a filter read a page at a time needs in memory (a partitioned filter's
    /// separators, a quotient filter's header), charged to the cache.
    fn keep_paged(&mut self, filter: RunFilter) {
        self.charged = match &filter {
            RunFilter::Paged(index) => index.memory() as u64,
            _ => std::mem::size_of::<RunFilter>() as u64,
        };
        self.store.cache().reserve(self.charged);
        self.store.cache().count_paged_filter(true);
        self.filter = Some(filter);
    }

    /// Reads a partitioned filter's index section, which ends on its last page and mostly
    /// lies there (`head`: the first page's payload, which is the last page of a one-page
    /// filter).
    fn read_partition_index(&self, head: &[u8]) -> Result<PartitionIndex> {
        let (first, n) = (self.meta.filter_page, self.meta.filter_pages);
        let last = first + n - 1;
        let buf;
        let tail = if n == 1 {
            head
        } else {
            buf = self.store.read_uncached(last, Purpose::UserRead)?;
            filter_payload(last, &buf)?
        };
        let total = (n - 1) * PAYLOAD as u64 + tail.len() as u64;
        let (parts, len) = PartitionIndex::trailer(tail).map_err(|e| at_page(e, last))?;
        let start = partitioned::section_start(parts, len, total).map_err(|e| at_page(e, last))?;
        let from = start / PAYLOAD as u64;
        // The pages before the last that hold some of the section (none, mostly), then the last.
        let mut bytes = Vec::new();
        self.read_filter_bytes(
            &mut bytes,
            first + from,
            (n - 1).saturating_sub(from),
            Purpose::UserRead,
        )?;
        bytes.extend_from_slice(tail);
        let section = bytes
            .get((start - from * PAYLOAD as u64) as usize..)
            .ok_or_else(|| corrupt(first + from, "filter pages shorter than their trailer says"))?;
        PartitionIndex::parse(section, parts).map_err(|e| at_page(e, first + from))
    }

    /// Finishes `builder` and opens the result without reading back what the builder still
    /// has in memory (tree root, filter): a partitioned filter stays in memory as at open
    /// ([`Run::open`]).
    pub fn from_builder(builder: RunBuilder) -> Result<Run> {
        let (store, meta, tree_root, filter) = builder.finish_parts()?;
        let filter = filter.map(Filter::from_bytes).transpose()?;
        let mut run = Run::assemble(store, meta, tree_root, None);
        match filter {
            Some(Filter::Partitioned(p)) => {
                if run.store.cache().try_reserve(p.as_bytes().len() as u64) {
                    run.keep_loaded(Filter::Partitioned(p), true);
                } else {
                    run.keep_paged(RunFilter::Paged(p.index().clone()));
                }
            }
            Some(Filter::Quotient(q)) => {
                if run.store.cache().try_reserve(q.as_bytes().len() as u64) {
                    run.keep_loaded(Filter::Quotient(q), true);
                } else {
                    run.keep_paged(RunFilter::PagedQuotient(q.shape()));
                }
            }
            Some(f) => run.keep_loaded(f, false),
            None => {}
        }
        Ok(run)
    }

    /// [`Run::from_builder`] for a builder placing its run in an append region
    /// ([`RunBuilder::in_region`]): also returns the region with its cursors moved past the
    /// run's pages (`None` for a builder without a region).
    pub fn from_builder_in_region(mut builder: RunBuilder) -> Result<(Run, Option<Region>)> {
        while !builder.finish_step(u64::MAX)? {}
        let region = builder.region();
        Ok((Run::from_builder(builder)?, region))
    }

    fn assemble(
        store: Arc<PageFile>,
        meta: RunMeta,
        tree_root: u64,
        filter: Option<RunFilter>,
    ) -> Run {
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let mut sorted = meta.extents.clone();
        sorted.sort();
        Run {
            id: NEXT_ID.fetch_add(1, Relaxed),
            store,
            meta,
            tree_root,
            filter,
            sorted,
            charged: 0,
        }
    }

    /// Reads the whole filter into memory (`None`: the run has none).
    fn read_filter(&self, purpose: Purpose) -> Result<Option<Filter>> {
        let (first, n) = (self.meta.filter_page, self.meta.filter_pages);
        if n == 0 {
            return Ok(None);
        }
        self.check_filter_extent()?;
        let mut bytes = Vec::with_capacity(n as usize * PAYLOAD);
        self.read_filter_bytes(&mut bytes, first, n, purpose)?;
        Filter::from_bytes(bytes)
            .map(Some)
            .map_err(|e| at_page(e, first))
    }

    fn check_filter_extent(&self) -> Result<()> {
        let (first, n) = (self.meta.filter_page, self.meta.filter_pages);
        if !self.owns(first, n) {
            return Err(corrupt(
                first,
                format!("{n} filter pages lie outside the run's extents"),
            ));
        }
        Ok(())
    }

    /// Appends the payloads of filter pages `first..first + n` to `bytes`, and gives back the
    /// room it has left (a run holding its filter keeps these bytes: not the last page's
    /// unused room).
    fn read_filter_bytes(
        &self,
        bytes: &mut Vec<u8>,
        first: u64,
        n: u64,
        purpose: Purpose,
    ) -> Result<()> {
        if n > 0 {
            let buf = self.store.read_many(first, n as usize, purpose)?;
            for (i, p) in buf.chunks_exact(PAGE_SIZE).enumerate() {
                bytes.extend_from_slice(filter_payload(first + i as u64, p)?);
            }
        }
        bytes.shrink_to_fit();
        Ok(())
    }

    /// Whether pages `start..start + n` lie inside one of the run's extents.
    fn owns(&self, start: u64, n: u64) -> bool {
        let i = self.sorted.partition_point(|e| e.start <= start);
        i > 0
            && start
                .checked_add(n)
                .is_some_and(|end| end <= self.sorted[i - 1].end())
    }

    /// The run's metadata.
    pub fn meta(&self) -> &RunMeta {
        &self.meta
    }

    /// The extents holding the run's pages.
    pub fn extents(&self) -> &[Extent] {
        &self.meta.extents
    }

    /// The filter check: `false` means no version of `key` is in the run. Always `true` for a
    /// run built without a filter, and where a filter page cannot be read.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hashed(key, hash64(key))
    }

    /// [`Run::may_contain`] for a key already hashed with [`hash64`].
    pub fn may_contain_hashed(&self, key: &[u8], h: u64) -> bool {
        self.filter_says(key, h).unwrap_or(true)
    }

    /// The filter check, reading the filter's page if it is paged (an I/O error reading it is
    /// the error).
    fn filter_says(&self, key: &[u8], h: u64) -> Result<bool> {
        match &self.filter {
            None => Ok(true),
            Some(RunFilter::Loaded(f)) => Ok(f.may_contain_hashed(key, h)),
            Some(RunFilter::Paged(index)) => {
                let Some(i) = index.partition(key) else {
                    return Ok(false);
                };
                let page = self.meta.filter_page + i as u64;
                let said = self
                    .store
                    .read_as(page, Purpose::UserRead, PageClass::Index)
                    .and_then(|buf| partitioned::probe_partition(filter_payload(page, &buf)?, h));
                match said {
                    // A damaged filter page loses no data, as at open: the run is searched
                    // (`check` reports the damage).
                    Err(Error::Corruption { .. }) => Ok(true),
                    r => r,
                }
            }
            Some(RunFilter::PagedQuotient(shape)) => {
                let mut src = FilterPages {
                    run: self,
                    shape,
                    page: None,
                    buf: Vec::new(),
                };
                match shape.probe(h, &mut src) {
                    Err(Error::Corruption { .. }) => Ok(true),
                    r => r,
                }
            }
        }
    }

    /// The run's filter, if it has one in memory (bloom, partitioned or quotient).
    pub fn filter(&self) -> Option<&Filter> {
        match &self.filter {
            Some(RunFilter::Loaded(f)) => Some(f),
            _ => None,
        }
    }

    /// Whether the run's filter is read a page at a time (it did not fit the cache's share
    /// for filters when the run opened).
    pub fn filter_is_paged(&self) -> bool {
        matches!(
            self.filter,
            Some(RunFilter::Paged(_) | RunFilter::PagedQuotient(_))
        )
    }

    /// Starts bringing the block of the run's quotient filter (held whole) that a probe of
    /// hash `h` reads into the processor's cache; nothing for other filters.
    #[inline]
    pub fn prefetch_filter(&self, h: u64) {
        if let Some(RunFilter::Loaded(Filter::Quotient(q))) = &self.filter {
            q.prefetch(h);
        }
    }

    /// Whether the run's filter is a quotient filter, in memory or read a page at a time.
    pub fn has_quotient_filter(&self) -> bool {
        matches!(
            self.filter,
            Some(RunFilter::Loaded(Filter::Quotient(_)) | RunFilter::PagedQuotient(_))
        )
    }

    fn load(&self, page: u64, level: u8, purpose: Purpose) -> Result<Node> {
        let buf = if purpose == Purpose::UserRead {
            // Every lookup in the run passes its index pages: they are kept before data pages.
            let class = if level > 0 {
                PageClass::Index
            } else {
                PageClass::Data
            };
            self.store.read_as(page, purpose, class)?
        } else {
            Arc::new(self.store.read_uncached(page, purpose)?)
        };
        Node::parse(page, buf, level)
    }

    /// Loads the data page `page` for a sequential scan: from `ahead` when it holds the page,
    /// else by one device read of up to [`READAHEAD_PAGES`] pages from `page` to the end of its
    /// extent, kept in `ahead` for the pages that follow. Scans of whole runs (flushes,
    /// merges) thus read a run in large requests, not a page at a time, and bypass the cache.
    fn load_ahead(&self, page: u64, purpose: Purpose, ahead: &mut Readahead) -> Result<Node> {
        if !ahead.holds(page) {
            self.fill_window(page, purpose, ahead)?;
        }
        ahead.data_node(page)
    }

    /// Makes `ahead`'s window hold `page`: the window read ahead when it holds the page, else a
    /// read now of a window starting there. The window after the new one is read ahead from a
    /// scan's first window on (these scans are flushes, merges and checks, which read on).
    ///
    /// The window read ahead need not start at a data page: a data page's blob pages are
    /// written just before it, and a window that ends with blob pages is followed by one that
    /// starts at them ([`Run::resume_at`]). That window is used when it holds `page`, so that
    /// it serves the blob values of `page` as well.
    fn fill_window(&self, page: u64, purpose: Purpose, ahead: &mut Readahead) -> Result<()> {
        let max = ahead.max_pages();
        let len = max as usize * PAGE_SIZE;
        ahead.pages = 0;
        // The previous window's buffer, unless a node parsed from it still holds it.
        let old = std::mem::take(&mut ahead.buf);
        let mut spare = Arc::try_unwrap(old).ok().filter(|b| b.len() >= len);
        match ahead.next.take() {
            Some(next) if window_holds(next.start, next.pages, page) => {
                let (r, buf) = next.read.wait()?;
                ahead.buf = Arc::new(buf);
                r?;
                ahead.start = next.start;
                ahead.pages = next.pages;
            }
            // A read ahead of a window the scan skipped is dropped unread (it finishes on
            // its own).
            _ => {
                let n = self.window_at(page, max);
                let mut buf = spare
                    .take()
                    .unwrap_or_else(|| AlignedBuf::for_overwrite(len));
                self.store
                    .read_many_into(page, &mut buf[..n as usize * PAGE_SIZE], purpose)?;
                ahead.buf = Arc::new(buf);
                ahead.start = page;
                ahead.pages = n;
            }
        }
        if let Some(start) = self.page_after(self.resume_at(ahead)) {
            let n = self.window_at(start, max);
            let buf = spare
                .take()
                .unwrap_or_else(|| AlignedBuf::for_overwrite(len));
            let read = self
                .store
                .read_behind(start, buf, n as usize * PAGE_SIZE, purpose);
            ahead.next = Some(NextWindow {
                start,
                pages: n,
                read,
            });
        }
        Ok(())
    }

    /// Where the window after `ahead`'s should start: after its last page, unless the window
    /// ends with blob pages inside an extent. Blob pages are written just before the data page
    /// that refers to them, so those belong to the first data page after the window; the next
    /// window starts at them, so that it holds them as well as their data page. (A window of
    /// nothing but blob pages is followed by the page after it: the scan must move on.)
    fn resume_at(&self, ahead: &Readahead) -> u64 {
        let end = ahead.start + ahead.pages;
        if !self.owns(end, 1) {
            return end;
        }
        let is_blob = |i: u64| ahead.buf.get(i as usize * PAGE_SIZE) == Some(&PAGE_BLOB);
        let mut keep = ahead.pages;
        while keep > 0 && is_blob(keep - 1) {
            keep -= 1;
        }
        match keep {
            0 => end,
            _ => ahead.start + keep,
        }
    }

    /// Pages of a window starting at `page` (inside the run): to the end of its extent, at
    /// most `max`.
    fn window_at(&self, page: u64, max: u64) -> u64 {
        let i = self.sorted.partition_point(|e| e.start <= page);
        (self.sorted[i - 1].end() - page).min(max)
    }

    /// The page a sequential scan reads after the pages before `page`: `page` itself inside
    /// an extent, the next extent's first page (in the order the builder wrote them) at the end
    /// of one, `None` at the end of the run.
    fn page_after(&self, page: u64) -> Option<u64> {
        if self.owns(page, 1) {
            return Some(page);
        }
        let extents = &self.meta.extents;
        let i = extents.iter().position(|e| e.end() == page)?;
        extents.get(i + 1).map(|e| e.start)
    }

    pub(crate) fn root_node(&self, purpose: Purpose) -> Result<Option<Node>> {
        if self.meta.height == 0 {
            return Ok(None);
        }
        self.load(self.tree_root, (self.meta.height - 1) as u8, purpose)
            .map(Some)
    }

    pub(crate) fn child_node(&self, node: &Node, i: usize, purpose: Purpose) -> Result<Node> {
        let child = node.child(i)?;
        if !self.owns(child, 1) {
            return Err(corrupt(
                node.page,
                format!("child page {child} lies outside the run's extents"),
            ));
        }
        self.load(child, node.level - 1, purpose)
    }

    /// Child `i` of the level-1 node `node`: the data page where a user read of `key` starts.
    /// A data page whose first entry is split (its value begins on the data page before) has
    /// that entry's whole key for its separator (with seq `u64::MAX`, as every separator that
    /// is not a version of the key the page before ends with), never a shortened one (the
    /// builder's `place`). So when the separator is `key` itself, and the page before is child
    /// `i - 1`, right before it in the file, the two are read in one request
    /// ([`PageFile::read_with_previous`]) rather than the page and then, for its first entry,
    /// the page before. (A shortened separator that happens to be a whole key reads a page
    /// more in that request, never a request more.)
    ///
    /// A forward range scan (`scan` holds its upper bound) that starts on a data page most
    /// often goes on into the next: when that is child `i + 1`, right after it in the file,
    /// and may hold keys within the bound, the two are read in one request
    /// ([`PageFile::read_with_next`]).
    pub(crate) fn leaf_for(
        &self,
        node: &Node,
        i: usize,
        key: &[u8],
        scan: Option<&Bound<Vec<u8>>>,
    ) -> Result<Node> {
        let p = Purpose::UserRead;
        if node.level != 1 {
            return self.child_node(node, i, p);
        }
        let (sep, seq) = node.key_seq(i)?;
        let child = node.child(i)?;
        if seq == u64::MAX && sep == key {
            // The page before is child `i - 1`, or for the first child the last child of the
            // level-1 node before (not read here: the run's pages are all that is checked).
            let adjacent = match i {
                0 => true,
                _ => node.child(i - 1)?.checked_add(1) == Some(child),
            };
            if adjacent && child > 0 && self.owns(child - 1, 2) {
                let buf = self.store.read_with_previous(child, p, PageClass::Data)?;
                return Node::parse(child, buf, 0);
            }
        }
        if let Some(hi) = scan {
            if self.next_in_scan(node, i, child, hi)? {
                let buf = self.store.read_with_next(child, p)?;
                return Node::parse(child, buf, 0);
            }
        }
        self.child_node(node, i, p)
    }

    /// Whether child `i + 1` of the level-1 node `node` is the data page right after child `i`
    /// (page `child`) in the file, inside the run, and may hold keys at or below `hi` (its
    /// separator is at most its first key).
    fn next_in_scan(&self, node: &Node, i: usize, child: u64, hi: &Bound<Vec<u8>>) -> Result<bool> {
        if i + 1 >= node.count || node.child(i + 1)? != child + 1 || !self.owns(child, 2) {
            return Ok(false);
        }
        let (sep, _) = node.key_seq(i + 1)?;
        Ok(crate::merge::within_hi(sep, hi))
    }

    /// [`Run::child_node`] for a forward scan: a data page comes through `ahead` when the scan
    /// is not a user read (user reads go through the cache, a page at a time).
    pub(crate) fn child_node_ahead(
        &self,
        node: &Node,
        i: usize,
        purpose: Purpose,
        ahead: &mut Readahead,
    ) -> Result<Node> {
        if node.level != 1 || purpose == Purpose::UserRead {
            return self.child_node(node, i, purpose);
        }
        let child = node.child(i)?;
        if !self.owns(child, 1) {
            return Err(corrupt(
                node.page,
                format!("child page {child} lies outside the run's extents"),
            ));
        }
        self.load_ahead(child, purpose, ahead)
    }

    /// Asks for the read-ahead window that starts at `node`'s child `i` (a data page) without
    /// waiting for it: [`Run::child_node_ahead`] takes the page from that window later. How a
    /// merge done in bounded steps opens an input in one step and reads it in the next.
    pub(crate) fn prefetch_child(
        &self,
        node: &Node,
        i: usize,
        purpose: Purpose,
        ahead: &mut Readahead,
    ) -> Result<()> {
        let child = node.child(i)?;
        if !self.owns(child, 1) {
            return Err(corrupt(
                node.page,
                format!("child page {child} lies outside the run's extents"),
            ));
        }
        let asked = ahead
            .next
            .as_ref()
            .is_some_and(|n| window_holds(n.start, n.pages, child));
        if ahead.holds(child) || asked {
            return Ok(());
        }
        let max = ahead.max_pages();
        let n = self.window_at(child, max);
        let buf = AlignedBuf::for_overwrite(max as usize * PAGE_SIZE);
        let read = self
            .store
            .read_behind(child, buf, n as usize * PAGE_SIZE, purpose);
        ahead.next = Some(NextWindow {
            start: child,
            pages: n,
            read,
        });
        Ok(())
    }

    /// Materializes a data item read from `page`, fetching a blob value, or the first bytes of a
    /// split one from the data page before (the leaf a forward scan just left, or its read-ahead
    /// window, when they hold it).
    pub(crate) fn entry(
        &self,
        page: u64,
        item: &DataItem<'_>,
        purpose: Purpose,
        cursor: Option<&iter::Cursor>,
    ) -> Result<Entry> {
        let ahead = cursor.map(|c| c.ahead());
        let value: Arc<[u8]> = match item.value {
            ValueRef::Inline(v) => Arc::from(v),
            ValueRef::Blob { page: blob, len } => {
                Arc::from(self.read_blob(page, blob, len, purpose, ahead)?)
            }
            ValueRef::Split {
                page: head_page,
                head,
                rest,
            } => {
                let node = match cursor.and_then(|c| c.spilled()) {
                    Some(n) if n.page == head_page => n.clone(),
                    _ => self.head_page(page, head_page, purpose, ahead)?,
                };
                let spill = node.spill()?;
                if spill.len() != head {
                    return Err(corrupt(
                        page,
                        format!(
                            "a split value begins with {head} bytes on page {head_page}, \
                             which holds {}",
                            spill.len()
                        ),
                    ));
                }
                // One allocation: the pieces straight into the shared value.
                spill.iter().chain(rest).copied().collect()
            }
        };
        Ok(Entry {
            key: Arc::from(item.key),
            seq: item.seq,
            kind: item.kind,
            value,
        })
    }

    /// The data page `head` that holds the first bytes of a split value of page `from` (the
    /// data page before it): from a scan's read-ahead window when it holds it, else read as
    /// `purpose` reads data pages (through the cache for a user read).
    fn head_page(
        &self,
        from: u64,
        head: u64,
        purpose: Purpose,
        ahead: Option<&Readahead>,
    ) -> Result<Node> {
        if !self.owns(head, 1) || head == from {
            return Err(corrupt(
                from,
                format!("a split value begins on page {head}, outside the run's data pages"),
            ));
        }
        match ahead {
            Some(a) if a.holds(head) => a.data_node(head),
            _ => self.load(head, 0, purpose),
        }
    }

    /// The value of `len` bytes in blob pages from `first` (referenced from page `from`),
    /// taken from a scan's read-ahead window when it holds them.
    fn read_blob(
        &self,
        from: u64,
        first: u64,
        len: u32,
        purpose: Purpose,
        ahead: Option<&Readahead>,
    ) -> Result<Vec<u8>> {
        let len = len as usize;
        if len > MAX_VALUE_LEN {
            return Err(corrupt(
                from,
                format!("blob value of {len} bytes exceeds the value limit"),
            ));
        }
        let n = len.div_ceil(PAYLOAD).max(1);
        if !self.owns(first, n as u64) {
            return Err(corrupt(
                from,
                format!("blob pages {first}+{n} lie outside the run's extents"),
            ));
        }
        let window;
        let buf: &[u8] = match ahead {
            Some(a) if a.holds(first) && a.holds(first + n as u64 - 1) => {
                let off = (first - a.start) as usize * PAGE_SIZE;
                &a.buf[off..off + n * PAGE_SIZE]
            }
            _ => {
                window = self.store.read_many(first, n, purpose)?;
                &window
            }
        };
        let mut out = Vec::with_capacity(len);
        for (i, p) in buf.chunks_exact(PAGE_SIZE).enumerate() {
            let page = first + i as u64;
            let h = header(page, p, PAGE_BLOB)?;
            let want = (len - i * PAYLOAD).min(PAYLOAD);
            if h.aux as usize != want {
                return Err(corrupt(
                    page,
                    format!("blob page holds {} bytes, {want} expected", h.aux),
                ));
            }
            out.extend_from_slice(&p[HEADER_LEN..HEADER_LEN + want]);
        }
        Ok(out)
    }

    /// Appends the versions of `key` with seq <= `max_seq` to `out`, newest first, stopping
    /// after the first Put or Delete (it hides older versions) and continuing through Merge
    /// entries. Checks the bloom filter first, then the store's row cache (which a lookup at or
    /// past the run's newest sequence number fills); reads count as `Purpose::UserRead`.
    pub fn get(&self, key: &[u8], max_seq: u64, out: &mut Vec<Entry>) -> Result<()> {
        self.get_hashed(key, hash64(key), max_seq, out)
    }

    /// [`Run::get`] for a key already hashed with [`hash64`]: a lookup that probes many runs
    /// hashes the key once.
    pub fn get_hashed(
        &self,
        key: &[u8],
        hash: u64,
        max_seq: u64,
        out: &mut Vec<Entry>,
    ) -> Result<()> {
        if self.meta.height == 0
            || key < self.meta.min_key.as_slice()
            || key > self.meta.max_key.as_slice()
            || !self.filter_says(key, hash)?
        {
            return Ok(());
        }
        let rows = self.store.cache().rows();
        if rows.enabled() {
            if let Some(row) = rows.get(self.id, hash, key) {
                // The row is what a lookup at the run's newest sequence number found: the
                // same as this lookup finds when no version in it is newer than `max_seq`.
                if row.first().is_none_or(|e| e.seq <= max_seq) {
                    out.extend(row.iter().cloned());
                    return Ok(());
                }
            }
        }
        let start = out.len();
        LOOKUP_CURSOR.with(|cell| match cell.try_borrow_mut() {
            Ok(mut c) => {
                let r = self.lookup(&mut c, key, max_seq, out);
                // The cursor keeps its path's room, not the pages on it.
                c.clear();
                r
            }
            Err(_) => self.lookup(&mut iter::Cursor::default(), key, max_seq, out),
        })?;
        if rows.enabled() && max_seq >= self.meta.max_seq {
            rows.insert(self.id, hash, key, &out[start..]);
        }
        Ok(())
    }

    /// The tree walk of [`Run::get_hashed`] with the cursor `c`.
    fn lookup(
        &self,
        c: &mut iter::Cursor,
        key: &[u8],
        max_seq: u64,
        out: &mut Vec<Entry>,
    ) -> Result<()> {
        let p = Purpose::UserRead;
        c.seek(self, key, max_seq, p)?;
        c.normalize_forward(self, p)?;
        while let Some((node, i)) = c.leaf() {
            let item = node.data(i)?;
            if item.key != key {
                break;
            }
            if item.fence.is_some() {
                c.next(self, p)?;
                continue;
            }
            let e = self.entry(node.page, &item, p, None)?;
            let stop = e.kind != Kind::Merge;
            out.push(e);
            if stop {
                break;
            }
            c.next(self, p)?;
        }
        Ok(())
    }

    /// The data page `page` of this run, read through the cache (a user read): how an FD-tree
    /// follows a fence to a page of the next level (`specs/fdtree.md` §4.1).
    pub(crate) fn data_page(&self, page: u64) -> Result<Node> {
        if !self.owns(page, 1) {
            return Err(corrupt(page, "a fence points outside the run's extents"));
        }
        self.load(page, 0, Purpose::UserRead)
    }

    /// The run's data pages in order, read in large requests bypassing the cache (`purpose`
    /// should not be `UserRead`), with every item, fences included.
    pub(crate) fn data_pages(self: &Arc<Self>, purpose: Purpose) -> DataPages {
        DataPages::new(self.clone(), purpose)
    }

    /// The entry a data item of page `page` holds (its blob value read when it has one).
    pub(crate) fn item_entry(
        &self,
        page: u64,
        item: &DataItem<'_>,
        purpose: Purpose,
    ) -> Result<Entry> {
        self.entry(page, item, purpose, None)
    }

    /// An iterator over the entries with key in (`lo`, `hi`), all versions, in entry order or
    /// (`reverse`) exactly reversed: key descending, seq ascending. Lazy: pages are read as it
    /// goes, through the cache when `purpose` is `UserRead`, bypassing it otherwise.
    pub fn iter(
        self: &Arc<Self>,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
        purpose: Purpose,
    ) -> RunIter {
        RunIter::new(self.clone(), lo, hi, reverse, purpose)
    }

    /// [`Run::iter`] whose read-ahead requests (scans that are not user reads) cover at most
    /// `pages` pages (1..=[`READAHEAD_PAGES`]): a merge of many runs bounds its buffers so.
    pub fn iter_with_readahead(
        self: &Arc<Self>,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
        purpose: Purpose,
        pages: u64,
    ) -> RunIter {
        let mut it = RunIter::new(self.clone(), lo, hi, reverse, purpose);
        it.set_readahead(pages);
        it
    }

    /// The number of entries with key < `key`, from the subtree counts of one root-to-leaf
    /// descent (exact for a well-formed run).
    pub fn rank(&self, key: &[u8]) -> Result<u64> {
        Ok(self.rank_bytes(key, Purpose::UserRead)?.0)
    }

    /// The entries with key < `key` and their user bytes (key and value lengths), from the
    /// subtree totals of one root-to-leaf descent; reads count as `purpose`.
    pub fn rank_bytes(&self, key: &[u8], purpose: Purpose) -> Result<(u64, u64)> {
        let Some(mut node) = self.root_node(purpose)? else {
            return Ok((0, 0));
        };
        let (mut entries, mut bytes) = (0u64, 0u64);
        while node.level > 0 {
            let i = node.lower_bound(key, u64::MAX)?.saturating_sub(1);
            for j in 0..i {
                let it = node.index(j)?;
                entries = entries.saturating_add(it.entries);
                bytes = bytes.saturating_add(it.bytes);
            }
            node = self.child_node(&node, i, purpose)?;
        }
        for j in 0..node.lower_bound(key, u64::MAX)? {
            let d = node.data(j)?;
            entries += 1;
            bytes = bytes.saturating_add(d.key.len() as u64 + d.value_len());
        }
        Ok((entries, bytes))
    }

    /// The key of the first entry (in entry order) at which the entries from the run's start
    /// up to and including it weigh at least `target`, an entry weighing `weight(1, its user
    /// bytes)` and a subtree `weight(entries, user bytes)` (so `weight` must be additive), from
    /// one descent; `None` when the whole run weighs less. Reads count as `purpose`.
    pub fn key_at_weight(
        &self,
        target: u64,
        weight: impl Fn(u64, u64) -> u64,
        purpose: Purpose,
    ) -> Result<Option<Vec<u8>>> {
        let Some(mut node) = self.root_node(purpose)? else {
            return Ok(None);
        };
        let mut before = 0u64;
        let root_is_leaf = node.level == 0;
        let mut at_root = true;
        'descend: while node.level > 0 {
            for j in 0..node.count {
                let it = node.index(j)?;
                let w = before.saturating_add(weight(it.entries, it.bytes));
                if w >= target {
                    node = self.child_node(&node, j, purpose)?;
                    at_root = false;
                    continue 'descend;
                }
                before = w;
            }
            if at_root {
                return Ok(None);
            }
            return Err(corrupt(
                node.page,
                "the page's subtrees weigh less than its parent's subtree totals say",
            ));
        }
        for j in 0..node.count {
            let d = node.data(j)?;
            before = before.saturating_add(weight(1, d.key.len() as u64 + d.value_len()));
            if before >= target {
                return Ok(Some(d.key.to_vec()));
            }
        }
        if root_is_leaf {
            return Ok(None);
        }
        Err(corrupt(
            node.page,
            "the page's entries weigh less than its parent's subtree totals say",
        ))
    }

    /// Reads every page of the run and verifies it: checksums, page types and levels, entry
    /// order within and across pages, index separators and subtree counts, blob values, the
    /// filter (no false negatives) and the header and metadata totals. Returns the number of
    /// entries. Reads bypass the cache and count as `Purpose::Merge` (maintenance).
    pub fn check(&self) -> Result<u64> {
        let p = Purpose::Merge;
        for e in &self.meta.extents {
            let mut start = e.start;
            while start < e.end() {
                let n = (e.end() - start).min(64);
                self.store.read_many(start, n as usize, p)?;
                start += n;
            }
        }
        self.read_filter(p)?;
        let header_page = self.meta.root_page;
        let buf = self.store.read_uncached(header_page, p)?;
        let h = decode_header(header_page, &buf)?;
        if h.tree_root != self.tree_root
            || h.height != self.meta.height
            || h.entries != self.meta.entries
        {
            return Err(corrupt(
                header_page,
                "run header changed since the run was opened",
            ));
        }
        let mut st = CheckState::default();
        if let Some(root) = self.root_node(Purpose::Merge)? {
            let got = self.check_node(&root, &mut st)?;
            if got.0 != st.entries {
                return Err(corrupt(
                    root.page,
                    "subtree counts disagree with the entries found",
                ));
            }
        }
        if let Some((page, _)) = st.spill {
            return Err(corrupt(
                page,
                "the run's last data page spills into an entry that is not there",
            ));
        }
        let m = &self.meta;
        let mismatch = |what: &str, got: String, want: String| {
            Err(corrupt(
                header_page,
                format!("run holds {what} {got} but its metadata says {want}"),
            ))
        };
        if st.entries != m.entries {
            return mismatch("entries", st.entries.to_string(), m.entries.to_string());
        }
        if st.bytes != m.user_bytes {
            return mismatch("user bytes", st.bytes.to_string(), m.user_bytes.to_string());
        }
        if st.data_pages != m.data_pages {
            return mismatch(
                "data pages",
                st.data_pages.to_string(),
                m.data_pages.to_string(),
            );
        }
        if st.entries > 0 {
            let first = st.first_key.clone().unwrap_or_default();
            let last = st.last.as_ref().map(|(k, _)| k.clone()).unwrap_or_default();
            if first != m.min_key || last != m.max_key {
                return mismatch(
                    "key range",
                    format!("{first:?}..{last:?}"),
                    format!("{:?}..{:?}", m.min_key, m.max_key),
                );
            }
            if st.min_seq != m.min_seq || st.max_seq != m.max_seq {
                return mismatch(
                    "seq range",
                    format!("{}..{}", st.min_seq, st.max_seq),
                    format!("{}..{}", m.min_seq, m.max_seq),
                );
            }
        }
        Ok(st.entries)
    }

    /// Checks one subtree; returns its entries, user bytes, and first entry's key and seq.
    fn check_node(&self, node: &Node, st: &mut CheckState) -> Result<(u64, u64, Vec<u8>, u64)> {
        node.validate_offsets()?;
        if node.level == 0 {
            st.data_pages += 1;
            let mut bytes = 0u64;
            for i in 0..node.count {
                let item = node.data(i)?;
                let fence = item.fence.is_some();
                if let Some((k, s)) = &st.last {
                    let ord = cmp_entries(k, *s, item.key, item.seq);
                    // Fences order before the entries of their key: several at (key, MAX),
                    // and an internal fence at the position of the entry after it.
                    let tie = ord == Ordering::Equal && (fence || st.last_fence);
                    if ord != Ordering::Less && !tie {
                        return Err(corrupt(node.page, format!("entry {i} is out of order")));
                    }
                }
                st.last_fence = fence;
                st.fenced |= fence;
                let new_key = st
                    .last
                    .as_ref()
                    .is_none_or(|(k, _)| k.as_slice() != item.key);
                if !fence && new_key && !self.may_contain(item.key) {
                    return Err(corrupt(
                        node.page,
                        format!("filter misses the key of entry {i}"),
                    ));
                }
                if st.first_key.is_none() {
                    st.first_key = Some(item.key.to_vec());
                }
                let spilled = if i == 0 { st.spill.take() } else { None };
                match (item.value, spilled) {
                    (ValueRef::Split { page, head, .. }, Some(s)) if s == (page, head) => {}
                    (ValueRef::Split { page, head, .. }, _) => {
                        return Err(corrupt(
                            node.page,
                            format!(
                                "entry {i} begins its value with {head} bytes on page {page}, \
                                 which is not the spill of the data page before it"
                            ),
                        ));
                    }
                    (_, Some(_)) => {
                        return Err(corrupt(
                            node.page,
                            "the data page before spills into an entry this page does not begin with",
                        ));
                    }
                    (ValueRef::Blob { page, len }, None) => {
                        self.read_blob(node.page, page, len, Purpose::Merge, None)?;
                    }
                    (ValueRef::Inline(_), None) => {}
                }
                bytes += item.key.len() as u64 + item.value_len();
                st.entries += 1;
                if !fence {
                    st.min_seq = st.min_seq.min(item.seq);
                    st.max_seq = st.max_seq.max(item.seq);
                }
                st.last = Some((item.key.to_vec(), item.seq));
            }
            st.bytes += bytes;
            let spill = node.spill()?;
            st.spill = (!spill.is_empty()).then_some((node.page, spill.len()));
            let (k, s) = node.key_seq(0)?;
            return Ok((node.count as u64, bytes, k.to_vec(), s));
        }
        let (mut entries, mut bytes) = (0u64, 0u64);
        let mut first = None;
        for i in 0..node.count {
            let item = node.index(i)?;
            if let Some((k, s)) = &st.last {
                let ord = cmp_entries(k, *s, &item.key, item.seq);
                if ord == Ordering::Greater || (ord == Ordering::Equal && !st.fenced) {
                    return Err(corrupt(
                        node.page,
                        format!("separator {i} does not order after the entries before it"),
                    ));
                }
            }
            let child = self.child_node(node, i, Purpose::Merge)?;
            let (ce, cb, ck, cs) = self.check_node(&child, st)?;
            if ce != item.entries || cb != item.bytes {
                return Err(corrupt(
                    node.page,
                    format!(
                        "index entry {i} records {} entries / {} bytes, child {} holds {ce} / {cb}",
                        item.entries, item.bytes, child.page
                    ),
                ));
            }
            if cmp_entries(&item.key, item.seq, &ck, cs) == Ordering::Greater {
                return Err(corrupt(
                    node.page,
                    format!(
                        "separator {i} orders after the first entry of page {}",
                        child.page
                    ),
                ));
            }
            entries += ce;
            bytes += cb;
            first.get_or_insert((ck, cs));
        }
        let (k, s) = first.ok_or_else(|| corrupt(node.page, "index page without children"))?;
        Ok((entries, bytes, k, s))
    }
}

/// The payload of filter page `page` (its `aux` bytes after the header).
fn filter_payload(page: u64, p: &[u8]) -> Result<&[u8]> {
    let h = header(page, p, PAGE_FILTER)?;
    p.get(HEADER_LEN..HEADER_LEN + h.aux as usize)
        .filter(|_| h.aux as usize <= PAYLOAD)
        .ok_or_else(|| corrupt(page, format!("filter page claims {} bytes", h.aux)))
}

/// A run known from its metadata and opened (header and filter read) on first use, as
/// LevelDB's table cache opens tables: an index that lists many runs in its manifest metadata
/// opens without reading them, and a damaged run fails the reads that need it rather than the
/// whole open. Shared as `Arc<LazyRun>`; it never releases the run's extents (its owner does).
pub struct LazyRun {
    store: Arc<PageFile>,
    meta: RunMeta,
    run: std::sync::OnceLock<Arc<Run>>,
}

impl LazyRun {
    /// A run from its metadata, not opened yet.
    pub fn new(store: Arc<PageFile>, meta: RunMeta) -> LazyRun {
        LazyRun {
            store,
            meta,
            run: std::sync::OnceLock::new(),
        }
    }

    /// A run that is already open (just built).
    pub fn from_run(run: Run) -> LazyRun {
        let lazy = LazyRun::new(run.store.clone(), run.meta.clone());
        let _ = lazy.run.set(Arc::new(run));
        lazy
    }

    /// The run's metadata.
    pub fn meta(&self) -> &RunMeta {
        &self.meta
    }

    /// Whether the run has been opened (its filter is in memory).
    pub fn is_open(&self) -> bool {
        self.run.get().is_some()
    }

    /// The open run, opened now if it was not yet. A failed open is not remembered: the next
    /// call tries again.
    pub fn run(&self) -> Result<&Arc<Run>> {
        if let Some(r) = self.run.get() {
            return Ok(r);
        }
        let run = Arc::new(Run::open(self.store.clone(), self.meta.clone())?);
        Ok(self.run.get_or_init(|| run))
    }
}

/// What [`Run::check`] accumulates while walking the leaves in order.
struct CheckState {
    /// Whether the last item was a fence, and whether any was (a fenced run's items may tie).
    last_fence: bool,
    fenced: bool,
    entries: u64,
    bytes: u64,
    data_pages: u64,
    first_key: Option<Vec<u8>>,
    last: Option<(Vec<u8>, u64)>,
    min_seq: u64,
    max_seq: u64,
    /// The last data page checked and the length of its spill, when it has one: the next data
    /// page's first entry must be the split value that begins there.
    spill: Option<(u64, usize)>,
}

impl Default for CheckState {
    fn default() -> Self {
        CheckState {
            last_fence: false,
            fenced: false,
            entries: 0,
            bytes: 0,
            data_pages: 0,
            first_key: None,
            last: None,
            min_seq: u64::MAX,
            max_seq: 0,
            spill: None,
        }
    }
}
