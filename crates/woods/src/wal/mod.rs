//! The write-ahead log: append-only files of checksummed records, with group commit.
//!
//! Files are named `wal-{number:06}.log` in the database directory. Each starts with a 16-byte
//! header (magic `WOODSWAL`, format major and minor version, the boot tag of its creation) followed by
//! records framed as `[crc32c u32 LE][len u32 LE][payload]`, the checksum taken over the four
//! length bytes followed by the payload. The payload is opaque here (the Db encodes a batch in
//! it). The byte-by-byte format is in `docs/format.md`.
//!
//! Recovery ([`replay`]) yields each file's valid prefix: a file's records stop at the first one
//! that is short, fails its checksum or has an impossible length, and the next file is read
//! after it; the consumer keeps records only while they continue each other (the Db: batch
//! sequence numbers), so what it recovers is a prefix of what was appended. Three rules of the
//! writer keep that prefix the right one:
//! a new file's name is made durable (directory sync) before any record goes into it; a sync
//! ([`WalWriter::sync_to`]) first syncs every older file a rotation left unsynced, then the live
//! one; and after any failed write or sync the writer is poisoned, so no record is ever written
//! after a hole.
//!
//! A rotation does not sync the old file: its records usually reach the index (and the file is
//! deleted) before the OS writes them back, so without a `Sync` write the log costs the device
//! nothing, as RocksDB's does. A power cut may then keep records of a newer file while an older
//! file lost its tail; framing cannot see such a gap at a file boundary, so the consumer checks
//! that records continue each other (the Db: batch sequence numbers) and stops at the first gap.
//!
//! Within one boot of the machine nothing but damage leaves a valid record after a bad one (a
//! process crash loses nothing the OS was given), so each file's header carries the boot tag
//! of its creation ([`Fs::boot_tag`]) and replay notes the valid records after each tear
//! ([`TornAt::followed_by`]): the Db refuses to open past damage in a file of this boot rather
//! than drop acknowledged writes (`repair::log_damage`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::storage::{File, Fs, IoCounters, OpenMode, Purpose, SharedMap};

/// Magic bytes at the start of every WAL file.
pub const WAL_MAGIC: [u8; 8] = *b"WOODSWAL";
/// Format major version this build writes and reads; any other major is refused.
pub const WAL_FORMAT_MAJOR: u16 = 1;
/// Format minor version this build writes (readers accept any minor of their major). Minor 1
/// puts the boot tag of the machine that created the file in the header's last four bytes
/// (minor 0 left them zero: "unknown"); minor 2 appends a sync mark after each fsync of the live
/// file ([`sync_mark`]), which older readers skip as an empty batch of sequence number 0.
pub const WAL_FORMAT_MINOR: u16 = 2;
/// Size of the file header: magic (8), major (2), minor (2), boot tag (4).
pub const WAL_HEADER_LEN: usize = 16;
/// Size of a record's frame header: checksum (4) and payload length (4).
pub const RECORD_HEADER_LEN: usize = 8;
/// Longest payload a WAL record may carry; a longer length field on disk marks a torn record.
pub const MAX_WAL_RECORD: u32 = 64 << 20;

/// The first bytes of a sync mark's payload: where a batch has its first sequence number (never
/// 0) and its operation count, zeros, so that a reader that knows no marks decodes an empty
/// batch at or below any durable sequence number and skips it; then the tag `SYNC`.
const SYNC_MARK_PREFIX: [u8; 16] = *b"\0\0\0\0\0\0\0\0\0\0\0\0SYNC";
/// Length of a sync mark's payload: the prefix and the synced length (u64).
const SYNC_MARK_LEN: usize = SYNC_MARK_PREFIX.len() + 8;

