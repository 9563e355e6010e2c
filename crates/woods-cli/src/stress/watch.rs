//! Telling a hung round from a starved one. A round that reports no progress for `HANG` is hung
//! only if its process also used almost no processor time in that window and none of its
//! threads is waiting for a processor (state R): on a loaded host a round that is verifying or
//! writing at a low priority can take minutes of wall time while it works, and at `nice 19`
//! beside a dozen busy processes it may get almost no processor time at all while runnable. A
//! round that keeps using the processor, or stays runnable, without progress (a livelock, or
//! starvation) is hung after `HANG_BUSY`. What a hang reports comes from `/proc`: each thread's state and wait channel,
//! which tell a deadlock (threads sleeping in `futex_wait`) from anything else. Off Linux, where
//! there is no `/proc`, a round is hung after `HANG` without progress, as before.

use std::time::{Duration, Instant};

/// Wall time without progress after which a round that used little processor time is hung.
pub const HANG: Duration = Duration::from_secs(120);
/// Processor time a round must use in a `HANG` window to count as working while starved.
pub const BUSY: Duration = Duration::from_secs(1);
/// Wall time without progress after which a round is hung however busy it is.
pub const HANG_BUSY: Duration = Duration::from_secs(1200);

/// Clock ticks per second of `/proc/*/stat` times (`sysconf(_SC_CLK_TCK)`, 100 on every Linux
/// this runs on; a different value only scales the `BUSY` threshold).
const TICKS: u64 = 100;

/// One look at a process's threads in `/proc`.
pub struct Threads {
    /// User and system time of all its threads.
    pub cpu: Duration,
    /// Threads running or waiting for a processor (state R).
    pub runnable: usize,
    /// One line per thread: id, name, state (R running, S sleeping, D in the disk) and wait
    /// channel.
    pub lines: Vec<String>,
}

