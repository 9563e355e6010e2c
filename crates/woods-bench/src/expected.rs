//! What the engine should hold, kept compactly enough for tens of millions of records: one
//! byte per record (its version, and whether it is deleted), the count of records inserted,
//! and the count of writes. Every read of a workload is checked against it.
//!
//! A record's value is a function of its index and version (see [`crate::gen::Values`]), so
//! the version is all there is to remember. Versions count modulo 128: a value exactly a
//! multiple of 128 writes stale would pass, any other stale or foreign value fails.
//!
//! With several client threads, a read can overlap writes of the record it reads. Writers of
//! one record therefore take that record's lock (one of [`STRIPES`]) around the engine's write
//! and publish the new version after it, so the published versions follow the engine's order;
//! a read then accepts any version from the one published before it started to the one being
//! written when it ended ([`Window`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The state byte's flag: the record is absent (deleted, or not inserted yet).
pub const ABSENT: u8 = 0x80;
const VERSION: u8 = 0x7f;
/// Locks that serialise the writers of a record (record `i` takes lock `i % STRIPES`).
pub const STRIPES: usize = 1024;

/// The version in a state byte.
pub fn version(state: u8) -> u8 {
    state & VERSION
}

/// Whether a state byte says the record is absent.
pub fn is_absent(state: u8) -> bool {
    state & ABSENT != 0
}

/// The state after a put: the next version, present.
pub fn after_put(state: u8) -> u8 {
    version(state).wrapping_add(1) & VERSION
}

/// The state after a delete: the next version, absent.
pub fn after_delete(state: u8) -> u8 {
    (version(state).wrapping_add(1) & VERSION) | ABSENT
}

/// The records a run has written and what each should hold.
pub struct Expected {
    states: Vec<AtomicU8>,
    stripes: Vec<Mutex<()>>,
    /// Records `0..issued` have been handed out to be written (loaded or being inserted).
    issued: AtomicU64,
    /// Records `0..acked` are all in the engine (YCSB's acknowledged insert counter).
    acked: AtomicU64,
    /// Inserted records above `acked`, waiting for the ones below them.
    pending: Mutex<BTreeSet<u64>>,
    live: AtomicU64,
    writes: AtomicU64,
}

impl Expected {
    /// Room for records `0..capacity`, all absent.
    pub fn new(capacity: u64) -> Expected {
        Expected {
            states: (0..capacity).map(|_| AtomicU8::new(ABSENT)).collect(),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            issued: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            pending: Mutex::new(BTreeSet::new()),
            live: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }

    pub fn capacity(&self) -> u64 {
        self.states.len() as u64
    }

    /// Record `i`'s state byte as last published.
    pub fn state(&self, i: u64) -> u8 {
        self.states[i as usize].load(Ordering::Acquire)
    }

    /// The lock a writer of record `i` holds from reading its state to publishing the next.
    pub fn lock(&self, i: u64) -> MutexGuard<'_, ()> {
        // A writer that panicked holding the lock leaves nothing half-done here.
        self.stripes[(i % STRIPES as u64) as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes record `i`'s state after the engine acknowledged the write (the caller holds
    /// [`Expected::lock`]).
    pub fn publish(&self, i: u64, old: u8, new: u8) {
        self.states[i as usize].store(new, Ordering::Release);
        match (is_absent(old), is_absent(new)) {
            (true, false) => {
                self.live.fetch_add(1, Ordering::Relaxed);
            }
            (false, true) => {
                self.live.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        self.writes.fetch_add(1, Ordering::AcqRel);
    }

    /// The next record to insert, or `None` when the capacity is used up.
    pub fn issue(&self) -> Option<u64> {
        let i = self.issued.fetch_add(1, Ordering::AcqRel);
        (i < self.capacity()).then_some(i)
    }

    /// Record `i`, issued by [`Expected::issue`], is in the engine: `acked` moves past every
    /// record below which all are in.
    pub fn ack(&self, i: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.insert(i);
        let mut acked = self.acked.load(Ordering::Acquire);
        while pending.remove(&acked) {
            acked += 1;
        }
        self.acked.store(acked, Ordering::Release);
    }

    /// Records `0..n` were loaded.
    pub fn loaded(&self, n: u64) {
        self.issued.fetch_max(n, Ordering::AcqRel);
        let _pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        self.acked.fetch_max(n, Ordering::AcqRel);
    }

    /// Records `0..acked()` are all in the engine (present, or deleted by a workload).
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }

    /// Records `0..issued()` may be in the engine (some may be inserts in flight).
    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::Acquire).min(self.capacity())
    }

    /// Records present now.
    pub fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    /// Writes published so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Acquire)
    }
}

/// The versions of one record that a read may return, given what was published around it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    first: u8,
    /// Versions `first, first + 1, ...`: `count` of them (0 to 128).
    count: u8,
    /// A version in the window that is a delete: no value has it.
    deleted: Option<u8>,
    /// Whether "not found" is a right answer.
    may_be_absent: bool,
}

