//! An in-memory file system that remembers what has been made durable, so tests can cut the
//! power, kill the "process" (keeping unsynced writes, as the OS page cache would), or fail the
//! Nth mutating operation.
//!
//! # The power-cut model
//!
//! Each file keeps its contents as of its last completed [`File::sync`] and, in order, every
//! write, `set_len` and hole punch made since; the file system keeps, in order, every creation,
//! rename and removal not yet covered by a [`Fs::sync_dir`] of its directory. A power cut decides
//! what of that unsynced state reaches the device:
//!
//! - [`PowerCut::Strict`] ([`FaultFs::power_cut`]): nothing does. Every file is as at its last
//!   sync, every directory as at its last directory sync.
//! - [`PowerCut::Random`] ([`FaultFs::power_cut_random`]): a seeded random part does, as a disk
//!   with a volatile write cache and a file system that writes back in its own order would leave
//!   it. For each file, starting from its synced contents, each unsynced operation is applied in
//!   order with a probability drawn for that file (0, 1/4, 1/2, 3/4 or 1, so some files lose
//!   everything, some keep everything). A kept write survives whole or, one time in four, torn:
//!   each 512-byte sector it touches (aligned in the file) survives or not on its own, so part of
//!   a 4 KiB page is old and part new; the file's length is old or new, never in between (a
//!   torn write that extended the file leaves zeros in the sectors it lost). A dropped write
//!   that extended the file leaves, one time in eight, the new length with zeros in place of
//!   its bytes (the size reached the device, the data did not). A `set_len` or punch is kept
//!   or dropped whole. The directory operations are likewise a random subset (at a rate drawn
//!   per cut) applied in order to the synced directory, skipping any that no longer applies (a
//!   rename whose source is absent, a removal of a name that now holds another file, a
//!   creation over an existing name). Data and directory operations are chosen independently,
//!   so a file's name may survive without its data and the other way round, and later
//!   operations may survive where earlier ones did not.
//!
//! Either way, what a completed sync covered survives unless a later change to it does: a
//! synced sector is never torn, and a name a directory sync covered stays.
//!
//! A cut can also be planned inside the work of a running database: [`FaultFs::cut_at`] cuts the
//! power at the Nth mutating operation (counted as [`FaultPlan::fail_op`]), which then fails, as
//! does everything after it: every handle is dead and every operation fails until
//! [`FaultFs::power_on`]; [`FaultFs::cut_at_op_on`] counts only the operations on one file (the
//! data file, a manifest), which a log write otherwise outnumbers. [`FaultFs::cut_point`] says
//! which operation it was and on which thread, so a test can tell a cut inside a flush or merge
//! from one inside a user's write. [`FaultFs::power_off`] cuts at once and leaves the power off
//! likewise, so that a database's threads change nothing more before it is dropped. A cut after
//! an injected failure is a [`FaultPlan`] and then a cut.

use std::any::Any;
use std::collections::{BTreeMap, HashSet};
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

/// What of the state no sync covered survives a power cut (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PowerCut {
    /// Nothing unsynced survives.
    #[default]
    Strict,
    /// A random part of it survives, writes torn at 512-byte sectors, chosen by `seed`.
    Random {
        /// Seeds every choice of the cut.
        seed: u64,
    },
}

/// The operation at which a planned power cut ([`FaultFs::cut_at`]) came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutPoint {
    /// Its 0-based index, counted as [`FaultPlan::fail_op`].
    pub op: u64,
    /// What it was doing, e.g. "writing 4096 bytes at 8192 of /db/data.woods".
    pub what: String,
    /// The name of the thread that made it, if it has one (woods' background threads are
    /// `woods-bg-N`).
    pub thread: Option<String>,
}

/// The size of the unit a device writes atomically: a torn write keeps or loses whole sectors.
const SECTOR: u64 = 512;

/// A change to a file's contents that no sync has covered yet.
#[derive(Clone)]
enum DataOp {
    Write { off: u64, bytes: Vec<u8> },
    SetLen(u64),
    Punch { off: u64, len: u64 },
}

/// A change to a directory that no directory sync has covered yet. Each names the file it
/// concerns, so that one that no longer applies after others were lost is skipped.
#[derive(Clone)]
enum DirOp {
    Create { path: PathBuf, id: u64 },
    Rename { from: PathBuf, to: PathBuf, id: u64 },
    Remove { path: PathBuf, id: u64 },
}