/// The payload of a sync mark: the live file's bytes before `synced` were made durable by an
/// fsync that finished before the mark was written. A valid mark therefore proves that a bad
/// record starting below `synced` is damage, not what a power cut leaves of an unsynced tail.
pub(crate) fn sync_mark(synced: u64) -> [u8; SYNC_MARK_LEN] {
    let mut m = [0u8; SYNC_MARK_LEN];
    m[..SYNC_MARK_PREFIX.len()].copy_from_slice(&SYNC_MARK_PREFIX);
    m[SYNC_MARK_PREFIX.len()..].copy_from_slice(&synced.to_le_bytes());
    m
}

/// The synced length a sync mark's payload states (`None`: the payload is no mark).
pub(crate) fn parse_sync_mark(payload: &[u8]) -> Option<u64> {
    if payload.len() != SYNC_MARK_LEN || payload[..SYNC_MARK_PREFIX.len()] != SYNC_MARK_PREFIX {
        return None;
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&payload[SYNC_MARK_PREFIX.len()..]);
    Some(u64::from_le_bytes(b))
}

/// The file name of WAL file `number`.
pub fn wal_file_name(number: u64) -> String {
    format!("wal-{number:06}.log")
}

/// The path of WAL file `number` in `dir`.
pub fn wal_file_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(wal_file_name(number))
}

/// Parses a WAL file name back to its number (`None` for any other file).
pub(crate) fn parse_wal_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Frames one record: `[crc32c][len][payload]`, the checksum over the length bytes and payload.
/// Shared with the manifest, whose records use the same framing.
pub(crate) fn frame_record(payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len), payload);
    let mut out = Vec::with_capacity(RECORD_HEADER_LEN + payload.len());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&len);
    out.extend_from_slice(payload);
    out
}

/// What [`next_record`] found at an offset.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NextRecord<'a> {
    /// A whole, checksummed record: its payload and the offset just past it.
    Record(&'a [u8], usize),
    /// The buffer ends exactly here.
    End,
    /// What starts here is not a whole valid record (the reason says why).
    Torn(&'static str),
}

/// Reads the record framed at `off` in `buf`, never reading past `buf` and never panicking.
pub(crate) fn next_record(buf: &[u8], off: usize, max_len: u32) -> NextRecord<'_> {
    let Some(rest) = buf.get(off..) else {
        return NextRecord::Torn("offset past the end");
    };
    if rest.is_empty() {
        return NextRecord::End;
    }
    if rest.len() < RECORD_HEADER_LEN {
        return NextRecord::Torn("short record header");
    }
    let crc = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    let len_bytes = [rest[4], rest[5], rest[6], rest[7]];
    let len = u32::from_le_bytes(len_bytes);
    if len > max_len {
        return NextRecord::Torn("impossible record length");
    }
    let Some(payload) = rest.get(RECORD_HEADER_LEN..RECORD_HEADER_LEN + len as usize) else {
        return NextRecord::Torn("short record payload");
    };
    if crc32c::crc32c_append(crc32c::crc32c(&len_bytes), payload) != crc {
        return NextRecord::Torn("checksum mismatch");
    }
    NextRecord::Record(payload, off + RECORD_HEADER_LEN + len as usize)
}

fn wal_header(boot_tag: u32) -> [u8; WAL_HEADER_LEN] {
    let mut h = [0u8; WAL_HEADER_LEN];
    h[..8].copy_from_slice(&WAL_MAGIC);
    h[8..10].copy_from_slice(&WAL_FORMAT_MAJOR.to_le_bytes());
    h[10..12].copy_from_slice(&WAL_FORMAT_MINOR.to_le_bytes());
    h[12..16].copy_from_slice(&boot_tag.to_le_bytes());
    h
}

/// A new WAL file and its map: the first live file, or one created ahead of the rotation that
/// switches to it.
struct Spare {
    number: u64,
    file: Arc<dyn File>,
    map: Option<SharedMap>,
}

/// A file rotated away whose preallocated tail is still mapped and uncut: cut back to its
/// records by [`WalWriter::cut_tails`], off the writer's path.
struct Tail {
    number: u64,
    file: Arc<dyn File>,
    len: u64,
    map: SharedMap,
}

