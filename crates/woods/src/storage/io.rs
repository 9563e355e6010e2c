//! Background I/O for the page file: writes a run builder hands off (write-behind) and reads a
//! sequential scan issues before it needs them (read-ahead), done on a few threads of the page
//! file's own, so that the thread running an index job computes while the device works.
//!
//! A request returns a [`Pending`] that yields the request's result and gives its buffer back.
//! The threads start with the first request; they end when the page file is dropped: its sender
//! goes, each thread finishes the requests already queued, and the drop joins them, so that a
//! closed or dropped database leaves no thread behind (LeakSanitizer saw the per-thread state of
//! threads still exiting after the process's last `Db` was gone). A drop that happens on one of
//! the queue's own threads (the last reference to the page file released by a job) joins the
//! others and leaves that one detached: it cannot wait for itself, and it exits by itself as soon
//! as the job it is running returns, finding the queue's sender gone. Where a thread cannot be
//! started, requests run on the caller's thread, as they did before this module.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Threads per page file: two background jobs' requests proceed at once, and a job's write and
/// its read-ahead do not queue behind each other.
const IO_THREADS: usize = 2;

type Job = Box<dyn FnOnce() + Send>;

/// The queue of a page file's background requests.
#[derive(Default)]
pub(crate) struct IoQueue {
    state: Mutex<QueueState>,
    /// Requests submitted and not yet completed (a request is done before its waiter hears).
    in_flight: Arc<AtomicU64>,
}

#[derive(Default)]
enum QueueState {
    /// No request yet.
    #[default]
    Idle,
    /// The sender of the queue, and the threads taking from it (joined when the queue drops).
    Running(mpsc::Sender<Job>, Vec<JoinHandle<()>>),
    /// A thread could not be started: requests run on the caller's thread.
    Inline,
}

/// The outcome of a background request, available once the request is done.
#[must_use = "a pending request's result holds its buffer and its error"]
pub struct Pending<T>(PendingState<T>);

enum PendingState<T> {
    Ready(T),
    Waiting(mpsc::Receiver<T>),
}

impl<T> Pending<T> {
    /// Waits for the request and returns its outcome. An I/O thread that died with the request
    /// (a panic in it) is an error here, not a hang.
    pub fn wait(self) -> Result<T> {
        match self.0 {
            PendingState::Ready(t) => Ok(t),
            PendingState::Waiting(rx) => rx.recv().map_err(|_| {
                Error::io(
                    "waiting for a background page read or write",
                    std::io::Error::other("the I/O thread ended without completing the request"),
                )
            }),
        }
    }
}

impl IoQueue {
    /// Requests submitted and not yet completed.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Runs `job` on one of the queue's threads (on this one where none can be started).
    pub fn submit<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Pending<T> {
        let mut st = self.state.lock();
        if matches!(*st, QueueState::Idle) {
            *st = start_threads();
        }
        let QueueState::Running(tx, _) = &*st else {
            drop(st);
            return Pending(PendingState::Ready(job()));
        };
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        let in_flight = self.in_flight.clone();
        in_flight.fetch_add(1, Ordering::AcqRel);
        let sent = tx.send(Box::new(move || {
            let out = job();
            in_flight.fetch_sub(1, Ordering::AcqRel);
            // The waiter may have gone (a scan dropped before its read-ahead arrived).
            let _ = done_tx.send(out);
        }));
        match sent {
            Ok(()) => Pending(PendingState::Waiting(done_rx)),
            // Every thread has died (each of them panicked): run it here.
            Err(mpsc::SendError(job)) => {
                // Their handles go with the old state: each thread has already ended.
                *st = QueueState::Inline;
                drop(st);
                job();
                Pending(PendingState::Waiting(done_rx))
            }
        }
    }
}

impl Drop for IoQueue {
    fn drop(&mut self) {
        let QueueState::Running(tx, threads) = std::mem::take(&mut *self.state.lock()) else {
            return;
        };
        // Without a sender each thread ends once the requests already queued are done.
        drop(tx);
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() == me {
                // Dropped by a job of this very thread: dropping the handle detaches it, and it
                // returns when the job does.
                continue;
            }
            // A thread that panicked has ended all the same; its panic was its waiter's error.
            let _ = t.join();
        }
    }
}

