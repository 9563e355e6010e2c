//! Scan-driven compaction, an extension of the paper (docs/engine.md, `stbe`, *Scan-driven
//! compaction*).
//!
//! A range scan reads the first page of every branch on its root-to-leaf path that holds keys
//! in its range: size tiering leaves up to `3F` of them live for one child at each height, and
//! a scan of a few dozen keys then reads a dozen pages where one would do (issue 24). Each
//! branch past the first that a scan reads in a leaf's range is charged to the leaf (but for
//! small ones, [`ScanDebt::small_units`], whose pages stay cached), each valued at
//! [`StbeParams::scan_credit_bytes`](crate::StbeParams) of compaction. A leaf is *due* in two
//! stages ([`super::edit::Editor::compact_path`]):
//!
//! 1. once its charges reach the units of the branches above it (those the path's nodes hold
//!    for it, in its range), the next `work` call flushes them down the path: data that would
//!    be compacted into the leaf sooner or later, moved now, which leaves the leaf's own
//!    branches and the batch that reached it;
//! 2. once they reach the units of every branch read there, the leaf's own included, the path
//!    is flushed and the leaf compacted whole, so that a scan there reads one branch.
//!
//! The compaction is paid for by the reads wasted before it, as LevelDB's seek-triggered
//! compaction is by the seeks; a load that nobody scans never triggers it, so its write
//! amplification is the paper's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::branch::Key;

/// The least a path compaction is taken to cost, in units: a leaf of a few pages is not worth a
/// task, a commit and a manifest record for every scan that reads two branches there.
pub const MIN_COST_UNITS: u64 = 1 << 20;

/// Branches smaller than this, or than an eighth of a memtable, are not charged: every scan on
/// their paths reads them, so their few pages stay in the cache, and a leaf is not worth
/// rewriting for them (a memtable flushed with a thousand entries put a branch of a few pages
/// on every path, and every leaf was compacted whole for it).
pub const SMALL_BRANCH_UNITS: u64 = 1 << 20;

/// Leaves with a running account; past it every account is dropped (memory stays bounded; a
/// trunk has this many leaves only past some ten million memtables of data).
const MAX_ACCOUNTS: usize = 1 << 16;

/// The scans' charges against leaves, and the leaves due for a path compaction.
pub struct ScanDebt {
    /// Units of compaction one extra branch read is worth (0: off).
    credit: u64,
    /// Branches of fewer units are not charged.
    small: u64,
    inner: Mutex<Inner>,
    /// Some leaf is due (read without the lock by `background_work`).
    due: AtomicBool,
}

#[derive(Default)]
struct Inner {
    /// Leaf id → its account.
    accounts: HashMap<u64, Account>,
    /// The leaves due, in the order they became due.
    due: Vec<Due>,
}

/// A leaf due for a path compaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    /// The leaf's lower bound.
    pub lo: Key,
    /// Stage 2: the leaf is compacted whole too (stage 1 only flushes the path).
    pub whole: bool,
}

struct Account {
    /// Branches read past the first, since the account opened.
    extra: u64,
    /// Units of the branches above the leaf that scans read in its range, and of the leaf's
    /// own, estimated when the account opened.
    above: u64,
    own: u64,
}

impl ScanDebt {
    /// The debt of a tree with memtables of `memtable_units`.
    pub fn new(credit: u64, memtable_units: u64) -> ScanDebt {
        ScanDebt {
            credit,
            small: (memtable_units / 8).min(SMALL_BRANCH_UNITS),
            inner: Mutex::new(Inner::default()),
            due: AtomicBool::new(false),
        }
    }

    pub fn enabled(&self) -> bool {
        self.credit > 0
    }

    /// Branches of fewer units are not charged.
    pub fn small_units(&self) -> u64 {
        self.small
    }