impl Tail {
    /// Unmaps the file and cuts it back to its records (a failure only leaves the zeros, which
    /// replay reads as the end of the records).
    fn cut(self) {
        drop(self.map);
        let _ = self.file.set_len(self.len);
    }
}

/// The state the append mutex guards.
struct Current {
    file: Arc<dyn File>,
    /// The live file's preallocated first bytes, mapped: records are stored into it with a
    /// memory copy instead of a system call each (`None`: the backend cannot map).
    map: Option<SharedMap>,
    number: u64,
    /// Where the next record goes in the current file.
    file_off: u64,
    /// Log position (bytes of records appended by this writer) after the last record.
    pos: u64,
    /// Older files rotated away and not yet synced, oldest first.
    unsynced: Vec<(u64, Arc<dyn File>)>,
}

/// Appends records to the live WAL file and makes them durable in groups.
///
/// Every record is written to the OS by [`append`](WalWriter::append) (so it survives a process
/// crash); [`sync_to`](WalWriter::sync_to) makes it survive a power cut, one fsync serving every
/// caller that appended before it started.
pub struct WalWriter {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    counters: Arc<IoCounters>,
    /// Bytes of each new file to preallocate and map (0: none).
    prealloc: u64,
    /// The append mutex: serialises appends and rotations.
    current: Mutex<Current>,
    /// The next file, created ahead ([`WalWriter::prepare_next`]); taken after `current`.
    spare: Mutex<Option<Spare>>,
    /// Files rotated away, not yet cut back ([`WalWriter::cut_tails`]); taken after `current`.
    tails: Mutex<Vec<Tail>>,
    /// The live file's number (readable without the append mutex).
    live: AtomicU64,
    /// Whether a leader is running an fsync for the group; waiters sleep on `sync_done`.
    sync_state: Mutex<bool>,
    sync_done: Condvar,
    /// Every record ending at or below this log position is durable.
    synced: AtomicU64,
    bytes_written: AtomicU64,
    poisoned: AtomicBool,
    poison_cause: Mutex<Option<String>>,
}

/// Creates (or truncates) WAL file `number`, writes its header and makes both the file and its
/// name durable.
fn create_file(
    fs: &dyn Fs,
    dir: &Path,
    number: u64,
    counters: &IoCounters,
) -> Result<Arc<dyn File>> {
    let path = wal_file_path(dir, number);
    let file = fs.open(
        &path,
        OpenMode {
            create: true,
            direct: false,
        },
    )?;
    if file.len()? != 0 {
        file.set_len(0)?;
    }
    let header = wal_header(fs.boot_tag());
    file.write_all_at(&header, 0)?;
    counters.record_write(Purpose::Wal, header.len());
    file.sync()?;
    counters.record_sync();
    // Without this a power cut could lose the file's name, and with it records synced later.
    fs.sync_dir(dir)?;
    counters.record_sync();
    Ok(file)
}

impl WalWriter {
    /// Creates WAL file `number` in `dir` (truncating a leftover file of that name), writes its
    /// header and syncs the file and the directory, so that a record synced later can never be
    /// lost because the file's name was.
    ///
    /// With `prealloc` above zero each file's first `prealloc` bytes are allocated and mapped
    /// where the backend can ([`File::map_for_append`]): appends then store into the map, in
    /// the OS as soon as with a write (a process crash loses nothing), at the cost of a memory
    /// copy instead of a system call. The rest of a mapped file reads as zeros, which
    /// [`replay`] takes for the end of its records; records that do not fit are written past
    /// it. The live file is cut back to its records when it is rotated away or the writer is
    /// dropped.
    pub fn create(
        fs: Arc<dyn Fs>,
        dir: &Path,
        number: u64,
        counters: Arc<IoCounters>,
        prealloc: u64,
    ) -> Result<WalWriter> {
        let Spare { file, map, .. } = new_file(fs.as_ref(), dir, number, &counters, prealloc)?;
        Ok(WalWriter {
            fs,
            dir: dir.to_path_buf(),
            counters,
            prealloc,
            spare: Mutex::new(None),
            tails: Mutex::new(Vec::new()),
            live: AtomicU64::new(number),
            current: Mutex::new(Current {
                file,
                map,
                number,
                file_off: WAL_HEADER_LEN as u64,
                pos: 0,
                unsynced: Vec::new(),
            }),
            sync_state: Mutex::new(false),
            sync_done: Condvar::new(),
            synced: AtomicU64::new(0),
            bytes_written: AtomicU64::new(WAL_HEADER_LEN as u64),
            poisoned: AtomicBool::new(false),
            poison_cause: Mutex::new(None),
        })
    }

