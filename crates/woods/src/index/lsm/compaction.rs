//! LevelDB's compaction choice (`VersionSet::PickCompaction`, `SetupOtherInputs`,
//! `IsTrivialMove`), with RocksDB's dynamic level targets as an option, as a pure function of
//! the level shape: it returns a [`Choice`] (data),
//! so that it is tested without I/O.

use crate::options::LsmParams;

/// Levels the policy considers (L0..L6).
pub use super::version::NUM_LEVELS;

/// What the policy needs to know about a table: its key range and size.
pub trait TableRange {
    /// Smallest key.
    fn min_key(&self) -> &[u8];
    /// Largest key.
    fn max_key(&self) -> &[u8];
    /// Bytes on disk.
    fn bytes(&self) -> u64;
}

/// A compaction decision. Tables are named by their position in the level's list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// No level has a score of at least 1.
    DoNothing,
    /// Move one table of `level` to `level + 1` by metadata only.
    Move {
        /// Source level.
        level: usize,
        /// Position of the table in `level`.
        table: usize,
        /// New compaction pointer of `level`.
        pointer: Vec<u8>,
    },
    /// Merge `inputs` of `level` with `next` of `level + 1` into new tables of `level + 1`.
    Merge {
        /// Source level.
        level: usize,
        /// Positions in `level`.
        inputs: Vec<usize>,
        /// Positions in `level + 1`.
        next: Vec<usize>,
        /// No level below `level + 1` overlaps the inputs' key range: tombstones may go.
        bottom: bool,
        /// New compaction pointer of `level`.
        pointer: Vec<u8>,
    },
}

/// A compaction policy: decides from the shape alone.
pub trait CompactionPolicy {
    /// The next compaction for `levels` (L0 newest first, deeper levels sorted by key) with
    /// per-level compaction `pointers`.
    fn choose<T: TableRange>(&self, levels: &[Vec<T>], pointers: &[Vec<u8>]) -> Choice;
}

/// LevelDB's leveled policy.
#[derive(Clone, Debug)]
pub struct Leveled {
    /// Target table size.
    pub table_bytes: u64,
    /// Max bytes of L1.
    pub level1_bytes: u64,
    /// Growth factor per level.
    pub size_ratio: u64,
    /// L0 table count giving score 1.
    pub l0_trigger: u32,
    /// Targets from the last level's size ([`Leveled::target`]).
    pub dynamic: bool,
}

impl Leveled {
    /// The policy for a tree's parameters and the Db's memtable size.
    pub fn new(p: &LsmParams, memtable_bytes: u64) -> Leveled {
        Leveled {
            table_bytes: p.table_bytes,
            level1_bytes: p.level1_bytes_for(memtable_bytes),
            size_ratio: p.size_ratio,
            l0_trigger: p.l0_compaction_trigger.max(1),
            dynamic: p.dynamic_level_bytes,
        }
    }

    /// Max bytes of level `level` >= 1.
    pub fn max_bytes(&self, level: usize) -> f64 {
        let mut b = self.level1_bytes as f64;
        for _ in 1..level {
            b *= self.size_ratio as f64;
        }
        b
    }

    /// Target bytes of level `level` >= 1 in the shape `levels`: [`Leveled::max_bytes`], or
    /// with `dynamic`, for a level above the deepest non-empty one (which keeps its static
    /// target, so that the tree still deepens), that level's bytes divided by `size_ratio` once
    /// per level between them, and at least one table.
    pub fn target<T: TableRange>(&self, levels: &[Vec<T>], level: usize) -> f64 {
        let last = (1..levels.len()).rev().find(|&l| !levels[l].is_empty());
        match last {
            Some(last) if self.dynamic && level < last => {
                let mut b = levels[last].iter().map(|t| t.bytes()).sum::<u64>() as f64;
                for _ in level..last {
                    b /= self.size_ratio as f64;
                }
                b.max(self.table_bytes as f64)
            }
            _ => self.max_bytes(level),
        }
    }

    /// The level with the highest score (LevelDB's `Finalize`), and that score. The last
    /// level is never a compaction source.
    pub fn best<T: TableRange>(&self, levels: &[Vec<T>]) -> (usize, f64) {
        let mut best = (0, f64::MIN);
        for (level, tables) in levels
            .iter()
            .enumerate()
            .take(NUM_LEVELS.min(levels.len()).saturating_sub(1))
        {
            let score = if level == 0 {
                tables.len() as f64 / self.l0_trigger as f64
            } else {
                tables.iter().map(|t| t.bytes()).sum::<u64>() as f64 / self.target(levels, level)
            };
            if score > best.1 {
                best = (level, score);
            }
        }
        best
    }

