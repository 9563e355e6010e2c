//! The manifest: the database's metadata (persisted options, the index's roots and levels, the
//! durable sequence number and the set of allocated extents), committed atomically.
//!
//! It is an append-only checksummed edit log, `MANIFEST-{number:06}`, named by the `CURRENT`
//! file. A log is a 32-byte header and records framed like the WAL's
//! (`[crc32c][len][payload]`); the first record is a full snapshot of the state, each later one
//! a delta that one [`Manifest::commit`] appended and fsynced. A crash during a commit leaves at
//! most a torn last record, which recovery treats as absent, so recovery sees the previous or
//! the next state, never a mix. When the log grows past `max(4 MiB, 4 × its snapshot)` the next
//! commit rolls over instead: a new log holding one snapshot, synced, then `CURRENT` switched to
//! it by write-tmp, sync, rename, directory sync. The byte-by-byte format is in `docs/format.md`.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::entry::codec::{self, Reader};
use crate::error::{Error, Latch, Result};
use crate::storage::{
    check_rollbacks, Extent, File, Fs, IoCounters, OpenMode, Purpose, RollbackPoint, Stamps,
};
use crate::wal::{frame_record, next_record, NextRecord, RECORD_HEADER_LEN};

/// Magic bytes at the start of every manifest log.
pub const MANIFEST_MAGIC: [u8; 8] = *b"WOODSMAN";
/// Format major version this build writes and reads; any other major is refused.
pub const MANIFEST_FORMAT_MAJOR: u16 = 2;
/// Format minor version this build writes (readers accept any minor of their major). Minor 1
/// writes a snapshot record in the middle of a log every [`SNAPSHOT_EVERY`] records (minor-0
/// readers already take a snapshot record anywhere as the whole state).
pub const MANIFEST_FORMAT_MINOR: u16 = 1;
/// Size of a manifest log's header.
pub const MANIFEST_HEADER_LEN: usize = 32;
/// Name of the file that names the live manifest log.
pub const CURRENT_FILE: &str = "CURRENT";
/// Name `CURRENT` is written under before it is renamed into place.
pub const CURRENT_TMP_FILE: &str = "CURRENT.tmp";
/// Longest record payload; a longer length field on disk marks a torn record.
pub const MAX_MANIFEST_RECORD: u32 = 1 << 30;
/// A log is rolled over once it would exceed the larger of this and 4 × its snapshot record.
pub const ROLLOVER_MIN_BYTES: u64 = 4 << 20;
/// A commit is written as a whole snapshot, not a delta, once this many records (deltas and
/// opens) follow the log's last snapshot: a damaged record then costs repair nothing when a
/// snapshot follows it, since the snapshot holds the whole state after it (format minor 1).
pub const SNAPSHOT_EVERY: u64 = 8;

const TAG_SNAPSHOT: u8 = 1;
/// A writable open: a new incarnation (and the rollback point it found, if any).
const TAG_OPEN: u8 = 3;
/// The smallest framed open record: header, tag, incarnation, an empty list. A torn tail of `n`
/// bytes can hide at most `n / MIN_OPEN_FRAME` incarnations.
const MIN_OPEN_FRAME: u64 = RECORD_HEADER_LEN as u64 + 1 + 8 + 1;

/// What a user can do about a damaged `CURRENT` or manifest log.
const REPAIR_HINT: &str =
    "`Db::repair` (`woods repair DIR`) rebuilds CURRENT from the manifest logs that are there";
const TAG_DELTA: u8 = 2;

/// The file name of manifest log `number`.
pub fn manifest_file_name(number: u64) -> String {
    format!("MANIFEST-{number:06}")
}

pub(crate) fn parse_manifest_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("MANIFEST-")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The manifest's state: what the last durable commit says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManifestState {
    /// The persisted options, opaque to the manifest.
    pub config: Vec<u8>,
    /// The index's roots and levels, opaque to the manifest; replaced whole by each commit.
    pub index_meta: Vec<u8>,
    /// Every write up to this sequence number is durable in the index.
    pub durable_seq: u64,
    /// The allocated extents: sorted by start, non-overlapping, adjacent ones coalesced.
    pub allocated: Vec<Extent>,
    /// Page size of the data file, fixed at creation.
    pub page_size: u32,
    /// Pages per allocation extent, fixed at creation.
    pub extent_pages: u32,
    /// How many commits have been applied since the database was created.
    pub commits: u64,
    /// The writable open the state was last opened by (0: never opened since creation);
    /// pages are stamped with it (`storage::Stamp`).
    pub incarnation: u64,
    /// Where the database was rolled back, oldest first: pages stamped by the history each cut
    /// off are stale.
    pub rollbacks: Vec<RollbackPoint>,
}

/// One manifest log as [`Manifest::salvage`] read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Salvaged {
    /// The log's number (`MANIFEST-{number:06}`).
    pub number: u64,
    /// Its state up to the first bad record.
    pub state: ManifestState,
    /// Byte offset of a damaged record that valid records follow (`None`: the log is whole, or
    /// ends in a torn record, as a crash leaves it).
    pub damaged_at: Option<u64>,
    /// Valid records found after the damaged one: commits missing from `state`.
    pub lost_records: u64,
    /// Damaged records `state` was recovered past, each with the valid records between it and
    /// the snapshot after it (byte offset, records): a later snapshot holds the whole state, so
    /// nothing of theirs is missing from `state`.
    pub passed_damage: Vec<(u64, u64)>,
    /// Above every incarnation the log's records name or could have named: its records, and
    /// one per [`MIN_OPEN_FRAME`] bytes of it that no valid record accounts for.
    pub incarnation_bound: u64,
}

