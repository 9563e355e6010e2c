//! The block device under the engines' directory, and the bytes it wrote: the cross-check of
//! write amplification against what reached the device, not only what the engine's process
//! handed to the kernel (`/proc/self/io`).
//!
//! The device is the one of the file system holding the directory: `stat`'s `st_dev` gives
//! its major:minor, whose counters are `/sys/dev/block/MAJ:MIN/stat` (field 7: sectors
//! written, in 512-byte units, whatever the device's own sector size; a partition has its own
//! file, counting its own writes), or where that is missing the device's line of
//! `/proc/diskstats` (its 10th column). A file system with no block device of its own (tmpfs,
//! overlayfs, NFS, btrfs' anonymous device numbers) is looked up by the device it was mounted
//! from, if that is a `/dev` node; otherwise there is nothing to read, and the reason is
//! recorded instead.
//!
//! A phase reads the device's count before the engine opens and after it closes, each time
//! after syncing every file under the engine's directory ([`sync_tree`]), so that every page
//! the engine dirtied in the phase has reached the device by the second reading, and none it
//! dirtied before is counted in it. Only the engine's own files are synced, not the whole file
//! system (`syncfs`, `sync`): writing back another process's dirty pages makes the next append
//! to them count a page again in that process's `/proc/self/io`, which would skew the figures
//! of a bench running beside this one. The device counts every process's writes to it and the
//! file system's own (journal, inodes), so its figure is an upper bound of the engine's; the
//! check is that it is not below what `/proc` says the engine's process wrote ([`shortfall`]).

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cgroup;
use crate::report;

/// The unit of the kernel's sector counts (`/sys/.../stat`, `/proc/diskstats`), whatever the
/// device's own sector size.
pub const SECTOR_BYTES: u64 = 512;

/// The share of the bytes `/proc/self/io` says the engine's process wrote that the device must
/// have written in the same span; less is reported as a warning (see [`shortfall`]).
pub const MIN_DEVICE_SHARE: f64 = 0.95;

/// Below this many bytes written by the process, a shortfall is not reported: a few pages of
/// rounding would dominate.
pub const MIN_CHECKED_BYTES: u64 = 1 << 20;

/// Where a block device's counters are read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockDevice {
    pub major: u32,
    pub minor: u32,
    /// The kernel's name of the device (`vda`, `nvme0n1p2`), where found.
    pub name: Option<String>,
    /// The file of its counters: `/sys/dev/block/MAJ:MIN/stat` or `/proc/diskstats`.
    pub source: PathBuf,
    /// Whether `source` is the `/proc/diskstats` table (else a sysfs `stat` file).
    pub diskstats: bool,
}

/// `major:minor` of a device number, as glibc's `gnu_dev_major` and `gnu_dev_minor` split it.
pub fn split_dev(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// The sectors written, field 7 of a sysfs block `stat` file (`reads merged sectors ticks
/// writes merged sectors ...`).
pub fn parse_stat(text: &str) -> Option<u64> {
    text.split_whitespace().nth(6)?.parse().ok()
}

/// The read requests completed, field 1 of a sysfs block `stat` file.
pub fn parse_stat_reads(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The read requests completed by device `major:minor` in `/proc/diskstats` (its 4th column).
pub fn parse_diskstats_reads(text: &str, major: u32, minor: u32) -> Option<u64> {
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || f[0].parse::<u32>().ok()? != major || f[1].parse::<u32>().ok()? != minor {
            return None;
        }
        f[3].parse().ok()
    })
}

/// The name and sectors written of device `major:minor` in `/proc/diskstats` (`major minor name
/// reads merged sectors ticks writes merged sectors ...`: the 10th column).
pub fn parse_diskstats(text: &str, major: u32, minor: u32) -> Option<(String, u64)> {
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[0].parse::<u32>().ok()? != major || f[1].parse::<u32>().ok()? != minor
        {
            return None;
        }
        Some((f[2].to_string(), f[9].parse().ok()?))
    })
}

