//! The index contract every index kind implements, and what the Db hands each of them.
//!
//! The Db owns the WAL, memtables, sequence numbers and snapshots; an index owns everything in
//! the page store. `absorb` only enqueues a frozen memtable; `work` does a bounded step of the
//! reorganisation; `debt` says how much is left before the next memtable can be absorbed.

#[doc(hidden)]
pub mod boa;
#[doc(hidden)]
pub mod btree;
#[doc(hidden)]
pub mod committer;
#[doc(hidden)]
pub mod fdtree;
#[doc(hidden)]
pub mod iam;
#[doc(hidden)]
pub mod lsm;
#[doc(hidden)]
pub mod nbtree;
#[doc(hidden)]
pub mod pbt;
#[doc(hidden)]
pub mod stbe;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::entry::Entry;
use crate::error::Result;
use crate::manifest::Manifest;
use crate::memtable::Memtable;
use crate::merge::EntryIter;
use crate::options::{IndexKind, MergeOperator};
use crate::storage::{Extent, PageFile};

/// Live snapshots (explicit ones and the implicit one every read holds), so that
/// reorganisations keep the versions they can see.
#[derive(Default)]
#[doc(hidden)]
pub struct Snapshots {
    live: Mutex<BTreeMap<u64, usize>>,
}

impl Snapshots {
    pub fn acquire(&self, seq: u64) {
        *self.live.lock().entry(seq).or_insert(0) += 1;
    }
    /// Registers the current value of `visible` as a read point, atomically with respect to
    /// [`Snapshots::list`]: a reorganisation that lists snapshots after its inputs were fixed
    /// either sees this reader or this reader sees every input's sequence numbers.
    pub fn acquire_current(&self, visible: &std::sync::atomic::AtomicU64) -> u64 {
        let mut l = self.live.lock();
        let seq = visible.load(std::sync::atomic::Ordering::Acquire);
        *l.entry(seq).or_insert(0) += 1;
        seq
    }
    pub fn release(&self, seq: u64) {
        let mut l = self.live.lock();
        if let Some(c) = l.get_mut(&seq) {
            *c -= 1;
            if *c == 0 {
                l.remove(&seq);
            }
        }
    }
    /// Ascending sequence numbers of live snapshots.
    pub fn list(&self) -> Vec<u64> {
        self.live.lock().keys().copied().collect()
    }
}

/// Everything an index needs from the Db.
#[derive(Clone)]
#[doc(hidden)]
pub struct IndexContext {
    pub store: Arc<PageFile>,
    pub manifest: Arc<Manifest>,
    pub snapshots: Arc<Snapshots>,
    pub merge_op: Option<Arc<dyn MergeOperator>>,
    pub dir: PathBuf,
    /// Memtable size: the unit of work pacing.
    pub memtable_bytes: u64,
}

/// Extents no longer reachable from newer versions, released to the allocator only when no
/// reader can reach them: version *i* holds epoch *i*, and epoch *i* holds epoch *i+1*, so the
/// extents retired when version *i+1* replaced *i* stay allocated while any version up to *i*
/// is alive. The manifest record that frees them is synced before the new version is published,
/// so a release satisfies DESIGN.md's reuse rule.
#[doc(hidden)]
pub struct Epoch {
    store: Arc<PageFile>,
    extents: Mutex<Vec<Extent>>,
    next: Mutex<Option<Arc<Epoch>>>,
}

impl Epoch {
    pub fn new(store: Arc<PageFile>) -> Arc<Epoch> {
        Arc::new(Epoch {
            store,
            extents: Mutex::new(Vec::new()),
            next: Mutex::new(None),
        })
    }

    /// Ends this epoch: `retired` were replaced by the version holding the returned epoch.
    pub fn advance(self: &Arc<Self>, retired: impl IntoIterator<Item = Extent>) -> Arc<Epoch> {
        self.extents.lock().extend(retired);
        let next = Epoch::new(self.store.clone());
        *self.next.lock() = Some(next.clone());
        next
    }
}

impl Drop for Epoch {
    fn drop(&mut self) {
        for e in self.extents.get_mut().drain(..) {
            self.store.alloc().release(e);
        }
        // Unlink the chain iteratively: a long chain must not recurse once per epoch.
        let mut next = self.next.get_mut().take();
        while let Some(n) = next {
            match Arc::try_unwrap(n) {
                Ok(mut e) => {
                    for x in e.extents.get_mut().drain(..) {
                        e.store.alloc().release(x);
                    }
                    next = e.next.get_mut().take();
                }
                Err(_) => break,
            }
        }
    }
}