/// One atomic change of the manifest state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Commit {
    /// The new index metadata (replaces the old whole).
    pub index_meta: Vec<u8>,
    /// The new durable sequence number.
    pub durable_seq: u64,
    /// Extents this commit allocates; none may overlap an allocated page. Applied before `freed`.
    pub added: Vec<Extent>,
    /// Extents this commit frees; every page of each must be allocated.
    pub freed: Vec<Extent>,
}

struct Inner {
    config: Vec<u8>,
    index_meta: Vec<u8>,
    durable_seq: u64,
    /// start page -> page count, coalesced.
    allocated: BTreeMap<u64, u64>,
    commits: u64,
    incarnation: u64,
    rollbacks: Vec<RollbackPoint>,
    /// The page file's clock, advanced by every commit ([`Manifest::attach_stamps`]).
    stamps: Option<Arc<Stamps>>,
    /// The live log.
    number: u64,
    file: Arc<dyn File>,
    /// End of the valid records in the live log: where the next record goes.
    log_len: u64,
    /// Bytes after `log_len` (a torn record) that must be cut before appending.
    torn_tail: bool,
    /// How many such bytes open found (until the first append cuts them).
    torn_bytes: u64,
    /// Framed size of the live log's snapshot record.
    snapshot_len: u64,
    /// Records (deltas and opens) after the live log's last snapshot.
    since_snapshot: u64,
    poisoned: Option<String>,
    /// The database's failure: once tripped, no commit is made (one could record work built
    /// on a write that failed).
    refuse_after: Option<Arc<Latch>>,
}

/// The atomic metadata store of one database. `Send + Sync`; commits are serialised.
pub struct Manifest {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    counters: Arc<IoCounters>,
    page_size: u32,
    extent_pages: u32,
    min_rollover: AtomicU64,
    inner: Mutex<Inner>,
}

fn not_found_or_exists(what: String, kind: io::ErrorKind, detail: &str) -> Error {
    Error::io(what, io::Error::new(kind, detail.to_string()))
}

fn put_extents(out: &mut Vec<u8>, extents: impl ExactSizeIterator<Item = Extent>) {
    codec::put_varint(out, extents.len() as u64);
    for e in extents {
        codec::put_varint(out, e.start);
        codec::put_varint(out, e.pages);
    }
}

fn get_extents(r: &mut Reader<'_>) -> Result<Vec<Extent>> {
    let n = r.varint()?;
    // Each extent takes at least two bytes; a larger count is garbage, not a reason to allocate.
    if n > r.remaining() as u64 / 2 {
        return Err(Error::corruption(
            "manifest record",
            None,
            format!("extent count {n} exceeds the record"),
        ));
    }
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let start = r.varint()?;
        let pages = r.varint()?;
        out.push(Extent { start, pages });
    }
    Ok(out)
}

fn put_rollbacks(out: &mut Vec<u8>, points: &[RollbackPoint]) {
    codec::put_varint(out, points.len() as u64);
    for p in points {
        codec::put_u64(out, p.incarnation);
        codec::put_u64(out, p.commit);
        codec::put_u64(out, p.next);
    }
}

fn get_rollbacks(r: &mut Reader<'_>) -> Result<Vec<RollbackPoint>> {
    let n = r.varint()?;
    if n > r.remaining() as u64 / 24 {
        return Err(Error::corruption(
            "manifest record",
            None,
            format!("rollback point count {n} exceeds the record"),
        ));
    }
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        out.push(RollbackPoint {
            incarnation: r.u64()?,
            commit: r.u64()?,
            next: r.u64()?,
        });
    }
    Ok(out)
}

/// The stamp-related part of a snapshot (incarnation and rollback points).
struct Clock<'a> {
    incarnation: u64,
    rollbacks: &'a [RollbackPoint],
}

fn encode_snapshot(
    config: &[u8],
    index_meta: &[u8],
    durable_seq: u64,
    commits: u64,
    allocated: &BTreeMap<u64, u64>,
    clock: Clock<'_>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + config.len() + index_meta.len() + allocated.len() * 8);
    out.push(TAG_SNAPSHOT);
    codec::put_bytes(&mut out, config);
    codec::put_bytes(&mut out, index_meta);
    codec::put_u64(&mut out, durable_seq);
    codec::put_u64(&mut out, commits);
    put_extents(
        &mut out,
        allocated
            .iter()
            .map(|(&start, &pages)| Extent { start, pages }),
    );
    codec::put_u64(&mut out, clock.incarnation);
    put_rollbacks(&mut out, clock.rollbacks);
    out
}

fn encode_open(incarnation: u64, found: &[RollbackPoint]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + found.len() * 24);
    out.push(TAG_OPEN);
    codec::put_u64(&mut out, incarnation);
    put_rollbacks(&mut out, found);
    out
}

fn encode_delta(c: &Commit) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + c.index_meta.len() + (c.added.len() + c.freed.len()) * 8);
    out.push(TAG_DELTA);
    codec::put_bytes(&mut out, &c.index_meta);
    codec::put_u64(&mut out, c.durable_seq);
    put_extents(&mut out, c.added.iter().copied());
    put_extents(&mut out, c.freed.iter().copied());
    out
}

/// A decoded record payload.
pub(crate) enum Record {
    Snapshot {
        config: Vec<u8>,
        index_meta: Vec<u8>,
        durable_seq: u64,
        commits: u64,
        allocated: Vec<Extent>,
        incarnation: u64,
        rollbacks: Vec<RollbackPoint>,
    },
    Delta(Commit),
    /// A writable open: the incarnation it starts, and the rollback point it found.
    Open {
        incarnation: u64,
        found: Vec<RollbackPoint>,
    },
}