    /// Whether some level's score is at least 1.
    pub fn needs_compaction<T: TableRange>(&self, levels: &[Vec<T>]) -> bool {
        self.best(levels).1 >= 1.0
    }

    /// Max bytes of grandparent overlap of one output table (LevelDB: 10 tables).
    pub fn max_grandparent_overlap(&self) -> u64 {
        self.table_bytes.saturating_mul(10)
    }

    /// Max bytes of an expanded compaction (LevelDB: 25 tables).
    fn expanded_limit(&self) -> u64 {
        self.table_bytes.saturating_mul(25)
    }
}

/// Whether a table overlaps the closed key range.
fn overlaps<T: TableRange>(t: &T, lo: &[u8], hi: &[u8]) -> bool {
    !(t.max_key() < lo || t.min_key() > hi)
}

/// Smallest and largest key over some tables.
fn range<'a, T: TableRange + 'a>(
    tables: impl Iterator<Item = &'a T>,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut r: Option<(Vec<u8>, Vec<u8>)> = None;
    for t in tables {
        match &mut r {
            None => r = Some((t.min_key().to_vec(), t.max_key().to_vec())),
            Some((lo, hi)) => {
                if t.min_key() < lo.as_slice() {
                    *lo = t.min_key().to_vec();
                }
                if t.max_key() > hi.as_slice() {
                    *hi = t.max_key().to_vec();
                }
            }
        }
    }
    r
}

/// Positions of the tables of a level overlapping [lo, hi]; at L0 the range grows to the
/// closure of overlapping tables (LevelDB's `GetOverlappingInputs`).
pub fn overlapping<T: TableRange>(tables: &[T], level: usize, lo: &[u8], hi: &[u8]) -> Vec<usize> {
    let (mut lo, mut hi) = (lo.to_vec(), hi.to_vec());
    loop {
        let found: Vec<usize> = (0..tables.len())
            .filter(|&i| overlaps(&tables[i], &lo, &hi))
            .collect();
        if level == 0 {
            if let Some((l, h)) = range(found.iter().map(|&i| &tables[i])) {
                if l < lo || h > hi {
                    lo = lo.min(l);
                    hi = hi.max(h);
                    continue;
                }
            }
        }
        return found;
    }
}

fn sum<T: TableRange>(tables: &[T], pos: &[usize]) -> u64 {
    pos.iter().map(|&i| tables[i].bytes()).sum()
}

impl CompactionPolicy for Leveled {
    fn choose<T: TableRange>(&self, levels: &[Vec<T>], pointers: &[Vec<u8>]) -> Choice {
        let (level, score) = self.best(levels);
        if score < 1.0 || level + 1 >= levels.len() {
            return Choice::DoNothing;
        }
        let tables = &levels[level];
        let empty = Vec::new();
        let pointer = pointers.get(level).unwrap_or(&empty);
        // The first table after the compaction pointer, wrapping around. L0 is held newest
        // first; LevelDB walks it oldest first.
        let order: Vec<usize> = if level == 0 {
            (0..tables.len()).rev().collect()
        } else {
            (0..tables.len()).collect()
        };
        let first = order
            .iter()
            .copied()
            .find(|&i| pointer.is_empty() || tables[i].max_key() > pointer.as_slice())
            .or_else(|| order.first().copied());
        let Some(first) = first else {
            return Choice::DoNothing;
        };
        let mut inputs = vec![first];
        if level == 0 {
            inputs = overlapping(tables, 0, tables[first].min_key(), tables[first].max_key());
        }
        let next_tables = &levels[level + 1];
        let Some((lo, hi)) = range(inputs.iter().map(|&i| &tables[i])) else {
            return Choice::DoNothing;
        };
        let mut next = overlapping(next_tables, level + 1, &lo, &hi);
        let (mut all_lo, mut all_hi) = (lo.clone(), hi.clone());
        if let Some((l, h)) = range(next.iter().map(|&i| &next_tables[i])) {
            all_lo = all_lo.min(l);
            all_hi = all_hi.max(h);
        }
        // Grow the inputs at `level` when that does not pull in more of `level + 1`.
        if !next.is_empty() {
            let expanded = overlapping(tables, level, &all_lo, &all_hi);
            if expanded.len() > inputs.len()
                && sum(tables, &expanded) + sum(next_tables, &next) < self.expanded_limit()
            {
                if let Some((l, h)) = range(expanded.iter().map(|&i| &tables[i])) {
                    let expanded_next = overlapping(next_tables, level + 1, &l, &h);
                    if expanded_next.len() == next.len() {
                        inputs = expanded;
                        next = expanded_next;
                        if let Some((l2, h2)) = range(
                            inputs
                                .iter()
                                .map(|&i| &tables[i])
                                .chain(next.iter().map(|&i| &next_tables[i])),
                        ) {
                            all_lo = l2;
                            all_hi = h2;
                        }
                    }
                }
            }
        }
        let pointer = range(inputs.iter().map(|&i| &tables[i]))
            .map(|(_, h)| h)
            .unwrap_or_default();
        let grandparent_bytes: u64 = levels.get(level + 2).map_or(0, |g| {
            g.iter()
                .filter(|t| overlaps(*t, &all_lo, &all_hi))
                .map(|t| t.bytes())
                .sum()
        });
        if inputs.len() == 1
            && next.is_empty()
            && grandparent_bytes <= self.max_grandparent_overlap()
        {
            return Choice::Move {
                level,
                table: inputs[0],
                pointer,
            };
        }
        let bottom = levels
            .iter()
            .skip(level + 2)
            .all(|l| l.iter().all(|t| !overlaps(t, &all_lo, &all_hi)));
        inputs.sort_unstable();
        next.sort_unstable();
        Choice::Merge {
            level,
            inputs,
            next,
            bottom,
            pointer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug)]
    struct T {
        lo: Vec<u8>,
        hi: Vec<u8>,
        bytes: u64,
    }

