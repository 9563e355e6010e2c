//! What a phase measures about the process running it: device I/O from `/proc/self/io`, CPU
//! time and peak resident memory from `getrusage`, operation latencies in an HDR histogram,
//! throughput per second, and bytes on disk.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Device I/O of this process so far (`/proc/self/io`, all threads, living and ended).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcIo {
    /// Bytes this process caused to be read from the device.
    pub read_bytes: u64,
    /// Bytes this process caused to be written to the device (counted when pages are dirtied).
    pub write_bytes: u64,
    /// Dirty bytes that were never written (truncated or deleted before writeback).
    pub cancelled_write_bytes: u64,
}

impl ProcIo {
    /// The current counters, or `None` where `/proc/self/io` cannot be read (no task I/O
    /// accounting in the kernel, or not Linux).
    pub fn now() -> Option<ProcIo> {
        ProcIo::parse(&fs::read_to_string("/proc/self/io").ok()?)
    }

    /// The counters of the calling thread alone (`/proc/thread-self/io`): what it dirtied or
    /// submitted itself, not the engine's background threads.
    pub fn this_thread() -> Option<ProcIo> {
        ProcIo::parse(&fs::read_to_string("/proc/thread-self/io").ok()?)
    }

    /// The counters in the text of a `/proc/.../io` file.
    pub fn parse(text: &str) -> Option<ProcIo> {
        let field = |name: &str| -> Option<u64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
        };
        Some(ProcIo {
            read_bytes: field("read_bytes")?,
            write_bytes: field("write_bytes")?,
            cancelled_write_bytes: field("cancelled_write_bytes")?,
        })
    }

    /// Bytes written net of cancelled writes between `self` (earlier) and `later`.
    pub fn net_written_until(&self, later: &ProcIo) -> u64 {
        let w = later.write_bytes.saturating_sub(self.write_bytes);
        let c = later
            .cancelled_write_bytes
            .saturating_sub(self.cancelled_write_bytes);
        w.saturating_sub(c)
    }

    /// Bytes read between `self` (earlier) and `later`.
    pub fn read_until(&self, later: &ProcIo) -> u64 {
        later.read_bytes.saturating_sub(self.read_bytes)
    }
}

/// CPU time and peak resident memory of this process so far (`getrusage(RUSAGE_SELF)`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub user: Duration,
    pub system: Duration,
    /// Peak resident set size in bytes since the process started.
    pub max_rss_bytes: u64,
}

impl Usage {
    pub fn now() -> Usage {
        // SAFETY: getrusage writes a plain C struct that we own; a zeroed rusage is valid.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: RUSAGE_SELF with a valid pointer cannot fail.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        if rc != 0 {
            return Usage::default();
        }
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        Usage {
            user: tv(ru.ru_utime),
            system: tv(ru.ru_stime),
            // Linux reports ru_maxrss in KiB.
            max_rss_bytes: (ru.ru_maxrss.max(0) as u64) * 1024,
        }
    }
}

/// Latency percentiles of one phase, in nanoseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub p9999_ns: u64,
    pub max_ns: u64,
    /// The latency at each quantile of [`spectrum_quantiles`]: the histogram's percentile
    /// spectrum, which the latency charts draw.
    #[serde(default)]
    pub spectrum: Vec<Quantile>,
}

/// One point of a percentile spectrum: the latency `ns` that a share `q` of the operations
/// did not exceed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantile {
    pub q: f64,
    pub ns: u64,
}

/// Points per decade of 1/(1 − q) in the spectrum: 90%, 99%, 99.9%, ... are 20 points apart.
pub const SPECTRUM_POINTS_PER_NINE: u32 = 20;
/// Nines the spectrum goes up to (99.9999%); past them only the max.
pub const SPECTRUM_NINES: u32 = 6;

/// The quantiles of a [`Latency::spectrum`]: q = 1 − 10^(−i/20) for i = 0..=120, evenly spaced
/// on the 1/(1 − q) log axis of HDR histogram's percentile plots (0, 10.9%, ..., 90%, ...,
/// 99.9999%), then 1 (the max).
pub fn spectrum_quantiles() -> Vec<f64> {
    let n = SPECTRUM_POINTS_PER_NINE * SPECTRUM_NINES;
    let per = SPECTRUM_POINTS_PER_NINE;
    let mut q: Vec<f64> = (0..=n)
        .map(|i| {
            // Whole nines exactly as written (0.99, not 0.98999...), so that they match p99.
            let tail = if i % per == 0 {
                10f64.powi(-((i / per) as i32))
            } else {
                10f64.powf(-(i as f64) / per as f64)
            };
            1.0 - tail
        })
        .collect();
    q.push(1.0);
    q
}