pub(crate) fn decode_record(payload: &[u8]) -> Result<Record> {
    let mut r = Reader::new(payload, "manifest record");
    let rec = match r.u8()? {
        TAG_SNAPSHOT => {
            let config = r.bytes()?.to_vec();
            let index_meta = r.bytes()?.to_vec();
            let durable_seq = r.u64()?;
            let commits = r.u64()?;
            let allocated = get_extents(&mut r)?;
            let incarnation = r.u64()?;
            let rollbacks = get_rollbacks(&mut r)?;
            Record::Snapshot {
                config,
                index_meta,
                durable_seq,
                commits,
                allocated,
                incarnation,
                rollbacks,
            }
        }
        TAG_OPEN => Record::Open {
            incarnation: r.u64()?,
            found: get_rollbacks(&mut r)?,
        },
        TAG_DELTA => {
            let index_meta = r.bytes()?.to_vec();
            let durable_seq = r.u64()?;
            let added = get_extents(&mut r)?;
            let freed = get_extents(&mut r)?;
            Record::Delta(Commit {
                index_meta,
                durable_seq,
                added,
                freed,
            })
        }
        tag => {
            return Err(Error::corruption(
                "manifest record",
                None,
                format!("unknown record tag {tag}"),
            ))
        }
    };
    if !r.is_empty() {
        return Err(Error::corruption(
            "manifest record",
            None,
            format!("{} trailing bytes", r.remaining()),
        ));
    }
    Ok(rec)
}

fn extent_end(e: &Extent, what: &dyn Fn() -> String) -> Result<u64> {
    e.start.checked_add(e.pages).ok_or_else(|| {
        Error::corruption(
            what(),
            None,
            format!("extent at page {} of {} pages overflows", e.start, e.pages),
        )
    })
}

/// Adds `e` to the coalesced set; an overlap with an allocated page is corruption.
fn add_extent(set: &mut BTreeMap<u64, u64>, e: &Extent, what: &dyn Fn() -> String) -> Result<()> {
    let end = extent_end(e, what)?;
    if e.pages == 0 {
        return Ok(());
    }
    if let Some((&s, &p)) = set.range(..end).next_back() {
        if s + p > e.start {
            return Err(Error::corruption(
                what(),
                Some(e.start),
                format!(
                    "adding extent of {} pages overlaps allocated extent at page {s} of {p} pages",
                    e.pages
                ),
            ));
        }
    }
    let mut start = e.start;
    let mut pages = e.pages;
    if let Some((&s, &p)) = set.range(..e.start).next_back() {
        if s + p == e.start {
            set.remove(&s);
            start = s;
            pages += p;
        }
    }
    if let Some(p) = set.remove(&end) {
        pages += p;
    }
    set.insert(start, pages);
    Ok(())
}

/// Removes `e` from the set; freeing any page that is not allocated is corruption.
fn free_extent(set: &mut BTreeMap<u64, u64>, e: &Extent, what: &dyn Fn() -> String) -> Result<()> {
    let end = extent_end(e, what)?;
    if e.pages == 0 {
        return Ok(());
    }
    let Some((&s, &p)) = set
        .range(..=e.start)
        .next_back()
        .filter(|(&s, &p)| s + p >= end)
    else {
        return Err(Error::corruption(
            what(),
            Some(e.start),
            format!(
                "freeing extent of {} pages that is not (wholly) allocated",
                e.pages
            ),
        ));
    };
    set.remove(&s);
    if e.start > s {
        set.insert(s, e.start - s);
    }
    if s + p > end {
        set.insert(end, s + p - end);
    }
    Ok(())
}

fn apply_extents(
    set: &mut BTreeMap<u64, u64>,
    c: &Commit,
    what: &dyn Fn() -> String,
) -> Result<()> {
    for e in &c.added {
        add_extent(set, e, what)?;
    }
    for e in &c.freed {
        free_extent(set, e, what)?;
    }
    Ok(())
}

fn manifest_header(page_size: u32, extent_pages: u32) -> [u8; MANIFEST_HEADER_LEN] {
    let mut h = [0u8; MANIFEST_HEADER_LEN];
    h[..8].copy_from_slice(&MANIFEST_MAGIC);
    h[8..10].copy_from_slice(&MANIFEST_FORMAT_MAJOR.to_le_bytes());
    h[10..12].copy_from_slice(&MANIFEST_FORMAT_MINOR.to_le_bytes());
    h[12..16].copy_from_slice(&page_size.to_le_bytes());
    h[16..20].copy_from_slice(&extent_pages.to_le_bytes());
    h
}

fn check_record_len(len: usize) -> Result<()> {
    if len > MAX_MANIFEST_RECORD as usize {
        return Err(Error::io(
            "writing the manifest",
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("record of {len} bytes exceeds the limit of {MAX_MANIFEST_RECORD} bytes"),
            ),
        ));
    }
    Ok(())
}

/// Opens `path` for writing from scratch (truncating a leftover of a crashed attempt).
fn open_truncated(fs: &dyn Fs, path: &Path) -> Result<Arc<dyn File>> {
    let file = fs.open(
        path,
        OpenMode {
            create: true,
            direct: false,
        },
    )?;
    if file.len()? != 0 {
        file.set_len(0)?;
    }
    Ok(file)
}

/// Writes log `number` holding the header and one snapshot record, and makes it and its name
/// durable. Returns the file and its length.
fn write_log(
    fs: &dyn Fs,
    dir: &Path,
    number: u64,
    page_size: u32,
    extent_pages: u32,
    snapshot: &[u8],
    counters: &IoCounters,
) -> Result<(Arc<dyn File>, u64)> {
    check_record_len(snapshot.len())?;
    let file = open_truncated(fs, &dir.join(manifest_file_name(number)))?;
    let mut buf = manifest_header(page_size, extent_pages).to_vec();
    buf.extend_from_slice(&frame_record(snapshot));
    file.write_all_at(&buf, 0)?;
    counters.record_write(Purpose::Manifest, buf.len());
    file.sync()?;
    counters.record_sync();
    fs.sync_dir(dir)?;
    counters.record_sync();
    Ok((file, buf.len() as u64))
}

