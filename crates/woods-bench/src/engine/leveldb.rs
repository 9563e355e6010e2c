//! Google's C++ LevelDB (Debian's libleveldb-dev 1.23) through its C API, `leveldb/c.h`. The
//! few declarations the adapter needs are written out below; nothing is generated. Every
//! setting is listed in `docs/benchmarks.md`.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use super::{BenchError, BenchResult, Engine, EngineConfig, OwnCounters};

/// The declarations of `leveldb/c.h` (LevelDB 1.23) that the adapter calls.
mod ffi {
    use std::ffi::{c_char, c_int, c_void};

    #[repr(C)]
    pub struct leveldb_t {
        _private: [u8; 0],
    }
    #[repr(C)]
    pub struct leveldb_options_t {
        _private: [u8; 0],
    }
    #[repr(C)]
    pub struct leveldb_readoptions_t {
        _private: [u8; 0],
    }
    #[repr(C)]
    pub struct leveldb_writeoptions_t {
        _private: [u8; 0],
    }
    #[repr(C)]
    pub struct leveldb_cache_t {
        _private: [u8; 0],
    }
    #[repr(C)]
    pub struct leveldb_filterpolicy_t {
        _private: [u8; 0],
    }
    #[repr(C)]
    pub struct leveldb_iterator_t {
        _private: [u8; 0],
    }

    /// `leveldb_no_compression` of the C API's compression enum.
    pub const NO_COMPRESSION: c_int = 0;

    #[link(name = "leveldb")]
    extern "C" {
        pub fn leveldb_open(
            options: *const leveldb_options_t,
            name: *const c_char,
            errptr: *mut *mut c_char,
        ) -> *mut leveldb_t;
        pub fn leveldb_close(db: *mut leveldb_t);
        pub fn leveldb_put(
            db: *mut leveldb_t,
            options: *const leveldb_writeoptions_t,
            key: *const c_char,
            keylen: usize,
            val: *const c_char,
            vallen: usize,
            errptr: *mut *mut c_char,
        );
        pub fn leveldb_delete(
            db: *mut leveldb_t,
            options: *const leveldb_writeoptions_t,
            key: *const c_char,
            keylen: usize,
            errptr: *mut *mut c_char,
        );
        pub fn leveldb_get(
            db: *mut leveldb_t,
            options: *const leveldb_readoptions_t,
            key: *const c_char,
            keylen: usize,
            vallen: *mut usize,
            errptr: *mut *mut c_char,
        ) -> *mut c_char;
        pub fn leveldb_create_iterator(
            db: *mut leveldb_t,
            options: *const leveldb_readoptions_t,
        ) -> *mut leveldb_iterator_t;
        pub fn leveldb_iter_destroy(it: *mut leveldb_iterator_t);
        pub fn leveldb_iter_valid(it: *const leveldb_iterator_t) -> u8;
        pub fn leveldb_iter_seek_to_first(it: *mut leveldb_iterator_t);
        pub fn leveldb_iter_seek(it: *mut leveldb_iterator_t, k: *const c_char, klen: usize);
        pub fn leveldb_iter_next(it: *mut leveldb_iterator_t);
        pub fn leveldb_iter_key(it: *const leveldb_iterator_t, klen: *mut usize) -> *const c_char;
        pub fn leveldb_iter_value(it: *const leveldb_iterator_t, vlen: *mut usize)
            -> *const c_char;
        pub fn leveldb_iter_get_error(it: *const leveldb_iterator_t, errptr: *mut *mut c_char);
        pub fn leveldb_property_value(db: *mut leveldb_t, propname: *const c_char) -> *mut c_char;
        pub fn leveldb_compact_range(
            db: *mut leveldb_t,
            start_key: *const c_char,
            start_key_len: usize,
            limit_key: *const c_char,
            limit_key_len: usize,
        );

        pub fn leveldb_options_create() -> *mut leveldb_options_t;
        pub fn leveldb_options_destroy(o: *mut leveldb_options_t);
        pub fn leveldb_options_set_filter_policy(
            o: *mut leveldb_options_t,
            p: *mut leveldb_filterpolicy_t,
        );
        pub fn leveldb_options_set_create_if_missing(o: *mut leveldb_options_t, v: u8);
        pub fn leveldb_options_set_write_buffer_size(o: *mut leveldb_options_t, v: usize);
        pub fn leveldb_options_set_max_open_files(o: *mut leveldb_options_t, v: c_int);
        pub fn leveldb_options_set_cache(o: *mut leveldb_options_t, c: *mut leveldb_cache_t);
        pub fn leveldb_options_set_block_size(o: *mut leveldb_options_t, v: usize);
        pub fn leveldb_options_set_max_file_size(o: *mut leveldb_options_t, v: usize);
        pub fn leveldb_options_set_compression(o: *mut leveldb_options_t, v: c_int);

        pub fn leveldb_filterpolicy_create_bloom(
            bits_per_key: c_int,
        ) -> *mut leveldb_filterpolicy_t;
        pub fn leveldb_filterpolicy_destroy(p: *mut leveldb_filterpolicy_t);

        pub fn leveldb_readoptions_create() -> *mut leveldb_readoptions_t;
        pub fn leveldb_readoptions_destroy(o: *mut leveldb_readoptions_t);
        pub fn leveldb_writeoptions_create() -> *mut leveldb_writeoptions_t;
        pub fn leveldb_writeoptions_destroy(o: *mut leveldb_writeoptions_t);
        pub fn leveldb_writeoptions_set_sync(o: *mut leveldb_writeoptions_t, v: u8);

        pub fn leveldb_cache_create_lru(capacity: usize) -> *mut leveldb_cache_t;
        pub fn leveldb_cache_destroy(c: *mut leveldb_cache_t);

        pub fn leveldb_free(ptr: *mut c_void);
    }
}

