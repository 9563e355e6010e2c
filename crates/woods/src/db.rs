//! The database: sequence numbers, snapshots, the write path (WAL, memtable, pacing), the read
//! path (memtables then index, merged by sequence number) and the background workers.

use std::any::Any;
use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::batch::{self, WriteBatch};
use crate::cache::{Cache, CacheStats};
use crate::entry::{codec, Entry, MAX_SEQ};
use crate::error::{Error, Latch, Result};
use crate::index::{open_index, Index, IndexContext, IndexStats, Snapshots, Stall};
use crate::manifest::{Manifest, ManifestState};
use crate::memtable::Memtable;
use crate::merge::{resolve, EntryIter, MergeIter, Resolver};
use crate::options::{Durability, Options, PersistedConfig};
use crate::storage::{
    seal_page, verify, AlignedBuf, Allocator, File, Fs, IoCounters, IoSnapshot, OpenMode, PageFile,
    RealFs, PAGE_SIZE,
};
use crate::wal::{self, WalWriter};

/// Data file name inside the database directory.
pub const DATA_FILE: &str = "data.woods";
pub(crate) const LOCK_FILE: &str = "LOCK";
/// Format version of the data file header and everything it implies. Major 2: every page's
/// trailer holds its stamp (`storage::Stamp`) before the checksum, so the page body is 16 bytes
/// shorter than in major 1, whose databases are refused (`Error::UnsupportedFormat`).
pub const FORMAT_MAJOR: u16 = 2;
/// Minor version this build writes.
pub const FORMAT_MINOR: u16 = 0;
const DATA_MAGIC: &[u8; 8] = b"WOODSDAT";
/// Pages per device write while building runs (256 KiB).
pub const EXTENT_PAGES: u32 = 64;

/// Write-path counters.
#[derive(Default)]
struct Counters {
    writes: AtomicU64,
    user_bytes: AtomicU64,
    pacing_delays: AtomicU64,
    pacing_ns: AtomicU64,
    pacing_max_ns: AtomicU64,
    stalls: AtomicU64,
    stall_ns: AtomicU64,
    stall_max_ns: AtomicU64,
    memtable_switches: AtomicU64,
    /// The most units of index work one write did itself (pacing and rotation together).
    write_work_max: AtomicU64,
    /// The largest debt a pacing schedule started from.
    schedule_debt_max: AtomicU64,
    /// The most memtables in memory at once, and the most of them pending
    /// ([`MAX_PENDING_MEMTABLES`]).
    memtables_max: AtomicU64,
    pending_memtables_max: AtomicU64,
    /// Where writes waited, by cause ([`Stats::waits`]).
    waits: WaitCounters,
}

/// What a writer waited for, by cause: the rotation (a full memtable with debt left), the
/// pacing wait for the background threads, or the pacing step a writer did itself; and how
/// often the debt rose above its schedule's start within a memtable.
#[derive(Default)]
struct WaitCounters {
    rotation_stalls: AtomicU64,
    rotation_stall_max_ns: AtomicU64,
    rotation_debt_max: AtomicU64,
    rotation_work_max: AtomicU64,
    rotation_queues: AtomicU64,
    rotation_queue_debt_max: AtomicU64,
    commit_waits: AtomicU64,
    commit_wait_max_ns: AtomicU64,
    pace_waits: AtomicU64,
    pace_busy: AtomicU64,
    pace_wait_max_ns: AtomicU64,
    pace_works: AtomicU64,
    pace_work_max_ns: AtomicU64,
    pace_work_units_max: AtomicU64,
    pace_throttles: AtomicU64,
    pace_throttle_max_ns: AtomicU64,
    schedule_rises: AtomicU64,
    schedule_rise_max: AtomicU64,
    slowdown_sleeps: AtomicU64,
    slowdown_works: AtomicU64,
}

impl WaitCounters {
    fn named(&self) -> BTreeMap<String, u64> {
        [
            ("rotation_stalls", &self.rotation_stalls),
            ("rotation_stall_max_ns", &self.rotation_stall_max_ns),
            ("rotation_debt_max", &self.rotation_debt_max),
            ("rotation_work_max", &self.rotation_work_max),
            ("rotation_queues", &self.rotation_queues),
            ("rotation_queue_debt_max", &self.rotation_queue_debt_max),
            ("commit_waits", &self.commit_waits),
            ("commit_wait_max_ns", &self.commit_wait_max_ns),
            ("pace_waits", &self.pace_waits),
            ("pace_busy", &self.pace_busy),
            ("pace_wait_max_ns", &self.pace_wait_max_ns),
            ("pace_works", &self.pace_works),
            ("pace_work_max_ns", &self.pace_work_max_ns),
            ("pace_work_units_max", &self.pace_work_units_max),
            ("pace_throttles", &self.pace_throttles),
            ("pace_throttle_max_ns", &self.pace_throttle_max_ns),
            ("schedule_rises", &self.schedule_rises),
            ("schedule_rise_max", &self.schedule_rise_max),
            ("slowdown_sleeps", &self.slowdown_sleeps),
            ("slowdown_works", &self.slowdown_works),
        ]
        .into_iter()
        .map(|(n, a)| (n.to_owned(), a.load(Ordering::Relaxed)))
        .collect()
    }
}

/// What [`Db::stats`] reports: counters and the database's shape at one moment.
///
/// **Counters restart at zero on every open**: they count the work of this handle, from
/// [`Db::open`] (log replay included) to the call; none is persisted. A program that tracks
/// them over a database's life (bytes written, compactions) adds up the figures of each
/// handle before closing it. The fields that describe the shape instead (`memtables`,
/// `last_seq`, `durable_seq`, `file_*`, `free_pages`, the index's `height`, `entries` and
/// `shape`) are read from the database as it is.
#[derive(Clone, Debug)]
pub struct Stats {
    /// The index's shape and its reorganisation counters (counters since open).
    pub index: IndexStats,
    /// Device I/O by purpose since open: log, flushes, merges, user reads, manifest.
    pub io: IoSnapshot,
    /// Cache hits, misses and evictions since open, and its capacity.
    pub cache: CacheStats,
    /// Whether the data file is read and written with direct I/O.
    pub direct_io: bool,
    /// Write calls (a batch counts once) since open.
    pub writes: u64,
    /// Key + value bytes written by users since open.
    pub user_bytes: u64,
    /// Writes delayed by debt pacing since open.
    pub pacing_delays: u64,
    /// Total time writes spent in pacing delays since open.
    pub pacing_total: Duration,
    /// The longest pacing delay of one write since open.
    pub pacing_max: Duration,
    /// Writes that waited for index work or memtable room (LSM stall rules, full memtables).
    pub stalls: u64,
    /// Total time writes spent in stalls since open.
    pub stall_total: Duration,
    /// The longest stall of one write since open.
    pub stall_max: Duration,
    /// The most index work one write did itself since open, in the index's units (for
    /// `nbtree`, bytes of entries read or written): its pacing share and, for the write that
    /// rotated the memtable, what was left of the job (docs/engine.md, *The writer's bound*);
    /// and what a stall rule made it do (`lsm` without background threads: a step at the
    /// slowdown, every step until L0 is under the stop rule at the stop).
    pub write_work_max: u64,
    /// The largest debt a pacing schedule started from since open (for `nbtree` and
    /// `fdtree-d`, a job's work bound when its memtable was absorbed): with `memtable_bytes`
    /// it gives the largest share a write may be asked to do (docs/engine.md).
    pub schedule_debt_max: u64,
    /// Where writes waited, by cause, since open: `rotation_*` for writers that found the
    /// memtable full with debt left (stalls; the debt they found, the work they did there),
    /// `commit_wait*` for writers that found it full with no debt but
    /// [`MAX_PENDING_MEMTABLES`] frozen memtables awaiting their commit (stalls too),
    /// `pace_wait*` for pacing waits for the background threads (`pace_busy` counts those of
    /// a writer whose share found a thread in the middle of the step), `pace_work*` for pacing
    /// steps a writer did itself (time and units), `schedule_rises` for the times the debt rose
    /// above the pacing schedule's start within a memtable (and the largest rise),
    /// `slowdown_*` for writes an index's slowdown rule delayed (`lsm`'s L0 rule): asleep with
    /// background threads, working a step of the index's work without them (counted when the
    /// step did some). Times in
    /// nanoseconds, work in the index's units.
    pub waits: BTreeMap<String, u64>,
    /// Memtables frozen and handed to the index since open.
    pub memtable_switches: u64,
    /// Memtables in memory now: the active one and those frozen but not yet published by the
    /// index (durable there, for a kind whose `Index::published_seq` is its durable one).
    pub memtables: usize,
    /// Bytes those memtables hold (key + value + 64 bytes per entry).
    pub memtable_bytes: u64,
    /// The most memtables in memory at once since open, the active one included (sampled at
    /// each rotation, where their number grows).
    pub memtables_max: usize,
    /// The most frozen memtables pending at once since open: waiting for the index's work or
    /// its commit, not held by the index in its own memory (`Index::held_seq`). At most
    /// [`MAX_PENDING_MEMTABLES`]: docs/engine.md, *Memory*.
    pub pending_memtables_max: usize,
    /// The sequence number of the newest write readers see (sequence numbers persist: this
    /// does not restart on open).
    pub last_seq: u64,
    /// Every write up to this sequence number is durable in the index (the log holds the
    /// rest, when it is on).
    pub durable_seq: u64,
    /// Length of the data file in bytes (holes punched out of it included).
    pub file_bytes: u64,
    /// Pages of the data file's allocated space (4 KiB each), header included.
    pub file_pages: u64,
    /// Pages of `file_pages` that are free.
    pub free_pages: u64,
    /// Pages freed since open and punched out of the data file (given back to the file system).
    pub punched_pages: u64,
    /// Free pages kept allocated in the data file to be written again in place, at most a
    /// sixteenth of the allocated pages; punched out once the database is idle (a second
    /// without background work, or [`Db::drain`]).
    pub unpunched_pages: u64,
}

/// What [`Db::check`] verified and counted.
///
/// Only [`CheckReport::live_keys`] is a key count; the version counts depend on the index
/// kind and on timing (how far reorganisation has gone in dropping overwritten versions), so
/// they measure the work left and the space taken, not the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// The sequence number (point in time) the keys were counted at.
    pub seq: u64,
    /// Keys that have a value at `seq`: how many items [`Db::iter`] returned then.
    pub live_keys: u64,
    /// Entries the index holds, every version of every key: puts, deletion markers, merge
    /// operands, and older versions that reorganisation has not dropped yet. Every one of them
    /// was read and its page checksum and order verified.
    pub index_versions: u64,
    /// Entries (all versions, as above) in the memtables, not yet moved into the index (not
    /// verified: they are in memory). A memtable being moved may be counted here and in
    /// `index_versions` both.
    pub memtable_versions: u64,
    /// Memtables in memory: the active one and those frozen but not yet published by the index.
    pub memtables: usize,
    /// Pages of the data file's allocated space, the header page included (4 KiB each).
    pub file_pages: u64,
    /// Pages of `file_pages` that are free (reused by later writes or punched out of the file).
    pub free_pages: u64,
}

impl CheckReport {
    /// Pages in use: the header, the index's pages and its metadata (`file_pages -
    /// free_pages`).
    pub fn used_pages(&self) -> u64 {
        self.file_pages.saturating_sub(self.free_pages)
    }
}

struct MemState {
    active: Arc<Memtable>,
    /// Frozen memtables not yet published by the index ([`Index::published_seq`]), oldest
    /// first: those handed to it, then the `Inner::queued` newest, frozen while the index still
    /// had debt and not yet handed to it ([`Inner::absorb_queued`]).
    frozen: Vec<Arc<Memtable>>,
}

struct WriterState {
    last_seq: u64,
    next_wal: u64,
}