/// Points `CURRENT` at log `number`: write `CURRENT.tmp`, sync it, rename it over `CURRENT`,
/// sync the directory. The rename is the commit point.
fn install_current(fs: &dyn Fs, dir: &Path, number: u64, counters: &IoCounters) -> Result<()> {
    let tmp = dir.join(CURRENT_TMP_FILE);
    let file = open_truncated(fs, &tmp)?;
    let text = format!("{}\n", manifest_file_name(number));
    file.write_all_at(text.as_bytes(), 0)?;
    counters.record_write(Purpose::Manifest, text.len());
    file.sync()?;
    counters.record_sync();
    crate::crashpoint::point("manifest.current.after_tmp");
    fs.rename(&tmp, &dir.join(CURRENT_FILE))?;
    crate::crashpoint::point("manifest.current.after_rename");
    fs.sync_dir(dir)?;
    counters.record_sync();
    Ok(())
}

/// The numbers of the manifest logs in `dir`, ascending.
pub(crate) fn manifest_files(fs: &dyn Fs, dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = fs
        .list(dir)
        .unwrap_or_default()
        .iter()
        .filter_map(|n| parse_manifest_file_name(n))
        .collect();
    v.sort_unstable();
    v
}

fn read_whole(fs: &dyn Fs, path: &Path, counters: &IoCounters) -> Result<Vec<u8>> {
    let file = fs.open(
        path,
        OpenMode {
            create: false,
            direct: false,
        },
    )?;
    let buf = crate::storage::read_whole(&*file, &path.display().to_string())?;
    counters.record_read(Purpose::Manifest, buf.len());
    Ok(buf)
}

/// What reading a log found.
pub(crate) struct Loaded {
    state: ManifestState,
    allocated: BTreeMap<u64, u64>,
    log_len: u64,
    torn_tail: bool,
    /// Bytes after the valid records (a torn tail, or a damaged record and what follows it).
    torn_bytes: u64,
    /// Above every incarnation the log names or could have named in its unreadable bytes.
    incarnation_bound: u64,
    snapshot_len: u64,
    /// Salvaging only: where the damaged record that valid records follow starts, and how many
    /// valid records were found after it (their commits are not in `state`).
    damage: Option<(u64, u64)>,
    /// Salvaging only: damaged records passed through a later snapshot (offset, valid records
    /// between the damage and that snapshot).
    passed: Vec<(u64, u64)>,
    /// Records after the last snapshot.
    since_snapshot: u64,
}

/// What [`load_log`] does with a bad record that valid records follow.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDamage {
    /// It is corruption (opening a database).
    Refuse,
    /// Keep the state before it ([`Manifest::salvage`], for `woods repair`).
    Salvage,
}

/// The valid records that start after byte `from` of `buf`: a crash while appending leaves a
/// torn record with nothing valid after it, so a bad record that valid ones follow is damage.
/// Every byte offset is tried, since the bad record's own length field may be what is damaged;
/// the cost (a checksum per offset whose length field fits) is paid only after a bad record.
fn valid_records_after(buf: &[u8], from: usize) -> u64 {
    let mut count = 0;
    let mut off = from;
    while off + RECORD_HEADER_LEN <= buf.len() {
        match next_record(buf, off, MAX_MANIFEST_RECORD) {
            NextRecord::Record(_, next) => {
                count += 1;
                off = next;
            }
            _ => off += 1,
        }
    }
    count
}

/// The first valid snapshot record at or after byte `from` of `buf` (every offset tried), and
/// how many valid records come before it: where salvage can resume past a damaged record.
fn snapshot_after(buf: &[u8], from: usize) -> Option<(usize, u64)> {
    let mut before = 0;
    let mut off = from;
    while off + RECORD_HEADER_LEN <= buf.len() {
        match next_record(buf, off, MAX_MANIFEST_RECORD) {
            NextRecord::Record(payload, next) => {
                if payload.first() == Some(&TAG_SNAPSHOT) && decode_record(payload).is_ok() {
                    return Some((off, before));
                }
                before += 1;
                off = next;
            }
            _ => off += 1,
        }
    }
    None
}

