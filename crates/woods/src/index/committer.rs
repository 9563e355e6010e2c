//! A thread that makes an index's published versions durable (data file sync, then one
//! manifest commit), so that no writer's paced step waits for an fsync.
//!
//! An index publishes each new in-memory version at once (readers use it) and asks its
//! [`Committer`] for a commit; the thread commits whatever version is published when it gets
//! to it, so a burst of steps costs one sync and one manifest record. Until a commit that no
//! longer reaches an extent is durable, the index keeps a reference to the last committed
//! version, which keeps that extent allocated (DESIGN.md's reuse rule). A failed commit is
//! kept: every later [`Committer::error`] returns it, so the Db turns read-only.
//!
//! Whether the published version is the committed one is a mark the [`Committer`] keeps: a
//! generation counted at each publish ([`Versions::publish`]) and the generation of the last
//! commit, both atomics, so that [`Durable::dirty`] never waits for the lock a commit
//! holds through its data sync and manifest fsync (a writer's paced `work` call that asked
//! under that lock waited for a whole commit: `fdtree-d`'s 220-322 ms waits in
//! `docs/results/stalls/`).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use super::IndexContext;
use crate::error::{Error, Result};
use crate::manifest::{Commit, Manifest};
use crate::storage::{Extent, PageFile};

/// Whether a commit syncs the data file before the manifest names what it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataSync {
    /// Always: a new version may have written into extents the last commit named already
    /// (`lsa`/`iam` append into a node's region; `stbe` syncs every commit).
    Always,
    /// Only when the commit adds extents: the kind writes new data into new extents only.
    WhenAdded,
}

/// Where a committer kind's commit goes and what it counts: every kind's `commit` ends the same
/// way ([`Commits::commit`]).
pub struct Commits<'a> {
    /// The data file, synced before the manifest names what the commit reaches.
    store: &'a PageFile,
    /// The manifest the commit goes to.
    manifest: &'a Manifest,
    /// Its mark of the committed generation, set once the commit is durable.
    committer: &'a Committer,
    /// The index's durable sequence number, raised once the commit is durable.
    durable: &'a AtomicU64,
    /// Commits made.
    count: &'a AtomicU64,
    /// The longest commit in microseconds (from its `started`).
    max_micros: &'a AtomicU64,
}

impl<'a> Commits<'a> {
    /// A commit of the index in `ctx` whose thread is `committer`: it raises `durable`, counts
    /// itself in `count` and its time in `max_micros`.
    pub fn new(
        ctx: &'a IndexContext,
        committer: &'a Committer,
        durable: &'a AtomicU64,
        count: &'a AtomicU64,
        max_micros: &'a AtomicU64,
    ) -> Commits<'a> {
        Commits {
            store: &ctx.store,
            manifest: &ctx.manifest,
            committer,
            durable,
            count,
            max_micros,
        }
    }

    /// Syncs the data file (as `sync` says), commits `commit` (the version of generation
    /// `generation`, [`Committer::published`]) to the manifest, then marks its `durable_seq`
    /// and its generation durable ([`Committer::is_committed`]; [`Committer::dirty`] follows
    /// once the kind's `commit` returns), and counts the commit, timed from `started`.
    ///
    /// A failed commit may still have reached the manifest (a write that went through, then a
    /// failed sync): the caller keeps its committed version, so what that names stays
    /// allocated, and the Db turns read-only (the committer keeps the error); a reopen rebuilds
    /// the allocator from what the manifest holds.
    pub fn commit(
        &self,
        commit: Commit,
        generation: u64,
        sync: DataSync,
        started: Instant,
    ) -> Result<()> {
        if sync == DataSync::Always || !commit.added.is_empty() {
            self.store.sync()?;
        }
        crate::pause::point("index.commit.after_sync");
        let seq = commit.durable_seq;
        self.manifest.commit(commit)?;
        crate::pause::point("index.commit.after_manifest");
        self.durable.store(seq, Ordering::Release);
        self.committer.durable.store(generation, Ordering::Release);
        self.count.fetch_add(1, Ordering::Relaxed);
        let us = started.elapsed().as_micros().min(u64::MAX as u128) as u64;
        self.max_micros.fetch_max(us, Ordering::Relaxed);
        Ok(())
    }
}

/// The extents `now` names that `before` did not (added), and the other way round (freed).
pub fn extent_difference(
    before: &HashSet<Extent>,
    now: &HashSet<Extent>,
) -> (Vec<Extent>, Vec<Extent>) {
    (
        now.difference(before).copied().collect(),
        before.difference(now).copied().collect(),
    )
}