/// `dir`, or the nearest of its ancestors that exists (a phase looks its device up before the
/// engine has made its directory).
fn existing_ancestor(dir: &Path) -> io::Result<&Path> {
    let mut p = dir;
    loop {
        if p.exists() {
            return Ok(p);
        }
        p = p.parent().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("neither {} nor any parent of it exists", dir.display()),
            )
        })?;
    }
}

impl BlockDevice {
    /// The block device holding `dir` (or its nearest existing ancestor), from this machine's
    /// `/sys` and `/proc`; the error says why there is none to read.
    pub fn of(dir: &Path) -> Result<BlockDevice, String> {
        BlockDevice::of_in(dir, Path::new("/sys"), Path::new("/proc"))
    }

    /// Like [`BlockDevice::of`], with `sys` and `proc` in place of `/sys` and `/proc`.
    pub fn of_in(dir: &Path, sys: &Path, proc: &Path) -> Result<BlockDevice, String> {
        let at = existing_ancestor(dir).map_err(|e| e.to_string())?;
        let meta = fs::metadata(at).map_err(|e| format!("stat of {}: {e}", at.display()))?;
        let (major, minor) = split_dev(meta.dev());
        if major != 0 {
            return BlockDevice::numbered(major, minor, sys, proc);
        }
        // An anonymous device number (tmpfs, overlayfs, NFS, btrfs): the device it was mounted
        // from, if that is a block device node.
        let (point, fstype, source) = cgroup::file_system_of(at).ok_or_else(|| {
            format!(
                "{} has no block device number ({major}:{minor}) and its mount is unknown",
                at.display()
            )
        })?;
        let node = fs::metadata(&source)
            .ok()
            .filter(|m| m.file_type().is_block_device());
        match node {
            Some(m) => {
                let (major, minor) = split_dev(m.rdev());
                BlockDevice::numbered(major, minor, sys, proc)
            }
            None => Err(format!(
                "the file system of {} ({fstype} at {}, from {source}) is not on a block device",
                at.display(),
                point.display()
            )),
        }
    }

    /// Device `major:minor`: its sysfs `stat` file, else its line of `diskstats`.
    pub fn numbered(
        major: u32,
        minor: u32,
        sys: &Path,
        proc: &Path,
    ) -> Result<BlockDevice, String> {
        let node = sys.join("dev/block").join(format!("{major}:{minor}"));
        let stat = node.join("stat");
        if fs::read_to_string(&stat)
            .ok()
            .and_then(|t| parse_stat(&t))
            .is_some()
        {
            let name = fs::read_link(&node).ok().and_then(|l| {
                l.file_name()
                    .map(|n| String::from_utf8_lossy(n.as_bytes()).into_owned())
            });
            return Ok(BlockDevice {
                major,
                minor,
                name,
                source: stat,
                diskstats: false,
            });
        }
        let table = proc.join("diskstats");
        match fs::read_to_string(&table) {
            Ok(text) => match parse_diskstats(&text, major, minor) {
                Some((name, _)) => Ok(BlockDevice {
                    major,
                    minor,
                    name: Some(name),
                    source: table,
                    diskstats: true,
                }),
                None => Err(format!(
                    "device {major}:{minor} has no readable {} and no line in {}",
                    stat.display(),
                    table.display()
                )),
            },
            Err(e) => Err(format!(
                "device {major}:{minor} has no readable {}, and {}: {e}",
                stat.display(),
                table.display()
            )),
        }
    }

    /// Bytes the device has written since it appeared: its sectors written × 512.
    pub fn written_bytes(&self) -> Result<u64, String> {
        let text = fs::read_to_string(&self.source)
            .map_err(|e| format!("reading {}: {e}", self.source.display()))?;
        let sectors = if self.diskstats {
            parse_diskstats(&text, self.major, self.minor).map(|(_, s)| s)
        } else {
            parse_stat(&text)
        };
        sectors
            .map(|s| s.saturating_mul(SECTOR_BYTES))
            .ok_or_else(|| {
                format!(
                    "{} has no sectors-written count for {}",
                    self.source.display(),
                    self.label()
                )
            })
    }

