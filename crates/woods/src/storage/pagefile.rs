//! The data file, addressed in pages. Every page ends in a trailer: the page's [`Stamp`] (when it
//! was written) and a crc32c of its page number, body and stamp. Writes fill the trailer in;
//! reads verify the checksum, refuse a stale stamp ([`Stamps::check`]) and go through the cache.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::io::{IoQueue, Pending};
use super::stamp::{Stamp, Stamps};
use super::{AlignedBuf, Allocator, Extent, File, IoCounters, Purpose};
use crate::cache::{Cache, PageClass, PageRef, Probe};
use crate::error::{Error, Latch, Result};

/// Bytes per page.
pub const PAGE_SIZE: usize = 4096;
/// Bytes of the trailer every page ends in: its stamp (incarnation u64, commit u64) and crc32c.
pub const PAGE_TRAILER: usize = 20;
/// Usable bytes per page (the rest is the trailer).
pub const PAGE_BODY: usize = PAGE_SIZE - PAGE_TRAILER;
/// Where the crc32c of a page starts: it covers the page number and every byte before it.
const CRC_AT: usize = PAGE_SIZE - 4;

/// Memory an index holds outside the cache, charged to the cache's budget while this lives:
/// the cache holds as many bytes of pages fewer ([`PageFile::charge`]). It follows the memory
/// rather than a version: a structure kept alive by a reader or a commit in flight stays
/// charged until it is freed.
pub struct Charge {
    store: Arc<PageFile>,
    bytes: u64,
}

impl Charge {
    /// The bytes charged now.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Charges `bytes` in all from now on (more or less than before).
    pub fn set(&mut self, bytes: u64) {
        let cache = self.store.cache();
        if bytes > self.bytes {
            cache.reserve(bytes - self.bytes);
        } else {
            cache.unreserve(self.bytes - bytes);
        }
        self.bytes = bytes;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.store.cache().unreserve(self.bytes);
    }
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Charge({} bytes)", self.bytes)
    }
}

/// The page store every index kind reads and writes: data file + cache + allocator + counters.
#[doc(hidden)]
pub struct PageFile {
    file: Arc<dyn File>,
    cache: Cache,
    alloc: Allocator,
    counters: Arc<IoCounters>,
    /// Write-behind and read-ahead requests ([`PageFile::write_behind`],
    /// [`PageFile::read_behind`]).
    io: IoQueue,
    /// Reads handed to the I/O threads so far.
    reads_behind: AtomicU64,
    /// Tripped by the first failed write or sync.
    failure: Arc<Latch>,
    /// What pages written now are stamped with, and which stamps a read refuses.
    stamps: Arc<Stamps>,
    /// Whether sorted runs built in this file may split entries across data pages
    /// (`Options::split_entries`; the run builder's default).
    split_entries: std::sync::atomic::AtomicBool,
}

/// A finished background request: its result and the buffer it was given.
pub type Done = (Result<()>, AlignedBuf);

fn page_crc(page: u64, covered: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&page.to_le_bytes()), covered)
}

/// Seals one page's bytes in place, keeping the stamp its trailer holds (zeros: unstamped):
/// computes and stores its checksum.
pub fn seal_page(page: u64, buf: &mut [u8]) {
    let crc = page_crc(page, &buf[..CRC_AT]);
    buf[CRC_AT..PAGE_SIZE].copy_from_slice(&crc.to_le_bytes());
}

/// Stamps one page's bytes with `stamp` and seals them.
fn seal_stamped(page: u64, stamp: Stamp, buf: &mut [u8]) {
    buf[PAGE_BODY..PAGE_BODY + 8].copy_from_slice(&stamp.incarnation.to_le_bytes());
    buf[PAGE_BODY + 8..CRC_AT].copy_from_slice(&stamp.commit.to_le_bytes());
    seal_page(page, buf);
}

/// The stamp a page's trailer holds (not verified).
pub fn page_stamp(buf: &[u8]) -> Stamp {
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[at..at + 8]);
        u64::from_le_bytes(b)
    };
    Stamp {
        incarnation: u64_at(PAGE_BODY),
        commit: u64_at(PAGE_BODY + 8),
    }
}