/// LevelDB's defaults, which the C API cannot read back: 4 KiB blocks, 2 MiB table files.
const BLOCK_BYTES: usize = 4 << 10;
const MAX_FILE_BYTES: usize = 2 << 20;
/// LevelDB's compaction triggers (`db/dbformat.h`, `db/version_set.cc`), fixed in the library:
/// level 0 is compacted at 4 files, level L ≥ 1 when it holds more than 10^L MiB.
const L0_COMPACTION_TRIGGER: u64 = 4;
const LEVEL1_MAX_BYTES: u64 = 10 << 20;
/// Levels 0..=6; the last one is never compacted further.
const LEVELS: usize = 7;
/// Log records are written in 32 KiB blocks, each fragment with a 7-byte header
/// (`db/log_format.h`); a write batch has a 12-byte header (`db/write_batch.cc`).
const LOG_BLOCK: u64 = 32 << 10;
const LOG_HEADER: u64 = 7;
const BATCH_HEADER: u64 = 12;

/// A LevelDB database with the benchmark's settings.
pub struct LevelDbEngine {
    db: *mut ffi::leveldb_t,
    options: *mut ffi::leveldb_options_t,
    read_opts: *mut ffi::leveldb_readoptions_t,
    write_opts: *mut ffi::leveldb_writeoptions_t,
    cache: *mut ffi::leveldb_cache_t,
    filter: *mut ffi::leveldb_filterpolicy_t,
    /// Log bytes written since open, computed from the log format: LevelDB does not count them.
    wal: Mutex<LogModel>,
}

// SAFETY: LevelDB's DB is safe for concurrent use from many threads without external
// synchronisation (include/leveldb/db.h); the options, cache and filter policy objects are
// only read after open, and are destroyed only in Drop, when no call is in flight.
unsafe impl Send for LevelDbEngine {}
// SAFETY: as for Send: every method shares the handle as LevelDB allows.
unsafe impl Sync for LevelDbEngine {}

/// Converts a C API error (a malloc'ed string, or null) into a result, freeing it.
fn check(what: &str, errptr: *mut c_char) -> BenchResult<()> {
    if errptr.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null error from the C API is a NUL-terminated string it malloc'ed; it is
    // read once and freed with leveldb_free, as c.h requires.
    let msg = unsafe {
        let msg = CStr::from_ptr(errptr).to_string_lossy().into_owned();
        ffi::leveldb_free(errptr.cast::<c_void>());
        msg
    };
    Err(BenchError::new(format!("leveldb {what}: {msg}")))
}

/// How many files the table cache may keep open: enough that every table of a 20-million-record
/// run stays open (as RocksDB's default of no limit does), within the process's descriptor limit.
fn max_open_files() -> c_int {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    // Leave descriptors for the log, the manifest and the rest of the process.
    soft.saturating_sub(128).clamp(64, 10_000) as c_int
}

