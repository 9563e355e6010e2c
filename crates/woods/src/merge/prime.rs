//! Reading the first entry of many sources at once.
//!
//! A scan merges sources whose first entry is often behind a device read (a run's first data
//! page, not in the cache): pulled one after another, as a merge starts, those reads cost a
//! device latency each. [`prime`] pulls the sources' first entries in order on the caller's
//! thread; when a pull is about to wait for the device, the sources not yet pulled are handed to
//! a small pool of reader threads, so that their reads overlap that one and a scan of k runs
//! starts after about one read, as the STBε-tree dissertation's asynchronous lookups intend.
//! Sources whose first pages are cached (the newer, smaller runs, usually) cost no hand-off: a
//! wake-up and a switch of threads each, as much processor time as a scan's merge of fifty
//! entries. The pool is shared by every database of the process and started on first use.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};

use super::EntryIter;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::storage::BeforeRead;

/// Reader threads: enough for the reads of one scan's sources to overlap on a device that serves
/// several requests at once; idle, each waits on the job queue.
const READERS: usize = 8;

/// Fewer sources than this are pulled in place, without a batch for the readers: overlapping one
/// or two reads does not pay for it.
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

impl Pool {
    /// A pool of `readers` threads (fewer where some cannot be started), running by the time
    /// this returns. It lives as long as the process.
    fn start(readers: usize) -> &'static Pool {
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                idle: 0,
                woken: 0,
            }),
            ready: Condvar::new(),
            batches: AtomicU64::new(0),
            running: Mutex::new(0),
            started: Condvar::new(),
        }));
        let mut spawned = 0;
        for i in 0..readers {
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
        drop(n);
        pool
    }
}

/// The pool every database of the process shares, started on first use. Every caller waits
/// until its threads run: a caller that found the pool made but its threads not yet started
/// would see none running, and pull its sources in place.
fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::start(READERS))
}

/// What [`prime`] arms on its thread as it pulls a source ([`crate::storage::arm_before_read`]):
/// when the pull is about to wait for the device, the batch's sources still queued are handed
/// to idle readers, so that their reads overlap this one.
impl BeforeRead for Pool {
    fn before_read(&self, batch: u64) {
        let wake = {
            let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            // The batch's jobs go to the front, so that the readers woken for them take them
            // rather than older batches' (another scan's, whose thread is pulling them itself).
            let (mut jobs, rest): (VecDeque<_>, VecDeque<_>) =
                q.jobs.drain(..).partition(|(b, _)| *b == batch);
            let queued = jobs.len();
            jobs.extend(rest);
            q.jobs = jobs;
            // A reader woken a job, of those idle and not already woken by another call (a
            // reader woken for nothing goes back to sleep: a system call and a switch).
            let wake = q.idle.saturating_sub(q.woken).min(queued);
            q.woken += wake;
            wake
        };
        for _ in 0..wake {
            self.ready.notify_one();
        }
    }
}

/// Starts the reader pool now rather than on the first scan that needs it, and returns once its
/// threads run. The pool lives as long as the process (like a global thread pool, its threads are
/// never joined); a leak checker that counts memory per unit of work (libFuzzer's, per input)
/// would otherwise charge the threads' start-up allocations to whichever unit started them.
pub fn start_pool() {
    pool();
}

/// The hook of one pull, armed while it lives; what was armed before (an outer `prime`'s, whose
/// pull this one is part of) is put back as it goes, even if the pull unwinds.
struct Armed(Option<crate::storage::ReadHook>);

impl Armed {
    fn new(hook: crate::storage::ReadHook) -> Armed {
        Armed(crate::storage::arm_before_read(Some(hook)))
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        crate::storage::arm_before_read(self.0.take());
    }
}

/// The sources with their first entries already read, on this thread and, from the first that
/// must wait for the device, on the reader threads at the same time; in order, each yielding
/// exactly what it would have. A source whose pull did not
/// report back (its read panicked) yields an error instead.
pub fn prime(sources: Vec<EntryIter>) -> Vec<EntryIter> {
    if sources.len() < MIN_SOURCES || ON_READER.with(|r| r.get()) {
        return sources;
    }
    prime_in(pool(), sources)
}

