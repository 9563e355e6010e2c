//! Bulk-building a run bottom-up: data pages are filled in entry order and written a chunk
//! (`extent_pages` pages) at a time; the index levels, the filter and the header follow at
//! [`RunBuilder::finish`], or over bounded steps of [`RunBuilder::finish_step`].

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::Arc;

use super::format::{
    encode_data_blob, encode_data_inline, encode_data_split, encode_fence, put_header, IndexItem,
    SlottedPage, AUX_CONT_PREV, FORMAT_MAJOR, FORMAT_MINOR, HEADER_LEN, MAGIC, MAX_ITEM, NO_ROOT,
    PAGE_BLOB, PAGE_FILTER, PAGE_HEADER, PAGE_INDEX, PAYLOAD, SPLIT_FLAG, SPLIT_MIN_ROOM,
};
use super::{Region, RunMeta, RunOptions};
use crate::entry::{check_key, check_value, cmp_entries, codec, Entry};
use crate::error::{Error, Result};
use crate::filter::{FilterBuilder, FilterFinish, FilterSpec};
use crate::storage::{AlignedBuf, Done, Extent, PageFile, Pending, PAGE_BODY, PAGE_SIZE};

/// Writes a builder has handed to the page file's I/O threads and not yet waited for: it fills
/// the next chunk while they are written. The builder holds at most this many buffers being
/// written (each a chunk, or a large value's or the filter's pages), the chunk being filled,
/// and as many spare chunk buffers.
pub(crate) const WRITES_IN_FLIGHT: usize = 2;

/// The chunk being filled.
struct Chunk {
    extent: Extent,
    buf: AlignedBuf,
    used: u64,
    from: Origin,
}

/// Where a chunk's pages come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The allocator: an unused tail goes back to it.
    Alloc,
    /// The front of the append region (data pages, placed upwards): an unused tail goes back
    /// to the hole.
    Front,
    /// The back of the append region (metadata pages, placed downwards from the chunk's end):
    /// an unused head goes back to the hole.
    Back,
}

/// Lets `fill(i, body)` write the body of each page `i` of `pages` (whole pages).
fn fill_pages(pages: &mut [u8], mut fill: impl FnMut(usize, &mut [u8])) {
    for (i, page) in pages.chunks_exact_mut(PAGE_SIZE).enumerate() {
        fill(i, page);
    }
}

/// Hands out page numbers and writes pages, a chunk at a time and behind the caller (the page
/// file's I/O threads write a chunk while the next is filled); remembers every extent it
/// allocated so that they can be listed in the run's metadata or released.
struct Sink {
    store: Arc<PageFile>,
    opts: RunOptions,
    chunk: Option<Chunk>,
    /// Extents holding written pages, in allocation order.
    done: Vec<Extent>,
    /// Writes handed off and not yet waited for, oldest first.
    writing: VecDeque<Pending<Done>>,
    /// Buffers of chunks written, reused for the next (no allocation per chunk).
    spare: Vec<AlignedBuf>,
    /// The append region the run is placed in, if any (its cursors move as pages are placed).
    region: Option<Region>,
    /// Whether the builder is placing metadata (index, filter, header) pages: in a region they
    /// come from its back.
    tail: bool,
    /// Extents in `done` when the metadata began.
    data_extents: usize,
    /// Pages handed to the page file to write so far.
    handed: u64,
    /// Pages placed so far (written at once or with their chunk).
    placed: u64,
}

impl Sink {
    /// Pages of a chunk: what one allocation and one write cover.
    fn chunk_pages(&self) -> u64 {
        self.opts.extent_pages.max(1)
    }

    /// Places `n` contiguous pages, letting `fill(i, body)` write the body of page `i` (a zeroed
    /// `PAGE_SIZE` slice whose checksum is added later). Returns the first page number.
    fn put(&mut self, n: u64, mut fill: impl FnMut(usize, &mut [u8])) -> Result<u64> {
        let chunk_pages = self.chunk_pages();
        if n > chunk_pages {
            // Larger than a chunk: an extent of its own, allocated exactly (from the region's
            // hole when it has room; the open chunk is written first, so that its unused part
            // goes back to the hole before the hole is cut).
            let start = self.reserve(n)?;
            self.write_at(start, n, fill)?;
            return Ok(start);
        }
        if self
            .chunk
            .as_ref()
            .is_some_and(|c| c.used + n > c.extent.pages)
        {
            self.flush_chunk()?;
        }
        let c = match &mut self.chunk {
            Some(c) => c,
            None => {
                let (extent, from) = match self.take_from_region(n, chunk_pages) {
                    Some(x) => x,
                    None => (self.store.alloc().alloc(chunk_pages), Origin::Alloc),
                };
                let len = chunk_pages as usize * PAGE_SIZE;
                let buf = match self.spare.pop() {
                    Some(b) if b.len() == len => b,
                    // Each page is zeroed as it is placed.
                    _ => AlignedBuf::for_overwrite(len),
                };
                self.chunk.insert(Chunk {
                    extent,
                    buf,
                    used: 0,
                    from,
                })
            }
        };
        // Front and allocator chunks fill upwards; a back chunk fills downwards from its end,
        // each placement's pages in ascending order.
        let first = match c.from {
            Origin::Back => (c.extent.pages - c.used - n) as usize,
            _ => c.used as usize,
        };
        let pages = &mut c.buf[first * PAGE_SIZE..(first + n as usize) * PAGE_SIZE];
        fill_pages(pages, |i, page| {
            // A reused buffer holds the previous chunk's bytes.
            page.fill(0);
            fill(i, page);
        });
        c.used += n;
        self.placed += n;
        Ok(c.extent.start + first as u64)
    }