/// How the Db must hold back writers, beyond debt pacing (the `lsm` baseline's LevelDB rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(hidden)]
pub enum Stall {
    None,
    /// Delay each write by this many microseconds.
    Slowdown(u64),
    /// Block writes until index work clears the condition.
    Stop,
}

/// Shape and counters of an index, for `stats()`.
#[derive(Clone, Debug, Default)]
pub struct IndexStats {
    /// The index kind's name (`btree`, `lsm`, ...).
    pub kind: String,
    /// Levels (LSM) or tree height (B-tree).
    pub height: u64,
    /// Memtables the index took in since open.
    pub absorbs: u64,
    /// Named reorganisation counters ("compactions", "splits", ...).
    pub counters: BTreeMap<String, u64>,
    /// Free-form shape lines for `woods stats`.
    pub shape: Vec<String>,
    /// Entries the index holds, every version (as [`crate::CheckReport::index_versions`],
    /// from metadata rather than a read of every page).
    pub entries: u64,
    /// Bytes of the index's filters (bloom or quotient).
    pub filter_bytes: u64,
}

impl IndexStats {
    /// Stats of a `kind` of `height` that took in `absorbs` memtables, before its counters
    /// and shape are added.
    pub fn new(kind: impl Into<String>, height: u64, absorbs: &AtomicU64) -> IndexStats {
        IndexStats {
            kind: kind.into(),
            height,
            absorbs: absorbs.load(Ordering::Relaxed),
            ..IndexStats::default()
        }
    }

    /// Adds each named counter's current value.
    pub fn count<'a>(&mut self, counters: impl IntoIterator<Item = (&'a str, &'a AtomicU64)>) {
        for (name, a) in counters {
            self.counters
                .insert(name.to_owned(), a.load(Ordering::Relaxed));
        }
    }
}

/// The index contract.
pub trait Index: Send + Sync {
    /// Enqueues a frozen memtable (only called when `debt()` is 0). Never reorganises inline.
    fn absorb(&self, mem: Arc<Memtable>) -> Result<()>;
    /// Work units left before the next memtable can be absorbed (0: ready).
    fn debt(&self) -> u64;
    /// Does at most about `budget` units of work; returns the units done (0 when idle).
    fn work(&self, budget: u64) -> Result<u64>;
    /// [`Index::work`] for a writer's pacing share: `Ok(None)` at once, with nothing done, when
    /// another thread is in the middle of the step this call would advance (a background
    /// thread holding the kind's job). The writer then waits for that thread's progress, at
    /// most a pacing wait, rather than for its lock through the rest of the step, which a
    /// descheduled thread may hold for hundreds of milliseconds. A kind may also answer `None`
    /// when the next step is a commit that syncs the device (`pbt`), which it leaves to the
    /// threads. Only called while background threads exist. The default is `work`.
    fn work_unless_busy(&self, budget: u64) -> Result<Option<u64>> {
        self.work(budget).map(Some)
    }
    /// Everything with a sequence number up to this is durable through the manifest.
    fn durable_seq(&self) -> u64;
    /// Everything with a sequence number up to this is readable through the index's published
    /// version (`get` and `iter` see it), durable or not; never below `durable_seq`. The Db
    /// drops a frozen memtable once the index has published its writes, and keeps the
    /// memtable's log file until they are durable: a commit slower than a memtable's filling
    /// then holds no writer at the memtable cap ([`crate::db::MAX_PENDING_MEMTABLES`]). Only a
    /// kind that keeps nothing of an absorbed memtable in memory once it is published may say
    /// more than `durable_seq`, the default (the kinds that commit inline publish and commit
    /// at once).
    fn published_seq(&self) -> u64 {
        self.durable_seq()
    }
    /// Versions of `key` with seq <= `seq`, newest first, up to the first Put or Delete.
    fn get(&self, key: &[u8], seq: u64, out: &mut Vec<Entry>) -> Result<()>;
    /// Sorted sources covering the bounds (all versions), forward or exactly reversed, read from
    /// one consistent version of the index.
    fn iter(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, reverse: bool)
        -> Result<Vec<EntryIter>>;
    /// Whether background threads should keep calling `work`: pending debt, or reorganisation
    /// the kind does beyond its debt (the `lsm` baseline's compactions).
    fn background_work(&self) -> bool {
        self.debt() > 0
    }
    /// Extra write throttling (LevelDB rules); `Stall::None` for kinds that pace by debt alone.
    fn stall(&self) -> Stall {
        Stall::None
    }
    /// The Db wants everything absorbed so far durable (a flush or close): a kind that keeps
    /// absorbed data in memory past `absorb` (`pbt`'s ACTIVE partition) makes it debt now.
    fn request_flush(&self) {}
    /// The newest sequence number of the absorbed memtables the kind holds in its own memory by
    /// design, with neither debt nor a commit pending for them (0, the default: none). `pbt`
    /// holds the memtables absorbed into its ACTIVE and CLOSING partitions until their eviction,
    /// and its PBT-Buffer bounds them. The Db keeps every frozen memtable until the index holds
    /// it durably, but counts only those above this against its cap
    /// ([`crate::db::MAX_PENDING_MEMTABLES`]): a cap on the others would wait for an eviction
    /// that only more memtables bring.
    fn held_seq(&self) -> u64 {
        0
    }
    /// Waits, at most `limit`, until the work the kind has published is durable: a commit that
    /// is requested or under way, or one the published version still needs (kinds whose
    /// committer thread commits: `nbtree`, `stbe`, `lsa`, `iam`, `fdtree`, `boa`). Returns whether
    /// there was one (false: waiting makes nothing more durable). The Db waits here when its
    /// frozen memtables reach their cap while the index has no debt. The default has none.
    fn wait_durable(&self, _limit: Duration) -> Result<bool> {
        Ok(false)
    }
    /// Shape and counters, for [`crate::Db::stats`].
    fn stats(&self) -> IndexStats;
    /// Verifies every page checksum and structural invariant; returns the number of entries.
    fn check(&self) -> Result<u64>;
    /// Every distinct key the index holds a version of, in no particular order: how
    /// [`crate::Db::check`] counts live keys on a point-only kind, which cannot iterate.
    /// Ordered kinds leave the default ([`crate::Error::Unsupported`]).
    fn point_keys(&self) -> Result<Vec<Vec<u8>>> {
        Err(crate::error::Error::Unsupported {
            what: "listing keys without an iterator".into(),
        })
    }
}

