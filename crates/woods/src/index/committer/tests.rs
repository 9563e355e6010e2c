//! The committer's mark, and every kind that commits through a committer.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::entry::Kind;
use crate::index::{boa, fdtree, iam, nbtree, stbe, Index, IndexContext};
use crate::memtable::Memtable;
use crate::options::{BoaParams, FdTreeParams, IamParams, NbTreeParams, StbeParams};
use crate::storage::FaultFs;
use crate::testutil::{fault_ctx, seed};

const MEMTABLE: u64 = 64 << 10;

/// How long a call may take before the test calls it a wait for the held lock: only the
/// failure detector (a call that does not wait returns in microseconds), never a bound.
const HUNG: Duration = Duration::from_secs(30);

/// The mark: a publish is dirty until its generation's commit; a commit of a version read
/// before a later publish leaves that publish dirty.
#[test]
fn a_publish_is_dirty_until_a_commit_of_its_generation() {
    let c = Committer::default();
    let versions = Versions::new(Arc::new(0u32));
    assert!(!c.dirty(), "the version open found is committed");
    versions.publish(&c, |v| Arc::new(**v + 1));
    assert!(c.dirty());
    let (v, first) = versions.published(&c);
    assert_eq!(*v, 1);
    // A step publishes while the commit of `first` is under way.
    versions.publish(&c, |v| Arc::new(**v + 1));
    c.mark_committed(first);
    assert!(c.is_committed(first));
    assert!(
        c.dirty(),
        "the version published after the commit's read counts as committed"
    );
    let (v, second) = versions.published(&c);
    assert_eq!((*v, second), (2, first + 1));
    c.mark_committed(second);
    assert!(!c.dirty());
}

/// A memtable of 400 random keys, numbered on from `seq`.
fn memtable(rng: &mut SmallRng, seq: &mut u64) -> Arc<Memtable> {
    let mem = Arc::new(Memtable::new(0));
    for _ in 0..400 {
        *seq += 1;
        let k = format!("k{:06}", rng.gen_range(0..5_000u32));
        mem.insert(k.as_bytes(), *seq, Kind::Put, &seq.to_le_bytes());
    }
    mem
}

/// Works until nothing is left to do and everything is committed, as a flush would.
fn drain(index: &dyn Index) {
    let mut calls = 0u64;
    while index.work(16 << 10).expect("work") > 0 || index.background_work() {
        calls += 1;
        assert!(calls < 1_000_000, "the index's work does not end");
    }
}

/// Works off the debt as paced writers would, without waiting for the commits.
fn pay_debt(index: &dyn Index) {
    let mut calls = 0u64;
    while index.debt() > 0 {
        index.work(16 << 10).expect("work");
        calls += 1;
        assert!(calls < 1_000_000, "the debt does not end");
    }
}

/// Whether `call` returns, in another thread, while `case`'s commit lock is held.
fn returns_while_held(case: &dyn Case, call: impl FnOnce(&dyn Index) + Send) -> bool {
    let commit_in_progress = case.hold_commit_lock();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        let ix = case.index();
        s.spawn(move || {
            call(ix);
            let _ = tx.send(());
        });
        let returned = rx.recv_timeout(HUNG);
        drop(commit_in_progress);
        returned.is_ok()
    })
}

/// Found by the stall counters (issues 19 and 20, `docs/results/stalls/`), then by review in
/// the kinds they had not covered: a writer's paced `work` call that finds no job (its debt
/// read a moment before the job finished) asks whether the published version is committed,
/// and `nbtree`, `stbe` and `boa` (as `fdtree` and `iam` before them) asked under the lock the
/// committer thread holds through a whole commit, a data-file sync and a manifest fsync, so the
/// writer waited for the commit (`fdtree-d`'s 220-322 ms waits); and `stbe`, finding a step
/// published but not committed and no debt, waited for the commit itself. Here the test holds
/// that lock, as a commit in progress does, once with everything committed and once with a
/// step published since, and from another thread `work` and `background_work` must return
/// while it is still held. (The deadline only turns the wait into a failure; nothing is
/// timed.)
#[test]
fn a_work_call_never_waits_for_a_commit_in_progress() {
    let seed = seed();
    let cases: [(&str, Open); 5] = [
        ("nbtree", |ctx| {
            let p = NbTreeParams::default();
            Ok(Box::new(nbtree::NbTree::open(ctx, p, &[], 0)?))
        }),
        ("stbe", |ctx| {
            let p = StbeParams::default();
            Ok(Box::new(stbe::Stbe::open(ctx, p, &[], 0)?))
        }),
        ("boa", |ctx| {
            let p = BoaParams::default();
            Ok(Box::new(boa::Boa::open(ctx, p, &[], 0)?))
        }),
        ("fdtree-d", |ctx| {
            let p = FdTreeParams {
                deamortized: true,
                head_entries: 200,
                ..FdTreeParams::default()
            };
            Ok(Box::new(fdtree::FdTree::open(ctx, p, &[], 0)?))
        }),
        ("iam", |ctx| {
            let p = IamParams::default();
            Ok(Box::new(iam::Iam::open(ctx, p, iam::Mode::Iam, &[], 0)?))
        }),
    ];
    let mut waited = Vec::new();
    for (name, open) in &cases {
        let fs = FaultFs::new();
        let case = open(fault_ctx(&fs, MEMTABLE)).expect("open");
        let index = case.index();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut seq = 0;
        for _ in 0..3 {
            index.absorb(memtable(&mut rng, &mut seq)).expect("absorb");
            drain(index);
        }
        // Everything committed: a writer's call that finds no job.
        let clean = returns_while_held(&*case, |ix| {
            ix.work(16 << 10).expect("work");
            ix.background_work();
        });
        // A step published since the commit that holds the lock: a writer pays the rest of
        // the debt, then calls again as one whose debt ended just before its call.
        let mem = memtable(&mut rng, &mut seq);
        let pending = returns_while_held(&*case, |ix| {
            ix.absorb(mem).expect("absorb");
            pay_debt(ix);
            ix.work(16 << 10).expect("work");
            ix.background_work();
        });
        eprintln!(
            "{name}: returned with nothing to commit {clean}, with a commit pending {pending}"
        );
        if !clean || !pending {
            waited.push(*name);
        }
        // Nothing was lost meanwhile.
        drain(index);
        assert_eq!(index.durable_seq(), seq, "{name}");
    }
    assert!(
        waited.is_empty(),
        "a work call waited for the commit in progress: {waited:?}; WOODS_SEED={seed}"
    );
}

/// Opens a kind's new index in a context.
type Open = fn(IndexContext) -> Result<Box<dyn Case>>;

/// An index kind with a committer, as the test drives it.
trait Case {
    fn index(&self) -> &dyn Index;
    fn hold_commit_lock(&self) -> Box<dyn Held + '_>;
}

impl<D: Durable> Case for WithCommitter<D>
where
    WithCommitter<D>: Index,
{
    fn index(&self) -> &dyn Index {
        self
    }
    fn hold_commit_lock(&self) -> Box<dyn Held + '_> {
        Durable::hold_commit_lock(&**self)
    }
}