    /// Places `n` contiguous pages as an extent of their own, allocated exactly (from the
    /// region's hole when it has room; the open chunk is written first, so that its unused part
    /// goes back to the hole before the hole is cut), to be written by [`Sink::write_at`]. The
    /// extent is the run's from here on: [`Sink::release_all`] gives it back on failure.
    fn reserve(&mut self, n: u64) -> Result<u64> {
        if self.region.is_some() {
            self.flush_chunk()?;
        }
        let extent = match self.take_from_region(n, n) {
            Some((e, _)) => e,
            None => self.store.alloc().alloc(n),
        };
        self.note_extent(extent);
        Ok(extent.start)
    }

    /// Writes `n` pages at `start` (inside an extent from [`Sink::reserve`]) from a buffer of
    /// their own, `fill(i, body)` writing the body of page `i` as in [`Sink::put`].
    fn write_at(&mut self, start: u64, n: u64, fill: impl FnMut(usize, &mut [u8])) -> Result<()> {
        let mut buf = AlignedBuf::zeroed(n as usize * PAGE_SIZE);
        fill_pages(&mut buf, fill);
        let len = buf.len();
        self.placed += n;
        self.hand_off(start, buf, len)
    }

    /// Places `n` zeroed pages in the chunk (as [`Sink::put`] does, `n` at most a chunk), for
    /// [`Sink::fill_placed`] to fill before the chunk is written; they count as placed only
    /// once filled.
    fn put_blank(&mut self, n: u64) -> Result<u64> {
        let start = self.put(n, |_, _| {})?;
        self.placed -= n;
        Ok(start)
    }

    /// Fills `n` pages at `start`, placed by [`Sink::put_blank`] in the chunk being filled,
    /// `fill(i, body)` writing the body of page `i` as in [`Sink::put`].
    fn fill_placed(
        &mut self,
        start: u64,
        n: u64,
        fill: impl FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        let c = self
            .chunk
            .as_mut()
            .filter(|c| start >= c.extent.start && start + n <= c.extent.end())
            .ok_or_else(|| {
                Error::InvalidOption(format!("run pages {start}+{n} are not in the open chunk"))
            })?;
        let first = (start - c.extent.start) as usize;
        fill_pages(
            &mut c.buf[first * PAGE_SIZE..(first + n as usize) * PAGE_SIZE],
            fill,
        );
        self.placed += n;
        Ok(())
    }

    /// Takes up to `want` (at least `need`) pages from the region's hole: from its front for
    /// data pages, from its back for metadata pages. `None` when there is no region or its hole
    /// holds fewer than `need` pages (the run then continues in allocated extents).
    fn take_from_region(&mut self, need: u64, want: u64) -> Option<(Extent, Origin)> {
        let tail = self.tail;
        let r = self.region.as_mut()?;
        let hole = r.hole_pages();
        if hole < need {
            return None;
        }
        let pages = want.min(hole);
        if tail {
            r.back -= pages;
            Some((
                Extent {
                    start: r.back,
                    pages,
                },
                Origin::Back,
            ))
        } else {
            let start = r.front;
            r.front += pages;
            Some((Extent { start, pages }, Origin::Front))
        }
    }

    /// Records an extent of the run, extending the last one when it directly follows it (the
    /// allocator hands out consecutive chunks from the same free range), so that a large run's
    /// metadata lists a few extents, not one per chunk.
    fn note_extent(&mut self, e: Extent) {
        // Metadata extents are not joined to data extents (in a region whose hole closed they
        // meet): the data extents stay the ones a scan reads in order.
        let joinable = self.region.is_none() || !self.tail || self.done.len() > self.data_extents;
        // Nor are extents inside a region joined to extents outside it: the region's owner
        // tells them apart by containment.
        let region = self.region.map(|r| r.extent);
        let inside = |x: &Extent| region.is_some_and(|r| x.start >= r.start && x.end() <= r.end());
        let joinable = joinable && self.done.last().is_none_or(|l| inside(l) == inside(&e));
        match self.done.last_mut() {
            Some(last) if joinable && last.end() == e.start => last.pages += e.pages,
            // Metadata placed downwards in an append region.
            Some(last) if joinable && self.tail && e.end() == last.start => {
                last.start = e.start;
                last.pages += e.pages;
            }
            _ => self.done.push(e),
        }
    }

    /// Writes the filled part of the chunk and gives its unused part back (to the allocator, or
    /// to the region's hole).
    fn flush_chunk(&mut self) -> Result<()> {
        let Some(c) = self.chunk.take() else {
            return Ok(());
        };
        let unused = c.extent.pages - c.used;
        let used = match c.from {
            Origin::Back => Extent {
                start: c.extent.start + unused,
                pages: c.used,
            },
            _ => Extent {
                start: c.extent.start,
                pages: c.used,
            },
        };
        match (c.from, self.region.as_mut()) {
            (Origin::Front, Some(r)) => r.front = used.end(),
            (Origin::Back, Some(r)) => r.back = used.start,
            _ => self.store.alloc().release(Extent {
                start: used.end(),
                pages: unused,
            }),
        }
        if used.pages == 0 {
            return Ok(());
        }
        self.note_extent(used);
        if c.from == Origin::Back && unused > 0 {
            // The used pages are the end of the buffer: write them from a buffer of their own.
            let off = unused as usize * PAGE_SIZE;
            let buf = AlignedBuf::from_slice(&c.buf[off..]);
            self.spare_buffer(c.buf);
            return self.hand_off(used.start, buf, used.pages as usize * PAGE_SIZE);
        }
        self.hand_off(used.start, c.buf, used.pages as usize * PAGE_SIZE)
    }