    impl TableRange for T {
        fn min_key(&self) -> &[u8] {
            &self.lo
        }
        fn max_key(&self) -> &[u8] {
            &self.hi
        }
        fn bytes(&self) -> u64 {
            self.bytes
        }
    }

    fn t(lo: &str, hi: &str, bytes: u64) -> T {
        T {
            lo: lo.as_bytes().to_vec(),
            hi: hi.as_bytes().to_vec(),
            bytes,
        }
    }

    fn policy() -> Leveled {
        Leveled {
            table_bytes: 100,
            level1_bytes: 1000,
            size_ratio: 10,
            l0_trigger: 4,
            dynamic: false,
        }
    }

    fn levels(ls: Vec<Vec<T>>) -> Vec<Vec<T>> {
        let mut out = ls;
        out.resize(NUM_LEVELS, Vec::new());
        out
    }

    fn no_pointers() -> Vec<Vec<u8>> {
        vec![Vec::new(); NUM_LEVELS]
    }

    /// `lsm-dynamic`: a level above the deepest one may hold a tenth of the level below it.
    #[test]
    fn dynamic_targets_follow_the_last_level() {
        let dynamic = Leveled {
            dynamic: true,
            ..policy()
        };
        // L1 of 800 bytes over an L2 of 2,000: under LevelDB's static 1,000, four times a
        // tenth of L2.
        let ls = levels(vec![
            vec![],
            vec![t("a", "c", 800)],
            vec![t("a", "z", 2000)],
        ]);
        assert!(!policy().needs_compaction(&ls));
        assert_eq!(dynamic.target(&ls, 1), 200.0);
        assert_eq!(dynamic.best(&ls), (1, 4.0));
        assert!(matches!(
            dynamic.choose(&ls, &no_pointers()),
            Choice::Merge { level: 1, .. }
        ));
        // The deepest level keeps its static target, so that the tree still deepens.
        assert_eq!(dynamic.target(&ls, 2), 10_000.0);
        // Two levels down, divided twice; an empty level between them counts.
        let ls = levels(vec![
            vec![],
            vec![t("a", "c", 150)],
            vec![],
            vec![t("a", "z", 50_000)],
        ]);
        assert_eq!(dynamic.target(&ls, 2), 5_000.0);
        assert_eq!(dynamic.target(&ls, 1), 500.0);
        // At least one table.
        let ls = levels(vec![vec![], vec![t("a", "c", 150)], vec![t("a", "z", 500)]]);
        assert_eq!(dynamic.target(&ls, 1), 100.0);
        // L1 the deepest: its static target.
        let ls = levels(vec![vec![t("a", "b", 10)], vec![t("a", "c", 900)]]);
        assert_eq!(dynamic.target(&ls, 1), 1000.0);
        assert!(!dynamic.needs_compaction(&ls));
    }

    #[test]
    fn nothing_below_the_limits() {
        let ls = levels(vec![vec![t("a", "b", 10); 3], vec![t("a", "c", 900)]]);
        assert_eq!(policy().choose(&ls, &no_pointers()), Choice::DoNothing);
        assert!(!policy().needs_compaction(&ls));
    }

