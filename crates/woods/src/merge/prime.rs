//! Reading the first entry of many sources at once.
//!
//! A scan merges sources whose first entry is usually behind a device read (a run's first data
//! page, not in the cache): pulled one after another, as a merge starts, those reads cost a
//! device latency each. [`prime`] pulls the sources' first entries on a small pool of reader
//! threads and on the caller's own thread at once, so the reads overlap and a scan of k runs
//! starts after about one read, as the STBε-tree dissertation's asynchronous lookups intend. The
//! pool is shared by every database of the process and started on first use.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, OnceLock, PoisonError};

use super::EntryIter;
use crate::entry::Entry;
use crate::error::{Error, Result};

/// Reader threads: enough for the reads of one scan's sources to overlap on a device that serves
/// several requests at once; idle, each waits on the job queue.
const READERS: usize = 8;

/// Fewer sources than this are pulled in place: overlapping one or two reads does not pay for the
/// hand-off.
const MIN_SOURCES: usize = 3;

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    /// Set on the reader threads: a source that primes its own sources there (a scan of scans)
    /// pulls them in place, so no reader ever waits for a job queued behind itself.
    static ON_READER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The job queue: a deque under a mutex, and a condition variable the idle readers wait on.
/// Neither allocates per thread as a thread first waits (std's channels do, lazily, in a thread
/// local), so once [`start_pool`] returns the pool allocates nothing but its jobs.
struct Pool {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// The number of the next [`prime`] call.
    batches: AtomicU64,
    /// Reader threads running (those that failed to start are not counted).
    running: Mutex<usize>,
    started: Condvar,
}

struct Queue {
    /// Each job with the number of the [`prime`] call that queued it.
    jobs: VecDeque<(u64, Job)>,
    /// Readers waiting on `ready`: a call wakes no more than it has jobs for them, since a wake
    /// is a system call whether or not a reader waits for it, and a reader woken for nothing
    /// goes straight back to sleep (another system call and a context switch).
    idle: usize,
    /// Of those, the ones already woken and not yet back at the queue: not to be woken again.
    woken: usize,
}

