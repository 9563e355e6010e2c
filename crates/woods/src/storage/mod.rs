//! Every file operation woods performs goes through [`Fs`]: the real backend ([`RealFs`]) and a
//! fault-injecting in-memory one ([`FaultFs`]) used by the crash and power-cut tests.
//!
//! On top of it, [`PageFile`] addresses the data file in 4 KiB pages, counts every device read and
//! write by purpose, and hands out page ranges through the [`Allocator`].

mod aligned;
mod alloc;
mod fault;
mod io;
mod pagefile;
mod real;
mod stamp;

use std::any::Any;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[doc(hidden)]
pub use aligned::AlignedBuf;
#[doc(hidden)]
pub use alloc::{Allocator, Extent};
pub use fault::{CutPoint, FaultFs, FaultPlan, PowerCut};
#[doc(hidden)]
pub use io::Pending;
#[cfg(test)]
pub(crate) use pagefile::before_device_read;
pub(crate) use pagefile::{arm_before_read, BeforeRead, ReadHook};
#[doc(hidden)]
pub use pagefile::{
    page_stamp, seal_page, verify, Charge, Done, PageFile, PendingRead, PAGE_BODY, PAGE_SIZE,
    PAGE_TRAILER,
};
pub use real::{RealFs, SharedMap};
#[doc(hidden)]
pub use stamp::{check_rollbacks, RollbackPoint, Stamp, Stamps};

use crate::error::Result;

/// How a file is opened.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenMode {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Ask for direct I/O (bypassing the OS page cache). Backends that cannot do it fall back to
    /// buffered I/O; [`File::is_direct`] says which is in effect.
    pub direct: bool,
}

/// Reads the whole of `file` into memory (a log or manifest file, read once at open or repair);
/// `what` names it in the corruption error for a length that does not fit this address space.
pub(crate) fn read_whole(file: &dyn File, what: &str) -> Result<Vec<u8>> {
    let len = file.len()?;
    let len = usize::try_from(len).map_err(|_| {
        crate::error::Error::corruption(what.to_owned(), None, format!("length {len} too large"))
    })?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

/// A file system: the only way woods touches files.
pub trait Fs: Send + Sync + 'static {
    /// Creates `dir` and its missing parents (an existing directory is no error).
    fn create_dir_all(&self, dir: &Path) -> Result<()>;
    /// Opens (with `mode.create`, creates) the file at `path` for reading and writing.
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn File>>;
    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Removes the file at `path` (durable once its directory is synced).
    fn remove(&self, path: &Path) -> Result<()>;
    /// Renames `from` to `to`, replacing `to` atomically (durable once the directory is synced).
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// File names (not paths) in a directory.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;
    /// Makes creations, renames and removals in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// Takes an exclusive lock on `path` (created if needed) for as long as the guard lives.
    /// A lock already held, by this process or another, is `Error::Locked`.
    fn lock(&self, path: &Path) -> Result<Box<dyn Any + Send + Sync>>;
    /// A tag of the machine's current boot, non-zero, or 0 where the backend cannot tell.
    ///
    /// Files written in this boot cannot have lost what was written to them to a power cut
    /// (that needs a new boot), only to damage: the log's recovery uses it to tell a torn tail
    /// from a damaged record ([`crate::wal::replay`]).
    fn boot_tag(&self) -> u32 {
        0
    }
}

/// An open file. Positional reads and writes only; no shared cursor.
#[allow(clippy::len_without_is_empty)]
pub trait File: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `off`; reading past the end is an error.
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> Result<()>;
    /// Reads up to `buf.len()` bytes at `off`, returning how many were read (fewer at the end).
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<usize>;
    /// Writes all of `buf` at `off`, extending the file if needed (durable after `sync`).
    fn write_all_at(&self, buf: &[u8], off: u64) -> Result<()>;
    /// Makes every completed write durable (fdatasync).
    fn sync(&self) -> Result<()>;
    /// The file's length in bytes.
    fn len(&self) -> Result<u64>;
    /// Truncates or extends (with zeros) the file to `len` bytes.
    fn set_len(&self, len: u64) -> Result<()>;
    /// Whether the file was opened with direct I/O.
    fn is_direct(&self) -> bool;
    /// Gives the space of `len` bytes at `off` back to the file system (a hole reading as
    /// zeros; the file's length is unchanged). Only for bytes nothing will read again before
    /// overwriting them. A file system that cannot punch holes does nothing.
    fn punch_hole(&self, _off: u64, _len: u64) -> Result<()> {
        Ok(())
    }
    /// Allocates the first `len` bytes of the file (extending it with zeros) and maps them for
    /// writing, shared with the page cache: bytes stored through the map are in the OS when the
    /// store returns, as after [`File::write_all_at`], and [`File::sync`] makes them durable.
    /// `None` where the backend or the file system cannot (the fault-injecting backend, a file
    /// system without `fallocate`): the caller writes with `write_all_at` instead. The space is
    /// allocated up front, so a full device is an error here rather than a fault (`SIGBUS`) when a
    /// store first touches a page (the file system may still need a little metadata later, when
    /// it converts the allocated extents to written ones).
    fn map_for_append(&self, _len: u64) -> Result<Option<SharedMap>> {
        Ok(None)
    }
}