    #[test]
    fn l0_trigger_takes_overlapping_closure_and_l1_overlap() {
        // Newest first: d..f overlaps c..e which overlaps a..c; x..z stands apart.
        let l0 = vec![
            t("x", "z", 10),
            t("d", "f", 10),
            t("c", "e", 10),
            t("a", "c", 10),
        ];
        let l1 = vec![t("a", "b", 100), t("g", "h", 100), t("y", "yy", 100)];
        let ls = levels(vec![l0, l1]);
        let c = policy().choose(&ls, &no_pointers());
        assert_eq!(
            c,
            Choice::Merge {
                level: 0,
                inputs: vec![1, 2, 3],
                next: vec![0],
                bottom: true,
                pointer: b"f".to_vec()
            }
        );
    }

    #[test]
    fn l1_picks_after_pointer_and_wraps() {
        let l1 = vec![t("a", "b", 600), t("c", "d", 600), t("e", "f", 600)];
        let l2 = vec![t("a", "a", 50), t("c", "cc", 50), t("cd", "dz", 50)];
        let ls = levels(vec![vec![], l1, l2]);
        let mut ptr = no_pointers();
        ptr[1] = b"b".to_vec();
        let c = policy().choose(&ls, &ptr);
        assert_eq!(
            c,
            Choice::Merge {
                level: 1,
                inputs: vec![1],
                next: vec![1, 2],
                bottom: true,
                pointer: b"d".to_vec()
            }
        );
        ptr[1] = b"f".to_vec();
        match policy().choose(&ls, &ptr) {
            Choice::Merge {
                level: 1,
                inputs,
                next,
                ..
            } => {
                assert_eq!(inputs, vec![0]);
                assert_eq!(next, vec![0]);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn trivial_move_without_overlap() {
        let l1 = vec![t("a", "b", 600), t("m", "n", 600)];
        let l2 = vec![t("x", "z", 50)];
        let ls = levels(vec![vec![], l1, l2]);
        assert_eq!(
            policy().choose(&ls, &no_pointers()),
            Choice::Move {
                level: 1,
                table: 0,
                pointer: b"b".to_vec()
            }
        );
    }

    #[test]
    fn grandparent_overlap_blocks_a_move() {
        let l1 = vec![t("a", "b", 600), t("m", "n", 600)];
        let l3 = vec![t("a", "b", 1001)];
        let ls = levels(vec![vec![], l1, vec![], l3]);
        assert_eq!(
            policy().choose(&ls, &no_pointers()),
            Choice::Merge {
                level: 1,
                inputs: vec![0],
                next: vec![],
                bottom: false,
                pointer: b"b".to_vec()
            }
        );
    }

    #[test]
    fn deeper_overlap_is_not_bottom() {
        let l1 = vec![t("a", "d", 1100)];
        let l2 = vec![t("b", "c", 10)];
        let l4 = vec![t("c", "c", 10)];
        let ls = levels(vec![vec![], l1, l2, vec![], l4]);
        match policy().choose(&ls, &no_pointers()) {
            Choice::Merge { bottom, next, .. } => {
                assert!(!bottom);
                assert_eq!(next, vec![0]);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn highest_score_wins() {
        // L0 at 5/4 = 1.25, L2 at 25000/10000 = 2.5.
        let ls = levels(vec![
            vec![t("a", "b", 1); 5],
            vec![],
            vec![t("a", "z", 25_000)],
        ]);
        assert_eq!(policy().best(&ls), (2, 2.5));
        assert!(matches!(
            policy().choose(&ls, &no_pointers()),
            Choice::Move {
                level: 2,
                table: 0,
                ..
            }
        ));
    }

    #[test]
    fn inputs_expand_when_next_level_does_not_grow() {
        // L1 table c..d picked; L2 overlap a..f also covers L1's e..f: that joins the inputs.
        let l1 = vec![t("a", "b", 400), t("c", "d", 400), t("e", "f", 400)];
        let l2 = vec![t("c", "f", 100)];
        let mut ptr = no_pointers();
        ptr[1] = b"b".to_vec();
        let ls = levels(vec![vec![], l1, l2]);
        assert_eq!(
            policy().choose(&ls, &ptr),
            Choice::Merge {
                level: 1,
                inputs: vec![1, 2],
                next: vec![0],
                bottom: true,
                pointer: b"f".to_vec()
            }
        );
    }
}