/// [`prime`] on the readers of `pool`.
fn prime_in(pool: &'static Pool, sources: Vec<EntryIter>) -> Vec<EntryIter> {
    if pool.running() == 0 {
        return sources;
    }
    let n = sources.len();
    let batch = Arc::new(Batch::new(n));
    let id = pool.batches.fetch_add(1, Ordering::Relaxed);
    {
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
    }
    // This thread pulls the sources in order, and wakes readers for the ones left only when it
    // is about to wait for the device: sources whose first pages are cached (a scan's newer,
    // smaller runs, usually) cost no hand-off, and a scan whose only read is its last source's
    // wakes nobody.
    while let Some(job) = pool.take_own(id) {
        let _armed = Armed::new((pool, id));
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

    /// Which thread pulled each source's first entry, by source tag.
    type Pulls = Arc<(Mutex<Vec<(u8, std::thread::ThreadId)>>, Condvar)>;

    /// Waits until every source tagged in `tags` has been pulled, a minute at most.
    fn wait_for_pulls(pulls: &Pulls, tags: &[u8]) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let (lock, cv) = &**pulls;
        let mut p = lock.lock().unwrap();
        while !tags.iter().all(|t| p.iter().any(|(u, _)| u == t)) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            p = cv.wait_timeout(p, left).unwrap().0;
        }
    }

    /// `source(tag, n)` that records the thread of its first pull in `pulls`; with `read`, that
    /// pull is about to read the device ([`crate::storage::before_device_read`]) and then waits
    /// until every source tagged in `wait_for` has been pulled (a minute at most).
    fn traced(tag: u8, n: u8, pulls: &Pulls, read: bool, wait_for: &'static [u8]) -> EntryIter {
        let (pulls, mut inner, mut first) = (pulls.clone(), source(tag, n), true);
        Box::new(std::iter::from_fn(move || {
            if std::mem::take(&mut first) {
                if read {
                    crate::storage::before_device_read();
                    wait_for_pulls(&pulls, wait_for);
                }
                let (lock, cv) = &*pulls;
                lock.lock()
                    .unwrap()
                    .push((tag, std::thread::current().id()));
                cv.notify_all();
            }
            inner.next()
        }))
    }

    /// A private pool whose readers all wait for jobs: no other test's batch wakes them, and
    /// none is still on its way to the queue to take a job of ours unasked.
    fn idle_pool(readers: usize) -> &'static Pool {
        let pool = Pool::start(readers);
        while pool.queue.lock().unwrap().idle < pool.running() {
            std::thread::yield_now();
        }
        pool
    }

    fn keys(sources: Vec<EntryIter>) -> Vec<Vec<Vec<u8>>> {
        sources
            .into_iter()
            .map(|s| s.map(|e| e.unwrap().key.to_vec()).collect())
            .collect()
    }

    #[test]
    fn sources_that_read_nothing_are_pulled_in_place() {
        let pool = idle_pool(2);
        let pulls: Pulls = Default::default();
        let sources = (0..4).map(|t| traced(t, 3, &pulls, false, &[])).collect();
        let got = keys(prime_in(pool, sources));
        assert_eq!(got, keys((0..4).map(|t| source(t, 3)).collect()));
        let me = std::thread::current().id();
        let p = pulls.0.lock().unwrap();
        assert_eq!(
            p.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        assert!(
            p.iter().all(|(_, id)| *id == me),
            "a reader was handed a source: {p:?}"
        );
    }

    #[test]
    fn a_pull_about_to_read_hands_the_sources_left_to_readers() {
        // Source 1's pull waits, after its read is announced, for sources 2 and 3: only readers
        // can pull them while this thread is in it, and only the announcement wakes them.
        let pool = idle_pool(2);
        let pulls: Pulls = Default::default();
        let sources = vec![
            traced(0, 2, &pulls, false, &[]),
            traced(1, 4, &pulls, true, &[2, 3]),
            traced(2, 1, &pulls, false, &[]),
            traced(3, 5, &pulls, false, &[]),
        ];
        let got = keys(prime_in(pool, sources));
        let want = keys(
            [(0, 2), (1, 4), (2, 1), (3, 5)]
                .iter()
                .map(|&(t, n)| source(t, n))
                .collect(),
        );
        assert_eq!(got, want);
        let me = std::thread::current().id();
        let p = pulls.0.lock().unwrap();
        let by = |tag: u8| p.iter().position(|(t, _)| *t == tag).map(|i| p[i].1);
        assert_eq!(by(0), Some(me), "source 0, before any read, in place");
        assert_eq!(by(1), Some(me));
        for tag in [2, 3] {
            assert!(
                by(tag).is_some_and(|id| id != me),
                "source {tag} left to this thread: {p:?}"
            );
        }
        // Source 1 recorded its pull after the others: it did not give up waiting for them.
        assert_eq!(p.last().map(|(t, _)| *t), Some(1), "{p:?}");
    }

    #[test]
    fn the_readers_woken_for_a_batch_take_its_jobs_first() {
        // The pool's one reader is woken for source 1 while an older job (another scan's, which
        // here waits for source 1 too) is queued before it: taken first, it would hold the reader.
        let pool = idle_pool(1);
        let pulls: Pulls = Default::default();
        {
            let pulls = pulls.clone();
            let older: Job = Box::new(move || wait_for_pulls(&pulls, &[1]));
            pool.queue.lock().unwrap().jobs.push_back((u64::MAX, older));
        }
        let sources = vec![
            traced(0, 2, &pulls, true, &[1]),
            traced(1, 3, &pulls, false, &[]),
        ];
        let got = keys(prime_in(pool, sources));
        assert_eq!(got, keys(vec![source(0, 2), source(1, 3)]));
        let p = pulls.0.lock().unwrap();
        assert_eq!(
            p.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
            vec![1, 0],
            "{p:?}"
        );
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
            // The first pull is about to read the device: its hook finds no reader idle.
            let (mut inner, mut first) = (source(1, 2), true);
            let reading: EntryIter = Box::new(std::iter::from_fn(move || {
                if std::mem::take(&mut first) {
                    crate::storage::before_device_read();
                }
                inner.next()
            }));
            let got: Vec<Vec<Vec<u8>>> = prime(vec![reading, source(2, 1), source(3, 3)])
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