    fn check_poisoned(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            let cause = self
                .poison_cause
                .lock()
                .clone()
                .unwrap_or_else(|| "an earlier WAL failure".into());
            return Err(Error::ReadOnly { cause });
        }
        Ok(())
    }

    /// Marks the writer unusable after `e` and hands `e` back.
    fn poison(&self, e: Error) -> Error {
        let mut cause = self.poison_cause.lock();
        if cause.is_none() {
            *cause = Some(format!("WAL write or sync failed: {e}"));
        }
        self.poisoned.store(true, Ordering::Release);
        e
    }

    /// Appends one record holding `payload` at the end of the live file (one positional write) and
    /// returns the log position just past it, to pass to [`sync_to`](WalWriter::sync_to).
    ///
    /// Positions grow monotonically across rotations and are meaningful only for this writer.
    /// A payload longer than [`MAX_WAL_RECORD`] is refused (without poisoning the writer).
    pub fn append(&self, payload: &[u8]) -> Result<u64> {
        self.check_poisoned()?;
        if payload.len() > MAX_WAL_RECORD as usize {
            return Err(Error::io(
                "appending to the WAL",
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "record of {} bytes exceeds the limit of {MAX_WAL_RECORD} bytes",
                        payload.len()
                    ),
                ),
            ));
        }
        let frame = frame_record(payload);
        let mut cur = self.current.lock();
        // Checked again under the mutex: a record must never follow a failed one.
        self.check_poisoned()?;
        self.store(&mut cur, &frame)
    }

    /// Stores a framed record at the end of the live file (under the append mutex).
    fn store(&self, cur: &mut Current, frame: &[u8]) -> Result<u64> {
        let off = cur.file_off;
        let stored = cur.map.as_mut().is_some_and(|m| m.write_at(frame, off));
        if !stored {
            if let Err(e) = cur.file.write_all_at(frame, off) {
                return Err(self.poison(e));
            }
        }
        self.counters.record_write(Purpose::Wal, frame.len());
        self.bytes_written
            .fetch_add(frame.len() as u64, Ordering::Relaxed);
        cur.file_off += frame.len() as u64;
        cur.pos += frame.len() as u64;
        Ok(cur.pos)
    }

    /// Appends a sync mark ([`sync_mark`]) saying that the live file's bytes before `synced`
    /// are durable, if file `number` is still the live one and the mark says more than the
    /// header. A failed store poisons the writer like any failed append.
    fn mark_synced(&self, number: u64, synced: u64) -> Result<()> {
        if synced <= WAL_HEADER_LEN as u64 {
            return Ok(());
        }
        let mut cur = self.current.lock();
        if cur.number != number || self.poisoned() {
            return Ok(());
        }
        self.store(&mut cur, &frame_record(&sync_mark(synced)))
            .map(|_| ())
    }

    /// Makes every record up to log position `pos` durable (group commit).
    ///
    /// Returns at once if a finished fsync already covers `pos`. Otherwise one caller at a time
    /// (the leader) fsyncs the live file, and that fsync covers everything appended before it
    /// began; the others wait for it to finish rather than queueing on a lock, so every caller it
    /// covers returns together and the next fsync starts for those it did not. A `pos` beyond
    /// the last append is treated as the last append.
    pub fn sync_to(&self, pos: u64) -> Result<()> {
        self.check_poisoned()?;
        if self.synced.load(Ordering::Acquire) >= pos {
            return Ok(());
        }
        let mut syncing = self.sync_state.lock();
        loop {
            self.check_poisoned()?;
            if self.synced.load(Ordering::Acquire) >= pos {
                return Ok(());
            }
            if !*syncing {
                break;
            }
            self.sync_done.wait(&mut syncing);
        }
        *syncing = true;
        drop(syncing);
        // Which files, and how far, this sync covers: what was appended before it starts. Older
        // files a rotation left unsynced go first, so a durable record never follows a lost one.
        let (older, file, upto, number, file_off) = {
            let cur = self.current.lock();
            (
                cur.unsynced.clone(),
                cur.file.clone(),
                cur.pos,
                cur.number,
                cur.file_off,
            )
        };
        let mut result = Ok(());
        crate::crashpoint::point("wal.sync.before");
        for f in older.iter().map(|(_, f)| f).chain(std::iter::once(&file)) {
            match f.sync() {
                Ok(()) => self.counters.record_sync(),
                Err(e) => {
                    result = Err(self.poison(e));
                    break;
                }
            }
        }
        if result.is_ok() {
            crate::crashpoint::point("wal.sync.after");
            self.synced.fetch_max(upto, Ordering::AcqRel);
            self.current
                .lock()
                .unsynced
                .retain(|(n, _)| !older.iter().any(|(m, _)| m == n));
            // What this fsync covered, recorded in the log: the next sync makes the mark
            // durable. The records are synced whatever happens to the mark; a failed mark
            // poisons the writer for the calls after this one.
            let _ = self.mark_synced(number, file_off);
        }
        *self.sync_state.lock() = false;
        self.sync_done.notify_all();
        result
    }

    /// Switches to a new file `new_number` (created as by [`create`](WalWriter::create)). The old
    /// file is not synced here: the next [`sync_to`](WalWriter::sync_to) syncs it before the
    /// live file, unless [`retire`](WalWriter::retire) says its records are durable elsewhere.
    pub fn rotate(&self, new_number: u64) -> Result<()> {
        self.check_poisoned()?;
        let mut cur = self.current.lock();
        self.check_poisoned()?;
        // The spare lock is held from here on, so `prepare_next` cannot be creating the same
        // file while this switches to it.
        let mut spare = self.spare.lock();
        let made = match spare.take() {
            Some(s) if s.number == new_number => Ok(s),
            _ => self.new_file(new_number),
        };
        let next = match made {
            Ok(s) => s,
            Err(e) => return Err(self.poison(e)),
        };
        self.live.store(new_number, Ordering::Release);
        drop(spare);
        self.bytes_written
            .fetch_add(WAL_HEADER_LEN as u64, Ordering::Relaxed);
        // The old file's mapped tail is cut later, by `cut_tails`: the truncation waits on the
        // file system's journal, 60 to 170 ms under the data file's syncs (measured at 2
        // million `iam` records), which a writer at a rotation must not.
        let old_map = std::mem::replace(&mut cur.map, next.map);
        let old = std::mem::replace(&mut cur.file, next.file);
        let old_number = cur.number;
        if let Some(map) = old_map {
            self.tails.lock().push(Tail {
                number: old_number,
                file: old.clone(),
                len: cur.file_off,
                map,
            });
        }
        cur.unsynced.push((old_number, old));
        cur.number = new_number;
        cur.file_off = WAL_HEADER_LEN as u64;
        crate::crashpoint::point("wal.rotate.after");
        Ok(())
    }

    /// Creates the file the next [`rotate`](WalWriter::rotate) switches to (the live file's
    /// number plus one), unless it is ready: its header written, the file and the directory
    /// synced and its first bytes mapped, off the writers' path (the Db's background threads
    /// call it), so that a rotation is a switch, not two fsyncs under the writer lock. Returns
    /// whether it created one. A spare file holds no record: replay reads it as an empty file.
    pub fn prepare_next(&self) -> Result<bool> {
        self.check_poisoned()?;
        let mut spare = self.spare.lock();
        let number = self.live.load(Ordering::Acquire) + 1;
        if spare.as_ref().is_some_and(|s| s.number == number) {
            return Ok(false);
        }
        match self.new_file(number) {
            Ok(s) => {
                *spare = Some(s);
                crate::crashpoint::point("wal.prepare.after");
                Ok(true)
            }
            Err(e) => Err(self.poison(e)),
        }
    }

    /// Creates and maps file `number` (as [`create`](WalWriter::create) does).
    fn new_file(&self, number: u64) -> Result<Spare> {
        new_file(
            self.fs.as_ref(),
            &self.dir,
            number,
            &self.counters,
            self.prealloc,
        )
    }

    /// Forgets older file `number`: its records are durable elsewhere (the index holds its
    /// memtable) and the file is being deleted, so no sync needs to cover it (nor cut it).
    pub fn retire(&self, number: u64) {
        self.current.lock().unsynced.retain(|(n, _)| *n != number);
        // Unmapped after the lock, which a rotation takes under the append mutex.
        let dropped: Vec<Tail> = self
            .tails
            .lock()
            .extract_if(.., |t| t.number == number)
            .collect();
        drop(dropped);
    }

    /// Cuts the files rotated away back to their records: unmaps each and truncates its
    /// preallocated zeros. Off the writers' path: the Db's background threads call it, or the
    /// writer right after its rotation when there are none. Until then the zeros read as the
    /// end of the records, so a crash before the cut loses nothing.
    pub fn cut_tails(&self) {
        let tails = std::mem::take(&mut *self.tails.lock());
        for t in tails {
            t.cut();
        }
    }

    /// The number of the live WAL file.
    pub fn number(&self) -> u64 {
        self.current.lock().number
    }

    /// Bytes this writer has written to WAL files (headers and framed records).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::Relaxed)
    }

    /// Whether an earlier write or sync failed; a poisoned writer refuses every call.
    pub fn poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }
}

