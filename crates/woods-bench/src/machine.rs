//! The machine a run was measured on, for the JSON file and the summary: figures from two
//! machines are not comparable, and neither are figures from tmpfs and from a device.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cgroup;
use crate::device::BlockDevice;
use crate::metrics;

/// What the summary says about the machine and the directory of the databases.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// CPUs this process may run on.
    pub cpus: usize,
    /// `model name` of /proc/cpuinfo.
    pub cpu_model: Option<String>,
    /// `uname -sr`: `Linux 6.1.0-18-amd64`.
    pub kernel: String,
    /// MemTotal of /proc/meminfo.
    pub memory_bytes: Option<u64>,
    /// The databases' directory (`--dir`).
    pub dir: String,
    /// Its file system type (`ext4`, `xfs`, `tmpfs`), mount point and device.
    pub file_system: Option<String>,
    pub mount_point: Option<String>,
    pub device: Option<String>,
    /// Whether a file there opens with O_DIRECT (each engine reports whether it used it).
    pub direct_io_supported: bool,
    /// The block device whose write counts cross-check write amplification (`vda (254:0)`),
    /// and the file they are read from.
    #[serde(default)]
    pub block_device: Option<String>,
    #[serde(default)]
    pub block_device_counts: Option<String>,
    /// Why no block device's counts can be read for the directory.
    #[serde(default)]
    pub block_device_why_not: Option<String>,
    /// That device's read-ahead in KiB: engines that read through `mmap` (LevelDB, LMDB) read
    /// up to this much around each page fault.
    #[serde(default)]
    pub read_ahead_kib: Option<u64>,
}

/// Read-ahead above which the bench warns that engines reading through `mmap` read far more
/// than they use (Linux's default is 128 KiB).
pub const LARGE_READ_AHEAD_KIB: u64 = 512;

/// The engines that read their files through `mmap`.
pub const MMAP_ENGINES: [&str; 2] = ["leveldb", "lmdb"];

impl Machine {
    /// This machine, with `dir` (which must exist) holding the databases.
    pub fn probe(dir: &Path) -> Machine {
        let fs_of = cgroup::file_system_of(dir);
        let block = BlockDevice::of(dir).and_then(|d| d.written_bytes().map(|_| d));
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| {
                t.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == "model name").then(|| v.trim().to_string())
                })
            }),
            kernel: kernel(),
            memory_bytes: fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
                let kib: u64 = t
                    .lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()?;
                Some(kib * 1024)
            }),
            dir: dir.display().to_string(),
            file_system: fs_of.as_ref().map(|f| f.1.clone()),
            mount_point: fs_of.as_ref().map(|f| f.0.display().to_string()),
            device: fs_of.map(|f| f.2),
            direct_io_supported: metrics::direct_io_supported(dir),
            block_device: block.as_ref().ok().map(BlockDevice::label),
            block_device_counts: block.as_ref().ok().map(|d| d.source.display().to_string()),
            read_ahead_kib: block
                .as_ref()
                .ok()
                .and_then(|d| d.read_ahead_kib(Path::new("/sys"))),
            block_device_why_not: block.err(),
        }
    }
}

/// `sysname release` from uname(2).
fn kernel() -> String {
    // SAFETY: uname fills a plain C struct that we own; a zeroed utsname is valid.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer; uname cannot fail otherwise.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    format!("{} {}", field(&u.sysname), field(&u.release))
}

/// The command line of this process, quoted for a POSIX shell where needed.
pub fn command_line() -> String {
    std::env::args_os()
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `s` as one shell word: as it is when it has only safe characters, else in single quotes.
pub fn shell_quote(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:,=+@%".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("--records"), "--records");
        assert_eq!(shell_quote("woods:lsm,rocksdb"), "woods:lsm,rocksdb");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn this_machine() {
        let m = Machine::probe(&std::env::temp_dir());
        assert!(m.cpus >= 1);
        assert!(!m.kernel.is_empty());
    }
}