pub(crate) fn load_log(name: &str, buf: &[u8], on_damage: OnDamage) -> Result<Loaded> {
    if buf.len() < MANIFEST_HEADER_LEN || buf[..8] != MANIFEST_MAGIC {
        return Err(Error::corruption(
            name,
            None,
            "missing or garbled header (not a woods manifest)",
        ));
    }
    let major = u16::from_le_bytes([buf[8], buf[9]]);
    if major != MANIFEST_FORMAT_MAJOR {
        return Err(Error::UnsupportedFormat {
            found_major: major,
            supported_major: MANIFEST_FORMAT_MAJOR,
        });
    }
    let page_size = u32::from_le_bytes([buf[12], buf[13], buf[14], buf[15]]);
    let extent_pages = u32::from_le_bytes([buf[16], buf[17], buf[18], buf[19]]);
    let mut state = ManifestState {
        page_size,
        extent_pages,
        ..ManifestState::default()
    };
    let mut allocated = BTreeMap::new();
    let mut off = MANIFEST_HEADER_LEN;
    let mut snapshot_len = 0;
    let mut index = 0u64;
    let mut damage = None;
    let mut passed = Vec::new();
    let mut since_snapshot = 0;
    let torn_tail = loop {
        let (payload, next) = match next_record(buf, off, MAX_MANIFEST_RECORD) {
            NextRecord::Record(payload, next) => (payload, next),
            NextRecord::End => break false,
            NextRecord::Torn(reason) => {
                // Salvaging: a later snapshot holds the whole state after the damage.
                if on_damage == OnDamage::Salvage {
                    if let Some((at, before)) = snapshot_after(buf, off + 1) {
                        passed.push((off as u64, before));
                        off = at;
                        continue;
                    }
                }
                // The snapshot is synced before CURRENT names the log, so it is never torn by
                // a crash.
                if index == 0 {
                    return Err(Error::corruption(
                        name,
                        None,
                        format!("snapshot record unreadable: {reason}"),
                    ));
                }
                let after = valid_records_after(buf, off + 1);
                if after == 0 {
                    // What a crash during the last commit leaves: treated as absent.
                    break true;
                }
                if on_damage == OnDamage::Refuse {
                    return Err(Error::corruption(
                        name,
                        None,
                        format!(
                            "record {index} at byte {off} is damaged ({reason}) but {after} valid \
                             record(s) follow it: not a torn tail; {REPAIR_HINT} (keeping the \
                             newest state a later snapshot record holds, else the state before \
                             the damage)"
                        ),
                    ));
                }
                damage = Some((off as u64, after));
                break true;
            }
        };
        let what = || format!("{name} record {index} (byte {off})");
        let rec = decode_record(payload).map_err(|e| match e {
            Error::Corruption { detail, .. } => Error::corruption(what(), None, detail),
            other => other,
        })?;
        match rec {
            Record::Snapshot {
                config,
                index_meta,
                durable_seq,
                commits,
                allocated: extents,
                incarnation,
                rollbacks,
            } => {
                allocated.clear();
                for e in &extents {
                    add_extent(&mut allocated, e, &what)?;
                }
                check_rollbacks(&rollbacks, incarnation)
                    .map_err(|detail| Error::corruption(what(), None, detail))?;
                state.config = config;
                state.index_meta = index_meta;
                state.durable_seq = durable_seq;
                state.commits = commits;
                state.incarnation = incarnation;
                state.rollbacks = rollbacks;
                snapshot_len = (next - off) as u64;
                since_snapshot = 0;
            }
            Record::Open { incarnation, found } if index > 0 => {
                if incarnation <= state.incarnation {
                    return Err(Error::corruption(
                        what(),
                        None,
                        format!(
                            "open record starts incarnation {incarnation}, not after {}",
                            state.incarnation
                        ),
                    ));
                }
                let mut rollbacks = state.rollbacks.clone();
                rollbacks.extend(found);
                check_rollbacks(&rollbacks, incarnation)
                    .map_err(|detail| Error::corruption(what(), None, detail))?;
                state.incarnation = incarnation;
                state.rollbacks = rollbacks;
                since_snapshot += 1;
            }
            Record::Delta(c) if index > 0 => {
                apply_extents(&mut allocated, &c, &what)?;
                state.index_meta = c.index_meta;
                state.durable_seq = c.durable_seq;
                state.commits += 1;
                since_snapshot += 1;
            }
            Record::Delta(_) | Record::Open { .. } => {
                return Err(Error::corruption(
                    what(),
                    None,
                    "log does not start with a snapshot",
                ))
            }
        }
        index += 1;
        off = next;
    };
    state.allocated = allocated
        .iter()
        .map(|(&start, &pages)| Extent { start, pages })
        .collect();
    let torn_bytes = if torn_tail {
        (buf.len() - off) as u64
    } else {
        0
    };
    // Incarnations only grow through a log, so the state's is the largest its valid records name.
    let incarnation_bound = state.incarnation + 1 + torn_bytes / MIN_OPEN_FRAME;
    Ok(Loaded {
        state,
        torn_bytes,
        incarnation_bound,
        allocated,
        log_len: off as u64,
        torn_tail,
        snapshot_len,
        damage,
        passed,
        since_snapshot,
    })
}

impl Manifest {
    /// Creates the manifest of a new database in `dir`: writes `MANIFEST-000001` holding a
    /// snapshot (the given config, empty index metadata, nothing allocated), syncs it, then
    /// installs `CURRENT` (tmp, sync, rename, directory sync). Until `CURRENT` exists the
    /// database does not exist, so a crash part-way leaves nothing [`open`](Manifest::open) would
    /// accept and a later `create` starts over.
    ///
    /// Fails if `dir` already holds a `CURRENT` file, or a manifest log other than a leftover
    /// `MANIFEST-000001`.
    pub fn create(
        fs: Arc<dyn Fs>,
        dir: &Path,
        page_size: u32,
        extent_pages: u32,
        config: Vec<u8>,
        counters: Arc<IoCounters>,
    ) -> Result<Manifest> {
        fs.create_dir_all(dir)?;
        if fs.exists(&dir.join(CURRENT_FILE))
            || manifest_files(fs.as_ref(), dir).iter().any(|&n| n != 1)
        {
            return Err(not_found_or_exists(
                format!("creating the manifest in {}", dir.display()),
                io::ErrorKind::AlreadyExists,
                "a database already exists there",
            ));
        }
        let allocated = BTreeMap::new();
        let clock = Clock {
            incarnation: 0,
            rollbacks: &[],
        };
        let snapshot = encode_snapshot(&config, &[], 0, 0, &allocated, clock);
        let (file, log_len) = write_log(
            fs.as_ref(),
            dir,
            1,
            page_size,
            extent_pages,
            &snapshot,
            &counters,
        )?;
        install_current(fs.as_ref(), dir, 1, &counters)?;
        Ok(Manifest {
            fs,
            dir: dir.to_path_buf(),
            counters,
            page_size,
            extent_pages,
            min_rollover: AtomicU64::new(ROLLOVER_MIN_BYTES),
            inner: Mutex::new(Inner {
                config,
                index_meta: Vec::new(),
                durable_seq: 0,
                allocated,
                commits: 0,
                incarnation: 0,
                rollbacks: Vec::new(),
                stamps: None,
                number: 1,
                file,
                log_len,
                torn_tail: false,
                torn_bytes: 0,
                snapshot_len: log_len - MANIFEST_HEADER_LEN as u64,
                since_snapshot: 0,
                poisoned: None,
                refuse_after: None,
            }),
        })
    }

