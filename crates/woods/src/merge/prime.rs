//! Reading the first entry of many sources at once.
//!
//! A scan merges sources whose first entry is usually behind a device read (a run's first data
//! page, not in the cache): pulled one after another, as a merge starts, those reads cost a
//! device latency each. [`prime`] pulls every source's first entry on a small pool of reader
//! threads instead, so the reads overlap and a scan of k runs starts after about one read, as the
//! STBε-tree dissertation's asynchronous lookups intend. The pool is shared by every database of
//! the process and started on first use.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

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

struct Pool {
    jobs: Mutex<Sender<Job>>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..READERS {
            let rx: Arc<Mutex<Receiver<Job>>> = rx.clone();
            // A pool that cannot start a thread runs with fewer; with none, `prime` sees its jobs
            // come back unanswered and the sources fail with an error rather than hang.
            let _ = std::thread::Builder::new()
                .name(format!("woods-reader-{i}"))
                .spawn(move || loop {
                    ON_READER.with(|r| r.set(true));
                    let job = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return,
                    };
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                });
        }
        Pool {
            jobs: Mutex::new(tx),
        }
    })
}

/// Starts the reader pool now rather than on the first scan that needs it. The pool lives as long
/// as the process (like a global thread pool, its threads are never joined); a leak checker that
/// counts memory per unit of work (libFuzzer's, per input) would otherwise charge the threads'
/// start-up allocations to whichever unit happened to start them.
pub fn start_pool() {
    pool();
}

/// The sources with their first entries already read, each read on a reader thread at the same
/// time as the others'; in order, each yielding exactly what it would have. A source whose reader
/// could not report back yields an error instead.
pub fn prime(sources: Vec<EntryIter>) -> Vec<EntryIter> {
    if sources.len() < MIN_SOURCES || ON_READER.with(|r| r.get()) {
        return sources;
    }
    let n = sources.len();
    let (tx, rx) = channel::<(usize, Option<Result<Entry>>, EntryIter)>();
    {
        let Ok(jobs) = pool().jobs.lock() else {
            return sources;
        };
        for (i, mut src) in sources.into_iter().enumerate() {
            let tx = tx.clone();
            let job: Job = Box::new(move || {
                let first = src.next();
                let _ = tx.send((i, first, src));
            });
            // A send fails only when every reader thread is gone: the job (and its source)
            // is dropped, and the source is reported as failed below.
            let _ = jobs.send(job);
        }
    }
    drop(tx);
    let mut out: Vec<Option<EntryIter>> = (0..n).map(|_| None).collect();
    for (i, first, src) in rx.iter() {
        out[i] = Some(Box::new(first.into_iter().chain(src)));
    }
    out.into_iter()
        .map(|s| {
            s.unwrap_or_else(|| {
                Box::new(std::iter::once(Err(Error::io(
                    "reading a scan's first entries",
                    std::io::Error::other("a reader thread did not report back"),
                ))))
            })
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