/// Times every operation of a phase and counts completions per second of the run.
pub struct Recorder {
    hist: Histogram<u64>,
    start: Instant,
    per_second: Vec<u64>,
    /// When the last operation ended, from the start.
    last: Duration,
    /// Operations per window of [`Recorder::windows`] (0: none kept).
    window: u64,
    /// Per window of `window` consecutive operations of this recorder: their latencies
    /// summed (ns) and their count.
    windows: Vec<(u64, u64)>,
    /// Operations recorded.
    ops: u64,
}

/// Longest latency the histogram resolves; longer ones are clamped to it (and still the max).
const MAX_TRACKED_NS: u64 = 3_600_000_000_000;

impl Recorder {
    pub fn new() -> Recorder {
        Recorder::starting_at(Instant::now())
    }

    /// A recorder whose seconds count from `start`: every client thread of a phase gets one
    /// with the phase's start, and [`Recorder::merge`] adds them up.
    pub fn starting_at(start: Instant) -> Recorder {
        // Three significant digits from 1 ns to an hour: about 200 KiB of counters.
        Recorder::with_digits(start, 3)
    }

    /// Like [`Recorder::starting_at`] with two significant digits (latencies within 1%): about
    /// 36 KiB of counters, for the per-operation recorders a client keeps beside its own.
    /// Recorders merge only with recorders of the same digits.
    pub fn coarse(start: Instant) -> Recorder {
        Recorder::with_digits(start, 2)
    }

    fn with_digits(start: Instant, digits: u8) -> Recorder {
        Recorder {
            hist: Histogram::new_with_bounds(1, MAX_TRACKED_NS, digits)
                .expect("constant histogram bounds are valid"),
            start,
            per_second: Vec::new(),
            last: Duration::ZERO,
            window: 0,
            windows: Vec::new(),
            ops: 0,
        }
    }

    /// Also keeps the latency of each window of `ops` consecutive operations (0: none).
    pub fn with_window(mut self, ops: u64) -> Recorder {
        self.window = ops;
        self
    }

    /// Adds `other`'s operations (timed from the same start) to this one's.
    pub fn merge(&mut self, other: &Recorder) {
        self.hist
            .add(&other.hist)
            .expect("histograms with the same bounds add up");
        if other.per_second.len() > self.per_second.len() {
            self.per_second.resize(other.per_second.len(), 0);
        }
        for (a, b) in self.per_second.iter_mut().zip(&other.per_second) {
            *a += b;
        }
        self.last = self.last.max(other.last);
        // Client threads' windows add up by position: window i of T clients is T·window
        // operations, each client's i-th.
        self.window = self.window.max(other.window);
        if other.windows.len() > self.windows.len() {
            self.windows.resize(other.windows.len(), (0, 0));
        }
        for (a, b) in self.windows.iter_mut().zip(&other.windows) {
            a.0 += b.0;
            a.1 += b.1;
        }
    }

    /// When the phase started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Records one operation that started at `t0` and ended at `t1`.
    pub fn record(&mut self, t0: Instant, t1: Instant) {
        let ns = t1.duration_since(t0).as_nanos().min(MAX_TRACKED_NS as u128) as u64;
        self.hist.saturating_record(ns.max(1));
        let since = t1.duration_since(self.start);
        self.last = self.last.max(since);
        let sec = since.as_secs() as usize;
        if sec >= self.per_second.len() {
            self.per_second.resize(sec + 1, 0);
        }
        self.per_second[sec] += 1;
        if let Some(w) = self.ops.checked_div(self.window) {
            let w = w as usize;
            if w >= self.windows.len() {
                self.windows.resize(w + 1, (0, 0));
            }
            self.windows[w].0 += ns;
            self.windows[w].1 += 1;
        }
        self.ops += 1;
    }