impl LevelDbEngine {
    /// Opens (or creates) a LevelDB database in `dir`: the log on and not synced per write (with
    /// `cfg.sync`, `leveldb_writeoptions_set_sync(1)`: every put and delete syncs the log),
    /// compression off, a 10 bits/key bloom filter, a write buffer of the budget's write-buffer
    /// share (LevelDB keeps one more, immutable, while it is flushed) and an LRU block cache of
    /// the rest. LevelDB has no direct I/O.
    pub fn open(dir: &Path, cfg: &EngineConfig) -> BenchResult<LevelDbEngine> {
        if cfg.no_wal {
            return Err(BenchError::new(
                "LevelDB cannot write without its write-ahead log (--no-wal)",
            ));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| BenchError::new(format!("creating {}: {e}", dir.display())))?;
        let name = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| BenchError::new(format!("{}: NUL in path", dir.display())))?;
        let split = cfg.split();
        // SAFETY: each object is created by the C API and handed to the options object, which
        // only keeps the pointers; all of them outlive the database (see Drop) and are
        // destroyed after it is closed. leveldb_open reads the options and the path, both valid.
        unsafe {
            let options = ffi::leveldb_options_create();
            let cache = ffi::leveldb_cache_create_lru(split.cache_bytes as usize);
            let filter = ffi::leveldb_filterpolicy_create_bloom(10);
            ffi::leveldb_options_set_create_if_missing(options, 1);
            ffi::leveldb_options_set_write_buffer_size(options, split.write_buffer_bytes as usize);
            ffi::leveldb_options_set_cache(options, cache);
            ffi::leveldb_options_set_filter_policy(options, filter);
            ffi::leveldb_options_set_compression(options, ffi::NO_COMPRESSION);
            ffi::leveldb_options_set_max_open_files(options, max_open_files());
            ffi::leveldb_options_set_block_size(options, BLOCK_BYTES);
            ffi::leveldb_options_set_max_file_size(options, MAX_FILE_BYTES);
            let read_opts = ffi::leveldb_readoptions_create();
            let write_opts = ffi::leveldb_writeoptions_create();
            ffi::leveldb_writeoptions_set_sync(write_opts, u8::from(cfg.sync));
            let mut engine = LevelDbEngine {
                db: ptr::null_mut(),
                options,
                read_opts,
                write_opts,
                cache,
                filter,
                wal: Mutex::new(LogModel::default()),
            };
            let mut errptr = ptr::null_mut();
            engine.db = ffi::leveldb_open(options, name.as_ptr(), &mut errptr);
            // On an error, dropping the engine destroys the objects made above.
            check("open", errptr)?;
            if engine.db.is_null() {
                return Err(BenchError::new("leveldb open: no database and no error"));
            }
            Ok(engine)
        }
    }

    fn log(&self, batch: u64) {
        if let Ok(mut m) = self.wal.lock() {
            m.record(batch);
        }
    }

    /// A property's text (`leveldb.sstables`), or None when LevelDB does not know the name.
    fn property(&self, name: &str) -> Option<String> {
        let name = CString::new(name).ok()?;
        // SAFETY: the database is open; a non-null result is a malloc'ed NUL-terminated
        // string, copied and then freed with leveldb_free.
        unsafe {
            let p = ffi::leveldb_property_value(self.db, name.as_ptr());
            if p.is_null() {
                return None;
            }
            let s = CStr::from_ptr(p).to_string_lossy().into_owned();
            ffi::leveldb_free(p.cast::<c_void>());
            Some(s)
        }
    }

    /// Whether LevelDB would still pick a size compaction: its own rule on the current version.
    fn compaction_needed(&self) -> BenchResult<bool> {
        let text = self
            .property("leveldb.sstables")
            .ok_or_else(|| BenchError::new("leveldb: no leveldb.sstables property"))?;
        let levels = level_sizes(&text)?;
        Ok(compaction_score(&levels) >= 1.0)
    }
}

/// Files and bytes per level from the `leveldb.sstables` property, whose lines are
/// `--- level N ---` and ` NUMBER:SIZE[SMALLEST .. LARGEST]`.
fn level_sizes(text: &str) -> BenchResult<[(u64, u64); LEVELS]> {
    let bad = |l: &str| BenchError::new(format!("leveldb.sstables: unexpected line {l:?}"));
    let mut levels = [(0u64, 0u64); LEVELS];
    let mut level = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("--- level ") {
            let n: usize = rest
                .trim_end_matches(" ---")
                .parse()
                .map_err(|_| bad(line))?;
            level = Some(n.min(LEVELS - 1));
        } else if !line.trim().is_empty() {
            let l = level.ok_or_else(|| bad(line))?;
            let size: u64 = line
                .trim_start()
                .split_once(':')
                .and_then(|(_, rest)| rest.split('[').next())
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad(line))?;
            levels[l].0 += 1;
            levels[l].1 += size;
        }
    }
    Ok(levels)
}