/// Reads `/proc/PID/task/*`; `None` where it cannot (not Linux, or the process is gone).
pub fn threads(pid: u32) -> Option<Threads> {
    let dir = format!("/proc/{pid}/task");
    let mut ticks = 0u64;
    let mut runnable = 0;
    let mut lines = Vec::new();
    for e in std::fs::read_dir(&dir).ok()? {
        let Ok(e) = e else { continue };
        let path = e.path();
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ... utime stime ...`: comm may hold spaces and parentheses,
        // so the fields are counted from the last ')'.
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let name = stat
            .find('(')
            .map_or("?", |open| &stat[open + 1..close.max(open + 1)]);
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
        ticks += field(11) + field(12);
        runnable += usize::from(f.first() == Some(&"R"));
        let wchan = std::fs::read_to_string(path.join("wchan")).unwrap_or_default();
        lines.push(format!(
            "thread {} ({name}): state {}, wait channel {}, {} ms of processor time",
            e.file_name().to_string_lossy(),
            f.first().copied().unwrap_or("?"),
            if wchan.trim().is_empty() || wchan.trim() == "0" {
                "-"
            } else {
                wchan.trim()
            },
            (field(11) + field(12)) * 1000 / TICKS
        ));
    }
    lines.sort();
    Some(Threads {
        cpu: Duration::from_millis(ticks * 1000 / TICKS),
        runnable,
        lines,
    })
}

/// Watches one round for a hang.
pub struct Watch {
    pid: u32,
    /// `HANG`, `BUSY` and `HANG_BUSY` (smaller in tests).
    limits: (Duration, Duration, Duration),
    /// The last progress.
    progress: Instant,
    /// Start of the current window, and the process's processor time then.
    window: (Instant, Option<Duration>),
}

/// Why a round was declared hung, with what `/proc` showed of it.
pub struct Hang {
    /// Seconds without progress.
    pub secs: u64,
    /// Whether it kept using the processor (a livelock, or starvation past `HANG_BUSY`).
    pub busy: bool,
    /// The threads' lines, empty where `/proc` could not be read.
    pub threads: Vec<String>,
}

impl Watch {
    /// Starts watching process `pid`, counting from now.
    pub fn new(pid: u32) -> Watch {
        Watch::with_limits(pid, (HANG, BUSY, HANG_BUSY))
    }

    fn with_limits(pid: u32, limits: (Duration, Duration, Duration)) -> Watch {
        let now = Instant::now();
        Watch {
            pid,
            limits,
            progress: now,
            window: (now, threads(pid).map(|t| t.cpu)),
        }
    }

    /// The round made progress now.
    pub fn progress(&mut self) {
        *self = Watch::with_limits(self.pid, self.limits);
    }

    /// Checks for a hang (call about once a second while nothing arrives).
    pub fn check(&mut self) -> Option<Hang> {
        let (hang, busy_cpu, hang_busy) = self.limits;
        let now = Instant::now();
        if now.duration_since(self.window.0) < hang {
            return None;
        }
        let seen = threads(self.pid);
        let used = match (&seen, self.window.1) {
            (Some(t), Some(before)) => Some(t.cpu.saturating_sub(before)),
            _ => None,
        };
        let busy = used.is_some_and(|u| u >= busy_cpu);
        let runnable = seen.as_ref().is_some_and(|t| t.runnable > 0);
        let stalled = now.duration_since(self.progress);
        if !hung(busy, runnable, stalled, hang_busy) {
            // Starved but working, or waiting for a processor: open a new window.
            self.window = (now, seen.map(|t| t.cpu));
            return None;
        }
        Some(Hang {
            secs: stalled.as_secs(),
            busy,
            threads: seen.map(|t| t.lines).unwrap_or_default(),
        })
    }
}

/// Whether a round without progress for a whole window is hung: it used the processor
/// (`busy`) or has a thread waiting for one (`runnable`) only while `stalled` is under
/// `hang_busy`; a round asleep in every thread is hung at once.
fn hung(busy: bool, runnable: bool, stalled: Duration, hang_busy: Duration) -> bool {
    !(busy || runnable) || stalled >= hang_busy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_starved_round_waits_for_the_long_limit_and_a_sleeping_one_does_not() {
        let (short, long) = (Duration::from_secs(130), Duration::from_secs(1200));
        // Every thread asleep, no processor time: a deadlock.
        assert!(hung(false, false, short, long));
        // A thread runnable but given no processor time (nice 19 on a loaded host, the
        // 2026-11-28 false hang): starved, not hung, until the long limit.
        assert!(!hung(false, true, short, long));
        assert!(hung(false, true, long, long));
        // Working without progress: a livelock only after the long limit.
        assert!(!hung(true, false, short, long));
        assert!(hung(true, true, long + short, long));
    }

    #[test]
    fn reads_this_process_threads() {
        if !std::path::Path::new("/proc/self/task").exists() {
            return; // not Linux: the watch falls back to wall time
        }
        // The processor time read from /proc must grow while this thread works.
        let before = threads(std::process::id())
            .expect("/proc/self readable")
            .cpu;
        let start = Instant::now();
        let mut x = 0u64;
        let mut now = before;
        while now < before + Duration::from_millis(30) && start.elapsed() < Duration::from_secs(60)
        {
            for _ in 0..100_000 {
                x = x.wrapping_add(std::hint::black_box(1));
            }
            now = threads(std::process::id())
                .expect("/proc/self readable")
                .cpu;
        }
        assert!(x > 0);
        assert!(
            now >= before + Duration::from_millis(30),
            "cpu {before:?} -> {now:?}"
        );
        let t = threads(std::process::id()).expect("/proc/self readable");
        assert!(!t.lines.is_empty());
        assert!(
            t.lines.iter().all(|l| l.contains("state ")),
            "{:?}",
            t.lines
        );
    }

    #[test]
    fn a_sleeping_process_without_progress_is_hung_and_progress_resets_the_watch() {
        if !std::path::Path::new("/proc/self/task").exists() {
            return;
        }
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .expect("spawning sleep");
        let limits = (
            Duration::from_millis(200),
            Duration::from_millis(100),
            Duration::from_secs(600),
        );
        let mut w = Watch::with_limits(child.id(), limits);
        assert!(w.check().is_none(), "hung before its window ended");
        std::thread::sleep(Duration::from_millis(250)); // lets the window end, not a sync
        w.progress();
        assert!(w.check().is_none(), "progress did not reset the window");
        std::thread::sleep(Duration::from_millis(250));
        let h = w.check();
        let _ = child.kill();
        let _ = child.wait();
        let h = h.expect("a sleeping process without progress is hung");
        assert!(!h.busy, "sleep counted as busy");
        assert!(!h.threads.is_empty());
        assert!(h.threads[0].contains("state S"), "{:?}", h.threads);
    }
}
