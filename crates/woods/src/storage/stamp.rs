//! Page stamps: when a page was written, so that a page the index reaches but that was written
//! after the state the database holds is refused rather than read as valid.
//!
//! Every writable open of a database starts a new *incarnation* (a number the manifest keeps and
//! raises at open). Every page written through [`PageFile`](super::PageFile) carries a [`Stamp`]:
//! the incarnation and the number of the first manifest commit that can reference it (the last
//! commit made when the page was sealed, plus one). Since a commit is made only after the pages
//! it references are written, a page a commit references has a stamp at or before that commit.
//!
//! When the manifest loses commits (a damaged last record read as a torn tail, or a repair that
//! keeps an older state), pages written after the state now held may sit where that state
//! points: the lost commits freed those pages, later work wrote them again. Their checksums are
//! good. A [`RollbackPoint`] records the stamps of the lost history, and [`Stamps::check`]
//! refuses every page read through the page file whose stamp is one of them, or is later than
//! anything this database has committed. `docs/format.md` (*Pages*) and `docs/reliability.md`
//! give the guarantee and its limits.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::{Error, Result};

/// When a page was written: the incarnation of the database that wrote it, and the first
/// manifest commit (counted since creation) that can reference it. `Stamp::default()` (0.0) is
/// an unstamped page: the data file's header, pages sealed outside a database.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    /// The writable open that wrote the page (1 for the first).
    pub incarnation: u64,
    /// The last commit made before the page was written, plus one.
    pub commit: u64,
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.incarnation, self.commit)
    }
}

/// A point the database was rolled back to: incarnation `incarnation` survives up to commit
/// `commit`, and everything after it is lost, up to the start of incarnation `next`. A page
/// stamped `incarnation.n` with `n > commit`, or with an incarnation strictly between
/// `incarnation` and `next`, was written by that lost history and is never reachable from a
/// state that survived it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RollbackPoint {
    /// The incarnation whose later commits were lost.
    pub incarnation: u64,
    /// Its last surviving commit.
    pub commit: u64,
    /// The incarnation that started after the rollback (above every incarnation the lost
    /// history may have used).
    pub next: u64,
}

impl RollbackPoint {
    /// Whether a page stamped `s` was written by the history this point cut off.
    pub fn covers(&self, s: Stamp) -> bool {
        (s.incarnation == self.incarnation && s.commit > self.commit)
            || (s.incarnation > self.incarnation && s.incarnation < self.next)
    }
}

impl fmt::Display for RollbackPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rollback to {}.{} (incarnation {} started after it)",
            self.incarnation, self.commit, self.next
        )
    }
}

/// Checks a list of rollback points as the manifest stores them: each one's `incarnation` is
/// below its `next`, and each starts at or after the previous one's `next` (so that they are
/// sorted and a lookup can search them); the last `next` is at most `incarnation`, the
/// database's current one. Returns a description of the first violation.
pub fn check_rollbacks(
    points: &[RollbackPoint],
    incarnation: u64,
) -> std::result::Result<(), String> {
    let mut floor = 0;
    for p in points {
        if p.incarnation < floor || p.incarnation >= p.next {
            return Err(format!("rollback points out of order at {p}"));
        }
        floor = p.next;
    }
    if floor > incarnation {
        return Err(format!(
            "a rollback point names incarnation {floor}, after the current one ({incarnation})"
        ));
    }
    Ok(())
}

/// The clock pages are stamped by and checked against, shared by a page file and the manifest
/// that commits its pages: the current incarnation, the commits made, and the rollback points.
#[derive(Debug, Default)]
pub struct Stamps {
    incarnation: AtomicU64,
    committed: AtomicU64,
    rollbacks: RwLock<Arc<Vec<RollbackPoint>>>,
}

impl Stamps {
    /// Sets the whole clock: the database's state as the manifest holds it.
    pub fn reset(&self, incarnation: u64, committed: u64, rollbacks: Vec<RollbackPoint>) {
        *self.rollbacks.write() = Arc::new(rollbacks);
        self.committed.store(committed, Ordering::SeqCst);
        self.incarnation.store(incarnation, Ordering::SeqCst);
    }

    /// Records that commit number `n` (counted since creation) is durable: pages written from now
    /// on can at the earliest be referenced by commit `n + 1`.
    pub fn committed(&self, n: u64) {
        self.committed.fetch_max(n, Ordering::SeqCst);
    }