/// LevelDB's compaction score (`VersionSet::Finalize`): level 0 by file count, the others by
/// bytes against 10^L MiB; the last level is not scored. A score of 1 or more is a compaction
/// LevelDB has scheduled or is running.
fn compaction_score(levels: &[(u64, u64); LEVELS]) -> f64 {
    let mut best = levels[0].0 as f64 / L0_COMPACTION_TRIGGER as f64;
    let mut max_bytes = LEVEL1_MAX_BYTES as f64;
    for &(_, bytes) in &levels[1..LEVELS - 1] {
        best = best.max(bytes as f64 / max_bytes);
        max_bytes *= 10.0;
    }
    best
}

/// The bytes LevelDB's log writer appends for one-put write batches (`db/log_writer.cc`):
/// the batch is a record, cut into fragments at 32 KiB block boundaries, each fragment with a
/// 7-byte header, and a block tail shorter than a header is zero-filled. Exact but for the
/// block tails of each new log file (LevelDB starts one per memtable), at most 6 bytes per
/// 32 KiB.
#[derive(Clone, Copy, Debug, Default)]
struct LogModel {
    block_offset: u64,
    bytes: u64,
}

fn varint_len(mut v: u64) -> u64 {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// A one-operation write batch: its header (sequence, count), then the type byte and the
/// length-prefixed key and, for a put, value.
fn batch_len(key_len: usize, value_len: Option<usize>) -> u64 {
    let k = key_len as u64;
    let v = value_len.map_or(0, |v| varint_len(v as u64) + v as u64);
    BATCH_HEADER + 1 + varint_len(k) + k + v
}

impl LogModel {
    fn record(&mut self, len: u64) {
        let mut left = len;
        loop {
            let leftover = LOG_BLOCK - self.block_offset;
            if leftover < LOG_HEADER {
                self.bytes += leftover;
                self.block_offset = 0;
            }
            let avail = LOG_BLOCK - self.block_offset - LOG_HEADER;
            let frag = left.min(avail);
            self.bytes += LOG_HEADER + frag;
            self.block_offset += LOG_HEADER + frag;
            left -= frag;
            if left == 0 {
                return;
            }
        }
    }
}

impl Drop for LevelDbEngine {
    fn drop(&mut self) {
        // SAFETY: every pointer was created by the C API in open and is destroyed once here;
        // the database goes first (leveldb_close waits for its background thread) because it
        // uses the cache, the filter policy and the options.
        unsafe {
            if !self.db.is_null() {
                ffi::leveldb_close(self.db);
                self.db = ptr::null_mut();
            }
            ffi::leveldb_readoptions_destroy(self.read_opts);
            ffi::leveldb_writeoptions_destroy(self.write_opts);
            ffi::leveldb_options_destroy(self.options);
            ffi::leveldb_filterpolicy_destroy(self.filter);
            ffi::leveldb_cache_destroy(self.cache);
        }
    }
}

impl Engine for LevelDbEngine {
    fn name(&self) -> String {
        "leveldb".into()
    }

    fn direct_io(&self) -> bool {
        false
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        let mut errptr = ptr::null_mut();
        // SAFETY: the database is open; key and value are valid for their lengths and LevelDB
        // copies them before returning.
        unsafe {
            ffi::leveldb_put(
                self.db,
                self.write_opts,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut errptr,
            );
        }
        check("put", errptr)?;
        self.log(batch_len(key.len(), Some(value.len())));
        Ok(())
    }

    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        let mut errptr = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: the database is open and the key valid for its length; a non-null result is
        // a malloc'ed array of `len` bytes, copied and then freed with leveldb_free.
        let value = unsafe {
            let p = ffi::leveldb_get(
                self.db,
                self.read_opts,
                key.as_ptr().cast(),
                key.len(),
                &mut len,
                &mut errptr,
            );
            if p.is_null() {
                None
            } else {
                let v = std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec();
                ffi::leveldb_free(p.cast::<c_void>());
                Some(v)
            }
        };
        check("get", errptr)?;
        Ok(value)
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        let mut errptr = ptr::null_mut();
        // SAFETY: the database is open and the key valid for its length (copied by LevelDB).
        unsafe {
            ffi::leveldb_delete(
                self.db,
                self.write_opts,
                key.as_ptr().cast(),
                key.len(),
                &mut errptr,
            );
        }
        check("delete", errptr)?;
        self.log(batch_len(key.len(), None));
        Ok(())
    }

    fn scan(
        &self,
        start: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> BenchResult<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let mut n = 0;
        let mut errptr = ptr::null_mut();
        // SAFETY: the database is open; the iterator is created, used only here and destroyed
        // before returning; the key and value slices it returns are valid until it moves, and
        // `visit` sees them only before the next call on it.
        unsafe {
            let it = ffi::leveldb_create_iterator(self.db, self.read_opts);
            if start.is_empty() {
                ffi::leveldb_iter_seek_to_first(it);
            } else {
                ffi::leveldb_iter_seek(it, start.as_ptr().cast(), start.len());
            }
            while ffi::leveldb_iter_valid(it) != 0 {
                let (mut klen, mut vlen) = (0usize, 0usize);
                let k = ffi::leveldb_iter_key(it, &mut klen);
                let v = ffi::leveldb_iter_value(it, &mut vlen);
                visit(
                    std::slice::from_raw_parts(k.cast::<u8>(), klen),
                    std::slice::from_raw_parts(v.cast::<u8>(), vlen),
                );
                n += 1;
                if n == limit {
                    break;
                }
                ffi::leveldb_iter_next(it);
            }
            ffi::leveldb_iter_get_error(it, &mut errptr);
            ffi::leveldb_iter_destroy(it);
        }
        check("iterator", errptr)?;
        Ok(n)
    }

    fn drain(&mut self) -> BenchResult<()> {
        // The C API has no Flush. CompactRange flushes the memtable first (and waits), then
        // compacts what overlaps the range in each level: a range above every key (all 0xff,
        // longer than any key) overlaps no table, so only the flush happens.
        let above = vec![0xffu8; 4096];
        // SAFETY: the database is open and the range keys are valid for their lengths.
        unsafe {
            ffi::leveldb_compact_range(
                self.db,
                above.as_ptr().cast(),
                above.len(),
                above.as_ptr().cast(),
                above.len(),
            );
        }
        // Then LevelDB's own compactions: it has no "pending" property, so wait until its
        // compaction rule picks nothing. A running compaction keeps its inputs in the current
        // version, so their score stays at 1 or more until it is installed.
        while self.compaction_needed()? {
            thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn counters(&self) -> OwnCounters {
        OwnCounters {
            written: None,
            wal_written: Some(self.wal.lock().map_or(0, |m| m.bytes)),
            user_read: None,
            user_reads: None,
            ..Default::default()
        }
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        // Drop closes the database (joining its background thread) and frees the options.
        drop(self);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sstables_property_parses() {
        let text = "--- level 0 ---\n 7:2097152['a' @ 1 : 1 .. 'z' @ 2 : 1]\n \
                    9:1000['a' @ 3 : 1 .. 'b' @ 4 : 1]\n--- level 1 ---\n--- level 2 ---\n \
                    5:300['c' @ 5 : 1 .. 'd' @ 6 : 1]\n--- level 3 ---\n--- level 4 ---\n\
                    --- level 5 ---\n--- level 6 ---\n";
        let l = level_sizes(text).unwrap();
        assert_eq!(l[0], (2, 2_098_152));
        assert_eq!(l[2], (1, 300));
        assert!(compaction_score(&l) < 1.0);
        let mut full = l;
        full[0].0 = 4;
        assert!(compaction_score(&full) >= 1.0);
        full[0].0 = 0;
        full[1].1 = 11 << 20;
        assert!(compaction_score(&full) >= 1.0);
        full[1].1 = 0;
        full[6].1 = 1 << 40;
        assert!(
            compaction_score(&full) < 1.0,
            "the last level is not scored"
        );
    }

    #[test]
    fn log_model_counts_headers_and_block_tails() {
        let mut m = LogModel::default();
        m.record(batch_len(24, Some(100)));
        // 7 header + 12 batch header + 1 type + 1 + 24 + 1 + 100.
        assert_eq!(m.bytes, 146);
        let mut m = LogModel {
            block_offset: LOG_BLOCK - 5,
            bytes: 0,
        };
        m.record(batch_len(24, Some(100)));
        assert_eq!(m.bytes, 5 + 146, "a 5-byte tail is padding");
        let mut m = LogModel {
            block_offset: LOG_BLOCK - 50,
            bytes: 0,
        };
        m.record(batch_len(24, Some(100)));
        assert_eq!(m.bytes, 146 + 7, "split in two fragments");
        let mut m = LogModel::default();
        m.record(batch_len(24, None));
        assert_eq!(m.bytes, 7 + 12 + 1 + 1 + 24);
    }
}