struct Inner {
    dir: PathBuf,
    fs: Arc<dyn Fs>,
    opts: Options,
    config: Mutex<PersistedConfig>,
    store: Arc<PageFile>,
    manifest: Arc<Manifest>,
    index: Arc<dyn Index>,
    wal: Option<WalWriter>,
    writer: Mutex<WriterState>,
    mems: RwLock<MemState>,
    visible: AtomicU64,
    /// Batches inserted into the memtable but not yet visible (an earlier batch is still being
    /// inserted): first sequence number to last.
    inserted: Mutex<std::collections::BTreeMap<u64, u64>>,
    /// Writers sleeping in `wait_visible` until earlier batches are published.
    publish_waiters: AtomicU64,
    publish_lock: Mutex<()>,
    publish_cv: Condvar,
    snapshots: Arc<Snapshots>,
    /// The first failure (the page file's latch): the database is read-only once it is tripped.
    failure: Arc<Latch>,
    closed: AtomicBool,
    shutdown: AtomicBool,
    work_lock: Mutex<()>,
    work_cv: Condvar,
    /// Signalled after every step a background thread finishes (writers held back by pacing
    /// wait on it).
    progress_lock: Mutex<()>,
    progress_cv: Condvar,
    /// Writers inside a pacing wait, from before it starts until they run again after it.
    pacing_writers: AtomicU64,
    /// When the earliest of those waits ends, in nanoseconds since `epoch` (0 once a background
    /// thread has woken the writers, `u64::MAX` when none waits). From then until the writers
    /// run again, background threads give up their processor after every step.
    pace_due: AtomicU64,
    epoch: Instant,
    counters: Counters,
    /// Pacing credit owed by writers but not yet worked off.
    pace_owed: AtomicU64,
    /// The pacing schedule: the debt when it started and the memtable room left then. Writers
    /// work only while the debt is above the straight line from there to zero at the end of
    /// the memtable (`Inner::on_schedule`).
    sched_debt: AtomicU64,
    sched_room: AtomicU64,
    /// Where the schedule's line reaches zero: the room left then (negative: past the active
    /// memtable's end).
    sched_end: AtomicI64,
    /// Steps of index work the background threads have finished since open.
    bg_steps: AtomicU64,
    /// Background threads inside a step of index work now ([`Db::drain`] waits for them).
    bg_stepping: AtomicU64,
    /// Background threads held now at [`Options::background_gate`] (tests): while all are, a
    /// writer behind the schedule does its share itself rather than wait ([`Inner::throttle`]).
    bg_gated: AtomicU64,
    /// The log files of memtables dropped once the index published them, with each memtable's
    /// newest sequence number, oldest first: a file goes once the index holds its memtable
    /// durably ([`Index::durable_seq`]), and a writer leaves its removal (and the directory
    /// sync after it) to the background threads, when there are any ([`Inner::writer_work`]).
    retired_logs: Mutex<Vec<(u64, u64)>>,
    /// The newest sequence number of the memtables dropped so far (published by the index,
    /// not necessarily durable): a flush waits until the index holds it durably.
    released_seq: AtomicU64,
    /// `bg_steps` when a writer's pacing wait last ended without a single background step
    /// (`u64::MAX`: never): until the threads finish another step, writers behind the schedule
    /// do their share without waiting for them first.
    fruitless_at: AtomicU64,
    /// Whether writers pace by debt (every kind but `lsm`, which keeps LevelDB's stall rules).
    paced: bool,
    /// How many of the newest frozen memtables are queued, not yet handed to the index:
    /// changed only under `mems`' write lock (so it and `MemState::frozen` agree under either
    /// lock), and read without it where only whether it is 0 matters.
    queued: AtomicUsize,
    /// Held while a memtable is handed to the index, so that they are handed over in order.
    absorb_lock: Mutex<()>,
    io: Arc<IoCounters>,
    _lock: Box<dyn Any + Send + Sync>,
}

/// An open database. `Send + Sync`: share it between threads with an `Arc`.
///
/// Open one with [`Db::open`]; at most one handle, in this process or another, has a
/// directory open at a time ([`Error::Locked`]).
///
/// # Dropping without [`Db::close`]
///
/// Dropping a `Db` stops its background threads (each ends the step it is in) and writes
/// nothing more: the memtables are not moved into the index. What that loses depends on the
/// write-ahead log ([`Options::wal`]):
///
/// - **Log on (the default): nothing acknowledged is lost.** Every write is in the log, in the
///   operating system, before it is acknowledged, and the next [`Db::open`] replays the log
///   into the index. This is the same recovery as after a killed process; `close` only makes
///   the next open quicker. (Across a power cut, only writes made with [`Durability::Sync`],
///   or followed by a [`Db::sync`], are kept, with or without `close`.)
/// - **Log off: the writes not yet durable in the index are lost**: every write since the
///   last [`Db::sync`], [`Db::flush`] or [`Db::drain`], less those that background work
///   happened to move into the index durably meanwhile ([`Stats::durable_seq`] says up to
///   which sequence number the index holds writes durably). The next open finds the database
///   as of that point, whole and consistent, without the writes after it.
///
/// Either way the database is never damaged by a drop; call `close` to see the error of the
/// final flush, if any.
pub struct Db {
    inner: Arc<Inner>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// A test hook ([`Options::background_gate`]): while it is closed, every background thread
/// stops before its next step of index work and waits until it opens (or the database
/// closes), so that a test can hold the threads back deterministically, never with a sleep,
/// and see what the writers do alone.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct BackgroundGate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl BackgroundGate {
    /// A gate that holds the threads back until [`BackgroundGate::open`].
    pub fn closed() -> Arc<BackgroundGate> {
        Arc::new(BackgroundGate::default())
    }

    /// Lets the threads step again.
    pub fn open(&self) {
        *self.open.lock() = true;
        self.cv.notify_all();
    }

    /// Holds the threads back again from their next step.
    pub fn close(&self) {
        *self.open.lock() = false;
    }

    /// Waits until the gate is open (true) or `stop` is set (false). Whoever sets `stop` calls
    /// `wake` after it.
    fn pass(&self, stop: &AtomicBool) -> bool {
        let mut open = self.open.lock();
        loop {
            if *open {
                return true;
            }
            if stop.load(Ordering::Acquire) {
                return false;
            }
            self.cv.wait(&mut open);
        }
    }

    fn wake(&self) {
        let _g = self.open.lock();
        self.cv.notify_all();
    }
}

/// The most frozen memtables that wait at once for the index's work or its commit (those an
/// index holds in its own memory by design, `Index::held_seq`, not counted): a writer that finds
/// this many waits for the commit, or does the work, before it rotates the active memtable.
/// Memory is then at most `memtable_bytes × (MAX_PENDING_MEMTABLES + 1)` in memtables, plus what
/// the kind holds (docs/engine.md, *Memory*). Two: one the index works on or commits while the
/// one before it commits, so that a commit as long as a memtable's filling stalls nobody.
pub const MAX_PENDING_MEMTABLES: usize = 2;

/// The longest a writer at [`MAX_PENDING_MEMTABLES`] waits for a commit before it looks again
/// (a commit that ends sooner ends the wait).
const COMMIT_WAIT: Duration = Duration::from_millis(10);

/// The longest a writer behind the pacing schedule waits for background work per write.
const PACE_WAIT: Duration = Duration::from_millis(1);

/// The longest a writer just behind the pacing schedule waits, in `PACE_WAIT`s, for the
/// background threads to bring the debt back to it, while a rotation could still queue the
/// memtable ([`Inner::throttle`]); `THROTTLE_WAIT_FAR` once it is a quarter of the schedule's
/// start debt behind, and in proportion between.
const THROTTLE_WAIT: Duration = Duration::from_millis(2);
const THROTTLE_WAIT_FAR: Duration = Duration::from_millis(6);

/// Where the pacing schedule stands ([`Inner::on_schedule`]).
#[derive(Clone, Copy, Debug)]
struct Schedule {
    /// The debt the schedule allows now.
    allowed: u64,
    /// The debt when the schedule started.
    debt: u64,
    /// The room over which it falls to zero.
    span: u64,
}

impl Schedule {
    /// What the schedule falls by over `used` bytes of room: the credit a write of `used`
    /// bytes owes.
    fn credit(&self, used: u64) -> u64 {
        ((self.debt as u128 * used as u128).div_ceil(self.span as u128)).min(u64::MAX as u128)
            as u64
    }
}

/// How often a background thread wakes the writers that pacing holds back, while work is left
/// (and at once when none is). Waking them after every step (1/256 of a memtable) cost more than
/// the steps: on this machine's VM a third of the thread's time went to wake-ups and context
/// switches (`perf record -e cpu-clock`, docs/engine.md). A writer still waits at most
/// `PACE_WAIT`.
const WAKE_EVERY: Duration = Duration::from_micros(250);

/// How long a background thread finds no work before it punches the free space kept for
/// reuse in place out of the data file (`Allocator::punch_reserve`).
const PUNCH_WHEN_IDLE: Duration = Duration::from_secs(1);

/// Starts a thread of woods' own named `name`; failing to start one is an I/O error of the
/// call that needed it, not a panic.
pub(crate) fn spawn_thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map_err(|e| Error::io(format!("starting the {name} thread"), e))
}

fn elapsed_ns(t: Instant) -> u64 {
    t.elapsed().as_nanos().min(u64::MAX as u128) as u64
}

pub(crate) fn write_header(kind: &PersistedConfig) -> AlignedBuf {
    let mut h = Vec::new();
    h.extend_from_slice(DATA_MAGIC);
    codec::put_u16(&mut h, FORMAT_MAJOR);
    codec::put_u16(&mut h, FORMAT_MINOR);
    codec::put_u32(&mut h, PAGE_SIZE as u32);
    codec::put_u32(&mut h, EXTENT_PAGES);
    let cfg = kind.encode();
    codec::put_bytes(&mut h, &cfg);
    let mut buf = AlignedBuf::zeroed(PAGE_SIZE);
    buf[..h.len()].copy_from_slice(&h);
    seal_page(0, &mut buf);
    buf
}

/// Checks page 0 (docs/format.md, "Data file header"): the major version first, since another
/// major may lay the page out otherwise; then the checksum and the page size.
fn check_header(page: &[u8]) -> Result<()> {
    let bad = |detail: String| Error::corruption("data file header", Some(0), detail);
    if &page[..8] != DATA_MAGIC {
        return Err(bad("bad magic".into()));
    }
    let major = u16::from_le_bytes([page[8], page[9]]);
    if major != FORMAT_MAJOR {
        return Err(Error::UnsupportedFormat {
            found_major: major,
            supported_major: FORMAT_MAJOR,
        });
    }
    verify(0, page).map_err(|e| match e {
        Error::Corruption { detail, .. } => bad(detail),
        e => e,
    })?;
    let page_size = u32::from_le_bytes([page[12], page[13], page[14], page[15]]);
    if page_size as usize != PAGE_SIZE {
        return Err(Error::corruption(
            "data file header",
            Some(0),
            format!("page size {page_size}"),
        ));
    }
    Ok(())
}

/// The configuration the data file's header holds (checked as [`check_header`] does): what
/// repair falls back on when no manifest log can be read.
pub(crate) fn header_config(page: &[u8]) -> Result<PersistedConfig> {
    check_header(page)?;
    let mut r = codec::Reader::new(&page[20..], "data file header");
    PersistedConfig::decode(r.bytes()?)
}

/// The pieces of an open database below the write-ahead log.
pub(crate) struct Parts {
    pub manifest: Arc<Manifest>,
    pub state: ManifestState,
    pub config: PersistedConfig,
    pub store: Arc<PageFile>,
    pub failure: Arc<Latch>,
    pub snapshots: Arc<Snapshots>,
    pub index: Arc<dyn Index>,
}

fn open_data_file(fs: &Arc<dyn Fs>, path: &Path, opts: &Options) -> Result<Arc<dyn File>> {
    fs.open(
        path,
        OpenMode {
            create: false,
            direct: opts.direct_io,
        },
    )
}

fn read_header(file: &dyn File) -> Result<()> {
    let mut hdr = AlignedBuf::zeroed(PAGE_SIZE);
    file.read_exact_at(&mut hdr, 0)?;
    check_header(&hdr)
}