/// Opens (or creates, when `meta` is empty) the index of a kind from its manifest metadata.
pub fn open_index(
    kind: &IndexKind,
    ctx: IndexContext,
    meta: &[u8],
    durable_seq: u64,
) -> Result<Arc<dyn Index>> {
    Ok(match kind {
        IndexKind::BTree(p) => Arc::new(btree::BTree::open(ctx, p.clone(), meta, durable_seq)?),
        IndexKind::Lsm(p) => Arc::new(lsm::Lsm::open(ctx, p.clone(), meta, durable_seq)?),
        IndexKind::NbTree(p) => Arc::new(nbtree::NbTree::open(ctx, p.clone(), meta, durable_seq)?),
        IndexKind::Stbe(p) => Arc::new(stbe::Stbe::open(ctx, p.clone(), meta, durable_seq)?),
        IndexKind::Lsa(p) => Arc::new(iam::Iam::open(
            ctx,
            p.clone(),
            iam::Mode::Lsa,
            meta,
            durable_seq,
        )?),
        IndexKind::Iam(p) => Arc::new(iam::Iam::open(
            ctx,
            p.clone(),
            iam::Mode::Iam,
            meta,
            durable_seq,
        )?),
        IndexKind::FdTree(p) => Arc::new(fdtree::FdTree::open(ctx, p.clone(), meta, durable_seq)?),
        IndexKind::Pbt(p) => Arc::new(pbt::Pbt::open(ctx, p.clone(), meta, durable_seq)?),
        IndexKind::Boa(p) => Arc::new(boa::Boa::open(ctx, p.clone(), meta, durable_seq)?),
    })
}

/// A kind's job lock for `work` (`wait`) or for a writer's share (`work_unless_busy`): `None`
/// at once where another thread holds it.
pub(crate) fn lock_job<T>(
    job: &parking_lot::Mutex<T>,
    wait: bool,
) -> Option<parking_lot::MutexGuard<'_, T>> {
    let guard = if wait {
        Some(job.lock())
    } else {
        job.try_lock()
    };
    if guard.is_some() {
        crate::pause::point("index.job.locked");
    }
    guard
}

/// Test support: a writer's share ([`Index::work_unless_busy`]) returns `None` while `job`,
/// the kind's job lock held by the caller as a background thread mid-step holds it, and does
/// work again once it is let go. A wait shows as no answer within 30 s (the deadline only
/// turns a hang into a failure).
#[cfg(test)]
pub(crate) fn assert_share_skips_a_held_job<G>(index: &(dyn Index + Sync), job: G) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(move || {
            let _ = tx.send(index.work_unless_busy(16 << 10).map(|r| r.is_none()));
        });
        let answer = rx.recv_timeout(Duration::from_secs(30));
        drop(job);
        assert!(
            matches!(answer, Ok(Ok(true))),
            "a writer's share waited for the job in another thread, or did work: {answer:?}"
        );
    });
    assert!(
        index.work_unless_busy(16 << 10).expect("work").is_some(),
        "a writer's share found the job busy with no one holding it"
    );
}