    /// The mean latency (ns) of each window of operations (empty without a window).
    pub fn window_means(&self) -> Vec<f64> {
        self.windows
            .iter()
            .map(|&(ns, n)| ns as f64 / n.max(1) as f64)
            .collect()
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Operations completed in each whole second since the start (stalls show as dips).
    pub fn per_second(&self) -> &[u64] {
        &self.per_second
    }

    /// When the last operation ended, from the start: the last second of
    /// [`Recorder::per_second`] is a partial one of `last − ⌊last⌋` seconds.
    pub fn last_op(&self) -> Duration {
        self.last
    }

    pub fn latency(&self) -> Latency {
        let h = &self.hist;
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            count: h.len(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.50),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            p9999_ns: h.value_at_quantile(0.9999),
            max_ns: h.max(),
            spectrum: spectrum_quantiles()
                .into_iter()
                .map(|q| Quantile {
                    q,
                    ns: if q >= 1.0 {
                        h.max()
                    } else {
                        h.value_at_quantile(q)
                    },
                })
                .collect(),
        }
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

/// Bytes allocated on the device for everything under `dir` (st_blocks × 512, so sparse
/// files count what they occupy, not their length).
pub fn disk_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            total += disk_bytes(&entry.path())?;
        } else {
            total += meta.blocks() * 512;
        }
    }
    Ok(total)
}

/// Whether files in `dir` can be opened with `O_DIRECT` (tmpfs and some overlay setups refuse).
pub fn direct_io_supported(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(".woods-bench-direct-probe");
    let ok = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe)
        .is_ok();
    let _ = fs::remove_file(&probe);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_io_parses_and_grows() {
        let Some(a) = ProcIo::now() else {
            return; // no task I/O accounting here
        };
        let b = ProcIo::now().unwrap();
        assert!(b.write_bytes >= a.write_bytes);
        assert_eq!(a.net_written_until(&a), 0);
    }

    #[test]
    fn recorder_percentiles() {
        let mut r = Recorder::new();
        let t0 = r.start();
        for i in 1..=1000u64 {
            r.record(t0, t0 + Duration::from_micros(i));
        }
        let l = r.latency();
        assert_eq!(l.count, 1000);
        assert!((499_000..=501_000).contains(&l.p50_ns), "{l:?}");
        assert!(l.max_ns >= 999_000);
        assert_eq!(r.per_second().iter().sum::<u64>(), 1000);
        assert_eq!(r.last_op(), Duration::from_micros(1000));
        // The spectrum rises from the min to the max through the percentiles above.
        let s = &l.spectrum;
        assert_eq!(s.len(), spectrum_quantiles().len());
        assert!(s.windows(2).all(|w| w[0].q < w[1].q && w[0].ns <= w[1].ns));
        assert_eq!(s[0].q, 0.0);
        assert!(s[0].ns <= 1_001, "{:?}", s[0]);
        let at = |q: f64| s.iter().find(|p| (p.q - q).abs() < 1e-9).unwrap().ns;
        assert_eq!(at(0.99), l.p99_ns);
        assert_eq!(at(0.999), l.p999_ns);
        assert_eq!(s.last().unwrap().ns, l.max_ns);
    }

    #[test]
    fn windows_hold_the_mean_latency_of_consecutive_operations() {
        let mut r = Recorder::new().with_window(4);
        let t0 = r.start();
        // Ten operations of 1..=10 µs: windows {1..4}, {5..8}, {9, 10}.
        for i in 1..=10u64 {
            r.record(t0, t0 + Duration::from_micros(i));
        }
        assert_eq!(r.window_means(), [2_500.0, 6_500.0, 9_500.0]);
        assert!(Recorder::new().window_means().is_empty());
    }

    #[test]
    fn recorders_merge() {
        let start = Instant::now();
        let mut a = Recorder::starting_at(start);
        let mut b = Recorder::starting_at(start);
        a.record(start, start + Duration::from_micros(10));
        b.record(start, start + Duration::from_millis(1500));
        b.record(start, start + Duration::from_micros(20));
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.per_second(), [2, 1]);
        assert!(a.latency().max_ns >= 1_400_000_000);
    }

    #[test]
    fn usage_is_positive() {
        let u = Usage::now();
        assert!(u.max_rss_bytes > 0);
    }
}