/// An index's published version: readers take it at once ([`Versions::get`]), and it changes
/// only through [`Versions::publish`], which counts the new generation in the index's
/// [`Committer`] under the same lock, so that no published version escapes the mark.
pub struct Versions<V> {
    current: RwLock<Arc<V>>,
}

impl<V> Versions<V> {
    /// `v` published, as generation 0 (a version the manifest holds: committed).
    pub fn new(v: Arc<V>) -> Versions<V> {
        Versions {
            current: RwLock::new(v),
        }
    }

    /// The published version.
    pub fn get(&self) -> Arc<V> {
        self.current.read().clone()
    }

    /// Publishes the version `next` makes of the published one (under the lock: no other
    /// publish comes between), counting its generation in `committer`.
    pub fn publish(&self, committer: &Committer, next: impl FnOnce(&Arc<V>) -> Arc<V>) {
        {
            let mut cur = self.current.write();
            let v = next(&cur);
            committer.publish();
            *cur = v;
        }
        crate::pause::point("index.publish.after");
    }

    /// The published version and its generation in `committer`, read together (what a commit
    /// commits).
    pub fn published(&self, committer: &Committer) -> (Arc<V>, u64) {
        let (v, generation, ()) = self.published_with(committer, || ());
        (v, generation)
    }

    /// [`Versions::published`], with what `read` reads under the same lock (what the index
    /// sets with a publish, in its `next`).
    pub fn published_with<T>(
        &self,
        committer: &Committer,
        read: impl FnOnce() -> T,
    ) -> (Arc<V>, u64, T) {
        let cur = self.current.read();
        (cur.clone(), committer.published(), read())
    }
}

/// What a committer thread commits.
pub trait Durable: Send + Sync + 'static {
    /// Commits the published version if it is not the committed one; returns whether it did.
    fn commit(&self) -> Result<bool>;
    /// Whether the published version is not the committed one ([`Committer::dirty`]: takes no
    /// lock a commit holds).
    fn dirty(&self) -> bool {
        self.committer().dirty()
    }
    /// Runs after every commit attempt, successful or not.
    fn after_commit(&self) {}
    /// The committer of this index.
    fn committer(&self) -> &Committer;
    /// The page file the index's versions live in.
    fn store(&self) -> &PageFile;
    /// Tests: takes the lock the committer thread holds through a whole commit, as a commit in
    /// progress does.
    #[cfg(test)]
    fn hold_commit_lock(&self) -> Box<dyn Held + '_>;
}

/// Tests: a held lock ([`Durable::hold_commit_lock`]), released when dropped.
#[cfg(test)]
pub trait Held {}

#[cfg(test)]
impl<T> Held for T {}

/// An index's shared state and the thread that commits it, stopped when this is dropped.
pub struct WithCommitter<D: Durable> {
    index: Arc<D>,
    thread: Option<JoinHandle<()>>,
}

impl<D: Durable> WithCommitter<D> {
    /// Starts the thread `name` that commits `index` whenever asked.
    pub fn start(name: &str, index: D) -> Result<Self> {
        let index = Arc::new(index);
        let shared = index.clone();
        let thread = crate::db::spawn_thread(name, move || shared.committer().run(&*shared))?;
        Ok(WithCommitter {
            index,
            thread: Some(thread),
        })
    }

    /// [`crate::index::Index::wait_durable`]: asks for a commit when the published version is
    /// not the committed one, and waits, at most `limit`, while one is requested or under way;
    /// returns whether there was one to wait for.
    pub fn wait_durable(&self, limit: Duration) -> Result<bool> {
        let c = self.index.committer();
        if self.index.dirty() {
            c.request();
        } else if !c.busy() {
            c.error()?;
            return Ok(false);
        }
        c.wait_for(limit)?;
        Ok(true)
    }

