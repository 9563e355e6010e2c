//! The real file system backend: `std::fs` plus `O_DIRECT` and `flock` through libc.

use std::any::Any;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use super::{File, Fs, OpenMode};
use crate::error::{Error, Result};

/// The operating system's file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

struct RealFile {
    file: fs::File,
    direct: bool,
    name: String,
}

struct LockGuard {
    _file: fs::File,
}

fn ctx(op: &str, path: &Path) -> String {
    format!("{op} {}", path.display())
}

/// Whether the kernel reads and writes `file` with direct I/O: its status flags, not the flags
/// it was opened with, so that `File::is_direct` (and `Stats::direct_io`) reports what is in
/// effect.
fn has_o_direct(file: &fs::File) -> bool {
    // SAFETY: F_GETFL on a valid, owned descriptor; it touches no memory of ours.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    flags != -1 && flags & libc::O_DIRECT != 0
}

impl Fs for RealFs {
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir).map_err(|e| Error::io(ctx("creating directory", dir), e))
    }

    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn File>> {
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(mode.create);
        if mode.direct {
            let mut od = o.clone();
            od.custom_flags(libc::O_DIRECT);
            match od.open(path) {
                Ok(file) => {
                    return Ok(Arc::new(RealFile {
                        direct: has_o_direct(&file),
                        file,
                        name: path.display().to_string(),
                    }))
                }
                // File systems without direct I/O (tmpfs) refuse the flag: fall back cleanly.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(Error::io(ctx("opening", path), e)),
            }
        }
        let file = o
            .open(path)
            .map_err(|e| Error::io(ctx("opening", path), e))?;
        Ok(Arc::new(RealFile {
            file,
            direct: false,
            name: path.display().to_string(),
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn remove(&self, path: &Path) -> Result<()> {
        fs::remove_file(path).map_err(|e| Error::io(ctx("removing", path), e))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        fs::rename(from, to).map_err(|e| Error::io(ctx("renaming", from), e))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir).map_err(|e| Error::io(ctx("listing", dir), e))? {
            let e = e.map_err(|e| Error::io(ctx("listing", dir), e))?;
            if let Some(n) = e.file_name().to_str() {
                out.push(n.to_string());
            }
        }
        out.sort();
        Ok(out)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let d = fs::File::open(dir).map_err(|e| Error::io(ctx("opening directory", dir), e))?;
        d.sync_all()
            .map_err(|e| Error::io(ctx("syncing directory", dir), e))
    }

    /// A checksum of Linux's `/proc/sys/kernel/random/boot_id`, read once; 0 elsewhere.
    fn boot_tag(&self) -> u32 {
        static TAG: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        *TAG.get_or_init(|| match fs::read("/proc/sys/kernel/random/boot_id") {
            Ok(id) if !id.is_empty() => crc32c::crc32c(&id).max(1),
            _ => 0,
        })
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn Any + Send + Sync>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(ctx("opening lock file", path), e))?;
        // SAFETY: flock on a valid, owned descriptor.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let dir = path.parent().unwrap_or(path);
                return Err(Error::Locked {
                    path: dir.display().to_string(),
                });
            }
            return Err(Error::io(ctx("locking", path), e));
        }
        Ok(Box::new(LockGuard { _file: file }))
    }
}

impl File for RealFile {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> Result<()> {
        self.file.read_exact_at(buf, off).map_err(|e| {
            Error::io(
                format!("reading {} bytes at {off} of {}", buf.len(), self.name),
                e,
            )
        })
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], off + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(format!("reading at {off} of {}", self.name), e)),
            }
        }
        Ok(done)
    }

    fn write_all_at(&self, buf: &[u8], off: u64) -> Result<()> {
        self.file.write_all_at(buf, off).map_err(|e| {
            Error::io(
                format!("writing {} bytes at {off} of {}", buf.len(), self.name),
                e,
            )
        })
    }

    fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io(format!("syncing {}", self.name), e))
    }

    fn len(&self) -> Result<u64> {
        Ok(self
            .file
            .metadata()
            .map_err(|e| Error::io(format!("stat of {}", self.name), e))?
            .len())
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.file
            .set_len(len)
            .map_err(|e| Error::io(format!("resizing {}", self.name), e))
    }

    fn punch_hole(&self, off: u64, len: u64) -> Result<()> {
        let (Ok(o), Ok(l)) = (i64::try_from(off), i64::try_from(len)) else {
            return Ok(());
        };
        // SAFETY: fallocate on a descriptor this file owns, with in-range offsets; it touches no
        // memory of ours.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                o,
                l,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            // Not supported by this file system: the space stays allocated, nothing is wrong.
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(()),
            _ => Err(Error::io(
                format!("punching a hole of {len} bytes at {off} in {}", self.name),
                e,
            )),
        }
    }

    fn is_direct(&self) -> bool {
        self.direct
    }

    fn map_for_append(&self, len: u64) -> Result<Option<SharedMap>> {
        let (Ok(l), Ok(n)) = (i64::try_from(len), usize::try_from(len)) else {
            return Ok(None);
        };
        if n == 0 {
            return Ok(None);
        }
        let fd = self.file.as_raw_fd();
        // SAFETY: fallocate on a descriptor this file owns; it touches no memory of ours.
        if unsafe { libc::fallocate(fd, 0, 0, l) } != 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(None),
                _ => Err(Error::io(
                    format!("allocating {len} bytes of {}", self.name),
                    e,
                )),
            };
        }
        // SAFETY: a new shared mapping of `n` bytes of a descriptor this file owns, now at
        // least `n` bytes long; the kernel picks the address. The mapping keeps the file open
        // on its own, and `SharedMap` unmaps it exactly once.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Ok(None);
        }
        Ok(Some(SharedMap {
            ptr: ptr.cast(),
            len: n,
        }))
    }
}

/// The first bytes of a file mapped for writing and shared with the page cache
/// ([`File::map_for_append`]); unmapped when dropped (what was stored stays in the page cache,
/// and in the file).
pub struct SharedMap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; writes need `&mut self`.
unsafe impl Send for SharedMap {}
// SAFETY: `&self` gives no access to the memory.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Bytes mapped (from offset 0 of the file).
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Whether nothing is mapped (never: a mapping has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Stores `buf` at file offset `off`; returns false, storing nothing, if it does not fit.
    pub fn write_at(&mut self, buf: &[u8], off: u64) -> bool {
        let Ok(off) = usize::try_from(off) else {
            return false;
        };
        if off.checked_add(buf.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: `off..off + buf.len()` is inside the mapping (checked above), which lives as
        // long as `self`; `buf` is ordinary memory, not part of the mapping.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), self.ptr.add(off), buf.len()) };
        true
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map_for_append`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