impl Drop for WalWriter {
    fn drop(&mut self) {
        cut_tail(self.current.get_mut());
        for t in self.tails.get_mut().drain(..) {
            t.cut();
        }
        // A spare file holds no record; left behind it would only take its preallocated space.
        if let Some(Spare { number, .. }) = self.spare.get_mut().take() {
            let _ = self.fs.remove(&wal_file_path(&self.dir, number));
        }
    }
}

/// Creates WAL file `number` ([`create_file`]) and maps its first `prealloc` bytes, where the
/// backend can.
fn new_file(
    fs: &dyn Fs,
    dir: &Path,
    number: u64,
    counters: &IoCounters,
    prealloc: u64,
) -> Result<Spare> {
    let file = create_file(fs, dir, number, counters)?;
    let map = if prealloc > WAL_HEADER_LEN as u64 {
        file.map_for_append(prealloc)?
    } else {
        None
    };
    Ok(Spare { number, file, map })
}

/// Unmaps the live file and cuts its unused preallocated tail. Its stored records stay in the
/// page cache; the length is not synced (a tail of zeros that comes back after a power cut reads
/// as the end of the records), and a failed cut costs only the space.
fn cut_tail(cur: &mut Current) {
    if cur.map.take().is_some() {
        let _ = cur.file.set_len(cur.file_off);
    }
}

