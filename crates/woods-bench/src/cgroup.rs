//! The memory budget made real: each engine's child process runs in a memory cgroup of its
//! own whose limit is the budget plus an allowance for the bench itself, so that everything
//! the engine holds — heap, memtables, filters, index nodes and the OS page cache its reads and
//! writes bring in — counts against it. Over the limit the kernel first reclaims the group's
//! page cache, then OOM-kills the child, which the parent reports as such.
//!
//! cgroup v1 (the `memory` controller, `memory.limit_in_bytes`) and cgroup v2 (`memory.max`)
//! are both handled; groups are made under the bench's own group, so that limits above it
//! still hold. Making one needs root (or a delegated subtree).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How an engine's memory budget was enforced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    /// A cgroup v1 memory controller limit (`memory.limit_in_bytes`).
    CgroupV1,
    /// A cgroup v2 limit (`memory.max`).
    CgroupV2,
    /// None: the engine's caches are sized to the budget, but nothing stops it (or the OS page
    /// cache working for it) from using more.
    #[default]
    None,
}

impl Enforcement {
    pub fn name(self) -> &'static str {
        match self {
            Enforcement::CgroupV1 => "cgroup v1",
            Enforcement::CgroupV2 => "cgroup v2",
            Enforcement::None => "not enforced",
        }
    }

    pub fn enforced(self) -> bool {
        self != Enforcement::None
    }
}

/// Which cgroup interface a group is made with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn enforcement(self) -> Enforcement {
        match self {
            Version::V1 => Enforcement::CgroupV1,
            Version::V2 => Enforcement::CgroupV2,
        }
    }

    fn limit_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        }
    }
}

/// The directory under which memory cgroups can be made: the bench's own memory cgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupParent {
    pub version: Version,
    pub dir: PathBuf,
}

/// One mount of `/proc/self/mountinfo`: where, what file system, which super options.
struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    options: String,
}

fn mounts() -> io::Result<Vec<Mount>> {
    let text = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(text.lines().filter_map(parse_mountinfo_line).collect())
}

