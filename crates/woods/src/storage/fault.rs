//! An in-memory file system that remembers what has been made durable, so tests can cut the power
//! (discarding every write and directory change no completed sync covers), kill the "process"
//! (keeping unsynced writes, as the OS page cache would), or fail the Nth mutating operation.

use std::any::Any;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{File, Fs, OpenMode};
use crate::error::{Error, Result};

/// When to inject a failure.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// Fail the mutating operation (write, sync, rename, remove, directory sync) with this
    /// 0-based index, counted from when the plan is set.
    pub fail_op: Option<u64>,
    /// Keep failing every mutating operation after the first failure.
    pub sticky: bool,
}

#[derive(Default)]
struct FileData {
    current: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Default)]
struct State {
    files: HashMap<u64, FileData>,
    dir_current: BTreeMap<PathBuf, u64>,
    dir_durable: BTreeMap<PathBuf, u64>,
    dirs: HashSet<PathBuf>,
    next_id: u64,
    generation: u64,
    locks: HashSet<PathBuf>,
    plan: FaultPlan,
    ops_since_plan: u64,
    failed: bool,
    injected: u64,
}

impl State {
    fn check_fault(&mut self, what: &str) -> Result<()> {
        let n = self.ops_since_plan;
        self.ops_since_plan += 1;
        let hit = self.plan.fail_op == Some(n) || (self.failed && self.plan.sticky);
        if hit {
            self.failed = true;
            self.injected += 1;
            return Err(Error::io(
                what.to_string(),
                io::Error::other("injected fault"),
            ));
        }
        Ok(())
    }
}

/// The fault-injecting file system. Cloning gives another handle to the same files.
#[derive(Clone, Default)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
}

struct FaultFile {
    state: Arc<Mutex<State>>,
    id: u64,
    generation: u64,
    name: String,
}

struct FaultLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    generation: u64,
}

impl Drop for FaultLock {
    fn drop(&mut self) {
        let mut s = self.state.lock();
        if s.generation == self.generation {
            s.locks.remove(&self.path);
        }
    }
}

fn dead(name: &str) -> Error {
    Error::io(
        format!("using {name}"),
        io::Error::other("file handle from before a simulated crash"),
    )
}

impl FaultFs {
    pub fn new() -> FaultFs {
        FaultFs::default()
    }

    /// Sets the failure plan; operation counting starts again from zero.
    pub fn set_plan(&self, plan: FaultPlan) {
        let mut s = self.state.lock();
        s.plan = plan;
        s.ops_since_plan = 0;
        s.failed = false;
    }

    /// How many failures have been injected since the filesystem was made.
    pub fn injected(&self) -> u64 {
        self.state.lock().injected
    }

    /// Mutating operations counted since the plan was last set.
    pub fn ops(&self) -> u64 {
        self.state.lock().ops_since_plan
    }

    /// The machine loses power: every write and directory change not covered by a completed sync
    /// is discarded, and every handle opened before is dead.
    pub fn power_cut(&self) {
        let mut s = self.state.lock();
        s.generation += 1;
        s.locks.clear();
        s.dir_current = s.dir_durable.clone();
        let live: HashSet<u64> = s.dir_durable.values().copied().collect();
        s.files.retain(|id, _| live.contains(id));
        for f in s.files.values_mut() {
            f.current = f.durable.clone();
        }
        s.plan = FaultPlan::default();
        s.failed = false;
    }

    /// A power cut after which the file at `keep` (if its name was durable) holds everything
    /// written to it, synced or not, as when the OS happened to write back a newer file and not
    /// an older one; everything else is as after [`power_cut`](FaultFs::power_cut).
    pub fn power_cut_keeping(&self, keep: &Path) {
        let kept = {
            let s = self.state.lock();
            s.dir_durable
                .get(keep)
                .and_then(|id| s.files.get(id).map(|f| (*id, f.current.clone())))
        };
        self.power_cut();
        if let Some((id, data)) = kept {
            let mut s = self.state.lock();
            if let Some(f) = s.files.get_mut(&id) {
                f.current = data.clone();
                f.durable = data;
            }
        }
    }

    /// The process is killed: written data stays (the OS has it), every handle is dead.
    pub fn kill_process(&self) {
        let mut s = self.state.lock();
        s.generation += 1;
        s.locks.clear();
        s.plan = FaultPlan::default();
        s.failed = false;
    }

    /// Flips one byte of a file's current and durable contents (for corruption tests).
    pub fn flip_byte(&self, path: &Path, off: u64) -> bool {
        let mut s = self.state.lock();
        let Some(&id) = s.dir_current.get(path) else {
            return false;
        };
        let Some(f) = s.files.get_mut(&id) else {
            return false;
        };
        let off = off as usize;
        if off >= f.current.len() {
            return false;
        }
        f.current[off] ^= 0x5a;
        if off < f.durable.len() {
            f.durable[off] ^= 0x5a;
        }
        true
    }