    /// The stamp of a page written now.
    pub fn now(&self) -> Stamp {
        Stamp {
            incarnation: self.incarnation.load(Ordering::SeqCst),
            commit: self.committed.load(Ordering::SeqCst) + 1,
        }
    }

    /// The rollback points in force.
    pub fn rollbacks(&self) -> Arc<Vec<RollbackPoint>> {
        self.rollbacks.read().clone()
    }

    /// Refuses page `page`, stamped `s`, if it was written after the state the database holds:
    /// later than any page this database has written so far could be stamped, or by a history a
    /// rollback cut off. Unstamped pages (0.0) pass.
    pub fn check(&self, page: u64, s: Stamp) -> Result<()> {
        let now = self.now();
        if s > now {
            return Err(Error::corruption(
                "data file",
                Some(page),
                format!(
                    "stale page: stamped {s}, after the database's last commit ({}.{}): written \
                     by work the manifest does not hold",
                    now.incarnation,
                    now.commit - 1
                ),
            ));
        }
        if s.incarnation == now.incarnation {
            // The current incarnation started after every rollback point.
            return Ok(());
        }
        let points = self.rollbacks.read();
        let i = points.partition_point(|p| p.incarnation <= s.incarnation);
        if let Some(p) = i.checked_sub(1).map(|i| &points[i]).filter(|p| p.covers(s)) {
            return Err(Error::corruption(
                "data file",
                Some(page),
                format!(
                    "stale page: stamped {s}, written by commits lost in the {p}; the index \
                     reached a page that later work rewrote"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(incarnation: u64, commit: u64) -> Stamp {
        Stamp {
            incarnation,
            commit,
        }
    }

    fn stale(s: &Stamps, stamp: Stamp) -> bool {
        s.check(9, stamp).is_err()
    }

    #[test]
    fn a_page_of_the_current_incarnation_passes_up_to_the_next_commit() {
        let s = Stamps::default();
        s.reset(3, 10, Vec::new());
        assert_eq!(s.now(), st(3, 11));
        assert!(!stale(&s, st(3, 11)));
        assert!(!stale(&s, st(3, 1)));
        assert!(!stale(&s, st(1, 500)));
        assert!(!stale(&s, Stamp::default()));
        assert!(
            stale(&s, st(3, 12)),
            "after the next commit: no commit made it"
        );
        assert!(stale(&s, st(4, 1)), "a later incarnation");
        s.committed(11);
        assert!(!stale(&s, st(3, 12)));
    }

    #[test]
    fn a_rollback_point_refuses_the_lost_history_and_nothing_else() {
        let s = Stamps::default();
        let points = vec![
            RollbackPoint {
                incarnation: 2,
                commit: 7,
                next: 5,
            },
            RollbackPoint {
                incarnation: 6,
                commit: 20,
                next: 7,
            },
        ];
        assert_eq!(check_rollbacks(&points, 7), Ok(()));
        s.reset(7, 20, points);
        for (stamp, want) in [
            (st(1, 9), false),
            (st(2, 7), false),
            (st(2, 8), true),
            (st(3, 1), true),
            (st(4, 30), true),
            (st(5, 8), false),
            (st(6, 20), false),
            (st(6, 21), true),
            (st(7, 21), false),
            (st(7, 22), true),
            (st(8, 1), true),
        ] {
            assert_eq!(stale(&s, stamp), want, "{stamp}");
        }
        let e = s.check(42, st(2, 8)).unwrap_err().to_string();
        assert!(
            e.contains("42") && e.contains("2.8") && e.contains("2.7"),
            "{e}"
        );
    }

    #[test]
    fn rollback_points_must_be_sorted_and_not_after_the_current_incarnation() {
        let p = |incarnation, next| RollbackPoint {
            incarnation,
            commit: 0,
            next,
        };
        assert!(check_rollbacks(&[p(3, 3)], 5).is_err());
        assert!(check_rollbacks(&[p(3, 5), p(4, 6)], 6).is_err());
        assert!(check_rollbacks(&[p(3, 6)], 5).is_err());
        assert!(check_rollbacks(&[p(3, 5), p(5, 6)], 6).is_ok());
    }
}