/// Opens the manifest (or, with `create`, creates the database when the directory holds none of
/// woods' files), checks the stored options against `opts`, and opens the data file and the
/// index. With `writable`, starts a new incarnation (one manifest record) before the index is
/// opened; otherwise writes nothing but a new database. The caller holds the directory's lock.
pub(crate) fn open_parts(
    fs: &Arc<dyn Fs>,
    dir: &Path,
    opts: &Options,
    io: &Arc<IoCounters>,
    create: bool,
    writable: bool,
) -> Result<Parts> {
    let data_path = dir.join(DATA_FILE);
    let exists = Manifest::exists(&**fs, dir);
    if !exists {
        let found = crate::repair::leftovers(&**fs, dir);
        if !found.is_empty() {
            return Err(Error::corruption(
                "database directory",
                None,
                format!(
                    "{} has no CURRENT file but holds {}: the database is damaged (or its \
                     creation was cut short), and is not created over; `Db::repair` \
                     (`woods repair {}`) rebuilds it from the manifest logs that are there",
                    dir.display(),
                    found.join(", "),
                    dir.display()
                ),
            ));
        }
        if !create {
            return Err(Error::corruption(
                "database directory",
                None,
                format!("no CURRENT file in {}: not a woods database", dir.display()),
            ));
        }
    }
    let (manifest, state, config) = if exists {
        // The data file's format first: a database of another major is refused as such
        // (naming both versions), before its manifest is read.
        if fs.exists(&data_path) {
            read_header(&*open_data_file(fs, &data_path, opts)?)?;
        }
        let (m, st) = Manifest::open(fs.clone(), dir, io.clone())?;
        if st.page_size as usize != PAGE_SIZE {
            return Err(Error::corruption(
                "manifest",
                None,
                format!(
                    "its header gives a page size of {} bytes, not {PAGE_SIZE}",
                    st.page_size
                ),
            ));
        }
        let stored = PersistedConfig::decode(&st.config)?;
        check_stored_options(&stored, opts)?;
        (m, st, stored)
    } else {
        let Some(index) = opts.index.clone() else {
            return Err(Error::InvalidOption(no_kind_to_create(dir)));
        };
        let config = PersistedConfig {
            index,
            comparator: "bytewise".into(),
            merge_operator: None,
        };
        // The data file first (header synced), then the manifest that makes it a database.
        let f = fs.open(
            &data_path,
            OpenMode {
                create: true,
                direct: opts.direct_io,
            },
        )?;
        f.set_len(0)?;
        f.write_all_at(&write_header(&config), 0)?;
        f.sync()?;
        fs.sync_dir(dir)?;
        let m = Manifest::create(
            fs.clone(),
            dir,
            PAGE_SIZE as u32,
            EXTENT_PAGES,
            config.encode(),
            io.clone(),
        )?;
        let st = m.state();
        (m, st, config)
    };
    let manifest = Arc::new(manifest);

    let file = open_data_file(fs, &data_path, opts)?;
    read_header(&*file)?;
    let alloc = Allocator::from_allocated(1, &state.allocated);
    // The copy-on-write B+-tree rewrites its pages in place of runs: no row cache. The FD-tree
    // follows fences a page per level (specs/fdtree.md §4.1): a cached row of one level would
    // not give the page to read in the next, so it has none either.
    let row_bytes = match config.index {
        crate::IndexKind::BTree(_) | crate::IndexKind::FdTree(_) => 0,
        _ => opts.row_cache_bytes,
    };
    let store = Arc::new(PageFile::new(
        file,
        Cache::with_rows(opts.cache_bytes, row_bytes),
        alloc,
        io.clone(),
    ));
    store.set_split_entries(opts.split_entries);
    // A failed write of the data file turns the database read-only at once: no index work
    // in flight commits what it built on it.
    let failure = store.failure().clone();
    manifest.refuse_commits_after(failure.clone());
    manifest.attach_stamps(store.stamps().clone());
    if writable {
        // Before the index can write a page: every page this open writes is stamped with it.
        manifest.begin_incarnation()?;
    }
    let snapshots = Arc::new(Snapshots::default());
    let ctx = IndexContext {
        store: store.clone(),
        manifest: manifest.clone(),
        snapshots: snapshots.clone(),
        merge_op: opts.merge_operator.clone(),
        dir: dir.to_path_buf(),
        memtable_bytes: opts.memtable_bytes,
    };
    let index = open_index(&config.index, ctx, &state.index_meta, state.durable_seq)?;
    Ok(Parts {
        manifest,
        state,
        config,
        store,
        failure,
        snapshots,
        index,
    })
}

/// Refuses options that contradict what the database was created with.
/// Why a new database is not created without an index kind.
fn no_kind_to_create(dir: &Path) -> String {
    let kinds: Vec<&str> = crate::IndexKind::all().iter().map(|k| k.name()).collect();
    format!(
        "{} holds no database, and Options::index is None (\"the kind the database has\"): \
         a new database needs its index kind, one of {}, e.g. \
         Options::with_index(IndexKind::from_name(\"lsm\")?)",
        dir.display(),
        kinds.join(", ")
    )
}

fn check_stored_options(stored: &PersistedConfig, opts: &Options) -> Result<()> {
    if let Some(k) = &opts.index {
        if k != &stored.index {
            return Err(Error::OptionsMismatch {
                option: "index".into(),
                stored: format!("{:?}", stored.index),
                given: format!("{k:?}"),
            });
        }
    }
    if let Some(name) = &stored.merge_operator {
        match &opts.merge_operator {
            None => {
                return Err(Error::MergeOperator(format!(
                    "the database holds Merge entries written with operator {name:?}; open it with that operator"
                )))
            }
            Some(op) if op.name() != name => {
                return Err(Error::OptionsMismatch {
                    option: "merge_operator".into(),
                    stored: name.clone(),
                    given: op.name().to_string(),
                })
            }
            Some(_) => {}
        }
    }
    Ok(())
}

impl Db {
    /// Opens the database in directory `path`, creating it if `path` is absent or holds none
    /// of woods' files.
    ///
    /// Creating one needs its index kind: with [`Options::index`] `None` ("the kind the
    /// database has") a directory holding no database is [`Error::InvalidOption`], naming the
    /// kinds, and nothing is created. An existing database is opened with the options it was
    /// created with; an explicit [`Options::index`] or merge operator that differs is
    /// [`Error::OptionsMismatch`] (a missing merge operator where the database holds merge
    /// operands, [`Error::MergeOperator`]). Other errors: [`Error::InvalidOption`] for an
    /// option out of its range (each [`Options`] field gives its limits), [`Error::Locked`]
    /// when another handle has the directory open, and the I/O or [`Error::Corruption`] error
    /// of reading the database and replaying its log.
    ///
    /// A directory that holds a data file, manifest logs or log files but no `CURRENT` file is
    /// never created over: that is a damaged database (or one whose creation was cut short),
    /// and opening it is [`Error::Corruption`] naming what is there and what is missing.
    /// [`Db::repair`] (`woods repair DIR`) rebuilds it from the manifest logs that are there.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let dir = path.as_ref().to_path_buf();
        let fs: Arc<dyn Fs> = opts.fs.clone().unwrap_or_else(|| Arc::new(RealFs));
        if opts.index.is_none() && !fs.exists(&dir) {
            // Not even the directory is made (an existing one is judged under its lock).
            return Err(Error::InvalidOption(no_kind_to_create(&dir)));
        }
        fs.create_dir_all(&dir)?;
        let lock = fs.lock(&dir.join(LOCK_FILE))?;
        let io = Arc::new(IoCounters::default());
        let Parts {
            manifest,
            state,
            config,
            store,
            failure,
            snapshots,
            index,
        } = open_parts(&fs, &dir, &opts, &io, true, true)?;