/// Whether everything from `off` to the end of `buf` is zero: the unused preallocated tail of a
/// mapped file. (No record is all zeros: the checksum of a record's length bytes is never 0 for
/// length 0, so an all-zero header is never a record.)
fn zero_tail(buf: &[u8], off: usize) -> bool {
    buf.get(off..)
        .is_some_and(|rest| rest.iter().all(|&b| b == 0))
}

/// The numbers of the WAL files in `dir`, ascending.
pub fn list_wal_files(fs: &dyn Fs, dir: &Path) -> Result<Vec<u64>> {
    let mut numbers: Vec<u64> = fs
        .list(dir)?
        .iter()
        .filter_map(|n| parse_wal_file_name(n))
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    Ok(numbers)
}

/// Where [`replay`] stopped early.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornAt {
    /// The WAL file holding the first torn record (or the torn header).
    pub file: u64,
    /// Byte offset in that file where the valid prefix ends (below [`WAL_HEADER_LEN`] when the
    /// header itself is torn).
    pub offset: u64,
    /// Why the bytes there were rejected.
    pub reason: String,
    /// Valid records found after the bad bytes in the same file (every offset tried), which
    /// its valid prefix does not hold. A crash leaves none: a record is appended only after the
    /// one before it was written whole. A power cut can (the OS writes back in its own order);
    /// damage can.
    pub followed_by: Vec<Vec<u8>>,
    /// The file was created in this boot of the machine ([`Fs::boot_tag`]): no power cut can
    /// have torn it since, so valid records after its tear mean damage, not a torn tail.
    pub this_boot: bool,
    /// A valid sync mark after the bad bytes says the file was synced past them ([`sync_mark`]):
    /// they were durable before the mark was written, so no power cut tore them, in any boot.
    pub synced: bool,
}