    /// Keeps a chunk buffer for the next chunk.
    fn spare_buffer(&mut self, buf: AlignedBuf) {
        if buf.len() == self.chunk_pages() as usize * PAGE_SIZE
            && self.spare.len() < WRITES_IN_FLIGHT
        {
            self.spare.push(buf);
        }
    }

    /// Starts placing metadata pages. In a region the data pages' chunk is written first, so
    /// that its unused part goes back to the hole, which the metadata then fills from the back;
    /// outside one the metadata continues the data's chunk, exactly as before regions existed.
    fn start_tail(&mut self) -> Result<()> {
        if !self.tail {
            // Outside a region the metadata follows the data in the same chunk, as always.
            if self.region.is_some() {
                self.flush_chunk()?;
            }
            self.tail = true;
            self.data_extents = self.done.len();
        }
        Ok(())
    }

    /// Hands the first `len` bytes of `buf` to the page file to write at page `start`; waits
    /// for the oldest write when [`WRITES_IN_FLIGHT`] are out.
    fn hand_off(&mut self, start: u64, buf: AlignedBuf, len: usize) -> Result<()> {
        let purpose = self.opts.purpose;
        while self.writing.len() >= WRITES_IN_FLIGHT {
            if let Err(e) = self.wait_oldest() {
                // This buffer's pages go back with the builder's; its write is not started.
                drop(buf);
                return Err(e);
            }
        }
        let w = self.store.write_behind(start, buf, len, purpose);
        self.writing.push_back(w);
        self.handed += (len / PAGE_SIZE) as u64;
        Ok(())
    }

    /// Waits for the oldest write; keeps its buffer for the next chunk when it is a chunk's
    /// (a large value's or a filter's buffer is freed).
    fn wait_oldest(&mut self) -> Result<()> {
        let Some(w) = self.writing.pop_front() else {
            return Ok(());
        };
        let (r, buf) = w.wait()?;
        self.spare_buffer(buf);
        r
    }