fn start_threads() -> QueueState {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(std::sync::Mutex::new(rx));
    let mut threads = Vec::with_capacity(IO_THREADS);
    for _ in 0..IO_THREADS {
        let rx = rx.clone();
        let spawned = std::thread::Builder::new()
            .name("woods-io".into())
            .spawn(move || loop {
                // The lock is held only while taking a job; a poisoned one (a job panicked
                // while another thread waited) still hands out jobs.
                let job = match rx.lock() {
                    Ok(r) => r.recv(),
                    Err(p) => p.into_inner().recv(),
                };
                match job {
                    Ok(job) => job(),
                    Err(_) => return,
                }
            });
        if let Ok(t) = spawned {
            threads.push(t);
        }
    }
    if threads.is_empty() {
        QueueState::Inline
    } else {
        QueueState::Running(tx, threads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_complete_in_any_order_and_hand_back_their_results() {
        let q = IoQueue::default();
        let pending: Vec<Pending<u64>> = (0..64u64).map(|i| q.submit(move || i * i)).collect();
        for (i, p) in pending.into_iter().enumerate().rev() {
            assert_eq!(p.wait().expect("result"), (i * i) as u64);
        }
    }

    #[test]
    fn a_panicking_request_is_an_error_for_its_waiter_and_the_queue_goes_on() {
        let q = IoQueue::default();
        let bad = q.submit(|| -> u64 { panic!("injected panic in an I/O request") });
        assert!(bad.wait().is_err());
        // Whatever threads are left (or the caller's, when none are) serve the next ones.
        for i in 0..2 * IO_THREADS as u64 {
            assert_eq!(
                q.submit(move || i + 1).wait().expect("after a panic"),
                i + 1
            );
        }
    }

    /// Sends on its channel when the thread it was set on ends (its thread-local destructor
    /// runs as the thread exits, before a join of it returns).
    struct OnExit(mpsc::Sender<std::thread::ThreadId>);

    impl Drop for OnExit {
        fn drop(&mut self) {
            let _ = self.0.send(std::thread::current().id());
        }
    }

    thread_local! {
        static ON_EXIT: std::cell::RefCell<Option<OnExit>> = const { std::cell::RefCell::new(None) };
    }

    /// Runs one request on each of `q`'s threads (each waits for the others, so no thread takes
    /// two), which arranges for `exits` to hear of the thread's end.
    fn watch_every_thread(q: &IoQueue, exits: &mpsc::Sender<std::thread::ThreadId>) {
        let all = Arc::new(std::sync::Barrier::new(IO_THREADS));
        let pending: Vec<Pending<()>> = (0..IO_THREADS)
            .map(|_| {
                let (all, exits) = (all.clone(), exits.clone());
                q.submit(move || {
                    ON_EXIT.with(|g| *g.borrow_mut() = Some(OnExit(exits)));
                    all.wait();
                })
            })
            .collect();
        for p in pending {
            p.wait().expect("watching request");
        }
    }

    /// Before the handles were kept, the threads were left to exit on their own after the
    /// drop, and this found them still running.
    #[test]
    fn dropping_the_queue_joins_its_threads() {
        let (exits, exited) = mpsc::channel();
        let q = IoQueue::default();
        watch_every_thread(&q, &exits);
        drop(q);
        let gone: Vec<_> = exited.try_iter().collect();
        assert_eq!(
            gone.len(),
            IO_THREADS,
            "threads ended when the drop returned"
        );
    }

    /// The last reference to the queue released by one of its own requests: the drop joins the
    /// other threads, detaches its own, and that one ends once the request returns.
    #[test]
    fn a_queue_dropped_on_its_own_thread_neither_hangs_nor_stays() {
        let (exits, exited) = mpsc::channel();
        let q = Arc::new(IoQueue::default());
        watch_every_thread(&q, &exits);
        let last = q.clone();
        let dropped_on = q.submit(move || {
            drop(last);
            std::thread::current().id()
        });
        drop(q);
        let dropped_on = dropped_on.wait().expect("the dropping request's result");
        let mut gone = Vec::new();
        for _ in 0..IO_THREADS {
            // A bound on a hang, not a wait for an event: each exit arrives in microseconds.
            let id = exited
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("every thread ends");
            gone.push(id);
        }
        assert!(gone.contains(&dropped_on), "{gone:?} {dropped_on:?}");
    }

    #[test]
    fn a_dropped_waiter_does_not_stop_the_queue() {
        let q = IoQueue::default();
        for i in 0..16u64 {
            drop(q.submit(move || i));
        }
        assert_eq!(q.submit(|| 7u64).wait().expect("result"), 7);
    }
}