/// What [`replay`] recovered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// The payloads of each file's valid prefix, in file order: within a file they continue
    /// each other; whether a file's records continue the previous file's is for the consumer to
    /// check (the Db: batch sequence numbers).
    pub records: Vec<Vec<u8>>,
    /// The file each of `records` came from.
    pub record_files: Vec<u64>,
    /// Every WAL file found in the directory, ascending.
    pub files: Vec<u64>,
    /// Whether some file ended before its last byte (a torn record or header).
    pub torn: bool,
    /// Where each such file's valid prefix ends, in file order.
    pub tears: Vec<TornAt>,
}

impl Replay {
    /// The valid records that follow tear `i` but are not in the log's valid prefix up to it:
    /// those found after the bad bytes in its file, then every record of the later files.
    /// Point-in-time recovery (stopping at the tear) drops them.
    pub fn after_tear(&self, i: usize) -> impl Iterator<Item = &[u8]> {
        let at = &self.tears[i];
        let later = self
            .records
            .iter()
            .zip(&self.record_files)
            .filter(move |(_, &f)| f > at.file)
            .map(|(r, _)| r.as_slice());
        at.followed_by.iter().map(Vec::as_slice).chain(later)
    }
}

/// The valid records that start at or after byte `from` of `buf`, resynchronising at every
/// offset (the bad record's own length field may be what is damaged), up to a zeroed tail, and
/// the greatest synced length a sync mark among them states (0: none).
fn valid_records_after(buf: &[u8], from: usize) -> (Vec<Vec<u8>>, u64) {
    let mut found = Vec::new();
    let mut synced = 0;
    let mut off = from;
    while off + RECORD_HEADER_LEN <= buf.len() && !zero_tail(buf, off) {
        match next_record(buf, off, MAX_WAL_RECORD) {
            NextRecord::Record(payload, next) => {
                match parse_sync_mark(payload) {
                    // A mark can only state what was written before it.
                    Some(s) if s <= off as u64 => synced = synced.max(s),
                    Some(_) => {}
                    None => found.push(payload.to_vec()),
                }
                off = next;
            }
            _ => off += 1,
        }
    }
    (found, synced)
}