/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`.
fn parse_mountinfo_line(line: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    Some(Mount {
        root: unescape(l.get(3)?),
        point: PathBuf::from(unescape(l.get(4)?)),
        fstype: r.first()?.to_string(),
        options: r.get(2).copied().unwrap_or("").to_string(),
    })
}

/// mountinfo writes space, tab, newline and backslash as octal escapes (`\040`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) if b[i] == b'\\' => {
                out.push(
                    d.iter()
                        .fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount point and type of the file system holding `path` (the longest mount point that
/// is a prefix of it), and the device or source it was mounted from.
pub fn file_system_of(path: &Path) -> Option<(PathBuf, String, String)> {
    let path = fs::canonicalize(path).ok()?;
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines()
        .filter_map(|line| {
            let m = parse_mountinfo_line(line)?;
            let source = line.split_once(" - ")?.1.split(' ').nth(1)?.to_string();
            path.starts_with(&m.point)
                .then_some((m.point, m.fstype, source))
        })
        // The last of equally long ones is the one mounted on top.
        .fold(
            None,
            |best: Option<(PathBuf, String, String)>, m| match &best {
                Some(b) if b.0.as_os_str().len() > m.0.as_os_str().len() => best,
                _ => Some(m),
            },
        )
}

/// This process's path in a hierarchy from `/proc/self/cgroup`: the v1 line whose
/// controllers include `controller`, or the v2 line (`0::/path`) with `controller` None.
fn own_path(cgroup_file: &str, controller: Option<&str>) -> Option<String> {
    cgroup_file.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match controller {
            Some(c) => ctrls.split(',').any(|x| x == c),
            None => id == "0" && ctrls.is_empty(),
        };
        hit.then(|| path.to_string())
    })
}

/// The directory of this process's group in a hierarchy mounted at `m`, or the mount's root
/// where that group is not visible (another cgroup namespace).
fn group_dir(m: &Mount, path: &str) -> PathBuf {
    let rel = path
        .strip_prefix(m.root.trim_end_matches('/'))
        .unwrap_or(path);
    let dir = m.point.join(rel.trim_start_matches('/'));
    if dir.is_dir() {
        dir
    } else {
        m.point.clone()
    }
}

impl CgroupParent {
    /// Where this process can make memory cgroups: under its own group of the v1 memory
    /// controller if that is mounted, else of the v2 hierarchy if its memory controller is
    /// available to subgroups. The error says why none can be made. A group is made and
    /// removed to be sure.
    pub fn find() -> Result<CgroupParent, String> {
        let mounts = mounts().map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let own = fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let v1 = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == "memory"));
        let v2 = mounts.iter().find(|m| m.fstype == "cgroup2");
        let mut why = Vec::new();
        if let Some(m) = v1 {
            let path = own_path(&own, Some("memory")).unwrap_or_else(|| "/".into());
            let parent = CgroupParent {
                version: Version::V1,
                dir: group_dir(m, &path),
            };
            match parent.probe() {
                Ok(()) => return Ok(parent),
                Err(e) => why.push(format!("cgroup v1 memory controller: {e}")),
            }
        }
        if let Some(m) = v2 {
            let path = own_path(&own, None).unwrap_or_else(|| "/".into());
            let parent = CgroupParent {
                version: Version::V2,
                dir: group_dir(m, &path),
            };
            match parent.enable_v2().and_then(|()| parent.probe()) {
                Ok(()) => return Ok(parent),
                Err(e) => why.push(format!("cgroup v2: {e}")),
            }
        }
        if why.is_empty() {
            why.push("no cgroup file system is mounted".into());
        }
        Err(why.join("; "))
    }

    /// cgroup v2 gives a group's children a controller only if the group lists it in
    /// `cgroup.subtree_control`; ask for it if it is available but not yet given.
    fn enable_v2(&self) -> Result<(), String> {
        let read = |f: &str| fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        let has = |text: &str| text.split_whitespace().any(|c| c == "memory");
        if !has(&read("cgroup.controllers")) {
            return Err(format!(
                "the memory controller is not available in {}",
                self.dir.display()
            ));
        }
        if has(&read("cgroup.subtree_control")) {
            return Ok(());
        }
        fs::write(self.dir.join("cgroup.subtree_control"), "+memory").map_err(|e| {
            format!(
                "cannot give subgroups of {} the memory controller ({e}; a group with \
                 processes of its own cannot, unless it is the root)",
                self.dir.display()
            )
        })
    }

    /// Makes a group, sets a limit and removes it.
    fn probe(&self) -> Result<(), String> {
        let name = format!("woods-bench-{}-probe", std::process::id());
        let g = self
            .create(&name, 1 << 30)
            .map_err(|e| format!("cannot make a group in {}: {e}", self.dir.display()))?;
        g.remove()
            .map_err(|e| format!("cannot remove {}: {e}", self.dir.join(&name).display()))
    }

    /// Makes group `name` with a memory limit of `limit_bytes` (page cache included; no swap
    /// beyond it where the kernel has a swap limit).
    pub fn create(&self, name: &str, limit_bytes: u64) -> io::Result<MemoryCgroup> {
        let dir = self.dir.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            // A group left by an earlier run of the same pid: reuse it.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let g = MemoryCgroup {
            version: self.version,
            dir,
            limit_bytes,
            removed: false,
        };
        fs::write(
            g.dir.join(self.version.limit_file()),
            limit_bytes.to_string(),
        )?;
        // Without a swap limit, anonymous memory over the limit could go to swap instead of
        // failing; the v1 file exists only with swap accounting, v2's only with swap.
        let swap = match self.version {
            Version::V1 => ("memory.memsw.limit_in_bytes", limit_bytes.to_string()),
            Version::V2 => ("memory.swap.max", "0".to_string()),
        };
        if g.dir.join(swap.0).exists() {
            let _ = fs::write(g.dir.join(swap.0), swap.1);
        }
        Ok(g)
    }
}

/// A memory cgroup made for one engine's child. Removed when dropped.
#[derive(Debug)]
pub struct MemoryCgroup {
    version: Version,
    dir: PathBuf,
    limit_bytes: u64,
    removed: bool,
}

impl MemoryCgroup {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn version(&self) -> Version {
        self.version
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Moves process `pid` (all its threads) into the group; what it allocates from then on
    /// is charged here, and so are its children.
    pub fn add(&self, pid: u32) -> io::Result<()> {
        fs::write(self.dir.join("cgroup.procs"), pid.to_string())
    }

    /// What [`MemoryCgroup::add`]'s process needs to read its own figures.
    pub fn handle(&self) -> CgroupHandle {
        CgroupHandle {
            version: self.version,
            dir: self.dir.clone(),
        }
    }

    /// How many processes of the group the kernel's OOM killer killed (`oom_kill` of
    /// `memory.oom_control` in v1, of `memory.events` in v2); `None` where the kernel does
    /// not say.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        let text = fs::read_to_string(self.dir.join(file)).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Peak memory charged to the group, page cache included.
    pub fn peak_bytes(&self) -> Option<u64> {
        self.handle().peak_bytes()
    }

    /// Removes the group once its processes have gone (they may take a moment to be
    /// reaped). v1 first reclaims the page cache still charged to it, so that it does not
    /// linger in the parent's count.
    pub fn remove(mut self) -> io::Result<()> {
        self.removed = true;
        self.remove_dir()
    }

    fn remove_dir(&self) -> io::Result<()> {
        if self.version == Version::V1 {
            let _ = fs::write(self.dir.join("memory.force_empty"), "0");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        if !self.removed {
            let _ = self.remove_dir();
        }
    }
}

/// A group as the process inside it sees it: to read and reset its peak memory per phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupHandle {
    pub version: Version,
    pub dir: PathBuf,
}

impl CgroupHandle {
    /// Peak memory charged to the group since it was made or last reset (v1
    /// `memory.max_usage_in_bytes`, v2 `memory.peak`).
    pub fn peak_bytes(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Starts a new peak at the current usage (v1; v2's `memory.peak` is kept since the group
    /// was made). Returns whether it was reset.
    pub fn reset_peak(&self) -> bool {
        self.version == Version::V1
            && fs::write(self.dir.join("memory.max_usage_in_bytes"), "0").is_ok()
    }
}

/// Writes dirty pages out and drops the clean page cache, dentries and inodes
/// (`/proc/sys/vm/drop_caches`), so that a phase starts with nothing of the engine's data in
/// memory. Needs root; the error says why it could not.
pub fn drop_page_cache() -> io::Result<()> {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3")
}

/// Whether [`drop_page_cache`] can work here (the file is writable by this process).
pub fn can_drop_page_cache() -> Result<(), String> {
    fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/vm/drop_caches")
        .map(|_| ())
        .map_err(|e| format!("cannot write /proc/sys/vm/drop_caches: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let m = parse_mountinfo_line(
            "36 35 98:0 / /sys/fs/cgroup/memory rw,relatime shared:1 - cgroup cgroup rw,memory",
        )
        .unwrap();
        assert_eq!(m.point, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(m.fstype, "cgroup");
        assert!(m.options.split(',').any(|o| o == "memory"));
        let m = parse_mountinfo_line("1 2 0:3 / /mnt/a\\040b rw - ext4 /dev/sda1 rw").unwrap();
        assert_eq!(m.point, Path::new("/mnt/a b"));
        assert_eq!(m.options, "rw");
    }

    #[test]
    fn own_paths() {
        let f = "9:name=systemd:/\n4:memory:/a/b\n3:cpu,cpuacct:/c\n0::/user.slice\n";
        assert_eq!(own_path(f, Some("memory")).as_deref(), Some("/a/b"));
        assert_eq!(own_path(f, Some("cpuacct")).as_deref(), Some("/c"));
        assert_eq!(own_path(f, None).as_deref(), Some("/user.slice"));
        assert_eq!(own_path("4:memory:/a\n", None), None);
    }

    #[test]
    fn file_system_of_root() {
        let Some((point, fstype, _)) = file_system_of(Path::new("/")) else {
            return; // no /proc here
        };
        assert_eq!(point, Path::new("/"));
        assert!(!fstype.is_empty());
    }
}