    /// Waits for every write handed off; the first failure among them is the result.
    fn settle(&mut self) -> Result<()> {
        let mut first = Ok(());
        while !self.writing.is_empty() {
            let r = self.wait_oldest();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Gives back everything allocated, once no write into it is still in flight. Pages taken
    /// from an append region are not the builder's to release: the region's owner keeps its
    /// committed cursors, and what was written past them is unreferenced.
    fn release_all(&mut self) {
        // A failed write's error was (or will be) reported by the call that waits for it; the
        // pages go back either way.
        let _ = self.settle();
        let region = self.region.map(|r| r.extent);
        let inside = |e: &Extent| region.is_some_and(|r| e.start >= r.start && e.end() <= r.end());
        if let Some(c) = self.chunk.take() {
            if c.from == Origin::Alloc {
                self.store.alloc().release(c.extent);
            }
        }
        for e in self.done.drain(..) {
            if !inside(&e) {
                self.store.alloc().release(e);
            }
        }
    }
}

/// Builds one run from entries arriving in [`cmp_entries`] order.
///
/// Memory is bounded by the chunk being filled and the buffers being written behind
/// ([`WRITES_IN_FLIGHT`], each a chunk or a large value's or the filter's pages) with as many
/// spare chunks, the index entries of the level above the data pages, and the filter's key
/// hashes (8 bytes per distinct key). Dropping a builder without
/// [`finish`](RunBuilder::finish) releases what it allocated, as [`abandon`](RunBuilder::abandon)
/// does; after an error from [`add`](RunBuilder::add) the builder should be abandoned.
pub struct RunBuilder {
    sink: Sink,
    page: SlottedPage,
    /// Separator of the page being filled, and its totals.
    page_first: Option<(Vec<u8>, u64)>,
    page_bytes: u64,
    /// Index entries for the level above the data pages.
    level1: Vec<IndexItem>,
    filter: Option<FilterBuilder>,
    last: Option<(Vec<u8>, u64)>,
    min_key: Vec<u8>,
    min_seq: u64,
    max_seq: u64,
    entries: u64,
    user_bytes: u64,
    data_pages: u64,
    blob_pages: u64,
    item: Vec<u8>,
    /// Fenced mode (FD-tree levels): fence items are accepted, and a data page that would
    /// start with an entry starts with an internal fence instead.
    fenced: bool,
    /// Whether an entry that does not fit the page being filled may begin in its free room
    /// ([`SPLIT_FLAG`]); off in fenced runs, whose searches read one page per level.
    split: bool,
    /// Page of the last external fence added (what an internal fence points to).
    last_ext_pid: Option<u64>,
    /// Whether the last item added was a fence.
    last_was_fence: bool,
    /// Key of the last entry (not fence) added: a page starting with the same key is marked
    /// [`AUX_CONT_PREV`].
    last_entry_key: Option<Vec<u8>>,
    /// The `aux` field of the data page being filled.
    page_aux: u32,
    /// Fence items added (internal ones included).
    fences: u64,
    /// When recording: per data page written, the key of its first item and its page number.
    pages: Option<Vec<(Vec<u8>, u64)>>,
    /// Where a finish in steps stands (`None`: not started).
    fin: Option<Finish>,
    finished: bool,
}

/// One index level being written: items of the level below, packed into pages.
struct IndexLevel {
    items: Vec<IndexItem>,
    pos: usize,
    level: u8,
    page: SlottedPage,
    first: Option<(Vec<u8>, u64)>,
    entries: u64,
    bytes: u64,
    up: Vec<IndexItem>,
    buf: Vec<u8>,
}

/// The phases of a finish in steps: index levels bottom-up, the filter, the filter's pages
/// (a few per step), then the header.
enum Finish {
    Index {
        level: IndexLevel,
        height: u32,
    },
    Filter {
        tree_root: u64,
        height: u32,
        filter: Option<FilterFinish>,
    },
    /// Writing the filter's pages into the pages reserved for them at `start` (in the open
    /// chunk, or an extent of their own); `next` pages are written.
    FilterPages {
        tree_root: u64,
        height: u32,
        bytes: Vec<u8>,
        start: u64,
        next: u64,
        in_chunk: bool,
    },
    /// The filter is placed (at `filter_page`, `filter_pages` long; 0 and 0 for none): the
    /// header page and the last chunk remain.
    Header {
        tree_root: u64,
        height: u32,
        filter: Option<Vec<u8>>,
        filter_page: u64,
        filter_pages: u64,
    },
    Done {
        meta: RunMeta,
        tree_root: u64,
        filter: Option<Vec<u8>>,
    },
}

impl RunBuilder {
    /// A builder writing into `store`. It owns its handle of the store, so a builder can be
    /// kept between bounded steps of work (an index's resumable merge) and finished later.
    pub fn new(store: Arc<PageFile>, opts: RunOptions) -> Self {
        let spec = FilterSpec::Bloom {
            bits_per_key: opts.bloom_bits_per_key,
        };
        RunBuilder::with_filter(store, opts, spec)
    }

    /// A builder whose run carries the filter `spec` instead of the bloom filter
    /// `opts.bloom_bits_per_key` asks for (the `stbe` index builds quotient filters).
    pub fn with_filter(store: Arc<PageFile>, opts: RunOptions, spec: FilterSpec) -> Self {
        let filter = FilterBuilder::for_spec(spec);
        let store_split = store.split_entries();
        RunBuilder {
            sink: Sink {
                store,
                opts,
                chunk: None,
                done: Vec::new(),
                writing: VecDeque::new(),
                spare: Vec::new(),
                region: None,
                tail: false,
                data_extents: 0,
                handed: 0,
                placed: 0,
            },
            page: SlottedPage::default(),
            page_first: None,
            page_bytes: 0,
            level1: Vec::new(),
            filter,
            last: None,
            min_key: Vec::new(),
            min_seq: u64::MAX,
            max_seq: 0,
            entries: 0,
            user_bytes: 0,
            data_pages: 0,
            blob_pages: 0,
            item: Vec::new(),
            fenced: false,
            split: store_split,
            last_ext_pid: None,
            last_was_fence: false,
            last_entry_key: None,
            page_aux: 0,
            fences: 0,
            pages: None,
            fin: None,
            finished: false,
        }
    }

    /// A builder that appends its run into `region`: data (and blob) pages from the region's
    /// front upwards, metadata (index, filter, header) pages from its back downwards, so that
    /// the hole between stays free for the next run appended. Pages that do not fit the hole go
    /// to extents from the allocator, as for any run. The region's new cursors come back from
    /// [`Run::from_builder_in_region`](super::Run::from_builder_in_region) (or
    /// [`RunBuilder::region`] after [`RunBuilder::finish_step`] completed).
    pub fn in_region(store: Arc<PageFile>, opts: RunOptions, region: Region) -> Self {
        let mut b = RunBuilder::new(store, opts);
        b.sink.region = Some(region);
        b
    }

    /// The append region with the cursors as the pages placed so far left them (`None` for a
    /// builder not placing into a region).
    pub fn region(&self) -> Option<Region> {
        self.sink.region
    }

    /// Makes this a fenced run (an FD-tree level, `specs/fdtree.md` §3): it takes external
    /// fences through [`RunBuilder::add_fence`], and every data page that would start with an
    /// entry starts with an internal fence (the entry's key and seq, pointing where the last
    /// external fence points), so that the first item of every page is a fence (Invariant 1).
    /// Call before adding anything.
    pub fn set_fenced(&mut self) {
        self.fenced = true;
        self.split = false;
    }

    /// Whether entries may be split across two data pages ([`SPLIT_FLAG`], on by default and
    /// off in fenced runs): off, a page whose free room cannot take the next whole entry is
    /// left with that room empty, as runs of format minor 0 were.
    pub fn set_split(&mut self, on: bool) {
        self.split = on && !self.fenced;
    }

    /// Records, for every data page written, the key of its first item and its page number
    /// ([`RunBuilder::page_list`]): what the external fences of the level above are made of.
    pub fn record_pages(&mut self) {
        self.pages = Some(Vec::new());
    }

    /// The pages recorded so far (see [`RunBuilder::record_pages`]): complete once the run is
    /// finished or [`RunBuilder::seal_page`] was called after the last item.
    pub fn page_list(&self) -> &[(Vec<u8>, u64)] {
        self.pages.as_deref().unwrap_or(&[])
    }

    /// Takes the recorded page list (see [`RunBuilder::record_pages`]).
    pub fn take_page_list(&mut self) -> Vec<(Vec<u8>, u64)> {
        self.pages.take().unwrap_or_default()
    }

    /// Pages handed to the page file to write so far (a chunk's pages when the chunk is
    /// written): what a step of [`RunBuilder::finish_step`] wrote is the difference.
    pub fn pages_written(&self) -> u64 {
        self.sink.handed
    }

    /// Pages placed so far, written at once or with their chunk (a step of
    /// [`RunBuilder::finish_step`] places at most about its budget in pages).
    pub fn pages_placed(&self) -> u64 {
        self.sink.placed
    }

    /// Whether [`RunBuilder::finish_step`] has completed the run ([`RunBuilder::finish`] then
    /// returns at once).
    pub fn is_complete(&self) -> bool {
        matches!(self.fin, Some(Finish::Done { .. }))
    }

    /// Fence items added so far (internal fences included); [`RunBuilder::entries`] counts
    /// them too.
    pub fn fences(&self) -> u64 {
        self.fences
    }

    /// Writes the data page being filled now (it would be at `finish`), so that the page list
    /// is complete.
    pub fn seal_page(&mut self) -> Result<()> {
        self.seal_data_page()
    }

    /// Appends an external fence pointing at page `pid` of the next lower level, with `key`
    /// (the first key of that page; empty for its page 0, the MIN fence). Fences order before
    /// every entry with the same key; only a fenced builder takes them.
    pub fn add_fence(&mut self, key: &[u8], pid: u64) -> Result<()> {
        if !self.fenced {
            return Err(Error::InvalidOption(
                "a fence added to a run that is not fenced".into(),
            ));
        }
        let seq = u64::MAX;
        if let Some((k, s)) = &self.last {
            if cmp_entries(k, *s, key, seq) == Ordering::Greater {
                debug_assert!(false, "fence out of order: ({k:?}, {s}) then ({key:?})");
                return Err(Error::InvalidOption(format!(
                    "run fence out of order after seq {s} (keys of {} and {} bytes)",
                    k.len(),
                    key.len()
                )));
            }
        }
        if key.len() > crate::entry::MAX_KEY_LEN {
            return Err(Error::InvalidKey { len: key.len() });
        }
        self.item.clear();
        encode_fence(&mut self.item, false, seq, key, pid);
        self.place(key, seq, true)?;
        self.last_ext_pid = Some(pid);
        self.fences += 1;
        self.note_item(key, seq, key.len() as u64);
        self.last_was_fence = true;
        Ok(())
    }

    /// Puts the item in `self.item` into the data page, starting a new page when it does not
    /// fit (with an internal fence first in a fenced run, when the item is an entry).
    fn place(&mut self, key: &[u8], seq: u64, fence: bool) -> Result<()> {
        if !self.page.fits(self.item.len()) {
            self.seal_data_page()?;
        }
        if self.page.len() == 0 {
            if self.fenced && !fence {
                let pid = self.last_ext_pid.ok_or_else(|| {
                    Error::InvalidOption("a fenced run's first item must be a fence".into())
                })?;
                let mut f = Vec::new();
                encode_fence(&mut f, true, seq, key, pid);
                self.page.push(&f);
                self.fences += 1;
                self.entries += 1;
                let kb = key.len() as u64;
                self.page_bytes += kb;
                self.user_bytes += kb;
            }
            // A split entry's whole key is its page's separator (not a shortened one), so that
            // a lookup of the key can tell from the index that the value begins on the page
            // before (`Run::leaf_for`).
            let split = !fence && self.item.first().is_some_and(|b| b & SPLIT_FLAG != 0);
            self.page_first = Some(match self.last.as_ref() {
                Some((p, _)) if split && p.as_slice() != key => (key.to_vec(), u64::MAX),
                last => separator(last, key, seq),
            });
            self.page_aux = if !fence && self.last_entry_key.as_deref() == Some(key) {
                AUX_CONT_PREV
            } else {
                0
            };
            if let Some(p) = &mut self.pages {
                p.push((key.to_vec(), u64::MAX));
            }
        }
        self.page.push(&self.item);
        Ok(())
    }

    /// Counts an item placed (entry or fence) and makes it the last one.
    fn note_item(&mut self, key: &[u8], seq: u64, user_bytes: u64) {
        self.page_bytes += user_bytes;
        self.user_bytes += user_bytes;
        self.entries += 1;
        if self.last.is_none() {
            self.min_key = key.to_vec();
        }
        match &mut self.last {
            Some((k, s)) => {
                if k.as_slice() != key {
                    k.clear();
                    k.extend_from_slice(key);
                }
                *s = seq;
            }
            None => self.last = Some((key.to_vec(), seq)),
        }
    }

    /// Appends one entry. Entries must arrive in [`cmp_entries`] order with no (key, seq)
    /// twice: anything else is a bug of the caller (a debug assertion, and
    /// `Error::InvalidOption` in release builds). Keys and values are checked against the limits.
    pub fn add(&mut self, e: &Entry) -> Result<()> {
        if e.key.len() > crate::entry::MAX_KEY_LEN {
            // A kind may prefix user keys with up to `KEY_ROOM` bytes of its own (`boa`'s
            // fingerprint); what a user gave was checked against the limit on the way in.
            if e.key.len() > crate::entry::MAX_KEY_LEN + super::KEY_ROOM {
                return Err(Error::InvalidKey { len: e.key.len() });
            }
        } else {
            check_key(&e.key)?;
        }
        check_value(&e.value)?;
        let new_key = match &self.last {
            Some((k, s)) => {
                let ord = cmp_entries(k, *s, &e.key, e.seq);
                // In a fenced run an entry follows its internal fence at the same position.
                let tie_after_fence = ord == Ordering::Equal && self.last_was_fence;
                if ord != Ordering::Less && !tie_after_fence {
                    debug_assert!(
                        false,
                        "run entries out of order: ({k:?}, {s}) then ({:?}, {})",
                        e.key, e.seq
                    );
                    return Err(Error::InvalidOption(format!(
                        "run entries out of order: seq {s} then seq {} (keys of {} and {} bytes)",
                        e.seq,
                        k.len(),
                        e.key.len()
                    )));
                }
                k.as_slice() != &*e.key
            }
            None => true,
        };

        self.item.clear();
        encode_data_inline(&mut self.item, e.kind, e.seq, &e.key, &e.value);
        if self.item.len() > MAX_ITEM {
            let blob_page = self.put_blob(&e.value)?;
            self.item.clear();
            encode_data_blob(
                &mut self.item,
                e.kind,
                e.seq,
                &e.key,
                blob_page,
                e.value.len() as u32,
            );
        } else if self.split
            && self.page.len() > 0
            && !self.page.fits(self.item.len())
            && self.page.room() >= SPLIT_MIN_ROOM
            && e.value.len() >= SPLIT_MIN_ROOM
        {
            // The entry begins in the room the page would leave empty; the rest goes into the
            // next page with the page number of this one.
            let head = self
                .page
                .room()
                .min(e.value.len())
                .min(usize::from(u16::MAX));
            let head_page = self.seal_data_page_with(&e.value[..head])?;
            self.item.clear();
            encode_data_split(
                &mut self.item,
                e.kind,
                e.seq,
                &e.key,
                head_page,
                head,
                &e.value[head..],
            );
        }
        self.place(&e.key, e.seq, false)?;
        self.min_seq = self.min_seq.min(e.seq);
        self.max_seq = self.max_seq.max(e.seq);
        if new_key {
            if let Some(f) = &mut self.filter {
                f.add_key(&e.key);
            }
        }
        self.note_item(&e.key, e.seq, e.user_bytes() as u64);
        self.last_was_fence = false;
        if self.last_entry_key.as_deref() != Some(&e.key[..]) {
            let k = self.last_entry_key.get_or_insert_with(Vec::new);
            k.clear();
            k.extend_from_slice(&e.key);
        }
        Ok(())
    }

    /// Entries added so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Bytes the run occupies so far: whole pages written or placed (data and blob) plus the
    /// page being filled. Index, filter and header pages come on top at `finish`.
    pub fn bytes_so_far(&self) -> u64 {
        (self.data_pages + self.blob_pages) * PAGE_SIZE as u64
            + (HEADER_LEN + 2 * (self.page.len() + 1) + self.page.items.len()) as u64
    }

    fn put_blob(&mut self, value: &[u8]) -> Result<u64> {
        let n = value.len().div_ceil(PAYLOAD).max(1);
        self.blob_pages += n as u64;
        self.sink.put(n as u64, |i, body| {
            let part = &value[i * PAYLOAD..((i + 1) * PAYLOAD).min(value.len())];
            put_header(body, PAGE_BLOB, 0, 0, part.len() as u32);
            body[HEADER_LEN..HEADER_LEN + part.len()].copy_from_slice(part);
        })
    }

    fn seal_data_page(&mut self) -> Result<()> {
        self.seal_data_page_with(&[]).map(|_| ())
    }

    /// Writes the data page being filled with `spill` after its items (the first bytes of the
    /// next entry's value, which the caller checked fit); returns its page number.
    fn seal_data_page_with(&mut self, spill: &[u8]) -> Result<u64> {
        let Some((key, seq)) = self.page_first.take() else {
            return Ok(0);
        };
        let entries = self.page.len() as u64;
        let page = &mut self.page;
        let aux = self.page_aux;
        let child = self
            .sink
            .put(1, |_, body| page.write_with_spill(body, aux, spill))?;
        if let Some(last) = self.pages.as_mut().and_then(|p| p.last_mut()) {
            last.1 = child;
        }
        self.level1.push(IndexItem {
            key,
            seq,
            child,
            entries,
            bytes: self.page_bytes,
        });
        self.page_bytes = 0;
        self.data_pages += 1;
        Ok(child)
    }

    /// Writes the rest of the run (last data page, index levels, filter, header) and returns
    /// its metadata. An empty builder gives a valid empty run (a header page only).
    pub fn finish(mut self) -> Result<RunMeta> {
        let r = self.finish_inner();
        if r.is_err() {
            self.sink.release_all();
        }
        self.finished = true;
        r.map(|(meta, _)| meta)
    }

    /// [`finish`](RunBuilder::finish), also returning the tree root (data or index page, or
    /// `NO_ROOT`) and the filter, so that the run can be opened without reading them back.
    #[allow(clippy::type_complexity)]
    pub(crate) fn finish_parts(mut self) -> Result<(Arc<PageFile>, RunMeta, u64, Option<Vec<u8>>)> {
        let r = self.finish_inner();
        if r.is_err() {
            self.sink.release_all();
        }
        self.finished = true;
        r.map(|(meta, (root, filter))| (self.sink.store.clone(), meta, root, filter))
    }

    /// Finishes the run in steps of about `budget` bytes of work: index pages placed (4 KiB
    /// each), filter keys processed (8 bytes each), filter pages placed (4 KiB each). A step
    /// places at most `budget / PAGE_SIZE` pages rounded up, plus one, and writes those and at
    /// most the chunk they complete. The filter's pages are reserved when it is complete,
    /// exactly where one placement of them would go: in
    /// the chunk when they fit one, else in an extent of their own, which the steps write a few
    /// pages at a time; the last step places the header page, writes the last chunk and waits
    /// for every write. Returns true once the run is complete; [`finish`](RunBuilder::finish) (or
    /// `Run::from_builder`) then returns at once. After an error everything allocated is
    /// released and the builder is spent.
    pub fn finish_step(&mut self, budget: u64) -> Result<bool> {
        if self.finished {
            return Err(Error::InvalidOption(
                "run builder used after it finished or failed".into(),
            ));
        }
        let r = self.finish_step_inner(budget);
        if r.is_err() {
            self.sink.release_all();
            self.finished = true;
        }
        r
    }

    fn finish_step_inner(&mut self, budget: u64) -> Result<bool> {
        let mut left = budget.max(1);
        loop {
            let spend = |left: &mut u64, n: u64| *left = left.saturating_sub(n);
            match self.fin.take() {
                None => {
                    self.seal_data_page()?;
                    self.sink.start_tail()?;
                    let level1 = std::mem::take(&mut self.level1);
                    let height = u32::from(!level1.is_empty());
                    self.fin = Some(if level1.len() > 1 {
                        Finish::Index {
                            level: IndexLevel::new(level1, height as u8),
                            height,
                        }
                    } else {
                        self.filter_phase(level1.first().map_or(NO_ROOT, |i| i.child), height)
                    });
                    spend(&mut left, PAGE_SIZE as u64);
                }
                Some(Finish::Index { mut level, height }) => {
                    let pages = self.index_pages(&mut level, left.div_ceil(PAGE_SIZE as u64))?;
                    spend(&mut left, pages * PAGE_SIZE as u64);
                    if level.pos < level.items.len() {
                        self.fin = Some(Finish::Index { level, height });
                    } else {
                        let up = std::mem::take(&mut level.up);
                        let height = height + 1;
                        self.fin = Some(if up.len() > 1 {
                            Finish::Index {
                                level: IndexLevel::new(up, height as u8),
                                height,
                            }
                        } else {
                            self.filter_phase(up.first().map_or(NO_ROOT, |i| i.child), height)
                        });
                    }
                }
                Some(Finish::Filter {
                    tree_root,
                    height,
                    mut filter,
                }) => {
                    if let Some(f) = &mut filter {
                        let keys = usize::try_from(left / 8).unwrap_or(usize::MAX);
                        if !f.step(keys) {
                            self.fin = Some(Finish::Filter {
                                tree_root,
                                height,
                                filter,
                            });
                            return Ok(false);
                        }
                    }
                    let bytes = filter.map(FilterFinish::into_bytes);
                    // The filter's pages follow within what is left of the budget (what the
                    // keys took is not known: at most all of it).
                    self.fin = Some(self.place_filter(tree_root, height, bytes)?);
                }
                Some(Finish::FilterPages {
                    tree_root,
                    height,
                    bytes,
                    start,
                    next,
                    in_chunk,
                }) => {
                    let n = filter_page_count(&bytes);
                    let k = (n - next).min(left.div_ceil(PAGE_SIZE as u64).max(1));
                    let fill = |i: usize, body: &mut [u8]| {
                        fill_filter_page(&bytes, next as usize + i, body)
                    };
                    if in_chunk {
                        self.sink.fill_placed(start + next, k, fill)?;
                    } else {
                        self.sink.write_at(start + next, k, fill)?;
                    }
                    spend(&mut left, k * PAGE_SIZE as u64);
                    let next = next + k;
                    self.fin = Some(if next < n {
                        Finish::FilterPages {
                            tree_root,
                            height,
                            bytes,
                            start,
                            next,
                            in_chunk,
                        }
                    } else {
                        Finish::Header {
                            tree_root,
                            height,
                            filter: Some(bytes),
                            filter_page: start,
                            filter_pages: n,
                        }
                    });
                }
                Some(Finish::Header {
                    tree_root,
                    height,
                    filter,
                    filter_page,
                    filter_pages,
                }) => {
                    let meta = self.write_tail(tree_root, height, filter_page, filter_pages)?;
                    self.fin = Some(Finish::Done {
                        meta,
                        tree_root,
                        filter,
                    });
                    return Ok(true);
                }
                Some(done @ Finish::Done { .. }) => {
                    self.fin = Some(done);
                    return Ok(true);
                }
            }
            if left == 0 {
                return Ok(false);
            }
        }
    }

    /// The filter phase after the tree (an empty run needs no filter: lookups never reach its
    /// absent tree).
    fn filter_phase(&mut self, tree_root: u64, height: u32) -> Finish {
        let filter = self
            .filter
            .take()
            .filter(|b| !b.is_empty())
            .map(FilterBuilder::start_finish);
        Finish::Filter {
            tree_root,
            height,
            filter,
        }
    }

    /// Reserves the complete filter's pages, exactly where [`Sink::put`] would put them, for
    /// the next steps to write a few at a time: a filter of at most a chunk in the chunk (its
    /// pages go out with the chunk), a larger one in an extent of its own (written by the
    /// steps themselves).
    fn place_filter(
        &mut self,
        tree_root: u64,
        height: u32,
        bytes: Option<Vec<u8>>,
    ) -> Result<Finish> {
        let Some(bytes) = bytes else {
            return Ok(Finish::Header {
                tree_root,
                height,
                filter: None,
                filter_page: 0,
                filter_pages: 0,
            });
        };
        let n = filter_page_count(&bytes);
        let in_chunk = n <= self.sink.chunk_pages();
        let start = if in_chunk {
            self.sink.put_blank(n)?
        } else {
            self.sink.reserve(n)?
        };
        Ok(Finish::FilterPages {
            tree_root,
            height,
            bytes,
            start,
            next: 0,
            in_chunk,
        })
    }

    /// Writes the header page, flushes the last chunk and waits for every write; the run's
    /// metadata.
    fn write_tail(
        &mut self,
        tree_root: u64,
        height: u32,
        filter_page: u64,
        filter_pages: u64,
    ) -> Result<RunMeta> {
        let (max_key, max_seq, min_seq) = match &self.last {
            Some((k, _)) => (k.clone(), self.max_seq, self.min_seq),
            None => (Vec::new(), 0, 0),
        };
        let mut meta = RunMeta {
            extents: Vec::new(),
            root_page: 0,
            height,
            entries: self.entries,
            user_bytes: self.user_bytes,
            data_pages: self.data_pages,
            min_key: std::mem::take(&mut self.min_key),
            max_key,
            min_seq,
            max_seq,
            filter_page,
            filter_pages,
        };
        let mut payload = Vec::with_capacity(256);
        encode_header(&mut payload, &meta, tree_root);
        if payload.len() > PAGE_BODY - HEADER_LEN {
            return Err(Error::InvalidOption(format!(
                "run header of {} bytes does not fit a page",
                payload.len()
            )));
        }
        meta.root_page = self.sink.put(1, |_, body| {
            put_header(body, PAGE_HEADER, 0, 0, payload.len() as u32);
            body[HEADER_LEN..HEADER_LEN + payload.len()].copy_from_slice(&payload);
        })?;
        self.sink.flush_chunk()?;
        // The run is complete only once every page of it is written.
        self.sink.settle()?;
        meta.extents = std::mem::take(&mut self.sink.done);
        Ok(meta)
    }

    #[allow(clippy::type_complexity)]
    fn finish_inner(&mut self) -> Result<(RunMeta, (u64, Option<Vec<u8>>))> {
        while !self.finish_step_inner(u64::MAX)? {}
        match self.fin.take() {
            Some(Finish::Done {
                meta,
                tree_root,
                filter,
            }) => Ok((meta, (tree_root, filter))),
            _ => Err(Error::InvalidOption("run finish did not complete".into())),
        }
    }

    /// Packs items of `level` into index pages until the level is done or `max_pages` pages
    /// were written; returns the pages written.
    fn index_pages(&mut self, l: &mut IndexLevel, max_pages: u64) -> Result<u64> {
        let mut written = 0u64;
        while l.pos < l.items.len() && written < max_pages.max(1) {
            let n = l.pos;
            l.buf.clear();
            l.items[n].encode(&mut l.buf);
            if !l.page.fits(l.buf.len()) {
                self.seal_index_page(
                    &mut l.page,
                    l.level,
                    &mut l.first,
                    &mut l.entries,
                    &mut l.bytes,
                    &mut l.up,
                )?;
                written += 1;
            }
            let it = &l.items[n];
            if l.page.len() == 0 {
                l.first = Some((it.key.clone(), it.seq));
            }
            l.page.push(&l.buf);
            l.entries += it.entries;
            l.bytes += it.bytes;
            l.pos += 1;
            if l.pos == l.items.len() {
                self.seal_index_page(
                    &mut l.page,
                    l.level,
                    &mut l.first,
                    &mut l.entries,
                    &mut l.bytes,
                    &mut l.up,
                )?;
                written += 1;
            }
        }
        Ok(written)
    }

    #[allow(clippy::too_many_arguments)]
    fn seal_index_page(
        &mut self,
        page: &mut SlottedPage,
        level: u8,
        first: &mut Option<(Vec<u8>, u64)>,
        entries: &mut u64,
        bytes: &mut u64,
        up: &mut Vec<IndexItem>,
    ) -> Result<()> {
        let Some((key, seq)) = first.take() else {
            return Ok(());
        };
        let child = self
            .sink
            .put(1, |_, body| page.write_into(body, PAGE_INDEX, level))?;
        up.push(IndexItem {
            key,
            seq,
            child,
            entries: *entries,
            bytes: *bytes,
        });
        *entries = 0;
        *bytes = 0;
        Ok(())
    }

    /// Stops building and releases every page allocated so far.
    pub fn abandon(mut self) {
        self.sink.release_all();
        self.finished = true;
    }
}

impl Drop for RunBuilder {
    fn drop(&mut self) {
        if !self.finished {
            self.sink.release_all();
        }
    }
}

impl IndexLevel {
    fn new(items: Vec<IndexItem>, level: u8) -> IndexLevel {
        let cap = items.len() / 8 + 1;
        IndexLevel {
            items,
            pos: 0,
            level,
            page: SlottedPage::default(),
            first: None,
            entries: 0,
            bytes: 0,
            up: Vec::with_capacity(cap),
            buf: Vec::new(),
        }
    }
}

/// Pages of a filter of `bytes`.
fn filter_page_count(bytes: &[u8]) -> u64 {
    bytes.len().div_ceil(PAYLOAD).max(1) as u64
}

/// Writes page `i` of the filter `bytes` into `body`.
fn fill_filter_page(bytes: &[u8], i: usize, body: &mut [u8]) {
    let part = &bytes[(i * PAYLOAD).min(bytes.len())..((i + 1) * PAYLOAD).min(bytes.len())];
    put_header(body, PAGE_FILTER, 0, 0, part.len() as u32);
    body[HEADER_LEN..HEADER_LEN + part.len()].copy_from_slice(part);
}

/// The separator for a data page whose first entry is (`key`, `seq`) and whose predecessor
/// ends with `prev`: the shortest prefix of `key` that orders after every key of `prev`'s
/// page, with seq `u64::MAX` (first among its versions), or the entry itself when `prev` has
/// the same key. Short separators keep index fanout high when a long key starts a page.
fn separator(prev: Option<&(Vec<u8>, u64)>, key: &[u8], seq: u64) -> (Vec<u8>, u64) {
    match prev {
        Some((p, _)) if p.as_slice() == key => (key.to_vec(), seq),
        Some((p, _)) => {
            let common = p.iter().zip(key).take_while(|(a, b)| a == b).count();
            (key[..(common + 1).min(key.len())].to_vec(), u64::MAX)
        }
        None => (key.to_vec(), seq),
    }
}

/// Encodes the run header page's payload (after the common page header).
pub(crate) fn encode_header(out: &mut Vec<u8>, meta: &RunMeta, tree_root: u64) {
    out.extend_from_slice(MAGIC);
    codec::put_u16(out, FORMAT_MAJOR);
    codec::put_u16(out, FORMAT_MINOR);
    codec::put_u32(out, meta.height);
    codec::put_u64(out, tree_root);
    codec::put_u64(out, meta.entries);
    codec::put_u64(out, meta.user_bytes);
    codec::put_u64(out, meta.data_pages);
    codec::put_u64(out, meta.min_seq);
    codec::put_u64(out, meta.max_seq);
    codec::put_u64(out, meta.filter_page);
    codec::put_u64(out, meta.filter_pages);
    codec::put_bytes(out, &meta.min_key);
    codec::put_bytes(out, &meta.max_key);
}