        // Replay the log: everything after what the index holds durably. Sealing may remove
        // files (a torn header, anything after a tear); `wal_files` are those it left.
        let replay = wal::replay(&*fs, &dir, &io)?;
        if replay.torn {
            // Valid records after a damaged one: a torn tail only if a power cut can explain it
            // (an earlier boot's file, in the part no sync mark covers).
            let damage = crate::repair::log_damage(&replay, state.durable_seq)?;
            if let Some(d) = damage.filter(|d| d.this_boot || d.synced) {
                return Err(d.error(&dir));
            }
        }
        // Records that resume only after an absent file: the file was lost, not torn.
        if let Some(m) = crate::repair::missing_log(&replay, state.durable_seq)? {
            return Err(m.error(&dir));
        }
        let wal_files = wal::seal_recovered(&*fs, &dir, &replay, &io)?;
        crate::crashpoint::point("open.after_seal");
        let mut last_seq = state.durable_seq;
        // Above every number found, removed ones included: a new file never takes an old name.
        let next_wal = replay.files.last().copied().unwrap_or(0) + 1;
        // The plain FD-tree is the paper's amortized tree: the insert that fills the head tree
        // waits for the whole cascade (specs/fdtree.md §4.8), so it is not paced by debt.
        let paced = !matches!(
            &config.index,
            crate::IndexKind::Lsm(_)
                | crate::IndexKind::FdTree(crate::FdTreeParams {
                    deamortized: false,
                    ..
                })
        );
        let inner = Arc::new(Inner {
            dir: dir.clone(),
            fs: fs.clone(),
            config: Mutex::new(config),
            store,
            manifest,
            index,
            wal: None,
            writer: Mutex::new(WriterState { last_seq, next_wal }),
            mems: RwLock::new(MemState {
                active: Arc::new(Memtable::new(0)),
                frozen: Vec::new(),
            }),
            visible: AtomicU64::new(last_seq),
            inserted: Mutex::new(Default::default()),
            publish_waiters: AtomicU64::new(0),
            publish_lock: Mutex::new(()),
            publish_cv: Condvar::new(),
            snapshots,
            failure,
            closed: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            work_lock: Mutex::new(()),
            work_cv: Condvar::new(),
            progress_lock: Mutex::new(()),
            progress_cv: Condvar::new(),
            pacing_writers: AtomicU64::new(0),
            pace_due: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            counters: Counters::default(),
            pace_owed: AtomicU64::new(0),
            sched_debt: AtomicU64::new(0),
            sched_room: AtomicU64::new(0),
            sched_end: AtomicI64::new((opts.memtable_bytes / 16) as i64),
            bg_steps: AtomicU64::new(0),
            bg_stepping: AtomicU64::new(0),
            bg_gated: AtomicU64::new(0),
            fruitless_at: AtomicU64::new(u64::MAX),
            retired_logs: Mutex::new(Vec::new()),
            released_seq: AtomicU64::new(0),
            paced,
            queued: AtomicUsize::new(0),
            absorb_lock: Mutex::new(()),
            io,
            _lock: lock,
            opts: opts.clone(),
        });
        let mut replayed = false;
        // The first log file whose records recovery stops before, if any.
        let mut stopped_in = None;
        for (rec, &file) in replay.records.iter().zip(&replay.record_files) {
            let b = batch::decode(rec)?;
            if b.first_seq <= state.durable_seq {
                continue;
            }
            if b.first_seq != last_seq + 1 {
                // A gap means records were lost in the middle: stop at the prefix we have.
                stopped_in = Some(file);
                break;
            }
            let mem = inner.mems.read().active.clone();
            for (i, (kind, k, v)) in b.ops.iter().enumerate() {
                mem.insert(k, b.first_seq + i as u64, *kind, v);
            }
            last_seq = b.first_seq + b.ops.len() as u64 - 1;
            replayed = true;
            if mem.bytes() >= inner.opts.memtable_bytes {
                inner.visible.store(last_seq, Ordering::Release);
                inner.make_room(u64::MAX)?;
            }
        }
        {
            inner.writer.lock().last_seq = last_seq;
            inner.visible.store(last_seq, Ordering::Release);
        }
        if replayed {
            inner.flush_all()?;
            crate::crashpoint::point("open.replay.after_flush");
        }
        // Everything replayed is durable in the index now: the old logs can go. The files
        // recovery stopped before go first, made durable, and then the others: a crash (or a
        // power cut) between the removals must not leave a file of records above the durable
        // sequence number behind an absent one, which the next open would take for a lost file
        // (`repair::missing_log`).
        let (dropped, kept): (Vec<u64>, Vec<u64>) = wal_files
            .iter()
            .partition(|&&n| stopped_in.is_some_and(|s| n >= s));
        for group in [dropped, kept] {
            for n in &group {
                fs.remove(&wal::wal_file_path(&dir, *n))?;
            }
            if !group.is_empty() {
                fs.sync_dir(&dir)?;
            }
        }
        let inner = match Arc::try_unwrap(inner) {
            Ok(mut i) => {
                if i.opts.wal {
                    // A memtable's records take less log than the memtable charges them (key,
                    // value and 64 bytes an entry, against a record's 20 bytes and a few per
                    // entry), so one memtable's log fits the preallocated part of its file.
                    let prealloc = (i.opts.memtable_bytes + wal::WAL_HEADER_LEN as u64)
                        .next_multiple_of(64 << 10);
                    let w = WalWriter::create(fs.clone(), &dir, next_wal, i.io.clone(), prealloc)?;
                    i.mems.get_mut().active = Arc::new(Memtable::new(next_wal));
                    i.writer.get_mut().next_wal = next_wal + 1;
                    i.wal = Some(w);
                }
                Arc::new(i)
            }
            Err(_) => unreachable!("no other handle to the database exists during open"),
        };
        let db = Db {
            inner,
            workers: Mutex::new(Vec::new()),
        };
        // On failure the Db is dropped: it stops the threads already started.
        db.start_workers()?;
        Ok(db)
    }

    fn start_workers(&self) -> Result<()> {
        let mut ws = self.workers.lock();
        for i in 0..self.inner.opts.background_threads {
            let inner = self.inner.clone();
            // Named, so that `top -H` and profilers tell index work from the writers.
            ws.push(spawn_thread(&format!("woods-bg-{i}"), move || {
                inner.worker_loop()
            })?);
        }
        Ok(())
    }

    /// Sets `key` to `value` with the default durability.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.write(&b)
    }

    /// Deletes `key`.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write(&b)
    }

    /// Adds a merge operand for `key` (needs a merge operator). The operand is limited to
    /// [`crate::MAX_VALUE_LEN`] like a value; the value the operator folds from a key's operands
    /// is not: one longer than the limit is kept on disk as its operands and folded on read
    /// (see [`crate::MergeOperator`]).
    pub fn merge(&self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.merge(key, operand);
        self.write(&b)
    }

    /// Sets `key` to `value` with the given durability: with [`Durability::Sync`] it is on the
    /// device when this returns (as a one-entry [`WriteBatch`] given to [`Db::write_with`]).
    /// Errors as [`Db::write_with`]: [`Error::InvalidOption`] for `Sync` without the
    /// write-ahead log, and as [`Db::put`] for a key or value past its limit
    /// ([`crate::MAX_KEY_LEN`], [`crate::MAX_VALUE_LEN`]).
    pub fn put_with(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        durability: Durability,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.write_with(&b, durability)
    }

    /// Deletes `key` with the given durability (see [`Db::put_with`]).
    pub fn delete_with(&self, key: impl AsRef<[u8]>, durability: Durability) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write_with(&b, durability)
    }

    /// Adds a merge operand for `key` with the given durability (see [`Db::merge`] and
    /// [`Db::put_with`]).
    pub fn merge_with(
        &self,
        key: impl AsRef<[u8]>,
        operand: impl AsRef<[u8]>,
        durability: Durability,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.merge(key, operand);
        self.write_with(&b, durability)
    }

    /// Applies a batch atomically with the default durability.
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.write_with(batch, self.inner.opts.durability)
    }

    /// Applies a batch atomically; with `Durability::Sync` it is on the device when this returns,
    /// with every write acknowledged before it. An empty batch writes nothing, and with `Sync`
    /// still syncs the log, as [`Db::sync`] does.
    /// Without the write-ahead log ([`Options::wal`] false) a `Sync` write is
    /// [`Error::InvalidOption`] and is not applied: nothing could sync it before acknowledging
    /// it ([`Db::sync`] makes writes durable then).
    pub fn write_with(&self, batch: &WriteBatch, durability: Durability) -> Result<()> {
        if durability == Durability::Sync && self.inner.wal.is_none() {
            return Err(Error::InvalidOption(crate::options::NO_WAL_SYNC.into()));
        }
        self.inner.write(batch, durability)
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let seq = self.inner.pin_seq();
        let r = self.inner.get_at(key.as_ref(), seq);
        self.inner.snapshots.release(seq);
        r
    }

    /// A consistent point-in-time view; reads through it ignore later writes.
    pub fn snapshot(&self) -> Snapshot {
        let seq = self.inner.pin_seq();
        Snapshot {
            inner: self.inner.clone(),
            seq,
        }
    }

    /// Iterates `(key, value)` over a key range, ascending, from a consistent point in time
    /// (the iterator sees no write made after this call).
    ///
    /// The bounds are anything that reads as bytes, borrowed or owned:
    /// `db.range(key.as_slice()..)`, `db.range(b"a".as_slice()..b"b")`, `db.range("a".."b")`,
    /// `db.range(b"a".to_vec()..=b"z".to_vec())`. Byte-string literals need `.as_slice()`
    /// (`b"a"..b"b"` has two readings, as arrays or as slices) and so does a pair of borrowed
    /// [`Bound`]s; an owned pair `(Bound<Vec<u8>>, Bound<Vec<u8>>)` works as it is. For the whole
    /// database use [`Db::iter`] (a bare `..` names no key type). "From this key, the next
    /// `n`": `db.range(key.as_slice()..)?.take(n)`, which reads no further than it is asked.
    ///
    /// The bounds are copied once, for the index. Each item is a
    /// `Result<(key, value)>`: a read of the index can fail (I/O, corruption), as can folding a
    /// key's merge operands without a merge operator ([`Error::MergeOperator`]).
    pub fn range<K, R>(&self, range: R) -> Result<DbIter>
    where
        K: AsRef<[u8]> + ?Sized,
        R: RangeBounds<K>,
    {
        DbIter::new(self.inner.clone(), self.inner.pin_seq(), &range, false)
    }

    /// Like [`Db::range`], in descending key order.
    pub fn range_rev<K, R>(&self, range: R) -> Result<DbIter>
    where
        K: AsRef<[u8]> + ?Sized,
        R: RangeBounds<K>,
    {
        DbIter::new(self.inner.clone(), self.inner.pin_seq(), &range, true)
    }

    /// Iterates every key, ascending (as [`Db::range`] over the whole key space).
    pub fn iter(&self) -> Result<DbIter> {
        self.range::<[u8], _>(..)
    }

    /// Iterates every key, descending (as [`Db::range_rev`] over the whole key space).
    pub fn iter_rev(&self) -> Result<DbIter> {
        self.range_rev::<[u8], _>(..)
    }

    /// Makes every acknowledged write durable: syncs the write-ahead log or, without one
    /// ([`Options::wal`] false), moves every memtable into the index durably (as
    /// [`Db::flush`]).
    pub fn sync(&self) -> Result<()> {
        self.inner.check_failed()?;
        match &self.inner.wal {
            Some(w) => {
                let r = w.sync_to(u64::MAX);
                self.inner.note(r)
            }
            None => self.inner.flush_all(),
        }
    }

    /// Moves every memtable into the index and makes it durable there.
    pub fn flush(&self) -> Result<()> {
        self.inner.check_failed()?;
        self.inner.flush_all()
    }

    /// Moves every memtable into the index and then does all pending background work
    /// (compactions included) now, returning when the index is idle. Benchmarks call it so that
    /// throughput and write amplification count the whole cost of the writes.
    pub fn drain(&self) -> Result<()> {
        self.inner.check_failed()?;
        self.inner.flush_all()?;
        loop {
            while self.inner.index.background_work() {
                self.inner.check_failed()?;
                self.inner.do_work(self.inner.step_bytes())?;
            }
            // A background thread may still be in the step that ended the work (its last
            // releases of space, a commit): idle means after it. (`pbt`'s space test once found
            // 8 pages kept unpunched after a drain: a step's release came after the punch.)
            if self.inner.bg_stepping.load(Ordering::Acquire) == 0 {
                break;
            }
            std::thread::yield_now();
        }
        self.inner.reap()?;
        self.inner.store.alloc().punch_reserve();
        Ok(())
    }

    /// Whether [`Options::direct_io`] asked for direct I/O and the file system refused it
    /// (tmpfs, some FUSE and network file systems), so that the data file goes through the OS
    /// page cache (pages are cached twice, there and in woods' cache, and the I/O figures of
    /// a benchmark are no longer those of the device).
    /// Decided once, at open; [`Stats::direct_io`] says which I/O is in effect. The library
    /// prints nothing: a program tells its user if it matters (the `woods` tool warns once).
    pub fn direct_io_fallback(&self) -> bool {
        self.inner.opts.direct_io && !self.inner.store.is_direct()
    }

    /// Counters and shape.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Verifies every page checksum and structural invariant of the index, then reads every
    /// key once at one point in time, and reports what it counted ([`CheckReport`]).
    ///
    /// Reads the whole database twice (the index's pages, then a full scan), so it takes about
    /// as long as two full scans; it writes nothing. Errors: [`Error::Corruption`] naming the
    /// page or structure that failed, or the I/O error of a read.
    pub fn check(&self) -> Result<CheckReport> {
        let seq = self.inner.pin_seq();
        let (memtable_versions, memtables) = {
            let m = self.inner.mems.read();
            let frozen: u64 = m.frozen.iter().map(|f| f.len() as u64).sum();
            (m.active.len() as u64 + frozen, 1 + m.frozen.len())
        };
        let (index_versions, live_keys) = if self.index_kind().ordered() {
            // `DbIter` takes over the registration of `seq`.
            let mut scan = DbIter::new::<[u8], _>(self.inner.clone(), seq, &(..), false)?;
            let index_versions = self.inner.index.check()?;
            (
                index_versions,
                scan.try_fold(0u64, |n, r| r.map(|_| n + 1))?,
            )
        } else {
            let r = self.check_point_only(seq);
            self.inner.snapshots.release(seq);
            r?
        };
        let alloc = self.inner.store.alloc();
        Ok(CheckReport {
            seq,
            live_keys,
            index_versions,
            memtable_versions,
            memtables,
            file_pages: alloc.end(),
            free_pages: alloc.free_pages(),
        })
    }

    /// [`Db::check`] on a point-only kind, which cannot iterate: the index is checked, then
    /// every distinct key it or a memtable holds is looked up at `seq` (the set of keys is held
    /// in memory meanwhile). Returns (index versions, live keys).
    fn check_point_only(&self, seq: u64) -> Result<(u64, u64)> {
        let index_versions = self.inner.index.check()?;
        let mut keys: std::collections::HashSet<Vec<u8>> =
            self.inner.index.point_keys()?.into_iter().collect();
        {
            let m = self.inner.mems.read();
            for mem in std::iter::once(&m.active).chain(m.frozen.iter()) {
                keys.extend(mem.entries().map(|e| e.key.to_vec()));
            }
        }
        let mut live = 0u64;
        for k in &keys {
            if self.inner.get_at(k, seq)?.is_some() {
                live += 1;
            }
        }
        Ok((index_versions, live))
    }

    /// The index kind and its parameters.
    pub fn index_kind(&self) -> crate::IndexKind {
        self.inner.config.lock().index.clone()
    }

    /// Moves every memtable into the index durably, stops the background threads and closes
    /// the database; the next [`Db::open`] then has no log to replay.
    ///
    /// Dropping the handle instead is safe while the write-ahead log is on (nothing
    /// acknowledged is lost: the next open replays the log); with [`Options::wal`] off it loses
    /// every write not yet durable in the index (see [`Db`], *Dropping without close*).
    ///
    /// Errors: the error of the final flush (I/O; [`Error::ReadOnly`] after an earlier failed
    /// write, in which case nothing is flushed and the log keeps what was acknowledged). The
    /// handle is closed and its threads stopped either way.
    pub fn close(self) -> Result<()> {
        let r = if !self.inner.failure.is_tripped() {
            self.inner.flush_all()
        } else {
            Ok(())
        };
        self.inner.closed.store(true, Ordering::Release);
        self.stop_workers();
        r
    }

    fn stop_workers(&self) {
        self.inner.shutdown.store(true, Ordering::Release);
        self.inner.work_cv.notify_all();
        if let Some(g) = &self.inner.opts.background_gate {
            g.wake();
        }
        for h in self.workers.lock().drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // Without close(): nothing is flushed (the log has it, or, without the log, it is lost
        // as `Db`'s documentation says); just stop the workers.
        self.stop_workers();
    }
}

