//! What the BOA does next, as data: a pure function of the run counts per level, testable
//! without I/O.
//!
//! A level holds at most λ − 1 runs (spec correction 3: a λ-th run is never registered, so a
//! run index fits log₂ λ bits with a value to spare). A flush needs room in level 1; merging
//! level ℓ needs room in level ℓ+1. So when level 1 is full, the deepest level of the chain of
//! full levels starting at level 1 is merged first (the cascade of §1.4 MERGE, run bottom up
//! so that each merge's output has room), and merges come before flushes: they are the debt
//! that must be paid before the next memtable can become a run.

/// The next step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Nothing to do.
    DoNothing,
    /// Turn the oldest queued memtable into a run of level 1 (index 0).
    Flush,
    /// Merge every run of `level` (0-based) into one new run of `level + 1`.
    Merge {
        /// The level merged.
        level: usize,
    },
}

/// The chain of full levels from level 1: their count (0 when level 1 has room).
pub fn full_chain(runs: &[usize], max_runs: usize) -> usize {
    runs.iter().take_while(|&&n| n >= max_runs).count()
}

/// The next step for `runs[ℓ]` runs at each level and a memtable queued or not.
pub fn choose(runs: &[usize], max_runs: usize, queued: bool) -> Choice {
    match full_chain(runs, max_runs) {
        0 if queued => Choice::Flush,
        0 => Choice::DoNothing,
        c => Choice::Merge { level: c - 1 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memtable_is_flushed_while_level_one_has_room() {
        assert_eq!(choose(&[], 3, true), Choice::Flush);
        assert_eq!(choose(&[2, 3], 3, true), Choice::Flush);
        assert_eq!(choose(&[2, 3], 3, false), Choice::DoNothing);
    }

    #[test]
    fn a_full_level_one_merges_before_the_next_flush() {
        assert_eq!(choose(&[3], 3, true), Choice::Merge { level: 0 });
        assert_eq!(choose(&[3, 1], 3, false), Choice::Merge { level: 0 });
    }

    #[test]
    fn a_cascade_merges_the_deepest_full_level_first() {
        assert_eq!(choose(&[3, 3, 3, 0], 3, true), Choice::Merge { level: 2 });
        assert_eq!(choose(&[3, 3], 3, false), Choice::Merge { level: 1 });
        // A full level below a level with room waits until the chain reaches it.
        assert_eq!(choose(&[1, 3], 3, true), Choice::Flush);
    }
}