    /// Whether `dir` holds a database (a `CURRENT` file).
    pub fn exists(fs: &dyn Fs, dir: &Path) -> bool {
        fs.exists(&dir.join(CURRENT_FILE))
    }

    /// Opens the manifest of the database in `dir` and recovers its state: the snapshot and every
    /// delta up to the first torn or corrupt record (what a crash during a commit leaves), which
    /// is treated as absent and cut off by the next commit. The recovered state is made durable
    /// (log and directory fsynced) before it is returned, since after a process crash it may
    /// include writes that were never synced.
    ///
    /// A missing or garbled `CURRENT`, a log it names that is missing or has a bad header or
    /// snapshot, and a checksummed delta that frees unallocated pages or allocates allocated
    /// ones are corruption errors; an unknown major version is [`Error::UnsupportedFormat`].
    pub fn open(
        fs: Arc<dyn Fs>,
        dir: &Path,
        counters: Arc<IoCounters>,
    ) -> Result<(Manifest, ManifestState)> {
        let current_path = dir.join(CURRENT_FILE);
        if !fs.exists(&current_path) {
            let logs = manifest_files(fs.as_ref(), dir);
            let detail = if logs.is_empty() {
                format!("no CURRENT file in {}: not a woods database", dir.display())
            } else {
                format!(
                    "CURRENT is missing but {} manifest log(s) exist in {}: the database is damaged \
                     or its creation was cut short; {REPAIR_HINT}",
                    logs.len(),
                    dir.display()
                )
            };
            return Err(Error::corruption("manifest", None, detail));
        }
        let text = read_whole(fs.as_ref(), &current_path, &counters)?;
        let number = std::str::from_utf8(&text)
            .ok()
            .map(|t| t.strip_suffix('\n').unwrap_or(t))
            .and_then(parse_manifest_file_name)
            .ok_or_else(|| {
                Error::corruption(
                    "CURRENT",
                    None,
                    format!(
                        "does not name a manifest log: {:?}; {REPAIR_HINT}",
                        String::from_utf8_lossy(&text)
                    ),
                )
            })?;
        let name = manifest_file_name(number);
        let path = dir.join(&name);
        if !fs.exists(&path) {
            return Err(Error::corruption(
                "manifest",
                None,
                format!("CURRENT names {name}, which is missing; {REPAIR_HINT}"),
            ));
        }
        let buf = read_whole(fs.as_ref(), &path, &counters)?;
        let loaded = load_log(&name, &buf, OnDamage::Refuse)?;
        let file = fs.open(
            &path,
            OpenMode {
                create: false,
                direct: false,
            },
        )?;
        // After a process crash the log may hold records that were written but never synced, and
        // CURRENT's last rename may not be durable: make what was read durable before anyone acts
        // on it, or a power cut could take it back after a later commit was acknowledged.
        file.sync()?;
        counters.record_sync();
        fs.sync_dir(dir)?;
        counters.record_sync();
        let state = loaded.state.clone();
        let manifest = Manifest {
            fs,
            dir: dir.to_path_buf(),
            counters,
            page_size: state.page_size,
            extent_pages: state.extent_pages,
            min_rollover: AtomicU64::new(ROLLOVER_MIN_BYTES),
            inner: Mutex::new(Inner {
                config: loaded.state.config,
                index_meta: loaded.state.index_meta,
                durable_seq: loaded.state.durable_seq,
                allocated: loaded.allocated,
                commits: loaded.state.commits,
                incarnation: loaded.state.incarnation,
                rollbacks: loaded.state.rollbacks,
                stamps: None,
                number,
                file,
                log_len: loaded.log_len,
                torn_tail: loaded.torn_tail,
                torn_bytes: loaded.torn_bytes,
                snapshot_len: loaded.snapshot_len,
                since_snapshot: loaded.since_snapshot,
                poisoned: None,
                refuse_after: None,
            }),
        };
        Ok((manifest, state))
    }

    /// Reads every manifest log in `dir` without trusting `CURRENT`, for repair: each log's
    /// newest state it can reach. A bad record that a valid snapshot follows is passed (the
    /// snapshot holds the whole state after it; [`Salvaged::passed_damage`]); past one that no
    /// snapshot follows the state stops, whether or not valid records follow it (those
    /// commits are then missing from the state, and [`Salvaged::lost_records`] counts them).
    /// Writes nothing. Logs whose header or snapshot is unreadable come back as errors.
    pub fn salvage(fs: &dyn Fs, dir: &Path, counters: &IoCounters) -> Vec<(u64, Result<Salvaged>)> {
        manifest_files(fs, dir)
            .into_iter()
            .map(|number| {
                let name = manifest_file_name(number);
                let loaded = read_whole(fs, &dir.join(&name), counters)
                    .and_then(|buf| load_log(&name, &buf, OnDamage::Salvage));
                let salvaged = loaded.map(|l| Salvaged {
                    number,
                    state: l.state,
                    damaged_at: l.damage.map(|(off, _)| off),
                    lost_records: l.damage.map_or(0, |(_, n)| n),
                    passed_damage: l.passed,
                    incarnation_bound: l.incarnation_bound,
                });
                (number, salvaged)
            })
            .collect()
    }