/// An owned copy of a caller's bound: the index's iterators outlive the call.
fn bound<K: AsRef<[u8]> + ?Sized>(b: Bound<&K>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl Inner {
    fn check_failed(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        self.failure.check()
    }

    /// Records a failure: the database turns read-only until reopened.
    fn note<T>(&self, r: Result<T>) -> Result<T> {
        self.failure.note(r)
    }

    /// Registers and returns the current visible sequence number as a read point.
    fn pin_seq(&self) -> u64 {
        self.snapshots.acquire_current(&self.visible)
    }

    fn get_at(&self, key: &[u8], seq: u64) -> Result<Option<Vec<u8>>> {
        crate::entry::check_key(key)?;
        let (active, frozen) = {
            let m = self.mems.read();
            (m.active.clone(), m.frozen.clone())
        };
        crate::pause::point("db.get.after_memtables");
        let mut versions: Vec<Entry> = Vec::new();
        let mut done = active.get(key, seq, &mut versions);
        for m in frozen.iter().rev() {
            if done {
                break;
            }
            done = m.get(key, seq, &mut versions);
        }
        if !done && versions.is_empty() {
            // The usual case: nothing in memory, so the index's versions are all there is.
            self.index.get(key, seq, &mut versions)?;
        } else if !done {
            let mut more = Vec::new();
            self.index.get(key, seq, &mut more)?;
            // The index may already hold a frozen memtable's entries. Its copy wins: a
            // reorganisation may have folded the memtable's Merge operands onto their base into a
            // Put with the same sequence number, and the base itself is gone from the index.
            for e in more {
                versions.retain(|v| v.seq != e.seq);
                versions.push(e);
            }
        }
        versions.sort_by_key(|v| std::cmp::Reverse(v.seq));
        Ok(resolve(key, &versions, seq, self.opts.merge_operator.as_ref())?.map(|v| v.to_vec()))
    }

    fn write(&self, batch: &WriteBatch, durability: Durability) -> Result<()> {
        self.check_failed()?;
        if batch.is_empty() {
            // Nothing to write, but a `Sync` write is acknowledged once the log is synced: every
            // write acknowledged before it is then durable, as after `Db::sync` (the fuzzer's
            // model found a Buffered put lost by a power cut after an empty `Sync` batch).
            return match (&self.wal, durability) {
                (Some(w), Durability::Sync) => {
                    let r = w.sync_to(u64::MAX);
                    self.note(r)
                }
                _ => Ok(()),
            };
        }
        batch.validate()?;
        let limit = batch::max_batch_bytes(self.opts.memtable_bytes);
        if batch.size_bytes() > limit {
            return Err(Error::BatchTooLarge {
                bytes: batch.size_bytes(),
                limit,
            });
        }
        if batch.has_merge() {
            self.ensure_merge_operator()?;
        }
        let stalled_work = self.apply_stall()?;
        let room_needed = batch.size_bytes() as u64;
        let ub: u64 = batch
            .ops
            .iter()
            .map(|(_, k, v)| (k.len() + v.len()) as u64)
            .sum();
        // Under the writer lock: room, sequence numbers, the log record (so the log holds batches
        // in sequence order) and the memtable's room. The memtable inserts come after it, many
        // writers at once, and each batch becomes visible in sequence order (`publish`).
        let mut worked = stalled_work;
        let (mem, first, last, pos) = {
            let mut w = self.writer.lock();
            self.check_failed()?;
            if self.mems.read().active.bytes() + room_needed > self.opts.memtable_bytes {
                drop(w);
                worked += self.make_room(room_needed)?;
                w = self.writer.lock();
                self.check_failed()?;
            }
            let first = w.last_seq + 1;
            let last = first + batch.len() as u64 - 1;
            if last > MAX_SEQ {
                return Err(Error::InvalidOption("sequence numbers exhausted".into()));
            }
            let pos = match &self.wal {
                Some(wal) => Some(self.note(wal.append(&batch.encode(first)))?),
                None => None,
            };
            let mem = self.mems.read().active.clone();
            mem.reserve(room_needed, ub);
            w.last_seq = last;
            (mem, first, last, pos)
        };
        for (i, (kind, k, v)) in batch.ops.iter().enumerate() {
            mem.insert_reserved(k, first + i as u64, *kind, v);
        }
        drop(mem);
        self.publish(first, last);
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters.user_bytes.fetch_add(ub, Ordering::Relaxed);
        if durability == Durability::Sync {
            if let (Some(wal), Some(p)) = (&self.wal, pos) {
                self.note(wal.sync_to(p))?;
            }
        }
        worked += self.pace(batch.size_bytes() as u64)?;
        self.counters
            .write_work_max
            .fetch_max(worked, Ordering::Relaxed);
        Ok(())
    }

    /// Makes the batch `first..=last`, inserted into its memtable, visible to readers once every
    /// earlier batch is inserted too, so that a reader at sequence number `s` sees every write
    /// up to `s`, and returns when it is visible. Whichever writer completes the sequence
    /// publishes the batches after it that are already inserted: a writer waits for earlier
    /// writers' inserts, never for those writers to be scheduled again.
    fn publish(&self, first: u64, last: u64) {
        {
            let mut done = self.inserted.lock();
            if self.visible.load(Ordering::Acquire) + 1 != first {
                done.insert(first, last);
            } else {
                let mut upto = last;
                while let Some(l) = done.remove(&(upto + 1)) {
                    upto = l;
                }
                // SeqCst pairs with the waiters' count (see `wait_visible`): either a waiter sees
                // the new number before it sleeps, or this sees the waiter and wakes it.
                self.visible.store(upto, Ordering::SeqCst);
                if self.publish_waiters.load(Ordering::SeqCst) > 0 {
                    let _g = self.publish_lock.lock();
                    self.publish_cv.notify_all();
                }
            }
        }
        self.wait_visible(last);
    }

    /// Waits until every batch up to sequence number `seq` is inserted and visible. Those
    /// writers hold no lock and only insert into a memtable, so the wait is usually short: spin a
    /// little, yield a little, then sleep until a publication (a writer preempted while
    /// inserting must not be fought for the processor by the ones waiting for it).
    fn wait_visible(&self, seq: u64) {
        for i in 0..96u32 {
            if self.visible.load(Ordering::Acquire) >= seq {
                return;
            }
            if i < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        self.publish_waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = self.publish_lock.lock();
        while self.visible.load(Ordering::SeqCst) < seq {
            self.publish_cv.wait(&mut g);
        }
        drop(g);
        self.publish_waiters.fetch_sub(1, Ordering::SeqCst);
    }

    fn ensure_merge_operator(&self) -> Result<()> {
        let Some(op) = &self.opts.merge_operator else {
            return Err(Error::MergeOperator(
                "merge() needs Options::merge_operator".into(),
            ));
        };
        let mut cfg = self.config.lock();
        if cfg.merge_operator.is_none() {
            cfg.merge_operator = Some(op.name().to_string());
            let r = self.manifest.set_config(cfg.encode());
            if r.is_err() {
                cfg.merge_operator = None;
            }
            self.note(r)?;
        }
        Ok(())
    }

    /// LevelDB-style throttling for index kinds that ask for it. Returns the units of index
    /// work this writer did itself.
    fn apply_stall(&self) -> Result<u64> {
        match self.index.stall() {
            Stall::None => Ok(0),
            Stall::Slowdown(us) => {
                let t = Instant::now();
                let w = &self.counters.waits;
                let mut done = 0;
                if self.opts.background_threads == 0 {
                    // No thread to give the time to: the delay LevelDB's rule asks for is spent
                    // on a step of the work it waits for (for `lsm`, whose steps are whole,
                    // one flush or compaction). Asleep, the writer only waited, and with L0 at
                    // the slowdown for whole memtables, a load without background threads went
                    // at under a thousand writes a second.
                    done = self.writer_work(self.step_bytes())?;
                    if done > 0 {
                        w.slowdown_works.fetch_add(1, Ordering::Relaxed);
                    }
                } else {
                    std::thread::sleep(Duration::from_micros(us));
                    w.slowdown_sleeps.fetch_add(1, Ordering::Relaxed);
                }
                self.record_stall(t);
                Ok(done)
            }
            Stall::Stop => {
                let t = Instant::now();
                let mut done = 0u64;
                while self.index.stall() == Stall::Stop {
                    self.check_failed()?;
                    done = done.saturating_add(self.writer_work(self.step_bytes())?);
                }
                self.record_stall(t);
                Ok(done)
            }
        }
    }

    fn record_stall(&self, t: Instant) {
        let ns = elapsed_ns(t);
        self.counters.stalls.fetch_add(1, Ordering::Relaxed);
        self.counters.stall_ns.fetch_add(ns, Ordering::Relaxed);
        self.counters.stall_max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Debt pacing: a writer works off debt in proportion to the memtable room it used, so the
    /// index is ready for the next memtable when the active one fills, and no writer ever waits
    /// for a whole reorganisation. The spec's "background worker with back-pressure" (NB-tree
    /// §3.7): a writer owes only while the debt is behind its schedule, so while background
    /// threads keep up no writer waits at all; what the threads leave undone the writers do,
    /// each its share and never more. Returns the units of index work this writer did itself.
    ///
    /// The share: a write of `used` bytes adds to the owed credit the schedule's slope times
    /// `used` (the schedule's start debt over the room from its start to the margin), or
    /// `debt × used ÷ room` where that is more (in the memtable's last sixteenth). The credit is
    /// paid once it is worth a step (or the whole of what is behind), and only up to how far the
    /// debt is behind the schedule. Since how far it is behind grows by at most the slope times
    /// the room used, it never exceeds what is owed, and a writer that pays leaves the debt on
    /// the schedule: the debt at the memtable's end is under a step. A writer pays at most
    /// `slope × used + 2 × step` (docs/engine.md, *The writer's bound*).
    fn pace(&self, used: u64) -> Result<u64> {
        if !self.paced {
            return Ok(0);
        }
        let mut debt = self.index.debt();
        if debt == 0 && self.absorb_queued()? {
            debt = self.index.debt();
        }
        if debt == 0 {
            self.pace_owed.store(0, Ordering::Relaxed);
            return Ok(0);
        }
        self.work_cv.notify_one();
        let room = self.room();
        let sched = self.on_schedule(debt, room);
        let credit = sched.credit(used).max(
            ((debt as u128 * used as u128).div_ceil(room as u128)).min(u64::MAX as u128) as u64,
        );
        // Credit accumulates until it is worth one step, so that structures whose steps have a
        // fixed cost (a B-tree path rewrite) are not driven one entry at a time.
        let owed = self.pace_owed.fetch_add(credit, Ordering::Relaxed) + credit;
        let mut behind = debt.saturating_sub(sched.allowed);
        if behind == 0 {
            // Background work is ahead of the schedule: nothing is owed.
            self.pace_owed.store(0, Ordering::Relaxed);
            return Ok(0);
        }
        let step = self.step_bytes();
        let threads = self.opts.background_threads > 0;
        // In the memtable's last sixteenth with debt left, writers wait on every write, each
        // wait at most `PACE_WAIT`: what is left of the debt is worked off by the threads before
        // the memtable fills rather than by one writer at the rotation (or, where the threads
        // are held longer than that, queued at the rotation with what is left: `make_room`).
        let far = threads && room <= self.schedule_margin();
        // (What is behind never exceeds what is owed: it is what is behind that must be worth
        // a step, or be the whole debt.)
        if !far && owed.min(behind) < step.min(debt) {
            return Ok(0);
        }
        // While the queue has room, the threads do every step and the writer only waits.
        if self.bg_gated.load(Ordering::Acquire) < self.opts.background_threads as u64
            && self.may_queue_now(far)
        {
            return self.throttle(far, step, behind, sched);
        }
        let t = Instant::now();
        let mut waited = false;
        let steps = self.bg_steps.load(Ordering::Acquire);
        if threads && steps != self.fruitless_at.load(Ordering::Relaxed) {
            // Back-pressure: background threads run the work at full speed, and a writer
            // behind the schedule first waits for their next step, at most `PACE_WAIT`, rather
            // than doing the work itself (a step is mostly I/O and may take milliseconds).
            let tw = Instant::now();
            self.wait_for_progress();
            let w = &self.counters.waits;
            w.pace_waits.fetch_add(1, Ordering::Relaxed);
            w.pace_wait_max_ns
                .fetch_max(elapsed_ns(tw), Ordering::Relaxed);
            waited = true;
            if self.bg_steps.load(Ordering::Acquire) == steps {
                // Not one step in a whole wait (the threads are held up, or in a long step):
                // the writers after this one do their share without waiting first.
                self.fruitless_at.store(steps, Ordering::Relaxed);
            }
            debt = self.index.debt();
            behind = debt.saturating_sub(self.on_schedule(debt, self.room()).allowed);
            if behind == 0 {
                self.pace_owed.store(0, Ordering::Relaxed);
            }
        }
        // What the threads did not do, the writer does: what it owes, up to how far behind.
        let mut done = 0;
        let owed = self.pace_owed.load(Ordering::Relaxed);
        if behind > 0 && owed.min(behind) >= step.min(debt) {
            let take = self.pace_owed.swap(0, Ordering::Relaxed).min(behind);
            if take > 0 {
                let tw = Instant::now();
                let w = &self.counters.waits;
                match self.writer_share(take)? {
                    Some(n) => {
                        done = n;
                        w.pace_works.fetch_add(1, Ordering::Relaxed);
                        w.pace_work_max_ns
                            .fetch_max(elapsed_ns(tw), Ordering::Relaxed);
                        w.pace_work_units_max.fetch_max(done, Ordering::Relaxed);
                    }
                    None => {
                        // A background thread is in the middle of the step: the writer waits
                        // for its progress, at most a pacing wait, not for its lock through
                        // the rest of the step. The share is dropped, as a done one is: kept
                        // owed, shares piled up behind a long step and one writer then did
                        // them all (up to 15 steps' worth, 116 ms, in fdtree-d's bench).
                        self.wait_for_progress();
                        w.pace_busy.fetch_add(1, Ordering::Relaxed);
                        w.pace_wait_max_ns
                            .fetch_max(elapsed_ns(tw), Ordering::Relaxed);
                        waited = true;
                    }
                }
            }
        }
        if waited || done > 0 {
            self.record_pacing(elapsed_ns(t));
        }
        Ok(done)
    }

    /// A writer behind the schedule while the background threads run (not all held at their
    /// gate) and a rotation could queue the memtable: it leaves the work to the threads and
    /// waits for them instead, until the debt is back within a step of the schedule, at most
    /// from `THROTTLE_WAIT` to `THROTTLE_WAIT_FAR` by how far behind it is (in the memtable's
    /// last sixteenth one `PACE_WAIT`). A step the device holds up (its reads behind a sync)
    /// then holds up no writer beyond that, where a writer that took the step itself waited for
    /// the device as long (issue 19: up to 503 ms); the debt the threads have not done by the
    /// memtable's end goes with it into the queue. Once a memtable is queued (or, in the last
    /// sixteenth, the cap of pending memtables is reached), writers behind do their shares
    /// again, as in `Inner::pace`.
    fn throttle(&self, far: bool, step: u64, behind: u64, sched: Schedule) -> Result<u64> {
        let t = Instant::now();
        let cap = if far {
            PACE_WAIT
        } else {
            // From THROTTLE_WAIT just behind to THROTTLE_WAIT_FAR a quarter of the start debt
            // behind: the further the threads have fallen behind, the slower the writers go.
            let lag = (4 * behind as u128).min(sched.debt as u128);
            let extra =
                (THROTTLE_WAIT_FAR - THROTTLE_WAIT).as_nanos() * lag / (sched.debt as u128).max(1);
            THROTTLE_WAIT + Duration::from_nanos(extra as u64)
        };
        loop {
            self.wait_for_progress();
            let debt = self.index.debt();
            if debt == 0 {
                break;
            }
            let behind = debt.saturating_sub(self.on_schedule(debt, self.room()).allowed);
            if behind < step.min(debt) || t.elapsed() >= cap {
                break;
            }
        }
        self.pace_owed.store(0, Ordering::Relaxed);
        let ns = elapsed_ns(t);
        let w = &self.counters.waits;
        w.pace_throttles.fetch_add(1, Ordering::Relaxed);
        w.pace_throttle_max_ns.fetch_max(ns, Ordering::Relaxed);
        self.record_pacing(ns);
        Ok(0)
    }

    /// Counts a write's pacing delay of `ns` (a wait, a step, or both).
    fn record_pacing(&self, ns: u64) {
        self.counters.pacing_delays.fetch_add(1, Ordering::Relaxed);
        self.counters.pacing_ns.fetch_add(ns, Ordering::Relaxed);
        self.counters.pacing_max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Waits, at most `PACE_WAIT`, for the background threads' next wake-up of the writers.
    fn wait_for_progress(&self) {
        self.pacing_writers.fetch_add(1, Ordering::Relaxed);
        let due = elapsed_ns(self.epoch).saturating_add(PACE_WAIT.as_nanos() as u64);
        self.pace_due.fetch_min(due, Ordering::Relaxed);
        {
            let mut g = self.progress_lock.lock();
            self.work_cv.notify_all();
            self.progress_cv.wait_for(&mut g, PACE_WAIT);
        }
        if self.pacing_writers.fetch_sub(1, Ordering::Relaxed) == 1 {
            // (A writer starting a wait just now may lose its due time here; background
            // threads then only yield to it once they wake it.)
            self.pace_due.store(u64::MAX, Ordering::Relaxed);
        }
    }

    /// The active memtable's room left (at least 1).
    fn room(&self) -> u64 {
        let active = self.mems.read().active.bytes();
        self.opts.memtable_bytes.saturating_sub(active).max(1)
    }

    /// The pacing schedule at `room` bytes of the active memtable left: a straight line from
    /// the debt when the schedule started to zero when the room left is a sixteenth of the
    /// memtable (slack for the last writes, which may not all fit), or where a queued
    /// memtable's schedule ends instead (`Inner::absorb_queued`, `Inner::make_room`). A debt
    /// above the schedule's start (new work, or the first write after open) starts a new
    /// schedule.
    fn on_schedule(&self, debt: u64, room: u64) -> Schedule {
        let margin = self.schedule_margin();
        let mut d0 = self.sched_debt.load(Ordering::Relaxed);
        let mut r0 = self.sched_room.load(Ordering::Relaxed);
        let mut end = self.sched_end.load(Ordering::Relaxed);
        if debt > d0 || room > r0 {
            if room <= r0 {
                let w = &self.counters.waits;
                w.schedule_rises.fetch_add(1, Ordering::Relaxed);
                w.schedule_rise_max.fetch_max(debt - d0, Ordering::Relaxed);
            } else {
                // A rotation this thread did not see: the usual end.
                end = margin as i64;
            }
            self.start_schedule(debt, room, end);
            (d0, r0) = (debt, room);
        }
        let left = (room as i128 - end as i128).max(0) as u128;
        // A schedule started inside the margin (debt that arrived late) spreads over the
        // margin instead, as the room-proportional credit does.
        let span = (r0 as i128 - end as i128).max(margin as i128).max(1) as u64;
        Schedule {
            allowed: (d0 as u128 * left.min(span as u128) / span as u128) as u64,
            debt: d0,
            span,
        }
    }

    /// Starts a pacing schedule from `debt` at `room` bytes of the active memtable left, to
    /// reach zero at `end` bytes left (negative: past the memtable's end).
    fn start_schedule(&self, debt: u64, room: u64, end: i64) {
        self.sched_debt.store(debt, Ordering::Relaxed);
        self.sched_room.store(room, Ordering::Relaxed);
        self.sched_end.store(end, Ordering::Relaxed);
        self.counters
            .schedule_debt_max
            .fetch_max(debt, Ordering::Relaxed);
    }

    /// The memtable room left where the pacing schedule reaches zero debt: a sixteenth of the
    /// memtable.
    fn schedule_margin(&self) -> u64 {
        self.opts.memtable_bytes / 16
    }

    /// The work one background step or paced step does: 1/256 of a memtable (at least 16 KiB),
    /// so that no writer ever waits for more than that.
    fn step_bytes(&self) -> u64 {
        (self.opts.memtable_bytes / 256).max(16 << 10)
    }

    fn do_work(&self, budget: u64) -> Result<u64> {
        // After a failure no index work starts (a step under way in another thread may end).
        self.check_failed()?;
        let r = self.index.work(budget);
        let done = self.note(r)?;
        self.absorb_queued()?;
        self.reap()?;
        Ok(done)
    }

    /// Index work in a writer's path (pacing, a rotation, a stall). No index kind's `work`
    /// syncs (each commits in a committer thread of its own) but `btree`, `pbt` and `lsm`; what
    /// is left is the removal of the log files the index now holds durably and the directory
    /// sync after it, which a writer leaves to the background threads when there are any: it
    /// only drops those memtables. So while background threads exist, no writer's put
    /// pays an fsync for the index's work on those kinds.
    fn writer_work(&self, budget: u64) -> Result<u64> {
        Ok(self.writer_work_as(budget, true)?.unwrap_or(0))
    }

    /// A writer's pacing share: [`Self::writer_work`], but `None` at once while a background
    /// thread is in the middle of the step ([`Index::work_unless_busy`]). Without background
    /// threads the only other holders are writers, and the share is done as it always was.
    fn writer_share(&self, budget: u64) -> Result<Option<u64>> {
        self.writer_work_as(budget, false)
    }

    /// [`Self::writer_work`]; without `wait`, [`Self::writer_share`].
    fn writer_work_as(&self, budget: u64, wait: bool) -> Result<Option<u64>> {
        if self.opts.background_threads == 0 {
            return self.do_work(budget).map(Some);
        }
        self.check_failed()?;
        let r = if wait {
            self.index.work(budget).map(Some)
        } else {
            self.index.work_unless_busy(budget)
        };
        let done = self.note(r)?;
        if done.is_some() {
            self.absorb_queued()?;
            self.release_memtables();
        }
        Ok(done)
    }

    /// Makes room for `needed` more bytes in the active memtable: returns as soon as it has
    /// them (another writer may have swapped it meanwhile), else works inline in bounded steps
    /// until the index can take the active memtable, and swaps it. Pacing leaves less than a
    /// step of debt at the memtable's end (plus the schedule's share of the room the last
    /// write did not find), so a writer does that much here, whatever the background threads
    /// do; more only where an index's `debt` was below the work it had left (counted as a
    /// stall, as every wait here is). Returns the units of work done here.
    /// `u64::MAX`: swap whatever the active memtable holds (a flush: no writer waits, so no
    /// stall is recorded).
    ///
    /// The swap also waits while [`MAX_PENDING_MEMTABLES`] frozen memtables are pending (their
    /// work done, their commit not yet: a committer thread's kind with a slow disk), for the
    /// index's commit ([`Index::wait_durable`]). A kind that holds pending memtables with
    /// neither debt nor a commit to wait for breaks the contract ([`Index::held_seq`]); the
    /// swap then goes ahead past the cap rather than wait for nothing.
    fn make_room(&self, needed: u64) -> Result<u64> {
        let t = Instant::now();
        let mut waited = false;
        // Whether this writer found debt left at any look, or only waited for commits.
        let mut found_debt = false;
        let mut done = 0u64;
        let writing = needed != u64::MAX;
        // The last wait for a commit found none to wait for.
        let mut idle = false;
        loop {
            let mut w = self.writer.lock();
            self.check_failed()?;
            let active = self.mems.read().active.bytes();
            if active == 0 || active.saturating_add(needed) <= self.opts.memtable_bytes {
                drop(w);
                if waited {
                    self.record_stall(t);
                }
                return Ok(done);
            }
            // The queue before the debt: it grows only under the writer lock, held here, and
            // shrinks only once its memtable is handed over, so a queue found empty means the
            // debt read next counts every hand-over (read the other way round, a hand-over
            // between the two reads would let this rotation absorb while there is debt).
            let queued = self.queued.load(Ordering::Acquire);
            let debt = self.index.debt();
            crate::pause::point("db.room.after_debt");
            if debt == 0 {
                self.release_memtables();
                if queued > 0 {
                    // A memtable frozen earlier goes to the index first; then look again.
                    self.absorb_queued()?;
                    continue;
                }
                if idle || self.pending(&self.mems.read()) < MAX_PENDING_MEMTABLES {
                    self.rotate_memtable(&mut w, false)?;
                    drop(w);
                    if waited {
                        self.record_rotation_wait(t, found_debt, done);
                    }
                    return Ok(done);
                }
            }
            if writing && debt > 0 && self.may_queue() {
                self.release_memtables();
                if self.pending(&self.mems.read()) < MAX_PENDING_MEMTABLES {
                    // Debt left, but room for one more frozen memtable: it waits, readable,
                    // for the index to finish (the background threads hand it over then), and
                    // the writer goes on into a new one rather than work off the rest itself.
                    self.rotate_memtable(&mut w, true)?;
                    drop(w);
                    let c = &self.counters.waits;
                    c.rotation_queues.fetch_add(1, Ordering::Relaxed);
                    c.rotation_queue_debt_max.fetch_max(debt, Ordering::Relaxed);
                    if waited {
                        self.record_rotation_wait(t, true, done);
                    }
                    return Ok(done);
                }
            }
            drop(w);
            if writing && !waited {
                self.counters
                    .waits
                    .rotation_debt_max
                    .fetch_max(debt, Ordering::Relaxed);
            }
            waited = writing;
            found_debt |= writing && debt > 0;
            if debt == 0 {
                idle = !self.note(self.index.wait_durable(COMMIT_WAIT))?;
                if self.opts.background_threads == 0 {
                    self.reap()?;
                }
                continue;
            }
            idle = false;
            let step = self.step_bytes();
            let r = if writing {
                self.writer_work(step)
            } else {
                self.do_work(step)
            };
            done = done.saturating_add(r?);
        }
    }

    /// Counts the wait of a writer whose rotation, begun at `t`, waited: a stall, and a rotation
    /// stall (with the `done` units of work it did) when it found debt, else a wait for a
    /// commit.
    fn record_rotation_wait(&self, t: Instant, found_debt: bool, done: u64) {
        self.record_stall(t);
        let c = &self.counters.waits;
        if found_debt {
            c.rotation_stalls.fetch_add(1, Ordering::Relaxed);
            c.rotation_stall_max_ns
                .fetch_max(elapsed_ns(t), Ordering::Relaxed);
            c.rotation_work_max.fetch_max(done, Ordering::Relaxed);
        } else {
            c.commit_waits.fetch_add(1, Ordering::Relaxed);
            c.commit_wait_max_ns
                .fetch_max(elapsed_ns(t), Ordering::Relaxed);
        }
    }

    /// Whether a writer that finds the memtable full with debt left may freeze it without
    /// handing it to the index ([`Inner::absorb_queued`]): kinds paced by debt, with background
    /// threads to hand it over. (Without threads the writer does the work either way; `lsm`
    /// keeps LevelDB's rule of one immutable memtable.)
    fn may_queue(&self) -> bool {
        self.paced && self.opts.background_threads > 0
    }

    /// Whether the rotation at the active memtable's end could queue it, as a writer's pacing
    /// sees it: none is queued yet, and, in the memtable's last sixteenth (`far`), the cap of
    /// pending memtables is not reached. Before that the cap is not looked at: memtables whose
    /// commit is under way are usually committed long before the active one fills. At the cap
    /// in the last sixteenth the writers do their shares as before, or the rotation, unable to
    /// queue, would work off all that the throttled writers left.
    fn may_queue_now(&self, far: bool) -> bool {
        self.may_queue()
            && self.queued.load(Ordering::Acquire) == 0
            && (!far || self.pending(&self.mems.read()) < MAX_PENDING_MEMTABLES)
    }

    /// Hands the oldest queued frozen memtable to the index if it has no debt left; returns
    /// whether it did. The pacing schedule restarts from the new debt over the active
    /// memtable's room.
    fn absorb_queued(&self) -> Result<bool> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return Ok(false);
        }
        let _g = self.absorb_lock.lock();
        if self.index.debt() != 0 {
            return Ok(false);
        }
        let next = {
            let m = self.mems.read();
            let queued = self.queued.load(Ordering::Acquire);
            (queued > 0).then(|| m.frozen[m.frozen.len() - queued].clone())
        };
        let Some(mem) = next else {
            return Ok(false);
        };
        crate::pause::point("db.absorb_queued.before_absorb");
        // Handed over before it leaves the queue: a rotation that finds the queue empty then
        // finds the index holding it.
        let r = self.index.absorb(mem);
        self.note(r)?;
        {
            let _m = self.mems.write();
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
        // Its job's schedule reaches zero half a memtable past the active one's end: the
        // rotation there queues the active memtable with what is left, and that rest is due
        // by the next memtable's middle (`rotate_memtable`), when this queue's next memtable
        // can follow. A job handed over late in a memtable then takes a line at most 15/8 as
        // steep as one taken at a memtable's start, not one over what is left of this one.
        self.start_schedule(
            self.index.debt(),
            self.room(),
            -((self.opts.memtable_bytes / 2) as i64),
        );
        self.work_cv.notify_all();
        Ok(true)
    }

    /// Freezes the active memtable, hands it to the index (or, with `queue`, leaves it queued
    /// for [`Inner::absorb_queued`]) and starts a new one (and a new log file, `wal_number`,
    /// when logging).
    fn rotate_memtable(&self, w: &mut WriterState, queue: bool) -> Result<()> {
        // Writers that took sequence numbers before this point insert into the active memtable
        // outside the writer lock: it is complete once they have all published.
        self.wait_visible(w.last_seq);
        let wal_number = w.next_wal;
        if let Some(wal) = &self.wal {
            self.note(wal.rotate(wal_number))?;
            w.next_wal = wal_number + 1;
            if self.opts.background_threads == 0 {
                wal.cut_tails();
            }
        }
        let old = {
            let mut m = self.mems.write();
            let new = Arc::new(Memtable::new(if self.wal.is_some() {
                wal_number
            } else {
                0
            }));
            let old = std::mem::replace(&mut m.active, new);
            m.frozen.push(old.clone());
            if queue {
                self.queued.fetch_add(1, Ordering::AcqRel);
            }
            let c = &self.counters;
            c.memtables_max
                .fetch_max(1 + m.frozen.len() as u64, Ordering::Relaxed);
            c.pending_memtables_max
                .fetch_max(self.pending(&m) as u64, Ordering::Relaxed);
            old
        };
        self.counters
            .memtable_switches
            .fetch_add(1, Ordering::Relaxed);
        if !queue {
            crate::pause::point("db.rotate.before_absorb");
            let _g = self.absorb_lock.lock();
            let r = self.index.absorb(old);
            self.note(r)?;
        }
        // A new pacing schedule: the absorbed memtable's work over the new memtable's room;
        // with the memtable queued, what is left of the debt over half of it, so that the
        // queued memtable is handed over in time for its own job to be done by the next
        // rotation (else that one finds the cap taken and stalls).
        let end = if queue {
            self.opts.memtable_bytes / 2
        } else {
            self.schedule_margin()
        };
        self.start_schedule(self.index.debt(), self.opts.memtable_bytes, end as i64);
        self.work_cv.notify_all();
        Ok(())
    }

    /// The frozen memtables of `m` the cap counts: those the index does not hold in its own
    /// memory by design ([`Index::held_seq`]).
    fn pending(&self, m: &MemState) -> usize {
        let held = self.index.held_seq();
        m.frozen.iter().filter(|f| f.max_seq() > held).count()
    }

    /// Drops frozen memtables the index has published, and the log files of those it holds
    /// durably.
    fn reap(&self) -> Result<()> {
        self.release_memtables();
        self.remove_logs()
    }

    /// Drops frozen memtables the index has published ([`Index::published_seq`]: readers find
    /// their writes in the index); their log files wait in `retired_logs` until the index holds
    /// them durably ([`Inner::remove_logs`]).
    fn release_memtables(&self) {
        let published = self.index.published_seq();
        crate::pause::point("db.release.after_published");
        let ready = |m: &MemState| {
            m.frozen
                .iter()
                .take_while(|f| f.max_seq() <= published)
                .count()
        };
        if ready(&self.mems.read()) == 0 {
            return;
        }
        let gone: Vec<Arc<Memtable>> = {
            let mut m = self.mems.write();
            let n = ready(&m);
            m.frozen.drain(..n).collect()
        };
        let mut logs = self.retired_logs.lock();
        logs.extend(
            gone.iter()
                .filter(|m| m.wal_number() != 0 && self.wal.is_some())
                .map(|m| (m.max_seq(), m.wal_number())),
        );
        if let Some(newest) = gone.last() {
            self.released_seq
                .fetch_max(newest.max_seq(), Ordering::AcqRel);
        }
    }

    /// Whether every memtable handed to the index is durable there: none frozen, and none
    /// dropped at its publication with its commit still to come.
    fn all_durable(&self) -> bool {
        self.mems.read().frozen.is_empty()
            && self.released_seq.load(Ordering::Acquire) <= self.index.durable_seq()
    }

    /// Removes the log files of memtables the index holds durably, then syncs the directory.
    fn remove_logs(&self) -> Result<()> {
        // Taken under the lock and removed after it: another caller does not find them.
        let numbers: Vec<u64> = {
            let durable = self.index.durable_seq();
            crate::pause::point("db.logs.after_durable");
            let mut logs = self.retired_logs.lock();
            let n = logs.iter().take_while(|(seq, _)| *seq <= durable).count();
            logs.drain(..n).map(|(_, number)| number).collect()
        };
        if numbers.is_empty() {
            return Ok(());
        }
        if let Some(wal) = &self.wal {
            let mut removed = false;
            for n in numbers {
                {
                    // Durable in the index: no later sync needs to cover its log file.
                    wal.retire(n);
                    let p = wal::wal_file_path(&self.dir, n);
                    if self.fs.exists(&p) {
                        let r = self.fs.remove(&p);
                        self.note(r)?;
                        removed = true;
                        crate::crashpoint::point("wal.retire.after_remove");
                    }
                }
            }
            if removed {
                // The removal made durable: a power cut could otherwise bring a retired file
                // back, its name kept and its never-synced contents torn, in front of files that
                // hold Sync-acknowledged records (replay reads past such a tear, and the
                // sequence numbers tell that its records are all in the index already).
                let r = self.fs.sync_dir(&self.dir);
                self.note(r)?;
                crate::crashpoint::point("wal.retire.after_dir_sync");
            }
        }
        Ok(())
    }

    /// Moves every memtable into the index and waits (working inline, in bounded steps) until
    /// the index holds them durably.
    fn flush_all(&self) -> Result<()> {
        self.make_room(u64::MAX)?;
        loop {
            self.check_failed()?;
            self.index.request_flush();
            if self.all_durable() && self.index.debt() == 0 {
                // Log files a writer left for the background threads.
                return self.remove_logs();
            }
            let done = self.do_work(self.step_bytes())?;
            if done == 0 && self.index.debt() == 0 {
                self.reap()?;
                // Judged under the writer lock, and only while the index has nothing left to
                // make durable: a writer's rotation pushes a frozen memtable and hands it to the
                // index under that lock, and the index may be committing one it has finished.
                // (Without both, a flush racing writers took a memtable not yet absorbed, or
                // not yet committed, for one the index had lost: `woods stress` on `nbtree`.)
                let _w = self.writer.lock();
                // What a concurrent writer's rotation handed over is wanted durable too.
                self.index.request_flush();
                // The queue first, as in `make_room`: a hand-over between the two reads
                // shows as the debt it brings.
                let queued = self.queued.load(Ordering::Acquire);
                if queued > 0 || self.index.background_work() {
                    continue;
                }
                self.reap()?;
                if !self.all_durable() && self.index.debt() == 0 {
                    let d = self.index.durable_seq();
                    return Err(Error::corruption(
                        "index",
                        None,
                        format!("index reports no debt but holds data durably only up to {d}"),
                    ));
                }
            }
        }
    }

    fn worker_loop(&self) {
        let mut woke = Instant::now();
        let mut idle_since: Option<Instant> = None;
        loop {
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            if let Some(wal) = &self.wal {
                // The next log file, ready before the rotation that needs it.
                // A failure turns the database read-only, and the loop below then waits.
                let _ = self.note(wal.prepare_next());
                // And the files rotated away cut back to their records.
                wal.cut_tails();
            }
            let failed = self.failure.is_tripped();
            if !failed {
                // A memtable queued at a rotation, once the index has no debt left.
                let _ = self.absorb_queued();
                // What the index made durable since (its committer thread may have done so
                // after this thread's last step), and the log files writers left to the threads.
                let _ = self.note(self.reap());
            }
            if failed || !self.index.background_work() {
                // Idle for a while: the free space kept for reuse in place goes back to the file
                // system (not at every pause between jobs, which would undo the reserve).
                let since = *idle_since.get_or_insert_with(Instant::now);
                if !failed && since.elapsed() >= PUNCH_WHEN_IDLE {
                    self.store.alloc().punch_reserve();
                }
                let mut g = self.work_lock.lock();
                if self.shutdown.load(Ordering::Acquire) {
                    return;
                }
                // Periodic wake as well as notification, so a missed notify costs at most this.
                self.work_cv.wait_for(&mut g, Duration::from_millis(50));
                continue;
            }
            idle_since = None;
            if let Some(g) = &self.opts.background_gate {
                self.bg_gated.fetch_add(1, Ordering::AcqRel);
                let pass = g.pass(&self.shutdown);
                self.bg_gated.fetch_sub(1, Ordering::AcqRel);
                if !pass {
                    return;
                }
            }
            // Errors turn the database read-only inside do_work.
            self.bg_stepping.fetch_add(1, Ordering::AcqRel);
            let _ = self.do_work(self.step_bytes());
            self.bg_stepping.fetch_sub(1, Ordering::AcqRel);
            self.bg_steps.fetch_add(1, Ordering::Release);
            let mut woken = 0;
            if self.index.debt() == 0 || woke.elapsed() >= WAKE_EVERY {
                woke = Instant::now();
                let _g = self.progress_lock.lock();
                woken = self.progress_cv.notify_all();
                if woken > 0 {
                    // Under the lock, which the woken writers take again before they leave
                    // their wait: the last of them resets the due time after this.
                    self.pace_due.store(0, Ordering::Relaxed);
                }
            }
            if woken > 0 || self.writer_due() {
                // A writer woken from its pacing wait (by this thread, another one or its
                // timer) may be queued for this processor: give it the processor now rather
                // than when the scheduler next preempts this thread. Without the yield it
                // waited there up to 5 ms on two processors (its run-queue delay in
                // /proc/thread-self/schedstat was nearly the whole wait), long after the step
                // that woke it had ended; docs/engine.md, *Write path*.
                std::thread::yield_now();
            }
        }
    }

    /// Whether a writer's pacing wait has ended (woken, or its time up) and it has not run since.
    fn writer_due(&self) -> bool {
        self.pacing_writers.load(Ordering::Relaxed) > 0
            && elapsed_ns(self.epoch) >= self.pace_due.load(Ordering::Relaxed)
    }

    fn stats(&self) -> Stats {
        let c = &self.counters;
        let m = self.mems.read();
        let alloc = self.store.alloc();
        Stats {
            index: self.index.stats(),
            io: self.io.snapshot(),
            cache: self.store.cache().stats(),
            direct_io: self.store.is_direct(),
            writes: c.writes.load(Ordering::Relaxed),
            user_bytes: c.user_bytes.load(Ordering::Relaxed),
            pacing_delays: c.pacing_delays.load(Ordering::Relaxed),
            pacing_total: Duration::from_nanos(c.pacing_ns.load(Ordering::Relaxed)),
            pacing_max: Duration::from_nanos(c.pacing_max_ns.load(Ordering::Relaxed)),
            stalls: c.stalls.load(Ordering::Relaxed),
            stall_total: Duration::from_nanos(c.stall_ns.load(Ordering::Relaxed)),
            stall_max: Duration::from_nanos(c.stall_max_ns.load(Ordering::Relaxed)),
            write_work_max: c.write_work_max.load(Ordering::Relaxed),
            schedule_debt_max: c.schedule_debt_max.load(Ordering::Relaxed),
            waits: c.waits.named(),
            memtable_switches: c.memtable_switches.load(Ordering::Relaxed),
            memtables: 1 + m.frozen.len(),
            memtable_bytes: m.active.bytes() + m.frozen.iter().map(|f| f.bytes()).sum::<u64>(),
            memtables_max: c.memtables_max.load(Ordering::Relaxed) as usize,
            pending_memtables_max: c.pending_memtables_max.load(Ordering::Relaxed) as usize,
            last_seq: self.visible.load(Ordering::Acquire),
            durable_seq: self.index.durable_seq(),
            file_bytes: self.store.file_len().unwrap_or(0),
            file_pages: alloc.end(),
            free_pages: alloc.free_pages(),
            punched_pages: alloc.punch_stats().0,
            unpunched_pages: alloc.unpunched_pages(),
        }
    }

    fn sources(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> Result<Vec<EntryIter>> {
        let (active, frozen) = {
            let m = self.mems.read();
            (m.active.clone(), m.frozen.clone())
        };
        crate::pause::point("db.iter.after_memtables");
        let mut srcs: Vec<EntryIter> = vec![Box::new(active.iter(lo.clone(), hi.clone(), reverse))];
        for f in frozen.iter().rev() {
            srcs.push(Box::new(f.iter(lo.clone(), hi.clone(), reverse)));
        }
        // The index's sources' first entries (device reads, usually) are read at once, not one
        // after another; the memtables' need no device.
        srcs.extend(crate::merge::prime(self.index.iter(lo, hi, reverse)?));
        Ok(srcs)
    }
}

/// A point-in-time view of the database.
pub struct Snapshot {
    inner: Arc<Inner>,
    seq: u64,
}

impl Snapshot {
    /// The sequence number this snapshot reads at.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// The value of `key` at this snapshot's point in time, if any (see [`Db::get`]).
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.inner.get_at(key.as_ref(), self.seq)
    }

    /// Like [`Db::range`], at this snapshot's point in time.
    pub fn range<K, R>(&self, range: R) -> Result<DbIter>
    where
        K: AsRef<[u8]> + ?Sized,
        R: RangeBounds<K>,
    {
        self.inner.snapshots.acquire(self.seq);
        DbIter::new(self.inner.clone(), self.seq, &range, false)
    }

    /// Like [`Db::range_rev`], at this snapshot's point in time.
    pub fn range_rev<K, R>(&self, range: R) -> Result<DbIter>
    where
        K: AsRef<[u8]> + ?Sized,
        R: RangeBounds<K>,
    {
        self.inner.snapshots.acquire(self.seq);
        DbIter::new(self.inner.clone(), self.seq, &range, true)
    }

    /// Every key at this snapshot's point in time, ascending.
    pub fn iter(&self) -> Result<DbIter> {
        self.range::<[u8], _>(..)
    }

    /// Every key at this snapshot's point in time, descending.
    pub fn iter_rev(&self) -> Result<DbIter> {
        self.range_rev::<[u8], _>(..)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.inner.snapshots.release(self.seq);
    }
}

/// An iterator over `(key, value)` pairs at one point in time. It holds a registration of its
/// sequence number in the live snapshots, released when it is dropped.
pub struct DbIter {
    inner: Arc<Inner>,
    seq: u64,
    resolver: Resolver,
    /// The pair [`DbIter::next_ref`] lent out last.
    current: Option<crate::merge::Pair>,
}

impl DbIter {
    /// Takes over the snapshot registration of `seq` made by the caller.
    fn new<K, R>(inner: Arc<Inner>, seq: u64, range: &R, reverse: bool) -> Result<DbIter>
    where
        K: AsRef<[u8]> + ?Sized,
        R: RangeBounds<K>,
    {
        let (lo, hi) = (bound(range.start_bound()), bound(range.end_bound()));
        let srcs = match inner.sources(lo, hi, reverse) {
            Ok(s) => s,
            Err(e) => {
                inner.snapshots.release(seq);
                return Err(e);
            }
        };
        let merged: EntryIter = Box::new(MergeIter::new(srcs, reverse));
        let resolver = Resolver::new(merged, seq, inner.opts.merge_operator.clone(), reverse);
        Ok(DbIter {
            inner,
            seq,
            resolver,
            current: None,
        })
    }

    /// The next pair, lent instead of copied: the key and value stay valid until the next call
    /// and are not copied into vectors as [`Iterator::next`] does (no allocation per pair).
    /// Both kinds of call can be mixed; each advances the iterator.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = woods::Db::open(dir.path(), woods::Options::with_index(woods::IndexKind::from_name("lsm").unwrap())).unwrap();
    /// db.put("a", "1")?;
    /// db.put("b", "2")?;
    /// let mut it = db.range("a"..)?;
    /// let mut total = 0;
    /// while let Some(pair) = it.next_ref() {
    ///     let (key, value) = pair?;
    ///     total += key.len() + value.len();
    /// }
    /// assert_eq!(total, 4);
    /// # Ok::<(), woods::Error>(())
    /// ```
    pub fn next_ref(&mut self) -> Option<Result<(&[u8], &[u8])>> {
        match self.resolver.next()? {
            Ok(pair) => {
                let (k, v) = self.current.insert(pair);
                Some(Ok((&k[..], &v[..])))
            }
            Err(e) => Some(Err(e)),
        }
    }
}

impl Iterator for DbIter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.resolver
            .next()
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
    }
}

impl Drop for DbIter {
    fn drop(&mut self) {
        self.inner.snapshots.release(self.seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `next_ref` lends the pairs `next` copies, in the same order, forward and reversed, with
    /// versions in the memtables and in the index, deletes and both kinds of call mixed.
    #[test]
    fn lent_pairs_are_the_copied_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = Options {
            memtable_bytes: 16 << 10,
            ..Options::with_index(crate::IndexKind::from_name("lsm").expect("lsm"))
        };
        let db = Db::open(dir.path(), opts).expect("open");
        for i in 0..3_000u32 {
            db.put(format!("k{:05}", i * 7 % 3_000), format!("v{i}"))
                .expect("put");
            if i % 11 == 0 {
                db.delete(format!("k{:05}", i * 3 % 3_000)).expect("delete");
            }
        }
        db.flush().expect("flush");
        for i in (0..3_000u32).step_by(5) {
            db.put(format!("k{:05}", i), format!("new{i}"))
                .expect("put");
        }
        for reverse in [false, true] {
            let open = || {
                if reverse {
                    db.range_rev("k00100".."k02900")
                } else {
                    db.range("k00100".."k02900")
                }
                .expect("range")
            };
            let copied: Vec<(Vec<u8>, Vec<u8>)> =
                open().collect::<Result<_>>().expect("copied pairs");
            assert!(copied.len() > 1_000, "{} pairs", copied.len());
            let mut lent = Vec::new();
            let mut it = open();
            while let Some(pair) = it.next_ref() {
                let (k, v) = pair.expect("lent pair");
                lent.push((k.to_vec(), v.to_vec()));
            }
            assert_eq!(lent, copied, "reverse {reverse}");
            // Mixed: every third pair copied, the others lent.
            let mut mixed = Vec::new();
            let mut it = open();
            for n in 0.. {
                let pair = if n % 3 == 0 {
                    it.next().map(|p| p.expect("copied pair"))
                } else {
                    it.next_ref()
                        .map(|p| p.map(|(k, v)| (k.to_vec(), v.to_vec())).expect("lent pair"))
                };
                match pair {
                    Some(p) => mixed.push(p),
                    None => break,
                }
            }
            assert_eq!(mixed, copied, "mixed, reverse {reverse}");
        }
    }

    /// A batch whose writer finishes first still becomes visible only after every earlier batch:
    /// `publish` of sequence numbers 2..=3 waits for the writer of 1.
    #[test]
    fn publish_waits_for_earlier_batches() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(
            dir.path(),
            Options::with_index(crate::IndexKind::from_name("lsm").expect("lsm")),
        )
        .expect("open");
        let inner = db.inner.clone();
        let base = inner.visible.load(Ordering::Acquire);
        let started = Arc::new(AtomicBool::new(false));
        let later = {
            let (inner, started) = (inner.clone(), started.clone());
            std::thread::spawn(move || {
                started.store(true, Ordering::Release);
                inner.publish(base + 2, base + 3);
            })
        };
        while !started.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        for _ in 0..200_000 {
            assert_eq!(inner.visible.load(Ordering::Acquire), base);
        }
        assert!(!later.is_finished(), "the later batch was published first");
        inner.publish(base + 1, base + 1);
        later.join().expect("later writer");
        assert_eq!(inner.visible.load(Ordering::Acquire), base + 3);
    }
}