    /// A scan read `branches` branches of at least [`ScanDebt::small_units`] (and any number
    /// of smaller ones) in the range of leaf `leaf` (lower bound `lo`); `units`
    /// estimates the units of those above the leaf and of the leaf's own, in its range (asked
    /// only when the leaf's account opens). Returns the stage this made the leaf due for.
    pub fn charge(
        &self,
        leaf: u64,
        lo: &Key,
        branches: usize,
        units: impl FnOnce() -> (u64, u64),
    ) -> Option<Due> {
        if self.credit == 0 || branches < 2 {
            return None;
        }
        let extra = branches as u64 - 1;
        let mut g = self.inner.lock();
        if g.accounts.len() >= MAX_ACCOUNTS && !g.accounts.contains_key(&leaf) {
            g.accounts.clear();
        }
        let a = g.accounts.entry(leaf).or_insert_with(|| {
            let (above, own) = units();
            Account {
                extra: 0,
                above,
                own,
            }
        });
        a.extra += extra;
        let credit = a.extra.saturating_mul(self.credit);
        let whole = if a.above > 0 && credit >= a.above.max(MIN_COST_UNITS) {
            false
        } else if credit >= (a.above + a.own).max(MIN_COST_UNITS) {
            true
        } else {
            return None;
        };
        g.accounts.remove(&leaf);
        let due = Due {
            lo: lo.clone(),
            whole,
        };
        let room = g.due.len() < MAX_ACCOUNTS;
        match g.due.iter_mut().find(|d| d.lo == due.lo) {
            Some(d) => d.whole |= whole,
            None if room => g.due.push(due.clone()),
            None => {}
        }
        self.due.store(true, Ordering::Release);
        Some(due)
    }

    /// Whether a leaf is due.
    pub fn is_due(&self) -> bool {
        self.due.load(Ordering::Acquire)
    }

    /// Takes the leaves due.
    pub fn take_due(&self) -> Vec<Due> {
        if !self.is_due() {
            return Vec::new();
        }
        let mut g = self.inner.lock();
        self.due.store(false, Ordering::Release);
        std::mem::take(&mut g.due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: &[u8]) -> Key {
        Key::from(b)
    }

    #[test]
    fn a_leaf_is_due_for_the_flush_then_for_its_whole_compaction() {
        let d = ScanDebt::new(16 << 10, 64 << 20);
        let lo = key(b"m");
        // 2 MiB above the leaf, 4 MiB in it: the flush after 128 extra reads at 16 KiB each,
        // 13 scans of 11 branches (10 extra each).
        let units = (2 << 20, 4 << 20);
        for i in 0..12 {
            assert_eq!(d.charge(7, &lo, 11, || units), None, "scan {i}");
            // One branch a scan is no waste, and charges nothing.
            assert_eq!(d.charge(7, &lo, 1, || unreachable!()), None);
        }
        assert!(!d.is_due());
        let flush = Due {
            lo: lo.clone(),
            whole: false,
        };
        assert_eq!(d.charge(7, &lo, 11, || unreachable!()), Some(flush.clone()));
        assert!(d.is_due());
        assert_eq!(d.take_due(), vec![flush]);
        assert!(!d.is_due() && d.take_due().is_empty());
        // The account starts again with new estimates: nothing above now, 4 MiB in the leaf
        // read 4 branches a scan: 256 extra reads, 86 scans.
        for i in 0..85 {
            assert_eq!(d.charge(7, &lo, 4, || (0, 4 << 20)), None, "scan {i}");
        }
        let whole = Due {
            lo: lo.clone(),
            whole: true,
        };
        assert_eq!(d.charge(7, &lo, 4, || unreachable!()), Some(whole.clone()));
        assert_eq!(d.take_due(), vec![whole]);
    }

    #[test]
    fn small_leaves_cost_at_least_the_floor_and_off_charges_nothing() {
        let d = ScanDebt::new(16 << 10, 64 << 20);
        let lo = key(b"");
        let reads = MIN_COST_UNITS / (16 << 10);
        for _ in 1..reads {
            assert_eq!(d.charge(1, &lo, 2, || (0, 10)), None);
        }
        assert!(d.charge(1, &lo, 2, || (0, 10)).is_some_and(|d| d.whole));
        // A leaf due twice before a `work` call is listed once, for the larger stage.
        for _ in 0..reads {
            d.charge(1, &lo, 2, || (5, 10));
        }
        assert_eq!(
            d.take_due(),
            vec![Due {
                lo: lo.clone(),
                whole: true
            }]
        );
        let off = ScanDebt::new(0, 64 << 20);
        assert!(!off.enabled());
        for _ in 0..10_000 {
            assert_eq!(off.charge(1, &lo, 50, || (0, 0)), None);
        }
        assert!(!off.is_due());
    }
}