    /// Makes `state` the database's manifest, for repair: writes it as the snapshot of a new
    /// log numbered above every log in `dir`, syncs it and points `CURRENT` at it (the commit
    /// point). The other logs stay where they are ([`Manifest::set_aside_logs`] renames them).
    /// Returns the new log's number.
    pub fn install(
        fs: &dyn Fs,
        dir: &Path,
        state: &ManifestState,
        counters: &IoCounters,
    ) -> Result<u64> {
        let number = manifest_files(fs, dir).last().copied().unwrap_or(0) + 1;
        let allocated: BTreeMap<u64, u64> =
            state.allocated.iter().map(|e| (e.start, e.pages)).collect();
        check_rollbacks(&state.rollbacks, state.incarnation)
            .map_err(|detail| Error::corruption("manifest state to install", None, detail))?;
        let snapshot = encode_snapshot(
            &state.config,
            &state.index_meta,
            state.durable_seq,
            state.commits,
            &allocated,
            Clock {
                incarnation: state.incarnation,
                rollbacks: &state.rollbacks,
            },
        );
        write_log(
            fs,
            dir,
            number,
            state.page_size,
            state.extent_pages,
            &snapshot,
            counters,
        )?;
        install_current(fs, dir, number, counters)?;
        Ok(number)
    }

    /// Renames every manifest log in `dir` but `keep` to `<name>.old` (kept for inspection; no
    /// longer a manifest log), durably.
    pub fn set_aside_logs(fs: &dyn Fs, dir: &Path, keep: u64, counters: &IoCounters) -> Result<()> {
        for old in manifest_files(fs, dir).into_iter().filter(|&n| n != keep) {
            let name = manifest_file_name(old);
            fs.rename(&dir.join(&name), &dir.join(format!("{name}.old")))?;
        }
        fs.sync_dir(dir)?;
        counters.record_sync();
        Ok(())
    }

    /// Puts `CURRENT` back as it was before a repair that found nothing to keep: `original`
    /// its bytes, or `None` when there was none; removes the logs that repair wrote
    /// (`written`), durably.
    pub fn restore_current(
        fs: &dyn Fs,
        dir: &Path,
        original: Option<&[u8]>,
        written: &[u64],
        counters: &IoCounters,
    ) -> Result<()> {
        match original {
            Some(bytes) => {
                let tmp = dir.join(CURRENT_TMP_FILE);
                let file = open_truncated(fs, &tmp)?;
                file.write_all_at(bytes, 0)?;
                file.sync()?;
                counters.record_sync();
                fs.rename(&tmp, &dir.join(CURRENT_FILE))?;
            }
            None => {
                if fs.exists(&dir.join(CURRENT_FILE)) {
                    fs.remove(&dir.join(CURRENT_FILE))?;
                }
            }
        }
        for &n in written {
            fs.remove(&dir.join(manifest_file_name(n)))?;
        }
        fs.sync_dir(dir)?;
        counters.record_sync();
        Ok(())
    }