    /// Read requests the device has completed since boot (every process's: an upper bound of
    /// one engine's over a span).
    pub fn reads_completed(&self) -> Result<u64, String> {
        let text = fs::read_to_string(&self.source)
            .map_err(|e| format!("reading {}: {e}", self.source.display()))?;
        let reads = if self.diskstats {
            parse_diskstats_reads(&text, self.major, self.minor)
        } else {
            parse_stat_reads(&text)
        };
        reads.ok_or_else(|| {
            format!(
                "{} has no reads-completed count for {}",
                self.source.display(),
                self.label()
            )
        })
    }

    /// The device's read-ahead in KiB (`queue/read_ahead_kb` of it, or of the disk a partition
    /// is on), from `sys`: how much a buffered read, or a page fault on a mapped file, may read
    /// around what was asked.
    pub fn read_ahead_kib(&self, sys: &Path) -> Option<u64> {
        let node = sys
            .join("dev/block")
            .join(format!("{}:{}", self.major, self.minor));
        [
            node.join("queue/read_ahead_kb"),
            node.join("../queue/read_ahead_kb"),
        ]
        .iter()
        .find_map(|f| fs::read_to_string(f).ok()?.trim().parse().ok())
    }

    /// `vda (254:0)`.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => format!("{n} ({}:{})", self.major, self.minor),
            None => format!("{}:{}", self.major, self.minor),
        }
    }
}

/// Writes every dirty page of every file under `dir` (recursively) to the device and waits for
/// it (`fdatasync` of each), then syncs `dir` itself. Nothing to do when `dir` does not exist
/// yet; a file that disappears meanwhile is skipped (its dirty pages were cancelled).
pub fn sync_tree(dir: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            sync_tree(&path)?;
        } else if kind.is_file() {
            match fs::File::open(&path) {
                Ok(f) => f
                    .sync_data()
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
            }
        }
    }
    fs::File::open(dir)?.sync_all()
}

/// A phase's reading of the device: started before the engine opens, finished after it
/// closes.
pub struct DeviceProbe {
    dir: PathBuf,
    device: Result<BlockDevice, String>,
    before: Result<u64, String>,
}

/// What a finished [`DeviceProbe`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceReading {
    /// Bytes the device wrote between the two readings.
    pub written: Option<u64>,
    /// Why there is no figure, where there is none.
    pub why_not: Option<String>,
}

impl DeviceProbe {
    /// Syncs the files under `dir` and reads the count of its device.
    pub fn start(dir: &Path) -> DeviceProbe {
        let device = BlockDevice::of(dir);
        let before = match &device {
            Ok(d) => sync_tree(dir)
                .map_err(|e| format!("syncing {}: {e}", dir.display()))
                .and_then(|()| d.written_bytes()),
            Err(e) => Err(e.clone()),
        };
        DeviceProbe {
            dir: dir.to_path_buf(),
            device,
            before,
        }
    }

    /// Syncs again and reads the count again: the bytes the device wrote in between.
    pub fn finish(self) -> DeviceReading {
        let written = self.device.and_then(|d| {
            let before = self.before?;
            sync_tree(&self.dir).map_err(|e| format!("syncing {}: {e}", self.dir.display()))?;
            Ok(d.written_bytes()?.saturating_sub(before))
        });
        match written {
            Ok(w) => DeviceReading {
                written: Some(w),
                why_not: None,
            },
            Err(e) => DeviceReading {
                written: None,
                why_not: Some(format!("device write count not readable: {e}")),
            },
        }
    }
}