impl DirOp {
    fn in_dir(&self, dir: &Path) -> bool {
        let inside = |p: &PathBuf| p.parent() == Some(dir);
        match self {
            DirOp::Create { path, .. } | DirOp::Remove { path, .. } => inside(path),
            DirOp::Rename { from, to, .. } => inside(from) || inside(to),
        }
    }

    fn apply(&self, names: &mut BTreeMap<PathBuf, u64>) {
        match self {
            DirOp::Create { path, id } => {
                names.entry(path.clone()).or_insert(*id);
            }
            DirOp::Rename { from, to, id } => {
                if names.get(from) == Some(id) {
                    names.remove(from);
                    names.insert(to.clone(), *id);
                }
            }
            DirOp::Remove { path, id } => {
                if names.get(path) == Some(id) {
                    names.remove(path);
                }
            }
        }
    }
}

#[derive(Default)]
struct FileData {
    current: Vec<u8>,
    durable: Vec<u8>,
    /// Every change since the last sync, oldest first.
    pending: Vec<DataOp>,
}

/// SplitMix64: the power cut's choices, reproducible from a seed without a dependency.
struct CutRng(u64);

impl CutRng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `num / den`.
    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next() % den < num
    }

    /// A survival rate in quarters: 0 (lose everything) to 4 (keep everything).
    fn quarters(&mut self) -> u64 {
        self.next() % 5
    }
}

/// Writes `bytes` at `off`, extending `data` with zeros as needed.
fn write_at(data: &mut Vec<u8>, off: u64, bytes: &[u8]) {
    let off = off as usize;
    let end = off + bytes.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[off..end].copy_from_slice(bytes);
}

/// Zeros `len` bytes at `off`, within the file's length (a hole).
fn punch(data: &mut [u8], off: u64, len: u64) {
    let end = (off.saturating_add(len) as usize).min(data.len());
    let start = (off as usize).min(end);
    data[start..end].fill(0);
}

impl FileData {
    /// The contents after a random power cut: the synced contents with a random part of the
    /// later changes applied in order, writes kept whole, torn at sectors, or lost.
    fn survivor(&self, rng: &mut CutRng) -> Vec<u8> {
        let rate = rng.quarters();
        let mut data = self.durable.clone();
        for op in &self.pending {
            let kept = rng.chance(rate, 4);
            match op {
                DataOp::Write { off, bytes } => {
                    let end = off + bytes.len() as u64;
                    if !kept {
                        if end > data.len() as u64 && rng.chance(1, 8) {
                            data.resize(end as usize, 0);
                        }
                    } else if rng.chance(1, 4) {
                        let mut s = *off;
                        while s < end {
                            let e = ((s / SECTOR + 1) * SECTOR).min(end);
                            if rng.chance(1, 2) {
                                let from = (s - off) as usize;
                                write_at(&mut data, s, &bytes[from..from + (e - s) as usize]);
                            }
                            s = e;
                        }
                        // The new size is one metadata update: it survives whole.
                        if (data.len() as u64) < end {
                            data.resize(end as usize, 0);
                        }
                    } else {
                        write_at(&mut data, *off, bytes);
                    }
                }
                DataOp::SetLen(len) if kept => data.resize(*len as usize, 0),
                DataOp::Punch { off, len } if kept => punch(&mut data, *off, *len),
                DataOp::SetLen(_) | DataOp::Punch { .. } => {}
            }
        }
        data
    }
}

#[derive(Default)]
struct State {
    files: BTreeMap<u64, FileData>,
    dir_current: BTreeMap<PathBuf, u64>,
    dir_durable: BTreeMap<PathBuf, u64>,
    /// Directory changes no directory sync has covered, oldest first.
    dir_pending: Vec<DirOp>,
    dirs: HashSet<PathBuf>,
    next_id: u64,
    generation: u64,
    locks: HashSet<PathBuf>,
    plan: FaultPlan,
    ops_since_plan: u64,
    failed: bool,
    injected: u64,
    cut_plan: Option<CutPlan>,
    cut_point: Option<CutPoint>,
    /// The power is off: every operation fails until `power_on`.
    off: bool,
    /// Power cuts so far: each is a new boot ([`Fs::boot_tag`]).
    boots: u32,
}