/// Reads every WAL file of `dir` in number order and returns each file's valid prefix of
/// records.
///
/// A file's records end at the first one that is short, fails its checksum or has a length
/// above [`MAX_WAL_RECORD`]; a file whose header is short or garbled (a crash while it was
/// being created) holds none. Such a tear ends that file only: the next file is read too,
/// since a tear in an older file need not mean the newer ones are lost (a file whose records
/// the index already held may have been deleted, and the deletion undone by a power cut that
/// kept its name but not its contents). The consumer decides what continues the log. A header
/// with the right magic and an unknown major version is [`Error::UnsupportedFormat`].
pub fn replay(fs: &dyn Fs, dir: &Path, counters: &IoCounters) -> Result<Replay> {
    let files = list_wal_files(fs, dir)?;
    let boot = fs.boot_tag();
    let mut out = Replay {
        files: files.clone(),
        ..Replay::default()
    };
    for &number in &files {
        let path = wal_file_path(dir, number);
        let file = fs.open(
            &path,
            OpenMode {
                create: false,
                direct: false,
            },
        )?;
        let buf = crate::storage::read_whole(&*file, &format!("WAL file {}", path.display()))?;
        let len = buf.len();
        counters.record_read(Purpose::Wal, len);

        let tag = buf
            .get(12..16)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let torn =
            |offset: usize, reason: &str, (followed_by, synced): (Vec<Vec<u8>>, u64)| TornAt {
                file: number,
                offset: offset as u64,
                reason: reason.into(),
                followed_by,
                this_boot: tag != 0 && tag == boot,
                synced: synced > offset as u64,
            };
        if buf.len() < WAL_HEADER_LEN || buf[..8] != WAL_MAGIC {
            out.torn = true;
            // A file whose header a crash tore holds no record; one whose header was damaged
            // may: they are found as after any bad bytes (and this boot is not known).
            let after = valid_records_after(&buf, WAL_HEADER_LEN.min(buf.len()));
            out.tears
                .push(torn(0, "short or garbled file header", after));
            continue;
        }
        let major = u16::from_le_bytes([buf[8], buf[9]]);
        if major != WAL_FORMAT_MAJOR {
            return Err(Error::UnsupportedFormat {
                found_major: major,
                supported_major: WAL_FORMAT_MAJOR,
            });
        }
        let mut off = WAL_HEADER_LEN;
        loop {
            if zero_tail(&buf, off) {
                // The end of the records (or of the file): a mapped file's unused tail.
                break;
            }
            match next_record(&buf, off, MAX_WAL_RECORD) {
                NextRecord::Record(payload, next) => {
                    if parse_sync_mark(payload).is_none() {
                        out.records.push(payload.to_vec());
                        out.record_files.push(number);
                    }
                    off = next;
                }
                NextRecord::End => break,
                NextRecord::Torn(reason) => {
                    out.torn = true;
                    let after = valid_records_after(&buf, off + 1);
                    out.tears.push(torn(off, reason, after));
                    break;
                }
            }
        }
    }
    Ok(out)
}

/// Makes what [`replay`] recovered the durable log, so that new records can safely follow it.
///
/// Call it once after `replay` and before creating the next [`WalWriter`]. It truncates every
/// torn file to its valid prefix (or removes it when its header is torn), then fsyncs every
/// kept file and the directory. Without the cut, a later replay would meet the same tear with
/// different bytes after it; without the fsyncs, records that replay read after a process crash
/// (written but never synced) could be lost to a power cut while newer records survive. Files
/// whose records do not continue the log are the consumer's to remove (the Db removes every
/// log file once what it recovered is durable in the index).
///
/// Returns the numbers of the WAL files it kept, ascending: those left in the directory.
pub fn seal_recovered(
    fs: &dyn Fs,
    dir: &Path,
    replay: &Replay,
    counters: &IoCounters,
) -> Result<Vec<u64>> {
    let mut kept: Vec<u64> = replay.files.clone();
    for at in &replay.tears {
        let path = wal_file_path(dir, at.file);
        if at.offset < WAL_HEADER_LEN as u64 {
            fs.remove(&path)?;
            kept.retain(|&n| n != at.file);
        } else {
            let file = fs.open(
                &path,
                OpenMode {
                    create: false,
                    direct: false,
                },
            )?;
            file.set_len(at.offset)?;
        }
    }
    for &number in &kept {
        let file = fs.open(
            &wal_file_path(dir, number),
            OpenMode {
                create: false,
                direct: false,
            },
        )?;
        file.sync()?;
        counters.record_sync();
    }
    fs.sync_dir(dir)?;
    counters.record_sync();
    Ok(kept)
}

#[cfg(test)]
mod tests;