/// Why a device read or write happened; every counter is kept per purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Purpose {
    /// The write-ahead log.
    Wal = 0,
    /// Moving a memtable into the index.
    Flush = 1,
    /// Reorganisation inside the index: merges, compactions, B-tree page rewrites.
    Merge = 2,
    /// Reads serving user gets and scans.
    UserRead = 3,
    /// The manifest logs and `CURRENT`.
    Manifest = 4,
}

impl Purpose {
    /// Every purpose, in index order.
    pub const ALL: [Purpose; 5] = [
        Purpose::Wal,
        Purpose::Flush,
        Purpose::Merge,
        Purpose::UserRead,
        Purpose::Manifest,
    ];
    /// The short name used in `woods stats` (`wal`, `flush`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Purpose::Wal => "wal",
            Purpose::Flush => "flush",
            Purpose::Merge => "merge",
            Purpose::UserRead => "user_read",
            Purpose::Manifest => "manifest",
        }
    }
}

/// Device I/O counters, per purpose. Cheap atomics, always on.
#[derive(Default, Debug)]
#[doc(hidden)]
pub struct IoCounters {
    read_bytes: [AtomicU64; 5],
    read_ops: [AtomicU64; 5],
    write_bytes: [AtomicU64; 5],
    write_ops: [AtomicU64; 5],
    syncs: AtomicU64,
    data_reads: AtomicU64,
    data_reads_contiguous: AtomicU64,
    /// One past the page after the last data-file read (0: none yet).
    next_read_page: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IoSnapshot {
    /// Bytes read, indexed by [`Purpose`] (`read_bytes[Purpose::Flush as usize]`).
    pub read_bytes: [u64; 5],
    /// Read calls, by purpose.
    pub read_ops: [u64; 5],
    /// Bytes written, by purpose.
    pub write_bytes: [u64; 5],
    /// Write calls, by purpose.
    pub write_ops: [u64; 5],
    /// File and directory syncs.
    pub syncs: u64,
    /// Device read requests of the data file, whatever their purpose (cache misses, scans'
    /// windows, read-ahead).
    pub data_reads: u64,
    /// Of [`data_reads`](IoSnapshot::data_reads), those that began at the page right after the
    /// previous request's last page: the numerator of seed 004 ch. 4's dynamic layout score
    /// (spec §2.3), the share of requests contiguous with the one before.
    pub data_reads_contiguous: u64,
}

impl IoSnapshot {
    /// Bytes written for every purpose together.
    pub fn total_written(&self) -> u64 {
        self.write_bytes.iter().sum()
    }
    /// Bytes read for every purpose together.
    pub fn total_read(&self) -> u64 {
        self.read_bytes.iter().sum()
    }
    /// Bytes written for one purpose.
    pub fn written(&self, p: Purpose) -> u64 {
        self.write_bytes[p as usize]
    }
    /// Bytes read for one purpose.
    pub fn read(&self, p: Purpose) -> u64 {
        self.read_bytes[p as usize]
    }
}

impl IoCounters {
    pub fn record_read(&self, p: Purpose, bytes: usize) {
        self.read_bytes[p as usize].fetch_add(bytes as u64, Ordering::Relaxed);
        self.read_ops[p as usize].fetch_add(1, Ordering::Relaxed);
    }
    pub fn record_write(&self, p: Purpose, bytes: usize) {
        self.write_bytes[p as usize].fetch_add(bytes as u64, Ordering::Relaxed);
        self.write_ops[p as usize].fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a device read of `pages` data-file pages from `start`, and whether it began where
    /// the previous one ended (two relaxed atomics and a swap: cheap enough to stay on).
    pub fn record_data_read(&self, start: u64, pages: u64) {
        let prev = self
            .next_read_page
            .swap(start + pages + 1, Ordering::Relaxed);
        self.data_reads.fetch_add(1, Ordering::Relaxed);
        if prev == start + 1 {
            self.data_reads_contiguous.fetch_add(1, Ordering::Relaxed);
        }
    }
    pub fn record_sync(&self) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> IoSnapshot {
        let load = |a: &[AtomicU64; 5]| {
            let mut out = [0u64; 5];
            for (o, v) in out.iter_mut().zip(a.iter()) {
                *o = v.load(Ordering::Relaxed);
            }
            out
        };
        IoSnapshot {
            read_bytes: load(&self.read_bytes),
            read_ops: load(&self.read_ops),
            write_bytes: load(&self.write_bytes),
            write_ops: load(&self.write_ops),
            syncs: self.syncs.load(Ordering::Relaxed),
            data_reads: self.data_reads.load(Ordering::Relaxed),
            data_reads_contiguous: self.data_reads_contiguous.load(Ordering::Relaxed),
        }
    }
}