/// A planned power cut: at which operation, and what survives it.
struct CutPlan {
    /// Cut at this 0-based index among the operations counted.
    at: u64,
    /// Count only operations on a path containing this (all, when `None`).
    on: Option<String>,
    /// Operations counted so far.
    seen: u64,
    mode: PowerCut,
}

fn off_error(what: &str) -> Error {
    Error::io(what.to_string(), io::Error::other("the power is off"))
}

impl State {
    fn check_fault(&mut self, what: &str) -> Result<()> {
        if self.off {
            return Err(off_error(what));
        }
        let n = self.ops_since_plan;
        self.ops_since_plan += 1;
        if let Some(plan) = &mut self.cut_plan {
            let counted = plan.on.as_ref().is_none_or(|on| what.contains(on.as_str()));
            let hit = counted && plan.seen == plan.at;
            plan.seen += u64::from(counted);
            if hit {
                let mode = plan.mode;
                self.cut_point = Some(CutPoint {
                    op: n,
                    what: what.to_string(),
                    thread: std::thread::current().name().map(str::to_string),
                });
                self.cut(mode);
                self.off = true;
                return Err(off_error(what));
            }
        }
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

    /// Fails an operation that is no fault point (opening, listing) while the power is off.
    fn check_on(&self, what: impl FnOnce() -> String) -> Result<()> {
        if self.off {
            return Err(off_error(&what()));
        }
        Ok(())
    }

    /// The power fails: the device keeps what `mode` says of the unsynced state, every handle
    /// is dead, and the plans are over.
    fn cut(&mut self, mode: PowerCut) {
        self.generation += 1;
        self.locks.clear();
        match mode {
            PowerCut::Strict => {
                self.dir_current = self.dir_durable.clone();
                for f in self.files.values_mut() {
                    f.current = f.durable.clone();
                }
            }
            PowerCut::Random { seed } => {
                let mut rng = CutRng(seed);
                let rate = rng.quarters();
                let mut names = self.dir_durable.clone();
                for op in &self.dir_pending {
                    if rng.chance(rate, 4) {
                        op.apply(&mut names);
                    }
                }
                self.dir_current = names;
                for f in self.files.values_mut() {
                    f.current = f.survivor(&mut rng);
                }
            }
        }
        self.dir_durable = self.dir_current.clone();
        self.dir_pending.clear();
        let live: HashSet<u64> = self.dir_current.values().copied().collect();
        self.files.retain(|id, _| live.contains(id));
        for f in self.files.values_mut() {
            f.durable = f.current.clone();
            f.pending.clear();
        }
        self.plan = FaultPlan::default();
        self.failed = false;
        self.cut_plan = None;
        self.boots = self.boots.wrapping_add(1);
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
    /// An empty in-memory file system with no fault planned and the power on.
    pub fn new() -> FaultFs {
        FaultFs::default()
    }

    /// Sets the failure plan; operation counting starts again from zero, and a planned power
    /// cut ([`cut_at`](FaultFs::cut_at)) is dropped.
    pub fn set_plan(&self, plan: FaultPlan) {
        let mut s = self.state.lock();
        s.plan = plan;
        s.ops_since_plan = 0;
        s.failed = false;
        s.cut_plan = None;
    }

    /// Plans a power cut at the mutating operation with 0-based index `op`, counted as
    /// [`FaultPlan::fail_op`] (from the last [`set_plan`](FaultFs::set_plan), whose plan stays
    /// in force until the cut). That operation fails, the device keeps what `mode` says, and
    /// the power stays off, every handle dead and every operation failing, until
    /// [`power_on`](FaultFs::power_on).
    pub fn cut_at(&self, op: u64, mode: PowerCut) {
        self.plan_cut(op, None, mode);
    }

    /// Like [`cut_at`](FaultFs::cut_at), counting only the mutating operations on a path that
    /// contains `file` (`"data.woods"`, `"MANIFEST"`): the power fails at the `nth` of them
    /// (0-based), wherever the other operations are.
    pub fn cut_at_op_on(&self, file: &str, nth: u64, mode: PowerCut) {
        self.plan_cut(nth, Some(file.to_string()), mode);
    }

    fn plan_cut(&self, at: u64, on: Option<String>, mode: PowerCut) {
        let mut s = self.state.lock();
        s.cut_plan = Some(CutPlan {
            at,
            on,
            seen: 0,
            mode,
        });
        s.cut_point = None;
    }

    /// Where the last planned power cut came, once it has.
    pub fn cut_point(&self) -> Option<CutPoint> {
        self.state.lock().cut_point.clone()
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
    /// is discarded, and every handle opened before is dead. The power is on again at once.
    pub fn power_cut(&self) {
        self.power_off(PowerCut::Strict);
        self.power_on();
    }

    /// The machine loses power and the device keeps a random part of what no sync covered,
    /// writes torn at sectors (the module doc has the model); every handle opened before is
    /// dead. The power is on again at once.
    pub fn power_cut_random(&self, seed: u64) {
        self.power_off(PowerCut::Random { seed });
        self.power_on();
    }

    /// The machine loses power now, the device keeping what `mode` says; every handle opened
    /// before is dead and every operation fails until [`power_on`](FaultFs::power_on), so that
    /// threads still running against the file system change nothing more. Nothing happens if
    /// the power is already off.
    pub fn power_off(&self, mode: PowerCut) {
        let mut s = self.state.lock();
        if !s.off {
            s.cut(mode);
            s.off = true;
        }
    }

    /// The power is back (after [`power_off`](FaultFs::power_off) or a planned cut): files
    /// can be opened again.
    pub fn power_on(&self) {
        self.state.lock().off = false;
    }

    /// Whether the power is off.
    pub fn is_off(&self) -> bool {
        self.state.lock().off
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
        s.cut_plan = None;
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

    /// An independent file system holding a copy of this one's files, names, durable state and
    /// unsynced changes (so a random power cut of the copy can keep some of them), with no locks
    /// held and no fault or power-cut plan: many experiments can start from one prepared
    /// database without rebuilding it.
    pub fn fork(&self) -> FaultFs {
        let s = self.state.lock();
        let files = s
            .files
            .iter()
            .map(|(&id, f)| {
                let copy = FileData {
                    current: f.current.clone(),
                    durable: f.durable.clone(),
                    pending: f.pending.clone(),
                };
                (id, copy)
            })
            .collect();
        let state = State {
            files,
            dir_current: s.dir_current.clone(),
            dir_durable: s.dir_durable.clone(),
            dir_pending: s.dir_pending.clone(),
            dirs: s.dirs.clone(),
            next_id: s.next_id,
            generation: s.generation,
            boots: s.boots,
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
        let mut s = self.state.lock();
        s.check_on(|| format!("creating {}", dir.display()))?;
        s.dirs.insert(dir.to_path_buf());
        Ok(())
    }

    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn File>> {
        let mut s = self.state.lock();
        s.check_on(|| format!("opening {}", path.display()))?;
        let id = match s.dir_current.get(path) {
            Some(&id) => id,
            None if mode.create => {
                let id = s.next_id;
                s.next_id += 1;
                s.files.insert(id, FileData::default());
                s.dir_current.insert(path.to_path_buf(), id);
                s.dir_pending.push(DirOp::Create {
                    path: path.to_path_buf(),
                    id,
                });
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
        !s.off && (s.dir_current.contains_key(path) || s.dirs.contains(path))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut s = self.state.lock();
        s.check_fault(&format!("removing {}", path.display()))?;
        match s.dir_current.remove(path) {
            Some(id) => {
                s.dir_pending.push(DirOp::Remove {
                    path: path.to_path_buf(),
                    id,
                });
                Ok(())
            }
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
        s.dir_pending.push(DirOp::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            id,
        });
        Ok(())
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let s = self.state.lock();
        s.check_on(|| format!("listing {}", dir.display()))?;
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
        s.dir_pending.retain(|op| !op.in_dir(dir));
        Ok(())
    }

    /// One boot per power cut: every cut ([`FaultFs::power_cut`], a planned cut, a random
    /// one) starts a new boot, a process kill does not, and a fork shares its original's.
    fn boot_tag(&self) -> u32 {
        self.state.lock().boots.wrapping_add(1).max(1)
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn Any + Send + Sync>> {
        let mut s = self.state.lock();
        s.check_on(|| format!("locking {}", path.display()))?;
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
            write_at(&mut f.current, off, buf);
            f.pending.push(DataOp::Write {
                off,
                bytes: buf.to_vec(),
            });
            Ok(())
        })
    }

    fn sync(&self) -> Result<()> {
        let name = self.name.clone();
        self.with(|s, id| {
            s.check_fault(&format!("syncing {name}"))?;
            let f = s.files.entry(id).or_default();
            f.durable = f.current.clone();
            f.pending.clear();
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
            let f = s.files.entry(id).or_default();
            f.current.resize(len as usize, 0);
            f.pending.push(DataOp::SetLen(len));
            Ok(())
        })
    }

    /// Zeros the range like a hole (within the file's length). Not a fault point: a failed
    /// punch costs only space, so fault plans count writes and syncs alone.
    fn punch_hole(&self, off: u64, len: u64) -> Result<()> {
        self.with(|s, id| {
            if let Some(f) = s.files.get_mut(&id) {
                punch(&mut f.current, off, len);
                f.pending.push(DataOp::Punch { off, len });
            }
            Ok(())
        })
    }

    fn is_direct(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(fs: &FaultFs, path: &str) -> Arc<dyn File> {
        fs.open(
            Path::new(path),
            OpenMode {
                create: true,
                direct: false,
            },
        )
        .expect("create")
    }

    fn contents(fs: &FaultFs, path: &str) -> Option<Vec<u8>> {
        let f = fs.open(Path::new(path), OpenMode::default()).ok()?;
        let mut buf = vec![0u8; f.len().expect("len") as usize];
        f.read_exact_at(&mut buf, 0).expect("read");
        Some(buf)
    }

    /// A durable file `/d/f` holding 8 KiB of ones, with a 4 KiB write of twos over its second
    /// page and a 4 KiB write of threes past its end that no sync covers.
    fn synced_then_written() -> FaultFs {
        let fs = FaultFs::new();
        let f = create(&fs, "/d/f");
        f.write_all_at(&[1; 8192], 0).expect("write");
        f.sync().expect("sync");
        fs.sync_dir(Path::new("/d")).expect("sync dir");
        f.write_all_at(&[2; 4096], 4096).expect("write");
        f.write_all_at(&[3; 4096], 8192).expect("write");
        fs
    }

    #[test]
    fn strict_power_cut_keeps_exactly_what_was_synced() {
        let fs = synced_then_written();
        create(&fs, "/d/new");
        fs.power_cut();
        assert_eq!(contents(&fs, "/d/f"), Some(vec![1; 8192]));
        assert_eq!(contents(&fs, "/d/new"), None);
    }

    /// Over many seeds the random cut gives every outcome the model allows and no other: synced
    /// bytes are never lost, each 512-byte sector holds one write's bytes whole, pages are torn.
    #[test]
    fn random_power_cut_keeps_some_writes_and_tears_pages_at_sectors() {
        let (mut whole, mut lost, mut torn, mut zero_tail) = (0, 0, 0, 0);
        for seed in 0..400 {
            let fs = synced_then_written();
            fs.power_cut_random(seed);
            let got = contents(&fs, "/d/f").expect("durable file");
            assert!(got.len() == 8192 || got.len() == 12288, "seed {seed}");
            assert_eq!(
                &got[..4096],
                &[1; 4096][..],
                "seed {seed}: synced page lost"
            );
            let sectors: Vec<u8> = got[4096..].chunks(512).map(|s| s[0]).collect();
            for (i, s) in got[4096..].chunks(512).enumerate() {
                assert!(
                    s.iter().all(|&b| b == s[0]),
                    "seed {seed}: sector {i} is torn inside"
                );
                let allowed: &[u8] = if i < 8 { &[1, 2] } else { &[0, 3] };
                assert!(
                    allowed.contains(&s[0]),
                    "seed {seed}: sector {i} holds {}",
                    s[0]
                );
            }
            let page = &sectors[..8];
            if page.iter().all(|&b| b == 2) {
                whole += 1;
            } else if page.iter().all(|&b| b == 1) {
                lost += 1;
            } else {
                torn += 1;
            }
            if got.len() == 12288 && sectors[8..].iter().all(|&b| b == 0) {
                zero_tail += 1;
            }
        }
        assert!(
            whole > 0 && lost > 0 && torn > 0 && zero_tail > 0,
            "whole {whole}, lost {lost}, torn {torn}, zero tail {zero_tail}"
        );
    }

    #[test]
    fn random_power_cut_keeps_or_drops_set_len_and_punches() {
        let (mut shrunk, mut kept) = (0, 0);
        for seed in 0..100 {
            let fs = synced_then_written();
            let f = fs
                .open(Path::new("/d/f"), OpenMode::default())
                .expect("open");
            f.set_len(1024).expect("set_len");
            fs.power_cut_random(seed);
            match contents(&fs, "/d/f").expect("file").len() {
                1024 => shrunk += 1,
                _ => kept += 1,
            }
        }
        assert!(shrunk > 0 && kept > 0, "shrunk {shrunk}, kept {kept}");
    }

    /// Unsynced creations, renames and removals survive as any subset, applied in order.
    #[test]
    fn random_power_cut_keeps_directory_operations_out_of_order() {
        let mut outcomes = HashSet::new();
        for seed in 0..200 {
            let fs = FaultFs::new();
            let old = create(&fs, "/d/old");
            old.sync().expect("sync");
            fs.sync_dir(Path::new("/d")).expect("sync dir");
            create(&fs, "/d/a").sync().expect("sync");
            create(&fs, "/d/b").sync().expect("sync");
            fs.rename(Path::new("/d/a"), Path::new("/d/c"))
                .expect("rename");
            fs.remove(Path::new("/d/old")).expect("remove");
            fs.power_cut_random(seed);
            let mut names = fs.list(Path::new("/d")).expect("list");
            names.sort();
            assert!(
                !(names.contains(&"a".to_string()) && names.contains(&"c".to_string())),
                "seed {seed}: a renamed file under both names: {names:?}"
            );
            outcomes.insert(names.join(","));
        }
        // b without a (a later creation kept, an earlier lost), c (the rename of a kept
        // creation), old gone while a newer creation is lost.
        for want in ["b,old", "c,old", "b", "a,b,old", ""] {
            assert!(outcomes.contains(want), "never {want:?}: {outcomes:?}");
        }
    }

    #[test]
    fn planned_cut_turns_the_power_off_at_its_operation() {
        let fs = FaultFs::new();
        let f = create(&fs, "/d/f");
        f.write_all_at(&[1; 512], 0).expect("write");
        f.sync().expect("sync");
        fs.sync_dir(Path::new("/d")).expect("sync dir");
        fs.set_plan(FaultPlan::default());
        fs.cut_at(2, PowerCut::Strict);
        f.write_all_at(&[2; 512], 0).expect("op 0");
        f.write_all_at(&[3; 512], 512).expect("op 1");
        assert!(f.sync().is_err(), "op 2 is the cut");
        assert!(fs.is_off());
        let point = fs.cut_point().expect("cut point");
        assert_eq!(point.op, 2);
        assert_eq!(point.what, "syncing /d/f");
        assert!(f.write_all_at(&[4; 512], 0).is_err());
        assert!(fs.open(Path::new("/d/f"), OpenMode::default()).is_err());
        assert!(fs.list(Path::new("/d")).is_err());
        fs.power_on();
        assert!(
            f.write_all_at(&[4; 512], 0).is_err(),
            "old handles stay dead"
        );
        assert_eq!(contents(&fs, "/d/f"), Some(vec![1; 512]));
    }

    #[test]
    fn planned_cut_on_a_file_counts_only_that_files_operations() {
        let fs = FaultFs::new();
        let log = create(&fs, "/d/log");
        let data = create(&fs, "/d/data");
        fs.cut_at_op_on("/d/data", 1, PowerCut::Strict);
        for _ in 0..5 {
            log.write_all_at(&[1; 16], 0)
                .expect("log ops are not counted");
        }
        data.write_all_at(&[1; 16], 0).expect("data op 0");
        log.sync().expect("log ops are not counted");
        assert!(data.sync().is_err(), "data op 1 is the cut");
        let point = fs.cut_point().expect("cut point");
        assert_eq!((point.op, point.what.as_str()), (7, "syncing /d/data"));
        assert!(fs.is_off());
    }
}