impl Pool {
    fn take(&self) -> Job {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some((_, job)) = q.jobs.pop_front() {
                return job;
            }
            q.idle += 1;
            q = self.ready.wait(q).unwrap_or_else(PoisonError::into_inner);
            q.idle -= 1;
            // (A spurious wake-up may take another's count: the next call then wakes one
            // reader fewer, and pulls that source itself.)
            q.woken = q.woken.saturating_sub(1);
        }
    }

    /// A job of `batch` still queued, taken off the queue.
    fn take_own(&self, batch: u64) -> Option<Job> {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let i = q.jobs.iter().position(|(b, _)| *b == batch)?;
        q.jobs.remove(i).map(|(_, job)| job)
    }

    fn running(&self) -> usize {
        *self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A source with its first entry pulled; `None` where its pull panicked.
type Pulled = Option<(Option<Result<Entry>>, EntryIter)>;

/// Where the jobs of one [`prime`] call leave their sources.
struct Batch {
    slots: Mutex<Slots>,
    /// Signalled by the last job, if the caller waits.
    done: Condvar,
}

struct Slots {
    /// Each source as its job left it (`None` until then, or where its pull failed).
    pulled: Vec<Pulled>,
    /// Jobs that have not left their source yet.
    left: usize,
    waiting: bool,
}

/// Where one job leaves its source. A job dropped without filling it (one that never ran, or
/// whose thread unwound past it) fills it with `None` as it goes: the caller then reports the
/// source as failed instead of waiting for it for ever.
struct Slot {
    /// `None` once filled.
    batch: Option<Arc<Batch>>,
    i: usize,
}

impl Slot {
    fn fill(mut self, pulled: Pulled) {
        if let Some(b) = self.batch.take() {
            b.put(self.i, pulled);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(b) = self.batch.take() {
            b.put(self.i, None);
        }
    }
}

impl Batch {
    fn new(n: usize) -> Batch {
        Batch {
            slots: Mutex::new(Slots {
                pulled: (0..n).map(|_| None).collect(),
                left: n,
                waiting: false,
            }),
            done: Condvar::new(),
        }
    }

    fn put(&self, i: usize, pulled: Pulled) {
        let mut s = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        s.pulled[i] = pulled;
        s.left -= 1;
        if s.left == 0 && s.waiting {
            self.done.notify_one();
        }
    }

    fn wait(&self) -> Vec<Pulled> {
        let mut s = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        while s.left > 0 {
            s.waiting = true;
            s = self.done.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        std::mem::take(&mut s.pulled)
    }
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    static SPAWN: Once = Once::new();
    let pool = POOL.get_or_init(|| Pool {
        queue: Mutex::new(Queue {
            jobs: VecDeque::new(),
            idle: 0,
            woken: 0,
        }),
        ready: Condvar::new(),
        batches: AtomicU64::new(0),
        running: Mutex::new(0),
        started: Condvar::new(),
    });
    // Every caller waits here until the threads run: a caller that found the pool made but its
    // threads not yet started would see none running, and pull its sources in place.
    SPAWN.call_once(|| {
        let mut spawned = 0;
        for i in 0..READERS {
            // A pool that cannot start a thread runs with fewer; with none, `prime` pulls its
            // sources in place.
            let ok = std::thread::Builder::new()
                .name(format!("woods-reader-{i}"))
                .spawn(move || {
                    ON_READER.with(|r| r.set(true));
                    *pool.running.lock().unwrap_or_else(PoisonError::into_inner) += 1;
                    pool.started.notify_all();
                    loop {
                        // A job catches its source's panic; this is for anything else, so
                        // that the thread goes on (the job's slot is filled as it unwinds).
                        let _ = catch_unwind(AssertUnwindSafe(pool.take()));
                    }
                })
                .is_ok();
            spawned += usize::from(ok);
        }
        // Every thread spawned is counted as running before the first job is queued, so that
        // `prime` never queues jobs for threads that do not exist, and a thread's start (its
        // thread-local set-up) is done by the time `start_pool` returns.
        let mut n = pool.running.lock().unwrap_or_else(PoisonError::into_inner);
        while *n < spawned {
            n = pool.started.wait(n).unwrap_or_else(PoisonError::into_inner);
        }
    });
    pool
}

/// Starts the reader pool now rather than on the first scan that needs it, and returns once its
/// threads run. The pool lives as long as the process (like a global thread pool, its threads are
/// never joined); a leak checker that counts memory per unit of work (libFuzzer's, per input)
/// would otherwise charge the threads' start-up allocations to whichever unit started them.
pub fn start_pool() {
    pool();
}

/// The sources with their first entries already read, on the reader threads and this one at the
/// same time; in order, each yielding exactly what it would have. A source whose pull did not
/// report back (its read panicked) yields an error instead.
pub fn prime(sources: Vec<EntryIter>) -> Vec<EntryIter> {
    if sources.len() < MIN_SOURCES || ON_READER.with(|r| r.get()) {
        return sources;
    }
    let pool = pool();
    if pool.running() == 0 {
        return sources;
    }
    let n = sources.len();
    let batch = Arc::new(Batch::new(n));
    let id = pool.batches.fetch_add(1, Ordering::Relaxed);
    let wake = {
        let mut q = pool.queue.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, mut src) in sources.into_iter().enumerate() {
            let slot = Slot {
                batch: Some(batch.clone()),
                i,
            };
            let job: Job = Box::new(move || {
                // A source whose read panics is reported as failed (its slot holds `None`).
                let pulled = catch_unwind(AssertUnwindSafe(move || (src.next(), src))).ok();
                slot.fill(pulled);
            });
            q.jobs.push_back((id, job));
        }
        // This thread pulls sources too, rather than wait idle: a reader woken a job but one,
        // of those idle and not already woken by another call.
        let wake = q.idle.saturating_sub(q.woken).min(n - 1);
        q.woken += wake;
        wake
    };
    for _ in 0..wake {
        pool.ready.notify_one();
    }
    while let Some(job) = pool.take_own(id) {
        job();
    }
    batch
        .wait()
        .into_iter()
        .map(|s| match s {
            Some((first, src)) => Box::new(first.into_iter().chain(src)) as EntryIter,
            None => Box::new(std::iter::once(Err(Error::io(
                "reading a scan's first entries",
                std::io::Error::other("a source's first read did not report back"),
            )))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Kind;

    fn source(tag: u8, n: u8) -> EntryIter {
        Box::new((0..n).map(move |i| {
            Ok(Entry {
                key: vec![tag, i].into(),
                seq: u64::from(i),
                kind: Kind::Put,
                value: vec![tag].into(),
            })
        }))
    }

    #[test]
    fn primed_sources_yield_what_they_would_have() {
        let counts = [0u8, 1, 5, 3, 0, 7, 2, 9, 1, 4, 6, 8];
        let want: Vec<Vec<Vec<u8>>> = counts
            .iter()
            .enumerate()
            .map(|(t, &n)| {
                source(t as u8, n)
                    .map(|e| e.unwrap().key.to_vec())
                    .collect()
            })
            .collect();
        let sources = counts
            .iter()
            .enumerate()
            .map(|(t, &n)| source(t as u8, n))
            .collect();
        let got: Vec<Vec<Vec<u8>>> = prime(sources)
            .into_iter()
            .map(|s| s.map(|e| e.unwrap().key.to_vec()).collect())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_source_that_panics_fails_alone_and_the_pool_goes_on() {
        // More panicking sources than reader threads: were a panic to end its thread, the later
        // scans would find no reader left and wait for ever.
        for _ in 0..2 * READERS {
            let panicking: EntryIter = Box::new(std::iter::from_fn(|| panic!("a source's read")));
            let got: Vec<Vec<bool>> = prime(vec![source(1, 2), panicking, source(2, 1)])
                .into_iter()
                .map(|s| s.map(|e| e.is_ok()).collect())
                .collect();
            assert_eq!(got, vec![vec![true, true], vec![false], vec![true]]);
        }
        assert_eq!(pool().running(), READERS);
    }

    #[test]
    fn a_scan_is_not_held_up_by_busy_readers() {
        // Every reader busy with a job that waits for this test: a prime call must still come
        // back, its own thread pulling its sources (before, it waited for a reader to be free).
        let pool = pool();
        let readers = pool.running();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        {
            let mut q = pool.queue.lock().unwrap();
            for _ in 0..readers {
                let (started, release) = (started_tx.clone(), release_rx.clone());
                let job: Job = Box::new(move || {
                    let _ = started.send(());
                    let _ = release.lock().unwrap().recv();
                });
                q.jobs.push_back((u64::MAX, job));
            }
        }
        drop(started_tx);
        pool.ready.notify_all();
        for _ in 0..readers {
            started_rx.recv().expect("a reader started its job");
        }
        // On a thread of its own, so that a prime call that waits for a reader fails the test
        // instead of hanging it.
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let got: Vec<Vec<Vec<u8>>> = prime(vec![source(1, 2), source(2, 1), source(3, 3)])
                .into_iter()
                .map(|s| s.map(|e| e.unwrap().key.to_vec()).collect())
                .collect();
            let _ = done_tx.send(got);
        });
        let got = done_rx.recv_timeout(std::time::Duration::from_secs(60));
        for _ in 0..readers {
            release_tx.send(()).expect("release a reader");
        }
        let want: Vec<Vec<Vec<u8>>> = [(1, 2), (2, 1), (3, 3)]
            .iter()
            .map(|&(t, n)| source(t, n).map(|e| e.unwrap().key.to_vec()).collect())
            .collect();
        assert_eq!(got.expect("prime waited for a busy reader"), want);
    }

    #[test]
    fn a_job_dropped_unrun_reports_its_source_as_failed() {
        // Its slot is filled as the job goes, so the caller does not wait for it for ever.
        let batch = Arc::new(Batch::new(2));
        let dropped = Slot {
            batch: Some(batch.clone()),
            i: 0,
        };
        let filled = Slot {
            batch: Some(batch.clone()),
            i: 1,
        };
        let h = std::thread::spawn(move || {
            drop(dropped);
            filled.fill(Some((None, source(1, 0))));
        });
        let got = batch.wait();
        h.join().expect("the thread");
        assert!(got[0].is_none());
        assert!(got[1].is_some());
    }

    #[test]
    fn errors_come_through_in_place() {
        let failing: EntryIter = Box::new(std::iter::once(Err(Error::corruption(
            "test", None, "bad page",
        ))));
        let got: Vec<Vec<bool>> = prime(vec![source(1, 2), failing, source(2, 1)])
            .into_iter()
            .map(|s| s.map(|e| e.is_ok()).collect())
            .collect();
        assert_eq!(got, vec![vec![true, true], vec![false], vec![true]]);
    }
}