impl PageFile {
    pub fn new(
        file: Arc<dyn File>,
        cache: Cache,
        alloc: Allocator,
        counters: Arc<IoCounters>,
    ) -> PageFile {
        alloc.punch_holes_in(file.clone());
        PageFile {
            file,
            cache,
            alloc,
            counters,
            io: IoQueue::default(),
            reads_behind: AtomicU64::new(0),
            failure: Arc::new(Latch::default()),
            stamps: Arc::new(Stamps::default()),
            split_entries: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Whether run builders of this file split entries across data pages by default
    /// (`Options::split_entries`, which the database sets at open; true until then).
    pub fn split_entries(&self) -> bool {
        self.split_entries.load(Ordering::Relaxed)
    }

    /// Sets [`PageFile::split_entries`].
    pub fn set_split_entries(&self, on: bool) {
        self.split_entries.store(on, Ordering::Relaxed);
    }

    /// The clock this file stamps pages with and checks them against; the database sets it from
    /// its manifest, which advances it at each commit.
    pub fn stamps(&self) -> &Arc<Stamps> {
        &self.stamps
    }

    /// The latch the first failed write or sync of this file trips (the database's failure).
    pub fn failure(&self) -> &Arc<Latch> {
        &self.failure
    }

    pub fn alloc(&self) -> &Allocator {
        &self.alloc
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Charges `bytes` of memory held outside the cache to it ([`Cache::reserve`]) for as long
    /// as the returned [`Charge`] lives.
    pub fn charge(self: &Arc<Self>, bytes: u64) -> Charge {
        self.cache.reserve(bytes);
        Charge {
            store: self.clone(),
            bytes,
        }
    }

    pub fn counters(&self) -> &Arc<IoCounters> {
        &self.counters
    }

    pub fn is_direct(&self) -> bool {
        self.file.is_direct()
    }

    /// Reads one data page through the cache, verifying its checksum.
    pub fn read(&self, page: u64, purpose: Purpose) -> Result<PageRef> {
        self.read_as(page, purpose, PageClass::Data)
    }

    /// Reads one page through the cache, verifying its checksum; on a miss the page is cached
    /// as `class` (index pages are kept in preference to data pages, [`PageClass`]).
    pub fn read_as(&self, page: u64, purpose: Purpose, class: PageClass) -> Result<PageRef> {
        match self.cache.probe(page) {
            Probe::Hit(p) => Ok(p),
            Probe::Miss(spare) => self.read_missed(page, spare, purpose, class),
        }
    }

    /// Reads page `page`, which the cache missed, into `spare` (the shard's spare buffer, if
    /// it had one) and caches it as `class`.
    fn read_missed(
        &self,
        page: u64,
        spare: Option<PageRef>,
        purpose: Purpose,
        class: PageClass,
    ) -> Result<PageRef> {
        let mut p = spare.unwrap_or_else(|| Arc::new(AlignedBuf::for_overwrite(PAGE_SIZE)));
        match Arc::get_mut(&mut p) {
            Some(buf) => self.read_many_into(page, buf, purpose)?,
            // Not reached: a spare is held by nobody else, and a new buffer is ours.
            None => p = Arc::new(self.read_uncached(page, purpose)?),
        }
        self.cache.insert_as(page, p.clone(), class);
        Ok(p)
    }

    /// [`read_as`](PageFile::read_as) of page `page`, reading page `page - 1` with it, in one
    /// device request, when the cache holds neither. The page before is cached as a data page
    /// if it verifies (a damaged one fails the read that needs it, not this one). A lookup of
    /// an entry that begins on the data page before its own (a split entry) so reads both for
    /// the latency of one request, not two in turn.
    pub fn read_with_previous(
        &self,
        page: u64,
        purpose: Purpose,
        class: PageClass,
    ) -> Result<PageRef> {
        let spare = match self.cache.probe(page) {
            Probe::Hit(p) => return Ok(p),
            Probe::Miss(spare) => spare,
        };
        let before_spare = match page.checked_sub(1).map(|b| self.cache.probe(b)) {
            Some(Probe::Miss(s)) => s,
            _ => return self.read_missed(page, spare, purpose, class),
        };
        self.read_pair(page, page - 1, spare, purpose, class, |before| {
            self.cache
                .insert_as(page - 1, page_ref(before_spare, before), PageClass::Data);
        })
    }

    /// [`read`](PageFile::read) of data page `page`, reading page `page + 1` with it, in one
    /// device request, when the cache holds neither. The page after is cached read ahead
    /// ([`Cache::insert_ahead`]) if it verifies (a damaged one fails the read that needs it,
    /// not this one). A range scan that starts on a page most often goes on into the next one:
    /// this reads both for the latency and the system call of one request, not two in turn.
    pub fn read_with_next(&self, page: u64, purpose: Purpose) -> Result<PageRef> {
        let spare = match self.cache.probe(page) {
            Probe::Hit(p) => return Ok(p),
            Probe::Miss(spare) => spare,
        };
        if self.cache.holds(page + 1) {
            return self.read_missed(page, spare, purpose, PageClass::Data);
        }
        self.read_pair(page, page + 1, spare, purpose, PageClass::Data, |next| {
            self.cache.insert_ahead(page + 1, page_ref(None, next));
        })
    }

    /// Reads page `page`, which the cache missed, and its neighbour `other` (the page before or
    /// after it) in one device request; caches `page` as `class` (in `spare`, the shard's spare
    /// buffer, if it had one) and returns it. `other`'s bytes go to `keep` if they verify: a
    /// damaged neighbour fails the read that needs it, not this one.
    fn read_pair(
        &self,
        page: u64,
        other: u64,
        spare: Option<PageRef>,
        purpose: Purpose,
        class: PageClass,
        keep: impl FnOnce(&[u8]),
    ) -> Result<PageRef> {
        let start = page.min(other);
        let mut both = AlignedBuf::for_overwrite(2 * PAGE_SIZE);
        read_pages(&*self.file, &self.counters, start, &mut both, purpose)?;
        let at = |n: u64| &both[(n - start) as usize * PAGE_SIZE..][..PAGE_SIZE];
        verify_pages(&self.stamps, page, at(page))?;
        let p = page_ref(spare, at(page));
        self.cache.insert_as(page, p.clone(), class);
        if verify_pages(&self.stamps, other, at(other)).is_ok() {
            keep(at(other));
        }
        Ok(p)
    }

    /// Reads one page bypassing the cache (scans of whole runs, checks).
    pub fn read_uncached(&self, page: u64, purpose: Purpose) -> Result<AlignedBuf> {
        self.read_many(page, 1, purpose)
    }

    /// Reads `n` contiguous pages in one device request, verifying each; not cached.
    pub fn read_many(&self, start: u64, n: usize, purpose: Purpose) -> Result<AlignedBuf> {
        let mut buf = AlignedBuf::for_overwrite(n * PAGE_SIZE);
        self.read_many_into(start, &mut buf, purpose)?;
        Ok(buf)
    }

    /// Reads `buf.len() / PAGE_SIZE` contiguous pages from `start` into `buf` (4096-byte
    /// aligned, a prefix of an [`AlignedBuf`]) in one device request, verifying each (checksum
    /// and stamp). Every read of the data file, the cache's misses included, comes here or to
    /// [`PendingRead::wait`].
    pub fn read_many_into(&self, start: u64, buf: &mut [u8], purpose: Purpose) -> Result<()> {
        read_pages(&*self.file, &self.counters, start, buf, purpose)?;
        verify_pages(&self.stamps, start, buf)
    }

    /// [`read_many_into`](PageFile::read_many_into) of the first `len` bytes of `buf`, done on
    /// one of the page file's I/O threads: a scan asks for the window after the one it is
    /// reading. The pages may be freed meanwhile (the scan stopped, its run was dropped); the
    /// read then returns what it finds or an error that nobody waits for. The pages'
    /// checksums are verified by [`PendingRead::wait`], on the waiter's thread: the I/O
    /// threads only wait for the device, so that they take no processor time from writers.
    pub fn read_behind(
        &self,
        start: u64,
        mut buf: AlignedBuf,
        len: usize,
        purpose: Purpose,
    ) -> PendingRead {
        self.reads_behind.fetch_add(1, Ordering::Relaxed);
        let (file, counters) = (self.file.clone(), self.counters.clone());
        let pending = self.io.submit(move || {
            let r = read_pages(&*file, &counters, start, &mut buf[..len], purpose);
            (r, buf)
        });
        PendingRead {
            start,
            len,
            pending,
            stamps: self.stamps.clone(),
        }
    }

    /// Writes whole pages starting at `start`; `buf.len()` is a multiple of `PAGE_SIZE` and each
    /// page's checksum is filled in here. `buf` starts 4096-byte aligned (a prefix of an
    /// [`AlignedBuf`]), as direct I/O requires; callers reuse it. Cached copies of those pages
    /// are dropped.
    pub fn write(&self, start: u64, buf: &mut [u8], purpose: Purpose) -> Result<()> {
        self.invalidate(start, buf.len() / PAGE_SIZE);
        seal_pages(start, self.stamps.now(), buf);
        self.failure.note(write_sealed(
            &*self.file,
            &self.counters,
            start,
            buf,
            purpose,
        ))
    }

    /// [`write`](PageFile::write) of the first `len` bytes of `buf`, done on one of the page
    /// file's I/O threads (write-behind): the caller goes on filling its next buffer. Cached
    /// copies of the pages are dropped now. Nothing may read the pages, or release them, until
    /// the write is waited for.
    pub fn write_behind(
        &self,
        start: u64,
        mut buf: AlignedBuf,
        len: usize,
        purpose: Purpose,
    ) -> Pending<Done> {
        debug_assert_eq!(len % PAGE_SIZE, 0);
        self.invalidate(start, len / PAGE_SIZE);
        // Sealed here, so that the I/O thread only waits for the device.
        seal_pages(start, self.stamps.now(), &mut buf[..len]);
        let (file, counters) = (self.file.clone(), self.counters.clone());
        let failure = self.failure.clone();
        self.io.submit(move || {
            let r = failure.note(write_sealed(&*file, &counters, start, &buf[..len], purpose));
            (r, buf)
        })
    }

    /// Reads handed to the I/O threads so far ([`PageFile::read_behind`]).
    pub fn reads_behind(&self) -> u64 {
        self.reads_behind.load(Ordering::Relaxed)
    }

    /// Background reads and writes not yet completed.
    pub fn io_in_flight(&self) -> u64 {
        self.io.in_flight()
    }

    fn invalidate(&self, start: u64, pages: usize) {
        for i in 0..pages as u64 {
            self.cache.invalidate(start + i);
        }
    }

    /// Writes pages into a list of extents, in order (for scattered allocations).
    pub fn write_extents(&self, extents: &[Extent], buf: &[u8], purpose: Purpose) -> Result<()> {
        let mut off = 0;
        for e in extents {
            let len = e.pages as usize * PAGE_SIZE;
            self.write(
                e.start,
                &mut AlignedBuf::from_slice(&buf[off..off + len]),
                purpose,
            )?;
            off += len;
        }
        Ok(())
    }

    pub fn sync(&self) -> Result<()> {
        crate::crashpoint::point("data.sync.before");
        self.counters.record_sync();
        self.failure.note(self.file.sync())?;
        crate::crashpoint::point("data.sync.after");
        Ok(())
    }

    pub fn file_len(&self) -> Result<u64> {
        self.file.len()
    }
}

/// A read handed to the page file's I/O threads ([`PageFile::read_behind`]).
#[must_use = "a pending read holds its buffer"]
pub struct PendingRead {
    start: u64,
    len: usize,
    pending: Pending<Done>,
    stamps: Arc<Stamps>,
}

impl PendingRead {
    /// Waits for the read and verifies the pages' checksums; returns the result and the buffer.
    pub fn wait(self) -> Result<Done> {
        before_device_read();
        let (r, buf) = self.pending.wait()?;
        let r = r.and_then(|()| verify_pages(&self.stamps, self.start, &buf[..self.len]));
        Ok((r, buf))
    }
}

/// A page buffer holding `bytes` (one page): `spare` when the caller holds it alone.
fn page_ref(spare: Option<PageRef>, bytes: &[u8]) -> PageRef {
    if let Some(mut p) = spare {
        if let Some(buf) = Arc::get_mut(&mut p).filter(|b| b.len() == bytes.len()) {
            buf.copy_from_slice(bytes);
            return p;
        }
    }
    Arc::new(AlignedBuf::from_slice(bytes))
}

/// What a thread that is about to wait for the device may do first ([`arm_before_read`]).
pub(crate) trait BeforeRead: Sync {
    /// Called on the thread, with the argument it was armed with, before the read.
    fn before_read(&self, arg: u64);
}

/// A hook and its argument.
pub(crate) type ReadHook = (&'static dyn BeforeRead, u64);

thread_local! {
    static BEFORE_READ: Cell<Option<ReadHook>> = const { Cell::new(None) };
}

/// Arms `hook` (or disarms, with `None`) on this thread: it runs once, on this thread, just
/// before the thread's next device read of a data file, which it may spend handing work to
/// other threads (a scan's other sources, [`crate::merge::prime`]), since the thread is about to
/// wait. Returns what was armed before, for the caller to put back.
pub(crate) fn arm_before_read(hook: Option<ReadHook>) -> Option<ReadHook> {
    BEFORE_READ.with(|c| c.replace(hook))
}

/// Runs (and disarms) the hook armed on this thread, if any: called before every device read of
/// a data file (this module's reads, and a wait for a read issued behind).
pub(crate) fn before_device_read() {
    if let Some((hook, arg)) = BEFORE_READ.with(Cell::take) {
        hook.before_read(arg);
    }
}

/// Reads whole pages into `buf` (aligned, a multiple of `PAGE_SIZE`), unverified.
fn read_pages(
    file: &dyn File,
    counters: &IoCounters,
    start: u64,
    buf: &mut [u8],
    purpose: Purpose,
) -> Result<()> {
    debug_assert_eq!(buf.len() % PAGE_SIZE, 0);
    debug_assert_eq!(buf.as_ptr() as usize % PAGE_SIZE, 0);
    before_device_read();
    file.read_exact_at(buf, start * PAGE_SIZE as u64)?;
    counters.record_read(purpose, buf.len());
    counters.record_data_read(start, (buf.len() / PAGE_SIZE) as u64);
    Ok(())
}

fn verify_pages(stamps: &Stamps, start: u64, buf: &[u8]) -> Result<()> {
    for (i, page) in buf.chunks_exact(PAGE_SIZE).enumerate() {
        let n = start + i as u64;
        stamps.check(n, verify(n, page)?)?;
    }
    Ok(())
}

/// Writes whole sealed pages at page `start` and counts them.
fn write_sealed(
    file: &dyn File,
    counters: &IoCounters,
    start: u64,
    buf: &[u8],
    purpose: Purpose,
) -> Result<()> {
    file.write_all_at(buf, start * PAGE_SIZE as u64)?;
    counters.record_write(purpose, buf.len());
    Ok(())
}

/// Stamps and seals whole pages in `buf` (aligned, a multiple of `PAGE_SIZE`) for writing at
/// `start`.
fn seal_pages(start: u64, stamp: Stamp, buf: &mut [u8]) {
    debug_assert_eq!(buf.as_ptr() as usize % PAGE_SIZE, 0);
    debug_assert_eq!(buf.len() % PAGE_SIZE, 0);
    for (i, page) in buf.chunks_exact_mut(PAGE_SIZE).enumerate() {
        seal_stamped(start + i as u64, stamp, page);
    }
}

/// Checks a page's checksum; returns the stamp it holds (checked against nothing: the page
/// file's reads also check it with [`Stamps::check`]).
pub fn verify(page: u64, buf: &[u8]) -> Result<Stamp> {
    let stored = u32::from_le_bytes([
        buf[CRC_AT],
        buf[CRC_AT + 1],
        buf[CRC_AT + 2],
        buf[CRC_AT + 3],
    ]);
    let got = page_crc(page, &buf[..CRC_AT]);
    if stored != got {
        return Err(Error::corruption(
            "data file",
            Some(page),
            format!("checksum mismatch (stored {stored:#010x}, computed {got:#010x})"),
        ));
    }
    Ok(page_stamp(buf))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::storage::{FaultFs, Fs, OpenMode, RollbackPoint};

    fn page_file() -> PageFile {
        let fs = FaultFs::new();
        fs.create_dir_all(Path::new("/db")).unwrap();
        let file = fs
            .open(
                Path::new("/db/data"),
                OpenMode {
                    create: true,
                    direct: false,
                },
            )
            .unwrap();
        PageFile::new(
            file,
            Cache::new(1 << 20),
            Allocator::new(1),
            Arc::new(IoCounters::default()),
        )
    }

    fn write_page(pf: &PageFile, page: u64, byte: u8) {
        let mut buf = AlignedBuf::zeroed(PAGE_SIZE);
        buf[..PAGE_BODY].fill(byte);
        pf.write(page, &mut buf, Purpose::Flush).unwrap();
    }

    /// The layout counters see every device read of the data file, cache misses and
    /// read-behind included, and count those that begin where the previous one ended.
    #[test]
    fn data_reads_count_contiguous_requests() {
        let pf = page_file();
        for p in 1..=8 {
            write_page(&pf, p, p as u8);
        }
        pf.cache().invalidate(3);
        let before = pf.counters().snapshot();
        pf.read_many(1, 2, Purpose::UserRead).unwrap(); // pages 1-2
        pf.read(3, Purpose::UserRead).unwrap(); // a miss at 3: contiguous
        pf.read(3, Purpose::UserRead).unwrap(); // a hit: no device read
        pf.read_uncached(6, Purpose::UserRead).unwrap(); // a jump
        let buf = AlignedBuf::zeroed(2 * PAGE_SIZE);
        pf.read_behind(7, buf, 2 * PAGE_SIZE, Purpose::UserRead)
            .wait()
            .unwrap()
            .0
            .unwrap(); // 7-8: contiguous
        let after = pf.counters().snapshot();
        assert_eq!(after.data_reads - before.data_reads, 4);
        assert_eq!(
            after.data_reads_contiguous - before.data_reads_contiguous,
            2
        );
    }

    /// The hook armed on a thread runs once, before that thread's first device read: not on a
    /// cache hit, not again on the next read, and not on another thread.
    #[test]
    fn an_armed_hook_runs_once_before_the_threads_next_device_read() {
        struct Count(AtomicU64);
        impl BeforeRead for Count {
            fn before_read(&self, arg: u64) {
                self.0.fetch_add(arg, Ordering::Relaxed);
            }
        }
        static RUNS: Count = Count(AtomicU64::new(0));
        let pf = page_file();
        for p in 1..=3 {
            write_page(&pf, p, p as u8);
        }
        pf.read(1, Purpose::UserRead).unwrap(); // cached by the write or by this read
        pf.cache().invalidate(2);
        assert!(arm_before_read(Some((&RUNS, 1))).is_none());
        pf.read(1, Purpose::UserRead).unwrap(); // a hit
        assert_eq!(RUNS.0.load(Ordering::Relaxed), 0);
        std::thread::scope(|s| {
            s.spawn(|| pf.read_uncached(3, Purpose::UserRead).unwrap());
        });
        assert_eq!(RUNS.0.load(Ordering::Relaxed), 0, "another thread's read");
        pf.read(2, Purpose::UserRead).unwrap(); // a miss
        assert_eq!(RUNS.0.load(Ordering::Relaxed), 1);
        pf.read_uncached(3, Purpose::UserRead).unwrap();
        assert_eq!(RUNS.0.load(Ordering::Relaxed), 1, "disarmed by its run");
        assert!(arm_before_read(None).is_none());
    }

    /// A page is stamped with the clock when it is written, covered by its checksum, and every
    /// read path (cached, uncached, read-behind) refuses it once a rollback point covers it.
    #[test]
    fn pages_carry_their_stamp_and_reads_refuse_a_covered_one() {
        let pf = page_file();
        pf.stamps().reset(4, 9, Vec::new());
        write_page(&pf, 2, 6);
        pf.stamps().committed(10);
        write_page(&pf, 3, 7);
        pf.stamps().committed(11);
        write_page(&pf, 4, 8);
        let raw = pf.read_uncached(3, Purpose::UserRead).unwrap();
        assert_eq!(
            page_stamp(&raw),
            Stamp {
                incarnation: 4,
                commit: 11
            }
        );
        assert_eq!(verify(3, &raw).unwrap(), page_stamp(&raw));
        let mut flipped = raw.to_vec();
        flipped[PAGE_BODY] ^= 1;
        assert!(
            verify(3, &flipped).is_err(),
            "the checksum covers the stamp"
        );
        // seal_page keeps the stamp it finds.
        let mut resealed = raw.to_vec();
        seal_page(3, &mut resealed);
        assert_eq!(resealed, raw.to_vec());

        // Reopened after losing commit 11 of incarnation 4: pages 3 and 4 (stamped 4.11 and
        // 4.12: only commit 11 or later can have referenced them) are stale, page 2 is not.
        let point = RollbackPoint {
            incarnation: 4,
            commit: 10,
            next: 5,
        };
        for p in 2..=4 {
            pf.cache().invalidate(p);
        }
        pf.stamps().reset(5, 10, vec![point]);
        assert_eq!(pf.read(2, Purpose::UserRead).unwrap()[0], 6);
        assert!(pf.read(3, Purpose::UserRead).is_err());
        let e = match pf.read(4, Purpose::UserRead) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("read a stale page"),
        };
        assert!(e.contains("stale page") && e.contains("4.12"), "{e}");
        assert!(pf.read_uncached(4, Purpose::UserRead).is_err());
        let pending = pf.read_behind(
            4,
            AlignedBuf::zeroed(PAGE_SIZE),
            PAGE_SIZE,
            Purpose::UserRead,
        );
        assert!(pending.wait().unwrap().0.is_err());
        // Written again in the new incarnation: accepted.
        write_page(&pf, 4, 9);
        assert_eq!(pf.read(4, Purpose::UserRead).unwrap()[0], 9);
    }
}
