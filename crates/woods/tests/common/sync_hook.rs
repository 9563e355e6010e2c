//! A file system over the real one that calls a hook before each sync of a file other than a
//! log file (the data file, the manifest: the index's syncs) and before each removal; a log
//! file's own syncs are the writers' and pass untouched. With it,
//! `writer_never_syncs_for_index_work` counts each thread's index syncs and removals, and
//! `frozen_memtables_capped_while_commits_are_slow` makes the index's syncs slow.

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use woods::storage::{File, Fs, OpenMode, RealFs, SharedMap};

/// What the hook is called before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A sync of a file other than a log file.
    IndexSync,
    /// A removal of a file.
    Remove,
}

/// The real file system, calling a hook before each index sync and each removal.
pub struct SyncHookFs {
    hook: Arc<dyn Fn(Event) + Send + Sync>,
}

impl SyncHookFs {
    /// The real file system, calling `hook` before each index sync and each removal (in the
    /// thread that makes it).
    pub fn new(hook: impl Fn(Event) + Send + Sync + 'static) -> SyncHookFs {
        SyncHookFs {
            hook: Arc::new(hook),
        }
    }
}

struct HookedFile {
    inner: Arc<dyn File>,
    /// A log file: its syncs are the log's, not the index's.
    log: bool,
    hook: Arc<dyn Fn(Event) + Send + Sync>,
}

impl Fs for SyncHookFs {
    fn create_dir_all(&self, dir: &Path) -> woods::Result<()> {
        RealFs.create_dir_all(dir)
    }
    fn open(&self, path: &Path, mode: OpenMode) -> woods::Result<Arc<dyn File>> {
        let log = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("wal-") && n.ends_with(".log"));
        Ok(Arc::new(HookedFile {
            inner: RealFs.open(path, mode)?,
            log,
            hook: self.hook.clone(),
        }))
    }
    fn exists(&self, path: &Path) -> bool {
        RealFs.exists(path)
    }
    fn remove(&self, path: &Path) -> woods::Result<()> {
        (self.hook)(Event::Remove);
        RealFs.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> woods::Result<()> {
        RealFs.rename(from, to)
    }
    fn list(&self, dir: &Path) -> woods::Result<Vec<String>> {
        RealFs.list(dir)
    }
    fn sync_dir(&self, dir: &Path) -> woods::Result<()> {
        RealFs.sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> woods::Result<Box<dyn Any + Send + Sync>> {
        RealFs.lock(path)
    }
}

impl File for HookedFile {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> woods::Result<()> {
        self.inner.read_exact_at(buf, off)
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> woods::Result<usize> {
        self.inner.read_at(buf, off)
    }
    fn write_all_at(&self, buf: &[u8], off: u64) -> woods::Result<()> {
        self.inner.write_all_at(buf, off)
    }
    fn sync(&self) -> woods::Result<()> {
        if !self.log {
            (self.hook)(Event::IndexSync);
        }
        self.inner.sync()
    }
    fn len(&self) -> woods::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> woods::Result<()> {
        self.inner.set_len(len)
    }
    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }
    fn punch_hole(&self, off: u64, len: u64) -> woods::Result<()> {
        self.inner.punch_hole(off, len)
    }
    fn map_for_append(&self, len: u64) -> woods::Result<Option<SharedMap>> {
        self.inner.map_for_append(len)
    }
}