/// The warning when the device wrote less than [`MIN_DEVICE_SHARE`] of what `/proc/self/io`
/// says the engine's process wrote (`write_bytes` − `cancelled_write_bytes`), or `None`.
///
/// Nothing the process counts as written should be missing from the device: `write_bytes`
/// counts a page when the process dirties it (buffered) or submits it (direct I/O), a page
/// dropped dirty (its file truncated or deleted before write-back) is taken back in
/// `cancelled_write_bytes`, and the phase syncs every file left under the engine's directory
/// before its second reading, so every page it counts has been written by then. What the device cannot see is the process's
/// writes to other file systems; the engine's process writes only under its directory. The
/// device counts more than the process: other processes on the machine and the file system's
/// own metadata and journal. So the only meaningful check is a lower bound, and a device that
/// saw less means the `/proc` figure (and every WA from it) counts what never reached the
/// device, or the device is not the one the data went to.
pub fn shortfall(proc_written: u64, device_written: u64) -> Option<String> {
    if proc_written < MIN_CHECKED_BYTES
        || device_written as f64 >= MIN_DEVICE_SHARE * proc_written as f64
    {
        return None;
    }
    Some(format!(
        "the device wrote {} ({device_written} bytes) but /proc/self/io says the engine's \
         process wrote {} ({proc_written} bytes): {:.1}%, less than {:.0}%; the WA figures from \
         /proc are not what reached the device",
        report::bytes(device_written as f64),
        report::bytes(proc_written as f64),
        100.0 * device_written as f64 / proc_written as f64,
        100.0 * MIN_DEVICE_SHARE,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A disk's read-ahead is its own queue's; a partition's is its disk's (sysfs links the
    /// partition's node inside the disk's directory).
    #[test]
    fn read_ahead_of_disks_and_partitions() {
        let sys = tempfile::tempdir().unwrap();
        let disk = sys.path().join("devices/sda");
        fs::create_dir_all(disk.join("queue")).unwrap();
        fs::create_dir_all(disk.join("sda1")).unwrap();
        fs::write(disk.join("queue/read_ahead_kb"), "8192\n").unwrap();
        fs::create_dir_all(sys.path().join("dev/block")).unwrap();
        std::os::unix::fs::symlink("../../devices/sda", sys.path().join("dev/block/8:0")).unwrap();
        std::os::unix::fs::symlink("../../devices/sda/sda1", sys.path().join("dev/block/8:1"))
            .unwrap();
        let dev = |minor| BlockDevice {
            major: 8,
            minor,
            name: None,
            source: PathBuf::new(),
            diskstats: false,
        };
        assert_eq!(dev(0).read_ahead_kib(sys.path()), Some(8192));
        assert_eq!(dev(1).read_ahead_kib(sys.path()), Some(8192));
        assert_eq!(dev(2).read_ahead_kib(sys.path()), None);
    }

    /// A sysfs stat line as the kernel prints it (17 fields, padded).
    const STAT: &str = " 2512494    15554 53123099   265862  1679845    97156 61728912   246702 \
                        0   238796   554824    33110       80 17038864     7518   153616    34741\n";
    const DISKSTATS: &str = "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n \
                             254       0 vda 2507368 14436 51833179 260732 1676756 94691 59744760 \
                             233062 0 236464 535410 32061 80 16483992 6928 153379 34688\n \
                             254       1 vda1 10 0 80 1 20 0 4096 2 0 3 3 0 0 0 0 0 0\n";

    #[test]
    fn parses_stat_and_diskstats() {
        assert_eq!(parse_stat(STAT), Some(61_728_912));
        assert_eq!(parse_stat_reads(STAT), Some(2_512_494));
        assert_eq!(parse_stat_reads("x 2 3"), None);
        assert_eq!(parse_diskstats_reads(DISKSTATS, 254, 0), Some(2_507_368));
        assert_eq!(parse_diskstats_reads(DISKSTATS, 254, 1), Some(10));
        assert_eq!(parse_diskstats_reads(DISKSTATS, 254, 2), None);
        assert_eq!(parse_stat("1 2 3"), None);
        assert_eq!(parse_stat("1 2 3 4 5 6 x"), None);
        assert_eq!(
            parse_diskstats(DISKSTATS, 254, 0),
            Some(("vda".to_string(), 59_744_760))
        );
        assert_eq!(
            parse_diskstats(DISKSTATS, 254, 1),
            Some(("vda1".to_string(), 4096))
        );
        assert_eq!(parse_diskstats(DISKSTATS, 254, 2), None);
        assert_eq!(parse_diskstats(DISKSTATS, 25, 40), None);
    }

    #[test]
    fn device_numbers() {
        assert_eq!(split_dev(0xfe00), (254, 0));
        assert_eq!(split_dev(0x0801), (8, 1));
        // Large numbers use the high bits: major 259 (NVMe partitions), minor 300.
        let dev = (259u64 << 8) | (300 & 0xff) | ((300u64 & !0xff) << 12);
        assert_eq!(split_dev(dev), (259, 300));
    }

    #[test]
    fn finds_the_sysfs_file_then_falls_back_to_diskstats() {
        let tmp = tempfile::tempdir().unwrap();
        let (sys, proc) = (tmp.path().join("sys"), tmp.path().join("proc"));
        // /sys/dev/block/8:1 -> ../../devices/.../sda/sda1, as the kernel links it.
        let dev = sys.join("devices/pci0/host0/block/sda/sda1");
        fs::create_dir_all(&dev).unwrap();
        fs::write(dev.join("stat"), STAT).unwrap();
        fs::create_dir_all(sys.join("dev/block")).unwrap();
        std::os::unix::fs::symlink(
            "../../devices/pci0/host0/block/sda/sda1",
            sys.join("dev/block/8:1"),
        )
        .unwrap();
        fs::create_dir_all(&proc).unwrap();
        fs::write(proc.join("diskstats"), DISKSTATS).unwrap();

        let d = BlockDevice::numbered(8, 1, &sys, &proc).unwrap();
        assert_eq!(d.name.as_deref(), Some("sda1"));
        assert!(!d.diskstats);
        assert_eq!(d.label(), "sda1 (8:1)");
        assert_eq!(d.written_bytes().unwrap(), 61_728_912 * 512);

        // No sysfs file for 254:0: its diskstats line.
        let d = BlockDevice::numbered(254, 0, &sys, &proc).unwrap();
        assert!(d.diskstats);
        assert_eq!(d.name.as_deref(), Some("vda"));
        assert_eq!(d.written_bytes().unwrap(), 59_744_760 * 512);

        // Neither: the error names both places.
        let e = BlockDevice::numbered(9, 9, &sys, &proc).unwrap_err();
        assert!(e.contains("9:9") && e.contains("diskstats"), "{e}");
        let e = BlockDevice::numbered(9, 9, &sys, &tmp.path().join("none")).unwrap_err();
        assert!(e.contains("diskstats"), "{e}");

        // A stat file that changed into something unreadable is an error, not a zero.
        fs::write(dev.join("stat"), "garbage").unwrap();
        let d = BlockDevice {
            major: 8,
            minor: 1,
            name: None,
            source: dev.join("stat"),
            diskstats: false,
        };
        assert!(d.written_bytes().unwrap_err().contains("8:1"));
    }

    #[test]
    fn looks_up_the_device_of_a_directory_not_made_yet() {
        let tmp = tempfile::tempdir().unwrap();
        let (sys, proc) = (tmp.path().join("sys"), tmp.path().join("proc"));
        let (major, minor) = split_dev(fs::metadata(tmp.path()).unwrap().dev());
        fs::create_dir_all(&proc).unwrap();
        fs::write(
            proc.join("diskstats"),
            format!("{major} {minor} fake 1 2 3 4 5 6 777 8 9 10 11\n"),
        )
        .unwrap();
        let missing = tmp.path().join("a/b/c");
        match BlockDevice::of_in(&missing, &sys, &proc) {
            // The directory's own device number, found in the fake diskstats.
            Ok(d) => {
                assert_eq!((d.major, d.minor), (major, minor));
                assert_eq!(d.written_bytes().unwrap(), 777 * 512);
            }
            // An anonymous device number (tmpfs, overlayfs, btrfs): looked up by its mount,
            // which is no block device or one the fake diskstats does not list.
            Err(e) => assert_eq!(major, 0, "{e}"),
        }
    }

    #[test]
    fn this_machine_counts_what_the_probe_synced() {
        let tmp = tempfile::tempdir().unwrap();
        let probe = DeviceProbe::start(tmp.path());
        fs::create_dir(tmp.path().join("sub")).unwrap();
        let mut f = fs::File::create(tmp.path().join("sub/data")).unwrap();
        let block = vec![0x5au8; 1 << 20];
        for _ in 0..4 {
            f.write_all(&block).unwrap();
        }
        drop(f);
        // Not synced here: the probe syncs what is under its directory before reading.
        let r = probe.finish();
        match (r.written, &r.why_not) {
            // Other processes can only add to the count.
            (Some(w), None) => assert!(w >= 4 << 20, "the device wrote only {w} bytes"),
            (None, Some(why)) => eprintln!("no block device under the temporary directory: {why}"),
            other => panic!("{other:?}"),
        }
    }

    /// Dirty pages of `path` in the page cache (`cachestat`, Linux 6.5), or `None` where the
    /// kernel cannot tell.
    fn dirty_pages(path: &Path) -> Option<u64> {
        use std::os::fd::AsRawFd;
        #[repr(C)]
        struct Range {
            off: u64,
            len: u64,
        }
        #[repr(C)]
        #[derive(Default)]
        struct CacheStat {
            nr_cache: u64,
            nr_dirty: u64,
            nr_writeback: u64,
            nr_evicted: u64,
            nr_recently_evicted: u64,
        }
        const SYS_CACHESTAT: libc::c_long = 451;
        let f = fs::File::open(path).ok()?;
        let range = Range { off: 0, len: 0 };
        let mut cs = CacheStat::default();
        // SAFETY: cachestat reads one range and writes one cachestat struct, both valid and
        // laid out as the kernel's; the descriptor is open for the call.
        let rc = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                f.as_raw_fd(),
                &range as *const Range,
                &mut cs as *mut CacheStat,
                0u32,
            )
        };
        (rc == 0).then_some(cs.nr_dirty + cs.nr_writeback)
    }

    #[test]
    fn sync_tree_writes_back_nested_files() {
        let tmp = tempfile::tempdir().unwrap();
        sync_tree(&tmp.path().join("not-yet")).unwrap();
        let nested = tmp.path().join("a/b");
        fs::create_dir_all(&nested).unwrap();
        let (f, g) = (nested.join("f"), tmp.path().join("g"));
        fs::write(&f, vec![1u8; 1 << 20]).unwrap();
        fs::write(&g, b"x").unwrap();
        let Some(dirty) = dirty_pages(&f) else {
            eprintln!("no cachestat here (or tmpfs): not checked");
            return sync_tree(tmp.path()).unwrap();
        };
        if dirty == 0 {
            eprintln!("the kernel wrote the file back already: not checked");
            return;
        }
        sync_tree(tmp.path()).unwrap();
        assert_eq!(dirty_pages(&f), Some(0), "the nested file is still dirty");
        assert_eq!(dirty_pages(&g), Some(0));
    }

    #[test]
    fn shortfall_is_a_lower_bound() {
        assert_eq!(shortfall(10 << 20, 30 << 20), None, "more is other writers");
        assert_eq!(shortfall(10 << 20, 10 << 20), None);
        assert_eq!(shortfall(100 << 20, 96 << 20), None);
        let w = shortfall(100 << 20, 90 << 20).unwrap();
        assert!(w.contains("90.0%"), "{w}");
        assert_eq!(shortfall(1000, 0), None, "too little to compare");
    }
}