    fn check_poisoned(inner: &Inner) -> Result<()> {
        match &inner.poisoned {
            Some(cause) => Err(Error::ReadOnly {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn poison(inner: &mut Inner, e: Error) -> Error {
        if inner.poisoned.is_none() {
            inner.poisoned = Some(format!("manifest write or sync failed: {e}"));
        }
        e
    }

    /// Writes a new log holding `snapshot`, switches `CURRENT` to it and removes the old logs.
    fn rollover(&self, inner: &mut Inner, snapshot: &[u8]) -> Result<()> {
        let number = inner.number + 1;
        let fs = self.fs.as_ref();
        let (file, log_len) = write_log(
            fs,
            &self.dir,
            number,
            self.page_size,
            self.extent_pages,
            snapshot,
            &self.counters,
        )?;
        crate::crashpoint::point("manifest.rollover.after_log");
        install_current(fs, &self.dir, number, &self.counters)?;
        crate::crashpoint::point("manifest.rollover.after_current");
        // The new state is durable; removing old logs is housekeeping, and a log left behind by a
        // failure here (or by an earlier crash) is removed by a later rollover.
        for old in manifest_files(fs, &self.dir)
            .into_iter()
            .filter(|&n| n != number)
        {
            let _ = fs.remove(&self.dir.join(manifest_file_name(old)));
        }
        inner.number = number;
        inner.file = file;
        inner.log_len = log_len;
        inner.torn_tail = false;
        inner.snapshot_len = log_len - MANIFEST_HEADER_LEN as u64;
        inner.since_snapshot = 0;
        Ok(())
    }

    /// Appends one framed record to the live log (cutting a torn tail first) and fsyncs it.
    fn append(&self, inner: &mut Inner, frame: &[u8]) -> Result<()> {
        if inner.torn_tail {
            inner.file.set_len(inner.log_len)?;
            inner.torn_tail = false;
            inner.torn_bytes = 0;
        }
        inner.file.write_all_at(frame, inner.log_len)?;
        self.counters.record_write(Purpose::Manifest, frame.len());
        crate::crashpoint::point("manifest.append.after_write");
        inner.file.sync()?;
        self.counters.record_sync();
        crate::crashpoint::point("manifest.append.after_sync");
        inner.log_len += frame.len() as u64;
        Ok(())
    }

    /// Commits `c` durably: when it returns `Ok`, a crash at any later point recovers this state
    /// (or a later one). `added` is applied before `freed`; adding a page that is allocated, or
    /// freeing one that is not, is a corruption error that changes nothing. After a failed write
    /// or sync the manifest is poisoned and every later call fails.
    pub fn commit(&self, c: Commit) -> Result<()> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        Self::check_poisoned(inner)?;
        if let Some(failure) = &inner.refuse_after {
            failure.check()?;
        }
        let mut allocated = inner.allocated.clone();
        apply_extents(&mut allocated, &c, &|| "manifest commit".to_string())?;
        let delta = encode_delta(&c);
        check_record_len(delta.len())?;
        let frame = frame_record(&delta);
        let limit = self
            .min_rollover
            .load(Ordering::Relaxed)
            .max(inner.snapshot_len.saturating_mul(4));
        let snapshot = || {
            encode_snapshot(
                &inner.config,
                &c.index_meta,
                c.durable_seq,
                inner.commits + 1,
                &allocated,
                Clock {
                    incarnation: inner.incarnation,
                    rollbacks: &inner.rollbacks,
                },
            )
        };
        let result = if inner.log_len + frame.len() as u64 > limit {
            let snapshot = snapshot();
            self.rollover(inner, &snapshot)
        } else if inner.since_snapshot + 1 >= SNAPSHOT_EVERY {
            // The whole state after this commit, in place of its delta.
            let snapshot = snapshot();
            match check_record_len(snapshot.len()) {
                Ok(()) => {
                    let frame = frame_record(&snapshot);
                    self.append(inner, &frame).map(|()| {
                        inner.snapshot_len = frame.len() as u64;
                        inner.since_snapshot = 0;
                    })
                }
                Err(e) => Err(e),
            }
        } else {
            self.append(inner, &frame)
                .map(|()| inner.since_snapshot += 1)
        };
        if let Err(e) = result {
            return Err(Self::poison(inner, e));
        }
        inner.index_meta = c.index_meta;
        inner.durable_seq = c.durable_seq;
        inner.allocated = allocated;
        inner.commits += 1;
        if let Some(stamps) = &inner.stamps {
            stamps.committed(inner.commits);
        }
        Ok(())
    }

    /// Makes `stamps` the clock of the page file this manifest commits for: sets it to the
    /// state's incarnation, commit count and rollback points; every later commit advances it.
    pub fn attach_stamps(&self, stamps: Arc<Stamps>) {
        let mut inner = self.inner.lock();
        stamps.reset(inner.incarnation, inner.commits, inner.rollbacks.clone());
        inner.stamps = Some(stamps);
    }

    /// Starts a new incarnation: what a writable open does before it writes any page. Appends
    /// (and syncs) an open record naming it; when open found a torn tail (commits that may have
    /// been lost, such as a damaged last record), the record also holds a rollback point: the
    /// pages that lost history wrote are stale from now on. The new incarnation is above every
    /// one the torn bytes could have named. Returns the new incarnation.
    pub fn begin_incarnation(&self) -> Result<u64> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        Self::check_poisoned(inner)?;
        let next = inner.incarnation + 1 + inner.torn_bytes / MIN_OPEN_FRAME;
        let found: Vec<RollbackPoint> = if inner.torn_tail {
            vec![RollbackPoint {
                incarnation: inner.incarnation,
                commit: inner.commits,
                next,
            }]
        } else {
            Vec::new()
        };
        let frame = frame_record(&encode_open(next, &found));
        if let Err(e) = self.append(inner, &frame) {
            return Err(Self::poison(inner, e));
        }
        inner.incarnation = next;
        inner.since_snapshot += 1;
        inner.rollbacks.extend(found);
        if let Some(stamps) = &inner.stamps {
            stamps.reset(next, inner.commits, inner.rollbacks.clone());
        }
        Ok(next)
    }

    /// Refuses every commit from when `failure` is tripped on.
    pub fn refuse_commits_after(&self, failure: Arc<Latch>) {
        self.inner.lock().refuse_after = Some(failure);
    }

    /// A copy of the current state (that of the last successful commit).
    pub fn state(&self) -> ManifestState {
        let inner = self.inner.lock();
        ManifestState {
            config: inner.config.clone(),
            index_meta: inner.index_meta.clone(),
            durable_seq: inner.durable_seq,
            allocated: inner
                .allocated
                .iter()
                .map(|(&start, &pages)| Extent { start, pages })
                .collect(),
            page_size: self.page_size,
            extent_pages: self.extent_pages,
            commits: inner.commits,
            incarnation: inner.incarnation,
            rollbacks: inner.rollbacks.clone(),
        }
    }

    /// Replaces the persisted config durably (by rolling over to a new log whose snapshot holds
    /// it). Does not count as a commit.
    pub fn set_config(&self, config: Vec<u8>) -> Result<()> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        Self::check_poisoned(inner)?;
        let snapshot = encode_snapshot(
            &config,
            &inner.index_meta,
            inner.durable_seq,
            inner.commits,
            &inner.allocated,
            Clock {
                incarnation: inner.incarnation,
                rollbacks: &inner.rollbacks,
            },
        );
        if let Err(e) = self.rollover(inner, &snapshot) {
            return Err(Self::poison(inner, e));
        }
        inner.config = config;
        Ok(())
    }

    /// Whether an earlier write or sync failed; a poisoned manifest refuses every change.
    pub fn poisoned(&self) -> bool {
        self.inner.lock().poisoned.is_some()
    }

    /// The number of the live manifest log.
    pub fn log_number(&self) -> u64 {
        self.inner.lock().number
    }

    /// Sets the size below which the log is never rolled over (tests use a small one).
    #[cfg(test)]
    pub(crate) fn set_min_rollover_bytes(&self, bytes: u64) {
        self.min_rollover.store(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
