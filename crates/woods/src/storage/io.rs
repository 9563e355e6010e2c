//! Background I/O for the page file: writes a run builder hands off (write-behind) and reads a
//! sequential scan issues before it needs them (read-ahead), done on a few threads of the page
//! file's own, so that the thread running an index job computes while the device works.
//!
//! A request returns a [`Pending`] that yields the request's result and gives its buffer back.
//! The threads start with the first request; they end when the page file is dropped (its
//! sender goes, and each thread finishes the requests already queued). Where a thread cannot be
//! started, requests run on the caller's thread, as they did before this module.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

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
    Running(mpsc::Sender<Job>),
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
        let QueueState::Running(tx) = &*st else {
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
                *st = QueueState::Inline;
                drop(st);
                job();
                Pending(PendingState::Waiting(done_rx))
            }
        }
    }
}

fn start_threads() -> QueueState {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(std::sync::Mutex::new(rx));
    let mut started = 0;
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
        if spawned.is_ok() {
            started += 1;
        }
    }
    if started == 0 {
        QueueState::Inline
    } else {
        QueueState::Running(tx)
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

    #[test]
    fn a_dropped_waiter_does_not_stop_the_queue() {
        let q = IoQueue::default();
        for i in 0..16u64 {
            drop(q.submit(move || i));
        }
        assert_eq!(q.submit(|| 7u64).wait().expect("result"), 7);
    }
}