    /// Stops the thread (after the commit under way): nothing more becomes durable.
    pub fn stop(&mut self) {
        self.index.committer().shutdown();
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

impl<D: Durable> std::ops::Deref for WithCommitter<D> {
    type Target = D;
    fn deref(&self) -> &D {
        &self.index
    }
}

impl<D: Durable> Drop for WithCommitter<D> {
    fn drop(&mut self) {
        // The index's versions release their extents as they drop, the ones retired since the
        // last commit among them: the last manifest may still name those, so nothing more may
        // be punched out of the file.
        self.index.store().alloc().stop_punching();
        self.stop();
    }
}

#[derive(Default)]
struct Request {
    requested: bool,
    in_flight: bool,
    shutdown: bool,
    error: Option<Error>,
}

/// The committer's requests, its error and its mark of the published and committed
/// generations; shared by the index and its thread.
#[derive(Default)]
pub struct Committer {
    req: Mutex<Request>,
    cv: Condvar,
    /// The generation of the published version: counted by [`Committer::publish`].
    published: AtomicU64,
    /// The generation of the last durable commit ([`Commits::commit`]; the version open found
    /// is 0).
    durable: AtomicU64,
    /// `durable` once the commit's aftermath is done too: the index's committed state replaced
    /// (what the old one kept allocated let go) and [`Durable::after_commit`] run. What
    /// [`Committer::dirty`] reads, so that a caller that finds the index clean (a drain before
    /// it gives free space back, a flush) finds it settled, as it did when it asked under the
    /// index's lock.
    committed: AtomicU64,
}

impl Committer {
    /// Counts a new published version and returns its generation ([`Versions::publish`], under
    /// the lock the version is swapped under: a commit reads the version and
    /// [`Committer::published`] together under that lock, so the generation it marks committed
    /// is its version's, and [`Committer::dirty`] turns true no later than the lock is let go).
    fn publish(&self) -> u64 {
        self.published.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The generation of the published version.
    fn published(&self) -> u64 {
        self.published.load(Ordering::Acquire)
    }

    /// Whether `generation` is the last one committed durably: nothing to commit.
    pub fn is_committed(&self, generation: u64) -> bool {
        self.durable.load(Ordering::Acquire) == generation
    }

    /// Marks `generation` committed: at open, a version the manifest already holds. (A commit
    /// marks its own: [`Commits::commit`], then the thread once the commit's aftermath is
    /// done.)
    pub fn mark_committed(&self, generation: u64) {
        self.durable.store(generation, Ordering::Release);
        self.committed.store(generation, Ordering::Release);
    }

    /// Whether the published version is not the committed one. Two atomics, no lock: a writer
    /// asking never waits for a commit under way.
    pub fn dirty(&self) -> bool {
        self.published() != self.committed.load(Ordering::Acquire)
    }

    /// A `work` call that found no job: nothing to do but make the published version durable,
    /// which this thread does. Returns 0 when that is done too; else asks for a commit, waits
    /// for it at most a moment and returns 1: a flush, a drain or a close calls again until it
    /// gets 0, and a writer whose debt ended just before its call waits no longer than that.
    pub fn idle_work(&self) -> Result<u64> {
        if !self.dirty() && !self.busy() {
            return Ok(0);
        }
        self.request();
        self.wait_for(Duration::from_millis(1))?;
        Ok(1)
    }

    /// Asks for a commit of the published version.
    pub fn request(&self) {
        self.req.lock().requested = true;
        self.cv.notify_all();
    }

    /// Whether a commit is requested or under way.
    pub fn busy(&self) -> bool {
        let r = self.req.lock();
        r.requested || r.in_flight
    }

    /// Waits until no commit is requested or under way; returns the committer's error, if any.
    pub fn wait(&self) -> Result<()> {
        self.wait_until(None)
    }

    /// [`Committer::wait`], giving up after `limit`.
    pub fn wait_for(&self, limit: Duration) -> Result<()> {
        self.wait_until(Some(Instant::now() + limit))
    }

    fn wait_until(&self, deadline: Option<Instant>) -> Result<()> {
        let mut r = self.req.lock();
        while (r.requested || r.in_flight) && r.error.is_none() && !r.shutdown {
            match deadline {
                Some(d) => {
                    if self.cv.wait_until(&mut r, d).timed_out() {
                        break;
                    }
                }
                None => self.cv.wait(&mut r),
            }
        }
        match &r.error {
            Some(e) => Err(e.duplicate()),
            None => Ok(()),
        }
    }

    /// The error of a failed commit, if one failed.
    pub fn error(&self) -> Result<()> {
        match &self.req.lock().error {
            Some(e) => Err(e.duplicate()),
            None => Ok(()),
        }
    }

    /// Stops the thread (after the commit under way, if any).
    pub fn shutdown(&self) {
        self.req.lock().shutdown = true;
        self.cv.notify_all();
    }

    fn run(&self, index: &dyn Durable) {
        loop {
            {
                let mut r = self.req.lock();
                while !r.requested && !r.shutdown {
                    self.cv.wait(&mut r);
                }
                if r.shutdown || r.error.is_some() {
                    r.requested = false;
                    drop(r);
                    self.cv.notify_all();
                    return;
                }
                r.requested = false;
                r.in_flight = true;
            }
            let res = index.commit();
            index.after_commit();
            self.committed
                .store(self.durable.load(Ordering::Acquire), Ordering::Release);
            let mut r = self.req.lock();
            r.in_flight = false;
            if let Err(e) = res {
                r.error = Some(e);
            }
            drop(r);
            self.cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests;