impl Window {
    /// Every version: more writes overlapped the read than versions can tell apart.
    fn unbounded() -> Window {
        Window {
            first: 0,
            count: 128,
            deleted: None,
            may_be_absent: true,
        }
    }

    /// For a get: `before` and `after` are the record's states published before the get
    /// started and after it ended, `writes` the number of writes of any record published
    /// meanwhile, and `in_flight` whether another thread may have been writing the record (its
    /// version is then `after`'s next).
    pub fn get(before: u8, after: u8, writes: u64, in_flight: bool) -> Window {
        if writes >= VERSION as u64 {
            return Window::unbounded();
        }
        let first = version(before).wrapping_add(is_absent(before) as u8) & VERSION;
        let end = version(after).wrapping_add(1 + in_flight as u8) & VERSION;
        Window::between(first, end, after, is_absent(before) || is_absent(after))
    }

    /// For an entry of a scan, where the state before is unknown: `after` is the record's
    /// state published after the scan, and `writes` the number of writes of any record
    /// published while the scan ran (the record can be at most that many versions behind).
    pub fn scan(after: u8, writes: u64, in_flight: bool) -> Window {
        if writes >= VERSION as u64 {
            return Window::unbounded();
        }
        let first = version(after).wrapping_sub(writes as u8) & VERSION;
        let end = version(after).wrapping_add(1 + in_flight as u8) & VERSION;
        Window::between(first, end, after, is_absent(after))
    }

    /// Versions `first` up to `end` (exclusive), modulo 128.
    fn between(first: u8, end: u8, after: u8, may_be_absent: bool) -> Window {
        Window {
            first,
            count: end.wrapping_sub(first) & VERSION,
            deleted: is_absent(after).then_some(version(after)),
            may_be_absent,
        }
    }

    /// Whether a value of version `v` is a right answer.
    pub fn contains(&self, v: u8) -> bool {
        let v = v & VERSION;
        (v.wrapping_sub(self.first) & VERSION) < self.count && self.deleted != Some(v)
    }

    /// The versions whose values are right answers.
    pub fn versions(&self) -> impl Iterator<Item = u8> + '_ {
        (0..self.count)
            .map(|k| self.first.wrapping_add(k) & VERSION)
            .filter(|&v| self.deleted != Some(v))
    }

    /// Whether "not found" is a right answer.
    pub fn may_be_absent(&self) -> bool {
        self.may_be_absent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_advance() {
        assert_eq!(after_put(ABSENT), 1);
        assert_eq!(after_put(127), 0);
        assert_eq!(after_delete(5), 6 | ABSENT);
        assert!(is_absent(after_delete(5)));
        assert_eq!(after_put(after_delete(5)), 7);
    }

    #[test]
    fn get_windows() {
        let w = Window::get(5, 5, 0, false);
        assert!(w.contains(5) && !w.contains(4) && !w.contains(6) && !w.may_be_absent());
        let w = Window::get(5, 5, 1, true);
        assert!(w.contains(6) && !w.contains(7));
        let w = Window::get(5, 7, 2, false);
        assert_eq!(w.versions().collect::<Vec<_>>(), [5, 6, 7]);
        let w = Window::get(127, 0, 1, false);
        assert_eq!(w.versions().collect::<Vec<_>>(), [127, 0]);
        // Deleted before and after: only "not found", or an insert in flight.
        let d = after_delete(5);
        let w = Window::get(d, d, 0, false);
        assert!(w.may_be_absent() && w.versions().next().is_none());
        assert!(Window::get(d, d, 1, true).contains(7));
        assert!(!Window::get(d, d, 1, true).contains(5));
    }

    #[test]
    fn scan_windows() {
        let w = Window::scan(9, 0, false);
        assert_eq!(w.versions().collect::<Vec<_>>(), [9]);
        let w = Window::scan(9, 2, true);
        assert_eq!(w.versions().collect::<Vec<_>>(), [7, 8, 9, 10]);
        assert_eq!(Window::scan(9, 1000, false).versions().count(), 128);
        let d = after_delete(3);
        assert_eq!(Window::scan(d, 0, false).versions().count(), 0);
    }

    #[test]
    fn acks_move_in_order() {
        let e = Expected::new(10);
        e.loaded(3);
        assert_eq!((e.issued(), e.acked()), (3, 3));
        let (a, b) = (e.issue().unwrap(), e.issue().unwrap());
        e.ack(b);
        assert_eq!(e.acked(), 3);
        e.ack(a);
        assert_eq!(e.acked(), 5);
        for _ in 5..10 {
            assert!(e.issue().is_some());
        }
        assert!(e.issue().is_none());
        assert_eq!(e.issued(), 10);
    }

    #[test]
    fn live_counts_presence() {
        let e = Expected::new(4);
        let s = e.state(1);
        e.publish(1, s, after_put(s));
        assert_eq!(e.live(), 1);
        let s2 = e.state(1);
        e.publish(1, s2, after_put(s2));
        assert_eq!(e.live(), 1);
        e.publish(1, e.state(1), after_delete(e.state(1)));
        assert_eq!((e.live(), e.writes()), (0, 3));
    }
}