    /// An independent file system holding a copy of this one's files, names and durable state,
    /// with no locks held and no fault plan: many experiments can start from one prepared
    /// database without rebuilding it. State this copy does not name starts at its default.
    pub fn fork(&self) -> FaultFs {
        let s = self.state.lock();
        let files = s
            .files
            .iter()
            .map(|(&id, f)| {
                // The base keeps this compiling, with defaults, when fields are added.
                #[allow(clippy::needless_update)]
                let copy = FileData {
                    current: f.current.clone(),
                    durable: f.durable.clone(),
                    ..FileData::default()
                };
                (id, copy)
            })
            .collect();
        let state = State {
            files,
            dir_current: s.dir_current.clone(),
            dir_durable: s.dir_durable.clone(),
            dirs: s.dirs.clone(),
            next_id: s.next_id,
            generation: s.generation,
            ..State::default()
        };
        FaultFs {
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// Current size of a file, if it exists.
    pub fn file_len(&self, path: &Path) -> Option<u64> {
        let s = self.state.lock();
        let id = s.dir_current.get(path)?;
        s.files.get(id).map(|f| f.current.len() as u64)
    }
}

impl Fs for FaultFs {
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.state.lock().dirs.insert(dir.to_path_buf());
        Ok(())
    }

    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn File>> {
        let mut s = self.state.lock();
        let id = match s.dir_current.get(path) {
            Some(&id) => id,
            None if mode.create => {
                let id = s.next_id;
                s.next_id += 1;
                s.files.insert(id, FileData::default());
                s.dir_current.insert(path.to_path_buf(), id);
                id
            }
            None => {
                return Err(Error::io(
                    format!("opening {}", path.display()),
                    io::Error::new(io::ErrorKind::NotFound, "no such file"),
                ))
            }
        };
        Ok(Arc::new(FaultFile {
            state: self.state.clone(),
            id,
            generation: s.generation,
            name: path.display().to_string(),
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        let s = self.state.lock();
        s.dir_current.contains_key(path) || s.dirs.contains(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut s = self.state.lock();
        s.check_fault(&format!("removing {}", path.display()))?;
        match s.dir_current.remove(path) {
            Some(_) => Ok(()),
            None => Err(Error::io(
                format!("removing {}", path.display()),
                io::Error::new(io::ErrorKind::NotFound, "no such file"),
            )),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut s = self.state.lock();
        s.check_fault(&format!("renaming {}", from.display()))?;
        let Some(id) = s.dir_current.remove(from) else {
            return Err(Error::io(
                format!("renaming {}", from.display()),
                io::Error::new(io::ErrorKind::NotFound, "no such file"),
            ));
        };
        s.dir_current.insert(to.to_path_buf(), id);
        Ok(())
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let s = self.state.lock();
        Ok(s.dir_current
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_string))
            .collect())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut s = self.state.lock();
        s.check_fault(&format!("syncing directory {}", dir.display()))?;
        let in_dir = |p: &PathBuf| p.parent() == Some(dir);
        let mut durable: BTreeMap<PathBuf, u64> = s
            .dir_durable
            .iter()
            .filter(|(p, _)| !in_dir(p))
            .map(|(p, id)| (p.clone(), *id))
            .collect();
        for (p, id) in s.dir_current.iter().filter(|(p, _)| in_dir(p)) {
            durable.insert(p.clone(), *id);
        }
        s.dir_durable = durable;
        Ok(())
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn Any + Send + Sync>> {
        let mut s = self.state.lock();
        if !s.locks.insert(path.to_path_buf()) {
            let dir = path.parent().unwrap_or(path);
            return Err(Error::Locked {
                path: dir.display().to_string(),
            });
        }
        Ok(Box::new(FaultLock {
            state: self.state.clone(),
            path: path.to_path_buf(),
            generation: s.generation,
        }))
    }
}

impl FaultFile {
    fn with<T>(&self, f: impl FnOnce(&mut State, u64) -> Result<T>) -> Result<T> {
        let mut s = self.state.lock();
        if s.generation != self.generation {
            return Err(dead(&self.name));
        }
        f(&mut s, self.id)
    }
}

impl File for FaultFile {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> Result<()> {
        let n = self.read_at(buf, off)?;
        if n < buf.len() {
            return Err(Error::io(
                format!("reading {} bytes at {off} of {}", buf.len(), self.name),
                io::Error::new(io::ErrorKind::UnexpectedEof, "read past end of file"),
            ));
        }
        Ok(())
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        self.with(|s, id| {
            let data = &s.files.get(&id).map(|f| &f.current[..]).unwrap_or(&[]);
            let off = off as usize;
            if off >= data.len() {
                return Ok(0);
            }
            let n = buf.len().min(data.len() - off);
            buf[..n].copy_from_slice(&data[off..off + n]);
            Ok(n)
        })
    }

    fn write_all_at(&self, buf: &[u8], off: u64) -> Result<()> {
        let name = self.name.clone();
        self.with(|s, id| {
            s.check_fault(&format!("writing {} bytes at {off} of {name}", buf.len()))?;
            let f = s.files.entry(id).or_default();
            let end = off as usize + buf.len();
            if f.current.len() < end {
                f.current.resize(end, 0);
            }
            f.current[off as usize..end].copy_from_slice(buf);
            Ok(())
        })
    }

    fn sync(&self) -> Result<()> {
        let name = self.name.clone();
        self.with(|s, id| {
            s.check_fault(&format!("syncing {name}"))?;
            let f = s.files.entry(id).or_default();
            f.durable = f.current.clone();
            Ok(())
        })
    }

    fn len(&self) -> Result<u64> {
        self.with(|s, id| {
            Ok(s.files
                .get(&id)
                .map(|f| f.current.len() as u64)
                .unwrap_or(0))
        })
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let name = self.name.clone();
        self.with(|s, id| {
            s.check_fault(&format!("resizing {name}"))?;
            s.files
                .entry(id)
                .or_default()
                .current
                .resize(len as usize, 0);
            Ok(())
        })
    }

    /// Zeros the range like a hole (within the file's length). Not a fault point: a failed
    /// punch costs only space, so fault plans count writes and syncs alone.
    fn punch_hole(&self, off: u64, len: u64) -> Result<()> {
        self.with(|s, id| {
            if let Some(f) = s.files.get_mut(&id) {
                let end = (off.saturating_add(len) as usize).min(f.current.len());
                let start = (off as usize).min(end);
                f.current[start..end].fill(0);
            }
            Ok(())
        })
    }

    fn is_direct(&self) -> bool {
        false
    }
}
